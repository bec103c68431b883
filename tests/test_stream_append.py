"""Large batches on Postgres are encoded while their rows stream into COPY: the outcome,
and the error a refused batch raises, are those of encoding the whole batch first. Every
test runs on both backends (SQLite encodes first); on Postgres each one checks that the
batch took the streaming path."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import text

from eventstore import (
    Condensation,
    ConflictError,
    EventStore,
    FilePart,
    InvalidEventError,
    Message,
    NotFoundError,
    PartRef,
    PayloadTooLargeError,
    Prune,
    TextPart,
    ToolCallPart,
)
from eventstore import store as store_module
from eventstore._bulk import BULK_MIN


@pytest.fixture
def streamed(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many appends took the streaming path (it must be all big ones on Postgres)."""
    calls: list[int] = []
    real = store_module.stream_append

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(store_module, "stream_append", counting)
    return calls


def _batch(n: int, start: int = 0) -> list[Message]:
    out: list[Message] = []
    for i in range(start, start + n):
        if i % 2:
            out.append(Message.tool(f"c{i - 1}", f"output {i}"))
        else:
            call = ToolCallPart(id=f"c{i}", name="grep", arguments='{"q": 1}')
            out.append(Message(role="assistant", parts=[TextPart(text=f"t{i}"), call]))
    return out


def _counts(store: EventStore, sid: str) -> tuple[int, int, int]:
    with store.engine.connect() as conn:
        ev = conn.execute(text("SELECT count(*) FROM events WHERE session_id = :s"), {"s": sid})
        pt = conn.execute(text("SELECT count(*) FROM parts WHERE session_id = :s"), {"s": sid})
        return ev.scalar_one(), pt.scalar_one(), store.get_session(sid).head_seq


def _took_stream(store: EventStore, streamed: list[int], appends: int) -> None:
    assert len(streamed) == (appends if store.dialect == "postgresql" else 0)


def _mutated_invalid() -> Message:
    """A model made valid and then broken by an assignment (models do not revalidate)."""
    bad = Message.user("fine at first")
    bad.role = "narrator"  # type: ignore[assignment]
    return bad


def test_a_streamed_batch_is_stored_and_verifies(store: EventStore, streamed: list[int]) -> None:
    sid = store.create_session().id
    store.append(sid, _batch(3))
    result = store.append_result(sid, _batch(40, 3), expected_seq=3)
    assert result.seqs == list(range(4, 44)) and result.head_seq == 43
    _took_stream(store, streamed, 1)
    assert _counts(store, sid) == (43, 3 * 2 // 2 + 2 + 40 // 2 * 3, 43)
    report = store.verify(sid)
    assert report.ok and report.head_hash == result.head_hash
    # The remembered head is the streamed batch's: the next append chains from it.
    assert store.append(sid, [Message.user("next")], expected_seq=43) == [44]
    assert store.verify(sid).ok

    def plain(evts: Any) -> list[dict[str, Any]]:
        return [e.model_dump(exclude={"id", "created_at"}) for e in evts]

    assert plain(e.event for e in store.read(sid, 4, 43)) == plain(_batch(40, 3))


def test_an_invalid_event_late_in_a_streamed_batch_writes_nothing(
    store: EventStore, streamed: list[int]
) -> None:
    sid = store.create_session().id
    store.append(sid, _batch(2))
    before = store.verify(sid).head_hash
    batch: list[Any] = [*_batch(30, 2), _mutated_invalid(), *_batch(4, 32)]
    with pytest.raises(InvalidEventError, match=r"events\[30\]\.message\.role"):
        store.append(sid, batch)
    _took_stream(store, streamed, 1)
    assert _counts(store, sid) == (2, 3, 2)
    report = store.verify(sid)
    assert report.ok and report.head_hash == before
    # Nothing was remembered from the refused batch: the next one chains from seq 2.
    assert store.append(sid, batch[:30], expected_seq=2) == list(range(3, 33))
    assert store.verify(sid).ok


def test_an_oversized_event_in_a_streamed_batch_writes_nothing(store: EventStore) -> None:
    sid = store.create_session().id
    small = EventStore(store.url, tenant=store.tenant, max_event_bytes=2_000)
    try:
        batch: list[Any] = [*_batch(20), Message.user("x" * 5_000)]
        with pytest.raises(PayloadTooLargeError):
            small.append(sid, batch)
    finally:
        small.close()
    assert _counts(store, sid) == (0, 0, 0)


def _ordinary_error(store: EventStore, batch: list[Any]) -> str:
    """The message of the error encoding the batch up front raises (what the ordinary path
    reports)."""
    with pytest.raises(InvalidEventError) as err:
        store._encode(batch)
    return str(err.value)


def test_a_streamed_batch_reports_the_error_the_ordinary_path_reports(
    store: EventStore, streamed: list[int]
) -> None:
    """A bad reference early in the batch (found while hashing, after the event before it
    was sent) and an invalid event later: the invalid event is reported, as when the whole
    batch is encoded before anything is hashed."""
    sid = store.create_session().id
    bad_ref = Condensation(forgotten_from=1, forgotten_to=90, summary="s")
    batch: list[Any] = [*_batch(5), bad_ref, *_batch(20, 6), _mutated_invalid()]
    expected = _ordinary_error(store, batch)
    assert "events[26]" in expected
    with pytest.raises(InvalidEventError) as err:
        store.append(sid, batch)
    assert str(err.value) == expected
    # Without the invalid event, the bad reference is what is refused.
    with pytest.raises(InvalidEventError, match=r"events\[5\].*forgotten_to"):
        store.append(sid, batch[:-1])
    _took_stream(store, streamed, 2)
    assert _counts(store, sid) == (0, 0, 0)


def test_a_conflict_or_a_missing_session_comes_after_an_invalid_event(
    store: EventStore, streamed: list[int]
) -> None:
    sid = store.create_session().id
    store.append(sid, _batch(2))
    good = _batch(20, 2)
    bad: list[Any] = [*good, _mutated_invalid()]
    with pytest.raises(InvalidEventError, match=r"events\[20\]"):
        store.append(sid, bad, expected_seq=1)  # stale, but the event is refused first
    with pytest.raises(ConflictError) as err:
        store.append(sid, good, expected_seq=1)
    assert err.value.current_seq == 2
    missing = str(uuid.uuid4())
    with pytest.raises(InvalidEventError, match=r"events\[20\]"):
        store.append(missing, bad)
    with pytest.raises(NotFoundError):
        store.append(missing, good)
    _took_stream(store, streamed, 4)
    assert _counts(store, sid) == (2, 3, 2)
    assert store.append(sid, good, expected_seq=2) == list(range(3, 23))


def test_a_streamed_batch_with_prunes_and_attachments(
    store: EventStore, streamed: list[int]
) -> None:
    sid = store.create_session().id
    image = bytes(range(256)) * 400  # over the default blob threshold
    shot = Message(
        role="user",
        parts=[TextPart(text="see"), FilePart(media_type="image/png", data=image, name="a.png")],
    )
    batch: list[Any] = [*_batch(20), shot, Prune(targets=[PartRef(seq=2, index=0)])]
    assert len(batch) > BULK_MIN
    assert store.append(sid, batch) == list(range(1, 23))
    _took_stream(store, streamed, 1)
    stored = store.read_tail(sid, 2)
    assert stored[0].event.parts[1].data == image  # type: ignore[union-attr]
    with store.engine.connect() as conn:
        compacted = conn.execute(
            text("SELECT compacted_seq FROM parts WHERE session_id = :s AND seq = 2"),
            {"s": sid},
        ).scalar_one()
    assert compacted == 22
    assert store.verify(sid).ok


def test_dicts_and_tuples_stream_too(store: EventStore, streamed: list[int]) -> None:
    sid = store.create_session().id
    batch = tuple(
        {"kind": "message", "role": "user", "parts": [{"type": "text", "text": f"m{i}"}]}
        for i in range(20)
    )
    assert store.append(sid, batch) == list(range(1, 21))  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError, match=r"events\[19\]"):
        store.append(sid, [*batch[:19], {"kind": "message", "role": "narrator"}])  # type: ignore[list-item]
    _took_stream(store, streamed, 2)
    assert _counts(store, sid)[0] == 20
    assert store.verify(sid).ok
