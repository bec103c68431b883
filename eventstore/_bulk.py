"""A batch's rows: made one event at a time (seqs, ids, times, the hash chain), and
written through the driver: multi-row INSERTs on SQLite, ``COPY`` on Postgres. The rows
(and so the stored bytes) are those SQLAlchemy would write; only its per-row statement
processing is skipped. Used by the append fast path and by the ordinary path for large
batches."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from itertools import chain, compress
from operator import itemgetter, not_
from typing import Any

from sqlalchemy.engine import Connection

from ._checks import check_references
from ._engine import driver_error
from .codec import Encoded, chain_hash_ts, format_ts, new_ids
from .events import Message, Prune

__all__ = ["bulk_insert", "BULK_MIN", "BatchRows", "build_rows", "time_texts"]

#: Batches of more events than this go through :func:`bulk_insert` on the ordinary path.
BULK_MIN = 16

_EVENT_COLS = (
    "session_id",
    "seq",
    "id",
    "kind",
    "created_at",
    "payload",
    "token_count",
    "size",
    "idempotency_key",
    "batch_size",
    "batch_digest",
    "hash",
)
_PG_EVENT_TYPES = (
    "varchar",
    "integer",
    "varchar",
    "varchar",
    "timestamptz",
    "text",
    "integer",
    "bigint",
    "varchar",
    "integer",
    "varchar",
    "varchar",
)
_PART_COLS = (
    "session_id",
    "seq",
    "idx",
    "type",
    "tool_call_id",
    "tool_name",
    "state",
    "token_count",
)
_PG_PART_TYPES = (
    "varchar",
    "integer",
    "integer",
    "varchar",
    "varchar",
    "varchar",
    "varchar",
    "integer",
)
_PG_COPY_EVENTS = f"COPY events ({', '.join(_EVENT_COLS)}) FROM STDIN"
_PG_COPY_PARTS = f"COPY parts ({', '.join(_PART_COLS)}) FROM STDIN"
_EV_SQLITE = f"INSERT INTO events ({', '.join(_EVENT_COLS)}) VALUES ({', '.join('?' * 12)})"
_PT_SQLITE = f"INSERT INTO parts ({', '.join(_PART_COLS)}) VALUES ({', '.join('?' * 8)})"


class BatchRows:
    """The ``events`` and ``parts`` rows of a batch appended after ``head``, made one event
    at a time: seqs, ids, times and the hash chain.

    Iterating yields each event's row with its parts rows; afterwards ``head_hash`` and
    ``seq`` are the new head's and ``prunes`` the prunes to apply.
    """

    def __init__(
        self,
        session_id: str,
        head: int,
        head_hash: str | None,
        encoded: Sequence[Encoded],
        idempotency_key: str | None,
        batch_hash: str | None,
        now: datetime,
    ) -> None:
        self.session_id, self.encoded, self.now = session_id, encoded, now
        self.idempotency_key, self.batch_hash = idempotency_key, batch_hash
        self.head_hash, self.seq = head_hash, head
        self.prunes: list[tuple[int, Prune, datetime]] = []
        self.newest: datetime | None = None

    def chain(self) -> Iterator[tuple[int, Encoded, str, datetime, str, str]]:
        """Each event's seq, encoding, id, time, formatted time (:func:`format_ts`) and
        hash, in order; ``head_hash``, ``seq`` and ``prunes`` follow along."""
        encoded = self.encoded
        prev, seq = self.head_hash, self.seq
        fresh = iter(new_ids(sum(1 for enc in encoded if not enc.event.id)))
        # Most batches share one time (now, or a caller's): format each distinct one once.
        stamps: dict[datetime, str] = {}
        for i, enc in enumerate(encoded):
            seq += 1
            evt = enc.event
            event_id = evt.id or next(fresh)
            created = evt.created_at or self.now
            ts = stamps.get(created)
            if ts is None:
                ts = stamps[created] = format_ts(created)
            prev = chain_hash_ts(prev, seq, event_id, enc.kind, ts, enc.payload)
            if type(evt) is not Message:  # a message names no other seq
                check_references(evt, seq, f"events[{i}].")
                if isinstance(evt, Prune):
                    self.prunes.append((seq, evt, created))
            self.head_hash, self.seq, self.newest = prev, seq, created
            yield seq, enc, event_id, created, ts, prev

    def __iter__(self) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
        session_id, key, first = self.session_id, self.idempotency_key, self.seq + 1
        for seq, enc, event_id, created, _ts, digest in self.chain():
            row = {
                "session_id": session_id,
                "seq": seq,
                "id": event_id,
                "kind": enc.kind,
                "created_at": created,
                "payload": enc.payload,
                "token_count": enc.token_count,
                "size": enc.size,
                "idempotency_key": key if seq == first else None,
                "batch_size": len(self.encoded) if seq == first and key is not None else None,
                "batch_digest": self.batch_hash if seq == first else None,
                "hash": digest,
            }
            yield row, [{"session_id": session_id, "seq": seq, **r} for r in enc.part_rows]

    def collect(self, sqlite: bool) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The ``events`` and ``parts`` rows as driver parameters, in ``_EVENT_COLS``
        and ``_PART_COLS`` order (see :meth:`stream`)."""
        if len(self.encoded) == 1 and self.idempotency_key is None:
            return self._one(sqlite)
        part_rows: list[tuple[Any, ...]] = []
        return list(self.stream(sqlite, part_rows)), part_rows

    def _one(self, sqlite: bool) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """:meth:`stream`'s rows for one event without an idempotency key (a single
        append), made without its per-batch bookkeeping; a test holds the two equal."""
        enc = self.encoded[0]
        evt, session_id, seq = enc.event, self.session_id, self.seq + 1
        event_id = evt.id or new_ids(1)[0]
        created = evt.created_at or self.now
        ts, stamp = time_texts(created, sqlite)
        kind, payload = enc.kind, enc.payload
        digest = chain_hash_ts(self.head_hash, seq, event_id, kind, ts, payload)
        if type(evt) is not Message:
            check_references(evt, seq, "events[0].")
            if isinstance(evt, Prune):
                self.prunes.append((seq, evt, created))
        parts = [
            (session_id, seq, r["idx"], r["type"], r["tool_call_id"], r["tool_name"], r["state"],
             r["token_count"])
            for r in enc.part_rows
        ]  # fmt: skip
        self.head_hash, self.seq, self.newest = digest, seq, created
        row = (session_id, seq, event_id, kind, stamp, payload, enc.token_count, enc.size, None,
               None, None, digest)  # fmt: skip
        return [row], parts

    def stream(self, sqlite: bool, part_rows: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
        """Each event's ``events`` row as driver parameters, in ``_EVENT_COLS`` order, made
        as it is asked for (each event read from ``encoded`` only then), its ``parts`` rows
        appended to ``part_rows``; with ``sqlite``, ``created_at`` is the text SQLAlchemy
        stores there (:func:`_sqlite_ts`). The seqs, ids, times and hashes are
        :meth:`chain`'s (a test holds the two to that); once every row is made,
        ``head_hash``, ``seq``, ``prunes`` and ``newest`` are as :meth:`chain` leaves them."""
        encoded = self.encoded
        session_id, key, size = self.session_id, self.idempotency_key, len(encoded)
        prev, seq = self.head_hash, self.seq
        ids: list[str] = []  # made a few at a time, as events without one come
        now = self.now
        # Each distinct time formatted once: hashed text and the SQLite column text.
        stamps: dict[datetime, tuple[str, Any]] = {}
        sha256 = hashlib.sha256
        add_part = part_rows.append
        created: datetime = now
        for i, enc in enumerate(encoded):
            seq += 1
            evt = enc.event
            event_id = evt.id
            if not event_id:
                if not ids:
                    ids = new_ids(min(size - i, 64))
                    ids.reverse()
                event_id = ids.pop()
            created = evt.created_at or now
            got = stamps.get(created)
            if got is None:
                got = stamps[created] = time_texts(created, sqlite)
            kind, payload = enc.kind, enc.payload
            # chain_hash_ts, inline: one call less per event.
            h = sha256(f"{prev or ''}\n{seq}\n{event_id}\n{kind}\n{got[0]}\n".encode())
            h.update(payload.encode("utf-8"))
            prev = h.hexdigest()
            if type(evt) is not Message:  # a message names no other seq
                check_references(evt, seq, f"events[{i}].")
                if isinstance(evt, Prune):
                    self.prunes.append((seq, evt, created))
            for r in enc.part_rows:
                add_part(
                    (session_id, seq, r["idx"], r["type"], r["tool_call_id"], r["tool_name"],
                     r["state"], r["token_count"])
                )  # fmt: skip
            if i == 0 and key is not None:
                yield (session_id, seq, event_id, kind, got[1], payload, enc.token_count,
                       enc.size, key, size, self.batch_hash, prev)  # fmt: skip
            else:
                yield (session_id, seq, event_id, kind, got[1], payload, enc.token_count,
                       enc.size, None, None, None, prev)  # fmt: skip
        if size:
            self.head_hash, self.seq, self.newest = prev, seq, created


def build_rows(
    session_id: str,
    head: int,
    head_hash: str | None,
    encoded: Sequence[Encoded],
    idempotency_key: str | None,
    batch_hash: str | None,
    now: datetime,
) -> tuple[
    list[dict[str, Any]], list[dict[str, Any]], list[tuple[int, Prune, datetime]], str | None, int
]:
    """All of :class:`BatchRows` at once: the ``events`` rows, the ``parts`` rows, the
    prunes to apply, the new head hash and the new head seq."""
    rows = BatchRows(session_id, head, head_hash, encoded, idempotency_key, batch_hash, now)
    event_rows: list[dict[str, Any]] = []
    part_rows: list[dict[str, Any]] = []
    for row, parts_of in rows:
        event_rows.append(row)
        part_rows += parts_of
    return event_rows, part_rows, rows.prunes, rows.head_hash, rows.seq


def time_texts(created: datetime, sqlite: bool) -> tuple[str, Any]:
    """An event time's hashed text (:func:`format_ts`) and its column value: on SQLite the
    text SQLAlchemy stores there (:func:`_sqlite_ts`), else the datetime itself."""
    if created.tzinfo is UTC and created.year >= 1000:
        # Both texts from one isoformat (format_ts's, without its conversions).
        plain = created.replace(tzinfo=None).isoformat(" ", "microseconds")
        return f"{plain[:10]}T{plain[11:]}Z", plain if sqlite else created
    ts = format_ts(created)
    if not sqlite:
        return ts, created
    # format_ts's text is the same UTC time; it names years below 1000 its platform's
    # way, so those are written out as the ordinary path does.
    return ts, ts[:10] + " " + ts[11:-1] if len(ts) == 27 else _sqlite_ts(created)


def _sqlite_ts(value: datetime) -> str:
    """A datetime exactly as SQLAlchemy stores ``UTCDateTime`` on SQLite: naive UTC text
    with microseconds and a four-digit year (the ordinary path's format, byte for byte;
    ``strftime``'s ``%Y`` leaves years below 1000 unpadded on glibc, which SQLite's reads
    then cannot parse)."""
    v = value.astimezone(UTC)
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d} "
        f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}"
    )


def _sqlite_row(row: dict[str, Any], cols: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(_sqlite_ts(row[c]) if c == "created_at" else row[c] for c in cols)


_event_values = itemgetter(*_EVENT_COLS)
_part_values = itemgetter(*_PART_COLS)
_CREATED = _EVENT_COLS.index("created_at")


def _sqlite_event_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """:func:`_sqlite_row` over a batch's event rows, formatting each distinct time once
    (a batch usually shares one)."""
    stamps: dict[datetime, str] = {}
    out = []
    for r in rows:
        values = _event_values(r)
        created = values[_CREATED]
        ts = stamps.get(created)
        if ts is None:
            ts = stamps[created] = _sqlite_ts(created)
        out.append((*values[:_CREATED], ts, *values[_CREATED + 1 :]))
    return out


def bulk_insert(conn: Connection, rows: BatchRows) -> datetime:
    """Insert a batch's rows through the driver, inside the caller's transaction:
    multi-row INSERTs on SQLite (:class:`_SQLiteTable`), ``COPY`` on Postgres. The same
    rows, and so the same stored bytes, as SQLAlchemy's ``executemany`` without its
    per-row processing. Returns the newest event's ``created_at``."""
    driver = conn.connection.driver_connection
    assert driver is not None
    try:
        if conn.dialect.name == "postgresql":
            part_rows: list[tuple[Any, ...]] = []
            with driver.cursor() as cur:
                # Each row is made while psycopg sends the ones before it and the server
                # inserts them: the two overlap (an event refused on the way stops the
                # COPY, and the transaction with it). Text COPY: binary COPY with the
                # column types set up front measured no faster (the server's inserts,
                # not the parsing, are the cost).
                with cur.copy(_PG_COPY_EVENTS) as copy:
                    for r in rows.stream(False, part_rows):
                        copy.write_row(r)
                if part_rows:
                    with cur.copy(_PG_COPY_PARTS) as copy:
                        for r in part_rows:
                            copy.write_row(r)
            assert rows.newest is not None
            return rows.newest
        event_rows, part_rows = rows.collect(sqlite=True)
        cur = driver.cursor()
        try:
            _SQLITE_EVENTS.insert(cur, rows.session_id, event_rows)
            _SQLITE_PARTS.insert(cur, rows.session_id, part_rows)
        finally:
            cur.close()
    except conn.dialect.loaded_dbapi.Error as exc:
        raise driver_error(conn, exc) from None  # as SQLAlchemy's own statements raise
    assert rows.newest is not None
    return rows.newest


#: Rows per multi-row INSERT on SQLite: at most 1 + 8 × 120 = 961 bound values for
#: events (the session id once, then each row's own), under 999, the limit before SQLite
#: 3.32.
SQLITE_ROWS_PER_INSERT = 120


class _SQLiteTable:
    """A table's bulk INSERTs on SQLite, written to bind as few values as they can.

    The session id is bound once per statement (``?1``) for all its rows. ``sqlite3``
    binds None slowly (for every None it looks for an adapter, and finds none), so the
    rows that hold NULL in every one of the ``nullable`` columns (most rows: an unkeyed
    batch's events, text parts) go through statements that write those NULLs as
    literals: an events row then binds 8 values instead of 12, a text part 4 instead of
    8. Rows keep their order within each of the two kinds; the kind of the first row goes
    first. (Only a batch's first event can carry a key, so its events go in seq order:
    the feed numbers SQLite's events in the order they were inserted.)
    """

    def __init__(self, table: str, cols: tuple[str, ...], nullable: tuple[str, ...]) -> None:
        null_at = sorted(cols.index(c) for c in nullable)
        if len(null_at) < 2:  # the getter must give a tuple to compare with _nones
            raise ValueError("name two nullable columns or more")
        self._nullable = itemgetter(*null_at)
        self._nones = (None,) * len(null_at)  # what the getter gives for a row NULL in all
        self._head = f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
        self._bound = self._shape(len(cols), set())
        self._nulls = self._shape(len(cols), set(null_at))

    @staticmethod
    def _shape(width: int, null_at: set[int]) -> tuple[Any, str, dict[int, str]]:
        """For rows NULL at ``null_at``: the getter of their bound values (never one
        value alone: every row binds its seq and more), one row's VALUES, and the
        statements made so far, by row count."""
        own = [i for i in range(1, width) if i not in null_at]
        values = ["?1"] + ["NULL" if i in null_at else "?" for i in range(1, width)]
        return itemgetter(*own), f"({', '.join(values)})", {}

    def insert(self, cur: Any, session_id: str, rows: list[tuple[Any, ...]]) -> None:
        """``rows`` (whole rows in column order, all of ``session_id``), up to
        :data:`SQLITE_ROWS_PER_INSERT` per statement: about a tenth less time in SQLite
        than one ``executemany`` row by row."""
        if not rows:
            return
        # Both kinds picked out in C loops (a Python loop per row cost what it saved).
        null = list(map(self._nones.__eq__, map(self._nullable, rows)))
        nulls = list(compress(rows, null))
        bound = list(compress(rows, map(not_, null))) if len(nulls) < len(rows) else []
        kinds = [(self._nulls, nulls), (self._bound, bound)]
        if not null[0]:
            kinds.reverse()
        k = SQLITE_ROWS_PER_INSERT
        for (own, one, made), group in kinds:
            for at in range(0, len(group), k):
                chunk = group[at : at + k]
                params: list[Any] = [session_id]
                params += chain.from_iterable(map(own, chunk))
                sql = made.get(len(chunk))
                if sql is None:
                    sql = made[len(chunk)] = self._head + ", ".join([one] * len(chunk))
                cur.execute(sql, params)


_SQLITE_EVENTS = _SQLiteTable(
    "events", _EVENT_COLS, ("idempotency_key", "batch_size", "batch_digest")
)
_SQLITE_PARTS = _SQLiteTable("parts", _PART_COLS, ("tool_call_id", "tool_name", "state"))
