"""A purge erases in short transactions, recording what it has yet to do; Postgres drops
``purge_marks``.

Until this revision a purge rewrote every event it erased in one transaction; on SQLite,
which has one writer at a time, every other writer of the database waited for all of it
(seconds for a long session). Now the purge appends its record first, together with a row
of the new table ``purge_pending`` (the session, the record's seq, the tenant and the
attachment digests the purged events named), and then erases the events in short
transactions; the row goes in the last one. A process killed in between leaves the row:
the next purge, or the next open of the store, completes the erasure, and ``verify``
reports it meanwhile.

``purge_marks`` (0011) is read by SQLite's append-only trigger only: Postgres reads the
transaction-local setting ``eventstore.purging`` instead, so the table goes there.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "purge_pending",
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("refs", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "seq", name=op.f("pk_purge_pending")),
    )
    if op.get_bind().dialect.name != "sqlite":
        op.drop_table("purge_marks")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.create_table(
            "purge_marks",
            sa.Column("session_id", sa.String(length=36), nullable=False),
            sa.PrimaryKeyConstraint("session_id", name=op.f("pk_purge_marks")),
        )
    op.drop_table("purge_pending")
