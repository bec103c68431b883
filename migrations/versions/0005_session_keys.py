"""Sessions gain an external key and a tombstone.

``sessions.key`` is the caller's own name for a session (any length: a framework's session
id, a ticket number); ``key_digest`` (SHA-256 over the user and the key) is what the unique
index ``(tenant, key_digest)`` holds, so the key is unique per tenant and user whatever its
length. ``deleted_at`` marks a session deleted: reads, views and appends refuse it, audits
still verify it, and deleting clears ``key_digest`` so the key can name a new session.
Columns and an index only: plain ``ALTER TABLE``/``CREATE INDEX`` on both backends, so
SQLite keeps the ``sessions`` table (and its feed trigger) as it is.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions", recreate="never") as batch:
        batch.add_column(sa.Column("key", sa.Text(), nullable=True))
        batch.add_column(sa.Column("key_digest", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        op.f("ix_sessions_tenant_key_digest"), "sessions", ["tenant", "key_digest"], unique=True
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_sessions_tenant_key_digest"), table_name="sessions")
    with op.batch_alter_table("sessions", recreate="never") as batch:
        batch.drop_column("deleted_at")
        batch.drop_column("key_digest")
        batch.drop_column("key")
