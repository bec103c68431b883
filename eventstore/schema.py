"""SQLAlchemy tables and the database-level append-only guards.

The tables are the single source for migrations (``alembic check`` compares them with the
migration head in CI). Message content lives once, in ``events.payload``; ``parts`` holds
the per-part metadata a view needs without parsing payloads: type, tool ids, token counts
and the one-time compaction stamp. A message whose one part is text gets no ``parts`` row
until a prune truncates that part (since 0010; see :func:`eventstore.codec.sole_text`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    and_,
    text,
)
from sqlalchemy.sql.elements import ColumnElement

__all__ = [
    "metadata",
    "sessions",
    "session_keys",
    "events",
    "parts",
    "fork_compactions",
    "feed",
    "feed_pending",
    "feed_cursor",
    "search_progress",
    "blobs",
    "purge_marks",
    "purge_pending",
    "NATIVE_SEARCH_TABLES",
    "SCHEMA_REVISION",
    "RARE_KIND",
    "kind_is",
    "kind_sql",
    "trigger_ddl",
    "drop_trigger_ddl",
    "feed_trigger_ddl",
    "drop_feed_trigger_ddl",
]

#: The Alembic revision this code expects. A test asserts it equals the migration head.
SCHEMA_REVISION = "0012"

#: The predicate of the partial ``(session_id, kind, seq)`` index: every kind but messages.
RARE_KIND = "kind <> 'message'"

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every dialect (SQLite stores naive text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


sessions = Table(
    "sessions",
    metadata,
    Column("id", String(36), nullable=False),
    Column("tenant", String(255), nullable=False),
    Column("user_id", String(255), nullable=True),
    Column("title", Text, nullable=True),
    Column("metadata", Text, nullable=False),
    Column("parent_id", String(36), nullable=True),
    Column("fork_seq", Integer, nullable=True),
    Column("head_seq", Integer, nullable=False),
    Column("head_hash", String(64), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # The caller's own name for the session, any length (since 0005), and the SHA-256 over
    # (user_id, key) that ``session_keys`` holds unique per tenant; cleared when deleted.
    Column("key", Text, nullable=True),
    Column("key_digest", String(64), nullable=True),
    # Set by delete_session: a tombstone, never a removal.
    Column("deleted_at", UTCDateTime, nullable=True),
    # No foreign key on parent_id: it would point at another session, and sessions are
    # the unit a distributed database spreads over machines (see docs/scaling.md).
    PrimaryKeyConstraint("id"),
    Index(None, "tenant", "created_at"),
    Index(None, "tenant", "user_id", "created_at"),
)

# The caller's names for sessions (``create_session(key=...)``), unique per tenant and user.
# The one session-table key without ``session_id``: a name must be unique wherever its
# session lives, so this table is keyed (and distributed) by the name. It is written only
# when a session is created with a key or deleted, never on the append path.
session_keys = Table(
    "session_keys",
    metadata,
    Column("tenant", String(255), nullable=False),
    Column("key_digest", String(64), nullable=False),
    Column("session_id", String(36), nullable=False),
    PrimaryKeyConstraint("tenant", "key_digest"),
)

events = Table(
    "events",
    metadata,
    Column("session_id", String(36), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("id", String(36), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("payload", Text, nullable=False),
    Column("token_count", Integer, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("idempotency_key", String(255), nullable=True),
    Column("batch_size", Integer, nullable=True),
    # SHA-256 of the batch an idempotency key was first used for (NULL before 0002).
    Column("batch_digest", String(64), nullable=True),
    Column("hash", String(64), nullable=False),
    PrimaryKeyConstraint("session_id", "seq"),
    # Every unique key includes session_id, so events can be spread by session (0007).
    # Event ids are UUIDv7s, unique by construction; the database enforces it per session,
    # and the key's leading column serves get_event / find_event by id alone (0009).
    UniqueConstraint("id", "session_id"),
    # Only keyed appends write to these two (0009): most events have no idempotency key,
    # and most are messages, which a view reads by primary-key range.
    Index(
        None,
        "session_id",
        "idempotency_key",
        unique=True,
        sqlite_where=text("idempotency_key IS NOT NULL"),
        postgresql_where=text("idempotency_key IS NOT NULL"),
    ),
    # One probe finds the latest condensation (or prune, request, model call...) at or
    # before a seq. A query must repeat the predicate (``RARE_KIND``) for SQLite to use it.
    Index(
        "ix_events_session_id_kind_seq_not_message",
        "session_id",
        "kind",
        "seq",
        sqlite_where=text(RARE_KIND),
        postgresql_where=text(RARE_KIND),
    ),
    # No foreign key to sessions (0009): the statement that inserts events moves the
    # session's head in the same transaction, and sessions are never deleted.
)

parts = Table(
    "parts",
    metadata,
    Column("session_id", String(36), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("idx", Integer, nullable=False),
    Column("type", String(16), nullable=False),
    Column("tool_call_id", String(255), nullable=True),
    Column("tool_name", String(255), nullable=True),
    Column("state", String(16), nullable=True),
    Column("token_count", Integer, nullable=False),
    Column("compacted_at", UTCDateTime, nullable=True),
    Column("compacted_seq", Integer, nullable=True),
    PrimaryKeyConstraint("session_id", "seq", "idx"),
    # Written only with their event, in its transaction: no foreign key to check per row
    # (0009). Small rows always read by key: on SQLite the key index is the table.
    sqlite_with_rowid=False,
)


def kind_is(kind: str) -> ColumnElement[bool]:
    """``events.kind == kind``, repeating the partial kind index's predicate for any kind
    but messages: SQLite uses a partial index only for a query that states its predicate."""
    if kind == "message":
        return events.c.kind == kind
    return and_(events.c.kind == kind, text(RARE_KIND))


def kind_sql(kind: str) -> str:
    """:func:`kind_is` as SQL text, for statements written as text (``kind`` is a name
    from the code, never a caller's value)."""
    if not kind.isidentifier():
        raise ValueError(f"not an event kind: {kind!r}")
    return f"kind = '{kind}'" + ("" if kind == "message" else f" AND {RARE_KIND}")


# A fork shares its parent's rows, so it cannot stamp them: the parent's view would change.
# Compactions a fork applies to inherited parts are recorded here instead.
fork_compactions = Table(
    "fork_compactions",
    metadata,
    Column("session_id", String(36), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("idx", Integer, nullable=False),
    Column("compacted_seq", Integer, nullable=False),
    Column("compacted_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("session_id", "seq", "idx"),
    ForeignKeyConstraint(["session_id"], ["sessions.id"]),
)

# The tenant's feed: every appended event gets a position in one ordered sequence per
# tenant (a row per range: ``position_start..position_end``, dense, one position per
# event), so a follower can read "everything after position P" across sessions and never
# skip an event. Positions are assigned in commit order, by a reader of the feed (see
# ``eventstore._features.feed``), never by the append itself: on SQLite from the order the events
# table's rows were inserted in (its rowids: writers take turns, each holding the database
# lock until it commits, and events are never deleted), past the last event numbered,
# which ``feed_cursor`` names; on Postgres the statement that moves the head queues the
# range in ``feed_pending`` (a trigger did until 0008), and a reader moves committed
# ranges into ``feed`` under a per-tenant advisory lock: a range is numbered only once it
# is visible, so a transaction that commits late can never receive a position below one a
# follower already passed. (Until 0010 a trigger on SQLite numbered each append's range
# as its head moved.)
feed = Table(
    "feed",
    metadata,
    Column("tenant", String(255), nullable=False),
    Column("position_start", BigInteger, nullable=False),
    Column("position_end", BigInteger, nullable=False),
    Column("session_id", String(36), nullable=False),
    Column("from_seq", Integer, nullable=False),
    Column("to_seq", Integer, nullable=False),
    # Keyed by the range's end: "after position P" and "the newest position" are both
    # probes of this key, so no second index has to be written on every append.
    PrimaryKeyConstraint("tenant", "position_end"),
    Index(None, "session_id", "position_end"),
    sqlite_with_rowid=False,
)

feed_pending = Table(
    "feed_pending",
    metadata,
    Column("session_id", String(36), nullable=False),
    Column("from_seq", Integer, nullable=False),
    Column("to_seq", Integer, nullable=False),
    Column("tenant", String(255), nullable=False),
    # When the append happened: pending ranges are numbered in this order.
    Column("queued_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("session_id", "from_seq"),
    Index(None, "tenant"),
)

# SQLite: the last event the feed has numbered, by its key (one row, ``id`` 1; none until
# the first). Its rowid is looked up when the feed is read: a ``VACUUM`` may renumber the
# rowids of ``events``, but it keeps their order. Postgres leaves this table empty.
feed_cursor = Table(
    "feed_cursor",
    metadata,
    Column("id", Integer, nullable=False),
    Column("session_id", String(36), nullable=False),
    Column("seq", Integer, nullable=False),
    PrimaryKeyConstraint("id"),
)

# Large attachments, once per tenant by content hash (``sha256:<hex>``); payloads name them.
blobs = Table(
    "blobs",
    metadata,
    Column("tenant", String(255), nullable=False),
    Column("digest", String(71), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("tenant", "digest"),
)

# How far the tenant's full-text index has followed the feed. The index itself is native to
# each backend (an FTS5 table on SQLite, a tsvector table on Postgres) and created by
# migration 0004 outside this metadata; ``NATIVE_SEARCH_TABLES`` names what it adds.
search_progress = Table(
    "search_progress",
    metadata,
    Column("tenant", String(255), nullable=False),
    Column("position", BigInteger, nullable=False),
    PrimaryKeyConstraint("tenant"),
)

# SQLite only: the session a purge is rewriting, inserted and deleted inside each of the
# purge's transactions (so no other connection ever sees a row). The append-only trigger
# on ``events`` lets that session's payloads change, and nothing else of its rows.
# Postgres reads a transaction-local setting instead (``eventstore.purging``) and has no
# such table since 0012. Either way no DDL runs: other writers never wait for the table.
purge_marks = Table(
    "purge_marks",
    metadata,
    Column("session_id", String(36), nullable=False),
    PrimaryKeyConstraint("session_id"),
    info={"dialects": ("sqlite",)},
)

# A purge that has appended its record but not yet erased every event the record lists
# (it erases them in short transactions after the record commits, so that other writers
# never wait for the whole purge). ``refs`` are the attachment digests the purged events
# named (JSON), which the erased payloads no longer show. The next purge, or the next
# open of the store, completes what a killed process left; ``verify`` reports it meanwhile.
purge_pending = Table(
    "purge_pending",
    metadata,
    Column("session_id", String(36), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("tenant", String(255), nullable=False),
    Column("refs", Text, nullable=False),
    PrimaryKeyConstraint("session_id", "seq"),
)

#: Tables of the native search index, by dialect (SQLite's FTS5 adds shadow tables
#: named after it).
NATIVE_SEARCH_TABLES = {"sqlite": "search_fts", "postgresql": "search_docs"}

# No feed trigger since 0010 on SQLite (readers number the events table's new rows) and
# 0008 on Postgres (the statements that move a head queue the range in ``feed_pending``
# themselves: ``eventstore._append.locked.move_head`` and the guarded append). What 0003
# installed, dropped by those revisions (and by downgrades past 0003):
_SQLITE_FEED_DROP = ["DROP TRIGGER IF EXISTS sessions_feed"]
_PG_FEED_DROP = [
    "DROP TRIGGER IF EXISTS sessions_feed ON sessions",
    "DROP FUNCTION IF EXISTS eventstore_feed_pending()",
]


def feed_trigger_ddl(dialect: str) -> list[str]:
    """DDL that installs the trigger feeding the tenant feed for ``dialect``: none since
    0010 (SQLite) and 0008 (Postgres)."""
    if dialect in ("sqlite", "postgresql"):
        return []
    raise ValueError(f"unsupported dialect {dialect!r}")


def drop_feed_trigger_ddl(dialect: str) -> list[str]:
    """DDL that removes the feed trigger (used by downgrades)."""
    if dialect == "sqlite":
        return list(_SQLITE_FEED_DROP)
    if dialect == "postgresql":
        return list(_PG_FEED_DROP)
    raise ValueError(f"unsupported dialect {dialect!r}")


SQLITE_TRIGGERS = [
    (
        "events_append_only_update",
        """CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
WHEN NOT EXISTS (SELECT 1 FROM purge_marks WHERE session_id = OLD.session_id)
    OR NEW.session_id IS NOT OLD.session_id OR NEW.seq IS NOT OLD.seq
    OR NEW.id IS NOT OLD.id OR NEW.kind IS NOT OLD.kind OR NEW.hash IS NOT OLD.hash
    OR NEW.created_at IS NOT OLD.created_at
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
    ),
    (
        "events_append_only_delete",
        """CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
    ),
    (
        "parts_append_only_delete",
        """CREATE TRIGGER parts_append_only_delete BEFORE DELETE ON parts
BEGIN SELECT RAISE(ABORT, 'parts are append-only'); END""",
    ),
    (
        "parts_compact_once",
        """CREATE TRIGGER parts_compact_once BEFORE UPDATE ON parts
WHEN NOT (
    OLD.compacted_at IS NULL AND OLD.compacted_seq IS NULL
    AND NEW.compacted_at IS NOT NULL AND NEW.compacted_seq IS NOT NULL
    AND NEW.session_id = OLD.session_id AND NEW.seq = OLD.seq AND NEW.idx = OLD.idx
    AND NEW.type = OLD.type AND NEW.token_count = OLD.token_count
    AND NEW.tool_call_id IS OLD.tool_call_id AND NEW.tool_name IS OLD.tool_name
    AND NEW.state IS OLD.state
)
BEGIN SELECT RAISE(ABORT, 'parts are append-only: only compacted_at/compacted_seq may be set, once'); END""",  # noqa: E501
    ),
    (
        "fork_compactions_append_only_update",
        """CREATE TRIGGER fork_compactions_append_only_update BEFORE UPDATE ON fork_compactions
BEGIN SELECT RAISE(ABORT, 'fork_compactions are append-only'); END""",
    ),
    (
        "fork_compactions_append_only_delete",
        """CREATE TRIGGER fork_compactions_append_only_delete BEFORE DELETE ON fork_compactions
BEGIN SELECT RAISE(ABORT, 'fork_compactions are append-only'); END""",
    ),
]

_PG_FUNCTIONS = [
    """CREATE OR REPLACE FUNCTION eventstore_events_guard() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE'
       AND OLD.session_id = current_setting('eventstore.purging', true)
       AND NEW.session_id = OLD.session_id AND NEW.seq = OLD.seq AND NEW.id = OLD.id
       AND NEW.kind = OLD.kind AND NEW.hash = OLD.hash
       AND NEW.created_at = OLD.created_at THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql""",
    """CREATE OR REPLACE FUNCTION eventstore_reject_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql""",
    """CREATE OR REPLACE FUNCTION eventstore_parts_compact_once() RETURNS trigger AS $$
BEGIN
    IF OLD.compacted_at IS NULL AND OLD.compacted_seq IS NULL
       AND NEW.compacted_at IS NOT NULL AND NEW.compacted_seq IS NOT NULL
       AND NEW.session_id = OLD.session_id AND NEW.seq = OLD.seq AND NEW.idx = OLD.idx
       AND NEW.type = OLD.type AND NEW.token_count = OLD.token_count
       AND NEW.tool_call_id IS NOT DISTINCT FROM OLD.tool_call_id
       AND NEW.tool_name IS NOT DISTINCT FROM OLD.tool_name
       AND NEW.state IS NOT DISTINCT FROM OLD.state THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'parts are append-only: only compacted_at/compacted_seq may be set, once'
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql""",
]

PG_TRIGGERS = [
    (
        "events_append_only",
        "events",
        """CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION eventstore_events_guard()""",
    ),
    (
        "events_no_truncate",
        "events",
        """CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
FOR EACH STATEMENT EXECUTE FUNCTION eventstore_reject_change()""",
    ),
    (
        "parts_append_only_delete",
        "parts",
        """CREATE TRIGGER parts_append_only_delete BEFORE DELETE ON parts
FOR EACH ROW EXECUTE FUNCTION eventstore_reject_change()""",
    ),
    (
        "parts_no_truncate",
        "parts",
        """CREATE TRIGGER parts_no_truncate BEFORE TRUNCATE ON parts
FOR EACH STATEMENT EXECUTE FUNCTION eventstore_reject_change()""",
    ),
    (
        "parts_compact_once",
        "parts",
        """CREATE TRIGGER parts_compact_once BEFORE UPDATE ON parts
FOR EACH ROW EXECUTE FUNCTION eventstore_parts_compact_once()""",
    ),
    (
        "fork_compactions_append_only",
        "fork_compactions",
        """CREATE TRIGGER fork_compactions_append_only BEFORE UPDATE OR DELETE ON fork_compactions
FOR EACH ROW EXECUTE FUNCTION eventstore_reject_change()""",
    ),
]


def trigger_ddl(dialect: str) -> list[str]:
    """DDL that installs the append-only guards for ``dialect``."""
    if dialect == "sqlite":
        return [sql for _, sql in SQLITE_TRIGGERS]
    if dialect == "postgresql":
        return _PG_FUNCTIONS + [sql for _, _, sql in PG_TRIGGERS]
    raise ValueError(f"unsupported dialect {dialect!r}")


def drop_trigger_ddl(dialect: str) -> list[str]:
    """DDL that removes the guards (used by downgrades)."""
    if dialect == "sqlite":
        return [f"DROP TRIGGER IF EXISTS {name}" for name, _ in SQLITE_TRIGGERS]
    if dialect == "postgresql":
        return [f"DROP TRIGGER IF EXISTS {name} ON {table}" for name, table, _ in PG_TRIGGERS] + [
            "DROP FUNCTION IF EXISTS eventstore_parts_compact_once()",
            "DROP FUNCTION IF EXISTS eventstore_reject_change()",
            "DROP FUNCTION IF EXISTS eventstore_events_guard()",
        ]
    raise ValueError(f"unsupported dialect {dialect!r}")
