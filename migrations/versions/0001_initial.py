"""Initial schema: sessions, events, parts, fork compactions, append-only triggers.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from eventstore.schema import UTCDateTime, drop_trigger_ddl, trigger_ddl

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


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
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
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
        sa.Column("created_at", UTCDateTime(), nullable=False),
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
        sa.Column("compacted_at", UTCDateTime(), nullable=True),
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
        sa.Column("compacted_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "seq", "idx", name=op.f("pk_fork_compactions")),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_fork_compactions_session_id_sessions")
        ),
    )
    for statement in trigger_ddl(op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    for statement in drop_trigger_ddl(op.get_bind().dialect.name):
        op.execute(statement)
    op.drop_table("fork_compactions")
    op.drop_table("parts")
    op.drop_index(op.f("ix_events_session_id_kind_seq"), table_name="events")
    op.drop_table("events")
    op.drop_index(op.f("ix_sessions_tenant_user_id_created_at"), table_name="sessions")
    op.drop_index(op.f("ix_sessions_tenant_created_at"), table_name="sessions")
    op.drop_table("sessions")
