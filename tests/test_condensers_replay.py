"""Long-session replay: real SWE-agent trajectories, turn by turn, through the default
pipeline with a small model window, on both databases.

Before every model call (each assistant message) the policy may condense; then the view
must fit the budget (or be irreducible: nothing but the pinned head, the summary and the
newest message group is left), render with every tool call paired with its result, and
every original event and part must still be readable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_files

from condensers import CondensationPolicy, cut_points
from eventstore import EventStore, Message, ToolResultPart
from eventstore.budget import Budget
from eventstore.chat import from_openai

TRAJECTORIES = corpus_files("swe-agent/**/*.traj")
WINDOW = 8192

pytestmark = pytest.mark.skipif(not TRAJECTORIES, reason="SWE-agent corpus not present")


def load_swe_agent(path: Path) -> list[Message]:
    """The trajectory's history as the messages an agent would send to its model.

    SWE-agent's bookkeeping keys (``agent``, ``message_type``, ``thought``, ``action``) are
    not part of what the model sees and are dropped; a tool message's ``tool_call_ids``
    list becomes one message per id.
    """
    data = json.loads(path.read_text())
    out: list[Message] = []
    for raw in data["history"]:
        msg = {k: raw[k] for k in ("role", "content", "tool_calls") if raw.get(k) is not None}
        if raw["role"] == "tool":
            for cid in raw.get("tool_call_ids") or [raw.get("tool_call_id")]:
                out.append(from_openai({**msg, "tool_call_id": cid}))
        else:
            out.append(from_openai(msg))
    return out


def assert_pairs_intact(messages: list[dict[str, Any]]) -> None:
    calls: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        for c in m.get("tool_calls") or []:
            calls.add(c["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in calls, "tool result without its call"
            answered.add(m["tool_call_id"])
    assert calls == answered, f"calls without results: {calls - answered}"


def irreducible(view: Any, budget: Budget) -> bool:
    """The pinned head plus the newest message group (which no condenser may drop) leave
    no room for a minimal structured summary (about 250 tokens)."""
    tail = [i for i in view.items if not i.pinned]
    last_cut = max((k for k in cut_points(tail) if k < len(tail)), default=0)
    floor = sum(i.tokens for i in view.items if i.pinned) + sum(i.tokens for i in tail[last_cut:])
    return floor + 250 > budget.available


def replay(store: EventStore, path: Path, budget: Budget) -> dict[str, Any]:
    messages = load_swe_agent(path)
    sid = store.create_session(title=path.stem).id
    # Condensing early (at 80%) makes every run of the corpus condense at this window.
    policy = CondensationPolicy(
        budget, threshold=0.8, token_counter=store.token_counter, max_failures=1000
    )
    stats: dict[str, Any] = {"condensations": 0, "prunes": 0, "over": 0, "checks": 0}
    for msg in messages:
        if msg.role == "assistant":
            out = policy.maybe_condense(store, sid)
            assert out.error is None, out.error
            stats["condensations"] += sum(1 for s in out.steps if s.kind == "condensation")
            stats["prunes"] += sum(1 for s in out.steps if s.kind == "prune")
            view = store.view(sid)
            # The pipeline planned on a predicted view and wrote once: the prediction is
            # exactly what the store now builds.
            assert out.view is not None
            assert (out.view.seq, out.view.tokens) == (view.seq, view.tokens)
            assert out.view.fingerprint() == view.fingerprint()
            stats["checks"] += 1
            rendered = view.to_messages()
            assert_pairs_intact(rendered)
            if view.tokens > budget.available:
                assert irreducible(view, budget), (path.name, view.tokens, budget.available)
                stats["over"] += 1
        store.append(sid, [msg])
    # Nothing was lost: every original message reads back exactly.
    stored = [e for e in store.read(sid) if e.kind == "message"]
    assert [e.event.model_dump(exclude={"id", "created_at"}) for e in stored] == [
        m.model_dump(exclude={"id", "created_at"}) for m in messages
    ]
    view = store.view(sid)
    for ref in view.refs():
        part = store.original(sid, ref)
        original = messages[[e.seq for e in stored].index(ref.seq)].parts[ref.index]
        # A compacted tool result, or a pinned text the head truncator cut (when the head
        # left no room for the newest messages): either reads back whole.
        pinned = {i.seq for i in view.items if i.pinned}
        assert part == original
        assert isinstance(part, ToolResultPart) or ref.seq in pinned
    if view.condensation is not None:
        forgotten = [e.seq for e in store.forgotten(sid, view.condensation.seq)]
        assert forgotten and forgotten[0] == max(i.seq for i in view.items if i.pinned) + 1
    stats["verify"] = store.verify(sid).ok
    return stats


def test_replay_every_swe_agent_trajectory(store: EventStore, backend: str) -> None:
    budget = Budget(max_input_tokens=WINDOW, reserved_output=1024, buffer=410)
    totals = {"condensations": 0, "prunes": 0, "over": 0, "checks": 0}
    for path in TRAJECTORIES:
        stats = replay(store, path, budget)
        assert stats["verify"]
        for k in totals:
            totals[k] += stats[k]
    # The corpus is long enough for the small window: condensation really happened.
    assert totals["condensations"] >= len(TRAJECTORIES) // 2
    # Over-budget views only where one message alone is too large for the window.
    assert totals["over"] <= totals["checks"] // 10


def test_replay_with_a_4k_window_on_function_calling_runs(store: EventStore) -> None:
    budget = Budget(max_input_tokens=4096, reserved_output=512, buffer=205)
    paths = [p for p in TRAJECTORIES if "marshmallow-1867__function_calling" in str(p)]
    assert paths
    for path in paths:
        stats = replay(store, path, budget)
        assert stats["verify"] and stats["condensations"] >= 1
