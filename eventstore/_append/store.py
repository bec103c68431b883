"""What the write path keeps in a store and needs from it: the heads the store's appends
left (:class:`HeadCache`), the driver connections its guarded appends keep
(:class:`DriverSlot`), and the members of :class:`~eventstore.EventStore` it reads
(:class:`Store`)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from sqlalchemy.engine import Connection, Engine

from ..tokens import TokenCounter

__all__ = ["Store", "HeadCache", "DriverSlot", "DirectCalls"]

T = TypeVar("T")


class DirectCalls(Protocol):
    """Where a session's routed calls go straight to the worker that holds its shard
    (``citus_direct``: :class:`eventstore._citus_direct.DirectRoutes`)."""

    def take(self, session_id: str) -> tuple[Any, bool, DriverSlot] | None:
        """A pooled connection to the session's worker, whether its slot keeps it, and
        the slot to give it back to; ``None``: go by the coordinator."""
        ...

    def forget(self, session_id: str) -> None:
        """Forget where the session is (a call there failed)."""
        ...


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


class Store(Protocol):
    """What the write path needs from a store (:class:`~eventstore.EventStore`)."""

    tenant: str
    dialect: str
    engine: Engine
    token_counter: TokenCounter
    blob_threshold: int | None
    max_event_bytes: int
    _heads: HeadCache
    _driver_slot: DriverSlot | None
    _lock_local: bool
    _routed: bool
    _timeouts: Any
    _replica: Any

    @property
    def _direct(self) -> DirectCalls | None: ...

    def _open_schema(self) -> None: ...

    def _tx(self, write: bool = False) -> AbstractContextManager[Connection]: ...

    def _run(self, fn: Callable[..., T], *args: Any, write: bool = False, **kw: Any) -> T: ...

    def head(self, session_id: str) -> int: ...
