"""Engines: URL resolution, per-connection settings, and driver errors as typed errors.

SQLite connections run in WAL mode with a busy timeout and writers that take the lock up
front (``BEGIN IMMEDIATE``); Postgres connections carry a ``lock_timeout`` so that a write
queued behind a held row lock gives up instead of waiting as long as that transaction
lives. Either wait running out is a :class:`~eventstore.errors.StorageBusyError`.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from .errors import ConnectionDropped, EventStoreError, StorageBusyError, StorageError

__all__ = [
    "DEFAULT_URL",
    "resolve_url",
    "display_url",
    "configure_sqlite",
    "configure_postgres",
    "Timeouts",
    "driver_error",
    "map_db_error",
    "busy_error",
]

DEFAULT_URL = "sqlite:///eventstore.db"


def resolve_url(url: str | None, *, async_: bool = False) -> str:
    """Normalize a database URL: default, ``EVENTSTORE_URL``, driver names; a bare file
    path (no ``scheme://``) names a SQLite database file.

    ``async_`` is accepted for compatibility and changes nothing: both stores use the
    synchronous drivers (``sqlite3``, ``psycopg``).
    """
    raw = url or os.environ.get("EVENTSTORE_URL") or DEFAULT_URL
    if "://" not in raw and raw.strip():
        raw = f"sqlite:///{raw}"  # a bare file path, as sqlite3 takes it: a SQLite database
    try:
        u = make_url(raw)
    except Exception:
        raise EventStoreError(
            f"cannot parse database URL {raw!r}: use sqlite:///path.db or postgresql://user@host/db"
        ) from None
    backend = u.get_backend_name()
    if backend == "postgresql":
        u = u.set(drivername="postgresql+psycopg")
    elif backend == "sqlite":
        u = u.set(drivername="sqlite")
    else:
        raise EventStoreError(
            f"unsupported database URL {u.render_as_string(hide_password=True)!r}: "
            "use sqlite:///path.db or postgresql://user@host/db"
        )
    return u.render_as_string(hide_password=False)


#: How long a Postgres writer waits for a lock before giving up (``lock_timeout_ms``).
DEFAULT_LOCK_TIMEOUT_MS = 5_000


def display_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def configure_sqlite(engine: Engine, synchronous: str, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _rec: Any) -> None:
        # Take transaction control from the driver so we can say BEGIN IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front. A deferred transaction that reads and then
        # writes can fail with SQLITE_BUSY without waiting, because upgrading its read
        # snapshot would break isolation; IMMEDIATE waits on the busy timeout instead.
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def configure_postgres(engine: Engine, lock_timeout_ms: int) -> None:
    """Every connection of ``engine`` gives up a lock wait after ``lock_timeout_ms``."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _rec: Any) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
        dbapi_conn.commit()


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long a writer waits for a lock, per backend (for error messages)."""

    busy_timeout_ms: int
    lock_timeout_ms: int


def busy_error(exc: BaseException, timeouts: Timeouts | None = None) -> StorageBusyError | None:
    """The :class:`StorageBusyError` for a lock wait that ran out (``exc`` from SQLAlchemy
    or straight from the driver), else ``None``."""
    if isinstance(exc, StorageBusyError):
        return exc
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    text = str(orig) if orig is not None else str(exc)
    locked = isinstance(exc, OperationalError) or isinstance(orig, sqlite3.OperationalError)
    if locked and "database is locked" in text:
        waited = f" ({timeouts.busy_timeout_ms} ms)" if timeouts else ""
        return StorageBusyError(
            f"the SQLite database stayed locked by another writer past the busy timeout"
            f"{waited}; nothing was written: retry (an append with the same idempotency key "
            "is safe to repeat), raise busy_timeout_ms or reduce concurrent writers"
        )
    if getattr(orig, "sqlstate", None) == "55P03":  # lock_not_available
        waited = f" ({timeouts.lock_timeout_ms} ms)" if timeouts else ""
        return StorageBusyError(
            f"another transaction held a lock this write needs past the lock timeout"
            f"{waited}; nothing was written: retry (an append with the same idempotency key "
            "is safe to repeat), or raise EventStore(..., lock_timeout_ms=N)"
        )
    return None


def driver_error(conn: Connection, exc: Any) -> DBAPIError:
    """An error raised by the driver's own cursor, as SQLAlchemy raises its own: wrapped
    in :class:`~sqlalchemy.exc.DBAPIError`, with the connection invalidated (out of the
    pool) when the error says the server closed it."""
    dialect = conn.dialect
    dropped = bool(dialect.is_disconnect(exc, conn.connection.dbapi_connection, None))
    if dropped:
        # What SQLAlchemy does for its own statements: the pool's other connections are
        # as old as this one, so they are replaced as they are next checked out.
        conn.engine.pool._invalidate(conn.connection, exc)
        conn.invalidate(exc)
    wrapped = DBAPIError.instance(
        None,
        None,
        exc,
        dialect.loaded_dbapi.Error,
        connection_invalidated=dropped,
        dialect=dialect,
    )
    assert isinstance(wrapped, DBAPIError)
    return wrapped


def map_db_error(exc: DBAPIError, timeouts: Timeouts | None = None) -> EventStoreError:
    """The typed error for a driver error: lock waits become :class:`StorageBusyError`,
    a connection the server closed :class:`ConnectionDropped`."""
    busy = busy_error(exc, timeouts)
    if busy is not None:
        return busy
    text = str(exc.orig) if exc.orig is not None else str(exc)
    message = f"database error: {text.strip().splitlines()[0] if text else exc}"
    if exc.connection_invalidated:
        return ConnectionDropped(message)
    return StorageError(message)
