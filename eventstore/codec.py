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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, get_args

from pydantic import ValidationError

from .errors import InvalidEventError
from .events import (
    EVENT_ADAPTER,
    Condensation,
    Event,
    FilePart,
    Message,
    Part,
    Queued,
    ToolResultPart,
)
from .tokens import MESSAGE_OVERHEAD, TokenCounter, count_part

__all__ = [
    "canonical_json",
    "copy_json",
    "column_text",
    "storable_text_error",
    "encode_event",
    "decode_event",
    "decode_row",
    "chain_hash",
    "batch_digest",
    "format_ts",
    "new_id",
    "check_text",
    "Encoded",
    "encode",
    "part_columns",
    "read_back",
]

_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN = re.compile(r"[A-Za-z0-9_.:-]*")  # JSON string text as is (ids, kinds)


def canonical_json(value: Any) -> str:
    """Deterministic JSON text for ``value`` that always encodes to UTF-8.

    Strict JSON: a NaN or infinite float raises :class:`InvalidEventError` (JSON has no
    such value, and storing ``null`` instead would alter the data), as does nesting too
    deep to encode.
    """
    try:
        text = json.dumps(
            value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
        )
    except ValueError as exc:
        if "Out of range float" not in str(exc):
            raise
        raise InvalidEventError(
            "a float is NaN or infinite, which JSON cannot hold; store None or a string "
            "such as 'nan' instead"
        ) from None
    except RecursionError:
        raise InvalidEventError(
            "data is nested too deeply to encode; flatten it (or store it as a JSON string)"
        ) from None
    # isascii() is a fast exit: a surrogate is never ASCII, and most payloads are.
    if not text.isascii() and _SURROGATE.search(text):
        # Only strings can hold a surrogate, and inside a JSON string ``\\uXXXX`` is valid.
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def copy_json(value: Any) -> Any:
    """A deep copy of JSON data: dicts with ``str`` keys, lists, and ``str``, ``int``,
    ``float``, ``bool`` and ``None``, each of exactly that type (what ``json.loads``
    returns). Equal to ``json.loads(json.dumps(value))`` for such data, without the text
    in between.

    Raises:
        TypeError: ``value`` holds anything else (a tuple, a subclass, a non-``str`` key),
            which a ``json`` round trip would change; the caller takes its general path.
    """
    t = type(value)
    if t in _JSON_SCALARS:
        return value
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise TypeError(f"not a JSON object key: {k!r}")
            out[k] = v if type(v) in _JSON_SCALARS else copy_json(v)
        return out
    if t is list:
        return [v if type(v) in _JSON_SCALARS else copy_json(v) for v in value]
    raise TypeError(f"not JSON data: {t.__name__}")


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
    """Rebuild an event model from its stored columns.

    One pass of pydantic's JSON validator over the payload text, with the columns spliced
    in at its end. Its parser refuses lone surrogates (kept from invalid UTF-8 tool output,
    stored as ``\\udXXX`` escapes) that Python's accepts, so a payload it refuses, for that
    or any other reason, takes the ``json.loads`` path, which decides (and raises) exactly
    as before.
    """
    if isinstance(created_at, datetime):
        evt = _decode_fast(kind, payload, event_id, created_at.isoformat())
        if evt is not None:
            return evt
    return _decode_event_loads(kind, payload, event_id, created_at)


#: ``created_at`` as SQLite holds it: naive UTC text, microseconds always written.
_SQLITE_STAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{6})?")


def decode_row(kind: str, payload: str, event_id: str, created_at: datetime | str) -> Event:
    """:func:`decode_event` for ``created_at`` exactly as a driver returns the column: an
    aware datetime (Postgres), or SQLite's naive UTC text, which goes to the JSON
    validator as it is (with its zone) instead of being parsed here first."""
    if isinstance(created_at, str):
        if _SQLITE_STAMP.fullmatch(created_at):
            evt = _decode_fast(kind, payload, event_id, created_at + "Z")
            if evt is not None:
                return evt
        created_at = datetime.fromisoformat(created_at)
    if created_at.tzinfo is None:
        created_at = created_at.replace(tzinfo=UTC)
    return decode_event(kind, payload, event_id, created_at)


#: Each kind's own validator: what the union's validator picks by the ``kind`` tag,
#: without the pick.
_BY_KIND = {
    get_args(cls.model_fields["kind"].annotation)[0]: cls.__pydantic_validator__
    for cls in get_args(get_args(Event)[0])
}


def _decode_fast(kind: str, payload: str, event_id: str, stamp: str) -> Event | None:
    """The event from one pass of the JSON validator, or None when it refuses the text."""
    validator = _BY_KIND.get(kind)
    if payload[-1:] != "}" or validator is None:
        return None
    # The columns go last: like the assignments below, they win over same-named keys.
    id_text = (
        f'"{event_id}"'
        if isinstance(event_id, str) and _PLAIN.fullmatch(event_id)
        else json.dumps(event_id)
    )
    cols = f'"kind":"{kind}","id":{id_text},"created_at":"{stamp}"}}'
    text = payload[:-1] + cols if payload == "{}" else payload[:-1] + "," + cols
    try:
        return validator.validate_json(text)
    except ValidationError:
        return None


def _decode_event_loads(kind: str, payload: str, event_id: str, created_at: datetime) -> Event:
    """:func:`decode_event` through ``json.loads`` (the reference path)."""
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


def batch_digest(encoded: list[Encoded]) -> str:
    """SHA-256 over a batch's kinds, canonical payloads and caller-given ids, in order: what
    an idempotency key is compared by when it is reused."""
    h = hashlib.sha256(f"{len(encoded)}\n".encode())
    for enc in encoded:
        payload = enc.payload.encode("utf-8")
        h.update(f"{enc.kind}\n{enc.event.id or ''}\n{len(payload)}\n".encode())
        h.update(payload)
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


def check_text(field: str, value: str | None, limit: int | None = None) -> None:
    """Reject a key or label no backend column can hold exactly (the same way everywhere)."""
    if value is None:
        return
    problem = storable_text_error(value)
    if problem is None and limit is not None and len(value) > limit:
        problem = f"is {len(value)} characters, over the limit of {limit}"
    if problem is not None:
        raise InvalidEventError(f"{field}: {problem}")


@dataclass(slots=True)
class Encoded:
    """An event turned into the rows it is stored as, prepared outside the write lock."""

    event: Event
    kind: str
    payload: str
    size: int
    token_count: int
    part_rows: list[dict[str, Any]]
    blobs: dict[str, bytes] = field(default_factory=dict)
    """Attachment bytes moved out of the payload, by ``sha256:<hex>`` reference."""


def part_columns(idx: int, part: Part) -> dict[str, Any]:
    """The ``parts`` index columns copied from one part (all but its token count)."""
    call_id = getattr(part, "tool_call_id", None) or (
        getattr(part, "id", None) if part.type == "tool_call" else None
    )
    name = getattr(part, "name", None) if part.type in ("tool_call", "tool_result") else None
    return {
        "idx": idx,
        "type": part.type,
        # Index copies of payload data: escaped and capped so that any id the payload
        # holds verbatim fits the column on both backends.
        "tool_call_id": column_text(call_id, 255),
        "tool_name": column_text(name, 255),
        "state": part.state if isinstance(part, ToolResultPart) else None,
    }


def blob_ref(data: bytes) -> str:
    """The reference a blob is stored under: ``sha256:<hex>`` of its bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _strip_blobs(evt: Message, threshold: int) -> tuple[Message, dict[str, bytes]]:
    """``evt`` with every attachment of ``threshold`` bytes or more replaced by its blob
    reference, and the bytes by reference."""
    blobs: dict[str, bytes] = {}
    parts: list[Part] = []
    for part in evt.parts:
        if isinstance(part, FilePart) and part.data is not None and len(part.data) >= threshold:
            ref = blob_ref(part.data)
            blobs[ref] = part.data
            part = part.model_copy(update={"data": None, "blob": ref})
        parts.append(part)
    if not blobs:
        return evt, blobs
    return evt.model_copy(update={"parts": parts}), blobs


def blob_refs(evt: Event) -> list[str]:
    """Blob references an event names."""
    msg = evt.message if isinstance(evt, Queued) else evt
    if not isinstance(msg, Message):
        return []
    return [p.blob for p in msg.parts if isinstance(p, FilePart) and p.blob and p.data is None]


def with_blob_data(evt: Event, data: dict[str, bytes]) -> Event:
    """``evt`` with its blob references filled with their bytes (missing ones left as
    references: ``verify`` reports them)."""
    if isinstance(evt, Queued):
        return evt.model_copy(update={"message": with_blob_data(evt.message, data)})
    if not isinstance(evt, Message):
        return evt
    parts = [
        p.model_copy(update={"data": data[p.blob]})
        if isinstance(p, FilePart) and p.blob in data and p.data is None
        else p
        for p in evt.parts
    ]
    return evt.model_copy(update={"parts": parts})


def encode(evt: Event, counter: TokenCounter, blob_threshold: int | None = None) -> Encoded:
    """The payload text, size, token count and ``parts`` index rows of one event.

    With ``blob_threshold``, attachments of that many bytes or more leave the payload for
    the blob table (``Encoded.blobs``); their tokens are counted from the bytes first.
    """
    blobs: dict[str, bytes] = {}
    stored: Event = evt
    if isinstance(evt, Message) and blob_threshold is not None:
        stored, blobs = _strip_blobs(evt, blob_threshold)
    payload = encode_event(stored)
    size = len(payload.encode("utf-8"))
    part_rows: list[dict[str, Any]] = []
    if isinstance(evt, Message):
        total = MESSAGE_OVERHEAD
        for idx, part in enumerate(evt.parts):
            n = count_part(counter, part)
            total += n
            part_rows.append({**part_columns(idx, part), "token_count": n})
        evt = stored
    elif isinstance(evt, Condensation):
        total = evt.summary_tokens or (counter.count(evt.summary) if evt.summary else 0)
        if evt.summary and not evt.summary_tokens:
            evt = evt.model_copy(update={"summary_tokens": total})
            payload = encode_event(evt)
            size = len(payload.encode("utf-8"))
    else:
        total = 0
    return Encoded(evt, evt.kind, payload, size, total, part_rows, blobs)


def read_back(kind: str, payload: str, created_at: Any) -> None:
    """Parse a payload as :func:`~eventstore.codec.decode_event` would, in one pass of
    pydantic's JSON validator (the read that follows an append must never fail)."""
    head = f'{{"kind":"{kind}","id":"0"'
    if isinstance(created_at, datetime):
        head += f',"created_at":"{created_at.isoformat()}"'
    try:
        EVENT_ADAPTER.validate_json(head + "}" if payload == "{}" else head + "," + payload[1:])
    except ValidationError:
        # The JSON parser refuses what Python's accepts (lone surrogates kept from invalid
        # UTF-8 tool output): decide exactly as the read will.
        decode_event(kind, payload, "0", created_at or datetime.now(UTC))
