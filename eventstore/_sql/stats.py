"""Totals for a tenant, and which event ids are taken."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.engine import Connection

from ..schema import events, sessions

# --------------------------------------------------------------------------- stats and ids


def taken_event_ids(conn: Connection, ids: Sequence[str]) -> list[str]:
    """Which of ``ids`` already name a stored event anywhere (the database enforces ids
    unique per session; importers keep them unique across sessions too)."""
    found: list[str] = []
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        found.extend(conn.execute(select(events.c.id).where(events.c.id.in_(chunk))).scalars())
    return found


def stats(conn: Connection, tenant: str) -> dict[str, Any]:
    """Counts for the ``stats`` command."""
    sess = conn.execute(
        select(func.count()).select_from(sessions).where(sessions.c.tenant == tenant)
    ).scalar_one()
    joined = events.join(sessions, and_(events.c.session_id == sessions.c.id))
    row = conn.execute(
        select(
            func.count(),
            func.coalesce(func.sum(events.c.size), 0),
            func.coalesce(func.sum(events.c.token_count), 0),
        )
        .select_from(joined)
        .where(sessions.c.tenant == tenant)
    ).one()
    by_kind: dict[str, int] = dict(
        conn.execute(
            select(events.c.kind, func.count())
            .select_from(joined)
            .where(sessions.c.tenant == tenant)
            .group_by(events.c.kind)
        ).all()
    )
    return {
        "sessions": sess,
        "events": row[0],
        "bytes": int(row[1]),
        "tokens": int(row[2]),
        "by_kind": by_kind,
    }
