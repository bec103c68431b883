"""Writing converted transcripts into a store: validate everything, then one transaction.

Everything ``append`` checks (event sizes, ids, serialization, condensation and prune
references) is checked for every transcript before the first write, along with what only
an import can get wrong: an event id repeated within the file or already taken in the
database, and a session id that exists. The sessions and all their batches are then
written in one transaction, and for an export the head hash is compared with the file's
before it commits. A file that cannot be imported, and a process killed halfway through
one, leave the store exactly as it was.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TypeVar

from sqlalchemy.engine import Connection

from .. import _sql
from .._append import locked
from .._features.purge import hashes_digest
from ..codec import Encoded, chain_hash, encode, encode_event
from ..codec import new_id as fresh_id
from ..errors import EventStoreError
from ..events import (
    Condensation,
    Event,
    Message,
    Prune,
    Purge,
    ToolResultPart,
    empty_assistant,
)
from ..records import Session
from ..store import EventStore
from ._formats import Format, detect_format, load_transcripts
from ._loading import (
    ImportFormatError,
    Transcript,
    empty_replies_kept,
    nesting_guard,
    parse_text,
)
from .jsonl import parse_export

Progress = Callable[[int, int], None]
"""Called with ``(events_done, events_total)`` after every appended batch."""

DEFAULT_BATCH = 500
T = TypeVar("T")


def import_transcripts(
    store: EventStore,
    transcripts: list[Transcript],
    *,
    progress: Progress | None = None,
    batch_size: int = DEFAULT_BATCH,
    session_ids: list[str | None] | None = None,
) -> list[Session]:
    """Create one session per transcript and append its events, all in one transaction.

    Every event is validated before anything is written; the sessions and their batches
    then go in a single transaction, so either the whole file is imported or nothing is.
    A transcript's session gets ``session_ids[i]`` when given, else the transcript's own
    ``session_id`` (an export's), else a fresh id. An assistant message with neither
    content nor tool calls, which an append refuses, is kept as a custom event (see
    :func:`empty_replies_kept`), except in an export, which is restored as it was.

    Raises:
        ImportFormatError: An event is invalid or too large, an event id repeats or is
            taken, a session id exists, or an imported hash differs from the expected
            one. Nothing has been written.
    """
    for t in transcripts:
        if t.hashes is None:  # an export is restored as it was (see _kept_as_exported)
            t.events = empty_replies_kept(t.events)
    encoded = [_validate(store, t) for t in transcripts]
    _check_ids_unique(transcripts)
    ids = [
        (session_ids[i] if session_ids and session_ids[i] else None) or t.session_id
        for i, t in enumerate(transcripts)
    ]
    total = sum(len(t.events) for t in transcripts)
    done = 0
    if progress:
        progress(0, total)
    created: list[str] = []
    with store._tx(write=True) as conn:
        for t in transcripts:
            _check_ids_free(conn, t)
        for t, rows, sid in zip(transcripts, encoded, ids, strict=True):
            s = _create(conn, store, t, sid)
            head = 0
            if t.purged and t.hashes:
                _write_purged(conn, store, s.id, rows, t.hashes)
                done += len(rows)
                if progress:
                    progress(done, total)
                created.append(s.id)
                continue
            for batch in _batches(rows, batch_size):
                try:
                    head = locked.write(
                        conn, store.tenant, s.id, batch, expected_seq=head, idempotency_key=None
                    ).head_seq
                except EventStoreError as exc:
                    raise ImportFormatError(
                        f"{t.title or 'import'}: events {head + 1}..{head + len(batch)}: "
                        f"{exc}; nothing was imported"
                    ) from exc
                done += len(batch)
                if progress:
                    progress(done, total)
            if t.hashes:
                _check_head_hash(conn, store, s.id, t.hashes)
            created.append(s.id)
    return [store.get_session(sid) for sid in created]


def _validate(store: EventStore, t: Transcript) -> list[Encoded]:
    """What ``append`` would refuse, refused before the first write."""
    _check_sizes(store, t)
    _check_refs(t)
    try:
        if not any(_kept_as_exported(e, t) for e in t.events):
            return store._encode(t.events)
        # An export of a purged session holds its purge records, which append refuses
        # (only EventStore.purge writes one): they are encoded as the purge encodes them,
        # and the file's parser has checked them against the events they name. So is an
        # empty assistant message a log held before appends refused it: the file's
        # hashes prove it was there, and a restore keeps the log as it was.
        others = iter(store._encode([e for e in t.events if not _kept_as_exported(e, t)]))
        return [
            encode(e, store.token_counter) if _kept_as_exported(e, t) else next(others)
            for e in t.events
        ]
    except EventStoreError as exc:
        # The store numbers events from 0 within the batch; the file numbers them from 1.
        msg = re.sub(r"events\[(\d+)\]", lambda m: f"event {int(m[1]) + 1}", str(exc))
        raise ImportFormatError(f"{t.title or 'import'}: {msg}; nothing was imported") from exc


def _kept_as_exported(evt: Event, t: Transcript) -> bool:
    """Whether ``evt``, from an export (``t.hashes``), is written as the export holds it
    although an append would refuse it."""
    return isinstance(evt, Purge) or (
        t.hashes is not None and isinstance(evt, Message) and empty_assistant(evt)
    )


def _create(conn: Connection, store: EventStore, t: Transcript, sid: str | None) -> Session:
    try:
        return _sql.create_session(
            conn,
            store.tenant,
            session_id=sid,
            user_id=t.user_id,
            title=t.title,
            metadata=t.metadata,
            key=t.key if sid is not None else None,
        )
    except EventStoreError as exc:
        if sid is None:
            raise
        # The id (and key) came from the file: taken means the export was imported here
        # before.
        kept, fresh = ("id and key", "a fresh id and no key") if t.key else ("id", "a fresh id")
        raise ImportFormatError(
            f"{t.title or 'import'}: cannot keep the session {kept} ({exc}); import with "
            f"new_id=True to give the imported session {fresh}"
        ) from exc


def _check_sizes(store: EventStore, t: Transcript) -> None:
    sizes = t.payload_sizes or [len(encode_event(e).encode("utf-8")) for e in t.events]
    for i, size in enumerate(sizes):
        if size > store.max_event_bytes:
            raise ImportFormatError(
                f"{t.title or 'transcript'}: event {i + 1} is {size} bytes, over the store's "
                f"limit of {store.max_event_bytes} (open the store with max_event_bytes=N)"
            )


def _check_refs(t: Transcript) -> None:
    """Condensation ranges and prune targets must point back into the same transcript."""
    results: set[tuple[int, int]] = set()
    for seq, evt in enumerate(t.events, start=1):
        where = f"{t.title or 'import'}: event {seq}"
        if isinstance(evt, Message):
            results.update(
                (seq, i) for i, p in enumerate(evt.parts) if isinstance(p, ToolResultPart)
            )
        elif isinstance(evt, Condensation):
            if not 1 <= evt.forgotten_from <= evt.forgotten_to + 1 or evt.forgotten_to >= seq:
                raise ImportFormatError(
                    f"{where}: condensation range {evt.forgotten_from}..{evt.forgotten_to} "
                    "does not lie before it"
                )
        elif isinstance(evt, Prune):
            for ref in evt.targets:
                if (ref.seq, ref.index) not in results:
                    raise ImportFormatError(
                        f"{where}: prune target seq {ref.seq} part {ref.index} is not an "
                        "earlier tool result"
                    )


def _check_ids_unique(transcripts: list[Transcript]) -> None:
    """Event ids are unique across a database, so also within the file."""
    seen: dict[str, tuple[str, int]] = {}
    for t in transcripts:
        name = t.title or "import"
        for seq, evt in enumerate(t.events, start=1):
            if evt.id is None:
                continue
            first = seen.setdefault(evt.id, (name, seq))
            if first != (name, seq):
                raise ImportFormatError(
                    f"{name}: event {seq} repeats the id {evt.id} of {first[0]} event "
                    f"{first[1]}; event ids must be unique (import with new_ids=True to "
                    "give the events fresh ids)"
                )


def _check_ids_free(conn: Connection, t: Transcript) -> None:
    """Event ids are unique across a database: refuse before writing, not halfway."""
    ids = [e.id for e in t.events if e.id]
    taken = set(_sql.taken_event_ids(conn, ids))
    first = next((i for i in ids if i in taken), None)
    if first is not None:
        raise ImportFormatError(
            f"{t.title or 'export'}: event id {first} already exists in this "
            "database (the export came from here, or was imported before); import "
            "with new_ids=True to give the events fresh ids (their hashes change)"
        )


def _renumber(t: Transcript) -> Transcript:
    # A copy with fresh event ids is a new session: no hashes to match, no id to keep.
    events = [e.model_copy(update={"id": fresh_id()}) for e in t.events]
    if t.purged:
        events = _rebind_purges(events)
    return Transcript(events=events, title=t.title, metadata=t.metadata, user_id=t.user_id)


def _rebind_purges(events: list[Event]) -> list[Event]:
    """A purged log under fresh ids: the new ids change every hash, and the original
    hashes of purged events cannot be recomputed (their content is gone), so each purged
    event is hashed anew over its redacted payload and each purge record binds the new
    hashes of the events it names (the redactions it proves are unchanged)."""
    out: list[Event] = []
    hashes: list[str] = []
    covered: set[int] = set()
    prev: str | None = None
    for seq, evt in enumerate(events, start=1):
        if isinstance(evt, Purge):
            todo = [
                j
                for j in range(max(1, evt.from_seq), min(evt.to_seq, seq - 1) + 1)
                if out[j - 1].kind != "purge" and j not in covered
            ]
            covered.update(todo)
            evt = evt.model_copy(update={"hashes": hashes_digest([hashes[j - 1] for j in todo])})
        assert evt.created_at is not None and evt.id is not None
        prev = chain_hash(prev, seq, evt.id, evt.kind, evt.created_at, encode_event(evt))
        hashes.append(prev)
        out.append(evt)
    return out


def _write_purged(
    conn: Connection, store: EventStore, session_id: str, encoded: list[Encoded], hashes: list[str]
) -> None:
    """Write an export's purged log as it was stored: its rows as ``append`` makes them,
    but each with the file's hash (a purged event keeps its original hash, which its
    redacted payload no longer reproduces; the purge records prove them)."""
    locked.write(
        conn, store.tenant, session_id, encoded, expected_seq=0, idempotency_key=None,
        hashes=hashes,
    )  # fmt: skip


def _fresh_session(t: Transcript) -> Transcript:
    return dataclasses.replace(t, session_id=None, key=None)


def _check_head_hash(
    conn: Connection, store: EventStore, session_id: str, expected: list[str]
) -> None:
    """Compare the new head hash with the file's last hash, before the commit.

    Each hash chains over the previous one, so equal heads mean every hash is equal.
    """
    head, stored = locked.lock_head(conn, store.tenant, session_id)
    if head != len(expected) or stored != expected[-1]:
        raise ImportFormatError(
            f"session {session_id}: the imported events hash to {(stored or '')[:16]}... at "
            f"seq {head}, the file says {expected[-1][:16]}... at seq {len(expected)}; "
            "nothing was imported"
        )


def _batches(items: Sequence[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), max(1, size)):
        yield list(items[start : start + size])


def import_file(
    store: EventStore,
    path: str | Path,
    format: Format | None = None,
    progress: Progress | None = None,
    *,
    batch_size: int = DEFAULT_BATCH,
    new_ids: bool = False,
    new_id: bool = False,
) -> list[Session]:
    """Import a trajectory, transcript or export file; one session per conversation.

    Args:
        store: Where to write.
        path: The file.
        format: One of :data:`Format`; detected from the content when omitted.
        progress: Called with ``(events_done, events_total)`` after each batch.
        batch_size: Events per append.
        new_ids: For exports: give the events fresh ids (see :func:`import_jsonl`).
        new_id: For exports: give the session a fresh id instead of the exported one.

    Returns:
        The new sessions (most files hold one; OpenHands resolver output holds one per run).
        For a coding-agent transcript, the sessions it fills, brought up to date (see
        :func:`~eventstore.importers.import_transcript`).

    Raises:
        ImportFormatError: Malformed input. Nothing has been written in that case.
    """
    with nesting_guard(str(path)):
        fmt = format or detect_format(path)
        from ._keyed import AGENT_FORMATS, import_transcript

        if fmt in AGENT_FORMATS:
            done = import_transcript(store, path, fmt, batch_size=max(batch_size, 1))
            return [store.get_session(r.session_id) for r in done]
        transcripts = load_transcripts(path, fmt)
        if new_ids:
            transcripts = [_renumber(t) if t.hashes is not None else t for t in transcripts]
        if new_id:
            transcripts = [_fresh_session(t) for t in transcripts]
        return import_transcripts(store, transcripts, progress=progress, batch_size=batch_size)


def import_jsonl(
    store: EventStore,
    fp: IO[str],
    *,
    session_id: str | None = None,
    new_id: bool = False,
    new_ids: bool = False,
    progress: Progress | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> Session:
    """Import a file written by :func:`export_jsonl` as a session.

    The session id and key, event ids and timestamps are kept, so the session and its
    hash chain come out identical, and a later import of the transcript the session came
    from finds it by its key; the head hash is checked against the file before the import
    commits. ``session_id`` names the new session instead, ``new_id=True`` gives it a
    fresh id and no key.

    Session and event ids are unique per database, so an export cannot be imported back
    into the database it came from with its ids; ``new_ids=True`` assigns fresh event ids
    and a fresh session id (timestamps, kinds and payloads stay, the hashes then differ
    from the file's).

    Raises:
        ImportFormatError: A line is malformed, its hash does not match, or an event or
            session id is already taken; the message names the place and nothing is
            written.
    """
    where = str(getattr(fp, "name", None) or "<export>")
    with nesting_guard(where):
        loaded = parse_text(fp.read(), where)
        transcript = parse_export(loaded)
        if new_ids:
            transcript = _renumber(transcript)
        if new_id:
            transcript = _fresh_session(transcript)
        return import_transcripts(
            store,
            [transcript],
            progress=progress,
            batch_size=batch_size,
            session_ids=[session_id],
        )[0]
