"""One oversized tool result: shown as its head and tail, reversibly, before anything
lossier (a prune with ``keep_chars``)."""

from __future__ import annotations

import json

import pytest

from condensers import (
    CondensationPolicy,
    NewestTruncator,
    Pipeline,
    PlanContext,
    ResultTruncator,
)
from condensers.base import apply
from condensers.pruning import shared_cap
from eventstore import (
    ConfigurationError,
    EventStore,
    InvalidEventError,
    Message,
    PartRef,
    Prune,
    ToolCallPart,
)
from eventstore.budget import Budget
from eventstore.views import MAX_NAMED, apply_event, truncated_arguments, truncated_text

BUDGET = Budget(max_input_tokens=8_000, reserved_output=1_000, buffer=200)  # 6,800


def _session(store: EventStore) -> tuple[str, str]:
    """A short task whose newest step read a 20 KB file (about 5,000 tokens)."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Fix parser.py.")])
    big = "".join(f"{i:5d}  line {i} of parser.py\n" for i in range(1_000))
    call = ToolCallPart(id="c1", name="read_file", arguments=json.dumps({"path": "parser.py"}))
    store.append(
        sid, [Message.assistant("Reading it.", [call]), Message.tool("c1", big, name="read_file")]
    )
    return sid, big


def test_an_oversized_newest_result_is_truncated_before_anything_lossier(
    store: EventStore,
) -> None:
    sid, big = _session(store)
    assert store.view(sid).tokens > BUDGET.available  # the newest result alone overflows
    out = CondensationPolicy(BUDGET, token_counter=store.token_counter).maybe_condense(store, sid)
    assert [s.condenser for s in out.steps] == ["truncate_large_results"]  # no summary
    view = store.view(sid)
    assert view.tokens <= BUDGET.available and view.condensation is None
    shown = view.to_messages()[-1]["content"]
    assert shown.startswith("    0  line 0 of parser.py")  # the head
    assert shown.rstrip().endswith("line 999 of parser.py")  # the tail
    assert f'of {len(big):,} characters omitted; recall(ref="4:0")' in shown
    assert store.original(sid, PartRef(seq=4, index=0)).output == big  # reversible
    assert store.verify(sid).ok


def test_a_truncated_view_verifies_and_is_predicted_exactly(store: EventStore) -> None:
    sid, big = _session(store)
    view = store.view(sid)
    ctx = PlanContext(token_counter=store.token_counter)
    proposal = ResultTruncator().plan(view, BUDGET, ctx)
    assert proposal is not None and isinstance(proposal.event, Prune)
    assert proposal.event.keep_chars is not None
    predicted = apply_event(view, proposal.event, store.token_counter)
    apply(store, view, proposal)
    after = store.view(sid)
    assert after.tokens == predicted.tokens
    assert after.to_messages() == predicted.to_messages()
    # A model call recorded on the truncated view is re-derived by verify.
    store.record_llm_call(sid, after, model="gpt-4o-mini")
    report = store.verify(sid)
    assert report.ok and report.llm_calls == 1, report.problems
    # A fork sees the truncation it inherited.
    fork = store.fork(sid, store.head(sid)).id
    assert store.view(fork).to_messages() == after.to_messages()


def test_small_results_and_protected_tools_are_left_alone(store: EventStore) -> None:
    sid, _ = _session(store)
    view = store.view(sid)
    ctx = PlanContext(token_counter=store.token_counter)
    assert ResultTruncator(protected_tools=["read_file"]).plan(view, BUDGET, ctx) is None
    roomy = Budget(max_input_tokens=200_000, reserved_output=1_000)
    assert ResultTruncator().plan(view, roomy, ctx) is None  # under a quarter of the budget


def test_truncated_text_keeps_both_ends() -> None:
    ref = PartRef(seq=9, index=1)
    text = "a" * 600 + "b" * 600
    out = truncated_text(ref, text, 300)
    assert out.startswith("a" * 200) and out.endswith("b" * 100)
    assert "900 of 1,200 characters omitted" in out and 'recall(ref="9:1")' in out
    assert truncated_text(ref, "short", 300) == "short"


def _observe(store: EventStore, sid: str, i: int, output: str) -> None:
    call = ToolCallPart(id=f"r{i}", name="run", arguments=json.dumps({"cmd": f"step {i}"}))
    store.append(
        sid, [Message.assistant(f"Step {i}.", [call]), Message.tool(f"r{i}", output, name="run")]
    )


def test_an_unseen_result_is_capped_on_a_check_under_the_threshold(store: EventStore) -> None:
    """A result the model has not been sent yet, larger than 8% of the room the head
    leaves, is cut before it is first sent: the next turn still extends the previous one."""
    sid = store.create_session().id
    head = "You fix bugs. " + "Follow the rules. " * 583  # about 2,600 tokens of 6,800
    store.append(sid, [Message.system(head), Message.user("Fix parser.py.")])
    policy = CondensationPolicy(BUDGET, token_counter=store.token_counter)
    _observe(store, sid, 0, "ok\n" * 50)
    assert not policy.maybe_condense(store, sid).condensed  # small: left alone
    sent = store.view(sid).to_messages()
    log = "".join(f"{i:4d} test_{i} PASSED\n" for i in range(400))
    _observe(store, sid, 1, log)
    view = store.view(sid)
    room = BUDGET.available - sum(i.tokens for i in view.items if i.pinned)
    assert view.items[-1].tokens > room // 4 and view.tokens <= BUDGET.available
    out = policy.maybe_condense(store, sid)
    assert [s.condenser for s in out.steps] == ["truncate_large_results"]  # nothing lossier
    after = store.view(sid)
    assert after.condensation is None and after.tokens <= BUDGET.available
    newest = after.items[-1]
    assert newest.tokens <= room * 8 // 100 + 60  # the cap, plus the marker line
    messages = after.to_messages()
    assert messages[: len(sent)] == sent  # the cached prefix is untouched
    shown = messages[-1]["content"]
    assert shown.startswith("   0 test_0 PASSED") and "399 test_399 PASSED" in shown
    ref = PartRef(seq=newest.seq, index=0)
    assert f'recall(ref="{ref.seq}:0")' in shown
    assert store.original(sid, ref).output == log  # reversible
    (cap,) = [e.event for e in store.read(sid, kinds=["prune"]) if isinstance(e.event, Prune)]
    assert cap.trigger == "intake"
    assert store.verify(sid).ok


def test_results_already_sent_are_not_capped_on_intake(store: EventStore) -> None:
    """Only what follows the newest assistant message is unseen: once the model replied,
    an earlier result stays as it was sent until a real condensation run."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Fix parser.py.")])
    log = "".join(f"{i:4d} test_{i} PASSED\n" for i in range(700))  # over a quarter
    uncapped = ResultTruncator(fresh_fraction=None)
    policy = CondensationPolicy(BUDGET, Pipeline([uncapped]), token_counter=store.token_counter)
    _observe(store, sid, 0, log)
    assert store.view(sid).items[-1].tokens > BUDGET.available // 4
    assert not policy.maybe_condense(store, sid).condensed  # no cap configured
    store.append(sid, [Message.assistant("All green.")])  # the model has seen it now
    capped = CondensationPolicy(BUDGET, token_counter=store.token_counter)
    out = capped.maybe_condense(store, sid)
    assert not out.condensed and out.skipped == "under_threshold"
    assert store.view(sid).prunes == []


def test_fresh_cap_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="fresh_fraction"):
        ResultTruncator(fresh_fraction=0.0)
    with pytest.raises(ConfigurationError, match="fresh_min_tokens"):
        ResultTruncator(fresh_min_tokens=2)
    assert ResultTruncator().settings()["fresh_fraction"] == 0.08


def test_the_unseen_results_of_one_turn_share_the_cap(store: EventStore) -> None:
    """Parallel calls: the results the model has not seen yet take the fresh cap together.
    A small one keeps what it has; the large ones share what it leaves, so one turn adds
    no more than one large result would."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Fix parser.py.")])
    calls = [ToolCallPart(id=f"p{i}", name="read", arguments="{}") for i in range(3)]
    big = "".join(f"{i:4d} line {i} of the file\n" for i in range(400))
    store.append(
        sid,
        [
            Message.assistant("Reading three files.", calls),
            Message.tool("p0", "small file\n" * 10, name="read"),
            Message.tool("p1", big, name="read"),
            Message.tool("p2", big, name="read"),
        ],
    )
    truncator = ResultTruncator()
    view = store.view(sid)
    cap = truncator.fresh_limit(view, BUDGET)
    assert cap is not None
    small = view.items[-3].tokens
    assert view.items[-1].tokens > cap  # each large one alone is over the cap
    ctx = PlanContext(token_counter=store.token_counter, intake=True)
    proposal = truncator.plan(view, BUDGET, ctx)
    assert proposal is not None
    after = apply_event(view, proposal.event, store.token_counter)
    assert [r.seq for r in proposal.event.targets] == [view.items[-2].seq, view.items[-1].seq]
    assert after.items[-3].tokens == small
    shown = sum(i.tokens for i in after.items[-3:])
    assert shown <= cap + 2 * 60  # the cap, plus each marker line and message overhead
    assert shared_cap([10, 500, 500], 300) == 145
    assert shared_cap([10, 20], 300) == 300
    assert shared_cap([], 300) == 300


def test_a_small_room_gives_the_unseen_results_a_smaller_share(store: EventStore) -> None:
    """A turn adds about the same tokens whatever the budget, so a small room is refilled
    in fewer turns: its unseen results get a smaller share of it (down to
    ``fresh_min_fraction``), and a room of ``fresh_full_room`` or more gets the whole
    ``fresh_fraction``."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Fix parser.py.")])
    view = store.view(sid)
    truncator = ResultTruncator()
    shares = []
    for window in (4_096, 8_192, 12_288, 32_768):
        budget = Budget(window, window // 8, window // 20)
        room = budget.available - view.tokens
        limit = truncator.fresh_limit(view, budget)
        assert limit is not None
        shares.append(limit / room)
    assert shares == sorted(shares) and shares[0] < shares[-1]
    assert shares[0] == pytest.approx(0.05, abs=0.001)  # fresh_min_fraction
    assert shares[-1] == pytest.approx(0.08, abs=0.001)  # fresh_fraction, a large room
    flat = ResultTruncator(fresh_min_fraction=None)
    budget = Budget(4_096, 512, 205)
    assert flat.fresh_limit(view, budget) == int((budget.available - view.tokens) * 0.08)
    with pytest.raises(ConfigurationError, match="fresh_min_fraction"):
        ResultTruncator(fresh_min_fraction=0.1)


def _write_turn(store: EventStore, sid: str, i: int, body: str) -> ToolCallPart:
    """The model writes a file (its contents in the call's arguments); the tool answers."""
    args = json.dumps({"file_path": f"src/module_{i}.py", "content": body})
    call = ToolCallPart(id=f"w{i}", name="write", arguments=args)
    thought = f"Writing src/module_{i}.py. " + "The parser needs a table of states. " * 40
    store.append(sid, [Message.assistant(thought, [call])])
    store.append(sid, [Message.tool(call.id, "written", name="write")])
    return call


def test_the_newest_reply_is_capped_before_it_is_first_sent(store: EventStore) -> None:
    """A reply that writes a 12 KB file, far over 15% of the room: on a check under the
    threshold the file's contents are cut to their start and end (the path whole, the
    arguments still JSON; the short text beside them, under its share, stays whole), the
    next turn extends the previous one, and recall returns the whole call."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Fix parser.py.")])
    policy = CondensationPolicy(BUDGET, token_counter=store.token_counter)
    _write_turn(store, sid, 0, "x = 1\n")
    assert not policy.maybe_condense(store, sid).condensed  # small: left alone
    sent = store.view(sid).to_messages()
    body = "".join(f"STATE_{i} = {i}  # state {i} of the parser\n" for i in range(300))
    call = _write_turn(store, sid, 1, body)
    view = store.view(sid)
    room = BUDGET.available - sum(i.tokens for i in view.items if i.pinned)
    reply = view.items[-2]
    assert reply.tokens > room * 15 // 100 and view.tokens <= BUDGET.available
    out = policy.maybe_condense(store, sid)
    assert [s.condenser for s in out.steps] == ["truncate_newest_text"]  # no rewrite
    after = store.view(sid)
    assert after.condensation is None
    assert after.items[-2].tokens <= room * 15 // 100 + 80  # the cap, plus the marker lines
    messages = after.to_messages()
    assert messages[: len(sent)] == sent  # the cached prefix is untouched
    shown = messages[-2]
    assert shown["content"].startswith("Writing src/module_1.py.")
    assert "characters omitted" not in shown["content"]
    args = json.loads(shown["tool_calls"][0]["function"]["arguments"])  # still JSON
    assert args["file_path"] == "src/module_1.py"
    assert args["content"].startswith("STATE_0 = 0") and "STATE_299 = 299" in args["content"]
    assert f'recall(ref="{reply.seq}:1") returns the whole call' in args["content"]
    assert store.original(sid, PartRef(seq=reply.seq, index=1)) == call  # reversible
    (cut,) = [e.event for e in store.read(sid, kinds=["prune"]) if isinstance(e.event, Prune)]
    assert cut.trigger == "intake" and cut.strategy == "truncate_newest_text"
    assert store.verify(sid).ok
    # The next check leaves the sent reply as it is.
    _write_turn(store, sid, 2, "y = 2\n")
    policy.maybe_condense(store, sid)
    assert store.view(sid).to_messages()[: len(messages)] == messages


def test_a_cut_call_is_predicted_exactly_and_verifies(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Fix parser.py.")])
    _write_turn(store, sid, 0, "z = 0\n" * 2_000)
    view = store.view(sid)
    ctx = PlanContext(token_counter=store.token_counter, intake=True)
    proposal = NewestTruncator().plan(view, BUDGET, ctx)
    assert proposal is not None and isinstance(proposal.event, Prune)
    predicted = apply_event(view, proposal.event, store.token_counter)
    apply(store, view, proposal)
    after = store.view(sid)
    assert after.tokens == predicted.tokens < view.tokens
    assert after.to_messages() == predicted.to_messages()
    store.record_llm_call(sid, after, model="gpt-4o-mini")
    report = store.verify(sid)
    assert report.ok and report.llm_calls == 1, report.problems


def test_truncated_arguments_stay_json_and_keep_short_values() -> None:
    ref = PartRef(seq=7, index=1)
    args = json.dumps(
        {"path": "a/b.py", "edits": [{"old": "o" * 3_000, "new": "n" * 3_000}], "n": 3}
    )
    cut = json.loads(truncated_arguments(ref, args, 1_000))
    assert cut["path"] == "a/b.py" and cut["n"] == 3
    old, new = cut["edits"][0]["old"], cut["edits"][0]["new"]
    assert old.startswith("ooo") and new.endswith("nnn")
    assert len(old) < 700 and len(new) < 700
    assert 'recall(ref="7:1") returns the whole call' in old
    # Short enough, not JSON, or not an object: left as they are.
    assert truncated_arguments(ref, args, len(args)) == args
    assert truncated_arguments(ref, "cat " + "x" * 5_000, 500) == "cat " + "x" * 5_000
    listed = json.dumps(["x" * 5_000])
    assert truncated_arguments(ref, listed, 500) == listed


def test_a_placeholder_prune_of_a_tool_call_is_refused(store: EventStore) -> None:
    """A call stays beside its result: only a truncation (``keep_chars``) may cut it."""
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Fix parser.py.")])
    _write_turn(store, sid, 0, "z = 0\n" * 200)
    seq = store.head(sid) - 1
    with pytest.raises(InvalidEventError, match="not a stored tool result"):
        store.append(sid, [Prune(targets=[PartRef(seq=seq, index=1)])])
    store.append(sid, [Prune(targets=[PartRef(seq=seq, index=1)], keep_chars=200)])
    shown = store.view(sid).to_messages()[-2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(shown)["file_path"] == "src/module_0.py"


def test_newest_reply_cap_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError):
        NewestTruncator(fresh_fraction=0)
    assert NewestTruncator(fresh_fraction=None).settings()["fresh_fraction"] is None


def test_a_cut_call_names_the_files_its_omitted_part_mentions() -> None:
    """A patch cut to its start and end still says which files it touched, so the model
    (and a reader of the view) knows where to look; a file the kept ends show is not
    named twice."""
    ref = PartRef(seq=3, index=0)
    files = [f"src/pkg/module_{i}.py" for i in range(12)]
    patch = "*** Begin Patch\n*** Update File: README.md\n" + "".join(
        f"*** Update File: {f}\n" + "+x = 1\n" * 40 for f in files
    )
    args = json.dumps({"input": patch})
    cut = json.loads(truncated_arguments(ref, args, 600))["input"]
    mark = next(line for line in cut.splitlines() if "characters omitted" in line)
    assert "README.md" in cut.split(mark)[0] and "README.md" not in mark  # kept: not named
    named = [f for f in files if f in mark]
    assert len(named) == MAX_NAMED and "and " in mark and "more;" in mark
