"""Sessions by key, tombstones, tenant-private ids, single-event and tail reads, times.

Runs over (sqlite, postgres) x (sync, async).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from eventstore import (
    InvalidEventError,
    Message,
    NotFoundError,
    SessionExistsError,
    TextPart,
)


def test_a_key_of_any_length_finds_its_session(api_store: Any) -> None:
    long_key = "adk:" + "x" * 5_000 + ":ünïcode"
    s = api_store.create_session(key=long_key, user_id="u1", title="t")
    assert s.key == long_key
    assert api_store.get_session_by_key(long_key, user_id="u1").id == s.id
    # Keys are per (tenant, user).
    with pytest.raises(NotFoundError):
        api_store.get_session_by_key(long_key)
    other_user = api_store.create_session(key=long_key, user_id="u2")
    assert other_user.id != s.id
    with pytest.raises(SessionExistsError, match="already names session"):
        api_store.create_session(key=long_key, user_id="u1")
    # Another tenant may use the same key: it is a different session.
    other = api_store.with_tenant(f"other-{uuid.uuid4().hex}")
    theirs = other.create_session(key=long_key, user_id="u1")
    assert theirs.id != s.id
    assert api_store.get_session_by_key(long_key, user_id="u1").id == s.id
    for bad in ("", 42):
        with pytest.raises(InvalidEventError):
            api_store.create_session(key=bad)
    with pytest.raises(NotFoundError):
        api_store.get_session_by_key("\udc80 not storable")


def test_session_ids_say_nothing_about_other_tenants(api_store: Any) -> None:
    other = api_store.with_tenant(f"other-{uuid.uuid4().hex}")
    theirs = other.create_session()
    mine = api_store.create_session()
    with pytest.raises(SessionExistsError) as in_other:
        api_store.create_session(session_id=theirs.id)
    with pytest.raises(SessionExistsError) as in_mine:
        api_store.create_session(session_id=mine.id)
    # The same message, whoever holds the id.
    assert str(in_other.value).replace(theirs.id, "X") == str(in_mine.value).replace(mine.id, "X")
    # Human names are not ids: they go in key=, scoped to the tenant.
    with pytest.raises(InvalidEventError, match="key="):
        api_store.create_session(session_id="ticket-4711")
    chosen = str(uuid.uuid4())
    assert api_store.create_session(session_id=chosen).id == chosen
    with pytest.raises(NotFoundError):
        api_store.get_session(theirs.id)
    with pytest.raises(NotFoundError):
        api_store.read_tail(theirs.id, 1)


def test_a_deleted_session_is_a_tombstone(api_store: Any) -> None:
    s = api_store.create_session(key="ticket-1")
    api_store.append(s.id, [Message.user("hello"), Message.assistant("hi")])
    fork = api_store.fork(s.id, 1)
    gone = api_store.delete_session(s.id)
    assert gone.deleted_at is not None and gone.id == s.id
    for call in (
        lambda: api_store.get_session(s.id),
        lambda: api_store.get_session_by_key("ticket-1"),
        lambda: api_store.view(s.id),
        lambda: list(api_store.read(s.id)),
        lambda: api_store.append(s.id, [Message.user("late")]),
        lambda: api_store.read_tail(s.id, 5),
        lambda: api_store.delete_session(s.id),
    ):
        with pytest.raises(NotFoundError):
            call()
    assert s.id not in {x.id for x in api_store.list_sessions()}
    listed = {x.id: x for x in api_store.list_sessions(include_deleted=True)}
    assert listed[s.id].deleted_at is not None
    assert api_store.verify(s.id).ok  # the log stays whole for audits
    # The fork it had keeps working, and the key can name a new session.
    assert [m["content"] for m in api_store.view(fork.id).to_messages()] == ["hello"]
    again = api_store.create_session(key="ticket-1")
    assert api_store.get_session_by_key("ticket-1").id == again.id != s.id
    assert api_store.search("hello") == []  # deleted history is not searched


def test_get_event_and_read_tail(api_store: Any) -> None:
    s = api_store.create_session()
    msgs = [Message.user(f"m{i}") for i in range(30)]
    api_store.append(s.id, msgs)
    stored = list(api_store.read(s.id))
    assert api_store.get_event(s.id, stored[7].id).seq == 8
    tail = api_store.read_tail(s.id, 5)
    assert [e.seq for e in tail] == [26, 27, 28, 29, 30]
    assert [e.seq for e in api_store.read_tail(s.id, 500)] == list(range(1, 31))
    assert api_store.read_tail(s.id, 0) == []
    fork = api_store.fork(s.id, 10)
    api_store.append(fork.id, [Message.user("own")])
    assert [e.seq for e in api_store.read_tail(fork.id, 3)] == [9, 10, 11]
    assert api_store.get_event(fork.id, stored[2].id).seq == 3  # inherited
    with pytest.raises(NotFoundError):
        api_store.get_event(fork.id, stored[20].id)  # after the fork point: not its history
    other = api_store.create_session()
    with pytest.raises(NotFoundError):
        api_store.get_event(other.id, stored[0].id)
    for bad in (-1, 10**9, 1.5, True):
        with pytest.raises(InvalidEventError):
            api_store.read_tail(s.id, bad)


def test_caller_times_are_kept_and_drive_updated_at(api_store: Any) -> None:
    s = api_store.create_session()
    when = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    epoch = 1_732_486_012.345678  # a time.time() value at microsecond precision
    at_epoch = datetime.fromtimestamp(epoch, UTC)
    api_store.append(
        s.id,
        [
            Message(role="user", parts=[], created_at=when),
            Message(role="user", parts=[], created_at=at_epoch),
        ],
    )
    got = [e.created_at for e in api_store.read(s.id)]
    assert got == [when, at_epoch]
    assert got[1].timestamp() == epoch
    assert api_store.get_session(s.id).updated_at == at_epoch  # the newest event's time
    later = at_epoch + timedelta(seconds=3)
    api_store.append(
        s.id, [Message(role="assistant", parts=[TextPart(text="done")], created_at=later)]
    )
    assert api_store.get_session(s.id).updated_at == later
