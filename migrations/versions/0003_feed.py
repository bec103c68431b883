"""The tenant feed: a commit-ordered position for every event, for live tails.

``feed`` maps each append's seq range to a dense range of positions in one sequence per
tenant; ``feed_pending`` holds, on Postgres, ranges committed but not numbered yet (a
reader of the feed numbers them in commit order). A trigger on ``sessions`` fills one or
the other whenever a head moves forward. Existing events are numbered once here, session
by session in creation order (each session's own events, not a fork's inherited prefix).

Frozen like every migration: the trigger DDL below is a literal copy of what
``eventstore.schema.feed_trigger_ddl`` produced when this revision was written.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_SQLITE = [
    """CREATE TRIGGER sessions_feed AFTER UPDATE OF head_seq ON sessions
WHEN NEW.head_seq > OLD.head_seq
BEGIN
    INSERT INTO feed (tenant, position_start, position_end, session_id, from_seq, to_seq)
    SELECT NEW.tenant, base + 1, base + NEW.head_seq - OLD.head_seq, NEW.id,
           OLD.head_seq + 1, NEW.head_seq
    FROM (SELECT coalesce(max(position_end), 0) AS base FROM feed WHERE tenant = NEW.tenant);
END""",
]

_PG = [
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

_DROP_SQLITE = ["DROP TRIGGER IF EXISTS sessions_feed"]
_DROP_PG = [
    "DROP TRIGGER IF EXISTS sessions_feed ON sessions",
    "DROP FUNCTION IF EXISTS eventstore_feed_pending()",
]


def _feed_trigger_ddl(dialect: str) -> list[str]:
    return _SQLITE if dialect == "sqlite" else _PG


def _drop_feed_trigger_ddl(dialect: str) -> list[str]:
    return _DROP_SQLITE if dialect == "sqlite" else _DROP_PG


def upgrade() -> None:
    op.create_table(
        "feed",
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("position_start", sa.BigInteger(), nullable=False),
        sa.Column("position_end", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("from_seq", sa.Integer(), nullable=False),
        sa.Column("to_seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "position_end", name=op.f("pk_feed")),
        sqlite_with_rowid=False,
    )
    op.create_index(
        op.f("ix_feed_session_id_position_end"),
        "feed",
        ["session_id", "position_end"],
        unique=False,
    )
    op.create_table(
        "feed_pending",
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("from_seq", sa.Integer(), nullable=False),
        sa.Column("to_seq", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "from_seq", name=op.f("pk_feed_pending")),
    )
    op.create_index(op.f("ix_feed_pending_tenant"), "feed_pending", ["tenant"], unique=False)

    # Number what is already stored: per tenant, each session's own events in creation order.
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT tenant, id, coalesce(fork_seq, 0) AS lo, head_seq FROM sessions"
            " WHERE head_seq > coalesce(fork_seq, 0) ORDER BY tenant, created_at, id"
        )
    ).all()
    base: dict[str, int] = {}
    values = []
    for tenant, sid, lo, head in rows:
        start = base.get(tenant, 0) + 1
        end = start + head - lo - 1
        base[tenant] = end
        values.append(
            {
                "tenant": tenant,
                "ps": start,
                "pe": end,
                "sid": sid,
                "lo": lo + 1,
                "hi": head,
            }
        )
    if values:
        bind.execute(
            sa.text(
                "INSERT INTO feed (tenant, position_start, position_end, session_id,"
                " from_seq, to_seq) VALUES (:tenant, :ps, :pe, :sid, :lo, :hi)"
            ),
            values,
        )
    for statement in _feed_trigger_ddl(bind.dialect.name):
        op.execute(statement)


def downgrade() -> None:
    for statement in _drop_feed_trigger_ddl(op.get_bind().dialect.name):
        op.execute(statement)
    op.drop_index(op.f("ix_feed_pending_tenant"), table_name="feed_pending")
    op.drop_table("feed_pending")
    op.drop_index(op.f("ix_feed_session_id_position_end"), table_name="feed")
    op.drop_table("feed")
