"""Fewer index writes per appended event.

Every event row used to update five indexes besides its table, and every parts row a
sixth, plus two foreign-key checks. After this revision an ordinary message updates two:

* ``UNIQUE (session_id, id)`` and the plain index on ``id`` become one
  ``UNIQUE (id, session_id)``: the same per-session uniqueness (the key still includes the
  session, so the schema stays distributable by session), and a lookup by event id alone
  is still one probe of its leading column.
* The idempotency key's unique index only holds rows that have a key
  (``WHERE idempotency_key IS NOT NULL``): the first event of a keyed append.
* The ``(session_id, kind, seq)`` index only holds events that are not messages
  (``WHERE kind <> 'message'``): condensations, prunes, requests, model calls, custom
  events, the rare kinds a view probes for. Messages, the bulk of a log, are read by
  primary-key range.
* The foreign keys ``events -> sessions`` and ``parts -> events`` go. Both were checked
  on every row an append writes, and neither can fail there: the statement that inserts
  events moves the session's head in the same transaction (and only inserts when the
  guarded move succeeds), and parts are written with their event. Sessions are never
  deleted (``delete_session`` leaves a tombstone).
* On SQLite, ``parts`` becomes a ``WITHOUT ROWID`` table: its rows are small and always
  read by primary key, so the key index is the table.
* On Postgres servers that have it (14 and later, built with lz4), large payloads are
  compressed with lz4 instead of the default pglz: several times faster to compress and
  to read back, for a slightly larger table. Rows already stored keep their compression;
  both read the same.

Postgres changes the constraints in place; SQLite rebuilds ``events`` and ``parts`` (create,
copy, drop, rename; the append-only triggers re-created from the database's own DDL).
Payloads and hashes are copied byte for byte, so every chain still verifies. The copy is
one pass over both tables (about 2 s for 100,000 events in a 211 MB file on a 2-vCPU
machine). Until then the old and new copies both take space: the file grows by about its
size, and keeps the freed pages for later appends (``VACUUM`` returns them to the disk).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_EVENT_COLS = (
    "session_id, seq, id, kind, created_at, payload, token_count, size, idempotency_key, "
    "batch_size, batch_digest, hash"
)
_PART_COLS = (
    "session_id, seq, idx, type, tool_call_id, tool_name, state, token_count, compacted_at, "
    "compacted_seq"
)
_EVENT_COLUMNS_DDL = """
	session_id VARCHAR(36) NOT NULL,
	seq INTEGER NOT NULL,
	id VARCHAR(36) NOT NULL,
	kind VARCHAR(32) NOT NULL,
	created_at DATETIME NOT NULL,
	payload TEXT NOT NULL,
	token_count INTEGER NOT NULL,
	size BIGINT NOT NULL,
	idempotency_key VARCHAR(255),
	batch_size INTEGER,
	batch_digest VARCHAR(64),
	hash VARCHAR(64) NOT NULL,
	CONSTRAINT pk_events PRIMARY KEY (session_id, seq),"""
_PART_COLUMNS_DDL = """
	session_id VARCHAR(36) NOT NULL,
	seq INTEGER NOT NULL,
	idx INTEGER NOT NULL,
	type VARCHAR(16) NOT NULL,
	tool_call_id VARCHAR(255),
	tool_name VARCHAR(255),
	state VARCHAR(16),
	token_count INTEGER NOT NULL,
	compacted_at DATETIME,
	compacted_seq INTEGER,
	CONSTRAINT pk_parts PRIMARY KEY (session_id, seq, idx)"""

_SQLITE_NEW = {
    "events": f"CREATE TABLE _new_events ({_EVENT_COLUMNS_DDL}\n"
    "\tCONSTRAINT uq_events_id_session_id UNIQUE (id, session_id)\n)",
    "parts": f"CREATE TABLE _new_parts ({_PART_COLUMNS_DDL}\n) WITHOUT ROWID",
}
_SQLITE_OLD = {
    "events": f"CREATE TABLE _new_events ({_EVENT_COLUMNS_DDL}\n"
    "\tCONSTRAINT fk_events_session_id_sessions FOREIGN KEY(session_id) "
    "REFERENCES sessions (id),\n"
    "\tCONSTRAINT uq_events_session_id_idempotency_key UNIQUE (session_id, idempotency_key),\n"
    "\tCONSTRAINT uq_events_session_id_id UNIQUE (session_id, id)\n)",
    "parts": f"CREATE TABLE _new_parts ({_PART_COLUMNS_DDL},\n"
    "\tCONSTRAINT fk_parts_session_id_events FOREIGN KEY(session_id, seq) "
    "REFERENCES _new_events (session_id, seq)\n)",
}

_NEW_INDEXES = [
    "CREATE UNIQUE INDEX ix_events_session_id_idempotency_key "
    "ON events (session_id, idempotency_key) WHERE idempotency_key IS NOT NULL",
    "CREATE INDEX ix_events_session_id_kind_seq_not_message "
    "ON events (session_id, kind, seq) WHERE kind <> 'message'",
]
_OLD_INDEXES = [
    "CREATE INDEX ix_events_session_id_kind_seq ON events (session_id, kind, seq)",
    "CREATE INDEX ix_events_id ON events (id)",
]


def _rebuild_sqlite(tables: dict[str, str], indexes: list[str]) -> None:
    """Rebuild ``events`` and ``parts`` from ``tables`` (their new DDL), copying every row
    by column name, then re-create their triggers and ``indexes``."""
    conn = op.get_bind()
    triggers = [
        r[0]
        for r in conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' "
            "AND tbl_name IN ('events', 'parts') ORDER BY name"
        )
    ]
    cols = {"events": _EVENT_COLS, "parts": _PART_COLS}
    for name in ("events", "parts"):
        conn.exec_driver_sql(tables[name])
        conn.exec_driver_sql(
            f"INSERT INTO _new_{name} ({cols[name]}) SELECT {cols[name]} FROM {name} "
            "ORDER BY session_id, seq" + (", idx" if name == "parts" else "")
        )
    # Dropping a table drops its indexes and triggers; parts first (it refers to events).
    # A new parts table that refers to events names _new_events, which the rename below
    # turns into events: the old rows are never checked against the old table.
    conn.exec_driver_sql("DROP TABLE parts")
    conn.exec_driver_sql("DROP TABLE events")
    conn.exec_driver_sql("ALTER TABLE _new_events RENAME TO events")
    conn.exec_driver_sql("ALTER TABLE _new_parts RENAME TO parts")
    for sql in triggers + indexes:
        conn.exec_driver_sql(sql)


_HAS_LZ4 = (
    "SELECT coalesce(bool_or('lz4' = ANY(enumvals)), false) FROM pg_settings "
    "WHERE name = 'default_toast_compression'"
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(_SQLITE_NEW, _NEW_INDEXES)
        return
    if op.get_bind().exec_driver_sql(_HAS_LZ4).scalar():
        op.execute("ALTER TABLE events ALTER COLUMN payload SET COMPRESSION lz4")
    for sql in (
        "ALTER TABLE parts DROP CONSTRAINT fk_parts_session_id_events",
        "ALTER TABLE events DROP CONSTRAINT fk_events_session_id_sessions",
        "ALTER TABLE events DROP CONSTRAINT uq_events_session_id_id",
        "DROP INDEX ix_events_id",
        "ALTER TABLE events ADD CONSTRAINT uq_events_id_session_id UNIQUE (id, session_id)",
        "ALTER TABLE events DROP CONSTRAINT uq_events_session_id_idempotency_key",
        "DROP INDEX ix_events_session_id_kind_seq",
        *_NEW_INDEXES,
    ):
        op.execute(sql)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(_SQLITE_OLD, _OLD_INDEXES)
        return
    if op.get_bind().exec_driver_sql(_HAS_LZ4).scalar():
        op.execute("ALTER TABLE events ALTER COLUMN payload SET COMPRESSION default")
    for sql in (
        "DROP INDEX ix_events_session_id_kind_seq_not_message",
        "DROP INDEX ix_events_session_id_idempotency_key",
        *_OLD_INDEXES,
        "ALTER TABLE events ADD CONSTRAINT uq_events_session_id_idempotency_key "
        "UNIQUE (session_id, idempotency_key)",
        "ALTER TABLE events DROP CONSTRAINT uq_events_id_session_id",
        "ALTER TABLE events ADD CONSTRAINT uq_events_session_id_id UNIQUE (session_id, id)",
        "ALTER TABLE events ADD CONSTRAINT fk_events_session_id_sessions "
        "FOREIGN KEY (session_id) REFERENCES sessions (id)",
        "ALTER TABLE parts ADD CONSTRAINT fk_parts_session_id_events "
        "FOREIGN KEY (session_id, seq) REFERENCES events (session_id, seq)",
    ):
        op.execute(sql)
