"""The locked append: the head read under the write lock, in one transaction.

It takes every append the guarded path does not: the first to a session this store has
not written, one with an idempotency key, a prune, an attachment to store, a large batch
on Postgres, and any append whose guarded attempt found the head moved. It also writes
for callers that already hold a transaction (the run queue, imports, purges): see
:func:`write`.

On Postgres the head row is locked ``FOR UPDATE``, so concurrent appenders to one session
queue there instead of racing to the ``UNIQUE(session_id, seq)`` check; SQLite writers
already hold the database lock (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection

from .._engine import driver_error
from .._sql import READ_COLUMNS, Segment, blobs, check_lookup, lineage, owner_of, row_to_stored
from ..codec import (
    Encoded,
    batch_digest,
    check_text,
    implied_part_tokens,
    sole_text,
    sqlite_time_text,
)
from ..distribution import is_distributed, routes_appends
from ..errors import (
    ConflictError,
    ConnectionDropped,
    IdempotencyMismatchError,
    InvalidEventError,
    NotFoundError,
    StorageBusyError,
    StorageError,
)
from ..events import Prune, utcnow
from ..records import AppendResult
from ..schema import events, fork_compactions, kind_is, parts, sessions
from . import postgres, sqlite
from .encode import names_blobs
from .rows import Rows
from .store import Store

__all__ = ["append", "write", "lock_head", "insert_rows", "move_head"]


def append(
    store: Store,
    session_id: str,
    encoded: Sequence[Encoded],
    expected_seq: int | None,
    idempotency_key: str | None,
) -> AppendResult:
    """:func:`write` in a write transaction of ``store``'s, with its errors mapped: a
    taken event id names the event, a lost race reports the head it left."""
    try:
        result = store._run(
            write, store.tenant, session_id, encoded, write=True,
            expected_seq=expected_seq, idempotency_key=idempotency_key,
        )  # fmt: skip
        if result.head_hash is not None:
            store._heads.put(session_id, result.head_seq, result.head_hash)
        return result
    except (StorageBusyError, ConnectionDropped):
        raise
    except StorageError as exc:
        if (taken := _taken_id_error(store, session_id, encoded, exc)) is not None:
            raise taken from None
        # A UNIQUE(session_id, seq) violation means another writer won; report the
        # head it left rather than the driver's message.
        head = store.head(session_id)
        if expected_seq is not None and head != expected_seq:
            raise ConflictError(session_id, expected_seq, head) from None
        raise


_LOCK_HEAD = select(sessions.c.head_seq, sessions.c.head_hash).where(
    sessions.c.id == bindparam("sid"),
    sessions.c.tenant == bindparam("tenant"),
    sessions.c.deleted_at.is_(None),
)
_LOCK_HEAD_PG = _LOCK_HEAD.with_for_update()


def lock_head(
    conn: Connection, tenant: str, session_id: str, *, lock: bool = True
) -> tuple[int, str | None]:
    """The session's head seq and hash, locked for the rest of the transaction (unless
    not ``lock``)."""
    check_lookup(tenant, session_id)
    q = _LOCK_HEAD_PG if lock and conn.dialect.name == "postgresql" else _LOCK_HEAD
    row = conn.execute(q, {"sid": session_id, "tenant": tenant}).first()
    if row is None:
        raise NotFoundError(f"no session {session_id!r} for tenant {tenant!r}")
    return row.head_seq, row.head_hash


def write(
    conn: Connection,
    tenant: str,
    session_id: str,
    encoded: Sequence[Encoded],
    *,
    expected_seq: int | None,
    idempotency_key: str | None,
    hashes: Sequence[str] | None = None,
) -> AppendResult:
    """Append ``encoded`` in the caller's transaction: lock the head, replay or refuse a
    reused idempotency key, check ``expected_seq``, insert the rows, store attachments,
    apply prunes and move the head. ``hashes``: each event's recorded hash (see
    :class:`~.rows.Rows`)."""
    head, head_hash = lock_head(conn, tenant, session_id)
    check_text("idempotency_key", idempotency_key, 255)
    batch_hash = batch_digest(encoded) if idempotency_key is not None else None
    if idempotency_key is not None:
        prior = conn.execute(
            select(events.c.seq, events.c.batch_size, events.c.batch_digest).where(
                events.c.session_id == session_id, events.c.idempotency_key == idempotency_key
            )
        ).first()
        if prior is not None:
            if prior.batch_size != len(encoded) or (
                prior.batch_digest is not None and prior.batch_digest != batch_hash
            ):
                raise IdempotencyMismatchError(
                    f"idempotency key {idempotency_key!r} was already used for a different "
                    f"append (seqs {prior.seq}..{prior.seq + prior.batch_size - 1}: other "
                    f"events, content or ids than these {len(encoded)}); use a new key for "
                    "a new append, or resend exactly the same events to retry"
                )
            return AppendResult(
                seqs=list(range(prior.seq, prior.seq + prior.batch_size)),
                head_seq=head,
                replayed=True,
            )
    if expected_seq is not None and expected_seq != head:
        raise ConflictError(session_id, expected_seq, head)
    if not encoded:
        return AppendResult(seqs=[], head_seq=head)
    if names_blobs(encoded):  # before the batch's own rows (they would name it too)
        blobs.check_named(conn, tenant, session_id, encoded)
    rows = Rows(
        session_id, head, head_hash, encoded, utcnow(),
        sqlite=conn.dialect.name == "sqlite",
        idempotency_key=idempotency_key, batch_hash=batch_hash, hashes=hashes,
    )  # fmt: skip
    insert_rows(conn, rows)
    attached = {d: b for enc in encoded for d, b in enc.blobs.items()}
    if attached:
        blobs.save(conn, tenant, attached)
    if rows.prunes:
        segments = lineage(conn, tenant, session_id)
        for prune_seq, prune, created in rows.prunes:
            _apply_prune(conn, session_id, segments, prune_seq, prune, created)
    # updated_at follows the newest event's time (the caller's, when it gave one).
    move_head(conn, session_id, head, rows.seq, rows.head_hash, rows.newest)
    return AppendResult(
        seqs=list(range(head + 1, rows.seq + 1)), head_seq=rows.seq, head_hash=rows.head_hash
    )


def insert_rows(conn: Connection, rows: Rows) -> None:
    """Insert every row of ``rows`` through the driver, inside the caller's transaction:
    ``COPY`` on Postgres, the SQLite module's INSERTs there. Driver errors are raised as
    SQLAlchemy raises its own (so the store maps them as usual).

    On Citus a small batch (a purge's record, a prune, an idempotent retry's few events)
    goes by INSERTs routed to the session's worker; a large one by COPY, which Citus
    always commits by two-phase commit (on that one worker), but whose rows it does not
    plan one by one: 1,000 events took 3-5x as long by INSERT. (A plain batch of any size
    takes the routed function instead, see :mod:`eventstore._append`.)"""
    driver = conn.connection.driver_connection
    assert driver is not None
    try:
        if (
            len(rows.encoded) <= postgres.MAX_GUARDED_BATCH
            and conn.dialect.name == "postgresql"
            and routes_appends(conn)
        ):
            event_rows = rows.collect()
            with driver.cursor() as cur:
                postgres.insert_rows_routed(cur, event_rows, rows.parts)
            return
        if conn.dialect.name == "postgresql":
            with driver.cursor() as cur:
                postgres.copy_rows(cur, rows, rows.parts)
            return
        event_rows = rows.collect()
        cur = driver.cursor()
        try:
            sqlite.insert_rows(cur, rows.session_id, event_rows, rows.parts)
        finally:
            cur.close()
    except conn.dialect.loaded_dbapi.Error as exc:
        raise driver_error(conn, exc) from None


def move_head(
    conn: Connection,
    session_id: str,
    head: int,
    new_seq: int,
    new_hash: str | None,
    newest: datetime,
) -> None:
    """Move the locked head from ``head`` to ``new_seq`` (``newest``: the newest event's
    time, the session's ``updated_at``). Every statement that moves a head is in the
    backend modules, beside its guarded twin."""
    driver = conn.connection.driver_connection
    assert driver is not None
    try:
        if conn.dialect.name == "postgresql":
            move = postgres.move_head_routed if is_distributed(conn) else postgres.move_head
            with driver.cursor() as cur:
                move(cur, session_id, head, new_seq, new_hash, newest)
            return
        cur = driver.cursor()
        try:
            sqlite.move_head(cur, session_id, new_seq, new_hash, sqlite_time_text(newest))
        finally:
            cur.close()
    except conn.dialect.loaded_dbapi.Error as exc:
        raise driver_error(conn, exc) from None


class _ImpliedRow(NamedTuple):
    type: str
    compacted_seq: int | None


def _sole_text_tokens(conn: Connection, owner: str, seq: int) -> int | None:
    """The part's token count when event ``seq`` of ``owner`` is a message appended
    without its sole text part's row (see :func:`~eventstore.codec.sole_text`)."""
    row = conn.execute(
        select(*READ_COLUMNS).where(
            events.c.session_id == owner, events.c.seq == seq, kind_is("message")
        )
    ).first()
    if row is None:
        return None
    stored = row_to_stored(row, owner)
    return implied_part_tokens(stored.token_count) if sole_text(stored.event) else None


def _apply_prune(
    conn: Connection,
    session_id: str,
    segments: list[Segment],
    prune_seq: int,
    prune: Prune,
    created: datetime,
) -> None:
    for ref in prune.targets:
        owner = owner_of(segments, ref.seq)
        row: Any = (
            None
            if owner is None
            else conn.execute(
                select(parts.c.type, parts.c.compacted_seq).where(
                    parts.c.session_id == owner, parts.c.seq == ref.seq, parts.c.idx == ref.index
                )
            ).first()
        )
        implied = None
        if row is None and owner is not None and ref.index == 0:
            implied = _sole_text_tokens(conn, owner, ref.seq)
            if implied is not None:
                row = _ImpliedRow("text", None)
        # A placeholder replaces tool results only; a truncation (keep_chars) may also cut
        # a message's text (a pinned head too large for the budget) or a tool call's
        # arguments (a reply's file contents, cut before it is first sent).
        allowed = (
            ("tool_result",) if prune.keep_chars is None else ("tool_result", "text", "tool_call")
        )
        if row is None or row.type not in allowed:
            what = "tool result" if prune.keep_chars is None else "tool result, text or tool call"
            raise InvalidEventError(
                f"prune.targets: seq {ref.seq} part {ref.index} is not a stored {what}"
            )
        if owner == session_id and implied is not None:
            # The part had no row (see codec.sole_text): it gets one now, stamped.
            conn.execute(
                insert(parts),
                {"session_id": owner, "seq": ref.seq, "idx": 0, "type": "text",
                 "token_count": implied, "compacted_at": created, "compacted_seq": prune_seq},
            )  # fmt: skip
            continue
        if owner == session_id:
            conn.execute(
                update(parts)
                .where(
                    parts.c.session_id == owner,
                    parts.c.seq == ref.seq,
                    parts.c.idx == ref.index,
                    parts.c.compacted_seq.is_(None),
                )
                .values(compacted_at=created, compacted_seq=prune_seq)
            )
            continue
        # An inherited part: the owner's own stamp counts only if it predates the fork.
        seg_hi = next(s.hi for s in segments if s.owner == owner)
        if row.compacted_seq is not None and seg_hi is not None and row.compacted_seq <= seg_hi:
            continue
        done = conn.execute(
            select(fork_compactions.c.seq).where(
                fork_compactions.c.session_id == session_id,
                fork_compactions.c.seq == ref.seq,
                fork_compactions.c.idx == ref.index,
            )
        ).first()
        if done is None:
            conn.execute(
                insert(fork_compactions),
                {
                    "session_id": session_id,
                    "seq": ref.seq,
                    "idx": ref.index,
                    "compacted_seq": prune_seq,
                    "compacted_at": created,
                },
            )


#: How each database names the per-session key on event ids in a unique violation.
_ID_KEY = ("uq_events_id_session_id", "events.id, events.session_id")


def _taken_id_error(
    store: Store, session_id: str, encoded: Sequence[Encoded], exc: Exception
) -> InvalidEventError | None:
    """The error that names the event whose caller-given id the session already holds
    (or that another event of the batch has), when ``exc`` is the database refusing the
    batch for it; else ``None``. Nothing of the batch was written."""
    if not any(key in str(exc) for key in _ID_KEY):
        return None
    seen: dict[str, int] = {}
    for i, enc in enumerate(encoded):
        eid = enc.event.id
        if eid is not None and eid in seen:
            return InvalidEventError(
                f"events[{i}].id: {eid!r} is also the id of events[{seen[eid]}]; event ids "
                "are unique within a session (nothing was written)"
            )
        if eid is not None:
            seen[eid] = i
    held = store._run(_held_ids, session_id, list(seen))
    for eid, i in seen.items():
        if eid in held:
            return InvalidEventError(
                f"events[{i}].id: {eid!r} is already the id of event {held[eid]} of session "
                f"{session_id}; event ids are unique within a session (nothing was written)"
            )
    return None


def _held_ids(conn: Connection, session_id: str, ids: list[str]) -> dict[str, int]:
    """The seq of each of ``ids`` that the session's own rows hold."""
    out: dict[str, int] = {}
    for at in range(0, len(ids), 500):
        rows = conn.execute(
            select(events.c.id, events.c.seq).where(
                events.c.session_id == session_id, events.c.id.in_(ids[at : at + 500])
            )
        )
        out.update({r.id: r.seq for r in rows})
    return out
