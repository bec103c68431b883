"""The tenant feed: one commit-ordered position per event, tails that never skip.

Conformance runs over (sqlite, postgres) x (sync, async); the races use real concurrent
writers (threads holding open transactions, and separate processes).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import threading
import time
import uuid
from typing import Any

import pytest

from eventstore import (
    AsyncEventStore,
    EventStore,
    InvalidEventError,
    Message,
    NotFoundError,
    SchemaError,
)
from eventstore._append import locked
from eventstore._features import feed as _feed


def _keys(items: list[Any]) -> list[tuple[str, int]]:
    return [(i.session_id, i.stored.seq) for i in items]


def test_tail_orders_every_event_of_the_tenant_by_commit(api_store: Any) -> None:
    a = api_store.create_session()
    b = api_store.create_session()
    api_store.append(a.id, [Message.user("a1"), Message.assistant("a2")])
    api_store.append(b.id, [Message.user("b1")])
    api_store.append(a.id, [Message.user("a3")])
    items = list(api_store.tail())
    assert [i.position for i in items] == [1, 2, 3, 4]  # dense, from 1
    assert _keys(items) == [(a.id, 1), (a.id, 2), (b.id, 1), (a.id, 3)]
    assert items[2].stored.event.text == "b1"
    # Resume from any position; filter by session (positions stay tenant-wide).
    assert _keys(list(api_store.tail(after=2))) == [(b.id, 1), (a.id, 3)]
    assert [i.position for i in api_store.tail(session_id=a.id)] == [1, 2, 4]
    assert [i.position for i in api_store.tail(after=1, limit=2)] == [2, 3]
    assert api_store.feed_position() == 4
    assert list(api_store.tail(after=4)) == []


def test_tenants_have_their_own_feeds(api_store: Any) -> None:
    other = api_store.with_tenant(f"other-{uuid.uuid4().hex}")
    mine = api_store.create_session()
    theirs = other.create_session()
    api_store.append(mine.id, [Message.user("mine")])
    other.append(theirs.id, [Message.user("theirs"), Message.user("theirs too")])
    assert _keys(list(api_store.tail())) == [(mine.id, 1)]
    assert [i.position for i in other.tail()] == [1, 2]
    with pytest.raises(NotFoundError):
        list(api_store.tail(session_id=theirs.id))
    with pytest.raises(InvalidEventError):
        list(api_store.tail(after=-1))


def test_forks_feed_only_their_own_events(api_store: Any) -> None:
    s = api_store.create_session()
    api_store.append(s.id, [Message.user(f"m{i}") for i in range(4)])
    fork = api_store.fork(s.id, 2)
    api_store.append(fork.id, [Message.user("fork's own")])
    items = list(api_store.tail())
    assert _keys(items) == [(s.id, 1), (s.id, 2), (s.id, 3), (s.id, 4), (fork.id, 3)]


def test_a_large_batch_is_paged(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, [Message.user(f"m{i}") for i in range(1_234)])
    positions = [i.position for i in store.tail()]
    assert positions == list(range(1, 1_235))
    assert [i.stored.seq for i in store.tail(after=1_000, limit=5)] == [
        1_001,
        1_002,
        1_003,
        1_004,
        1_005,
    ]


def test_follow_sees_appends_made_while_it_waits(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, [Message.user("before")])

    def writer() -> None:
        for i in range(5):
            time.sleep(0.05)
            store.append(s.id, [Message.user(f"live {i}")])

    t = threading.Thread(target=writer)
    t.start()
    seen = []
    for item in store.follow(after=1, poll_max=0.05, idle_timeout=1.0):
        seen.append(item.stored.event.text)
        if len(seen) == 5:
            break
    t.join()
    assert seen == [f"live {i}" for i in range(5)]
    # Idle: it ends after idle_timeout with nothing new.
    started = time.monotonic()
    assert list(store.follow(after=6, idle_timeout=0.2, poll_max=0.05)) == []
    assert time.monotonic() - started < 5


def test_async_follow_waits_without_a_thread(db_url: str) -> None:
    async def main() -> list[str]:
        async with AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}") as store:
            s = await store.create_session()

            async def writer() -> None:
                for i in range(3):
                    await asyncio.sleep(0.05)
                    await store.append(s.id, [Message.user(f"async {i}")])

            task = asyncio.create_task(writer())
            seen = []
            async for item in store.follow(poll_max=0.05, idle_timeout=1.0):
                seen.append(item.stored.event.text)
                if len(seen) == 3:
                    break
            await task
            assert [i.position async for i in store.tail()] == [1, 2, 3]
            return seen

    assert asyncio.run(main()) == ["async 0", "async 1", "async 2"]


def test_a_late_commit_is_not_skipped(db_url: str, backend: str) -> None:
    """The classic tail bug: writer A starts first and commits last. A follower that read
    B's event in between must still get A's event, after B's."""
    if backend != "postgres":
        pytest.skip("SQLite writers are serialized: a second writer cannot commit first")
    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant) as store:
        a = store.create_session()
        b = store.create_session()
        encoded = store._encode([Message.user("A, committed late")])
        with store._tx(write=True) as conn:
            locked.write(conn, tenant, a.id, encoded, expected_seq=None, idempotency_key=None)
            store.append(b.id, [Message.user("B, committed first")])  # another connection
            first = list(store.tail())
            assert _keys(first) == [(b.id, 1)]
        second = list(store.tail(after=first[-1].position))
        assert _keys(second) == [(a.id, 1)]
        assert second[0].position == first[-1].position + 1


def _write(url: str, tenant: str, n: int) -> None:
    with EventStore(url, tenant=tenant) as store:
        sid = store.create_session().id
        for i in range(n):
            store.append(sid, [Message.user(f"{i}")], expected_seq=i)


def test_a_follower_never_skips_under_concurrent_writers(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    writers, per_writer = 3, 40
    with EventStore(db_url, tenant=tenant, upgrade=True) as store:
        ctx = multiprocessing.get_context("spawn")
        procs = [
            ctx.Process(target=_write, args=(db_url, tenant, per_writer)) for _ in range(writers)
        ]
        for p in procs:
            p.start()
        seen: list[Any] = []
        deadline = time.monotonic() + 120
        while len(seen) < writers * per_writer and time.monotonic() < deadline:
            after = seen[-1].position if seen else 0
            seen.extend(store.tail(after=after))
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        positions = [i.position for i in seen]
        assert positions == list(range(1, writers * per_writer + 1))  # no gap, no repeat
        per_session: dict[str, list[int]] = {}
        for i in seen:
            per_session.setdefault(i.session_id, []).append(i.stored.seq)
        assert sorted(per_session.values()) == [list(range(1, per_writer + 1))] * writers


def test_tail_from_the_command_line(db_url: str) -> None:
    import json

    from click.testing import CliRunner

    from eventstore.cli import cli

    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant, upgrade=True) as store:
        s = store.create_session()
        store.append(s.id, [Message.user("hello"), Message.assistant("hi")])
    runner = CliRunner()
    base = ["--db", db_url, "--tenant", tenant]
    out = runner.invoke(cli, [*base, "tail", "--json"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert [r["position"] for r in rows] == [1, 2]
    assert rows[0]["session_id"] == s.id
    human = runner.invoke(cli, [*base, "tail", "--after", "1", "--session", s.id])
    assert human.exit_code == 0 and "hi" in human.output and "hello" not in human.output
    follow = runner.invoke(cli, [*base, "tail", "--follow", "--idle-timeout", "0.2"])
    assert follow.exit_code == 0 and "hello" in follow.output


def test_listeners_get_typed_notifications_and_resume(store: EventStore) -> None:
    from eventstore import ToolCallPart
    from eventstore.notifications import (
        MessageAdded,
        MessageQueued,
        RunStateChanged,
        ToolAnswered,
        ToolCalled,
        notifications,
    )

    s = store.create_session()
    store.append(s.id, [Message.user("go")])
    call = ToolCallPart(id="c1", name="ls", arguments="{}")
    store.append(s.id, [Message(role="assistant", parts=[call])])
    store.set_run_state(s.id, "executing_tools")
    store.append(s.id, [Message.tool("c1", "a.py", name="ls")])
    store.enqueue(s.id, "next please")
    notes = list(notifications(store.tail()))
    kinds = [type(n) for n in notes]
    assert kinds == [
        MessageAdded,
        MessageAdded,
        ToolCalled,
        RunStateChanged,
        MessageAdded,
        ToolAnswered,
        MessageQueued,
    ]
    assert isinstance(notes[2], ToolCalled) and notes[2].call.name == "ls"
    assert notes[1].position == notes[2].position == 2  # one event, two notifications
    # A listener that stopped after the tool call resumes from its saved position.
    saved = notes[2].position
    again = list(notifications(store.tail(after=saved)))
    assert [type(n) for n in again] == kinds[3:]


def test_every_path_that_moves_a_head_feeds_the_tail(api_store: Any) -> None:
    """The ordinary append, the fast path, an idempotent append, a bulk batch and the
    record a purge appends each reach the feed once, in order (on Postgres the statement
    that moves the head queues the range itself: no trigger does it)."""
    s = api_store.create_session()
    api_store.append(s.id, [Message.user("ordinary")])  # the head is learnt here
    api_store.append(s.id, [Message.user("fast")], expected_seq=1)
    api_store.append(s.id, [Message.user("keyed")], idempotency_key="k")
    api_store.append(s.id, [Message.user("keyed")], idempotency_key="k")  # a replay: no range
    api_store.append(s.id, [Message.user(f"bulk {i}") for i in range(20)])
    # A keyed bulk batch: its first row is written apart from the rest.
    api_store.append(
        s.id, [Message.user(f"keyed bulk {i}") for i in range(20)], idempotency_key="b"
    )
    purged = api_store.purge(s.id, through_seq=2)
    assert purged is not None
    items = list(api_store.tail(session_id=s.id))
    assert [i.stored.seq for i in items] == list(range(1, 45))
    assert [i.position for i in items] == list(range(1, 45))
    assert items[-1].stored.event.kind == "purge"
    assert api_store.feed_position() == 44


# --------------------------------------------------------------------------- SQLite's numbering


def _sqlite_rows(path: Any, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_sqlite_appends_leave_the_numbering_to_readers_in_commit_order(tmp_path: Any) -> None:
    """An append on SQLite writes nothing for the feed; the first reader numbers every
    tenant's new events, in the order they were committed, one range per run of a
    session's consecutive events, and the cursor names the newest."""
    path = tmp_path / "feed.db"
    with EventStore(f"sqlite:///{path}", tenant="t1") as one:
        two = one.with_tenant("t2")
        a, b = one.create_session(), one.create_session()
        c = two.create_session()
        one.append(a.id, [Message.user("a1")])
        one.append(a.id, [Message.user("a2"), Message.user("a3")], expected_seq=1)
        two.append(c.id, [Message.user("c1")])
        one.append(b.id, [Message.user("b1")])
        one.append(a.id, [Message.user("a4")], expected_seq=3)
        assert _sqlite_rows(path, "SELECT count(*) FROM feed") == [(0,)]
        assert one.feed_position() == 5
        # The other tenant's events were numbered by the same reader, in its own feed.
        assert _sqlite_rows(path, "SELECT tenant, position_start, position_end, from_seq, "
                            "to_seq FROM feed ORDER BY tenant, position_end") == [
            ("t1", 1, 3, 1, 3),  # a1..a3: two appends, one range
            ("t1", 4, 4, 1, 1),  # b1
            ("t1", 5, 5, 4, 4),  # a4
            ("t2", 1, 1, 1, 1),  # c1
        ]  # fmt: skip
        assert _sqlite_rows(path, "SELECT id, session_id, seq FROM feed_cursor") == [(1, a.id, 4)]
        assert _keys(list(one.tail())) == [(a.id, 1), (a.id, 2), (a.id, 3), (b.id, 1), (a.id, 4)]
        assert _keys(list(two.tail())) == [(c.id, 1)]
        # Reading again numbers nothing twice; the next append continues the sequence.
        assert one.feed_position() == 5
        one.append(b.id, [Message.user("b2")], expected_seq=1)
        assert [(i.position, i.stored.seq) for i in one.tail(after=5)] == [(6, 2)]


def test_sqlite_numbers_a_long_backlog_in_pages(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_feed, "SQLITE_NUMBER_PAGE", 7)
    with EventStore(f"sqlite:///{tmp_path / 'feed.db'}") as store:
        sessions = [store.create_session().id for _ in range(3)]
        order = []
        for n in range(1, 11):
            for sid in sessions:
                store.append(sid, [Message.user(f"{sid} {n}")], expected_seq=n - 1)
                order.append((sid, n))
        items = list(store.tail())
    assert [i.position for i in items] == list(range(1, 31))
    assert _keys(items) == order


def test_sqlite_cursor_naming_a_missing_event_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "feed.db"
    with EventStore(f"sqlite:///{path}") as store:
        s = store.create_session()
        store.append(s.id, [Message.user("one")])
        assert store.feed_position() == 1
        store.append(s.id, [Message.user("two")], expected_seq=1)
        db = sqlite3.connect(path)
        db.execute("UPDATE feed_cursor SET seq = 99")
        db.commit()
        db.close()
        with pytest.raises(SchemaError, match="feed's cursor names event 99"):
            store.feed_position()
