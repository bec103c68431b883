"""An assistant message with neither content nor tool calls is refused, with the fix in the
message, wherever it is built; an imported one is kept as a custom event, never lost."""

from __future__ import annotations

import io
import json
from pathlib import Path

import litellm
import pytest

from condensers import CondensationPolicy, complete
from eventstore import (
    Custom,
    EventStore,
    InvalidEventError,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
)
from eventstore.budget import Budget
from eventstore.events import EMPTY_ASSISTANT, Queued, empty_assistant
from eventstore.importers import (
    EMPTY_ASSISTANT_IMPORTED,
    export_jsonl,
    import_file,
    load_transcripts,
)
from eventstore.views import EMPTY_REPLY
from tests.test_importers import rehash


def test_the_helper_refuses_an_empty_assistant_message() -> None:
    with pytest.raises(InvalidEventError, match="needs content or tool calls"):
        Message.assistant()
    with pytest.raises(InvalidEventError, match="record the empty reply as a Custom event"):
        Message.assistant("  \n")
    assert Message.assistant(tool_calls=[ToolCallPart(id="c", name="ls")]).tool_calls
    assert Message.assistant("ok").text == "ok"


@pytest.mark.parametrize(
    "parts",
    [[], [TextPart(text="")], [TextPart(text=" \n\t")], [TextPart(text=""), TextPart(text="")]],
)
def test_append_refuses_it_and_writes_nothing(store: EventStore, parts: list[TextPart]) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.user("hi")])
    empty = Message(role="assistant", parts=parts)
    assert empty_assistant(empty)
    with pytest.raises(InvalidEventError, match=r"events\[1\]: an assistant message needs"):
        store.append(sid, [Message.user("again"), empty])
    with pytest.raises(InvalidEventError, match=r"events\[0\]\.message: an assistant"):
        store.append(sid, [Queued(message=empty)])
    assert store.head(sid) == 1  # the batch was refused whole


def test_what_counts_as_content(store: EventStore) -> None:
    sid = store.create_session().id
    kept = [
        Message(role="assistant", parts=[ReasoningPart(text="thinking")]),
        Message(role="assistant", parts=[TextPart(text=""), ToolCallPart(id="c", name="ls")]),
        Message(role="user", parts=[TextPart(text="")]),  # the rule is the assistant's
    ]
    assert not any(empty_assistant(m) for m in kept)
    store.append(sid, kept)
    assert store.head(sid) == 3


def test_an_imported_empty_reply_is_kept_as_a_custom_event(
    store: EventStore, tmp_path: Path
) -> None:
    path = tmp_path / "chat.json"
    chat = [
        {"role": "user", "content": "Say something."},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "Anything?"},
        {"role": "assistant", "content": "Hello."},
    ]
    path.write_text(json.dumps(chat))
    (loaded,) = load_transcripts(path, format="openai")  # what benchmarks replay, too
    assert [e.kind for e in loaded.events] == ["message", "custom", "message", "message"]
    (session,) = import_file(store, path, format="openai")
    events = [s.event for s in store.read(session.id)]
    assert [e.kind for e in events] == ["message", "custom", "message", "message"]
    kept = events[1]
    assert isinstance(kept, Custom) and kept.name == EMPTY_ASSISTANT_IMPORTED
    assert isinstance(kept.data, dict) and kept.data["role"] == "assistant"
    # The view never sends it, and the rest of the conversation is intact.
    sent = store.view(session.id).to_messages()
    assert [m["content"] for m in sent] == ["Say something.", "Anything?", "Hello."]


def test_an_export_holding_one_is_restored_as_it_was(store: EventStore, tmp_path: Path) -> None:
    """A log written before appends refused empty assistant messages exports and imports
    back unchanged: the file's hashes prove the message was there."""
    src = EventStore(f"sqlite:///{tmp_path / 'src.db'}")
    sid = src.create_session(title="old").id
    src.append(sid, [Message.user("hi"), Message.assistant("placeholder")])
    buf = io.StringIO()
    export_jsonl(src, sid, buf)
    lines = buf.getvalue().splitlines()
    rec = json.loads(lines[2])
    rec["payload"]["parts"] = []
    lines[2] = json.dumps(rec)
    path = tmp_path / "old.jsonl"
    path.write_text("\n".join(rehash(lines)) + "\n")
    (session,) = import_file(store, path)
    restored = [s.event for s in store.read(session.id)]
    assert isinstance(restored[1], Message) and restored[1].parts == []
    assert store.verify(session.id).ok


def test_complete_keeps_an_empty_model_reply_as_a_custom_event(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.user("Say nothing.")])
    policy = CondensationPolicy(Budget(max_input_tokens=8_000, reserved_output=500))
    response = litellm.ModelResponse(
        choices=[{"message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]
    )
    complete(store, sid, model="gpt-4o-mini", policy=policy, mock_response=response)
    events = [s.event for s in store.read(sid)]
    assert [e.kind for e in events] == ["message", "llm_call", "custom"]
    reply = events[2]
    assert isinstance(reply, Custom) and reply.name == EMPTY_REPLY
    assert EMPTY_ASSISTANT.startswith("an assistant message needs content")
