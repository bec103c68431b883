"""SQLite's feed numbered by its readers; no ``parts`` row for a message's sole text part.

**The feed (SQLite).**
Since 0003 an ``AFTER UPDATE`` trigger on ``sessions`` numbered each append's range in
``feed`` as the head moved: a probe of the tenant's newest position, then a row in
``feed`` and one in its session index, two more B-tree pages written on every append
(about an eighth of a single-event append's time). A reader of the feed now numbers what was
appended since it last looked, in the order the rows of ``events`` were inserted (their
rowids: SQLite writers take turns, each holding the database lock until it commits, and
events are never deleted, so rowid order is commit order), and ``feed_cursor`` names the
last event numbered. Consecutive events of one session become one range.

The upgrade points the cursor at the newest event (the trigger numbered every event up
to now) and drops the trigger. The downgrade first numbers whatever was appended since
the feed was last read, one range per event, then puts the trigger back: no event is
left out of the feed either way. Postgres only gets the (unused) table.

**Parts (both backends).** From this revision on, a message whose one part is text (most
chat messages) is appended without a ``parts`` row: it would only repeat the event row
(index 0, type ``text``, no tool ids, the event's token count less the per-message
overhead). A prune that truncates such a part writes the row then, stamped. Nothing is
rewritten on upgrade: rows written before stay and are read as before. The downgrade
writes the missing rows, since revision 0009's code expects one for every part.

Frozen like every migration: the trigger DDL below is a literal copy of what 0003
installed.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_SQLITE_TRIGGER = """CREATE TRIGGER sessions_feed AFTER UPDATE OF head_seq ON sessions
WHEN NEW.head_seq > OLD.head_seq
BEGIN
    INSERT INTO feed (tenant, position_start, position_end, session_id, from_seq, to_seq)
    SELECT NEW.tenant, base + 1, base + NEW.head_seq - OLD.head_seq, NEW.id,
           OLD.head_seq + 1, NEW.head_seq
    FROM (SELECT coalesce(max(position_end), 0) AS base FROM feed WHERE tenant = NEW.tenant);
END"""

_POINT_AT_NEWEST = """INSERT INTO feed_cursor (id, session_id, seq)
SELECT 1, session_id, seq FROM events ORDER BY rowid DESC LIMIT 1"""

# Every event past the cursor (all of them without one), one range each, after its
# tenant's newest position, in rowid order.
_NUMBER_THE_REST = """INSERT INTO feed (tenant, position_start, position_end, session_id,
                  from_seq, to_seq)
SELECT tenant, base + n, base + n, session_id, seq, seq FROM (
    SELECT s.tenant AS tenant, e.session_id AS session_id, e.seq AS seq,
           row_number() OVER (PARTITION BY s.tenant ORDER BY e.rowid) AS n,
           (SELECT coalesce(max(f.position_end), 0) FROM feed f WHERE f.tenant = s.tenant)
               AS base
    FROM events e JOIN sessions s ON s.id = e.session_id
    WHERE e.rowid > coalesce((SELECT m.rowid FROM feed_cursor c JOIN events m
                              ON m.session_id = c.session_id AND m.seq = c.seq), 0)
)"""


def upgrade() -> None:
    op.create_table(
        "feed_cursor",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feed_cursor")),
    )
    if op.get_bind().dialect.name == "sqlite":
        op.execute(_POINT_AT_NEWEST)
        op.execute("DROP TRIGGER IF EXISTS sessions_feed")


def _restore_sole_text_rows() -> None:
    """Write the ``parts`` row of every message appended without one (a message whose one
    part is text), as revision 0009's code expects every part to have, a page at a time."""
    bind = op.get_bind()
    page = sa.text(
        "SELECT e.session_id, e.seq, e.payload, e.token_count FROM events e "
        "WHERE e.kind = 'message' AND (e.session_id > :sid OR (e.session_id = :sid "
        "AND e.seq > :seq)) AND NOT EXISTS (SELECT 1 FROM parts p "
        "WHERE p.session_id = e.session_id AND p.seq = e.seq) "
        "ORDER BY e.session_id, e.seq LIMIT 1000"
    )
    add = sa.text(
        "INSERT INTO parts (session_id, seq, idx, type, token_count) "
        "VALUES (:session_id, :seq, 0, 'text', :tokens)"
    )
    after = ("", 0)
    while True:
        rows = bind.execute(page, {"sid": after[0], "seq": after[1]}).all()
        if not rows:
            return
        missing = []
        for session_id, seq, payload, tokens in rows:
            message_parts = json.loads(payload).get("parts") or []
            if len(message_parts) == 1 and message_parts[0].get("type") == "text":
                # The message's count is its part's and the per-message overhead (4).
                missing.append({"session_id": session_id, "seq": seq, "tokens": tokens - 4})
        if missing:
            bind.execute(add, missing)
        after = (rows[-1][0], rows[-1][1])


def downgrade() -> None:
    _restore_sole_text_rows()
    if op.get_bind().dialect.name == "sqlite":
        op.execute(_NUMBER_THE_REST)
        op.execute(_SQLITE_TRIGGER)
    op.drop_table("feed_cursor")
