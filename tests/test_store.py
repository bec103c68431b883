"""The storage contract, run against a real SQLite file and the real Postgres server.

Every test here takes the parametrized ``store`` (or ``db_url``) fixture, so each one runs
on both backends and through both APIs (sync, and async driven by ``BlockingAsyncStore``),
and all four must behave identically.
"""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import row_count, sqlite_path
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from eventstore import (
    CondensationRequest,
    Custom,
    EventStore,
    IdempotencyError,
    InvalidEventError,
    Message,
    NotFoundError,
    StoredEvent,
)
from eventstore._sql import READ_PAGE


@pytest.fixture
def store(api_store: Any) -> Any:
    """Each test here runs over (sqlite, postgres) x (sync, async): the async store is
    driven through the same calls by ``BlockingAsyncStore``."""
    return api_store


def _users(n: int, prefix: str = "m") -> list[Message]:
    return [Message.user(f"{prefix}{i}") for i in range(n)]


def _texts(evts: list[StoredEvent]) -> list[str]:
    return [e.event.text for e in evts]  # type: ignore[union-attr]


# --------------------------------------------------------------------------- append / read


def test_seqs_are_gapless_from_one(store: EventStore) -> None:
    s = store.create_session()
    assert s.head_seq == 0
    assert store.append(s.id, _users(3), expected_seq=0) == [1, 2, 3]
    assert store.append(s.id, _users(1)) == [4]
    assert store.append(s.id, _users(2), expected_seq=4) == [5, 6]
    assert store.head(s.id) == 6
    got = list(store.read(s.id))
    assert [e.seq for e in got] == [1, 2, 3, 4, 5, 6]
    assert all(e.session_id == s.id for e in got)
    assert len({e.id for e in got}) == 6
    assert all(e.created_at.tzinfo is not None for e in got)
    assert row_count(store, "events", s.id) == 6


def test_append_nothing_writes_nothing(store: EventStore) -> None:
    s = store.create_session()
    assert store.append(s.id, []) == []
    assert store.head(s.id) == 0
    assert row_count(store, "events", s.id) == 0


def test_read_range_and_kinds(store: EventStore) -> None:
    s = store.create_session()
    store.append(
        s.id,
        [
            Message.user("a"),
            Custom(name="note", data={"i": 1}),
            Message.assistant("b"),
            Custom(name="note", data={"i": 2}),
            Message.user("c"),
        ],
    )
    assert [e.seq for e in store.read(s.id, from_seq=2, to_seq=4)] == [2, 3, 4]
    assert [e.seq for e in store.read(s.id, from_seq=4)] == [4, 5]
    assert [e.seq for e in store.read(s.id, to_seq=2)] == [1, 2]
    assert [e.seq for e in store.read(s.id, to_seq=99)] == [1, 2, 3, 4, 5]
    assert [e.seq for e in store.read(s.id, kinds=["custom"])] == [2, 4]
    assert [e.seq for e in store.read(s.id, from_seq=3, kinds=["message"])] == [3, 5]
    assert [e.seq for e in store.read(s.id, kinds=[])] == []
    assert list(store.read(s.id, from_seq=6)) == []
    assert list(store.read(s.id, from_seq=4, to_seq=3)) == []
    customs = list(store.read(s.id, kinds=["custom"]))
    assert [c.event.data for c in customs] == [{"i": 1}, {"i": 2}]  # type: ignore[union-attr]


def test_reading_several_kinds_merges_them_in_seq_order_across_pages(store: EventStore) -> None:
    s = store.create_session()
    batch: list[Any] = []
    for i in range(700):
        if i % 3 == 0:
            batch.append(Custom(name="tick", data={"i": i}))
        elif i % 3 == 1:
            batch.append(CondensationRequest(focus=f"f{i}"))
        else:
            batch.append(Message.user(f"m{i}"))
    store.append(s.id, batch)
    got = [e.seq for e in store.read(s.id, kinds=["custom", "condensation_request"])]
    assert got == [i + 1 for i in range(700) if i % 3 != 2]
    tail = [e.seq for e in store.read(s.id, 600, 650, kinds=["message", "custom"])]
    assert tail == [q for q in range(600, 651) if (q - 1) % 3 != 1]


def test_latest_event_of_a_kind_is_one_probe_and_respects_as_of_and_forks(
    store: EventStore,
) -> None:
    s = store.create_session()
    store.append(s.id, [Custom(name="a", data=1), Message.user("x"), Custom(name="b", data=2)])
    store.append(s.id, [Message.user("y")])
    found = store.latest_event(s.id, "custom")
    assert found is not None and found.seq == 3
    earlier = store.latest_event(s.id, "custom", as_of=2)
    assert earlier is not None and earlier.seq == 1
    assert store.latest_event(s.id, "llm_call") is None
    fork = store.fork(s.id, 2)
    store.append(fork.id, [Message.user("fork's own")])
    inherited = store.latest_event(fork.id, "custom")
    assert inherited is not None and (inherited.seq, inherited.session_id) == (1, s.id)
    own = store.latest_event(fork.id, "message")
    assert own is not None and (own.seq, own.session_id) == (3, fork.id)
    with pytest.raises(NotFoundError):
        store.latest_event("no-such-session", "custom")


def test_streaming_read_larger_than_a_page(store: EventStore) -> None:
    s = store.create_session()
    n = READ_PAGE * 2 + 37
    for start in range(0, n, 200):
        store.append(s.id, [Message.user(f"m{i}") for i in range(start, min(n, start + 200))])
    it = store.read(s.id)
    first = next(it)  # a generator: rows arrive a page at a time
    rest = list(it)
    got = [first, *rest]
    assert [e.seq for e in got] == list(range(1, n + 1))
    assert _texts(got) == [f"m{i}" for i in range(n)]
    # Kind filtering across page boundaries: only every third event is custom.
    s2 = store.create_session()
    evts = [Custom(name="c", data=i) if i % 3 == 0 else Message.user(str(i)) for i in range(n)]
    store.append(s2.id, evts)
    customs = list(store.read(s2.id, kinds=["custom"]))
    assert [c.event.data for c in customs] == list(range(0, n, 3))  # type: ignore[union-attr]


def test_read_bound_is_fixed_when_iteration_starts(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, _users(READ_PAGE + 5))
    it = store.read(s.id)
    next(it)
    store.append(s.id, _users(10, "late"))
    assert len(list(it)) == READ_PAGE + 4


def test_stored_event_roundtrip_preserves_ids_and_times(store: EventStore) -> None:
    s = store.create_session()
    msg = Message.user("hello")
    store.append(s.id, [msg])
    (got,) = list(store.read(s.id))
    assert got.event.id and got.event.created_at is not None
    assert got.event.model_dump(exclude={"id", "created_at"}) == msg.model_dump(
        exclude={"id", "created_at"}
    )
    assert len(got.hash) == 64
    assert got.token_count > 0
    fixed = Message.user("explicit")
    fixed.id = str(uuid.uuid4())
    store.append(s.id, [fixed])
    (again,) = list(store.read(s.id, from_seq=2))
    assert again.id == fixed.id


def test_explicit_created_at_roundtrips_exactly(store: EventStore) -> None:
    s = store.create_session()
    odd = timezone(timedelta(hours=-9, minutes=-30))
    times = [
        datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=odd),
        datetime(1999, 12, 31, 0, 0, 0, 1, tzinfo=UTC),
        datetime(2100, 1, 1, tzinfo=UTC),
    ]
    evts = []
    for t in times:
        m = Message.user(str(t))
        m.created_at = t
        evts.append(m)
    store.append(s.id, evts)
    got = [e.created_at for e in store.read(s.id)]
    assert got == times
    assert all(g.utcoffset() == timedelta(0) for g in got)
    report = store.verify(s.id)  # default: fingerprints too
    assert report.ok and report.events == 3


def test_create_session_fields(store: EventStore) -> None:
    s = store.create_session(user_id="u1", title="T", metadata={"k": [1, "x"]})
    got = store.get_session(s.id)
    assert got == s
    assert (got.tenant, got.user_id, got.title, got.metadata) == (
        store.tenant,
        "u1",
        "T",
        {"k": [1, "x"]},
    )
    assert got.created_at.tzinfo is not None
    own = str(uuid.uuid4())
    custom = store.create_session(session_id=own)
    assert custom.id == own
    assert store.get_session(own).id == own
    with pytest.raises(InvalidEventError, match="is taken"):
        store.create_session(session_id=own)
    with pytest.raises(InvalidEventError, match="session_id"):
        store.create_session(session_id="x" * 37)


def test_updated_at_moves_on_append(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, _users(1))
    after = store.get_session(s.id)
    assert after.updated_at >= s.updated_at
    assert after.head_seq == 1


# --------------------------------------------------------------------------- listing


def test_list_sessions_newest_first_filters_and_pages(store: EventStore) -> None:
    made = [store.create_session(user_id="alice" if i % 2 else "bob") for i in range(7)]
    newest_first = [s.id for s in reversed(made)]
    assert [s.id for s in store.list_sessions()] == newest_first
    assert [s.id for s in store.list_sessions(limit=3)] == newest_first[:3]
    assert [s.id for s in store.list_sessions(limit=3, offset=3)] == newest_first[3:6]
    assert [s.id for s in store.list_sessions(limit=3, offset=6)] == newest_first[6:]
    assert store.list_sessions(limit=3, offset=7) == []
    assert [s.id for s in store.list_sessions(limit=None)] == newest_first
    assert [s.id for s in store.list_sessions(limit=0)] == newest_first
    alice = [s.id for s in made if s.user_id == "alice"][::-1]
    assert [s.id for s in store.list_sessions(user_id="alice")] == alice
    assert [s.id for s in store.list_sessions(user_id="alice", limit=1, offset=1)] == alice[1:2]
    assert store.list_sessions(user_id="nobody") == []
    # Negative paging values mean different things per database: refused on both.
    with pytest.raises(InvalidEventError, match="offset"):
        store.list_sessions(offset=-1)
    with pytest.raises(InvalidEventError, match="limit"):
        store.list_sessions(limit=-1)


def test_list_sessions_default_limit_and_limit_none(store: EventStore) -> None:
    for _ in range(55):
        store.create_session()
    assert len(store.list_sessions()) == 50
    assert len(store.list_sessions(limit=None)) == 55
    assert len(store.list_sessions(limit=0)) == 55


# --------------------------------------------------------------------------- tenants


def test_tenant_isolation(store: EventStore) -> None:
    mine = store.create_session(user_id="u")
    store.append(mine.id, _users(3))
    other = store.with_tenant(f"other-{uuid.uuid4().hex}")
    theirs = other.create_session(user_id="u")
    missing = str(uuid.uuid4())

    def errors(sid: str) -> list[str]:
        out = []
        for call in (
            lambda: other.get_session(sid),
            lambda: other.head(sid),
            lambda: other.append(sid, _users(1)),
            lambda: other.append(sid, _users(1), expected_seq=3, idempotency_key="k"),
            lambda: list(other.read(sid)),
            lambda: other.fork(sid, 1),
            lambda: other.verify(sid, fingerprints=False),
        ):
            with pytest.raises(NotFoundError) as info:
                call()
            out.append(str(info.value).replace(sid, "<id>"))
        return out

    # Another tenant's session is indistinguishable from one that does not exist.
    assert errors(mine.id) == errors(missing)
    assert store.head(mine.id) == 3
    assert row_count(store, "events", mine.id) == 3
    assert [s.id for s in other.list_sessions()] == [theirs.id]
    assert [s.id for s in other.list_sessions(user_id="u")] == [theirs.id]
    assert [s.id for s in store.list_sessions(limit=None)] == [mine.id]
    with pytest.raises(NotFoundError):
        store.get_session(theirs.id)


# --------------------------------------------------------------------------- forks


def test_fork_shares_prefix_without_copying(store: EventStore) -> None:
    parent = store.create_session(title="p", user_id="u", metadata={"a": 1})
    store.append(parent.id, _users(5, "p"))
    # Other test runs may share the Postgres database: count this tenant's rows only.
    before = store.stats()["events"]
    fork = store.fork(parent.id, 3)
    assert store.stats()["events"] == before == 5
    assert row_count(store, "events", parent.id) == 5
    assert row_count(store, "events", fork.id) == 0
    assert row_count(store, "parts", fork.id) == 0
    assert (fork.parent_id, fork.fork_seq, fork.head_seq) == (parent.id, 3, 3)
    assert (fork.title, fork.user_id, fork.metadata) == ("p", "u", {"a": 1})

    assert store.append(fork.id, _users(2, "f"), expected_seq=3) == [4, 5]
    assert row_count(store, "events", fork.id) == 2
    assert row_count(store, "events", parent.id) == 5
    got = list(store.read(fork.id))
    assert _texts(got) == ["p0", "p1", "p2", "f0", "f1"]
    assert [e.session_id for e in got] == [parent.id] * 3 + [fork.id] * 2
    # The parent never sees the fork's appends.
    assert _texts(list(store.read(parent.id))) == [f"p{i}" for i in range(5)]
    assert store.head(parent.id) == 5
    assert [e.seq for e in store.read(fork.id, from_seq=3, to_seq=4)] == [3, 4]
    assert store.verify(fork.id, fingerprints=False).ok
    assert store.verify(parent.id, fingerprints=False).ok
    assert [s.id for s in store.list_sessions(parent_id=parent.id)] == [fork.id]


def test_fork_of_a_fork(store: EventStore) -> None:
    root = store.create_session()
    store.append(root.id, _users(5, "r"))
    f1 = store.fork(root.id, 3)
    store.append(f1.id, _users(3, "a"))  # f1: r0 r1 r2 a0 a1 a2
    f2 = store.fork(f1.id, 4)
    store.append(f2.id, _users(2, "b"))  # f2: r0 r1 r2 a0 b0 b1
    got = list(store.read(f2.id))
    assert [e.seq for e in got] == [1, 2, 3, 4, 5, 6]
    assert _texts(got) == ["r0", "r1", "r2", "a0", "b0", "b1"]
    assert [e.session_id for e in got] == [root.id] * 3 + [f1.id] + [f2.id] * 2
    # Forking below the parent's own fork point skips the parent's rows entirely.
    f3 = store.fork(f1.id, 2)
    store.append(f3.id, _users(1, "c"))
    assert _texts(list(store.read(f3.id))) == ["r0", "r1", "c0"]
    f0 = store.fork(f2.id, 0)
    assert list(store.read(f0.id)) == []
    store.append(f0.id, _users(1, "z"))
    assert _texts(list(store.read(f0.id))) == ["z0"]
    for sid in (root.id, f1.id, f2.id, f3.id, f0.id):
        report = store.verify(sid, fingerprints=False)
        assert report.ok, report.problems
    assert store.verify(f2.id, fingerprints=False).events == 6
    assert _texts(list(store.read(f1.id))) == ["r0", "r1", "r2", "a0", "a1", "a2"]


def test_fork_bounds(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, _users(2))
    with pytest.raises(InvalidEventError, match="at_seq"):
        store.fork(s.id, 3)
    with pytest.raises(InvalidEventError, match="at_seq"):
        store.fork(s.id, -1)
    with pytest.raises(NotFoundError):
        store.fork(str(uuid.uuid4()), 0)


# --------------------------------------------------------------------------- idempotency


def test_idempotent_retry_returns_first_result(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, _users(1))
    first = store.append_result(s.id, _users(2, "x"), expected_seq=1, idempotency_key="k1")
    assert (first.seqs, first.replayed, first.head_seq) == ([2, 3], False, 3)
    rows = row_count(store, "events", s.id)
    # The retry carries the same (now stale) expected_seq: still a replay, not a conflict.
    again = store.append_result(s.id, _users(2, "x"), expected_seq=1, idempotency_key="k1")
    assert (again.seqs, again.replayed) == ([2, 3], True)
    assert row_count(store, "events", s.id) == rows
    assert store.append(s.id, _users(1, "y")) == [4]
    later = store.append_result(s.id, _users(2, "x"), idempotency_key="k1")
    assert (later.seqs, later.replayed, later.head_seq) == ([2, 3], True, 4)
    assert store.append(s.id, _users(2, "x"), idempotency_key="k1") == [2, 3]
    assert row_count(store, "events", s.id) == 4
    with pytest.raises(IdempotencyError, match="k1"):
        store.append(s.id, _users(3, "x"), idempotency_key="k1")
    with pytest.raises(IdempotencyError):
        store.append(s.id, _users(1, "x"), idempotency_key="k1")
    assert row_count(store, "events", s.id) == 4
    # Keys are per session.
    other = store.create_session()
    assert store.append(other.id, _users(2), idempotency_key="k1") == [1, 2]


# --------------------------------------------------------------------------- append-only


def _raw_fails(store: EventStore, sql: str, **params: object) -> str:
    """Run ``sql`` directly; it must be rejected by the database. Returns the error text."""
    with pytest.raises(DBAPIError) as info:
        with store.engine.begin() as conn:
            conn.execute(text(sql), params)
    return str(info.value.orig)


def test_events_reject_update_and_delete(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, _users(2))
    (before, _) = list(store.read(s.id))
    for sql in (
        "UPDATE events SET payload = 'x' WHERE session_id = :s",
        "UPDATE events SET token_count = 0 WHERE session_id = :s AND seq = 1",
        "UPDATE events SET seq = seq + 10 WHERE session_id = :s",
        "DELETE FROM events WHERE session_id = :s",
        "DELETE FROM events WHERE session_id = :s AND seq = 2",
    ):
        assert "append-only" in _raw_fails(store, sql, s=s.id)
    assert row_count(store, "events", s.id) == 2
    (after, _) = list(store.read(s.id))
    assert after == before
    assert store.verify(s.id, fingerprints=False).ok


def test_postgres_rejects_truncate(store: EventStore, backend: str) -> None:
    if backend != "postgres":
        pytest.skip("TRUNCATE exists only on Postgres")
    for table in ("events", "parts"):
        assert "append-only" in _raw_fails(store, f"TRUNCATE {table} CASCADE")


def test_parts_allow_only_one_compaction_stamp(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, [Message.tool("c1", "out", name="sh")])
    where = "session_id = :s AND seq = 1 AND idx = 0"
    assert "append-only" in _raw_fails(
        store, f"UPDATE parts SET token_count = 1 WHERE {where}", s=s.id
    )
    assert "append-only" in _raw_fails(
        store, f"UPDATE parts SET compacted_seq = 5 WHERE {where}", s=s.id
    )  # both columns or neither
    assert "append-only" in _raw_fails(store, f"DELETE FROM parts WHERE {where}", s=s.id)
    stamp = "UPDATE parts SET compacted_at = :t, compacted_seq = :q WHERE " + where
    with store.engine.begin() as conn:
        conn.execute(text(stamp), {"s": s.id, "t": "2026-01-01 00:00:00", "q": 9})
    assert "append-only" in _raw_fails(store, stamp, s=s.id, t="2026-01-02 00:00:00", q=10)
    assert "append-only" in _raw_fails(
        store,
        f"UPDATE parts SET compacted_at = NULL, compacted_seq = NULL WHERE {where}",
        s=s.id,
    )
    assert "append-only" in _raw_fails(
        store, f"UPDATE parts SET token_count = token_count + 1 WHERE {where}", s=s.id
    )
    assert "append-only" in _raw_fails(store, f"DELETE FROM parts WHERE {where}", s=s.id)
    with store.engine.connect() as conn:
        row = conn.execute(
            text(f"SELECT compacted_seq, token_count FROM parts WHERE {where}"), {"s": s.id}
        ).one()
    assert row.compacted_seq == 9


# --------------------------------------------------------------------------- tamper evidence


def _tamper(store: EventStore, tmp_path: Path, sql: str, **params: object) -> EventStore:
    """Apply ``sql`` behind the store's back, with the append-only guard switched off.

    On SQLite the change goes into a copy of the file (the original stays intact); on
    Postgres the test owns a throwaway database, so the trigger is disabled in place.
    """
    if store.dialect == "sqlite":
        src = sqlite_path(store.url)
        copy = tmp_path / "tampered.db"
        copy.parent.mkdir(exist_ok=True)
        with sqlite3.connect(src) as c:  # fold the WAL into the main file before copying
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        shutil.copy(src, copy)
        c = sqlite3.connect(copy)
        c.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        c.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
        c.execute(sql, tuple(params.values()))
        c.commit()
        c.close()
        return EventStore(f"sqlite:///{copy}", tenant=store.tenant)
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE events DISABLE TRIGGER ALL"))
        conn.execute(text(sql.replace("?", ":v")), {"v": next(iter(params.values()))})
        conn.execute(text("ALTER TABLE events ENABLE TRIGGER ALL"))
    return store


def test_verify_detects_changed_payload(own_db: str, tmp_path: Path) -> None:
    with EventStore(own_db, upgrade=True) as store:
        s = store.create_session()
        store.append(s.id, _users(4))
        assert store.verify(s.id, fingerprints=False).ok
        forged = '{"parts":[{"text":"forged","type":"text"}],"role":"user"}'
        sql = f"UPDATE events SET payload = ? WHERE session_id = '{s.id}' AND seq = 2"
        tampered = _tamper(store, tmp_path, sql, v=forged)
        assert _texts(list(tampered.read(s.id)))[1] == "forged"  # the change is visible
        report = tampered.verify(s.id, fingerprints=False)
        assert not report.ok
        assert report.problems == ["seq 2: hash mismatch (event changed after append)"]
        if tampered is not store:
            tampered.close()
            assert store.verify(s.id, fingerprints=False).ok


def test_verify_detects_a_gap(own_db: str, tmp_path: Path) -> None:
    with EventStore(own_db, upgrade=True) as store:
        s = store.create_session()
        store.append(s.id, _users(4))
        sql = f"DELETE FROM events WHERE session_id = '{s.id}' AND seq = ?"
        tampered = _tamper(store, tmp_path, sql, v=3)
        report = tampered.verify(s.id, fingerprints=False)
        assert not report.ok
        assert any("gap: expected seq 3, found 4" in p for p in report.problems), report.problems
        # Removing the newest event leaves the recorded head pointing past the log's end.
        tampered2 = _tamper(tampered, tmp_path / "again", sql, v=4)
        report = tampered2.verify(s.id, fingerprints=False)
        assert any("head_seq is 4 but the log ends at 2" in p for p in report.problems), (
            report.problems
        )
        if tampered2 is not store:
            tampered2.close()
        if tampered is not store:
            tampered.close()
            assert store.verify(s.id, fingerprints=False).ok


# --------------------------------------------------------------------------- durability


def test_sqlite_durability_pragmas(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    with EventStore(url) as full, full.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    with EventStore(url, sqlite_synchronous="normal", busy_timeout_ms=1234) as fast:
        with fast.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1234
    with pytest.raises(ValueError, match="sqlite_synchronous"):
        EventStore(url, sqlite_synchronous="sometimes")


def test_citus_direct_option_is_read_from_the_url() -> None:
    """``citus_direct`` leaves the URL the driver sees; a value other than true or false,
    or the option on a SQLite URL, is refused; a store on SQLite refuses it too."""
    from eventstore._citus_direct import split_option
    from eventstore.errors import ConfigurationError

    url = "postgresql+psycopg://u@h:5/db"
    assert split_option(url) == (url, False)
    assert split_option(url + "?citus_direct=true&connect_timeout=3") == (
        url + "?connect_timeout=3",
        True,
    )
    assert split_option(url + "?citus_direct=off") == (url, False)
    with pytest.raises(ConfigurationError):
        split_option(url + "?citus_direct=maybe")
    with pytest.raises(ConfigurationError):
        split_option("sqlite:///x.db?citus_direct=true")
    with pytest.raises(ConfigurationError):
        EventStore("sqlite:///x.db?citus_direct=true")


def test_citus_direct_changes_nothing_but_where_routed_calls_go(db_url: str) -> None:
    """With ``citus_direct=true`` a store on plain Postgres appends and reads as without it
    and never looks a session's worker up; on a distributed database (CI's Citus mode)
    it looks each session up once. SQLite refuses the option."""
    from eventstore._citus_direct import split_option
    from eventstore.errors import ConfigurationError

    direct = db_url + ("&" if "?" in db_url else "?") + "citus_direct=true"
    if db_url.startswith("sqlite"):
        with pytest.raises(ConfigurationError):
            EventStore(direct)
        return
    assert split_option(direct) == (db_url, True)
    store = EventStore(direct, tenant=f"t-{uuid.uuid4().hex}")
    try:
        assert store._direct is not None
        sid = store.create_session().id
        store.append(sid, _users(2))
        store.append(sid, _users(3, "n"))  # the guarded (or routed) path
        assert _texts(list(store.read(sid))) == ["m0", "m1", "n0", "n1", "n2"]
        assert [m["content"] for m in store.view(sid).to_messages()] == [
            "m0", "m1", "n0", "n1", "n2"
        ]  # fmt: skip
        assert store._direct.lookups == (1 if store._routed else 0)
        assert store.verify(sid).ok
    finally:
        store.close()
