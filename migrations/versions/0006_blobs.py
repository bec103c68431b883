"""Blobs: large attachments stored once per tenant, by content hash.

``blobs`` holds the bytes of attachments over the store's threshold, keyed by
``(tenant, digest)`` where ``digest`` is ``sha256:<hex>`` of the bytes: the same image sent
in three sessions is one row. Event payloads name the digest, so the hash chain covers it
and ``verify`` re-hashes the bytes.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("digest", sa.String(length=71), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "digest", name=op.f("pk_blobs")),
    )


def downgrade() -> None:
    op.drop_table("blobs")
