"""The condensation breaker: lost races are not failures, and its state lives in the log.

Races are real: a second writer appends to the same session between the policy's read
and its append, so the policy's ``expected_seq`` append meets a real ``ConflictError``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from conftest import verbatim_head_pipeline

from condensers import CondensationPolicy
from condensers.policy import CIRCUIT_FAILURE, CIRCUIT_OPEN, REQUEST_DECLINED
from eventstore import Condensation, CondensationRequest, EventStore, Message
from eventstore.budget import Budget
from eventstore.tokens import MESSAGE_OVERHEAD


def _budget(n: int = 8000) -> Budget:
    return Budget(max_input_tokens=n, reserved_output=1000, buffer=400)


def _chat(store: EventStore, sid: str, turns: int, words: int = 100) -> None:
    evs = []
    for i in range(turns):
        evs.append(Message.user(f"question {i} " + "word " * words))
        evs.append(Message.assistant(f"answer {i} " + "ok " * words))
    store.append(sid, evs)


class RacingStore:
    """The store, with another writer that gets in before each conditional append."""

    def __init__(self, inner: EventStore, rival: Callable[[str], Any], races: int) -> None:
        self.inner, self.rival, self.races = inner, rival, races

    def view(self, session_id: str, options: Any = None) -> Any:
        return self.inner.view(session_id, options=options)

    def append(
        self, session_id: str, events: Sequence[Any], expected_seq: int | None = None
    ) -> list[int]:
        if expected_seq is not None and self.races > 0:
            self.races -= 1
            self.rival(session_id)
        return self.inner.append(session_id, events, expected_seq=expected_seq)


def _customs(store: EventStore, sid: str, name: str) -> list[Any]:
    return [e for e in store.read(sid, kinds=["custom"]) if e.event.name == name]  # type: ignore[union-attr]


def test_losing_to_a_writer_that_already_condensed_is_not_a_failure(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.system("You are helpful.")])
    policy = CondensationPolicy(_budget(), max_failures=3, token_counter=store.token_counter)
    winner = CondensationPolicy(_budget(), token_counter=store.token_counter)
    for _ in range(3):
        _chat(store, sid, 40)
        racing = RacingStore(store, lambda s: winner.maybe_condense(store, s), races=1)
        out = policy.maybe_condense(racing, sid)  # type: ignore[arg-type]
        assert out.conflicts == 1 and not out.condensed and out.fits
    assert not _customs(store, sid, CIRCUIT_FAILURE) and not _customs(store, sid, CIRCUIT_OPEN)
    assert not policy.is_open(sid)
    _chat(store, sid, 40)
    assert policy.maybe_condense(store, sid).trigger == "threshold"  # not skipped


def test_exhausted_races_leave_the_breaker_and_the_request_alone(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.system("You are helpful.")])
    _chat(store, sid, 40)
    (req,) = store.append(sid, [CondensationRequest(focus="the parser")])
    policy = CondensationPolicy(_budget(), max_failures=3, token_counter=store.token_counter)
    for _ in range(3):
        # Every attempt, re-plans included, loses to a writer appending a message.
        racing = RacingStore(
            store, lambda s: store.append(s, [Message.user("meanwhile")]), races=100
        )
        out = policy.maybe_condense(racing, sid)  # type: ignore[arg-type]
        assert out.skipped == "conflict" and not out.condensed
        assert out.conflicts == policy.pipeline.max_conflicts + 1
    assert not _customs(store, sid, REQUEST_DECLINED)
    assert not _customs(store, sid, CIRCUIT_FAILURE) and not policy.is_open(sid)
    # Once the race is over the pending request is honoured.
    out = policy.maybe_condense(store, sid)
    cond = store.view(sid).condensation
    assert out.trigger == "manual" and out.condensed
    assert cond is not None and isinstance(cond.event, Condensation)
    assert cond.event.request_seq == req


def _unfittable(store: EventStore) -> str:
    """A pinned head larger than the budget: no strategy of :func:`verbatim_head_pipeline` can
    make it fit."""
    sid = store.create_session().id
    store.append(sid, [Message.system("rules " * 8000), Message.user("go " * 50)])
    store.append(sid, [Message.assistant("a " * 100) for _ in range(3)])
    return sid


def test_the_breaker_survives_a_new_policy_object(store: EventStore) -> None:
    sid = _unfittable(store)
    first = CondensationPolicy(
        _budget(), verbatim_head_pipeline(), max_failures=3, token_counter=store.token_counter
    )
    assert first.maybe_condense(store, sid).trigger == "threshold"
    assert first.maybe_condense(store, sid).trigger == "threshold"
    # A restart: the count so far comes from the log, and the third failure opens it.
    second = CondensationPolicy(
        _budget(), verbatim_head_pipeline(), max_failures=3, token_counter=store.token_counter
    )
    assert second.maybe_condense(store, sid).trigger == "threshold"
    (opened,) = _customs(store, sid, CIRCUIT_OPEN)
    assert opened.event.data["failures"] == 3
    third = CondensationPolicy(
        _budget(), verbatim_head_pipeline(), max_failures=3, token_counter=store.token_counter
    )
    out = third.maybe_condense(store, sid)
    assert out.trigger is None and out.skipped == "circuit_open" and third.is_open(sid)
    failures = [e.event.data["failures"] for e in _customs(store, sid, CIRCUIT_FAILURE)]
    assert failures == [1, 2]


def test_a_half_open_wait_restarts_across_policy_objects(store: EventStore) -> None:
    sid = _unfittable(store)
    kw: dict[str, Any] = {"max_failures": 1, "retry_after_events": 5}
    CondensationPolicy(
        _budget(), verbatim_head_pipeline(), token_counter=store.token_counter, **kw
    ).maybe_condense(store, sid)
    store.append(sid, [Message.assistant(f"m{i}") for i in range(5)])
    fresh = CondensationPolicy(
        _budget(), verbatim_head_pipeline(), token_counter=store.token_counter, **kw
    )
    assert fresh.maybe_condense(store, sid).trigger == "threshold"  # half-open attempt fails
    again = CondensationPolicy(
        _budget(), verbatim_head_pipeline(), token_counter=store.token_counter, **kw
    )
    assert again.maybe_condense(store, sid).skipped == "circuit_open"
    assert len(_customs(store, sid, CIRCUIT_OPEN)) == 1


def test_an_open_breaker_re_arms_when_the_view_grows(store: EventStore) -> None:
    sid = _unfittable(store)
    policy = CondensationPolicy(
        _budget(),
        verbatim_head_pipeline(),
        max_failures=1,
        regrow=0.2,
        token_counter=store.token_counter,
    )
    assert policy.maybe_condense(store, sid).trigger == "threshold"  # fails and opens
    store.append(sid, [Message.assistant("small")])
    assert policy.maybe_condense(store, sid).skipped == "circuit_open"
    # A fifth of the budget's new content (6,600 available) is worth another attempt.
    store.append(sid, [Message.assistant("new " * 1400)])
    assert policy.maybe_condense(store, sid).trigger == "threshold"


def test_a_run_that_leaves_the_view_fitting_is_not_a_failure(store: EventStore) -> None:
    """Over the threshold, nothing worth condensing, but the view fits: no breaker count."""
    sid = store.create_session().id
    budget = _budget()
    store.append(sid, [Message.system("rules " * 3700), Message.user("go")])  # ~5,550 pinned
    store.append(sid, [Message.assistant("a " * 300)])
    policy = CondensationPolicy(
        budget, threshold=0.8, max_failures=1, token_counter=store.token_counter
    )
    view = store.view(sid)
    assert budget.fraction(0.8) < view.tokens <= budget.available
    out = policy.maybe_condense(store, sid)
    assert out.trigger == "threshold" and not out.condensed and out.fits
    assert _customs(store, sid, CIRCUIT_FAILURE) == [] and not policy.is_open(sid)


def _summarized(store: EventStore, budget: Budget) -> str:
    """A session condensed once: a pinned head, a summary, and a short newest group."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You are helpful."), Message.user("fix the parser")])
    for i in range(40):
        store.append(
            sid,
            [
                Message.assistant(f"step {i}: editing src/mod_{i}.py " + "ok " * 60),
                Message.user(f"ValueError: bad token {i} in src/mod_{i}.py " + "out " * 120),
            ],
        )
    policy = CondensationPolicy(budget, token_counter=store.token_counter)
    assert policy.maybe_condense(store, sid).condensed
    assert store.view(sid).summary_tokens > 0
    return sid


def test_a_newest_group_too_large_for_the_budget_does_not_open_the_breaker(
    store: EventStore,
) -> None:
    """The head fits, the newest group with it does not: that passes with the next turn, so
    it is no failure, and the turn after it condenses at once."""
    budget = _budget()
    sid = _summarized(store, budget)
    policy = CondensationPolicy(budget, max_failures=2, token_counter=store.token_counter)
    for _ in range(3):
        store.append(sid, [Message.assistant("write file " + "line " * 9000)])
        out = policy.maybe_condense(store, sid)
        assert out.trigger == "threshold" and not out.fits
    assert not _customs(store, sid, CIRCUIT_FAILURE) and not _customs(store, sid, CIRCUIT_OPEN)
    store.append(sid, [Message.user("done"), Message.assistant("next")])
    out = policy.maybe_condense(store, sid)
    assert out.trigger == "threshold" and out.fits
    assert store.view(sid).tokens <= budget.available


def test_a_summary_that_alone_holds_the_view_over_the_budget_is_cut(store: EventStore) -> None:
    """Nothing more can be forgotten, and the head with the newest group fits with less
    to spare than the summary message's own framing: the summary is left out (or cut) so
    that the view fits, and its whole text is carried for the next condensation."""
    budget = _budget()
    sid = _summarized(store, budget)
    before = store.view(sid)
    pinned = sum(i.tokens for i in before.items if i.pinned)
    # The newest message leaves the view 3 tokens under the budget without any summary.
    size = budget.available - 3 - pinned - MESSAGE_OVERHEAD
    text = "write file " + "line " * size
    store.append(sid, [Message.assistant(text[: size * 4])])
    assert store.view(sid).tokens > budget.available
    out = CondensationPolicy(budget, token_counter=store.token_counter).maybe_condense(store, sid)
    after = store.view(sid)
    assert out.condensed and out.fits and after.tokens == budget.available - 3
    assert after.summary_tokens == 0
    cond = after.condensation
    assert cond is not None and "src/mod_0.py" in (cond.event.carried or "")  # type: ignore[union-attr]
    assert after.to_messages()[-1]["content"].startswith("write file")
