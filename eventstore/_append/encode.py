"""Events checked and encoded for an append (:class:`~eventstore.codec.Encoded`): one
event at a time, so that a caller can encode a batch up front (:func:`encode_all`) or
while its rows stream out (:class:`Encoding`, read as Postgres ``COPY`` sends the rows
before). The common message is encoded in one call (:func:`~eventstore.codec.encode_plain`).
Nothing here touches the database."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, overload

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from .._checks import MAX_COLUMN_INT, MAX_DEPTH, check_event, check_kind, describe_error
from ..codec import (
    Encoded,
    blob_refs,
    check_text,
    encode,
    encode_plain,
    format_ts,
    read_back,
    utc_texts,
)
from ..errors import InvalidEventError, PayloadTooLargeError
from ..events import EMPTY_ASSISTANT, EVENT_ADAPTER, Custom, Event, Message, Queued, empty_assistant
from ..tokens import TokenCounter

__all__ = ["check_batch", "encode_one", "encode_all", "Encoding", "names_blobs"]


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
    # A message or custom event is checked after it is encoded, and only if the payload
    # is not proven (see Encoded.proven): a proven payload holds nothing but text, the
    # four plain part classes and plain free-form data (no float, no lone surrogate, no
    # key that is not text, nesting within check_event's limit), where check_event finds
    # nothing to refuse. Its refusal still comes first whenever it has one (check_event
    # has no side effects).
    late = False
    if isinstance(evt, Message) and empty_assistant(evt):
        raise InvalidEventError(f"events[{i}]: {EMPTY_ASSISTANT}")
    if type(evt) is Message:
        plain = encode_plain(evt, counter)
        if plain is not None:  # nothing of its own to check but its size and count
            return _within_limits(plain, i, max_event_bytes)
        checked = False
        late = True
    elif type(evt) is Custom:
        checked = False
        late = True
    elif isinstance(evt, dict):
        try:
            evt = EVENT_ADAPTER.validate_python(evt)
        except ValidationError as exc:
            raise InvalidEventError(describe_error(exc, i)) from None
        checked = True
    elif not hasattr(evt, "kind"):
        raise InvalidEventError(f"events[{i}]: not an event ({type(evt).__name__})")
    else:
        checked = False
    check_kind(evt, f"events[{i}].")
    if not late:
        check_event(evt, f"events[{i}].")
    try:
        enc = encode(evt, counter, blob_threshold)
    except Exception as exc:
        if late:
            check_event(evt, f"events[{i}].")
        raise _refused(exc, i) from None
    if late and not enc.proven:
        check_event(evt, f"events[{i}].")
    _within_limits(enc, i, max_event_bytes)
    if not checked and not enc.proven:
        # Models are mutable and unvalidated on assignment: make sure what is about
        # to be stored reads back, or a single bad event would make the log unreadable.
        # (A payload built from exactly-typed fields is proven to: see Encoded.proven.)
        try:
            read_back(enc.kind, enc.payload, evt.created_at)
        except ValidationError as exc:
            raise InvalidEventError(describe_error(exc, i)) from None
        except RecursionError:
            raise InvalidEventError(f"events[{i}]: nested too deeply") from None
    when = evt.created_at
    if when is not None:
        if type(when) is datetime and when.tzinfo is UTC and when.year >= 1000:
            enc.stamps = utc_texts(when)  # formatted once: the rows take them
        else:
            try:
                format_ts(when)
            except (OverflowError, ValueError):
                raise InvalidEventError(
                    f"events[{i}].created_at: {when!r} is outside the range a UTC "
                    "timestamp can hold (years 1-9999 after conversion to UTC)"
                ) from None
    if evt.id is not None:
        if not 1 <= len(evt.id) <= 36:
            raise InvalidEventError(f"events[{i}].id: must be 1-36 characters")
        check_text(f"events[{i}].id", evt.id)
    return enc


def _within_limits(enc: Encoded, i: int, max_event_bytes: int) -> Encoded:
    """``enc``, or :class:`PayloadTooLargeError` / :class:`InvalidEventError` when
    ``events[i]`` is over the store's size limit or the token count a column holds."""
    size = enc.size + (sum(len(b) for b in enc.blobs.values()) if enc.blobs else 0)
    tokens = enc.token_count
    if size > max_event_bytes:
        raise PayloadTooLargeError(size, max_event_bytes, i)
    if tokens > MAX_COLUMN_INT:
        raise InvalidEventError(
            f"events[{i}]: {tokens} tokens is over the limit of {MAX_COLUMN_INT}"
        )
    return enc


def _refused(exc: Exception, i: int) -> Exception:
    """What an append raises for ``events[i]`` when encoding it raised ``exc``."""
    if isinstance(exc, InvalidEventError):
        return InvalidEventError(f"events[{i}]: {exc}")
    if isinstance(
        exc,
        (
            PydanticSerializationError,
            ValueError,
            TypeError,
            AttributeError,  # a part list mutated to hold something that is not a part
            RecursionError,
        ),
    ):
        return InvalidEventError(f"events[{i}]: cannot be serialized ({exc})")
    return exc


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


class Encoding(Sequence[Encoded]):
    """A batch's events, each checked and encoded (:func:`encode_one`) when it is first
    read, in order, and kept: the rows of a large batch are then made while the ones
    before them are on their way to the database, which inserts them meanwhile (see
    the Postgres ``COPY`` of :mod:`eventstore._append.postgres`). Reading it through gives what
    :func:`encode_all` gives, or raises what it raises."""

    def __init__(
        self,
        evts: Sequence[Event | dict[str, Any]],
        counter: TokenCounter,
        blob_threshold: int | None,
        max_event_bytes: int,
    ) -> None:
        check_batch(evts)
        self._evts = list(evts)
        self._args = (counter, blob_threshold, max_event_bytes)
        self._done: list[Encoded] = []

    def __len__(self) -> int:
        return len(self._evts)

    @property
    def events(self) -> Sequence[Event | dict[str, Any]]:
        """The events as given, encoded or not yet."""
        return self._evts

    def __iter__(self) -> Iterator[Encoded]:
        done, evts, i = self._done, self._evts, 0
        while i < len(evts):
            if i == len(done):  # else made already, by an earlier reading
                done.append(encode_one(evts[i], i, *self._args))
            yield done[i]
            i += 1

    @overload
    def __getitem__(self, i: int) -> Encoded: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Encoded]: ...
    def __getitem__(self, i: int | slice) -> Encoded | Sequence[Encoded]:
        if isinstance(i, slice):
            return list(self)[i]
        at = i + len(self) if i < 0 else i
        if not 0 <= at < len(self):
            raise IndexError(i)
        for k, enc in enumerate(self):
            if k == at:
                return enc
        raise AssertionError("unreachable")


def names_blobs(encoded: Sequence[Encoded]) -> bool:
    """Whether a batch may name an attachment by its digest alone (what
    :func:`~eventstore._sql.blobs.check_named` checks). An :class:`Encoding` answers from
    the events it has not encoded yet, so that the check does not encode the whole batch
    before its rows start on their way; any other batch from what it encoded."""
    if isinstance(encoded, Encoding):
        return any(_may_name_blob(evt) for evt in encoded.events)
    return any(enc.named for enc in encoded)


def _may_name_blob(value: Any) -> bool:
    """Whether an event as given (a model, or a dict still to validate) may hold a
    ``FilePart`` naming a blob. For a dict, any ``blob`` key with a value anywhere in it
    counts: an over-cautious yes costs only the early encoding the check needs. So does a
    structure nested deeper than :data:`MAX_DEPTH`, which encoding then refuses by name
    (the walk keeps its own stack: hostile nesting meets no recursion limit here)."""
    if isinstance(value, (Message, Queued)):
        return bool(blob_refs(value))
    if isinstance(value, BaseModel):  # no other event names a blob (see codec.encode)
        return False
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if item.get("blob") is not None:
                return True
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= MAX_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
    if isinstance(value, dict):
        return value.get("blob") is not None or any(_may_name_blob(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_may_name_blob(v) for v in value)
    return False
