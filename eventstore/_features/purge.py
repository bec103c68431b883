"""Purging content for retention and erasure, with the hash chain still verifiable.

The log is append-only: database triggers reject any change to ``events``. A purge is the
one explicit way past them, for its own session's payloads only (a transaction-local
setting on Postgres, a marker row only its transaction sees on SQLite; no DDL, so no
other writer waits). It

1. reads the events and works out their redacted payloads, outside any write lock;
2. in one short transaction appends a :class:`~eventstore.events.Purge` record binding
   the events' stored hashes (a SHA-256 over them, in order) and their redacted payloads,
   with a ``purge_pending`` row saying the erasure is under way;
3. in short transactions of at most :data:`CHUNK` events each (SQLite has one writer at a time:
   no other writer waits for the whole purge) replaces the payload of each event in the
   range with a *redacted* payload of the same kind and shape: message roles, part
   types, tool call ids and names and result states stay (views stay valid and tool
   pairs stay matched); every text, argument, output, attachment, summary and custom
   value becomes ``[purged]`` or nothing; each event keeps its stored hash; the same
   transaction deletes its search-index rows;
4. deletes the attachment blobs no unpurged event of the tenant still references, and
   the ``purge_pending`` row.

A process killed after step 2 leaves the row: the next purge, or the next open of a
writable store, completes the erasure (:meth:`PurgeMethods.complete_purges`; the redacted
form is a function of the payload, so this is idempotent), and ``verify`` meanwhile
checks the unerased events against their hashes and the record and counts them in
:attr:`~eventstore.verify.VerifyReport.purge_pending`.

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
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import bindparam, select, text, update
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
from ..schema import blobs, events, kind_is, purge_marks, purge_pending, session_keys, sessions
from . import search

if TYPE_CHECKING:
    from ..tokens import TokenCounter

__all__ = [
    "PurgeMethods",
    "redact",
    "hashes_digest",
    "payloads_digest",
    "is_redacted",
    "redacted_form",
    "records",
    "purge_count",
    "range_rows",
    "pending",
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


def redacted_form(kind: str, payload: str) -> str | None:
    """The redacted form of a stored payload (``None`` when it does not decode)."""
    try:
        evt = decode_event(kind, payload, "0", utcnow())
    except Exception:
        return None
    return encode_event(redact(evt))


def is_redacted(kind: str, payload: str) -> bool:
    """Whether a stored payload is already in redacted form (what ``verify`` requires of
    a purged event)."""
    return redacted_form(kind, payload) == payload


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


#: Events, and bytes of their payloads, one erasing transaction rewrites at most: small
#: enough that another writer of the database (SQLite has one at a time) waits a fraction
#: of a second for it.
CHUNK = 1000
CHUNK_BYTES = 2_000_000

#: An erased event: its seq, its redacted payload, the size of the payload it replaces.
Item = tuple[int, str, int]


class Plan(NamedTuple):
    """What a purge will do, worked out from a read: nothing is locked meanwhile."""

    head: int
    records: int  # the session's purge records when it was read
    items: list[Item]
    refs: list[str]  # attachment digests the purged events name
    record: Purge | None  # None: nothing left to purge


class Started(NamedTuple):
    """A purge whose record committed: what is left to erase."""

    record_seq: int
    head: int
    head_hash: str | None


def plan_purge(
    conn: Connection, tenant: str, session_id: str, through_seq: int | None, reason: str | None
) -> Plan:
    """Read the events to purge and redact them (a read: the expensive part of a purge
    runs while other writers write)."""
    segments, head = _sql.lineage_and_head(conn, tenant, session_id, include_deleted=True)
    last = head if through_seq is None else through_seq
    if not 1 <= last <= head:
        raise InvalidEventError(f"through_seq: {through_seq} is outside 1..{head}")
    own = segments[-1]
    if own.owner != session_id or own.lo > last:
        raise InvalidEventError(
            f"seqs 1..{last} of session {session_id!r} belong to the session it was forked "
            "from: purge that session instead"
        )
    done = [(rec.from_seq, rec.to_seq) for _owner, _seq, rec in records(conn, [session_id])]
    rows = conn.execute(
        select(events.c.seq, events.c.kind, events.c.payload, events.c.hash)
        .where(
            events.c.session_id == session_id,
            events.c.seq >= own.lo,
            events.c.seq <= last,
            events.c.kind != "purge",
        )
        .order_by(events.c.seq)
    )
    items: list[Item] = []
    hashes: list[str] = []
    refs: set[str] = set()
    for r in rows:
        if any(lo <= r.seq <= hi for lo, hi in done):
            continue
        evt = decode_event(r.kind, r.payload, "0", utcnow())
        refs.update(blob_refs(evt))
        items.append((r.seq, encode_event(redact(evt)), len(r.payload)))
        hashes.append(r.hash)
    record = None
    if items:
        record = Purge(
            from_seq=items[0][0],
            to_seq=items[-1][0],
            events=len(items),
            hashes=hashes_digest(hashes),
            redacted=payloads_digest([p for _seq, p, _n in items]),
            reason=reason,
        )
    return Plan(head, len(done), items, sorted(refs), record)


def start_purge(
    conn: Connection,
    tenant: str,
    session_id: str,
    plan: Plan,
    counter: TokenCounter,
    session_fields: bool,
) -> Started | None:
    """Append the plan's record and its ``purge_pending`` row (one short write). ``None``
    when another purge of the session committed since the plan was read: plan again."""
    lock = select(sessions.c.head_seq, sessions.c.head_hash).where(
        sessions.c.id == session_id, sessions.c.tenant == tenant
    )
    if conn.dialect.name == "postgresql":
        lock = lock.with_for_update()
    row = conn.execute(lock).one()
    if len(records(conn, [session_id])) != plan.records:
        return None
    if session_fields:
        erase_fields(conn, tenant, session_id)
    if plan.record is None:
        return Started(0, row.head_seq, row.head_hash)
    now = utcnow()
    made = Rows(
        session_id,
        row.head_seq,
        row.head_hash,
        [encode(plan.record, counter)],
        now,
        sqlite=conn.dialect.name == "sqlite",
    )
    locked.insert_rows(conn, made)
    locked.move_head(conn, session_id, row.head_seq, made.seq, made.head_hash, now)
    conn.execute(
        purge_pending.insert(),
        {
            "session_id": session_id,
            "seq": made.seq,
            "tenant": tenant,
            "refs": json.dumps(plan.refs),
        },
    )
    return Started(made.seq, made.seq, made.head_hash)


def pending(conn: Connection, session_ids: Sequence[str] | None = None) -> list[Any]:
    """The purges whose erasure has not finished (of ``session_ids``, or all)."""
    q = select(purge_pending).order_by(purge_pending.c.session_id, purge_pending.c.seq)
    if session_ids is not None:
        q = q.where(purge_pending.c.session_id.in_(list(session_ids)))
    return list(conn.execute(q))


def plan_rest(conn: Connection, session_id: str, record_seq: int) -> list[Item]:
    """What an unfinished purge has yet to erase: the events its record lists whose
    payloads are not redacted yet, with their redacted payloads."""
    rec = _record(conn, session_id, record_seq)
    out = []
    for r in range_rows(conn, session_id, rec.from_seq, rec.to_seq):
        payload = redacted_form(r.kind, r.payload)
        if payload is not None and payload != r.payload:
            out.append((r.seq, payload, len(r.payload)))
    return out


def erase(conn: Connection, tenant: str, session_id: str, items: Sequence[Item]) -> None:
    """Rewrite some events' payloads to their redacted form, in one short transaction
    (idempotent: the redacted form is a function of the payload, and of itself)."""
    # An indexer that read a payload this erases commits its words first (and
    # :func:`forget_search` deletes them after the last erase), or reads the erased one.
    search.index_lock(conn, tenant)
    if conn.dialect.name == "sqlite":
        # Pages the purge frees or rewrites are zeroed, not left holding the old content.
        conn.exec_driver_sql("PRAGMA secure_delete = ON")
    _guards(conn, session_id, on=False)
    conn.execute(
        update(events)
        .where(events.c.session_id == session_id, events.c.seq == bindparam("at"))
        .values(payload=bindparam("body"), size=bindparam("bytes")),
        [{"at": seq, "body": p, "bytes": len(p.encode("utf-8"))} for seq, p, _n in items],
    )
    _guards(conn, session_id, on=True)


def search_rows(conn: Connection, session_id: str, record_seq: int) -> list[int]:
    """SQLite: the rowids of the search documents of the events a purge record lists (a
    read, after every erase committed: no indexer can add a document of their old words
    after that, since it reads and writes in one write transaction). FTS5 finds them by
    scanning its table, so this runs outside any write lock; Postgres deletes by its key
    (:func:`finish`) and reads nothing here."""
    if conn.dialect.name != "sqlite":
        return []
    rec = _record(conn, session_id, record_seq)
    return list(
        conn.execute(
            text(
                "SELECT rowid FROM search_fts WHERE session_id = :sid AND seq BETWEEN :lo AND :hi"
            ),
            {"sid": session_id, "lo": rec.from_seq, "hi": rec.to_seq},
        ).scalars()
    )


def forget_search(conn: Connection, rowids: Sequence[int]) -> None:
    """SQLite: delete search documents by rowid so that no trace of their words stays in
    the index: where SQLite has FTS5's ``secure-delete`` option (3.42+) it is turned on
    first, so the deletes remove the words from the segments (not only add delete
    markers); elsewhere :func:`merge_search` merges the index into one segment. Freed
    pages are zeroed (``secure_delete``)."""
    conn.exec_driver_sql("PRAGMA secure_delete = ON")
    _secure_fts(conn)
    marks = ", ".join(f":r{j}" for j in range(len(rowids)))
    conn.execute(
        text(f"DELETE FROM search_fts WHERE rowid IN ({marks})"),
        {f"r{j}": r for j, r in enumerate(rowids)},
    )


MERGE_PAGES = 500


def merge_search(conn: Connection) -> bool:
    """SQLite before 3.42 (no ``secure-delete``): one step of merging the search index into
    a single segment, which leaves out the words of deleted documents (``optimize`` does
    the same in one transaction, seconds on a large index, while every other writer
    waits). True while there is more to merge: FTS5 writes fewer than two rows once the
    index is one segment. False at once where deletes already removed the words."""
    conn.exec_driver_sql("PRAGMA secure_delete = ON")
    if _secure_fts(conn):
        return False
    # total_changes is the connection's running count, across transactions.
    before = conn.exec_driver_sql("SELECT total_changes()").scalar_one()
    conn.execute(
        text("INSERT INTO search_fts(search_fts, rank) VALUES ('merge', :n)"),
        {"n": -MERGE_PAGES},
    )
    after = conn.exec_driver_sql("SELECT total_changes()").scalar_one()
    return bool(after - before >= 2)


def finish(conn: Connection, tenant: str, session_id: str, record_seq: int) -> None:
    """The end of a purge: the search documents (Postgres; SQLite's went by
    :func:`forget_search`) and the attachments no one names any more go, and so does its
    ``purge_pending`` row (nothing, when another process finished it first)."""
    row = conn.execute(
        select(purge_pending.c.refs).where(
            purge_pending.c.session_id == session_id, purge_pending.c.seq == record_seq
        )
    ).first()
    if row is None:
        return
    search.index_lock(conn, tenant)
    if conn.dialect.name == "postgresql":
        rec = _record(conn, session_id, record_seq)
        conn.execute(
            text("DELETE FROM search_docs WHERE session_id = :sid AND seq BETWEEN :lo AND :hi"),
            {"sid": session_id, "lo": rec.from_seq, "hi": rec.to_seq},
        )
    else:
        conn.exec_driver_sql("PRAGMA secure_delete = ON")
    _forget_blobs(conn, tenant, set(json.loads(row.refs)))
    conn.execute(
        purge_pending.delete().where(
            purge_pending.c.session_id == session_id, purge_pending.c.seq == record_seq
        )
    )


def _record(conn: Connection, session_id: str, record_seq: int) -> Purge:
    row = conn.execute(
        select(events.c.id, events.c.created_at, events.c.payload).where(
            events.c.session_id == session_id, events.c.seq == record_seq
        )
    ).one()
    evt = decode_event("purge", row.payload, row.id, row.created_at)
    assert isinstance(evt, Purge)
    return evt


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


def _secure_fts(conn: Connection) -> bool:
    """Turn on FTS5's ``secure-delete`` option, so that deletes remove the words from
    the index's segments (not only add delete markers); False on an SQLite before 3.42,
    where :func:`merge_search` merges the index into one segment instead."""
    try:
        with conn.begin_nested():
            conn.execute(
                text("INSERT INTO search_fts(search_fts, rank) VALUES ('secure-delete', 1)")
            )
    except DBAPIError:
        return False
    return True


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
    dialect: str
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
            self.complete_purges()
            while True:  # again when another purge of the session committed meanwhile
                plan = self._run(plan_purge, self.tenant, session_id, through_seq, reason)
                started = self._run(
                    start_purge,
                    self.tenant,
                    session_id,
                    plan,
                    self.token_counter,
                    bool(session_fields),
                    write=True,
                )
                if started is not None:
                    break
            if plan.record is None:
                return None
            self._heads.put(session_id, started.head, started.head_hash)
            self._erase(
                self.tenant,
                session_id,
                started.record_seq,
                plan.items,
            )
        return plan.record

    def complete_purges(self) -> int:
        """Finish the erasure of every purge a killed process left unfinished (its record
        committed, some events not yet rewritten; ``verify`` reports them as
        ``purge_pending``). Idempotent; runs before each purge and when a writable store
        opens. Returns how many purges it finished."""
        rows = self._run(pending)
        for row in rows:
            items = self._run(plan_rest, row.session_id, row.seq)
            self._erase(row.tenant, row.session_id, row.seq, items)
        return len(rows)

    def _erase(self, tenant: str, session_id: str, record_seq: int, items: list[Item]) -> None:
        """Rewrite ``items`` in short transactions, then delete the search documents and
        finish the purge. On SQLite, whose busy handler polls, the purge rests after each
        transaction as long as it took (100-500 ms): a waiting writer gets its turn."""
        rest = self.dialect == "sqlite"
        chunk: list[Item] = []
        size = 0
        for item in items:
            if chunk and (len(chunk) == CHUNK or size + item[2] > CHUNK_BYTES):
                self._turn(rest, erase, tenant, session_id, chunk)
                chunk, size = [], 0
            chunk.append(item)
            size += item[2]
        if chunk:
            self._turn(rest, erase, tenant, session_id, chunk)
        rowids = self._run(search_rows, session_id, record_seq)
        for i in range(0, len(rowids), CHUNK):
            self._turn(rest, forget_search, rowids[i : i + CHUNK])
        if rest:
            while self._turn(rest, merge_search):
                pass
        self._run(finish, tenant, session_id, record_seq, write=True)

    def _turn(self, rest: bool, fn: Any, *args: Any) -> Any:
        start = time.monotonic()
        done = self._run(fn, *args, write=True)
        if rest:
            # At least SQLite's longest busy-handler sleep (100 ms): a writer that waited
            # through this transaction wakes while the lock is free.
            time.sleep(min(max(time.monotonic() - start, 0.1), 0.5))
        return done
