"""Reading import files: the types every format converts into, and JSON/JSONL parsing.

A file is read whole and parsed once into a :class:`LoadedFile`; the format modules convert
that into :class:`Transcript` objects. Every problem becomes an :class:`ImportFormatError`
whose message starts with the file and the line or record, so nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import InvalidEventError
from ..events import Custom, Event, Message, empty_assistant


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
    """Expected hash of each event (exports only); the head is checked before commit."""
    payload_sizes: list[int] | None = None
    """Encoded size of each event, when already computed."""
    session_id: str | None = None
    """The session id to keep (exports only); ``None`` for a fresh one."""
    key: str | None = None
    """The session's key to keep with its id (exports only: see
    :meth:`~eventstore.EventStore.get_session_by_key`)."""
    purged: bool = False
    """Some events are purged (exports only): their payloads are redacted and their hashes,
    the originals', are proven by the purge records that follow them."""


@dataclass
class LoadedFile:
    path: str
    data: Any  # the parsed JSON document, or for JSONL a list of (line number, value)
    jsonl: bool


def format_error(where: str, msg: str) -> ImportFormatError:
    return ImportFormatError(f"{where}: {msg}")


@contextmanager
def nesting_guard(where: str) -> Iterator[None]:
    """Turn a ``RecursionError`` (JSON nested thousands of levels deep, in the parser or
    in the validation and encoding that walk the values) into an :class:`ImportFormatError`
    naming the file."""
    try:
        yield
    except RecursionError:
        raise format_error(
            where,
            "the JSON is nested too deeply to import (deeper than the parser's recursion "
            "limit); flatten the deepest values and import again",
        ) from None


def load_file(path: str | Path) -> LoadedFile:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise format_error(str(p), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise format_error(str(p), f"cannot read: {exc.strerror or exc}") from None
    return parse_text(text, str(p))


def parse_text(text: str, where: str) -> LoadedFile:
    if not text.strip():
        raise format_error(where, "the file is empty")
    try:
        return LoadedFile(where, json.loads(text), jsonl=False)
    except json.JSONDecodeError as whole:
        lines = text.splitlines()
        first = next((ln for ln in lines if ln.strip()), "")
        if len([ln for ln in lines if ln.strip()]) > 1 and _is_json(first):
            return LoadedFile(where, _jsonl_records(lines, where), jsonl=True)
        raise format_error(
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
            raise format_error(
                f"{where}:{n}", f"invalid JSON at column {exc.colno}: {exc.msg}"
            ) from None
    return out


def short_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
    return str(exc)


EMPTY_ASSISTANT_IMPORTED = "import.empty_assistant"
"""Name of the custom event an imported assistant message with neither content nor tool
calls is kept as (see :func:`empty_replies_kept`)."""


def empty_replies_kept(events: list[Event]) -> list[Event]:
    """``events`` with each assistant message that has neither content nor tool calls
    (which an append refuses: :func:`~eventstore.events.empty_assistant`) kept as a
    :class:`~eventstore.events.Custom` event named ``import.empty_assistant`` holding the
    message whole, in its place: nothing from the file is lost, and views, which skip
    custom events, never send the empty message."""
    return [empty_reply_kept(evt) for evt in events]


def empty_reply_kept(evt: Event) -> Event:
    """``evt``, or the ``import.empty_assistant`` custom event that keeps it when it is an
    assistant message with neither content nor tool calls (see :func:`empty_replies_kept`)."""
    if isinstance(evt, Message) and empty_assistant(evt):
        data = evt.model_dump(mode="json", exclude={"id", "created_at", "kind"})
        return Custom(
            name=EMPTY_ASSISTANT_IMPORTED, data=data, id=evt.id, created_at=evt.created_at
        )
    return evt
