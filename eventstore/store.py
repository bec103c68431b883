"""The event store: sessions and their append-only logs, sync and async.

Open one by URL::

    store = EventStore("sqlite:///agent.db")            # or EVENTSTORE_URL, or ./eventstore.db
    s = store.create_session(title="fix the login bug")
    store.append(s.id, [Message.user("hello")], expected_seq=0)

Durability: on SQLite the store runs in WAL mode with ``synchronous=FULL`` so an
acknowledged append survives a power cut; ``EventStore(url, sqlite_synchronous="NORMAL")``
is faster but may lose the last transactions on power loss (never on a process crash).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from . import _core
from .codec import chain_hash, decode_event
from .errors import (
    ConflictError,
    EventStoreError,
    InvalidEventError,
    NotFoundError,
    PayloadTooLargeError,
    StorageError,
)
from .events import EVENT_ADAPTER, Condensation, Event, Part, PartRef
from .migrate import ensure_schema
from .records import AppendResult, Session, StoredEvent, VerifyReport
from .tokens import HeuristicTokenCounter, TokenCounter

if TYPE_CHECKING:
    from .views import View, ViewOptions

__all__ = ["EventStore", "AsyncEventStore", "DEFAULT_URL", "resolve_url"]

DEFAULT_URL = "sqlite:///eventstore.db"
DEFAULT_MAX_EVENT_BYTES = 32 * 1024 * 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
T = TypeVar("T")


def resolve_url(url: str | None, *, async_: bool = False) -> str:
    """Normalize a database URL: default, ``EVENTSTORE_URL``, driver names."""
    raw = url or os.environ.get("EVENTSTORE_URL") or DEFAULT_URL
    u = make_url(raw)
    backend = u.get_backend_name()
    if backend == "postgresql":
        u = u.set(drivername="postgresql+psycopg")
    elif backend == "sqlite":
        u = u.set(drivername="sqlite+aiosqlite" if async_ else "sqlite")
    else:
        raise EventStoreError(
            f"unsupported database URL {u.render_as_string(hide_password=True)!r}: "
            "use sqlite:///path.db or postgresql://user@host/db"
        )
    return u.render_as_string(hide_password=False)


def _display(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _configure_sqlite(engine: Engine, synchronous: str, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _rec: Any) -> None:
        # Take transaction control from the driver so we can say BEGIN IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front. A deferred transaction that reads and then
        # writes can fail with SQLITE_BUSY without waiting, because upgrading its read
        # snapshot would break isolation; IMMEDIATE waits on the busy timeout instead.
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def _map_db_error(exc: DBAPIError) -> EventStoreError:
    text = str(exc.orig) if exc.orig is not None else str(exc)
    if isinstance(exc, OperationalError) and "locked" in text:
        return StorageError(
            f"the SQLite database stayed locked past the busy timeout ({text}); "
            "raise busy_timeout_ms or reduce concurrent writers"
        )
    return StorageError(f"database error: {text.strip().splitlines()[0] if text else exc}")


class _Base:
    """Settings and encoding shared by the sync and async stores."""

    def __init__(
        self,
        *,
        tenant: str,
        token_counter: TokenCounter | None,
        max_event_bytes: int,
    ) -> None:
        if not tenant:
            raise ValueError("tenant must be a non-empty string")
        _core.check_text("tenant", tenant, 255)
        self.tenant = tenant
        self.token_counter: TokenCounter = token_counter or HeuristicTokenCounter()
        self.max_event_bytes = max_event_bytes

    def _encode(self, evts: Sequence[Event | dict[str, Any]]) -> list[_core.Encoded]:
        # A single model is iterable too (pydantic yields its fields): refuse it by name.
        if isinstance(evts, (dict, str, bytes, BaseModel)) or not isinstance(evts, Iterable):
            raise InvalidEventError("events must be a list of events")
        out = []
        for i, evt in enumerate(evts):
            if isinstance(evt, dict):
                try:
                    evt = EVENT_ADAPTER.validate_python(evt)
                except ValidationError as exc:
                    raise InvalidEventError(_describe(exc, i)) from None
                checked = True
            elif not hasattr(evt, "kind"):
                raise InvalidEventError(f"events[{i}]: not an event ({type(evt).__name__})")
            else:
                checked = False
            try:
                enc = _core.encode(evt, self.token_counter)
            except (PydanticSerializationError, ValueError, TypeError) as exc:
                raise InvalidEventError(f"events[{i}]: cannot be serialized ({exc})") from None
            if enc.size > self.max_event_bytes:
                raise PayloadTooLargeError(enc.size, self.max_event_bytes, i)
            if not checked:
                # Models are mutable and unvalidated on assignment: make sure what is about
                # to be stored reads back, or a single bad event would make the log unreadable.
                try:
                    decode_event(enc.kind, enc.payload, "0", evt.created_at or _EPOCH)
                except ValidationError as exc:
                    raise InvalidEventError(_describe(exc, i)) from None
            if evt.id is not None:
                if not 1 <= len(evt.id) <= 36:
                    raise InvalidEventError(f"events[{i}].id: must be 1-36 characters")
                _core.check_text(f"events[{i}].id", evt.id)
            out.append(enc)
        return out


def _describe(exc: ValidationError, index: int) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"events[{index}].{loc}: {err['msg']}"


def _verify_rows(
    report: VerifyReport, rows: Iterable[Any], expected_seq: int, prev: str | None
) -> tuple[int, str | None]:
    for row in rows:
        if row.seq != expected_seq:
            report.problems.append(f"gap: expected seq {expected_seq}, found {row.seq}")
            expected_seq = row.seq
        digest = chain_hash(prev, row.seq, row.id, row.kind, row.created_at, row.payload)
        if digest != row.hash:
            report.problems.append(f"seq {row.seq}: hash mismatch (event changed after append)")
        prev = row.hash
        expected_seq += 1
        report.events += 1
    return expected_seq, prev


class EventStore(_Base):
    """A synchronous event store on SQLite or Postgres.

    Args:
        url: Database URL; defaults to ``EVENTSTORE_URL`` or ``sqlite:///eventstore.db``.
        tenant: The tenant every call is scoped to.
        token_counter: Counts part tokens at append time (default: a character heuristic).
        max_event_bytes: Largest stored payload of a single event.
        upgrade: Upgrade an empty or older schema on open. Default: yes on SQLite, no on
            Postgres (there a :class:`SchemaError` names the command to run).
        sqlite_synchronous: ``FULL`` (default, power-loss safe) or ``NORMAL`` (faster).
        busy_timeout_ms: How long a SQLite writer waits for the lock.
        engine: Share an existing engine instead of creating one.
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
        engine: Engine | None = None,
        **engine_kwargs: Any,
    ) -> None:
        super().__init__(
            tenant=tenant, token_counter=token_counter, max_event_bytes=max_event_bytes
        )
        if engine is None:
            self.url = resolve_url(url)
            if sqlite_synchronous.upper() not in ("FULL", "NORMAL", "EXTRA", "OFF"):
                raise ValueError("sqlite_synchronous must be FULL, NORMAL, EXTRA or OFF")
            engine = create_engine(self.url, **engine_kwargs)
            if engine.dialect.name == "sqlite":
                _configure_sqlite(engine, sqlite_synchronous.upper(), busy_timeout_ms)
            if upgrade is None:
                upgrade = engine.dialect.name == "sqlite"
            try:
                ensure_schema(engine, upgrade_if_behind=upgrade, display_url=_display(self.url))
            except DBAPIError as exc:
                engine.dispose()
                raise _map_db_error(exc) from None
            except BaseException:
                engine.dispose()
                raise
            self._owns_engine = True
        else:
            self.url = engine.url.render_as_string(hide_password=False)
            self._owns_engine = False
        self.engine = engine
        self.dialect = engine.dialect.name

    # -- plumbing

    def with_tenant(self, tenant: str) -> EventStore:
        """The same database, scoped to another tenant (shares the engine)."""
        return EventStore(
            tenant=tenant,
            token_counter=self.token_counter,
            max_event_bytes=self.max_event_bytes,
            engine=self.engine,
        )

    def close(self) -> None:
        """Release pooled connections."""
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self, write: bool = False) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                if write and self.dialect == "sqlite":
                    conn = conn.execution_options(sqlite_begin="IMMEDIATE")
                with conn.begin():
                    yield conn
        except IntegrityError as exc:
            raise _map_db_error(exc) from None
        except DBAPIError as exc:
            raise _map_db_error(exc) from None

    def _run(self, fn: Callable[..., T], *args: Any, write: bool = False, **kw: Any) -> T:
        with self._tx(write) as conn:
            return fn(conn, *args, **kw)

    # -- sessions

    def create_session(
        self,
        *,
        user_id: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create an empty session for this tenant."""
        return self._run(
            _core.create_session,
            self.tenant,
            session_id=session_id,
            user_id=user_id,
            title=title,
            metadata=metadata,
            write=True,
        )

    def get_session(self, session_id: str) -> Session:
        """The session, or :class:`NotFoundError` (also for another tenant's session)."""
        return self._run(_core.get_session, self.tenant, session_id)

    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        limit: int | None = 50,
        offset: int = 0,
        parent_id: str | None = None,
    ) -> list[Session]:
        """Sessions newest first; ``limit=None`` (or 0) returns all."""
        return self._run(
            _core.list_sessions,
            self.tenant,
            user_id=user_id,
            limit=limit,
            offset=offset,
            parent_id=parent_id,
        )

    def head(self, session_id: str) -> int:
        """The session's newest seq (0 when empty)."""
        return self.get_session(session_id).head_seq

    def fork(self, session_id: str, at_seq: int, *, title: str | None = None, **kw: Any) -> Session:
        """A new session sharing this one's events up to ``at_seq`` without copying them.

        The fork's reads and views include the shared prefix; its appends go only to the
        fork. Forks of forks work the same way.
        """
        return self._run(
            _core.fork_session, self.tenant, session_id, at_seq, title=title, write=True, **kw
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
        return self.append_result(
            session_id, events, expected_seq=expected_seq, idempotency_key=idempotency_key
        ).seqs

    def append_result(
        self,
        session_id: str,
        events: Sequence[Event | dict[str, Any]],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Like :meth:`append`, returning the new head and whether it was a replay."""
        encoded = self._encode(events)
        try:
            return self._run(
                _core.append,
                self.tenant,
                session_id,
                encoded,
                expected_seq=expected_seq,
                idempotency_key=idempotency_key,
                write=True,
            )
        except StorageError:
            # A UNIQUE(session_id, seq) violation means another writer won; report the
            # head it left rather than the driver's message.
            head = self.head(session_id)
            if expected_seq is not None and head != expected_seq:
                raise ConflictError(session_id, expected_seq, head) from None
            raise

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
        segments, head = self._run(_core.lineage_and_head, self.tenant, session_id)
        last = head if to_seq is None else min(to_seq, head)
        after = max(from_seq, 1) - 1
        kind_list = list(kinds) if kinds is not None else None
        while after < last:
            page = self._run(_core.read_page, segments, after, last, kind_list)
            if not page:
                return
            yield from page
            after = page[-1].seq

    def verify(self, session_id: str, *, fingerprints: bool = True) -> VerifyReport:
        """Check gapless seqs and the hash chain, and re-check recorded view fingerprints."""
        segments, head = self._run(_core.lineage_and_head, self.tenant, session_id)
        report = VerifyReport(session_id=session_id, ok=True, head_seq=head)
        expected, prev, after = 1, None, 0
        while after < head:
            rows = self._run(_core.read_hash_page, segments, after, head)
            if not rows:
                break
            expected, prev = _verify_rows(report, rows, expected, prev)
            after = rows[-1].seq
        if expected - 1 != head:
            report.problems.append(f"head_seq is {head} but the log ends at {expected - 1}")
        if fingerprints:
            from .views import verify_llm_calls

            verify_llm_calls(self, session_id, report)
        report.ok = not report.problems
        return report

    def stats(self) -> dict[str, Any]:
        """Totals for this tenant: sessions, events, bytes, tokens, events by kind."""
        return self._run(_core.stats, self.tenant)

    # -- views

    def view(
        self, session_id: str, as_of: int | None = None, options: ViewOptions | None = None
    ) -> View:
        """The context the model sees at ``as_of`` (default: the head).

        Built from the latest condensation at or before ``as_of`` plus the tail after it, so
        its cost follows the tail, not the session. ``view(as_of=k)`` equals the view built
        when the head was at ``k``, whatever was appended since.
        """
        from .views import build_view

        return self._run(build_view, self.tenant, session_id, as_of, options, self.token_counter)

    def original(self, session_id: str, ref: PartRef) -> Part:
        """The full stored part behind a reference (for example a pruned tool result)."""
        from .views import original_part

        return self._run(original_part, self.tenant, session_id, ref)

    def forgotten(self, session_id: str, condensation_seq: int) -> Iterator[StoredEvent]:
        """Stream the events a condensation hid from the view."""
        stored = next(iter(self.read(session_id, condensation_seq, condensation_seq)), None)
        if stored is None or not isinstance(stored.event, Condensation):
            raise NotFoundError(f"no condensation at seq {condensation_seq} in {session_id}")
        evt = stored.event
        return self.read(session_id, evt.forgotten_from, evt.forgotten_to)


class AsyncEventStore(_Base):
    """The asyncio twin of :class:`EventStore`, with the same semantics and SQL.

    Uses ``aiosqlite`` for SQLite and psycopg's async mode for Postgres; each operation runs
    the synchronous core through ``AsyncConnection.run_sync``.
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
        **engine_kwargs: Any,
    ) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        super().__init__(
            tenant=tenant, token_counter=token_counter, max_event_bytes=max_event_bytes
        )
        self.url = resolve_url(url, async_=True)
        self.engine = create_async_engine(self.url, **engine_kwargs)
        self.dialect = self.engine.dialect.name
        if self.dialect == "sqlite":
            _configure_sqlite(self.engine.sync_engine, sqlite_synchronous.upper(), busy_timeout_ms)
        self._upgrade = self.dialect == "sqlite" if upgrade is None else upgrade
        self._ready = False
        # Schema checks and upgrades run through a short-lived sync store on first use.
        self._sync_url = resolve_url(url)
        self._sync_opts = {"sqlite_synchronous": sqlite_synchronous, "upgrade": self._upgrade}

    async def _ensure(self) -> None:
        if self._ready:
            return
        import asyncio

        def _open() -> None:
            EventStore(self._sync_url, **self._sync_opts).close()  # type: ignore[arg-type]

        await asyncio.to_thread(_open)
        self._ready = True

    async def close(self) -> None:
        """Release pooled connections."""
        await self.engine.dispose()

    async def __aenter__(self) -> AsyncEventStore:
        await self._ensure()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, fn: Callable[..., T], *args: Any, write: bool = False, **kw: Any) -> T:
        await self._ensure()
        try:
            async with self.engine.connect() as conn:
                if write and self.dialect == "sqlite":
                    conn = await conn.execution_options(sqlite_begin="IMMEDIATE")
                async with conn.begin():
                    return await conn.run_sync(lambda sync_conn: fn(sync_conn, *args, **kw))
        except DBAPIError as exc:
            raise _map_db_error(exc) from None

    async def create_session(
        self,
        *,
        user_id: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """See :meth:`EventStore.create_session`."""
        return await self._run(
            _core.create_session,
            self.tenant,
            session_id=session_id,
            user_id=user_id,
            title=title,
            metadata=metadata,
            write=True,
        )

    async def get_session(self, session_id: str) -> Session:
        """See :meth:`EventStore.get_session`."""
        return await self._run(_core.get_session, self.tenant, session_id)

    async def list_sessions(
        self, *, user_id: str | None = None, limit: int | None = 50, offset: int = 0
    ) -> list[Session]:
        """See :meth:`EventStore.list_sessions`."""
        return await self._run(
            _core.list_sessions, self.tenant, user_id=user_id, limit=limit, offset=offset
        )

    async def head(self, session_id: str) -> int:
        """See :meth:`EventStore.head`."""
        return (await self.get_session(session_id)).head_seq

    async def append(
        self,
        session_id: str,
        events: Sequence[Event | dict[str, Any]],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> list[int]:
        """See :meth:`EventStore.append`."""
        return (
            await self.append_result(
                session_id, events, expected_seq=expected_seq, idempotency_key=idempotency_key
            )
        ).seqs

    async def append_result(
        self,
        session_id: str,
        events: Sequence[Event | dict[str, Any]],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """See :meth:`EventStore.append_result`."""
        encoded = self._encode(events)
        try:
            return await self._run(
                _core.append,
                self.tenant,
                session_id,
                encoded,
                expected_seq=expected_seq,
                idempotency_key=idempotency_key,
                write=True,
            )
        except StorageError:
            head = await self.head(session_id)
            if expected_seq is not None and head != expected_seq:
                raise ConflictError(session_id, expected_seq, head) from None
            raise

    async def read(
        self,
        session_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        kinds: Iterable[str] | None = None,
    ) -> AsyncIterator[StoredEvent]:
        """See :meth:`EventStore.read`."""
        segments, head = await self._run(_core.lineage_and_head, self.tenant, session_id)
        last = head if to_seq is None else min(to_seq, head)
        after = max(from_seq, 1) - 1
        kind_list = list(kinds) if kinds is not None else None
        while after < last:
            page = await self._run(_core.read_page, segments, after, last, kind_list)
            if not page:
                return
            for item in page:
                yield item
            after = page[-1].seq

    async def view(
        self, session_id: str, as_of: int | None = None, options: ViewOptions | None = None
    ) -> View:
        """See :meth:`EventStore.view`."""
        from .views import build_view

        return await self._run(
            build_view, self.tenant, session_id, as_of, options, self.token_counter
        )

    async def fork(
        self, session_id: str, at_seq: int, *, title: str | None = None, **kw: Any
    ) -> Session:
        """See :meth:`EventStore.fork`."""
        return await self._run(
            _core.fork_session, self.tenant, session_id, at_seq, title=title, write=True, **kw
        )
