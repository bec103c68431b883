"""The pinned head: the task survives condensation even when it is not the first user
message (a demonstration or template first), and a message an importer marks as the task
is pinned wherever it appears."""

from __future__ import annotations

import json

from condensers import CondensationPolicy
from eventstore import EventStore, Message, ToolCallPart
from eventstore.budget import Budget
from eventstore.views import TASK_MARK

BUDGET = Budget(max_input_tokens=4096, reserved_output=512, buffer=205)
TASK = "Make parse_date accept ISO week dates like 2024-W05-3."


def steps(n: int, start: int = 0) -> list[Message]:
    out: list[Message] = []
    for i in range(start, start + n):
        call = ToolCallPart(id=f"c{i}", name="bash", arguments=json.dumps({"command": f"cat f{i}"}))
        # Long reasoning, so that pruning tool outputs alone cannot make room.
        out.append(Message.assistant(f"step {i} " + "thinking " * 200, tool_calls=[call]))
        out.append(Message.tool(f"c{i}", f"output {i}\n" + "line of output\n" * 150, name="bash"))
    return out


def condense_turn_by_turn(store: EventStore, sid: str, events: list[Message]) -> list[str]:
    """Append like an agent, condensing before each model call; the views' texts."""
    policy = CondensationPolicy(BUDGET)
    texts = []
    for evt in events:
        if evt.role == "assistant":
            policy.maybe_condense(store, sid)
            texts.append(json.dumps(store.view(sid).to_messages()))
        store.append(sid, [evt])
    return texts


def test_the_task_after_a_demonstration_survives_condensation(store: EventStore) -> None:
    sid = store.create_session().id
    head = [
        Message.system("You are a coding agent."),
        Message.user("Here is a demonstration of how to solve a task: ... (a whole run)"),
        Message.user(TASK),
    ]
    texts = condense_turn_by_turn(store, sid, [*head, *steps(12)])
    assert any(e.kind == "condensation" for e in store.read(sid))
    assert all(TASK in t for t in texts)
    pinned = [i.seq for i in store.view(sid).items if i.pinned]
    assert pinned == [1, 2, 3]


def test_user_messages_after_the_first_action_are_not_pinned(store: EventStore) -> None:
    sid = store.create_session().id
    events = [Message.user(TASK), *steps(1), Message.user("observation-like follow-up")]
    store.append(sid, events)
    assert [i.seq for i in store.view(sid).items if i.pinned] == [1]


def test_a_message_marked_as_the_task_is_pinned_wherever_it_is(store: EventStore) -> None:
    sid = store.create_session().id
    marked = Message.user(TASK)
    marked.provider_metadata = {"eventstore": {TASK_MARK: True}}
    events = [
        Message.system("You are a coding agent."),
        Message.user("Warm-up: list the files."),
        *steps(2),
        marked,
    ]
    texts = condense_turn_by_turn(store, sid, [*events, *steps(12, start=2)])
    task_seq = len(events)
    assert task_seq in [i.seq for i in store.view(sid).items if i.pinned]
    assert all(TASK in t for t in texts[2:])  # every view sent after it appeared
