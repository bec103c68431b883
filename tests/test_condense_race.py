"""Two condensations that race: the one that loses says who won."""

from __future__ import annotations

from typing import Any

from condensers import CondensationPolicy
from condensers._io import Append, drive
from eventstore import EventStore, Message
from eventstore.budget import Budget


def _drive_losing(routine: Any, store: EventStore, winner: Any) -> Any:
    """Run ``routine`` against ``store``, letting ``winner`` run whole just before the
    routine's first append (so that append conflicts and the routine plans again)."""
    result: Any = None
    error: BaseException | None = None
    raced = False
    while True:
        try:
            request = routine.throw(error) if error is not None else routine.send(result)
        except StopIteration as stop:
            return stop.value
        if isinstance(request, Append) and not raced:
            raced = True
            winner()

        def one(req: Any) -> Any:
            return drive(_single(req), store)

        result, error = None, None
        try:
            result = one(request)
        except Exception as exc:
            error = exc


def _single(request: Any) -> Any:
    return (yield request)


def test_a_manual_condense_that_lost_the_race_names_the_winner(store: EventStore) -> None:
    budget = Budget(max_input_tokens=4_096, reserved_output=512, buffer=205)
    sid = store.create_session().id
    store.append(sid, [Message.system("You are an agent."), Message.user("Fix the bug.")])
    for i in range(12):
        store.append(sid, [Message.assistant(f"step {i} " + "think " * 60)])
        store.append(sid, [Message.user(f"output {i} " + "line\n" * 60)])
    loser = CondensationPolicy(budget, real_counter=False)
    winner = CondensationPolicy(budget, real_counter=False)
    out = _drive_losing(
        loser.routine(sid, trigger="manual"),
        store,
        lambda: winner.condense(store, sid),
    )
    newest = store.view(sid).condensation
    assert newest is not None
    assert out.error == f"another condensation was written first: seq {newest.seq}"
    assert not out.condensed


def test_a_compact_request_that_lost_the_race_is_answered_with_the_winner(
    store: EventStore,
) -> None:
    """The request path (a CondensationRequest, as ``eventstore condense`` appends): the
    losing run's answer names the condensation written first, not "nothing could be
    forgotten"."""
    from condensers.policy import REQUEST_DECLINED
    from eventstore import CondensationRequest, Custom

    budget = Budget(max_input_tokens=4_096, reserved_output=512, buffer=205)
    sid = store.create_session().id
    store.append(sid, [Message.system("You are an agent."), Message.user("Fix the bug.")])
    for i in range(12):
        store.append(sid, [Message.assistant(f"step {i} " + "think " * 60)])
        store.append(sid, [Message.user(f"output {i} " + "line\n" * 60)])
    store.append(sid, [CondensationRequest(focus="the bug")])
    loser = CondensationPolicy(budget, real_counter=False)
    winner = CondensationPolicy(budget, real_counter=False)
    out = _drive_losing(loser.routine(sid), store, lambda: winner.condense(store, sid))
    newest = store.view(sid).condensation
    assert newest is not None
    message = f"another condensation was written first: seq {newest.seq}"
    assert out.error == message and not out.condensed
    answers = [
        e.event.data
        for e in store.read(sid, kinds=["custom"])
        if isinstance(e.event, Custom) and e.event.name == REQUEST_DECLINED
    ]
    assert all(isinstance(a, dict) and a["reason"] == message for a in answers)
