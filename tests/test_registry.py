"""Strategies by name, and the options the seeds ask for (DSPy window, Streetrace truncate,
dynamiq's per-output threshold)."""

from __future__ import annotations

import pytest

from condensers import (
    CondensationPolicy,
    ExtractiveCondenser,
    LLMSummaryCondenser,
    ObservationMasker,
    ToolOutputPruner,
    WindowCondenser,
    registry,
)
from eventstore import Condensation, ConfigurationError, EventStore, Message
from eventstore.budget import Budget
from tests.test_pruning import LARGE, agent_run, plan, pruned_calls


def test_strategies_by_name() -> None:
    assert isinstance(registry.strategy("prune"), ToolOutputPruner)
    assert isinstance(registry.strategy("mask"), ObservationMasker)
    assert isinstance(registry.strategy("summarize"), ExtractiveCondenser)
    assert isinstance(registry.strategy("summarize", model="gpt-4o-mini"), LLMSummaryCondenser)
    window = registry.strategy("window", max_interactions=7)
    assert isinstance(window, WindowCondenser) and window.max_interactions == 7
    with pytest.raises(ConfigurationError, match="known: llm, mask, prune"):
        registry.strategy("compress")
    with pytest.raises(ConfigurationError, match="window"):
        registry.strategy("window", no_such_option=1)
    with pytest.raises(ConfigurationError, match="model"):
        registry.strategy("llm")


def test_pipelines_by_name_with_options() -> None:
    p = registry.pipeline("prune, summarize,window", options={"window": {"max_interactions": 3}})
    assert [type(s) for s in p.steps] == [ToolOutputPruner, ExtractiveCondenser, WindowCondenser]
    assert p.steps[2].max_interactions == 3  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match="not in the pipeline"):
        registry.pipeline(["prune"], options={"window": {}})
    with pytest.raises(ConfigurationError, match="at least one"):
        registry.pipeline(" , ")


def test_register_a_strategy() -> None:
    name = "test-only-window"
    registry.register(name, lambda **kw: WindowCondenser(target_fraction=0.3, **kw))
    try:
        assert registry.strategy(name).target_fraction == 0.3  # type: ignore[attr-defined]
        with pytest.raises(ConfigurationError, match="exists"):
            registry.register(name, WindowCondenser)
        assert name in registry.names()
    finally:
        registry.STRATEGIES.pop(name, None)


def _chat(store: EventStore, turns: int) -> str:
    sid = store.create_session().id
    store.append(sid, [Message.system("sys"), Message.user("task")])
    for i in range(turns):
        store.append(sid, [Message.user(f"question {i}"), Message.assistant(f"answer {i}")])
    return sid


def test_window_keeps_at_most_max_interactions(store: EventStore) -> None:
    sid = _chat(store, 30)  # small: the tokens alone would keep everything
    budget = Budget(max_input_tokens=100_000, reserved_output=1_000)
    policy = CondensationPolicy(
        budget, registry.pipeline(["window"], options={"window": {"max_interactions": 5}})
    )
    out = policy.condense(store, sid)
    assert out.condensed
    view = store.view(sid)
    kept = [i for i in view.items if not i.pinned]
    assert len(kept) == 5
    cond = view.condensation
    assert cond is not None and isinstance(cond.event, Condensation)
    # 59 unpinned messages (the user messages before the first answer are pinned), each
    # its own interaction: 54 removed, 5 kept.
    assert cond.event.settings["window_stats"] == {
        "removed_interactions": 54,
        "kept_interactions": 5,
        "preserved_interactions": 0,
        "truncated_results": 0,
        "removed_truncated": 0,
    }
    # The note counts interactions, as DSPy's window does, not events.
    assert view.summary == "[Context trimmed: 54 earlier interactions are omitted from this view.]"


def test_max_interactions_counts_the_preserved_ones(store: EventStore) -> None:
    """DSPy's window keeps max_interactions in all, the preserved first ones among them."""
    sid = _chat(store, 30)
    budget = Budget(max_input_tokens=100_000, reserved_output=1_000)
    window = {"window": {"max_interactions": 5, "preserve_first": 2}}
    policy = CondensationPolicy(budget, registry.pipeline(["window"], options=window))
    assert policy.condense(store, sid).condensed
    view = store.view(sid)
    head = 2  # system and task (question 0 is pinned too: a user message before any answer)
    texts = [m["content"] for m in view.to_messages()]
    assert texts[head : head + 3] == ["question 0", "answer 0", "question 1"]
    after_head = [i for i in view.items if i.seq > 3]  # the preserved (pinned) and the tail
    assert len(after_head) == 5
    assert [m["content"] for m in view.to_messages()][-3:] == [
        "answer 28",
        "question 29",
        "answer 29",
    ]
    cond = view.condensation
    assert cond is not None and isinstance(cond.event, Condensation)
    stats = cond.event.settings["window_stats"]
    assert stats["kept_interactions"] == 5 and stats["preserved_interactions"] == 2
    with pytest.raises(ConfigurationError, match="preserve_first"):
        registry.strategy("window", max_interactions=2, preserve_first=2)


def test_max_interactions_acts_through_the_policy_and_stats_accumulate(
    store: EventStore,
) -> None:
    """The policy runs the window as soon as the view holds more interactions than it
    keeps (the view is far under its threshold), and window_stats and the note count
    every interaction removed so far, across condensations."""
    sid = _chat(store, 10)
    budget = Budget(max_input_tokens=100_000, reserved_output=1_000)
    window = {"window": {"max_interactions": 6}}
    policy = CondensationPolicy(budget, registry.pipeline(["window"], options=window))
    first = policy.maybe_condense(store, sid)
    assert first.condensed and first.trigger == "count"
    view = store.view(sid)
    removed = len([i for i in view.items if not i.pinned])
    assert removed == 6
    assert not policy.maybe_condense(store, sid).condensed  # at the cap: nothing to do
    for i in range(10, 14):
        store.append(sid, [Message.user(f"question {i}"), Message.assistant(f"answer {i}")])
    assert policy.maybe_condense(store, sid).condensed
    view = store.view(sid)
    assert len([i for i in view.items if not i.pinned]) == 6
    cond = view.condensation
    assert cond is not None and isinstance(cond.event, Condensation)
    stats = cond.event.settings["window_stats"]
    # 19 messages after the head at first (answer 0 .. answer 9), 13 removed; then 8 new
    # ones, 8 more removed.
    assert stats["removed_interactions"] == 13 + 8
    assert view.summary is not None and view.summary.startswith("[Context trimmed: 21 earlier")
    # A pipeline whose window keeps no interaction count does not trigger by interactions.
    plain = CondensationPolicy(budget, registry.pipeline(["window"]))
    assert not plain.maybe_condense(store, _chat(store, 10)).condensed


def test_window_stats_count_truncated_results(store: EventStore) -> None:
    """Results a ResultTruncator shows truncated count in truncated_results, also once
    the window has removed them from the view."""
    from eventstore import ToolCallPart

    sid = store.create_session().id
    store.append(sid, [Message.system("sys"), Message.user("task")])
    for i in range(6):
        call = ToolCallPart(id=f"c{i}", name="cat", arguments="{}")
        store.append(
            sid,
            [
                Message.assistant(f"read {i}", tool_calls=[call]),
                Message.tool(f"c{i}", f"line {i}\n" * 3_000, name="cat"),
            ],
        )
    budget = Budget(max_input_tokens=200_000, reserved_output=1_000)
    options = {
        "truncate_results": {"max_fraction": 0.02, "keep_fraction": 0.01},
        "window": {"max_interactions": 2},
    }
    steps = registry.pipeline(["truncate_results", "window"], options=options)
    policy = CondensationPolicy(budget, steps, real_counter=False)
    trunc = steps.steps[0]
    view = store.view(sid)
    from condensers.base import PlanContext

    proposal = trunc.plan(view, budget, PlanContext(trigger="threshold", target_tokens=1))
    assert proposal is not None
    store.append(sid, [proposal.event])
    shown = sum(len(i.kept) for i in store.view(sid).items)
    assert shown >= 2
    assert policy.maybe_condense(store, sid).condensed
    view = store.view(sid)
    cond = view.condensation
    assert cond is not None and isinstance(cond.event, Condensation)
    stats = cond.event.settings["window_stats"]
    assert stats["truncated_results"] == shown
    assert 0 < stats["removed_truncated"] <= shown


def test_truncate_says_how_many_messages_went(store: EventStore) -> None:
    sid = _chat(store, 40)
    budget = Budget(max_input_tokens=600, reserved_output=50, buffer=10)
    policy = CondensationPolicy(budget, registry.pipeline(["truncate"]))
    assert policy.condense(store, sid).condensed
    summary = store.view(sid).summary
    assert summary is not None
    assert summary.endswith("earlier messages truncated to fit context window]")
    assert summary.startswith("[") and summary.split()[0][1:].isdigit()


def test_pruner_leaves_outputs_under_its_threshold(store: EventStore) -> None:
    # 40 old outputs alternate 200 and 3,000 tokens; the newest 40k tokens are protected.
    sizes = [200 if i % 2 else 3_000 for i in range(40)]
    sid = agent_run(store, sizes)
    everything = plan(store, sid, ToolOutputPruner(), LARGE)
    only_big = plan(store, sid, ToolOutputPruner(min_output_tokens=1_000), LARGE)
    assert everything is not None and only_big is not None
    small = {f"c{i}" for i in range(40) if i % 2}
    assert small & set(pruned_calls(store, sid, everything))
    assert not small & set(pruned_calls(store, sid, only_big))
    assert only_big.settings["min_output_tokens"] == 1_000


def test_window_folds_what_it_forgets_into_the_summary(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.system("sys"), Message.user("Fix the parser.")])
    store.append(
        sid,
        [
            Message.assistant("cat src/parser/lexer.py"),
            Message.user("ValueError: unexpected token at line 3"),
        ],
    )
    for i in range(30):
        store.append(sid, [Message.assistant(f"step {i} " + "x " * 80), Message.user("ok")])
    budget = Budget(max_input_tokens=2_000, reserved_output=200, buffer=50)
    plain = CondensationPolicy(budget, registry.pipeline(["window"]))
    folding = CondensationPolicy(
        budget, registry.pipeline(["window"], options={"window": {"fold": True}})
    )
    fork = store.fork(sid, store.head(sid)).id
    assert plain.condense(store, sid).condensed and folding.condense(store, fork).condensed
    counted = store.view(sid).summary or ""
    folded = store.view(fork).summary or ""
    assert "src/parser/lexer.py" not in counted and "ValueError" not in counted
    assert "src/parser/lexer.py" in folded and "ValueError: unexpected token" in folded
    assert folded.endswith("earlier events are omitted from this view.]")
    assert store.view(fork).tokens <= budget.available


def test_window_preserves_the_first_interactions_for_good(store: EventStore) -> None:
    """DSPy's preserve_first: the first two interactions after the head stay in every later
    view, in their place before the summary, while the window moves on."""
    sid = _chat(store, 30)
    budget = Budget(max_input_tokens=100_000, reserved_output=1_000)
    window = {"window": {"max_interactions": 6, "preserve_first": 2}}
    policy = CondensationPolicy(budget, registry.pipeline(["window"], options=window))
    first = [m["content"] for m in store.view(sid).to_messages()[3:5]]
    assert first == ["answer 0", "question 1"]  # the two interactions after the head
    assert policy.condense(store, sid).condensed
    for i in range(30, 40):
        long = f"answer {i} " + "detail " * 60
        store.append(sid, [Message.user(f"question {i}"), Message.assistant(long.strip())])
    assert policy.condense(store, sid).condensed
    view = store.view(sid)
    texts = [m["content"] for m in view.to_messages()]
    assert texts[:5] == ["sys", "task", "question 0", "answer 0", "question 1"]
    assert texts[5].startswith(view.options.summary_prefix)  # the summary follows them
    assert texts[-1].startswith("answer 39 detail")
    assert store.verify(sid).ok
    with pytest.raises(ConfigurationError, match="preserve_first"):
        registry.strategy("window", preserve_first=-1)


def test_truncate_counts_messages_not_llm_call_records(store: EventStore) -> None:
    """Streetrace's marker: N is the number of messages truncated, across condensations;
    the llm_call records between them are not messages."""
    from eventstore import LLMCall

    sid = store.create_session().id
    store.append(sid, [Message.system("rules"), Message.user("Chat with me.")])
    budget = Budget(max_input_tokens=600, reserved_output=50, buffer=10)
    policy = CondensationPolicy(budget, registry.pipeline(["truncate"]), real_counter=False)
    messages = 0
    for round_ in range(2):
        for i in range(20):
            view = store.view(sid)
            call = LLMCall(model="m", view_seq=view.seq, fingerprint=view.fingerprint())
            store.append(sid, [call, Message.assistant(f"answer {round_}.{i} " + "x " * 20)])
            store.append(sid, [Message.user(f"question {round_}.{i} " + "y " * 20)])
        assert policy.condense(store, sid).condensed
    view = store.view(sid)
    assert view.condensation is not None
    forgotten = [e for e in store.forgotten(sid, view.condensation.seq)]
    messages = sum(1 for e in forgotten if e.kind == "message")
    assert view.summary is not None
    assert view.summary.endswith(f"[{messages} earlier messages truncated to fit context window]")
    assert messages < sum(1 for _ in forgotten)  # llm_call records were forgotten too
