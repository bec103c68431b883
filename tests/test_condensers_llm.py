"""The real-model tier: SmolLM2-135M behind llama-cpp-python's OpenAI-compatible server.

The model is tiny and often wrong, so these tests assert structure and behaviour (events
written, budgets met, errors mapped, usage recorded), never what a summary says.
"""

from __future__ import annotations

import pytest
from conftest import corpus_files
from llm_server import LocalModel
from test_condensers_replay import load_swe_agent

from condensers import (
    CondensationPolicy,
    LLMSummarizer,
    LLMSummaryCondenser,
    PlanContext,
    SummaryError,
    apply,
    complete,
    default_pipeline,
    missing_headings,
)
from eventstore import Condensation, EventStore, LLMCall, Message
from eventstore.budget import Budget
from eventstore.llm import import_litellm

pytestmark = pytest.mark.llm

SIMPLE = [
    p for p in corpus_files("swe-agent/**/*.traj") if p.name == "function_calling_simple.traj"
]


def load_file(store: EventStore) -> tuple[str, int]:
    if not SIMPLE:
        pytest.skip("SWE-agent corpus not present")
    messages = load_swe_agent(SIMPLE[0])
    sid = store.create_session(title="function_calling_simple").id
    store.append(sid, messages)
    return sid, len(messages)


@pytest.fixture
def sqlite_store(tmp_path, request) -> EventStore:  # type: ignore[no-untyped-def]
    s = EventStore(f"sqlite:///{tmp_path / 'llm.db'}", tenant="llm")
    request.addfinalizer(s.close)
    return s


def test_summarizer_chunks_a_real_trajectory_through_the_model(
    smollm2: LocalModel, sqlite_store: EventStore
) -> None:
    sid, _ = load_file(sqlite_store)
    events = list(sqlite_store.read(sid))[2:]
    summarizer = LLMSummarizer(
        smollm2.model,
        api_base=smollm2.api_base,
        api_key=smollm2.api_key,
        max_output_tokens=160,
        timeout=120,
    )
    assert summarizer.window == smollm2.n_ctx  # from the registered model
    try:
        result = summarizer.summarize(None, events)
    except SummaryError as exc:
        # Headings missing even after the retry: the calls were made and accounted for.
        assert exc.spent is not None and exc.spent.calls >= 2
        assert exc.spent.usage is not None and (exc.spent.usage.prompt_tokens or 0) > 0
        assert exc.spent.cost == 0.0  # registered at zero cost
        return
    assert missing_headings(result.text) == []
    assert result.chunks >= 2  # ~7k characters never fit one 2048-token prompt
    assert result.calls >= result.chunks
    assert result.usage is not None and (result.usage.prompt_tokens or 0) > 0
    assert result.cost == 0.0


def test_llm_condensation_of_a_real_trajectory(
    smollm2: LocalModel, sqlite_store: EventStore
) -> None:
    sid, n = load_file(sqlite_store)
    cond = LLMSummaryCondenser(
        smollm2.model,
        api_base=smollm2.api_base,
        api_key=smollm2.api_key,
        max_output_tokens=160,
    )
    budget = Budget(max_input_tokens=2048, reserved_output=256, buffer=100)
    view = sqlite_store.view(sid)
    ctx = PlanContext(trigger="threshold", token_counter=sqlite_store.token_counter)
    proposal = cond.plan(view, budget, ctx)
    assert proposal is not None
    seq = apply(sqlite_store, view, proposal)
    evt = next(iter(sqlite_store.read(sid, seq, seq))).event
    assert isinstance(evt, Condensation)
    assert evt.condenser in ("llm_summary", "extractive_summary")
    assert missing_headings(evt.summary or "") == []
    assert evt.usage is not None and (evt.usage.prompt_tokens or 0) > 0
    assert evt.cost == 0.0
    if evt.condenser == "llm_summary":
        assert evt.summary_model == smollm2.model
    else:
        assert evt.settings["fallback_from"] == "llm_summary"
    after = sqlite_store.view(sid)
    assert after.tokens == evt.tokens_after < evt.tokens_before
    assert sum(1 for _ in sqlite_store.read(sid, kinds=["message"])) == n


def test_real_context_overflow_is_condensed_and_retried(
    smollm2: LocalModel, sqlite_store: EventStore
) -> None:
    litellm = import_litellm()
    sid, n = load_file(sqlite_store)
    # Grow the view well past the server's 2048-token window with an older exchange (the
    # newest messages are always kept, so the bulk must be condensable).
    sqlite_store.append(
        sid,
        [
            Message.user("Here is the full log again:\n" + "error: line failed\n" * 600),
            Message.assistant("Noted; the log repeats one failure."),
            Message.user("What should we try next?"),
        ],
    )
    budget = Budget.for_model(smollm2.model)
    policy = CondensationPolicy(
        budget, default_pipeline(), token_counter=sqlite_store.token_counter
    )
    first = sqlite_store.view(sid)
    assert first.tokens > smollm2.n_ctx
    # The raw call really overflows, and litellm maps it.
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(
            model=smollm2.model, messages=first.to_messages(), max_tokens=16,
            **smollm2.completion_kwargs(),
        )  # fmt: skip
    # Without the condensation ``complete`` makes before sending (prepare), the call
    # overflows for real and the reactive path condenses and retries.
    response = complete(
        sqlite_store,
        sid,
        model=smollm2.model,
        policy=policy,
        max_tokens=32,
        prepare=False,
        **smollm2.completion_kwargs(),
    )
    assert response.choices[0].message is not None
    events = list(sqlite_store.read(sid, from_seq=first.seq + 1))
    kinds = [e.kind for e in events]
    assert kinds[0] == "llm_call" and kinds[-2:] == ["llm_call", "message"]
    failed, ok = events[0].event, events[-2].event
    assert isinstance(failed, LLMCall) and failed.error and "ContextWindow" in failed.error
    assert isinstance(ok, LLMCall) and ok.error is None
    assert ok.usage is not None and (ok.usage.prompt_tokens or 0) < smollm2.n_ctx
    conds = [e.event for e in events if isinstance(e.event, Condensation)]
    assert conds and conds[-1].trigger == "overflow"
    assert ok.view_seq > failed.view_seq
    reply = events[-1].event
    assert isinstance(reply, Message) and reply.role == "assistant"
    # Nothing was lost, and the recorded views verify.
    assert sum(1 for _ in sqlite_store.read(sid, kinds=["message"])) == n + 4
    assert sqlite_store.verify(sid).ok
