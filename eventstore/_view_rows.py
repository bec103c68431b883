"""The statements that read a view's rows (part of the statement layer, see :mod:`._sql`).

:func:`view_rows` gathers what :func:`eventstore.views.assemble` needs for the view at a
seq: the latest condensation (one probe of the ``(session_id, kind, seq)`` index per
lineage segment), its pinned events, one range read of the tail's messages and their part
rows, and the control events a condensation policy answers (usually one empty probe).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.engine import Connection

from . import _blobs
from ._sql import (
    _EVENT_COLS,
    BREAKER_PREFIX,
    Segment,
    clip,
    latest_in,
    lineage_and_head,
    owner_of,
    row_to_stored,
)
from .errors import InvalidEventError
from .events import Condensation
from .records import StoredEvent
from .schema import events, fork_compactions, parts
from .views import PartState, ViewRows

__all__ = ["view_rows"]


def view_rows(
    conn: Connection, tenant: str, session_id: str, as_of: int | None, *, expand: bool = False
) -> ViewRows:
    """Everything :func:`eventstore.views.assemble` needs to build the view at ``as_of``.

    One indexed probe per lineage segment for the latest condensation at or before
    ``as_of`` (the ``(session_id, kind, seq)`` index), a primary-key read of its pinned
    events, one range read of the tail's message events and their part rows, and a probe
    for condensation requests in the tail. Nothing before the forgotten range is read, so
    the cost follows the tail, not the session.
    """
    segments, head = lineage_and_head(conn, tenant, session_id)
    seq = head if as_of is None else as_of
    if not 0 <= seq <= head:
        raise InvalidEventError(f"as_of: {as_of} is outside 0..{head} for session {session_id}")
    cond = latest_in(conn, segments, "condensation", seq)
    rows = 0 if cond is None else 1

    pinned: list[StoredEvent] = []
    if cond is not None and isinstance(cond.event, Condensation):
        tail_lo = cond.event.forgotten_to + 1
        pinned = _read_seqs(conn, segments, sorted(set(cond.event.pinned)), seq)
        ranges = _ranges([e.seq for e in pinned]) + [(tail_lo, seq)]
    else:
        tail_lo = 1
        ranges = [(1, seq)]
    tail = _read_kind(conn, segments, tail_lo, seq, "message")
    if expand:  # put attachments' bytes back (one query, only when the view names blobs)
        both = _blobs.expand(conn, tenant, pinned + tail)
        pinned, tail = both[: len(pinned)], both[len(pinned) :]
    part_states, n = _read_parts(conn, segments, ranges, seq)
    control = _read_control(conn, segments, cond.seq + 1 if cond is not None else 1, seq)
    rows += len(pinned) + len(tail) + n + len(control)
    return ViewRows(
        session_id=session_id,
        seq=seq,
        condensation=cond,
        pinned=pinned,
        tail=tail,
        parts=part_states,
        control=control,
        rows_read=rows,
    )


def _read_seqs(
    conn: Connection, segments: Sequence[Segment], seqs: list[int], as_of: int
) -> list[StoredEvent]:
    out = []
    for s in seqs:
        owner = owner_of(segments, s) if 1 <= s <= as_of else None
        if owner is None:
            continue
        row = conn.execute(
            select(*_EVENT_COLS).where(events.c.session_id == owner, events.c.seq == s)
        ).first()
        if row is not None and row.kind == "message":
            out.append(row_to_stored(row, owner))
    return out


def _read_kind(
    conn: Connection, segments: Sequence[Segment], lo: int, hi: int, kind: str
) -> list[StoredEvent]:
    """Every event of ``kind`` in ``lo..hi`` across the lineage, in order (an index range
    scan on ``(session_id, kind, seq)``)."""
    out: list[StoredEvent] = []
    for seg in clip(segments, lo, hi):
        q = (
            select(*_EVENT_COLS)
            .where(
                events.c.session_id == seg.owner,
                events.c.kind == kind,
                events.c.seq >= seg.lo,
                events.c.seq <= seg.hi,
            )
            .order_by(events.c.seq)
        )
        out.extend(row_to_stored(r, seg.owner) for r in conn.execute(q))
    return out


def _read_control(
    conn: Connection, segments: Sequence[Segment], lo: int, hi: int
) -> list[StoredEvent]:
    """Condensation requests in ``lo..hi`` and, when there is one, the custom events after
    the first (where a condensation policy records its answers), the newest breaker event
    and the newest ``llm_call``."""
    requests = _read_kind(conn, segments, lo, hi, "condensation_request")
    customs = _read_kind(conn, segments, requests[0].seq + 1, hi, "custom") if requests else []
    # And the newest breaker event (a policy's state): a backward (session_id, kind, seq) index
    # scan of the tail's custom events, stopping at the first match (usually one row or none).
    found = _latest_breaker(conn, segments, lo, hi)
    customs = [c for c in customs if found is None or c.seq != found.seq]
    # And the newest model call (its reported usage calibrates the policy's decisions):
    # one backward probe of the (session_id, kind, seq) index.
    call = latest_in(conn, segments, "llm_call", hi)
    calls = [call] if call is not None and call.seq >= lo else []
    return sorted(requests + customs + ([found] if found else []) + calls, key=lambda e: e.seq)


def _latest_breaker(
    conn: Connection, segments: Sequence[Segment], lo: int, hi: int
) -> StoredEvent | None:
    like = f'%"name":"{BREAKER_PREFIX}%'
    for seg in reversed(clip(segments, lo, hi)):
        top = seg.hi if seg.hi is not None else hi
        while top >= seg.lo:
            row = conn.execute(
                select(*_EVENT_COLS)
                .where(events.c.session_id == seg.owner, events.c.kind == "custom")
                .where(events.c.seq.between(seg.lo, top), events.c.payload.like(like))
                .order_by(events.c.seq.desc())
                .limit(1)
            ).first()
            if row is None:
                break
            found = row_to_stored(row, seg.owner)
            if getattr(found.event, "name", "").startswith(BREAKER_PREFIX):
                return found
            top = row.seq - 1
    return None


def _ranges(seqs: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs of sorted ``seqs`` as (lo, hi) pairs."""
    out: list[tuple[int, int]] = []
    for s in sorted(set(seqs)):
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def _read_parts(
    conn: Connection,
    segments: Sequence[Segment],
    ranges: list[tuple[int, int]],
    as_of: int,
) -> tuple[dict[int, dict[int, PartState]], int]:
    """Token counts and effective compaction (the prune's seq, or None) per part."""
    out: dict[int, dict[int, PartState]] = {}
    rows = 0
    caps = {seg.owner: seg.hi for seg in segments}
    for lo, hi in ranges:
        if lo > hi:
            continue
        for seg in clip(segments, lo, hi):
            # A stamp counts when its prune is visible at as_of and, for an inherited
            # segment, was made by its owner before the fork point that caps it.
            cap = caps[seg.owner]
            limit = as_of if cap is None else min(as_of, cap)
            q = select(parts.c.seq, parts.c.idx, parts.c.token_count, parts.c.compacted_seq).where(
                parts.c.session_id == seg.owner, parts.c.seq >= seg.lo, parts.c.seq <= seg.hi
            )
            for r in conn.execute(q):
                rows += 1
                stamp = r.compacted_seq
                if stamp is not None and stamp > limit:
                    stamp = None
                out.setdefault(r.seq, {})[r.idx] = PartState(r.token_count, stamp)
        if len(segments) > 1:
            # Compactions a fork applied to parts it inherited.
            for seg in segments[1:]:
                cap = caps[seg.owner]
                limit = as_of if cap is None else min(as_of, cap)
                q = select(
                    fork_compactions.c.seq, fork_compactions.c.idx, fork_compactions.c.compacted_seq
                ).where(
                    fork_compactions.c.session_id == seg.owner,
                    fork_compactions.c.seq >= lo,
                    fork_compactions.c.seq <= hi,
                    fork_compactions.c.compacted_seq <= limit,
                )
                for fr in conn.execute(q):
                    rows += 1
                    cur = out.get(fr.seq, {}).get(fr.idx)
                    if cur is not None and cur.compacted_seq is None:
                        out[fr.seq][fr.idx] = PartState(cur.tokens, fr.compacted_seq)
    return out, rows
