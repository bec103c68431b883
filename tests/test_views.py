"""Views: O(tail) materialization, exact time travel, rendering, audit, budgets, forks."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from conftest import skip_on_citus
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import (
    Budget,
    BudgetError,
    Condensation,
    EventStore,
    InvalidEventError,
    LLMCall,
    Message,
    NotFoundError,
    PartRef,
    Prune,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ViewOptions,
    calibrated_tokens,
    record_llm_call,
)
from eventstore.views import (
    DEFAULT_INTERRUPTED,
    DEFAULT_PLACEHOLDER,
    RECALL_PLACEHOLDER,
    RENDER_VERSION,
)
from tests.conftest import corpus_files


@pytest.fixture
def store(api_store: Any) -> Any:
    """Each test here runs over (sqlite, postgres) x (sync, async): the async store is
    driven through the same calls by ``BlockingAsyncStore``."""
    return api_store


def _turn(i: int, size: int = 400) -> list[Message]:
    call = ToolCallPart(
        id=f"call_{i}", name="read_file", arguments=json.dumps({"path": f"f{i}.py"})
    )
    return [
        Message.user(f"step {i}: please look at f{i}.py"),
        Message.assistant(f"reading f{i}.py", [call]),
        Message.tool(f"call_{i}", f"contents of f{i}.py " + "x" * size, name="read_file"),
    ]


def _session(store: EventStore, turns: int) -> str:
    sid = store.create_session(title="t").id
    store.append(sid, [Message.system("You are a coding agent."), Message.user("Fix the bug.")])
    for i in range(turns):
        store.append(sid, _turn(i))
    return sid


# --------------------------------------------------------------------------- basics


def test_view_without_condensation_is_the_whole_conversation(store: EventStore) -> None:
    sid = _session(store, 3)
    view = store.view(sid)
    msgs = view.to_messages()
    assert view.seq == 11
    assert [m["role"] for m in msgs] == ["system", "user"] + ["user", "assistant", "tool"] * 3
    # Every user message before the first assistant action is pinned.
    assert [i.pinned for i in view.items][:4] == [True, True, True, False]
    assert msgs[3]["tool_calls"][0]["function"]["arguments"] == '{"path": "f0.py"}'
    assert view.tokens == sum(i.tokens for i in view.items)
    assert view.condensation is None and view.summary is None


def test_condensation_replaces_forgotten_range_with_summary(store: EventStore) -> None:
    sid = _session(store, 6)
    head = store.head(sid)
    seq = store.append(
        sid,
        [Condensation(forgotten_from=3, forgotten_to=11, summary="Read f0..f2.", pinned=[1, 2])],
    )[0]
    view = store.view(sid)
    msgs = view.to_messages()
    assert view.condensation is not None and view.condensation.seq == seq
    assert msgs[0]["role"] == "system" and msgs[1]["content"] == "Fix the bug."
    assert msgs[2]["content"].endswith("Read f0..f2.")
    assert [i.seq for i in view.items] == [1, 2] + list(range(12, head + 1))
    assert view.tokens < store.view(sid, as_of=head).tokens
    # The hidden events are still there, and returned by reference.
    hidden = list(store.forgotten(sid, seq))
    assert [e.seq for e in hidden] == list(range(3, 12))


def test_pruned_parts_render_as_placeholder_and_original_is_readable(store: EventStore) -> None:
    sid = _session(store, 3)
    before = store.view(sid)
    prune_seq = store.append(sid, [Prune(targets=[PartRef(seq=5, index=0)], tokens_freed=100)])[0]
    view = store.view(sid)
    tool_msgs = [m for m in view.to_messages() if m["role"] == "tool"]
    assert tool_msgs[0]["content"] == RECALL_PLACEHOLDER.replace("{seq}", "5").replace(
        "{index}", "0"
    )
    assert tool_msgs[1]["content"].startswith("contents of f1.py")
    assert view.refs() == [PartRef(seq=5, index=0)]
    assert view.prunes == [prune_seq]
    assert view.tokens < before.tokens
    original = store.original(sid, PartRef(seq=5, index=0))
    assert isinstance(original, ToolResultPart) and original.output.startswith("contents of f0.py")
    # Time travel: before the prune, the full output shows.
    assert store.view(sid, as_of=prune_seq - 1).to_messages() == before.to_messages()


def test_placeholder_is_configurable_with_reference(store: EventStore) -> None:
    sid = _session(store, 1)
    store.append(sid, [Prune(targets=[PartRef(seq=5, index=0)])])
    opts = ViewOptions(placeholder="[cleared: see {seq}/{index}]")
    tool = [m for m in store.view(sid, options=opts).to_messages() if m["role"] == "tool"]
    assert tool[0]["content"] == "[cleared: see 5/0]"


def test_no_view_option_sends_a_compacted_part_s_original(store: EventStore) -> None:
    import itertools

    from eventstore.chat import from_openai

    secret = "SECRET-OUTPUT-7f3a"
    sid = store.create_session().id
    call = {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
    raw_tool = {
        # A list of two texts renders differently from the stored single output, so the
        # verbatim original is kept in Message.extra (with a private key alongside).
        "role": "tool",
        "tool_call_id": "c1",
        "content": [{"type": "text", "text": secret}, {"type": "text", "text": secret}],
        "agent": "main",
    }
    store.append(
        sid,
        [
            Message.system("sys"),
            Message.user("task"),
            from_openai({"role": "assistant", "content": None, "tool_calls": [call]}),
            from_openai(raw_tool),
            Message.user("next"),
        ],
    )
    full = store.view(sid, options=ViewOptions(keep_extra=True)).to_messages()
    assert secret in json.dumps(full)  # before the prune the original is sent
    store.append(sid, [Prune(targets=[PartRef(seq=4, index=0)])])
    flags = [True, False]
    for keep, pin_s, pin_u, placeholder in itertools.product(
        flags, flags, flags, [DEFAULT_PLACEHOLDER, "[gone {seq}/{index}]", "{literal} {x}"]
    ):
        options = ViewOptions(
            keep_extra=keep, pin_system=pin_s, pin_first_user=pin_u, placeholder=placeholder
        )
        view = store.view(sid, options=options)
        sent = json.dumps(view.to_messages())
        assert secret not in sent, options
        assert store.view(sid, as_of=5, options=options).to_messages() != view.to_messages()


def test_placeholder_with_other_braces_is_literal(store: EventStore) -> None:
    sid = _session(store, 1)
    store.append(sid, [Prune(targets=[PartRef(seq=5, index=0)])])
    opts = ViewOptions(placeholder='{"pruned": {seq}, "x": {}}')
    tool = [m for m in store.view(sid, options=opts).to_messages() if m["role"] == "tool"]
    assert tool[0]["content"] == '{"pruned": 5, "x": {}}'


def test_as_of_out_of_range_is_rejected(store: EventStore) -> None:
    sid = _session(store, 1)
    with pytest.raises(InvalidEventError, match="as_of"):
        store.view(sid, as_of=99)


# --------------------------------------------------------------------------- O(tail)


def _big_session(store: EventStore, n_events: int, tail: int) -> str:
    """``n_events`` events (message + tool pairs) with a condensation ``tail`` events back."""
    sid = store.create_session().id
    batch: list[Any] = [Message.system("sys"), Message.user("task")]
    i = 0
    written = 0
    while written + len(batch) < n_events - tail:
        batch.extend(_turn(i, size=50))
        i += 1
        if len(batch) >= 900:
            written += len(store.append(sid, batch))
            batch = []
    written += len(store.append(sid, batch)) if batch else 0
    store.append(
        sid,
        [
            Condensation(
                forgotten_from=3, forgotten_to=written, summary="earlier work", pinned=[1, 2]
            )
        ],
    )
    batch = []
    while len(batch) < tail - 1:
        batch.extend(_turn(i, size=50))
        i += 1
    store.append(sid, batch[: tail - 1])
    return sid


def test_view_cost_follows_the_tail_not_the_session(store: EventStore, backend: str) -> None:
    big = 100_000 if backend == "sqlite" else 30_000
    small_sid = _big_session(store, 1_000, 200)
    big_sid = _big_session(store, big, 200)
    assert store.head(big_sid) >= big - 5
    small, large = store.view(small_sid), store.view(big_sid)
    assert len(small.items) == len(large.items)
    # Rows fetched: the condensation probe, the pinned head, the tail's events and parts.
    assert large.rows_read == small.rows_read
    assert large.rows_read < 1_000
    assert [i.message.role for i in small.items] == [i.message.role for i in large.items]


# --------------------------------------------------------------------------- time travel


_op = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 200)),
    st.tuples(st.just("call"), st.integers(1, 3)),
    st.tuples(st.just("result"), st.integers(0, 5)),
    st.tuples(st.just("prune"), st.integers(0, 1000)),
    st.tuples(st.just("condense"), st.integers(0, 1000)),
    st.tuples(st.just("noise"), st.integers(0, 1)),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_op, min_size=1, max_size=30))
def test_time_travel_is_exact(store: EventStore, ops: list[tuple[str, int]]) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.system("sys"), Message.user("first")])
    pending: list[str] = []
    results: list[PartRef] = []
    n_calls = 0
    last_cond: int | None = None
    snapshots: dict[int, tuple[list[dict[str, Any]], int, str]] = {}

    def snap() -> None:
        v = store.view(sid)
        snapshots[v.seq] = (v.to_messages(), v.tokens, v.fingerprint())

    snap()
    for kind, arg in ops:
        head = store.head(sid)
        if kind == "user":
            store.append(sid, [Message.user("u" * arg)])
        elif kind == "call":
            calls = []
            for _ in range(arg):
                n_calls += 1
                calls.append(ToolCallPart(id=f"c{n_calls}", name="t", arguments="{}"))
                pending.append(f"c{n_calls}")
            store.append(sid, [Message.assistant("calling", calls)])
        elif kind == "result" and pending:
            cid = pending.pop(arg % len(pending))
            seq = store.append(sid, [Message.tool(cid, "out " * 30)])[0]
            results.append(PartRef(seq=seq, index=0))
        elif kind == "prune" and results:
            store.append(sid, [Prune(targets=[results[arg % len(results)]])])
        elif kind == "condense" and head > 3:
            to = 3 + arg % (head - 2)
            store.append(
                sid,
                [
                    Condensation(
                        forgotten_from=3,
                        forgotten_to=min(to, head),
                        summary=f"summary at {head}",
                        pinned=[1, 2],
                        supersedes=last_cond,
                    )
                ],
            )
            last_cond = head + 1
        elif kind == "noise":
            store.append(sid, [LLMCall(model="m", view_seq=head, fingerprint="0" * 64)])
        else:
            continue
        snap()
    for seq, (msgs, tokens, fp) in snapshots.items():
        view = store.view(sid, as_of=seq)
        assert view.to_messages() == msgs
        assert view.tokens == tokens
        assert view.fingerprint() == fp


# --------------------------------------------------------------------------- rendering


def _parallel_out_of_order(store: EventStore) -> str:
    sid = store.create_session().id
    calls = [ToolCallPart(id=f"p{i}", name="grep", arguments=f'{{"q": {i}}}') for i in range(3)]
    store.append(
        sid,
        [
            Message.user("search"),
            Message.assistant("", calls),
            Message.tool("p2", "r2"),
            Message.user("interjection"),
            Message.tool("p0", "r0"),
            Message.tool("p1", "r1"),
        ],
    )
    return sid


def test_parallel_calls_stay_together_and_results_follow_in_arrival_order(
    store: EventStore,
) -> None:
    sid = _parallel_out_of_order(store)
    msgs = store.view(sid).to_messages()
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool", "tool", "user"]
    assert msgs[1]["content"] is None  # as providers send a tool-call-only message
    # In the order they were appended: the newest result is the last of its group.
    assert [m["tool_call_id"] for m in msgs[2:5]] == ["p2", "p0", "p1"]
    assert [m["content"] for m in msgs[2:5]] == ["r2", "r0", "r1"]
    # Before version 4: in call order.
    old = store.view(sid, options=ViewOptions(render_version=3)).to_messages()
    assert [m["tool_call_id"] for m in old[2:5]] == ["p0", "p1", "p2"]
    assert old[:2] == msgs[:2] and old[5:] == msgs[5:]


def test_calls_recorded_before_arrival_order_still_verify(store: EventStore) -> None:
    sid = _parallel_out_of_order(store)
    old = store.view(sid, options=ViewOptions(render_version=3))
    record_llm_call(store, sid, old, None, model="m")  # recorded in call order
    record_llm_call(store, sid, store.view(sid), None, model="m")
    calls = [e.event for e in store.read(sid, kinds=["llm_call"])]
    assert calls[0].fingerprint != calls[1].fingerprint  # type: ignore[union-attr]
    report = store.verify(sid)
    assert report.ok and report.llm_calls == 2, report.problems


def test_unanswered_call_gets_an_explicit_interrupted_result(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(
        sid,
        [
            Message.user("go"),
            Message.assistant("", [ToolCallPart(id="lost", name="bash", arguments="{}")]),
            Message.user("are you there?"),
        ],
    )
    view = store.view(sid)
    msgs = view.to_messages()
    assert msgs[2]["role"] == "tool" and msgs[2]["tool_call_id"] == "lost"
    assert msgs[2]["content"] == DEFAULT_INTERRUPTED
    assert msgs[3]["content"] == "are you there?"
    assert view.extra_tokens > 0


def test_orphan_result_is_left_out_of_the_view_but_kept_in_the_log(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.user("go"), Message.tool("ghost", "no call"), Message.user("next")])
    msgs = store.view(sid).to_messages()
    assert all(m["role"] != "tool" for m in msgs)
    assert len(list(store.read(sid))) == 3


def test_condensation_never_leaves_a_result_without_its_call(store: EventStore) -> None:
    sid = _session(store, 3)
    # A careless cut between a call (seq 4) and its result (seq 5).
    store.append(sid, [Condensation(forgotten_from=3, forgotten_to=4, summary="s", pinned=[1, 2])])
    msgs = store.view(sid).to_messages()
    ids_called = {c["id"] for m in msgs for c in m.get("tool_calls") or []}
    assert all(m["tool_call_id"] in ids_called for m in msgs if m["role"] == "tool")


def test_reasoning_round_trips_in_litellm_form(store: EventStore) -> None:
    sid = store.create_session().id
    reply = Message(
        role="assistant",
        parts=[
            ReasoningPart(text="think", signature="sig=="),
            ReasoningPart(redacted_data="opaque"),
            TextPart(text="answer"),
        ],
    )
    store.append(sid, [Message.user("q"), reply])
    msg = store.view(sid).to_messages()[1]
    blocks = msg["thinking_blocks"]
    assert blocks[0]["thinking"] == "think" and blocks[0]["signature"] == "sig=="
    assert blocks[1]["type"] == "redacted_thinking" and blocks[1]["data"] == "opaque"
    assert msg["content"] == "answer"


def test_swe_agent_histories_render_back_unchanged(store: EventStore) -> None:
    from eventstore.chat import from_openai, to_openai

    files = corpus_files("swe-agent/**/*.traj")
    if not files:
        pytest.skip("corpus not present")
    for path in files:
        history = json.loads(path.read_text())["history"]
        sid = store.create_session(title=path.name).id
        messages = [from_openai(m) for m in history]
        store.append(sid, messages)
        # Exactly as stored, private keys included, when asked for ...
        exact = store.view(sid, options=ViewOptions(keep_extra=True)).to_messages()
        assert exact == history, path.name
        # ... and provider-clean by default: only the chat format's own fields.
        rendered = store.view(sid).to_messages()
        assert rendered == [d for m in messages for d in to_openai(m, extra=False)]
        standard = {"role", "content", "name", "tool_calls", "tool_call_id"}
        for got, raw in zip(rendered, history, strict=True):
            assert set(got) <= standard, path.name
            assert got["role"] == raw["role"]
            assert got.get("content") == raw.get("content"), path.name
            if raw.get("tool_calls"):
                assert got["tool_calls"] == raw["tool_calls"]


# --------------------------------------------------------------------------- audit


def _mock_reply(content: str = "done", model: str = "gpt-4o") -> Any:
    from eventstore.llm import import_litellm

    litellm = import_litellm()
    return litellm.completion(
        model=model, messages=[{"role": "user", "content": "x"}], mock_response=content
    )


def test_record_llm_call_and_verify_detects_a_mismatch(store: EventStore) -> None:
    sid = _session(store, 2)
    view = store.view(sid)
    reply = _mock_reply()
    seq = record_llm_call(store, sid, view, reply, model="gpt-4o", latency_ms=12.5)
    call = next(iter(store.read(sid, seq, seq))).event
    assert isinstance(call, LLMCall)
    assert call.view_seq == view.seq and call.fingerprint == view.fingerprint()
    assert call.usage is not None and call.usage.prompt_tokens is not None
    answer = next(iter(store.read(sid, seq + 1, seq + 1))).event
    assert isinstance(answer, Message) and answer.role == "assistant" and answer.text == "done"
    report = store.verify(sid)
    assert report.ok and report.llm_calls == 1
    store.append(sid, [LLMCall(model="gpt-4o", view_seq=view.seq, fingerprint="f" * 64)])
    bad = store.verify(sid)
    assert not bad.ok and bad.llm_calls == 2 and "renders to" in bad.problems[0]


def test_unpriced_model_records_null_cost(store: EventStore) -> None:
    sid = _session(store, 1)
    reply = _mock_reply(model="openai/not-a-priced-model")
    seq = record_llm_call(store, sid, store.view(sid), reply, model="openai/not-a-priced-model")
    call = next(iter(store.read(sid, seq, seq))).event
    assert isinstance(call, LLMCall) and call.cost is None


# --------------------------------------------------------------------------- budgets


def test_budget_from_known_model_override_and_unmapped_model() -> None:
    b = Budget.for_model("gpt-4o")
    assert b.max_input_tokens == 128_000
    assert b.available == b.max_input_tokens - b.reserved_output - b.buffer
    o = Budget.for_model("gpt-4o", max_input_tokens=10_000, reserved_output=1_000, buffer=500)
    assert o.available == 8_500
    with pytest.warns(UserWarning, match="not in litellm's model map"):
        unknown = Budget.for_model(f"unknown-provider/model-{uuid.uuid4().hex}")
    assert unknown.max_input_tokens == 4096
    assert (
        Budget.for_model("custom/x", max_input_tokens=4096, reserved_output=0).max_input_tokens
        == 4096
    )
    with pytest.raises(BudgetError):
        Budget(max_input_tokens=100, reserved_output=100)


def test_budget_for_registered_local_model() -> None:
    from eventstore.llm import import_litellm

    litellm = import_litellm()
    name = f"local-{uuid.uuid4().hex[:8]}"
    litellm.register_model(
        {
            name: {
                "max_input_tokens": 2048,
                "max_output_tokens": 256,
                "input_cost_per_token": 0,
                "output_cost_per_token": 0,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
    )
    b = Budget.for_model(name)
    assert (b.max_input_tokens, b.reserved_output) == (2048, 256)


def test_calibration_uses_reported_prompt_tokens(store: EventStore) -> None:
    sid = _session(store, 2)
    view = store.view(sid)
    assert calibrated_tokens(store, view) == view.tokens
    reply = _mock_reply()
    # litellm's mock reports a fixed 10 prompt tokens; a real provider's count is close to
    # the estimate (one far off it is ignored: see test_implausible_usage_is_not_trusted).
    reply.usage.prompt_tokens = view.tokens * 6 // 5
    record_llm_call(store, sid, view, reply, model="gpt-4o")
    store.append(sid, _turn(99))
    later = store.view(sid)
    reported = reply.usage.prompt_tokens
    added = sum(i.tokens for i in later.items if i.seq > view.seq)
    assert calibrated_tokens(store, later) == reported + added


# --------------------------------------------------------------------------- forks


def test_fork_shares_prefix_and_isolates_appends_and_prunes(store: EventStore) -> None:
    sid = _session(store, 3)  # seqs 1..11; results at 5, 8, 11
    parent_at_8 = store.view(sid, as_of=8).to_messages()
    fork = store.fork(sid, 8)
    assert store.view(fork.id).to_messages() == parent_at_8
    store.append(fork.id, [Message.user("fork only")], expected_seq=8)
    store.append(sid, [Prune(targets=[PartRef(seq=5, index=0)])])  # parent, after the fork
    fork_msgs = store.view(fork.id).to_messages()
    assert fork_msgs[-1]["content"] == "fork only"
    assert "content cleared" not in json.dumps(fork_msgs)  # the parent's later prune
    store.append(fork.id, [Prune(targets=[PartRef(seq=8, index=0)])])  # fork prunes inherited
    assert "content cleared" in json.dumps(store.view(fork.id).to_messages())
    parent_tools = [m for m in store.view(sid).to_messages() if m["role"] == "tool"]
    assert parent_tools[1]["content"].startswith("contents of f1.py")  # parent untouched
    assert store.view(fork.id, as_of=8).to_messages() == parent_at_8
    assert store.verify(fork.id).ok


def test_fork_of_fork(store: EventStore) -> None:
    sid = _session(store, 3)
    f1 = store.fork(sid, 8)
    store.append(f1.id, _turn(50))  # 9..11 in f1
    f2 = store.fork(f1.id, 10)
    store.append(f2.id, [Message.user("grandchild")])
    seqs = [(e.session_id, e.seq) for e in store.read(f2.id)]
    assert seqs == [(sid, s) for s in range(1, 9)] + [(f1.id, 9), (f1.id, 10), (f2.id, 11)]
    msgs = store.view(f2.id).to_messages()
    assert msgs[-1]["content"] == "grandchild"
    # f1's call at seq 10 is inherited, its result (f1's seq 11) is not: interrupted.
    assert msgs[-3]["role"] == "assistant" and msgs[-3]["tool_calls"][0]["id"] == "call_50"
    assert msgs[-2]["role"] == "tool" and msgs[-2]["content"] == DEFAULT_INTERRUPTED
    assert store.view(f2.id).items[-2].seq == 10
    assert store.verify(f2.id).ok
    assert store.head(sid) == 11 and store.head(f1.id) == 11


def test_calls_recorded_before_null_content_still_verify(store: EventStore) -> None:
    from eventstore import fingerprint

    sid = store.create_session().id
    call = ToolCallPart(id="c1", name="ls", arguments="{}")
    store.append(
        sid,
        [Message.system("s"), Message.user("u"), Message.assistant(None, [call]),
         Message.tool("c1", "out")],
    )  # fmt: skip
    view = store.view(sid)
    now = view.to_messages()
    assert now[2]["content"] is None  # current rendering: as providers send it
    old = store.view(sid, options=ViewOptions(render_version=1)).to_messages()
    assert old[2]["content"] == "" and old[:2] == now[:2]
    # A call recorded by the first release: no render_version, fingerprint of "" content.
    legacy = LLMCall(model="m", view_seq=view.seq, fingerprint=fingerprint(old), render_options={})
    store.append(sid, [legacy])
    record_llm_call(store, sid, store.view(sid), None, model="m")
    report = store.verify(sid)
    assert report.ok and report.llm_calls == 2, report.problems
    recorded = [e.event for e in store.read(sid, kinds=["llm_call"])]
    assert recorded[-1].render_options == {"render_version": RENDER_VERSION}  # type: ignore[union-attr]


# --------------------------------------------------------------------------- one query


def busy_lineage(store: EventStore) -> list[str]:
    """A session and two nested forks with everything a view reads: pins (one not a
    message, one after the forgotten range), prunes of own and inherited parts, requests,
    breaker events (and customs that only mention one), model calls, lone surrogates."""
    from eventstore import CondensationRequest, Custom

    def call(i: str) -> Message:
        return Message.assistant("look", tool_calls=[ToolCallPart(id=i, name="ls")])

    sid = store.create_session().id
    store.append(sid, [Message.system("sys"), Message.user("task \udcff")])
    store.append(sid, [call("c1"), Message.tool("c1", "out")])
    store.append(sid, [Custom(name="note", data={"x": '"name":"condenser.circuit"'})])
    store.append(sid, [Prune(targets=[PartRef(seq=4, index=0)])])
    store.append(sid, [call("c2"), Message.tool("c2", "out2 \udcfe")])
    store.append(
        sid, [Condensation(forgotten_from=3, forgotten_to=4, summary="s", pinned=[1, 2, 5, 8])]
    )
    store.append(sid, [Message.user("after"), CondensationRequest(focus="f")])
    store.append(sid, [Custom(name="condenser.circuit.open", data={}), Custom(name="later")])
    store.append(sid, [LLMCall(model="m", view_seq=11, fingerprint="f")])
    fork = store.fork(sid, 12).id
    store.append(fork, [Prune(targets=[PartRef(seq=8, index=0)])])
    store.append(fork, [call("c3"), Message.tool("c3", "fork out")])
    store.append(fork, [Custom(name="note", data={"name": "condenser.circuit.fake"})])
    grand = store.fork(fork, 15).id
    store.append(grand, [Condensation(forgotten_from=3, forgotten_to=10, pinned=[2, 13])])
    store.append(grand, [Message.tool("c9", "orphan")])
    store.append(grand, [Prune(targets=[PartRef(seq=15, index=0), PartRef(seq=17, index=0)])])
    # After the fork point, so only the root's views see it: a pinned and a tail result
    # truncated instead of hidden.
    store.append(sid, [call("c4"), Message.tool("c4", "out4 " * 40)])
    head = store.head(sid)
    targets = [PartRef(seq=8, index=0), PartRef(seq=head, index=0)]
    store.append(sid, [Prune(targets=targets, keep_chars=64)])
    # Then the tail's truncated result hidden whole (its parts row keeps the first stamp).
    store.append(sid, [call("c5"), Message.tool("c5", "out5")])
    store.append(sid, [Prune(targets=[PartRef(seq=head, index=0)])])
    return [sid, fork, grand]


@skip_on_citus("a distributed store reads a fork's view statement by statement")
def test_the_one_query_reads_what_the_statements_read(store: EventStore) -> None:
    # The combined statement and the statement-by-statement reads give the same rows for
    # every session of a lineage at every seq (and the combined one is the path taken).
    from eventstore._sql import lineage_and_head
    from eventstore._sql.view_rows import _by_statements, _in_one_query

    for sid in busy_lineage(store):
        with store.engine.connect() as conn:
            segments, head = lineage_and_head(conn, store.tenant, sid)
            for seq in range(1, head + 1):
                one = _in_one_query(conn, store.tenant, sid, segments, seq, True)
                assert one is not None
                assert one == _by_statements(conn, store.tenant, sid, segments, seq, expand=True)


def test_the_statement_alone_reads_what_the_lineage_read_does(store: EventStore) -> None:
    # Outside a transaction, one statement that also reads the session row and the
    # truncating prunes gives the rows the lineage-aware read gives, at every seq and at
    # the head; a fork is left to that read (and remembered, so it is not asked again).
    from eventstore._sql.view_rows import view_rows, view_rows_at_once

    root, fork, grand = busy_lineage(store)
    forks: set[str] = set()
    with store.engine.connect() as conn:
        head = store.head(root)
        for as_of in [*range(1, head + 1), None]:
            alone = view_rows_at_once(conn, store.tenant, root, as_of, expand=True, forks=forks)
            assert alone is not None
            assert alone == view_rows(conn, store.tenant, root, as_of, expand=True)
        assert alone.truncations == {head - 3: 64} and alone.seq == head
        assert alone.placeholders[head] == [(head - 4, 0)]
        for sid in (fork, grand):
            assert view_rows_at_once(conn, store.tenant, sid, None, forks=forks) is None
        assert forks == {fork, grand}
        for bad in (0, -1):
            assert view_rows_at_once(conn, store.tenant, root, bad, forks=forks) is None
        with pytest.raises(InvalidEventError, match=f"outside 0..{head}"):
            view_rows_at_once(conn, store.tenant, root, head + 1, forks=forks)
        with pytest.raises(NotFoundError):
            view_rows_at_once(conn, "another tenant", root, None, forks=forks)
    assert store.view(fork).to_messages() == store.view(fork).to_messages()
    if store.dialect == "postgresql":
        # The statement ran in autocommit; the pooled connection is handed back as it was.
        store.view(root)
        with store.engine.connect() as conn:
            assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
    store.delete_session(root)
    with pytest.raises(NotFoundError):
        store.view(root)


@skip_on_citus("the plan Postgres keeps for the plain statement; Citus plans each view")
def test_the_kept_postgres_plan_reads_the_tail_not_the_session(store: EventStore) -> None:
    # Postgres keeps one plan for the prepared view statement, made without the values. It
    # must still probe the pins, the tail and the truncating prunes, never scan the
    # session: count the rows every scan of events and parts touched in that plan.
    if store.dialect != "postgresql":
        pytest.skip("plans made without the values are a Postgres matter")
    from eventstore._sql.view_rows import _BOUND, _SESSION, _TENANT, _alone_statement

    sid = store.create_session().id
    batch: list[Any] = [Message.system("sys"), Message.user("task")]
    for i in range(1, 400):
        call = ToolCallPart(id=f"c{i}", name="ls")
        batch += [Message.user(f"step {i}"), Message.assistant("ok", [call])]
        batch += [Message.tool(f"c{i}", "out " * 50)]
    store.append(sid, batch)
    head = store.head(sid)
    store.append(sid, [Condensation(forgotten_from=3, forgotten_to=head - 30, pinned=[1, 2])])
    store.append(sid, [Prune(targets=[PartRef(seq=head - 3, index=0)], keep_chars=64)])
    sql, template = _alone_statement(True, "%s")
    values = {_SESSION: sid, _TENANT: store.tenant, _BOUND: store.head(sid)}
    with store.engine.connect() as conn:
        cur = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cur.execute("SET plan_cache_mode = force_generic_plan")
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, [values.get(p, p) for p in template])
        plan = cur.fetchone()[0][0]["Plan"]
        conn.rollback()

    def touched(node: dict[str, Any]) -> int:
        own = 0
        if node.get("Relation Name") in ("events", "parts"):
            own = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        return own + sum(touched(child) for child in node.get("Plans", ()))

    assert touched(plan) < 200  # the tail's ~30 events and their parts, 2 pins, 1 prune


def test_a_condensation_the_query_misreads_is_read_statement_by_statement(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Should the query read a condensation's range or pins differently from its decoded
    # payload (one written some other way), the check after it rereads statement by
    # statement, and the view is the same.
    from eventstore._sql import lineage_and_head
    from eventstore._sql import view_rows as _view_rows

    sid = store.create_session().id
    store.append(sid, [Message.system("sys"), Message.user("a"), Message.user("b")])
    store.append(sid, [Condensation(forgotten_from=2, forgotten_to=2, pinned=[1])])
    before = store.view(sid).to_messages()
    for wrong in (
        {"_LITE_FORGOTTEN_TO": "NULL", "_PG_FORGOTTEN_TO": "NULL"},
        {"_LITE_PINNED": "'[2]'", "_PG_PINNED": "'2'"},
    ):
        with monkeypatch.context() as m:
            for name, expr in wrong.items():
                m.setattr(_view_rows, name, expr)
            # The statement built here, not a function `db distribute` stored on Citus.
            m.setattr(_view_rows, "routes_views", lambda conn: False)
            _view_rows._alone_statement.cache_clear()  # built again with the wrong reading
            with store.engine.connect() as conn:
                segments, head = lineage_and_head(conn, store.tenant, sid)
                assert (
                    _view_rows._in_one_query(conn, store.tenant, sid, segments, head, False) is None
                )
                alone = _view_rows.view_rows_at_once(conn, store.tenant, sid, None, forks=set())
                assert alone is None
            assert store.view(sid).to_messages() == before
        _view_rows._alone_statement.cache_clear()


def test_provider_items_the_view_leaves_out_take_no_room(store: EventStore) -> None:
    from eventstore import ProviderPart

    sid = store.create_session().id
    item = ProviderPart(provider="openai", item={"type": "reasoning", "encrypted": "e" * 4_000})
    call = ToolCallPart(id="c1", name="shell", arguments='{"cmd": "ls"}')
    store.append(
        sid,
        [
            Message.user("go"),
            Message(role="assistant", parts=[item, call]),
            Message.tool("c1", "a.py"),
            Message(role="assistant", parts=[item]),
        ],
    )
    plain = store.view(sid)
    assert len(plain.to_messages()) == 3  # the message of the item alone is not sent
    assert plain.tokens < 100  # neither item is
    openai = store.view(sid, options=ViewOptions(provider="openai"))
    assert len(openai.to_messages()) == 4
    assert openai.tokens > plain.tokens + 2 * 900  # sent back to the provider that made it
