"""Importers and the JSONL export, on both backends, against the real trajectory corpus."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_files

from eventstore import (
    Condensation,
    Custom,
    EventStore,
    FilePart,
    LLMCall,
    Message,
    NotFoundError,
    PartRef,
    Prune,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    Usage,
    _sql,
    decode_tool_output,
)
from eventstore.chat import to_openai
from eventstore.codec import chain_hash, encode_event
from eventstore.events import EVENT_ADAPTER
from eventstore.importers import (
    EXPORT_FORMAT,
    ImportFormatError,
    Transcript,
    detect_format,
    export_jsonl,
    import_file,
    import_jsonl,
    import_transcripts,
    load_transcripts,
)
from eventstore.views import RENDER_VERSION

SWE = corpus_files("swe-agent/**/*.traj")
OH_LISTS = corpus_files("openhands/**/*.json")
OH_RUNS = corpus_files("openhands/**/*.jsonl")
MINI = corpus_files("mini-swe-agent/**/*.traj.json")
ALL = SWE + OH_LISTS + OH_RUNS + MINI
needs_corpus = pytest.mark.skipif(not ALL, reason="trajectory corpus not present")


def _id(p: Path) -> str:
    return f"{p.parent.name[-24:]}/{p.name}"


def _events(store: EventStore, session_id: str) -> list[Any]:
    return list(store.read(session_id))


def _assert_tool_pairs(store: EventStore, session_id: str) -> None:
    """Every result answers an earlier call; the view pairs every call with a result."""
    calls: set[str] = set()
    for stored in store.read(session_id, kinds=["message"]):
        msg = stored.event
        calls.update(c.id for c in msg.tool_calls)
        for res in msg.tool_results:
            assert res.tool_call_id in calls, f"seq {stored.seq}: result before its call"
    rendered = store.view(session_id).to_messages()
    answered = {m["tool_call_id"] for m in rendered if m["role"] == "tool"}
    for m in rendered:
        for c in m.get("tool_calls") or []:
            assert c["id"] in answered


# --------------------------------------------------------------------------- detection


@needs_corpus
def test_detect_format_on_the_corpus() -> None:
    assert {detect_format(p) for p in SWE} == {"swe-agent"}
    assert {detect_format(p) for p in OH_LISTS + OH_RUNS} == {"openhands"}
    assert {detect_format(p) for p in MINI} == {"mini-swe-agent"}


# --------------------------------------------------------------------------- SWE-agent


@pytest.mark.skipif(not SWE, reason="trajectory corpus not present")
@pytest.mark.parametrize("path", SWE, ids=_id)
def test_swe_agent_import(store: EventStore, path: Path) -> None:
    data = json.loads(path.read_text())
    history = data["history"]
    (session,) = import_file(store, path)
    assert session.head_seq == len(history)  # one tool call id per tool message here
    assert session.title and session.title.startswith(path.stem)
    assert session.metadata["import"]["format"] == "swe-agent"
    if "info" in data:
        assert session.metadata["info"]["exit_status"] == data["info"]["exit_status"]
    stored = _events(store, session.id)
    converted = 0
    for raw, ev in zip(history, stored, strict=True):
        msg = ev.event
        for key in ("agent", "message_type", "thought", "action"):
            if key in raw:
                assert msg.extra[key] == raw[key]
        if msg.extra and msg.extra.get("imported_role") == "user":
            # A text-mode observation: now the result of the action before it.
            converted += 1
            assert raw["role"] == "user" and msg.role == "tool"
            assert msg.tool_results[0].output == raw["content"]
            continue
        assert msg.role == raw["role"]
        if raw["role"] == "assistant" and raw.get("action") and not raw.get("tool_calls"):
            if msg.tool_calls:  # its output follows: the action became a tool call
                (call,) = msg.tool_calls
                assert json.loads(call.arguments) == {"command": raw["action"].strip()}
                assert call.name == raw["action"].split()[0]
            assert msg.text == raw["content"]
            continue
        if raw["role"] == "tool":
            assert msg.tool_results[0].tool_call_id == raw["tool_call_ids"][0]
            assert msg.tool_results[0].output == raw["content"]
            # Imported tool messages carry a standard tool_call_id for providers.
            assert to_openai(msg)[0]["tool_call_id"] == raw["tool_call_ids"][0]
        elif raw.get("tool_calls"):
            assert [(c.id, c.arguments) for c in msg.tool_calls] == [
                (c["id"], c["function"]["arguments"]) for c in raw["tool_calls"]
            ]
        else:
            assert msg.text == raw["content"]
            assert not msg.tool_calls
    _assert_tool_pairs(store, session.id)
    assert store.verify(session.id).ok
    text_mode = any(m.get("action") and not m.get("tool_calls") for m in history)
    if text_mode:  # most .traj files: the outputs are tool results now, so pruning can act
        assert converted > 0


def test_swe_agent_tool_message_with_several_ids(store: EventStore, tmp_path: Path) -> None:
    call = lambda i: {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}  # noqa: E731
    traj = {
        "environment": "main",
        "info": {"exit_status": "submitted"},
        "history": [
            {"role": "user", "content": "go", "agent": "main"},
            {"role": "assistant", "content": "", "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "content": "both", "tool_call_ids": ["a", "b"], "agent": "main"},
        ],
    }
    p = tmp_path / "run.traj"
    p.write_text(json.dumps(traj))
    (s,) = import_file(store, p)
    msgs = [e.event for e in _events(store, s.id)]
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "tool"]
    assert [m.tool_results[0].tool_call_id for m in msgs[2:]] == ["a", "b"]
    assert s.title == "run (main)"
    assert s.metadata["info"] == {"exit_status": "submitted"}


# --------------------------------------------------------------------------- OpenHands


def _raw_kept(store: EventStore, session_id: str) -> list[dict[str, Any]]:
    kept: list[dict[str, Any]] = []
    for stored in store.read(session_id):
        ev = stored.event
        if isinstance(ev, Custom):
            kept.append(ev.data)
        else:
            kept.extend(ev.provider_metadata["openhands"])
    return kept


def _canon(items: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(i, sort_keys=True) for i in items)


@pytest.mark.skipif(not OH_LISTS, reason="trajectory corpus not present")
@pytest.mark.parametrize("path", OH_LISTS, ids=_id)
def test_openhands_event_stream_import(store: EventStore, path: Path) -> None:
    raw = json.loads(path.read_text())
    (session,) = import_file(store, path)
    assert session.metadata["import"]["format"] == "openhands"
    # Nothing is lost: every source event is kept, as a message's metadata or a Custom.
    assert _canon(_raw_kept(store, session.id)) == _canon(raw)
    stored = _events(store, session.id)
    by_id = {e["id"]: e for e in raw}
    for ev in stored:
        evt = ev.event
        src = evt.data if isinstance(evt, Custom) else evt.provider_metadata["openhands"][0]
        # Timestamps come from the source (naive UTC).
        assert evt.created_at == datetime.fromisoformat(src["timestamp"]).replace(tzinfo=UTC)
        if isinstance(evt, Custom):
            assert evt.name == f"openhands.{src.get('action') or src.get('observation')}"
            continue
        if evt.role == "assistant" and evt.tool_calls:
            tcm = src["tool_call_metadata"]
            call = evt.tool_calls[0]
            assert (call.id, call.name) == (tcm["tool_call_id"], tcm["function_name"])
            raw_calls = tcm["model_response"]["choices"][0]["message"]["tool_calls"]
            assert call.arguments == next(
                c["function"]["arguments"] for c in raw_calls if c["id"] == call.id
            )
        if evt.role == "tool":
            res = evt.tool_results[0]
            assert res.output == src["content"]
            action = by_id[src["cause"]]
            assert res.tool_call_id == action["tool_call_metadata"]["tool_call_id"]
            assert res.is_error == (src["observation"] == "error")
        if evt.role == "user":
            assert src["source"] == "user" and evt.text == src["args"]["content"]
    _assert_tool_pairs(store, session.id)
    # A finish call has no observation: the view shows it as interrupted, not dropped.
    finishes = [e for e in raw if e.get("action") == "finish" and "tool_call_metadata" in e]
    rendered = store.view(session.id).to_messages()
    for f in finishes:
        call_id = f["tool_call_metadata"]["tool_call_id"]
        (res,) = [m for m in rendered if m.get("tool_call_id") == call_id]
        assert "interrupted" in res["content"]


@pytest.mark.skipif(not OH_RUNS, reason="trajectory corpus not present")
@pytest.mark.parametrize("path", OH_RUNS, ids=_id)
def test_openhands_resolver_output_one_session_per_run(store: EventStore, path: Path) -> None:
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    calls: list[tuple[int, int]] = []
    sessions = import_file(store, path, progress=lambda d, t: calls.append((d, t)))
    assert len(sessions) == len(runs)
    total = sum(len(r["history"]) for r in runs)
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    for run, s in zip(runs, sessions, strict=True):
        assert s.head_seq == len(run["history"])
        assert str(run["issue"]["number"]) in s.title and run["issue"]["title"] in s.title
        assert s.metadata["git_patch"] == run["git_patch"]
        assert s.metadata["success"] == run["success"]
        assert _canon(_raw_kept(store, s.id)) == _canon(run["history"])
        msgs = [e.event for e in _events(store, s.id)]
        assert msgs[0].role == "user" and msgs[0].text == run["history"][0]["content"]
        n_calls = sum(len(m.tool_calls) for m in msgs if isinstance(m, Message))
        n_obs = sum(1 for e in run["history"] if "observation" in e)
        n_results = sum(len(m.tool_results) for m in msgs if isinstance(m, Message))
        assert n_results == n_obs and n_calls >= n_obs
        _assert_tool_pairs(store, s.id)


def test_openhands_parallel_calls_share_one_assistant_message(
    store: EventStore, tmp_path: Path
) -> None:
    response = {
        "id": "resp-1",
        "model": "m",
        "choices": [
            {
                "message": {
                    "content": "two things",
                    "tool_calls": [
                        {
                            "id": "t1",
                            "type": "function",
                            "function": {"name": "a", "arguments": '{"x": 1}'},
                        },
                        {
                            "id": "t2",
                            "type": "function",
                            "function": {"name": "b", "arguments": "{}"},
                        },
                    ],
                }
            }
        ],
    }

    def action(i: int, call: str, fn: str) -> dict[str, Any]:
        tcm = {"function_name": fn, "tool_call_id": call, "model_response": response}
        return {
            "id": i,
            "timestamp": f"2025-01-01T00:00:0{i}",
            "source": "agent",
            "action": "run",
            "args": {"command": "x", "thought": "two things"},
            "tool_call_metadata": tcm,
        }

    def obs(i: int, cause: int, kind: str = "run") -> dict[str, Any]:
        return {
            "id": i,
            "timestamp": f"2025-01-01T00:00:0{i}",
            "source": "agent",
            "observation": kind,
            "cause": cause,
            "content": f"out{i}",
            "extras": {},
        }

    events = [
        {
            "id": 0,
            "timestamp": "2025-01-01T00:00:00",
            "source": "user",
            "action": "message",
            "args": {"content": "hi", "image_urls": ["https://x/i.png"]},
        },
        action(1, "t1", "a"),
        action(2, "t2", "b"),
        obs(3, 1),
        obs(4, 2, "error"),
    ]
    p = tmp_path / "events.json"
    p.write_text(json.dumps(events))
    (s,) = import_file(store, p)
    msgs = [e.event for e in _events(store, s.id)]
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "tool"]
    assert msgs[0].parts[1] == FilePart(uri="https://x/i.png", media_type="image/*")
    assert [(c.id, c.arguments) for c in msgs[1].tool_calls] == [("t1", '{"x": 1}'), ("t2", "{}")]
    assert msgs[1].text == "two things" and msgs[1].model == "m"
    assert msgs[3].tool_results[0].is_error and not msgs[2].tool_results[0].is_error


# --------------------------------------------------------------------------- OpenAI / mini


@pytest.mark.skipif(not MINI, reason="trajectory corpus not present")
@pytest.mark.parametrize("path", MINI, ids=_id)
def test_mini_swe_agent_text_mode_pairs_become_tool_calls(store: EventStore, path: Path) -> None:
    raw = json.loads(path.read_text())
    (s,) = import_file(store, path)
    assert s.head_seq == len(raw) and s.metadata["import"]["format"] == "mini-swe-agent"
    msgs = [e.event for e in _events(store, s.id)]
    observations = [m for m in raw if m["content"].lstrip().startswith("<returncode>")]
    results = [m for m in msgs if m.role == "tool"]
    assert len(results) == len(observations) > 0
    assert [r.tool_results[0].output for r in results] == [o["content"] for o in observations]
    for m, r in zip(msgs, raw, strict=True):
        assert m.text == r["content"] or m.tool_results[0].output == r["content"]
    _assert_tool_pairs(store, s.id)
    assert store.verify(s.id).ok


@pytest.mark.parametrize("shape", ["list", "jsonl", "object"])
def test_openai_transcript_shapes(store: EventStore, tmp_path: Path, shape: str) -> None:
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "u"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "r"},
        {"role": "assistant", "content": "done", "refusal": None},
    ]
    p = tmp_path / f"chat.{shape}"
    if shape == "list":
        p.write_text(json.dumps(msgs, indent=2))
    elif shape == "jsonl":
        p.write_text("\n".join(json.dumps(m) for m in msgs) + "\n")
    else:
        p.write_text(json.dumps({"title": "my chat", "model": "gpt-4o", "messages": msgs}))
    assert detect_format(p) == "openai"
    (s,) = import_file(store, p)
    assert [d for e in _events(store, s.id) for d in to_openai(e.event)] == msgs
    if shape == "object":
        assert s.title == "my chat" and s.metadata["model"] == "gpt-4o"


# --------------------------------------------------------------------------- export/import


def _rich_session(store: EventStore) -> str:
    s = store.create_session(title="rich", metadata={"k": [1, "two"]}, user_id="u1")
    t0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    ts = iter(t0 + timedelta(seconds=i) for i in range(100))
    call = ToolCallPart(id="c1", name="bash", arguments='{"cmd":  "ls"}')
    batch1: list[Any] = [
        Message.system("sys \x00 nul"),
        Message.user("fix it ✓"),
        Message(
            role="assistant",
            parts=[ReasoningPart(text="hmm", signature="s"), TextPart(text="ok"), call],
            model="gpt-4o",
            extra={"refusal": None},
        ),
        Message.tool("c1", decode_tool_output(b"bad \xff\xfe bytes\n" * 50), name="bash"),
        Message(
            role="user",
            parts=[FilePart(data=b"\x89PNG\x00", media_type="image/png")],
            content_list=True,
        ),
        Custom(name="app.note", data={"a": [1, None, "x"]}),
    ]
    for e in batch1:
        e.created_at = next(ts)
    store.append(s.id, batch1)
    store.append(
        s.id, [Prune(targets=[PartRef(seq=4, index=0)], strategy="test", created_at=next(ts))]
    )
    store.append(
        s.id,
        [
            Condensation(
                forgotten_from=3,
                forgotten_to=5,
                summary="earlier work",
                pinned=[1, 2],
                condenser="test",
                created_at=next(ts),
            ),
        ],
    )
    fp = store.view(s.id).fingerprint()
    store.append(
        s.id,
        [
            LLMCall(
                model="gpt-4o",
                view_seq=8,
                fingerprint=fp,
                usage=Usage(prompt_tokens=5),
                render_options={"render_version": RENDER_VERSION},
            ),
            Message.assistant("after"),
        ],
    )
    assert store.verify(s.id).ok
    return s.id


def _same_events(a: EventStore, sa: str, b: EventStore, sb: str) -> None:
    ea, eb = _events(a, sa), _events(b, sb)
    assert len(ea) == len(eb) > 0
    for x, y in zip(ea, eb, strict=True):
        assert (x.seq, x.id, x.kind, x.created_at, x.hash) == (
            y.seq,
            y.id,
            y.kind,
            y.created_at,
            y.hash,
        )
        assert x.event == y.event
        assert encode_event(x.event) == encode_event(y.event)


def test_export_import_round_trip_is_exact(store: EventStore, tmp_path: Path) -> None:
    src = EventStore(f"sqlite:///{tmp_path / 'src.db'}")
    sid = _rich_session(src)
    buf = io.StringIO()
    assert export_jsonl(src, sid, buf) == 10
    text = buf.getvalue()
    header = json.loads(text.splitlines()[0])
    assert header["format"] == EXPORT_FORMAT and header["session"]["id"] == sid

    imported = import_jsonl(store, io.StringIO(text))
    assert imported.id == sid  # the session keeps its id, as its events keep theirs
    assert (imported.title, imported.metadata, imported.user_id) == (
        "rich",
        {"k": [1, "two"]},
        "u1",
    )
    _same_events(src, sid, store, imported.id)
    assert store.verify(imported.id).ok
    assert store.view(imported.id).to_messages() == src.view(sid).to_messages()
    for seq in (4, 7, 8, 10):
        assert (
            store.view(imported.id, as_of=seq).to_messages()
            == src.view(sid, as_of=seq).to_messages()
        )

    # And back again, from this backend into a new SQLite file, via a file and import_file.
    path = tmp_path / "again.jsonl"
    with path.open("w", encoding="utf-8") as fp:
        export_jsonl(store, imported.id, fp)
    dest = EventStore(f"sqlite:///{tmp_path / 'dest.db'}")
    (again,) = import_file(dest, path)
    assert again.id == sid
    _same_events(store, imported.id, dest, again.id)
    assert dest.verify(sid).ok
    dest.close()
    src.close()


def test_import_into_the_source_database_needs_new_ids(store: EventStore, tmp_path: Path) -> None:
    sid = _rich_session(store)
    path = tmp_path / "x.jsonl"
    with path.open("w", encoding="utf-8") as fp:
        export_jsonl(store, sid, fp)
    before = len(store.list_sessions(limit=None))
    fresh = store.with_tenant(f"t-{uuid.uuid4().hex}")
    with pytest.raises(ImportFormatError, match="already exists.*new_ids=True"):
        import_file(fresh, path)
    assert len(store.list_sessions(limit=None)) == before and fresh.list_sessions() == []
    (copy,) = import_file(fresh, path, new_ids=True)
    a, b = _events(store, sid), _events(fresh, copy.id)
    assert [(x.seq, x.kind, x.created_at) for x in a] == [(y.seq, y.kind, y.created_at) for y in b]
    assert all(x.id != y.id and x.hash != y.hash for x, y in zip(a, b, strict=True))
    assert [encode_event(x.event) for x in a] == [encode_event(y.event) for y in b]
    assert fresh.verify(copy.id, fingerprints=True).ok
    assert fresh.view(copy.id).to_messages() == store.view(sid).to_messages()


def test_export_of_a_fork_imports_flat_with_the_same_hashes(
    store: EventStore, tmp_path: Path
) -> None:
    src = EventStore(f"sqlite:///{tmp_path / 'src.db'}")
    sid = _rich_session(src)
    fork = src.fork(sid, 6, title="fork")
    src.append(fork.id, [Message.user("on the fork")])
    buf = io.StringIO()
    export_jsonl(src, fork.id, buf)
    flat_id = str(uuid.uuid4())
    flat = import_jsonl(store, io.StringIO(buf.getvalue()), session_id=flat_id)
    assert flat.id == flat_id and flat.parent_id is None and flat.head_seq == 7
    _same_events(src, fork.id, store, flat.id)
    assert store.view(flat.id).to_messages() == src.view(fork.id).to_messages()
    src.close()


@needs_corpus
def test_corpus_export_import_round_trip(store: EventStore, tmp_path: Path) -> None:
    src = EventStore(f"sqlite:///{tmp_path / 'src.db'}")
    for path in ALL:
        for s in import_file(src, path):
            buf = io.StringIO()
            export_jsonl(src, s.id, buf)
            back = import_jsonl(store, io.StringIO(buf.getvalue()))
            _same_events(src, s.id, store, back.id)
            assert store.view(back.id).to_messages() == src.view(s.id).to_messages()
    src.close()


def test_import_appends_in_batches_with_progress(store: EventStore, tmp_path: Path) -> None:
    src = EventStore(f"sqlite:///{tmp_path / 'src.db'}")
    s = src.create_session()
    src.append(s.id, [Message.user(f"m{i}") for i in range(23)])
    buf = io.StringIO()
    export_jsonl(src, s.id, buf)
    seen: list[tuple[int, int]] = []
    back = import_jsonl(
        store, io.StringIO(buf.getvalue()), batch_size=5, progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(0, 23), (5, 23), (10, 23), (15, 23), (20, 23), (23, 23)]
    _same_events(src, s.id, store, back.id)
    src.close()


# --------------------------------------------------------------------------- bad input


def _no_new_sessions(store: EventStore, before: int) -> None:
    assert len(store.list_sessions(limit=None)) == before


def _export_text(store: EventStore) -> str:
    s = store.create_session(title="src")
    store.append(s.id, [Message.user(f"m{i}") for i in range(6)])
    buf = io.StringIO()
    export_jsonl(store, s.id, buf)
    return buf.getvalue()


@pytest.mark.parametrize(
    "name, content, pattern",
    [
        (
            "trunc.json",
            '[\n  {"role": "user",\n   "content": "hi"},\n  {"role": "assi',
            r"trunc\.json:4",
        ),
        ("one.json", '{"history": [{"role": "user", "content": "x"}', r"one\.json:1"),
        (
            "mid.jsonl",
            '{"role":"user","content":"a"}\n{"role":"user","content":"b"}\n'
            '{"role": "user", "content": \n{"role":"user","content":"d"}\n',
            r"mid\.jsonl:3",
        ),
        (
            "types.json",
            json.dumps([{"role": "user", "content": "a"}, {"role": 5}]),
            r"message 1.*role",
        ),
        ("notlist.json", json.dumps({"messages": "nope"}), r"notlist\.json.*messages"),
        ("scalar.json", "42", r"scalar\.json"),
        ("empty.json", "  \n", r"empty\.json.*empty"),
        (
            "swe.traj",
            json.dumps(
                {"history": [{"role": "user", "content": "a"}, {"role": "tool", "content": "x"}]}
            ),
            r"swe\.traj: history\[1\].*tool_call",
        ),
        (
            "oh.json",
            json.dumps(
                [
                    {"id": 0, "action": "message", "source": "user", "args": {"content": "a"}},
                    {"id": 1, "action": "run", "timestamp": 17},
                ]
            ),
            r"oh\.json: history\[1\].*timestamp",
        ),
        (
            "ohruns.jsonl",
            json.dumps({"history": []}) + "\n" + json.dumps({"history": 3}) + "\n",
            r"ohruns\.jsonl:2",
        ),
        (
            "ohcontent.json",
            json.dumps(
                [
                    {
                        "id": 1,
                        "action": "run",
                        "args": {"command": "ls"},
                        "tool_call_metadata": {"tool_call_id": "c", "function_name": "bash"},
                    },
                    {"id": 2, "observation": "run", "cause": 1, "content": ["not", "text"]},
                ]
            ),
            r"ohcontent\.json: history\[1\].*content",
        ),
    ],
)
def test_malformed_files_name_the_place_and_write_nothing(
    store: EventStore, tmp_path: Path, name: str, content: str, pattern: str
) -> None:
    before = len(store.list_sessions(limit=None))
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(ImportFormatError, match=pattern):
        import_file(store, p)
    _no_new_sessions(store, before)


def test_malformed_export_lines_write_nothing(store: EventStore, tmp_path: Path) -> None:
    text = _export_text(store)
    before = len(store.list_sessions(limit=None))
    lines = text.splitlines()

    def attempt(new_lines: list[str], pattern: str) -> None:
        p = tmp_path / "bad.jsonl"
        p.write_text("\n".join(new_lines) + "\n")
        with pytest.raises(ImportFormatError, match=pattern):
            import_file(store, p)
        with p.open() as fp, pytest.raises(ImportFormatError, match=pattern):
            import_jsonl(store, fp)
        _no_new_sessions(store, before)

    attempt(lines[:4] + ['{"seq": 4, "id": '] + lines[5:], r"bad\.jsonl:5")  # broken JSON
    tampered = json.loads(lines[3])
    tampered["payload"]["parts"][0]["text"] = "edited"
    attempt(lines[:3] + [json.dumps(tampered)] + lines[4:], r"bad\.jsonl:4.*hash mismatch")
    attempt(lines[:3] + lines[4:], r"bad\.jsonl:4.*seq: expected 3")  # a gap
    wrong = json.loads(lines[2])
    wrong["payload"]["role"] = "robot"
    attempt(lines[:2] + [json.dumps(wrong)] + lines[3:], r"bad\.jsonl:3.*payload")
    no_hash = json.loads(lines[6])
    del no_hash["hash"]
    attempt(lines[:6] + [json.dumps(no_hash)], r"bad\.jsonl:7.*hash")
    attempt(['{"format": "other"}'] + lines[1:], r"bad\.jsonl")


def test_oversized_event_is_rejected_before_anything_is_written(tmp_path: Path) -> None:
    small = EventStore(f"sqlite:///{tmp_path / 's.db'}", max_event_bytes=2000)
    p = tmp_path / "big.json"
    p.write_text(
        json.dumps([{"role": "user", "content": "a"}, {"role": "user", "content": "x" * 5000}])
    )
    with pytest.raises(ImportFormatError, match="event 2 is .* bytes"):
        import_file(small, p)
    assert small.list_sessions(limit=None) == []
    small.close()


def test_load_transcripts_does_not_touch_a_store(tmp_path: Path) -> None:
    p = tmp_path / "c.json"
    p.write_text(json.dumps([{"role": "user", "content": "a"}]))
    (t,) = load_transcripts(p)
    assert [type(e).__name__ for e in t.events] == ["Message"] and t.title == "c.json"
    assert t.metadata["import"] == {"format": "openai", "file": "c.json"}


def test_bad_references_are_refused_before_any_session(store: EventStore) -> None:
    before = len(store.list_sessions(limit=None))
    prune = Transcript(
        events=[Message.user("a"), Prune(targets=[PartRef(seq=1, index=0)])], title="p"
    )
    with pytest.raises(ImportFormatError, match="p: event 2: prune target seq 1 part 0"):
        import_transcripts(store, [Transcript(events=[Message.user("ok")]), prune])
    cond = Transcript(events=[Message.user("a"), Condensation(forgotten_from=1, forgotten_to=2)])
    with pytest.raises(ImportFormatError, match="condensation range 1..2"):
        import_transcripts(store, [cond])
    _no_new_sessions(store, before)


# --------------------------------------------------------------------------- atomic imports


def rehash(lines: list[str]) -> list[str]:
    """Export lines with the hash chain recomputed, as a careful forger would."""
    out, prev = [lines[0]], None
    for line in lines[1:]:
        rec = json.loads(line)
        payload = {**rec["payload"], "id": rec["id"], "kind": rec["kind"]}
        evt = EVENT_ADAPTER.validate_python({**payload, "created_at": rec["created_at"]})
        rec["hash"] = prev = chain_hash(
            prev, rec["seq"], rec["id"], rec["kind"], evt.created_at, encode_event(evt)
        )
        out.append(json.dumps(rec))
    return out


def _with_id(msg: Message) -> Message:
    return msg.model_copy(update={"id": f"e-{uuid.uuid4().hex}"})


def _nothing_left(store: EventStore, sessions_before: int, event_ids: list[str]) -> None:
    assert len(store.list_sessions(limit=None)) == sessions_before
    with store.engine.connect() as conn:
        assert _sql.taken_event_ids(conn, event_ids) == []


def test_a_repeated_event_id_late_in_the_file_leaves_nothing(
    store: EventStore, tmp_path: Path
) -> None:
    src = EventStore(f"sqlite:///{tmp_path / 'src.db'}")
    s = src.create_session(title="long")
    src.append(s.id, [Message.user(f"m{i}") for i in range(600)])
    buf = io.StringIO()
    export_jsonl(src, s.id, buf)
    lines = buf.getvalue().splitlines()
    dup = json.loads(lines[550])
    dup["id"] = json.loads(lines[3])["id"]
    lines = rehash(lines[:550] + [json.dumps(dup)] + lines[551:])
    path = tmp_path / "dup.jsonl"
    path.write_text("\n".join(lines) + "\n")
    ids = [json.loads(line)["id"] for line in lines[1:]]
    before = len(store.list_sessions(limit=None))
    with pytest.raises(ImportFormatError, match="event 550 repeats the id .* event 3"):
        import_file(store, path)
    _nothing_left(store, before, ids)
    # Through a transcript too (a converted trajectory carries ids the same way).
    events = [_with_id(Message.user(f"m{i}")) for i in range(600)]
    events[549] = Message.user("again").model_copy(update={"id": events[2].id})
    with pytest.raises(ImportFormatError, match="event 550 repeats"):
        import_transcripts(store, [Transcript(events=events, title="t")])
    _nothing_left(store, before, [e.id for e in events if e.id])
    src.close()


def test_a_failing_head_hash_leaves_nothing(store: EventStore, tmp_path: Path) -> None:
    src = EventStore(f"sqlite:///{tmp_path / 'src.db'}")
    s = src.create_session()
    src.append(s.id, [Message.user(f"m{i}") for i in range(30)])
    stored = list(src.read(s.id))
    hashes = [e.hash for e in stored]
    hashes[-1] = "f" * 64
    t = Transcript(events=[e.event for e in stored], hashes=hashes, session_id=s.id)
    before = len(store.list_sessions(limit=None))
    with pytest.raises(ImportFormatError, match="hash to .* at seq 30.*nothing was imported"):
        import_transcripts(store, [t], batch_size=7)  # four batches in, then the check
    _nothing_left(store, before, [e.id for e in stored])
    with pytest.raises(NotFoundError):
        store.get_session(s.id)
    src.close()


def test_an_import_interrupted_between_batches_leaves_nothing(store: EventStore) -> None:
    ok = Transcript(events=[Message.user("first file")], title="ok")
    events = [_with_id(Message.user(f"m{i}")) for i in range(50)]
    before = len(store.list_sessions(limit=None))

    def stop(done: int, total: int) -> None:
        if done >= 30:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_transcripts(store, [ok, Transcript(events=events)], batch_size=10, progress=stop)
    _nothing_left(store, before, [e.id for e in events if e.id])


def test_export_keeps_the_session_id_and_a_collision_is_a_clear_error(
    store: EventStore, tmp_path: Path
) -> None:
    src = EventStore(f"sqlite:///{tmp_path / 'src.db'}")
    sid = _rich_session(src)
    path = tmp_path / "x.jsonl"
    with path.open("w", encoding="utf-8") as fp:
        export_jsonl(src, sid, fp)
    (kept,) = import_file(store, path)
    assert kept.id == sid and store.verify(sid).ok
    _same_events(src, sid, store, sid)
    # The same file again: the events' ids are taken (and so is the session's).
    with pytest.raises(ImportFormatError, match="new_ids=True"):
        import_file(store, path)
    # A session of that id whose events are elsewhere: the session id is the conflict.
    other = EventStore(f"sqlite:///{tmp_path / 'other.db'}", tenant=store.tenant)
    other.create_session(session_id=sid, title="unrelated")
    with pytest.raises(ImportFormatError, match=f"{sid}.*is taken.*new_id=True"):
        import_file(other, path)
    assert other.head(sid) == 0
    (fresh,) = import_file(other, path, new_id=True)
    assert fresh.id != sid and other.verify(fresh.id).ok
    _same_events(src, sid, other, fresh.id)
    with path.open() as fp:
        renamed = import_jsonl(other, fp, new_ids=True)
    assert renamed.id not in (sid, fresh.id)
    other.close()
    src.close()


_KILL_SCRIPT = """
import os, signal, sys
from eventstore import EventStore
from eventstore.importers import import_file

store = EventStore(sys.argv[1], tenant=sys.argv[2], upgrade=True)

def progress(done, total):
    if done >= 1200:
        os.kill(os.getpid(), signal.SIGKILL)

import_file(store, sys.argv[3], progress=progress, batch_size=200)
print("finished")
"""


def test_kill_9_during_a_large_import_leaves_no_partial_session(
    db_url: str, tmp_path: Path
) -> None:
    src = EventStore(f"sqlite:///{tmp_path / 'src.db'}")
    s = src.create_session(title="big")
    for start in range(0, 3000, 500):
        src.append(s.id, [Message.user(f"message {start + i} " + "x" * 200) for i in range(500)])
    path = tmp_path / "big.jsonl"
    with path.open("w", encoding="utf-8") as fp:
        export_jsonl(src, s.id, fp)
    ids = [e.id for e in src.read(s.id)]
    src.close()
    tenant = f"t-{uuid.uuid4().hex}"
    script = tmp_path / "kill_import.py"
    script.write_text(_KILL_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), db_url, tenant, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "finished" not in proc.stdout
    store = EventStore(db_url, tenant=tenant)
    try:
        assert store.list_sessions(limit=None) == []
        with store.engine.connect() as conn:
            assert _sql.taken_event_ids(conn, ids) == []
        # And the same file imports whole afterwards.
        (done,) = import_file(store, path)
        assert done.id == s.id and done.head_seq == 3000 and store.verify(s.id).ok
    finally:
        store.close()


@pytest.mark.parametrize("where", ["file", "payload"])
def test_deeply_nested_json_is_a_format_error_not_a_recursion_error(
    store: EventStore, tmp_path: Path, where: str
) -> None:
    import io

    from eventstore.importers import ImportFormatError, import_file, import_jsonl

    deep = "[" * 100_000 + "]" * 100_000
    if where == "file":
        text = deep
    else:  # a valid export whose one event carries a deeply nested custom value
        header = json.dumps({"format": "agent-eventstore/v1", "session": {}})
        line = (
            '{"seq": 1, "id": "e1", "kind": "custom", "created_at": "2026-01-01T00:00:00+00:00",'
            ' "hash": "x", "payload": {"name": "n", "data": {"v": ' + deep + "}}}"
        )
        text = header + "\n" + line + "\n"
    path = tmp_path / "deep.jsonl"
    path.write_text(text)
    with pytest.raises(ImportFormatError, match="nested too deeply"):
        import_file(store, path)
    with pytest.raises(ImportFormatError, match="nested too deeply"):
        import_jsonl(store, io.StringIO(text))
    assert store.list_sessions() == []
