"""The raw-driver floors: the least work each database can do to store the same rows.

Both floors write the store's payload text for each workload event into a table with
the store's natural key, ``(session_id, seq)`` as primary key and ``payload TEXT``, with
no hash chain, no parts table, no head row and no validation. The SQLite floor uses the
store's durability settings (WAL, ``synchronous=FULL``); Postgres runs with the server's
defaults, as the store does.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

__all__ = ["RawSQLite", "RawPostgres", "pg_conninfo"]

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
            cur.execute(f"DROP TABLE IF EXISTS {_TABLE}")
            cur.execute(
                f"CREATE TABLE {_TABLE} (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
                "payload TEXT NOT NULL, PRIMARY KEY (session_id, seq))"
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
