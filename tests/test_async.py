"""AsyncEventStore: one surface with EventStore, and what only an async caller can do.

The storage contract itself runs over (sqlite, postgres) x (sync, async) in
``test_store.py`` and ``test_views.py``; this file checks that the two surfaces cannot
drift, and the async-only situations: gathered coroutines racing, several event loops in
several threads sharing one store, and lazily opened schemas.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from typing import Any

import pytest
from conftest import row_count

from eventstore import (
    AsyncEventStore,
    ConflictError,
    EventStore,
    Message,
    record_llm_call,
)


def _public(cls: type) -> dict[str, Any]:
    return {
        name: getattr(cls, name)
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }


def test_async_store_has_every_method_with_identical_parameters() -> None:
    sync, asyn = _public(EventStore), _public(AsyncEventStore)
    missing = sorted(set(sync) - set(asyn))
    assert not missing, f"AsyncEventStore lacks {missing}"
    for name, method in sync.items():
        s_params = list(inspect.signature(method).parameters.values())[1:]
        a_params = list(inspect.signature(asyn[name]).parameters.values())[1:]
        assert [(p.name, p.kind, p.default) for p in a_params] == [
            (p.name, p.kind, p.default) for p in s_params
        ], name
    # Extra async-only public methods would be a second surface to keep in step.
    assert sorted(set(asyn) - set(sync)) == ["from_sync"]


def test_async_methods_are_awaitable_or_async_iterators() -> None:
    for name, method in _public(AsyncEventStore).items():
        if name in ("with_tenant", "from_sync", "audit"):  # no I/O: the same on both
            continue
        sync_method = getattr(EventStore, name)
        streams = inspect.signature(sync_method).return_annotation.startswith("Iterator")
        if streams:
            assert inspect.isasyncgenfunction(method), name
        else:
            assert inspect.iscoroutinefunction(method), name


def test_constructors_take_the_same_parameters() -> None:
    s = list(inspect.signature(EventStore.__init__).parameters.items())
    a = list(inspect.signature(AsyncEventStore.__init__).parameters.items())
    assert [(n, p.kind, p.default) for n, p in a] == [(n, p.kind, p.default) for n, p in s]


async def test_record_llm_call_and_calibration_work_on_the_async_store(db_url: str) -> None:
    async with AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True) as store:
        s = await store.create_session()
        await store.append(s.id, [Message.system("sys"), Message.user("hi")])
        view = await store.view(s.id)
        reply = {
            "id": "r1",
            "model": "gpt-4o-mini",
            "choices": [{"message": {"role": "assistant", "content": "hello"}}],
            # A count near the view's estimate: one far off it is not trusted.
            "usage": {"prompt_tokens": view.tokens + 2, "completion_tokens": 3},
        }
        seq = await record_llm_call(store, s.id, view, reply, model="gpt-4o-mini")
        assert seq == 3
        assert await store.head(s.id) == 4  # the llm_call and the reply
        report = await store.verify(s.id)
        assert report.ok and report.llm_calls == 1, report.problems
        after = await store.view(s.id)
        want = view.tokens + 2 + after.items[-1].tokens
        assert await store.calibrated_tokens(after) == want


def test_one_async_store_from_several_threads_each_with_its_own_loop(db_url: str) -> None:
    store = AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    sid = asyncio.run(store.create_session()).id
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        async def go() -> None:
            for i in range(10):
                await store.append(sid, [Message.user(f"{k}-{i}")])
                assert (await store.view(sid)).seq >= 1

        try:
            asyncio.run(go())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert asyncio.run(store.head(sid)) == 40
    assert store.sync.verify(sid, fingerprints=False).ok
    store.sync.close()


async def test_async_conflicts_under_gather(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    async with AsyncEventStore(db_url, tenant=tenant, upgrade=True) as store:
        s = await store.create_session()
        results = await asyncio.gather(
            *(store.append(s.id, [Message.user(str(i))], expected_seq=0) for i in range(8)),
            return_exceptions=True,
        )
        wins = [r for r in results if isinstance(r, list)]
        losses = [r for r in results if not isinstance(r, list)]
        assert wins == [[1]]
        assert len(losses) == 7
        assert all(isinstance(e, ConflictError) and e.current_seq == 1 for e in losses), losses
        # Without expected_seq every append lands, gapless.
        seqs = await asyncio.gather(*(store.append(s.id, [Message.user("n")]) for _ in range(10)))
        assert sorted(x for (x,) in seqs) == list(range(2, 12))
        keyed = await asyncio.gather(
            *(
                store.append_result(s.id, [Message.user("k")], idempotency_key="once")
                for _ in range(5)
            )
        )
        assert {tuple(r.seqs) for r in keyed} == {(12,)}
        assert sorted(r.replayed for r in keyed) == [False, True, True, True, True]
        assert await store.head(s.id) == 12
    with EventStore(db_url, tenant=tenant) as sync_store:
        assert row_count(sync_store, "events", s.id) == 12
        assert sync_store.verify(s.id, fingerprints=False).ok


async def test_async_postgres_schema_check(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        pytest.skip("Postgres only: SQLite upgrades on open by default")
    from conftest import drop_pg_database, fresh_pg_database

    from eventstore import SchemaError

    url = fresh_pg_database()
    try:
        store = AsyncEventStore(url)
        with pytest.raises(SchemaError, match="eventstore db upgrade"):
            await store.create_session()
        await store.close()
    finally:
        drop_pg_database(url)


async def test_async_sqlite_durability_pragmas(tmp_path) -> None:  # noqa: ANN001
    url = f"sqlite:///{tmp_path / 'a.db'}"
    for mode, expected in (("FULL", 2), ("NORMAL", 1)):
        async with AsyncEventStore(url, sqlite_synchronous=mode) as store:
            with store.engine.connect() as conn:
                journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
                sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
            assert (journal, sync) == ("wal", expected)
