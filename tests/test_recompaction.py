"""A truncated tool result can still be hidden whole later, and agents that reuse tool-call
ids can still be condensed.

A part's ``parts`` row is stamped once, by the first prune. When that prune truncated the
part (``keep_chars``), a later prune without ``keep_chars`` replaces the truncation with
the placeholder: its own event says so, the views read it from the tail's range, and the
pruner counts a truncated result at the size it is shown.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from condensers import (
    CondensationPolicy,
    ExtractiveCondenser,
    Pipeline,
    PlanContext,
    ToolOutputPruner,
    WindowCondenser,
    cut_points,
)
from condensers.base import pending_call_ids
from eventstore import Condensation, EventStore, Message, PartRef, Prune, ToolCallPart
from eventstore.budget import Budget
from eventstore.views import apply_event, placeholder_text

SMALL = Budget(4096, 512, 205)
MEDIUM = Budget(8192, 1024, 410)


def call(cid: str, name: str = "bash", **args: Any) -> ToolCallPart:
    return ToolCallPart(id=cid, name=name, arguments=json.dumps(args))


def _step(store: EventStore, sid: str, cid: str, output: str, text: str = "Looking.") -> int:
    """An assistant step and its result; returns the result's seq."""
    seqs = store.append(
        sid, [Message.assistant(text, tool_calls=[call(cid)]), Message.tool(cid, output)]
    )
    return seqs[-1]


def _truncated_then_hidden(store: EventStore) -> tuple[str, PartRef, int, int]:
    """A large result truncated, two more steps, then a placeholder prune of it.
    Returns the session, the part, the truncation's seq and the placeholder prune's seq."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Fix parser.py.")])
    _step(store, sid, "c0", "parser.py")  # seqs 3 and 4
    big = "".join(f"{i:5d}  line {i} of parser.py\n" for i in range(400))
    ref = PartRef(seq=_step(store, sid, "c1", big), index=0)
    (cut,) = store.append(sid, [Prune(targets=[ref], keep_chars=300, strategy="t")])
    _step(store, sid, "c2", "ok")
    _step(store, sid, "c3", "done")
    (hide,) = store.append(sid, [Prune(targets=[ref], strategy="p")])
    return sid, ref, cut, hide


def _result_text(view_messages: list[dict[str, Any]], call_id: str) -> str:
    (msg,) = [m for m in view_messages if m.get("tool_call_id") == call_id]
    return str(msg["content"])


def test_a_placeholder_prune_replaces_a_truncation_from_its_seq_on(store: EventStore) -> None:
    sid, ref, cut, hide = _truncated_then_hidden(store)
    whole = store.original(sid, ref).output  # type: ignore[union-attr]
    placeholder = placeholder_text(store.view(sid).options, ref)

    assert _result_text(store.view(sid, as_of=cut - 1).to_messages(), "c1") == whole
    truncated = _result_text(store.view(sid, as_of=cut).to_messages(), "c1")
    assert "characters omitted" in truncated and len(truncated) < len(whole)
    assert _result_text(store.view(sid, as_of=hide - 1).to_messages(), "c1") == truncated
    view = store.view(sid)
    assert _result_text(view.to_messages(), "c1") == placeholder
    item = next(i for i in view.items if i.seq == ref.seq)
    assert item.compacted_by == {0: hide} and item.kept == {}
    assert hide in view.prunes
    assert store.view(sid, as_of=hide - 1).tokens > view.tokens
    assert store.original(sid, ref).output == whole  # nothing is lost  # type: ignore[union-attr]

    # The in-memory prediction agrees with the stored view.
    before = store.view(sid, as_of=hide - 1)
    evt = next(iter(store.read(sid, hide, hide))).event
    assert isinstance(evt, Prune)
    predicted = apply_event(before, evt, store.token_counter)
    assert predicted.tokens == view.tokens
    assert predicted.to_messages() == view.to_messages()

    # Model calls recorded on the truncated view and on the placeholder view both verify.
    store.record_llm_call(sid, before, model="m")
    store.record_llm_call(sid, store.view(sid), model="m")
    report = store.verify(sid)
    assert report.ok and report.llm_calls == 2, report.problems
    # A condensation that keeps the part in its tail keeps the placeholder (verify
    # rebuilds the view it sent after starting over at the condensation).
    store.append(sid, [Condensation(forgotten_from=3, forgotten_to=4, summary="Listed files.")])
    condensed = store.view(sid)
    assert _result_text(condensed.to_messages(), "c1") == placeholder
    store.record_llm_call(sid, condensed, model="m")
    report = store.verify(sid)
    assert report.ok and report.llm_calls == 3, report.problems

    # A fork inherits what its parent showed at the fork point.
    assert store.view(store.fork(sid, hide).id).to_messages() == view.to_messages()
    early = store.fork(sid, hide - 1).id
    assert _result_text(store.view(early).to_messages(), "c1") == truncated
    # ... and may hide an inherited truncation itself.
    store.append(early, [Prune(targets=[ref], strategy="p")])
    assert _result_text(store.view(early).to_messages(), "c1") == placeholder
    assert store.verify(early).ok


def test_a_truncation_never_replaces_a_placeholder(store: EventStore) -> None:
    sid, ref, _, hide = _truncated_then_hidden(store)
    shown = store.view(sid).to_messages()
    store.append(sid, [Prune(targets=[ref], keep_chars=200, strategy="t")])
    assert store.view(sid).to_messages() == shown
    assert store.verify(sid).ok


def _large_outputs_run(
    store: EventStore, budget: Budget, outputs: int, lines: int
) -> tuple[str, int]:
    """An agent run checked before every model call whose results are all file-sized, so
    every one is capped on intake; returns the session and its tool-output tokens."""
    rng = random.Random(11)
    sid = store.create_session().id
    store.append(sid, [Message.system("You are a coding agent."), Message.user("Fix app.py.")])
    policy = CondensationPolicy(budget, token_counter=store.token_counter)
    total = 0
    for i in range(outputs):
        policy.maybe_condense(store, sid)
        text = "\n".join(f"{j:4d}    value_{j} = {rng.random():.10f}" for j in range(lines))
        total += math.ceil(len(text) / 4)
        _step(store, sid, f"c{i}", text, text=f"step {i}")
    policy.maybe_condense(store, sid)
    return sid, total


def test_the_pruner_hides_results_that_were_capped_on_intake(store: EventStore) -> None:
    # About 1,000 tokens a result at 4k and 1,600 at 8k: over 8% of the room either way.
    for budget, lines in ((SMALL, 120), (MEDIUM, 200)):
        sid, total = _large_outputs_run(store, budget, 50, lines)
        assert total > 40_000
        prunes = [e for e in store.read(sid, kinds=["prune"]) if isinstance(e.event, Prune)]
        capped = {
            (r.seq, r.index)
            for e in prunes
            if e.event.keep_chars is not None
            for r in e.event.targets
        }
        assert len(capped) >= 45  # every large result was cut before it was sent
        pruned = [e.event for e in prunes if e.event.strategy == ToolOutputPruner.name]
        assert pruned, budget
        assert any((r.seq, r.index) in capped for p in pruned for r in p.targets)
        view = store.view(sid)
        assert view.tokens <= budget.available
        assert store.verify(sid).ok


def test_the_pruner_counts_a_truncated_result_at_its_shown_size(store: EventStore) -> None:
    sid, ref, cut, _ = _truncated_then_hidden(store)
    view = store.view(sid, as_of=cut)
    pruner = ToolOutputPruner(protect_tokens=0, minimum_tokens=1, protect_steps=0)
    ctx = PlanContext(token_counter=store.token_counter)
    proposal = pruner.plan(view, Budget(200_000, 1_000), ctx)
    assert proposal is not None and isinstance(proposal.event, Prune)
    item = next(i for i in view.items if i.seq == ref.seq)
    assert ref in proposal.event.targets
    shown = item.tokens - 4  # the message overhead
    placeholder = store.token_counter.count(placeholder_text(view.options, ref))
    assert proposal.event.tokens_freed == shown - placeholder  # not the stored size
    assert item.part_tokens[0] - placeholder > proposal.event.tokens_freed


# --------------------------------------------------------------------------- reused call ids


def _reused_ids(store: EventStore, steps: int, size: int) -> str:
    """A run whose agent numbers its calls per turn, so ids repeat across the history."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Fix parser.py.")])
    for i in range(steps):
        _step(store, sid, f"call_{i % 3}", f"output {i} " + "x" * size)
    return sid


def test_cuts_fall_between_groups_when_call_ids_repeat(store: EventStore) -> None:
    sid = _reused_ids(store, 6, 10)
    tail = [i for i in store.view(sid).items if not i.pinned]
    # Each assistant message and its result is a group: a cut before every group.
    assert cut_points(tail) == list(range(0, len(tail) + 1, 2))


def test_a_trailing_call_reusing_an_answered_id_is_pending(store: EventStore) -> None:
    sid = _reused_ids(store, 3, 10)
    store.append(sid, [Message.assistant("Again.", tool_calls=[call("call_0")])])
    items = [i for i in store.view(sid).items if not i.pinned]
    assert pending_call_ids(items) == {"call_0"}
    assert cut_points(items)[-1] == len(items) - 1  # the waiting call stays visible
    store.append(sid, [Message.tool("call_0", "answered")])
    items = [i for i in store.view(sid).items if not i.pinned]
    assert pending_call_ids(items) == set()


def test_a_run_with_reused_call_ids_is_condensed_to_fit(store: EventStore) -> None:
    assert store.view(_reused_ids(store, 12, 1_200)).tokens > SMALL.available
    for pipeline in (Pipeline([ExtractiveCondenser()]), Pipeline([WindowCondenser()])):
        sid = _reused_ids(store, 12, 1_200)
        policy = CondensationPolicy(SMALL, pipeline, token_counter=store.token_counter)
        out = policy.maybe_condense(store, sid)
        assert out.condensed and out.fits, pipeline
        _check_condensed(store, sid)


def _check_condensed(store: EventStore, sid: str) -> None:
    view = store.view(sid)
    assert view.tokens <= SMALL.available and view.condensation is not None
    messages = view.to_messages()
    for k, m in enumerate(messages):  # every call is followed by its own result
        for c in m.get("tool_calls") or []:
            assert messages[k + 1]["role"] == "tool"
            assert messages[k + 1]["tool_call_id"] == c["id"]
    assert store.verify(sid).ok
