"""Purges pass the append-only guard for their own session's payloads only, without DDL.

Until this revision a purge switched the guard on ``events`` off and on again inside its
transaction (``ALTER TABLE ... DISABLE TRIGGER`` on Postgres, dropping and re-creating the
trigger on SQLite). DDL takes the table's strongest lock: every other tenant's appends
waited for the whole purge, and past their lock timeout failed. Now the guard itself lets
a purge through, for the rows of the session it names only, and only a change of the
payload (and its size): on Postgres the session is named by a transaction-local setting,
``eventstore.purging`` (``SET LOCAL``), read by the new trigger function
``eventstore_events_guard``; on SQLite by a row in the new table ``purge_marks``, which
the purge inserts and deletes inside its transaction, so no other connection sees it.

Frozen like every migration: the DDL below is a literal copy of what
``eventstore.schema.trigger_ddl`` and ``drop_trigger_ddl`` produce at this revision, and
the downgrade restores 0001's guard.

Revision ID: 0011_security
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_SQLITE_TRIGGERS = [
    """CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
WHEN NOT EXISTS (SELECT 1 FROM purge_marks WHERE session_id = OLD.session_id)
    OR NEW.session_id IS NOT OLD.session_id OR NEW.seq IS NOT OLD.seq
    OR NEW.id IS NOT OLD.id OR NEW.kind IS NOT OLD.kind OR NEW.hash IS NOT OLD.hash
    OR NEW.created_at IS NOT OLD.created_at
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
    """CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION eventstore_events_guard()""",
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
    "DROP FUNCTION IF EXISTS eventstore_events_guard()",
]

# What changes on upgrade: the one guard on events (SQLite: its update trigger).
_SQLITE_NEW_GUARD = _SQLITE_TRIGGERS[0]
_SQLITE_OLD_GUARD = """CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END"""
_PG_NEW_FUNCTION = _PG_TRIGGERS[0]
_PG_NEW_GUARD = """CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION eventstore_events_guard()"""
_PG_OLD_GUARD = """CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION eventstore_reject_change()"""


def _trigger_ddl(dialect: str) -> list[str]:
    """DDL that installs this revision's append-only guards for ``dialect``."""
    if dialect == "sqlite":
        return list(_SQLITE_TRIGGERS)
    if dialect == "postgresql":
        return list(_PG_TRIGGERS)
    raise ValueError(f"unsupported dialect {dialect!r}")


def _drop_trigger_ddl(dialect: str) -> list[str]:
    """DDL that removes this revision's guards."""
    if dialect == "sqlite":
        return list(_SQLITE_DROP_TRIGGERS)
    if dialect == "postgresql":
        return list(_PG_DROP_TRIGGERS)
    raise ValueError(f"unsupported dialect {dialect!r}")


def upgrade() -> None:
    op.create_table(
        "purge_marks",
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_purge_marks")),
    )
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        op.execute(_SQLITE_NEW_GUARD)
        return
    op.execute(_PG_NEW_FUNCTION)
    op.execute("DROP TRIGGER IF EXISTS events_append_only ON events")
    op.execute(_PG_NEW_GUARD)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        op.execute(_SQLITE_OLD_GUARD)
    else:
        op.execute("DROP TRIGGER IF EXISTS events_append_only ON events")
        op.execute(_PG_OLD_GUARD)
        op.execute("DROP FUNCTION IF EXISTS eventstore_events_guard()")
    op.drop_table("purge_marks")
