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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, get_args

from annotated_types import MaxLen, MinLen
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_json

try:  # the ``fast`` extra
    import orjson
except ImportError:  # pragma: no cover - the environment decides
    orjson = None  # type: ignore[assignment]

from .errors import InvalidEventError
from .events import (
    EVENT_ADAPTER,
    Condensation,
    Custom,
    Event,
    FilePart,
    Message,
    Part,
    ProviderPart,
    Queued,
    ReasoningPart,
    Role,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from .tokens import MESSAGE_OVERHEAD, TokenCounter, count_part

__all__ = [
    "canonical_json",
    "canonical_json_bytes",
    "copy_json",
    "column_text",
    "storable_text_error",
    "encode_event",
    "encode_plain",
    "sole_text",
    "implied_part_tokens",
    "decode_event",
    "decode_row",
    "chain_hash",
    "chain_hash_ts",
    "batch_digest",
    "format_ts",
    "time_texts",
    "utc_texts",
    "sqlite_time_text",
    "new_id",
    "new_ids",
    "check_text",
    "Encoded",
    "EventHead",
    "encode",
    "part_columns",
    "read_back",
]

# --------------------------------------------------------------------------- plain data
# What ``pydantic_core.to_json`` writes byte for byte as ``json.dumps`` does
# (:func:`_sorted_plain`), and a message's payload data built straight from its fields
# (:func:`_message_plain`) when every field holds exactly its annotated type.


class _NotPlain(Exception):
    """Data the fast encoder leaves to ``json.dumps``."""


_FAST_INT = 1 << 63
_FAST_DEPTH = 100


def _sorted_plain(value: Any, depth: int = 0) -> Any:
    """``value`` with every dict's keys in sorted order, if it holds only data that
    ``pydantic_core.to_json`` writes exactly as ``json.dumps`` does: dicts with ``str``
    keys, lists, ``str``, ``bool``, ``None`` and ``int`` of at most 64 bits, each of
    exactly that type. Anything else raises :class:`_NotPlain`: floats (their shortest
    form differs below 1e-4, e.g. ``1e-05`` against ``0.00001``), subclasses, tuples,
    other key types and deep nesting go the ``json.dumps`` way."""
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is dict:
        if depth > _FAST_DEPTH:
            raise _NotPlain
        out = {}
        for k in sorted(value) if len(value) > 1 else value:
            if type(k) is not str:
                raise _NotPlain
            v = value[k]
            tv = type(v)
            # Leaves inline: a call per string or flag would cost as much as the rest.
            out[k] = v if tv is str or tv is bool or v is None else _sorted_plain(v, depth + 1)
        return out
    if t is list:
        if depth > _FAST_DEPTH:
            raise _NotPlain
        return [v if type(v) is str else _sorted_plain(v, depth + 1) for v in value]
    if t is int and -_FAST_INT <= value < _FAST_INT:
        return value
    raise _NotPlain


def _checked_plain(value: Any, depth: int = 0) -> Any:
    """``value`` itself, if :func:`_sorted_plain` takes it (the same checks, without the
    sorted copy): for a writer that puts the keys in order itself (orjson's
    ``OPT_SORT_KEYS``, whose order on text keys, by UTF-8 bytes, is Python's by code
    point). Anything else raises :class:`_NotPlain`."""
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is dict:
        if depth > _FAST_DEPTH:
            raise _NotPlain
        for k, v in value.items():
            if type(k) is not str:
                raise _NotPlain
            tv = type(v)
            # Leaves inline (a call per value cost more than the check): text, flags,
            # null and 64-bit integers.
            if not (
                tv is str or tv is bool or v is None or (tv is int and -_FAST_INT <= v < _FAST_INT)
            ):
                _checked_plain(v, depth + 1)
        return value
    if t is list:
        if depth > _FAST_DEPTH:
            raise _NotPlain
        for v in value:
            if type(v) is not str:
                _checked_plain(v, depth + 1)
        return value
    if t is int and -_FAST_INT <= value < _FAST_INT:
        return value
    raise _NotPlain


_ROLES = frozenset(get_args(Role))
_RESULT_STATES = frozenset(get_args(ToolResultPart.model_fields["state"].annotation))
_REASONING_FORMATS = frozenset(get_args(ReasoningPart.model_fields["format"].annotation))


def _message_plain(
    m: Message, free_form: Callable[[Any, int], Any] = _sorted_plain
) -> dict[str, Any] | None:
    """What ``_sorted_plain`` makes of the serializer's dump of ``m`` (the payload's data,
    keys in sorted order), built from its fields directly, or None where that is not sure.
    With ``free_form=_checked_plain`` the free-form dicts (``extra``, ``provider_metadata``,
    a provider part's ``item``) are only checked, not copied in sorted order: for a writer
    that sorts the keys itself (see :func:`_message_json`).

    Only for a message whose every payload field holds exactly the type its annotation
    names (``str``, ``bool``, ``None``, a ``list`` of exactly ``TextPart``,
    ``ReasoningPart``, ``ToolCallPart`` and ``ToolResultPart``, each with its own ``type``
    tag and literals among their values), and whose free-form dicts ``_sorted_plain``
    takes: the serializer gives such values back as they are, so the result is the same
    data in the same order as the general path's. Anything else (a subclass, an assigned
    value of another type, a field missing from ``__dict__``, a float or deep nesting in a
    free-form dict) gives None, and the general path decides.
    """
    d = m.__dict__
    try:
        content_list = d["content_list"]
        extra = d["extra"]
        interrupted = d["interrupted"]
        model = d["model"]
        name = d["name"]
        parts = d["parts"]
        metadata = d["provider_metadata"]
        role = d["role"]
        if (
            type(content_list) is not bool
            or type(parts) is not list
            or type(role) is not str
            or role not in _ROLES
        ):
            return None
        out: dict[str, Any] = {"content_list": content_list}
        if extra is not None:
            if type(extra) is not dict:
                return None
            out["extra"] = free_form(extra, 1)
        if interrupted is not None:
            if type(interrupted) is not bool:
                return None
            out["interrupted"] = interrupted
        if model is not None:
            if type(model) is not str:
                return None
            out["model"] = model
        if name is not None:
            if type(name) is not str:
                return None
            out["name"] = name
        plain_parts = []
        for part in parts:
            p = part.__dict__ if type(part) in _PLAIN_PARTS else None
            if p is None:
                return None
            if type(part) is TextPart:
                text = p["text"]
                if type(p["type"]) is not str or p["type"] != "text" or type(text) is not str:
                    return None
                plain_parts.append({"text": text, "type": "text"})
            elif type(part) is ToolCallPart:
                args, call_type, call_id, tool = p["arguments"], p["call_type"], p["id"], p["name"]
                if (
                    type(p["type"]) is not str
                    or p["type"] != "tool_call"
                    or type(args) is not str
                    or type(call_type) is not str
                    or type(call_id) is not str
                    or type(tool) is not str
                ):
                    return None
                plain_parts.append(
                    {"arguments": args, "call_type": call_type, "id": call_id, "name": tool,
                     "type": "tool_call"}
                )  # fmt: skip
            elif type(part) is ToolResultPart:
                is_error, tool, output = p["is_error"], p["name"], p["output"]
                state, call_id = p["state"], p["tool_call_id"]
                if (
                    type(p["type"]) is not str
                    or p["type"] != "tool_result"
                    or type(is_error) is not bool
                    or type(output) is not str
                    or type(state) is not str
                    or state not in _RESULT_STATES
                    or type(call_id) is not str
                ):
                    return None
                result: dict[str, Any] = {"is_error": is_error}
                if tool is not None:
                    if type(tool) is not str:
                        return None
                    result["name"] = tool
                result["output"] = output
                result["state"] = state
                result["tool_call_id"] = call_id
                result["type"] = "tool_result"
                plain_parts.append(result)
            elif type(part) is ProviderPart:
                provider, item = p["provider"], p["item"]
                if (
                    type(p["type"]) is not str
                    or p["type"] != "provider"
                    or type(provider) is not str
                    or not _PROVIDER_MIN <= len(provider) <= _PROVIDER_MAX
                    or type(item) is not dict
                ):
                    return None
                plain_parts.append(
                    {"item": free_form(item, 3), "provider": provider, "type": "provider"}
                )
            else:  # ReasoningPart
                fmt, redacted, signature, text = (
                    p["format"], p["redacted_data"], p["signature"], p["text"]
                )  # fmt: skip
                if (
                    type(p["type"]) is not str
                    or p["type"] != "reasoning"
                    or type(fmt) is not str
                    or fmt not in _REASONING_FORMATS
                    or type(text) is not str
                ):
                    return None
                reasoning: dict[str, Any] = {"format": fmt}
                if redacted is not None:
                    if type(redacted) is not str:
                        return None
                    reasoning["redacted_data"] = redacted
                if signature is not None:
                    if type(signature) is not str:
                        return None
                    reasoning["signature"] = signature
                reasoning["text"] = text
                reasoning["type"] = "reasoning"
                plain_parts.append(reasoning)
        out["parts"] = plain_parts
        if metadata is not None:
            if type(metadata) is not dict:
                return None
            out["provider_metadata"] = free_form(metadata, 1)
        out["role"] = role
        return out
    except (KeyError, _NotPlain):
        return None


#: The part classes :func:`_message_plain` writes itself.
_PLAIN_PARTS = frozenset({TextPart, ToolCallPart, ToolResultPart, ReasoningPart, ProviderPart})

#: The fields :func:`_message_plain` writes, by class.
_PLAIN_FIELDS: dict[type[Any], frozenset[str]] = {
    Message: frozenset(
        {"id", "created_at", "kind", "role", "parts", "name", "model", "provider_metadata",
         "content_list", "extra", "interrupted"}
    ),
    TextPart: frozenset({"type", "text"}),
    ToolCallPart: frozenset({"type", "id", "name", "arguments", "call_type"}),
    ToolResultPart: frozenset({"type", "tool_call_id", "name", "output", "is_error", "state"}),
    ReasoningPart: frozenset({"type", "text", "signature", "redacted_data", "format"}),
    ProviderPart: frozenset({"type", "provider", "item"}),
}  # fmt: skip


def _length_bounds(cls: type[Any], name: str) -> tuple[int, int] | None:
    """The least and greatest length the field ``name`` of ``cls`` accepts, when a minimum
    and a maximum length are its only constraints (:func:`_message_plain` checks them
    itself); else None."""
    metadata = cls.model_fields[name].metadata
    lows = [m.min_length for m in metadata if type(m) is MinLen]
    highs = [m.max_length for m in metadata if type(m) is MaxLen]
    if len(lows) != 1 or len(highs) != 1 or len(metadata) != 2:
        return None
    return lows[0], highs[0]


#: The provider name's length limits (a ``ProviderPart`` outside them is refused by its
#: validator, so :func:`_message_plain` leaves it to the general path).
_PROVIDER_MIN, _PROVIDER_MAX = _length_bounds(ProviderPart, "provider") or (1, 0)


def _plain_dump(cls: type[Any]) -> bool:
    """Whether the serializer dumps ``cls`` as :func:`_message_plain` assumes: exactly the
    fields it knows, each under its own name, none left out or rewritten by a serializer."""
    decorators = cls.__pydantic_decorators__
    return (
        set(cls.model_fields) == _PLAIN_FIELDS[cls]
        and not cls.model_computed_fields
        and not decorators.field_serializers
        and not decorators.model_serializers
        and cls.model_config.get("extra") == "forbid"
        and not cls.model_config.get("serialize_by_alias")
        and all(
            f.exclude is None
            and getattr(f, "exclude_if", None) is None
            and f.alias is None
            and f.serialization_alias is None
            for f in cls.model_fields.values()
        )
    )


#: A field added to a message or part class (or a serializer) turns the fast path off
#: until :func:`_message_plain` learns it (a test says so).
_MESSAGE_FIELDS_KNOWN = all(_plain_dump(cls) for cls in _PLAIN_FIELDS)


def _validates_types_only(cls: type[Any]) -> bool:
    """Whether validating ``cls`` from JSON checks nothing but each field's type (and its
    literals): no validators but ``created_at``'s own (which the caller checks), no
    constraints on a field but a ``ProviderPart``'s provider length (which
    :func:`_message_plain` checks). Then data of exactly those types always reads back."""
    decorators = cls.__pydantic_decorators__
    validators = {
        name
        for name, d in decorators.field_validators.items()
        if not (set(d.info.fields) == {"created_at"} and d.func.__name__ == "_utc")
    }
    return (
        not validators
        and not decorators.model_validators
        and not decorators.validators
        and not decorators.root_validators
        and all(
            not f.metadata
            or (cls is ProviderPart and name == "provider" and _length_bounds(cls, name))
            for name, f in cls.model_fields.items()
        )
    )


#: Whether a payload :func:`_message_plain` built needs no read-back parse (a validator or
#: a constraint added to a message or part class turns this off; a test says so).
_READ_BACK_PROVEN = _MESSAGE_FIELDS_KNOWN and all(
    _validates_types_only(cls) for cls in _PLAIN_FIELDS
)


#: What writes plain data (:func:`_sorted_plain`'s, :func:`_message_plain`'s) as JSON bytes:
#: ``orjson.dumps`` where orjson is installed (a message's data about 2.5 times faster), else
#: ``pydantic_core.to_json``. For plain data both write exactly what ``json.dumps`` writes
#: (tests hold each of them to that); both refuse a lone surrogate and deep nesting, with
#: one of :data:`_PLAIN_JSON_REFUSED`, and the ``json.dumps`` path then decides.
_plain_json: Callable[[Any], bytes] = orjson.dumps if orjson is not None else to_json


def _sorted_json(value: Any) -> bytes:
    """Plain data (see :func:`_sorted_plain`) written by :data:`_plain_json` with its keys
    in order. orjson puts them in order itself (``OPT_SORT_KEYS``, by UTF-8 bytes, which is
    Python's order by code point), without the sorted copy: the data is only checked.
    Raises :class:`_NotPlain` or one of :data:`_PLAIN_JSON_REFUSED`."""
    if orjson is not None and _plain_json is orjson.dumps:
        return orjson.dumps(_checked_plain(value), option=orjson.OPT_SORT_KEYS)
    return _plain_json(_sorted_plain(value))


def _message_json(m: Message) -> bytes | None:
    """:func:`_message_plain`'s data for ``m`` written by :data:`_plain_json`, or None where
    it gives None. With orjson the data is built without sorted copies of its free-form
    dicts, which orjson then writes with their keys in order (as :func:`_sorted_json`
    does): the same bytes, without copying metadata that is most of a message's fields.
    Raises one of :data:`_PLAIN_JSON_REFUSED`."""
    if orjson is not None and _plain_json is orjson.dumps:
        data = _message_plain(m, _checked_plain)
        return None if data is None else orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    data = _message_plain(m)
    return None if data is None else _plain_json(data)


_PLAIN_JSON_REFUSED = (PydanticSerializationError, TypeError, RecursionError)

_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN = re.compile(r"[A-Za-z0-9_.:-]*")  # JSON string text as is (ids, kinds)


def canonical_json_bytes(value: Any) -> bytes:
    """:func:`canonical_json` as UTF-8 bytes.

    Plain data (see :func:`_sorted_plain`) is written by :data:`_plain_json` after its
    keys are put in order, byte for byte what ``json.dumps`` writes for it (a test holds
    the two to that on every code point and on nested, sized and tricky data). Its
    string escaping is the same as ``json.dumps(ensure_ascii=False)``: ``\\"``, ``\\\\``,
    the short escapes and ``\\u00XX`` for other control characters, nothing else. A
    lone surrogate cannot be written as UTF-8, so the fast encoder refuses it and the
    ``json.dumps`` path escapes it.
    """
    try:
        return _sorted_json(value)
    except (_NotPlain, *_PLAIN_JSON_REFUSED):
        return canonical_json(value).encode("utf-8")


def canonical_json(value: Any) -> str:
    """Deterministic JSON text for ``value`` that always encodes to UTF-8.

    Strict JSON: a NaN or infinite float raises :class:`InvalidEventError` (JSON has no
    such value, and storing ``null`` instead would alter the data), as does nesting too
    deep to encode.
    """
    try:
        return _sorted_json(value).decode("utf-8")
    except (_NotPlain, *_PLAIN_JSON_REFUSED):
        pass
    return canonical_dumps(value)


# What ``json.dumps`` with these options builds on every call, built once.
_CANONICAL = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
)


def canonical_dumps(value: Any) -> str:
    """:func:`canonical_json` through ``json.dumps`` (the reference encoding)."""
    try:
        text = _CANONICAL.encode(value)
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


_COLUMNS = {"id", "created_at", "kind"}  # never mutated


def encode_event(event: Event) -> str:
    """The payload text stored for an event (everything but id, created_at and kind)."""
    return _payload(event)[0]


#: The event classes themselves: an instance of one is dumped by its own serializer, which
#: is what the union's serializer picks for it, without the union's dispatch.
_EVENT_CLASSES = frozenset(get_args(get_args(Event)[0]))


def _payload(event: Event) -> tuple[str, int]:
    """:func:`encode_event`'s text and its size in UTF-8 bytes."""
    raw, _proven = _payload_proven(event)
    return raw.decode("utf-8"), len(raw)


#: Whether a custom event's payload written by :func:`_custom_json` needs no read-back parse
#: (its ``data`` is any JSON value: only a validator added to the class could refuse it).
_CUSTOM_PROVEN = _validates_types_only(Custom) and set(Custom.model_fields) == {
    "id",
    "created_at",
    "kind",
    "name",
    "data",
}


def _custom_json(event: Custom) -> bytes | None:
    """The payload of a custom event whose name is text and whose data is plain (see
    :func:`_sorted_plain`), as the serializer's dump written canonically would be; else
    None, and the general path decides."""
    d = event.__dict__
    try:
        name, data = d["name"], d["data"]
        if type(name) is not str:
            return None
        return _sorted_json({"name": name} if data is None else {"data": data, "name": name})
    except (KeyError, _NotPlain, *_PLAIN_JSON_REFUSED):
        return None


def _payload_proven(event: Event) -> tuple[bytes, bool]:
    """:func:`_payload` as UTF-8 bytes (the hash reads them; the text is decoded from them
    only where it is needed), and whether the payload is proven to read back. Proven: a
    message whose every field held exactly its annotated type (see
    :func:`_message_plain`), of classes whose validation checks nothing past those types
    (:data:`_READ_BACK_PROVEN`), with a timezone-aware ``created_at`` or none. Such a
    payload needs no read-back parse."""
    if type(event) is Message and _MESSAGE_FIELDS_KNOWN:
        try:
            message = _message_json(event)
        except _PLAIN_JSON_REFUSED:
            message = None  # a lone surrogate: the general path below escapes it
        if message is not None:
            when = event.__dict__.get("created_at")
            proven = _READ_BACK_PROVEN and (
                when is None or (type(when) is datetime and when.tzinfo is not None)
            )
            return message, proven
    if type(event) is Custom and _CUSTOM_PROVEN:
        custom = _custom_json(event)
        if custom is not None:
            when = event.__dict__.get("created_at")
            proven = when is None or (type(when) is datetime and when.tzinfo is not None)
            return custom, proven
    if type(event) in _EVENT_CLASSES:
        data = event.__pydantic_serializer__.to_python(
            event, mode="json", exclude_none=True, exclude=_COLUMNS
        )
    else:  # a subclass (or anything else): exactly as the union dumps it
        data = EVENT_ADAPTER.dump_python(event, mode="json", exclude_none=True, exclude=_COLUMNS)
    return canonical_json_bytes(data), False


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


#: ``created_at`` as a driver returns it in text: SQLite's naive UTC text (microseconds
#: always written), or Postgres's ``timestamptz`` in its ``ISO`` date style, whose zone
#: (group 2) has minutes only when they are not zero (``+00``, ``+05:30``).
_TEXT_STAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
    r"([+-][0-9]{2}(?::[0-9]{2})?)?"
)


def decode_row(kind: str, payload: str, event_id: str, created_at: datetime | str) -> Event:
    """:func:`decode_event` for ``created_at`` exactly as a driver returns the column: an
    aware datetime, or the text of :data:`_TEXT_STAMP` (SQLite's, and Postgres's for a
    view: see :mod:`eventstore._sql.view_rows`), which goes to the JSON validator as it is
    (with its zone) instead of being parsed here first."""
    if isinstance(created_at, str):
        match = _TEXT_STAMP.fullmatch(created_at)
        if match is not None:
            zone = match.group(2)
            stamp = (
                created_at + "Z"
                if zone is None
                else created_at + ":00"
                if len(zone) == 3
                else created_at
            )
            evt = _decode_fast(kind, payload, event_id, stamp)
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
    ts = ts.astimezone(UTC)
    if ts.year < 1000:
        return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # the platform decides its padding
    # The same text as the strftime above, built in C without parsing a format.
    return ts.replace(tzinfo=None).isoformat("T", "microseconds") + "Z"


def time_texts(created: datetime, sqlite: bool) -> tuple[str, Any]:
    """An event time's hashed text (:func:`format_ts`) and its column value: on SQLite the
    text SQLAlchemy stores there (:func:`sqlite_time_text`), else the datetime itself."""
    if created.tzinfo is UTC and created.year >= 1000:
        ts, plain = utc_texts(created)
        return ts, plain if sqlite else created
    ts = format_ts(created)
    return ts, sqlite_time_text(created) if sqlite else created


def utc_texts(created: datetime) -> tuple[str, str]:
    """:func:`format_ts` and :func:`sqlite_time_text` of a time in UTC (``tzinfo`` is
    :data:`~datetime.UTC`) of a year from 1000 on, both from one ``isoformat``."""
    plain = created.isoformat(" ", "microseconds")[:-6]  # without its "+00:00"
    return f"{plain[:10]}T{plain[11:]}Z", plain


def sqlite_time_text(value: datetime) -> str:
    """A datetime exactly as SQLAlchemy stores ``UTCDateTime`` on SQLite: naive UTC text
    with microseconds and a four-digit year (``strftime``'s ``%Y`` leaves years below 1000
    unpadded on glibc, which SQLite's reads then cannot parse)."""
    v = value.astimezone(UTC)
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d} "
        f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}"
    )


def chain_hash(
    prev: str | None, seq: int, event_id: str, kind: str, created_at: datetime, payload: str
) -> str:
    """SHA-256 over the previous hash and this event's canonical columns."""
    return chain_hash_ts(prev, seq, event_id, kind, format_ts(created_at), payload)


def chain_hash_ts(
    prev: str | None, seq: int, event_id: str, kind: str, ts: str, payload: str | bytes
) -> str:
    """:func:`chain_hash` with the time already formatted by :func:`format_ts` (a batch
    formats each distinct time once), and the payload as text or as its UTF-8 bytes
    (an append has them from the encoder: the text is not encoded a second time)."""
    h = hashlib.sha256(f"{prev or ''}\n{seq}\n{event_id}\n{kind}\n{ts}\n".encode())
    h.update(payload if isinstance(payload, bytes) else payload.encode("utf-8"))
    return h.hexdigest()


def batch_digest(encoded: Sequence[Encoded]) -> str:
    """SHA-256 over a batch's kinds, canonical payloads and caller-given ids, in order: what
    an idempotency key is compared by when it is reused."""
    h = hashlib.sha256(f"{len(encoded)}\n".encode())
    for enc in encoded:
        payload = enc.raw if enc.raw is not None else enc.payload.encode("utf-8")
        h.update(f"{enc.kind}\n{enc.event.id or ''}\n{len(payload)}\n".encode())
        h.update(payload)
    return h.hexdigest()


_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id() -> str:
    """A UUIDv7 string: sortable by creation time, monotonic within this process."""
    return new_ids(1)[0]


def new_ids(n: int) -> list[str]:
    """``n`` UUIDv7 strings, in order, from one lock, one read of the clock and one of the
    random source for all: the current millisecond (or the last one used, if the clock
    has not passed it) with a 12-bit counter that goes on from the last id's, carrying
    into the next millisecond past 4095; started at a random value below 2048 when the
    millisecond is new. Sortable by creation time, monotonic within this process."""
    global _last_ms, _counter
    # Eight random bytes per id make rand_b (its top two bits become the variant); two
    # more seed the counter when the millisecond is new.
    noise = os.urandom(8 * n + 2)
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms, count = _last_ms, _counter + 1
        else:
            count = int.from_bytes(noise[-2:], "big") & 0x7FF
        if n:
            last = count + n - 1
            _last_ms, _counter = ms + last // 4096, last % 4096
    hexed = noise.hex()
    out: list[str] = []
    add = out.append
    prefix = _time_prefix(ms)
    at = 0
    for _ in range(n):
        if count == 4096:
            ms, count = ms + 1, 0
            prefix = _time_prefix(ms)
        rand = hexed[at : at + 16]
        add(f"{prefix}{count:03x}-{_VARIANT[rand[0]]}{rand[1:4]}-{rand[4:]}")
        count += 1
        at += 16
    return out


def _time_prefix(ms: int) -> str:
    """A UUIDv7's text up to its counter: the 48-bit millisecond and the version digit."""
    t = f"{ms & 0xFFFF_FFFF_FFFF:012x}"
    return f"{t[:8]}-{t[8:]}-7"


#: rand_b's first hex digit from a random one: the variant's two bits (``10``) on top.
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}


def check_text(field: str, value: str | None, limit: int | None = None) -> None:
    """Reject a key or label no backend column can hold exactly (the same way everywhere)."""
    if value is None:
        return
    problem = storable_text_error(value)
    if problem is None and limit is not None and len(value) > limit:
        problem = f"is {len(value)} characters, over the limit of {limit}"
    if problem is not None:
        raise InvalidEventError(f"{field}: {problem}")


@dataclass(slots=True, frozen=True)
class EventHead:
    """What the rows of a message or a custom event read of the event itself once it is
    encoded: its id, time and kind (neither kind names another seq, so nothing else is
    checked as its rows are made). An encoding made in another process carries this
    instead of the event (see :mod:`eventstore._append.wire`)."""

    id: str | None
    created_at: datetime | None
    kind: str


@dataclass(slots=True)
class Encoded:
    """An event turned into the rows it is stored as, prepared outside the write lock."""

    event: Event | EventHead
    """The event (as stored: with its attachments moved out, a condensation with its
    summary's tokens counted), or only its :class:`EventHead` for a message or custom
    event encoded in another process."""
    kind: str
    text: str | None
    """The payload text, or ``None`` until :attr:`payload` is first read (then decoded
    from :attr:`raw` once): a SQLite append stores and hashes the bytes and never needs
    it."""
    size: int
    token_count: int
    part_rows: list[dict[str, Any]]
    blobs: dict[str, bytes] = field(default_factory=dict)
    """Attachment bytes moved out of the payload, by ``sha256:<hex>`` reference."""
    proven: bool = False
    """The payload is proven to read back (see :func:`_payload_proven`): no read-back
    parse is needed."""
    named: tuple[str, ...] = ()
    """The blob references the stored event names (:func:`blob_refs`): the ones whose
    bytes are in :attr:`blobs`, and any it names by digest alone."""
    raw: bytes | None = None
    """:attr:`payload` as UTF-8 bytes, when the encoder made them (the hash chain reads
    them rather than encoding the text again)."""
    stamps: tuple[str, str] | None = None
    """The event's time as hashed and as SQLite's column holds it (:func:`utc_texts`),
    when the append's checks made them: the rows take them rather than formatting the
    time again."""

    @property
    def payload(self) -> str:
        """The payload text (everything but id, created_at and kind, canonical JSON)."""
        text = self.text
        if text is None:
            if self.raw is None:  # pragma: no cover - the encoder gives one or the other
                raise ValueError("an encoding holds neither its payload text nor its bytes")
            text = self.text = self.raw.decode("utf-8")
        return text


def sole_text(evt: Event) -> bool:
    """Whether ``evt`` is a message whose one part is text (most chat messages).

    Such a message is appended without a ``parts`` row: the row would only repeat what
    the event row says. Its one part is index 0, of type ``text``, with no tool ids or
    state, :func:`implied_part_tokens` tokens, and not compacted, until a prune truncates
    it; that prune writes the row, stamped. (Messages appended before schema 0010 have
    the row; readers take a row wherever there is one.)
    """
    if not isinstance(evt, Message):
        return False
    parts = evt.parts
    return len(parts) == 1 and parts[0].type == "text"


def implied_part_tokens(event_tokens: int) -> int:
    """The token count of a :func:`sole_text` message's part, from the event's (what
    :func:`encode` counted: the part's tokens and :data:`MESSAGE_OVERHEAD`)."""
    return event_tokens - MESSAGE_OVERHEAD


def part_columns(idx: int, part: Part) -> dict[str, Any]:
    """The ``parts`` index columns copied from one part (all but its token count)."""
    # By type rather than getattr: a pydantic model answers a missing attribute through
    # its slow __getattr__.
    call_id: str | None = None
    name: str | None = None
    state: str | None = None
    if isinstance(part, ToolResultPart):
        call_id, name, state = part.tool_call_id or None, part.name, part.state
    elif isinstance(part, ToolCallPart):
        call_id, name = part.id, part.name
    elif not isinstance(part, (TextPart, ReasoningPart)):
        call_id = getattr(part, "tool_call_id", None) or None
    return {
        "idx": idx,
        "type": part.type,
        # Index copies of payload data: escaped and capped so that any id the payload
        # holds verbatim fits the column on both backends.
        "tool_call_id": column_text(call_id, 255),
        "tool_name": column_text(name, 255),
        "state": state,
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
    if isinstance(evt, Message):
        parts = evt.parts
        named: tuple[str, ...] = ()
        for p in parts:
            if isinstance(p, FilePart):
                if blob_threshold is not None:
                    stored, blobs = _strip_blobs(evt, blob_threshold)
                named = tuple(blob_refs(stored))
                break
        raw, proven = _payload_proven(stored)
        total, rows = plain_parts(parts, counter)
        if len(rows) == 1 and rows[0]["type"] == "text":
            rows = []  # a sole text part of a subclass of its own: its row is implied too
        return Encoded(stored, stored.kind, None, len(raw), total, rows, blobs, proven, named, raw)
    named = tuple(blob_refs(evt)) if isinstance(evt, Queued) else ()
    raw, proven = _payload_proven(evt)
    if isinstance(evt, Condensation):
        total = evt.summary_tokens or (counter.count(evt.summary) if evt.summary else 0)
        if evt.summary and not evt.summary_tokens:
            evt = evt.model_copy(update={"summary_tokens": total})
            raw, proven = _payload_proven(evt)
    else:
        total = 0
    return Encoded(evt, evt.kind, None, len(raw), total, [], blobs, proven, named, raw)


#: Attachments moved out of a payload: none (shared by every encoding without any; never
#: written to).
_NO_BLOBS: dict[str, bytes] = {}


def encode_plain(evt: Message, counter: TokenCounter) -> Encoded | None:
    """:func:`encode` of the common message in one call, or None for any other (the
    caller then takes :func:`encode` and its checks).

    The common message: of the class :class:`Message` itself, of kind ``message``, with no
    id, time, provider metadata or extra of its own, and a payload proven to read back
    (see :attr:`Encoded.proven`: every field of exactly its type, only the four plain part
    classes). Nothing else an append checks applies to it but its size and token count.
    The result is :func:`encode`'s, field for field (a test holds the two equal)."""
    raw = plain_payload(evt)
    if raw is None:
        return None
    total, rows = plain_parts(evt.__dict__["parts"], counter)
    return Encoded(evt, "message", None, len(raw), total, rows, _NO_BLOBS, True, (), raw)


def plain_payload(evt: Message) -> bytes | None:
    """The payload of the common message (see :func:`encode_plain`) as UTF-8 bytes, or
    None for any other message."""
    fields = evt.__dict__
    if (
        not _PLAIN_PROVEN
        or fields.get("kind") != "message"
        or fields.get("id") is not None
        or fields.get("created_at") is not None
        or fields.get("provider_metadata") is not None
        or fields.get("extra") is not None
    ):
        return None
    try:
        return _message_json(evt)
    except _PLAIN_JSON_REFUSED:
        return None  # a lone surrogate: encode escapes it


def plain_parts(parts: list[Part], counter: TokenCounter) -> tuple[int, list[dict[str, Any]]]:
    """The token count and ``parts`` rows of a common message's parts (see
    :func:`encode_plain`): none for a sole text part, whose row is implied."""
    if len(parts) == 1 and type(parts[0]) is TextPart:
        return MESSAGE_OVERHEAD + counter.count(parts[0].text), []
    return _message_parts(parts, counter)


#: Whether a payload :func:`_message_plain` builds is proven to read back.
_PLAIN_PROVEN = _MESSAGE_FIELDS_KNOWN and _READ_BACK_PROVEN


def _message_parts(parts: list[Part], counter: TokenCounter) -> tuple[int, list[dict[str, Any]]]:
    """A message's token count and ``parts`` index rows: what :func:`count_part` and
    :func:`part_columns` give for each part, with the common part classes taken inline
    (one call less per part, and no type tests past the first)."""
    total = MESSAGE_OVERHEAD
    rows: list[dict[str, Any]] = []
    count = counter.count
    for idx, part in enumerate(parts):
        if type(part) is TextPart:
            n = count(part.text)
            call_id = name = state = None
        elif type(part) is ToolResultPart:
            n = count(part.output)
            call_id, name, state = part.tool_call_id or None, part.name, part.state
        elif type(part) is ToolCallPart:
            n = count(f"{part.name} {part.arguments}")
            call_id, name, state = part.id, part.name, None
        else:  # the rest (and any subclass) the general way
            n = count_part(counter, part)
            row = part_columns(idx, part)
            row["token_count"] = n
            rows.append(row)
            total += n
            continue
        # column_text's result, without its call when the value is short plain text.
        if call_id is not None and (
            len(call_id) > 255 or not call_id.isascii() or "\x00" in call_id
        ):
            call_id = column_text(call_id, 255)
        if name is not None and (len(name) > 255 or not name.isascii() or "\x00" in name):
            name = column_text(name, 255)
        rows.append(
            {"idx": idx, "type": part.type, "tool_call_id": call_id, "tool_name": name,
             "state": state, "token_count": n}
        )  # fmt: skip
        total += n
    return total, rows


def read_back(kind: str, payload: str, created_at: Any) -> None:
    """Parse a payload as :func:`~eventstore.codec.decode_event` would, in one pass of
    pydantic's JSON validator (the read that follows an append must never fail)."""
    head = f'{{"kind":"{kind}","id":"0"'
    if isinstance(created_at, datetime):
        head += f',"created_at":"{created_at.isoformat()}"'
    text = head + "}" if payload == "{}" else head + "," + payload[1:]
    # The kind's own validator, as the read uses (the union would pick it by the tag).
    validator = _BY_KIND.get(kind)
    try:
        if validator is not None:
            validator.validate_json(text)
        else:
            EVENT_ADAPTER.validate_json(text)
    except ValidationError:
        # The JSON parser refuses what Python's accepts (lone surrogates kept from invalid
        # UTF-8 tool output): decide exactly as the read will.
        decode_event(kind, payload, "0", created_at or datetime.now(UTC))
