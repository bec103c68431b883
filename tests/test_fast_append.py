"""The append fast path writes exactly what the ordinary path writes, and steps aside
whenever its remembered head is stale."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from eventstore import (
    Condensation,
    ConflictError,
    EventStore,
    InvalidEventError,
    Message,
    PartRef,
    Prune,
    ToolCallPart,
    _sql,
)


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


def test_fast_and_ordinary_paths_write_the_same_rows(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    ordinary_calls = 0
    real_append = _sql.append

    def counting(*args: Any, **kw: Any) -> Any:
        nonlocal ordinary_calls
        ordinary_calls += 1
        return real_append(*args, **kw)

    with EventStore(db_url, tenant=tenant, upgrade=True) as store:
        fast_sid, slow_sid = str(uuid.uuid4()), str(uuid.uuid4())
        store.create_session(session_id=fast_sid)
        store.create_session(session_id=slow_sid)
        monkeypatch.setattr(_sql, "append", counting)
        for i in range(4):
            store.append(fast_sid, _batch(i))
        assert ordinary_calls == 1  # the first append learns the head; the rest are fast
        for i in range(4):
            store._heads.drop(slow_sid)  # force the ordinary path every time
            store.append(slow_sid, _batch(i))
        assert ordinary_calls == 5
        # Event ids are fresh per event (and hashed), so the chains differ; every other
        # column, the parts rows and the session row are the same on both paths.
        assert _rows(store, fast_sid) == _rows(store, slow_sid)
        assert store.verify(fast_sid).ok and store.verify(slow_sid).ok


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


def test_bulk_batches_write_the_same_rows_as_small_appends(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch over ``BULK_MIN`` events goes through the driver (executemany or COPY): the
    stored rows are byte for byte those of the same events appended in small batches."""
    from eventstore import _bulk

    calls = 0
    real = _bulk.bulk_insert

    def counting(*args: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kw)

    monkeypatch.setattr(_sql, "bulk_insert", counting)
    events = [m for i in range(20) for m in _batch(i % 60)]
    with EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True) as store:
        bulk_sid, small_sid = str(uuid.uuid4()), str(uuid.uuid4())
        store.create_session(session_id=bulk_sid)
        store.create_session(session_id=small_sid)
        store.append(bulk_sid, events)
        assert calls == 1
        for i in range(0, len(events), 2):
            store._heads.drop(small_sid)
            store.append(small_sid, events[i : i + 2])
        assert calls == 1
        assert _rows(store, bulk_sid) == _rows(store, small_sid)
        assert store.verify(bulk_sid).ok


def test_a_bulk_batch_refused_halfway_writes_nothing(store: EventStore) -> None:
    """An event refused late in a bulk batch (a condensation naming its own seq, found
    while the rows are hashed) leaves the session exactly as it was, and the next append
    chains from the old head."""
    sid = store.create_session().id
    store.append(sid, [Message.user(f"m{i}") for i in range(3)])
    before = store.verify(sid).head_hash
    bad = Condensation(forgotten_from=1, forgotten_to=40, summary="s")
    batch: list[Any] = [Message.user(f"b{i}") for i in range(30)] + [bad]
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
