"""The guarded append: rows computed from the head the store remembers, written with a
head move that happens *only if the head is still there*.

A store remembers the head (seq and hash) each of its appends left, per session
(:class:`HeadCache`). The next append to that session makes its rows from the remembered
head and writes them with the backend's guarded statements (:mod:`.sqlite`,
:mod:`.postgres`): one round trip on Postgres, ``BEGIN IMMEDIATE``, the guarded
``UPDATE`` and the inserts on SQLite. If another writer moved the head, nothing is
written and the append takes the locked path (:mod:`.locked`), which reads the head
under a lock and reports conflicts as usual.

Both run on a pooled driver connection taken from the engine without SQLAlchemy's
``Connection`` around it (:class:`DriverSlot`): for a one-event append, checking out,
beginning and committing through it cost about as much Python as everything else the
append does.

Only plain appends take it (:func:`eligible`): a batch with an idempotency key, a prune or
an attachment to store goes the locked way, as does a batch over
:data:`~.postgres.MAX_GUARDED_BATCH` events on Postgres (``COPY`` streams it). A lock
wait that runs out raises :class:`StorageBusyError` at once (the locked path would only
wait a second time); any other failure drops the remembered head and leaves the append
to the locked path, which maps errors as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from sqlalchemy.exc import DBAPIError

from .. import _sql
from .._engine import busy_error
from ..codec import Encoded
from ..distribution import routes_appends
from ..errors import NotFoundError
from ..events import utcnow
from . import postgres, sqlite
from .locked import lock_head
from .rows import Rows, Write
from .store import DirectCalls, Store

__all__ = ["eligible", "known_head", "routed", "read_head", "append", "landed", "close"]


def eligible(encoded: Sequence[Encoded], idempotency_key: str | None, capped: bool) -> bool:
    """Whether a batch may take the guarded path (``capped``: at most
    :data:`~.postgres.MAX_GUARDED_BATCH` events, on plain Postgres)."""
    if idempotency_key is not None or not encoded:
        return False
    if capped and len(encoded) > postgres.MAX_GUARDED_BATCH:
        return False
    # In C loops: a 1,000-event batch is scanned in a few microseconds. (A prune's kind is
    # "prune" whatever its class, as an Encoded's kind is its event's.) A batch naming a
    # blob goes the locked way, which stores its bytes or checks the user holds it.
    return "prune" not in map(_KIND, encoded) and not any(map(_NAMED, encoded))


_KIND = attrgetter("kind")
_NAMED = attrgetter("named")


def known_head(
    store: Store, session_id: str, expected_seq: int | None
) -> tuple[int, str | None] | None:
    """The head the store's own appends left the session at, unless there is none or the
    caller expects another (then the locked path reports the conflict)."""
    cached = store._heads.get(session_id)
    if cached is None or (expected_seq is not None and expected_seq != cached[0]):
        return None
    return cached


def routed(store: Store) -> bool:
    """Whether the store's appends go through the routed function (Citus): known once
    the schema is opened, or, on a caller's engine, from its first write."""
    store._open_schema()
    return store._routed


def read_head(
    store: Store, session_id: str, expected_seq: int | None
) -> tuple[int, str | None] | None:
    """The session's head seq and hash as stored now (not locked: the guarded write
    checks it), unless the caller expects another (or there is no such session): then
    the locked path reports it."""
    try:
        head = store._run(lock_head, store.tenant, session_id, lock=False)
    except NotFoundError:
        return None
    return None if expected_seq is not None and expected_seq != head[0] else head


def append(
    store: Store, session_id: str, encoded: Sequence[Encoded], head: int, head_hash: str | None
) -> tuple[list[int], int, str | None] | None:
    """Write ``encoded`` after the remembered ``head``: the seqs written, the new head seq
    and hash; or ``None`` when the locked path is to take it after all."""
    pg = store.dialect == "postgresql"
    rows = Rows(session_id, head, head_hash, encoded, utcnow(), sqlite=not pg)
    event_rows = rows.collect()
    w = Write(store.tenant, session_id, head, head_hash, rows.seq, rows.head_hash,
              event_rows, rows.parts)  # fmt: skip
    store._open_schema()
    try:
        applied = _pg_append(store, w) if pg else _sqlite_append(store, w)
    except _LostConnection:
        # The statement may have committed before the connection went: the locked path
        # must not write the events a second time. The hash chain says whether it did.
        store._heads.drop(session_id)
        if not landed(store, session_id, w.seq, w.new_hash):
            return None  # it did not: the locked path writes it
    except Exception as exc:
        store._heads.drop(session_id)
        busy = busy_error(exc, store._timeouts)
        if busy is not None:
            raise busy from None  # nothing was written; waiting again would not help
        return None  # the locked path repeats the append and maps any error
    else:
        if not applied:
            store._heads.drop(session_id)
            return None
        store._heads.put(session_id, w.seq, w.new_hash)
    return list(range(head + 1, w.seq + 1)), w.seq, w.new_hash


class _LostConnection(Exception):
    """The connection died during a Postgres guarded append: whether it committed is unknown."""


def landed(store: Store, session_id: str, seq: int, event_hash: str | None) -> bool:
    """Whether the event stored at ``seq`` of the session has ``event_hash`` (then an
    append whose outcome was lost with its connection was written: the hash chains over
    the events' ids and content, so no other append has that hash)."""
    stored = store._run(_sql.read_event, store.tenant, session_id, seq)
    return stored is not None and stored.hash == event_hash


def _sqlite_append(store: Store, w: Write) -> bool:
    pooled, kept = _take(store)
    broken = False
    try:
        db = pooled.driver_connection
        db.execute("BEGIN IMMEDIATE")  # the connection runs with isolation_level=None
        try:
            applied = sqlite.write_guarded(db, w)
            db.execute("COMMIT" if applied else "ROLLBACK")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    except Exception as exc:
        broken = _discard_if_broken(store, pooled, exc)
        raise
    finally:
        _give(store, pooled, kept, broken)
    return applied


def _pg_append(store: Store, w: Write) -> bool:
    if store._lock_local and not store._routed:
        # A caller's engine has no lock_timeout of ours: a transaction sets it locally.
        try:
            with store._tx(write=True) as conn:
                if routes_appends(conn):
                    # Distributed: the routed call below, from now on.
                    store._routed = True
                else:
                    driver = conn.connection.driver_connection
                    assert driver is not None
                    with driver.cursor() as cur:
                        return postgres.write_guarded(cur, w)
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise _LostConnection from exc
            raise
    if store._routed and store._direct is not None:
        direct = _direct_append(store, store._direct, w)
        if direct is not None:
            return direct
    pooled, kept = _take(store)
    broken = False
    try:
        db = pooled.driver_connection
        if store._routed:
            applied = postgres.write_routed(db, w, store._timeouts.lock_timeout_ms)
        else:
            applied = postgres.write_guarded_prepared(db, w)
        # After the commit, and never failing the append: reads on the replica wait
        # for this position.
        if applied and store._replica is not None:
            store._replica.note_driver_write(db)
    except Exception as exc:
        broken = _discard_if_broken(store, pooled, exc)
        status = pooled.driver_connection.pgconn.transaction_status
        if not broken and status == postgres.libpq().ACTIVE:
            # Failed with its statement still under way: the connection cannot be used
            # again, and whether the statement committed is unknown.
            pooled.invalidate(exc)
            broken = True
        if broken:
            raise _LostConnection from exc
        raise
    finally:
        _give(store, pooled, kept, broken)
    return applied


def _direct_append(store: Store, direct: DirectCalls, w: Write) -> bool | None:
    """The routed call sent straight to the session's worker (``citus_direct``); ``None``
    when it is to go by the coordinator (no worker known or reachable). A failure there
    forgets where the session is, and the locked path repeats the append through the
    coordinator (after :func:`landed` says it was not written, if the connection was
    lost)."""
    taken = direct.take(w.session_id)
    if taken is None:
        return None
    pooled, kept, slot = taken
    broken = False
    try:
        return postgres.write_routed(pooled.driver_connection, w, store._timeouts.lock_timeout_ms)
    except Exception as exc:
        direct.forget(w.session_id)
        broken = _discard_if_broken(store, pooled, exc)
        db = pooled.driver_connection
        if not broken and (db.closed or db.pgconn.transaction_status == postgres.libpq().ACTIVE):
            pooled.invalidate(exc)  # whether the call committed is unknown
            broken = True
        if broken:
            raise _LostConnection from exc
        raise
    finally:
        slot.give(pooled, kept, broken)


def close(store: Store) -> None:
    """Check the store's kept connections back in (``EventStore.close``)."""
    if store._driver_slot is not None:
        store._driver_slot.close()


def _take(store: Store) -> tuple[Any, bool]:
    slot = store._driver_slot
    return (store.engine.raw_connection(), False) if slot is None else slot.take()


def _give(store: Store, pooled: Any, kept: bool, broken: bool) -> None:
    if kept and store._driver_slot is not None:
        store._driver_slot.give(pooled, kept, broken)
    else:
        pooled.close()


def _discard_if_broken(store: Store, pooled: Any, exc: Any) -> bool:
    """Invalidate a pooled connection the error says is gone (what SQLAlchemy's own
    ``Connection`` does), so the pool does not hand it out again; whether it was."""
    if store.engine.dialect.is_disconnect(exc, pooled.dbapi_connection, None):
        pooled.invalidate(exc)
        return True
    return False
