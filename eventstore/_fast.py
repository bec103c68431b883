"""The append fast path: one round trip on Postgres, the fewest statements on SQLite.

A store remembers the head (seq and hash) each of its appends left, per session. The next
append to that session computes its rows from the remembered head and writes them with a
statement that moves the head *only if it is still there*:

* Postgres: one data-modifying statement, in autocommit: ``UPDATE sessions ... WHERE
  head_seq = <remembered> AND head_hash = <remembered>`` in a CTE, and the ``events`` and
  ``parts`` inserts guarded by it. If another writer moved the head, the update matches
  no row (Postgres re-checks the condition after waiting for the row lock), nothing is
  inserted, and the append takes the ordinary path, which reads the head under a lock and
  reports conflicts as usual.
* SQLite: the same guarded ``UPDATE`` first (it takes the write lock), then the inserts,
  on the driver connection, skipping the head read.

Only plain appends take it: a batch with an idempotency key, a prune or an attachment to
store goes the ordinary way. Either way the rows and hashes are the same; a test holds the
two paths to that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from ._bulk import (
    _EV_SQLITE,
    _EVENT_COLS,
    _PART_COLS,
    _PG_EVENT_TYPES,
    _PG_PART_TYPES,
    _PT_SQLITE,
    _sqlite_row,
    _sqlite_ts,
    build_rows,
)
from .codec import Encoded
from .events import Prune, utcnow
from .records import AppendResult

__all__ = ["fast_append", "eligible", "HeadCache", "try_fast"]


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


#: Larger batches go the ordinary way: there ``executemany`` pipelines the rows, while one
#: statement with thousands of parameters costs more to parse than the round trips it saves.
MAX_FAST_BATCH = 16


def eligible(encoded: Sequence[Encoded], idempotency_key: str | None) -> bool:
    """Whether a batch may take the fast path."""
    if idempotency_key is not None or not encoded or len(encoded) > MAX_FAST_BATCH:
        return False
    return not any(e.blobs or isinstance(e.event, Prune) for e in encoded)


def _values(
    rows: list[dict[str, Any]], cols: tuple[str, ...], types: tuple[str, ...]
) -> tuple[str, list[Any]]:
    """A Postgres ``VALUES`` list with typed placeholders, and its parameters."""
    group = "(" + ", ".join(f"%s::{t}" for t in types) + ")"
    params: list[Any] = []
    for row in rows:
        params.extend(row[c] for c in cols)
    return ", ".join([group] * len(rows)), params


def fast_append(
    conn: Connection,
    tenant: str,
    session_id: str,
    encoded: list[Encoded],
    head: int,
    head_hash: str | None,
) -> AppendResult | None:
    """Append after the remembered ``head``; ``None`` when the head moved (nothing written)."""
    now = utcnow()
    event_rows, part_rows, _prunes, new_hash, seq = build_rows(
        session_id, head, head_hash, encoded, None, None, now
    )
    newest = event_rows[-1]["created_at"]
    driver = conn.connection.driver_connection
    assert driver is not None
    if conn.dialect.name == "postgresql":
        ev_sql, ev_params = _values(event_rows, _EVENT_COLS, _PG_EVENT_TYPES)
        sql = (
            "WITH h AS (UPDATE sessions SET head_seq = %s, head_hash = %s, updated_at = %s "
            "WHERE id = %s AND tenant = %s AND head_seq = %s "
            "AND head_hash IS NOT DISTINCT FROM %s AND deleted_at IS NULL RETURNING id), "
            f"e AS (INSERT INTO events ({', '.join(_EVENT_COLS)}) "
            f"SELECT * FROM (VALUES {ev_sql}) AS v WHERE EXISTS (SELECT 1 FROM h))"
        )
        params: list[Any] = [seq, new_hash, newest, session_id, tenant, head, head_hash]
        params += ev_params
        if part_rows:
            pt_sql, pt_params = _values(part_rows, _PART_COLS, _PG_PART_TYPES)
            sql += (
                f", p AS (INSERT INTO parts ({', '.join(_PART_COLS)}) "
                f"SELECT * FROM (VALUES {pt_sql}) AS v WHERE EXISTS (SELECT 1 FROM h))"
            )
            params += pt_params
        sql += " SELECT count(*) FROM h"
        with driver.cursor() as cur:
            cur.execute(sql, params)
            applied = cur.fetchone()[0]
        if not applied:
            return None
    else:
        cur = driver.cursor()
        try:
            cur.execute(
                "UPDATE sessions SET head_seq = ?, head_hash = ?, updated_at = ? "
                "WHERE id = ? AND tenant = ? AND head_seq = ? AND head_hash IS ? "
                "AND deleted_at IS NULL",
                (seq, new_hash, _sqlite_ts(newest), session_id, tenant, head, head_hash),
            )
            if cur.rowcount != 1:
                return None
            cur.executemany(_EV_SQLITE, [_sqlite_row(r, _EVENT_COLS) for r in event_rows])
            if part_rows:
                cur.executemany(_PT_SQLITE, [_sqlite_row(r, _PART_COLS) for r in part_rows])
        finally:
            cur.close()
    return AppendResult(seqs=list(range(head + 1, seq + 1)), head_seq=seq, head_hash=new_hash)


def try_fast(
    store: Any,
    session_id: str,
    encoded: list[Encoded],
    expected_seq: int | None,
    idempotency_key: str | None,
) -> AppendResult | None:
    """The fast path for ``store`` (an :class:`~eventstore.EventStore`), or ``None`` when
    the batch or the remembered head does not allow it (the caller takes the ordinary
    path then)."""
    cached = store._heads.get(session_id)
    if cached is None or not eligible(encoded, idempotency_key):
        return None
    head, head_hash = cached
    if expected_seq is not None and expected_seq != head:
        return None  # the ordinary path reports the conflict with the current head
    if store.dialect == "postgresql" and not store._lock_local:
        store._open_schema()
        with store.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            try:
                result = fast_append(conn, store.tenant, session_id, encoded, head, head_hash)
            except Exception:
                store._heads.drop(session_id)
                return None  # the ordinary path repeats the append and maps any error
            # Outside the try: the append is committed, so a failure here must not make
            # the ordinary path write it a second time.
            if result is not None and store._replica is not None:
                store._replica.note_write(conn)  # reads on the replica wait for it
    else:
        try:
            with store._tx(write=True) as conn:
                result = fast_append(conn, store.tenant, session_id, encoded, head, head_hash)
        except Exception:
            store._heads.drop(session_id)
            return None
    if result is None:
        store._heads.drop(session_id)
        return None
    store._heads.put(session_id, result.head_seq, result.head_hash)
    return result
