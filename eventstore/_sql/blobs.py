"""Statements for the blob table: attachments stored once per tenant by content hash.

:func:`~eventstore.codec.encode` moves the bytes of a large attachment out of the event's
payload (which keeps ``FilePart.blob = "sha256:<hex>"``); :func:`save` writes the bytes
that the tenant does not hold yet; :func:`expand` puts them back into events read from the
log, one query per page of events and only when a page names a blob.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from sqlalchemy import select, text
from sqlalchemy.engine import Connection

from ..codec import Encoded
from ..codec import blob_refs as refs
from ..codec import with_blob_data as expand_event
from ..errors import InvalidEventError
from ..events import utcnow
from ..records import StoredEvent
from ..schema import blobs

__all__ = ["save", "load", "expand", "check", "check_named"]

_CHUNK = 200


def save(conn: Connection, tenant: str, data: dict[str, bytes]) -> None:
    """Store the blobs the tenant does not hold yet (bytes already stored are not resent)."""
    have = set(_present(conn, tenant, list(data)))
    now = utcnow()
    rows = [
        {"tenant": tenant, "digest": d, "size": len(b), "data": b, "created_at": now}
        for d, b in data.items()
        if d not in have
    ]
    if rows:
        conn.execute(blobs.insert(), rows)


def _present(conn: Connection, tenant: str, digests: Sequence[str]) -> list[str]:
    out: list[str] = []
    for i in range(0, len(digests), _CHUNK):
        q = select(blobs.c.digest).where(
            blobs.c.tenant == tenant, blobs.c.digest.in_(digests[i : i + _CHUNK])
        )
        out.extend(r.digest for r in conn.execute(q))
    return out


def load(conn: Connection, tenant: str, digests: Iterable[str]) -> dict[str, bytes]:
    """The bytes of ``digests`` the tenant holds."""
    wanted = sorted(set(digests))
    out: dict[str, bytes] = {}
    for i in range(0, len(wanted), _CHUNK):
        q = select(blobs.c.digest, blobs.c.data).where(
            blobs.c.tenant == tenant, blobs.c.digest.in_(wanted[i : i + _CHUNK])
        )
        out.update((r.digest, bytes(r.data)) for r in conn.execute(q))
    return out


def expand(conn: Connection, tenant: str, items: list[StoredEvent]) -> list[StoredEvent]:
    """Stored events with their attachments' bytes put back (no query when none has any)."""
    wanted = {r for st in items for r in refs(st.event)}
    if not wanted:
        return items
    data = load(conn, tenant, wanted)
    return [
        st.model_copy(update={"event": expand_event(st.event, data)}) if refs(st.event) else st
        for st in items
    ]


def check(conn: Connection, tenant: str, named: list[tuple[int, int, str]]) -> list[str]:
    """Problems with the blobs ``(seq, part index, digest)`` that events name: missing, or
    bytes that no longer hash to their digest."""
    data = load(conn, tenant, (d for _, _, d in named))
    problems = []
    for seq, idx, digest in named:
        got = data.get(digest)
        if got is None:
            problems.append(f"seq {seq} part {idx}: blob {digest[:19]}… is missing")
        elif "sha256:" + hashlib.sha256(got).hexdigest() != digest:
            problems.append(f"seq {seq} part {idx}: blob {digest[:19]}… changed after append")
    return problems


def check_named(conn: Connection, tenant: str, session_id: str, encoded: Sequence[Encoded]) -> None:
    """Refuse a batch (before it commits) whose attachments name a blob by its digest
    alone, without the bytes, when the session's user does not hold it: a blob the tenant
    does not have (the session would fail ``verify`` for good and send the model an empty
    attachment), or one only another user's sessions attached (naming its digest would
    read that user's file, and keep a purge of theirs from deleting it).

    A user holds a blob that an event of one of their sessions (same tenant, same
    ``user_id``, none for none) names. One query for the batch, and none for the common
    batch that names no blob or carries the bytes of every blob it names.
    """
    carried = {d for enc in encoded for d in enc.blobs}
    named: dict[str, int] = {}
    for i, enc in enumerate(encoded):
        for ref in enc.named:
            if ref not in carried:
                named.setdefault(ref, i)
    if not named:
        return
    digests = sorted(named)
    marks = ", ".join(f":d{i}" for i in range(len(digests)))
    same_user = "IS NOT DISTINCT FROM" if conn.dialect.name == "postgresql" else "IS"
    held = conn.execute(
        text(
            f"SELECT b.digest FROM blobs b WHERE b.tenant = :tenant AND b.digest IN ({marks}) "
            "AND EXISTS (SELECT 1 FROM sessions s JOIN events e ON e.session_id = s.id "
            f"WHERE s.tenant = :tenant AND s.user_id {same_user} "
            "(SELECT o.user_id FROM sessions o WHERE o.id = :sid) "
            "AND e.payload LIKE '%' || b.digest || '%')"
        ),
        {"tenant": tenant, "sid": session_id, **{f"d{i}": d for i, d in enumerate(digests)}},
    )
    missing = set(digests) - {r.digest for r in held}
    if missing:
        digest = min(missing, key=named.__getitem__)
        raise InvalidEventError(
            f"events[{named[digest]}]: a FilePart names blob {digest[:19]}…, which this "
            "session's user does not hold (no event of theirs attached it); send the "
            "attachment's bytes (FilePart(data=...)) instead of its digest"
        )
