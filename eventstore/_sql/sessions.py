"""Session rows: create, fork, get, list."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .._checks import check_json_value
from ..codec import (
    canonical_json,
    check_text,
    new_id,
    storable_text_error,
)
from ..errors import (
    InvalidEventError,
    NotFoundError,
    SessionExistsError,
)
from ..events import utcnow
from ..records import Session
from ..schema import session_keys, sessions
from .lineage import AUDITING, check_lookup, lineage
from .pages import event_hash

# --------------------------------------------------------------------------- sessions


def session_from_row(row: Any) -> Session:
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


def get_session(
    conn: Connection, tenant: str, session_id: str, *, include_deleted: bool = False
) -> Session:
    check_lookup(tenant, session_id)
    row = conn.execute(
        select(sessions).where(sessions.c.id == session_id, sessions.c.tenant == tenant)
    ).first()
    if row is None or (row.deleted_at is not None and not (include_deleted or AUDITING.get())):
        raise NotFoundError(f"no session {session_id!r} for tenant {tenant!r}")
    return session_from_row(row)


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
    return [session_from_row(r) for r in conn.execute(q)]
