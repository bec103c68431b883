"""EventStoreSession against the OpenAI Agents SDK's session contract (openai-agents 0.24).

Runs where the ``openai-agents`` extra is installed (``.ci/run`` gives it its own
environment and requires these tests there with ``EVENTSTORE_REQUIRE_ADAPTERS``).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
from typing import Any

import pytest

if os.environ.get("EVENTSTORE_REQUIRE_ADAPTERS"):
    import agents.testing  # noqa: F401
else:
    # The scripted model arrived in the release the adapter supports; an older SDK (which
    # another extra, such as ``bench``, may resolve to) cannot run these tests.
    pytest.importorskip(
        "agents.testing", reason="needs openai-agents 0.24 (the openai-agents extra)"
    )

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


def test_session_settings_default_to_the_sdks_own(db_url: str) -> None:
    """As the SDK's sessions do: ``SessionSettings()`` when none is given, a dict
    normalized to ``SessionSettings``, unknown keys refused with the SDK's error."""

    async def run() -> None:
        async with AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}") as store:
            default = EventStoreSession("default", store=store)
            assert isinstance(default.session_settings, SessionSettings)
            assert default.session_settings.limit is None
            await default.add_items([_user(str(i)) for i in range(3)])
            assert await default.get_items() == [_user("0"), _user("1"), _user("2")]

            zero = EventStoreSession("zero", store=store, session_settings={"limit": 0})
            assert isinstance(zero.session_settings, SessionSettings)
            assert zero.session_settings.limit == 0
            await zero.add_items([_user("a")])
            assert await zero.get_items() == []
            assert await zero.get_items(limit=1) == [_user("a")]  # explicit limit wins

            five = EventStoreSession("five", store=store, session_settings=SessionSettings(limit=5))
            await five.add_items([_user(str(i)) for i in range(10)])
            assert await five.get_items(limit=2) == [_user("8"), _user("9")]
            assert len(await five.get_items()) == 5
            five.session_settings = SessionSettings(limit=3)  # the Runner may replace it
            assert await five.get_items() == [_user("7"), _user("8"), _user("9")]

    asyncio.run(run())
    with pytest.raises(TypeError, match="limitt"):
        EventStoreSession("bad", "sqlite://", session_settings={"limitt": 1})


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


def test_the_docs_example_runs(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "adapters.md").read_text()
    block = re.search(r"```python\n(.*?)```", page.split("## OpenAI Agents SDK\n", 1)[1], re.S)
    assert block, "docs/adapters.md lost its OpenAI Agents example"
    monkeypatch.chdir(tmp_path)
    exec(compile(block.group(1), "docs/adapters.md", "exec"), {"__name__": "readme_agents"})
    assert (tmp_path / "agents.db").exists()


# -- condensation through the SDK's hooks

from agents import RunConfig, function_tool  # noqa: E402
from agents.memory import (  # noqa: E402
    OpenAIResponsesCompactionSession,
    is_openai_responses_compaction_aware_session,
)
from agents.testing import function_call  # noqa: E402

from condensers import CondensationPolicy  # noqa: E402
from eventstore.budget import Budget  # noqa: E402
from eventstore.events import Condensation, ProviderPart  # noqa: E402
from eventstore.views import RECALL_SUMMARY_PREFIX, ViewOptions  # noqa: E402

_WORDS = " ".join(f"word{i}" for i in range(120))


def _history(turns: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for n in range(turns):
        items.append(_user(f"question {n}: {_WORDS}"))
        items.append({"role": "assistant", "content": f"answer {n}: {_WORDS}"})
    return items


def _policy() -> CondensationPolicy:
    return CondensationPolicy(Budget(max_input_tokens=3_000), threshold=0.8, target=0.5)


def _summary_items(items: Any) -> list[dict[str, Any]]:
    return [
        i
        for i in items
        if isinstance(i, dict) and str(i.get("content", "")).startswith(RECALL_SUMMARY_PREFIX)
    ]


def _store_session(session: EventStoreSession) -> tuple[EventStore, str]:
    return session.store.sync, session.store_session_id


def test_the_input_filter_sends_the_condensed_view_and_keeps_the_history(session: Any) -> None:
    model = ScriptedModel([[assistant_message("done")]])
    agent = Agent(name="helper", model=model)
    history = _history(20)

    async def go() -> list[Any]:
        await session.add_items(history)
        config = RunConfig(call_model_input_filter=session.model_input_filter(_policy()))
        result = await Runner.run(agent, "and now?", session=session, run_config=config)
        assert result.final_output == "done"
        return await session.get_items()

    items = asyncio.run(go())
    sent = list(model.calls[0].input)
    # The model got the condensed form: pinned first question, one summary, a short tail.
    assert sent[0] == history[0]
    assert len(_summary_items(sent)) == 1
    assert len(sent) < len(history) // 2
    assert sent[-1] == _user("and now?")
    assert all(i in history or i in _summary_items(sent) or i == sent[-1] for i in sent)
    # The session still returns every item, and the log kept everything.
    assert items[: len(history)] == history
    assert items[len(history)] == _user("and now?") and len(items) == len(history) + 2
    sync, sid = _store_session(session)
    conds = [e for e in sync.read(sid, kinds=["condensation"])]
    assert len(conds) == 1 and isinstance(conds[0].event, Condensation)
    assert not _summary_items(items)
    assert sync.verify(sid).ok


def _one_filtered_turn(session: Any, history: list[Any], kind: str) -> tuple[list[Any], Any]:
    """Store ``history``, run one turn through the policy's input filter (8k budget), and
    return the session's items and the one ``kind`` item the model was sent."""
    model = ScriptedModel([[assistant_message("done")]])
    agent = Agent(name="helper", model=model)
    policy = CondensationPolicy(Budget(8_192, 1_024, 410))

    async def go() -> list[Any]:
        await session.add_items(history)
        config = RunConfig(call_model_input_filter=session.model_input_filter(policy))
        await Runner.run(agent, "and now?", session=session, run_config=config)
        return await session.get_items()

    items = asyncio.run(go())
    (sent,) = [i for i in model.calls[0].input if isinstance(i, dict) and i.get("type") == kind]
    return items, sent


def test_a_truncated_tool_output_reaches_the_model_as_the_view_shows_it(session: Any) -> None:
    # An output too large for the budget is cut to its head and tail before it is sent (a
    # prune with keep_chars): the SDK gets that same text, not the full placeholder.
    big = "".join(f"{i:4d} row {i}\n" for i in range(2_000))
    history = [
        _user("read the log"),
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": big},
    ]
    items, sent = _one_filtered_turn(session, history, "function_call_output")
    sync, sid = _store_session(session)
    (shown,) = [m for m in sync.view(sid).to_messages() if m["role"] == "tool"]
    assert "characters omitted" in sent["output"] and sent["output"] == shown["content"]
    assert sent["output"].startswith("   0 row 0") and "1999 row 1999" in sent["output"]
    assert items[2]["output"] == big  # the session still returns it whole
    assert sync.verify(sid).ok


def test_a_cut_reply_reaches_the_model_as_the_view_shows_it(session: Any) -> None:
    # The newest reply wrote a large file: the policy cuts its arguments before they are
    # first sent (a prune with keep_chars), and the SDK gets the same cut call.
    body = "".join(f"ROW_{i} = {i}\n" for i in range(1_500))
    args = json.dumps({"path": "rows.py", "content": body})
    history = [
        _user("write the table"),
        {"type": "function_call", "call_id": "w1", "name": "write", "arguments": args},
        {"type": "function_call_output", "call_id": "w1", "output": "written"},
    ]
    items, sent = _one_filtered_turn(session, history, "function_call")
    sync, sid = _store_session(session)
    (shown,) = [m for m in sync.view(sid).to_messages() if m.get("tool_calls")]
    assert sent["arguments"] == shown["tool_calls"][0]["function"]["arguments"]
    cut = json.loads(sent["arguments"])
    assert cut["path"] == "rows.py" and "characters omitted" in cut["content"]
    assert items[1]["arguments"] == args  # the session still returns it whole
    assert sync.verify(sid).ok


def test_the_input_filter_keeps_tool_calls_with_their_outputs(session: Any) -> None:
    @function_tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}: {_WORDS}"

    history: list[dict[str, Any]] = []
    for n in range(12):
        history.append(_user(f"look up k{n}"))
        history.append(
            {"type": "function_call", "call_id": f"c{n}", "name": "lookup", "arguments": "{}"}
        )
        history.append({"type": "function_call_output", "call_id": f"c{n}", "output": _WORDS})
        history.append({"role": "assistant", "content": f"k{n} is {_WORDS}"})
    model = ScriptedModel(
        [[function_call("lookup", {"key": "k99"}, call_id="c99")], [assistant_message("ok")]]
    )
    agent = Agent(name="helper", model=model, tools=[lookup])

    async def go() -> None:
        await session.add_items(history)
        config = RunConfig(call_model_input_filter=session.model_input_filter(_policy()))
        await Runner.run(agent, "look up k99", session=session, run_config=config)

    asyncio.run(go())
    for call in model.calls:
        sent = [i for i in call.input if isinstance(i, dict)]
        calls = {i["call_id"] for i in sent if i.get("type") == "function_call"}
        outputs = {i["call_id"] for i in sent if i.get("type") == "function_call_output"}
        assert calls == outputs  # no call without its output and no output without its call
        assert len(sent) < len(history)
    assert "c99" in {i.get("call_id") for i in model.calls[1].input if isinstance(i, dict)}
    sync, sid = _store_session(session)
    assert sync.verify(sid).ok


def test_the_filter_needs_a_policy(session: Any) -> None:
    with pytest.raises(ValueError, match="CondensationPolicy"):
        session.model_input_filter()


def test_run_compaction_is_the_sdks_hook_and_writes_a_condensation(db_url: str) -> None:
    store = AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}")
    session = EventStoreSession("compact-me", store=store, policy=_policy())
    assert is_openai_responses_compaction_aware_session(session)
    history = _history(20)
    model = ScriptedModel([[assistant_message("first")], [assistant_message("second")]])
    agent = Agent(name="helper", model=model)

    async def go() -> tuple[list[Any], list[Any]]:
        await session.add_items(history)
        await Runner.run(agent, "turn one", session=session)  # the Runner compacts after it
        after = await session.get_items()
        await Runner.run(agent, "turn two", session=session)
        return after, await session.get_items()

    try:
        after, final = asyncio.run(go())
    finally:
        asyncio.run(store.close())
    # get_items reflects the compaction: pinned head, the summary, then the recent items.
    assert after[0] == history[0]
    assert len(_summary_items(after)) == 1 and _summary_items(after)[0] == after[1]
    assert len(after) < len(history) // 2
    assert after[-2:] == [
        _user("turn one"),
        next(i for i in after[-1:] if i.get("role") == "assistant"),
    ]
    # The next turn sends the SDK exactly the compacted history plus its new input.
    assert list(model.calls[1].input) == after + [_user("turn two")]
    assert final[: len(after) + 1] == after + [_user("turn two")]
    with EventStore(db_url, tenant=store.tenant) as sync:
        sid = sync.get_session_by_key("compact-me").id
        assert sync.verify(sid).ok
        texts = [e.event.text for e in sync.read(sid, kinds=["message"])]
        assert texts[: len(history)] == [str(i["content"]) for i in history]  # nothing lost
        cond = [e for e in sync.read(sid, kinds=["condensation"])][0]
        forgotten = list(sync.forgotten(sid, cond.seq))
        assert forgotten and all(e.seq <= cond.event.forgotten_to for e in forgotten)
        assert RECALL_SUMMARY_PREFIX + str(cond.event.summary) == after[1]["content"]


def test_forced_compaction_then_pop_and_clear(db_url: str) -> None:
    store = AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}")
    roomy = CondensationPolicy(Budget(max_input_tokens=100_000))
    session = EventStoreSession("forced", store=store, policy=roomy)
    history = _history(6)  # well under the threshold: only a forced run condenses

    async def go() -> None:
        await session.add_items(history)
        await session.run_compaction({"response_id": "r1", "force": False})
        assert await session.get_items() == history
        await session.run_compaction()  # manual: condense now
        items = await session.get_items()
        assert len(_summary_items(items)) == 1 and len(items) < len(history)
        assert await session.get_items(limit=1) == items[-1:]
        await session.add_items([_user("more")])
        assert (await session.get_items())[-1] == _user("more")
        assert await session.pop_item() == _user("more")
        assert await session.get_items() == items
        await session.clear_session()
        assert await session.get_items() == []
        sync, sid = _store_session(session)
        assert sync.view(sid).items == [] and sync.view(sid).summary is None
        assert sync.verify(sid).ok

    try:
        asyncio.run(go())
    finally:
        asyncio.run(store.close())


class _FakeResponses:
    def __init__(self, output: list[dict[str, Any]]) -> None:
        self.output = output
        self.inputs: list[Any] = []

    async def compact(self, **kwargs: Any) -> Any:
        self.inputs.append(kwargs.get("input"))
        return type("Compacted", (), {"output": self.output, "usage": None})()


def test_the_sdks_compaction_session_replaces_history_with_a_condensation(session: Any) -> None:
    compacted = [
        _user("question 0"),
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-summary"},
    ]
    responses = _FakeResponses(compacted)
    client = type("Client", (), {"responses": responses})()
    wrapper = OpenAIResponsesCompactionSession(
        session.session_id, session, client=client, compaction_mode="input"
    )
    history = _history(4)

    async def go() -> list[Any]:
        await wrapper.add_items(history)
        await wrapper.run_compaction({"force": True})
        return await session.get_items()

    items = asyncio.run(go())
    assert responses.inputs and len(responses.inputs[0]) == len(history)
    assert items == compacted
    sync, sid = _store_session(session)
    assert sync.verify(sid).ok
    assert [e.event.text for e in sync.read(sid, kinds=["message"])][: len(history)] == [
        str(i["content"]) for i in history
    ]
    view = sync.view(sid)
    # The old turns are condensed; the compaction item is an opaque OpenAI part, sent back
    # only in views for OpenAI.
    assert [i.message.text for i in view.items] == ["question 0", ""]
    assert view.items[1].message.parts == [ProviderPart(provider="openai", item=compacted[1])]
    assert [m["content"] for m in view.to_messages()] == ["question 0"]
    for_openai = sync.view(sid, options=ViewOptions(provider="openai")).to_messages()
    assert for_openai[-1]["content"] == [compacted[1]]
    cond = view.condensation
    assert cond is not None and isinstance(cond.event, Condensation)
    assert cond.event.condenser == "openai_agents.responses_compact"  # replaced, not cleared
    assert len(list(sync.forgotten(sid, cond.seq))) >= len(history)


def test_the_docs_condensation_example_runs(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "adapters.md").read_text()
    section = page.split("## OpenAI Agents SDK\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "docs/adapters.md lost its OpenAI Agents condensation example"
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[1], "docs/adapters.md", "exec"), {"__name__": "readme_agents_condensed"})
    with EventStore(f"sqlite:///{tmp_path / 'agents.db'}") as store:
        sid = store.get_session_by_key("user-42-condensed").id
        assert len(list(store.read(sid, kinds=["message"]))) == 2
        assert store.verify(sid).ok


# -- a two-turn run with the process restarted between the turns

_TURN_IN_A_NEW_PROCESS = '''
import asyncio, json, os, sys

from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from eventstore.adapters.openai_agents import EventStoreSession

db_url, session_id, turn = sys.argv[1], sys.argv[2], int(sys.argv[3])


@function_tool
def remember(name: str) -> str:
    """Remember a name."""
    return f"remembered {name}"


SCRIPTS = {
    1: [[function_call("remember", {"name": "Ada"}, call_id="call-ada")],
        [assistant_message("Hello Ada.")]],
    2: [[assistant_message("Your name is Ada.")]],
}
QUESTIONS = {1: "first question: I am Ada.", 2: "second question: who am I?"}


async def main() -> None:
    model = ScriptedModel(SCRIPTS[turn])
    agent = Agent(name="helper", model=model, tools=[remember])
    session = EventStoreSession(session_id, db_url)
    try:
        result = await Runner.run(agent, QUESTIONS[turn], session=session)
        items = await session.get_items()
    finally:
        await session.close()
    print(json.dumps({
        "pid": os.getpid(),
        "output": result.final_output,
        "inputs": [list(call.input) for call in model.calls],
        "items": items,
    }, default=repr))


asyncio.run(main())
'''


def _turn_in_a_new_process(db_url: str, session_id: str, turn: int) -> dict[str, Any]:
    """Run one turn in a fresh Python process; what it saw and stored, as JSON."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _TURN_IN_A_NEW_PROCESS, db_url, session_id, str(turn)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_two_turn_run_resumes_after_a_restart(db_url: str) -> None:
    session_id = f"restart-{uuid.uuid4().hex}"
    first = _turn_in_a_new_process(db_url, session_id, 1)
    second = _turn_in_a_new_process(db_url, session_id, 2)

    assert len({first["pid"], second["pid"], os.getpid()}) == 3
    assert first["output"] == "Hello Ada." and second["output"] == "Your name is Ada."
    # Turn 1 started from nothing: the model saw only its question.
    assert first["inputs"][0] == [_user("first question: I am Ada.")]
    turn_one = first["items"]
    kinds = [i.get("type", "message") for i in turn_one]
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    assert turn_one[-1]["content"][0]["text"] == "Hello Ada."
    # Turn 2, in a new process, sent the model turn 1's items (the tool call with its
    # output) read back from the store, then its own question.
    (sent,) = second["inputs"]
    assert sent == turn_one + [_user("second question: who am I?")]
    items = second["items"]
    assert items[: len(turn_one)] == turn_one
    assert items[len(turn_one)] == _user("second question: who am I?")
    assert items[-1]["content"][0]["text"] == "Your name is Ada." and len(items) == 6
    with EventStore(db_url) as store:
        sid = store.get_session_by_key(session_id).id
        assert store.verify(sid).ok
        roles = [e.event.role for e in store.read(sid, kinds=["message"])]
        assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def _tool_history(steps: int) -> list[dict[str, Any]]:
    """A coding run's items: 10,000 characters (about 2,500 tokens) of output a step."""
    items: list[dict[str, Any]] = [_user("fix the build")]
    for n in range(steps):
        call = {"type": "function_call", "call_id": f"c{n}", "name": "sh", "arguments": "{}"}
        items.append(call)
        items.append({"type": "function_call_output", "call_id": f"c{n}", "output": "x" * 10_000})
    return items


@pytest.mark.parametrize("prune_on_start", [True, False])
def test_a_resumed_session_is_pruned_when_first_opened(db_url: str, prune_on_start: bool) -> None:
    """A session with 75k tokens of tool output (under every threshold, over the pruner's
    40k protection plus 20k), opened by a new session object and policy: before the first
    model input the pruners run, with no model call of their own; prune_on_start=False
    leaves the old outputs in."""
    store = AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}")
    key = f"resumed-{uuid.uuid4().hex}"
    asyncio.run(EventStoreSession(key, store=store).add_items(_tool_history(30)))
    policy = CondensationPolicy(Budget(max_input_tokens=200_000, reserved_output=8_000))
    session = EventStoreSession(key, store=store, policy=policy, prune_on_start=prune_on_start)
    model = ScriptedModel([[assistant_message("done")]])

    async def go() -> None:
        config = RunConfig(call_model_input_filter=session.model_input_filter())
        await Runner.run(Agent(name="a", model=model), "go on", session=session, run_config=config)

    try:
        asyncio.run(go())
        sync, sid = _store_session(session)
        prunes = list(sync.read(sid, kinds=["prune"]))
        outputs = [
            i["output"]
            for i in model.calls[0].input
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        assert len(model.calls) == 1 and len(outputs) == 30
        if prune_on_start:
            assert len(prunes) == 1
            assert outputs[0] != "x" * 10_000 and outputs[-1] == "x" * 10_000
            assert (asyncio.run(session.get_items()))[2]["output"] == "x" * 10_000
        else:
            assert prunes == [] and all(o == "x" * 10_000 for o in outputs)
    finally:
        asyncio.run(store.close())


def test_an_empty_assistant_item_is_kept_opaque(db_url: str) -> None:
    """An assistant message item of empty text (appends refuse an empty assistant
    message) is kept as the SDK's own item: get_items returns it, views leave it out."""
    from eventstore.adapters.openai_agents import item_to_event

    empty = {"role": "assistant", "content": ""}
    evt = item_to_event(empty)
    assert isinstance(evt.parts[0], ProviderPart)  # type: ignore[union-attr]
    store = AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}")
    session = EventStoreSession(f"empty-{uuid.uuid4().hex}", store=store)
    try:
        items = [_user("hi"), empty, {"role": "assistant", "content": "hello"}]
        asyncio.run(session.add_items(items))
        assert asyncio.run(session.get_items()) == items
        sync, sid = _store_session(session)
        assert [m["content"] for m in sync.view(sid).to_messages()] == ["hi", "hello"]
    finally:
        asyncio.run(store.close())
