# ruff: noqa: B023  (each lambda is awaited within the loop iteration that made it)
"""EventStoreConversationStore behaves like pydantic-ai's InMemoryConversationStore.

Random sequences of saves, extensions, rewrites, loads, forks, branches, deletes, stale
saves and listings run against both stores; every outcome (messages, conflicts, errors)
must match. Runs where the ``pydantic-ai`` extra is installed (``.ci/run`` gives it its
own environment and requires these tests there with ``EVENTSTORE_REQUIRE_ADAPTERS``).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

if os.environ.get("EVENTSTORE_REQUIRE_ADAPTERS"):
    import pydantic_ai  # noqa: F401
else:
    pytest.importorskip("pydantic_ai")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from pydantic_ai.conversation import Conversation  # noqa: E402
from pydantic_ai.conversation_store import (  # noqa: E402
    ConversationConflict,
    InMemoryConversationStore,
)
from pydantic_ai.exceptions import UserError  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from eventstore import AsyncEventStore, EventStore  # noqa: E402
from eventstore.adapters.pydantic_ai import EventStoreConversationStore  # noqa: E402

WHEN = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
IDS = ["a", "b", "c"]


def _message(n: int) -> Any:
    if n % 4 == 0:
        return ModelRequest(parts=[UserPromptPart(content=f"user {n}", timestamp=WHEN)])
    if n % 4 == 1:
        return ModelResponse(
            parts=[ToolCallPart(tool_name="lookup", args={"q": n}, tool_call_id=f"call-{n}")],
            timestamp=WHEN,
        )
    if n % 4 == 2:
        return ModelRequest(
            parts=[
                ToolReturnPart(
                    tool_name="lookup", content=f"result {n}", tool_call_id=f"call-{n - 1}",
                    timestamp=WHEN,
                )
            ]
        )  # fmt: skip
    return ModelResponse(parts=[TextPart(content=f"answer {n}")], timestamp=WHEN)


async def _outcome(coro: Any) -> Any:
    try:
        return ("ok", await coro)
    except ConversationConflict:
        return ("conflict", None)
    except UserError as exc:
        return ("error", type(exc).__name__)


def _messages(value: Any) -> Any:
    """What an outcome's payload shows: a conversation's messages, else the value."""
    if hasattr(value, "messages"):
        return list(value.messages)
    return value


class _Pair:
    """Runs each operation on both stores and keeps their loaded copies side by side."""

    def __init__(self, ours: EventStoreConversationStore) -> None:
        self.stores = [InMemoryConversationStore(), ours]
        self.counter = 0

    def fresh(self, k: int) -> list[Any]:
        out = [_message(self.counter + i) for i in range(k)]
        self.counter += k
        return out

    async def both(self, op: Any) -> list[Any]:
        return [await _outcome(op(store)) for store in self.stores]


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["new", "extend", "rewrite", "load", "fork", "branch", "delete", "stale", "list"]
        ),
        st.sampled_from(IDS),
        st.integers(min_value=0, max_value=5),
    ),
    max_size=14,
)


async def _run(ours: EventStoreConversationStore, ops: list[tuple[str, str, int]]) -> None:
    pair = _Pair(ours)
    for name, cid, n in ops:
        if name == "new":
            msgs = pair.fresh(n)
            got = await pair.both(
                lambda s, m=msgs: s.save(Conversation(conversation_id=cid, messages=list(m)))
            )
            assert [g[0] for g in got] == [got[0][0]] * 2
            if got[0][0] == "ok":
                assert [e.message for e in got[0][1]] == [e.message for e in got[1][1]]
        elif name in ("extend", "rewrite", "stale"):
            loaded = await pair.both(lambda s: s.load(cid))
            assert _messages(loaded[0][1]) == _messages(loaded[1][1])
            if loaded[0][1] is None:
                continue
            extra = pair.fresh(max(n, 1))
            if name == "stale":  # someone else saves first
                others = await pair.both(lambda s: s.load(cid))
                results = []
                for i, store in enumerate(pair.stores):
                    other = others[i][1]
                    other.messages = [*other.messages, *extra]
                    results.append(await _outcome(store.save(other)))
                    mine = loaded[i][1]
                    mine.messages = [*mine.messages, *pair.fresh(1)]
                    results.append(await _outcome(store.save(mine)))
                assert [r[0] for r in results] == ["ok", "conflict", "ok", "conflict"]
                continue
            outs = []
            for i, store in enumerate(pair.stores):
                conv = loaded[i][1]
                keep = len(conv.messages) if name == "extend" else min(n, len(conv.messages))
                if name == "rewrite":
                    conv = Conversation(
                        conversation_id=cid,
                        messages=[*conv.messages[:keep], *extra],
                        revision=conv.revision,
                    )
                else:
                    conv.messages = [*conv.messages, *extra]
                outs.append(await _outcome(store.save(conv)))
            assert [o[0] for o in outs] == [outs[0][0]] * 2
            if outs[0][0] == "ok":
                assert [e.message for e in outs[0][1]] == [e.message for e in outs[1][1]]
        elif name == "load":
            limit = n if n < 5 else None
            got = await pair.both(lambda s: s.load(cid, limit=limit))
            assert got[0][0] == got[1][0]
            assert _messages(got[0][1]) == _messages(got[1][1])
            entries = await pair.both(lambda s: s.load_entries(cid))
            if entries[0][1] is not None:
                assert [e.message for e in entries[0][1]] == [e.message for e in entries[1][1]]
        elif name == "fork":
            target = f"{cid}-fork-{pair.counter}"
            pair.counter += 1
            got = await pair.both(lambda s: s.fork(cid, at=n, new_conversation_id=target))
            assert got[0][0] == got[1][0], got
            assert _messages(got[0][1]) == _messages(got[1][1])
        elif name == "branch":
            loaded = await pair.both(lambda s: s.load(cid))
            if loaded[0][1] is None:
                continue
            outs = [
                await _outcome(store.branch(cid, at=n, expected_revision=loaded[i][1].revision))
                for i, store in enumerate(pair.stores)
            ]
            assert outs[0][0] == outs[1][0], outs
            assert _messages(outs[0][1]) == _messages(outs[1][1])
        elif name == "delete":
            got = await pair.both(lambda s: s.delete(cid))
            assert got[0][0] == got[1][0]
        elif name == "list":
            got = await pair.both(lambda s: s.list_conversations())
            ids = [sorted(r.conversation_id for r in g[1]) for g in got]
            assert ids[0] == ids[1]
            branches = [sorted((r.conversation_id, len(r.branches)) for r in g[1]) for g in got]
            assert branches[0] == branches[1]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_behaves_like_the_in_memory_store(db_url: str, ops: list[tuple[str, str, int]]) -> None:
    async def go() -> None:
        store = AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}")
        try:
            await _run(EventStoreConversationStore(store=store), ops)
        finally:
            await store.close()

    asyncio.run(go())


def test_a_conversation_resumes_and_keeps_its_log(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"

    async def first() -> None:
        async with AsyncEventStore(db_url, tenant=tenant) as store:
            convs = EventStoreConversationStore(store=store)
            await convs.save(
                Conversation(conversation_id="chat", messages=[_message(0), _message(3)])
            )

    async def second() -> list[Any]:
        async with AsyncEventStore(db_url, tenant=tenant) as store:
            convs = EventStoreConversationStore(store=store)
            conv = await convs.load("chat")
            assert conv is not None
            conv.messages = [*conv.messages, _message(4)]
            await convs.save(conv)
            rewritten = await convs.branch("chat", at=1, expected_revision=conv.revision)
            rewritten.messages = [*rewritten.messages, _message(7)]
            await convs.save(rewritten)
            await convs.delete("chat")
            assert await convs.load("chat") is None
            return []

    asyncio.run(first())
    asyncio.run(second())
    with EventStore(db_url, tenant=tenant) as sync:
        (gone,) = sync.list_sessions(include_deleted=True)
        with sync.audit():
            texts = [e.event.text for e in sync.read(gone.id, kinds=["message"])]
        assert texts == ["user 0", "answer 3", "user 4", "answer 7"]  # nothing removed
        assert sync.verify(gone.id).ok


def test_the_docs_example_runs(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "adapters.md").read_text()
    block = re.search(r"```python\n(.*?)```", page.split("## pydantic-ai\n", 1)[1], re.S)
    assert block, "docs/adapters.md lost its pydantic-ai example"
    monkeypatch.chdir(tmp_path)
    exec(compile(block.group(1), "docs/adapters.md", "exec"), {"__name__": "readme_pydantic_ai"})
    assert (tmp_path / "chats.db").exists()


# -- a two-turn agent run with the process restarted between the turns

_TURN_IN_A_NEW_PROCESS = '''
import asyncio, json, os, sys

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart, ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from eventstore.adapters.pydantic_ai import EventStoreConversationStore

db_url, conversation_id, turn = sys.argv[1], sys.argv[2], int(sys.argv[3])
QUESTIONS = {1: "first question: I am Ada.", 2: "second question: who am I?"}
seen = []


def respond(messages, info: AgentInfo) -> ModelResponse:
    seen.append(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))
    if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
        return ModelResponse(parts=[TextPart(content="Hello Ada.")])
    if turn == 1:
        call = ToolCallPart(tool_name="remember", args={"name": "Ada"}, tool_call_id="call-ada")
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart(content="Your name is Ada.")])


agent = Agent(FunctionModel(respond))


@agent.tool_plain
def remember(name: str) -> str:
    """Remember a name."""
    return f"remembered {name}"


async def main() -> None:
    store = EventStoreConversationStore(db_url)
    try:
        conversation = await store.load(conversation_id)
        loaded = None if conversation is None else len(conversation.messages)
        conversation = conversation or Conversation(conversation_id=conversation_id)
        result = await agent.run(QUESTIONS[turn], conversation=conversation)
        await store.save(result)
        stored = await store.load(conversation_id)
    finally:
        await store.close()
    print(json.dumps({
        "pid": os.getpid(),
        "loaded": loaded,
        "output": result.output,
        "seen": seen,
        "stored": ModelMessagesTypeAdapter.dump_python(stored.messages, mode="json"),
    }))


asyncio.run(main())
'''


def _turn_in_a_new_process(db_url: str, conversation_id: str, turn: int) -> dict[str, Any]:
    """Run one turn in a fresh Python process; what it saw and stored, as JSON."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _TURN_IN_A_NEW_PROCESS, db_url, conversation_id, str(turn)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(part kind, its text or tool name) for each part of each dumped message."""
    out = []
    for m in messages:
        for p in m["parts"]:
            text = p.get("content") if isinstance(p.get("content"), str) else p.get("tool_name")
            out.append((p["part_kind"], str(text)))
    return out


def test_a_two_turn_agent_run_resumes_after_a_restart(db_url: str) -> None:
    conversation_id = f"restart-{uuid.uuid4().hex}"
    first = _turn_in_a_new_process(db_url, conversation_id, 1)
    second = _turn_in_a_new_process(db_url, conversation_id, 2)

    assert len({first["pid"], second["pid"], os.getpid()}) == 3
    assert (first["loaded"], first["output"]) == (None, "Hello Ada.")
    # Turn 1 started from nothing: the model saw only its question.
    assert _texts(first["seen"][0]) == [("user-prompt", "first question: I am Ada.")]
    turn_one = first["stored"]
    assert _texts(turn_one) == [
        ("user-prompt", "first question: I am Ada."),
        ("tool-call", "remember"),
        ("tool-return", "remembered Ada"),
        ("text", "Hello Ada."),
    ]
    # Turn 2, in a new process, loaded turn 1's messages from the store and sent them to
    # the model (exactly as stored), then its own question.
    assert (second["loaded"], second["output"]) == (4, "Your name is Ada.")
    (sent,) = second["seen"]
    assert sent[: len(turn_one)] == turn_one
    assert _texts(sent[len(turn_one) :]) == [("user-prompt", "second question: who am I?")]
    stored = second["stored"]
    assert stored[: len(turn_one)] == turn_one
    assert _texts(stored[len(turn_one) :]) == [
        ("user-prompt", "second question: who am I?"),
        ("text", "Your name is Ada."),
    ]
    with EventStore(db_url) as store:
        sid = store.get_session_by_key(conversation_id).id
        assert store.verify(sid).ok
        roles = [e.event.role for e in store.read(sid, kinds=["message"])]
        assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def test_an_empty_response_is_kept_and_never_sent(db_url: str) -> None:
    """A response with no text and no tool call (only thinking, or nothing), which an
    append refuses as an assistant message, is kept whole as the framework's own part:
    it loads back as it was, and views for a provider leave it out."""
    from pydantic_ai.messages import ThinkingPart

    tenant = f"t-{uuid.uuid4().hex}"
    empty = ModelResponse(parts=[], timestamp=WHEN)
    thinking = ModelResponse(parts=[ThinkingPart(content="hmm")], timestamp=WHEN)
    messages = [_message(0), empty, thinking, _message(3)]

    async def go() -> Any:
        async with AsyncEventStore(db_url, tenant=tenant) as store:
            convs = EventStoreConversationStore(store=store)
            await convs.save(Conversation(conversation_id="chat", messages=messages))
            return await convs.load("chat")

    loaded = asyncio.run(go())
    assert loaded is not None and loaded.messages == messages
    with EventStore(db_url, tenant=tenant) as sync:
        (s,) = sync.list_sessions()
        sent = sync.view(s.id).to_messages()
        assert [m["content"] for m in sent] == ["user 0", "answer 3"]
