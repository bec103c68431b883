"""Initial schema: sessions, events, parts, fork compactions, append-only triggers.

A migration is frozen: it never imports live code from ``eventstore``, so changing
``eventstore/schema.py`` later cannot change what this revision does to a database. The
trigger and function DDL below is a literal copy of what ``eventstore.schema.trigger_ddl``
and ``drop_trigger_ddl`` produced when this revision was written; a change to the live
guards needs a new migration (tests/test_migrations.py shows the drift).

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _utc_datetime() -> sa.DateTime:
    """The column type of ``eventstore.schema.UTCDateTime`` as of this revision.

    The live type is a ``TypeDecorator`` over ``DateTime(timezone=True)``; its conversions
    run in Python and leave no trace in the database, so the DDL is that of its ``impl``:
    ``TIMESTAMP WITH TIME ZONE`` on Postgres, ``DATETIME`` on SQLite.
    """
    return sa.DateTime(timezone=True)


_SQLITE_TRIGGERS = [
    """CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
    """CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
    """CREATE TRIGGER parts_append_only_delete BEFORE DELETE ON parts
BEGIN SELECT RAISE(ABORT, 'parts are append-only'); END""",
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
    """CREATE TRIGGER fork_compactions_append_only_update BEFORE UPDATE ON fork_compactions
BEGIN SELECT RAISE(ABORT, 'fork_compactions are append-only'); END""",
    """CREATE TRIGGER fork_compactions_append_only_delete BEFORE DELETE ON fork_compactions
BEGIN SELECT RAISE(ABORT, 'fork_compactions are append-only'); END""",
]

_SQLITE_DROP_TRIGGERS = [
    "DROP TRIGGER IF EXISTS events_append_only_update",
    "DROP TRIGGER IF EXISTS events_append_only_delete",
    "DROP TRIGGER IF EXISTS parts_append_only_delete",
    "DROP TRIGGER IF EXISTS parts_compact_once",
    "DROP TRIGGER IF EXISTS fork_compactions_append_only_update",
    "DROP TRIGGER IF EXISTS fork_compactions_append_only_delete",
]

_PG_TRIGGERS = [
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
    """CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION eventstore_reject_change()""",
    """CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
FOR EACH STATEMENT EXECUTE FUNCTION eventstore_reject_change()""",
    """CREATE TRIGGER parts_append_only_delete BEFORE DELETE ON parts
FOR EACH ROW EXECUTE FUNCTION eventstore_reject_change()""",
    """CREATE TRIGGER parts_no_truncate BEFORE TRUNCATE ON parts
FOR EACH STATEMENT EXECUTE FUNCTION eventstore_reject_change()""",
    """CREATE TRIGGER parts_compact_once BEFORE UPDATE ON parts
FOR EACH ROW EXECUTE FUNCTION eventstore_parts_compact_once()""",
    """CREATE TRIGGER fork_compactions_append_only BEFORE UPDATE OR DELETE ON fork_compactions
FOR EACH ROW EXECUTE FUNCTION eventstore_reject_change()""",
]

_PG_DROP_TRIGGERS = [
    "DROP TRIGGER IF EXISTS events_append_only ON events",
    "DROP TRIGGER IF EXISTS events_no_truncate ON events",
    "DROP TRIGGER IF EXISTS parts_append_only_delete ON parts",
    "DROP TRIGGER IF EXISTS parts_no_truncate ON parts",
    "DROP TRIGGER IF EXISTS parts_compact_once ON parts",
    "DROP TRIGGER IF EXISTS fork_compactions_append_only ON fork_compactions",
    "DROP FUNCTION IF EXISTS eventstore_parts_compact_once()",
    "DROP FUNCTION IF EXISTS eventstore_reject_change()",
]


def _trigger_ddl(dialect: str) -> list[str]:
    """DDL that installs this revision's append-only guards for ``dialect``."""
    if dialect == "sqlite":
        return list(_SQLITE_TRIGGERS)
    if dialect == "postgresql":
        return list(_PG_TRIGGERS)
    raise ValueError(f"unsupported dialect {dialect!r}")


def _drop_trigger_ddl(dialect: str) -> list[str]:
    """DDL that removes this revision's guards (used by the downgrade)."""
    if dialect == "sqlite":
        return list(_SQLITE_DROP_TRIGGERS)
    if dialect == "postgresql":
        return list(_PG_DROP_TRIGGERS)
    raise ValueError(f"unsupported dialect {dialect!r}")


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("user_id", sa.String(255), nullable=True),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.Column("parent_id", sa.String(36), nullable=True),
        sa.Column("fork_seq", sa.Integer(), nullable=True),
        sa.Column("head_seq", sa.Integer(), nullable=False),
        sa.Column("head_hash", sa.String(64), nullable=True),
        sa.Column("created_at", _utc_datetime(), nullable=False),
        sa.Column("updated_at", _utc_datetime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["sessions.id"], name=op.f("fk_sessions_parent_id_sessions")
        ),
    )
    op.create_index(op.f("ix_sessions_tenant_created_at"), "sessions", ["tenant", "created_at"])
    op.create_index(
        op.f("ix_sessions_tenant_user_id_created_at"),
        "sessions",
        ["tenant", "user_id", "created_at"],
    )
    op.create_table(
        "events",
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("created_at", _utc_datetime(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("batch_size", sa.Integer(), nullable=True),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "seq", name=op.f("pk_events")),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_events_session_id_sessions")
        ),
        sa.UniqueConstraint("id", name=op.f("uq_events_id")),
        sa.UniqueConstraint(
            "session_id", "idempotency_key", name=op.f("uq_events_session_id_idempotency_key")
        ),
    )
    op.create_index(op.f("ix_events_session_id_kind_seq"), "events", ["session_id", "kind", "seq"])
    op.create_table(
        "parts",
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("tool_call_id", sa.String(255), nullable=True),
        sa.Column("tool_name", sa.String(255), nullable=True),
        sa.Column("state", sa.String(16), nullable=True),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("compacted_at", _utc_datetime(), nullable=True),
        sa.Column("compacted_seq", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("session_id", "seq", "idx", name=op.f("pk_parts")),
        sa.ForeignKeyConstraint(
            ["session_id", "seq"],
            ["events.session_id", "events.seq"],
            name=op.f("fk_parts_session_id_events"),
        ),
    )
    op.create_table(
        "fork_compactions",
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("compacted_seq", sa.Integer(), nullable=False),
        sa.Column("compacted_at", _utc_datetime(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "seq", "idx", name=op.f("pk_fork_compactions")),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_fork_compactions_session_id_sessions")
        ),
    )
    for statement in _trigger_ddl(op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    for statement in _drop_trigger_ddl(op.get_bind().dialect.name):
        op.execute(statement)
    op.drop_table("fork_compactions")
    op.drop_table("parts")
    op.drop_index(op.f("ix_events_session_id_kind_seq"), table_name="events")
    op.drop_table("events")
    op.drop_index(op.f("ix_sessions_tenant_user_id_created_at"), table_name="sessions")
    op.drop_index(op.f("ix_sessions_tenant_created_at"), table_name="sessions")
    op.drop_table("sessions")
