"""Counting that cannot overflow: the bounded counter stores counts at or above the
tokenizer's, and a view a cheaper estimate puts under the budget but a real tokenizer does
not is condensed before it is sent."""

from __future__ import annotations

import json
import random
import string

import pytest

from condensers import CondensationPolicy, Pipeline, ResultTruncator, default_pipeline
from eventstore import EventStore, HeuristicTokenCounter, Message, ToolCallPart
from eventstore.budget import Budget
from eventstore.tokens import (
    FALLBACK_CHARS_PER_TOKEN,
    BoundedTokenCounter,
    TiktokenCounter,
    bounded_token_counter,
    message_tokens,
)

BUDGET = Budget(max_input_tokens=4_096, reserved_output=512, buffer=205)


def _dense_session(store: EventStore) -> str:
    """Tool output of random base64-like text: about 2.5 characters a token, where the
    store's estimate assumes 4."""
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + "+/"
    sid = store.create_session().id
    store.append(sid, [Message.system("You decode blobs."), Message.user("Decode the blobs.")])
    for i in range(3):
        call = ToolCallPart(id=f"c{i}", name="bash", arguments=json.dumps({"cmd": f"cat b{i}"}))
        blob = "".join(rng.choice(alphabet) for _ in range(3_200))
        store.append(sid, [Message.assistant(f"Reading b{i}", [call]), Message.tool(call.id, blob)])
    return sid


def test_a_view_that_fits_by_estimate_but_not_by_tokenizer_is_condensed(
    db_url: str,
) -> None:
    counter = TiktokenCounter.load()
    if counter is None:
        pytest.skip("tiktoken's cl100k_base is not readable offline here")
    # A store with the character estimate alone (the default; the bounded counter would
    # not let the view look small): the policy's own check is what guards it.
    store = EventStore(db_url, token_counter=HeuristicTokenCounter(), upgrade=True)
    try:
        _condenses_what_the_estimate_lets_through(store, counter)
    finally:
        store.close()


def _condenses_what_the_estimate_lets_through(store: EventStore, counter: TiktokenCounter) -> None:
    sid = _dense_session(store)
    view = store.view(sid)
    window = BUDGET.max_input_tokens - BUDGET.reserved_output
    assert view.tokens <= BUDGET.available  # the estimate says it fits...
    assert message_tokens(view.to_messages(), counter) > window  # ...the provider would not

    def policy(**kw: object) -> CondensationPolicy:
        # Without the cap on unseen results, which would shorten the blobs anyway.
        steps = [s for s in default_pipeline().steps if not isinstance(s, ResultTruncator)]
        return CondensationPolicy(BUDGET, Pipeline(steps), **kw)  # type: ignore[arg-type]

    # Without the check the view goes out as it is: the overflow the check exists for.
    assert not policy(real_counter=False).maybe_condense(store, sid).condensed

    out = policy().maybe_condense(store, sid)
    assert out.condensed and out.error is None
    after = store.view(sid)
    assert message_tokens(after.to_messages(), counter) <= BUDGET.available


def test_tiktoken_counter_counts_like_the_encoding() -> None:
    counter = TiktokenCounter.load()
    if counter is None:
        pytest.skip("tiktoken's cl100k_base is not readable offline here")
    assert counter.count("") == 0
    assert counter.count("hello world") == 2
    assert counter.count("hello world") == 2  # cached
    messages = [{"role": "user", "content": "hello world"}]
    assert message_tokens(messages, counter) == 2 + 4


def test_bounded_counter_is_the_larger_of_estimate_and_tokenizer() -> None:
    real = TiktokenCounter.load()
    if real is None:
        pytest.skip("tiktoken's cl100k_base is not readable offline here")
    counter = bounded_token_counter()
    assert counter is bounded_token_counter()  # one per process: the encoding loads once
    assert isinstance(counter, BoundedTokenCounter) and counter.exact
    estimate = HeuristicTokenCounter()
    prose = "The quick brown fox jumps over the lazy dog. " * 20
    rng = random.Random(3)
    blob = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(800))
    assert counter.count("") == 0
    for text in (prose, blob, "x", "hello world"):
        assert counter.count(text) == max(estimate.count(text), real.count(text))
    # English prose: the estimate is the larger; encoded data: the tokenizer, by far.
    assert counter.count(prose) == estimate.count(prose) > real.count(prose)
    assert counter.count(blob) == real.count(blob) > estimate.count(blob) * 3 // 2


def test_a_bounded_store_counts_at_or_above_the_tokenizer(db_url: str) -> None:
    real = TiktokenCounter.load()
    if real is None:
        pytest.skip("tiktoken's cl100k_base is not readable offline here")
    store = EventStore(db_url, token_counter=bounded_token_counter(), upgrade=True)
    try:
        sid = _dense_session(store)
        view = store.view(sid)
    finally:
        store.close()
    # The encoded tool output the estimate puts at a quarter of its characters is stored
    # at its tokenizer count: a view that fits by the stored counts fits the window.
    assert view.tokens >= message_tokens(view.to_messages(), real)
    assert view.tokens > BUDGET.available


def test_without_tiktoken_the_counter_falls_back_to_a_margin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from eventstore import llm

    monkeypatch.setattr(llm, "tiktoken_encoding", lambda name="cl100k_base": None)
    counter = BoundedTokenCounter()
    assert not counter.exact
    assert counter.name == f"heuristic:{FALLBACK_CHARS_PER_TOKEN:g}"
    assert counter.count("a" * 300) == 100  # three characters a token: a third over four
