"""The tool-output pruner on agent runs: protection by tokens and assistant steps, absolute
thresholds, protected tools, failed results, capped estimates, and a pass on demand."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from condensers import CondensationPolicy, PlanContext, ToolOutputPruner
from eventstore import AsyncEventStore, EventStore, Message, Prune, ToolCallPart
from eventstore.budget import Budget

LARGE = Budget(max_input_tokens=200_000, reserved_output=8_000)


def call(cid: str, name: str = "bash", **args: Any) -> ToolCallPart:
    return ToolCallPart(id=cid, name=name, arguments=json.dumps(args))


def agent_run(
    store: EventStore,
    outputs: list[int],
    *,
    names: list[str] | None = None,
    states: list[str] | None = None,
) -> str:
    """One task, then one tool step per entry of ``outputs`` (its output in tokens)."""
    sid = store.create_session().id
    evs = [Message.system("You are a coding agent."), Message.user("Fix the failing test.")]
    for i, size in enumerate(outputs):
        name = names[i] if names else "bash"
        evs.append(Message.assistant(f"step {i}", tool_calls=[call(f"c{i}", name=name)]))
        state = states[i] if states else "completed"
        evs.append(
            Message.tool(
                f"c{i}", "y" * (4 * size), name=name, is_error=state == "error", state=state
            )
        )
    store.append(sid, evs)
    return sid


def pruned_calls(store: EventStore, sid: str, prune: Prune) -> list[str]:
    view = store.view(sid)
    by_seq = {i.seq: i for i in view.items}
    out = []
    for ref in prune.targets:
        part = by_seq[ref.seq].message.parts[ref.index]
        out.append(part.tool_call_id)  # type: ignore[union-attr]
    return sorted(out, key=lambda c: int(c[1:]))


def plan(store: EventStore, sid: str, pruner: ToolOutputPruner, budget: Budget) -> Prune | None:
    ctx = PlanContext(token_counter=store.token_counter)
    proposal = pruner.plan(store.view(sid), budget, ctx)
    if proposal is None:
        return None
    assert isinstance(proposal.event, Prune)
    return proposal.event


def test_pruner_fires_on_a_single_task_agent_run(store: EventStore) -> None:
    # One user message, 30 steps of 2,500 tokens: counting user turns protected all of it.
    sid = agent_run(store, [2_500] * 30)
    prune = plan(store, sid, ToolOutputPruner(), LARGE)
    assert prune is not None
    # The newest 40,000 tokens (16 outputs) are kept; the 14 older ones go.
    assert pruned_calls(store, sid, prune) == [f"c{i}" for i in range(14)]
    assert prune.tokens_freed >= 14 * 2_400


def test_protection_is_absolute_not_a_share_of_the_budget(store: EventStore) -> None:
    budget = Budget(max_input_tokens=100_000)  # 30% of it would protect only 30,000
    assert ToolOutputPruner().thresholds(budget) == (40_000, 20_000)
    sid = agent_run(store, [5_000] * 14)
    prune = plan(store, sid, ToolOutputPruner(), budget)
    assert prune is not None
    assert pruned_calls(store, sid, prune) == [f"c{i}" for i in range(6)]  # 8 x 5k kept


def test_a_small_window_clamps_the_thresholds(store: EventStore) -> None:
    small = Budget(max_input_tokens=8_000, reserved_output=1_000, buffer=400)  # 6,600
    assert ToolOutputPruner().thresholds(small) == (1_980, 330)
    sid = agent_run(store, [600] * 8)
    prune = plan(store, sid, ToolOutputPruner(), small)
    assert prune is not None
    # The two newest steps (1,200) and then 1,980 tokens: the newest four are kept.
    assert pruned_calls(store, sid, prune) == [f"c{i}" for i in range(4)]


def test_a_long_pinned_head_clamps_to_the_window_it_leaves(store: EventStore) -> None:
    # A 4k model whose system prompt takes 2,400 of its 3,379 tokens: protecting 30% of the
    # budget (1,013) would protect more tool output than the ~970 tokens left can show.
    small = Budget(4096, 512, 205)
    assert ToolOutputPruner().thresholds(small, pinned=2_400) == (293, 48)
    assert ToolOutputPruner().thresholds(small) == (1_013, 168)
    assert ToolOutputPruner().thresholds(LARGE, pinned=10_000) == (40_000, 20_000)
    sid = store.create_session().id
    head = [Message.system("Follow the rules. " * 533), Message.user("Fix the failing test.")]
    steps = []
    for i in range(4):
        steps.append(Message.assistant(f"step {i}", tool_calls=[call(f"c{i}")]))
        steps.append(Message.tool(f"c{i}", "y" * 4 * 150, name="bash"))
    store.append(sid, [*head, *steps])
    pinned = sum(i.tokens for i in store.view(sid).items if i.pinned)
    assert 2_380 < pinned < 2_420
    prune = plan(store, sid, ToolOutputPruner(), small)
    assert prune is not None
    # The two newest steps (300 tokens of output) already fill the 293 protected: the
    # older two go. Clamped to the budget instead, all 600 tokens would stay protected.
    assert pruned_calls(store, sid, prune) == ["c0", "c1"]


def test_the_newest_assistant_steps_are_protected_whatever_their_size(store: EventStore) -> None:
    sid = agent_run(store, [30_000, 30_000, 30_000])
    pruner = ToolOutputPruner(protect_tokens=1_000, minimum_tokens=1)
    prune = plan(store, sid, pruner, LARGE)
    assert prune is not None and pruned_calls(store, sid, prune) == ["c0"]
    assert plan(store, sid, ToolOutputPruner(protect_steps=3, minimum_tokens=1), LARGE) is None


def test_skill_and_tool_prefixed_results_are_never_pruned_by_default(store: EventStore) -> None:
    names = ["skill", "tool-search", "bash", "tooling", "bash", "bash"]
    sid = agent_run(store, [15_000] * 6, names=names)
    prune = plan(store, sid, ToolOutputPruner(protect_tokens=30_000, minimum_tokens=1), LARGE)
    assert prune is not None
    assert pruned_calls(store, sid, prune) == ["c2", "c3"]  # not skill, not tool-*
    custom = ToolOutputPruner(
        protect_tokens=15_000, minimum_tokens=1, protected_tools=[], protected_prefixes=["ba"]
    )
    prune = plan(store, sid, custom, LARGE)
    assert prune is not None
    # bash is protected now; "tooling" fills the 15k; skill and tool-search go.
    assert pruned_calls(store, sid, prune) == ["c0", "c1"]


def test_failed_results_are_pruned_too(store: EventStore) -> None:
    sid = agent_run(store, [25_000] * 4, states=["error", "completed", "completed", "completed"])
    prune = plan(store, sid, ToolOutputPruner(), LARGE)
    assert prune is not None
    assert pruned_calls(store, sid, prune) == ["c0", "c1"]


def test_each_part_counts_at_most_the_cap(store: EventStore) -> None:
    # Newest output 60k tokens, then four of 10k. Protecting 80k: uncapped, the newest
    # three would fill it; capped at 50k, four are kept.
    sid = agent_run(store, [10_000, 10_000, 10_000, 10_000, 60_000])
    pruner = ToolOutputPruner(protect_tokens=80_000, minimum_tokens=1, protect_steps=0)
    prune = plan(store, sid, pruner, LARGE)
    assert prune is not None and pruned_calls(store, sid, prune) == ["c0"]
    uncapped = ToolOutputPruner(
        protect_tokens=80_000, minimum_tokens=1, protect_steps=0, max_part_tokens=10**9
    )
    prune = plan(store, sid, uncapped, LARGE)
    assert prune is not None and pruned_calls(store, sid, prune) == ["c0", "c1"]


def test_maybe_prune_runs_the_pruner_below_every_threshold(store: EventStore) -> None:
    sid = agent_run(store, [2_500] * 30)  # 75k tokens: far below 80% of 192k
    policy = CondensationPolicy(LARGE)
    assert policy.maybe_condense(store, sid).steps == []
    out = policy.maybe_prune(store, sid)
    assert [s.condenser for s in out.steps] == ["prune_tool_outputs"]
    assert out.tokens_after < out.tokens_before
    assert store.view(sid).tokens == out.tokens_after
    assert policy.maybe_prune(store, sid).steps == []  # nothing new to prune


def test_amaybe_prune_is_the_async_twin(store: EventStore) -> None:
    sid = agent_run(store, [2_500] * 30)
    policy = CondensationPolicy(LARGE)

    async def go() -> Any:
        astore = AsyncEventStore.from_sync(store)
        return await policy.amaybe_prune(astore, sid)

    out = asyncio.run(go())
    assert [s.kind for s in out.steps] == ["prune"]
    kinds = [e.kind for e in store.read(sid)]
    assert kinds.count("prune") == 1


def test_the_pruner_fires_on_a_long_run_replayed_turn_by_turn_at_small_budgets(
    store: EventStore,
) -> None:
    """Over 40k tokens of tool output of mixed sizes (most small, a few file-sized), checked
    before every model call: the reversible pruner acts at 4k and 8k alike, although unseen
    outputs are capped on intake and condensation runs too."""
    import math
    import random

    for budget in (Budget(4096, 512, 205), Budget(8192, 1024, 410)):
        rng = random.Random(7)
        sid = store.create_session().id
        head = [Message.system("You are a coding agent. " * 100), Message.user("Fix app.py.")]
        store.append(sid, head)
        policy = CondensationPolicy(budget, token_counter=store.token_counter)
        output = 0
        i = 0
        while output < 45_000:
            policy.maybe_condense(store, sid)
            tokens = max(int(math.exp(rng.gauss(math.log(150), 1.2))), 3)
            lines = "\n".join(f"{j:4d} x = {rng.random():.12f}" for j in range(tokens // 6))
            output += math.ceil(len(lines) / 4)
            store.append(
                sid,
                [
                    Message.assistant(f"step {i}", tool_calls=[call(f"c{i}", cmd=f"cat f{i}.py")]),
                    Message.tool(f"c{i}", lines, name="bash"),
                ],
            )
            i += 1
        prunes = [e.event for e in store.read(sid, kinds=["prune"]) if isinstance(e.event, Prune)]
        assert any(p.strategy == ToolOutputPruner.name for p in prunes), budget
        assert store.view(sid).tokens <= budget.available or policy.maybe_condense(store, sid).fits


def test_complete_prunes_at_session_start_and_condenses_before_sending(
    store: EventStore,
) -> None:
    """The first model call of a session runs the pruners first (a resumed or imported
    session starts lean), and a view over the threshold is condensed before it is sent,
    not after the provider rejects it."""
    from condensers import complete
    from eventstore import LLMCall

    sid = agent_run(store, [2_500] * 30)  # under every threshold of LARGE
    policy = CondensationPolicy(LARGE)
    complete(store, sid, model="gpt-4o-mini", policy=policy, mock_response="ok")
    kinds = [(e.kind, getattr(e.event, "strategy", None)) for e in store.read(sid)]
    prune_at = kinds.index(("prune", "prune_tool_outputs"))
    call_at = next(i for i, (k, _) in enumerate(kinds) if k == "llm_call")
    assert prune_at < call_at
    # Later calls do not prune again on their own (only the policy's triggers run).
    store.append(sid, [Message.user("next")])
    complete(store, sid, model="gpt-4o-mini", policy=policy, mock_response="ok")
    kinds = [(e.kind, getattr(e.event, "strategy", None)) for e in store.read(sid)]
    assert sum(1 for k in kinds if k == ("prune", "prune_tool_outputs")) == 1
    assert sum(1 for k, _ in kinds if k == "llm_call") == 2

    small = Budget(max_input_tokens=8_000, reserved_output=1_000, buffer=400)
    sid2 = agent_run(store, [2_500] * 10)
    assert store.view(sid2).tokens > small.available
    complete(store, sid2, model="gpt-4o-mini", policy=CondensationPolicy(small), mock_response="ok")
    calls = [e for e in store.read(sid2, kinds=["llm_call"]) if isinstance(e.event, LLMCall)]
    sent = store.view(sid2, as_of=calls[0].event.view_seq)
    assert sent.tokens <= small.available  # what was sent fit: it was condensed first


def _resumed_run(store: EventStore) -> str:
    """A session a previous process ran: a model call recorded, then 75k tokens of tool
    output (under every threshold of LARGE, over the pruner's 40k protection + 20k)."""
    from eventstore import LLMCall

    sid = store.create_session().id
    store.append(sid, [Message.system("You are a coding agent."), Message.user("Fix it.")])
    view = store.view(sid)
    store.append(sid, [LLMCall(model="m", view_seq=view.seq, fingerprint=view.fingerprint())])
    for i in range(30):
        store.append(
            sid,
            [
                Message.assistant(f"step {i}", tool_calls=[call(f"c{i}")]),
                Message.tool(f"c{i}", "x" * 10_000, name="bash"),
            ],
        )
    return sid


@pytest.mark.parametrize("prune_on_start", [True, False])
def test_complete_prunes_a_resumed_session_when_first_opened(
    store: EventStore, prune_on_start: bool
) -> None:
    """A session that already had model calls, opened by a new process (a fresh policy):
    the first complete() prunes it before the model call, and prune_on_start=False
    leaves it as it is."""
    from condensers import complete
    from condensers.policy import session_start

    sid = _resumed_run(store)
    assert not session_start(store.view(sid))  # not a new session: a resumed one
    before = store.view(sid).tokens
    assert before < LARGE.available
    policy = CondensationPolicy(LARGE)
    complete(
        store,
        sid,
        model="gpt-4o-mini",
        policy=policy,
        mock_response="ok",
        prune_on_start=prune_on_start,
    )
    kinds = [(e.kind, getattr(e.event, "strategy", None)) for e in store.read(sid)]
    calls = [i for i, (k, _) in enumerate(kinds) if k == "llm_call"]
    prunes = [i for i, k in enumerate(kinds) if k == ("prune", "prune_tool_outputs")]
    if not prune_on_start:
        assert prunes == []
        return
    assert len(prunes) == 1 and calls[0] < prunes[0] < calls[1]  # before the new call
    sent = list(store.read(sid, kinds=["llm_call"]))[-1].event
    assert store.view(sid, as_of=sent.view_seq).tokens < before - 20_000  # type: ignore[union-attr]
    # Once per session and policy: the next turn does not prune on its own.
    store.append(sid, [Message.user("next")])
    complete(store, sid, model="gpt-4o-mini", policy=policy, mock_response="ok")
    assert sum(1 for e in store.read(sid) if e.kind == "prune") == 1


def test_acomplete_prunes_a_resumed_session_when_first_opened(store: EventStore) -> None:
    from condensers import acomplete

    sid = _resumed_run(store)
    policy = CondensationPolicy(LARGE)

    async def go() -> None:
        astore = AsyncEventStore.from_sync(store)
        await acomplete(astore, sid, model="gpt-4o-mini", policy=policy, mock_response="ok")

    asyncio.run(go())
    kinds = [e.kind for e in store.read(sid)]
    assert kinds.count("prune") == 1 and kinds.index("prune") < len(kinds) - 2


def test_between_condensations_the_pruner_waits_for_a_batch(store: EventStore) -> None:
    """Every check runs the pruner in batch mode: old outputs under the pruner's own
    minimum wait (a prune rewrites the prompt prefix by itself), a batch of them is
    compacted although the view still fits, and no condensation runs."""
    budget = Budget(32768, 4096, 1638)  # 27,034 available
    pruner = ToolOutputPruner()
    protect, minimum = pruner.thresholds(budget)
    assert (protect, minimum) == (8_110, 1_351)
    assert pruner.batch_minimum(budget) == 6_758
    policy = CondensationPolicy(budget, token_counter=store.token_counter)
    sid = agent_run(store, [1_500] * 8)  # 12,000 tokens of output, 3,000 of it unprotected
    assert plan(store, sid, pruner, budget) is not None  # enough for the pruner alone
    out = policy.maybe_condense(store, sid)
    assert not out.condensed and out.skipped == "under_threshold"
    for i in range(8, 16):  # 24,000 tokens of output: a batch is unprotected
        store.append(
            sid,
            [
                Message.assistant(f"step {i}", tool_calls=[call(f"c{i}")]),
                Message.tool(f"c{i}", "y" * 6_000, name="bash"),
            ],
        )
    assert store.view(sid).tokens <= budget.available
    out = policy.maybe_condense(store, sid)
    assert [(s.kind, s.condenser) for s in out.steps] == [("prune", ToolOutputPruner.name)]
    assert out.trigger is None and out.fits
    prunes = [e.event for e in store.read(sid, kinds=["prune"])]
    assert len(prunes) == 1 and isinstance(prunes[0], Prune) and prunes[0].tokens_freed >= 6_758
    assert not list(store.read(sid, kinds=["condensation"]))
    off = CondensationPolicy(budget, batch_prune=False, token_counter=store.token_counter)
    assert not off.maybe_condense(store, agent_run(store, [1_500] * 16)).condensed


def test_a_condensation_carries_every_old_output_in_the_same_append(store: EventStore) -> None:
    """Over the budget, the run rewrites the prompt anyway: the pruner compacts the old
    output outside its protection although it is under its own minimum, in the same
    append as the condensation (one prompt rewrite, not a second one later)."""
    budget = Budget(8192, 1024, 410)  # 6,758 available
    pruner = ToolOutputPruner()
    assert pruner.thresholds(budget)[1] == 337
    sid = store.create_session().id
    evs = [Message.system("You are a coding agent."), Message.user("Fix the failing test.")]
    for i, size in enumerate([250, 450, 450, 450, 450, 450]):
        evs.append(Message.assistant("plan " * 700 + f"step {i}", tool_calls=[call(f"c{i}")]))
        evs.append(Message.tool(f"c{i}", "y" * (4 * size), name="bash"))
    store.append(sid, evs)
    assert store.view(sid).tokens > budget.available
    assert plan(store, sid, pruner, budget) is None  # 250 tokens: under the minimum alone
    out = CondensationPolicy(budget, token_counter=store.token_counter).maybe_condense(store, sid)
    assert out.trigger == "threshold" and out.fits
    kinds = [(s.kind, s.condenser) for s in out.steps]
    assert kinds[0] == ("prune", ToolOutputPruner.name) and ("condensation" in dict(kinds))
    first = out.steps[0].seq
    assert [s.seq for s in out.steps] == list(range(first, first + len(kinds)))
    prune = next(iter(store.read(sid, kinds=["prune"]))).event
    # c0-c3's results: the summary keeps about one step here, so the token protection
    # ends there and only the newest two steps stay protected.
    assert isinstance(prune, Prune) and [r.seq for r in prune.targets] == [4, 6, 8, 10]


def test_a_condensing_run_protects_no_more_than_its_target_keeps(store: EventStore) -> None:
    """A pinned head that takes the whole target at 4k: the condensation keeps the newest
    step and forgets the rest, so the pruner's token protection (30% of the room) would
    only shield outputs from the pruner for the summary to forget. The condensing run
    compacts every output older than the newest two steps; a pass between condensations
    still protects by tokens too."""
    budget = Budget(4096, 512, 205)  # 3,379 available, target 1,689
    pruner = ToolOutputPruner()
    sid = store.create_session().id
    head = [Message.system("You are a coding agent. " * 300), Message.user("Fix the test.")]
    evs = list(head)
    for i in range(5):
        evs.append(Message.assistant("plan " * 300 + f"step {i}", tool_calls=[call(f"c{i}")]))
        evs.append(Message.tool(f"c{i}", "y" * 400, name="bash"))  # 100 tokens each
    store.append(sid, evs)
    view = store.view(sid)
    pinned = sum(i.tokens for i in view.items if i.pinned)
    assert pinned >= budget.fraction(0.5) and view.tokens > budget.available
    protect, _ = pruner.thresholds(budget, pinned)
    assert protect > 3 * 100  # every old output is inside the token protection
    batch = PlanContext(token_counter=store.token_counter, batch=True)
    assert pruner.plan(view, budget, batch) is None
    out = CondensationPolicy(budget, token_counter=store.token_counter).maybe_condense(store, sid)
    assert out.trigger == "threshold" and out.fits
    assert out.steps[0].condenser == ToolOutputPruner.name
    prune = next(iter(store.read(sid, kinds=["prune"]))).event
    assert isinstance(prune, Prune)
    # c0-c2's results (seqs 4, 6, 8): all but the newest two steps, whatever their tokens
    assert [r.seq for r in prune.targets] == [4, 6, 8]
