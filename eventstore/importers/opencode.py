"""OpenCode sessions: its JSON storage, and the JSON ``opencode export`` writes.

OpenCode (before its SQLite store) keeps each session in three kinds of small JSON files
under ``~/.local/share/opencode/storage/``: ``session/<projectID>/<sessionID>.json`` (the
session: ``id``, ``title``, ``directory``, ``time``, ``parentID`` for a subagent's session),
``message/<sessionID>/<messageID>.json`` (a message's ``info``: role, times, model, tokens)
and ``part/<messageID>/<partID>.json`` (its content, one part per file). Ids grow with time,
so the files sorted by name are in order. ``opencode export <sessionID>`` writes the same
data as one object: ``{"info": <session>, "messages": [{"info", "parts"}, ...]}``.

Import the session file (or the export): each message with its parts is one record, the
n-th message counting as line n. A user message's ``text`` parts become its text (parts
marked ``ignored`` were never sent, and become provider parts, as do file, agent and
subtask parts); its media files become file parts. An assistant message is cut into its
steps (``step-start`` parts), as OpenCode sends it: each step is one assistant message
(``reasoning`` parts, ``text``, and each ``tool`` part's call with its ``callID``) followed by
a tool message holding the results of the step's calls (``completed`` output, ``error``
text, or interrupted for a call still ``pending``/``running``). ``step-finish`` (tokens,
cost), ``patch``, ``snapshot`` and ``retry`` parts are kept in the message's provider
metadata with the message's own ``info``; a failed assistant message OpenCode left out of
what it sent next (any error but an abort after some output) is kept as a ``Custom`` event
``opencode.error``.

A native compaction is a user message holding a ``compaction`` part, answered by an
assistant message with ``summary: true``: from then on OpenCode sends that question and the
summary and what follows, nothing before (or, when the part names a ``tail_start_id``, the
messages from that one on too). The pair becomes one ``Condensation`` whose summary is the
summary's text verbatim and whose forgotten range is everything before the compaction
(before the kept tail). A compaction whose summary failed or never came is kept as a
``Custom`` event ``opencode.compaction``: OpenCode went on sending everything.

OpenCode's prune (it clears old tool output after a turn, stamping each cleared tool part's
``state.time.compacted``) becomes one ``Prune`` per stamp, of those results, placed before the
first message created after it (or last): the view after it shows them cleared.

The session's key is ``opencode:<sessionID>``. A message is written as it streams: a last
assistant message not completed yet (no ``time.completed``, no error) is left for a later
import. The export is one JSON document, read whole; the storage is read one file at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..events import (
    Condensation,
    FilePart,
    Message,
    Part,
    PartRef,
    ProviderPart,
    Prune,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ._agent import Converter, Torn, short_title
from ._loading import format_error

FORMAT = "opencode"
_KEPT_PARTS = ("step-finish", "patch", "snapshot", "retry")
"""Parts that are no content the model saw: kept in the message's provider metadata."""


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise format_error(str(path), f"cannot read an OpenCode file: {exc}") from None


def looks_session_info(value: Any) -> bool:
    """Whether a JSON value is an OpenCode session's info (a storage session file)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("id"), str)
        and isinstance(value.get("projectID"), str)
        and isinstance(value.get("time"), dict)
    )


def looks_export(value: Any) -> bool:
    """Whether a JSON value is an ``opencode export``."""
    return (
        isinstance(value, dict)
        and looks_session_info(value.get("info"))
        and isinstance(value.get("messages"), list)
    )


def opencode_kind(path: str | Path) -> str | None:
    """``"storage"`` for a storage session file, ``"export"`` for an export, else ``None``.

    Only ``.json`` files are opened; a storage session file is recognised by its place
    (``session/<project>/``) before its content is read, and an export by its first bytes."""
    p = Path(path)
    if p.suffix != ".json":
        return None
    if p.parent.parent.name == "session":
        try:
            return "storage" if looks_session_info(json.loads(p.read_bytes())) else None
        except (OSError, ValueError):
            return None
    try:
        with p.open("rb") as fp:
            head = fp.read(4096)
    except OSError:
        return None
    if b'"info"' not in head or b'"projectID"' not in head:
        return None
    try:
        return "export" if looks_export(json.loads(p.read_bytes())) else None
    except (OSError, ValueError):
        return None


def storage_message_files(path: Path) -> bool:
    """Whether ``path`` is one of a storage's message or part files (not a session)."""
    parts = path.parts
    return (
        len(parts) >= 3 and parts[-3] in ("message", "part") and path.name[:4] in ("msg_", "prt_")
    )


def session_info(path: str | Path) -> dict[str, Any]:
    """The session's info: the storage session file, or an export's ``info``."""
    p = Path(path)
    data = _load(p)
    if looks_session_info(data):
        return dict(data)
    if looks_export(data):
        return dict(data["info"])
    raise format_error(str(p), "expected an OpenCode session file or export")


def _storage_messages(path: Path, session_id: str) -> Iterator[dict[str, Any]]:
    root = path.parent.parent.parent
    folder = root / "message" / session_id
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    for file in files:
        info = _load(file)
        if not isinstance(info, dict) or not isinstance(info.get("id"), str):
            raise format_error(str(file), "expected an OpenCode message with an id")
        pdir = root / "part" / info["id"]
        parts = [_load(f) for f in sorted(pdir.glob("*.json"))] if pdir.is_dir() else []
        yield {"info": info, "parts": parts}


def opencode_records(path: str | Path, counter: list[int]) -> Iterator[tuple[int, Any] | Torn]:
    """The session's messages as records numbered from 1 (each ``{"info", "parts"}``); a
    last assistant message still streaming is :class:`Torn`."""
    p = Path(path)
    data = _load(p)
    if looks_export(data):
        messages: Iterator[Any] = iter(data["messages"])
    elif looks_session_info(data):
        messages = _storage_messages(p, data["id"])
    else:
        raise format_error(str(p), "expected an OpenCode session file or export")
    yield from numbered(messages)
    counter[0] = p.stat().st_size


def numbered(messages: Iterator[Any]) -> Iterator[tuple[int, Any] | Torn]:
    """Messages (``{"info", "parts"}``, from any of OpenCode's stores) as records numbered
    from 1; a last assistant message still streaming is :class:`Torn`."""
    previous: Any = None
    n = 0
    for message in messages:
        if n:
            yield n, previous
        n += 1
        previous = message
    if n:
        yield (Torn(n) if _streaming(previous) else (n, previous))


def storage_stamp(path: str | Path) -> int:
    """When a storage session last changed: its session file stays as it is while messages
    and parts are added beside it, so the newest of the message folder, the last message
    and that message's part folder (a new file changes its folder's time) says it grew."""
    p = Path(path)
    root = p.parent.parent.parent
    folder = root / "message" / p.stem
    newest = 0
    try:
        newest = folder.stat().st_mtime_ns
        last = max(folder.glob("*.json"), default=None)
        if last is not None:
            newest = max(
                newest, last.stat().st_mtime_ns, (root / "part" / last.stem).stat().st_mtime_ns
            )
    except OSError:
        pass  # not written yet, or removed meanwhile: what was found so far
    return newest


def _streaming(message: Any) -> bool:
    info = message.get("info") if isinstance(message, dict) else None
    if not isinstance(info, dict) or info.get("role") != "assistant":
        return False
    time = info.get("time")
    done = isinstance(time, dict) and time.get("completed") is not None
    return not done and info.get("error") is None


def _ms(value: Any) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC)
    return None


def _provider(part: dict[str, Any]) -> ProviderPart:
    return ProviderPart(provider=FORMAT, item=part)


class OpenCode(Converter):
    format = FORMAT

    def __init__(
        self, path: str | Path, resume: int = 0, *, info: dict[str, Any] | None = None
    ) -> None:
        """``info``: the session, when it is not read from ``path`` (a database's)."""
        super().__init__(path, resume)
        info = session_info(self.path) if info is None else info
        self.source_id = str(info["id"])
        # Events name the session's storage file as their source, whether read from the
        # storage, an export or the database: all make the same events, so any brings the
        # others up to date.
        self.file = f"{self.source_id}.json"
        self.title = short_title(str(info.get("title") or "")) or None
        self.metadata = {
            k: info[k]
            for k in ("directory", "projectID", "version", "parentID", "slug")
            if isinstance(info.get(k), str)
        }
        self.when = _ms((info.get("time") or {}).get("created"))
        self.first_seq: dict[str, int] = {}  # message id -> the first seq made from it
        self.compaction: tuple[int, dict[str, Any]] | None = None  # held, awaiting its summary
        self.last_condensation: int | None = None
        # Tool results OpenCode pruned, by the time it pruned them (ms) -> the parts.
        self.pruned: dict[int, list[tuple[PartRef, int]]] = {}

    def feed(self, line: int, record: Any) -> None:
        info = record.get("info") if isinstance(record, dict) else None
        parts = record.get("parts") if isinstance(record, dict) else None
        if self.pruned and self.compaction is None and isinstance(info, dict):
            created = (info.get("time") or {}).get("created")
            if isinstance(created, int | float):
                self._prunes(upto=created)
        if not isinstance(info, dict) or not isinstance(parts, list):
            self._flush_compaction()
            self.custom("record", record, self.when)
            return
        parts = [p for p in parts if isinstance(p, dict)]
        when = _ms((info.get("time") or {}).get("created"))
        if when is not None:
            self.when = when
        role = info.get("role")
        if role == "assistant" and info.get("summary") is True and self._completed(info):
            self._condense(info, parts)
            return
        self._flush_compaction()
        if role == "user" and any(p.get("type") == "compaction" for p in parts):
            self.compaction = (line, record)
            return
        if isinstance(info.get("id"), str):
            self.first_seq.setdefault(info["id"], self.seqs.get(None, 0) + 1)
        if role == "user":
            self._user(info, parts)
        elif role == "assistant":
            self._assistant(info, parts)
        else:
            self.custom("record", record, self.when)

    def close(self) -> None:
        if self.compaction is not None and (self.final or self.compaction[0] != self.line):
            self._flush_compaction(held=True)
        if self.compaction is None:
            self._prunes(upto=None)

    def _prunes(self, upto: float | None) -> None:
        """OpenCode's prunes made before ``upto`` (ms; ``None``: all), one per prune, in
        time order. OpenCode prunes after a turn, stamping the parts it clears with the
        time; the prune goes before the first message created after that time, or last.
        A part pruned after an earlier import was made is pruned after every message that
        import held (they were all created before it), so re-imports keep their seqs."""
        for stamp in sorted(self.pruned):
            if upto is not None and stamp > upto:
                break
            refs = self.pruned.pop(stamp)
            self.emit(
                Prune(
                    targets=[ref for ref, _ in refs],
                    tokens_freed=sum(tokens for _, tokens in refs),
                    strategy=f"{FORMAT}.prune",
                    settings={"compacted": stamp},
                    trigger="import",
                    created_at=_ms(stamp),
                ),
                held=True,
            )

    # -- conversion

    @staticmethod
    def _completed(info: dict[str, Any]) -> bool:
        time = info.get("time")
        done = isinstance(time, dict) and time.get("completed") is not None
        return (done or info.get("finish") is not None) and info.get("error") is None

    def _flush_compaction(self, *, held: bool = False) -> None:
        """A compaction that no summary completed: OpenCode kept sending everything."""
        if self.compaction is None:
            return
        line, record = self.compaction
        self.compaction = None
        self.custom(
            "compaction",
            record,
            _ms(record["info"].get("time", {}).get("created")),
            first=line,
            held=held,
        )

    def _condense(self, info: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        request = None
        if self.compaction is not None and self.compaction[1]["info"].get("id") == info.get(
            "parentID"
        ):
            first, request = self.compaction
            self.compaction = None
        else:
            self._flush_compaction()
            first = self.line
        head = self.seqs.get(None, 0)
        forgotten_to = head
        marker = next(
            (p for p in (request or {}).get("parts", []) if p.get("type") == "compaction"), None
        )
        tail = marker.get("tail_start_id") if isinstance(marker, dict) else None
        if isinstance(tail, str) and tail in self.first_seq:
            forgotten_to = self.first_seq[tail] - 1
        summary = "".join(
            str(p.get("text", ""))
            for p in parts
            if p.get("type") == "text" and not p.get("ignored")
        )
        raw = info.get("tokens")
        tokens: dict[str, Any] = raw if isinstance(raw, dict) else {}
        model = info.get("modelID")
        item = self.emit(
            Condensation(
                forgotten_from=1,
                forgotten_to=forgotten_to,
                forgotten_events=forgotten_to,
                summary=summary,
                condenser=FORMAT,
                trigger="import",
                pinned=[],
                supersedes=self.last_condensation,
                settings={
                    "request": request,
                    "summary_message": {"info": info, "parts": parts},
                    "auto": marker.get("auto") if isinstance(marker, dict) else None,
                },
                summary_model=model if isinstance(model, str) else None,
                tokens_after=tokens.get("output")
                if isinstance(tokens.get("output"), int)
                else None,
                created_at=_ms((info.get("time") or {}).get("created")) or self.when,
            ),
            first=first,
        )
        self.last_condensation = item.seq

    def _user(self, info: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        out: list[Part] = []
        for part in parts:
            kind = part.get("type")
            if kind == "text" and not part.get("ignored"):
                out.append(TextPart(text=str(part.get("text", ""))))
            elif kind == "file" and _media(part):
                out.append(_file(part))
            else:
                out.append(_provider(part))
        if self.title is None:
            self.title = short_title("".join(p.text for p in out if isinstance(p, TextPart)))
        meta = {FORMAT: {"message": info, "part_ids": [p.get("id") for p in parts]}}
        self.emit(Message(role="user", parts=out, provider_metadata=meta, created_at=self.when))

    def _assistant(self, info: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        steps: list[list[dict[str, Any]]] = [[]]
        for part in parts:
            if part.get("type") == "step-start" and steps[-1]:
                steps.append([])
            steps[-1].append(part)
        if _dropped(info, parts) or not any(_has_content(s) for s in steps):
            name = "error" if info.get("error") else "message"
            self.custom(name, {"info": info, "parts": parts}, self.when)
            return
        # A step without content (a retry, a step-start alone) is kept with its neighbour.
        merged: list[list[dict[str, Any]]] = []
        for step in steps:
            if merged and not _has_content(step):
                merged[-1].extend(step)
            elif merged and not _has_content(merged[-1]):
                merged[-1].extend(step)
            else:
                merged.append(step)
        model = info.get("modelID")
        for n, step in enumerate(merged):
            self._step(info if n == 0 else {"id": info.get("id")}, step, model)

    def _step(self, info: dict[str, Any], step: list[dict[str, Any]], model: Any) -> None:
        out: list[Part] = []
        results: list[Part] = []
        kept: list[dict[str, Any]] = []
        for part in step:
            kind = part.get("type")
            if kind == "text":
                out.append(TextPart(text=str(part.get("text", ""))))
            elif kind == "reasoning":
                out.append(ReasoningPart(text=str(part.get("text", ""))))
            elif kind == "tool" and isinstance(part.get("callID"), str):
                call, result = _tool(part)
                out.append(call)
                results.append(result)
            elif kind == "file" and _media(part):
                out.append(_file(part))
            elif kind in _KEPT_PARTS or kind == "step-start":
                kept.append(part)
            else:
                out.append(_provider(part))
        meta: dict[str, Any] = {
            FORMAT: {"message": info, "part_ids": [p.get("id") for p in step], "parts": kept}
        }
        finish = next((p for p in kept if p.get("type") == "step-finish"), None)
        self.emit(
            Message(
                role="assistant",
                parts=out,
                model=model if isinstance(model, str) else None,
                provider_metadata=meta,
                created_at=self.when,
                interrupted=True if finish is None and info.get("error") else None,
            )
        )
        if results:
            item = self.emit(
                Message(
                    role="tool",
                    parts=results,
                    provider_metadata={FORMAT: {"message_id": info.get("id")}},
                    created_at=self.when,
                )
            )
            tools = [
                p for p in step if p.get("type") == "tool" and isinstance(p.get("callID"), str)
            ]
            for index, (part, done) in enumerate(zip(tools, results, strict=True)):
                stamp = _compacted(part)
                if stamp is not None and isinstance(done, ToolResultPart):
                    ref = PartRef(seq=item.seq, index=index)
                    self.pruned.setdefault(stamp, []).append((ref, -(-len(done.output) // 4)))


def _dropped(info: dict[str, Any], parts: list[dict[str, Any]]) -> bool:
    """A failed reply OpenCode never sent again: all but an aborted one that said something."""
    error = info.get("error")
    if not error:
        return False
    aborted = isinstance(error, dict) and error.get("name") == "MessageAbortedError"
    return not (aborted and any(p.get("type") not in ("step-start", "reasoning") for p in parts))


def _has_content(step: list[dict[str, Any]]) -> bool:
    return any(p.get("type") in ("text", "reasoning", "tool", "file") for p in step)


def _media(part: dict[str, Any]) -> bool:
    """A file the model received as a file (text files and folders were sent as text)."""
    return isinstance(part.get("url"), str) and part.get("mime") not in (
        "text/plain",
        "application/x-directory",
    )


def _file(part: dict[str, Any]) -> FilePart:
    return FilePart(
        media_type=str(part.get("mime") or "application/octet-stream"),
        name=part.get("filename") if isinstance(part.get("filename"), str) else None,
        uri=str(part["url"]),
    )


def _compacted(part: dict[str, Any]) -> int | None:
    """When OpenCode pruned a tool part's output (``state.time.compacted``, ms)."""
    state = part.get("state")
    time = state.get("time") if isinstance(state, dict) else None
    stamp = time.get("compacted") if isinstance(time, dict) else None
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return int(stamp)
    return None


def _tool(part: dict[str, Any]) -> tuple[ToolCallPart, ToolResultPart]:
    raw = part.get("state")
    state: dict[str, Any] = raw if isinstance(raw, dict) else {}
    call_id, name = str(part["callID"]), str(part.get("tool") or "tool")
    call = ToolCallPart(
        id=call_id, name=name, arguments=json.dumps(state.get("input", {}), ensure_ascii=False)
    )
    status = state.get("status")
    if status == "completed":
        result = ToolResultPart(
            tool_call_id=call_id, name=name, output=str(state.get("output", ""))
        )
    elif status == "error":
        result = ToolResultPart(
            tool_call_id=call_id,
            name=name,
            output=str(state.get("error", "")),
            is_error=True,
            state="error",
        )
    else:
        result = ToolResultPart(
            tool_call_id=call_id,
            name=name,
            output="[Tool execution was interrupted]",
            is_error=True,
            state="interrupted",
        )
    return call, result
