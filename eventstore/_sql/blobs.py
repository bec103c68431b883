"""Statements for the blob table: attachments stored once per tenant by content hash.

:func:`~eventstore.codec.encode` moves the bytes of a large attachment out of the event's
payload (which keeps ``FilePart.blob = "sha256:<hex>"``); :func:`save` writes the bytes
that the tenant does not hold yet; :func:`expand` puts them back into events read from the
log, one query per page of events and only when a page names a blob.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.engine import Connection

from ..codec import blob_refs as refs
from ..codec import with_blob_data as expand_event
from ..events import utcnow
from ..records import StoredEvent
from ..schema import blobs

__all__ = ["save", "load", "expand", "check"]

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
