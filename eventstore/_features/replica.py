"""Reads from a Postgres streaming replica, with read-your-writes.

``EventStore(url, read_url=...)`` sends views and reads to the replica at ``read_url``.
A replica replays the primary's WAL a little behind it, so a store that has just
appended could read a session without its own events. To prevent that, each write
remembers the primary's WAL position after its commit (``pg_current_wal_lsn()``), and a
read first asks the replica how far it has replayed (``pg_last_wal_replay_lsn()``):

* at or past the newest position this store wrote: the read runs on the replica;
* behind: the read polls for up to ``read_wait_ms`` (200 ms by default), then gives up
  and runs on the primary.

So a store always sees its own writes; writes by *other* stores may show up a little
later on the replica, as with any asynchronous replica (an append with ``expected_seq``
still detects them: appends always go to the primary). A replica that cannot be reached,
or a ``read_url`` that is not a standby, sends the reads to the primary too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError

from .._engine import Timeouts, configure_postgres, map_db_error, resolve_url
from ..errors import ConfigurationError, ReadAgain

__all__ = ["DEFAULT_READ_WAIT_MS", "ReadReplica", "ReplicaMethods", "parse_lsn"]

T = TypeVar("T")

#: How long a read waits for the replica to replay this store's writes.
DEFAULT_READ_WAIT_MS = 200

_POLL_S = 0.002
_WAL_LSN = "SELECT pg_current_wal_lsn()::text"


def parse_lsn(text: str) -> int:
    """A WAL position as printed by Postgres (``16/B374D848``) as one integer."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


class ReadReplica:
    """The replica engine, the newest write position to wait for, and routing counts."""

    def __init__(self, engine: Engine, wait_ms: int) -> None:
        self.engine = engine
        self.wait_s = wait_ms / 1000
        self._lock = threading.Lock()
        self._written = 0  # newest primary WAL position after one of our commits
        self._replayed = 0  # newest replay position the replica has shown us
        self._unknown = False  # a write's position could not be read: use the primary
        self.routed = {"replica": 0, "primary": 0}

    def note_write(self, conn: Connection) -> None:
        """Remember the primary's WAL position after a commit on ``conn``.

        Never raises: the write is already committed, and an error here would tell the
        caller otherwise. When the position cannot be read, reads go to the primary
        until a later write records one.
        """
        try:
            raw = conn.exec_driver_sql(_WAL_LSN).scalar_one()
            lsn = parse_lsn(raw)
        except (DBAPIError, ValueError):
            lsn = None
        self._note(lsn)

    def note_driver_write(self, driver: Any) -> None:
        """:meth:`note_write` on a psycopg connection used outside SQLAlchemy (the append
        fast path); never raises either."""
        try:
            # Through libpq, as the fast path wrote: psycopg's cursor on a connection
            # outside autocommit would open a transaction and leave it open.
            from psycopg import pq

            res = driver.pgconn.exec_(_WAL_LSN.encode())
            if res.status != pq.ExecStatus.TUPLES_OK:
                raise RuntimeError(res.error_message)
            lsn = parse_lsn(res.get_value(0, 0).decode())
        except Exception:  # any driver error: the write itself is committed
            lsn = None
        self._note(lsn)

    def _note(self, lsn: int | None) -> None:
        with self._lock:
            if lsn is None:
                self._unknown = True
                return
            self._written = max(self._written, lsn)
            self._unknown = False

    def _count(self, where: str) -> None:
        with self._lock:
            self.routed[where] += 1

    @contextmanager
    def connect(self) -> Iterator[Connection | None]:
        """A replica connection that has replayed this store's writes, or ``None`` when
        the read should go to the primary (the replica stayed behind or is unreachable)."""
        target = self._written
        if self._unknown:
            self._count("primary")
            yield None
            return
        try:
            conn = self.engine.connect()
        except DBAPIError:
            self._count("primary")
            yield None
            return
        with conn:
            try:
                caught_up = target <= self._replayed or self._wait(conn, target)
            except DBAPIError:
                caught_up = False
            if not caught_up:
                self._count("primary")
                yield None
                return
            self._count("replica")
            yield conn

    def _wait(self, conn: Connection, target: int) -> bool:
        deadline = time.monotonic() + self.wait_s
        try:
            while True:
                raw = conn.exec_driver_sql("SELECT pg_last_wal_replay_lsn()::text").scalar()
                if raw is None:  # not a standby: nothing says it has our writes
                    return False
                replayed = parse_lsn(raw)
                with self._lock:
                    self._replayed = max(self._replayed, replayed)
                if replayed >= target:
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(_POLL_S)
        finally:
            conn.rollback()  # end the polling transaction; the read begins its own


class ReplicaMethods:
    """Opening the replica and routing reads, shared by :class:`~eventstore.EventStore`."""

    if TYPE_CHECKING:
        dialect: str
        engine: Engine
        _replica: ReadReplica | None
        _timeouts: Timeouts

        def _tx(self, write: bool = False) -> AbstractContextManager[Connection]: ...

        def _open_schema(self) -> None: ...

    def _open_replica(
        self, read_url: str | None, wait_ms: int, lock_timeout_ms: int
    ) -> ReadReplica | None:
        if read_url is None:
            return None
        bad_wait = not isinstance(wait_ms, int) or isinstance(wait_ms, bool)
        if bad_wait or not 0 <= wait_ms <= 60_000:
            raise ConfigurationError(
                f"read_wait_ms: must be 0..60000 milliseconds, got {wait_ms!r}"
            )
        url = resolve_url(read_url)
        if self.dialect != "postgresql" or make_url(url).get_backend_name() != "postgresql":
            raise ConfigurationError(
                "read_url: read replicas need Postgres on both sides (a streaming replica of "
                "the primary at url); a SQLite store has no replicas, drop read_url"
            )
        replica_engine = create_engine(url)
        configure_postgres(replica_engine, lock_timeout_ms)
        return ReadReplica(replica_engine, wait_ms)

    @property
    def read_routing(self) -> dict[str, int]:
        """How many reads went to the replica and how many to the primary (``read_url``
        only; empty without one)."""
        return dict(self._replica.routed) if self._replica is not None else {}

    @contextmanager
    def _read_tx(self) -> Iterator[Connection]:
        """A read transaction on the replica when it has this store's writes, else on
        the primary."""
        if self._replica is None:
            with self._tx() as conn:
                yield conn
            return
        self._open_schema()
        with self._replica.connect() as replica:
            if replica is None:
                with self._tx() as conn:
                    yield conn
                return
            try:
                with replica.begin():
                    yield replica
            except DBAPIError as exc:
                raise map_db_error(exc, self._timeouts) from None

    def _read_alone(
        self, alone: Callable[..., T | None], fn: Callable[..., T], *args: Any, **kw: Any
    ) -> T:
        """``fn``'s read, tried first as ``alone``: one statement on the primary, outside
        a transaction, which returns ``None`` where it cannot answer (then ``fn`` reads
        through :meth:`_read_run`). Not with a replica: its reads first wait for this
        store's writes."""
        if self._replica is None:
            self._open_schema()
            try:
                with self.engine.connect() as conn:
                    out = alone(conn, *args, **kw)
            except ReadAgain:
                # The server dropped the connection (a restart, a failover; it has left
                # the pool), or Citus could not route the statement: read it the other
                # way, on a fresh connection.
                out = None
            except DBAPIError as exc:
                error = map_db_error(exc, self._timeouts)
                if not isinstance(error, ReadAgain):
                    raise error from None
                out = None
            if out is not None:
                return out
        return self._read_run(fn, *args, **kw)

    def _read_run(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """``_run`` for a read that may go to the replica (made again, once, on a fresh
        connection when the server closed the one it was given)."""
        try:
            with self._read_tx() as conn:
                return fn(conn, *args, **kw)
        except ReadAgain:
            pass
        with self._read_tx() as conn:
            return fn(conn, *args, **kw)
