"""Every key includes the session: the schema can be spread over machines by session.

Sharding by session (Citus, or Postgres hash partitions) needs each primary and unique key
of a session's tables to contain ``session_id``, and no foreign key to cross sessions:

* ``events``: ``UNIQUE (id)`` becomes ``UNIQUE (session_id, id)``; a plain index on ``id``
  keeps a lookup by event id to one probe.
* ``sessions``: the fork's ``parent_id -> sessions.id`` foreign key goes (it points at
  another session), and the unique ``(tenant, key_digest)`` index moves to a table of its
  own, ``session_keys``, keyed by the name rather than by the session: a caller's name is
  unique per tenant and user wherever the session lives. It is written when a session is
  created with a key and removed when that session is deleted, never on the append path.

The data is copied as it is (payloads and hashes byte for byte), so every chain still
verifies. On Postgres these are in-place ``ALTER``s; SQLite cannot drop a constraint, so
there the four session tables are rebuilt with the documented create-copy-drop-rename
procedure, their indexes and guards re-created from the database's own DDL.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# Children after parents: the order rows are copied in and tables renamed back.
_REBUILT = ("sessions", "events", "parts", "fork_compactions")

_PARENT_FK = (
    "CONSTRAINT fk_sessions_parent_id_sessions FOREIGN KEY(parent_id) REFERENCES sessions (id)"  # noqa: E501
)
_UQ_ID = "CONSTRAINT uq_events_id UNIQUE (id)"
_UQ_SESSION_ID = "CONSTRAINT uq_events_session_id_id UNIQUE (session_id, id)"


def _drop_clause(sql: str, clause: str) -> str:
    out, n = re.subn(r",\s*" + re.escape(clause), "", sql)
    if n != 1:
        raise RuntimeError(f"unexpected table DDL, cannot find {clause!r} in {sql!r}")
    return out


def _add_clause(sql: str, clause: str) -> str:
    head, _, tail = sql.rpartition(")")
    return f"{head.rstrip()}, \n\t{clause}\n){tail}"


def _rebuild_sqlite(edits: dict[str, list[tuple[str, str | None]]], skip_indexes: set[str]) -> None:
    """Rebuild the session tables with ``edits`` applied to their DDL: per table, clauses
    to drop (``(clause, None)``) or add (``("", clause)``)."""
    conn = op.get_bind()
    rows = conn.exec_driver_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE tbl_name IN "
        f"({', '.join(repr(t) for t in _REBUILT)}) AND sql IS NOT NULL"
    ).all()
    tables = {r.name: r.sql for r in rows if r.type == "table"}
    extras = [r.sql for r in rows if r.type in ("index", "trigger") and r.name not in skip_indexes]
    for name in _REBUILT:
        # A table SQLite has renamed before has its name (and references) quoted.
        sql = re.sub(rf'"({"|".join(_REBUILT)})"', r"\1", tables[name])
        for drop, add in edits.get(name, []):
            sql = _drop_clause(sql, drop) if add is None else _add_clause(sql, add)
        sql = re.sub(rf"^CREATE TABLE {name} ", f"CREATE TABLE _new_{name} ", sql)
        for other in _REBUILT:
            sql = sql.replace(f"REFERENCES {other} (", f"REFERENCES _new_{other} (")
        conn.exec_driver_sql(sql)
        conn.exec_driver_sql(f"INSERT INTO _new_{name} SELECT * FROM {name}")
    for name in reversed(_REBUILT):
        conn.exec_driver_sql(f"DROP TABLE {name}")
    for name in _REBUILT:
        conn.exec_driver_sql(f"ALTER TABLE _new_{name} RENAME TO {name}")
    for sql in extras:
        conn.exec_driver_sql(sql)


def _create_session_keys() -> None:
    op.create_table(
        "session_keys",
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("key_digest", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "key_digest", name=op.f("pk_session_keys")),
    )
    op.execute(
        "INSERT INTO session_keys (tenant, key_digest, session_id) "
        "SELECT tenant, key_digest, id FROM sessions WHERE key_digest IS NOT NULL"
    )


def upgrade() -> None:
    _create_session_keys()
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(
            {
                "sessions": [(_PARENT_FK, None)],
                "events": [(_UQ_ID, None), ("", _UQ_SESSION_ID)],
            },
            skip_indexes={"ix_sessions_tenant_key_digest"},
        )
    else:
        op.drop_constraint("fk_sessions_parent_id_sessions", "sessions", type_="foreignkey")
        op.drop_index("ix_sessions_tenant_key_digest", table_name="sessions")
        op.drop_constraint("uq_events_id", "events", type_="unique")
        op.create_unique_constraint("uq_events_session_id_id", "events", ["session_id", "id"])
    op.create_index("ix_events_id", "events", ["id"])


def downgrade() -> None:
    op.drop_index("ix_events_id", table_name="events")
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(
            {
                "sessions": [("", _PARENT_FK)],
                "events": [(_UQ_SESSION_ID, None), ("", _UQ_ID)],
            },
            skip_indexes=set(),
        )
    else:
        op.drop_constraint("uq_events_session_id_id", "events", type_="unique")
        op.create_unique_constraint("uq_events_id", "events", ["id"])
        op.create_foreign_key(
            "fk_sessions_parent_id_sessions", "sessions", "sessions", ["parent_id"], ["id"]
        )
    op.create_index(
        "ix_sessions_tenant_key_digest", "sessions", ["tenant", "key_digest"], unique=True
    )
    op.drop_table("session_keys")
