"""The append fast path: one round trip on Postgres, the fewest statements on SQLite.

A store remembers the head (seq and hash) each of its appends left, per session. The next
append to that session computes its rows from the remembered head and writes them with a
statement that moves the head *only if it is still there*:

* Postgres: one data-modifying statement, its own transaction: ``UPDATE sessions ... WHERE
  head_seq = <remembered> AND head_hash = <remembered>`` in a CTE, and the ``events`` and
  ``parts`` inserts guarded by it. If another writer moved the head, the update matches
  no row (Postgres re-checks the condition after waiting for the row lock), nothing is
  inserted, and the append takes the ordinary path, which reads the head under a lock and
  reports conflicts as usual.
* SQLite: ``BEGIN IMMEDIATE``, the same guarded ``UPDATE`` (no head read), the inserts,
  ``COMMIT``.

Both run on a pooled driver connection taken from the engine without SQLAlchemy's
``Connection`` around it: for a one-event append, checking out, beginning and committing
through it cost about as much Python as everything else the append does. The statements
are fixed texts (one per batch shape), so they stay prepared: by ``sqlite3``'s statement
cache, and on Postgres by name on each connection, sent through libpq without psycopg's
``execute`` (see :func:`_pg_write_prepared`).

Only plain appends take it: a batch with an idempotency key, a prune or an attachment to
store goes the ordinary way, as does a batch over :data:`MAX_FAST_BATCH` events on
Postgres (``COPY`` streams it). On SQLite a batch of any size takes it: past
:data:`~eventstore._bulk.BULK_MIN` events with the ordinary path's multi-row INSERTs,
without SQLAlchemy's transaction and head read around them; a SQLite batch of common
messages (see :func:`~eventstore.codec.encode_plain`) has its rows made in one pass from
the events (:func:`try_plain_batch`). Either way the rows and hashes are the same; tests
hold the paths to that. A lock wait that runs out raises :class:`StorageBusyError` at
once (the ordinary path would only wait a second time); any other failure drops the
remembered head and leaves the append to the ordinary path, which maps errors as usual.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import weakref
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from sqlalchemy.exc import DBAPIError

from . import _sql
from ._bulk import (
    _CREATED,
    _EV_SQLITE,
    _EVENT_COLS,
    _PART_COLS,
    _PG_EVENT_TYPES,
    _PG_PART_TYPES,
    _PT_SQLITE,
    _SQLITE_EVENTS,
    _SQLITE_PARTS,
    BULK_MIN,
    BatchRows,
)
from ._encoding import encode_for_append, plain_rows
from ._engine import busy_error
from .codec import Encoded
from .events import utcnow

__all__ = [
    "eligible",
    "close_driver_slot",
    "DriverSlot",
    "HeadCache",
    "fast_append",
    "try_fast",
    "try_plain_batch",
]


class HeadCache:
    """The head each session was left at by this store's own appends (bounded)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._heads: dict[str, tuple[int, str | None]] = {}

    def get(self, session_id: str) -> tuple[int, str | None] | None:
        return self._heads.get(session_id)

    def put(self, session_id: str, head: int, head_hash: str | None) -> None:
        if len(self._heads) >= self.size and session_id not in self._heads:
            self._heads.clear()  # cheap bound; misses only cost one ordinary append
        self._heads[session_id] = (head, head_hash)

    def drop(self, session_id: str) -> None:
        self._heads.pop(session_id, None)


class DriverSlot:
    """The pooled driver connections a store keeps checked out for its fast path.

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


#: Larger batches go the ordinary way on Postgres: there ``COPY`` streams the rows, while
#: one statement with thousands of parameters costs more to parse than the round trips it
#: saves. On SQLite a batch of any size takes the fast path, with the ordinary path's
#: multi-row INSERTs past :data:`~eventstore._bulk.BULK_MIN` events.
MAX_FAST_BATCH = 16


def eligible(encoded: Sequence[Encoded], idempotency_key: str | None, sqlite: bool) -> bool:
    """Whether a batch may take the fast path."""
    if idempotency_key is not None or not encoded:
        return False
    if not sqlite and len(encoded) > MAX_FAST_BATCH:
        return False
    # Both in C loops: a 1,000-event batch is scanned in a few microseconds. (A prune's
    # kind is "prune" whatever its class, as an Encoded's kind is its event's.)
    # A payload naming a blob by digest goes the ordinary way, which checks the user holds
    # it (the text '"blob":"' occurs in a payload only as a FilePart's own field).
    return (
        "prune" not in map(_KIND, encoded)
        and not any(map(_BLOBS, encoded))
        and not any('"blob":"' in p for p in map(_PAYLOAD, encoded))
    )


_KIND = attrgetter("kind")
_BLOBS = attrgetter("blobs")
_PAYLOAD = attrgetter("payload")


_SQLITE_HEAD = (
    "UPDATE sessions SET head_seq = ?, head_hash = ?, updated_at = ? "
    "WHERE id = ? AND tenant = ? AND head_seq = ? AND head_hash IS ? AND deleted_at IS NULL"
)


def _sqlite_write(
    db: Any,
    tenant: str,
    session_id: str,
    head: int,
    head_hash: str | None,
    seq: int,
    new_hash: str | None,
    event_rows: list[tuple[Any, ...]],
    part_rows: list[tuple[Any, ...]],
) -> bool:
    """The statements of a fast append on a ``sqlite3`` connection inside the caller's
    write transaction (rows as :meth:`~eventstore._bulk.BatchRows.collect` makes them for
    SQLite); ``False`` (nothing written) when the head moved."""
    newest = event_rows[-1][_CREATED]
    cur = db.execute(_SQLITE_HEAD, (seq, new_hash, newest, session_id, tenant, head, head_hash))
    if cur.rowcount != 1:
        return False
    if len(event_rows) > BULK_MIN:  # the ordinary path's multi-row INSERTs
        _SQLITE_EVENTS.insert(db, session_id, event_rows)
        _SQLITE_PARTS.insert(db, session_id, part_rows)
        return True
    if len(event_rows) == 1:
        db.execute(_EV_SQLITE, event_rows[0])
    else:
        db.executemany(_EV_SQLITE, event_rows)
    if len(part_rows) == 1:
        db.execute(_PT_SQLITE, part_rows[0])
    elif part_rows:
        db.executemany(_PT_SQLITE, part_rows)
    return True


class _PgStatement:
    """A fast append's statement for one batch shape: its text with psycopg's ``%s``
    placeholders, and with libpq's ``$n`` ones under the name it is prepared as."""

    __slots__ = ("text", "numbered", "name")

    def __init__(self, text: str) -> None:
        self.text = text
        pieces = text.split("%s")
        self.numbered = "".join(
            f"{piece}${i}" if i < len(pieces) else piece for i, piece in enumerate(pieces, 1)
        ).encode()
        self.name = b"eventstore_append_" + hashlib.sha1(self.numbered).hexdigest()[:16].encode()


_PG_SQL: dict[tuple[int, int], _PgStatement] = {}


def _pg_sql(events: int, parts: int) -> _PgStatement:
    """The one statement of a fast append of ``events`` events with ``parts`` parts."""
    stmt = _PG_SQL.get((events, parts))
    if stmt is not None:
        return stmt

    def values(types: tuple[str, ...], rows: int) -> str:
        group = "(" + ", ".join(f"%s::{t}" for t in types) + ")"
        return ", ".join([group] * rows)

    sql = (
        "WITH h AS (UPDATE sessions SET head_seq = %s, head_hash = %s, updated_at = %s "
        "WHERE id = %s AND tenant = %s AND head_seq = %s "
        "AND head_hash IS NOT DISTINCT FROM %s AND deleted_at IS NULL RETURNING id, tenant), "
        # The range, queued for the tenant feed (see eventstore._feed and _sql.move_head).
        "f AS (INSERT INTO feed_pending (session_id, from_seq, to_seq, tenant, queued_at) "
        "SELECT id, %s::integer, %s::integer, tenant, clock_timestamp() FROM h), "
        f"e AS (INSERT INTO events ({', '.join(_EVENT_COLS)}) "
        f"SELECT * FROM (VALUES {values(_PG_EVENT_TYPES, events)}) AS v "
        "WHERE EXISTS (SELECT 1 FROM h))"
    )
    if parts:
        sql += (
            f", p AS (INSERT INTO parts ({', '.join(_PART_COLS)}) "
            f"SELECT * FROM (VALUES {values(_PG_PART_TYPES, parts)}) AS v "
            "WHERE EXISTS (SELECT 1 FROM h))"
        )
    sql += " SELECT count(*) FROM h"
    stmt = _PG_SQL[(events, parts)] = _PgStatement(sql)
    return stmt


def _pg_params(
    tenant: str,
    session_id: str,
    head: int,
    head_hash: str | None,
    seq: int,
    new_hash: str | None,
    event_rows: list[tuple[Any, ...]],
    part_rows: list[tuple[Any, ...]],
) -> list[Any]:
    newest = event_rows[-1][_CREATED]
    params: list[Any] = [seq, new_hash, newest, session_id, tenant, head, head_hash, head + 1, seq]
    for r in event_rows:
        params += r
    for r in part_rows:
        params += r
    return params


def _pg_values(*args: Any) -> list[bytes | None]:
    """:func:`_pg_params` in Postgres's text format (what :func:`_pg_text` makes of each),
    in one loop: the common types inline, and the time every row of a batch and the head
    shares formatted once."""
    out: list[bytes | None] = []
    add = out.append
    last: Any = None
    last_text: bytes | None = None
    for value in _pg_params(*args):
        t = type(value)
        if t is str:
            if "\x00" in value:
                raise _nul_refused()
            add(value.encode())
        elif value is None:
            add(None)
        elif t is int:
            add(b"%d" % value)
        elif value is last:
            add(last_text)
        else:
            last, last_text = value, _pg_text(value)
            add(last_text)
    return out


def _pg_write(cur: Any, *args: Any) -> bool:
    """The one statement of a fast append on a psycopg cursor (``args`` as
    :func:`_pg_params` takes them); ``False`` (nothing written) when the head moved."""
    event_rows, part_rows = args[-2], args[-1]
    cur.execute(_pg_sql(len(event_rows), len(part_rows)).text, _pg_params(*args))
    row = cur.fetchone()
    return bool(row and row[0])


class _Libpq:
    """What the prepared path needs from psycopg, imported on first use (a store on
    SQLite never loads the driver)."""

    def __init__(self) -> None:
        from psycopg import DataError, errors, pq

        self.DataError = DataError
        self.error_from_result = errors.error_from_result
        self.IDLE = pq.TransactionStatus.IDLE
        self.ACTIVE = pq.TransactionStatus.ACTIVE
        self.FATAL = pq.ExecStatus.FATAL_ERROR
        self.COMMAND_OK = pq.ExecStatus.COMMAND_OK
        self.TUPLES_OK = pq.ExecStatus.TUPLES_OK
        self.SQLSTATE = pq.DiagnosticField.SQLSTATE


@functools.cache
def _libpq() -> _Libpq:
    return _Libpq()


def _nul_refused() -> Exception:
    """What psycopg raises for a NUL in a text parameter (libpq would cut the text there)."""
    return _libpq().DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")


def _pg_text(value: Any) -> bytes | None:
    """A parameter in Postgres's text format, as psycopg would send it."""
    if value is None:
        return None
    t = type(value)
    if t is str:
        if "\x00" in value:
            raise _nul_refused()
        return value.encode()
    if t is int:
        return str(value).encode()
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.isoformat().encode()
    raise TypeError(f"no text form for a fast-append parameter of type {t.__name__}")


def _pg_write_prepared(db: Any, *args: Any) -> bool:
    """:func:`_pg_write` through libpq on a psycopg connection outside any transaction
    (the statement is then its own): the statement prepared once per connection, its
    parameters sent in text format. psycopg's own ``execute`` costs about as much client
    CPU as the rest of a one-event append, and on a machine where the client and the
    server share cores that is the writers' throughput. A connection that does not speak
    UTF-8 takes psycopg's cursor, which encodes for it."""
    pq = _libpq()
    pgconn = db.pgconn
    if pgconn.transaction_status != pq.IDLE:
        # Nothing of the fast path's is open on a connection it was given: a transaction
        # left on it is rolled back, not written into (nor kept open for good).
        db.rollback()
    if pgconn.parameter_status(b"client_encoding") != b"UTF8":
        auto = db.autocommit
        if not auto:
            db.autocommit = True
        try:
            with db.cursor() as cur:
                return _pg_write(cur, *args)
        finally:
            if not auto:
                db.autocommit = False
    event_rows, part_rows = args[-2], args[-1]
    stmt = _pg_sql(len(event_rows), len(part_rows))
    values = _pg_values(*args)
    res = pgconn.exec_prepared(stmt.name, values)
    if res.status == pq.FATAL and res.error_field(pq.SQLSTATE) == b"26000":
        # Not prepared on this connection yet (or deallocated since: psycopg deallocates
        # every prepared statement when it rolls a transaction back).
        made = pgconn.prepare(stmt.name, stmt.numbered)
        if made.status != pq.COMMAND_OK:
            raise pq.error_from_result(made, encoding="utf-8")
        res = pgconn.exec_prepared(stmt.name, values)
    if res.status != pq.TUPLES_OK:
        raise pq.error_from_result(res, encoding="utf-8")
    return res.get_value(0, 0) not in (None, b"0")


def fast_append(
    store: Any,
    session_id: str,
    events: Sequence[Any],
    expected_seq: int | None,
    idempotency_key: str | None,
) -> tuple[tuple[list[int], int, str | None] | None, Sequence[Encoded]]:
    """An append through a fast path where one takes it (:func:`try_plain_batch`, else the
    batch encoded and :func:`try_fast`): its seqs, new head seq and hash, or ``None``;
    and the encoded batch the ordinary path then writes (empty when a fast path took it)."""
    plain = try_plain_batch(store, session_id, events, expected_seq, idempotency_key)
    if plain is not None:
        return plain, ()
    encoded = encode_for_append(store, events, idempotency_key)
    return try_fast(store, session_id, encoded, expected_seq, idempotency_key), encoded


def try_fast(
    store: Any,
    session_id: str,
    encoded: Sequence[Encoded],
    expected_seq: int | None,
    idempotency_key: str | None,
) -> tuple[list[int], int, str | None] | None:
    """The fast path for ``store`` (an :class:`~eventstore.EventStore`): the seqs written,
    the new head seq and hash; or ``None`` when the batch or the remembered head does not
    allow it (the caller takes the ordinary path then)."""
    pg = store.dialect == "postgresql"
    known = _known_head(store, session_id, expected_seq)
    if known is None or not eligible(encoded, idempotency_key, not pg):
        return None
    head, head_hash = known
    rows = BatchRows(session_id, head, head_hash, encoded, None, None, utcnow())
    event_rows, part_rows = rows.collect(sqlite=not pg)
    return _write(store, session_id, head, head_hash, rows.head_hash, event_rows, part_rows)


def try_plain_batch(
    store: Any,
    session_id: str,
    events: Sequence[Any],
    expected_seq: int | None,
    idempotency_key: str | None,
) -> tuple[list[int], int, str | None] | None:
    """:func:`try_fast` for a SQLite batch over :data:`~eventstore._bulk.BULK_MIN` events
    that are all common messages (see :func:`~eventstore.codec.encode_plain`), its rows
    made in one pass from the events (:func:`~eventstore._encoding.plain_rows`) instead of
    encoded first and made after; ``None`` for any other batch, or when the remembered
    head does not allow it."""
    if (
        store.dialect != "sqlite"
        or idempotency_key is not None
        or type(events) is not list
        or len(events) <= BULK_MIN
    ):
        return None
    known = _known_head(store, session_id, expected_seq)
    if known is None:
        return None
    head, head_hash = known
    made = plain_rows(
        events, store.token_counter, store.max_event_bytes, session_id, head, head_hash, utcnow()
    )
    if made is None:
        return None
    event_rows, part_rows, new_hash = made
    return _write(store, session_id, head, head_hash, new_hash, event_rows, part_rows)


def _known_head(
    store: Any, session_id: str, expected_seq: int | None
) -> tuple[int, str | None] | None:
    """The head the store's own appends left the session at, unless there is none or the
    caller expects another (then the ordinary path reports the conflict)."""
    cached = store._heads.get(session_id)
    if cached is None or (expected_seq is not None and expected_seq != cached[0]):
        return None
    return cached


def _write(
    store: Any,
    session_id: str,
    head: int,
    head_hash: str | None,
    new_hash: str | None,
    event_rows: list[tuple[Any, ...]],
    part_rows: list[tuple[Any, ...]],
) -> tuple[list[int], int, str | None] | None:
    """Write a fast append's rows after ``head``: the seqs written, the new head seq and
    hash; or ``None`` when the ordinary path is to take it after all."""
    seq = head + len(event_rows)
    args = (store.tenant, session_id, head, head_hash, seq, new_hash, event_rows, part_rows)
    store._open_schema()
    try:
        if store.dialect == "postgresql":
            applied = _pg_append(store, args)
        else:
            applied = _sqlite_append(store, args)
    except _LostConnection:
        # The statement may have committed before the connection went: the ordinary path
        # must not write the events a second time. The hash chain says whether it did.
        store._heads.drop(session_id)
        if not landed(store, session_id, seq, new_hash):
            return None  # it did not: the ordinary path writes it
    except Exception as exc:
        store._heads.drop(session_id)
        busy = busy_error(exc, store._timeouts)
        if busy is not None:
            raise busy from None  # nothing was written; waiting again would not help
        return None  # the ordinary path repeats the append and maps any error
    else:
        if not applied:
            store._heads.drop(session_id)
            return None
        store._heads.put(session_id, seq, new_hash)
    return list(range(head + 1, seq + 1)), seq, new_hash


class _LostConnection(Exception):
    """The connection died during a Postgres fast append: whether it committed is unknown."""


def landed(store: Any, session_id: str, seq: int, event_hash: str | None) -> bool:
    """Whether the event stored at ``seq`` of the session has ``event_hash`` (then an
    append whose outcome was lost with its connection was written: the hash chains over
    the events' ids and content, so no other append has that hash)."""
    stored = store._run(_sql.read_event, store.tenant, session_id, seq)
    return stored is not None and stored.hash == event_hash


def _sqlite_append(store: Any, args: tuple[Any, ...]) -> bool:
    pooled, kept = _take(store)
    broken = False
    try:
        db = pooled.driver_connection
        db.execute("BEGIN IMMEDIATE")  # the connection runs with isolation_level=None
        try:
            applied = _sqlite_write(db, *args)
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


def _pg_append(store: Any, args: tuple[Any, ...]) -> bool:
    if store._lock_local:
        # A caller's engine has no lock_timeout of ours: a transaction sets it locally.
        try:
            with store._tx(write=True) as conn:
                with conn.connection.driver_connection.cursor() as cur:
                    return _pg_write(cur, *args)
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise _LostConnection from exc
            raise
    pooled, kept = _take(store)
    broken = False
    try:
        db = pooled.driver_connection
        applied = _pg_write_prepared(db, *args)
        # After the commit, and never failing the append: reads on the replica wait
        # for this position.
        if applied and store._replica is not None:
            store._replica.note_driver_write(db)
    except Exception as exc:
        broken = _discard_if_broken(store, pooled, exc)
        if not broken and pooled.driver_connection.pgconn.transaction_status == _libpq().ACTIVE:
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


_SLOT_LOCK = threading.Lock()


def _slot(store: Any) -> DriverSlot | None:
    """The store's slot, made on its first fast append."""
    slot: DriverSlot | None
    try:
        slot = store.__dict__["_driver_slot"]
    except KeyError:
        with _SLOT_LOCK:
            if "_driver_slot" not in store.__dict__:
                made = DriverSlot.for_store(store, store.engine, store._owns_engine)
                store.__dict__["_driver_slot"] = made
            slot = store.__dict__["_driver_slot"]
    return slot


def close_driver_slot(store: Any) -> None:
    """Check the store's kept connection back in (``EventStore.close``)."""
    slot = store.__dict__.get("_driver_slot")
    if slot is not None:
        slot.close()


def _take(store: Any) -> tuple[Any, bool]:
    slot = _slot(store)
    return (store.engine.raw_connection(), False) if slot is None else slot.take()


def _give(store: Any, pooled: Any, kept: bool, broken: bool) -> None:
    if kept:
        store.__dict__["_driver_slot"].give(pooled, kept, broken)
    else:
        pooled.close()


def _discard_if_broken(store: Any, pooled: Any, exc: Exception) -> bool:
    """Invalidate a pooled connection the error says is gone (what SQLAlchemy's own
    ``Connection`` does), so the pool does not hand it out again; whether it was."""
    if store.engine.dialect.is_disconnect(exc, pooled.dbapi_connection, None):
        pooled.invalidate(exc)
        return True
    return False
