"""Importers: agent trajectories and transcripts into sessions, and a lossless JSONL export.

Every importer works in two phases. First the whole file is read, validated and converted
into :class:`Transcript` objects (a title, metadata and a list of events); a malformed
file raises :class:`ImportFormatError` naming the file and the line or record, and
nothing has been written. Only then are sessions created and events appended, in batches,
each batch checked against the head it expects.

Formats (see :func:`detect_format`):

``eventstore``
    The JSONL written by :func:`export_jsonl`: a header line, then one line per stored
    event with its seq, id, created_at and hash. Re-importing reproduces the events and
    the hash chain exactly (the chain does not include the session id).
``openai``
    A chat transcript: a JSON list of OpenAI/litellm messages, JSONL with one message per
    line, or an object with a ``messages`` list. mini-swe-agent trajectories are this.
``swe-agent``
    A SWE-agent ``.traj`` file: its ``history`` becomes the session; ``info`` and
    ``environment`` go to the session metadata.
``openhands``
    An OpenHands event stream (a JSON list of events, or an object with ``history``), or
    resolver/evaluation output (JSONL, one run with a ``history`` per line: one session per
    run). Tool actions and their observations become assistant tool calls and tool
    results; everything else becomes a ``Custom`` event named ``openhands.<type>``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import ValidationError

from .codec import chain_hash, encode_event, new_id
from .errors import EventStoreError, InvalidEventError
from .events import (
    EVENT_ADAPTER,
    Condensation,
    Custom,
    Event,
    FilePart,
    Message,
    Part,
    Prune,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from .interop import from_openai
from .records import Session
from .store import EventStore

__all__ = [
    "EXPORT_FORMAT",
    "Format",
    "ImportFormatError",
    "Progress",
    "Transcript",
    "detect_format",
    "export_jsonl",
    "import_file",
    "import_jsonl",
    "import_transcripts",
    "load_transcripts",
]

EXPORT_FORMAT = "agent-eventstore/v1"
"""Value of ``format`` in the header line of an export."""

Format = Literal["eventstore", "openai", "swe-agent", "openhands"]
Progress = Callable[[int, int], None]
"""Called with ``(events_done, events_total)`` after every appended batch."""

DEFAULT_BATCH = 500


class ImportFormatError(InvalidEventError):
    """A file cannot be imported; the message names the file and the line or record."""


@dataclass
class Transcript:
    """One session's worth of converted events, ready to append."""

    events: list[Event]
    """The events, in order."""
    title: str | None = None
    """Session title."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Session metadata (where the events came from, run outcome, ...)."""
    user_id: str | None = None
    """Session user."""
    hashes: list[str] | None = None
    """Expected hash of each event (exports only); checked after appending."""
    payload_sizes: list[int] | None = None
    """Encoded size of each event, when already computed."""


# --------------------------------------------------------------------------- reading files


@dataclass
class _Loaded:
    path: str
    data: Any  # the parsed JSON document, or for JSONL a list of (line number, value)
    jsonl: bool


def _fail(where: str, msg: str) -> ImportFormatError:
    return ImportFormatError(f"{where}: {msg}")


def _load(path: str | Path) -> _Loaded:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(str(p), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise _fail(str(p), f"cannot read: {exc.strerror or exc}") from None
    return _parse_text(text, str(p))


def _parse_text(text: str, where: str) -> _Loaded:
    if not text.strip():
        raise _fail(where, "the file is empty")
    try:
        return _Loaded(where, json.loads(text), jsonl=False)
    except json.JSONDecodeError as whole:
        lines = text.splitlines()
        first = next((ln for ln in lines if ln.strip()), "")
        if len([ln for ln in lines if ln.strip()]) > 1 and _is_json(first):
            return _Loaded(where, _jsonl_records(lines, where), jsonl=True)
        raise _fail(
            f"{where}:{whole.lineno}", f"invalid JSON at column {whole.colno}: {whole.msg}"
        ) from None


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def _jsonl_records(lines: list[str], where: str) -> list[tuple[int, Any]]:
    out = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise _fail(f"{where}:{n}", f"invalid JSON at column {exc.colno}: {exc.msg}") from None
    return out


def _detect(loaded: _Loaded) -> Format:
    data = loaded.data
    if loaded.jsonl:
        first = data[0][1]
        if isinstance(first, dict) and first.get("format") == EXPORT_FORMAT:
            return "eventstore"
        if isinstance(first, dict) and "history" in first:
            return "openhands"
        if isinstance(first, dict) and "role" in first:
            return "openai"
        raise _fail(f"{loaded.path}:{data[0][0]}", "unrecognized JSONL record " + _keys(first))
    if isinstance(data, dict):
        if data.get("format") == EXPORT_FORMAT:
            return "eventstore"
        if isinstance(data.get("history"), list):
            return "openhands" if _looks_openhands(data["history"]) else "swe-agent"
        if isinstance(data.get("messages"), list):
            return "openai"
        raise _fail(loaded.path, "unrecognized JSON object " + _keys(data))
    if isinstance(data, list):
        return "openhands" if _looks_openhands(data) else "openai"
    raise _fail(loaded.path, f"expected a JSON list or object, got {type(data).__name__}")


def _keys(value: Any) -> str:
    if isinstance(value, dict):
        return "with keys " + ", ".join(sorted(value)[:8])
    return f"of type {type(value).__name__}"


def _looks_openhands(items: list[Any]) -> bool:
    for item in items[:5]:
        if isinstance(item, dict):
            if "role" in item:
                return False
            if "action" in item or "observation" in item:
                return True
    return False


def detect_format(path: str | Path) -> Format:
    """Guess the format of a file from its content.

    Raises:
        ImportFormatError: The file is unreadable, not JSON/JSONL, or of no known shape.
    """
    return _detect(_load(path))


# --------------------------------------------------------------------------- conversion


def load_transcripts(path: str | Path, format: Format | None = None) -> list[Transcript]:
    """Read and convert a file without touching any store.

    Args:
        path: The file.
        format: One of :data:`Format`; detected from the content when omitted.

    Raises:
        ImportFormatError: Malformed input; the message names the file and line/record.
    """
    loaded = _load(path)
    fmt = format or _detect(loaded)
    if fmt == "eventstore":
        return [_parse_export(loaded)]
    if fmt == "openai":
        return [_openai_transcript(loaded)]
    if fmt == "swe-agent":
        return [_swe_agent_transcript(loaded)]
    if fmt == "openhands":
        return _openhands_transcripts(loaded)
    raise ImportFormatError(f"{loaded.path}: unknown format {fmt!r}")


def _convert_message(raw: Any, where: str) -> Message:
    try:
        return from_openai(raw)
    except InvalidEventError as exc:
        raise _fail(where, str(exc)) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise _fail(where, f"{loc}: {err['msg']}") from None


def _openai_transcript(loaded: _Loaded) -> Transcript:
    path = loaded.path
    meta: dict[str, Any] = {"import": {"format": "openai", "file": Path(path).name}}
    title: str | None = Path(path).name
    if loaded.jsonl:
        records = [(f"{path}:{n}", raw) for n, raw in loaded.data]
    else:
        data = loaded.data
        if isinstance(data, dict):
            if not isinstance(data.get("messages"), list):
                raise _fail(path, "expected a `messages` list")
            rest = {k: v for k, v in data.items() if k != "messages"}
            if isinstance(rest.get("title"), str):
                title = rest.pop("title")
            meta.update(rest)
            data = data["messages"]
        if not isinstance(data, list):
            raise _fail(path, f"expected a list of messages, got {type(data).__name__}")
        records = [(f"{path}: message {i}", raw) for i, raw in enumerate(data)]
    events: list[Event] = [_convert_message(raw, where) for where, raw in records]
    return Transcript(events=events, title=title, metadata=meta)


def _swe_agent_transcript(loaded: _Loaded) -> Transcript:
    path, data = loaded.path, loaded.data
    if loaded.jsonl or not isinstance(data, dict) or not isinstance(data.get("history"), list):
        raise _fail(path, "a SWE-agent trajectory is a JSON object with a `history` list")
    events: list[Event] = []
    for i, raw in enumerate(data["history"]):
        where = f"{path}: history[{i}]"
        if not isinstance(raw, dict):
            raise _fail(where, f"expected a message object, got {type(raw).__name__}")
        events.extend(_convert_message(m, where) for m in _split_swe_tool(raw, where))
    meta: dict[str, Any] = {"import": {"format": "swe-agent", "file": Path(path).name}}
    for key in ("environment", "info", "replay_config"):
        if key in data:
            meta[key] = data[key]
    env = data.get("environment")
    title = Path(path).stem if not isinstance(env, str) else f"{Path(path).stem} ({env})"
    return Transcript(events=events, title=title, metadata=meta)


def _split_swe_tool(raw: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """SWE-agent tool messages list their call ids; emit one standard message per id."""
    if raw.get("role") != "tool" or "tool_call_id" in raw:
        return [raw]
    ids = raw.get("tool_call_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(x, str) for x in ids):
        raise _fail(where, "tool message without `tool_call_id` or a `tool_call_ids` list")
    base = {k: v for k, v in raw.items() if k != "tool_call_ids"}
    return [{**base, "tool_call_id": call_id} for call_id in ids]


# --------------------------------------------------------------------------- OpenHands

# Actions that are tools the model called; without tool_call_metadata (older output) they
# still pair with the observation that follows them.
_OH_TOOL_ACTIONS = {
    "run",
    "run_ipython",
    "read",
    "write",
    "edit",
    "browse",
    "browse_interactive",
    "think",
    "finish",
    "delegate",
    "call_tool_mcp",
    "mcp",
    "task_tracking",
}


def _openhands_transcripts(loaded: _Loaded) -> list[Transcript]:
    path, data = loaded.path, loaded.data
    name = Path(path).name
    if loaded.jsonl:
        out = []
        for n, run in data:
            where = f"{path}:{n}"
            if not isinstance(run, dict) or not isinstance(run.get("history"), list):
                raise _fail(where, "expected a run object with a `history` list")
            meta = {k: v for k, v in run.items() if k != "history"}
            meta["import"] = {"format": "openhands", "file": name, "line": n}
            events = _OpenHands(where).convert(run["history"])
            out.append(
                Transcript(events=events, title=_run_title(run, f"{name}:{n}"), metadata=meta)
            )
        return out
    if isinstance(data, dict):
        meta = {k: v for k, v in data.items() if k != "history"}
        history = data.get("history")
        title = _run_title(data, name)
    else:
        meta, history, title = {}, data, name
    if not isinstance(history, list):
        raise _fail(path, "expected a list of OpenHands events")
    meta["import"] = {"format": "openhands", "file": name}
    return [Transcript(events=_OpenHands(path).convert(history), title=title, metadata=meta)]


def _run_title(run: dict[str, Any], default: str) -> str:
    issue = run.get("issue")
    if isinstance(issue, dict) and issue.get("title"):
        repo = f"{issue.get('owner', '')}/{issue.get('repo', '')}".strip("/")
        return f"{repo}#{issue.get('number', '')}: {issue['title']}".strip()
    iid = run.get("instance_id")
    return str(iid) if iid else default


class _OpenHands:
    """Converts one OpenHands event list; keeps the pairing state between events."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.events: list[Event] = []
        self.by_action: dict[Any, str] = {}  # action event id -> tool call id
        self.pending: dict[str, str] = {}  # open tool call id -> tool name
        self.last_call: str | None = None  # for older output without ids or causes
        self.responses: dict[str, Message] = {}  # model response id -> assistant message

    def convert(self, history: list[Any]) -> list[Event]:
        for i, raw in enumerate(history):
            where = f"{self.where}: history[{i}]"
            if not isinstance(raw, dict):
                raise _fail(where, f"expected an event object, got {type(raw).__name__}")
            try:
                if isinstance(raw.get("action"), str):
                    self._action(raw, i, where)
                elif isinstance(raw.get("observation"), str):
                    self._observation(raw, where)
                else:
                    raise _fail(where, "an event needs an `action` or `observation` string")
            except (ValidationError, TypeError, ValueError) as exc:
                if isinstance(exc, ImportFormatError):
                    raise
                raise _fail(where, _short(exc)) from None
        return self.events

    # -- helpers

    def _time(self, raw: dict[str, Any], where: str) -> datetime | None:
        ts = raw.get("timestamp")
        if ts is None:
            return None
        if not isinstance(ts, str):
            raise _fail(where, f"timestamp: expected a string, got {type(ts).__name__}")
        try:
            value = datetime.fromisoformat(ts)
        except ValueError:
            raise _fail(where, f"timestamp: not an ISO date {ts!r}") from None
        # OpenHands writes naive UTC timestamps.
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    @staticmethod
    def _args(raw: dict[str, Any], key: str, skip: set[str]) -> dict[str, Any]:
        value = raw.get(key)
        if isinstance(value, dict):
            return value
        # Older output flattens args/extras into the event itself.
        return {k: v for k, v in raw.items() if k not in skip}

    def _custom(self, raw: dict[str, Any], kind: str, where: str) -> None:
        self.events.append(
            Custom(name=f"openhands.{kind}", data=raw, created_at=self._time(raw, where))
        )

    # -- actions

    def _action(self, raw: dict[str, Any], index: int, where: str) -> None:
        action = raw["action"]
        args = self._args(raw, "args", {"action", "id", "timestamp", "source", "message"})
        tcm = raw.get("tool_call_metadata")
        if action == "message":
            self._message(raw, args, where)
        elif action == "system":
            text = args.get("content") if isinstance(args.get("content"), str) else ""
            self._append_message(Message.system(text or raw.get("message") or ""), raw, where)
        elif isinstance(tcm, dict) or action in _OH_TOOL_ACTIONS:
            self._tool_call(raw, args, tcm if isinstance(tcm, dict) else None, index, where)
        else:
            self._custom(raw, action, where)

    def _append_message(self, msg: Message, raw: dict[str, Any], where: str) -> Message:
        msg.created_at = self._time(raw, where)
        msg.provider_metadata = {"openhands": [raw]}
        self.events.append(msg)
        return msg

    def _message(self, raw: dict[str, Any], args: dict[str, Any], where: str) -> None:
        source = raw.get("source")
        if source is None:
            # Older output has no source; the agent's messages wait for the user's reply.
            source = "agent" if args.get("wait_for_response") else "user"
        content = args.get("content", raw.get("message", ""))
        if not isinstance(content, str):
            raise _fail(where, f"args.content: expected a string, got {type(content).__name__}")
        parts: list[Part] = [TextPart(text=content)] if content else []
        urls = args.get("image_urls") or args.get("images_urls") or []
        if isinstance(urls, list):
            parts.extend(FilePart(uri=u, media_type="image/*") for u in urls if isinstance(u, str))
        role: Literal["assistant", "user"] = "assistant" if source == "agent" else "user"
        self._append_message(Message(role=role, parts=parts), raw, where)

    def _tool_call(
        self,
        raw: dict[str, Any],
        args: dict[str, Any],
        tcm: dict[str, Any] | None,
        index: int,
        where: str,
    ) -> None:
        thought = args.get("thought") if isinstance(args.get("thought"), str) else ""
        call_args = {k: v for k, v in args.items() if k != "thought"}
        response: dict[str, Any] = {}
        if tcm is not None:
            call_id, name = tcm.get("tool_call_id"), tcm.get("function_name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise _fail(where, "tool_call_metadata needs tool_call_id and function_name")
            mr = tcm.get("model_response")
            response = mr if isinstance(mr, dict) else {}
        else:
            call_id = f"openhands-{raw.get('id', index)}"
            name = raw["action"]
        choice_msg = _first_choice_message(response)
        arguments = _raw_arguments(choice_msg, call_id)
        if arguments is None:
            arguments = json.dumps(call_args, ensure_ascii=False)
        part = ToolCallPart(id=call_id, name=name, arguments=arguments)
        resp_id = response.get("id")
        group = self.responses.get(resp_id) if isinstance(resp_id, str) else None
        if group is not None:
            # Parallel calls from one model response share one assistant message.
            group.parts.append(part)
            assert group.provider_metadata is not None
            group.provider_metadata["openhands"].append(raw)
        else:
            text = (
                choice_msg.get("content") if isinstance(choice_msg.get("content"), str) else thought
            )
            parts: list[Part] = [TextPart(text=text)] if text else []
            parts.append(part)
            model = response.get("model") if isinstance(response.get("model"), str) else None
            msg = self._append_message(
                Message(role="assistant", parts=parts, model=model), raw, where
            )
            if isinstance(resp_id, str):
                self.responses[resp_id] = msg
        if "id" in raw:
            self.by_action[raw["id"]] = call_id
        self.pending[call_id] = name
        self.last_call = call_id

    # -- observations

    def _observation(self, raw: dict[str, Any], where: str) -> None:
        kind = raw["observation"]
        call_id = self._answers(raw, kind)
        if call_id is None:
            self._custom(raw, kind, where)
            return
        content = raw.get("content", "")
        if not isinstance(content, str):
            raise _fail(where, f"content: expected a string, got {type(content).__name__}")
        name = self.pending.pop(call_id)
        if self.last_call == call_id:
            self.last_call = None
        result = ToolResultPart(
            tool_call_id=call_id,
            name=name,
            output=content,
            is_error=kind == "error",
            state="error" if kind == "error" else "completed",
        )
        self._append_message(Message(role="tool", parts=[result]), raw, where)

    def _answers(self, raw: dict[str, Any], kind: str) -> str | None:
        if kind in ("null", "agent_state_changed", "recall"):
            return None
        tcm = raw.get("tool_call_metadata")
        if isinstance(tcm, dict) and tcm.get("tool_call_id") in self.pending:
            return tcm["tool_call_id"]
        cause = raw.get("cause")
        if cause is not None:
            call_id = self.by_action.get(cause)
            return call_id if call_id in self.pending else None
        if "id" not in raw and self.last_call in self.pending:
            return self.last_call
        return None


def _first_choice_message(response: dict[str, Any]) -> dict[str, Any]:
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        msg = choices[0].get("message")
        if isinstance(msg, dict):
            return msg
    return {}


def _raw_arguments(choice_msg: dict[str, Any], call_id: str) -> str | None:
    for call in choice_msg.get("tool_calls") or []:
        if isinstance(call, dict) and call.get("id") == call_id:
            fn = call.get("function")
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                return fn["arguments"]
    return None


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
    return str(exc)


# --------------------------------------------------------------------------- export format


def export_jsonl(store: EventStore, session_id: str, fp: IO[str]) -> int:
    """Write a session as JSONL: a header line, then one line per event.

    The header is ``{"format": "agent-eventstore/v1", "session": {...}}``; each event line
    holds ``seq``, ``id``, ``kind``, ``created_at``, ``hash`` and ``payload`` (the event as
    JSON). A forked session is written flattened, its inherited events included.

    Returns:
        The number of events written.
    """
    session = store.get_session(session_id)
    header = {"format": EXPORT_FORMAT, "session": session.model_dump(mode="json")}
    fp.write(json.dumps(header, ensure_ascii=True) + "\n")
    count = 0
    for stored in store.read(session_id):
        line = {
            "seq": stored.seq,
            "id": stored.id,
            "kind": stored.kind,
            "created_at": stored.created_at.isoformat(),
            "hash": stored.hash,
            "payload": EVENT_ADAPTER.dump_python(stored.event, mode="json", exclude_none=True),
        }
        # ensure_ascii keeps lone surrogates (undecodable tool output) writable as UTF-8.
        fp.write(json.dumps(line, ensure_ascii=True) + "\n")
        count += 1
    return count


def _parse_export(loaded: _Loaded) -> Transcript:
    path = loaded.path
    records = loaded.data if loaded.jsonl else [(1, loaded.data)]
    n, header = records[0]
    if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
        raise _fail(f"{path}:{n}", f"expected a header with format {EXPORT_FORMAT!r}")
    sess = header.get("session")
    if not isinstance(sess, dict):
        raise _fail(f"{path}:{n}", "header.session: expected an object")
    events: list[Event] = []
    hashes: list[str] = []
    sizes: list[int] = []
    prev: str | None = None
    for n, line in records[1:]:
        event, digest, size = _export_line(line, len(events) + 1, prev, f"{path}:{n}")
        events.append(event)
        hashes.append(digest)
        sizes.append(size)
        prev = digest
    raw_meta = sess.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    title = sess.get("title") if isinstance(sess.get("title"), str) else None
    user_id = sess.get("user_id") if isinstance(sess.get("user_id"), str) else None
    return Transcript(
        events=events,
        title=title,
        metadata=meta,
        user_id=user_id,
        hashes=hashes,
        payload_sizes=sizes,
    )


def _export_line(line: Any, seq: int, prev: str | None, where: str) -> tuple[Event, str, int]:
    if not isinstance(line, dict):
        raise _fail(where, f"expected an event object, got {type(line).__name__}")
    for key, typ in (("seq", int), ("id", str), ("kind", str), ("created_at", str), ("hash", str)):
        if not isinstance(line.get(key), typ):
            raise _fail(where, f"{key}: missing or not a {typ.__name__}")
    if line["seq"] != seq:
        raise _fail(where, f"seq: expected {seq} (events must be gapless), got {line['seq']}")
    payload = line.get("payload")
    if not isinstance(payload, dict):
        raise _fail(where, "payload: missing or not an object")
    data = {**payload, "id": line["id"], "kind": line["kind"], "created_at": line["created_at"]}
    try:
        event = EVENT_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise _fail(where, f"payload.{_short(exc)}") from None
    assert event.created_at is not None and event.id is not None
    encoded = encode_event(event)
    digest = chain_hash(prev, seq, event.id, event.kind, event.created_at, encoded)
    if digest != line["hash"]:
        raise _fail(
            where,
            f"hash mismatch for seq {seq}: the file says {line['hash'][:16]}..., the event "
            f"hashes to {digest[:16]}... (the line was edited, or an earlier one was)",
        )
    return event, digest, len(encoded.encode("utf-8"))


# --------------------------------------------------------------------------- writing


def import_transcripts(
    store: EventStore,
    transcripts: list[Transcript],
    *,
    progress: Progress | None = None,
    batch_size: int = DEFAULT_BATCH,
    session_ids: list[str | None] | None = None,
) -> list[Session]:
    """Create one session per transcript and append its events in batches.

    Every event is checked against the store's size limit before the first session is
    created, so a file that cannot be imported leaves the store untouched.

    Raises:
        ImportFormatError: An event is too large, or an imported hash differs from the
            expected one.
    """
    for t in transcripts:
        _check_sizes(store, t)
        _check_refs(t)
        if t.hashes is not None:
            _check_ids_free(store, t)
    total = sum(len(t.events) for t in transcripts)
    done = 0
    if progress:
        progress(0, total)
    sessions: list[Session] = []
    for i, t in enumerate(transcripts):
        sid = session_ids[i] if session_ids else None
        s = store.create_session(
            title=t.title, metadata=t.metadata, user_id=t.user_id, session_id=sid
        )
        head = 0
        for batch in _batches(t.events, batch_size):
            try:
                head = store.append_result(s.id, batch, expected_seq=head).head_seq
            except EventStoreError as exc:
                # Everything was validated up front, so this is the database failing (or a
                # concurrent writer); say exactly what is in the store now.
                raise ImportFormatError(
                    f"{t.title or 'import'}: appending events {head + 1}..{head + len(batch)} "
                    f"failed ({exc}); session {s.id} holds the first {head} of "
                    f"{len(t.events)} events"
                ) from exc
            done += len(batch)
            if progress:
                progress(done, total)
        if t.hashes is not None:
            _check_hashes(store, s.id, t.hashes)
        sessions.append(store.get_session(s.id))
    return sessions


def _check_sizes(store: EventStore, t: Transcript) -> None:
    sizes = t.payload_sizes or [len(encode_event(e).encode("utf-8")) for e in t.events]
    for i, size in enumerate(sizes):
        if size > store.max_event_bytes:
            raise ImportFormatError(
                f"{t.title or 'transcript'}: event {i + 1} is {size} bytes, over the store's "
                f"limit of {store.max_event_bytes} (open the store with max_event_bytes=N)"
            )


def _check_refs(t: Transcript) -> None:
    """Condensation ranges and prune targets must point back into the same transcript."""
    results: set[tuple[int, int]] = set()
    for seq, evt in enumerate(t.events, start=1):
        where = f"{t.title or 'import'}: event {seq}"
        if isinstance(evt, Message):
            results.update(
                (seq, i) for i, p in enumerate(evt.parts) if isinstance(p, ToolResultPart)
            )
        elif isinstance(evt, Condensation):
            if not 1 <= evt.forgotten_from <= evt.forgotten_to + 1 or evt.forgotten_to >= seq:
                raise ImportFormatError(
                    f"{where}: condensation range {evt.forgotten_from}..{evt.forgotten_to} "
                    "does not lie before it"
                )
        elif isinstance(evt, Prune):
            for ref in evt.targets:
                if (ref.seq, ref.index) not in results:
                    raise ImportFormatError(
                        f"{where}: prune target seq {ref.seq} part {ref.index} is not an "
                        "earlier tool result"
                    )


def _check_ids_free(store: EventStore, t: Transcript) -> None:
    """Event ids are unique across a database: refuse before writing, not halfway."""
    from sqlalchemy import select

    from .schema import events

    ids = [e.id for e in t.events if e.id]
    with store.engine.connect() as conn:
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            taken = conn.execute(select(events.c.id).where(events.c.id.in_(chunk))).first()
            if taken is not None:
                raise ImportFormatError(
                    f"{t.title or 'export'}: event id {taken.id} already exists in this "
                    "database (the export came from here, or was imported before); import "
                    "with new_ids=True to give the events fresh ids (their hashes change)"
                )


def _renumber(t: Transcript) -> Transcript:
    events = [e.model_copy(update={"id": new_id()}) for e in t.events]
    return Transcript(events=events, title=t.title, metadata=t.metadata, user_id=t.user_id)


def _check_hashes(store: EventStore, session_id: str, expected: list[str]) -> None:
    """Compare the stored head hash with the file's last hash.

    Each hash chains over the previous one, so equal heads mean every hash is equal.
    """
    if not expected:
        return
    head = len(expected)
    (stored,) = store.read(session_id, from_seq=head, to_seq=head)
    if stored.hash != expected[-1]:
        raise ImportFormatError(
            f"session {session_id}: the imported events hash to {stored.hash[:16]}... at seq "
            f"{head}, the file says {expected[-1][:16]}...; run `verify` on both sessions"
        )


def _batches(items: list[Event], size: int) -> Iterator[list[Event]]:
    for start in range(0, len(items), max(1, size)):
        yield items[start : start + size]


def import_file(
    store: EventStore,
    path: str | Path,
    format: Format | None = None,
    progress: Progress | None = None,
    *,
    batch_size: int = DEFAULT_BATCH,
    new_ids: bool = False,
) -> list[Session]:
    """Import a trajectory, transcript or export file; one session per conversation.

    Args:
        store: Where to write.
        path: The file.
        format: One of :data:`Format`; detected from the content when omitted.
        progress: Called with ``(events_done, events_total)`` after each batch.
        batch_size: Events per append.
        new_ids: For exports: give the events fresh ids (see :func:`import_jsonl`).

    Returns:
        The new sessions (most files hold one; OpenHands resolver output holds one per run).

    Raises:
        ImportFormatError: Malformed input. Nothing has been written in that case.
    """
    transcripts = load_transcripts(path, format)
    if new_ids:
        transcripts = [_renumber(t) if t.hashes is not None else t for t in transcripts]
    return import_transcripts(store, transcripts, progress=progress, batch_size=batch_size)


def import_jsonl(
    store: EventStore,
    fp: IO[str],
    *,
    session_id: str | None = None,
    new_ids: bool = False,
    progress: Progress | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> Session:
    """Import a file written by :func:`export_jsonl` as a new session.

    Event ids and timestamps are kept, so the hash chain comes out identical; each
    imported hash is checked against the file. The session gets a new id unless
    ``session_id`` is given.

    Event ids are unique per database, so an export cannot be imported back into the
    database it came from with its ids; ``new_ids=True`` assigns fresh ones (timestamps,
    kinds and payloads stay, the hashes then differ from the file's).

    Raises:
        ImportFormatError: A line is malformed, its hash does not match, or an event id
            is already taken; the message names the line and nothing is written.
    """
    where = getattr(fp, "name", None) or "<export>"
    loaded = _parse_text(fp.read(), str(where))
    transcript = _parse_export(loaded)
    if new_ids:
        transcript = _renumber(transcript)
    return import_transcripts(
        store,
        [transcript],
        progress=progress,
        batch_size=batch_size,
        session_ids=[session_id],
    )[0]
