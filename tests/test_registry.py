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
    }


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
    window = {"window": {"max_interactions": 4, "preserve_first": 2}}
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
