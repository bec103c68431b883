"""The runtime's queue and run state: durable, exactly once, and nothing produced is lost.

Every test runs over (sqlite, postgres) x (sync, async) through ``api_store``; the race
tests use separate processes, each with its own store, against one database.
"""

from __future__ import annotations

import multiprocessing
import uuid
from typing import Any

import pytest

from eventstore import (
    Delta,
    Dequeued,
    EventStore,
    InvalidEventError,
    Message,
    NotFoundError,
    Queued,
    RunState,
    ToolCallPart,
)
from eventstore._features.runtime import CANCELLED_RESULT


def _texts(view: Any) -> list[tuple[str, Any]]:
    return [(m["role"], m.get("content")) for m in view.to_messages()]


def test_queued_messages_wait_outside_the_view_and_dequeue_in_order(api_store: Any) -> None:
    s = api_store.create_session()
    api_store.append(s.id, [Message.user("first task"), Message.assistant("working on it")])
    q1 = api_store.enqueue(s.id, "also fix the tests")
    q2 = api_store.enqueue(s.id, Message.user("and update the docs"))
    assert q2 == q1 + 1

    waiting = api_store.pending(s.id)
    assert [p.seq for p in waiting] == [q1, q2]
    assert [p.event.message.text for p in waiting] == ["also fix the tests", "and update the docs"]
    # Waiting messages are not part of what the model sees.
    assert ("user", "also fix the tests") not in _texts(api_store.view(s.id))

    got = api_store.dequeue(s.id)
    assert got is not None and got.event.text == "also fix the tests"
    assert got.seq == api_store.head(s.id)  # the next event of the session
    assert [p.seq for p in api_store.pending(s.id)] == [q2]
    assert _texts(api_store.view(s.id))[-1] == ("user", "also fix the tests")

    api_store.append(s.id, [Message.assistant("done")])
    second = api_store.dequeue(s.id)
    assert second is not None and second.event.text == "and update the docs"
    assert api_store.dequeue(s.id) is None
    assert api_store.pending(s.id) == []
    kinds = [e.event.kind for e in api_store.read(s.id)]
    assert kinds.count("dequeued") == 2 and kinds.count("queued") == 2
    assert api_store.verify(s.id).ok


def test_pending_limit_and_bad_input(api_store: Any) -> None:
    s = api_store.create_session()
    for i in range(5):
        api_store.enqueue(s.id, f"m{i}")
    assert [p.event.message.text for p in api_store.pending(s.id, limit=2)] == ["m0", "m1"]
    with pytest.raises(InvalidEventError):
        api_store.pending(s.id, limit=-1)
    with pytest.raises(InvalidEventError):
        api_store.enqueue(s.id, 42)
    with pytest.raises(NotFoundError):
        api_store.dequeue("no-such-session")
    # A dequeued marker must point back at an earlier event.
    with pytest.raises(InvalidEventError, match="queued_seq"):
        api_store.append(s.id, [Dequeued(queued_seq=99)])


def test_the_queue_survives_a_restart(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant, upgrade=True) as first:
        sid = first.create_session().id
        first.enqueue(sid, "typed while the agent was busy")
    with EventStore(db_url, tenant=tenant) as second:
        assert [p.event.message.text for p in second.pending(sid)] == [
            "typed while the agent was busy"
        ]
        taken = second.dequeue(sid)
        assert taken is not None and taken.event.text == "typed while the agent was busy"


def _consume(url: str, tenant: str, sid: str, out: Any) -> None:
    got = []
    with EventStore(url, tenant=tenant) as store:
        while (taken := store.dequeue(sid)) is not None:
            got.append(taken.event.text)
    out.put(got)


def test_two_processes_dequeue_each_message_exactly_once(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    n = 60
    with EventStore(db_url, tenant=tenant, upgrade=True) as store:
        sid = store.create_session().id
        for i in range(n):
            store.enqueue(sid, f"msg-{i}")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_consume, args=(db_url, tenant, sid, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    taken = results[0] + results[1]
    assert sorted(taken) == sorted(f"msg-{i}" for i in range(n))  # none lost, none doubled
    for part in results:  # each consumer saw the queue in FIFO order
        assert part == sorted(part, key=lambda t: int(t.split("-")[1]))
    with EventStore(db_url, tenant=tenant) as store:
        users = [
            e.event.text
            for e in store.read(sid, kinds=["message"])
            if isinstance(e.event, Message) and e.event.role == "user"
        ]
        assert users == [f"msg-{i}" for i in range(n)]  # the log holds them in queue order
        assert store.pending(sid) == []
        assert store.verify(sid).ok


def test_a_stream_is_sealed_into_one_assistant_message(api_store: Any) -> None:
    s = api_store.create_session()
    api_store.append(s.id, [Message.user("tell me a story")])
    assert api_store.run_state(s.id).state == "idle"
    stream = api_store.begin_stream(s.id)
    assert api_store.run_state(s.id).state == "streaming"
    for chunk in ["Once ", "upon ", "a time."]:
        api_store.append_delta(s.id, stream, chunk)
    assert _texts(api_store.view(s.id))[-1] == ("user", "tell me a story")  # no deltas in views
    sealed = api_store.finish_stream(s.id, stream)
    assert sealed.event.text == "Once upon a time."
    assert not sealed.event.interrupted
    state = api_store.run_state(s.id)
    assert (state.state, state.reason) == ("idle", "completed")
    assert _texts(api_store.view(s.id))[-1] == ("assistant", "Once upon a time.")
    with pytest.raises(NotFoundError, match="stream"):
        api_store.finish_stream(s.id, stream)  # already sealed
    assert api_store.cancel_run(s.id) == []  # idle: nothing to cancel
    assert api_store.verify(s.id).ok


def test_finish_stream_takes_the_final_message_when_given(api_store: Any) -> None:
    s = api_store.create_session()
    stream = api_store.begin_stream(s.id)
    api_store.append_delta(s.id, stream, "partial")
    final = Message.assistant("the provider's complete message")
    assert api_store.finish_stream(s.id, stream, final).event.text == final.text
    with pytest.raises(InvalidEventError):
        api_store.set_run_state(s.id, "streaming")


def test_cancelling_a_stream_keeps_the_partial_text_marked_interrupted(api_store: Any) -> None:
    s = api_store.create_session()
    api_store.append(s.id, [Message.user("write a long answer")])
    stream = api_store.begin_stream(s.id)
    api_store.append_delta(s.id, stream, "The answer has three ")
    api_store.append_delta(s.id, stream, "par")
    seqs = api_store.cancel_run(s.id)
    assert len(seqs) == 2
    partial = [e for e in api_store.read(s.id, kinds=["message"])][-1]
    assert partial.event.role == "assistant"
    assert partial.event.text == "The answer has three par"
    assert partial.event.interrupted is True
    state = api_store.run_state(s.id)
    assert (state.state, state.reason) == ("idle", "cancelled")
    assert _texts(api_store.view(s.id))[-1] == ("assistant", "The answer has three par")
    # The stream is closed: further chunks may be written by a late producer, but it
    # cannot be sealed any more.
    with pytest.raises(NotFoundError):
        api_store.finish_stream(s.id, stream)
    assert api_store.verify(s.id).ok


def test_cancelling_tool_execution_keeps_finished_results(api_store: Any) -> None:
    s = api_store.create_session()
    calls = [
        ToolCallPart(id="call-a", name="read_file", arguments='{"path": "a.py"}'),
        ToolCallPart(id="call-b", name="run_tests", arguments="{}"),
        ToolCallPart(id="call-c", name="grep", arguments='{"q": "x"}'),
    ]
    api_store.append(s.id, [Message.user("check it"), Message(role="assistant", parts=list(calls))])
    api_store.set_run_state(s.id, "executing_tools")
    api_store.append(s.id, [Message.tool("call-a", "print('a')", name="read_file")])
    seqs = api_store.cancel_run(s.id)
    assert len(seqs) == 3  # two interrupted results and the idle state
    msgs = [e.event for e in api_store.read(s.id, kinds=["message"])]
    results = {r.tool_call_id: (r, m) for m in msgs for r in m.tool_results}
    assert results["call-a"][0].output == "print('a')"
    assert not results["call-a"][1].interrupted
    for cid in ("call-b", "call-c"):
        part, msg = results[cid]
        assert part.output == CANCELLED_RESULT and part.is_error and msg.interrupted
    rendered = api_store.view(s.id).to_messages()
    answered = [m["tool_call_id"] for m in rendered if m["role"] == "tool"]
    assert answered == ["call-a", "call-b", "call-c"]
    assert api_store.run_state(s.id).state == "idle"
    assert api_store.verify(s.id).ok


def test_recovery_after_a_crash_uses_the_same_path(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant, upgrade=True) as crashed:
        sid = crashed.create_session().id
        stream = crashed.begin_stream(sid)
        crashed.append_delta(sid, stream, "half a sent")
    with EventStore(db_url, tenant=tenant) as restarted:
        assert restarted.run_state(sid).state == "streaming"
        restarted.cancel_run(sid, reason="recovered")
        last = list(restarted.read(sid))[-2:]
        assert isinstance(last[0].event, Message) and last[0].event.interrupted
        assert isinstance(last[1].event, RunState) and last[1].event.reason == "recovered"


def test_new_kinds_round_trip_through_read(api_store: Any) -> None:
    s = api_store.create_session()
    api_store.append(
        s.id,
        [
            Queued(message=Message.user("q")),
            RunState(state="executing_tools", reason="tools"),
            Delta(stream_id="s1", text="chunk"),
        ],
    )
    got = [e.event for e in api_store.read(s.id)]
    assert isinstance(got[0], Queued) and got[0].message.text == "q"
    assert isinstance(got[1], RunState) and got[1].reason == "tools"
    assert isinstance(got[2], Delta) and got[2].text == "chunk"


def test_queue_and_cancel_from_the_command_line(db_url: str) -> None:
    import json

    from click.testing import CliRunner

    from eventstore.cli import cli

    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant, upgrade=True) as store:
        sid = store.create_session().id
        stream = store.begin_stream(sid)
        store.append_delta(sid, stream, "so far")
    runner = CliRunner()

    def run(*args: str) -> Any:
        result = runner.invoke(cli, ["--db", db_url, "--tenant", tenant, *args])
        assert result.exit_code == 0, result.output
        return result

    assert "queued at seq" in run("enqueue", sid, "please also run lint").output
    listed = json.loads(run("pending", sid, "--json").output)
    assert [e["event"]["message"]["parts"][0]["text"] for e in listed] == ["please also run lint"]
    assert "please also run lint" in run("dequeue", sid).output
    assert run("pending", sid).output.strip() == "nothing queued"
    cancelled = json.loads(run("cancel", sid, "--json").output)
    assert cancelled["was"] == "streaming" and len(cancelled["seqs"]) == 2
    assert "idle" in run("cancel", sid).output
    missing = runner.invoke(cli, ["--db", db_url, "--tenant", tenant, "pending", "nope-nope"])
    assert missing.exit_code != 0 and "Traceback" not in missing.output
