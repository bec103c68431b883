"""EventStoreSessionService against Google ADK's session-service contract (google-adk 2.13).

Runs where the ``adk`` extra is installed (``.ci/run`` gives it its own environment and
requires these tests there with ``EVENTSTORE_REQUIRE_ADAPTERS``).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import pytest

if os.environ.get("EVENTSTORE_REQUIRE_ADAPTERS"):
    import google.adk  # noqa: F401
else:
    pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.errors.already_exists_error import AlreadyExistsError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.genai import types  # noqa: E402

from eventstore import AsyncEventStore, EventStore  # noqa: E402
from eventstore.adapters.adk import EventStoreSessionService, StaleSessionError  # noqa: E402

APP = "helper"


@pytest.fixture
def service(db_url: str) -> Any:
    store = AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}")
    svc = EventStoreSessionService(store=store)
    yield svc
    asyncio.run(store.close())


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _text_event(author: str, text: str, ts: float | None = None, **kw: Any) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        invocation_id="inv-1",
        author=author,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        timestamp=ts if ts is not None else time.time(),
        **kw,
    )


def test_create_get_and_duplicate_ids(service: Any) -> None:
    async def go() -> None:
        s = await service.create_session(app_name=APP, user_id="u1", session_id="s1")
        assert (s.id, s.app_name, s.user_id, s.events) == ("s1", APP, "u1", [])
        got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert got is not None and got.id == "s1" and got.last_update_time == s.last_update_time
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name=APP, user_id="u1", session_id="s1")
        # The same id for another user or app is another session.
        await service.create_session(app_name=APP, user_id="u2", session_id="s1")
        await service.create_session(app_name="other", user_id="u1", session_id="s1")
        assert await service.get_session(app_name=APP, user_id="u3", session_id="s1") is None
        generated = await service.create_session(app_name=APP, user_id="u1")
        assert generated.id and generated.id != "s1"

    run(go())


def test_events_round_trip_with_calls_responses_and_bytes(service: Any) -> None:
    image = b"\x89PNG\r\n\x1a\n" + os.urandom(300)

    async def go() -> list[Event]:
        s = await service.create_session(app_name=APP, user_id="u", session_id="rt")
        events = [
            Event(
                invocation_id="i",
                author="user",
                content=types.Content(
                    role="user",
                    parts=[
                        types.Part(text="what is this?"),
                        types.Part(inline_data=types.Blob(mime_type="image/png", data=image)),
                    ],
                ),
            ),
            Event(
                invocation_id="i",
                author=APP,
                content=types.Content(
                    role="model",
                    parts=[
                        types.Part(
                            function_call=types.FunctionCall(
                                id="fc-1", name="describe", args={"detail": "high"}
                            )
                        )
                    ],
                ),
            ),
            Event(
                invocation_id="i",
                author=APP,
                content=types.Content(
                    role="user",
                    parts=[
                        types.Part(
                            function_response=types.FunctionResponse(
                                id="fc-1", name="describe", response={"result": "a logo"}
                            )
                        )
                    ],
                ),
            ),
            _text_event(APP, "It is a logo."),
        ]
        for e in events:
            await service.append_event(s, e)
        got = await service.get_session(app_name=APP, user_id="u", session_id="rt")
        assert got is not None
        assert [e.model_dump() for e in got.events] == [e.model_dump() for e in events]
        assert got.last_update_time == events[-1].timestamp
        return got.events

    run(go())
    sync: EventStore = service.store.sync
    sid = sync.get_session_by_key('["adk","helper","rt"]', user_id="u").id
    kinds = [
        (e.event.role, [p.type for p in e.event.parts]) for e in sync.read(sid, kinds=["message"])
    ]
    assert kinds == [
        ("user", ["text", "file"]),
        ("assistant", ["tool_call"]),
        ("tool", ["tool_result"]),
        ("assistant", ["text"]),
    ]
    assert sync.verify(sid).ok


def test_recent_events_and_after_timestamp_read_the_tail(service: Any) -> None:
    async def go() -> None:
        s = await service.create_session(app_name=APP, user_id="u", session_id="tail")
        base = time.time()
        for i in range(30):
            await service.append_event(s, _text_event("user", f"m{i}", base + i))

        async def texts(**cfg: Any) -> list[str]:
            got = await service.get_session(
                app_name=APP, user_id="u", session_id="tail", config=GetSessionConfig(**cfg)
            )
            return [e.content.parts[0].text for e in got.events]

        assert await texts(num_recent_events=3) == ["m27", "m28", "m29"]
        assert await texts(num_recent_events=0) == []
        assert len(await texts(num_recent_events=500)) == 30  # larger than the session
        assert await texts(after_timestamp=base + 27) == ["m27", "m28", "m29"]
        assert await texts(after_timestamp=base + 20, num_recent_events=2) == ["m28", "m29"]

    run(go())


def test_state_scoping(service: Any) -> None:
    async def go() -> None:
        s1 = await service.create_session(
            app_name=APP,
            user_id="u1",
            session_id="a",
            state={"k": 1, "app:theme": "dark", "user:lang": "en", "temp:scratch": "x"},
        )
        assert s1.state == {"k": 1, "app:theme": "dark", "user:lang": "en"}
        await service.append_event(
            s1,
            Event(
                invocation_id="i",
                author=APP,
                actions=EventActions(
                    state_delta={"k": 2, "user:lang": "fr", "app:v": 3, "temp:t": 1}
                ),
            ),
        )
        assert s1.state["temp:t"] == 1  # in memory for the invocation only
        got = await service.get_session(app_name=APP, user_id="u1", session_id="a")
        assert got.state == {"k": 2, "app:theme": "dark", "app:v": 3, "user:lang": "fr"}
        other_session = await service.create_session(app_name=APP, user_id="u1", session_id="b")
        assert other_session.state == {"app:theme": "dark", "app:v": 3, "user:lang": "fr"}
        other_user = await service.create_session(app_name=APP, user_id="u2", session_id="c")
        assert other_user.state == {"app:theme": "dark", "app:v": 3}
        assert await service.get_user_state(app_name=APP, user_id="u1") == {"lang": "fr"}
        assert await service.get_user_state(app_name=APP, user_id="nobody") == {}

    run(go())


def test_list_and_delete(service: Any) -> None:
    async def go() -> None:
        for uid, sid in [("u1", "x"), ("u1", "y"), ("u2", "z")]:
            s = await service.create_session(app_name=APP, user_id=uid, session_id=sid)
            await service.append_event(s, _text_event("user", sid))
        await service.create_session(app_name="elsewhere", user_id="u1", session_id="w")
        listed = await service.list_sessions(app_name=APP, user_id="u1")
        assert [s.id for s in listed.sessions] == ["x", "y"]  # oldest update first
        assert all(s.events == [] for s in listed.sessions)
        everyone = await service.list_sessions(app_name=APP)
        assert sorted(s.id for s in everyone.sessions) == ["x", "y", "z"]
        await service.delete_session(app_name=APP, user_id="u1", session_id="x")
        assert await service.get_session(app_name=APP, user_id="u1", session_id="x") is None
        listed = await service.list_sessions(app_name=APP, user_id="u1")
        assert [s.id for s in listed.sessions] == ["y"]
        again = await service.create_session(app_name=APP, user_id="u1", session_id="x")
        assert again.events == []

    run(go())


def test_a_stale_writer_is_refused(service: Any) -> None:
    async def go() -> None:
        await service.create_session(app_name=APP, user_id="u", session_id="st")
        first = await service.get_session(app_name=APP, user_id="u", session_id="st")
        second = await service.get_session(app_name=APP, user_id="u", session_id="st")
        await service.append_event(first, _text_event("user", "one"))
        await service.append_event(first, _text_event(APP, "two"))  # its own writes are fine
        with pytest.raises(StaleSessionError):
            await service.append_event(second, _text_event("user", "stale"))
        fresh = await service.get_session(app_name=APP, user_id="u", session_id="st")
        await service.append_event(fresh, _text_event("user", "three"))
        got = await service.get_session(app_name=APP, user_id="u", session_id="st")
        assert [e.content.parts[0].text for e in got.events] == ["one", "two", "three"]

    run(go())


def test_threads_with_their_own_loops_share_one_service(service: Any) -> None:
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        async def go() -> None:
            s = await service.create_session(app_name=APP, user_id="u", session_id=f"t{n}")
            for i in range(5):
                await service.append_event(s, _text_event("user", f"{n}.{i}"))

        try:
            asyncio.run(go())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for n in range(4):
        got = run(service.get_session(app_name=APP, user_id="u", session_id=f"t{n}"))
        assert len(got.events) == 5


class _ScriptedLlm(BaseLlm):
    """A model that answers from a script and remembers what it was sent."""

    replies: list[str] = []
    seen: list[list[str]] = []

    async def generate_content_async(
        self, llm_request: Any, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        texts = [p.text for c in llm_request.contents for p in (c.parts or []) if p.text]
        type(self).seen.append(texts)
        reply = type(self).replies.pop(0)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=reply)]))


# -- a two-turn run with the process restarted between the turns

_TURN_IN_A_NEW_PROCESS = '''
import asyncio, json, os, sys
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from eventstore.adapters.adk import EventStoreSessionService

db_url, session_id, turn = sys.argv[1], sys.argv[2], int(sys.argv[3])
APP, USER = "helper", "ada"
QUESTIONS = {1: "first question: I am Ada.", 2: "second question: who am I?"}


def remember(name: str) -> str:
    """Remember a name."""
    return f"remembered {name}"


def _call() -> types.Part:
    return types.Part(function_call=types.FunctionCall(
        id="call-ada", name="remember", args={"name": "Ada"}))


SCRIPTS = {1: [_call(), types.Part(text="Hello Ada.")],
           2: [types.Part(text="Your name is Ada.")]}


SENT: list[Any] = []  # the contents of every model request, as JSON


class ScriptedLlm(BaseLlm):
    """An offline model: answers from SCRIPTS and keeps every request it was sent."""

    async def generate_content_async(self, llm_request, stream=False):
        SENT.append([c.model_dump(mode="json") for c in llm_request.contents])
        part = SCRIPTS[turn].pop(0)
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


async def main() -> None:
    agent = LlmAgent(name=APP, model=ScriptedLlm(model="scripted"), tools=[remember])
    service = EventStoreSessionService(db_url)
    try:
        if turn == 1:
            await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
        runner = Runner(app_name=APP, agent=agent, session_service=service)
        message = types.Content(role="user", parts=[types.Part(text=QUESTIONS[turn])])
        output = ""
        async for ev in runner.run_async(
            user_id=USER, session_id=session_id, new_message=message
        ):
            if ev.content and ev.content.parts and ev.content.parts[0].text:
                output = ev.content.parts[0].text
        got = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    finally:
        await service.close()
    print(json.dumps({
        "pid": os.getpid(),
        "output": output,
        "sent": SENT,
        "events": [e.model_dump(mode="json") for e in got.events],
    }))


asyncio.run(main())
'''


def _turn_in_a_new_process(db_url: str, session_id: str, turn: int) -> dict[str, Any]:
    """Run one turn in a fresh Python process; what it saw and stored, as JSON."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _TURN_IN_A_NEW_PROCESS, db_url, session_id, str(turn)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _parts(contents: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, text or tool name) for each part of each dumped ``Content``."""
    out = []
    for c in contents:
        for p in c["parts"]:
            if p.get("text"):
                out.append((c["role"], p["text"]))
            elif p.get("function_call"):
                out.append((c["role"], "call " + p["function_call"]["name"]))
            elif p.get("function_response"):
                out.append((c["role"], "result " + p["function_response"]["name"]))
    return out


def test_a_two_turn_run_resumes_after_a_restart(db_url: str) -> None:
    session_id = f"restart-{uuid.uuid4().hex}"
    first = _turn_in_a_new_process(db_url, session_id, 1)
    second = _turn_in_a_new_process(db_url, session_id, 2)

    assert len({first["pid"], second["pid"], os.getpid()}) == 3
    assert first["output"] == "Hello Ada." and second["output"] == "Your name is Ada."
    # Turn 1 started from nothing: the model saw only its question.
    assert _parts(first["sent"][0]) == [("user", "first question: I am Ada.")]
    turn_one = [e["content"] for e in first["events"]]
    assert _parts(turn_one) == [
        ("user", "first question: I am Ada."),
        ("model", "call remember"),
        ("user", "result remember"),
        ("model", "Hello Ada."),
    ]
    # What the store gives back is what ADK held in memory in turn 1: its second model
    # request (the question, the tool call and its result) was built before any read.
    assert first["sent"][1] == turn_one[:3]
    # Turn 2, in a new process, sent the model turn 1's events (the tool call with its
    # result) read back from the store, then its own question.
    (sent,) = second["sent"]
    assert sent[: len(turn_one)] == turn_one
    assert _parts(sent[len(turn_one) :]) == [("user", "second question: who am I?")]
    # get_session returns both turns' events, turn 1's exactly as turn 1 read them.
    events = second["events"]
    assert events[: len(first["events"])] == first["events"]
    assert _parts([e["content"] for e in events[len(first["events"]) :]]) == [
        ("user", "second question: who am I?"),
        ("model", "Your name is Ada."),
    ]
    with EventStore(db_url) as store:
        key = json.dumps(["adk", APP, session_id], separators=(",", ":"))
        sid = store.get_session_by_key(key, user_id="ada").id
        assert store.verify(sid).ok
        roles = [e.event.role for e in store.read(sid, kinds=["message"])]
        assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def test_the_docs_example_runs(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "adapters.md").read_text()
    block = re.search(r"```python\n(.*?)```", page.split("## Google ADK\n", 1)[1], re.S)
    assert block, "docs/adapters.md lost its ADK example"
    monkeypatch.chdir(tmp_path)
    exec(compile(block.group(1), "docs/adapters.md", "exec"), {"__name__": "readme_adk"})
    assert (tmp_path / "adk.db").exists()


def test_the_benchmark_runs_in_smoke_mode(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "adk", "--smoke", "--no-postgres", "--repeat", "2",
         "--out", str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=600, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "adk.json").read_text())
    services = [r["service"] for r in data["rows"]]
    assert services == ["eventstore (SQLite)", "ADK DatabaseSessionService (SQLite)"]
    assert all(r["sizes"]["2000"]["median_ms"] > 0 for r in data["rows"])


# -- ADK event compaction as condensations

from typing import ClassVar  # noqa: E402

from google.adk.apps import App  # noqa: E402
from google.adk.apps._configs import EventsCompactionConfig  # noqa: E402
from google.adk.apps.llm_event_summarizer import LlmEventSummarizer  # noqa: E402
from google.adk.events.event_actions import EventCompaction  # noqa: E402

from eventstore.errors import NotFoundError  # noqa: E402
from eventstore.events import Condensation  # noqa: E402
from eventstore.views import RECALL_SUMMARY_PREFIX  # noqa: E402


def _compaction(start: float, end: float, text: str) -> Event:
    return Event(
        invocation_id="compaction",
        author="user",
        actions=EventActions(
            compaction=EventCompaction(
                start_timestamp=start,
                end_timestamp=end,
                compacted_content=types.Content(role="model", parts=[types.Part(text=text)]),
            )
        ),
        timestamp=end + 100,
    )


def _sid(service: Any, session_id: str, user_id: str = "u") -> str:
    return str(service.store_session_id(app_name=APP, user_id=user_id, session_id=session_id))


def _condensations(sync: EventStore, sid: str) -> list[Any]:
    return list(sync.read(sid, kinds=["condensation"]))


def test_a_compaction_event_is_also_a_condensation(service: Any) -> None:
    base = 1_000_000.0

    async def go() -> list[Event]:
        s = await service.create_session(
            app_name=APP, user_id="u", session_id="cmp", state={"k": 1}
        )
        events = [_text_event("user" if i % 2 == 0 else APP, f"m{i}", base + i) for i in range(6)]
        for e in events:
            await service.append_event(s, e)
        events.append(_compaction(base, base + 3, "SUMMARY A"))
        await service.append_event(s, events[-1])
        got = await service.get_session(app_name=APP, user_id="u", session_id="cmp")
        assert got is not None and got.state == {"k": 1}
        assert [e.model_dump() for e in got.events] == [e.model_dump() for e in events]
        return events

    run(go())
    sync: EventStore = service.store.sync
    sid = _sid(service, "cmp")
    conds = _condensations(sync, sid)
    assert len(conds) == 1
    cond = conds[0].event
    assert isinstance(cond, Condensation)
    messages = list(sync.read(sid, kinds=["message"]))
    assert (cond.forgotten_from, cond.forgotten_to) == (messages[0].seq, messages[3].seq)
    assert cond.summary == "SUMMARY A" and cond.trigger == "import"
    assert cond.tokens_before is not None and cond.tokens_before > 0
    view = sync.view(sid)
    assert view.tokens == cond.tokens_after
    rendered = view.to_messages()
    assert rendered[0]["content"] == RECALL_SUMMARY_PREFIX + "SUMMARY A"
    assert [m["content"] for m in rendered[1:]] == ["m4", "m5"]
    assert [e.event.text for e in sync.forgotten(sid, conds[0].seq)] == ["m0", "m1", "m2", "m3"]
    assert sync.verify(sid).ok
    with pytest.raises(NotFoundError, match="create_session"):
        service.store_session_id(app_name=APP, user_id="someone-else", session_id="cmp")


def test_later_compactions_fold_supersede_or_are_ignored(service: Any) -> None:
    base = 2_000_000.0

    async def go() -> None:
        s = await service.create_session(app_name=APP, user_id="u", session_id="fold")
        for i in range(8):
            await service.append_event(s, _text_event("user", f"m{i}", base + i))
        await service.append_event(s, _compaction(base, base + 2, "A"))
        # Starts inside A's range and ends after it: ADK shows both summaries.
        await service.append_event(s, _compaction(base + 2, base + 4, "B"))
        # Inside the range already condensed: ADK ignores it, so do we.
        await service.append_event(s, _compaction(base + 1, base + 3, "ignored"))
        # Contains everything so far: it alone stands for m0..m6.
        await service.append_event(s, _compaction(base, base + 6, "C"))

    run(go())
    sync: EventStore = service.store.sync
    sid = _sid(service, "fold")
    seqs = [e.seq for e in sync.read(sid, kinds=["message"])]
    conds = [c.event for c in _condensations(sync, sid)]
    assert [(c.forgotten_from, c.forgotten_to, c.summary) for c in conds] == [
        (seqs[0], seqs[2], "A"),
        (seqs[0], seqs[4], "A\n\nB"),
        (seqs[0], seqs[6], "C"),
    ]
    assert [m["content"] for m in sync.view(sid).to_messages()] == [
        RECALL_SUMMARY_PREFIX + "C",
        "m7",
    ]
    got = run(service.get_session(app_name=APP, user_id="u", session_id="fold"))
    assert len(got.events) == 12  # every ADK event, the compactions included
    assert sync.verify(sid).ok


class _Summarizer(BaseLlm):
    """A summary model for ADK's LlmEventSummarizer: numbered summaries."""

    calls: ClassVar[list[str]] = []

    async def generate_content_async(
        self, llm_request: Any, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        type(self).calls.append("x")
        text = f"SUMMARY-{len(type(self).calls)}"
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


@pytest.mark.filterwarnings("ignore:.*EXPERIMENTAL.*:UserWarning")
def test_adk_runner_compaction_shows_in_our_view_as_adk_sends_it(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    _ScriptedLlm.replies = ["r1", "r2", "r3"]
    _ScriptedLlm.seen = []
    _Summarizer.calls = []
    agent = LlmAgent(name="helper", model=_ScriptedLlm(model="scripted"))
    config = EventsCompactionConfig(
        summarizer=LlmEventSummarizer(llm=_Summarizer(model="summary")),
        compaction_interval=2,
        overlap_size=0,
    )
    app = App(name=APP, root_agent=agent, events_compaction_config=config)

    async def go() -> tuple[Any, Any]:
        async with AsyncEventStore(db_url, tenant=tenant) as store:
            service = EventStoreSessionService(store=store)
            await service.create_session(app_name=APP, user_id="ada", session_id="long")
            runner = Runner(app=app, session_service=service)
            for text in ["t1", "t2", "t3"]:
                message = types.Content(role="user", parts=[types.Part(text=text)])
                async for _ in runner.run_async(
                    user_id="ada", session_id="long", new_message=message
                ):
                    pass
            got = await service.get_session(app_name=APP, user_id="ada", session_id="long")
            return got, _sid(service, "long", "ada")

    got, sid = run(go())
    assert _Summarizer.calls == ["x"]  # one compaction, after the second invocation
    assert any(e.actions and e.actions.compaction for e in got.events)  # ADK's event is kept
    # What ADK sent the model on the third turn is what our view showed at that point.
    sent = _ScriptedLlm.seen[2]
    assert "SUMMARY-1" in sent[0] and sent[1:] == ["t3"]
    with EventStore(db_url, tenant=tenant) as sync:
        conds = _condensations(sync, sid)
        assert len(conds) == 1 and conds[0].event.summary == "SUMMARY-1"
        t3 = next(e.seq for e in sync.read(sid, kinds=["message"]) if e.event.text == "t3")
        shown = [m["content"] for m in sync.view(sid, as_of=t3).to_messages()]
        assert shown == [RECALL_SUMMARY_PREFIX + "SUMMARY-1", "t3"]
        assert [e.event.text for e in sync.forgotten(sid, conds[0].seq)][:4] == [
            "t1",
            "r1",
            "t2",
            "r2",
        ]
        assert sync.verify(sid).ok
