"""Keyed, resumable import of coding-agent transcripts (Claude Code, Codex CLI, Gemini CLI,
aider, Cline, OpenCode).

A transcript is one agent session that keeps growing on disk. Its session in the store is
found by key, ``"<format>:<source session id>"``, so importing the same file again finds it.
The file is converted again from the start (conversion is deterministic, and cheap next to
writing), and each session it fills (the main one, and a child per subagent) gets only the
events past its head: the converter numbers every event it makes, so the first ``head`` of
them are the ones the session already holds. Earlier seqs and hashes never change, and a
re-import adds nothing. The newest stored event is compared with the one the file makes at
that seq: a file rewritten since (not just grown) is refused with the reason.

The new events are streamed in appends of ``batch_size``: memory stays bounded whatever
the file's size. Each append is atomic, and because resuming goes by each session's head,
an import that fails or is killed halfway leaves sessions that are exact prefixes of the
transcript, which the next import completes. The newest event's source position (``upto``,
see :mod:`._agent`) tells the converter where the stored copy ends, so that it closes an
assistant message it is still assembling at that line, as the earlier import did.

A last line without its newline is still being written: it is left for a later import, and
the converter keeps back a compaction marker whose summary is due on that line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from .. import _append, _sql
from ..codec import Encoded
from ..errors import ConflictError, EventStoreError, NotFoundError
from ..events import Condensation
from ..records import AppendResult, Session
from ..store import EventStore
from ._agent import (
    Converter,
    InvalidLine,
    Item,
    Torn,
    first_records,
    leading_records,
    parse_when,
    read_lines,
    read_records,
    source_of,
)
from ._collection import fewer_collections
from ._loading import ImportFormatError, Transcript
from .aider import Aider, first_header_time, looks_aider, path_digest
from .claude_code import ClaudeCode, looks_claude_code
from .cline import Cline, history_records, looks_cline
from .codex import Codex, codex_session_id, looks_codex
from .gemini_cli import GeminiCli, json_session_records, looks_gemini, looks_gemini_header
from .opencode import (
    OpenCode,
    numbered,
    opencode_kind,
    opencode_records,
    session_info,
    storage_message_files,
    storage_stamp,
)
from .opencode_db import (
    DbSession,
    db_stamp,
    is_opencode_db,
    is_sqlite,
    newer_model_error,
    newer_model_only,
    not_opencode_error,
    session_ids,
    session_stamps,
)

AGENT_FORMATS: dict[str, type[Converter]] = {
    "claude-code": ClaudeCode,
    "codex": Codex,
    "gemini-cli": GeminiCli,
    "aider": Aider,
    "cline": Cline,
    "opencode": OpenCode,
}
"""The coding-agent formats, by name."""

BytesProgress = Callable[[int, int], None]
"""Called with ``(bytes_read, bytes_total)`` as a transcript is read."""

DEFAULT_BATCH = 1000


@dataclass
class SessionImport:
    """What importing a transcript did to one session."""

    session_id: str
    key: str
    format: str
    path: str
    events: int
    """Events appended by this import."""
    condensations: int
    """Condensations among them."""
    status: Literal["created", "updated", "up to date"]
    head_seq: int
    """The session's head after the import."""
    parent_id: str | None = None
    """The main session, for a subagent's child session."""
    pending_line: int | None = None
    """A last line still being written (no newline yet), left for a later import."""

    @property
    def created(self) -> bool:
        return self.status == "created"

    @property
    def updated(self) -> bool:
        return self.status == "updated"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``created`` and ``updated`` flags beside ``status``."""
        return asdict(self) | {"created": self.created, "updated": self.updated}


def detect_agent_format(path: str | Path) -> str | None:
    """The coding-agent format of a transcript from its first records, or ``None``."""
    p = Path(path)
    if p.suffix == ".md":
        return "aider" if looks_aider(p) else None
    if is_sqlite(p):
        return "opencode" if is_opencode_db(p) else None
    if looks_cline(p):
        return "cline"
    if opencode_kind(p) is not None:
        return "opencode"
    if p.suffix == ".json":
        try:
            next(json_session_records(p))
            return "gemini-cli"
        except ImportFormatError:
            return None
        except StopIteration:  # pragma: no cover - the generator always yields the header
            return None
    try:
        records = first_records(p, limit=8)
    except ImportFormatError:
        return None
    if looks_gemini(records):
        return "gemini-cli"
    if looks_codex(records):
        return "codex"
    if looks_claude_code(records):
        return "claude-code"
    return None


def change_stamp(path: str | Path, fmt: str) -> tuple[int, ...]:
    """What tells that a transcript changed since it was last looked at: its size and
    modification time, for an OpenCode storage session the time of the files beside it
    that its messages are added to, and for OpenCode's database its write-ahead log."""
    st = Path(path).stat()
    extra: tuple[int, ...] = ()
    if fmt == "opencode" and is_sqlite(path):
        extra = db_stamp(path)
    elif fmt == "opencode" and opencode_kind(path) == "storage":
        extra = (storage_stamp(path),)
    return (st.st_size, st.st_mtime_ns, *extra)


def source_records(
    path: Path, fmt: str, counter: list[int], db: DbSession | None = None
) -> Iterator[tuple[int, Any] | Torn]:
    if db is not None:
        yield from numbered(db.messages())
        return
    if fmt == "aider":
        yield from read_lines(path, counter)
        return
    if fmt == "cline":
        counter[0] = path.stat().st_size
        yield from history_records(path)
        return
    if fmt == "opencode":
        yield from opencode_records(path, counter)
        return
    if fmt == "gemini-cli" and _is_single_json(path):
        counter[0] = path.stat().st_size
        yield from json_session_records(path)
        return
    yield from read_records(path, counter)


def _is_single_json(path: Path) -> bool:
    if path.suffix == ".json":
        return True
    first = first_records(path, limit=1)
    return bool(first) and isinstance(first[0], dict) and isinstance(first[0].get("messages"), list)


def first_time(path: Path) -> datetime | None:
    """The first timestamp among the first records: the time of records that carry none
    before it (a Claude Code ``summary``, a Gemini CLI header), so that the session's
    events keep the transcript's times rather than the time of the import. A transcript
    whose first records carry no time (a Claude Code file of ``summary`` lines only) takes
    the file's modification time: two imports of one file make the same events."""
    if path.suffix == ".md":
        return first_header_time(path)
    if opencode_kind(path) is not None:
        return None  # the converter takes the session's own creation time
    if path.name == "api_conversation_history.json":
        for _, rec in history_records(path):
            ts = rec.get("ts") if isinstance(rec, dict) else None
            if isinstance(ts, int | float) and not isinstance(ts, bool):
                return datetime.fromtimestamp(ts / 1000, UTC)
    else:
        for rec in leading_records(path, 200):
            if isinstance(rec, dict):
                when = parse_when(rec.get("timestamp") or rec.get("startTime"))
                if when is not None:
                    return when
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def peek_source_id(path: Path, fmt: str) -> str:
    """The source session id from the first records (the file's stem when none says)."""
    if fmt == "aider":
        return path_digest(path)
    if fmt == "cline":
        return path.parent.name
    if fmt == "opencode":
        return str(session_info(path)["id"])
    if fmt == "gemini-cli" and _is_single_json(path):
        header = next(json_session_records(path))[1]
        return str(header["sessionId"])
    if fmt == "claude-code" and path.parent.name == "subagents" and path.name.startswith("agent-"):
        return path.parent.parent.name  # 2.x: <sessionId>/subagents/agent-*.jsonl
    for rec in leading_records(path, 200):
        if not isinstance(rec, dict):
            continue
        if fmt == "claude-code" and isinstance(rec.get("sessionId"), str):
            return rec["sessionId"]
        if fmt == "codex" and (sid := codex_session_id(rec)) is not None:
            return sid
        if fmt == "gemini-cli" and looks_gemini_header(rec):
            return str(rec["sessionId"])
    return path.stem


class Target:
    """One session the transcript fills: the main one or a subagent's child."""

    def __init__(self, session: Session | None, name: str | None) -> None:
        self.session = session
        self.name = name
        self.exists = session is not None  # in the store, or created by this import
        self.start = session.head_seq if session else 0  # events it held before
        self.head = self.start
        self.buffer: list[Any] = []
        self.appended = 0
        self.condensations = 0
        self.created = False
        self.last_src: dict[str, Any] | None = None  # source of the newest stored event
        self.last_event: Any = None


@dataclass
class Plan:
    """What the store holds of a transcript's sessions, read before it is converted: its
    key, the sessions it fills already (by child name, the main one under ``None``) and
    the source line their newest events account for."""

    key: str
    targets: dict[str | None, Target]
    resume: int


def import_transcript(
    store: EventStore,
    path: str | Path,
    format: str | None = None,
    *,
    final: bool = True,
    progress: BytesProgress | None = None,
    batch_size: int = DEFAULT_BATCH,
    seen: dict[str, tuple[Any, ...]] | None = None,
) -> list[SessionImport]:
    """Import (or bring up to date) one coding-agent transcript.

    Args:
        store: Where to write.
        path: The transcript (a ``.jsonl`` file, a Gemini CLI ``.json`` session, or
            OpenCode's SQLite database: every session in it).
        format: One of :data:`AGENT_FORMATS` (``claude-code``, ``codex``, ``gemini-cli``,
            ``aider``, ``cline``, ``opencode``); detected from the content when omitted.
        final: The file is complete (``import``). ``False`` (``watch``) keeps back a
            compaction marker whose summary is not written yet.
        progress: Called with ``(bytes_read, bytes_total)`` as the file is read (for a
            database, ``(sessions_read, sessions)``).
        batch_size: Events per append.
        seen: For OpenCode's database, what each session looked like when this import last
            read it (kept by the caller between imports, as ``watch`` does; updated here):
            a session unchanged since is not read again, nor reported.

    Returns:
        One entry per session the transcript fills (the main one first, then subagents;
        for aider, one per chat; for a database, one per session in it, oldest first).

    Raises:
        ImportFormatError: Not a transcript of a known format (the message names the
            formats tried), the file no longer matches what an earlier import stored
            (nothing is written then), or an append failed (the batches before it are
            stored, and importing again resumes after them).
    """
    p = Path(path)
    fmt = checked_format(p, format)
    with fewer_collections():
        return _import_file(store, p, fmt, final, progress, batch_size, seen)


def checked_format(p: Path, format: str | None) -> str:
    """The format of the transcript at ``p``: ``format`` when given (and the content does
    not say another), else the one detected; :class:`ImportFormatError` when it is none,
    or ``p`` is not a file."""
    refused = not_opencode_error(p)
    if refused is not None:
        raise refused
    fmt = format or detect_agent_format(p)
    if fmt is None:
        raise ImportFormatError(
            f"{p}: not a coding-agent transcript (tried {', '.join(AGENT_FORMATS)}); "
            "pass --format to say which it is"
        )
    if fmt not in AGENT_FORMATS:
        raise ImportFormatError(f"{p}: unknown format {fmt!r} (known: {', '.join(AGENT_FORMATS)})")
    if not p.is_file():
        raise ImportFormatError(f"{p}: not a file")
    found = detect_agent_format(p) if format is not None else None
    if found not in (None, fmt):
        raise ImportFormatError(
            f"{p}: this file is in the {found} format, not {fmt}; omit --format to detect it"
        )
    return fmt


def is_database(p: Path, fmt: str) -> bool:
    """Whether ``p`` is OpenCode's database (many sessions, read by :func:`import_transcript`
    in the writing process)."""
    return fmt == "opencode" and is_sqlite(p)


def _import_file(
    store: EventStore,
    p: Path,
    fmt: str,
    final: bool,
    progress: BytesProgress | None,
    batch_size: int,
    seen: dict[str, tuple[Any, ...]] | None,
) -> list[SessionImport]:
    """:func:`import_transcript` of a file whose format is known."""
    if is_database(p, fmt):
        stamps = session_stamps(p)
        unread = newer_model_only(p)
        skip = set(unread)
        out: list[SessionImport] = []
        for n, (sid, stamp) in enumerate(stamps, 1):
            if sid not in skip and (seen is None or seen.get(sid) != stamp):
                out.extend(_import_one(store, p, fmt, DbSession(p, sid), final, None, batch_size))
                if seen is not None:
                    seen[sid] = stamp
            if progress:
                progress(n, len(stamps))
        if unread:
            raise newer_model_error(p, unread)
        return out
    return _import_one(store, p, fmt, None, final, progress, batch_size)


def _converter(p: Path, fmt: str, db: DbSession | None) -> Converter:
    if db is not None:
        return OpenCode(p, info=db.info())
    conv = AGENT_FORMATS[fmt](p)
    conv.when = first_time(p) or conv.when
    return conv


def plan_import(store: EventStore, p: Path, fmt: str, db: DbSession | None = None) -> Plan:
    """What the store holds of the sessions the transcript at ``p`` fills (see
    :class:`Plan`): read before it is converted."""
    key = f"{fmt}:{db.id if db is not None else peek_source_id(p, fmt)}"
    file = p.name
    multi = AGENT_FORMATS[fmt].multi
    main = None if multi else _by_key(store, key)
    targets: dict[str | None, Target] = {None: Target(main, None)}
    resume = 0
    n = 1
    while multi and (found := _by_key(store, f"{key}#{n}")) is not None:
        targets[str(n)] = Target(found, str(n))
        resume = max(resume, _resume_point(store, targets[str(n)], file))
        n += 1
    if main is not None:
        resume = _resume_point(store, targets[None], file)
        for child in store.list_sessions(parent_id=main.id, limit=None):
            sub = (child.metadata or {}).get("subagent")
            if isinstance(sub, dict) and isinstance(sub.get("name"), str):
                targets[sub["name"]] = Target(child, sub["name"])
                resume = max(resume, _resume_point(store, targets[sub["name"]], file))
    return Plan(key, targets, resume)


def _import_one(
    store: EventStore,
    p: Path,
    fmt: str,
    db: DbSession | None,
    final: bool,
    progress: BytesProgress | None,
    batch_size: int,
) -> list[SessionImport]:
    """One transcript, or one session of a database, into its sessions."""
    plan = plan_import(store, p, fmt, db)
    sink = StoreSink(store, str(p))
    writer, pending = convert_into(p, fmt, db, plan, sink, final, progress, batch_size)
    return results(plan.targets, plan.key, writer.conv.multi, fmt, str(p), pending)


def convert_into(
    p: Path,
    fmt: str,
    db: DbSession | None,
    plan: Plan,
    sink: Sink,
    final: bool,
    progress: BytesProgress | None,
    batch_size: int,
) -> tuple[_Writer, int | None]:
    """Convert the transcript at ``p`` and hand ``sink`` the sessions to create and the
    batches of new events to append, in order (the events the plan's sessions hold
    already are compared, not sent); the writer, and the line still being written if
    any."""
    conv = _converter(p, fmt, db)
    conv.resume = plan.resume
    total = p.stat().st_size
    counter = [0]
    pending: int | None = None
    writer = _Writer(sink, conv, plan.key, plan.targets, batch_size)
    for rec in source_records(p, fmt, counter, db):
        if isinstance(rec, Torn):
            pending = rec.line
            break
        conv.push(*rec)
        writer.take(conv.drain())
        if progress:
            progress(counter[0], total)
    conv.finish(final=final and pending is None)
    writer.take(conv.drain())
    writer.flush_all()
    writer.check_complete()
    if progress:
        progress(total, total)
    return writer, pending


def convert_transcript(path: str | Path, fmt: str) -> list[Transcript]:
    """A coding-agent transcript converted without a store: the main session's events,
    then one transcript per subagent (for inspection and tests); for OpenCode's database,
    each of its sessions."""
    p = Path(path)
    refused = not_opencode_error(p)
    if refused is not None:
        raise refused
    if fmt == "opencode" and is_sqlite(p):
        unread = newer_model_only(p)
        if unread:
            raise newer_model_error(p, unread)
        return [t for sid in session_ids(p) for t in _convert_one(p, fmt, DbSession(p, sid))]
    return _convert_one(p, fmt, None)


def _convert_one(p: Path, fmt: str, db: DbSession | None) -> list[Transcript]:
    conv = _converter(p, fmt, db)
    items: list[Item] = []
    for rec in source_records(p, fmt, [0], db):
        if isinstance(rec, Torn):
            break
        conv.push(*rec)
        items.extend(conv.drain())
    conv.finish()
    items.extend(conv.drain())
    key = f"{fmt}:{db.id if db is not None else peek_source_id(p, fmt)}"
    out = [
        Transcript(
            events=[i.event for i in items if i.child is None],
            title=conv.title,
            metadata={**conv.metadata, "import": {"format": fmt, "file": conv.file, "key": key}},
        )
    ]
    for name, info in conv.children.items():
        out.append(
            Transcript(
                events=[i.event for i in items if i.child == name],
                title=info.title,
                metadata={
                    **info.metadata,
                    "import": {"format": fmt, "file": conv.file, "key": f"{key}/{name}"},
                },
            )
        )
    return out


def _by_key(store: EventStore, key: str) -> Session | None:
    try:
        return store.get_session_by_key(key)
    except NotFoundError:
        return None


def _resume_point(store: EventStore, target: Target, file: str) -> int:
    """The last source line of ``file`` the session's newest event accounts for."""
    session = target.session
    if session is None or session.head_seq == 0:
        return 0
    tail = store.read_tail(session.id, 1)
    src = source_of(tail[0].event) if tail else None
    if src is None or src.get("file") != file or not isinstance(src.get("upto"), int):
        return 0
    target.last_src, target.last_event = src, tail[0].event
    return int(src["upto"])


def _content(event: Any) -> Any:
    # A condensation's summary_tokens is counted by the store when the importer left it 0.
    return event.model_dump(
        mode="json", exclude={"id", "created_at", "summary_tokens"}, exclude_none=True
    )


class Sink(Protocol):
    """Where a converted transcript's sessions are created and its new events go: the
    store itself (:class:`StoreSink`), or the process that writes them (see
    :mod:`eventstore.importers._pipeline`)."""

    def create(
        self,
        target: Target,
        title: str | None,
        metadata: dict[str, Any],
        parent: Target | None,
        key: str,
    ) -> None:
        """Create ``target``'s session (a fork at seq 0 of ``parent``'s, when given)."""

    def append(self, target: Target, events: list[Any], key: str) -> int:
        """Append ``events`` after ``target.head``; the new head."""


class StoreSink:
    """A :class:`Sink` writing to the store, one transaction per session and per batch."""

    def __init__(self, store: EventStore, path: str) -> None:
        self.store, self.path = store, path

    def create(
        self,
        target: Target,
        title: str | None,
        metadata: dict[str, Any],
        parent: Target | None,
        key: str,
    ) -> None:
        parent_id = parent.session.id if parent is not None and parent.session else None
        try:
            # A child is a fork at seq 0 of the main session (it shares none of its events)
            # that also has a key; no public method makes both at once.
            with self.store._tx(write=True) as conn:
                target.session = _sql.create_session(
                    conn,
                    self.store.tenant,
                    session_id=None,
                    user_id=None,
                    title=title,
                    metadata=metadata,
                    parent_id=parent_id,
                    fork_seq=0 if parent is not None else None,
                    key=key,
                )
        except EventStoreError as exc:
            raise ImportFormatError(
                f"{self.path}: cannot create the session {key!r} ({exc}); "
                "another import of it may be running: run this one again"
            ) from exc

    def append(self, target: Target, events: list[Any], key: str) -> int:
        return self.append_encoded(target, events, key, len(events))

    def append_encoded(self, target: Target, batch: Any, key: str, count: int) -> int:
        """Append a batch of events, or of their encodings (see
        :func:`eventstore._append.append_encoded`); the new head."""
        assert target.session is not None
        try:
            if count and isinstance(batch[0], Encoded):
                done = _append.append_encoded(
                    self.store, target.session.id, batch, target.head, None
                )
                return done.head_seq if isinstance(done, AppendResult) else done[1]
            return self.store.append_result(
                target.session.id, batch, expected_seq=target.head
            ).head_seq
        except ConflictError as exc:
            raise ImportFormatError(
                f"{self.path}: another import is writing {key!r} at the same time; run "
                "this one again"
            ) from exc
        except EventStoreError as exc:
            raise append_failed(self.path, key, target.head, count, exc) from exc


def append_failed(path: str, key: str, head: int, count: int, exc: Exception) -> ImportFormatError:
    """The error of an append of ``count`` events after ``head`` that ``exc`` refused."""
    return ImportFormatError(
        f"{path}: events {head + 1}..{head + count} of {key!r}: {exc}; the events before "
        "them were imported, and importing again resumes there"
    )


def target_key(key: str, name: str | None, multi: bool) -> str:
    """The key of the session ``name`` of a transcript keyed ``key`` (the main one for
    ``None``)."""
    if name is None:
        return key
    return f"{key}#{name}" if multi else f"{key}/{name}"


class _Writer:
    def __init__(
        self,
        sink: Sink,
        conv: Converter,
        key: str,
        targets: dict[str | None, Target],
        batch_size: int,
    ) -> None:
        self.sink, self.conv, self.key = sink, conv, key
        self.targets = targets
        self.batch_size = max(1, batch_size)

    def take(self, items: list[Item]) -> None:
        for item in items:
            target = self.targets.get(item.child)
            if target is None:
                target = self.targets[item.child] = Target(None, item.child)
            if item.seq <= target.start:
                if item.seq == target.start and target.last_event is not None:
                    # The newest stored event must come from the same place in the file.
                    if _content(item.event) != _content(target.last_event):
                        self._rewritten(target, item.seq)
                continue
            target.buffer.append(item.event)
            if isinstance(item.event, Condensation):
                target.condensations += 1
            if len(target.buffer) >= self.batch_size:
                self._flush(target)

    def _rewritten(self, target: Target, seq: int, *, shorter: bool = False) -> None:
        where = f"session {target.session.id}" if target.session else "its session"
        what = (
            f"it makes only {seq} events"
            if shorter
            else f"event {seq} it makes differs from the stored one"
        )
        raise ImportFormatError(
            f"{self.conv.path}: the file no longer matches what was imported into {where} "
            f"(key {self._key(target)!r}): {what}, the session holds {target.start}. The "
            "transcript was rewritten; delete that session to import it afresh"
        )

    def _key(self, target: Target) -> str:
        return target_key(self.key, target.name, self.conv.multi)

    def _session(self, target: Target) -> None:
        if target.exists:
            return
        conv = self.conv
        parent: Target | None = None
        if target.name is None:
            title, meta = conv.title, dict(conv.metadata)
        else:
            info = conv.children.get(target.name)
            title = info.title if info else target.name
            meta = dict(info.metadata) if info else {"subagent": {"name": target.name}}
            if not conv.multi:
                parent = self.targets[None]
                self._session(parent)
        meta["import"] = {"format": conv.format, "file": conv.file, "key": self._key(target)}
        self.sink.create(target, title, meta, parent, self._key(target))
        target.exists = target.created = True

    def _flush(self, target: Target) -> None:
        if not target.buffer:
            return
        self._session(target)
        events, target.buffer = target.buffer, []
        target.head = self.sink.append(target, events, self._key(target))
        target.appended += len(events)

    def flush_all(self) -> None:
        for target in list(self.targets.values()):
            self._flush(target)
        if not self.targets[None].exists and not self.conv.multi:
            self._session(self.targets[None])  # the main session exists even when empty

    def check_complete(self) -> None:
        """Each session this file filled holds no more than the file makes: else the file
        was cut short. (A session whose newest event came from another file, a subagent's
        own transcript, is not this file's to judge.)"""
        for name, target in self.targets.items():
            made = self.conv.seqs.get(name, 0)
            if target.start > made and target.last_src is not None:
                self._rewritten(target, made, shorter=True)


def results(
    targets: dict[str | None, Target],
    key: str,
    multi: bool,
    fmt: str,
    path: str,
    pending: int | None,
) -> list[SessionImport]:
    """What the import did to each of its sessions."""
    out = []
    main = targets[None].session
    for target in targets.values():
        s = target.session
        if s is None:
            continue
        if target.created:
            status: Literal["created", "updated", "up to date"] = "created"
        else:
            status = "updated" if target.appended else "up to date"
        out.append(
            SessionImport(
                session_id=s.id,
                key=target_key(key, target.name, multi),
                format=fmt,
                path=path,
                events=target.appended,
                condensations=target.condensations,
                status=status,
                head_seq=target.head,
                parent_id=(
                    main.id if main is not None and target.name is not None and not multi else None
                ),
                pending_line=pending,
            )
        )
    return out


def transcripts_under(root: str | Path) -> list[Path]:
    """The candidate transcript files under a directory, main sessions before subagents'
    (a subagent's child session hangs off its main session)."""
    found = [
        p
        for p in Path(root).rglob("*")
        if p.is_file()
        and not storage_message_files(p)
        and (
            p.suffix in (".jsonl", ".json")
            or (p.suffix == ".md" and _history_name(p.name))
            or (p.suffix == ".db" and is_opencode_db(p))
        )
    ]
    return sorted(found, key=lambda p: (_is_subagent_file(p), str(p)))


def _history_name(name: str) -> bool:
    return "chat.history" in name or "chat-history" in name


def _is_subagent_file(path: Path) -> bool:
    return path.name.startswith("agent-") or "subagents" in path.parts


__all__ = [
    "AGENT_FORMATS",
    "InvalidLine",
    "change_stamp",
    "SessionImport",
    "detect_agent_format",
    "import_transcript",
    "transcripts_under",
]
