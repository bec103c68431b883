"""One trip per turn: a condensation check and a model call each read the store once and
write it once, on both backends, and the async entry points do the same work."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import pytest

from condensers import CondensationPolicy, PlanContext, acomplete, complete, default_pipeline
from eventstore import AsyncEventStore, Budget, EventStore, Message, ToolCallPart

BUDGET = Budget(max_input_tokens=4_000, reserved_output=500, buffer=200)


class CountingStore:
    """An EventStore that counts the calls made to it."""

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if callable(attr):

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls[name] += 1
                return attr(*args, **kwargs)

            return counted
        return attr


def _session(store: EventStore, turns: int = 30, size: int = 1_500) -> str:
    sid = store.create_session().id
    batch: list[Message] = [Message.system("You fix bugs."), Message.user("Fix the parser.")]
    for i in range(turns):
        call = ToolCallPart(id=f"c{i}", name="bash", arguments=json.dumps({"cmd": f"cat f{i}.py"}))
        batch.append(Message.assistant(f"Reading f{i}.py", [call]))
        # Prose-like lines: about the same count by characters and by the tokenizer.
        body = "the parser reads this line\n" * (size // 27)
        batch.append(Message.tool(call.id, f"# f{i}.py\n{body}"))
    store.append(sid, batch)
    return sid


def _reply(text: str = "done") -> dict[str, Any]:
    return {"mock_response": text}


def test_a_condensation_check_reads_once_and_writes_once(store: EventStore) -> None:
    sid = _session(store)
    head = store.head(sid)
    counting = CountingStore(store)
    policy = CondensationPolicy(BUDGET, token_counter=store.token_counter)
    out = policy.maybe_condense(counting, sid)  # type: ignore[arg-type]
    assert len(out.steps) >= 2, out.steps  # several strategies ran...
    assert counting.calls == Counter({"view": 1, "append": 1})  # ...on one read, one write
    assert [s.seq for s in out.steps] == list(range(head + 1, head + 1 + len(out.steps)))
    view = store.view(sid)
    assert out.view is not None and out.view.fingerprint() == view.fingerprint()
    assert view.tokens == out.tokens_after <= BUDGET.available


def test_an_idle_check_only_reads(store: EventStore) -> None:
    sid = _session(store, turns=2, size=600)  # the newest result under the fresh cap
    counting = CountingStore(store)
    out = CondensationPolicy(BUDGET).maybe_condense(counting, sid)  # type: ignore[arg-type]
    assert not out.condensed and out.skipped == "under_threshold"
    assert counting.calls == Counter({"view": 1})


def test_a_check_that_only_caps_an_unseen_result_writes_once(store: EventStore) -> None:
    sid = _session(store, turns=2)  # the newest result over the fresh cap, the view small
    counting = CountingStore(store)
    out = CondensationPolicy(BUDGET).maybe_condense(counting, sid)  # type: ignore[arg-type]
    assert [s.condenser for s in out.steps] == ["truncate_large_results"]
    assert counting.calls == Counter({"view": 1, "append": 1})


def test_a_model_call_reads_once_and_writes_once(store: EventStore) -> None:
    sid = _session(store, turns=2, size=600)
    counting = CountingStore(store)
    policy = CondensationPolicy(BUDGET)
    response = complete(counting, sid, model="gpt-4o-mini", policy=policy, **_reply())  # type: ignore[arg-type]
    assert response.choices[0].message.content == "done"
    assert counting.calls == Counter({"view": 1, "append": 1})
    kinds = [e.kind for e in store.read(sid)][-2:]
    assert kinds == ["llm_call", "message"]
    assert store.verify(sid).ok


def test_a_concurrent_append_makes_the_run_plan_again(store: EventStore) -> None:
    sid = _session(store)
    stale = store.view(sid)
    store.append(sid, [Message.user("one more thing")])  # lands after the view was read
    pipeline = default_pipeline()
    ctx = PlanContext(token_counter=store.token_counter)
    out = pipeline.run(store, sid, BUDGET, ctx, view=stale)
    assert out.conflicts == 1 and out.condensed
    assert out.steps[0].seq == stale.seq + 2  # planned again on the new head
    assert store.view(sid).fingerprint() == out.view.fingerprint()  # type: ignore[union-attr]


# --------------------------------------------------------------------------- async


def _summary(out: Any) -> list[Any]:
    return [(s.condenser, s.kind, s.tokens_before, s.tokens_after) for s in out.steps]


async def test_async_entry_points_do_what_the_sync_ones_do(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    sync_store = EventStore(db_url, tenant=tenant, upgrade=True)
    astore = AsyncEventStore.from_sync(sync_store)
    a, b = _session(sync_store), _session(sync_store)
    policy = CondensationPolicy(BUDGET, token_counter=sync_store.token_counter)
    sync_out = policy.maybe_condense(sync_store, a)
    async_out = await policy.amaybe_condense(astore, b)
    assert _summary(async_out) == _summary(sync_out) and sync_out.condensed
    assert (await astore.view(b)).tokens == sync_store.view(a).tokens

    more = [Message.user(f"also check g{i}.py, it has a long history " * 20) for i in range(6)]
    await astore.append(b, more)
    ctx = PlanContext(trigger="manual", force=True, token_counter=sync_store.token_counter)
    ran = await default_pipeline().arun(astore, b, BUDGET, ctx)
    assert ran.condensed and ran.steps[-1].kind == "condensation"

    forced = await policy.acondense(astore, a, trigger="manual", focus="the parser")
    assert forced.trigger == "manual"

    response = await acomplete(astore, a, model="gpt-4o-mini", policy=policy, **_reply("ok"))
    assert response.choices[0].message.content == "ok"
    report = await astore.verify(a)
    assert report.ok and report.llm_calls == 1
    sync_store.close()


async def test_acomplete_condenses_and_retries_on_overflow(db_url: str) -> None:
    from eventstore import llm

    litellm = llm.import_litellm()
    async with AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True) as store:
        sid = _session(store.sync)
        policy = CondensationPolicy(BUDGET, token_counter=store.token_counter)
        calls: list[int] = []
        real = litellm.acompletion

        async def flaky(**kwargs: Any) -> Any:
            calls.append(len(kwargs["messages"]))
            if len(calls) == 1:
                raise litellm.ContextWindowExceededError(
                    message="prompt is too long", model="gpt-4o-mini", llm_provider="openai"
                )
            return await real(**kwargs, mock_response="fits now")

        litellm.acompletion = flaky
        try:
            # prepare=False: send the view as it is, so that the overflow path runs.
            response = await acomplete(
                store, sid, model="gpt-4o-mini", policy=policy, prepare=False
            )
        finally:
            litellm.acompletion = real
        assert response.choices[0].message.content == "fits now"
        assert len(calls) == 2 and calls[1] < calls[0]  # condensed between the attempts
        events = [e async for e in store.read(sid, kinds=["llm_call", "condensation"])]
        assert [e.kind for e in events][:1] == ["llm_call"]
        assert any(e.kind == "condensation" and e.event.trigger == "overflow" for e in events)
        assert (await store.verify(sid)).ok


@pytest.fixture
def store(db_url: str) -> Any:
    s = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    yield s
    s.close()


def test_condenser_entry_points_come_in_sync_async_pairs_with_the_same_parameters() -> None:
    import inspect

    from condensers import Pipeline

    pairs = [
        (Pipeline.run, Pipeline.arun),
        (CondensationPolicy.maybe_condense, CondensationPolicy.amaybe_condense),
        (CondensationPolicy.condense, CondensationPolicy.acondense),
        (complete, acomplete),
    ]
    for sync, asyn in pairs:
        assert inspect.iscoroutinefunction(asyn), asyn
        s = [(p.name, p.kind, p.default) for p in inspect.signature(sync).parameters.values()]
        a = [(p.name, p.kind, p.default) for p in inspect.signature(asyn).parameters.values()]
        assert s == a, sync.__name__
