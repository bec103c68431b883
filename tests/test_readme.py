"""The README's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def _example(heading: str = "## An agent loop") -> str:
    text = README.read_text()
    section = text.split(heading, 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"the README lost its Python example under {heading!r}"
    return match.group(1)


def test_readme_agent_loop_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVENTSTORE_URL", raising=False)
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(_example(), "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    # The example is written so that the small budget forces condensation.
    assert "view" in out and "->" in out
    assert (tmp_path / "agent.db").exists()
    store = namespace["store"]
    try:
        kinds = {e.kind for e in store.read(namespace["session"].id)}  # type: ignore[attr-defined]
        assert {"message", "llm_call"} <= kinds
        assert kinds & {"prune", "condensation"}
    finally:
        store.close()  # type: ignore[attr-defined]


def test_readme_async_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme_async_example"}
    exec(compile(_example("## Async"), "README.md", "exec"), namespace)
    assert (tmp_path / "agent-async.db").exists()
    from eventstore import EventStore

    with EventStore(f"sqlite:///{tmp_path / 'agent-async.db'}") as store:
        (session,) = store.list_sessions()
        kinds = [e.kind for e in store.read(session.id)]
        assert kinds.count("llm_call") == 3 and store.verify(session.id).ok


def _commands(heading: str) -> list[str]:
    section = README.read_text().split(heading, 1)[1]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, f"the README lost its commands under {heading!r}"
    return [line.split("  #")[0].strip() for line in match.group(1).splitlines() if line.strip()]


_TRAJ = {
    "history": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "fix the bug"},
        {"role": "assistant", "content": "looking", "thought": "look first"},
    ],
    "info": {"exit_status": "submitted"},
}


def test_readme_command_line_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart's demo, then every command of the command-line section, in a fresh
    directory with no configuration: SESSION is the demo's session, run.traj a small
    SWE-agent trajectory."""
    import json
    import shlex

    from click.testing import CliRunner

    from eventstore.cli import cli

    monkeypatch.chdir(tmp_path)
    for var in ("EVENTSTORE_URL", "EVENTSTORE_MODEL"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "run.traj").write_text(json.dumps(_TRAJ))
    runner = CliRunner()
    quickstart = _commands("## Quickstart")[0]
    assert quickstart.endswith("&& eventstore demo")
    demo = runner.invoke(cli, ["demo"])
    assert demo.exit_code == 0, demo.output
    listed = runner.invoke(cli, ["sessions", "list", "--json"])
    (session,) = json.loads(listed.stdout)
    ran = []
    for line in _commands("## The command line"):
        argv = shlex.split(line)
        assert argv[0] == "eventstore", line
        target = None
        if ">" in argv:
            at = argv.index(">")
            argv, target = argv[:at], argv[at + 1]
        variants = [argv]
        if "|" in argv:  # "db upgrade | current | check"
            head = argv[: argv.index("|") - 1]
            variants = [head + [word] for word in argv[len(head) :] if word != "|"]
        for args in variants:
            args = [session["id"] if a == "SESSION" else a for a in args[1:]]
            if args[:1] == ["serve"]:
                # A server runs until stopped: the viewer's own tests serve and load every
                # page; here the command must exist and parse as written.
                args = [*args, "--help"]
            result = runner.invoke(cli, args)
            assert result.exit_code == 0, (line, result.output)
            if target:
                (tmp_path / target).write_text(result.stdout)
            ran.append(args[0] if args[0] != "--db" else args[2])
    assert {"sessions", "log", "view", "condense", "prune", "verify", "export", "import"} <= set(
        ran
    )
    assert {"stats", "db"} <= set(ran)


def test_readme_runtime_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme_runtime_example"}
    exec(compile(_example("## Queue, streaming and cancellation"), "README.md", "exec"), namespace)
    from eventstore import EventStore

    with EventStore(f"sqlite:///{tmp_path / 'runtime.db'}") as store:
        (session,) = store.list_sessions()
        kinds = [e.kind for e in store.read(session.id)]
        assert kinds.count("run_state") == 4 and kinds.count("dequeued") == 1


def test_readme_feed_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme_feed_example"}
    exec(compile(_example("## Live tail and listeners"), "README.md", "exec"), namespace)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["1", "2"]
    assert lines[1].endswith("second")


def test_readme_search_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme_search_example"}
    exec(compile(_example("## Search and recall"), "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert 'recall(ref="3:0")' in out and 'ref="3" (tool)' in out


def test_readme_keys_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme_keys_example"}
    exec(compile(_example("## Session keys, deletion, tails"), "README.md", "exec"), namespace)
    from eventstore import EventStore

    with EventStore(f"sqlite:///{tmp_path / 'keys.db'}") as store:
        assert store.list_sessions() == []
        (gone,) = store.list_sessions(include_deleted=True)
        assert gone.key == "support-ticket-4711" and gone.deleted_at is not None


def test_readme_strategy_names_example_runs() -> None:
    namespace: dict[str, object] = {"__name__": "readme_strategies_example"}
    exec(compile(_example("## How condensation decides"), "README.md", "exec"), namespace)
    policy = namespace["policy"]
    assert policy.pipeline.steps[0].min_output_tokens == 500  # type: ignore[attr-defined]


def test_readme_purge_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme_purge_example"}
    exec(compile(_example("## Retention and erasure"), "README.md", "exec"), namespace)
    from sqlalchemy import text

    from eventstore import EventStore

    with EventStore(f"sqlite:///{tmp_path / 'retention.db'}") as store:
        with store.engine.connect() as conn:
            payloads = [r[0] for r in conn.execute(text("SELECT payload FROM events"))]
        assert len(payloads) == 3 and not any("4111" in p for p in payloads)


def test_readme_litellm_adapter_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme_litellm_example"}
    exec(compile(_example("## Framework adapters"), "README.md", "exec"), namespace)
    assert (tmp_path / "recorded.db").exists()
