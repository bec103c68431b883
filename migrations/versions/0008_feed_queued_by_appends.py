"""Postgres: appends queue their feed ranges themselves; the trigger on ``sessions`` goes.

Since 0003 an ``AFTER UPDATE`` trigger on ``sessions`` (a PL/pgSQL function) queued each
append's seq range in ``feed_pending``. Calling it cost about as much server time per
single-event append as the rest of the statement's extra work; the statements that move a
head now insert the range in the same statement instead (``WITH h AS (UPDATE sessions
... RETURNING ...) INSERT INTO feed_pending ... FROM h``), so a range is still queued in
the transaction that moves the head, and only then.

Ranges queued by the trigger before this revision stay in ``feed_pending`` and are
numbered by the next reader, as before. SQLite keeps its trigger: there it numbers the
range at once, inside the writer's lock, for less than a separate statement would cost.

Frozen like every migration: the DDL below is a literal copy of what 0003 installed.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_DROP_PG = [
    "DROP TRIGGER IF EXISTS sessions_feed ON sessions",
    "DROP FUNCTION IF EXISTS eventstore_feed_pending()",
]

_RESTORE_PG = [
    """CREATE OR REPLACE FUNCTION eventstore_feed_pending() RETURNS trigger AS $$
BEGIN
    INSERT INTO feed_pending (session_id, from_seq, to_seq, tenant, queued_at)
    VALUES (NEW.id, OLD.head_seq + 1, NEW.head_seq, NEW.tenant, clock_timestamp());
    RETURN NULL;
END;
$$ LANGUAGE plpgsql""",
    """CREATE TRIGGER sessions_feed AFTER UPDATE OF head_seq ON sessions
FOR EACH ROW WHEN (NEW.head_seq > OLD.head_seq) EXECUTE FUNCTION eventstore_feed_pending()""",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in _DROP_PG:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in _RESTORE_PG:
            op.execute(statement)
