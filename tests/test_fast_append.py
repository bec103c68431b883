"""The append fast path writes exactly what the ordinary path writes, and steps aside
whenever its remembered head is stale."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from conftest import PG_IS_CITUS, skip_on_citus
from sqlalchemy import create_engine, event, text

from eventstore import (
    Condensation,
    ConflictError,
    EventStore,
    InvalidEventError,
    Message,
    PartRef,
    PayloadTooLargeError,
    Prune,
    StorageBusyError,
    StorageError,
    TextPart,
    ToolCallPart,
)
from eventstore._append import guarded, locked, postgres
from eventstore._append import rows as row_maker
from eventstore._append import sqlite as sqlite_statements
from eventstore.codec import sole_text
from eventstore.tokens import HeuristicTokenCounter

_T0 = datetime(2025, 5, 6, 7, 0, 0, 654321, tzinfo=UTC)


def _batch(i: int) -> list[Message]:
    when = datetime(2025, 5, 6, 7, 8, i, 123456, tzinfo=UTC)
    call = ToolCallPart(id=f"c{i}", name="ls", arguments="{}")
    return [
        Message(role="assistant", parts=[call], created_at=when),
        Message.tool(f"c{i}", f"out {i}").model_copy(update={"created_at": when}),
    ]


def _rows(store: EventStore, sid: str) -> list[Any]:
    with store.engine.connect() as conn:
        ev = conn.execute(
            text(
                "SELECT seq, kind, created_at, payload, token_count, size "
                "FROM events WHERE session_id = :s ORDER BY seq"
            ),
            {"s": sid},
        ).all()
        pt = conn.execute(
            text(
                "SELECT seq, idx, type, tool_call_id, tool_name, state, token_count "
                "FROM parts WHERE session_id = :s ORDER BY seq, idx"
            ),
            {"s": sid},
        ).all()
        head = conn.execute(
            text("SELECT head_seq, updated_at FROM sessions WHERE id = :s"),
            {"s": sid},
        ).one()
    return [[tuple(r) for r in ev], [tuple(r) for r in pt], tuple(head)]


def _counted(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Count the calls of ``owner.name`` from here on (the count is the list's one item)."""
    calls = [0]
    real = getattr(owner, name)

    def counting(*args: Any, **kw: Any) -> Any:
        calls[0] += 1
        return real(*args, **kw)

    monkeypatch.setattr(owner, name, counting)
    return calls


def test_fast_and_ordinary_paths_write_the_same_rows(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant, upgrade=True) as store:
        fast_sid, slow_sid = str(uuid.uuid4()), str(uuid.uuid4())
        store.create_session(session_id=fast_sid)
        store.create_session(session_id=slow_sid)
        ordinary = _counted(monkeypatch, locked, "write")
        for i in range(4):
            store.append(fast_sid, _batch(i))
        assert ordinary == [1]  # the first append learns the head; the rest are fast
        for i in range(4):
            store._heads.drop(slow_sid)  # force the ordinary path every time
            store.append(slow_sid, _batch(i))
        assert ordinary == [5]
        # Event ids are fresh per event (and hashed), so the chains differ; every other
        # column, the parts rows and the session row are the same on both paths.
        assert _rows(store, fast_sid) == _rows(store, slow_sid)
        assert store.verify(fast_sid).ok and store.verify(slow_sid).ok


def test_large_batches_take_the_fast_path_on_sqlite_only(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch over ``BULK_MIN`` events appended to a session whose head the store knows
    goes through the fast path on SQLite (the guarded head move and the bulk INSERTs on
    the driver connection), and the ordinary way (``COPY``) on Postgres (one routed call
    on Citus); either way the rows are those of the ordinary path, and a stale head
    still falls back."""
    sqlite = db_url.startswith("sqlite")
    # On Citus a batch of any size is one routed call, the head read first if unknown.
    routed = not sqlite and PG_IS_CITUS
    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant, upgrade=True) as store:
        fast_sid, slow_sid = str(uuid.uuid4()), str(uuid.uuid4())
        store.create_session(session_id=fast_sid)
        store.create_session(session_id=slow_sid)
        batches = [[m for i in range(k, k + 35) for m in _batch(i % 60)] for k in (0, 35, 70)]
        ordinary = _counted(monkeypatch, locked, "write")
        for batch in batches:
            store.append(fast_sid, batch)
        assert ordinary == [0 if routed else 1 if sqlite else 3]
        for batch in batches:
            store._heads.drop(slow_sid)
            store.append(slow_sid, batch)
        assert ordinary == [0 if routed else 4 if sqlite else 6]
        assert _rows(store, fast_sid) == _rows(store, slow_sid)
        assert store.verify(fast_sid).ok
        with EventStore(db_url, tenant=tenant) as other:
            other.append(fast_sid, [Message.user("behind its back")])
        assert ordinary == [1 if routed else 5 if sqlite else 7]  # the other store's first
        assert store.append(fast_sid, batches[0]) == list(range(212, 282))
        assert ordinary == [2 if routed else 6 if sqlite else 8]  # the stale head: ordinary
        assert store.verify(fast_sid).ok


def _common(i: int) -> list[Message]:
    """Messages with nothing of their own to check (no id, time, metadata or extra)."""
    call = ToolCallPart(id=f"c{i}", name="grep", arguments='{"q": "x"}')
    return [
        Message.user(f"question {i} " * 20),
        Message.assistant(f"looking {i}", tool_calls=[call]),
        Message.tool(f"c{i}", f"result {i} " * 50),
        Message(role="user", parts=[TextPart(text="one"), TextPart(text="two")]),
    ]


def _counting_ids(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Make event ids a counter in both row builders; the returned call restarts it."""
    n = [0]

    def ids(k: int) -> list[str]:
        n[0] += k
        return [f"id-{j:06d}" for j in range(n[0] - k, n[0])]

    monkeypatch.setattr(row_maker, "new_ids", ids)
    return lambda: n.__setitem__(0, 0)


def test_a_batch_of_common_messages_is_written_in_one_pass(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite a batch of common messages appended at a known head takes the guarded
    path; what it stores reads back and verifies, the same rows as the locked path's but
    for ids, hashes and times. A batch with one other event, a stale head, an expected
    seq not met and an oversized event all go the usual ways."""
    sqlite = db_url.startswith("sqlite")
    # On Citus a batch of any size is one routed call, the head read first if unknown.
    routed = not sqlite and PG_IS_CITUS
    encodings = _counted(monkeypatch, locked, "write")
    with EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True) as store:
        one, two = store.create_session().id, store.create_session().id
        events = [m for i in range(10) for m in _common(i)]
        store.append(one, events[:2])
        store.append(two, events[:2])
        start = encodings[0]
        assert store.append(one, events) == list(range(3, 43))
        assert encodings[0] == start + (0 if sqlite or routed else 1)
        store._heads.drop(two)
        store.append_result(two, events)
        assert encodings[0] == start + (0 if routed else 1 if sqlite else 2)
        assert store.verify(one).ok and store.verify(two).ok
        own = {"id", "created_at"}
        assert [e.event.model_dump(exclude=own) for e in store.read(one)] == [
            e.event.model_dump(exclude=own) for e in store.read(two)
        ]
        assert [r[:2] + r[3:] for r in _rows(store, one)[0]] == [
            r[:2] + r[3:] for r in _rows(store, two)[0]
        ]
        assert _rows(store, one)[1] == _rows(store, two)[1]
        assert store.view(one).to_messages() == store.view(two).to_messages()
        # One event of another kind: the general path, for the whole batch.
        mixed = [*events[:30], Message.user("timed").model_copy(update={"created_at": _T0})]
        assert store.append(one, mixed) == list(range(43, 74))
        assert encodings[0] == start + (0 if routed else 1 if sqlite else 3)
        with pytest.raises(ConflictError):
            store.append(one, events, expected_seq=5)
        with pytest.raises(PayloadTooLargeError):
            store.append(one, [*events, Message.user("x" * (store.max_event_bytes + 1))])
        assert store.head(one) == 73 and store.verify(one).ok


def test_a_stale_head_falls_back_and_conflicts_stay_typed(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    with (
        EventStore(db_url, tenant=tenant, upgrade=True) as a,
        EventStore(db_url, tenant=tenant) as b,
    ):
        sid = a.create_session().id
        a.append(sid, [Message.user("one")])  # a remembers head 1
        b.append(sid, [Message.user("two")])  # b moves it to 2 behind a's back
        a.append(sid, [Message.user("three")])  # a's head is stale: ordinary path, seq 3
        with pytest.raises(ConflictError) as err:
            b.append(sid, [Message.user("four")], expected_seq=2)
        assert err.value.current_seq == 3
        a.append(sid, [Message.user("four")], expected_seq=3)
        texts = [e.event.text for e in a.read(sid)]
        assert texts == ["one", "two", "three", "four"]
        assert a.verify(sid).ok
        # A prune goes the ordinary way; a deleted session refuses the fast path too.
        a.append(sid, _batch(7))
        a.append(sid, [Prune(targets=[PartRef(seq=6, index=0)])])
        assert a.verify(sid).ok
        a.delete_session(sid)
        with pytest.raises(Exception, match="no session"):
            a.append(sid, [Message.user("after delete")])


@pytest.mark.parametrize("pairs", [20, 33, 70])
def test_bulk_batches_write_the_same_rows_as_small_appends(
    db_url: str, monkeypatch: pytest.MonkeyPatch, pairs: int
) -> None:
    """A batch over ``BULK_MIN`` events goes through the driver (multi-row INSERTs or
    COPY): the stored rows are byte for byte those of the same events appended in small
    batches. 66 and 140 events cross SQLite's rows-per-INSERT with a remainder."""
    events = [m for i in range(pairs) for m in _batch(i % 60)]
    with EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True) as store:
        bulk_sid, small_sid = str(uuid.uuid4()), str(uuid.uuid4())
        store.create_session(session_id=bulk_sid)
        store.create_session(session_id=small_sid)
        store.append(bulk_sid, events)
        for i in range(0, len(events), 2):
            store._heads.drop(small_sid)
            store.append(small_sid, events[i : i + 2])
        assert _rows(store, bulk_sid) == _rows(store, small_sid)
        assert store.verify(bulk_sid).ok


@pytest.mark.parametrize("key", [None, "batch-key"])
@pytest.mark.parametrize("pairs", [9, 70])
def test_bulk_rows_are_every_column_of_the_ordinary_paths_rows(
    db_url: str, monkeypatch: pytest.MonkeyPatch, key: str | None, pairs: int
) -> None:
    """Every column of every row, the idempotency columns and the hash chain included, is
    the same through the driver's bulk path (on SQLite: the session id bound once per
    statement, rows NULL in every nullable column written with literal NULLs, the others,
    a keyed batch's first row among them, bound whole) as through SQLAlchemy's
    ``executemany``: events with ids and times of their own make both chains equal.
    The larger batch crosses SQLite's rows per INSERT with a remainder."""
    # Tool calls and results (parts with an id, a name or a state) among text messages
    # (parts NULL in all three), in runs of both kinds.
    mixed = [
        m
        for i in range(pairs)
        for m in (
            _batch(i % 60)
            if i % 3
            else [
                Message.user(f"u{i}").model_copy(update={"created_at": _T0}),  # no parts row
                Message(
                    role="user", parts=[TextPart(text=f"v{i}"), TextPart(text="w")], created_at=_T0
                ),
                *_batch(i % 60),
            ]
        )
    ]
    events = [
        m.model_copy(update={"id": f"{n:04d}-{uuid.uuid4().hex[:8]}"}) for n, m in enumerate(mixed)
    ]
    sids = [str(uuid.uuid4()) for _ in range(2)]
    with EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True) as store:
        for sid in sids:
            store.create_session(session_id=sid)
        store.append(sids[0], events, idempotency_key=key)  # the bulk path
        monkeypatch.setattr(sqlite_statements, "BULK_MIN", 10**9)  # row by row
        store._heads.drop(sids[1])
        store.append(sids[1], events, idempotency_key=key)
        with store.engine.connect() as conn:
            got = [
                conn.execute(
                    text(f"SELECT * FROM {table} WHERE session_id = :s ORDER BY seq{idx}"),
                    {"s": sid},
                ).all()
                for sid in sids
                for table, idx in (("events", ""), ("parts", ", idx"))
            ]
        bulk_events, bulk_parts, plain_events, plain_parts = (
            [tuple(v if v != sids[k // 2] else "S" for v in r) for r in rows]
            for k, rows in enumerate(got)
        )
        assert len(bulk_events) == len(events)
        assert len(bulk_parts) == sum(len(m.parts) for m in events if not sole_text(m))
        assert {r[3] for r in bulk_parts} == {"text", "tool_call", "tool_result"}
        assert bulk_events == plain_events
        assert bulk_parts == plain_parts
        assert sum(r._mapping["idempotency_key"] is not None for r in got[0]) == (key is not None)
        for sid in sids:
            assert store.verify(sid).ok
            if key is not None:  # the replay finds the key where the bulk path put it
                assert store.append(sid, events, idempotency_key=key) == list(
                    range(1, len(events) + 1)
                )


def test_a_fast_append_behind_a_held_lock_waits_once_then_raises_busy(db_url: str) -> None:
    """The fast path's lock wait running out is the caller's answer: it must not fall back
    to the ordinary path and wait a second time."""
    tenant = f"t-{uuid.uuid4().hex}"
    timeout_ms = 1_000
    holder = create_engine(db_url)
    with EventStore(
        db_url, tenant=tenant, upgrade=True, busy_timeout_ms=timeout_ms, lock_timeout_ms=timeout_ms
    ) as store:
        sid = store.create_session().id
        store.append(sid, [Message.user("one")])  # the head is remembered: next is fast
        try:
            with holder.connect() as conn:
                if db_url.startswith("sqlite"):
                    conn.exec_driver_sql("BEGIN IMMEDIATE")
                else:
                    conn.execute(
                        text("SELECT head_seq FROM sessions WHERE id = :s FOR UPDATE"), {"s": sid}
                    )
                started = time.monotonic()
                with pytest.raises(StorageBusyError, match="retry"):
                    store.append(sid, [Message.user("two")], expected_seq=1)
                waited = time.monotonic() - started
                conn.rollback()
        finally:
            holder.dispose()
        assert timeout_ms / 1000 * 0.9 <= waited < 2 * timeout_ms / 1000, waited
        assert store.head(sid) == 1
        assert store.append(sid, [Message.user("two")], expected_seq=1) == [2]
        assert store.verify(sid).ok


def test_the_fast_path_keeps_one_connection_and_gives_it_back(db_url: str) -> None:
    """Single appends from one thread reuse one kept connection; writers on several
    threads keep up to the pool's overflow of them on Postgres (one on SQLite, where
    writers take turns) and use the pool past that; closing the store, or dropping it unclosed,
    checks the kept connections back in."""
    import gc
    import threading
    import warnings

    tenant = f"t-{uuid.uuid4().hex}"
    store = EventStore(db_url, tenant=tenant, upgrade=True)
    pool = store.engine.pool
    sessions = [store.create_session().id for _ in range(4)]
    for sid in sessions:
        store.append(sid, [Message.user("learn the head")])
    for i in range(5):
        store.append(sessions[0], [Message.user(f"fast {i}")], expected_seq=i + 1)
    assert pool.checkedout() == 1  # the kept one, and nothing else leaked

    errors: list[BaseException] = []

    def writer(sid: str) -> None:
        try:
            for _ in range(15):
                store.append(sid, [Message.user("from a thread")])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(sid,)) for sid in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [store.head(sid) for sid in sessions] == [21, 16, 16, 16]
    assert all(store.verify(sid).ok for sid in sessions)
    assert [i.position for i in store.tail()] == list(range(1, 70))
    slot = store._driver_slot
    kept = pool.checkedout()
    if db_url.startswith("sqlite"):
        assert kept == 1
    else:
        assert 1 <= kept <= len(sessions)
    assert len(slot._free) == kept  # every kept connection was given back
    last = slot._free[-1]
    for i in range(3):
        store.append(sessions[0], [Message.user(f"alone {i}")])
        assert slot._free[-1] is last and pool.checkedout() == kept
    # Every kept connection in use, as by writers on other threads: the next append's is
    # kept too where there is room (Postgres), else it goes back to the pool.
    held = [slot.take() for _ in range(kept)]
    assert all(k for _, k in held)
    store.append(sessions[0], [Message.user("while the others are busy")])
    for pooled, k in held:
        slot.give(pooled, k)
    room = not db_url.startswith("sqlite")  # up to the pool's overflow, 10
    assert len(slot._free) == pool.checkedout() == kept + room
    store.close()
    assert pool.checkedout() == 0

    unclosed = EventStore(db_url, tenant=tenant)
    pool = unclosed.engine.pool
    unclosed.append(sessions[1], [Message.user("one")], expected_seq=16)
    unclosed.append(sessions[1], [Message.user("two")], expected_seq=17)  # fast
    assert pool.checkedout() == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del unclosed
        gc.collect()
    assert pool.checkedout() == 0
    assert not [w for w in caught if "garbage collector" in str(w.message)]


def test_a_bulk_batch_refused_halfway_writes_nothing(store: EventStore) -> None:
    """An event refused late in a bulk batch (a condensation naming its own seq, found
    while the rows are hashed) leaves the session exactly as it was, and the next append
    chains from the old head."""
    sid = store.create_session().id
    store.append(sid, [Message.tool(f"c{i}", f"m{i}") for i in range(3)])
    before = store.verify(sid).head_hash
    bad = Condensation(forgotten_from=1, forgotten_to=40, summary="s")
    batch: list[Any] = [Message.tool(f"c{i}", f"b{i}") for i in range(30)] + [bad]
    with pytest.raises(InvalidEventError, match="forgotten_to"):
        store.append(sid, batch)
    assert store.get_session(sid).head_seq == 3
    report = store.verify(sid)
    assert report.ok and report.head_hash == before
    assert [e.seq for e in store.read(sid)] == [1, 2, 3]
    with store.engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM parts WHERE session_id = :s"), {"s": sid}
            ).scalar()
            == 3
        )
    assert store.append(sid, batch[:30]) == list(range(4, 34))
    assert store.verify(sid).ok


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic's, on the mutated part list
@pytest.mark.parametrize("at", [0, 17, 39])
@pytest.mark.parametrize("fault", ["dict", "mutated", "too large"])
def test_a_bulk_batch_with_a_bad_event_anywhere_writes_nothing(
    db_url: str, tmp_path: Any, fault: str, at: int
) -> None:
    """On Postgres a bulk batch is checked and encoded while its rows go out: an event
    refused at the start, the middle or the end names itself, nothing is written, and the
    next append goes on from the old head (on SQLite the batch is checked first)."""
    url = f"sqlite:///{tmp_path / 'b.db'}" if db_url.startswith("sqlite") else db_url
    with EventStore(url, upgrade=True, max_event_bytes=20_000) as store:
        sid = store.create_session().id
        store.append(sid, [Message.user("first")])
        batch: list[Any] = [Message.user(f"b{i}") for i in range(40)]
        error: type[Exception] = InvalidEventError
        if fault == "dict":
            batch[at] = {"kind": "message", "role": "robot", "parts": []}
        elif fault == "mutated":  # assignments are not validated: found when encoded
            batch[at].parts.append("not a part")
        else:
            batch[at] = Message.user("x" * 30_000)
            error = PayloadTooLargeError
        with pytest.raises(error, match=rf"events\[{at}\]|event #{at} "):
            store.append(sid, batch)
        assert store.head(sid) == 1 and store.verify(sid).ok
        batch[at] = Message.user("fixed")
        assert store.append(sid, batch) == list(range(2, 42))
        assert [e.event.text for e in store.read(sid, 2, 41)] == [  # type: ignore[union-attr]
            m.text for m in batch
        ]


def test_an_encoding_reads_each_event_once_in_order() -> None:
    from eventstore._append.encode import Encoding, encode_all

    class Counting(HeuristicTokenCounter):
        calls = 0

        def count(self, text: str) -> int:
            Counting.calls += 1
            return super().count(text)

    evts = [Message.user(f"m{i}") for i in range(5)]
    lazy = Encoding(evts, Counting(), None, 1 << 20)
    assert len(lazy) == 5 and Counting.calls == 0
    assert lazy[1].payload == encode_all(evts, HeuristicTokenCounter(), None, 1 << 20)[1].payload
    assert Counting.calls == 2  # events 0 and 1, no further
    first = list(lazy)
    assert list(lazy) == first and [e.event for e in first] == evts
    assert Counting.calls == 5 and lazy[-1] is first[-1] and lazy[1:3] == first[1:3]
    with pytest.raises(IndexError):
        lazy[5]
    with pytest.raises(InvalidEventError):
        Encoding({"kind": "message"}, Counting(), None, 1 << 20)  # type: ignore[arg-type]


def _named(name: str) -> dict[str, Any]:
    """Engine options that name the store's Postgres connections (to drop only those)."""
    return {"connect_args": {"application_name": name[:60]}}


def _drop_connections(admin: Any, name: str) -> int:
    """Have the server terminate the connections named ``name``, as a restart would."""
    with admin.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = :n"
                ),
                {"n": name[:60]},
            ).scalar()
            or 0
        )


@pytest.fixture
def droppable(db_url: str) -> Iterator[tuple[EventStore, Callable[[], int]]]:
    """A Postgres store, and a call that has the server drop its connections (as a
    restart would) and says how many it dropped."""
    if db_url.startswith("sqlite"):
        pytest.skip("Postgres only: a server that drops connections")
    tenant = f"t-{uuid.uuid4().hex}"
    admin = create_engine(db_url)
    try:
        with EventStore(db_url, tenant=tenant, upgrade=True, **_named(tenant)) as store:
            yield store, lambda: _drop_connections(admin, tenant)
    finally:
        admin.dispose()


def test_a_connection_lost_under_a_fast_append_neither_loses_nor_doubles_it(
    droppable: tuple[EventStore, Callable[[], int]],
) -> None:
    """The server drops the kept connection (a restart, a failover): the next append is
    written exactly once, and an append whose outcome was lost with its connection is
    recognised by its hash instead of being written again."""

    store, drop = droppable
    sid = store.create_session().id
    store.append(sid, [Message.user("one")])
    store.append(sid, [Message.user("two")])  # the fast path, on the kept connection
    assert drop()
    assert store.append(sid, [Message.user("three")]) == [3]
    texts = [e.event.text for e in store.read(sid)]  # type: ignore[union-attr]
    assert texts == ["one", "two", "three"]
    assert store.verify(sid).ok
    head_hash = list(store.read(sid))[-1].hash
    assert guarded.landed(store, sid, 3, head_hash)
    assert not guarded.landed(store, sid, 3, "0" * 64) and not guarded.landed(
        store, sid, 4, head_hash
    )


def test_a_view_after_the_server_dropped_its_connection_reads_again(
    droppable: tuple[EventStore, Callable[[], int]],
) -> None:
    """The view's one statement runs on the driver's own cursor: a connection the server
    dropped is taken out of the pool and the view read again, not raised as a raw driver
    error (nor left in the pool for the next read)."""
    store, drop = droppable
    sid = store.create_session().id
    store.append(sid, [Message.system("rules"), Message.user("task")])
    before = store.view(sid).to_messages()
    assert drop()
    assert store.view(sid).to_messages() == before
    assert store.view(sid).to_messages() == before


def test_reads_of_a_fork_after_the_server_dropped_its_connection_read_again(
    droppable: tuple[EventStore, Callable[[], int]],
) -> None:
    """A fork's view is read statement by statement inside a transaction, on whichever
    pooled connection comes next: one the server dropped is replaced and the read made
    again, as for a session's one-statement view, and so are the other reads."""
    store, drop = droppable
    sid = store.create_session().id
    store.append(sid, [Message.system("rules"), Message.user("task"), Message.user("more")])
    fork = store.fork(sid, 2).id
    store.append(fork, [Message.user("other")])
    before = store.view(fork).to_messages()
    assert store.view(fork).to_messages() == before  # known to be a fork by now
    events = [e.hash for e in store.read(fork)]
    for read in (
        lambda: store.view(fork).to_messages(),
        lambda: [e.hash for e in store.read(fork)],
        lambda: store.get_session(fork).head_seq,
    ):
        first = read()
        assert drop()
        assert read() == first
    assert [e.hash for e in store.read(fork)] == events


def test_a_pool_of_dropped_connections_costs_no_read(
    droppable: tuple[EventStore, Callable[[], int]],
) -> None:
    """After a restart every idle pooled connection is dead: the first read that finds
    one has the pool replace them all, so each kind of read succeeds on its first call."""
    import threading

    store, drop = droppable
    sid = store.create_session().id
    store.append(sid, [Message.system("rules"), Message.user("task")])
    fork = store.fork(sid, 2).id
    want = {s: store.view(s).to_messages() for s in (sid, fork)}
    for read in (
        lambda: store.view(sid).to_messages() == want[sid],
        lambda: store.view(fork).to_messages() == want[fork],
        lambda: len(list(store.read(sid))) == 2,
    ):
        held = [store.engine.connect() for _ in range(4)]  # four idle in the pool
        for conn in held:
            conn.exec_driver_sql("SELECT 1")
            conn.close()
        assert drop() >= 4
        results: list[bool] = []

        def _call(read: Any = read, results: list[bool] = results) -> None:
            results.append(read())

        threads = [threading.Thread(target=_call) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [True, True, True]


def test_writes_lost_with_their_connection_before_the_commit_are_made_again_once(
    droppable: tuple[EventStore, Callable[[], int]],
) -> None:
    """A write whose connection the server closed before the commit was sent was rolled
    back: the store makes it again on a fresh connection, and it lands exactly once
    (a batch on the ordinary path, a keyed append, a new session)."""
    store, drop = droppable
    sid = store.create_session().id
    store.append(sid, [Message.user("one")])
    assert drop()
    batch = [Message.user(f"b{i}") for i in range(40)]  # more than the fast path takes
    assert store.append(sid, batch) == list(range(2, 42))
    assert drop()
    assert store.append(sid, [Message.user("keyed")], idempotency_key="k1") == [42]
    assert store.append(sid, [Message.user("keyed")], idempotency_key="k1") == [42]
    assert drop()
    other = store.create_session(title="after").id
    assert store.get_session(other).title == "after"
    assert store.head(sid) == 42 and store.verify(sid).ok
    assert len(store.list_sessions()) == 2


def test_a_write_lost_while_it_committed_is_reported_not_made_again(
    droppable: tuple[EventStore, Callable[[], int]],
) -> None:
    """Lost during its commit, a write may have landed: it is raised, saying so, and never
    written a second time."""
    store, drop = droppable
    sid = store.create_session().id
    store.append(sid, [Message.user("one")])
    commits = []

    def _drop_on_commit(_conn: Any) -> None:
        if not commits:  # the write's commit (reads commit too)
            commits.append(drop())

    event.listen(store.engine, "commit", _drop_on_commit)
    try:
        with pytest.raises(StorageError, match="lost while the write committed"):
            # With a key, so that it takes the locked path on Citus too (a plain batch
            # is one routed call there, of any size).
            store.append(sid, [Message.user(f"b{i}") for i in range(40)], idempotency_key="b")
    finally:
        event.remove(store.engine, "commit", _drop_on_commit)
    assert commits == [1]
    # The commit never reached the server here; what matters is that it was not
    # written twice (and that nothing past the batch was).
    assert store.head(sid) in (1, 41) and store.verify(sid).ok


def test_times_are_stored_alike_on_every_path(db_url: str) -> None:
    """``created_at`` goes into the rows from the hashed timestamp text on the fast and bulk
    paths: an offset other than UTC and a year below 1000 (formatted the platform's way)
    are stored as the ordinary path stores them."""
    from datetime import timedelta, timezone

    times = [
        datetime(2025, 5, 6, 9, 8, 7, 654321, tzinfo=timezone(timedelta(hours=2))),
        datetime(999, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        datetime(2025, 5, 6, 7, 8, 9, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
    ]

    def msg(text: str, when: datetime) -> Message:
        return Message(role="user", parts=[TextPart(text=text)], created_at=when)

    first = msg("first", datetime(2024, 1, 1, tzinfo=UTC))
    events = [msg(f"m{i}", t) for i, t in enumerate(times)]
    bulk = [msg(f"b{i}", times[i % 3]) for i in range(20)]
    with EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True) as store:
        fast_sid, slow_sid = str(uuid.uuid4()), str(uuid.uuid4())
        store.create_session(session_id=fast_sid)
        store.create_session(session_id=slow_sid)
        store.append(fast_sid, [first])
        store.append(slow_sid, [first])
        for evt in events:
            store.append(fast_sid, [evt])  # the fast path (the head is remembered)
            store._heads.drop(slow_sid)
            store.append(slow_sid, [evt])  # the ordinary path, row by row
        store.append(fast_sid, bulk)  # over BULK_MIN: the driver's bulk path
        for evt in bulk:
            store._heads.drop(slow_sid)
            store.append(slow_sid, [evt])
        # Every column but the hash (the ids differ), the parts and the session's
        # updated_at (the newest event's time) are the same on every path.
        assert _rows(store, fast_sid) == _rows(store, slow_sid)
        read = [e.event.created_at for e in store.read(fast_sid, 2, 4)]
        assert read == [t.astimezone(UTC) for t in times]
        assert store.verify(fast_sid).ok and store.verify(slow_sid).ok


def _pg_store(db_url: str, **kw: Any) -> EventStore:
    if db_url.startswith("sqlite"):
        pytest.skip("Postgres only: statements prepared through libpq")
    tenant = f"t-{uuid.uuid4().hex}"
    return EventStore(db_url, tenant=tenant, upgrade=True, **kw)


def _prepared_names(db: Any) -> list[str]:
    res = db.pgconn.exec_(b"SELECT name FROM pg_prepared_statements ORDER BY name")
    return [res.get_value(i, 0).decode() for i in range(res.ntuples)]


@skip_on_citus("a distributed store's guarded append is one call of the routed function")
def test_fast_appends_on_postgres_run_one_prepared_statement_and_prepare_it_again(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Postgres a fast append is one named prepared statement per batch shape on the
    kept connection. When the connection loses it (psycopg deallocates every prepared
    statement when it rolls a transaction back), the next append prepares it again and
    lands once, still on the fast path."""
    with _pg_store(db_url) as store:
        sid = store.create_session().id
        store.append(sid, [Message.user("learn the head")])
        calls = _counted(monkeypatch, locked, "write")
        for i in range(3):
            store.append(sid, [Message.user(f"text {i}")])
        store.append(sid, _batch(0))
        db = store._driver_slot._free[-1].driver_connection
        names = [n for n in _prepared_names(db) if n.startswith("eventstore_append_")]
        assert len(names) == 2  # one event with one part; two events with one part each
        db.pgconn.exec_(b"DEALLOCATE ALL")
        assert _prepared_names(db) == []
        store.append(sid, [Message.user("after the deallocation")])
        assert calls == [0]
        assert len(_prepared_names(db)) == 1
        assert db.pgconn.transaction_status == 0  # idle: each statement was its own
        # A transaction left open on the kept connection is rolled back, not written into.
        db.execute("SELECT 1")  # psycopg outside autocommit: BEGIN, and it stays open
        assert db.pgconn.transaction_status == 2
        store.append(sid, [Message.user("after a transaction left open")])
        assert db.pgconn.transaction_status == 0 and calls == [0]
        texts = [e.event.text for e in store.read(sid)]  # type: ignore[union-attr]
        assert texts[-2:] == ["after the deallocation", "after a transaction left open"]
        assert store.head(sid) == 8
        assert store.verify(sid).ok


def test_a_connection_not_speaking_utf8_takes_psycopgs_execute(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parameters go to libpq as UTF-8 text: a connection set to another client encoding
    runs the same statement through psycopg's cursor, which encodes them, in autocommit,
    and is handed back as the pool gave it."""
    with _pg_store(db_url) as store:
        sid = store.create_session().id
        store.append(sid, [Message.user("learn the head")])
        store.append(sid, [Message.user("fast, in UTF-8")])
        db = store._driver_slot._free[-1].driver_connection
        db.pgconn.exec_(b"DEALLOCATE ALL")
        db.pgconn.exec_(b"SET client_encoding TO 'LATIN1'")
        monkeypatch.setattr(locked, "write", None)  # the locked path would fail
        store.append(sid, [Message.user("café, fast")])
        store.append(sid, _batch(1))
        monkeypatch.undo()
        assert db.autocommit is False and db.pgconn.transaction_status == 0
        assert not [n for n in _prepared_names(db) if n.startswith("eventstore_append_")]
        texts = [e.event.text for e in store.read(sid)][:3]  # type: ignore[union-attr]
        assert texts == ["learn the head", "fast, in UTF-8", "café, fast"]
        assert store.head(sid) == 5
        assert store.verify(sid).ok


def test_prepared_parameters_are_postgres_text_or_refused() -> None:
    """What the prepared path sends: text as UTF-8, integers in decimal, aware times in
    ISO form; a NUL (which libpq would cut the text at) and a time without a zone (which
    the server would read in its own zone) are refused, so the append goes the ordinary
    way, which maps the error."""
    import psycopg

    _pg_text = postgres._text

    when = datetime(2025, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    assert _pg_text(None) is None
    assert _pg_text("é") == "é".encode()
    assert _pg_text(-42) == b"-42"
    assert _pg_text(when) == b"2025-05-06T07:08:09.123456+00:00"
    with pytest.raises(psycopg.DataError):
        _pg_text("a\x00b")
    with pytest.raises(TypeError):
        _pg_text(when.replace(tzinfo=None))
    with pytest.raises(TypeError):
        _pg_text(True)


def test_prepared_parameter_list_is_each_parameter_in_text_form() -> None:
    """The prepared path's parameters (one loop over a batch's parameters, each time
    formatted once) are exactly what ``_text`` gives for each parameter, and refuse the
    same."""
    import psycopg

    from eventstore._append.rows import Write

    _pg_text = postgres._text

    def _pg_params(*args: Any) -> list[Any]:
        return postgres._params(Write(*args))

    def _pg_values(*args: Any) -> list[bytes | None]:
        return postgres._text_values(Write(*args))

    t1 = datetime(2025, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    t2 = datetime(2025, 5, 6, 7, 8, 10, tzinfo=timezone(timedelta(hours=-3)))
    events = [
        ("s", 3, "id-3", "message", t1, '{"é":1}', 7, 8, None, None, None, "h3"),
        ("s", 4, "id-4", "custom", t2, "{}", 0, 2, None, None, None, "h4"),
        ("s", 5, "id-5", "message", t2, "{}", -1, 2**40, None, None, None, "h5"),
    ]
    parts = [("s", 3, 0, "text", None, None, None, 5), ("s", 5, 0, "tool_call", "c", "n", None, 1)]
    args = ("tenant", "s", 2, None, 5, "h5", events, parts)
    want = [_pg_text(v) for v in _pg_params(*args)]
    assert _pg_values(*args) == want
    assert want.count(t1.isoformat().encode()) == 1
    assert want.count(t2.isoformat().encode()) == 3  # two rows and the head's time
    with pytest.raises(psycopg.DataError):
        _pg_values("tenant", "s\x00", 2, None, 3, "h3", events[:1], [])
    for bad in (True, 1.5, t1.replace(tzinfo=None)):
        row = (*events[0][:6], bad, *events[0][7:])
        with pytest.raises(TypeError):
            _pg_values("tenant", "s", 2, None, 3, "h3", [row], [])
