"""Every write statement of an append on SQLite, on a ``sqlite3`` connection or cursor
inside the caller's write transaction (``BEGIN IMMEDIATE``).

The head moves two ways, side by side below: *guarded* (the append computed its rows from
a head it remembers, and the ``UPDATE`` moves the head only if it is still there) and
*locked* (the head was read under the write lock, so the move is unconditional). SQLite's
feed readers number new event rows themselves: a head move queues nothing.
"""

from __future__ import annotations

from itertools import chain, compress
from operator import itemgetter, not_
from typing import Any

from .rows import EVENT_COLUMNS, PART_COLUMNS, Write

__all__ = ["write_guarded", "move_head", "insert_rows", "BULK_MIN", "ROWS_PER_INSERT"]

_GUARDED_HEAD = (
    "UPDATE sessions SET head_seq = ?, head_hash = ?, updated_at = ? "
    "WHERE id = ? AND tenant = ? AND head_seq = ? AND head_hash IS ? AND deleted_at IS NULL"
)
_LOCKED_HEAD = "UPDATE sessions SET head_seq = ?, head_hash = ?, updated_at = ? WHERE id = ?"


def write_guarded(db: Any, w: Write) -> bool:
    """A guarded append's statements; ``False`` (nothing written) when the head moved."""
    cur = db.execute(
        _GUARDED_HEAD, (w.seq, w.new_hash, w.newest, w.session_id, w.tenant, w.head, w.head_hash)
    )
    if cur.rowcount != 1:
        return False
    insert_rows(db, w.session_id, w.event_rows, w.part_rows)
    return True


def move_head(cur: Any, session_id: str, new_seq: int, new_hash: str | None, newest: str) -> None:
    """A locked append's head move (``newest``: the newest event's column text)."""
    cur.execute(_LOCKED_HEAD, (new_seq, new_hash, newest, session_id))


#: Batches of more events than this are written with multi-row INSERTs, smaller ones row
#: by row (a statement per row count would fill the statement cache for little gain).
BULK_MIN = 16

#: Rows per multi-row INSERT: at most 1 + 8 × 120 = 961 bound values for events (the
#: session id once, then each row's own), under 999, the limit before SQLite 3.32.
ROWS_PER_INSERT = 120


def insert_rows(
    cur: Any, session_id: str, event_rows: list[tuple[Any, ...]], part_rows: list[tuple[Any, ...]]
) -> None:
    """Insert an append's rows (all of ``session_id``) on a ``sqlite3`` connection or
    cursor."""
    if len(event_rows) > BULK_MIN:
        _EVENTS.insert(cur, session_id, event_rows)
        _PARTS.insert(cur, session_id, part_rows)
        return
    if len(event_rows) == 1:
        cur.execute(_EVENTS.one_row, event_rows[0])
    else:
        cur.executemany(_EVENTS.one_row, event_rows)
    if len(part_rows) == 1:
        cur.execute(_PARTS.one_row, part_rows[0])
    elif part_rows:
        cur.executemany(_PARTS.one_row, part_rows)


class _Table:
    """A table's INSERTs, the bulk ones written to bind as few values as they can.

    A column in ``utf8`` is bound as its UTF-8 bytes (or as text) and stored as text
    (``CAST(? AS TEXT)``, which takes a blob's bytes as the database's UTF-8): an event's
    payload comes from the encoder as bytes, and ``sqlite3`` binding its text instead
    would encode it to UTF-8 once more (for text that is not ASCII, half the cost of the
    insert).

    The session id is bound once per statement (``?1``) for all its rows. ``sqlite3``
    binds None slowly (for every None it looks for an adapter, and finds none), so the
    rows that hold NULL in every one of the ``nullable`` columns (most rows: an unkeyed
    batch's events, text parts) go through statements that write those NULLs as
    literals: an events row then binds 8 values instead of 12, a text part 4 instead of
    8. Rows keep their order within each of the two kinds; the kind of the first row goes
    first. (Only a batch's first event can carry a key, so its events go in seq order:
    the feed numbers SQLite's events in the order they were inserted.)
    """

    def __init__(
        self, table: str, cols: tuple[str, ...], nullable: tuple[str, ...], utf8: tuple[str, ...]
    ) -> None:
        null_at = sorted(cols.index(c) for c in nullable)
        if len(null_at) < 2:  # the getter must give a tuple to compare with _nones
            raise ValueError("name two nullable columns or more")
        self._mark = ["CAST(? AS TEXT)" if c in utf8 else "?" for c in cols]
        self.one_row = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(self._mark)})"
        self._nullable = itemgetter(*null_at)
        self._nones = (None,) * len(null_at)  # what the getter gives for a row NULL in all
        self._head = f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
        self._bound = self._shape(set())
        self._nulls = self._shape(set(null_at))

    def _shape(self, null_at: set[int]) -> tuple[Any, str, dict[int, str]]:
        """For rows NULL at ``null_at``: the getter of their bound values (never one
        value alone: every row binds its seq and more), one row's VALUES, and the
        statements made so far, by row count."""
        width = len(self._mark)
        own = [i for i in range(1, width) if i not in null_at]
        values = ["?1"] + ["NULL" if i in null_at else self._mark[i] for i in range(1, width)]
        return itemgetter(*own), f"({', '.join(values)})", {}

    def insert(self, cur: Any, session_id: str, rows: list[tuple[Any, ...]]) -> None:
        """``rows`` (whole rows in column order, all of ``session_id``), up to
        :data:`ROWS_PER_INSERT` per statement: about a tenth less time in SQLite than one
        ``executemany`` row by row."""
        if not rows:
            return
        # Both kinds picked out in C loops (a Python loop per row cost what it saved).
        null = list(map(self._nones.__eq__, map(self._nullable, rows)))
        nulls = list(compress(rows, null))
        bound = list(compress(rows, map(not_, null))) if len(nulls) < len(rows) else []
        kinds = [(self._nulls, nulls), (self._bound, bound)]
        if not null[0]:
            kinds.reverse()
        k = ROWS_PER_INSERT
        for (own, one, made), group in kinds:
            for at in range(0, len(group), k):
                chunk = group[at : at + k]
                params: list[Any] = [session_id]
                params += chain.from_iterable(map(own, chunk))
                sql = made.get(len(chunk))
                if sql is None:
                    sql = made[len(chunk)] = self._head + ", ".join([one] * len(chunk))
                cur.execute(sql, params)


_EVENTS = _Table(
    "events", EVENT_COLUMNS, ("idempotency_key", "batch_size", "batch_digest"), ("payload",)
)
_PARTS = _Table("parts", PART_COLUMNS, ("tool_call_id", "tool_name", "state"), ())
