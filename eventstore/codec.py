"""Canonical bytes: JSON encoding, ids and the hash chain.

The payload column holds canonical JSON text (sorted keys, no whitespace, non-ASCII kept
as is). ``json.dumps`` already escapes control characters, so a NUL becomes ``\\u0000``
and never reaches Postgres ``TEXT``; lone surrogates are escaped here so that the text
always encodes to UTF-8. Both come back unchanged from ``json.loads``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from datetime import UTC, datetime
from typing import Any

from .events import EVENT_ADAPTER, Event

__all__ = [
    "canonical_json",
    "column_text",
    "storable_text_error",
    "encode_event",
    "decode_event",
    "chain_hash",
    "format_ts",
    "new_id",
]

_SURROGATE = re.compile("[\ud800-\udfff]")


def canonical_json(value: Any) -> str:
    """Deterministic JSON text for ``value`` that always encodes to UTF-8."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    # isascii() is a fast exit: a surrogate is never ASCII, and most payloads are.
    if not text.isascii() and _SURROGATE.search(text):
        # Only strings can hold a surrogate, and inside a JSON string ``\\uXXXX`` is valid.
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def column_text(value: str | None, limit: int) -> str | None:
    """``value`` as an indexed column may hold it: NUL and lone surrogates escaped, capped.

    Only for columns that copy data also kept verbatim in a payload (the ``parts`` index):
    Postgres ``TEXT`` rejects NUL, neither driver can encode a lone surrogate, and
    ``VARCHAR(n)`` rejects longer values on Postgres while SQLite would keep them.
    """
    if value is None:
        return None
    if "\x00" in value:
        value = value.replace("\x00", "\\u0000")
    if not value.isascii() and _SURROGATE.search(value):
        value = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)
    return value[:limit]


def storable_text_error(value: str) -> str | None:
    """Why ``value`` cannot be stored as-is in a text column on every backend, or None."""
    if "\x00" in value:
        return "contains a NUL character"
    if not value.isascii() and _SURROGATE.search(value):
        return "contains a lone surrogate (not valid Unicode text)"
    return None


def encode_event(event: Event) -> str:
    """The payload text stored for an event (everything but id, created_at and kind)."""
    data = EVENT_ADAPTER.dump_python(
        event, mode="json", exclude_none=True, exclude={"id", "created_at", "kind"}
    )
    return canonical_json(data)


def decode_event(kind: str, payload: str, event_id: str, created_at: datetime) -> Event:
    """Rebuild an event model from its stored columns."""
    data = json.loads(payload)
    data["kind"] = kind
    data["id"] = event_id
    data["created_at"] = created_at
    return EVENT_ADAPTER.validate_python(data)


def format_ts(ts: datetime) -> str:
    """Canonical UTC timestamp text with microseconds, as hashed."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def chain_hash(
    prev: str | None, seq: int, event_id: str, kind: str, created_at: datetime, payload: str
) -> str:
    """SHA-256 over the previous hash and this event's canonical columns."""
    h = hashlib.sha256()
    h.update((prev or "").encode("ascii"))
    h.update(f"\n{seq}\n{event_id}\n{kind}\n{format_ts(created_at)}\n".encode())
    h.update(payload.encode("utf-8"))
    return h.hexdigest()


_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id() -> str:
    """A UUIDv7 string: sortable by creation time, monotonic within this process."""
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _counter += 1
            if _counter >= 1 << 12:
                ms += 1
                _counter = 0
        else:
            _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        _last_ms = ms
        rand_a = _counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
