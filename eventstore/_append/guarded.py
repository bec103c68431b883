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

import os
import threading
import weakref
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DBAPIError

from .. import _sql
from .._engine import busy_error
from ..codec import Encoded
from ..events import utcnow
from . import postgres, sqlite
from .rows import Rows, Write

if TYPE_CHECKING:
    from . import Store

__all__ = ["HeadCache", "DriverSlot", "eligible", "known_head", "append", "landed", "close"]


class HeadCache:
    """The head each session was left at by this store's own appends (bounded)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._heads: dict[str, tuple[int, str | None]] = {}

    def get(self, session_id: str) -> tuple[int, str | None] | None:
        return self._heads.get(session_id)

    def put(self, session_id: str, head: int, head_hash: str | None) -> None:
        if len(self._heads) >= self.size and session_id not in self._heads:
            self._heads.clear()  # cheap bound; misses only cost one locked append
        self._heads[session_id] = (head, head_hash)

    def drop(self, session_id: str) -> None:
        self._heads.pop(session_id, None)


class DriverSlot:
    """The pooled driver connections a store keeps checked out for its guarded appends.

    Checking a connection out of SQLAlchemy's pool and back in (its reset rolls back)
    cost a tenth of a one-event append's Python, and more under contention. The slot keeps
    the connections its appends gave back, and hands out the one given back last: a lone
    writer always gets the same one. It keeps up to ``size`` of them: on Postgres as many
    as the pool may open past its size (10 by default), so that writers on several
    threads each find one while the pool's own stay free for everything else; on SQLite
    one (its writers take turns, and a connection drops its page cache whenever another
    one wrote to the file). An append that finds none free while ``size`` are in use
    checks one out of the pool and returns it there. The store checks them back in on
    :meth:`close` (or when it is garbage-collected); a process forked from the one that
    took them checks out its own.
    """

    def __init__(self, engine: Any, size: int = 1) -> None:
        self._engine = engine
        self._size = size
        self._lock = threading.Lock()
        self._free: list[Any] = []  # kept connections not in use, the latest last
        self._kept = 0  # kept connections, in use or free
        self._pid = os.getpid()
        self._closed = False

    @classmethod
    def for_store(cls, store: object, engine: Any, owns_engine: bool) -> DriverSlot | None:
        """The slot of a store, on an engine it owns (a shared engine's pool is the
        caller's to size): checked back in by the store's ``close()``, or when the store
        is collected."""
        if not owns_engine:
            return None
        size = 1
        if engine.dialect.name == "postgresql":
            # As many as the pool may open past its size, so that its own connections
            # stay free for everything else (its size where that is unlimited).
            pool = engine.pool
            overflow = getattr(pool, "_max_overflow", 0)
            size = max(1, overflow if overflow >= 0 else pool.size())
        slot = cls(engine, size)
        weakref.finalize(store, slot.close)
        return slot

    def take(self) -> tuple[Any, bool]:
        """A pooled connection, and whether the slot keeps it (then :meth:`give` it back)."""
        with self._lock:
            if self._pid != os.getpid():
                # A forked child: the parent's connections are the parent's.
                self._free, self._kept, self._pid = [], 0, os.getpid()
            if self._free:
                return self._free.pop(), True
            keep = not self._closed and self._kept < self._size
            if keep:
                self._kept += 1
        try:
            return self._engine.raw_connection(), keep
        except BaseException:
            if keep:
                with self._lock:
                    self._kept -= 1
            raise

    def give(self, pooled: Any, kept: bool, broken: bool = False) -> None:
        """Return what :meth:`take` gave; a ``broken`` connection is not kept."""
        if kept:
            with self._lock:
                if not broken and not self._closed and self._pid == os.getpid():
                    self._free.append(pooled)
                    return
                self._kept -= 1
        pooled.close()

    def close(self) -> None:
        """Check the kept connections back in (ones in use go back when given)."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
            if self._pid != os.getpid():
                return
            self._kept -= len(free)
        for pooled in free:
            pooled.close()


def eligible(encoded: Sequence[Encoded], idempotency_key: str | None, pg: bool) -> bool:
    """Whether a batch may take the guarded path."""
    if idempotency_key is not None or not encoded:
        return False
    if pg and len(encoded) > postgres.MAX_GUARDED_BATCH:
        return False
    # Both in C loops: a 1,000-event batch is scanned in a few microseconds. (A prune's
    # kind is "prune" whatever its class, as an Encoded's kind is its event's.)
    return "prune" not in map(_KIND, encoded) and not any(map(_BLOBS, encoded))


_KIND = attrgetter("kind")
_BLOBS = attrgetter("blobs")


def known_head(
    store: Store, session_id: str, expected_seq: int | None
) -> tuple[int, str | None] | None:
    """The head the store's own appends left the session at, unless there is none or the
    caller expects another (then the locked path reports the conflict)."""
    cached = store._heads.get(session_id)
    if cached is None or (expected_seq is not None and expected_seq != cached[0]):
        return None
    return cached


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
    if store._lock_local:
        # A caller's engine has no lock_timeout of ours: a transaction sets it locally.
        try:
            with store._tx(write=True) as conn:
                driver = conn.connection.driver_connection
                assert driver is not None
                with driver.cursor() as cur:
                    return postgres.write_guarded(cur, w)
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise _LostConnection from exc
            raise
    pooled, kept = _take(store)
    broken = False
    try:
        db = pooled.driver_connection
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
