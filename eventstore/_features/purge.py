"""Purging content for retention and erasure, with the hash chain still verifiable.

The log is append-only: database triggers reject any change to ``events``. A purge is the
one explicit way past them, for its own session's payloads only (a transaction-local
setting on Postgres, a marker row only its transaction sees on SQLite; no DDL, so no
other writer waits). In one transaction it

1. replaces the payload of each event in the range with a *redacted* payload of the same
   kind and shape: message roles, part types, tool call ids and names and result states
   stay (views stay valid and tool pairs stay matched); every text, argument, output,
   attachment, summary and custom value becomes ``[purged]`` or nothing;
2. keeps each event's stored hash, and appends a :class:`~eventstore.events.Purge` record
   binding those hashes (a SHA-256 over them, in order) into the chain;
3. deletes the search-index rows of the purged events and the attachment blobs no
   unpurged event of the tenant still references.

``verify`` then recomputes every unpurged event's hash as always, accepts a purged
event's stored hash only when a later purge record lists it and the hashes match, checks
that the payload is in redacted form (nothing can be smuggled back in), and reports the
count in :attr:`~eventstore.verify.VerifyReport.purged`. Fingerprints of model calls whose
view held purged content cannot be re-derived; they are counted as unverifiable, not as
tampering. Token counts keep their original values (they are metadata, not content), so
views of a purged range measure what was there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from .. import _sql
from .._append import locked
from .._append.rows import Rows
from ..codec import blob_refs, check_text, decode_event, encode, encode_event
from ..distribution import is_distributed
from ..errors import InvalidEventError
from ..events import (
    PURGED,
    Condensation,
    CondensationRequest,
    Custom,
    Delta,
    Event,
    FilePart,
    LLMCall,
    Message,
    ProviderPart,
    Prune,
    Purge,
    Queued,
    ReasoningPart,
    RunState,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    utcnow,
)
from ..schema import blobs, events, kind_is, purge_marks, session_keys, sessions
from . import search

if TYPE_CHECKING:
    from ..codec import Encoded
    from ..tokens import TokenCounter

__all__ = [
    "PurgeMethods",
    "redact",
    "hashes_digest",
    "payloads_digest",
    "is_redacted",
    "records",
    "purge_count",
    "range_rows",
]


def hashes_digest(hashes: Sequence[str]) -> str:
    """What a :class:`~eventstore.events.Purge` record binds: SHA-256 over the hashes."""
    return hashlib.sha256("\n".join(hashes).encode("ascii")).hexdigest()


def payloads_digest(payloads: Sequence[str]) -> str:
    """SHA-256 over redacted payloads, length-prefixed, in order."""
    h = hashlib.sha256()
    for p in payloads:
        data = p.encode("utf-8")
        h.update(f"{len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()


def records(conn: Connection, owners: Sequence[str]) -> list[tuple[str, int, Purge]]:
    """The purge records of the sessions ``owners`` (a lineage), with owner and seq."""
    if not owners:
        return []
    rows = conn.execute(
        select(
            events.c.session_id, events.c.seq, events.c.id, events.c.created_at, events.c.payload
        ).where(events.c.session_id.in_(list(owners)), kind_is("purge"))
    )
    out = []
    for r in rows:
        evt = decode_event("purge", r.payload, r.id, r.created_at)
        assert isinstance(evt, Purge)
        out.append((r.session_id, r.seq, evt))
    return out


def purge_count(conn: Connection, tenant: str, session_id: str) -> int:
    """How many purge records the session's lineage holds: ``verify`` compares it before
    and after its walk, which reads a page per transaction, to know whether a purge
    committed meanwhile (and rewrote pages it planned against the records read first)."""
    segments, _head = _sql.lineage_and_head(conn, tenant, session_id, include_deleted=True)
    return len(records(conn, [seg.owner for seg in segments]))


def range_rows(conn: Connection, owner: str, lo: int, hi: int) -> list[Any]:
    """Hash and payload of ``owner``'s events ``lo..hi`` but purge records, in order (what
    a fork's audit reads of a purge its parent recorded beyond the shared prefix)."""
    return list(
        conn.execute(
            select(events.c.seq, events.c.kind, events.c.hash, events.c.payload)
            .where(
                events.c.session_id == owner,
                events.c.seq >= lo,
                events.c.seq <= hi,
                events.c.kind != "purge",
            )
            .order_by(events.c.seq)
        )
    )


def _part(part: Any) -> Any:
    if isinstance(part, TextPart):
        return TextPart(text=PURGED)
    if isinstance(part, ReasoningPart):
        return ReasoningPart(text=PURGED, format=part.format)
    if isinstance(part, ToolCallPart):
        return ToolCallPart(id=part.id, name=part.name, arguments="{}", call_type=part.call_type)
    if isinstance(part, ToolResultPart):
        return ToolResultPart(
            tool_call_id=part.tool_call_id,
            name=part.name,
            output=PURGED,
            is_error=part.is_error,
            state=part.state,
        )
    if isinstance(part, FilePart):
        return FilePart(media_type=part.media_type, uri=PURGED)
    if isinstance(part, ProviderPart):
        return ProviderPart(provider=part.provider, item={})
    return TextPart(text=PURGED)  # pragma: no cover - every part type is listed above


def _message(msg: Message) -> Message:
    return Message(
        role=msg.role,
        parts=[_part(p) for p in msg.parts],
        model=msg.model,
        content_list=msg.content_list,
        interrupted=msg.interrupted,
    )


def redact(evt: Event) -> Event:
    """``evt`` with its content removed and its shape kept (see the module docstring)."""
    if isinstance(evt, Message):
        out: Event = _message(evt)
    elif isinstance(evt, Queued):
        out = Queued(message=_message(evt.message))
    elif isinstance(evt, Condensation):
        out = evt.model_copy(
            update={
                "summary": PURGED if evt.summary is not None else None,
                "carried": PURGED if evt.carried is not None else None,
                "focus": None,
            }
        )
    elif isinstance(evt, CondensationRequest):
        out = CondensationRequest()
    elif isinstance(evt, Prune):
        out = evt.model_copy(update={"note": None})
    elif isinstance(evt, LLMCall):
        out = evt.model_copy(update={"error": None, "metadata": None})
    elif isinstance(evt, Custom):
        out = Custom(name=evt.name)
    elif isinstance(evt, RunState):
        out = evt.model_copy(update={"reason": None})
    elif isinstance(evt, Delta):
        out = Delta(stream_id=evt.stream_id, text=PURGED)
    else:  # Dequeued and Purge hold no content
        out = evt
    return out.model_copy(update={"id": evt.id, "created_at": evt.created_at})


def is_redacted(kind: str, payload: str) -> bool:
    """Whether a stored payload is already in redacted form (what ``verify`` requires of
    a purged event)."""
    try:
        evt = decode_event(kind, payload, "0", utcnow())
    except Exception:
        return False
    return encode_event(redact(evt)) == payload


def _guards(conn: Connection, session_id: str, on: bool) -> None:
    """Let this transaction change the payloads of ``session_id``'s events (``on=False``)
    or no longer (``on=True``). No DDL: the append-only trigger itself lets a purge through
    for the session it names and for nothing but the payload, so other sessions' writers
    never wait for the table (a transaction-local setting on Postgres, a row of
    ``purge_marks`` that only this transaction sees on SQLite)."""
    if conn.dialect.name == "postgresql":
        if is_distributed(conn, fresh=True):  # the workers' triggers read the setting too
            conn.execute(text("SET LOCAL citus.propagate_set_commands = local"))
        # SET LOCAL (not set_config) so that Citus passes it on; a quoted literal.
        value = "" if on else session_id.replace("'", "''")
        conn.exec_driver_sql(f"SET LOCAL eventstore.purging = '{value}'")
        return
    if on:
        conn.execute(purge_marks.delete().where(purge_marks.c.session_id == session_id))
    else:
        conn.execute(purge_marks.insert(), {"session_id": session_id})


def purge_rows(
    conn: Connection,
    tenant: str,
    session_id: str,
    through_seq: int | None,
    reason: str | None,
    counter: TokenCounter,
    session_fields: bool = False,
) -> tuple[int, Purge | None, int, str | None]:
    """The purge itself; returns (record seq or 0, record, new head, new head hash)."""
    # Before anything is read: an indexer that read a payload this purge erases commits
    # its words first (and the purge deletes them), or reads the erased payload after.
    search.index_lock(conn, tenant)
    if conn.dialect.name == "sqlite":
        # Pages the purge frees or rewrites are zeroed, not left holding the old content.
        conn.exec_driver_sql("PRAGMA secure_delete = ON")
    segments, head = _sql.lineage_and_head(conn, tenant, session_id, include_deleted=True)
    lock = select(sessions.c.head_seq, sessions.c.head_hash).where(sessions.c.id == session_id)
    if conn.dialect.name == "postgresql":
        lock = lock.with_for_update()
    row = conn.execute(lock).one()
    head, head_hash = row.head_seq, row.head_hash
    last = head if through_seq is None else through_seq
    if not 1 <= last <= head:
        raise InvalidEventError(f"through_seq: {through_seq} is outside 1..{head}")
    own = segments[-1]
    if own.owner != session_id or own.lo > last:
        raise InvalidEventError(
            f"seqs 1..{last} of session {session_id!r} belong to the session it was forked "
            "from: purge that session instead"
        )
    rows = list(
        conn.execute(
            select(events.c.seq, events.c.kind, events.c.payload, events.c.hash)
            .where(
                events.c.session_id == session_id,
                events.c.seq >= own.lo,
                events.c.seq <= last,
            )
            .order_by(events.c.seq)
        )
    )
    done = [(rec.from_seq, rec.to_seq) for _owner, _seq, rec in records(conn, [session_id])]
    todo = [r for r in rows if r.kind != "purge" and not any(lo <= r.seq <= hi for lo, hi in done)]
    if session_fields:
        erase_fields(conn, tenant, session_id)
    if not todo:
        return 0, None, head, head_hash
    refs: set[str] = set()
    payloads: list[str] = []
    _guards(conn, session_id, on=False)
    for r in todo:
        evt = decode_event(r.kind, r.payload, "0", utcnow())
        refs.update(blob_refs(evt))
        payload = encode_event(redact(evt))
        payloads.append(payload)
        conn.execute(
            update(events)
            .where(events.c.session_id == session_id, events.c.seq == r.seq)
            .values(payload=payload, size=len(payload.encode("utf-8")))
        )
    _guards(conn, session_id, on=True)
    record = Purge(
        from_seq=todo[0].seq,
        to_seq=todo[-1].seq,
        events=len(todo),
        hashes=hashes_digest([r.hash for r in todo]),
        redacted=payloads_digest(payloads),
        reason=reason,
    )
    enc: list[Encoded] = [encode(record, counter)]
    now = utcnow()
    made = Rows(session_id, head, head_hash, enc, now, sqlite=conn.dialect.name == "sqlite")
    locked.insert_rows(conn, made)
    new_head, new_hash = made.seq, made.head_hash
    locked.move_head(conn, session_id, head, new_head, new_hash, now)
    _forget_search(conn, session_id, [r.seq for r in todo])
    _forget_blobs(conn, tenant, refs)
    return new_head, record, new_head, new_hash


def erase_fields(conn: Connection, tenant: str, session_id: str) -> None:
    """Erase what the session row holds about its subject: title, metadata, the caller's
    key (and its entry in ``session_keys``, so the name is free again) and the user id.
    The id, lineage, head and times stay: the log and its audit need them."""
    row = conn.execute(
        select(sessions.c.key_digest).where(
            sessions.c.id == session_id, sessions.c.tenant == tenant
        )
    ).one()
    if row.key_digest is not None:
        conn.execute(
            session_keys.delete().where(
                session_keys.c.tenant == tenant,
                session_keys.c.key_digest == row.key_digest,
                session_keys.c.session_id == session_id,
            )
        )
    conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.tenant == tenant)
        .values(title=None, metadata="{}", key=None, key_digest=None, user_id=None)
    )


def _forget_search(conn: Connection, session_id: str, seqs: list[int]) -> None:
    """Delete the purged events' search documents so that no trace of their words stays
    in the index. FTS5 deletes by appending delete markers to new segments, leaving the
    words in the old ones until a merge: where SQLite has FTS5's ``secure-delete`` option
    (3.42+) it is turned on first, so the deletes remove the words from the segments;
    elsewhere the index is merged into one segment afterwards (``optimize``). Freed pages
    are zeroed (``secure_delete``, set for the purge's connection by :func:`purge_rows`)."""
    pg = conn.dialect.name == "postgresql"
    table = "search_docs" if pg else "search_fts"
    merge = False
    if not pg:
        try:
            with conn.begin_nested():
                conn.execute(
                    text("INSERT INTO search_fts(search_fts, rank) VALUES ('secure-delete', 1)")
                )
        except DBAPIError:  # an SQLite before 3.42
            merge = True
    for i in range(0, len(seqs), 500):
        chunk = seqs[i : i + 500]
        marks = ", ".join(f":s{j}" for j in range(len(chunk)))
        conn.execute(
            text(f"DELETE FROM {table} WHERE session_id = :sid AND seq IN ({marks})"),
            {"sid": session_id, **{f"s{j}": s for j, s in enumerate(chunk)}},
        )
    if merge:
        conn.execute(text("INSERT INTO search_fts(search_fts) VALUES ('optimize')"))


def _forget_blobs(conn: Connection, tenant: str, refs: set[str]) -> None:
    """Delete the purged attachments no other event of the tenant still names (a scan of
    the tenant's payloads: purges are rare, administrative operations)."""
    for ref in sorted(refs):
        still = conn.execute(
            select(events.c.seq)
            .join(sessions, sessions.c.id == events.c.session_id)
            .where(sessions.c.tenant == tenant, events.c.payload.contains(ref))
            .limit(1)
        ).first()
        if still is None:
            conn.execute(blobs.delete().where(blobs.c.tenant == tenant, blobs.c.digest == ref))


class PurgeMethods:
    """:meth:`purge`, mixed into :class:`~eventstore.EventStore`."""

    tenant: str
    token_counter: TokenCounter
    _run: Any
    _heads: Any

    def purge(
        self,
        session_id: str,
        *,
        through_seq: int | None = None,
        reason: str | None = None,
        session_fields: bool = False,
    ) -> Purge | None:
        """Remove the content of the session's events up to ``through_seq`` (default: all),
        for retention rules and erasure requests. Deleted sessions can be purged too.

        The events stay, redacted to their shape (roles, tool ids and names); their hashes
        stay; a :class:`~eventstore.events.Purge` record appended in the same transaction
        binds them, so :meth:`verify` still proves the whole chain and reports the purged
        events as purged. Search-index rows and attachment blobs of the purged events go
        too. Returns the record, or ``None`` when nothing was left to purge. A fork's
        inherited events belong to the session it was forked from: purge that one.

        With ``session_fields`` the session row's own personal data goes too, in the same
        transaction: its title, metadata, key (the name is free again) and user id. This
        is what an erasure request needs; a retention rule over old events leaves them.
        """
        if through_seq is not None and (
            isinstance(through_seq, bool) or not isinstance(through_seq, int)
        ):
            raise InvalidEventError(f"through_seq: {through_seq!r} is not a seq")
        if reason is not None:
            check_text("reason", reason, 10_000)
        with _sql.auditing():
            seq, record, head, head_hash = self._run(
                purge_rows,
                self.tenant,
                session_id,
                through_seq,
                reason,
                self.token_counter,
                session_fields=bool(session_fields),
                write=True,
            )
        if record is not None:
            self._heads.put(session_id, head, head_hash)
        return record
