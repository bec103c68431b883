"""AsyncEventStore parity: the same operations give the same results as EventStore.

One scenario is written twice, once per API, and each records a transcript of what it
saw (seqs, heads, texts, error types and messages with ids masked). The transcripts must
be identical, on SQLite (aiosqlite) and Postgres (psycopg async).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from conftest import row_count

from eventstore import (
    AsyncEventStore,
    ConflictError,
    Custom,
    EventStore,
    EventStoreError,
    IdempotencyError,
    Message,
    NotFoundError,
)


def _mask(text: str, ids: dict[str, str]) -> str:
    for real, alias in ids.items():
        text = text.replace(real, alias)
    return text


def _err(exc: EventStoreError, ids: dict[str, str]) -> tuple[Any, ...]:
    extra = (exc.expected_seq, exc.current_seq) if isinstance(exc, ConflictError) else ()
    return (type(exc).__name__, _mask(str(exc), ids), *extra)


def _batch(prefix: str, n: int) -> list[Any]:
    return [Message.user(f"{prefix}{i}") for i in range(n - 1)] + [
        Custom(name=prefix, data={"n": n})
    ]


def _row(e: Any) -> tuple[Any, ...]:
    body = e.event.text if e.kind == "message" else e.event.data
    return (e.seq, e.kind, body, e.token_count, len(e.hash))


def sync_scenario(store: EventStore, other: EventStore) -> list[Any]:
    out: list[Any] = []
    a = store.create_session(user_id="u1", title="first", metadata={"k": "\x00v"})
    ids = {a.id: "<A>", store.tenant: "<T>", other.tenant: "<O>"}
    got = store.get_session(a.id)
    out.append(
        ("get", got.user_id, got.title, got.metadata, got.head_seq, got.tenant == store.tenant)
    )
    out.append(("append", store.append(a.id, _batch("x", 3), expected_seq=0)))
    try:
        store.append(a.id, _batch("y", 1), expected_seq=0)
    except ConflictError as exc:
        out.append(("conflict", _err(exc, ids)))
    r1 = store.append_result(a.id, _batch("k", 2), expected_seq=3, idempotency_key="key")
    r2 = store.append_result(a.id, _batch("k", 2), expected_seq=3, idempotency_key="key")
    out.append(("idem", r1.seqs, r1.head_seq, r1.replayed, r2.seqs, r2.head_seq, r2.replayed))
    try:
        store.append(a.id, _batch("k", 3), idempotency_key="key")
    except IdempotencyError as exc:
        out.append(("idem-error", _err(exc, ids)))
    out.append(("empty", store.append(a.id, [])))
    out.append(("head", store.head(a.id)))
    out.append(("read", [_row(e) for e in store.read(a.id)]))
    out.append(("range", [_row(e) for e in store.read(a.id, 2, 4)]))
    out.append(("kinds", [_row(e) for e in store.read(a.id, kinds=["custom"])]))
    b = store.create_session(user_id="u2")
    c = store.create_session(user_id="u1")
    ids.update({b.id: "<B>", c.id: "<C>"})
    out.append(("list", [ids[s.id] for s in store.list_sessions()]))
    out.append(("list-u1", [ids[s.id] for s in store.list_sessions(user_id="u1")]))
    out.append(("page", [ids[s.id] for s in store.list_sessions(limit=1, offset=1)]))
    out.append(("all", [ids[s.id] for s in store.list_sessions(limit=None)]))
    f = store.fork(a.id, 2)
    ids[f.id] = "<F>"
    out.append(("fork", f.head_seq, f.fork_seq, ids[f.parent_id or ""]))
    out.append(("fork-append", store.append(f.id, _batch("f", 2), expected_seq=2)))
    out.append(("fork-read", [(_row(e), ids[e.session_id]) for e in store.read(f.id)]))
    missing = str(uuid.uuid4())
    ids[missing] = "<M>"
    for sid in (a.id, missing):
        for name, call in (
            ("get", lambda sid=sid: other.get_session(sid)),
            ("append", lambda sid=sid: other.append(sid, _batch("z", 1))),
            ("read", lambda sid=sid: list(other.read(sid))),
        ):
            try:
                call()
            except NotFoundError as exc:
                out.append(("not-found", name, _err(exc, ids)))
    out.append(("other-list", other.list_sessions()))
    return out


async def async_scenario(store: AsyncEventStore, other: AsyncEventStore) -> list[Any]:
    out: list[Any] = []
    a = await store.create_session(user_id="u1", title="first", metadata={"k": "\x00v"})
    ids = {a.id: "<A>", store.tenant: "<T>", other.tenant: "<O>"}
    got = await store.get_session(a.id)
    out.append(
        ("get", got.user_id, got.title, got.metadata, got.head_seq, got.tenant == store.tenant)
    )
    out.append(("append", await store.append(a.id, _batch("x", 3), expected_seq=0)))
    try:
        await store.append(a.id, _batch("y", 1), expected_seq=0)
    except ConflictError as exc:
        out.append(("conflict", _err(exc, ids)))
    r1 = await store.append_result(a.id, _batch("k", 2), expected_seq=3, idempotency_key="key")
    r2 = await store.append_result(a.id, _batch("k", 2), expected_seq=3, idempotency_key="key")
    out.append(("idem", r1.seqs, r1.head_seq, r1.replayed, r2.seqs, r2.head_seq, r2.replayed))
    try:
        await store.append(a.id, _batch("k", 3), idempotency_key="key")
    except IdempotencyError as exc:
        out.append(("idem-error", _err(exc, ids)))
    out.append(("empty", await store.append(a.id, [])))
    out.append(("head", await store.head(a.id)))
    out.append(("read", [_row(e) async for e in store.read(a.id)]))
    out.append(("range", [_row(e) async for e in store.read(a.id, 2, 4)]))
    out.append(("kinds", [_row(e) async for e in store.read(a.id, kinds=["custom"])]))
    b = await store.create_session(user_id="u2")
    c = await store.create_session(user_id="u1")
    ids.update({b.id: "<B>", c.id: "<C>"})
    out.append(("list", [ids[s.id] for s in await store.list_sessions()]))
    out.append(("list-u1", [ids[s.id] for s in await store.list_sessions(user_id="u1")]))
    out.append(("page", [ids[s.id] for s in await store.list_sessions(limit=1, offset=1)]))
    out.append(("all", [ids[s.id] for s in await store.list_sessions(limit=None)]))
    f = await store.fork(a.id, 2)
    ids[f.id] = "<F>"
    out.append(("fork", f.head_seq, f.fork_seq, ids[f.parent_id or ""]))
    out.append(("fork-append", await store.append(f.id, _batch("f", 2), expected_seq=2)))
    out.append(("fork-read", [(_row(e), ids[e.session_id]) async for e in store.read(f.id)]))
    missing = str(uuid.uuid4())
    ids[missing] = "<M>"
    for sid in (a.id, missing):
        for name in ("get", "append", "read"):
            try:
                if name == "get":
                    await other.get_session(sid)
                elif name == "append":
                    await other.append(sid, _batch("z", 1))
                else:
                    [e async for e in other.read(sid)]
            except NotFoundError as exc:
                out.append(("not-found", name, _err(exc, ids)))
    out.append(("other-list", await other.list_sessions()))
    return out


async def test_async_matches_sync(db_url: str) -> None:
    tag = uuid.uuid4().hex
    with EventStore(db_url, tenant=f"s-{tag}", upgrade=True) as sync_store:
        expected = await asyncio.to_thread(
            sync_scenario, sync_store, sync_store.with_tenant(f"so-{tag}")
        )
    async with (
        AsyncEventStore(db_url, tenant=f"a-{tag}", upgrade=True) as store,
        AsyncEventStore(db_url, tenant=f"ao-{tag}", upgrade=True) as other,
    ):
        got = await async_scenario(store, other)
    # Ids and tenants differ between the runs; the transcripts mask them.
    assert got == expected
    kinds = [entry[0] for entry in expected]
    for must in ("conflict", "idem", "idem-error", "not-found", "fork-read"):
        assert must in kinds
    assert sum(1 for k in kinds if k == "not-found") == 6


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
            async with store.engine.connect() as conn:
                journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
                sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
            assert (journal, sync) == ("wal", expected)
