"""The pinned head: the task survives condensation even when it is not the first user
message (a demonstration or template first), and a message an importer marks as the task
is pinned wherever it appears."""

from __future__ import annotations

import json
import math

import pytest

from condensers import CondensationPolicy
from eventstore import (
    Condensation,
    EventStore,
    InvalidEventError,
    Message,
    PartRef,
    Prune,
    ToolCallPart,
)
from eventstore.budget import Budget
from eventstore.tokens import message_tokens
from eventstore.views import TASK_MARK
from tests.conftest import uncapped_policy

BUDGET = Budget(max_input_tokens=4096, reserved_output=512, buffer=205)
TASK = "Make parse_date accept ISO week dates like 2024-W05-3."


def steps(n: int, start: int = 0) -> list[Message]:
    out: list[Message] = []
    for i in range(start, start + n):
        call = ToolCallPart(id=f"c{i}", name="bash", arguments=json.dumps({"command": f"cat f{i}"}))
        # Long reasoning, so that pruning tool outputs alone cannot make room.
        out.append(Message.assistant(f"step {i} " + "thinking " * 200, tool_calls=[call]))
        out.append(Message.tool(f"c{i}", f"output {i}\n" + "line of output\n" * 150, name="bash"))
    return out


def condense_turn_by_turn(store: EventStore, sid: str, events: list[Message]) -> list[str]:
    """Append like an agent, condensing before each model call; the views' texts."""
    policy = CondensationPolicy(BUDGET)
    texts = []
    for evt in events:
        if evt.role == "assistant":
            policy.maybe_condense(store, sid)
            texts.append(json.dumps(store.view(sid).to_messages()))
        store.append(sid, [evt])
    return texts


def test_the_task_after_a_demonstration_survives_condensation(store: EventStore) -> None:
    sid = store.create_session().id
    head = [
        Message.system("You are a coding agent."),
        Message.user("Here is a demonstration of how to solve a task: ... (a whole run)"),
        Message.user(TASK),
    ]
    texts = condense_turn_by_turn(store, sid, [*head, *steps(12)])
    assert any(e.kind == "condensation" for e in store.read(sid))
    assert all(TASK in t for t in texts)
    pinned = [i.seq for i in store.view(sid).items if i.pinned]
    assert pinned == [1, 2, 3]


def test_user_messages_after_the_first_action_are_not_pinned(store: EventStore) -> None:
    sid = store.create_session().id
    events = [Message.user(TASK), *steps(1), Message.user("observation-like follow-up")]
    store.append(sid, events)
    assert [i.seq for i in store.view(sid).items if i.pinned] == [1]


def test_a_message_marked_as_the_task_is_pinned_wherever_it_is(store: EventStore) -> None:
    sid = store.create_session().id
    marked = Message.user(TASK)
    marked.provider_metadata = {"eventstore": {TASK_MARK: True}}
    events = [
        Message.system("You are a coding agent."),
        Message.user("Warm-up: list the files."),
        *steps(2),
        marked,
    ]
    texts = condense_turn_by_turn(store, sid, [*events, *steps(12, start=2)])
    (task_seq,) = [
        e.seq for e in store.read(sid, kinds=["message"]) if getattr(e.event, "text", "") == TASK
    ]
    assert task_seq in [i.seq for i in store.view(sid).items if i.pinned]
    assert all(TASK in t for t in texts[2:])  # every view sent after it appeared


def test_a_head_too_large_for_the_budget_is_cut_once_and_says_so(store: EventStore) -> None:
    """A demonstration and a long system prompt leave the view no room: the pinned texts
    are cut (demonstration first), the task stays whole, the view fits, nothing is lost."""
    budget = Budget(max_input_tokens=4_096, reserved_output=512, buffer=205)
    sid = store.create_session().id
    system = "You solve tasks with shell commands. " + "Rule: be careful. " * 100
    demo = "Here is a demonstration of a solved task:\n" + "$ ls\nfile.py\n" * 900
    task = "We need to fix the rounding bug in ledger/money.py so totals match."
    store.append(sid, [Message.system(system), Message.user(demo), Message.user(task)])
    store.append(sid, [Message.assistant("Looking at the file."), Message.user("It has 40 lines.")])
    policy = CondensationPolicy(budget, token_counter=store.token_counter)
    assert store.view(sid).tokens > budget.available
    out = policy.maybe_condense(store, sid)
    assert "truncate_pinned_head" in [s.condenser for s in out.steps]
    view = store.view(sid)
    assert view.tokens <= budget.available
    messages = view.to_messages()
    assert messages[2]["content"] == task  # the task is whole
    assert "characters omitted" in messages[1]["content"]  # the demonstration was cut
    assert messages[0]["content"] == system  # enough was freed without the system prompt
    prunes = [e.event for e in store.read(sid, kinds=["prune"]) if isinstance(e.event, Prune)]
    head_cuts = [p for p in prunes if p.strategy == "truncate_pinned_head"]
    assert len(head_cuts) == 1 and "leaves no room" in (head_cuts[0].note or "")
    ref = head_cuts[0].targets[0]
    assert store.original(sid, ref).text == demo  # reversible
    # Next turns: the head is small now, so it is not cut again.
    for i in range(3):
        store.append(sid, [Message.assistant(f"step {i}"), Message.user(f"output {i}")])
        policy.maybe_condense(store, sid)
    cuts = [e for e in store.read(sid, kinds=["prune"]) if isinstance(e.event, Prune)]
    assert len([e for e in cuts if e.event.strategy == "truncate_pinned_head"]) == 1
    assert store.verify(sid).ok


def test_the_system_prompt_stays_whole_when_cutting_the_demonstration_makes_it_fit(
    store: EventStore,
) -> None:
    """A system prompt and task that together pass the run's target but fit the budget: the
    demonstration is cut as far as allowed, and the system prompt is not cut to reach the
    target (it is what the model must see whole)."""
    budget = Budget(max_input_tokens=4_096, reserved_output=512, buffer=205)
    sid = store.create_session().id
    system = "You solve tasks with shell commands. " + "Rule: be careful. " * 250
    demo = "Here is a demonstration of a solved task:\n" + "$ ls\nfile.py\n" * 2_000
    task = "We need to fix the rounding bug. " + "Details of the bug. " * 150
    store.append(sid, [Message.system(system), Message.user(demo), Message.user(task)])
    view = store.view(sid)
    assert view.items[0].tokens + view.items[2].tokens > budget.fraction(0.5)
    policy = CondensationPolicy(budget, token_counter=store.token_counter, real_counter=False)
    out = policy.maybe_condense(store, sid)
    assert "truncate_pinned_head" in [s.condenser for s in out.steps]
    assert store.view(sid).tokens <= budget.available
    messages = store.view(sid).to_messages()
    assert messages[0]["content"] == system
    assert messages[2]["content"] == task
    assert "characters omitted" in messages[1]["content"]


def test_a_system_prompt_alone_over_the_budget_is_cut_and_the_task_kept(
    store: EventStore,
) -> None:
    budget = Budget(max_input_tokens=4_096, reserved_output=512, buffer=205)
    sid = store.create_session().id
    system = "".join(f"Rule {i}: answer in English only.\n" for i in range(1_200))
    store.append(sid, [Message.system(system), Message.user("Fix ledger/money.py.")])
    out = CondensationPolicy(budget, token_counter=store.token_counter).maybe_condense(store, sid)
    assert out.fits and [s.condenser for s in out.steps] == ["truncate_pinned_head"]
    messages = store.view(sid).to_messages()
    assert out.view is not None and out.view.to_messages() == messages  # predicted exactly
    assert messages[0]["content"].startswith("Rule 0: answer")
    assert messages[0]["content"].rstrip().endswith("Rule 1199: answer in English only.")
    assert messages[1]["content"] == "Fix ledger/money.py."
    assert store.verify(sid).ok


def test_a_placeholder_prune_still_refuses_text_parts(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.system("rules"), Message.user("task")])
    with pytest.raises(InvalidEventError, match="not a stored tool result"):
        store.append(sid, [Prune(targets=[PartRef(seq=2, index=0)])])


def _head_just_under(store: EventStore, budget: Budget) -> str:
    """A task that alone fits the budget but leaves no room for the newest messages."""
    sid = store.create_session().id
    task = "Task: " + "word " * int(budget.available * 4 * 0.95 / 5)
    store.append(sid, [Message.system("You are an agent."), Message.user(task)])
    assert sum(i.tokens for i in store.view(sid).items if i.pinned) <= budget.available
    return sid


def test_a_head_that_fits_alone_stays_verbatim_on_automatic_runs(store: EventStore) -> None:
    """Automatic runs keep a head that fits verbatim, even when the newest messages leave
    no room beside it (the newest reply's text is cut instead)."""
    budget = Budget(max_input_tokens=4_096, reserved_output=512, buffer=205)
    sid = _head_just_under(store, budget)
    task = store.view(sid).to_messages()[1]["content"]
    policy = CondensationPolicy(budget, token_counter=store.token_counter, real_counter=False)
    for i in range(3):
        store.append(sid, [Message.assistant(f"step {i} " + "think " * 200)])
        store.append(sid, [Message.user(f"output {i} " + "line of output\n" * 150)])
        assert policy.maybe_condense(store, sid).error is None
        assert store.view(sid).to_messages()[1]["content"] == task


def test_a_manual_request_on_a_head_too_big_ends_in_a_view_that_fits(store: EventStore) -> None:
    budget = Budget(max_input_tokens=4_096, reserved_output=512, buffer=205)
    sid = _head_just_under(store, budget)
    store.append(sid, [Message.assistant("step " + "think " * 300)])
    store.append(sid, [Message.user("output " + "line of output\n" * 200)])
    assert store.view(sid).tokens > budget.available
    out = CondensationPolicy(budget, real_counter=False).condense(store, sid)
    assert out.error is None and out.fits
    assert store.view(sid).tokens <= budget.available
    assert "truncate_pinned_head" in [s.condenser for s in out.steps]
    cuts = [
        e.event
        for e in store.read(sid, kinds=["prune"])
        if isinstance(e.event, Prune) and e.event.strategy == "truncate_pinned_head"
    ]
    assert len(cuts) == 1 and "for the newest messages" in (cuts[0].note or "")


def test_a_compact_request_on_a_head_too_big_ends_in_a_view_that_fits(store: EventStore) -> None:
    """A ``/compact`` request (a CondensationRequest in the log) on a head that leaves the
    newest messages no room ends in a view that fits, and its answer says so (not
    "nothing could be forgotten")."""
    from condensers.policy import REQUEST_DECLINED
    from eventstore import CondensationRequest, Custom

    budget = Budget(max_input_tokens=4_096, reserved_output=512, buffer=205)
    sid = _head_just_under(store, budget)
    store.append(sid, [Message.assistant("step " + "think " * 300)])
    store.append(sid, [Message.user("output " + "line of output\n" * 200)])
    (req,) = store.append(sid, [CondensationRequest(focus="the task", requested_by="user")])
    assert store.view(sid).tokens > budget.available
    policy = CondensationPolicy(budget, real_counter=False)
    out = policy.maybe_condense(store, sid)
    assert out.trigger == "manual" and out.error is None and out.fits
    assert store.view(sid).tokens <= budget.available
    assert "truncate_pinned_head" in [s.condenser for s in out.steps]
    answers = [
        e.event.data
        for e in store.read(sid, kinds=["custom"])
        if isinstance(e.event, Custom) and e.event.name == REQUEST_DECLINED
    ]
    assert len(answers) == 1 and isinstance(answers[0], dict)
    assert answers[0]["request_seq"] == req
    assert answers[0]["reason"].startswith("the view fits (")
    assert "truncate_pinned_head at seq" in answers[0]["reason"]
    assert policy.maybe_condense(store, sid).steps == []  # answered: not run again


def test_a_manual_request_that_cannot_fit_says_why(store: EventStore) -> None:
    """When nothing can make the view fit (the newest call's own arguments are over the
    budget, and a call is never cut), a manual request ends in a clear error, recorded as
    the request's answer, never in a silent over-budget view."""
    from condensers.policy import REQUEST_DECLINED
    from eventstore import CondensationRequest, Custom, ToolCallPart

    budget = Budget(max_input_tokens=4_096, reserved_output=512, buffer=205)
    sid = store.create_session().id
    store.append(sid, [Message.system("You are an agent."), Message.user("Write the file.")])
    huge = ToolCallPart(id="w1", name="write", arguments='{"text": "' + "data " * 5_000 + '"}')
    store.append(sid, [Message.assistant("Writing it.", tool_calls=[huge])])
    store.append(sid, [CondensationRequest(focus="anything")])
    out = CondensationPolicy(budget, real_counter=False).maybe_condense(store, sid)
    assert out.trigger == "manual" and not out.fits
    assert out.error is not None and "tokens of" in out.error and "available" in out.error
    (answer,) = [
        e.event
        for e in store.read(sid, kinds=["custom"])
        if isinstance(e.event, Custom) and e.event.name == REQUEST_DECLINED
    ]
    assert isinstance(answer.data, dict) and answer.data["reason"] == out.error


INSTRUCTIONS = "# AGENTS.md instructions\n" + "Rule: run the tests before committing.\n" * 30
ENVIRONMENT = "<environment_context><cwd>/repo</cwd><shell>bash</shell></environment_context>"
REQUEST = "Refactor billing so that invoices are generated per account, not per user. " * 60


def _instructions_then_request(store: EventStore, environment: str = ENVIRONMENT) -> str:
    """A coding agent's head: its instructions file first, then the environment, then the
    user's request (the task, by position, is the instructions: the first user message)."""
    sid = store.create_session().id
    store.append(sid, [Message.user(INSTRUCTIONS), Message.user(environment)])
    store.append(sid, [Message.user(REQUEST)])
    return sid


def _pinned_cuts(store: EventStore, sid: str) -> list[Prune]:
    return [
        e.event
        for e in store.read(sid, kinds=["prune"])
        if isinstance(e.event, Prune) and e.event.strategy == "truncate_pinned_head"
    ]


def test_a_large_newest_message_beside_a_head_that_fits_cuts_the_request_not_the_task(
    store: EventStore,
) -> None:
    """The head fits by itself, but not with a large newest message: the request is cut
    (its start and end, with the way back), the task and the system prompt stay whole,
    and the view fits."""
    sid = _instructions_then_request(store)
    policy = uncapped_policy(BUDGET, token_counter=store.token_counter, real_counter=False)
    for i in range(3):  # ordinary turns: nothing in the head is touched
        store.append(sid, [Message.assistant(f"step {i}"), Message.user(f"output {i}")])
        policy.maybe_condense(store, sid)
    assert _pinned_cuts(store, sid) == []
    store.append(sid, [Message.assistant("plan: " + "consider the invoice tables " * 320)])
    store.append(sid, [Message.user("noted")])
    view = store.view(sid)
    head = sum(i.tokens for i in view.items if i.pinned)
    assert head <= BUDGET.available < view.tokens
    out = policy.maybe_condense(store, sid)
    assert out.error is None and out.fits
    messages = store.view(sid).to_messages()
    assert messages[0]["content"] == INSTRUCTIONS
    assert messages[1]["content"] == ENVIRONMENT  # too short to gain anything from a cut
    assert "characters omitted" in messages[2]["content"]
    assert messages[2]["content"].startswith(REQUEST[:200])
    (cut,) = _pinned_cuts(store, sid)
    assert "(request)" in (cut.note or "") and "recall(ref=" in (cut.note or "")
    assert [store.original(sid, ref).text for ref in cut.targets] == [REQUEST]
    assert store.verify(sid).ok


def test_context_between_the_task_and_the_request_is_cut_before_the_request(
    store: EventStore,
) -> None:
    environment = "<environment_context>\n" + "  <path>/usr/local/bin</path>\n" * 120
    sid = _instructions_then_request(store, environment)
    store.append(sid, [Message.assistant("plan: " + "consider the invoice tables " * 220)])
    store.append(sid, [Message.user("noted")])
    policy = uncapped_policy(BUDGET, token_counter=store.token_counter, real_counter=False)
    out = policy.maybe_condense(store, sid)
    assert out.fits
    messages = store.view(sid).to_messages()
    assert messages[0]["content"] == INSTRUCTIONS
    assert "characters omitted" in messages[1]["content"]
    assert messages[2]["content"] == REQUEST  # cutting the environment was enough
    (cut,) = _pinned_cuts(store, sid)
    assert "(context)" in (cut.note or "")


class _CountsMore:
    """A tokenizer that counts 30% more than four characters a token, as cl100k does on
    code and listings."""

    name = "counts-more"

    def count(self, text: str) -> int:
        return math.ceil(len(text) * 1.3 / 4) if text else 0


def test_a_head_that_fits_only_by_the_estimate_is_cut_to_fit_by_the_real_count(
    store: EventStore,
) -> None:
    """The pinned head and the newest group fit by the stored estimates, but not by the
    tokenizer the policy checks with: the run plans with a budget scaled down by how far
    the estimates run low, so the context is cut and the view fits by the real count."""
    real = _CountsMore()
    environment = "<environment_context>\n" + "  <path>/usr/local/bin</path>\n" * 120
    sid = _instructions_then_request(store, environment)
    head = store.view(sid).tokens
    newest = (int(BUDGET.available * 0.9) - head - 20) // 7  # tokens, then phrases
    store.append(sid, [Message.assistant("plan: " + "consider the invoice tables " * newest)])
    store.append(sid, [Message.user("noted")])
    view = store.view(sid)
    assert view.tokens <= BUDGET.available < message_tokens(view.to_messages(), real)
    policy = uncapped_policy(BUDGET, token_counter=store.token_counter, real_counter=real)
    scaled = policy.run_budget(view.tokens, message_tokens(view.to_messages(), real))
    assert scaled.max_input_tokens == BUDGET.max_input_tokens
    assert scaled.available < BUDGET.available and scaled.buffer > BUDGET.buffer
    assert policy.run_budget(view.tokens, view.tokens) is policy.budget
    out = policy.maybe_condense(store, sid)
    assert out.error is None
    after = store.view(sid).to_messages()
    assert message_tokens(after, real) <= BUDGET.available
    assert after[0]["content"] == INSTRUCTIONS and after[2]["content"] == REQUEST
    (cut,) = _pinned_cuts(store, sid)
    assert "(context)" in (cut.note or "")


def test_a_newest_message_too_large_for_any_head_cut_leaves_the_request_whole(
    store: EventStore,
) -> None:
    """An automatic run does not cut the request for a newest message that would leave the
    view over the budget anyway: that message's own text is cut instead (not forgotten)."""
    sid = _instructions_then_request(store)
    plan = "plan: " + "consider the invoice tables " * 600
    store.append(sid, [Message.assistant(plan)])
    store.append(sid, [Message.user("noted")])
    policy = CondensationPolicy(BUDGET, token_counter=store.token_counter, real_counter=False)
    assert policy.maybe_condense(store, sid).fits
    assert _pinned_cuts(store, sid) == []
    messages = store.view(sid).to_messages()
    assert messages[2]["content"] == REQUEST
    assert messages[3]["role"] == "assistant" and messages[3]["content"].startswith("plan: ")
    assert "characters omitted" in messages[3]["content"] and messages[4]["content"] == "noted"


def _newest_cuts(store: EventStore, sid: str) -> list[Prune]:
    return [
        e.event
        for e in store.read(sid, kinds=["prune"])
        if isinstance(e.event, Prune) and e.event.strategy == "truncate_newest_text"
    ]


def test_a_long_newest_reply_beside_a_task_that_fits_has_its_text_cut_not_its_call(
    store: EventStore,
) -> None:
    """The head fits by itself but not beside the newest group, and there is no context or
    request to cut: the newest reply's text is cut as far as allowed (its start and end,
    with the way back), its tool call and result and the task stay whole, the view fits,
    and the next turn keeps the cut (no second rewrite of what was sent)."""
    sid = store.create_session().id
    system = "You are a coding agent."
    store.append(sid, [Message.system(system), Message.user(REQUEST)])
    thought = "THOUGHT: " + "consider the invoice tables and their totals " * 260
    args = json.dumps({"command": "grep -rn invoice billing/"})
    call = ToolCallPart(id="c1", name="bash", arguments=args)
    found = "billing/invoice.py:3: class Invoice"
    store.append(sid, [Message.assistant(thought, tool_calls=[call])])
    store.append(sid, [Message.tool("c1", found, name="bash")])
    view = store.view(sid)
    assert sum(i.tokens for i in view.items if i.pinned) <= BUDGET.available < view.tokens
    policy = uncapped_policy(BUDGET, token_counter=store.token_counter, real_counter=False)
    out = policy.maybe_condense(store, sid)
    assert out.error is None and out.fits
    assert [s.condenser for s in out.steps] == ["truncate_newest_text"]
    sent = store.view(sid).to_messages()
    assert [m["content"] for m in sent[:2]] == [system, REQUEST]
    reply = sent[2]
    assert "characters omitted" in reply["content"] and reply["content"].startswith("THOUGHT: ")
    assert len(reply["content"]) < 600
    assert reply["tool_calls"][0]["function"]["arguments"] == args
    assert sent[3]["content"] == found
    (cut,) = _newest_cuts(store, sid)
    assert cut.keep_chars == 400 and "text and tool-call arguments cut to 400" in (cut.note or "")
    assert store.original(sid, cut.targets[0]).text == thought
    assert store.verify(sid).ok
    store.append(
        sid,
        [
            Message.assistant(
                "Reading it.", tool_calls=[ToolCallPart(id="c2", name="bash", arguments="{}")]
            )
        ],
    )
    store.append(sid, [Message.tool("c2", "class Invoice: ...", name="bash")])
    policy.maybe_condense(store, sid)
    assert store.view(sid).to_messages()[: len(sent)] == sent
    assert len(_newest_cuts(store, sid)) == 1


def test_a_reply_that_ends_the_view_is_not_cut(store: EventStore) -> None:
    """The newest message stays as it was written: a reply with nothing after it is left
    whole, and the outcome says the view does not fit."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You are a coding agent."), Message.user(REQUEST)])
    store.append(sid, [Message.assistant("THOUGHT: " + "consider the invoice tables " * 500)])
    policy = CondensationPolicy(BUDGET, token_counter=store.token_counter, real_counter=False)
    out = policy.maybe_condense(store, sid)
    assert not out.fits and _newest_cuts(store, sid) == []


def _summary(entries: int) -> str:
    files = "\n".join(f"- billing/module_{i}.py: read, changed" for i in range(entries))
    commands = "\n".join(f"- pytest tests/test_module_{i}.py -q" for i in range(entries))
    return f"## Files\n{files}\n## Commands\n{commands}"


def _condensed_then_newest(store: EventStore, summary: str, task: str) -> str:
    """A head, a condensation with ``summary`` over two old steps, and a newest group."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You are a coding agent."), Message.user(task)])
    store.append(sid, steps(2))
    store.append(
        sid, [Condensation(forgotten_from=3, forgotten_to=6, summary=summary, pinned=[1, 2])]
    )
    call = ToolCallPart(id="n1", name="bash", arguments=json.dumps({"command": "pytest -q"}))
    store.append(sid, [Message.assistant("Running the tests.", tool_calls=[call])])
    store.append(sid, [Message.tool("n1", "3 passed", name="bash")])
    return sid


def test_a_summary_the_tokenizer_puts_over_the_window_is_cut_when_nothing_else_can_go(
    store: EventStore,
) -> None:
    """The stored estimates say the view fits, the tokenizer the policy checks with puts it
    over the window, and nothing more can be forgotten (only the newest group follows the
    summary): the summary in view is cut down so the view fits by the tokenizer, and the
    whole summary is carried for the next condensation."""
    real = _CountsMore()
    summary = _summary(40)
    sid = _condensed_then_newest(store, summary, "Task: " + "word " * 1_600)
    view = store.view(sid)
    window = BUDGET.available + BUDGET.buffer
    assert view.tokens <= BUDGET.available and message_tokens(view.to_messages(), real) > window
    policy = CondensationPolicy(BUDGET, token_counter=store.token_counter, real_counter=real)
    out = policy.maybe_condense(store, sid)
    assert out.error is None and out.fits
    after = store.view(sid)
    assert out.real_tokens == message_tokens(after.to_messages(), real) <= BUDGET.available
    assert after.summary is not None and len(after.summary) < len(summary)
    assert [i.seq for i in after.items] == [1, 2, 8, 9]  # head and newest group, whole
    newest = after.condensation
    assert newest is not None and isinstance(newest.event, Condensation)
    assert newest.event.carried == summary
    assert store.verify(sid).ok


def test_a_floor_over_the_budget_within_its_buffer_leaves_the_summary_out(
    store: EventStore,
) -> None:
    """The pinned head and the newest group are over the budget by less than its buffer,
    and nothing in them may be cut: the summary is left out (the view is then inside the
    model's window) and carried whole for the next condensation."""
    summary = _summary(20)
    sid = _condensed_then_newest(store, summary, "Task: " + "word " * 2_690)
    view = store.view(sid)
    floor = sum(i.tokens for i in view.items)  # the head and the newest group
    assert BUDGET.available < floor <= BUDGET.available + BUDGET.buffer
    policy = CondensationPolicy(BUDGET, token_counter=store.token_counter, real_counter=False)
    out = policy.maybe_condense(store, sid)
    after = store.view(sid)
    assert after.summary is None and out.tokens_after == floor
    newest = after.condensation
    assert newest is not None and isinstance(newest.event, Condensation)
    assert newest.event.carried == summary


def test_a_view_the_tokenizer_puts_over_the_budget_at_the_floor_says_so(
    store: EventStore,
) -> None:
    """The system prompt, the task and a newest call whose arguments nothing may cut
    (they are not a JSON object: no cut of them would still parse) are over the budget
    by the tokenizer though not by the estimates: the outcome says so (``fits`` false,
    the tokenizer's count), and the task stays whole."""
    real = _CountsMore()
    sid = store.create_session().id
    task = "Task: " + "word " * 1_200
    store.append(sid, [Message.system("You are a coding agent."), Message.user(task)])
    body = "data " * 1_400
    store.append(
        sid,
        [Message.assistant("", tool_calls=[ToolCallPart(id="w", name="write", arguments=body)])],
    )
    store.append(sid, [Message.tool("w", "written", name="write")])
    view = store.view(sid)
    assert view.tokens <= BUDGET.available < message_tokens(view.to_messages(), real)
    policy = uncapped_policy(BUDGET, token_counter=store.token_counter, real_counter=real)
    out = policy.maybe_condense(store, sid)
    assert out.error is None and not out.fits
    assert out.real_tokens is not None and out.real_tokens > BUDGET.available
    assert store.view(sid).to_messages()[1]["content"] == task
