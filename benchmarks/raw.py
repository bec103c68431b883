"""The raw-driver floors: the least work each database can do to store the same rows.

Both floors write the store's payload text for each workload event into a table with
the store's natural key, ``(session_id, seq)`` as primary key and ``payload TEXT``, with
no hash chain, no parts table, no head row and no validation. The SQLite floor uses the
store's durability settings (WAL, ``synchronous=FULL``); Postgres runs with the server's
defaults, as the store does, and compresses large payloads the way the store's column does
(lz4 since schema 0009 where the server has it, else the default pglz).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

__all__ = ["RawSQLite", "RawPostgres", "pg_conninfo", "StoreSQL", "StoreRows"]

_TABLE = "bench_raw"
Row = tuple[str, int, str]


class RawSQLite:
    """stdlib ``sqlite3`` in autocommit mode: one INSERT is one transaction."""

    name = "sqlite3"

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(str(path), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(f"DROP TABLE IF EXISTS {_TABLE}")
        self.conn.execute(
            f"CREATE TABLE {_TABLE} (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "payload TEXT NOT NULL, PRIMARY KEY (session_id, seq))"
        )

    def insert_one(self, row: Row) -> None:
        self.conn.execute(f"INSERT INTO {_TABLE} VALUES (?, ?, ?)", row)

    def insert_many(self, rows: Sequence[Row]) -> None:
        self.conn.execute("BEGIN")
        self.conn.executemany(f"INSERT INTO {_TABLE} VALUES (?, ?, ?)", rows)
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


def pg_conninfo(url: str) -> dict[str, Any]:
    """psycopg connection keywords for a SQLAlchemy Postgres URL."""
    u = make_url(url)
    out: dict[str, Any] = {"dbname": u.database}
    if u.host:
        out["host"] = u.host
    if u.port:
        out["port"] = u.port
    if u.username:
        out["user"] = u.username
    if u.password:
        out["password"] = u.password
    return out


class RawPostgres:
    """psycopg 3 in autocommit mode: one INSERT is one transaction and one round trip."""

    name = "psycopg"

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(**pg_conninfo(url), autocommit=True)
        with self.conn.cursor() as cur:
            # The payload column is compressed as the store's is (lz4 since schema 0009,
            # where the server has it): the floor measures the same bytes stored the same way.
            cur.execute(
                "SELECT attcompression FROM pg_attribute WHERE attname = 'payload' "
                "AND attrelid = to_regclass('events')"
            )
            found = cur.fetchone()
            compression = " COMPRESSION lz4" if found and found[0] == "l" else ""
            cur.execute(f"DROP TABLE IF EXISTS {_TABLE}")
            cur.execute(
                f"CREATE TABLE {_TABLE} (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
                f"payload TEXT{compression} NOT NULL, PRIMARY KEY (session_id, seq))"
            )

    def insert_one(self, row: Row) -> None:
        self.conn.execute(f"INSERT INTO {_TABLE} VALUES (%s, %s, %s)", row)

    def insert_many(self, rows: Sequence[Row]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {_TABLE} VALUES (%s, %s, %s)", rows)

    def copy(self, rows: Sequence[Row]) -> None:
        with (
            self.conn.transaction(),
            self.conn.cursor() as cur,
            cur.copy(f"COPY {_TABLE} (session_id, seq, payload) FROM STDIN") as cp,
        ):
            for row in rows:
                cp.write_row(row)

    def server_version(self) -> str:
        row = self.conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "unknown"

    def close(self) -> None:
        self.conn.close()


class StoreSQL:
    """A diagnostic between the floor and the store: the statements of the store's append
    fast path for one event, sent straight through the driver with the hash chain
    computed inline. Like the store, it remembers the head its last append left, so no
    head is read: on SQLite ``BEGIN IMMEDIATE``, the guarded head move, the event insert
    and its parts rows' (a message has none when its one part is text), ``COMMIT``; on
    Postgres the one guarded statement, prepared and sent through libpq as the store
    sends it.

    The gap between the floor and this is the schema and its round trips; the gap between
    this and the store is the library's Python work (validation, encoding, pooling).
    """

    name = "driver, store's SQL"

    def __init__(self, store_url: str, session_id: str, tenant: str = "default") -> None:
        self.sid, self.tenant = session_id, tenant
        self.head, self.prev = 0, None
        u = make_url(store_url)
        self.pg = u.get_backend_name() == "postgresql"
        if self.pg:
            import psycopg

            self.conn: Any = psycopg.connect(**pg_conninfo(store_url), autocommit=True)
        else:
            self.conn = sqlite3.connect(u.database or "", isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("PRAGMA foreign_keys=ON")

    def append_one(self, kind: str, payload: str, token_count: int, parts: list[dict]) -> None:
        from eventstore._append import postgres, sqlite
        from eventstore._append.rows import Write
        from eventstore.codec import chain_hash, new_id, sqlite_time_text
        from eventstore.events import utcnow

        c, sid, head = self.conn, self.sid, self.head
        now = utcnow()
        seq, eid = head + 1, new_id()
        digest = chain_hash(self.prev, seq, eid, kind, now, payload)
        size = len(payload.encode("utf-8"))
        cols = ("idx", "type", "tool_call_id", "tool_name", "state", "token_count")
        part_rows = [(sid, seq, *(row[k] for k in cols)) for row in parts]
        stamp = now if self.pg else sqlite_time_text(now)
        rows = [(sid, seq, eid, kind, stamp, payload, token_count, size, None, None, None, digest)]
        w = Write(self.tenant, sid, head, self.prev, seq, digest, rows, part_rows)
        if self.pg:
            applied = postgres.write_guarded_prepared(c, w)
        else:
            c.execute("BEGIN IMMEDIATE")
            applied = sqlite.write_guarded(c, w)
            c.execute("COMMIT")
        assert applied, "the diagnostic's head went stale"
        self.head, self.prev = seq, digest

    def close(self) -> None:
        self.conn.close()


class StoreRows:
    """A diagnostic for batch appends: the exact rows the store writes for a batch (events
    with their hash chain, parts, the head move), made beforehand and sent through the
    driver in one transaction the way the store's bulk path sends them (multi-row
    ``INSERT``s on SQLite, ``COPY`` on Postgres).

    The gap between the raw floor and this is the schema's own cost (two tables, the
    indexes on ``events``); the gap between this and the
    store is the library's Python work (validation, encoding, hashing, SQLAlchemy).
    """

    name = "driver, store's rows"

    def __init__(self, store: Any, session_id: str) -> None:
        self.store, self.sid = store, session_id
        self.head, self.head_hash = 0, None
        u = make_url(store.url)
        self.pg = u.get_backend_name() == "postgresql"
        if self.pg:
            import psycopg

            self.conn: Any = psycopg.connect(**pg_conninfo(store.url))
        else:
            self.conn = sqlite3.connect(u.database or "", isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("PRAGMA foreign_keys=ON")

    def prepare(self, events: Sequence[Any]) -> tuple[list[Any], list[Any], Any]:
        """The driver rows of ``events`` appended after this session's head (not timed)."""
        from eventstore._append.rows import Rows
        from eventstore.codec import encode
        from eventstore.events import utcnow

        encoded = [encode(e, self.store.token_counter) for e in events]
        rows = Rows(self.sid, self.head, self.head_hash, encoded, utcnow(), sqlite=not self.pg)
        ev = rows.collect()
        self.head, self.head_hash = rows.seq, rows.head_hash
        return ev, rows.parts, ev[-1][4]

    def insert(self, prepared: tuple[list[Any], list[Any], Any]) -> None:
        """Lock the head, insert the rows, move the head, commit (timed)."""
        from eventstore._append import postgres, sqlite

        ev, pt, newest = prepared
        if self.pg:
            with self.conn.transaction(), self.conn.cursor() as cur:
                cur.execute("SELECT head_seq FROM sessions WHERE id = %s FOR UPDATE", (self.sid,))
                postgres.copy_rows(cur, ev, pt)
                cur.execute(
                    "UPDATE sessions SET head_seq = %s, head_hash = %s, updated_at = %s "
                    "WHERE id = %s",
                    (self.head, self.head_hash, newest, self.sid),
                )
            return
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.execute("SELECT head_seq FROM sessions WHERE id = ?", (self.sid,)).fetchone()
        sqlite.insert_rows(c, self.sid, ev, pt)
        sqlite.move_head(c, self.sid, self.head, self.head_hash, newest)
        c.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


def fresh_pg_database(url: str) -> str:
    """Drop and recreate the benchmark database ``url`` names (its name must contain
    ``bench``: a benchmark never drops anything else); returns the URL."""
    import psycopg

    u = make_url(url).set(drivername="postgresql+psycopg")
    name = u.database or ""
    if "bench" not in name:
        raise SystemExit(f"refusing to drop database {name!r}: its name must contain 'bench'")
    admin = pg_conninfo(u.set(database="postgres").render_as_string(hide_password=False))
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return u.render_as_string(hide_password=False)


def pg_analyze(url: str) -> None:
    """``ANALYZE`` a Postgres database (what autovacuum's autoanalyze would have done).

    Without statistics the planner sizes tables by their first, empty state, and the plans
    a connection caches for the foreign-key checks stay tuned for an empty table. ANALYZE
    refreshes the statistics and invalidates those cached plans.
    """
    import psycopg

    u = make_url(url).set(drivername="postgresql+psycopg")
    with psycopg.connect(
        **pg_conninfo(u.render_as_string(hide_password=False)), autocommit=True
    ) as conn:
        conn.execute("ANALYZE")


def pg_autovacuum(url: str) -> str | None:
    """The server's ``autovacuum`` setting, or None when it cannot be read."""
    import psycopg

    u = make_url(url).set(drivername="postgresql+psycopg")
    try:
        with psycopg.connect(**pg_conninfo(u.render_as_string(hide_password=False))) as conn:
            row = conn.execute("SHOW autovacuum").fetchone()
            return str(row[0]) if row else None
    except psycopg.Error:
        return None
