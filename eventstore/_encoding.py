"""Events checked and encoded for an append: one event at a time, so that a caller can
encode a batch up front (:func:`encode_all`) or while it streams the rows out
(:mod:`eventstore._stream`). Nothing here touches the database."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from ._checks import check_event
from ._checks import describe_error as _describe
from .codec import Encoded, check_text, encode, format_ts, read_back
from .errors import InvalidEventError, PayloadTooLargeError
from .events import EVENT_ADAPTER, Event
from .tokens import TokenCounter

__all__ = ["MAX_COUNT", "check_batch", "encode_one", "encode_all"]

MAX_COUNT = 2**31 - 1  # token counts and seqs are 32-bit columns


def check_batch(evts: Any) -> None:
    """Refuse anything but a collection of events (a single model is iterable too:
    pydantic yields its fields, so it is refused by name)."""
    if isinstance(evts, (dict, str, bytes, BaseModel)) or not isinstance(evts, Iterable):
        raise InvalidEventError("events must be a list of events")


def encode_one(
    evt: Event | dict[str, Any],
    i: int,
    counter: TokenCounter,
    blob_threshold: int | None,
    max_event_bytes: int,
) -> Encoded:
    """``events[i]`` validated, checked and encoded, or :class:`InvalidEventError` /
    :class:`PayloadTooLargeError` naming it."""
    if isinstance(evt, dict):
        try:
            evt = EVENT_ADAPTER.validate_python(evt)
        except ValidationError as exc:
            raise InvalidEventError(_describe(exc, i)) from None
        checked = True
    elif not hasattr(evt, "kind"):
        raise InvalidEventError(f"events[{i}]: not an event ({type(evt).__name__})")
    else:
        checked = False
    check_event(evt, f"events[{i}].")
    try:
        enc = encode(evt, counter, blob_threshold)
    except InvalidEventError as exc:
        raise InvalidEventError(f"events[{i}]: {exc}") from None
    except (
        PydanticSerializationError,
        ValueError,
        TypeError,
        AttributeError,  # a part list mutated to hold something that is not a part
        RecursionError,
    ) as exc:
        raise InvalidEventError(f"events[{i}]: cannot be serialized ({exc})") from None
    size = enc.size + (sum(len(b) for b in enc.blobs.values()) if enc.blobs else 0)
    if size > max_event_bytes:
        raise PayloadTooLargeError(size, max_event_bytes, i)
    if enc.token_count > MAX_COUNT:
        raise InvalidEventError(
            f"events[{i}]: {enc.token_count} tokens is over the limit of {MAX_COUNT}"
        )
    if not checked and not enc.proven:
        # Models are mutable and unvalidated on assignment: make sure what is about
        # to be stored reads back, or a single bad event would make the log unreadable.
        # (A payload built from exactly-typed fields is proven to: see Encoded.proven.)
        try:
            read_back(enc.kind, enc.payload, evt.created_at)
        except ValidationError as exc:
            raise InvalidEventError(_describe(exc, i)) from None
        except RecursionError:
            raise InvalidEventError(f"events[{i}]: nested too deeply") from None
    if evt.created_at is not None:
        try:
            format_ts(evt.created_at)
        except (OverflowError, ValueError):
            raise InvalidEventError(
                f"events[{i}].created_at: {evt.created_at!r} is outside the range a UTC "
                "timestamp can hold (years 1-9999 after conversion to UTC)"
            ) from None
    if evt.id is not None:
        if not 1 <= len(evt.id) <= 36:
            raise InvalidEventError(f"events[{i}].id: must be 1-36 characters")
        check_text(f"events[{i}].id", evt.id)
    return enc


def encode_all(
    evts: Sequence[Event | dict[str, Any]],
    counter: TokenCounter,
    blob_threshold: int | None,
    max_event_bytes: int,
) -> list[Encoded]:
    """:func:`encode_one` over a whole batch, in order."""
    check_batch(evts)
    return [
        encode_one(evt, i, counter, blob_threshold, max_event_bytes) for i, evt in enumerate(evts)
    ]
