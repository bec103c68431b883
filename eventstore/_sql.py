"""The statement layer: every SQL statement the store runs, against a sync Connection.

Sessions (create, get, list, fork lineage), the append path (head lock, inserts, prunes),
reads (event pages, verification pages, single events) and stats; the rows a view is
assembled from are read by its sibling :mod:`eventstore._view_rows`. Nothing here
commits: the caller (:mod:`eventstore.store`) owns the transaction, and nothing here
decides what a view looks like (that is :mod:`eventstore.views`, which never touches the
database).

Forks: a session created by ``fork`` shares its parent's events up to the fork point
without copying them. Its *lineage* is a list of :class:`Segment` objects saying which
session's rows hold which seq range; every read goes through it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import and_, bindparam, func, insert, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from . import _blobs
from ._bulk import BULK_MIN, BatchRows, bulk_insert
from ._checks import check_json_value
from .codec import (
    Encoded,
    batch_digest,
    canonical_json,
    check_text,
    decode_event,
    implied_part_tokens,
    new_id,
    sole_text,
    storable_text_error,
)
from .errors import (
    ConflictError,
    IdempotencyMismatchError,
    InvalidEventError,
    NotFoundError,
    SessionExistsError,
)
from .events import Prune, utcnow
from .records import AppendResult, Session, StoredEvent
from .schema import events, fork_compactions, kind_is, parts, session_keys, sessions

READ_PAGE = 256
BREAKER_PREFIX = "condenser.circuit"  # custom events that carry a policy's breaker state


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of seqs ``lo..hi`` of a session's lineage stored under ``owner``."""

    owner: str
    lo: int
    hi: int | None  # None: open-ended (the session's own segment)


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
        key=row.key,
        deleted_at=row.deleted_at,
    )


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def key_digest(user_id: str | None, key: str) -> str:
    """What the unique index holds for a session key: SHA-256 over (user, key)."""
    return hashlib.sha256(canonical_json([user_id, key]).encode("utf-8")).hexdigest()


def _taken(session_id: str) -> SessionExistsError:
    # One message whichever tenant holds the id: it must not tell another tenant's
    # sessions apart from a fresh id.
    return SessionExistsError(
        f"session_id {session_id!r} is taken; omit session_id for a new one, or name "
        "sessions with key=... (unique per tenant and user)"
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
    key: str | None = None,
) -> Session:
    sid = session_id or new_id()
    if session_id is not None and not (
        isinstance(session_id, str) and _UUID.fullmatch(session_id.lower())
    ):
        raise InvalidEventError(
            f"session_id: {session_id!r} is not a UUID; session ids are global, so a chosen "
            "one must be a UUID (e.g. str(uuid.uuid4())). For your own names use key=..., "
            "which is unique per tenant and user"
        )
    check_text("user_id", user_id, 255)
    check_text("title", title)
    digest = None
    if key is not None:
        if not isinstance(key, str) or not key:
            raise InvalidEventError(f"key: must be a non-empty string, got {key!r}")
        check_text("key", key)
        digest = key_digest(user_id, key)
        clash = conn.execute(
            select(session_keys.c.session_id).where(
                session_keys.c.tenant == tenant, session_keys.c.key_digest == digest
            )
        ).first()
        if clash:
            raise SessionExistsError(
                f"key {key!r} already names session {clash.session_id} for this tenant and user; "
                "get it with get_session_by_key, or delete it first"
            )
    if session_id is not None:
        exists = conn.execute(select(sessions.c.id).where(sessions.c.id == sid)).first()
        if exists:
            raise _taken(sid)
    now = created_at or utcnow()
    # Keys may hold lone surrogates here: canonical_json escapes them losslessly.
    check_json_value("metadata", metadata or {}, keys=False)
    try:
        meta = canonical_json(metadata or {})
    except InvalidEventError as exc:
        raise InvalidEventError(f"metadata: {exc}") from None
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
        "key": key,
        "key_digest": digest,
    }
    try:
        with conn.begin_nested():
            if digest is not None:
                # The name's own table is the unique guard (see schema.session_keys).
                conn.execute(
                    insert(session_keys),
                    {"tenant": tenant, "key_digest": digest, "session_id": sid},
                )
            conn.execute(insert(sessions), row)
    except IntegrityError:
        # A concurrent create took the id or the key between the check and the insert.
        if key is not None:
            raise SessionExistsError(f"key {key!r} was just taken by a concurrent create") from None
        raise _taken(sid) from None
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
        key=key,
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


def _not_found(tenant: str, session_id: str) -> NotFoundError:
    return NotFoundError(f"no session {session_id!r} for tenant {tenant!r}")


def _check_lookup(tenant: str, session_id: str) -> None:
    # An id that could never have been stored is simply not there; asking the database
    # would fail differently per backend (Postgres rejects NUL, drivers reject surrogates).
    if not isinstance(session_id, str) or storable_text_error(session_id) or len(session_id) > 36:
        raise _not_found(tenant, session_id)


def get_session(
    conn: Connection, tenant: str, session_id: str, *, include_deleted: bool = False
) -> Session:
    _check_lookup(tenant, session_id)
    row = conn.execute(
        select(sessions).where(sessions.c.id == session_id, sessions.c.tenant == tenant)
    ).first()
    if row is None or (row.deleted_at is not None and not (include_deleted or _AUDITING.get())):
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
    include_deleted: bool = False,
) -> list[Session]:
    # Postgres rejects negative values where SQLite silently treats them as "no limit".
    if offset < 0:
        raise InvalidEventError(f"offset: must be 0 or more, got {offset}")
    if limit is not None and limit < 0:
        raise InvalidEventError(f"limit: must be 0 (all) or more, got {limit}")
    if any(v is not None and storable_text_error(v) for v in (user_id, parent_id)):
        return []  # no stored session can match (and Postgres would reject the query)
    q = select(sessions).where(sessions.c.tenant == tenant)
    if not include_deleted:
        q = q.where(sessions.c.deleted_at.is_(None))
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


#: Set while ``verify`` runs: an audit reads deleted sessions too (their logs stay whole).
_AUDITING: ContextVar[bool] = ContextVar("eventstore_auditing", default=False)


@contextmanager
def auditing() -> Iterator[None]:
    """Let every read in this context see deleted sessions (used by ``verify``)."""
    token = _AUDITING.set(True)
    try:
        yield
    finally:
        _AUDITING.reset(token)


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
    _check_lookup(tenant, session_id)
    chain: list[tuple[str, str | None, int | None]] = []
    row = conn.execute(_LINEAGE_ROW, {"sid": session_id, "tenant": tenant}).first()
    if row is None or (row.deleted_at is not None and not (include_deleted or _AUDITING.get())):
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
    sessions.c.id == bindparam("sid"),
    sessions.c.tenant == bindparam("tenant"),
    sessions.c.deleted_at.is_(None),
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
# Postgres: the same head move, queueing the appended range for the tenant feed in the
# same statement (see eventstore._feed; SQLite's readers number new event rows instead).
_SET_HEAD_PG = text(
    "WITH h AS (UPDATE sessions SET head_seq = :new_seq, head_hash = :new_hash, "
    "updated_at = :now WHERE id = :sid RETURNING id, tenant) "
    "INSERT INTO feed_pending (session_id, from_seq, to_seq, tenant, queued_at) "
    "SELECT id, :from_seq, :new_seq, tenant, clock_timestamp() FROM h"
).bindparams(bindparam("now", type_=sessions.c.updated_at.type))
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
    encoded: Sequence[Encoded],
    *,
    expected_seq: int | None,
    idempotency_key: str | None,
) -> AppendResult:
    head, head_hash = lock_head(conn, tenant, session_id)
    check_text("idempotency_key", idempotency_key, 255)
    batch_hash = batch_digest(encoded) if idempotency_key is not None else None
    if idempotency_key is not None:
        prior = conn.execute(
            select(events.c.seq, events.c.batch_size, events.c.batch_digest).where(
                events.c.session_id == session_id, events.c.idempotency_key == idempotency_key
            )
        ).first()
        if prior is not None:
            if prior.batch_size != len(encoded) or (
                prior.batch_digest is not None and prior.batch_digest != batch_hash
            ):
                raise IdempotencyMismatchError(
                    f"idempotency key {idempotency_key!r} was already used for a different "
                    f"append (seqs {prior.seq}..{prior.seq + prior.batch_size - 1}: other "
                    f"events, content or ids than these {len(encoded)}); use a new key for "
                    "a new append, or resend exactly the same events to retry"
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
    _blobs.check_named(conn, tenant, session_id, encoded)  # before the batch's own rows

    segments: list[Segment] | None = None
    now = utcnow()
    rows = BatchRows(session_id, head, head_hash, encoded, idempotency_key, batch_hash, now)
    if len(encoded) > BULK_MIN:
        newest = bulk_insert(conn, rows)  # the driver's own bulk path
    else:
        event_rows: list[dict[str, Any]] = []
        part_rows: list[dict[str, Any]] = []
        for row, parts_of in rows:
            event_rows.append(row)
            part_rows += parts_of
        # One row goes through the single-row path; lists take the executemany path.
        conn.execute(_INSERT_EVENTS, event_rows[0] if len(event_rows) == 1 else event_rows)
        if part_rows:
            conn.execute(_INSERT_PARTS, part_rows[0] if len(part_rows) == 1 else part_rows)
        newest = event_rows[-1]["created_at"]
    prunes, prev, seq = rows.prunes, rows.head_hash, rows.seq
    attached = {d: b for enc in encoded for d, b in enc.blobs.items()}
    if attached:
        _blobs.save(conn, tenant, attached)
    if prunes:
        segments = lineage(conn, tenant, session_id)
        for prune_seq, prune, created in prunes:
            _apply_prune(conn, session_id, segments, prune_seq, prune, created)
    # updated_at follows the newest event's time (the caller's, when it gave one).
    move_head(conn, session_id, head, seq, prev, newest)
    return AppendResult(seqs=list(range(head + 1, seq + 1)), head_seq=seq, head_hash=prev)


def move_head(
    conn: Connection, session_id: str, head: int, new_seq: int, new_hash: str | None, now: datetime
) -> None:
    """Move the session's head from ``head`` to ``new_seq`` and, on Postgres, queue the
    events in between for the tenant feed (every statement that moves a head goes through
    here, or does what it does: the append fast path). SQLite's feed readers find new
    event rows themselves."""
    params = {"sid": session_id, "new_seq": new_seq, "new_hash": new_hash, "now": now}
    if conn.dialect.name == "postgresql":
        conn.execute(_SET_HEAD_PG, {**params, "from_seq": head + 1})
    else:
        conn.execute(_SET_HEAD, params)


Rows = list[dict[str, Any]]


class _ImpliedRow(NamedTuple):
    type: str
    compacted_seq: int | None


def _sole_text_tokens(conn: Connection, owner: str, seq: int) -> int | None:
    """The part's token count when event ``seq`` of ``owner`` is a message appended
    without its sole text part's row (see :func:`~eventstore.codec.sole_text`)."""
    row = conn.execute(
        select(*_EVENT_COLS).where(
            events.c.session_id == owner, events.c.seq == seq, kind_is("message")
        )
    ).first()
    if row is None:
        return None
    stored = row_to_stored(row, owner)
    return implied_part_tokens(stored.token_count) if sole_text(stored.event) else None


def _apply_prune(
    conn: Connection,
    session_id: str,
    segments: list[Segment],
    prune_seq: int,
    prune: Prune,
    created: datetime,
) -> None:
    for ref in prune.targets:
        owner = owner_of(segments, ref.seq)
        row: Any = (
            None
            if owner is None
            else conn.execute(
                select(parts.c.type, parts.c.compacted_seq).where(
                    parts.c.session_id == owner, parts.c.seq == ref.seq, parts.c.idx == ref.index
                )
            ).first()
        )
        implied = None
        if row is None and owner is not None and ref.index == 0:
            implied = _sole_text_tokens(conn, owner, ref.seq)
            if implied is not None:
                row = _ImpliedRow("text", None)
        # A placeholder replaces tool results only; a truncation (keep_chars) may also cut
        # a message's text (a pinned head too large for the budget).
        allowed = ("tool_result",) if prune.keep_chars is None else ("tool_result", "text")
        if row is None or row.type not in allowed:
            what = "tool result" if prune.keep_chars is None else "tool result or text"
            raise InvalidEventError(
                f"prune.targets: seq {ref.seq} part {ref.index} is not a stored {what}"
            )
        if owner == session_id and implied is not None:
            # The part had no row (see codec.sole_text): it gets one now, stamped.
            conn.execute(
                insert(parts),
                {"session_id": owner, "seq": ref.seq, "idx": 0, "type": "text",
                 "token_count": implied, "compacted_at": created, "compacted_seq": prune_seq},
            )  # fmt: skip
            continue
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
    kind_list = sorted(set(kinds)) if kinds is not None else None
    for seg in clip(segments, after + 1, to_seq):
        base = select(*_EVENT_COLS).where(
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
            select(*_EVENT_COLS)
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


_VERIFY_COLS = (*_EVENT_COLS, events.c.size, events.c.session_id)


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
        select(*_EVENT_COLS).where(events.c.session_id == owner, events.c.seq == seq)
    ).first()
    return None if row is None else row_to_stored(row, owner)


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
