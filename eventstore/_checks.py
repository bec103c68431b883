"""Pure checks on what an append may store, shared by the store and the importers.

Nothing here touches the database. :func:`check_references` validates every seq a
condensation or prune names against the seq the event itself gets; :func:`check_json_value`
refuses free-form data that JSON cannot hold exactly (dict keys that are not valid
Unicode, nesting deeper than the encoder handles). Both raise
:class:`~eventstore.errors.InvalidEventError` naming the field and the fix.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from .errors import InvalidEventError
from .events import (
    EMPTY_ASSISTANT,
    Condensation,
    Custom,
    Dequeued,
    Event,
    LLMCall,
    Message,
    ProviderPart,
    Prune,
    Purge,
    Queued,
    empty_assistant,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_COLUMN_INT",
    "check_references",
    "check_json_value",
    "check_content",
    "check_event",
    "check_int",
    "describe_error",
]

_MAX_BIND_INT = 2**63 - 1  # the widest integer both backends bind


def check_int(name: str, value: int | None, *, low: int = 0, high: int = _MAX_BIND_INT) -> None:
    """Refuse a seq or count argument that is not an integer in ``low..high``."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidEventError(f"{name}: expected an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidEventError(f"{name}: {value} is outside {low}..{high}")


def describe_error(exc: ValidationError, index: int) -> str:
    """The first problem pydantic found in ``events[index]``, as one line."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"events[{index}].{loc}: {err['msg']}"


#: How deep free-form data (``Custom.data``, metadata dicts) may nest.
MAX_DEPTH = 200

#: The largest seq, index or count an integer column holds on every backend.
MAX_COLUMN_INT = 2**31 - 1


def _in_range(field: str, value: int, lo: int, hi: int, why: str) -> None:
    if not lo <= value <= hi:
        raise InvalidEventError(f"{field}: {value} is outside {lo}..{hi} ({why})")


def check_references(evt: Event, seq: int, prefix: str = "") -> None:
    """Refuse a condensation or prune at ``seq`` that names a seq outside ``1..seq-1``.

    A condensation's forgotten range must lie before it, its pinned seqs must exist and
    lie outside the forgotten range, and ``supersedes``/``request_seq`` must point back.
    A prune's targets must lie before it. Anything else would make later views fail or
    change the past (``view(as_of=k)`` must not depend on events after ``k``).
    """
    before = f"an earlier seq, 1..{seq - 1}, since this event gets seq {seq}"
    if isinstance(evt, Condensation):
        name = f"{prefix}condensation"
        if evt.forgotten_from < 1 or evt.forgotten_to < evt.forgotten_from - 1:
            raise InvalidEventError(
                f"{name}.forgotten_from/forgotten_to: bad range "
                f"{evt.forgotten_from}..{evt.forgotten_to} (use 1 <= from <= to + 1)"
            )
        if evt.forgotten_to >= seq:
            raise InvalidEventError(
                f"{name}.forgotten_to: {evt.forgotten_to} is not before the condensation "
                f"itself (seq {seq}); it must be {before}"
            )
        for p in evt.pinned:
            _in_range(f"{name}.pinned", p, 1, seq - 1, f"a pinned seq must be {before}")
            if evt.forgotten_from <= p <= evt.forgotten_to:
                raise InvalidEventError(
                    f"{name}.pinned: seq {p} lies in the forgotten range "
                    f"{evt.forgotten_from}..{evt.forgotten_to}; pin only events kept in view"
                )
        for field in ("supersedes", "request_seq"):
            value = getattr(evt, field)
            if value is not None:
                _in_range(f"{name}.{field}", value, 1, seq - 1, f"it must be {before}")
        _in_range(f"{name}.summary_tokens", evt.summary_tokens, 0, MAX_COLUMN_INT, "a token count")
    elif isinstance(evt, Dequeued):
        _in_range(
            f"{prefix}dequeued.queued_seq", evt.queued_seq, 1, seq - 1, f"it must be {before}"
        )
    elif isinstance(evt, Prune):
        for i, ref in enumerate(evt.targets):
            _in_range(f"{prefix}prune.targets[{i}].seq", ref.seq, 1, seq - 1, f"use {before}")
            _in_range(
                f"{prefix}prune.targets[{i}].index", ref.index, 0, MAX_COLUMN_INT, "a part index"
            )


_NON_FINITE = (
    "a float is NaN or infinite, which JSON cannot hold; store None or a string "
    "such as 'nan' instead"
)


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and any("\ud800" <= c <= "\udfff" for c in text)


def check_json_value(field: str, value: Any, *, keys: bool = True) -> None:
    """Refuse free-form data the store cannot keep exactly.

    Dict keys must be valid Unicode (a lone surrogate in a key cannot be serialized
    without being altered; string *values* may hold them), and data may nest at most
    :data:`MAX_DEPTH` levels, and floats must be finite. ``keys=False`` skips the key
    check, for data encoded by :func:`~eventstore.codec.canonical_json` alone (which keeps
    such keys).
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidEventError(f"{field}: {_NON_FINITE}")
        elif isinstance(item, dict):
            if depth >= MAX_DEPTH:
                break
            for key, sub in item.items():
                if keys and isinstance(key, str) and _has_surrogate(key):
                    raise InvalidEventError(
                        f"{field}: the key {key!r} contains a lone surrogate (not valid "
                        "Unicode); keys must be valid text, so decode the bytes properly or "
                        "put the raw text in a value"
                    )
                if isinstance(sub, (dict, list, tuple, float)):
                    stack.append((sub, depth + 1))
        elif isinstance(item, (list, tuple)):
            if depth >= MAX_DEPTH:
                break
            stack.extend(
                (sub, depth + 1) for sub in item if isinstance(sub, (dict, list, tuple, float))
            )
    else:
        return
    raise InvalidEventError(
        f"{field}: nested more than {MAX_DEPTH} levels deep; flatten it "
        "(or store the deep structure as a JSON string)"
    )


_FREE_FORM: dict[type, tuple[str, ...]] = {
    Message: ("provider_metadata", "extra"),
    Custom: ("data",),
    Condensation: ("settings",),
    Prune: ("settings",),
    LLMCall: ("render_options", "metadata"),
}


def check_content(msg: Message, where: str = "message") -> None:
    """Refuse an assistant message with neither content nor tool calls
    (:func:`~eventstore.events.empty_assistant`), naming it as ``where``."""
    try:
        empty = empty_assistant(msg)
    except (AttributeError, TypeError):
        return  # parts that are not parts: the encoder refuses them with its own error
    if empty:
        raise InvalidEventError(f"{where}: {EMPTY_ASSISTANT}")


def check_event(evt: Event, prefix: str = "") -> None:
    """:func:`check_json_value` over every free-form field of ``evt``."""
    if type(evt) is not Message:  # a plain message, the common case, is neither
        if isinstance(evt, Purge):
            raise InvalidEventError(
                f"{prefix.rstrip('.') or 'event'}: purge records are written by "
                "EventStore.purge, not appended"
            )
        if isinstance(evt, Queued):
            check_event(evt.message, f"{prefix}message.")
            check_content(evt.message, f"{prefix}message")
    if isinstance(evt, Message):
        # (A message built without its parts fails to encode next, with a clear error.)
        for i, part in enumerate(getattr(evt, "parts", None) or ()):
            if isinstance(part, ProviderPart):
                check_json_value(f"{prefix}parts[{i}].item", part.item)
    for name in _FREE_FORM.get(type(evt), ()):
        value = getattr(evt, name, None)
        if value is not None and not isinstance(value, (str, int, bool)):
            check_json_value(f"{prefix}{name}", value)


#: The kind each event class declares, by class (filled as classes are met).
_DECLARED_KINDS: dict[type, Any] = {}


def check_kind(evt: Event, prefix: str = "") -> None:
    """Refuse an event whose ``kind`` was assigned something other than what its class
    declares. Models do not validate on assignment, and the stored kind picks the model
    a read validates the payload with: a message stored under another kind could never be
    read again. (An object that is not an event model is left to the encoder.)"""
    cls = type(evt)
    want = _DECLARED_KINDS.get(cls, _DECLARED_KINDS)
    if want is _DECLARED_KINDS:
        fields = getattr(cls, "model_fields", None)
        field = fields.get("kind") if isinstance(fields, dict) else None
        want = _DECLARED_KINDS[cls] = None if field is None else field.default
    if want is None:
        return
    kind = evt.__dict__.get("kind")
    if type(kind) is not str or kind != want:
        raise InvalidEventError(
            f"{prefix}kind: {kind!r} is not the kind of a {cls.__name__}, which is {want!r} "
            "(an event's kind is set by its class)"
        )
