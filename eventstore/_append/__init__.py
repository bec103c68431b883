"""The write path, top-down: :func:`append` encodes a batch (:mod:`.encode`), then writes
it *guarded* when the store remembers the session's head (:mod:`.guarded`: one statement
that moves the head only if it is still there) or *locked* (:mod:`.locked`: the head read
under the write lock). Both make their rows with the one row maker (:mod:`.rows`) and
write them with their backend's statements (:mod:`.sqlite`, :mod:`.postgres`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..codec import Encoded
from ..events import Event
from ..records import AppendResult
from . import guarded, locked, postgres
from .encode import Encoding, encode_all
from .store import DriverSlot, HeadCache, Store

__all__ = ["Store", "append", "append_encoded", "encode", "HeadCache", "DriverSlot"]


def encode(
    store: Store, events: Sequence[Event | dict[str, Any]], idempotency_key: str | None = None
) -> Sequence[Encoded]:
    """``events`` checked and encoded with ``store``'s settings. A Postgres batch for the
    locked path's ``COPY`` comes as an :class:`Encoding`, each event encoded as the rows
    before it are sent (unless it has an idempotency key, whose digest needs every payload
    first)."""
    args = (store.token_counter, store.blob_threshold, store.max_event_bytes)
    if (
        store.dialect == "postgresql"
        and idempotency_key is None
        and isinstance(events, Sequence)
        and len(events) > postgres.MAX_GUARDED_BATCH
    ):
        return Encoding(events, *args)
    return encode_all(events, *args)


def append(
    store: Store,
    session_id: str,
    events: Sequence[Event | dict[str, Any]],
    expected_seq: int | None,
    idempotency_key: str | None,
) -> tuple[list[int], int, str | None] | AppendResult:
    """Append ``events``: the seqs, new head seq and hash of a guarded append, or the
    locked append's :class:`~eventstore.AppendResult` (a guarded append builds no result
    model: :meth:`~eventstore.EventStore.append` needs only the seqs)."""
    return append_encoded(
        store, session_id, encode(store, events, idempotency_key), expected_seq, idempotency_key
    )


def append_encoded(
    store: Store,
    session_id: str,
    encoded: Sequence[Encoded],
    expected_seq: int | None,
    idempotency_key: str | None,
) -> tuple[list[int], int, str | None] | AppendResult:
    """:func:`append` of events already checked and encoded with ``store``'s settings
    (:func:`encode`, or :func:`~.encode.encode_all` in another process, see :mod:`.wire`)."""
    known = guarded.known_head(store, session_id, expected_seq)
    # On Citus a batch of any size is one routed call: the locked path's COPY into a
    # distributed table always commits by two-phase commit, and its many-row INSERTs
    # are planned row by row.
    routed = store.dialect == "postgresql" and guarded.routed(store)
    capped = store.dialect == "postgresql" and not routed
    if (
        known is None
        and routed
        and len(encoded) > postgres.MAX_GUARDED_BATCH
        and guarded.eligible(encoded, idempotency_key, capped)
    ):
        # A large batch to a session whose head this store does not know: read it (one
        # routed statement), so that the batch goes the routed way too.
        known = guarded.read_head(store, session_id, expected_seq)
    if known is not None and guarded.eligible(encoded, idempotency_key, capped):
        done = guarded.append(store, session_id, encoded, *known)
        if done is not None:
            return done
    return locked.append(store, session_id, encoded, expected_seq, idempotency_key)
