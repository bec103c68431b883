"""The documentation runs as written.

Every ```python block of ``README.md`` and ``docs/*.md`` is executed, offline, in a fresh
namespace and a fresh working directory, with the behaviour it shows checked where a check is
registered below. A block that needs something the main environment lacks says so in an HTML
comment just before its fence, and the test honours it:

* ``<!-- test: postgres -->``: runs with ``EVENTSTORE_URL`` naming a fresh, upgraded Postgres
  database (skips without a server, fails with ``EVENTSTORE_REQUIRE_PG=1``);
* ``<!-- test: extra NAME -->``: needs an optional extra; skips when it is not installed (each
  adapter extra's own test file runs its blocks in that extra's environment);
* ``<!-- test: skip REASON -->``: not run, for the reason given.

The commands of the command-line pages are run as written, the API reference is held to the
public names, and the built site (``mkdocs build --strict``) is checked when mkdocs is
installed (CI installs the ``docs`` extra and requires it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

_FENCE = re.compile(
    r"(?:<!--\s*test:\s*(?P<mark>[^>]*?)\s*-->[ \t]*\n)?^```python\n(?P<code>.*?)^```",
    re.S | re.M,
)
_HEADING = re.compile(r"^(#{1,4}) (.+)$", re.M)
# Adapter extras and the module each one installs.
EXTRAS = {
    "adk": "google.adk",
    "openai-agents": "agents",
    "pydantic-ai": "pydantic_ai",
    "langgraph": "langgraph",
    "strands": "strands",
}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    heading: str
    mark: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()]
        headings = _HEADING.findall(before)
        heading = f"{headings[-1][0]} {headings[-1][1]}" if headings else ""
        line = before.count("\n") + 1 + (1 if match.group("mark") is not None else 0)
        found.append(Block(page, line, heading, match.group("mark") or "", match.group("code")))
    return found


BLOCKS = [block for page in PAGES for block in _blocks(page)]


def section(page: Path, heading: str) -> str:
    """The text of ``page`` under ``heading`` up to the next heading of the same level."""
    text = "\n" + page.read_text()
    level = heading.split(" ", 1)[0]
    assert f"\n{heading}\n" in text, f"{page.name} lost its section {heading!r}"
    body = text.split(f"\n{heading}\n", 1)[1]
    return re.split(rf"^{level} ", body, maxsplit=1, flags=re.M)[0]


# -- what some blocks must have done, beyond running without an error


def _agent_loop(ns: dict[str, Any], tmp: Path, out: str) -> None:
    # The loop is written so that its small budget forces condensation.
    assert "view" in out and "->" in out
    assert (tmp / "agent.db").exists()
    store = ns["store"]
    kinds = {e.kind for e in store.read(ns["session"].id)}
    assert {"message", "llm_call"} <= kinds
    assert kinds & {"prune", "condensation"}


def _async(ns: dict[str, Any], tmp: Path, out: str) -> None:
    from eventstore import EventStore

    with EventStore(f"sqlite:///{tmp / 'agent-async.db'}") as store:
        (session,) = store.list_sessions()
        kinds = [e.kind for e in store.read(session.id)]
        assert kinds.count("llm_call") == 3 and store.verify(session.id).ok


def _runtime(ns: dict[str, Any], tmp: Path, out: str) -> None:
    from eventstore import EventStore

    with EventStore(f"sqlite:///{tmp / 'runtime.db'}") as store:
        (session,) = store.list_sessions()
        kinds = [e.kind for e in store.read(session.id)]
        assert kinds.count("run_state") == 4 and kinds.count("dequeued") == 1


def _feed(ns: dict[str, Any], tmp: Path, out: str) -> None:
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["1", "2"]
    assert lines[1].endswith("second")


def _search(ns: dict[str, Any], tmp: Path, out: str) -> None:
    assert 'recall(ref="3:0")' in out and 'ref="3" (tool)' in out


def _keys(ns: dict[str, Any], tmp: Path, out: str) -> None:
    from eventstore import EventStore

    with EventStore(f"sqlite:///{tmp / 'keys.db'}") as store:
        assert store.list_sessions() == []
        (gone,) = store.list_sessions(include_deleted=True)
        assert gone.key == "support-ticket-4711" and gone.deleted_at is not None


def _strategies(ns: dict[str, Any], tmp: Path, out: str) -> None:
    assert ns["policy"].pipeline.steps[0].min_output_tokens == 500


def _purge(ns: dict[str, Any], tmp: Path, out: str) -> None:
    from sqlalchemy import text

    from eventstore import EventStore

    with EventStore(f"sqlite:///{tmp / 'retention.db'}") as store:
        with store.engine.connect() as conn:
            payloads = [r[0] for r in conn.execute(text("SELECT payload FROM events"))]
        assert len(payloads) == 3 and not any("4111" in p for p in payloads)


def _litellm_logger(ns: dict[str, Any], tmp: Path, out: str) -> None:
    import litellm

    assert (tmp / "recorded.db").exists()
    assert ns["logger"] not in litellm.callbacks  # the example uninstalls it


def _seal(ns: dict[str, Any], tmp: Path, out: str) -> None:
    from click.testing import CliRunner

    from eventstore.cli import cli

    # The key file the example writes is the one `eventstore verify --key-file` takes.
    args = ["--db", f"sqlite:///{tmp / 'audit.db'}", "verify", ns["sid"]]
    runner = CliRunner()
    assert runner.invoke(cli, [*args, "--key-file", str(tmp / "seal.key")]).exit_code == 0
    (tmp / "wrong.key").write_bytes(b"another key")
    assert runner.invoke(cli, [*args, "--key-file", str(tmp / "wrong.key")]).exit_code != 0


def _imported(ns: dict[str, Any], tmp: Path, out: str) -> None:
    assert out.strip() == "['system', 'user', 'assistant', 'tool']"


CHECKS: dict[tuple[str, str], Callable[[dict[str, Any], Path, str], None]] = {
    ("README.md", "## An agent loop"): _agent_loop,
    ("quickstart.md", "## An agent loop"): _agent_loop,
    ("quickstart.md", "## Async"): _async,
    ("runtime.md", "## Queue, streaming and cancellation"): _runtime,
    ("runtime.md", "## Live tail and listeners"): _feed,
    ("condensation.md", "## Search and recall"): _search,
    ("condensation.md", "## Strategies by name"): _strategies,
    ("concepts.md", "### Keys, deletion, tails"): _keys,
    ("reliability-and-guarantees.md", "## Retention and erasure"): _purge,
    ("reliability-and-guarantees.md", "## Verify proves the whole chain"): _seal,
    ("adapters.md", "## litellm"): _litellm_logger,
    ("importers.md", "## All or nothing"): _imported,
}


def _honour(mark: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Skip or prepare for a marked block; returns a Postgres URL to drop afterwards."""
    if not mark:
        return None
    kind, _, rest = mark.partition(" ")
    if kind == "skip":
        assert rest.strip(), "a skipped block says why: <!-- test: skip REASON -->"
        pytest.skip(rest.strip())
    if kind == "extra":
        assert rest in EXTRAS, f"unknown extra {rest!r}: one of {sorted(EXTRAS)}"
        if importlib.util.find_spec(EXTRAS[rest].split(".")[0]) is None:
            test_file = f"tests/test_adapter_{rest.replace('-', '_')}.py"
            pytest.skip(f"needs the {rest} extra; {test_file} runs it in that extra's venv")
        return None
    if kind == "postgres":
        from conftest import fresh_pg_database

        from eventstore import EventStore

        url = fresh_pg_database()
        EventStore(url, upgrade=True).close()
        monkeypatch.setenv("EVENTSTORE_URL", url)
        return url
    pytest.fail(f"unknown test mark {mark!r}: use postgres, extra NAME or skip REASON")


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_python_block_runs(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm stays offline
    for var in ("EVENTSTORE_URL", "EVENTSTORE_MODEL"):
        monkeypatch.delenv(var, raising=False)
    pg_url = _honour(block.mark, monkeypatch)
    namespace: dict[str, Any] = {"__name__": f"docs_{block.page.stem}_{block.line}"}
    try:
        # Compiled with the page's line numbers, so a traceback points into the Markdown.
        code = "\n" * block.line + block.code
        exec(compile(code, str(block.page), "exec"), namespace)
        check = CHECKS.get((block.page.name, block.heading))
        if check is not None:
            check(namespace, tmp_path, capsys.readouterr().out)
    finally:
        from eventstore import AsyncEventStore, EventStore

        for value in namespace.values():
            if isinstance(value, EventStore):
                value.close()
            elif isinstance(value, AsyncEventStore):
                value.sync.close()
        if pg_url:
            from conftest import drop_pg_database

            drop_pg_database(pg_url)


def test_every_check_has_its_block() -> None:
    """A check whose block moved away would silently check nothing."""
    found = {(b.page.name, b.heading) for b in BLOCKS}
    assert set(CHECKS) <= found, set(CHECKS) - found


def test_marks_are_rare_and_known() -> None:
    marks = [b.mark for b in BLOCKS if b.mark]
    assert len([m for m in marks if m.startswith("skip")]) <= 2, marks
    for mark in marks:
        assert mark.partition(" ")[0] in {"skip", "extra", "postgres"}, mark
    # A mark that is not just before a fence is a typo that would leave a block unmarked.
    for page in PAGES:
        text = page.read_text()
        assert text.count("<!-- test:") == len([b for b in _blocks(page) if b.mark]), page


# -- commands


_TRAJ = {
    "history": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "fix the bug"},
        {"role": "assistant", "content": "looking", "thought": "look first"},
    ],
    "info": {"exit_status": "submitted"},
}


def _commands(page: Path, heading: str, index: int = 0) -> list[str]:
    """The lines of the ``index``-th bash block under ``heading``, comments cut off."""
    found = re.findall(r"```bash\n(.*?)```", section(page, heading), re.S)
    assert len(found) > index, f"{page.name} lost its commands under {heading!r}"
    return [line.split("  #")[0].strip() for line in found[index].splitlines() if line.strip()]


def test_quickstart_commands_are_unchanged() -> None:
    """The README's and the quickstart page's install commands are the ones CI runs."""
    demo = "python3 -m venv .venv && . .venv/bin/activate && pip install . && eventstore demo"
    tests = (
        'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]" '
        "&& python -m pytest"
    )
    for page, heading in ((README, "## Quickstart"), (DOCS / "quickstart.md", "# Quickstart")):
        text = section(page, heading)
        assert f"```bash\n{demo}\n```" in text and f"```bash\n{tests}\n```" in text, page


def test_command_line_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo, then every command of the quickstart's tour and of the CLI page, in a fresh
    directory with no configuration: SESSION is the demo's session, run.traj a small
    SWE-agent trajectory."""
    from click.testing import CliRunner

    from eventstore.cli import cli

    monkeypatch.chdir(tmp_path)
    for var in ("EVENTSTORE_URL", "EVENTSTORE_MODEL"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "run.traj").write_text(json.dumps(_TRAJ))
    runner = CliRunner()
    demo = runner.invoke(cli, ["demo", "--turns", "60"])
    assert demo.exit_code == 0, demo.output
    listed = runner.invoke(cli, ["sessions", "list", "--json"])
    (session,) = json.loads(listed.stdout)
    lines = _commands(DOCS / "quickstart.md", "## Install and run the demo", 1)
    lines += _commands(DOCS / "cli.md", "## Commands")
    ran = []
    for line in lines:
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
            if args[:1] in (["serve"], ["mcp"], ["watch"]):
                # A server or a watcher runs until stopped: their own tests serve, load
                # and follow; here the command must exist and parse as written.
                args = [*args, "--help"]
            result = runner.invoke(cli, args)
            assert result.exit_code == 0, (line, result.output)
            if target:
                (tmp_path / target).write_text(result.stdout)
            ran.append(args[0] if args[0] != "--db" else args[2])
    assert {"sessions", "log", "view", "condense", "prune", "verify", "export", "import"} <= set(
        ran
    )
    assert {"stats", "db", "purge", "search", "tail", "enqueue", "dequeue"} <= set(ran)


def test_every_command_is_on_the_cli_page() -> None:
    from eventstore.cli import cli

    named = set()
    for line in _commands(DOCS / "cli.md", "## Commands"):
        argv = shlex.split(line)
        named.add(argv[3] if argv[1] == "--db" else argv[1])
    missing = set(cli.commands) - named - {"demo"}  # the demo has its own section
    assert not missing, f"docs/cli.md does not show: {sorted(missing)}"


# -- the site


def test_api_reference_names_every_public_name() -> None:
    import condensers
    import eventstore

    text = (DOCS / "api.md").read_text()
    documented = set(re.findall(r"^::: (\S+)$", text, re.M))
    wanted = {f"eventstore.{n}" for n in eventstore.__all__}
    wanted |= {f"condensers.{n}" for n in condensers.__all__}
    assert wanted <= documented, sorted(wanted - documented)


def test_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)(?:#[\w-]+)?\)", text))
    pages = {p.name for p in DOCS.glob("*.md")}
    assert linked <= pages, linked - pages
    assert pages - {"index.md"} <= linked | {"mcp.md"}, (pages - {"index.md"}) - linked


def _nav_pages() -> list[str]:
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    return re.findall(r"^  - [^:]+: (\S+\.md)$", nav.split("\n\n", 1)[0], re.M)


def test_nav_lists_every_page() -> None:
    assert sorted(_nav_pages()) == sorted(p.name for p in DOCS.glob("*.md"))


def _built_site(tmp_path: Path) -> Path:
    """The site CI built (EVENTSTORE_DOCS_SITE), else a fresh strict build."""
    built = os.environ.get("EVENTSTORE_DOCS_SITE")
    if built:
        return Path(built)
    if importlib.util.find_spec("mkdocs") is None:
        if os.environ.get("EVENTSTORE_REQUIRE_DOCS") == "1":
            pytest.fail('mkdocs is missing: pip install -e ".[docs]" (EVENTSTORE_REQUIRE_DOCS=1)')
        pytest.skip('the docs extra is not installed: pip install -e ".[docs]"')
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return site


def test_site_builds_with_every_page_and_the_api(tmp_path: Path) -> None:
    site = _built_site(tmp_path)
    for page in _nav_pages():
        path = site / ("index.html" if page == "index.md" else f"{page[:-3]}/index.html")
        assert path.exists(), path
    api = (site / "api" / "index.html").read_text()
    # Docstrings are rendered, members inherited from the store's mixins included.
    assert "A synchronous event store on SQLite or Postgres." in api
    for anchor in ("eventstore.EventStore.enqueue", "eventstore.EventStore.purge"):
        assert f'id="{anchor}"' in api, anchor
    assert 'id="condensers.CondensationPolicy"' in api
    assert ":class:" not in api and ":func:" not in api  # docs/griffe_roles.py at work
    assert (site / "viewer-timeline.png").exists() and (site / "viewer-messages.png").exists()
