"""Event reads: pages of a lineage, single events, the newest of a kind, verification pages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from ..codec import (
    decode_event,
)
from ..records import StoredEvent
from ..schema import events, fork_compactions, kind_is, parts, sessions
from .lineage import Segment, clip, lineage_and_head, owner_of

READ_PAGE = 256
BREAKER_PREFIX = "condenser.circuit"  # custom events that carry a policy's breaker state


# --------------------------------------------------------------------------- read


def row_to_stored(row: Any, owner: str) -> StoredEvent:
    return StoredEvent(
        session_id=owner,
        seq=row.seq,
        hash=row.hash,
        token_count=row.token_count,
        event=decode_event(row.kind, row.payload, row.id, row.created_at),
    )


READ_COLUMNS = (
    events.c.seq,
    events.c.id,
    events.c.kind,
    events.c.created_at,
    events.c.payload,
    events.c.token_count,
    events.c.hash,
)


def read_page(
    conn: Connection,
    segments: Sequence[Segment],
    after: int,
    to_seq: int,
    kinds: Iterable[str] | None,
    limit: int = READ_PAGE,
) -> list[StoredEvent]:
    """Up to ``limit`` events with ``after < seq <= to_seq`` across the lineage."""
    out: list[StoredEvent] = []
    kind_list = sorted(set(kinds)) if kinds is not None else None
    for seg in clip(segments, after + 1, to_seq):
        base = select(*READ_COLUMNS).where(
            events.c.session_id == seg.owner, events.c.seq >= seg.lo, events.c.seq <= seg.hi
        )
        want = limit - len(out)
        if kind_list is None:
            rows = list(conn.execute(base.order_by(events.c.seq).limit(want)))
        else:
            # One range scan of the (session_id, kind, seq) index per kind, merged by seq:
            # with ``kind IN (...)`` and ORDER BY seq a planner may walk the whole session
            # in seq order instead, which makes a read of rare kinds cost O(session).
            rows = []
            for kind in kind_list:
                q = base.where(kind_is(kind)).order_by(events.c.seq).limit(want)
                rows.extend(conn.execute(q))
            rows.sort(key=lambda r: r.seq)
            del rows[want:]
        out.extend(row_to_stored(r, seg.owner) for r in rows)
        if len(out) >= limit:
            break
    return out


def latest_of_kind(
    conn: Connection, tenant: str, session_id: str, kind: str, as_of: int | None
) -> StoredEvent | None:
    """The newest event of ``kind`` at or before ``as_of`` (default: the head)."""
    segments, head = lineage_and_head(conn, tenant, session_id)
    return latest_in(conn, segments, kind, head if as_of is None else min(as_of, head))


def latest_in(
    conn: Connection, segments: Sequence[Segment], kind: str, last: int
) -> StoredEvent | None:
    """The newest event of ``kind`` with seq ``<= last`` in the lineage: one probe of the
    ``(session_id, kind, seq)`` index per segment, newest segment first."""
    for seg in reversed(clip(segments, 1, last)):
        row = conn.execute(
            select(*READ_COLUMNS)
            .where(
                events.c.session_id == seg.owner,
                kind_is(kind),
                events.c.seq >= seg.lo,
                events.c.seq <= seg.hi,
            )
            .order_by(events.c.seq.desc())
            .limit(1)
        ).first()
        if row is not None:
            return row_to_stored(row, seg.owner)
    return None


def verify_head(
    conn: Connection, tenant: str, session_id: str
) -> tuple[list[Segment], int, str | None]:
    segments, head = lineage_and_head(conn, tenant, session_id, include_deleted=True)
    found = select(sessions.c.head_hash).where(sessions.c.id == session_id)
    return segments, head, conn.execute(found).scalar()


_VERIFY_COLS = (*READ_COLUMNS, events.c.size, events.c.session_id)


def read_verify_page(
    conn: Connection, segments: Sequence[Segment], after: int, to_seq: int, limit: int = 1024
) -> tuple[list[Any], list[Any]]:
    """Raw event rows ``after < seq <= to_seq`` and their ``parts`` rows, undecoded."""
    rows: list[Any] = []
    part_rows: list[Any] = []
    for seg in clip(segments, after + 1, to_seq):
        q = (
            select(*_VERIFY_COLS)
            .where(events.c.session_id == seg.owner, events.c.seq >= seg.lo, events.c.seq <= seg.hi)
            .order_by(events.c.seq)
            .limit(limit - len(rows))
        )
        got = list(conn.execute(q))
        if got:
            rows.extend(got)
            in_page = (parts.c.seq >= got[0].seq, parts.c.seq <= got[-1].seq)
            q = select(parts).where(parts.c.session_id == seg.owner, *in_page)
            part_rows.extend(conn.execute(q.order_by(parts.c.seq, parts.c.idx)))
        if len(rows) >= limit:
            break
    return rows, part_rows


def fork_compaction_rows(conn: Connection, segments: Sequence[Segment]) -> list[Any]:
    """Compactions the forks on a lineage applied to parts they inherited."""
    owners = [seg.owner for seg in segments[1:]]
    if not owners:
        return []
    return list(
        conn.execute(select(fork_compactions).where(fork_compactions.c.session_id.in_(owners)))
    )


def event_hash(conn: Connection, segments: Sequence[Segment], seq: int) -> str | None:
    owner = owner_of(segments, seq)
    if owner is None:
        return None
    return conn.execute(
        select(events.c.hash).where(events.c.session_id == owner, events.c.seq == seq)
    ).scalar()


def read_event(conn: Connection, tenant: str, session_id: str, seq: int) -> StoredEvent | None:
    """The event at ``seq`` of a session's lineage (``None`` past the head)."""
    segments, head = lineage_and_head(conn, tenant, session_id)
    owner = owner_of(segments, seq) if 1 <= seq <= head else None
    if owner is None:
        return None
    row = conn.execute(
        select(*READ_COLUMNS).where(events.c.session_id == owner, events.c.seq == seq)
    ).first()
    return None if row is None else row_to_stored(row, owner)
