"""Shared fixtures: real SQLite files and a real Postgres server, never a mocked database.

Postgres comes from ``EVENTSTORE_TEST_PG_URL`` (default: the local server). When it is
unreachable the Postgres half skips with the reason, unless ``EVENTSTORE_REQUIRE_PG=1``
(set by ``.ci/run``), which turns the skip into a failure.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from condensers import CondensationPolicy, NewestTruncator, default_pipeline
from eventstore import AsyncEventStore, EventStore
from eventstore.budget import Budget

PG_URL = os.environ.get(
    "EVENTSTORE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_test"
)
REQUIRE_PG = os.environ.get("EVENTSTORE_REQUIRE_PG") == "1"
#: The shared test Postgres is a distributed database on a Citus coordinator (CI's Citus
#: mode): tests of plain-Postgres internals skip there, saying why.
PG_IS_CITUS = os.environ.get("EVENTSTORE_TEST_PG_CITUS") == "1"
#: The fixtures' stores on Postgres send their routed calls straight to the workers
#: (``citus_direct=true``), for a run of the suite on Citus in that mode.
PG_CITUS_DIRECT = os.environ.get("EVENTSTORE_TEST_CITUS_DIRECT") == "1"


def store_url(db_url: str) -> str:
    """The URL the fixtures open their stores with: ``db_url``, with ``citus_direct=true``
    on Postgres under :data:`PG_CITUS_DIRECT`."""
    if not PG_CITUS_DIRECT or not db_url.startswith("postgresql"):
        return db_url
    return make_url(db_url).update_query_dict({"citus_direct": "true"}).render_as_string(False)


def skip_on_citus(why: str) -> pytest.MarkDecorator:
    """Skip a test when the shared test Postgres is distributed with Citus."""
    return pytest.mark.skipif(PG_IS_CITUS, reason=f"on a Citus-distributed database: {why}")


CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"

_pg_error: str | None = None
_pg_checked = False


def _admin_url(url: str) -> str:
    return make_url(url).set(database="postgres").render_as_string(hide_password=False)


def pg_available() -> str | None:
    """None when the test Postgres is usable, else why not. Creates the database."""
    global _pg_error, _pg_checked
    if _pg_checked:
        return _pg_error
    _pg_checked = True
    try:
        url = make_url(PG_URL).set(drivername="postgresql+psycopg")
        admin = create_engine(
            _admin_url(url.render_as_string(hide_password=False)), isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as conn:
            exists = conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": url.database}
            ).first()
            if not exists:
                conn.execute(text(f'CREATE DATABASE "{url.database}"'))
        admin.dispose()
    except Exception as exc:  # pragma: no cover - depends on the machine
        _pg_error = f"Postgres at {PG_URL} unavailable: {exc.__class__.__name__}: {exc}"
    return _pg_error


def require_pg() -> None:
    reason = pg_available()
    if reason:
        if REQUIRE_PG:
            pytest.fail(reason + " (EVENTSTORE_REQUIRE_PG=1)")
        pytest.skip(reason)


def fresh_pg_database() -> str:
    """Create an empty, uniquely named Postgres database and return its URL."""
    require_pg()
    name = f"es_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_admin_url(PG_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


def drop_pg_database(url: str) -> None:
    name = make_url(url).database
    admin = create_engine(_admin_url(PG_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL for each backend: a new SQLite file, or the shared test Postgres."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'events.db'}"
    else:
        require_pg()
        _upgrade_pg_once()
        yield PG_URL


_pg_upgraded = False


def _upgrade_pg_once() -> None:
    """Bring the shared test Postgres to this code's schema (SQLite files upgrade on open;
    a test that opens a store without ``upgrade=True`` must not depend on test order)."""
    global _pg_upgraded
    if not _pg_upgraded:
        EventStore(PG_URL, upgrade=True).close()
        _pg_upgraded = True


@pytest.fixture
def store(db_url: str) -> Iterator[EventStore]:
    """An EventStore on each backend, scoped to a tenant no other test uses."""
    s = EventStore(store_url(db_url), tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        yield s
    finally:
        s.close()


class _LoopThread:
    """An event loop running in a daemon thread, for driving coroutines from sync tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


_loop_thread: _LoopThread | None = None


def loop_thread() -> _LoopThread:
    global _loop_thread
    if _loop_thread is None:
        _loop_thread = _LoopThread()
    return _loop_thread


class BlockingAsyncStore:
    """Drives an :class:`AsyncEventStore` from synchronous test code.

    Every coroutine method is awaited on an event loop in another thread and every async
    iterator is pulled item by item, so a test written against the ``EventStore`` surface
    exercises the async store's own code path. Lazy iteration is kept: a read started
    before an append behaves as it does on the sync store.
    """

    def __init__(self, inner: AsyncEventStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        runner = loop_thread()
        if inspect.isasyncgenfunction(attr):

            def stream(*args: Any, **kwargs: Any) -> Iterator[Any]:
                agen = attr(*args, **kwargs)
                while True:
                    try:
                        yield runner.run(agen.__anext__())
                    except StopAsyncIteration:
                        return

            return stream
        if inspect.iscoroutinefunction(attr):
            return lambda *args, **kwargs: runner.run(attr(*args, **kwargs))
        if name == "with_tenant":
            return lambda tenant: BlockingAsyncStore(attr(tenant))
        return attr

    def __enter__(self) -> BlockingAsyncStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(db_url: str, api: str, **kwargs: Any) -> Any:
    """An ``EventStore``, or an ``AsyncEventStore`` behind :class:`BlockingAsyncStore`."""
    if api == "sync":
        return EventStore(store_url(db_url), **kwargs)
    return BlockingAsyncStore(AsyncEventStore(store_url(db_url), **kwargs))


@pytest.fixture(params=["sync", "async"])
def api_store(request: pytest.FixtureRequest, db_url: str) -> Iterator[Any]:
    """The store conformance fixture: (sqlite, postgres) x (sync, async)."""
    s = open_store(db_url, request.param, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a new SQLite file or a freshly created Postgres database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    url = fresh_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A freshly created, empty Postgres database (the test is skipped without Postgres,
    or fails when it is required)."""
    url = fresh_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def own_db(db_url: str) -> Iterator[str]:
    """A database this test may tamper with: the per-test SQLite file or a fresh Postgres."""
    if db_url.startswith("sqlite"):
        yield db_url
        return
    url = fresh_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def backend(db_url: str) -> str:
    return "sqlite" if db_url.startswith("sqlite") else "postgres"


@pytest.fixture(scope="module", params=["orjson", "pydantic_core"])
def plain_encoder(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each of the canonical encoder's writers of plain data in turn (see
    ``eventstore.codec._plain_json``): orjson where it is installed, and
    ``pydantic_core.to_json``, which is used without it. Module-scoped so that hypothesis
    tests may use it (it holds no per-test state)."""
    from pydantic_core import to_json

    from eventstore import codec

    if request.param == "orjson":
        orjson = pytest.importorskip("orjson")
        writer = orjson.dumps
    else:
        writer = to_json
    before = codec._plain_json
    codec._plain_json = writer
    try:
        yield request.param
    finally:
        codec._plain_json = before


def corpus_files(pattern: str) -> list[Path]:
    """Corpus files matching ``pattern``; empty when the corpus is absent."""
    return sorted(CORPUS.glob(pattern)) if CORPUS.exists() else []


def row_count(store: EventStore, table: str = "events", session_id: str | None = None) -> int:
    """Rows in ``table`` (optionally for one session), counted with raw SQL."""
    sql = f"SELECT COUNT(*) FROM {table}"
    params: dict[str, str] = {}
    if session_id is not None:
        sql += " WHERE session_id = :sid"
        params["sid"] = session_id
    with store.engine.connect() as conn:
        return int(conn.execute(text(sql), params).scalar_one())


def sqlite_path(url: str) -> Path:
    """The file behind a ``sqlite:///`` URL."""
    db = make_url(url).database
    assert db, url
    return Path(db)


from llm_server import smollm2  # noqa: E402,F401  (real-model tier fixture)


def verbatim_head_pipeline() -> Any:
    """The default pipeline without the step that cuts an oversized pinned head: with it, a
    head larger than the budget is the one view no strategy can make fit (what breaker
    tests need)."""
    from condensers import HeadTruncator, Pipeline, default_pipeline

    return Pipeline([s for s in default_pipeline().steps if not isinstance(s, HeadTruncator)])


def uncapped_policy(budget: Budget, **kwargs: object) -> CondensationPolicy:
    """The default policy with the newest reply left uncapped before it is first sent
    (:class:`NewestTruncator` ``fresh_fraction=None``): for the rules that act on a newest
    message group the default cap would already have shrunk."""
    pipeline = default_pipeline()
    pipeline.steps = [
        NewestTruncator(fresh_fraction=None) if isinstance(s, NewestTruncator) else s
        for s in pipeline.steps
    ]
    return CondensationPolicy(budget, pipeline=pipeline, **kwargs)  # type: ignore[arg-type]
