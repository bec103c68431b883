"""The ``eventstore`` command line, through click's runner, on SQLite and Postgres."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from eventstore import (
    Budget,
    Condensation,
    CondensationRequest,
    EventStore,
    LLMCall,
    Message,
    Prune,
    ToolCallPart,
    record_llm_call,
)
from eventstore.cli import cli
from eventstore.llm import import_litellm
from tests.conftest import corpus_files, sqlite_path

HEAVY = ("litellm", "alembic", "rich")


def _big_output(i: int) -> str:
    return "\n".join(f"{n:5d}  line {n} of file {i}: value = compute({n}, {i})" for n in range(120))


def _seed(store: EventStore, turns: int = 6, user_id: str | None = None) -> str:
    """A session with parallel calls, large and failing results, and recorded calls."""
    litellm = import_litellm()
    s = store.create_session(title="seeded", user_id=user_id)
    store.append(s.id, [Message.system("You are a coding agent."), Message.user("fix the tests")])
    for i in range(turns):
        if i and i % 2 == 0:
            store.append(s.id, [Message.user(f"now part {i // 2 + 1}")])
        calls = [
            ToolCallPart(id=f"c{i}a", name="read_file", arguments=json.dumps({"path": f"f{i}.py"})),
            ToolCallPart(id=f"c{i}b", name="run_tests", arguments='{"target": "tests/"}'),
        ]
        view = store.view(s.id)
        reply = {
            "role": "assistant",
            "content": f"step {i}",
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in calls
            ],
        }
        response = litellm.completion(
            model="gpt-4o-mini",
            messages=view.to_messages(),
            mock_response={"choices": [{"index": 0, "message": reply}], "model": "gpt-4o-mini"},
        )
        record_llm_call(store, s.id, view, response, model="gpt-4o-mini")
        store.append(
            s.id,
            [
                Message.tool(f"c{i}a", _big_output(i), name="read_file"),
                Message.tool(
                    f"c{i}b",
                    f"FAILED tests/test_{i}.py",
                    name="run_tests",
                    is_error=True,
                    state="error",
                ),
            ],
        )
    return s.id


@pytest.fixture
def env(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A seeded session in a tenant of its own, and a function running the CLI on it."""
    monkeypatch.delenv("EVENTSTORE_URL", raising=False)
    tenant = f"cli-{uuid.uuid4().hex}"
    store = EventStore(db_url, tenant=tenant, upgrade=True)
    sid = _seed(store)
    runner = CliRunner()

    def run(*args: str, ok: bool = True, input: str | None = None) -> Result:
        result = runner.invoke(cli, ["--db", db_url, "--tenant", tenant, *args], input=input)
        if ok:
            assert result.exit_code == 0, (result.output, result.exception)
        return result

    class Env:
        pass

    e = Env()
    e.url, e.tenant, e.store, e.sid, e.run = db_url, tenant, store, sid, run  # type: ignore[attr-defined]
    yield e
    store.close()


def _json(result: Result) -> Any:
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- startup


def test_importing_the_cli_loads_nothing_heavy() -> None:
    code = (
        "import sys, json, eventstore.cli\n"
        f"print(json.dumps([m for m in {HEAVY + ('sqlalchemy', 'pydantic')!r} "
        "if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_help_works_without_heavy_imports() -> None:
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: print('LOADED', [m for m in {HEAVY!r} if m in sys.modules], "
        "file=sys.stderr))\n"
        "from eventstore.cli import main\n"
        "main(['--help'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for command in ("db", "sessions", "log", "view", "condense", "verify", "export", "demo"):
        assert command in out.stdout
    assert "LOADED []" in out.stderr


def test_python_dash_m_eventstore_runs_the_command_line(tmp_path: Path) -> None:
    """``python -m eventstore`` is the ``eventstore`` script: the same help, and the same
    exit status for a command that fails."""
    out = subprocess.run(
        [sys.executable, "-m", "eventstore", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "Usage: python -m eventstore" in out.stdout or "Usage: eventstore" in out.stdout
    assert "sessions" in out.stdout and "verify" in out.stdout
    db = f"sqlite:///{tmp_path / 'x.db'}"
    bad = subprocess.run(
        [sys.executable, "-m", "eventstore", "--db", db, "sessions", "show", "nope"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "no database at" in bad.stderr


# --------------------------------------------------------------------------- db


def test_db_commands_on_a_fresh_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    runner = CliRunner()
    current = runner.invoke(cli, ["--db", url, "db", "current", "--json"])
    assert current.exit_code == 0
    assert _json(current)["status"] == "empty"
    check = runner.invoke(cli, ["--db", url, "db", "check"])
    assert check.exit_code == 1
    assert "eventstore db upgrade" in check.stderr
    up = runner.invoke(cli, ["--db", url, "db", "upgrade", "--json"])
    assert up.exit_code == 0
    assert _json(up)["from"] is None and _json(up)["to"] == _json(current)["head"]
    assert runner.invoke(cli, ["--db", url, "db", "check"]).exit_code == 0
    # Drift: a table the code does not know about.
    with sqlite3.connect(sqlite_path(url)) as conn:
        conn.execute("CREATE TABLE stray (id INTEGER PRIMARY KEY)")
    drift = runner.invoke(cli, ["--db", url, "db", "check", "--json"])
    assert drift.exit_code == 1
    data = _json(drift)
    assert data["ok"] is False and any("stray" in d for d in data["differences"])


def test_db_upgrade_current_check_on_each_backend(env: Any) -> None:
    assert "already at revision" in env.run("db", "upgrade").stdout
    assert _json(env.run("db", "current", "--json"))["status"] == "up to date"
    assert _json(env.run("db", "check", "--json"))["ok"] is True


# --------------------------------------------------------------------------- sessions


def test_sessions_list_show_fork(env: Any) -> None:
    second = env.store.create_session(title="second", user_id="ann")
    listed = _json(env.run("sessions", "list", "--json"))
    assert [s["id"] for s in listed] == [second.id, env.sid]  # newest first
    assert [s["id"] for s in _json(env.run("sessions", "list", "-n", "1", "--json"))] == [second.id]
    assert [s["id"] for s in _json(env.run("sessions", "list", "--user", "ann", "--json"))] == [
        second.id
    ]
    human = env.run("sessions", "list").stdout
    assert env.sid in human and "second" in human

    shown = _json(env.run("sessions", "show", env.sid, "--json"))
    stored = list(env.store.read(env.sid))
    assert shown["head_seq"] == len(stored)
    assert shown["raw_tokens"] == sum(e.token_count for e in stored if e.kind == "message")
    assert shown["view_tokens"] == env.store.view(env.sid).tokens
    assert shown["events_by_kind"]["llm_call"] == 6
    # A unique id prefix is enough.
    assert env.sid in env.run("sessions", "show", env.sid[:20]).stdout

    fork = _json(env.run("sessions", "fork", env.sid, "--at", "3", "--json"))
    assert fork["parent_id"] == env.sid and fork["fork_seq"] == 3 and fork["head_seq"] == 3


# --------------------------------------------------------------------------- log


def test_log_defaults_filters_and_json(env: Any) -> None:
    head = env.store.head(env.sid)
    lines = env.run("log", env.sid).stdout.strip().splitlines()
    assert len(lines) == 20
    assert lines[-1].split()[0] == str(head)
    everything = _json(env.run("log", env.sid, "-n", "0", "--json"))
    assert [e["seq"] for e in everything] == list(range(1, head + 1))
    calls = _json(env.run("log", env.sid, "--kind", "llm_call", "-n", "0", "--json"))
    assert len(calls) == 6 and {e["kind"] for e in calls} == {"llm_call"}
    two_kinds = _json(
        env.run("log", env.sid, "--kind", "llm_call", "--kind", "message", "-n", "3", "--json")
    )
    assert [e["seq"] for e in two_kinds] == [head - 2, head - 1, head]
    window = _json(env.run("log", env.sid, "--from", "2", "--to", "4", "--json"))
    assert [e["seq"] for e in window] == [2, 3, 4]
    first = _json(env.run("log", env.sid, "--from", "2", "-n", "2", "--json"))
    assert [e["seq"] for e in first] == [2, 3]

    human = env.run("log", env.sid, "-n", "0").stdout
    assert "-> read_file(" in human and "<- run_tests [error]" in human
    assert "gpt-4o-mini: view@" in human
    full = env.run("log", env.sid, "--from", "5", "--to", "8", "--full").stdout
    assert _big_output(0) in full  # full content, not a preview


# --------------------------------------------------------------------------- view


def test_view_json_messages_time_travel_and_budget(env: Any) -> None:
    view = env.store.view(env.sid)
    data = _json(env.run("view", env.sid, "--json"))
    assert data["tokens"] == view.tokens
    assert data["fingerprint"] == view.fingerprint()
    assert [i["seq"] for i in data["items"]] == [i.seq for i in view.items]
    # The session's recorded model gives the budget by default.
    assert data["budget"]["available"] == Budget.for_model("gpt-4o-mini").available
    assert _json(env.run("view", env.sid, "--messages")) == view.to_messages()

    past = env.store.view(env.sid, as_of=5)
    at = _json(env.run("view", env.sid, "--at", "5", "--json"))
    assert at["seq"] == 5 and at["fingerprint"] == past.fingerprint()
    small = _json(env.run("view", env.sid, "--max-input-tokens", "500", "--json"))
    assert small["budget"]["max_input_tokens"] == 500 and small["budget"]["fits"] is False

    human = env.run("view", env.sid, "--model", "gpt-4o-mini").stdout
    assert "## pinned" in human and "## tail" in human
    assert f"{view.tokens:,} tokens of" in human


def test_view_marks_compacted_parts_and_summary(env: Any) -> None:
    env.run("prune", env.sid, "--max-input-tokens", "3000")
    env.run("condense", env.sid, "--max-input-tokens", "3000", "--focus", "the failing tests")
    data = _json(env.run("view", env.sid, "--json"))
    assert data["condensation"] is not None and data["summary"]
    human = env.run("view", env.sid, "--max-input-tokens", "3000").stdout
    assert "## summary (condensation at seq" in human


# --------------------------------------------------------------------------- condense/prune


def test_condense_writes_a_request_and_a_manual_condensation(env: Any) -> None:
    before = env.store.view(env.sid).tokens
    out = _json(
        env.run("condense", env.sid, "--max-input-tokens", "4000", "--focus", "run_tests", "--json")
    )
    assert out["tokens_after"] < before
    assert [s["kind"] for s in out["steps"]] == ["condensation"]
    seq = out["steps"][0]["seq"]
    evt = next(iter(env.store.read(env.sid, seq, seq))).event
    assert isinstance(evt, Condensation)
    assert evt.trigger == "manual" and evt.focus == "run_tests"
    req = next(iter(env.store.read(env.sid, evt.request_seq, evt.request_seq))).event
    assert isinstance(req, CondensationRequest) and req.requested_by == "eventstore-cli"
    assert env.store.view(env.sid).tokens == out["tokens_after"]
    assert env.store.verify(env.sid).ok


def test_window_strategy_and_llm_strategy_needs_a_model(env: Any) -> None:
    out = _json(
        env.run("condense", env.sid, "--max-input-tokens", "4000", "--strategy", "window", "--json")
    )
    assert out["steps"][0]["condenser"] == "window"
    bad = env.run("condense", env.sid, "--max-input-tokens", "4000", "--strategy", "llm", ok=False)
    assert bad.exit_code != 0 and "--summary-model" in bad.stderr


def test_condense_chains_registry_strategies(env: Any) -> None:
    out = _json(
        env.run(
            "condense",
            env.sid,
            "--max-input-tokens",
            "4000",
            "--strategy",
            "prune",
            "--strategy",
            "truncate",
            "--json",
        )  # fmt: skip
    )
    assert out["steps"][-1]["condenser"] == "window"
    unknown = env.run("condense", env.sid, "--strategy", "squash", ok=False)
    assert unknown.exit_code == 1 and "known: " in unknown.stderr


def test_prune_compacts_and_keeps_the_content(env: Any) -> None:
    out = _json(env.run("prune", env.sid, "--max-input-tokens", "3000", "--json"))
    assert out["steps"] and out["steps"][0]["kind"] == "prune"
    seq = out["steps"][0]["seq"]
    prune = next(iter(env.store.read(env.sid, seq, seq))).event
    assert isinstance(prune, Prune) and prune.targets
    original = env.store.original(env.sid, prune.targets[0])
    assert original.output.startswith("    0  line 0 of file")
    assert out["tokens_after"] < out["tokens_before"]
    # Nothing left to prune is not an error.
    again = env.run("prune", env.sid, "--max-input-tokens", "3000")
    assert "no prune written" in again.stderr


def test_condense_and_prune_without_budget_flags_use_a_default_and_say_so(
    env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EVENTSTORE_MODEL", raising=False)
    bare = env.store.create_session()
    turns = [
        m
        for i in range(8)
        for m in (Message.user(f"request {i} " + "words " * 50), Message.assistant(f"done {i}"))
    ]
    env.store.append(bare.id, turns)
    result = env.run("condense", bare.id, "--focus", "request 3")
    first = result.stdout.splitlines()[0]
    assert first.startswith("budget: the default 128,000-token window")
    assert "--model" in first and "EVENTSTORE_MODEL" in first
    cond = [e.event for e in env.store.read(bare.id, kinds=["condensation"])]
    assert len(cond) == 1 and cond[0].focus == "request 3"
    data = _json(env.run("prune", bare.id, "--json"))
    assert data["budget"]["max_input_tokens"] == 128_000
    assert data["budget"]["source"].startswith("budget: the default")


def test_budget_comes_from_the_session_then_eventstore_model(
    env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTSTORE_MODEL", "gpt-4")
    # The seeded session records calls to gpt-4o-mini: the session's model wins.
    data = _json(env.run("prune", env.sid, "--json"))
    assert data["budget"]["model"] == "gpt-4o-mini"
    assert "newest llm_call" in data["budget"]["source"]
    # An imported transcript: the model that wrote its assistant messages.
    imported = env.store.create_session(metadata={"run": {"model": "gpt-4"}})
    env.store.append(
        imported.id,
        [Message.user("hi"), Message.assistant("hello", model="gpt-4o")],
    )
    data = _json(env.run("condense", imported.id, "--json", ok=False))
    assert data["budget"]["model"] == "gpt-4o" and "assistant message" in data["budget"]["source"]
    # Its metadata, when no message names a model.
    meta = env.store.create_session(metadata={"run": {"model": "gpt-4o"}})
    env.store.append(meta.id, [Message.user("hi")])
    data = _json(env.run("prune", meta.id, "--json"))
    assert data["budget"]["model"] == "gpt-4o" and "metadata" in data["budget"]["source"]
    # Nothing in the session: EVENTSTORE_MODEL.
    bare = env.store.create_session()
    env.store.append(bare.id, [Message.user("hi")])
    data = _json(env.run("prune", bare.id, "--json"))
    assert data["budget"]["model"] == "gpt-4" and "EVENTSTORE_MODEL" in data["budget"]["source"]
    # --model beats all of them.
    data = _json(env.run("prune", env.sid, "--model", "gpt-4o", "--json"))
    assert data["budget"]["model"] == "gpt-4o" and "(--model)" in data["budget"]["source"]


def test_prune_that_writes_nothing_says_why(env: Any) -> None:
    no_tools = env.store.create_session()
    env.store.append(no_tools.id, [Message.user("hi"), Message.assistant("hello")])
    result = env.run("prune", no_tools.id)
    assert "no prune written: the view holds no tool results" in result.stderr
    assert "-" + "16" not in result.output
    recent = env.store.create_session()
    env.store.append(
        recent.id,
        [
            Message.user("look"),
            Message.assistant("", tool_calls=[ToolCallPart(id="c1", name="ls", arguments="{}")]),
            Message.tool("c1", "a.py b.py", name="ls"),
        ],
    )
    data = _json(env.run("prune", recent.id, "--json"))
    assert data["steps"] == [] and data["error"] is None
    assert data["reason"].startswith("1 tool results (")
    assert "newest 2 assistant steps" in data["reason"]
    # A call that never got its result: the view renders one, which is not a saving.
    open_call = env.store.create_session()
    env.store.append(
        open_call.id,
        [
            Message.user("go"),
            Message.assistant("", tool_calls=[ToolCallPart(id="c9", name="finish")]),
        ],
    )
    stats = _json(env.run("stats", "--json"))
    assert stats["tokens_saved"] >= 0 and stats["view_overhead"] > 0
    assert "view overhead" in env.run("stats").stdout


# --------------------------------------------------------------------------- verify


def test_verify_ok_and_failures(env: Any) -> None:
    assert "ok" in env.run("verify", env.sid).stdout
    data = _json(env.run("verify", "--all", "--json"))
    assert data["ok"] is True and data["sessions"][0]["llm_calls"] == 6
    # A recorded call whose fingerprint does not match the view it names.
    env.store.append(env.sid, [LLMCall(model="gpt-4o-mini", view_seq=3, fingerprint="0" * 64)])
    bad = env.run("verify", env.sid, ok=False)
    assert bad.exit_code == 1
    assert "FAILED" in bad.stdout and "recorded" in bad.stderr
    assert _json(env.run("verify", "--all", "--json", ok=False))["ok"] is False
    neither = env.run("verify", ok=False)
    assert neither.exit_code != 0 and "--all" in neither.stderr


def test_purge_asks_then_purges_and_verify_reports_it(env: Any) -> None:
    head = env.store.head(env.sid)
    declined = env.run("purge", env.sid, "--reason", "erasure #1", input="n\n", ok=False)
    assert declined.exit_code != 0 and env.store.head(env.sid) == head
    assert env.run("purge", env.sid, ok=False).exit_code == 2  # --reason is required
    out = _json(env.run("purge", env.sid, "--reason", "erasure #1", "--through-seq", "3", "--json"))
    assert out["purged"]["from_seq"] == 1 and out["purged"]["to_seq"] == 3
    again = env.run("purge", env.sid, "--reason", "retention", "--yes")
    assert f"purged {head - 3} events" in again.stdout
    assert "nothing left" in env.run("purge", env.sid, "--reason", "x", "--yes").stdout
    report = env.run("verify", env.sid)
    assert ": ok:" in report.stdout and f"{head} events purged" in report.stdout


# --------------------------------------------------------------------------- export/import


def test_export_and_import_round_trip(env: Any, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    env.run("export", env.sid, "-o", str(out))
    lines = out.read_text().splitlines()
    assert len(lines) == env.store.head(env.sid) + 1  # header + events
    collide = env.run("import", str(out), ok=False)
    assert collide.exit_code != 0 and "--new-ids" in collide.stderr
    created = _json(env.run("import", str(out), "--new-ids", "--json"))
    assert len(created) == 1 and created[0]["head_seq"] == env.store.head(env.sid)

    stdout_export = env.run("export", env.sid, "--format", "openai").stdout
    messages = json.loads(stdout_export)
    assert messages[0] == {"role": "system", "content": "You are a coding agent."}
    assert sum(1 for m in messages if m["role"] == "tool") == 12
    path = tmp_path / "chat.json"
    path.write_text(stdout_export)
    imported = _json(env.run("import", str(path), "--json"))  # format detected
    n_messages = sum(1 for _ in env.store.read(env.sid, kinds=["message"]))
    assert imported[0]["head_seq"] == n_messages


def test_export_takes_json_and_survives_placeholders_with_braces(env: Any, tmp_path: Path) -> None:
    from eventstore import PartRef, ViewOptions

    results = [e for e in env.store.read(env.sid, kinds=["message"]) if e.event.role == "tool"]
    env.store.append(env.sid, [Prune(targets=[PartRef(seq=results[0].seq, index=0)])])
    for template in ("{0} {name} {{x}} {seq}", "{", "}{", "{seq:>5}", "{index.__class__}"):
        view = env.store.view(env.sid, options=ViewOptions(placeholder=template))
        record_llm_call(env.store, env.sid, view, None, model="gpt-4o-mini", append_response=False)
    out = tmp_path / "s.jsonl"
    data = _json(env.run("export", env.sid, "-o", str(out), "--json"))
    assert data == {
        "session_id": env.sid,
        "format": "jsonl",
        "events": env.store.head(env.sid),
        "output": str(out),
    }
    chat = json.loads(env.run("export", env.sid, "--format", "openai", "--json").stdout)
    assert chat[0]["role"] == "system"
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert CliRunner().invoke(cli, ["--db", fresh, "import", str(out)]).exit_code == 0
    verified = CliRunner().invoke(cli, ["--db", fresh, "verify", env.sid, "--json"])
    assert verified.exit_code == 0 and _json(verified)["ok"] is True


def test_export_import_into_a_fresh_database_keeps_the_session_id(env: Any, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    env.run("export", env.sid, "-o", str(out))
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    runner = CliRunner()
    created = runner.invoke(cli, ["--db", fresh, "import", str(out), "--json"])
    assert created.exit_code == 0, created.output
    assert [s["id"] for s in _json(created)] == [env.sid]
    verified = runner.invoke(cli, ["--db", fresh, "verify", env.sid])
    assert verified.exit_code == 0 and "ok" in verified.stdout
    listed = _json(runner.invoke(cli, ["--db", fresh, "sessions", "list", "--json"]))
    assert [s["id"] for s in listed] == [env.sid]
    # Again: the ids are taken, and the message names the flags that opt out.
    again = runner.invoke(cli, ["--db", fresh, "import", str(out)])
    assert again.exit_code != 0 and "--new-ids" in again.stderr
    assert "Traceback" not in again.output
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with EventStore(other) as o:
        o.create_session(session_id=env.sid)
    taken = runner.invoke(cli, ["--db", other, "import", str(out)])
    assert taken.exit_code != 0 and "--new-id" in taken.stderr and env.sid in taken.stderr
    renamed = _json(runner.invoke(cli, ["--db", other, "import", str(out), "--new-id", "--json"]))
    assert renamed[0]["id"] != env.sid
    assert runner.invoke(cli, ["--db", other, "verify", renamed[0]["id"]]).exit_code == 0


@pytest.mark.parametrize("path", corpus_files("swe-agent/**/*.traj")[:1], ids=lambda p: p.name)
def test_import_detects_a_swe_agent_trajectory(env: Any, path: Path) -> None:
    created = _json(env.run("import", str(path), "--json"))
    assert created and created[0]["head_seq"] > 0
    assert env.store.verify(created[0]["id"]).ok


def test_import_rejects_garbage_cleanly(env: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = env.run("import", str(bad), ok=False)
    assert result.exit_code != 0 and "bad.json" in result.stderr
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- stats


def test_stats_counts_and_tokens_saved(env: Any) -> None:
    env.run("condense", env.sid, "--max-input-tokens", "4000")
    data = _json(env.run("stats", "--json"))
    events = list(env.store.read(env.sid))
    assert data["sessions"] == 1 and data["events"] == len(events)
    raw = sum(e.token_count for e in events if e.kind == "message")
    view = env.store.view(env.sid).tokens
    assert data["raw_message_tokens"] == raw and data["view_tokens"] == view
    assert data["tokens_saved"] == raw - view > 0 and data["view_overhead"] == 0
    cond = next(e.event for e in events if e.kind == "condensation")
    assert data["condensations"] == 1
    assert data["condensation_reduction"] == cond.tokens_before - cond.tokens_after
    assert "tokens saved" in env.run("stats").stdout


# --------------------------------------------------------------------------- errors


def test_errors_are_one_line_with_the_fix(env: Any, tmp_path: Path) -> None:
    missing = env.run("log", "no-such-session", ok=False)
    assert missing.exit_code == 1
    assert "eventstore sessions list" in missing.stderr and "Traceback" not in missing.output
    runner = CliRunner()
    nofile = runner.invoke(cli, ["--db", f"sqlite:///{tmp_path / 'nope.db'}", "sessions", "list"])
    assert nofile.exit_code == 1 and "no database at" in nofile.stderr
    assert not (tmp_path / "nope.db").exists()
    badurl = runner.invoke(cli, ["--db", "mysql://x/y", "sessions", "list"])
    assert badurl.exit_code == 1 and "sqlite:///" in badurl.stderr
    out_of_range = env.run("view", env.sid, "--at", "9999", ok=False)
    assert out_of_range.exit_code == 1 and "as_of" in out_of_range.stderr
    unknown = env.run("view", env.sid, "--model", "no-such-model-xyz", ok=False)
    # An unknown model is measured against the documented default window, said in one line.
    assert unknown.exit_code == 0 and "4,096-token default window" in unknown.stderr
    assert "--max-input-tokens" in unknown.stderr and "Warning" not in unknown.stderr


def test_url_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    with EventStore(url, tenant="t") as store:
        sid = store.create_session(title="from env").id
    monkeypatch.setenv("EVENTSTORE_URL", url)
    result = CliRunner().invoke(cli, ["--tenant", "t", "sessions", "list", "--json"])
    assert result.exit_code == 0 and _json(result)[0]["id"] == sid


def test_db_option_after_the_command_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'late.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["db", "upgrade", "--db", url]).exit_code == 0
    listed = runner.invoke(cli, ["sessions", "list", "--db", url, "--json"])
    assert listed.exit_code == 0 and _json(listed) == []


def test_errors_become_one_line_with_the_fix() -> None:
    import psycopg

    from condensers import SummaryError
    from eventstore import InvalidEventError
    from eventstore.cli.root import _error_message

    assert (_error_message(SummaryError("bad model")) or "").startswith("condensation failed:")
    assert _error_message(InvalidEventError("limit: too big")) == "limit: too big"
    assert "nested too deeply" in (_error_message(RecursionError()) or "")
    assert "out of range" in (_error_message(OverflowError("int too large")) or "")
    driver = _error_message(psycopg.OperationalError("connection refused"))
    assert driver is not None and driver.startswith("database error: connection refused")
    assert _error_message(KeyError("a bug")) is None  # real bugs keep their traceback


def _read_only_copy(src: Path, tmp_path: Path) -> tuple[Path, Any]:
    """A copy of the SQLite file at ``src`` in a directory nobody here can write to; skips
    when the file system lets this process write anyway (root on a plain mount without
    ``chattr``). Returns the file and the undo."""
    import shutil
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "events.db"
    shutil.copy(src, db)
    db.chmod(0o444)
    folder.chmod(0o555)

    def undo() -> None:
        subprocess.run(["chattr", "-i", str(db), str(folder)], capture_output=True)
        folder.chmod(0o755)
        db.chmod(0o644)

    try:
        open(db, "r+b").close()
        writable = True
    except OSError:
        writable = False
    if writable:  # root: make the file and its directory immutable instead
        subprocess.run(["chattr", "+i", str(db), str(folder)], capture_output=True)
        try:
            open(db, "r+b").close()
            undo()
            pytest.skip("cannot make a file read-only for this process here")
        except OSError:
            pass
    return db, undo


def test_read_commands_and_the_viewer_work_on_a_read_only_sqlite_file(tmp_path: Path) -> None:
    from eventstore.cli.root import State
    from eventstore.cli.serve import open_read_only

    src = tmp_path / "src.db"
    store = EventStore(f"sqlite:///{src}")
    sid = store.create_session(title="archived").id
    store.append(sid, [Message.user("an archived conversation")])
    store.close()
    db, undo = _read_only_copy(src, tmp_path)
    try:
        url = f"sqlite:///{db}"
        for args in (
            ["sessions", "list"],
            ["sessions", "show", sid],
            ["log", sid],
            ["view", sid],
            ["verify", sid],
            ["export", sid],
            ["stats"],
        ):
            result = CliRunner().invoke(cli, ["--db", url, *args])
            assert result.exit_code == 0, (args, result.output)
        assert "archived" in CliRunner().invoke(cli, ["--db", url, "sessions", "list"]).output
        # A command that writes says so, and names the commands that do.
        result = CliRunner().invoke(cli, ["--db", url, "search", "archived"])
        assert result.exit_code == 1
        assert "commands that write" in result.output and "search" in result.output
        # The URL workaround is accepted as such.
        immutable = f"sqlite:///file:{db}?immutable=1&uri=true"
        result = CliRunner().invoke(cli, ["--db", immutable, "log", sid])
        assert result.exit_code == 0 and "archived conversation" in result.output
        # The viewer opens it too.
        pytest.importorskip("starlette")
        from starlette.testclient import TestClient

        from eventstore.cli.viewer import create_app

        viewer_store = open_read_only(State(url, True, "default"))
        try:
            client = TestClient(create_app(viewer_store), base_url="http://127.0.0.1:8765")
            assert "archived" in client.get("/").text
            assert client.get(f"/sessions/{sid}/export.jsonl").status_code == 200
        finally:
            viewer_store.close()
    finally:
        undo()


def test_a_bare_file_path_is_a_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "plain.db"
    with EventStore(f"sqlite:///{path}", tenant="t") as store:
        sid = store.create_session(title="by path").id
    listed = CliRunner().invoke(cli, ["--db", str(path), "--tenant", "t", "sessions", "list"])
    assert listed.exit_code == 0 and sid in listed.stdout
    with EventStore(str(path), tenant="t") as store:
        assert store.get_session(sid).title == "by path"
