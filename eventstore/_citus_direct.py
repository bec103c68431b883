"""Citus, straight to the worker: a session's routed calls sent to the worker node that
holds its shard instead of through the coordinator (opt-in: ``citus_direct=true`` in the
store's URL).

Citus 11 and later copy their metadata to every worker, and a distributed function's
call runs on whichever node it is sent to. Sent to the coordinator, the routed view's
call (:func:`~eventstore._sql.view_rows.routed_view_function`) and the routed append's
(:data:`~eventstore._append.postgres.ROUTED_FUNCTION`) are planned there, passed to the
worker and their rows passed back; sent to the worker that holds the session's shard,
they run there against its local shards. Everything else (the locked path, reads outside
the two functions, DDL, purges, listings) still goes through the coordinator.

Where a session's shard is comes from Citus's own metadata on the coordinator, one query
the first time a session is used (:meth:`DirectRoutes.node`), kept for
:data:`MAP_SECONDS`. A call sent to the wrong worker (its shard moved since) is still
right: that worker's metadata sends the call's statements on to the shard's node, one hop
more. A worker that cannot be connected to is left out for :data:`DOWN_SECONDS`, its
calls sent to the coordinator meanwhile (which reaches the worker by its own network, or
fails with Citus's error saying the node is down); a call that fails on the worker
forgets where its session is, and the append is repeated (a view read again) through
the coordinator.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError

from .errors import ConfigurationError

if TYPE_CHECKING:
    from ._append.store import DriverSlot

__all__ = ["DirectRoutes", "OPTION", "for_engine", "split_option"]

#: The URL query parameter that turns it on (``?citus_direct=true``).
OPTION = "citus_direct"
_TRUE = ("true", "1", "on", "yes")
_FALSE = ("false", "0", "off", "no")
#: How long where a session's shard is stays known: a shard moved by a rebalance is found
#: again within this time (until then calls reach it by the old worker, one hop more, as
#: through the coordinator). A lookup took 0.56 ms (0.22 ms of the client's CPU).
MAP_SECONDS = 600.0
#: How long a worker that could not be connected to is left out.
DOWN_SECONDS = 30.0
#: At most this many sessions' places kept (then forgotten all at once).
_KEPT = 100_000
#: The worker holding a session's shard of ``sessions`` (every routed table is co-located
#: with it), as the coordinator's metadata says; none when that worker has no copy of the
#: metadata (it could not run the calls: they go by the coordinator).
_WHERE = (
    "SELECT n.nodename, n.nodeport FROM pg_dist_placement p "
    "JOIN pg_dist_node n ON n.groupid = p.groupid "
    "WHERE p.shardid = get_shard_id_for_distribution_column('sessions', %s::varchar) "
    "AND n.noderole = 'primary' AND n.isactive AND n.hasmetadata AND n.metadatasynced "
    "AND p.shardstate = 1 "
    "ORDER BY n.nodeid LIMIT 1"
)

_Node = tuple[str, int]


def split_option(url: str) -> tuple[str, bool]:
    """``url`` without the :data:`OPTION` parameter, and whether it asked for it."""
    if OPTION not in url:
        return url, False
    u = make_url(url)
    raw = u.query.get(OPTION)
    if raw is None:
        return url, False
    value = (raw[-1] if isinstance(raw, tuple) else raw).strip().lower()
    if value not in _TRUE + _FALSE:
        raise ConfigurationError(f"{OPTION}: true or false, not {value!r}")
    on = value in _TRUE
    if on and u.get_backend_name() != "postgresql":
        raise ConfigurationError(f"{OPTION}: only a Postgres (Citus) URL takes it")
    return u.difference_update_query([OPTION]).render_as_string(hide_password=False), on


#: The direct routes of each coordinator engine that has them.
_BY_ENGINE: weakref.WeakKeyDictionary[Engine, DirectRoutes] = weakref.WeakKeyDictionary()


def for_engine(engine: Engine) -> DirectRoutes | None:
    """The direct routes opened for ``engine``, if any."""
    return _BY_ENGINE.get(engine)


class DirectRoutes:
    """Where each session's shard is, and a pool of connections to each worker (the
    coordinator's URL with the worker's host and port: same user, password, database)."""

    def __init__(self, coordinator: Engine) -> None:
        self.coordinator = coordinator
        self._url = coordinator.url
        self._lock = threading.Lock()
        self._engines: dict[_Node, Engine] = {}
        self._slots: dict[_Node, DriverSlot] = {}  # the appends' kept connections
        self._where: dict[str, tuple[_Node | None, float]] = {}
        self._down: dict[_Node, float] = {}
        self.lookups = 0  # how many times the coordinator was asked (tests read it)
        _BY_ENGINE[coordinator] = self

    def node(self, session_id: str) -> _Node | None:
        """The worker that holds ``session_id``'s shard (``None``: none found, or it is the
        coordinator itself, or it is left out as unreachable: go by the coordinator)."""
        now = time.monotonic()
        known = self._where.get(session_id)
        if known is None or now - known[1] > MAP_SECONDS:
            with self.coordinator.connect() as conn:
                row = conn.exec_driver_sql(_WHERE, (session_id,)).first()
            self.lookups += 1
            found: _Node | None = (str(row[0]), int(row[1])) if row is not None else None
            if found is not None and self._is_coordinator(found):
                found = None
            if len(self._where) >= _KEPT:
                self._where.clear()
            known = (found, now)
            self._where[session_id] = known
        node = known[0]
        if node is not None and self._down.get(node, 0.0) > now:
            return None
        return node

    def _is_coordinator(self, node: _Node) -> bool:
        return node == (self._url.host or "localhost", self._url.port or 5432)

    def forget(self, session_id: str) -> None:
        """Look ``session_id``'s shard up again at its next call (a call failed there)."""
        self._where.pop(session_id, None)

    def _engine(self, node: _Node) -> Engine:
        engine = self._engines.get(node)
        if engine is None:
            with self._lock:
                engine = self._engines.get(node)
                if engine is None:
                    engine = create_engine(self._url.set(host=node[0], port=node[1]))
                    self._engines[node] = engine
        return engine

    def take(self, session_id: str) -> tuple[Any, bool, DriverSlot] | None:
        """A pooled driver connection to ``session_id``'s worker, as its worker's
        :class:`~eventstore._append.store.DriverSlot` takes it (give it back there); or
        ``None`` (go by the coordinator): no worker known, or it cannot be connected to
        (left out then)."""
        node = self.node(session_id)
        if node is None:
            return None
        slot = self._slots.get(node)
        if slot is None:
            from ._append.store import DriverSlot  # (which imports this module)

            made = DriverSlot.for_store(self, self._engine(node), owns_engine=True)
            assert made is not None  # (for an engine the store owns, always)
            slot = self._slots.setdefault(node, made)
        try:
            pooled, kept = slot.take()
        except (DBAPIError, self.coordinator.dialect.loaded_dbapi.Error):  # raw: unwrapped
            self._down[node] = time.monotonic() + DOWN_SECONDS
            return None
        return pooled, kept, slot

    def connect(self, session_id: str) -> Connection | None:
        """A SQLAlchemy ``Connection`` to ``session_id``'s worker from its pool, or
        ``None`` as :meth:`take` says it."""
        node = self.node(session_id)
        if node is None:
            return None
        try:
            return self._engine(node).connect()
        except DBAPIError:
            self._down[node] = time.monotonic() + DOWN_SECONDS
            return None

    def close(self) -> None:
        """Close every worker's pool."""
        _BY_ENGINE.pop(self.coordinator, None)
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
            slots, self._slots = list(self._slots.values()), {}
        for slot in slots:
            slot.close()
        for engine in engines:
            engine.dispose()
