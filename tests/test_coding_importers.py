"""Coding-agent transcripts (Claude Code, Codex CLI, Gemini CLI): import, keys, resuming,
native compaction, bad input, on SQLite and Postgres.

Every sample under ``tests/data/transcripts`` (see its PROVENANCE.md) is checked against an
independent count made here from the raw JSON lines, without the importers' code: the
tool-call and tool-result id sets, the thinking blocks and the user turns. The files under
``check/`` were not looked at while the importers were written.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import (
    Condensation,
    Custom,
    EventStore,
    Message,
    ProviderPart,
    Prune,
    ReasoningPart,
    ToolCallPart,
    ToolResultPart,
)
from eventstore.cli import cli
from eventstore.importers import (
    EMPTY_ASSISTANT_IMPORTED,
    ImportFormatError,
    detect_agent_format,
    detect_format,
    export_jsonl,
    import_jsonl,
    import_transcript,
)

DATA = Path(__file__).parent / "data" / "transcripts"
SAMPLES = sorted(
    [
        *DATA.rglob("*.jsonl"),
        *DATA.rglob("gemini-cli/*.json"),
        *DATA.rglob("cline/*/api_conversation_history.json"),
    ]
)
COMPACTED = DATA / "claude-code" / "claude-code-log-dag_compact_after_rewind.jsonl"
SIDECHAIN = DATA / "claude-code" / "claude-code-log-sidechain_integrated.jsonl"
CODEX = DATA / "codex" / "vibecodingtracker-codex.jsonl"
CLAUDE = DATA / "claude-code" / "vibecodingtracker-claude_code.jsonl"
GEMINI = DATA / "gemini-cli" / "vibecodingtracker-gemini.jsonl"
LEGACY_CODEX = (
    DATA / "codex" / "rollout-2025-08-20T13-20-47-5f0c2e1a-7d3b-4c55-9a0e-1b2c3d4e5f60.jsonl"
)


def _format_of(path: Path) -> str:
    """The format a sample is filed under: its folder, a Cline task's folder's folder."""
    return "cline" if path.name == "api_conversation_history.json" else path.parent.name


# --------------------------------------------------------------------------- independent count


def _lines(path: Path) -> list[Any]:
    if path.name == "api_conversation_history.json":  # a Cline task: a list of messages
        return [r for r in json.loads(path.read_text(encoding="utf-8")) if isinstance(r, dict)]
    if path.suffix == ".json":  # Gemini CLI's single-JSON layout: the messages are the records
        return list(json.loads(path.read_text(encoding="utf-8"))["messages"])
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return [r for r in out if isinstance(r, dict)]


def independent_count(path: Path, fmt: str) -> dict[str, Any]:
    """Calls, results, thinking blocks and user turns, read straight from the JSON."""
    calls: set[str] = set()
    results: set[str] = set()
    thinking = 0
    users = 0
    records = _lines(path)
    if fmt == "claude-code":
        for r in records:
            content = (
                (r.get("message") or {}).get("content")
                if isinstance(r.get("message"), dict)
                else None
            )
            if r.get("type") == "assistant" and isinstance(content, list):
                for b in content:
                    if isinstance(b, dict) and b.get("type") == "tool_use" and "id" in b:
                        calls.add(b["id"])
                    if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking"):
                        thinking += 1
            if (
                r.get("type") == "user"
                and isinstance(r.get("message"), dict)
                and not r.get("isCompactSummary")
            ):
                blocks = content if isinstance(content, list) else []
                ids = [
                    b["tool_use_id"]
                    for b in blocks
                    if isinstance(b, dict) and b.get("type") == "tool_result"
                ]
                results.update(ids)
                others = [
                    b for b in blocks if isinstance(b, dict) and b.get("type") != "tool_result"
                ]
                if isinstance(content, str) or others or not ids:
                    users += 1
    elif fmt == "codex":
        # The older layout: a header line without "type", then response items without an
        # envelope ("payload").
        bare = bool(records) and not {"type", "payload"} & records[0].keys()
        for r in records:
            p = r.get("payload") if r.get("type") == "response_item" else None
            if bare and "payload" not in r and "type" in r:
                p = r
            if not isinstance(p, dict):
                continue
            if p.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
                calls.add(p["call_id"])
            elif str(p.get("type", "")).endswith("_output"):
                results.add(p["call_id"])
            elif p.get("type") == "reasoning":
                thinking += 1
            elif p.get("type") == "message" and p.get("role") == "user":
                users += 1
    elif fmt == "cline":
        # Anthropic messages; with native tool calls, Cline writes each result as a
        # "[tool] Result:" text block of the next user message, answering the calls in order.
        open_calls: list[str] = []
        for r in records:
            content = r.get("content")
            blocks = (
                [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
            )
            if r.get("isSummary") or r.get("isTruncationMarker"):
                continue
            if r.get("role") == "assistant":
                open_calls = [b["id"] for b in blocks if b.get("type") == "tool_use"]
                calls.update(open_calls)
                thinking += sum(b.get("type") in ("thinking", "redacted_thinking") for b in blocks)
            elif r.get("role") == "user":
                ids = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
                texts = [b for b in blocks if b.get("type") != "tool_result"]
                if not ids and open_calls:
                    answers = [
                        b
                        for b in texts
                        if re.match(r"\[[\w-]+( for '.*?')?\] Result:", b.get("text", ""), re.S)
                    ][: len(open_calls)]
                    ids = open_calls[: len(answers)]
                    texts = [b for b in texts if not any(b is a for a in answers)]
                results.update(ids)
                open_calls = []
                if isinstance(content, str) or texts or not ids:
                    users += 1
    else:  # gemini-cli: a message written again under its id replaces the earlier one
        latest: dict[str, dict[str, Any]] = {}
        for r in records:
            if r.get("type") in ("gemini", "user") and "id" in r:
                latest[r["id"]] = r
        for r in latest.values():
            if r["type"] == "user":
                users += 1
                continue
            thinking += len(r.get("thoughts") or [])
            for c in r.get("toolCalls") or []:
                calls.add(c["id"])
                if c.get("result") is not None:
                    results.add(c["id"])
    return {"calls": calls, "results": results, "thinking": thinking, "users": users}


def imported_count(store: EventStore, session_ids: list[str]) -> dict[str, Any]:
    calls: set[str] = set()
    results: set[str] = set()
    thinking = 0
    users = 0
    for sid in session_ids:
        for stored in store.read(sid, kinds=["message"]):
            msg = stored.event
            assert isinstance(msg, Message)
            summaries = sealed = 0
            for part in msg.parts:
                if isinstance(part, ToolCallPart):
                    calls.add(part.id)
                elif isinstance(part, ToolResultPart):
                    results.add(part.tool_call_id)
                elif isinstance(part, ReasoningPart):
                    summaries += 1
                elif isinstance(part, ProviderPart) and part.item.get("type") == "reasoning":
                    sealed += 1
            # A Codex reasoning item is a provider part, with a reasoning part beside it when
            # it has a summary: one thought each.
            thinking += max(summaries, sealed)
            if msg.role == "user":
                users += 1
    return {"calls": calls, "results": results, "thinking": thinking, "users": users}


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_sample_matches_an_independent_count(store: EventStore, path: Path) -> None:
    fmt = _format_of(path)
    done = import_transcript(store, path)
    assert {r.format for r in done} == {fmt}
    expected = independent_count(path, fmt)
    got = imported_count(store, [r.session_id for r in done])
    assert got == expected
    for r in done:
        report = store.verify(r.session_id)
        assert report.ok, report.problems


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_auto_detection_agrees_with_the_folder_the_sample_is_filed_under(path: Path) -> None:
    assert detect_agent_format(path) == _format_of(path)
    assert detect_format(path) == _format_of(path)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_explicit_format_imports_what_auto_detection_imports(tmp_path: Path, path: Path) -> None:
    # Every event's time comes from the transcript, never from the import: two imports of
    # one file are the same events.
    auto = EventStore(f"sqlite:///{tmp_path / 'auto.db'}")
    explicit = EventStore(f"sqlite:///{tmp_path / 'explicit.db'}")
    done_a = import_transcript(auto, path)
    done_b = import_transcript(explicit, path, _format_of(path))
    assert [(a.key, a.events) for a in done_a] == [(b.key, b.events) for b in done_b]
    for a, b in zip(done_a, done_b, strict=True):
        assert event_payloads(auto, a.session_id) == event_payloads(explicit, b.session_id)


def event_payloads(store: EventStore, sid: str) -> list[Any]:
    """A session's events as JSON without their ids: what two imports must agree on."""
    return [s.event.model_dump(mode="json", exclude={"id"}) for s in store.read(sid)]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_view_at_head_has_every_result_after_its_call(store: EventStore, path: Path) -> None:
    for r in import_transcript(store, path):
        calls: set[str] = set()
        for item in store.view(r.session_id).items:
            for part in item.message.parts:
                if isinstance(part, ToolCallPart):
                    calls.add(part.id)
                elif isinstance(part, ToolResultPart):
                    assert part.tool_call_id in calls or _orphan_in_source(path, part.tool_call_id)


def _orphan_in_source(path: Path, call_id: str) -> bool:
    """A result whose call the file itself lacks (a fixture trimmed by its authors)."""
    return call_id not in independent_count(path, _format_of(path))["calls"]


# --------------------------------------------------------------------------- keys, resuming


def test_keys_name_the_source_session_and_reimport_adds_nothing(store: EventStore) -> None:
    [first] = import_transcript(store, CODEX)
    assert first.key == "codex:01996135-afde-7911-97f0-d863511eca56"
    assert first.status == "created" and first.events == first.head_seq > 0
    assert store.get_session_by_key(first.key).id == first.session_id
    head_hash = store.read_tail(first.session_id, 1)[0].hash
    [again] = import_transcript(store, CODEX)
    assert (again.status, again.events, again.session_id) == ("up to date", 0, first.session_id)
    assert store.read_tail(first.session_id, 1)[0].hash == head_hash


@pytest.mark.parametrize("path", [CLAUDE, CODEX, GEMINI, COMPACTED], ids=lambda p: p.name)
def test_a_longer_copy_appends_only_the_new_entries(
    store: EventStore, tmp_path: Path, path: Path
) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    copy = tmp_path / path.name
    cut = len(lines) * 2 // 3
    copy.write_text("".join(lines[:cut]), encoding="utf-8")
    [part] = import_transcript(store, copy)
    before = [(s.seq, s.hash) for s in store.read(part.session_id)]
    copy.write_text("".join(lines), encoding="utf-8")
    [grown] = import_transcript(store, copy)
    assert grown.status == "updated" and grown.session_id == part.session_id
    after = [(s.seq, s.hash) for s in store.read(part.session_id)]
    assert after[: len(before)] == before  # earlier seqs and hashes kept
    assert grown.events == len(after) - len(before) > 0
    # The same ids as a whole import, and nothing twice.
    assert imported_count(store, [part.session_id]) == independent_count(path, _format_of(path))
    [again] = import_transcript(store, copy)
    assert again.status == "up to date"


@pytest.mark.parametrize(
    "path",
    [p for p in SAMPLES if p.suffix == ".jsonl" and _format_of(p) != "aider"],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_a_file_imported_while_it_is_written_keeps_the_sources_ids_and_compactions(
    tmp_path: Path, path: Path
) -> None:
    # What `watch` does to a growing file: an import at every line of its first 20 (a Gemini
    # CLI message written again after the first import among them), then
    # the whole file. The same ids, thoughts, user turns and compactions as the source, each
    # tool call once in the view.
    fmt = _format_of(path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    expected = independent_count(path, fmt)
    compactions = len(native_compactions(path, fmt)) if fmt in ("claude-code", "codex") else 0
    copy = tmp_path / path.name
    for cut in range(1, min(len(lines), 21)):
        store = EventStore(f"sqlite:///{tmp_path / f'cut{cut}.db'}")
        copy.write_text("".join(lines[:cut]), encoding="utf-8")
        import_transcript(store, copy, final=False)
        copy.write_text("".join(lines), encoding="utf-8")
        done = import_transcript(store, copy, final=False)
        sids = [r.session_id for r in done]
        assert imported_count(store, sids) == expected, cut
        conds = [
            s
            for sid in sids
            for s in store.read(sid)
            if isinstance(s.event, Condensation) and s.event.trigger == "import"
        ]
        assert len(conds) == compactions or fmt not in ("claude-code", "codex"), cut
        for sid in sids:
            calls = [
                part.id
                for item in store.view(sid).items
                for part in item.message.parts
                if isinstance(part, ToolCallPart)
            ]
            assert len(calls) == len(set(calls)), cut
        store.close()


def test_every_event_keeps_its_source_position(store: EventStore) -> None:
    [r] = import_transcript(store, CLAUDE)
    lines = CLAUDE.read_text(encoding="utf-8").splitlines()
    uuids_seen = []
    for stored in store.read(r.session_id):
        evt = stored.event
        if isinstance(evt, Message):
            src = evt.provider_metadata["source"]
            native = evt.provider_metadata["claude-code"]
            ids = native["uuid"] if isinstance(native["uuid"], list) else [native["uuid"]]
            assert json.loads(lines[src["line"] - 1])["uuid"] == ids[0]
            uuids_seen.extend(ids)
        else:
            assert isinstance(evt, Custom)
            src = evt.data["source"]
            assert json.loads(lines[src["line"] - 1]) == evt.data["record"]
        assert src["file"] == CLAUDE.name and src["upto"] >= src["line"]
    all_uuids = {
        json.loads(x)["uuid"] for x in lines if json.loads(x)["type"] in ("user", "assistant")
    }
    assert set(uuids_seen) == all_uuids


def test_a_claude_code_session_holding_only_its_opening_snapshot_is_recognised(
    store: EventStore, tmp_path: Path
) -> None:
    # Claude Code 2.x writes a file-history-snapshot line (no sessionId) before the first
    # prompt: the file is already a Claude Code session, keyed by its name.
    source = DATA / "check" / "claude-code" / "spotter-tool_heavy.jsonl"
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    session_id = json.loads(lines[1])["sessionId"]
    copy = tmp_path / f"{session_id}.jsonl"
    copy.write_text(lines[0], encoding="utf-8")
    assert detect_agent_format(copy) == "claude-code"
    [first] = import_transcript(store, copy)
    assert first.key == f"claude-code:{session_id}" and first.events == 1
    copy.write_text("".join(lines), encoding="utf-8")
    [grown] = import_transcript(store, copy)
    assert grown.session_id == first.session_id and grown.status == "updated"
    assert imported_count(store, [first.session_id]) == independent_count(source, "claude-code")


def test_a_torn_last_line_waits_for_its_newline(store: EventStore, tmp_path: Path) -> None:
    lines = CODEX.read_text(encoding="utf-8").splitlines(keepends=True)
    copy = tmp_path / CODEX.name
    copy.write_text("".join(lines[:40]) + lines[40][:25], encoding="utf-8")
    [r] = import_transcript(store, copy)
    assert r.pending_line == 41
    held = r.head_seq
    copy.write_text("".join(lines), encoding="utf-8")
    [r2] = import_transcript(store, copy)
    assert r2.pending_line is None and r2.head_seq > held
    assert imported_count(store, [r.session_id]) == independent_count(CODEX, "codex")


def test_a_rewritten_file_is_refused_and_nothing_is_written(
    store: EventStore, tmp_path: Path
) -> None:
    lines = CODEX.read_text(encoding="utf-8").splitlines(keepends=True)
    copy = tmp_path / CODEX.name
    copy.write_text("".join(lines), encoding="utf-8")
    [r] = import_transcript(store, copy)
    copy.write_text("".join(lines[:30] + lines[35:] + lines[:5]), encoding="utf-8")
    with pytest.raises(ImportFormatError, match="rewritten"):
        import_transcript(store, copy)
    assert store.head(r.session_id) == r.head_seq


# --------------------------------------------------------------------------- compaction


def native_compactions(path: Path, fmt: str) -> list[str | None]:
    """Each native compaction's summary text, read straight from the file (``None`` when the
    file holds none: a Codex compaction made by the server, a marker whose summary line is
    missing)."""
    out: list[str | None] = []
    records = _lines(path)
    for i, r in enumerate(records):
        if fmt == "codex" and r.get("type") == "compacted":
            out.append((r.get("payload") or {}).get("message") or None)
        elif fmt == "cline" and (r.get("isSummary") or r.get("isTruncationMarker")):
            content = r.get("content")
            out.append(
                (content if isinstance(content, str) else None) if r.get("isSummary") else None
            )
        elif fmt == "claude-code" and r.get("subtype") == "compact_boundary":
            after = [x for x in records[i + 1 :] if x.get("type") in ("user", "assistant")][:1]
            text: str | None = None
            if after and after[0].get("isCompactSummary"):
                content = after[0]["message"]["content"]
                text = (
                    content
                    if isinstance(content, str)
                    else "".join(b.get("text", "") for b in content if b.get("type") == "text")
                )
            out.append(text)
    return out


@pytest.mark.parametrize(
    "path",
    [p for p in SAMPLES if _format_of(p) in ("claude-code", "codex", "cline")],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_every_native_compaction_is_one_condensation_with_its_text(
    store: EventStore, path: Path
) -> None:
    expected = native_compactions(path, _format_of(path))
    done = import_transcript(store, path)
    got = [
        s.event
        for r in done
        for s in store.read(r.session_id)
        if isinstance(s.event, Condensation) and s.event.trigger == "import"
    ]
    assert sum(r.condensations for r in done) == len(got) == len(expected)
    for cond, text in zip(got, expected, strict=True):
        if text is not None:
            assert cond.summary == text  # verbatim


def test_a_roo_code_summary_of_the_rewriting_versions_forgets_the_task_before_it(
    store: EventStore,
) -> None:
    # Roo Code 3.2x rewrote the history on condensing: [task, summary (isSummary, no
    # condenseId), the messages it kept, ...]; from then on it sent the summary and what
    # follows it, not the task.
    path = (
        DATA / "check" / "cline" / "roo-natural-already-condensed" / "api_conversation_history.json"
    )
    [r] = import_transcript(store, path)
    [cond] = [s for s in store.read(r.session_id) if isinstance(s.event, Condensation)]
    assert (cond.event.forgotten_from, cond.event.forgotten_to, cond.event.pinned) == (1, 1, [])
    head = store.view(r.session_id)
    assert head.condensation is not None and head.condensation.seq == cond.seq
    assert [i.seq for i in head.items] == [cond.seq + 1]


def test_a_claude_code_compaction_becomes_one_condensation(store: EventStore) -> None:
    [r] = import_transcript(store, COMPACTED)
    assert r.condensations == 1
    events = list(store.read(r.session_id))
    [cond] = [s for s in events if isinstance(s.event, Condensation)]
    summary_line = next(x for x in _lines(COMPACTED) if x.get("isCompactSummary"))
    native = summary_line["message"]["content"][0]["text"]
    assert cond.event.summary == native  # verbatim
    assert (cond.event.forgotten_from, cond.event.forgotten_to) == (1, cond.seq - 1)
    assert cond.event.trigger == "import"
    before = store.view(r.session_id, as_of=cond.seq - 1)
    after = store.view(r.session_id, as_of=cond.seq)
    head = store.view(r.session_id)
    assert [i.seq for i in before.items] == list(range(1, cond.seq))
    assert after.items == [] and after.condensation is not None
    assert [i.message.text for i in head.items] == ["After compaction", "Final answer"]


def test_a_claude_code_microcompaction_becomes_a_prune_of_the_results_it_cleared(
    store: EventStore, tmp_path: Path
) -> None:
    base = {"sessionId": "mc-1", "isSidechain": False, "timestamp": "2026-01-01T10:00:00Z"}

    def call(n: int) -> list[dict[str, Any]]:
        return [
            {**base, "type": "assistant", "uuid": f"a{n}", "message": {
                "id": f"msg_{n}", "role": "assistant", "content": [
                    {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {}}]}},
            {**base, "type": "user", "uuid": f"r{n}", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"out {n}"}]}},
        ]  # fmt: skip

    boundary = {**base, "type": "system", "subtype": "microcompact_boundary", "uuid": "mc",
                "content": "Context microcompacted",
                "microcompactMetadata": {"trigger": "auto", "preTokens": 90000,
                                         "tokensSaved": 12000,
                                         "compactedToolIds": ["toolu_1", "toolu_9"]}}  # fmt: skip
    first = {**base, "type": "user", "uuid": "u0", "message": {"role": "user", "content": "go"}}
    path = tmp_path / "mc-1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [first, *call(1), *call(2), boundary]))
    [r] = import_transcript(store, path)
    [prune] = [s for s in store.read(r.session_id) if isinstance(s.event, Prune)]
    # Only the result it names and the file holds (toolu_9 is unknown here): seq 3, part 0.
    assert [(t.seq, t.index) for t in prune.event.targets] == [(3, 0)]
    assert prune.event.tokens_freed == 12000 and prune.event.settings["record"] == boundary
    before = store.view(r.session_id, prune.seq - 1).to_messages()
    after = store.view(r.session_id).to_messages()
    assert before[2]["content"] == "out 1" and before[4]["content"] == "out 2"
    assert after[2]["content"] != "out 1" and after[4]["content"] == "out 2"
    assert store.verify(r.session_id).ok


def test_a_codex_rollout_of_the_older_layout_reads_its_bare_items(store: EventStore) -> None:
    # Before session_meta: a header line, {"record_type": "state"} lines, and response items
    # without an envelope or a time of their own.
    path = LEGACY_CODEX
    [r] = import_transcript(store, path)
    assert r.key == "codex:5f0c2e1a-7d3b-4c55-9a0e-1b2c3d4e5f60"
    events = [s.event for s in store.read(r.session_id)]
    customs = [e.name for e in events if isinstance(e, Custom)]
    assert customs == ["codex.session_meta", "codex.state", "codex.state", "codex.state"]
    [header] = _lines(path)[:1]
    assert all(e.created_at == datetime.fromisoformat(header["timestamp"]) for e in events)
    head = store.view(r.session_id).to_messages()
    roles = ["user", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["role"] for m in head] == roles
    calls = [p for e in events if isinstance(e, Message) for p in e.parts]
    [shell] = [p for p in calls if isinstance(p, ToolCallPart) and p.call_type == "local_shell"]
    assert json.loads(shell.arguments)["command"] == ["bash", "-lc", "ls"]


def test_a_codex_compaction_becomes_one_condensation(store: EventStore, tmp_path: Path) -> None:
    lines = CODEX.read_text(encoding="utf-8").splitlines(keepends=True)
    marker = {
        "timestamp": "2025-09-20T10:00:00.000Z",
        "type": "compacted",
        "payload": {
            "message": "Summary so far:\n- read the repo\n- fixed the bug",
            "replacement_history": [],
        },
    }
    user = {
        "timestamp": "2025-09-20T10:00:01.000Z",
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "and now?"}],
        },
    }
    copy = tmp_path / "rollout.jsonl"
    copy.write_text("".join(lines) + json.dumps(marker) + "\n" + json.dumps(user) + "\n")
    [r] = import_transcript(store, copy)
    [cond] = [s for s in store.read(r.session_id) if isinstance(s.event, Condensation)]
    assert cond.event.summary == marker["payload"]["message"]
    assert cond.event.forgotten_to == cond.seq - 1
    assert [i.message.text for i in store.view(r.session_id).items] == ["and now?"]


def test_a_server_made_codex_compaction_summarizes_its_replacement_history(
    store: EventStore, tmp_path: Path
) -> None:
    # A compaction made by the server leaves `message` empty: what Codex sends from then on
    # is the replacement history (the user's messages it kept and an encrypted item).
    lines = CODEX.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    sealed = {"type": "compaction", "encrypted_content": "gAAAAB"}
    marker = {
        "timestamp": "2025-09-20T10:00:00.000Z",
        "type": "compacted",
        "payload": {"message": "", "replacement_history": [kept, sealed]},
    }
    copy = tmp_path / "rollout.jsonl"
    copy.write_text("".join(lines) + json.dumps(marker) + "\n")
    [r] = import_transcript(store, copy)
    [cond] = [s for s in store.read(r.session_id) if isinstance(s.event, Condensation)]
    assert cond.event.summary == "go\n\n[1 encrypted compaction item, readable only by the model]"
    assert cond.event.settings["record"]["replacement_history"][1] == sealed


def test_a_compaction_marker_whose_summary_is_not_written_yet_waits(
    store: EventStore, tmp_path: Path
) -> None:
    lines = COMPACTED.read_text(encoding="utf-8").splitlines(keepends=True)
    boundary = next(i for i, x in enumerate(lines) if "compact_boundary" in x)
    copy = tmp_path / COMPACTED.name
    copy.write_text("".join(lines[: boundary + 1]), encoding="utf-8")
    [r] = import_transcript(store, copy, final=False)
    assert r.condensations == 0
    copy.write_text("".join(lines), encoding="utf-8")
    [r2] = import_transcript(store, copy, final=False)
    assert r2.condensations == 1
    conds = [s.event for s in store.read(r.session_id) if isinstance(s.event, Condensation)]
    assert len(conds) == 1 and conds[0].summary and conds[0].summary.startswith("This session")


# --------------------------------------------------------------------------- sidechains, export


def test_sidechain_messages_go_to_child_sessions(store: EventStore) -> None:
    done = import_transcript(store, SIDECHAIN)
    main = done[0]
    assert main.parent_id is None and main.key == "claude-code:88a8d761-7b9a-4bf1-a8ca-c1febe6bf358"
    children = done[1:]
    assert children and all(c.parent_id == main.session_id for c in children)
    listed = {s.id for s in store.list_sessions(parent_id=main.session_id, limit=None)}
    assert listed == {c.session_id for c in children}
    for c in children:
        assert store.get_session(c.session_id).fork_seq == 0  # shares nothing of the main log
        for stored in store.read(c.session_id):
            assert not isinstance(stored.event, Message) or stored.event.role in (
                "assistant",
                "tool",
            )
    main_ids = {
        p.id
        for s in store.read(main.session_id, kinds=["message"])
        for p in s.event.parts  # type: ignore[union-attr]
        if isinstance(p, ToolCallPart)
    }
    assert main_ids == {"toolu_01JA2mLseQCAW3MdwPE4qWEk"}
    assert [r.status for r in import_transcript(store, SIDECHAIN)] == ["up to date"] * len(done)


def test_export_then_import_keeps_the_session_id_and_every_hash(
    store: EventStore, tmp_path: Path
) -> None:
    export_keeps_every_hash(store, COMPACTED, tmp_path)


def export_keeps_every_hash(store: EventStore, transcript: Path, tmp_path: Path) -> None:
    """Import ``transcript``, export the session and import the export into another store:
    the same session id, key and every hash, so importing the transcript there again finds
    the session (nothing new), and a second import of the export is a clear error."""
    [r] = import_transcript(store, transcript)
    out = tmp_path / "export.jsonl"
    with out.open("w", encoding="utf-8") as fp:
        export_jsonl(store, r.session_id, fp)
    other = EventStore(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        with out.open(encoding="utf-8") as fp:
            copy = import_jsonl(other, fp)
        assert copy.id == r.session_id
        assert [s.hash for s in other.read(copy.id)] == [s.hash for s in store.read(r.session_id)]
        assert other.get_session_by_key(r.key).id == copy.id
        assert [x.status for x in import_transcript(other, transcript)] == ["up to date"]
    finally:
        other.close()
    # Where the transcript was imported on its own, the export's key is taken.
    third = EventStore(f"sqlite:///{tmp_path / 'third.db'}")
    try:
        [own] = import_transcript(third, transcript)
        with out.open(encoding="utf-8") as fp, pytest.raises(ImportFormatError, match="id and key"):
            import_jsonl(third, fp)
        with out.open(encoding="utf-8") as fp:
            fresh = import_jsonl(third, fp, new_id=True)
        assert fresh.id not in (r.session_id, own.session_id)
        assert fresh.key is None and third.get_session_by_key(r.key).id == own.session_id
    finally:
        third.close()


# --------------------------------------------------------------------------- bad input


def test_lines_that_are_not_records_are_kept_as_custom_events(
    store: EventStore, tmp_path: Path
) -> None:
    lines = CODEX.read_text(encoding="utf-8").splitlines(keepends=True)
    copy = tmp_path / "rollout.jsonl"
    copy.write_text(
        "".join(lines[:10])
        + "{not json\n"
        + '{"type":"brand_new","payload":{"x":1}}\n'
        + "".join(lines[10:])
    )
    [r] = import_transcript(store, copy)
    customs = Counter(s.event.name for s in store.read(r.session_id) if isinstance(s.event, Custom))
    assert customs["codex.invalid_line"] == 1 and customs["codex.brand_new"] == 1
    bad = next(
        s.event
        for s in store.read(r.session_id)
        if isinstance(s.event, Custom) and s.event.name == "codex.invalid_line"
    )
    assert bad.data["record"]["text"] == "{not json" and bad.data["source"]["line"] == 11
    assert all(i.stored.kind == "message" for i in store.view(r.session_id).items)
    assert imported_count(store, [r.session_id]) == independent_count(CODEX, "codex")


def test_a_transcript_that_carries_no_time_takes_its_files_time(tmp_path: Path) -> None:
    # A Claude Code file of summary lines only (what a resumed 1.x session leaves): no
    # record says when; its events take the file's modification time, not the import's.
    path = tmp_path / "c0ffee00-0000-4000-8000-000000000001.jsonl"
    path.write_text(json.dumps({"type": "summary", "summary": "CI", "leafUuid": "u-1"}) + "\n")
    os.utime(path, (1_750_000_000, 1_750_000_000))
    imports = []
    for name in ("a", "b"):
        store = EventStore(f"sqlite:///{tmp_path / name}.db")
        [r] = import_transcript(store, path)
        imports.append(event_payloads(store, r.session_id))
    assert imports[0] == imports[1]
    assert imports[0][0]["created_at"] == "2025-06-15T15:06:40Z"


def test_wrong_or_unknown_format_is_a_clear_error(store: EventStore, tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError, match="in the codex format, not claude-code"):
        import_transcript(store, CODEX, "claude-code")
    other = tmp_path / "notes.jsonl"
    other.write_text('{"x": 1}\n{"y": 2}\n')
    with pytest.raises(ImportFormatError, match="tried claude-code, codex, gemini-cli"):
        import_transcript(store, other)
    with pytest.raises(ImportFormatError, match="formats tried: claude-code, codex, gemini-cli"):
        detect_format(other)
    assert store.list_sessions(limit=None) == []


# --------------------------------------------------------------------------- command line


@pytest.fixture
def cli_db(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("EVENTSTORE_URL", raising=False)
    tenant = f"imp-{uuid.uuid4().hex}"

    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(cli, ["--db", db_url, "--tenant", tenant, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


def test_cli_imports_a_directory_then_reports_it_up_to_date(cli_db: Any, tmp_path: Path) -> None:
    folder = tmp_path / "projects"
    folder.mkdir()
    for p in (CLAUDE, CODEX, GEMINI):
        (folder / p.name).write_bytes(p.read_bytes())
    (folder / "notes.json").write_text('{"hello": 1}')
    first = json.loads(cli_db("import", str(folder), "--json").stdout)
    assert sorted(r["format"] for r in first) == ["claude-code", "codex", "gemini-cli"]
    assert all(r["created"] and r["status"] == "created" and r["events"] > 0 for r in first)
    assert set(first[0]) >= {
        "session_id",
        "key",
        "format",
        "events",
        "condensations",
        "created",
        "updated",
    }
    again = json.loads(cli_db("import", str(folder), "--json").stdout)
    assert [r["status"] for r in again] == ["up to date"] * 3
    text = cli_db("import", str(folder / CODEX.name)).output
    assert "up to date" in text
    assert "3 of 3 sessions ok" in cli_db("verify", "--all").output


def test_cli_refuses_an_unrecognised_file_naming_the_formats(cli_db: Any, tmp_path: Path) -> None:
    other = tmp_path / "notes.jsonl"
    other.write_text('{"x": 1}\n{"y": 2}\n')
    result = cli_db("import", str(other), code=1)
    assert "claude-code, codex, gemini-cli" in result.output
    wrong = cli_db("import", str(CODEX), "--format", "gemini-cli", code=1)
    assert "in the codex format, not gemini-cli" in wrong.output


def test_watch_once_twice_imports_once_and_follows_new_lines(cli_db: Any, tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    (folder / "2025" / "09").mkdir(parents=True)
    lines = CODEX.read_text(encoding="utf-8").splitlines(keepends=True)
    rollout = folder / "2025" / "09" / CODEX.name
    rollout.write_text("".join(lines[:50]) + lines[50][:10], encoding="utf-8")  # torn
    (folder / "2025" / "09" / COMPACTED.name).write_bytes(COMPACTED.read_bytes())
    first = [
        json.loads(x) for x in cli_db("watch", str(folder), "--once", "--json").stdout.splitlines()
    ]
    assert sorted(r["format"] for r in first) == ["claude-code", "codex"]
    codex = next(r for r in first if r["format"] == "codex")
    assert codex["pending_line"] == 51
    # A restarted watch finds everything in the store: nothing new, nothing printed.
    assert cli_db("watch", str(folder), "--once", "--json").stdout.strip() == ""
    rollout.write_text("".join(lines), encoding="utf-8")
    grown = [
        json.loads(x) for x in cli_db("watch", str(folder), "--once", "--json").stdout.splitlines()
    ]
    assert [(r["key"], r["status"]) for r in grown] == [(codex["key"], "updated")]
    assert grown[0]["head_seq"] > codex["head_seq"] and grown[0]["pending_line"] is None


def test_watch_without_paths_names_the_default_places(
    cli_db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    result = cli_db("watch", "--once", code=1)
    assert "~/.claude/projects" in result.output


def test_the_documentation_examples_run() -> None:
    page = (Path(__file__).parent.parent / "docs" / "importers-coding-agents.md").read_text()
    blocks = page.split("```python\n")[1:]
    assert blocks
    for block in blocks:
        exec(compile(block.split("```")[0], "docs/importers-coding-agents.md", "exec"), {})


def test_the_import_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "importers", "--mb", "0.3", "--no-postgres",
         "--out", str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "importers.json").read_text())
    [sqlite] = data["results"]
    assert sqlite["events"] > 0 and sqlite["reimport_events"] == 0
    stages = sqlite["stage_cpu_seconds"]
    assert set(stages) == {"parse", "convert", "encode"} and all(v > 0 for v in stages.values())
    report = (tmp_path / "IMPORTERS.md").read_text()
    assert "events/s" in report and "| sqlite | " in report.split("by stage")[1]


AIDER = DATA / "aider" / "aider-chat-history-excerpt.md"


def _aider_independent(path: Path) -> tuple[int, int]:
    """Chats and user turns of an aider history, counted with plain string tests."""
    text = path.read_text(encoding="utf-8")
    chats = sum(1 for line in text.splitlines() if line.startswith("# aider chat started at"))
    turns, previous = 0, False
    for line in text.splitlines():
        is_user = line.startswith("#### ") or line.rstrip() == "####"
        if is_user and not previous:
            first = line[5:].strip().split(" ")[0] if line[5:].strip() else ""
            if not first.startswith("/") or first in ("/ask", "/code", "/architect"):
                turns += 1
        previous = is_user
    return chats, turns


def test_aider_chats_become_one_session_each(store: EventStore, tmp_path: Path) -> None:
    assert detect_agent_format(AIDER) == "aider"
    chats, turns = _aider_independent(AIDER)
    done = import_transcript(store, AIDER)
    assert len(done) == chats
    prefix = done[0].key.rsplit("#", 1)[0]
    assert [r.key for r in done] == [f"{prefix}#{n}" for n in range(1, chats + 1)]
    assert all(r.parent_id is None for r in done)
    users = [
        s.event
        for r in done
        for s in store.read(r.session_id, kinds=["message"])
        if s.event.role == "user"  # type: ignore[union-attr]
    ]
    assert len(users) == turns
    assert [r.status for r in import_transcript(store, AIDER)] == ["up to date"] * chats
    # A longer copy of the file (another path, so other keys) resumes the same way.
    lines = AIDER.read_text(encoding="utf-8").splitlines(keepends=True)
    copy = tmp_path / "project" / ".aider.chat.history.md"
    copy.parent.mkdir()
    copy.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    first = import_transcript(store, copy)
    copy.write_text("".join(lines), encoding="utf-8")
    second = import_transcript(store, copy)
    assert len(second) == chats and len(first) < chats
    other = second[0].key.rsplit("#", 1)[0]
    assert other != prefix and [r.key for r in second] == [
        f"{other}#{n}" for n in range(1, chats + 1)
    ]
    # The same sessions as the whole file made at once.
    assert [r.head_seq for r in second] == [r.head_seq for r in done]


# Cline and Roo Code: no permissively licensed task was found, so these tasks are made here,
# in the layout the extensions write (a folder per task, an API history, UI messages).


def _task() -> list[dict[str, Any]]:
    t = 1_735_000_000_000
    return [
        {"role": "user", "ts": t, "content": [
            {"type": "text", "text": "<task>fix the bug</task>"},
        ]},
        {"role": "assistant", "ts": t + 1, "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}},
        ]},
        {"role": "user", "ts": t + 2, "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "print(1)"},
        ]},
        {"role": "assistant", "ts": t + 3, "content": [{"type": "text", "text": "Found it."}]},
        {"role": "user", "ts": t + 4, "content": [{"type": "text", "text": "go on"}]},
        {"role": "assistant", "ts": t + 5, "content": [{"type": "text", "text": "Fixed."}]},
    ]  # fmt: skip


def test_a_roo_code_condense_becomes_one_condensation(store: EventStore, tmp_path: Path) -> None:
    history = _task()
    for msg in history[1:5]:
        msg["condenseParent"] = "c-1"
    summary = "## Summary\nThe bug is in a.py; the user asked to go on."
    marker = {
        "role": "assistant",
        "ts": history[4]["ts"] + 1,
        "isSummary": True,
        "condenseId": "c-1",
    }
    history.insert(5, {**marker, "content": [{"type": "text", "text": summary}]})
    history.append({"role": "user", "ts": history[-1]["ts"] + 1, "content": "thanks"})
    folder = tmp_path / "tasks" / "task-roo-1"
    folder.mkdir(parents=True)
    (folder / "api_conversation_history.json").write_text(json.dumps(history))
    [r] = import_transcript(store, folder / "api_conversation_history.json")
    assert r.format == "cline" and r.key == "cline:task-roo-1" and r.condensations == 1
    [cond] = [s for s in store.read(r.session_id) if isinstance(s.event, Condensation)]
    assert cond.event.summary == summary
    assert (cond.event.forgotten_from, cond.event.forgotten_to, cond.event.pinned) == (2, 5, [1])
    texts = [i.message.text for i in store.view(r.session_id).items]
    assert texts == ["<task>fix the bug</task>", "Fixed.", "thanks"]
    assert [
        x.status for x in import_transcript(store, folder / "api_conversation_history.json")
    ] == ["up to date"]


def test_a_cline_truncation_becomes_a_condensation_without_summary(
    store: EventStore, tmp_path: Path
) -> None:
    history = _task()
    folder = tmp_path / "tasks" / "task-cline-1"
    folder.mkdir(parents=True)
    (folder / "api_conversation_history.json").write_text(json.dumps(history))
    ui = [
        {"ts": 1, "type": "say", "say": "api_req_started", "conversationHistoryIndex": 3},
        {"ts": 2, "type": "say", "say": "api_req_started", "conversationHistoryIndex": 4,
         "conversationHistoryDeletedRange": [2, 3]},
    ]  # fmt: skip
    (folder / "ui_messages.json").write_text(json.dumps(ui))
    [r] = import_transcript(store, folder / "api_conversation_history.json")
    [cond] = [s for s in store.read(r.session_id) if isinstance(s.event, Condensation)]
    assert cond.event.summary is None and cond.event.pinned == [1, 2]
    assert (cond.event.forgotten_from, cond.event.forgotten_to) == (3, 4)
    roles = [(i.message.role, i.message.text) for i in store.view(r.session_id).items]
    assert roles == [
        ("user", "<task>fix the bug</task>"),
        ("assistant", "Reading."),
        ("user", "go on"),
        ("assistant", "Fixed."),
    ]


def test_cline_native_tool_results_written_as_text_pair_with_their_calls(
    store: EventStore, tmp_path: Path
) -> None:
    # Cline with native tool calling keeps the reply's tool_use blocks and writes each
    # result as a text block of the next user message, in the calls' order.
    t = 1_777_000_000_000
    history = [
        {"role": "user", "ts": t, "content": [{"type": "text", "text": "<task>audit</task>"}]},
        {"role": "assistant", "ts": t + 1, "content": [
            {"type": "tool_use", "id": "tu_a", "call_id": "tu_a", "name": "search_files",
             "input": {"regex": "db[0-9]+"}},
            {"type": "tool_use", "id": "tu_b", "call_id": "tu_b", "name": "execute_command",
             "input": {"command": "ls"}},
            {"type": "tool_use", "id": "tu_c", "call_id": "tu_c", "name": "read_file",
             "input": {"path": "x.ts"}},
        ]},
        {"role": "user", "ts": t + 2, "content": [
            {"type": "text", "text": "[search_files for 'db[0-9]+'] Result: Found 1 result."},
            {"type": "text", "text": "[execute_command for 'cd app &&\nls'] Result: a.ts"},
            {"type": "text", "text": "<environment_details>cwd: /app</environment_details>"},
        ]},
        {"role": "assistant", "ts": t + 3, "content": [
            {"type": "tool_use", "id": "tu_d", "call_id": "tu_d", "name": "attempt_completion",
             "input": {"result": "done"}},
        ]},
        {"role": "user", "ts": t + 4, "content": [
            {"type": "text", "text": "[TASK RESUMPTION] This task was interrupted."},
        ]},
    ]  # fmt: skip
    folder = tmp_path / "tasks" / "task-native-1"
    folder.mkdir(parents=True)
    (folder / "api_conversation_history.json").write_text(json.dumps(history))
    [r] = import_transcript(store, folder / "api_conversation_history.json")
    results = {
        p.tool_call_id: p.output
        for s in store.read(r.session_id)
        if isinstance(s.event, Message)
        for p in s.event.parts
        if isinstance(p, ToolResultPart)
    }
    # Verbatim, in order; the third call got no result text and the last was interrupted.
    assert results == {
        "tu_a": "[search_files for 'db[0-9]+'] Result: Found 1 result.",
        "tu_b": "[execute_command for 'cd app &&\nls'] Result: a.ts",
    }
    msgs = store.view(r.session_id).to_messages()
    # The call with no result is answered as interrupted first, then the results as they came.
    assert [(m["role"], m.get("tool_call_id")) for m in msgs[1:6]] == [
        ("assistant", None), ("tool", "tu_c"), ("tool", "tu_a"), ("tool", "tu_b"), ("user", None)
    ]  # fmt: skip
    assert msgs[5]["content"] == "<environment_details>cwd: /app</environment_details>"
    assert "[TASK RESUMPTION]" in str(msgs[-1]["content"])


def _gemini_lines(*records: dict[str, Any]) -> str:
    header = {"sessionId": "gem-1", "projectHash": "p", "startTime": "2026-05-01T10:00:00Z"}
    return "".join(json.dumps(r) + "\n" for r in (header, *records))


def _gemini_turn(n: int) -> list[dict[str, Any]]:
    when = f"2026-05-01T10:{n:02d}:00Z"
    return [
        {"id": f"u{n}", "timestamp": when, "type": "user", "content": [{"text": f"ask {n}"}]},
        {"id": f"g{n}", "timestamp": when, "type": "gemini", "content": f"answer {n}",
         "toolCalls": [{"id": f"c{n}", "name": "read_file", "args": {"path": f"f{n}.py"},
                        "status": "success", "timestamp": when, "result": [
                            {"functionResponse": {"id": f"c{n}", "name": "read_file",
                                                  "response": {"output": f"body {n}"}}}]}]},
    ]  # fmt: skip


def _view_texts(store: EventStore, sid: str, at: int | None = None) -> list[str]:
    return [str(m.get("content")) for m in store.view(sid, at).to_messages()]


def test_gemini_cli_rewind_and_compression_checkpoint_become_condensations(
    store: EventStore, tmp_path: Path
) -> None:
    # Gemini CLI's JSONL recording: /rewind appends {"$rewindTo": id}; a chat compression
    # writes its summary and the model's acknowledgement as messages, then
    # {"$set": {"messages": [...]}} listing the history it now sends.
    summary = {
        "id": "s1",
        "timestamp": "2026-05-01T10:09:00Z",
        "type": "user",
        "content": [{"text": "<state_snapshot>asked 1 and 3</state_snapshot>"}],
    }
    ack = {"id": "s2", "timestamp": "2026-05-01T10:09:00Z", "type": "gemini",
           "content": "Got it. Thanks for the additional context!"}  # fmt: skip
    t1, t2, t3, t4 = (_gemini_turn(n) for n in (1, 2, 3, 4))
    path = tmp_path / "session-2026-05-01T10-00-gem1.jsonl"
    path.write_text(
        _gemini_lines(
            *t1, *t2, {"$rewindTo": "u2"}, *t3, *t4, summary, ack,
            {"$set": {"messages": [summary, ack, *t4], "lastUpdated": "2026-05-01T10:09:00Z"}},
            {"$set": {"lastUpdated": "2026-05-01T10:10:00Z"}},
        )
    )  # fmt: skip
    [r] = import_transcript(store, path)
    assert r.format == "gemini-cli" and r.condensations == 2
    conds = [s for s in store.read(r.session_id) if isinstance(s.event, Condensation)]
    rewind, compress = conds
    assert rewind.event.settings["record"] == {"$rewindTo": "u2"}
    assert compress.event.supersedes == rewind.seq
    # Before the rewind the view holds turn 2; after it, not; then turns 1, 3 and 4.
    before = _view_texts(store, r.session_id, rewind.seq - 1)
    assert "ask 2" in before and "body 2" in before
    after = _view_texts(store, r.session_id, compress.seq - 1)
    assert after == ["ask 1", "answer 1", "body 1", "ask 3", "answer 3", "body 3",
                     "ask 4", "answer 4", "body 4", summary["content"][0]["text"],
                     ack["content"]]  # fmt: skip
    # After the checkpoint: what it lists, turn 4's tool pair intact, nothing of 1 or 3.
    head = _view_texts(store, r.session_id)
    assert sorted(head) == sorted(["ask 4", "answer 4", "body 4", summary["content"][0]["text"],
                                   ack["content"]])  # fmt: skip
    msgs = store.view(r.session_id).to_messages()
    calls = [t["id"] for m in msgs for t in m.get("tool_calls") or []]
    assert calls == ["c4"] and [m.get("tool_call_id") for m in msgs if m["role"] == "tool"] == [
        "c4"
    ]
    assert store.verify(r.session_id).ok
    assert [x.status for x in import_transcript(store, path)] == ["up to date"]


def _subagent_lines(session_id: str, agent: str) -> str:
    """A Claude Code 2.x subagent transcript (``<session>/subagents/agent-<id>.jsonl``), made
    here in that layout: sidechain records carrying the main session's id and the agent's."""
    base = {"isSidechain": True, "sessionId": session_id, "agentId": agent}
    records = [
        {**base, "type": "user", "uuid": "s1", "parentUuid": None,
         "timestamp": "2025-11-19T22:53:38Z",
         "message": {"role": "user", "content": "Research it"}},
        {**base, "type": "assistant", "uuid": "s2", "parentUuid": "s1",
         "timestamp": "2025-11-19T22:53:39Z", "message": {"id": "msg_s", "role": "assistant",
         "content": [{"type": "tool_use", "id": "toolu_sub", "name": "Grep", "input": {}}]}},
        {**base, "type": "user", "uuid": "s3", "parentUuid": "s2",
         "timestamp": "2025-11-19T22:53:40Z", "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "toolu_sub", "content": "a.py:1"}]}},
    ]  # fmt: skip
    return "".join(json.dumps(r) + "\n" for r in records)


def test_claude_code_2x_subagent_files_become_child_sessions(
    store: EventStore, tmp_path: Path
) -> None:
    sid = "e9f146fa-3b20-48d0-9be4-d99ca901cae4"  # the session of CLAUDE
    project = tmp_path / "projects" / "-home-me-app"
    (project / sid / "subagents").mkdir(parents=True)
    agent_file = project / sid / "subagents" / "agent-abc.jsonl"
    agent_file.write_text(_subagent_lines(sid, "abc"))
    # The subagent's file alone first: its main session is made, empty, to hang it from.
    [main0, child0] = import_transcript(store, agent_file)
    assert main0.key == f"claude-code:{sid}" and main0.head_seq == 0
    assert child0.key == f"claude-code:{sid}/agent-abc" and child0.parent_id == main0.session_id
    assert child0.events == 3
    (project / f"{sid}.jsonl").write_bytes(CLAUDE.read_bytes())
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", store.url, "--tenant", store.tenant, "import",
                                 str(tmp_path / "projects"), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = {(r["key"], r["status"]) for r in json.loads(result.stdout)}
    assert (f"claude-code:{sid}", "updated") in rows
    assert (f"claude-code:{sid}/agent-abc", "up to date") in rows
    assert store.get_session_by_key(f"claude-code:{sid}").head_seq > 0
    calls = imported_count(store, [child0.session_id])
    assert calls["calls"] == calls["results"] == {"toolu_sub"}


def test_a_line_only_the_standard_parser_takes_is_read_all_the_same(
    store: EventStore, tmp_path: Path
) -> None:
    # A lone surrogate escape is valid JSON (a tool's undecodable output) that faster
    # parsers refuse; the store keeps such text exactly.
    line = (
        r'{"type":"response_item","payload":{"type":"message","role":"user","content":"x \ud800"}}'
    )
    copy = tmp_path / "rollout.jsonl"
    copy.write_text(CODEX.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    [r] = import_transcript(store, copy)
    last = store.read_tail(r.session_id, 1)[0].event
    assert isinstance(last, Message) and last.text == "x \ud800"


def test_a_subagent_file_hangs_from_the_session_its_folder_names(
    store: EventStore, tmp_path: Path
) -> None:
    # Records that carry the subagent's own id as sessionId: the folder still says whose.
    sid = "0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f"
    folder = tmp_path / sid / "subagents"
    folder.mkdir(parents=True)
    agent_file = folder / "agent-a0ad.jsonl"
    agent_file.write_text(_subagent_lines("agent-a0ad", "a0ad"))
    [main, child] = import_transcript(store, agent_file)
    assert main.key == f"claude-code:{sid}"
    assert child.key == f"claude-code:{sid}/agent-a0ad" and child.parent_id == main.session_id


def test_gemini_cli_model_records_with_parts_and_empty_replies(
    store: EventStore, tmp_path: Path
) -> None:
    session = {
        "sessionId": "g-1", "projectHash": "p", "startTime": "2025-12-16T23:47:00Z",
        "messages": [
            {"id": "m1", "type": "user", "content": "Run a command"},
            {"id": "m2", "type": "model", "parts": [{"text": "Captured "}, {"text": "output."}]},
            {"id": "m3", "type": "gemini", "content": ""},
            {"id": "m4", "type": "user", "parts": [{"text": "Step 1"}]},
        ],
    }  # fmt: skip
    path = tmp_path / "session-g-1.json"
    path.write_text(json.dumps(session))
    [r] = import_transcript(store, path)
    assert r.status == "created"
    events = [x.event for x in store.read(r.session_id)]
    texts = [e.text for e in events if isinstance(e, Message)]
    assert texts == ["Run a command", "Captured output.", "Step 1"]
    [empty] = [e for e in events if isinstance(e, Custom) and e.name == EMPTY_ASSISTANT_IMPORTED]
    assert empty.data["provider_metadata"]["gemini-cli"]["id"] == "m3"
    assert [m["role"] for m in store.view(r.session_id).to_messages()] == [
        "user", "assistant", "user",
    ]  # fmt: skip
