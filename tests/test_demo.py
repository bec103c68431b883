"""The demo: a deterministic generated session, replayed and audited end to end."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import EventStore, LLMCall, ViewOptions
from eventstore.cli import cli
from eventstore.cli.demo import run_demo
from eventstore.cli.demo_script import generate_session
from eventstore.views import fingerprint


def test_generation_is_deterministic_and_realistic() -> None:
    a, b = generate_session(200, seed=7), generate_session(200, seed=7)
    assert a == b and a.fingerprint() == b.fingerprint()
    assert generate_session(200, seed=8).fingerprint() != a.fingerprint()
    assert len(a.turns) == 200
    calls = [c for t in a.turns for c in t.calls]
    assert sum(1 for c in calls if c.output is None) == 1  # one interrupted call
    assert any(c.is_error for c in calls)
    assert sum(1 for t in a.turns if len(t.calls) > 1) >= 10  # parallel calls
    assert sum(1 for c in calls if c.output and len(c.output) > 4096) >= 10  # large outputs
    assert sum(1 for t in a.turns if t.user) >= 10
    assert all(t.reasoning for t in a.turns)
    # The user explains the interruption right after it.
    lost = next(i for i, t in enumerate(a.turns) if any(c.output is None for c in t.calls))
    assert "stopped" in (a.turns[lost + 1].user or "")
    assert len({c.id for c in calls}) == len(calls)


def test_generation_rejects_zero_turns() -> None:
    with pytest.raises(ValueError):
        generate_session(0)


def _check_report(data: dict[str, Any], url: str, tenant: str) -> None:
    """Every number the demo claims, re-derived from the database."""
    available = data["budget"]["available"]
    assert data["condensations"], "the small window must force condensations"
    assert data["final_view"]["tokens"] <= available
    assert data["max_view_tokens_sent"] <= available and data["views_over_budget"] == 0
    with EventStore(url, tenant=tenant) as store:
        sid = data["session_id"]
        events = list(store.read(sid))
        assert data["events"] == len(events) == store.head(sid)
        raw = sum(e.token_count for e in events if e.kind == "message")
        assert data["raw_history_tokens"] == raw
        assert raw > 3 * available  # the history is far larger than the window
        assert data["llm_calls"] == sum(1 for e in events if e.kind == "llm_call")
        assert data["llm_calls"] == data["turns"]
        final = store.view(sid)
        assert data["final_view"]["tokens"] == final.tokens
        assert data["final_view"]["messages"] == len(final.to_messages())
        conds = [e for e in events if e.kind == "condensation"]
        assert [c["seq"] for c in data["condensations"]] == [e.seq for e in conds]
        for claimed, stored in zip(data["condensations"], conds, strict=True):
            assert claimed["tokens_before"] == stored.event.tokens_before
            assert claimed["tokens_after"] == stored.event.tokens_after
            assert claimed["tokens_after"] < claimed["tokens_before"]

        # Time travel: the recorded fingerprint is the one on the llm_call event, and the
        # view at its seq still renders to it although it has been condensed since.
        tt = data["time_travel"]
        assert tt["match"] is True and tt["now_condensed"] is True
        call = next(iter(store.read(sid, tt["llm_call_seq"], tt["llm_call_seq"]))).event
        assert isinstance(call, LLMCall)
        assert call.fingerprint == tt["recorded_fingerprint"] == tt["rebuilt_fingerprint"]
        past = store.view(sid, as_of=call.view_seq, options=ViewOptions(**call.render_options))
        assert fingerprint(past.to_messages()) == call.fingerprint
        assert tt["view_seq"] < data["condensations"][0]["seq"]

        assert data["interrupted"]["rendered_interrupted"] is True
        report = store.verify(sid)
        assert report.ok and data["verify"]["ok"] is True
        assert data["verify"]["llm_calls"] == report.llm_calls == data["llm_calls"]


def test_demo_command_end_to_end_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    result = CliRunner().invoke(cli, ["demo", "--db", url, "--turns", "120", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["offline"] is True and data["turns"] == 120
    assert data["script_fingerprint"] == generate_session(120).fingerprint()
    _check_report(data, url, "default")


def test_demo_human_output_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVENTSTORE_URL", raising=False)
    runner = CliRunner()
    first = runner.invoke(cli, ["demo", "--turns", "60"])
    assert first.exit_code == 0, first.output
    out = first.stdout
    for text in (
        "What the condensers wrote",
        "raw history",
        "final view",
        "Time travel",
        "match",
        "verify: ok",
        "interrupted result",
    ):
        assert text in out, text
    # The demo writes where every command reads by default, and says so.
    assert "sqlite:///eventstore.db (the default: every command uses it" in out
    assert "eventstore sessions list" in out and "--db" not in out.split("Look around:")[1]
    db = tmp_path / "eventstore.db"
    assert db.exists()
    listed = runner.invoke(cli, ["sessions", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    (session,) = json.loads(listed.stdout)
    assert session["id"] in out
    # Another run adds its session next to the first; nothing is deleted.
    assert runner.invoke(cli, ["demo", "--turns", "30"]).exit_code == 0
    with EventStore(f"sqlite:///{db}", tenant="default") as store:
        ids = [s.id for s in store.list_sessions(limit=None)]
    assert len(ids) == 2 and session["id"] in ids


def test_demo_follows_eventstore_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    monkeypatch.setenv("EVENTSTORE_URL", url)
    runner = CliRunner()
    result = runner.invoke(cli, ["demo", "--turns", "20", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["db"] == url and not (tmp_path / "eventstore.db").exists()
    listed = json.loads(runner.invoke(cli, ["sessions", "list", "--json"]).stdout)
    assert [s["id"] for s in listed] == [data["session_id"]]


def test_demo_on_each_backend(db_url: str) -> None:
    tenant = f"demo-{uuid.uuid4().hex}"
    report = run_demo(db_url, turns=80, tenant=tenant)
    _check_report(report.to_dict(), db_url, tenant)


def test_demo_is_reproducible(tmp_path: Path) -> None:
    a = run_demo(f"sqlite:///{tmp_path / 'a.db'}", turns=50)
    b = run_demo(f"sqlite:///{tmp_path / 'b.db'}", turns=50)
    assert a.raw_history_tokens == b.raw_history_tokens
    assert a.condensations == b.condensations and a.prunes == b.prunes
    assert a.final_view["tokens"] == b.final_view["tokens"]


def test_live_model_failure_is_recorded_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    url = f"sqlite:///{tmp_path / 'live.db'}"
    result = CliRunner().invoke(
        cli,
        [
            "demo",
            "--db",
            url,
            "--turns",
            "1",
            "--model",
            "openai/nothing-here",
            "--api-base",
            "http://127.0.0.1:9/v1",
        ],
    )
    assert result.exit_code == 1
    assert "the call to openai/nothing-here failed" in result.stderr
    assert "Traceback" not in result.output
    with EventStore(url, tenant="default") as store:
        (session,) = store.list_sessions()
        calls = [e.event for e in store.read(session.id, kinds=["llm_call"])]
        assert len(calls) == 1 and calls[0].error and calls[0].view_seq == 2
        assert store.verify(session.id).ok
