"""A message whose one part is text is stored without a ``parts`` row; every reader
takes the row it implies, and a prune that truncates the part writes the row, stamped."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from eventstore import EventStore, Message, Prune, TextPart, ToolCallPart
from eventstore.codec import encode, sole_text
from eventstore.tokens import MESSAGE_OVERHEAD, HeuristicTokenCounter, count_part


def _parts(store: EventStore, sid: str) -> list[tuple[Any, ...]]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT seq, idx, type, token_count, compacted_seq FROM parts "
                "WHERE session_id = :s ORDER BY seq, idx"
            ),
            {"s": sid},
        )
        return [tuple(r) for r in rows]


def _conversation(n: int) -> list[Message]:
    call = ToolCallPart(id="c1", name="grep", arguments='{"q": "x"}')
    return [
        Message.system("be brief " * 20),
        Message.user("question " * n),
        Message.assistant("looking", tool_calls=[call]),
        Message.tool("c1", "result " * n),
        Message(role="user", parts=[TextPart(text="one"), TextPart(text="two")]),
        Message.assistant("answer " * n),
    ]


def test_sole_text_is_what_the_rule_says() -> None:
    assert sole_text(Message.user("hi"))
    assert not sole_text(Message(role="user", parts=[]))
    assert not sole_text(Message(role="user", parts=[TextPart(text="a"), TextPart(text="b")]))
    assert not sole_text(Message.tool("c1", "out"))
    assert not sole_text(Message.assistant("", tool_calls=[ToolCallPart(id="c", name="f")]))


class _OwnText(TextPart):
    """A text part of a class of its own (encoded the general way)."""


def test_a_messages_count_is_its_parts_counts_whatever_rows_it_gets() -> None:
    counter = HeuristicTokenCounter(chars_per_token=3.0)
    for msg in [
        *_conversation(7),
        Message(role="user", parts=[_OwnText(text="own " * 9)]),
        Message(role="user", parts=[TextPart(text="")]),
    ]:
        enc = encode(msg, counter)
        assert enc.token_count == MESSAGE_OVERHEAD + sum(count_part(counter, p) for p in msg.parts)
        assert (enc.part_rows == []) == sole_text(msg)
        assert [r["token_count"] for r in enc.part_rows] == (
            [] if sole_text(msg) else [count_part(counter, p) for p in msg.parts]
        )


@pytest.mark.parametrize("path", ["ordinary", "fast", "bulk"])
def test_only_parts_a_message_cannot_imply_get_rows(store: EventStore, path: str) -> None:
    sid = store.create_session().id
    events = _conversation(30)
    if path == "bulk":
        store.append(sid, events * 20)  # past the bulk path's threshold
    elif path == "fast":
        store.append(sid, events[:1])
        for i, e in enumerate(events[1:], start=1):
            store.append(sid, [e], expected_seq=i)
    else:
        for e in events:
            store.append(sid, [e])
            store._heads.drop(sid)
    rows = _parts(store, sid)
    # Seq 3 (text and a call), 4 (a result) and 5 (two texts) per round of six.
    assert [(r[0] % 6, r[1], r[2]) for r in rows[:4]] == [
        (3, 0, "text"),
        (3, 1, "tool_call"),
        (4, 0, "tool_result"),
        (5, 0, "text"),
    ]
    assert len(rows) == 5 * (20 if path == "bulk" else 1)
    assert store.verify(sid, fingerprints=False).ok


def test_views_count_an_implied_part_as_a_stored_one(tmp_path: Any) -> None:
    """The same conversation in two sessions, one given the rows an older version wrote:
    their views agree item for item."""
    with EventStore(f"sqlite:///{tmp_path / 'v.db'}") as store:
        implied, stored = store.create_session().id, store.create_session().id
        for sid in (implied, stored):
            store.append(sid, _conversation(40))
        with store.engine.begin() as conn:
            for seq in (1, 2, 6):
                conn.execute(
                    text(
                        "INSERT INTO parts (session_id, seq, idx, type, token_count) "
                        "SELECT session_id, seq, 0, 'text', token_count - :o FROM events "
                        "WHERE session_id = :s AND seq = :q"
                    ),
                    {"s": stored, "q": seq, "o": MESSAGE_OVERHEAD},
                )
        a, b = store.view(implied), store.view(stored)
        assert [i.part_tokens for i in a.items] == [i.part_tokens for i in b.items]
        assert a.tokens == b.tokens
        assert a.items[1].part_tokens[0] > 20  # the count, not a missing row's zero
        assert store.verify(stored, fingerprints=False).ok


def test_truncating_an_implied_part_writes_its_row_stamped(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, _conversation(200))
    before = store.view(sid)
    assert _parts(store, sid)[0][0] == 3  # nothing for seqs 1 and 2
    store.append(sid, [Prune(targets=[{"seq": 2, "index": 0}], keep_chars=100)])
    first = _parts(store, sid)[0]
    assert first == (2, 0, "text", before.items[1].part_tokens[0], 7)
    after = store.view(sid)
    assert 0 in after.items[1].compacted
    assert after.items[1].kept == {0: 100}
    assert after.tokens < before.tokens
    # A second truncation finds the row stamped: the first stamp stays.
    store.append(sid, [Prune(targets=[{"seq": 2, "index": 0}], keep_chars=80)])
    assert _parts(store, sid)[0] == first
    assert store.verify(sid, fingerprints=False).ok
    # Only a text part can be truncated; a placeholder still needs a tool result.
    with pytest.raises(Exception, match="not a stored tool result"):
        store.append(sid, [Prune(targets=[{"seq": 1, "index": 0}])])
    with pytest.raises(Exception, match="not a stored tool result, text or tool call"):
        store.append(sid, [Prune(targets=[{"seq": 1, "index": 1}], keep_chars=64)])


def test_a_fork_truncates_an_inherited_implied_part_for_itself(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, _conversation(200))
    fork = store.fork(sid, 6)
    store.append(fork.id, [Prune(targets=[{"seq": 2, "index": 0}], keep_chars=100)])
    assert _parts(store, sid)[0][0] == 3  # the parent's rows are untouched
    mine, parents = store.view(fork.id), store.view(sid)
    assert mine.items[1].kept == {0: 100}
    assert parents.items[1].compacted == {}
    assert mine.items[1].part_tokens == parents.items[1].part_tokens
    assert mine.tokens < parents.tokens
    assert store.verify(fork.id, fingerprints=False).ok
    assert store.verify(sid, fingerprints=False).ok
