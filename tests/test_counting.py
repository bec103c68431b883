"""Counting that cannot overflow: a view the character estimate puts under the budget
but a real tokenizer does not is condensed before it is sent."""

from __future__ import annotations

import json
import random
import string

import pytest

from condensers import CondensationPolicy, Pipeline, ResultTruncator, default_pipeline
from eventstore import EventStore, Message, ToolCallPart
from eventstore.budget import Budget
from eventstore.tokens import TiktokenCounter, message_tokens

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
    store: EventStore,
) -> None:
    counter = TiktokenCounter.load()
    if counter is None:
        pytest.skip("tiktoken's cl100k_base is not readable offline here")
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
