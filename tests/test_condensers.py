"""Condensers on both databases: pruning, masking, windows, summaries, triggers, guards.

Model calls go through litellm's ``mock_response`` (including mocked rate limits,
timeouts and context overflows); the real-model tier lives in test_condensers_llm.py.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from conftest import verbatim_head_pipeline

from condensers import (
    CIRCUIT_OPEN,
    HEADINGS,
    REQUEST_DECLINED,
    TEMPLATE_VERSION,
    CondensationPolicy,
    ExtractiveCondenser,
    ExtractiveSummarizer,
    LLMSummarizer,
    LLMSummaryCondenser,
    ObservationMasker,
    Pipeline,
    PlanContext,
    SummaryError,
    ToolOutputPruner,
    WindowCondenser,
    apply,
    complete,
    cut_points,
    default_pipeline,
    is_context_window_error,
    missing_headings,
)
from eventstore import (
    AsyncEventStore,
    Condensation,
    CondensationRequest,
    ConflictError,
    Custom,
    EventStore,
    EventStoreError,
    Message,
    PartRef,
    Prune,
    StoredEvent,
    ToolCallPart,
    ToolResultPart,
)
from eventstore.budget import Budget
from eventstore.llm import import_litellm

litellm = import_litellm()

VALID = "\n\n".join(f"## {h}\n- item about {h.lower()}" for h in HEADINGS)
INVALID = "Here is a summary without any headings."


# --------------------------------------------------------------------------- helpers


def call(cid: str, name: str = "bash", **args: Any) -> ToolCallPart:
    return ToolCallPart(id=cid, name=name, arguments=json.dumps(args))


def agent_session(store: EventStore, steps: int = 30, out_lines: int = 200) -> str:
    """A system prompt, one user request, then ``steps`` tool call/result pairs."""
    sid = store.create_session().id
    evs: list[Message] = [
        Message.system("You are a coding agent."),
        Message.user("Fix the crash in src/app.py; do not touch tests/."),
    ]
    for i in range(steps):
        evs.append(
            Message.assistant(f"step {i}", tool_calls=[call(f"c{i}", cmd=f"cat src/m{i}.py")])
        )
        err = "\nValueError: bad input" if i % 10 == 3 else ""
        evs.append(Message.tool(f"c{i}", "output line\n" * out_lines + err, name="bash"))
    store.append(sid, evs)
    return sid


def chat_session(store: EventStore, turns: int = 40, words: int = 100) -> str:
    sid = store.create_session().id
    evs = [Message.system("You are helpful.")]
    for i in range(turns):
        evs.append(Message.user(f"question {i} about lib/q{i}.py " + "word " * words))
        evs.append(Message.assistant(f"answer {i} " + "ok " * words))
    store.append(sid, evs)
    return sid


def all_events(store: EventStore, sid: str) -> list[StoredEvent]:
    return list(store.read(sid))


def assert_pairs_intact(messages: list[dict[str, Any]]) -> None:
    """No tool result without its call, no call without a result, results after calls."""
    calls: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        for c in m.get("tool_calls") or []:
            calls.add(c["id"])
        if m["role"] == "tool":
            ids = m.get("tool_call_ids") or [m.get("tool_call_id")]
            for i in ids:
                assert i in calls, f"tool result {i} without its call"
                answered.add(i)
    assert calls == answered, f"calls without results: {calls - answered}"


def small_budget(n: int = 8000) -> Budget:
    return Budget(max_input_tokens=n, reserved_output=1000, buffer=400)


# --------------------------------------------------------------------------- template


def test_missing_headings_detects_each_heading() -> None:
    assert missing_headings(VALID) == []
    assert missing_headings(INVALID) == list(HEADINGS)
    bold = "\n".join(f"**{h}:**\n- x" for h in HEADINGS)
    assert missing_headings(bold) == []
    partial = VALID.replace("## Next steps", "Next steps are")
    assert missing_headings(partial) == ["Next steps"]


def test_extractive_summary_is_structured_deterministic_and_anchored(store: EventStore) -> None:
    sid = agent_session(store, steps=12)
    events = all_events(store, sid)
    s = ExtractiveSummarizer()
    first = s.summarize(None, events[:10])
    assert first.text == s.summarize(None, events[:10]).text
    assert missing_headings(first.text) == []
    assert "Fix the crash in src/app.py; do not touch tests/." in first.text
    assert "bash x4" in first.text  # four calls in events 3..10
    assert "src/m0.py" in first.text and "src/m3.py" in first.text
    assert "ValueError: bad input" in first.text
    assert "step 3" in first.text  # the last assistant message
    assert first.usage is None and first.model is None

    second = s.summarize(first.text, events[10:])
    assert missing_headings(second.text) == []
    # Anchored: facts from the first summary survive; counts accumulate.
    assert "Fix the crash in src/app.py" in second.text
    assert "src/m0.py" in second.text and "src/m10.py" in second.text
    assert "bash x12" in second.text  # 4 + 8
    assert "ValueError: bad input" in second.text


def test_extractive_summary_respects_a_token_limit(store: EventStore) -> None:
    sid = chat_session(store, turns=30, words=300)
    events = all_events(store, sid)
    s = ExtractiveSummarizer()
    free = s.summarize(None, events)
    limited = s.summarize(None, events, limit_tokens=600)
    assert len(limited.text) < len(free.text)
    assert store.token_counter.count(limited.text) <= 600
    assert missing_headings(limited.text) == []


# --------------------------------------------------------------------------- cut points


def test_cut_points_keep_parallel_calls_and_pending_calls(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(
        sid,
        [
            Message.system("s"),
            Message.user("go"),
            Message.assistant("two at once", tool_calls=[call("a"), call("b")]),
            Message.tool("a", "A"),
            Message.tool("b", "B"),
            Message.assistant("next", tool_calls=[call("c")]),
            Message.tool("c", "C"),
            Message.assistant("waiting", tool_calls=[call("d")]),  # pending: no result yet
        ],
    )
    view = store.view(sid)
    tail = [i for i in view.items if not i.pinned]
    # tail indexes: 0 asst(a,b) 1 tool a 2 tool b 3 asst(c) 4 tool c 5 asst(d, pending)
    assert cut_points(tail) == [0, 3, 5]


def test_interrupted_call_followed_by_conversation_can_be_condensed(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(
        sid,
        [
            Message.system("s"),
            Message.user("go"),
            Message.assistant("", tool_calls=[call("lost")]),
            Message.user("the run crashed, carry on"),
            Message.assistant("ok"),
        ],
    )
    tail = [i for i in store.view(sid).items if not i.pinned]
    assert cut_points(tail) == [0, 1, 2, 3]


# --------------------------------------------------------------------------- pruning


def test_tool_output_pruner_defaults_and_idempotence(store: EventStore) -> None:
    sid = store.create_session().id
    evs: list[Message] = [Message.system("s")]
    for turn in range(6):
        evs.append(Message.user(f"request {turn}"))
        for k in range(3):
            cid = f"t{turn}-{k}"
            evs.append(Message.assistant("", tool_calls=[call(cid, name="read" if k else "skill")]))
            evs.append(Message.tool(cid, "x" * 40_000, name="read" if k else "skill"))
    store.append(sid, evs)
    budget = Budget(max_input_tokens=200_000, reserved_output=8_000)
    pruner = ToolOutputPruner()
    view = store.view(sid)
    proposal = pruner.plan(view, budget, PlanContext(token_counter=store.token_counter))
    assert proposal is not None
    prune = proposal.event
    assert isinstance(prune, Prune) and prune.strategy == "prune_tool_outputs"
    # Each output is 10k tokens. The newest 40k tokens of output are kept (the four "read"
    # results of turns 4 and 5, which include the two newest steps); turns 0-3 lose theirs.
    targets = {(r.seq, r.index) for r in prune.targets}
    by_seq = {i.seq: i for i in view.items}
    names = {by_seq[s].message.parts[0].name for s, _ in targets}
    assert names == {"read"}  # "skill" is protected by default
    assert len(targets) == 8
    assert prune.tokens_freed >= 79_000
    newest_pruned = max(s for s, _ in targets)
    assert newest_pruned < [i.seq for i in view.items if i.message.text == "request 4"][0]

    seq = apply(store, view, proposal)
    after = store.view(sid)
    assert after.tokens == proposal.tokens_after
    assert pruner.plan(after, budget, PlanContext(token_counter=store.token_counter)) is None
    ref = prune.targets[0]
    original = store.original(sid, ref)
    assert isinstance(original, ToolResultPart) and original.output == "x" * 40_000
    assert seq in after.prunes


def test_tool_output_pruner_needs_the_minimum(store: EventStore) -> None:
    sid = agent_session(store, steps=6, out_lines=10)
    view = store.view(sid)
    budget = Budget(max_input_tokens=200_000, reserved_output=8_000)
    ctx = PlanContext(token_counter=store.token_counter)
    assert ToolOutputPruner(protect_steps=0).plan(view, budget, ctx) is None


def test_observation_masker_masks_outside_the_window(store: EventStore) -> None:
    sid = agent_session(store, steps=15, out_lines=100)
    view = store.view(sid)
    masker = ObservationMasker(window_events=5, minimum_tokens=1)
    proposal = masker.plan(view, small_budget(), PlanContext(token_counter=store.token_counter))
    assert proposal is not None
    masked = sorted(r.seq for r in proposal.event.targets)  # type: ignore[union-attr]
    result_seqs = [i.seq for i in view.items if i.message.role == "tool"]
    assert masked == result_seqs[:-5]
    apply(store, view, proposal)
    after = store.view(sid)
    assert after.tokens < view.tokens
    rendered = after.to_messages()
    assert_pairs_intact(rendered)
    assert sum(1 for m in rendered if m["role"] == "tool" and "output line" in m["content"]) == 5


# --------------------------------------------------------------------------- window


def test_window_keeps_pinned_head_and_carries_the_summary(store: EventStore) -> None:
    sid = chat_session(store, turns=40)
    budget = small_budget()
    ctx = PlanContext(token_counter=store.token_counter)
    view = store.view(sid)
    first = ExtractiveCondenser().plan(view, budget, ctx)
    assert first is not None
    apply(store, view, first)
    store.append(sid, [Message.user("more " * 800), Message.assistant("fine " * 800)])
    view = store.view(sid)
    proposal = WindowCondenser().plan(view, budget, ctx)
    assert proposal is not None
    evt = proposal.event
    assert isinstance(evt, Condensation)
    prev = view.condensation
    assert prev is not None and isinstance(prev.event, Condensation)
    assert evt.supersedes == prev.seq
    assert evt.forgotten_from == prev.event.forgotten_from == 3  # right after the pins
    assert evt.pinned == [1, 2]
    assert evt.summary is not None and evt.summary.startswith(prev.event.summary or "")
    assert f"{evt.forgotten_events} earlier events" in evt.summary
    assert evt.condenser == "window" and evt.summary_model is None
    apply(store, view, proposal)
    after = store.view(sid)
    assert after.tokens == proposal.tokens_after <= budget.fraction(0.5)
    assert after.items[0].seq == 1 and after.items[0].pinned


def test_condensation_never_forgets_nothing(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.system("s"), Message.user("hi"), Message.assistant("x " * 5000)])
    view = store.view(sid)
    ctx = PlanContext(token_counter=store.token_counter, force=True, target_tokens=10)
    for condenser in (WindowCondenser(), ExtractiveCondenser()):
        assert condenser.plan(view, small_budget(), ctx) is None


# --------------------------------------------------------------------------- LLM summaries


def llm_condenser(response: Any = VALID, **kw: Any) -> LLMSummaryCondenser:
    kwargs = response if callable(response) else {"mock_response": response}
    return LLMSummaryCondenser("gpt-4o-mini", call_kwargs=kwargs, **kw)


def test_llm_summary_records_provenance(store: EventStore) -> None:
    sid = chat_session(store, turns=40)
    view = store.view(sid)
    ctx = PlanContext(trigger="threshold", token_counter=store.token_counter)
    proposal = llm_condenser().plan(view, small_budget(), ctx)
    assert proposal is not None
    seq = apply(store, view, proposal)
    evt = next(iter(store.read(sid, seq, seq))).event
    assert isinstance(evt, Condensation)
    assert evt.condenser == "llm_summary" and evt.summary == VALID
    assert evt.summary_model == "gpt-4o-mini"
    assert evt.template_version == TEMPLATE_VERSION
    assert evt.usage is not None and (evt.usage.prompt_tokens or 0) > 0
    assert evt.cost is not None and evt.cost > 0
    assert evt.trigger == "threshold" and evt.supersedes is None
    assert evt.tokens_before == view.tokens and evt.tokens_after < evt.tokens_before
    assert evt.settings["summarizer"]["model"] == "gpt-4o-mini"
    assert evt.forgotten_from == 3 and evt.pinned == [1, 2]
    assert store.view(sid).tokens == evt.tokens_after


def test_llm_summary_cost_is_none_when_unpriced(store: EventStore) -> None:
    sid = chat_session(store, turns=40)
    view = store.view(sid)
    cond = LLMSummaryCondenser(
        "openai/no-such-model-here", window=16_000, call_kwargs={"mock_response": VALID}
    )
    proposal = cond.plan(view, small_budget(), PlanContext(token_counter=store.token_counter))
    assert proposal is not None
    evt = proposal.event
    assert isinstance(evt, Condensation)
    assert evt.condenser == "llm_summary" and evt.cost is None


def test_headings_retry_once_then_accept(store: EventStore) -> None:
    sid = chat_session(store, turns=40)
    seen: list[int] = []

    def replies(n: int) -> dict[str, Any]:
        seen.append(n)
        return {"mock_response": INVALID if n == 0 else VALID}

    proposal = llm_condenser(replies).plan(
        store.view(sid), small_budget(), PlanContext(token_counter=store.token_counter)
    )
    assert proposal is not None and isinstance(proposal.event, Condensation)
    assert proposal.event.condenser == "llm_summary"
    assert seen == [0, 1]
    assert any("retry" in n for n in proposal.notes)


@pytest.mark.parametrize(
    "failure",
    [
        "invalid-twice",
        "litellm.RateLimitError",
        "litellm.ContextWindowExceededError",
        "litellm.InternalServerError",
        "timeout",
    ],
)
def test_llm_failures_fall_back_to_extractive_and_keep_the_log(
    store: EventStore, failure: str
) -> None:
    sid = chat_session(store, turns=40)
    before = [(e.seq, e.hash) for e in all_events(store, sid)]
    if failure == "invalid-twice":
        kwargs: dict[str, Any] = {"mock_response": INVALID}
    elif failure == "timeout":
        kwargs = {"mock_timeout": True, "timeout": 0.01, "mock_response": VALID}
    else:
        kwargs = {"mock_response": failure}
    cond = LLMSummaryCondenser("gpt-4o-mini", call_kwargs=kwargs, timeout=0.01)
    view = store.view(sid)
    proposal = cond.plan(view, small_budget(), PlanContext(token_counter=store.token_counter))
    assert proposal is not None
    evt = proposal.event
    assert isinstance(evt, Condensation)
    assert evt.condenser == "extractive_summary"
    assert evt.settings["fallback_from"] == "llm_summary"
    assert evt.settings["error"]
    assert evt.summary_model is None and missing_headings(evt.summary or "") == []
    if failure == "invalid-twice":
        # The two model calls that failed validation are still accounted for.
        assert evt.settings["failed_calls"] == 2
        assert evt.usage is not None and (evt.usage.prompt_tokens or 0) > 0
        assert evt.cost is not None and evt.cost > 0
    else:
        assert evt.usage is None and evt.cost == 0.0
    # Planning wrote nothing; applying adds exactly one event and changes no other.
    assert [(e.seq, e.hash) for e in all_events(store, sid)] == before
    apply(store, view, proposal)
    assert [(e.seq, e.hash) for e in all_events(store, sid)][:-1] == before


def test_no_fallback_means_no_condensation(store: EventStore) -> None:
    sid = chat_session(store, turns=40)
    cond = llm_condenser("litellm.RateLimitError", fallback=None)
    view = store.view(sid)
    assert cond.plan(view, small_budget(), PlanContext(token_counter=store.token_counter)) is None


def test_chunking_when_forgotten_events_exceed_the_summary_window(store: EventStore) -> None:
    sid = chat_session(store, turns=40, words=300)
    summarizer = LLMSummarizer(
        "gpt-4o-mini", window=3000, max_output_tokens=400, call_kwargs={"mock_response": VALID}
    )
    events = [e for e in all_events(store, sid)][1:60]
    result = summarizer.summarize("## User intent and constraints\n- earlier", events)
    assert result.chunks > 1
    assert result.calls == result.chunks
    assert result.usage is not None
    assert any("chunked" in n for n in result.notes)
    with pytest.raises(SummaryError):
        LLMSummarizer("gpt-4o-mini", window=500, max_output_tokens=400).summarize(None, events)


def test_unmapped_summary_model_without_window_falls_back(store: EventStore) -> None:
    sid = chat_session(store, turns=40)
    cond = LLMSummaryCondenser("openai/unmapped-model-x", call_kwargs={"mock_response": VALID})
    proposal = cond.plan(
        store.view(sid), small_budget(), PlanContext(token_counter=store.token_counter)
    )
    assert proposal is not None and isinstance(proposal.event, Condensation)
    assert proposal.event.condenser == "extractive_summary"
    assert "window" in proposal.event.settings["error"]


@pytest.mark.parametrize(
    ("summarizer", "fix"),
    [
        (LLMSummarizer("openai/unmapped-model-x"), r"pass LLMSummarizer\(\.\.\., window=N\)"),
        (LLMSummarizer("gpt-4o-mini", window=500), "smaller max_output_tokens"),
        (
            LLMSummarizer("gpt-4o-mini", call_kwargs={"mock_response": INVALID}),
            "use a summary model that follows the template",
        ),
        (
            LLMSummarizer("gpt-4o-mini", call_kwargs={"mock_response": "litellm.RateLimitError"}),
            "rate limits and timeouts",
        ),
        (
            LLMSummarizer(
                "gpt-4o-mini", call_kwargs={"mock_response": "litellm.ContextWindowExceededError"}
            ),
            "smaller N so the events are split",
        ),
    ],
)
def test_summary_errors_are_store_errors_that_say_the_fix(
    store: EventStore, summarizer: LLMSummarizer, fix: str
) -> None:
    sid = chat_session(store, turns=6)
    events = all_events(store, sid)[1:]
    with pytest.raises(SummaryError, match=fix) as info:
        summarizer.summarize(None, events)
    assert isinstance(info.value, EventStoreError)


def test_summary_that_does_not_shrink_is_rejected(store: EventStore) -> None:
    sid = chat_session(store, turns=12, words=20)
    huge = VALID + "\n" + "padding " * 20_000
    view = store.view(sid)
    ctx = PlanContext(token_counter=store.token_counter, force=True, target_tokens=100)
    assert llm_condenser(huge, fallback=None).plan(view, small_budget(), ctx) is None


# --------------------------------------------------------------------------- concurrency


def test_stale_condensation_is_refused_and_the_pipeline_replans(store: EventStore) -> None:
    sid = chat_session(store, turns=40)
    view = store.view(sid)
    ctx = PlanContext(token_counter=store.token_counter)
    proposal = ExtractiveCondenser().plan(view, small_budget(), ctx)
    assert proposal is not None
    store.append(sid, [Message.user("a new message arrived meanwhile")])
    with pytest.raises(ConflictError):
        apply(store, view, proposal)

    class Racing(ExtractiveCondenser):
        """Another writer appends while this strategy is planning (once)."""

        raced = False

        def plan(self, v: Any, b: Any, c: Any) -> Any:
            p = super().plan(v, b, c)
            if not self.raced:
                self.raced = True
                store.append(sid, [Message.assistant("concurrent reply")])
            return p

    out = Pipeline([Racing()]).run(store, sid, small_budget(), ctx)
    assert out.conflicts == 1 and len(out.steps) == 1
    cond = store.view(sid).condensation
    assert cond is not None and isinstance(cond.event, Condensation)
    # The condensation was planned on the view that includes the concurrent reply.
    assert out.view is not None and out.view.items[-1].message.text == "concurrent reply"


# --------------------------------------------------------------------------- policy


def test_policy_threshold_runs_cheapest_first_and_fits(store: EventStore) -> None:
    sid = agent_session(store, steps=40, out_lines=60)
    budget = small_budget()
    policy = CondensationPolicy(budget, token_counter=store.token_counter)
    assert store.view(sid).tokens > budget.fraction(0.8)
    out = policy.maybe_condense(store, sid)
    assert out.trigger == "threshold" and out.fits and out.condensed
    assert out.steps[0].condenser == "prune_tool_outputs"  # the cheapest step fires first
    assert out.tokens_after <= budget.fraction(0.5)
    assert_pairs_intact(store.view(sid).to_messages())
    again = policy.maybe_condense(store, sid)
    assert again.trigger is None and again.skipped == "under_threshold"


def test_event_count_trigger(store: EventStore) -> None:
    sid = chat_session(store, turns=30, words=3)
    policy = CondensationPolicy(
        Budget(max_input_tokens=100_000, reserved_output=1000),
        max_events=20,
        token_counter=store.token_counter,
    )
    out = policy.maybe_condense(store, sid)
    assert out.trigger == "count" and out.condensed
    view = store.view(sid)
    assert len([i for i in view.items if not i.pinned]) <= 20
    cond = view.condensation
    assert cond is not None and isinstance(cond.event, Condensation)
    assert cond.event.trigger == "count"


def test_manual_request_is_honoured_with_focus(store: EventStore) -> None:
    sid = chat_session(store, turns=10, words=20)
    (req_seq,) = store.append(
        sid, [CondensationRequest(focus="the parser bug", requested_by="user")]
    )
    policy = CondensationPolicy(
        Budget(max_input_tokens=100_000, reserved_output=1000),
        pipeline=default_pipeline("gpt-4o-mini", call_kwargs={"mock_response": VALID}),
        token_counter=store.token_counter,
    )
    out = policy.maybe_condense(store, sid)
    assert out.trigger == "manual"
    cond = store.view(sid).condensation
    assert cond is not None and isinstance(cond.event, Condensation)
    assert cond.event.request_seq == req_seq and cond.event.focus == "the parser bug"
    assert cond.event.trigger == "manual" and cond.event.condenser == "llm_summary"
    # Answered: the next check does nothing.
    assert policy.maybe_condense(store, sid).trigger is None


def test_manual_request_that_cannot_be_honoured_is_declined_once(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.system("s"), Message.user("hi")])
    (req_seq,) = store.append(sid, [CondensationRequest(focus="anything")])
    policy = CondensationPolicy(small_budget(), token_counter=store.token_counter)
    out = policy.maybe_condense(store, sid)
    assert out.trigger == "manual" and not out.condensed
    declined = [
        e.event for e in store.read(sid, kinds=["custom"]) if e.event.name == REQUEST_DECLINED
    ]
    assert len(declined) == 1 and declined[0].data["request_seq"] == req_seq
    assert policy.maybe_condense(store, sid).trigger is None


def test_circuit_breaker_opens_after_repeated_failures(store: EventStore) -> None:
    sid = store.create_session().id
    # A pinned head larger than the budget, kept verbatim: nothing can fit it.
    store.append(sid, [Message.system("rules " * 8000), Message.user("go " * 50)])
    store.append(sid, [Message.assistant("a " * 100) for _ in range(3)])
    policy = CondensationPolicy(
        small_budget(),
        verbatim_head_pipeline(),
        max_failures=3,
        token_counter=store.token_counter,
    )
    outcomes = [policy.maybe_condense(store, sid) for _ in range(4)]
    assert [o.trigger for o in outcomes[:3]] == ["threshold"] * 3
    assert all(not o.fits for o in outcomes[:3])
    assert outcomes[3].trigger is None and outcomes[3].skipped == "circuit_open"
    opened = [e for e in store.read(sid, kinds=["custom"]) if e.event.name == CIRCUIT_OPEN]
    assert len(opened) == 1
    evt = opened[0].event
    assert isinstance(evt, Custom) and evt.data["failures"] == 3
    # Every message is still there.
    assert sum(1 for _ in store.read(sid, kinds=["message"])) == 5


def test_open_breaker_retries_after_enough_new_events(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.system("rules " * 8000), Message.user("go")])
    policy = CondensationPolicy(
        small_budget(),
        verbatim_head_pipeline(),
        max_failures=1,
        retry_after_events=5,
        token_counter=store.token_counter,
    )
    assert policy.maybe_condense(store, sid).trigger == "threshold"  # fails, opens
    assert policy.maybe_condense(store, sid).skipped == "circuit_open"
    store.append(sid, [Message.assistant(f"m{i}") for i in range(5)])
    half_open = policy.maybe_condense(store, sid)
    assert half_open.trigger == "threshold" and not half_open.fits
    assert policy.maybe_condense(store, sid).skipped == "circuit_open"
    opened = [e for e in store.read(sid, kinds=["custom"]) if e.event.name == CIRCUIT_OPEN]
    assert len(opened) == 1  # recorded once, not on every failed half-open attempt


# --------------------------------------------------------------------------- reactive


def test_reactive_completion_records_call_and_reply(store: EventStore) -> None:
    sid = chat_session(store, turns=3, words=5)
    policy = CondensationPolicy(small_budget(), token_counter=store.token_counter)
    resp = complete(store, sid, model="gpt-4o-mini", policy=policy, mock_response="hello")
    assert resp.choices[0].message.content == "hello"
    tail = all_events(store, sid)[-2:]
    assert tail[0].kind == "llm_call" and tail[1].event.role == "assistant"  # type: ignore[union-attr]
    assert tail[1].event.text == "hello"  # type: ignore[union-attr]
    assert store.verify(sid).ok


def test_reactive_overflow_condenses_then_gives_up_after_one_retry(store: EventStore) -> None:
    sid = chat_session(store, turns=30)
    n_before = len(all_events(store, sid))
    policy = CondensationPolicy(small_budget(16_000), token_counter=store.token_counter)
    with pytest.raises(litellm.ContextWindowExceededError):
        complete(
            store,
            sid,
            model="gpt-4o-mini",
            policy=policy,
            mock_response="litellm.ContextWindowExceededError",
        )
    evs = all_events(store, sid)
    calls = [e.event for e in evs if e.kind == "llm_call"]
    assert len(calls) == 2 and all(c.error for c in calls)  # type: ignore[union-attr]
    conds = [e.event for e in evs if e.kind == "condensation"]
    assert conds and all(c.trigger == "overflow" for c in conds)  # type: ignore[union-attr]
    # The second call saw a smaller view than the first.
    assert calls[1].view_seq > calls[0].view_seq  # type: ignore[union-attr]
    assert len([e for e in evs if e.kind == "message"]) == n_before - 0
    assert store.verify(sid).ok


def test_context_window_errors_are_recognized_by_text() -> None:
    bad = litellm.BadRequestError(
        message="request (3051 tokens) exceeds the available context size (2048 tokens)",
        model="x",
        llm_provider="openai",
    )
    assert is_context_window_error(bad)
    other = litellm.BadRequestError(message="invalid tool schema", model="x", llm_provider="openai")
    assert not is_context_window_error(other)
    assert is_context_window_error(
        litellm.ContextWindowExceededError(message="too long", model="x", llm_provider="openai")
    )


# --------------------------------------------------------------------------- async


async def test_async_policy_condenses(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'async.db'}"
    astore = AsyncEventStore(url, tenant=f"t-{uuid.uuid4().hex}")
    try:
        sid = (await astore.create_session()).id
        evs = [Message.system("s")]
        for i in range(40):
            evs += [Message.user(f"q{i} " + "w " * 200), Message.assistant(f"a{i} " + "o " * 200)]
        await astore.append(sid, evs)
        budget = small_budget()
        policy = CondensationPolicy(budget, token_counter=astore.token_counter)
        out = await policy.amaybe_condense(astore, sid)
        assert out.trigger == "threshold" and out.condensed and out.fits
        view = await astore.view(sid)
        assert view.tokens <= budget.fraction(0.5)
        assert isinstance(view.condensation.event, Condensation)  # type: ignore[union-attr]
        assert len([e async for e in astore.read(sid, kinds=["message"])]) == 81
    finally:
        await astore.close()


def test_original_events_stay_readable_after_every_strategy(store: EventStore) -> None:
    sid = agent_session(store, steps=40, out_lines=80)
    originals = {e.seq: e.event for e in all_events(store, sid)}
    policy = CondensationPolicy(small_budget(), token_counter=store.token_counter)
    for i in range(3):
        store.append(
            sid,
            [
                Message.user(f"also {i} " + "more " * 1500),
                Message.assistant("ok", tool_calls=[call(f"x{i}")]),
                Message.tool(f"x{i}", "y " * 3000),
            ],
        )
        policy.maybe_condense(store, sid)
    for seq, evt in originals.items():
        stored = next(iter(store.read(sid, seq, seq)))
        assert stored.event == evt
    view = store.view(sid)
    for ref in view.refs():
        part = store.original(sid, PartRef(seq=ref.seq, index=ref.index))
        assert isinstance(part, ToolResultPart) and part.output
    cond = view.condensation
    assert cond is not None
    forgotten = list(store.forgotten(sid, cond.seq))
    assert forgotten and forgotten[0].seq == 3  # right after the pinned head


def test_observation_masker_window_in_tokens(store: EventStore) -> None:
    sid = agent_session(store, steps=10, out_lines=100)  # each result ~300 tokens
    view = store.view(sid)
    results = [i for i in view.items if i.message.role == "tool"]
    per = results[0].tokens
    masker = ObservationMasker(window_tokens=per * 3, minimum_tokens=1)
    proposal = masker.plan(view, small_budget(), PlanContext(token_counter=store.token_counter))
    assert proposal is not None
    masked = sorted(r.seq for r in proposal.event.targets)  # type: ignore[union-attr]
    assert masked == [i.seq for i in results][: len(results) - 3]  # three results fit
