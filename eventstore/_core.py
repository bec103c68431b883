"""The SQL behind the store, written once against a synchronous SQLAlchemy connection.

:class:`~eventstore.store.EventStore` runs these functions on a pooled connection;
:class:`~eventstore.store.AsyncEventStore` runs the very same functions through
``AsyncConnection.run_sync``. Nothing here commits: callers own the transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, func, insert, select, update
from sqlalchemy.engine import Connection

from .codec import (
    canonical_json,
    chain_hash,
    column_text,
    decode_event,
    encode_event,
    new_id,
    storable_text_error,
)
from .errors import ConflictError, IdempotencyError, InvalidEventError, NotFoundError
from .events import Condensation, Event, Message, Prune, ToolResultPart, utcnow
from .records import AppendResult, Session, StoredEvent
from .schema import events, fork_compactions, parts, sessions
from .tokens import MESSAGE_OVERHEAD, TokenCounter, count_part

READ_PAGE = 256


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of seqs ``lo..hi`` of a session's lineage stored under ``owner``."""

    owner: str
    lo: int
    hi: int | None  # None: open-ended (the session's own segment)


@dataclass(slots=True)
class Encoded:
    """An event prepared for insertion outside the write lock."""

    event: Event
    kind: str
    payload: str
    size: int
    token_count: int
    part_rows: list[dict[str, Any]]


def encode(evt: Event, counter: TokenCounter) -> Encoded:
    payload = encode_event(evt)
    size = len(payload.encode("utf-8"))
    part_rows: list[dict[str, Any]] = []
    if isinstance(evt, Message):
        total = MESSAGE_OVERHEAD
        for idx, part in enumerate(evt.parts):
            n = count_part(counter, part)
            total += n
            part_rows.append(
                {
                    "idx": idx,
                    "type": part.type,
                    # Index copies of payload data: escaped and capped so that any id
                    # the payload holds verbatim fits the column on both backends.
                    "tool_call_id": column_text(
                        getattr(part, "tool_call_id", None)
                        or (part.id if part.type == "tool_call" else None),
                        255,
                    ),
                    "tool_name": column_text(
                        getattr(part, "name", None)
                        if part.type in ("tool_call", "tool_result")
                        else None,
                        255,
                    ),
                    "state": part.state if isinstance(part, ToolResultPart) else None,
                    "token_count": n,
                }
            )
    elif isinstance(evt, Condensation):
        total = evt.summary_tokens or (counter.count(evt.summary) if evt.summary else 0)
        if evt.summary and not evt.summary_tokens:
            evt = evt.model_copy(update={"summary_tokens": total})
            payload = encode_event(evt)
            size = len(payload.encode("utf-8"))
    else:
        total = 0
    return Encoded(evt, evt.kind, payload, size, total, part_rows)


# --------------------------------------------------------------------------- sessions


def _session_from_row(row: Any) -> Session:
    return Session(
        id=row.id,
        tenant=row.tenant,
        user_id=row.user_id,
        title=row.title,
        metadata=json.loads(row.metadata),
        parent_id=row.parent_id,
        fork_seq=row.fork_seq,
        head_seq=row.head_seq,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def create_session(
    conn: Connection,
    tenant: str,
    *,
    session_id: str | None,
    user_id: str | None,
    title: str | None,
    metadata: dict[str, Any] | None,
    created_at: datetime | None = None,
    parent_id: str | None = None,
    fork_seq: int | None = None,
    head_hash: str | None = None,
) -> Session:
    sid = session_id or new_id()
    if not sid or len(sid) > 36:
        raise InvalidEventError(f"session_id must be 1-36 characters, got {sid!r}")
    check_text("session_id", sid)
    check_text("user_id", user_id, 255)
    check_text("title", title)
    if session_id is not None:
        exists = conn.execute(select(sessions.c.id).where(sessions.c.id == sid)).first()
        if exists:
            raise InvalidEventError(f"session_id {sid!r} already exists")
    now = created_at or utcnow()
    try:
        meta = canonical_json(metadata or {})
    except (TypeError, ValueError) as exc:
        raise InvalidEventError(f"metadata: not JSON-serializable ({exc})") from None
    row = {
        "id": sid,
        "tenant": tenant,
        "user_id": user_id,
        "title": title,
        "metadata": meta,
        "parent_id": parent_id,
        "fork_seq": fork_seq,
        "head_seq": fork_seq or 0,
        "head_hash": head_hash,
        "created_at": now,
        "updated_at": now,
    }
    conn.execute(insert(sessions), row)
    return Session(
        id=sid,
        tenant=tenant,
        user_id=user_id,
        title=title,
        metadata=json.loads(meta),
        parent_id=parent_id,
        fork_seq=fork_seq,
        head_seq=fork_seq or 0,
        created_at=now,
        updated_at=now,
    )


def fork_session(
    conn: Connection,
    tenant: str,
    session_id: str,
    at_seq: int,
    *,
    title: str | None = None,
    session_id_new: str | None = None,
    user_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Session:
    parent = get_session(conn, tenant, session_id)
    if not 0 <= at_seq <= parent.head_seq:
        raise InvalidEventError(
            f"at_seq: {at_seq} is outside 0..{parent.head_seq} for session {session_id}"
        )
    head_hash = event_hash(conn, lineage(conn, tenant, session_id), at_seq) if at_seq else None
    return create_session(
        conn,
        tenant,
        session_id=session_id_new,
        user_id=user_id if user_id is not None else parent.user_id,
        title=title if title is not None else parent.title,
        metadata=metadata if metadata is not None else parent.metadata,
        parent_id=session_id,
        fork_seq=at_seq,
        head_hash=head_hash,
    )


def check_text(field: str, value: str | None, limit: int | None = None) -> None:
    """Reject a key or label no backend column can hold exactly (the same way everywhere)."""
    if value is None:
        return
    problem = storable_text_error(value)
    if problem is None and limit is not None and len(value) > limit:
        problem = f"is {len(value)} characters, over the limit of {limit}"
    if problem is not None:
        raise InvalidEventError(f"{field}: {problem}")


def _not_found(tenant: str, session_id: str) -> NotFoundError:
    return NotFoundError(f"no session {session_id!r} for tenant {tenant!r}")


def _check_lookup(tenant: str, session_id: str) -> None:
    # An id that could never have been stored is simply not there; asking the database
    # would fail differently per backend (Postgres rejects NUL, drivers reject surrogates).
    if not isinstance(session_id, str) or storable_text_error(session_id) or len(session_id) > 36:
        raise _not_found(tenant, session_id)


def get_session(conn: Connection, tenant: str, session_id: str) -> Session:
    _check_lookup(tenant, session_id)
    row = conn.execute(
        select(sessions).where(sessions.c.id == session_id, sessions.c.tenant == tenant)
    ).first()
    if row is None:
        raise NotFoundError(f"no session {session_id!r} for tenant {tenant!r}")
    return _session_from_row(row)


def list_sessions(
    conn: Connection,
    tenant: str,
    *,
    user_id: str | None,
    limit: int | None,
    offset: int,
    parent_id: str | None = None,
) -> list[Session]:
    # Postgres rejects negative values where SQLite silently treats them as "no limit".
    if offset < 0:
        raise InvalidEventError(f"offset: must be 0 or more, got {offset}")
    if limit is not None and limit < 0:
        raise InvalidEventError(f"limit: must be 0 (all) or more, got {limit}")
    if any(v is not None and storable_text_error(v) for v in (user_id, parent_id)):
        return []  # no stored session can match (and Postgres would reject the query)
    q = select(sessions).where(sessions.c.tenant == tenant)
    if user_id is not None:
        q = q.where(sessions.c.user_id == user_id)
    if parent_id is not None:
        q = q.where(sessions.c.parent_id == parent_id)
    q = q.order_by(sessions.c.created_at.desc(), sessions.c.id.desc()).offset(offset)
    if limit:
        q = q.limit(limit)
    return [_session_from_row(r) for r in conn.execute(q)]


def lineage(conn: Connection, tenant: str, session_id: str) -> list[Segment]:
    """Where each seq range of a session's log is stored, oldest first."""
    return lineage_and_head(conn, tenant, session_id)[0]


def lineage_and_head(conn: Connection, tenant: str, session_id: str) -> tuple[list[Segment], int]:
    """The session's lineage segments and its head seq, from the same session row."""
    _check_lookup(tenant, session_id)
    chain: list[tuple[str, str | None, int | None]] = []
    row = conn.execute(
        select(sessions.c.id, sessions.c.parent_id, sessions.c.fork_seq, sessions.c.head_seq).where(
            sessions.c.id == session_id, sessions.c.tenant == tenant
        )
    ).first()
    if row is None:
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


# --------------------------------------------------------------------------- append


# The append path's fixed statements, built once: constructing a statement costs about as
# much as executing it, and a single-event append runs these on every call.
_LOCK_HEAD = select(sessions.c.head_seq, sessions.c.head_hash).where(
    sessions.c.id == bindparam("sid"), sessions.c.tenant == bindparam("tenant")
)
_LOCK_HEAD_PG = _LOCK_HEAD.with_for_update()
_SET_HEAD = (
    update(sessions)
    .where(sessions.c.id == bindparam("sid"))
    .values(
        head_seq=bindparam("new_seq"),
        head_hash=bindparam("new_hash"),
        updated_at=bindparam("now", type_=sessions.c.updated_at.type),
    )
)
_INSERT_EVENTS = insert(events)
_INSERT_PARTS = insert(parts)


def lock_head(conn: Connection, tenant: str, session_id: str) -> tuple[int, str | None]:
    _check_lookup(tenant, session_id)
    # Row lock on Postgres: concurrent appenders to one session queue here instead of
    # racing to the UNIQUE(session_id, seq) check. SQLite writers already hold the
    # database lock (BEGIN IMMEDIATE), so no row lock is needed there.
    q = _LOCK_HEAD_PG if conn.dialect.name == "postgresql" else _LOCK_HEAD
    row = conn.execute(q, {"sid": session_id, "tenant": tenant}).first()
    if row is None:
        raise NotFoundError(f"no session {session_id!r} for tenant {tenant!r}")
    return row.head_seq, row.head_hash


def append(
    conn: Connection,
    tenant: str,
    session_id: str,
    encoded: list[Encoded],
    *,
    expected_seq: int | None,
    idempotency_key: str | None,
) -> AppendResult:
    head, head_hash = lock_head(conn, tenant, session_id)
    check_text("idempotency_key", idempotency_key, 255)
    if idempotency_key is not None:
        prior = conn.execute(
            select(events.c.seq, events.c.batch_size).where(
                events.c.session_id == session_id, events.c.idempotency_key == idempotency_key
            )
        ).first()
        if prior is not None:
            if prior.batch_size != len(encoded):
                raise IdempotencyError(
                    f"idempotency key {idempotency_key!r} was used for an append of "
                    f"{prior.batch_size} events; this one has {len(encoded)}"
                )
            return AppendResult(
                seqs=list(range(prior.seq, prior.seq + prior.batch_size)),
                head_seq=head,
                replayed=True,
            )
    if expected_seq is not None and expected_seq != head:
        raise ConflictError(session_id, expected_seq, head)
    if not encoded:
        return AppendResult(seqs=[], head_seq=head)

    segments: list[Segment] | None = None
    now = utcnow()
    event_rows: list[dict[str, Any]] = []
    part_rows: list[dict[str, Any]] = []
    prunes: list[tuple[int, Prune, datetime]] = []
    prev = head_hash
    seq = head
    for i, enc in enumerate(encoded):
        seq += 1
        evt = enc.event
        event_id = evt.id or new_id()
        created = evt.created_at or now
        digest = chain_hash(prev, seq, event_id, enc.kind, created, enc.payload)
        prev = digest
        event_rows.append(
            {
                "session_id": session_id,
                "seq": seq,
                "id": event_id,
                "kind": enc.kind,
                "created_at": created,
                "payload": enc.payload,
                "token_count": enc.token_count,
                "size": enc.size,
                "idempotency_key": idempotency_key if i == 0 else None,
                "batch_size": len(encoded) if i == 0 and idempotency_key is not None else None,
                "hash": digest,
            }
        )
        for row in enc.part_rows:
            part_rows.append({"session_id": session_id, "seq": seq, **row})
        if isinstance(evt, Prune):
            prunes.append((seq, evt, created))
        elif isinstance(evt, Condensation):
            _check_condensation(evt, seq)
    # One row goes through the single-row path; lists take the executemany path.
    conn.execute(_INSERT_EVENTS, event_rows[0] if len(event_rows) == 1 else event_rows)
    if part_rows:
        conn.execute(_INSERT_PARTS, part_rows[0] if len(part_rows) == 1 else part_rows)
    if prunes:
        segments = lineage(conn, tenant, session_id)
        for prune_seq, prune, created in prunes:
            _apply_prune(conn, session_id, segments, prune_seq, prune, created)
    conn.execute(_SET_HEAD, {"sid": session_id, "new_seq": seq, "new_hash": prev, "now": now})
    return AppendResult(seqs=list(range(head + 1, seq + 1)), head_seq=seq)


def _check_condensation(evt: Condensation, seq: int) -> None:
    if evt.forgotten_from < 1 or evt.forgotten_to < evt.forgotten_from - 1:
        raise InvalidEventError(
            f"condensation.forgotten_from/forgotten_to: bad range "
            f"{evt.forgotten_from}..{evt.forgotten_to}"
        )
    if evt.forgotten_to >= seq:
        raise InvalidEventError(
            f"condensation.forgotten_to: {evt.forgotten_to} is not before the condensation "
            f"itself (seq {seq})"
        )
    if any(p >= evt.forgotten_from and p <= evt.forgotten_to for p in evt.pinned):
        raise InvalidEventError("condensation.pinned: a pinned seq lies in the forgotten range")


def _apply_prune(
    conn: Connection,
    session_id: str,
    segments: list[Segment],
    prune_seq: int,
    prune: Prune,
    created: datetime,
) -> None:
    for ref in prune.targets:
        if ref.seq >= prune_seq:
            raise InvalidEventError(
                f"prune.targets: seq {ref.seq} is not before the prune itself (seq {prune_seq})"
            )
        owner = owner_of(segments, ref.seq)
        row = (
            None
            if owner is None
            else conn.execute(
                select(parts.c.type, parts.c.compacted_seq).where(
                    parts.c.session_id == owner, parts.c.seq == ref.seq, parts.c.idx == ref.index
                )
            ).first()
        )
        if row is None or row.type != "tool_result":
            raise InvalidEventError(
                f"prune.targets: seq {ref.seq} part {ref.index} is not a stored tool result"
            )
        if owner == session_id:
            conn.execute(
                update(parts)
                .where(
                    parts.c.session_id == owner,
                    parts.c.seq == ref.seq,
                    parts.c.idx == ref.index,
                    parts.c.compacted_seq.is_(None),
                )
                .values(compacted_at=created, compacted_seq=prune_seq)
            )
            continue
        # An inherited part: the owner's own stamp counts only if it predates the fork.
        seg_hi = next(s.hi for s in segments if s.owner == owner)
        if row.compacted_seq is not None and seg_hi is not None and row.compacted_seq <= seg_hi:
            continue
        done = conn.execute(
            select(fork_compactions.c.seq).where(
                fork_compactions.c.session_id == session_id,
                fork_compactions.c.seq == ref.seq,
                fork_compactions.c.idx == ref.index,
            )
        ).first()
        if done is None:
            conn.execute(
                insert(fork_compactions),
                {
                    "session_id": session_id,
                    "seq": ref.seq,
                    "idx": ref.index,
                    "compacted_seq": prune_seq,
                    "compacted_at": created,
                },
            )


# --------------------------------------------------------------------------- read


def row_to_stored(row: Any, owner: str) -> StoredEvent:
    return StoredEvent(
        session_id=owner,
        seq=row.seq,
        hash=row.hash,
        token_count=row.token_count,
        event=decode_event(row.kind, row.payload, row.id, row.created_at),
    )


_EVENT_COLS = (
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
    kind_list = list(kinds) if kinds is not None else None
    for seg in clip(segments, after + 1, to_seq):
        q = select(*_EVENT_COLS).where(
            events.c.session_id == seg.owner, events.c.seq >= seg.lo, events.c.seq <= seg.hi
        )
        if kind_list is not None:
            q = q.where(events.c.kind.in_(kind_list))
        q = q.order_by(events.c.seq).limit(limit - len(out))
        out.extend(row_to_stored(r, seg.owner) for r in conn.execute(q))
        if len(out) >= limit:
            break
    return out


def read_hash_page(
    conn: Connection, segments: Sequence[Segment], after: int, to_seq: int, limit: int = 2048
) -> list[Any]:
    """Raw rows for verification: the stored columns, nothing decoded."""
    out: list[Any] = []
    for seg in clip(segments, after + 1, to_seq):
        q = (
            select(*_EVENT_COLS)
            .where(events.c.session_id == seg.owner, events.c.seq >= seg.lo, events.c.seq <= seg.hi)
            .order_by(events.c.seq)
            .limit(limit - len(out))
        )
        out.extend(conn.execute(q))
        if len(out) >= limit:
            break
    return out


def event_hash(conn: Connection, segments: Sequence[Segment], seq: int) -> str | None:
    owner = owner_of(segments, seq)
    if owner is None:
        return None
    return conn.execute(
        select(events.c.hash).where(events.c.session_id == owner, events.c.seq == seq)
    ).scalar()


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
    by_kind = dict(
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
