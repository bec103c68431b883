"""EventStoreSession against the OpenAI Agents SDK's session contract (openai-agents 0.24).

Runs where the ``openai-agents`` extra is installed (``.ci/run`` gives it its own
environment and requires these tests there with ``EVENTSTORE_REQUIRE_ADAPTERS``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from typing import Any

import pytest

if os.environ.get("EVENTSTORE_REQUIRE_ADAPTERS"):
    import agents  # noqa: F401
else:
    pytest.importorskip("agents")

from agents import Agent, Runner  # noqa: E402
from agents.memory import Session, SessionSettings  # noqa: E402
from agents.testing import ScriptedModel, assistant_message  # noqa: E402

from eventstore import AsyncEventStore, EventStore  # noqa: E402
from eventstore.adapters.openai_agents import EventStoreSession  # noqa: E402


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.fixture
def session(db_url: str) -> Any:
    store = AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}")
    s = EventStoreSession(f"chat-{uuid.uuid4().hex}", store=store)
    yield s
    asyncio.run(store.close())


def test_it_is_an_sdk_session(session: Any) -> None:
    assert isinstance(session, Session)


def test_items_come_back_exactly_as_added(session: Any) -> None:
    items = [
        {"role": "system", "content": "Be brief."},
        _user("hi"),
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "hello", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}", "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA..."},
    ]

    async def run() -> None:
        await session.add_items(items)
        assert await session.get_items() == items
        assert await session.get_items(limit=2) == items[-2:]
        assert await session.get_items(limit=100) == items  # larger than the session
        assert await session.get_items(limit=0) == []

    asyncio.run(run())


def test_pop_and_clear_follow_the_sdk_but_keep_the_log(session: Any, db_url: str) -> None:
    async def run() -> None:
        assert await session.pop_item() is None
        await session.add_items([_user("one"), _user("two"), _user("three")])
        assert await session.pop_item() == _user("three")
        assert await session.get_items() == [_user("one"), _user("two")]
        await session.add_items([_user("four")])
        assert await session.get_items(limit=1) == [_user("four")]
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.add_items([_user("five")])
        assert await session.get_items() == [_user("five")]

    asyncio.run(run())
    sync: EventStore = session.store.sync
    sid = sync.get_session_by_key(session.session_id).id
    texts = [e.event.text for e in sync.read(sid, kinds=["message"])]
    assert texts == ["one", "two", "three", "four", "five"]  # nothing deleted
    assert sync.verify(sid).ok


def test_session_settings_limit_is_the_default(db_url: str) -> None:
    async def run() -> list[Any]:
        async with AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}") as store:
            s = EventStoreSession("limited", store=store, session_settings=SessionSettings(limit=2))
            await s.add_items([_user(str(i)) for i in range(5)])
            return await s.get_items()

    assert asyncio.run(run()) == [_user("3"), _user("4")]


def test_the_same_id_resumes_after_a_restart(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"

    async def first() -> None:
        async with AsyncEventStore(db_url, tenant=tenant) as store:
            await EventStoreSession("resume-me", store=store).add_items([_user("before")])

    async def second() -> list[Any]:
        async with AsyncEventStore(db_url, tenant=tenant) as store:
            return await EventStoreSession("resume-me", store=store).get_items()

    asyncio.run(first())
    assert asyncio.run(second()) == [_user("before")]


def test_threads_with_their_own_event_loops_share_one_session(session: Any) -> None:
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            asyncio.run(session.add_items([_user(f"{n}-{i}") for i in range(5)]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    items = asyncio.run(session.get_items())
    assert sorted(i["content"] for i in items) == sorted(
        f"{n}-{i}" for n in range(4) for i in range(5)
    )


def test_a_two_turn_run_resumes_with_a_new_session_object(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    model = ScriptedModel(
        [[assistant_message("Nice to meet you, Ada.")], [assistant_message("Ada.")]]
    )
    agent = Agent(name="helper", model=model)

    async def turn(text: str) -> str:
        async with AsyncEventStore(db_url, tenant=tenant) as store:
            session = EventStoreSession("conversation-1", store=store)
            result = await Runner.run(agent, text, session=session)
            return str(result.final_output)

    assert asyncio.run(turn("My name is Ada.")) == "Nice to meet you, Ada."
    assert asyncio.run(turn("What is my name?")) == "Ada."
    second_input = model.calls[1].input
    texts = [str(i.get("content")) for i in second_input if isinstance(i, dict)]
    assert any("My name is Ada." in t for t in texts)  # history came from the store
    with EventStore(db_url, tenant=tenant) as store:
        sid = store.get_session_by_key("conversation-1").id
        assert store.verify(sid).ok
        assert len(list(store.read(sid, kinds=["message"]))) == 4


def test_the_readme_example_runs(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme.split("**OpenAI Agents SDK**", 1)[1], re.S)
    assert block, "the README lost its OpenAI Agents example"
    monkeypatch.chdir(tmp_path)
    exec(compile(block.group(1), "README.md", "exec"), {"__name__": "readme_agents"})
    assert (tmp_path / "agents.db").exists()
