"""Full-text search over session history.

``search_progress`` remembers, per tenant, the feed position up to which events are
indexed (the index follows the feed; see ``eventstore._search``). The index itself is
backend-native and kept out of the SQLAlchemy metadata: an FTS5 table ``search_fts`` on
SQLite, and on Postgres a table ``search_docs`` with a ``tsvector`` column under a GIN
index. Both hold normalized text (words separated by single spaces), never payloads.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "search_progress",
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_search_progress")),
    )
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE search_fts USING fts5("
            "body, tenant UNINDEXED, session_id UNINDEXED, seq UNINDEXED, "
            "tokenize = 'unicode61 remove_diacritics 0')"
        )
        return
    op.execute(
        "CREATE TABLE search_docs ("
        " session_id VARCHAR(36) NOT NULL,"
        " seq INTEGER NOT NULL,"
        " tenant VARCHAR(255) NOT NULL,"
        " tsv TSVECTOR NOT NULL,"
        " CONSTRAINT pk_search_docs PRIMARY KEY (session_id, seq))"
    )
    # No index on tenant: the GIN match is always the selective part, and a tenant index
    # tempts the planner into a BitmapAnd that reads every document of the tenant.
    op.execute("CREATE INDEX ix_search_docs_tsv ON search_docs USING gin (tsv)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS search_fts")
    else:
        op.execute("DROP TABLE IF EXISTS search_docs")
    op.drop_table("search_progress")
