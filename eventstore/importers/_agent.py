"""What the coding-agent transcript importers share: streaming a transcript's records, the
converted items, and the source position every imported event carries.

A coding agent (Claude Code, Codex CLI, Gemini CLI) appends its session to a file as it
runs. Such a file is read as a stream, one record at a time, so a transcript of any size is
imported in bounded memory. Each record is handed to the format's :class:`Converter`, which
turns records into :class:`Item` objects: an event and the session it belongs to (the main
session, or a child session for a subagent's records).

Every event records where it came from (:func:`with_source`): the file's name, the first
source line (or record index) it was made from, and ``upto``, the last line the converter
had fully consumed when it emitted the event. The last stored event's ``upto`` is therefore
where a later import of the same (grown) file resumes: nothing is remembered outside the
store, and importing the same file twice adds nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from ..events import Condensation, Custom, Event, Message

try:  # the ``fast`` extra: parses a transcript's lines several times faster
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - the environment decides
    _fast_loads = None  # type: ignore[assignment]
from ._loading import empty_reply_kept, format_error

SOURCE_KEY = "source"
"""Key of the source position: in ``Message.provider_metadata``, ``Custom.data`` and
``Condensation.settings``."""


@dataclass
class Item:
    """One converted event and where it goes."""

    event: Event
    child: str | None = None
    """``None`` for the main session, else the name of the child session (a subagent)."""
    seq: int = 0
    """The seq the event takes in its session (set by :meth:`Converter.emit`)."""
    upto: int = 0
    """The last source line consumed when the event was emitted (its resume position)."""


@dataclass
class ChildInfo:
    """A child session's title and metadata, known when its first record is read."""

    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class Converter:
    """Turns one transcript's records into :class:`Item` objects, in order.

    Subclasses implement :meth:`feed` (one record) and may override :meth:`close` (flush
    what a record still being continued holds back). ``resume`` is the line the store's
    copy of this transcript ends at: the converter closes everything it holds at that line,
    so a re-read cuts the records into events exactly as the earlier import did.
    """

    format: ClassVar[str]
    multi: ClassVar[bool] = False
    """Each child is a session of its own (no main session): aider's chats in one file."""

    def __init__(self, path: str | Path, resume: int = 0) -> None:
        self.path = str(path)
        self.file = Path(path).name
        self.resume = resume
        self.source_id: str | None = None
        self.title: str | None = None
        self.metadata: dict[str, Any] = {}
        self.children: dict[str, ChildInfo] = {}
        self.out: list[Item] = []
        self.seqs: dict[str | None, int] = {}
        self.line = 0  # the record being converted (the last one, once converted)
        self.prev = 0  # the record before it
        self.flush_upto = 0  # ``upto`` of events a record closes that earlier ones began
        self.final = True
        self.when: datetime | None = None  # the time of the newest record that had one

    # -- to implement

    def feed(self, line: int, record: Any) -> None:
        """Convert one record (``line`` counts from 1)."""
        raise NotImplementedError

    def close(self) -> None:
        """Emit whatever is held back waiting for a continuation."""

    # -- shared

    def push(self, line: int, record: Any) -> None:
        """Convert the record at ``line``."""
        self.line = line
        self.flush_upto = self.prev
        self.feed(line, record)
        self.prev = line
        if line == self.resume:
            self.flush_upto = line
            self.close()

    def finish(self, final: bool = True) -> None:
        """The end of the file: emit everything held back. ``final=False`` (a file still
        being written) lets a converter keep back a last record whose continuation is due."""
        self.final = final
        self.flush_upto = self.line
        self.close()

    def emit(
        self,
        event: Event,
        child: str | None = None,
        *,
        first: int | None = None,
        held: bool = False,
    ) -> Item:
        """Queue ``event`` for its session, stamping its source position.

        An event made from the record being converted says ``upto`` = that record's line;
        one that earlier records began and this one closes (``held``) says the line of the
        record before, and at the end of the file (or of the resumed part) the last line.
        So the last stored ``upto`` is always a line up to which everything is stored, and
        a re-read that closes what it holds at that line reproduces the same events.
        """
        seq = self.seqs.get(child, 0) + 1
        self.seqs[child] = seq
        upto = self.flush_upto if held else self.line
        event = empty_reply_kept(event)
        item = Item(with_source(event, self.file, first or self.line, upto), child, seq, upto)
        self.out.append(item)
        return item

    def custom(
        self,
        name: str,
        record: Any,
        when: datetime | None,
        child: str | None = None,
        *,
        first: int | None = None,
        held: bool = False,
    ) -> Item:
        """Keep a record no chat message holds (bookkeeping) as a ``Custom`` event."""
        event = Custom(name=f"{self.format}.{name}", data={"record": record}, created_at=when)
        return self.emit(event, child, first=first, held=held)

    def drain(self) -> list[Item]:
        out, self.out = self.out, []
        return out


def with_source(event: Event, file: str, line: int, upto: int) -> Event:
    """``event`` carrying its source position (see the module docstring)."""
    src = {"file": file, "line": line, "upto": upto}
    if isinstance(event, Message):
        meta = event.provider_metadata
        if meta is None:
            event.provider_metadata = {SOURCE_KEY: src}
        else:
            # In place: assigning a field goes through the model's __setattr__, which costs
            # more than building the message did.
            meta[SOURCE_KEY] = src
    elif isinstance(event, Custom):
        if isinstance(event.data, dict):
            event.data[SOURCE_KEY] = src
        else:
            event.data = {"value": event.data, SOURCE_KEY: src}
    elif isinstance(event, Condensation):
        event.settings[SOURCE_KEY] = src
    return event


def source_of(event: Event) -> dict[str, Any] | None:
    """The source position an importer stamped on ``event``, if any."""
    found: Any = None
    if isinstance(event, Message):
        found = (event.provider_metadata or {}).get(SOURCE_KEY)
    elif isinstance(event, Custom) and isinstance(event.data, dict):
        found = event.data.get(SOURCE_KEY)
    elif isinstance(event, Condensation):
        found = event.settings.get(SOURCE_KEY)
    return found if isinstance(found, dict) else None


@dataclass
class Torn:
    """The file's last line had no newline yet: it is left for a later import."""

    line: int


def read_records(
    path: str | Path, counter: list[int] | None = None
) -> Iterator[tuple[int, Any] | Torn]:
    """The file's JSONL records as ``(line number, value)``, streamed.

    A line that is not JSON becomes ``(n, InvalidLine(text))`` so the converter can keep it
    as a custom event (nothing is lost, and one bad line does not block the rest). A last
    line without its newline that is not JSON yet is still being written: it is yielded as
    :class:`Torn` and not converted (a complete JSON record without its newline is read).
    ``counter[0]``, when given, follows the bytes read.
    """
    p = Path(path)
    try:
        fp = p.open("rb")
    except OSError as exc:
        raise format_error(str(p), f"cannot read: {exc.strerror or exc}") from None
    with fp:
        n = 0
        for raw in fp:
            n += 1
            if counter is not None:
                counter[0] += len(raw)
            if raw.isspace() or not raw:  # (no stripped copy of every line)
                continue
            if _fast_loads is not None:
                try:
                    yield n, _fast_loads(raw)
                    continue
                except ValueError:
                    pass  # the standard parser decides (and says what is wrong)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if not raw.endswith(b"\n"):
                    yield Torn(n)  # cut inside a character: the rest is still coming
                    return
                raise format_error(
                    f"{p}:{n}", f"not UTF-8 text ({exc.reason} at byte {exc.start})"
                ) from None
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                if not raw.endswith(b"\n"):
                    # The writer is still writing this line (a JSON object is only valid
                    # once its closing brace is there): leave it for a later read.
                    yield Torn(n)
                    return
                yield n, InvalidLine(text.rstrip("\r\n"), f"column {exc.colno}: {exc.msg}")
                continue
            yield n, value


def read_lines(
    path: str | Path, counter: list[int] | None = None
) -> Iterator[tuple[int, Any] | Torn]:
    """A text transcript's lines (without their newline), streamed; a last line without
    its newline is :class:`Torn` (still being written)."""
    p = Path(path)
    try:
        fp = p.open("rb")
    except OSError as exc:
        raise format_error(str(p), f"cannot read: {exc.strerror or exc}") from None
    with fp:
        for n, raw in enumerate(fp, start=1):
            if counter is not None:
                counter[0] += len(raw)
            if not raw.endswith(b"\n"):
                yield Torn(n)
                return
            yield n, raw.decode("utf-8", "replace").rstrip("\r\n")


@dataclass
class InvalidLine:
    """A line of a JSONL transcript that is not JSON."""

    text: str
    error: str


def first_records(path: str | Path, limit: int = 8) -> list[Any]:
    """Up to ``limit`` JSON records from the start of a JSONL file (for detection)."""
    return list(leading_records(path, limit))


def leading_records(path: str | Path, limit: int) -> Iterator[Any]:
    """:func:`first_records`, each parsed only when it is asked for: a caller looking for
    the first record that says something stops parsing there (these files' lines are
    whole file contents, and a peek that parsed ``limit`` of them cost a tenth of the
    import's parsing)."""
    found = 0
    for rec in read_records(path):
        if isinstance(rec, Torn):
            return
        if not isinstance(rec[1], InvalidLine):
            yield rec[1]
            found += 1
            if found >= limit:
                return


def parse_when(value: Any) -> datetime | None:
    """An ISO timestamp (``Z`` or an offset; naive means UTC), or ``None`` when absent or
    unreadable: a bad timestamp is not a reason to refuse a transcript."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def text_of(content: Any) -> str:
    """The text of a content value: a string, or a list of ``{"text": ...}`` blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(c.get("text", "")) for c in content if isinstance(c, dict) and "text" in c
        )
    if isinstance(content, dict) and "text" in content:
        return str(content["text"])
    return ""


def short_title(text: str, width: int = 80) -> str | None:
    line = " ".join(text.split())
    if not line:
        return None
    return line if len(line) <= width else line[: width - 1] + "…"
