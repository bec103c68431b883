"""The event store: sessions and their append-only logs, sync and async.

Open one by URL (or ``EVENTSTORE_URL``, or ``./eventstore.db``)::

    store = EventStore("sqlite:///agent.db")
    s = store.create_session(title="fix the login bug")
    store.append(s.id, [Message.user("hello")], expected_seq=0)

:class:`EventStore` is the one implementation: thin methods over the statement layer
(:mod:`eventstore._sql`), the pure view assembly (:mod:`eventstore.views`) and the feature
mixins (:mod:`._sessions`, :mod:`._runtime`, :mod:`._feed`, :mod:`._search`).
:class:`AsyncEventStore` is derived from it method by method: each coroutine runs the
synchronous method, a whole transaction, in a worker thread: one body per operation (the
surfaces cannot drift; a test compares them), usable from any thread and event loop.

Durability: SQLite runs in WAL mode with ``synchronous=FULL`` (an acknowledged append
survives a power cut); ``sqlite_synchronous="NORMAL"`` may lose the last transactions on
power loss, never on a process crash.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from . import _append, _sql
from ._append import guarded
from ._append.encode import encode_all
from ._append.store import DriverSlot, HeadCache
from ._checks import MAX_COLUMN_INT, check_int
from ._citus_direct import OPTION, DirectRoutes, split_option
from ._engine import (
    DEFAULT_LOCK_TIMEOUT_MS,
    DEFAULT_URL,
    Timeouts,
    configure_postgres,
    configure_sqlite,
    display_url,
    map_db_error,
    resolve_url,
)
from ._features import (
    DEFAULT_READ_WAIT_MS,
    FeedMethods,
    PurgeMethods,
    ReplicaMethods,
    RuntimeMethods,
    SearchMethods,
    SessionMethods,
    afollow,
    audit_for_async,
    read_event_expanded,
    read_page_expanded,
)
from ._features import purge as _purge_rows
from ._sql import blobs
from ._sql.view_rows import view_rows, view_rows_at_once
from ._twins import awaitable, streaming
from .codec import Encoded, check_text
from .distribution import is_distributed, routes_appends
from .errors import (
    ConfigurationError,
    ConnectionDropped,
    EventStoreError,
    InvalidEventError,
    NotFoundError,
    ReadAgain,
)
from .events import Condensation, Event, LLMCall, Message, Part, PartRef
from .migrate import ensure_schema
from .records import AppendResult, Session, StoredEvent, VerifyReport
from .tokens import HeuristicTokenCounter, TokenCounter
from .verify import ChainCheck, seal_event
from .views import View, ViewOptions, assemble, calibrate, calibration_floor, llm_call_events

__all__ = [
    "EventStore",
    "AsyncEventStore",
    "DEFAULT_URL",
    "resolve_url",
    "record_llm_call",
    "calibrated_tokens",
]

DEFAULT_MAX_EVENT_BYTES = 32 * 1024 * 1024
DEFAULT_BLOB_THRESHOLD = 64 * 1024
_MAX_INT = 2**63 - 1  # the widest integer both backends bind
T = TypeVar("T")


class EventStore(
    SessionMethods, RuntimeMethods, FeedMethods, SearchMethods, PurgeMethods, ReplicaMethods
):
    """A synchronous event store on SQLite or Postgres.

    Args:
        url: Database URL; defaults to ``EVENTSTORE_URL`` or ``sqlite:///eventstore.db``.
            On Citus, ``?citus_direct=true`` sends each session's routed appends and
            views straight to the worker that holds its shard (``docs/scaling.md``).
        tenant: The tenant every call is scoped to.
        token_counter: Counts part tokens at append time (default: four characters a
            token; :func:`~eventstore.tokens.bounded_token_counter` bounds that by tiktoken
            ``cl100k_base``, at a tokenizer pass over every appended text).
        max_event_bytes: Largest stored payload of a single event (attachments included).
        blob_threshold: Attachments of this many bytes or more are stored once per tenant
            by content hash and named by reference in the payload (``None``: always
            inline). Reads and views put the bytes back.
        upgrade: Upgrade an empty or older schema on open. Default: yes on SQLite, no on
            Postgres (there a :class:`SchemaError` names the command to run).
        sqlite_synchronous: ``FULL`` (default, power-loss safe) or ``NORMAL`` (faster).
        busy_timeout_ms: How long a SQLite writer waits for the lock.
        lock_timeout_ms: How long a Postgres write waits for a row lock another transaction
            holds (``lock_timeout``). Past either wait the write raises
            :class:`StorageBusyError` and nothing is written; retry it.
        engine: Share an existing engine instead of creating one.
        read_url: A Postgres streaming replica of ``url`` for views and reads, with
            read-your-writes: a read waits up to ``read_wait_ms`` (200) for the replica to
            replay this store's writes, else reads the primary (``docs/scaling.md``).
        **engine_kwargs: Passed to :func:`sqlalchemy.create_engine`.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        tenant: str = "default",
        token_counter: TokenCounter | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        upgrade: bool | None = None,
        sqlite_synchronous: str = "FULL",
        busy_timeout_ms: int = 30_000,
        lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
        blob_threshold: int | None = DEFAULT_BLOB_THRESHOLD,
        engine: Engine | None = None,
        read_url: str | None = None,
        read_wait_ms: int = DEFAULT_READ_WAIT_MS,
        **engine_kwargs: Any,
    ) -> None:
        self._setup(
            url,
            tenant=tenant,
            token_counter=token_counter,
            max_event_bytes=max_event_bytes,
            upgrade=upgrade,
            sqlite_synchronous=sqlite_synchronous,
            busy_timeout_ms=busy_timeout_ms,
            lock_timeout_ms=lock_timeout_ms,
            blob_threshold=blob_threshold,
            engine=engine,
            engine_kwargs=engine_kwargs,
            read_url=read_url,
            read_wait_ms=read_wait_ms,
        )
        self._open_schema()

    def _setup(
        self,
        url: str | None,
        *,
        tenant: str,
        token_counter: TokenCounter | None,
        max_event_bytes: int,
        upgrade: bool | None,
        sqlite_synchronous: str,
        busy_timeout_ms: int,
        lock_timeout_ms: int,
        blob_threshold: int | None,
        engine: Engine | None,
        engine_kwargs: dict[str, Any],
        read_url: str | None = None,
        read_wait_ms: int = DEFAULT_READ_WAIT_MS,
    ) -> None:
        # Everything but I/O: the async store calls this on the event loop and opens the
        # schema later, in a worker thread.
        if not tenant or not isinstance(tenant, str):
            raise ConfigurationError("tenant: must be a non-empty string")
        check_text("tenant", tenant, 255)
        if not isinstance(max_event_bytes, int) or max_event_bytes < 1:
            raise ConfigurationError(
                f"max_event_bytes: must be a positive integer, got {max_event_bytes!r}"
            )
        for name, ms, low in (
            ("busy_timeout_ms", busy_timeout_ms, 0),
            ("lock_timeout_ms", lock_timeout_ms, 1),  # 0 would mean "wait forever"
        ):
            if not isinstance(ms, int) or isinstance(ms, bool) or not low <= ms <= MAX_COLUMN_INT:
                raise ConfigurationError(
                    f"{name}: must be {low}..{MAX_COLUMN_INT} milliseconds, got {ms!r}"
                )
        self._timeouts = Timeouts(busy_timeout_ms, lock_timeout_ms)
        self.tenant = tenant
        self.token_counter: TokenCounter = token_counter or HeuristicTokenCounter()
        self.max_event_bytes = max_event_bytes
        bad = not isinstance(blob_threshold, int) or isinstance(blob_threshold, bool)
        if blob_threshold is not None and (bad or blob_threshold < 1):
            raise ConfigurationError(
                f"blob_threshold: a positive number of bytes or None, not {blob_threshold!r}"
            )
        self.blob_threshold = blob_threshold
        self._heads = HeadCache()  # the head this store's appends left, per session
        self._schema_lock = threading.Lock()
        self._schema_pending: bool | None = None  # the upgrade flag, until the schema is open
        if engine is None:
            self.url = resolve_url(url)
            if sqlite_synchronous.upper() not in ("FULL", "NORMAL", "EXTRA", "OFF"):
                raise ConfigurationError(
                    "sqlite_synchronous must be FULL, NORMAL, EXTRA or OFF, "
                    f"got {sqlite_synchronous!r}"
                )
            engine_url, direct = split_option(self.url)
            engine = create_engine(engine_url, **engine_kwargs)
            if engine.dialect.name == "sqlite":
                configure_sqlite(engine, sqlite_synchronous.upper(), busy_timeout_ms)
            elif engine.dialect.name == "postgresql":
                configure_postgres(engine, lock_timeout_ms)
            self._schema_pending = engine.dialect.name == "sqlite" if upgrade is None else upgrade
            self._owns_engine = True
        else:
            self.url = engine.url.render_as_string(hide_password=False)
            self._owns_engine = False
            direct = False
        # A caller's Postgres engine has no lock_timeout of ours: set it per write.
        self._lock_local = not self._owns_engine and engine.dialect.name == "postgresql"
        # Whether appends go to distributed tables through the function Citus routes
        # (see eventstore.distribution.routes_appends): known when the schema is opened,
        # or, on a caller's engine, from the first write.
        self._routed = False
        self.engine = engine
        self.dialect: str = engine.dialect.name
        self._driver_slot = DriverSlot.for_store(self, engine, self._owns_engine)
        self._replica = self._open_replica(read_url, read_wait_ms, lock_timeout_ms)
        if direct and self._replica is not None:
            raise ConfigurationError(
                f"{OPTION}: not with read_url (a worker's write position means nothing to "
                "the coordinator's replica)"
            )
        # Routed calls straight to the session's worker (see eventstore._citus_direct).
        self._direct = DirectRoutes(engine) if direct else None

    def _open_schema(self) -> None:
        if self._schema_pending is None:
            return
        with self._schema_lock:
            if self._schema_pending is None:
                return
            try:
                ensure_schema(
                    self.engine,
                    upgrade_if_behind=self._schema_pending,
                    display_url=display_url(self.url),
                )
                if self.dialect == "postgresql":
                    with self.engine.connect() as conn:
                        distributed = is_distributed(conn)
                        self._routed = routes_appends(conn)
                    # On Citus the connection's lock_timeout stays on the coordinator:
                    # each write sets it for its transaction instead (see _tx).
                    self._lock_local = self._lock_local or distributed
            except DBAPIError as exc:
                self.engine.dispose()
                raise map_db_error(exc, self._timeouts) from None
            except BaseException:
                self.engine.dispose()
                raise
            self._schema_pending = None
        self._finish_interrupted_purges()

    def _finish_interrupted_purges(self) -> None:
        """Complete the purges a killed process left unfinished (see
        :meth:`complete_purges`), unless this store cannot write (a read-only file, a
        replica's role): ``verify`` reports them until a writable store opens."""
        try:
            self.complete_purges()
        except (EventStoreError, DBAPIError):
            pass

    def with_tenant(self, tenant: str) -> EventStore:
        """The same database, scoped to another tenant (shares the engine)."""
        self._open_schema()
        other = EventStore(
            tenant=tenant,
            token_counter=self.token_counter,
            max_event_bytes=self.max_event_bytes,
            blob_threshold=self.blob_threshold,
            engine=self.engine,
        )
        other._timeouts, other._lock_local = self._timeouts, self._lock_local
        other._routed = self._routed
        other._direct = self._direct
        other._replica = self._replica
        return other

    def close(self) -> None:
        """Release pooled connections."""
        if self._owns_engine:
            guarded.close(self)
            if self._direct is not None:
                self._direct.close()
            self.engine.dispose()
            if self._replica is not None:
                self._replica.engine.dispose()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self, write: bool = False) -> Iterator[Connection]:
        self._open_schema()
        committing = False
        try:
            with self.engine.connect() as conn:
                if write and self.dialect == "sqlite":
                    conn = conn.execution_options(sqlite_begin="IMMEDIATE")
                with conn.begin():
                    if write and self._lock_local:
                        sql = f"SET LOCAL lock_timeout = {self._timeouts.lock_timeout_ms}"
                        if is_distributed(conn):
                            # Citus writes on its own connections to the workers: a
                            # SET LOCAL reaches them only when it is told to pass it on
                            # (both in one round trip: a query without parameters may
                            # hold two statements).
                            sql = f"SET LOCAL citus.propagate_set_commands = local; {sql}"
                        conn.exec_driver_sql(sql)
                    yield conn
                    committing = True
                if write and self._replica is not None:
                    self._replica.note_write(conn)  # after the commit: reads wait for it
        except DBAPIError as exc:
            error = map_db_error(exc, self._timeouts)
            if isinstance(error, ReadAgain):
                if not committing:
                    # Lost before the commit was sent: the server rolled it back.
                    error.rolled_back = True
                elif write:
                    error = ConnectionDropped(
                        f"{error} (the connection was lost while the write committed: it "
                        "may have been kept; read the session's head to know, or repeat an "
                        "append with its idempotency key, which is safe)"
                    )
            raise error from None
        except OverflowError:
            raise InvalidEventError(
                f"a number is too large for the database (the limit is {_MAX_INT})"
            ) from None

    def _run(self, fn: Callable[..., T], *args: Any, write: bool = False, **kw: Any) -> T:
        """``fn(conn, ...)`` in one transaction, made again once when the server closed
        its connection: a read always, a write if lost before its commit was sent."""
        try:
            with self._tx(write) as conn:
                return fn(conn, *args, **kw)
        except ReadAgain as exc:
            if write and not exc.rolled_back:
                raise
        with self._tx(write) as conn:
            return fn(conn, *args, **kw)

    def _encode(self, evts: Sequence[Event | dict[str, Any]]) -> list[Encoded]:
        """``evts`` checked and encoded, all of them now (for writes in a transaction of
        the caller's: the run queue, imports)."""
        return encode_all(evts, self.token_counter, self.blob_threshold, self.max_event_bytes)

    # -- sessions

    def create_session(
        self,
        *,
        user_id: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
        key: str | None = None,
    ) -> Session:
        """Create an empty session for this tenant.

        ``key`` is your own name for it (a framework's session id, a ticket number; any
        length), unique per tenant and user: see :meth:`get_session_by_key`. A chosen
        ``session_id`` must be a UUID. Either one taken raises :class:`SessionExistsError`.
        """
        return self._run(
            _sql.create_session,
            self.tenant,
            session_id=session_id,
            user_id=user_id,
            title=title,
            metadata=metadata,
            key=key,
            write=True,
        )

    def get_session(self, session_id: str) -> Session:
        """The session, or :class:`NotFoundError` (also for another tenant's session)."""
        return self._read_run(_sql.get_session, self.tenant, session_id)

    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        limit: int | None = 50,
        offset: int = 0,
        parent_id: str | None = None,
        include_deleted: bool = False,
    ) -> list[Session]:
        """Sessions newest first; ``limit=None`` (or 0) returns all. ``parent_id`` lists the
        forks of one session; ``include_deleted`` adds deleted ones (for audits)."""
        check_int("limit", limit)
        check_int("offset", offset)
        return self._run(
            _sql.list_sessions,
            self.tenant,
            user_id=user_id,
            limit=limit,
            offset=offset,
            parent_id=parent_id,
            include_deleted=include_deleted,
        )

    def head(self, session_id: str) -> int:
        """The session's newest seq (0 when empty)."""
        return self.get_session(session_id).head_seq

    def fork(self, session_id: str, at_seq: int, *, title: str | None = None, **kw: Any) -> Session:
        """A new session sharing this one's events up to ``at_seq`` without copying them.

        The fork's reads and views include the shared prefix; its appends go only to the
        fork. Forks of forks work the same way. Keyword options: ``session_id_new``,
        ``user_id``, ``metadata`` (default: the parent's).
        """
        check_int("at_seq", at_seq)
        return self._run(
            _sql.fork_session, self.tenant, session_id, at_seq, title=title, write=True, **kw
        )

    # -- events

    def append(
        self,
        session_id: str,
        events: Sequence[Event | dict[str, Any]],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> list[int]:
        """Append events atomically and return their seqs.

        Args:
            session_id: The session.
            events: Event models (or dicts that validate as events).
            expected_seq: The head the caller last saw; if it moved, nothing is written and
                :class:`ConflictError` carries the current head.
            idempotency_key: Repeating an append with the same key returns the seqs of the
                first one and writes nothing.
        """
        check_int("expected_seq", expected_seq)
        done = _append.append(self, session_id, events, expected_seq, idempotency_key)
        return done.seqs if isinstance(done, AppendResult) else done[0]

    def append_result(
        self,
        session_id: str,
        events: Sequence[Event | dict[str, Any]],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Like :meth:`append`, returning the new head and whether it was a replay."""
        check_int("expected_seq", expected_seq)
        done = _append.append(self, session_id, events, expected_seq, idempotency_key)
        if isinstance(done, AppendResult):
            return done
        seqs, head_seq, head_hash = done
        return AppendResult(seqs=seqs, head_seq=head_seq, head_hash=head_hash)

    def read(
        self,
        session_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        kinds: Iterable[str] | None = None,
    ) -> Iterator[StoredEvent]:
        """Stream events ``from_seq..to_seq`` (inclusive), a page at a time.

        The upper bound is fixed when iteration starts (the head at that moment), so later
        appends do not extend a running read. Memory stays bounded for any session size.
        """
        check_int("from_seq", from_seq, low=-_MAX_INT)
        check_int("to_seq", to_seq, low=-_MAX_INT)
        return self._read(session_id, from_seq, to_seq, None if kinds is None else list(kinds))

    def _read(
        self, session_id: str, from_seq: int, to_seq: int | None, kinds: list[str] | None
    ) -> Iterator[StoredEvent]:
        segments, head = self._read_run(_sql.lineage_and_head, self.tenant, session_id)
        last = head if to_seq is None else min(to_seq, head)
        after = max(from_seq, 1) - 1
        while after < last:
            page = self._read_run(read_page_expanded, self.tenant, segments, after, last, kinds)
            if not page:
                return
            yield from page
            after = page[-1].seq

    def latest_event(
        self, session_id: str, kind: str, *, as_of: int | None = None
    ) -> StoredEvent | None:
        """The newest event of ``kind`` at or before ``as_of`` (default: the head), or
        ``None``: one indexed probe, whatever the session's length."""
        check_int("as_of", as_of)
        return self._read_run(_sql.latest_of_kind, self.tenant, session_id, kind, as_of)

    def verify(
        self,
        session_id: str,
        *,
        fingerprints: bool = True,
        head_hash: str | None = None,
        key: bytes | None = None,
    ) -> VerifyReport:
        """Check the whole log in one pass (see :mod:`eventstore.verify`): gapless seqs,
        the hash chain up to the session's recorded head, the unhashed columns, compaction
        stamps and (with ``fingerprints``) every recorded view fingerprint.

        Args:
            head_hash: A head hash recorded outside the database (``report.head_hash``
                of an earlier run); it must be the hash of an event in the chain.
            key: Check the seals written by :meth:`seal` under this key.

        A deleted session is verified too: deleting is a tombstone, and audits read it.
        """
        with _sql.auditing():
            # A purge that commits during the walk (a page per transaction) rewrites
            # payloads the walk planned against the purge records it read first: when the
            # records changed and the walk found problems, walk again (a few times).
            for _attempt in range(3):
                purges = self._run(_purge_rows.purge_count, self.tenant, session_id)
                report = self._verify(session_id, fingerprints, head_hash, key)
                if (
                    report.ok
                    or self._run(_purge_rows.purge_count, self.tenant, session_id) == purges
                ):
                    break
            return report

    def _verify(
        self, session_id: str, fingerprints: bool, head_hash: str | None, key: bytes | None
    ) -> VerifyReport:
        segments, head, recorded = self._run(_sql.verify_head, self.tenant, session_id)
        report = VerifyReport(session_id=session_id, ok=True, head_seq=head)
        ahead = ["llm_call", "condensation"] if fingerprints else []
        early = [e for e in self.read(session_id, 1, head, ahead)] if ahead else []
        check = ChainCheck(
            report,
            {seg.owner: seg.hi for seg in segments},
            recorded,
            llm_calls=[e for e in early if isinstance(e.event, LLMCall)],
            condensations=[e for e in early if isinstance(e.event, Condensation)],
            fork_rows=self._run(_sql.fork_compaction_rows, segments),
            key=key,
            anchor=head_hash,
            load_blobs=lambda named: self._run(blobs.load, self.tenant, named),
            purges=self._run(_purge_rows.records, [seg.owner for seg in segments]),
            load_range=lambda owner, lo, hi: self._run(_purge_rows.range_rows, owner, lo, hi),
            unfinished=[
                (r.session_id, r.seq)
                for r in self._run(_purge_rows.pending, [seg.owner for seg in segments])
            ],
        )
        after = 0
        while after < head:
            rows, part_rows = self._run(_sql.read_verify_page, segments, after, head)
            if not rows:
                break
            check.feed(rows, part_rows)
            after = rows[-1].seq
        return check.finish(self.head(session_id))

    def seal(self, session_id: str, key: bytes) -> int:
        """Anchor the log to ``key``, a secret kept outside the database: appends an
        ``eventstore.seal`` event holding an HMAC of the current head hash. Whoever can
        write the database but lacks the key cannot forge a seal, so ``verify(...,
        key=key)`` catches a rewritten chain up to the newest seal. Returns its seq."""
        _segments, head, head_hash = self._run(_sql.verify_head, self.tenant, session_id)
        return self.append(session_id, [seal_event(key, head, head_hash)], expected_seq=head)[0]

    def stats(self) -> dict[str, Any]:
        """Totals for this tenant: sessions, events, bytes, tokens, events by kind."""
        return self._run(_sql.stats, self.tenant)

    # -- views

    def view(
        self, session_id: str, as_of: int | None = None, options: ViewOptions | None = None
    ) -> View:
        """The context the model sees at ``as_of`` (default: the head).

        Built from the latest condensation at or before ``as_of`` plus the tail after it, so
        its cost follows the tail, not the session. ``view(as_of=k)`` equals the view built
        when the head was at ``k``, whatever was appended since.
        """
        check_int("as_of", as_of)
        rows = self._read_alone(view_rows_at_once, view_rows, self.tenant, session_id, as_of)
        return assemble(rows, options, self.token_counter)

    def original(self, session_id: str, ref: PartRef) -> Part:
        """The full stored part behind a reference (for example a pruned tool result)."""
        stored = self._read_run(read_event_expanded, self.tenant, session_id, ref.seq)
        if stored is None:
            raise NotFoundError(f"no event at seq {ref.seq} in session {session_id}")
        evt = stored.event
        if not isinstance(evt, Message) or not 0 <= ref.index < len(evt.parts):
            raise NotFoundError(f"no part {ref.index} at seq {ref.seq} in session {session_id}")
        return evt.parts[ref.index]

    def forgotten(self, session_id: str, condensation_seq: int) -> Iterator[StoredEvent]:
        """Stream the events a condensation hid from the view."""
        check_int("condensation_seq", condensation_seq, low=-_MAX_INT)
        stored = self._run(_sql.read_event, self.tenant, session_id, condensation_seq)
        if stored is None or not isinstance(stored.event, Condensation):
            raise NotFoundError(f"no condensation at seq {condensation_seq} in {session_id}")
        evt = stored.event
        return self.read(session_id, evt.forgotten_from, evt.forgotten_to)

    def record_llm_call(
        self,
        session_id: str,
        view: View,
        response: Any = None,
        *,
        model: str | None = None,
        latency_ms: float | None = None,
        error: str | None = None,
        append_response: bool = True,
        metadata: dict[str, Any] | None = None,
        expected_seq: int | None = None,
    ) -> int:
        """Record that ``view`` was sent to a model, and (by default) the reply.

        Appends an ``llm_call`` event carrying the view's seq and fingerprint, the usage and
        the cost (``None`` when litellm cannot price the model; pricing never fails the
        write), followed by the assistant message from ``response`` when
        ``append_response`` is true. Both go in one append.

        Returns:
            The seq of the ``llm_call`` event.
        """
        batch = llm_call_events(
            view,
            response,
            model=model,
            latency_ms=latency_ms,
            error=error,
            append_response=append_response,
            metadata=metadata,
        )
        return self.append(session_id, batch, expected_seq=expected_seq)[0]

    def calibrated_tokens(self, view: View) -> int:
        """The view's tokens, anchored on the provider's count when one is available.

        When the newest ``llm_call`` at or before the view reported real prompt tokens and
        the view has not been reshaped since (no newer condensation or prune): that number
        plus the stored counts of what was appended after the call's view."""
        found = self.read(view.session_id, calibration_floor(view), view.seq, kinds=["llm_call"])
        return calibrate(view, (e.event for e in found if isinstance(e.event, LLMCall)))


# --------------------------------------------------------------------------- either store


def record_llm_call(
    store: Any, session_id: str, view: Any, response: Any = None, **kwargs: Any
) -> int:
    """``store.record_llm_call(session_id, view, response, ...)``, as a function.

    Works with either store: with an :class:`AsyncEventStore` it returns the coroutine.
    """
    return store.record_llm_call(session_id, view, response, **kwargs)


def calibrated_tokens(store: Any, view: Any) -> int:
    """``store.calibrated_tokens(view)``, as a function (a coroutine for the async store)."""
    return store.calibrated_tokens(view)


# --------------------------------------------------------------------------- async


class AsyncEventStore:
    """The asyncio face of :class:`EventStore`: the same methods with the same parameters,
    as coroutines (and async iterators for :meth:`read` and :meth:`forgotten`).

    Each call runs the synchronous method, one whole transaction, in a worker thread, so
    the behaviour is that of :class:`EventStore` by construction. The store holds no
    loop-bound state: one instance may be used from several threads, each with its own
    event loop. A cancelled call may still complete in its thread (as a committed network
    call would); retry appends with an idempotency key when that matters.

    Args: as :class:`EventStore`. The schema is checked (and on SQLite upgraded) on the
    first call, not in the constructor, so constructing never blocks the loop.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        tenant: str = "default",
        token_counter: TokenCounter | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        upgrade: bool | None = None,
        sqlite_synchronous: str = "FULL",
        busy_timeout_ms: int = 30_000,
        lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
        blob_threshold: int | None = DEFAULT_BLOB_THRESHOLD,
        engine: Engine | None = None,
        read_url: str | None = None,
        read_wait_ms: int = DEFAULT_READ_WAIT_MS,
        **engine_kwargs: Any,
    ) -> None:
        sync = EventStore.__new__(EventStore)
        sync._setup(
            url,
            tenant=tenant,
            token_counter=token_counter,
            max_event_bytes=max_event_bytes,
            upgrade=upgrade,
            sqlite_synchronous=sqlite_synchronous,
            busy_timeout_ms=busy_timeout_ms,
            lock_timeout_ms=lock_timeout_ms,
            blob_threshold=blob_threshold,
            engine=engine,
            engine_kwargs=engine_kwargs,
            read_url=read_url,
            read_wait_ms=read_wait_ms,
        )
        self.sync = sync
        """The synchronous store underneath (same engine, same tenant)."""

    @classmethod
    def from_sync(cls, store: EventStore) -> AsyncEventStore:
        """An async face over an existing :class:`EventStore` (sharing everything)."""
        self = cls.__new__(cls)
        self.sync = store
        return self

    @property
    def tenant(self) -> str:
        """The tenant every call is scoped to."""
        return self.sync.tenant

    @property
    def url(self) -> str:
        """The database URL."""
        return self.sync.url

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.sync.dialect

    @property
    def engine(self) -> Engine:
        """The (synchronous, thread-safe) SQLAlchemy engine."""
        return self.sync.engine

    @property
    def token_counter(self) -> TokenCounter:
        """Counts part tokens at append time."""
        return self.sync.token_counter

    @property
    def read_routing(self) -> dict[str, int]:
        """As :attr:`EventStore.read_routing`."""
        return self.sync.read_routing

    @property
    def max_event_bytes(self) -> int:
        """Largest stored payload of a single event."""
        return self.sync.max_event_bytes

    def with_tenant(self, tenant: str) -> AsyncEventStore:
        """The same database, scoped to another tenant (shares the engine)."""
        return AsyncEventStore.from_sync(self.sync.with_tenant(tenant))

    async def close(self) -> None:
        """Release pooled connections."""
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncEventStore:
        await asyncio.to_thread(self.sync._open_schema)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    create_session = awaitable(EventStore.create_session)
    get_session = awaitable(EventStore.get_session)
    list_sessions = awaitable(EventStore.list_sessions)
    head = awaitable(EventStore.head)
    fork = awaitable(EventStore.fork)
    append = awaitable(EventStore.append)
    append_result = awaitable(EventStore.append_result)
    read = streaming(EventStore.read)
    latest_event = awaitable(EventStore.latest_event)
    verify = awaitable(EventStore.verify)
    seal = awaitable(EventStore.seal)
    stats = awaitable(EventStore.stats)
    view = awaitable(EventStore.view)
    original = awaitable(EventStore.original)
    forgotten = streaming(EventStore.forgotten)
    record_llm_call = awaitable(EventStore.record_llm_call)
    calibrated_tokens = awaitable(EventStore.calibrated_tokens)
    enqueue = awaitable(EventStore.enqueue)
    pending = awaitable(EventStore.pending)
    dequeue = awaitable(EventStore.dequeue)
    run_state = awaitable(EventStore.run_state)
    set_run_state = awaitable(EventStore.set_run_state)
    begin_stream = awaitable(EventStore.begin_stream)
    append_delta = awaitable(EventStore.append_delta)
    finish_stream = awaitable(EventStore.finish_stream)
    cancel_run = awaitable(EventStore.cancel_run)
    feed_position = awaitable(EventStore.feed_position)
    tail = streaming(EventStore.tail)
    follow = afollow
    audit = audit_for_async
    get_session_by_key = awaitable(EventStore.get_session_by_key)
    delete_session = awaitable(EventStore.delete_session)
    purge = awaitable(EventStore.purge)
    complete_purges = awaitable(EventStore.complete_purges)
    get_event = awaitable(EventStore.get_event)
    find_event = awaitable(EventStore.find_event)
    read_tail = awaitable(EventStore.read_tail)
    index_search = awaitable(EventStore.index_search)
    search = awaitable(EventStore.search)
