"""Condensing less often: hysteresis, a minimum gain, and summaries cut to fit.

Every condensation rewrites the prompt prefix (a provider cache miss), so the policy
waits for real growth before condensing again, and a summary never pushes a view that
could fit over the budget.
"""

from __future__ import annotations

import pytest

from condensers import CondensationPolicy, registry
from condensers.base import SHORTENED, fit_summary
from condensers.policy import floor_tokens
from eventstore import Condensation, EventStore, Message, ToolCallPart
from eventstore.budget import Budget
from eventstore.tokens import HeuristicTokenCounter
from tests.conftest import uncapped_policy


def _budget() -> Budget:
    return Budget(max_input_tokens=4000, reserved_output=400, buffer=100)  # 3,500 available


def _turn(store: EventStore, sid: str, i: int, words: int = 120) -> None:
    store.append(
        sid, [Message.assistant(f"step {i} " + "think " * words), Message.user("out " * words)]
    )


def _replay(store: EventStore, policy: CondensationPolicy, turns: int) -> tuple[int, int]:
    """Condensations written and the largest view, checking before each model call.

    The pinned head (about 1,650 tokens) is close to the target (1,750): a condensation
    cannot get far below the threshold, which is where condensing every turn came from.
    """
    sid = store.create_session().id
    store.append(sid, [Message.system("rules " * 1100), Message.user("Fix the bug.")])
    written = 0
    largest = 0
    for i in range(turns):
        out = policy.maybe_condense(store, sid)
        written += sum(1 for s in out.steps if s.kind == "condensation")
        largest = max(largest, store.view(sid).tokens)
        _turn(store, sid, i)
    return written, largest


def test_hysteresis_waits_for_growth_after_a_condensation(store: EventStore) -> None:
    eager = CondensationPolicy(
        _budget(), threshold=0.8, regrow=0.0, token_counter=store.token_counter
    )
    patient = CondensationPolicy(_budget(), threshold=0.8, token_counter=store.token_counter)
    assert patient.regrow == 0.8 - 0.5  # default: what a fresh cycle grows by
    n_eager, big_eager = _replay(store, eager, 40)
    n_patient, big_patient = _replay(store, patient, 40)
    assert n_patient < n_eager
    assert max(big_eager, big_patient) <= _budget().available  # waiting never overflows


def test_a_view_over_the_budget_condenses_whatever_the_growth(store: EventStore) -> None:
    budget = _budget()
    sid = store.create_session().id
    store.append(sid, [Message.system("sys"), Message.user("task")])
    for i in range(12):
        _turn(store, sid, i)
    policy = CondensationPolicy(budget, regrow=1.0, token_counter=store.token_counter)
    assert policy.maybe_condense(store, sid).condensed
    # Push it over the budget right away: growth is below regrow, but it must condense.
    store.append(sid, [Message.user("huge " * 3000)])
    assert store.view(sid).tokens > budget.available
    out = policy.maybe_condense(store, sid)
    assert out.trigger == "threshold" and out.condensed


def test_a_run_that_frees_too_little_writes_nothing(store: EventStore) -> None:
    """Over the threshold, but the only thing to forget is a tiny message: no new prefix."""
    budget = _budget()
    sid = store.create_session().id
    store.append(sid, [Message.system("rules " * 2000), Message.user("task")])
    store.append(sid, [Message.assistant("ok " * 100), Message.user("fine " * 100)])
    store.append(sid, [Message.assistant("next " * 40)])
    view = store.view(sid)
    assert budget.fraction(0.8) < view.tokens <= budget.available
    window = registry.pipeline(["window"])  # forgets the small middle, adds a short note
    out = CondensationPolicy(budget, window, threshold=0.8).maybe_condense(store, sid)
    assert not out.condensed and out.skipped == "too_little"
    forced = CondensationPolicy(budget, window, threshold=0.8, min_gain=0.0)
    assert forced.maybe_condense(store, sid).condensed


def test_a_summary_is_cut_to_keep_a_fittable_view_under_budget(store: EventStore) -> None:
    """A large pinned head leaves little room: the summary shrinks so the view fits."""
    budget = _budget()
    sid = store.create_session().id
    store.append(sid, [Message.system("rules " * 2050), Message.user("Fix parser.py")])
    for i in range(6):
        store.append(
            sid,
            [
                Message.assistant(f"cat src/module_{i}.py && pytest tests/test_{i}.py"),
                Message.user(f"ValueError: bad token {i}\n" + "line\n" * 80),
            ],
        )
    policy = CondensationPolicy(budget, token_counter=store.token_counter)
    out = policy.maybe_condense(store, sid)
    assert out.condensed
    view = store.view(sid)
    assert view.tokens <= budget.available
    assert view.summary is not None and view.summary.endswith(SHORTENED)


def test_fit_summary_keeps_headings_and_says_it_cut() -> None:
    counter = HeuristicTokenCounter()
    summary = "\n".join(
        ["## Requests", "- " + "quoted request " * 40]
        + ["## Errors"]
        + [f"- ValueError {i}" for i in range(30)]
        + ["## Files"]
        + [f"- src/f{i}.py" for i in range(30)]
    )
    assert fit_summary(summary, 10_000, counter) == summary
    cut = fit_summary(summary, 120, counter)
    assert cut is not None and counter.count(cut) <= 120
    assert cut.endswith(SHORTENED)
    for heading in ("## Requests", "## Errors", "## Files"):
        assert heading in cut
    assert "- ValueError 0" in cut and "- src/f0.py" in cut  # oldest entries survive
    assert fit_summary(summary, 5, counter) is None  # no room for any summary
    # What no condensation may drop is over the budget by itself: within the slack (the
    # budget's buffer) leaving the summary out lets the view through; further over,
    # nothing does, and the summary is what the view knows.
    assert fit_summary(summary, -50, counter, slack=200) is None
    assert fit_summary(summary, -250, counter, slack=200) == summary
    assert fit_summary(summary, -1, counter) == summary


def _with_usage(store: EventStore, prompt_tokens: int) -> tuple[str, int]:
    """A session whose last model call reported ``prompt_tokens``; returns it and the
    stored estimate of its view."""
    from eventstore import LLMCall, Usage

    sid = store.create_session().id
    store.append(sid, [Message.system("sys"), Message.user("Fix the bug.")])
    for i in range(10):
        _turn(store, sid, i, words=60)
    view = store.view(sid)
    call = LLMCall(
        model="gpt-4o-mini",
        view_seq=view.seq,
        fingerprint=view.fingerprint(),
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=20),
    )
    store.append(sid, [call, Message.assistant("next step")])
    return sid, store.view(sid).tokens


def test_recorded_usage_triggers_what_the_estimate_misses(store: EventStore) -> None:
    budget = _budget()
    sid, estimate = _with_usage(store, prompt_tokens=3_000)  # the provider counted more
    assert estimate < budget.fraction(0.8)
    blind = CondensationPolicy(
        budget, threshold=0.8, use_usage=False, token_counter=store.token_counter
    )
    assert blind.maybe_condense(store, sid).trigger is None
    informed = CondensationPolicy(budget, threshold=0.8, token_counter=store.token_counter)
    assert store.calibrated_tokens(store.view(sid)) > budget.fraction(0.8)
    out = informed.maybe_condense(store, sid)
    assert out.trigger == "threshold" and out.condensed
    # The target was scaled down by the estimate's error, so the real size lands on it.
    assert out.target < budget.fraction(0.5)


def test_implausible_usage_is_not_trusted(store: EventStore) -> None:
    """A mock's fixed usage (or a count far off the estimate) does not hold condensation
    back: the estimate decides."""
    sid, estimate = _with_usage(store, prompt_tokens=10)
    view = store.view(sid)
    assert view.measured_tokens() == view.tokens == estimate


def test_recorded_usage_holds_back_what_the_estimate_overrates(store: EventStore) -> None:
    budget = _budget()
    sid = store.create_session().id
    store.append(sid, [Message.system("sys"), Message.user("Fix the bug.")])
    for i in range(20):
        _turn(store, sid, i, words=60)
    estimate = store.view(sid).tokens
    assert estimate > budget.fraction(0.8)
    from eventstore import LLMCall, Usage

    view = store.view(sid)
    store.append(
        sid,
        [
            LLMCall(
                model="gpt-4o-mini",
                view_seq=view.seq,
                fingerprint=view.fingerprint(),
                usage=Usage(prompt_tokens=1_200),
            ),
            Message.assistant("ok"),
        ],
    )
    policy = CondensationPolicy(budget, threshold=0.8, token_counter=store.token_counter)
    out = policy.maybe_condense(store, sid)
    assert out.trigger is None and out.skipped == "under_threshold"
    blind = CondensationPolicy(
        budget, threshold=0.8, use_usage=False, token_counter=store.token_counter
    )
    assert blind.maybe_condense(store, sid).trigger == "threshold"


def test_a_squeezed_summary_carries_its_facts_to_the_next_one(store: EventStore) -> None:
    """Too little room shows a shortened summary; the condensation carries the whole one,
    and the next condensation (with room again) shows the facts the squeeze hid."""
    from eventstore import Condensation

    sid = store.create_session().id
    store.append(sid, [Message.system("rules " * 2000), Message.user("Fix the parser.")])
    for i in range(30):
        store.append(
            sid,
            [
                Message.assistant(f"cat src/pkg/module_{i:02d}.py"),
                Message.user(f"IndexError: list index out of range in step {i}\n" + "l\n" * 60),
            ],
        )
    tight = CondensationPolicy(_budget(), token_counter=store.token_counter)
    assert tight.condense(store, sid).condensed
    view = store.view(sid)
    assert view.tokens <= _budget().available
    cond = view.condensation
    assert cond is not None and isinstance(cond.event, Condensation)
    shown, whole = view.summary or "", cond.event.carried or ""
    paths = [f"src/pkg/module_{i:02d}.py" for i in range(29)]
    assert all(p in whole for p in paths)
    hidden = [p for p in paths if p not in shown]
    assert hidden  # the squeeze hid some
    for i in range(6):
        store.append(sid, [Message.assistant(f"next {i}"), Message.user("output\n" * 150)])
    roomy = CondensationPolicy(
        Budget(max_input_tokens=16_000, reserved_output=400), token_counter=store.token_counter
    )
    assert roomy.condense(store, sid).condensed
    view = store.view(sid)
    later = view.summary or ""
    assert view.condensation is not None and isinstance(view.condensation.event, Condensation)
    later_whole = view.condensation.event.carried or later
    assert all(p in later_whole for p in hidden)  # nothing lost for good
    assert sum(p in later for p in hidden) >= len(hidden) // 2  # and shown again with room


def test_the_default_condenses_only_when_the_view_no_longer_fits(store: EventStore) -> None:
    """The budget already sets aside the reply and a margin: a view at 90% is sent as it
    is (no new prompt prefix), one over the budget is condensed."""
    budget = _budget()
    sid = store.create_session().id
    store.append(sid, [Message.system("sys"), Message.user("Fix the bug.")])
    i = 0
    while store.view(sid).tokens <= budget.fraction(0.85):
        _turn(store, sid, i, words=60)
        i += 1
    assert store.view(sid).tokens <= budget.available
    policy = CondensationPolicy(budget, token_counter=store.token_counter)
    assert policy.threshold == 1.0
    out = policy.maybe_condense(store, sid)
    assert out.trigger is None and out.skipped == "under_threshold"
    ahead = CondensationPolicy(budget, threshold=0.8, token_counter=store.token_counter)
    assert ahead.decide(store.view(sid)).trigger == "threshold"  # what condensing ahead does
    while store.view(sid).tokens <= budget.available:
        _turn(store, sid, i, words=60)
        i += 1
    out = policy.maybe_condense(store, sid)
    assert out.trigger == "threshold" and out.condensed and out.fits


def _big_head_replay(store: EventStore, policy: CondensationPolicy, turns: int) -> list[int]:
    """A 4k model whose pinned head takes about two thirds of the budget, replayed turn
    by turn: the view size after each run that wrote a condensation."""
    sid = store.create_session().id
    store.append(sid, [Message.system("rules " * 1_500), Message.user("Fix the parser.")])
    after: list[int] = []
    for i in range(turns):
        out = policy.maybe_condense(store, sid)
        if any(s.kind == "condensation" for s in out.steps):
            after.append(store.view(sid).tokens)
        store.append(
            sid,
            [
                Message.assistant(f"cat src/mod_{i}.py and run the tests " + "plan " * 30),
                Message.user(f"ValueError: bad token {i} in src/mod_{i}.py\n" + "line " * 50),
            ],
        )
    return after


def test_a_condensation_leaves_headroom_when_the_head_takes_most_of_the_budget(
    store: EventStore,
) -> None:
    """The target (half the budget) is out of reach beside a large pinned head: the run
    forgets the tail down to the newest group and keeps the summary short enough that
    ``headroom`` of the room the head leaves stays free, so several turns follow without
    a new prompt prefix. Filling the view back up to the budget condensed every turn."""
    budget = Budget(4096, 512, 205)  # 3,379 available
    policy = CondensationPolicy(budget, token_counter=store.token_counter)
    assert policy.headroom == 0.6
    full = CondensationPolicy(
        budget, headroom=0.0, headroom_turns=0, token_counter=store.token_counter
    )
    roomy = _big_head_replay(store, policy, 40)
    filled = _big_head_replay(store, full, 40)
    view = store.view(store.create_session().id)  # an empty view: no pinned head
    assert policy.headroom_tokens(view) == int(0.6 * budget.available)
    room = budget.available - 2_300  # about what the pinned head leaves
    assert roomy and all(size <= budget.available - 0.5 * room for size in roomy)
    assert max(filled) > budget.available - 0.3 * room  # the summary filled the room
    assert len(roomy) * 3 <= len(filled) * 2  # a third fewer prompt rewrites, at least


def test_headroom_is_checked() -> None:
    import pytest

    from eventstore.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="headroom"):
        CondensationPolicy(_budget(), headroom=1.0)


@pytest.mark.parametrize(("repeats", "shown"), [(365, False), (600, True)])
def test_a_summary_is_left_out_when_that_lets_the_view_through(
    store: EventStore, repeats: int, shown: bool
) -> None:
    """The pinned head fits, but with the newest message group it is over the budget: no
    condensation can make the view fit the budget. Within the budget's buffer (inside the
    model's window) the summary is left out, which lets the view through; further over,
    nothing does, and the summary stays. Either way it is carried on the event."""
    budget = Budget(4096, 512, 205)  # 3,379 available, 3,584 of window after the reply
    sid = store.create_session().id
    store.append(sid, [Message.system("Follow the rules. " * 400), Message.user("Fix it.")])
    for i in range(6):
        call = ToolCallPart(id=f"c{i}", name="bash", arguments=f'{{"cmd": "cat src/m{i}.py"}}')
        store.append(
            sid,
            [
                Message.assistant(f"Reading src/m{i}.py", [call]),
                Message.tool(call.id, f"ValueError in src/m{i}.py line {i}\n" + "ok " * 40),
            ],
        )
    text = "Follow the rules. " * repeats
    # Arguments that are not a JSON object: no cut of them would still parse.
    big = ToolCallPart(id="big", name="write", arguments=text)
    store.append(sid, [Message.assistant("Writing the fix.", [big]), Message.tool("big", "done")])
    floor = floor_tokens(store.view(sid))
    if shown:
        assert floor > budget.available + budget.buffer
    else:
        assert budget.available < floor <= budget.available + budget.buffer
    policy = CondensationPolicy(budget, token_counter=store.token_counter)
    out = policy.maybe_condense(store, sid)
    assert out.condensed and not out.fits
    view = store.view(sid)
    assert (view.summary is not None) == shown
    if not shown:  # what no condensation may drop, nothing more: inside the window
        assert view.tokens == floor <= budget.available + budget.buffer
    cond = view.condensation.event if view.condensation is not None else None
    assert isinstance(cond, Condensation)
    whole = cond.carried or cond.summary
    assert whole is not None and "src/m0.py" in whole  # no fact is lost


def _paced_replay(store: EventStore, policy: CondensationPolicy, turns: int) -> list[Condensation]:
    """A 4k model with a 1,700-token head and turns of about 450 tokens (a quarter of the
    room the head leaves): the condensations written, in order."""
    sid = store.create_session().id
    store.append(sid, [Message.system("rules " * 1_100), Message.user("Fix the parser.")])
    for i in range(turns):
        policy.maybe_condense(store, sid)
        store.append(
            sid,
            [
                Message.assistant(f"cat src/mod_{i}.py, then: " + "reasoning " * 120),
                Message.user(f"ValueError: bad token {i} in src/mod_{i}.py\n" + "line " * 100),
            ],
        )
    return [e.event for e in store.read(sid, kinds=["condensation"])]  # type: ignore[misc]


def test_a_condensation_lasts_several_turns_where_a_turn_is_a_large_share_of_the_room(
    store: EventStore,
) -> None:
    """Where one turn takes about a quarter of the room the pinned head leaves, the
    ``headroom`` share alone (60% of the room) lasts two turns; ``headroom_turns`` keeps
    room for three turns at the session's pace (up to 90% of the room), so the summary is
    shorter and the prompt prefix is rewritten less often. Every fact is still carried."""
    budget = Budget(4096, 512, 205)  # 3,379 available
    # The newest reply left uncapped: the default cap would shrink the turns themselves.
    paced = uncapped_policy(budget, token_counter=store.token_counter, real_counter=False)
    share = uncapped_policy(
        budget, headroom_turns=0, token_counter=store.token_counter, real_counter=False
    )
    assert paced.headroom_turns == 3
    fewer = _paced_replay(store, paced, 40)
    more = _paced_replay(store, share, 40)
    assert fewer and len(fewer) * 5 <= len(more) * 4  # a fifth fewer rewrites, at least
    room = budget.available - 1_700
    assert max(c.summary_tokens for c in fewer) <= 0.25 * room
    assert max(c.summary_tokens for c in more) > 0.35 * room
    last = fewer[-1]
    whole = last.carried or last.summary or ""
    assert "src/mod_0.py" in whole  # the first turn's file is still carried


def test_headroom_turns_is_checked() -> None:
    from eventstore.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="headroom_turns"):
        CondensationPolicy(_budget(), headroom_turns=-1)
    with pytest.raises(ConfigurationError, match="max_headroom"):
        CondensationPolicy(_budget(), max_headroom=1.0)
