"""OpenCode sessions (storage files and ``opencode export``): import, keys, resuming, native
compaction, on SQLite and Postgres.

No permissively licensed OpenCode data was found, so the sample under
``tests/data/transcripts/opencode`` was written from OpenCode's message and part schema (see
PROVENANCE.md there). It is checked against a count made here from the raw part files,
without the importer's code.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import (
    Condensation,
    Custom,
    EventStore,
    Message,
    Prune,
    ReasoningPart,
    ToolCallPart,
    ToolResultPart,
)
from eventstore.cli import cli
from eventstore.importers import (
    ImportFormatError,
    detect_agent_format,
    import_transcript,
    transcripts_under,
)
from tests.test_coding_importers import event_payloads, export_keeps_every_hash

DATA = Path(__file__).parent / "data" / "transcripts" / "opencode"
MAIN_ID = "ses_47f1c2a9dffeQ3mZk8Vb1xYtRw"
CHILD_ID = "ses_47f1c0b77ffe9Lq2Hs6NcPdEuA"
STORAGE = DATA / "storage"
SESSION = next((STORAGE / "session").glob(f"*/{MAIN_ID}.json"))
EXPORT = DATA / f"export-{MAIN_ID}.json"


def raw_count(storage: Path, session_id: str) -> dict[str, Any]:
    """Tool call ids, completed or failed results, reasoning parts and user turns, read from
    the part files directly."""
    calls: set[str] = set()
    reasoning = users = 0
    for msg_file in sorted((storage / "message" / session_id).glob("*.json")):
        info = json.loads(msg_file.read_text())
        parts = [json.loads(p.read_text()) for p in (storage / "part" / info["id"]).glob("*.json")]
        if info["role"] == "user" and any(
            p["type"] == "text" and not p.get("synthetic") for p in parts
        ):
            users += 1
        for p in parts:
            if p["type"] == "tool":
                calls.add(p["callID"])
            reasoning += p["type"] == "reasoning"
    return {"calls": calls, "reasoning": reasoning, "users": users}


def imported(store: EventStore, sid: str) -> list[Any]:
    return [s.event for s in store.read(sid)]


def test_storage_matches_an_independent_count(store: EventStore) -> None:
    [r] = import_transcript(store, SESSION)
    events = imported(store, r.session_id)
    parts = [p for e in events if isinstance(e, Message) for p in e.parts]
    want = raw_count(STORAGE, MAIN_ID)
    assert {p.id for p in parts if isinstance(p, ToolCallPart)} == want["calls"]
    assert {p.tool_call_id for p in parts if isinstance(p, ToolResultPart)} == want["calls"]
    assert sum(isinstance(p, ReasoningPart) for p in parts) == want["reasoning"]
    users = [e for e in events if isinstance(e, Message) and e.role == "user"]
    assert len(users) == want["users"]  # the compaction request (no text) is the condensation
    assert r.key == f"opencode:{MAIN_ID}" and r.format == "opencode"
    assert store.get_session(r.session_id).title == "Add a --verbose flag to the CLI"


def test_auto_detection_and_the_explicit_format_agree(tmp_path: Path) -> None:
    assert detect_agent_format(SESSION) == detect_agent_format(EXPORT) == "opencode"
    a = EventStore(f"sqlite:///{tmp_path / 'a.db'}")
    b = EventStore(f"sqlite:///{tmp_path / 'b.db'}")
    [ra] = import_transcript(a, SESSION)
    [rb] = import_transcript(b, SESSION, "opencode")
    assert event_payloads(a, ra.session_id) == event_payloads(b, rb.session_id)
    assert ra.events == rb.events == 15


def test_the_export_makes_the_same_events_and_brings_the_storage_up_to_date(
    store: EventStore,
) -> None:
    [r] = import_transcript(store, EXPORT)
    assert r.key == f"opencode:{MAIN_ID}" and r.events == 15
    [again] = import_transcript(store, SESSION)
    assert (again.status, again.events, again.session_id) == ("up to date", 0, r.session_id)


def test_a_compaction_becomes_one_condensation_with_the_native_summary(
    store: EventStore,
) -> None:
    [r] = import_transcript(store, SESSION)
    events = imported(store, r.session_id)
    conds = [(n, e) for n, e in enumerate(events, 1) if isinstance(e, Condensation)]
    assert len(conds) == 1 and r.condensations == 1
    seq, cond = conds[0]
    summary_file = next(
        p
        for p in (STORAGE / "part").rglob("*.json")
        if json.loads(p.read_text()).get("text", "").startswith("## Summary")
    )
    assert cond.summary == json.loads(summary_file.read_text())["text"]
    assert (cond.forgotten_from, cond.forgotten_to) == (1, seq - 1)
    # Before the compaction the view holds the long context; after it, the summary and
    # what followed, as OpenCode sent it.
    before = store.view(r.session_id, as_of=seq - 1)
    after = store.view(r.session_id)
    assert len(before.items) == seq - 1
    assert after.condensation is not None and after.condensation.seq == seq
    texts = [json.dumps(i.message.model_dump(mode="json")) for i in after.items]
    assert not any("Yes, pass it through" in t for t in texts)
    assert any("Print each file in walker.run" in t for t in texts)


def test_a_kept_tail_stays_after_the_compaction(store: EventStore, tmp_path: Path) -> None:
    copy = _copy_storage(tmp_path)
    msgs = sorted((copy / "message" / MAIN_ID).glob("*.json"))
    third = json.loads(msgs[2].read_text())["id"]  # "Yes, pass it through..."
    part_file = next(
        p
        for p in (copy / "part").rglob("*.json")
        if json.loads(p.read_text())["type"] == "compaction"
    )
    part = json.loads(part_file.read_text()) | {"tail_start_id": third}
    part_file.write_text(json.dumps(part))
    [r] = import_transcript(store, _session_file(copy))
    cond = next(e for e in imported(store, r.session_id) if isinstance(e, Condensation))
    assert (cond.forgotten_from, cond.forgotten_to) == (1, 6)  # the first exchange
    texts = [json.dumps(i.message.model_dump(mode="json")) for i in store.view(r.session_id).items]
    assert any("Yes, pass it through" in t for t in texts)
    assert not any("Add a --verbose flag to cli.py" in t for t in texts)


def test_every_event_keeps_its_source_and_the_ids(store: EventStore) -> None:
    [r] = import_transcript(store, SESSION)
    for e in imported(store, r.session_id):
        meta = (
            e.provider_metadata
            if isinstance(e, Message)
            else e.settings
            if isinstance(e, Condensation)
            else e.data
        )
        src = meta["source"]
        assert src["file"] == f"{MAIN_ID}.json" and 1 <= src["line"] <= src["upto"] <= 8
    first = imported(store, r.session_id)[0]
    assert first.provider_metadata["opencode"]["message"]["id"].startswith("msg_")


def test_the_view_at_head_has_every_result_after_its_call(store: EventStore) -> None:
    [r] = import_transcript(store, SESSION)
    calls: set[str] = set()
    results = 0
    for item in store.view(r.session_id).items:
        for part in item.message.parts:
            if isinstance(part, ToolCallPart):
                calls.add(part.id)
            elif isinstance(part, ToolResultPart):
                assert part.tool_call_id in calls
                results += 1
    assert results == 2  # the two calls made after the compaction


def test_a_rejected_call_is_an_error_result(store: EventStore) -> None:
    [r] = import_transcript(store, SESSION)
    errors = [
        p
        for e in imported(store, r.session_id)
        if isinstance(e, Message)
        for p in e.parts
        if isinstance(p, ToolResultPart) and p.is_error
    ]
    assert len(errors) == 1 and "rejected permission" in errors[0].output


def _copy_storage(tmp_path: Path) -> Path:
    dest = tmp_path / "storage"
    shutil.copytree(STORAGE, dest)
    return dest


def _session_file(storage: Path, sid: str = MAIN_ID) -> Path:
    return next((storage / "session").glob(f"*/{sid}.json"))


def test_a_grown_session_appends_only_the_new_messages(store: EventStore, tmp_path: Path) -> None:
    copy = _copy_storage(tmp_path)
    msgs = sorted((copy / "message" / MAIN_ID).glob("*.json"))
    held = tmp_path / "held"
    held.mkdir()
    for m in msgs[4:]:  # the compaction and everything after it are not written yet
        shutil.move(m, held / m.name)
    [first] = import_transcript(store, _session_file(copy))
    assert first.events == 10 and first.condensations == 0
    hashes = [s.hash for s in store.read(first.session_id)]
    for m in sorted(held.iterdir()):
        shutil.move(m, copy / "message" / MAIN_ID / m.name)
    [second] = import_transcript(store, _session_file(copy))
    assert (second.status, second.events, second.condensations) == ("updated", 5, 1)
    assert [s.hash for s in store.read(first.session_id)][:10] == hashes
    [third] = import_transcript(store, _session_file(copy))
    assert third.status == "up to date"


def _prune_part(storage: Path, part: str, at: int) -> None:
    path = next((storage / "part").glob(f"*/{part}.json"))
    data = json.loads(path.read_text())
    data["state"]["time"]["compacted"] = at
    path.write_text(json.dumps(data))


def test_opencode_prunes_become_prunes_placed_by_their_time(
    store: EventStore, tmp_path: Path
) -> None:
    copy = _copy_storage(tmp_path)
    [first] = import_transcript(store, _session_file(copy))
    hashes = [s.hash for s in store.read(first.session_id)]
    # OpenCode pruned a call's output of the last turn after it, then (a copy imported
    # afresh) a call's output of the second turn before the third one.
    _prune_part(copy, "prt_19b76dd7148027Mx39", 1767225790000)
    [again] = import_transcript(store, _session_file(copy))
    assert (again.status, again.events) == ("updated", 1)
    assert [s.hash for s in store.read(first.session_id)][: len(hashes)] == hashes
    prune = list(store.read(first.session_id))[-1]
    assert isinstance(prune.event, Prune) and prune.event.strategy == "opencode.prune"
    [ref] = prune.event.targets
    before = store.view(first.session_id, prune.seq - 1).to_messages()
    after = store.view(first.session_id).to_messages()
    output = json.loads(next((copy / "part").glob("*/prt_19b76dd7148027Mx39.json")).read_text())[
        "state"
    ]["output"]
    assert output in [m.get("content") for m in before]
    assert output not in [m.get("content") for m in after]
    assert len(after) == len(before)

    _prune_part(copy, "prt_19b76dba00c018Lx24", 1767225700000)
    fresh = EventStore(f"sqlite:///{tmp_path / 'fresh.db'}")
    [r] = import_transcript(fresh, _session_file(copy))
    prunes = [s for s in fresh.read(r.session_id) if isinstance(s.event, Prune)]
    assert [p.event.settings["compacted"] for p in prunes] == [1767225700000, 1767225790000]
    # The earlier prune comes just before the third user message (created 1767225720000):
    # the compaction request, which its summary makes a condensation.
    [nxt_stored] = fresh.read(r.session_id, prunes[0].seq + 1, prunes[0].seq + 1)
    nxt = nxt_stored.event
    assert isinstance(nxt, Condensation)
    # The later one is last, and targets the same part (one seq later: the earlier prune).
    assert prunes[1].seq == r.head_seq
    assert [(t.seq, t.index) for t in prunes[1].event.targets] == [(ref.seq + 1, ref.index)]
    assert fresh.verify(r.session_id).ok
    fresh.close()


def test_an_assistant_message_still_streaming_waits(store: EventStore, tmp_path: Path) -> None:
    copy = _copy_storage(tmp_path)
    last = sorted((copy / "message" / MAIN_ID).glob("*.json"))[-1]
    info = json.loads(last.read_text())
    done = json.loads(json.dumps(info))
    del info["time"]["completed"], info["finish"]
    last.write_text(json.dumps(info))
    [r] = import_transcript(store, _session_file(copy))
    assert r.pending_line == 8 and r.head_seq == 12
    last.write_text(json.dumps(done))
    [again] = import_transcript(store, _session_file(copy))
    assert again.events == 3 and again.head_seq == 15


def test_a_compaction_without_summary_is_kept_as_a_custom_event(
    store: EventStore, tmp_path: Path
) -> None:
    copy = _copy_storage(tmp_path)
    msgs = sorted((copy / "message" / MAIN_ID).glob("*.json"))
    summary = json.loads(msgs[5].read_text())
    summary["error"] = {"name": "APIError", "data": {"message": "overloaded", "isRetryable": True}}
    msgs[5].write_text(json.dumps(summary))
    [r] = import_transcript(store, _session_file(copy))
    events = imported(store, r.session_id)
    assert not any(isinstance(e, Condensation) for e in events)
    names = [e.name for e in events if isinstance(e, Custom)]
    assert names == ["opencode.compaction", "opencode.error"]


def test_export_then_import_keeps_the_session_id_and_every_hash(
    store: EventStore, tmp_path: Path
) -> None:
    export_keeps_every_hash(store, SESSION, tmp_path)


def test_a_broken_message_file_is_a_clear_error_and_nothing_is_written(
    store: EventStore, tmp_path: Path
) -> None:
    copy = _copy_storage(tmp_path)
    first = sorted((copy / "message" / MAIN_ID).glob("*.json"))[0]
    first.write_text('{"id": "msg_')
    with pytest.raises(ImportFormatError, match=first.name):
        import_transcript(store, _session_file(copy))
    assert store.list_sessions(limit=None) == []


def test_cli_imports_the_storage_skipping_message_and_part_files(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EVENTSTORE_URL", raising=False)
    copy = _copy_storage(tmp_path)
    assert [p.name for p in transcripts_under(copy)] == sorted(
        [f"{MAIN_ID}.json", f"{CHILD_ID}.json"]
    )
    args = ["--db", db_url, "--tenant", f"oc-{uuid.uuid4().hex}", "import", str(copy), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert sorted(r["key"] for r in rows) == [f"opencode:{CHILD_ID}", f"opencode:{MAIN_ID}"]
    assert all(r["created"] for r in rows)
    again = json.loads(CliRunner().invoke(cli, args).output)
    assert [r["status"] for r in again] == ["up to date", "up to date"]


def test_watch_follows_messages_added_beside_the_session_file(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventstore.cli.watch import _Watcher

    monkeypatch.delenv("EVENTSTORE_URL", raising=False)
    copy = _copy_storage(tmp_path)
    msgs = sorted((copy / "message" / MAIN_ID).glob("*.json"))
    held = tmp_path / "held"
    held.mkdir()
    for m in msgs[6:]:
        shutil.move(m, held / m.name)
    args = ["--db", db_url, "--tenant", f"oc-{uuid.uuid4().hex}", "watch", "--once", "--json"]
    first = CliRunner().invoke(cli, [*args, str(copy / "session")])
    assert first.exit_code == 0, first.output
    rows = [json.loads(line) for line in first.output.splitlines()]
    assert {r["key"]: r["events"] for r in rows}[f"opencode:{MAIN_ID}"] == 11
    again = CliRunner().invoke(cli, [*args, str(copy / "session")])
    assert again.exit_code == 0 and again.output == ""
    # One watcher: the session file is untouched while its messages grow.
    store = EventStore(db_url, tenant=f"oc-{uuid.uuid4().hex}")
    watcher = _Watcher(store, [copy / "session"], None, True)
    watcher.one_pass()
    session_file = _session_file(copy)
    before = session_file.stat().st_mtime_ns
    for m in sorted(held.iterdir()):
        shutil.move(m, copy / "message" / MAIN_ID / m.name)
    watcher.one_pass()
    assert session_file.stat().st_mtime_ns == before
    head = store.get_session_by_key(f"opencode:{MAIN_ID}").head_seq
    assert head == 15
