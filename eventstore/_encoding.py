"""Events checked and encoded for an append: one event at a time, so that a caller can
encode a batch up front (:func:`encode_all`) or while its rows stream out
(:class:`Encoding`, read by :func:`eventstore._bulk.bulk_insert`). Nothing here touches
the database."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, overload

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from ._bulk import BULK_MIN, time_texts
from ._checks import check_event, check_kind
from ._checks import describe_error as _describe
from .codec import (
    Encoded,
    check_text,
    encode,
    encode_plain,
    format_ts,
    new_ids,
    plain_parts,
    plain_payload,
    read_back,
)
from .errors import InvalidEventError, PayloadTooLargeError
from .events import EVENT_ADAPTER, Event, Message
from .tokens import TokenCounter

__all__ = [
    "MAX_COUNT",
    "check_batch",
    "encode_one",
    "encode_all",
    "encode_for_append",
    "plain_rows",
    "Encoding",
]

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
    # A message with no free-form field set is checked after it is encoded, and only if
    # the payload is not proven (see Encoded.proven): a proven payload holds nothing but
    # text and the four plain part classes, where check_event looks at nothing. Its
    # refusal still comes first whenever it has one (check_event has no side effects).
    late = False
    if type(evt) is Message:
        plain = encode_plain(evt, counter)
        if plain is not None:  # nothing of its own to check but its size and count
            return _within_limits(plain, i, max_event_bytes)
        checked = False
        fields = evt.__dict__
        late = fields.get("provider_metadata") is None and fields.get("extra") is None
    elif isinstance(evt, dict):
        try:
            evt = EVENT_ADAPTER.validate_python(evt)
        except ValidationError as exc:
            raise InvalidEventError(_describe(exc, i)) from None
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


def _within_limits(enc: Encoded, i: int, max_event_bytes: int) -> Encoded:
    """``enc``, or what :func:`_check_limits` raises for it."""
    size = enc.size + (sum(len(b) for b in enc.blobs.values()) if enc.blobs else 0)
    _check_limits(size, enc.token_count, i, max_event_bytes)
    return enc


def _check_limits(size: int, tokens: int, i: int, max_event_bytes: int) -> None:
    """:class:`PayloadTooLargeError` / :class:`InvalidEventError` when ``events[i]`` is
    over the store's size limit or the token count a column holds."""
    if size > max_event_bytes:
        raise PayloadTooLargeError(size, max_event_bytes, i)
    if tokens > MAX_COUNT:
        raise InvalidEventError(f"events[{i}]: {tokens} tokens is over the limit of {MAX_COUNT}")


def plain_rows(
    evts: Sequence[Any],
    counter: TokenCounter,
    max_event_bytes: int,
    session_id: str,
    head: int,
    head_hash: str | None,
    now: datetime,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], str | None] | None:
    """The SQLite rows of a batch of common messages appended after ``head`` (see
    :func:`~eventstore.codec.encode_plain`), made in one pass: the ``events`` rows, the
    ``parts`` rows and the new head hash, as :func:`encode_all` and then
    :meth:`~eventstore._bulk.BatchRows.collect` make them (a test holds the two equal);
    or None when an event is not a common message (then the caller takes that way).

    Raises what :func:`encode_all` raises for an event over the size or token limit.
    """
    if not all(type(evt) is Message for evt in evts):  # a cheap look first
        return None
    ids = new_ids(len(evts))
    ids.reverse()
    ts, stamp = time_texts(now, sqlite=True)
    event_rows: list[tuple[Any, ...]] = []
    part_rows: list[tuple[Any, ...]] = []
    add_event, add_part = event_rows.append, part_rows.append
    sha256 = hashlib.sha256
    prev, seq = head_hash, head
    for i, evt in enumerate(evts):
        raw = plain_payload(evt)
        if raw is None:
            return None
        tokens, rows = plain_parts(evt.__dict__["parts"], counter)
        size = len(raw)
        if size > max_event_bytes or tokens > MAX_COUNT:
            _check_limits(size, tokens, i, max_event_bytes)
        seq += 1
        event_id = ids.pop()
        # BatchRows.stream's hash, over the payload's bytes as they were written.
        h = sha256(f"{prev or ''}\n{seq}\n{event_id}\nmessage\n{ts}\n".encode())
        h.update(raw)
        prev = h.hexdigest()
        for r in rows:
            add_part(
                (session_id, seq, r["idx"], r["type"], r["tool_call_id"], r["tool_name"],
                 r["state"], r["token_count"])
            )  # fmt: skip
        add_event(
            (session_id, seq, event_id, "message", stamp, raw.decode("utf-8"), tokens, size,
             None, None, None, prev)
        )  # fmt: skip
    return event_rows, part_rows, prev


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
    :func:`eventstore._bulk.bulk_insert`). Reading it through gives what
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


def encode_for_append(
    store: Any, evts: Sequence[Event | dict[str, Any]], idempotency_key: str | None
) -> Sequence[Encoded]:
    """:func:`encode_all` with ``store``'s settings (an :class:`~eventstore.EventStore`);
    on Postgres, a batch large enough for the bulk path as an :class:`Encoding`, encoded
    as its rows are sent, unless it has an idempotency key (whose digest needs every
    payload first)."""
    args = (store.token_counter, store.blob_threshold, store.max_event_bytes)
    if (
        store.dialect == "postgresql"
        and idempotency_key is None
        and isinstance(evts, Sequence)
        and len(evts) > BULK_MIN
    ):
        return Encoding(evts, *args)
    return encode_all(evts, *args)
