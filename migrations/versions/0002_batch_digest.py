"""Idempotency compares content: a digest of the batch next to the idempotency key.

``events.batch_digest`` holds the SHA-256 of the batch an idempotency key was first used
for, on that batch's first row (the one carrying the key). Rows written before this
revision keep NULL there; a retry against them is compared by batch size only.

Adding and dropping a nullable column is a plain ``ALTER TABLE`` on both backends (SQLite
has ``DROP COLUMN`` since 3.35), so batch mode never recreates ``events``: its append-only
triggers and the ``parts`` foreign keys stay as they are. Frozen like every migration: no
imports from ``eventstore``.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events", recreate="never") as batch:
        batch.add_column(sa.Column("batch_digest", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("events", recreate="never") as batch:
        batch.drop_column("batch_digest")
