"""EventStoreSaver against LangGraph's checkpointer contract (langgraph 1.2, langgraph-checkpoint
4.3): LangGraph's own conformance suite (``langgraph-checkpoint-conformance``) on both
backends, with LangGraph's reference savers run through the same suite in the same run, and
a graph resumed in a new process whose history equals the one LangGraph's ``SqliteSaver``
gives.

Runs where the ``langgraph`` extra is installed (``.ci/run`` gives it its own environment and
requires these tests there with ``EVENTSTORE_REQUIRE_ADAPTERS``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("EVENTSTORE_REQUIRE_ADAPTERS"):
    import langgraph.checkpoint.conformance  # noqa: F401
else:
    pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.base import BaseCheckpointSaver  # noqa: E402
from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.report import CapabilityReport  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from eventstore import EventStore  # noqa: E402
from eventstore.adapters.langgraph import EventStoreSaver  # noqa: E402


def _check(report: CapabilityReport) -> None:
    report.print_report()
    failures = {
        name: result.failures
        for name, result in report.results.items()
        if getattr(result, "failures", None)
    }
    assert report.passed_all_base(), failures
    assert not failures, failures


# -- LangGraph's conformance suite


@pytest.mark.parametrize("snapshot_every", [1, 3, 50])
async def test_conformance_suite_passes(db_url: str, snapshot_every: int) -> None:
    """Every base capability (put, put_writes, get_tuple, list, delete_thread), with
    snapshots every step, every third step, and the default."""

    @checkpointer_test(name=f"EventStoreSaver[{snapshot_every}]")
    async def saver() -> AsyncIterator[BaseCheckpointSaver]:
        store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}")
        try:
            yield EventStoreSaver(store=store, snapshot_every=snapshot_every)
        finally:
            store.close()

    report = await validate(saver)
    _check(report)
    assert set(report.results) >= {"put", "put_writes", "get_tuple", "list", "delete_thread"}


async def test_reference_savers_pass_the_same_suite(tmp_path: Path, pg_url: str) -> None:
    """LangGraph's own savers through the same suite in the same run: the suite and its
    version are the ones our saver is held to."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    @checkpointer_test(name="InMemorySaver")
    async def memory() -> AsyncIterator[BaseCheckpointSaver]:
        yield InMemorySaver()

    @checkpointer_test(name="AsyncSqliteSaver")
    async def sqlite() -> AsyncIterator[BaseCheckpointSaver]:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "ref.db")) as saver:
            yield saver

    conninfo = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)

    @checkpointer_test(name="AsyncPostgresSaver")
    async def postgres() -> AsyncIterator[BaseCheckpointSaver]:
        async with AsyncPostgresSaver.from_conn_string(conninfo) as saver:
            await saver.setup()
            yield saver

    for registered in (memory, sqlite, postgres):
        report = await validate(registered)
        assert report.passed_all_base(), registered.name


# -- behaviour the suite does not cover


def _cp(values: dict[str, Any], versions: dict[str, Any], cid: str | None = None) -> Any:
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

    return generate_checkpoint(checkpoint_id=cid, channel_values=values, channel_versions=versions)


def test_a_growing_list_is_stored_as_what_it_gained(store: EventStore) -> None:
    saver = EventStoreSaver(store=store, snapshot_every=4)
    config: Any = {"configurable": {"thread_id": "grow", "checkpoint_ns": ""}}
    items: list[str] = []
    stored = []
    version: str | None = None
    for step in range(10):
        items = [*items, f"item {step} " + "x" * 200]
        version = saver.get_next_version(version, None)
        cp = _cp({"items": items, "n": step}, {"items": version, "n": version})
        config = saver.put(config, cp, {"source": "loop", "step": step}, cp["channel_versions"])
        stored.append((config, list(items)))
    sid = store.get_session_by_key("langgraph:grow").id
    sizes = [len(json.dumps(e.event.data["values"])) for e in store.read(sid)]
    # Snapshots (steps 0, 4, 8) hold the whole list; the steps between hold one item.
    assert all(s < 600 for i, s in enumerate(sizes) if i % 4)
    assert sizes[8] > 8 * 200
    fresh = EventStoreSaver(store=store, snapshot_every=4)  # nothing cached
    for cfg, expected in stored:
        tup = fresh.get_tuple(cfg)
        assert tup is not None
        assert tup.checkpoint["channel_values"]["items"] == expected
    newest = fresh.get_tuple({"configurable": {"thread_id": "grow", "checkpoint_ns": ""}})
    assert newest is not None and newest.checkpoint["channel_values"]["n"] == 9
    assert store.verify(sid).ok


def test_a_list_changed_in_the_middle_is_stored_whole(store: EventStore) -> None:
    saver = EventStoreSaver(store=store)
    config: Any = {"configurable": {"thread_id": "edit", "checkpoint_ns": ""}}
    first = saver.put(config, _cp({"xs": [1, 2, 3]}, {"xs": "1"}), {"step": 0}, {"xs": "1"})
    second = saver.put(first, _cp({"xs": [1, 9, 3, 4]}, {"xs": "2"}), {"step": 1}, {"xs": "2"})
    fresh = EventStoreSaver(store=store)
    a, b = fresh.get_tuple(first), fresh.get_tuple(second)
    assert a is not None and a.checkpoint["channel_values"]["xs"] == [1, 2, 3]
    assert b is not None and b.checkpoint["channel_values"]["xs"] == [1, 9, 3, 4]


def test_values_handed_out_are_fresh_objects(store: EventStore) -> None:
    """Mutating what get_tuple returned changes neither the store nor the next get."""
    saver = EventStoreSaver(store=store)
    config: Any = {"configurable": {"thread_id": "mut", "checkpoint_ns": ""}}
    stored = saver.put(config, _cp({"xs": [{"a": 1}]}, {"xs": "1"}), {"step": 0}, {"xs": "1"})
    got = saver.get_tuple(stored)
    assert got is not None
    got.checkpoint["channel_values"]["xs"][0]["a"] = 2
    got.checkpoint["channel_values"]["xs"].append("x")
    again = saver.get_tuple(stored)
    assert again is not None and again.checkpoint["channel_values"]["xs"] == [{"a": 1}]


def test_delete_thread_keeps_the_log_for_audits(store: EventStore) -> None:
    saver = EventStoreSaver(store=store)
    config: Any = {"configurable": {"thread_id": "gone", "checkpoint_ns": ""}}
    stored = saver.put(config, _cp({"k": "v"}, {"k": "1"}), {"step": 0}, {"k": "1"})
    sid = store.get_session_by_key("langgraph:gone").id
    saver.delete_thread("gone")
    assert saver.get_tuple(stored) is None
    assert list(saver.list(config)) == []
    with store.audit():
        assert store.verify(sid).ok
    # The thread id may start over.
    again = saver.put(config, _cp({"k": "w"}, {"k": "1"}), {"step": 0}, {"k": "1"})
    tup = saver.get_tuple(again)
    assert tup is not None and tup.checkpoint["channel_values"] == {"k": "w"}


def test_writes_for_a_past_checkpoint_are_found(store: EventStore) -> None:
    """A run resumed from a past checkpoint writes its tasks' results for that one, after
    its successors: get_tuple and list still give them to it, and only to it."""
    saver = EventStoreSaver(store=store)
    config: Any = {"configurable": {"thread_id": "fork", "checkpoint_ns": ""}}
    first = saver.put(config, _cp({"k": 1}, {"k": "1"}), {"step": 0}, {"k": "1"})
    saver.put_writes(first, [("k", "in order")], "task-a")
    second = saver.put(first, _cp({"k": 2}, {"k": "2"}), {"step": 1}, {"k": "2"})
    saver.put_writes(second, [("k", "for the second")], "task-b")
    saver.put_writes(first, [("k", "late")], "task-c")
    # Another saver (another process) knows nothing of the batches already stored.
    EventStoreSaver(store=store).put_writes(first, [("k", "later")], "task-d")
    for reader in (saver, EventStoreSaver(store=store)):
        tup = reader.get_tuple(first)
        assert tup is not None
        assert [(t, v) for t, _, v in tup.pending_writes or []] == [
            ("task-a", "in order"),
            ("task-c", "late"),
            ("task-d", "later"),
        ]
        newest = reader.get_tuple(second)
        assert newest is not None
        assert [v for _, _, v in newest.pending_writes or []] == ["for the second"]
        listed = {t.checkpoint["id"]: t.pending_writes for t in reader.list(config)}
        assert [v for _, _, v in listed[first["configurable"]["checkpoint_id"]] or []] == [
            "in order",
            "late",
            "later",
        ]


def test_snapshot_every_must_be_a_positive_count() -> None:
    with pytest.raises(ValueError, match="snapshot_every"):
        EventStoreSaver("sqlite://", snapshot_every=0)
    with pytest.raises(TypeError, match="snapshot_every"):
        EventStoreSaver("sqlite://", snapshot_every=True)


# -- a graph resumed in a new process


GRAPH = r"""
import json, sys
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages


class State(TypedDict):
    messages: Annotated[list, add_messages]
    turns: int


def think(state):
    n = state.get("turns", 0)
    return {"messages": [AIMessage(content=f"reply {n}", id=f"ai-{n}")], "turns": n + 1}


def act(state):
    return {"messages": [AIMessage(content=f"acted {state['turns']}", id=f"act-{state['turns']}")]}


builder = StateGraph(State)
builder.add_node("think", think)
builder.add_node("act", act)
builder.add_edge(START, "think")
builder.add_edge("think", "act")
builder.add_edge("act", END)

kind, where, thread, phase = sys.argv[1:5]
if kind == "reference":
    import sqlite3
    from langgraph.checkpoint.sqlite import SqliteSaver
    saver = SqliteSaver(sqlite3.connect(where, check_same_thread=False))
else:
    from eventstore.adapters.langgraph import EventStoreSaver
    saver = EventStoreSaver(where, snapshot_every=3)
graph = builder.compile(checkpointer=saver, interrupt_before=["act"])
config = {"configurable": {"thread_id": thread}}
if phase == "run":
    for i in range(3):
        graph.invoke({"messages": [HumanMessage(content=f"q{i}", id=f"h-{i}")]}, config)
        graph.invoke(None, config)
    # Left waiting at the interrupt: the next process resumes it.
    graph.invoke({"messages": [HumanMessage(content="last", id="h-last")]}, config)
else:
    graph.invoke(None, config)
    history = list(graph.get_state_history(config))
    ids = [s.config["configurable"]["checkpoint_id"] for s in history]
    out = []
    for s in history:
        parent = s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None
        out.append({
            "messages": [[m.type, m.content, m.id] for m in s.values.get("messages", [])],
            "turns": s.values.get("turns"),
            "next": list(s.next),
            "step": s.metadata["step"],
            "source": s.metadata["source"],
            "tasks": [[t.name, len(t.interrupts)] for t in s.tasks],
            "parent": ids.index(parent) if parent in ids else None,
        })
    print(json.dumps(out))
"""


def _run(script: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_graph_resumed_in_a_new_process_has_sqlite_savers_history(
    db_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "graph.py"
    script.write_text(GRAPH)
    thread = f"thread-{uuid.uuid4().hex}"
    reference = str(tmp_path / "reference.db")
    _run(script, "reference", reference, thread, "run")
    expected = json.loads(_run(script, "reference", reference, thread, "resume"))
    _run(script, "eventstore", db_url, thread, "run")
    got = json.loads(_run(script, "eventstore", db_url, thread, "resume"))
    assert len(expected) > 10
    assert got == expected


# -- the documentation's example


def test_the_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/adapters-langgraph.md's example marked ``test: extra langgraph`` runs as
    written."""
    import re

    doc = Path(__file__).resolve().parent.parent / "docs" / "adapters-langgraph.md"
    blocks = re.findall(
        r"<!-- test: extra langgraph -->\n```python\n(.*?)```", doc.read_text(), re.S
    )
    assert len(blocks) == 1, "the docs lost their langgraph example"
    monkeypatch.chdir(tmp_path)
    code = compile(blocks[0], str(doc), "exec", dont_inherit=True)  # no __future__ here
    exec(code, {"__name__": "docs_example"})
