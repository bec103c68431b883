"""A session's lineage: which session's rows hold which seq range.

A session created by ``fork`` shares its parent's events up to the fork point without
copying them. Its *lineage* is a list of :class:`Segment` objects saying which session's
rows hold which seq range; every read goes through it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection

from ..codec import (
    storable_text_error,
)
from ..errors import (
    NotFoundError,
)
from ..schema import sessions


def not_found(tenant: str, session_id: str) -> NotFoundError:
    return NotFoundError(f"no session {session_id!r} for tenant {tenant!r}")


def check_lookup(tenant: str, session_id: str) -> None:
    # An id that could never have been stored is simply not there; asking the database
    # would fail differently per backend (Postgres rejects NUL, drivers reject surrogates).
    if not isinstance(session_id, str) or storable_text_error(session_id) or len(session_id) > 36:
        raise not_found(tenant, session_id)


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of seqs ``lo..hi`` of a session's lineage stored under ``owner``."""

    owner: str
    lo: int
    hi: int | None  # None: open-ended (the session's own segment)


def lineage(conn: Connection, tenant: str, session_id: str) -> list[Segment]:
    """Where each seq range of a session's log is stored, oldest first."""
    return lineage_and_head(conn, tenant, session_id)[0]


#: Set while ``verify`` runs: an audit reads deleted sessions too (their logs stay whole).
AUDITING: ContextVar[bool] = ContextVar("eventstore_auditing", default=False)


@contextmanager
def auditing() -> Iterator[None]:
    """Let every read in this context see deleted sessions (used by ``verify``)."""
    token = AUDITING.set(True)
    try:
        yield
    finally:
        AUDITING.reset(token)


_LINEAGE_ROW = select(
    sessions.c.id,
    sessions.c.parent_id,
    sessions.c.fork_seq,
    sessions.c.head_seq,
    sessions.c.deleted_at,
).where(sessions.c.id == bindparam("sid"), sessions.c.tenant == bindparam("tenant"))


def lineage_and_head(
    conn: Connection, tenant: str, session_id: str, *, include_deleted: bool = False
) -> tuple[list[Segment], int]:
    """The session's lineage segments and its head seq, from the same session row (a
    deleted session is not found, unless ``include_deleted`` for an audit; ancestors of a
    live fork are read whether deleted or not)."""
    check_lookup(tenant, session_id)
    chain: list[tuple[str, str | None, int | None]] = []
    row = conn.execute(_LINEAGE_ROW, {"sid": session_id, "tenant": tenant}).first()
    if row is None or (row.deleted_at is not None and not (include_deleted or AUDITING.get())):
        raise NotFoundError(f"no session {session_id!r} for tenant {tenant!r}")
    chain.append((row.id, row.parent_id, row.fork_seq))
    while chain[-1][1] is not None:
        parent = conn.execute(
            select(sessions.c.id, sessions.c.parent_id, sessions.c.fork_seq).where(
                sessions.c.id == chain[-1][1]
            )
        ).one()
        chain.append((parent.id, parent.parent_id, parent.fork_seq))
    # Walk from the session up to the root. Each one owns the seqs after its own fork
    # point, capped by the lowest fork point of its descendants on this chain.
    segments: list[Segment] = []
    cap: int | None = None
    for sid, _parent, fork_seq in chain:
        lo = (fork_seq or 0) + 1
        if cap is None or cap >= lo:
            segments.append(Segment(sid, lo, cap))
        if fork_seq is not None:
            cap = fork_seq if cap is None else min(cap, fork_seq)
    segments.reverse()
    return segments, row.head_seq


def clip(segments: Sequence[Segment], lo: int, hi: int) -> list[Segment]:
    """The segments restricted to seqs ``lo..hi``."""
    out = []
    for seg in segments:
        s_lo = max(seg.lo, lo)
        s_hi = hi if seg.hi is None else min(seg.hi, hi)
        if s_lo <= s_hi:
            out.append(Segment(seg.owner, s_lo, s_hi))
    return out


def owner_of(segments: Sequence[Segment], seq: int) -> str | None:
    for seg in segments:
        if seg.lo <= seq and (seg.hi is None or seq <= seg.hi):
            return seg.owner
    return None
