"""A message's payload built from its fields is byte for byte the general path's.

``codec._payload`` writes a message whose fields hold exactly their annotated types from
the fields themselves (``codec._message_plain``) instead of dumping it through the
serializer and sorting the dump. Payloads are hashed into the chain, so the two must never
differ by one byte, nor in what they raise or warn. ``_reference_payload`` below is the
general path, unchanged; every test holds ``_payload`` to it, and the well-formed cases
also to ``json.dumps`` of the union's dump.
"""

from __future__ import annotations

import json
import warnings
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import corpus_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import codec
from eventstore.codec import (
    _COLUMNS,
    _EVENT_CLASSES,
    EVENT_ADAPTER,
    _message_plain,
    _payload,
    canonical_dumps,
    canonical_json_bytes,
    encode_event,
)
from eventstore.errors import InvalidEventError
from eventstore.events import (
    FilePart,
    Message,
    ProviderPart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from eventstore.importers import load_transcripts
from eventstore.tokens import HeuristicTokenCounter

# Every test here runs with each writer of plain data (orjson, pydantic_core.to_json).
pytestmark = pytest.mark.usefixtures("plain_encoder")


def _reference_payload(event: Any) -> tuple[str, int]:
    """``codec._payload`` as it is for every event the message fast path leaves alone."""
    if type(event) in _EVENT_CLASSES:
        data = event.__pydantic_serializer__.to_python(
            event, mode="json", exclude_none=True, exclude=_COLUMNS
        )
    else:
        data = EVENT_ADAPTER.dump_python(event, mode="json", exclude_none=True, exclude=_COLUMNS)
    raw = canonical_json_bytes(data)
    return raw.decode("utf-8"), len(raw)


def _outcome(fn: Any, event: Any) -> tuple[Any, list[str]]:
    """What ``fn(event)`` returns (or raises), and the warnings it gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: Any = fn(event)
        except Exception as exc:  # compared, not swallowed
            result = (type(exc), str(exc))
    return result, [str(w.message) for w in caught]


def _assert_same(event: Any) -> tuple[str, int]:
    got = _outcome(_payload, event)
    assert got == _outcome(_reference_payload, event)
    if isinstance(got[0], tuple) and isinstance(got[0][0], str):
        assert got[0][1] == len(got[0][0].encode("utf-8"))
        assert _outcome(encode_event, event) == (got[0][0], got[1])
    return got[0]


# --------------------------------------------------------------------------- strategies

_ODD = ["", " ", '"', "\\", "\x00", "\x1f", "\x7f", "\u2028", "é", "中", "😀", "\udc80", "\ud800"]
_ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
texts = st.one_of(
    st.text(max_size=12),
    st.text(_ANY_CHAR, max_size=12),
    st.sampled_from(_ODD),
    st.lists(st.sampled_from(_ODD), max_size=5).map("".join),
    st.text(st.sampled_from('ab\x00\n\t"\\é😀'), min_size=200, max_size=600),
)
no_surrogate_texts = st.text(max_size=12)
ints = st.one_of(
    st.integers(-1000, 1000),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64]),
)
floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1e-5, 1e16, 0.1, 1.0, float("nan"), float("inf")]),
)
scalars = st.one_of(st.none(), st.booleans(), ints, texts)
json_values = st.recursive(
    st.one_of(scalars, floats),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(texts, inner, max_size=4),
    ),
    max_leaves=12,
)
# Data the fast path must take: dicts, lists, strings without surrogates, flags, 64-bit ints.
plain_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), no_surrogate_texts),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(no_surrogate_texts, inner, max_size=4)
    ),
    max_leaves=12,
)
free_dicts = st.one_of(st.none(), st.just({}), st.dictionaries(texts, json_values, max_size=4))
opt_texts = st.one_of(st.none(), texts)


class _SubText(TextPart):
    pass


class _SubCall(ToolCallPart):
    pass


def _parts(t: Any = texts) -> Any:
    return st.one_of(
        st.builds(TextPart, text=t),
        st.builds(
            ToolCallPart,
            id=t,
            name=t,
            arguments=t,
            call_type=st.one_of(st.just("function"), t),
        ),
        st.builds(
            ToolResultPart,
            tool_call_id=t,
            name=st.one_of(st.none(), t),
            output=t,
            is_error=st.booleans(),
            state=st.sampled_from(["completed", "error", "interrupted"]),
        ),
        st.builds(
            ReasoningPart,
            text=t,
            signature=st.one_of(st.none(), t),
            redacted_data=st.one_of(st.none(), t),
            format=st.sampled_from(["thinking_block", "reasoning_content"]),
        ),
    )


all_parts = st.one_of(
    _parts(),
    st.builds(
        FilePart,
        media_type=texts,
        name=opt_texts,
        data=st.one_of(st.none(), st.binary(max_size=20)),
        uri=opt_texts,
        detail=opt_texts,
    ),
    st.builds(
        ProviderPart,
        provider=st.text(min_size=1, max_size=8),
        item=st.dictionaries(texts, json_values, max_size=3),
    ),
    st.builds(_SubText, text=texts),
    st.builds(_SubCall, id=texts, name=texts),
)
stamps = st.one_of(
    st.none(), st.datetimes(timezones=st.just(UTC)), st.just(datetime(2026, 1, 1, tzinfo=UTC))
)
roles = st.sampled_from(["system", "user", "assistant", "tool"])


def _messages(parts: Any, free: Any, t: Any) -> Any:
    return st.builds(
        Message,
        id=st.one_of(st.none(), texts),
        created_at=stamps,
        role=roles,
        parts=st.lists(parts, max_size=5),
        name=st.one_of(st.none(), t),
        model=st.one_of(st.none(), t),
        provider_metadata=free,
        content_list=st.booleans(),
        extra=free,
        interrupted=st.one_of(st.none(), st.booleans()),
    )


messages = _messages(all_parts, free_dicts, texts)
plain_free = st.one_of(st.none(), st.dictionaries(no_surrogate_texts, plain_values, max_size=4))
plain_provider_parts = st.builds(
    ProviderPart,
    provider=st.text(min_size=1, max_size=12),
    item=st.dictionaries(no_surrogate_texts, plain_values, max_size=4),
)
plain_messages = _messages(
    st.one_of(_parts(no_surrogate_texts), plain_provider_parts), plain_free, no_surrogate_texts
)


# --------------------------------------------------------------------------- tests


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
def test_message_payloads_equal_the_general_path(msg: Message) -> None:
    _assert_same(msg)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plain_messages)
def test_well_formed_messages_take_the_fast_path_and_match_json_dumps(msg: Message) -> None:
    assert _message_plain(msg) is not None  # the path under test is the one taken
    text, _ = _assert_same(msg)
    dump = EVENT_ADAPTER.dump_python(msg, mode="json", exclude_none=True, exclude=_COLUMNS)
    assert text == canonical_dumps(dump)


def _encodings_equal(got: codec.Encoded, want: codec.Encoded) -> None:
    assert got.event is want.event and got.kind == want.kind
    assert (got.payload, got.size, got.token_count) == (want.payload, want.size, want.token_count)
    assert (got.part_rows, got.blobs, got.proven) == (want.part_rows, want.blobs, want.proven)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
def test_the_common_message_is_encoded_in_one_call_as_encode_encodes_it(msg: Message) -> None:
    """``encode_plain`` takes exactly the messages with nothing of their own to check (no
    id, time, provider metadata or extra) whose payload is proven, and gives what
    ``encode`` gives for them; it declines every other message."""
    counter = HeuristicTokenCounter(chars_per_token=3.0)
    got = codec.encode_plain(msg, counter)
    try:
        want = codec.encode(msg, counter)
    except (InvalidEventError, ValueError, TypeError):
        assert got is None  # refused by the general path (NaN, surrogates...)
        return
    common = (
        msg.id is None
        and msg.created_at is None
        and msg.provider_metadata is None
        and msg.extra is None
    )
    if not (common and want.proven):
        assert got is None
        return
    assert got is not None
    _encodings_equal(got, want)


def test_encode_plain_declines_what_it_cannot_vouch_for() -> None:
    counter = HeuristicTokenCounter()
    msg = Message.user("hi")
    got = codec.encode_plain(msg, counter)
    assert got is not None
    _encodings_equal(got, codec.encode(msg, counter))
    for field, value in [
        *_bad_values(),
        ("kind", "custom"),
        ("id", "own-id"),
        ("created_at", datetime(2026, 1, 1, tzinfo=UTC)),
        ("provider_metadata", {"plain": "data"}),
        ("extra", {"plain": "data"}),
        ("parts", [TextPart(text="lone \udc80 surrogate")]),
    ]:
        other = Message.user("hi")
        setattr(other, field, value)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert codec.encode_plain(other, counter) is None, field


def _bad_values() -> list[tuple[str, Any]]:
    class _Str(str):
        pass

    return [
        ("role", "bogus"),
        ("role", _Str("user")),
        ("role", None),
        ("content_list", 1),
        ("content_list", None),
        ("interrupted", 0),
        ("name", 5),
        ("name", _Str("n")),
        ("model", b"m"),
        ("parts", (TextPart(text="t"),)),
        ("parts", [{"type": "text", "text": "t"}]),
        ("parts", [TextPart(text="t"), None]),
        ("provider_metadata", {"f": 1.5}),
        ("provider_metadata", {"big": 2**64}),
        ("provider_metadata", {"t": (1, 2)}),
        ("provider_metadata", {"k": _Str("v")}),
        ("provider_metadata", {1: "int key"}),
        ("provider_metadata", {"nan": float("nan")}),
        ("provider_metadata", [1, 2]),
        ("provider_metadata", {"s": "\udc80"}),
        ("extra", {"when": datetime(2026, 1, 1, tzinfo=UTC)}),
        ("extra", {"b": b"bytes"}),
        ("extra", "not a dict"),
    ]


@pytest.mark.parametrize(("field", "value"), _bad_values(), ids=lambda v: repr(v)[:30])
def test_a_field_assigned_another_type_is_encoded_by_the_general_path(
    field: str, value: Any
) -> None:
    msg = Message(role="user", parts=[TextPart(text="hi")], extra={"a": 1})
    setattr(msg, field, value)
    _assert_same(msg)


def _bad_parts() -> list[Any]:
    class _Str(str):
        pass

    out: list[Any] = []
    for attr, value in [
        ("type", "tool_call"),
        ("type", _Str("text")),
        ("text", None),
        ("text", _Str("t")),
        ("text", 3),
    ]:
        p = TextPart(text="t")
        setattr(p, attr, value)
        out.append(p)
    for attr, value in [("id", None), ("name", 1), ("arguments", {"a": 1}), ("call_type", None)]:
        c = ToolCallPart(id="c", name="n")
        setattr(c, attr, value)
        out.append(c)
    for attr, value in [
        ("state", "bogus"),
        ("state", None),
        ("is_error", 1),
        ("name", 2),
        ("output", None),
        ("tool_call_id", None),
    ]:
        r = ToolResultPart(tool_call_id="c")
        setattr(r, attr, value)
        out.append(r)
    for attr, value in [("format", "other"), ("signature", 1), ("text", None)]:
        q = ReasoningPart(text="r")
        setattr(q, attr, value)
        out.append(q)
    gone = ToolResultPart(tool_call_id="c", name="n")
    del gone.__dict__["name"]
    out.append(gone)
    stray = ToolCallPart(id="c", name="n")
    stray.__dict__["stray"] = 1
    out.append(stray)
    return out


@pytest.mark.parametrize("part", _bad_parts(), ids=lambda p: repr(p)[:40])
def test_a_part_assigned_another_type_is_encoded_by_the_general_path(part: Any) -> None:
    msg = Message(role="assistant", parts=[TextPart(text="a")])
    msg.parts.append(part)
    _assert_same(msg)


def test_odd_instances_are_encoded_by_the_general_path() -> None:
    partial = Message.model_construct(parts=[TextPart(text="hi")])  # no role
    missing = Message(role="user", parts=[])
    del missing.__dict__["content_list"]
    stray = Message(role="user", parts=[])
    stray.__dict__["stray"] = 1
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    loop = Message(role="user", parts=[])
    loop.provider_metadata = cyclic

    class Tagged(Message):
        tag: str = "t"

    for evt in (partial, missing, stray, loop, Tagged(role="user", parts=[])):
        _assert_same(evt)
    assert _message_plain(partial) is None and _message_plain(missing) is None


@pytest.mark.parametrize("depth", [97, 98, 99, 100, 101, 150, 300])
def test_deep_free_form_data_matches_the_general_path(depth: int) -> None:
    value: Any = "leaf"
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    msg = Message(role="user", parts=[], provider_metadata={"d": value})
    _assert_same(msg)


def test_the_fast_path_is_taken_for_the_benchmark_messages() -> None:
    from benchmarks.workload import step, to_message

    msgs = [to_message(step(s)) for s in range(1, 51)]
    for msg in msgs:
        assert _message_plain(msg) is not None
        _assert_same(msg)


def test_the_fast_path_refuses_what_it_does_not_write() -> None:
    assert _message_plain(Message(role="user", parts=[FilePart(data=b"x")])) is None
    assert _message_plain(Message(role="user", parts=[], extra={"f": 0.5})) is None
    assert _message_plain(Message(role="user", parts=[_SubText(text="x")])) is None
    # A surrogate passes the check; the fast writer refuses it and the general path escapes it.
    msg = Message(role="tool", parts=[ToolResultPart(tool_call_id="c", output="\udc80")])
    assert _message_plain(msg) is not None
    assert _assert_same(msg)[0] == '{"content_list":false,"parts":[{"is_error":false,' + (
        '"output":"\\udc80","state":"completed","tool_call_id":"c","type":"tool_result"}],'
        '"role":"tool"}'
    )


def test_the_fast_path_knows_every_field_of_the_classes_it_writes(monkeypatch: Any) -> None:
    # A field added to Message or a part class must be taught to _message_plain (and to
    # _PLAIN_FIELDS); until then the fast path stays off and this test fails.
    assert codec._MESSAGE_FIELDS_KNOWN
    monkeypatch.setitem(codec._PLAIN_FIELDS, TextPart, frozenset({"type"}))
    assert not codec._plain_dump(TextPart)


def test_the_payload_never_depends_on_which_path_wrote_it(monkeypatch: Any) -> None:
    """Encoding with the fast path switched off gives the same texts (a guard against the
    two paths being the same function by accident)."""
    msg = Message(role="assistant", parts=[TextPart(text="t"), ToolCallPart(id="i", name="n")])
    fast = _payload(msg)
    monkeypatch.setattr(codec, "_message_plain", lambda m: None)
    assert _payload(msg) == fast == _reference_payload(msg)


_CORPUS = (
    corpus_files("swe-agent/**/*.traj")
    + corpus_files("openhands/**/*.json")
    + corpus_files("openhands/**/*.jsonl")
    + corpus_files("mini-swe-agent/**/*.json")
)


@pytest.mark.skipif(not _CORPUS, reason="corpus absent")
def test_corpus_payloads_equal_the_general_path() -> None:
    fast = total = 0
    for path in _CORPUS:
        try:
            transcripts = load_transcripts(path)
        except Exception:  # not a transcript (a README, a metadata file)
            continue
        for t in transcripts:
            for evt in t.events:
                total += 1
                fast += type(evt) is Message and _message_plain(evt) is not None
                _assert_same(evt)
                json.loads(encode_event(evt))
    assert total and fast > total // 2


# --------------------------------------------------------------------------- read-back proof


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
def test_a_payload_proven_to_read_back_reads_back(msg: Message) -> None:
    """What the fast path marks as proven needs no read-back parse: the parse it skips
    never fails on it (and whatever is not proven still gets the parse)."""
    try:
        raw, proven = codec._payload_proven(msg)
    except Exception:  # refused by the general path (NaN, surrogates...): never proven
        return
    text = raw.decode("utf-8")  # the bytes the hash chain reads are the stored text's
    if proven:
        codec.read_back("message", text, msg.created_at)  # raises if the claim is wrong
        assert codec.decode_event("message", text, "0", datetime.now(UTC)).kind == "message"


@pytest.mark.parametrize(("field", "value"), _bad_values(), ids=lambda v: repr(v)[:30])
def test_a_field_assigned_another_type_is_not_proven(field: str, value: Any) -> None:
    msg = Message(role="user", parts=[TextPart(text="hi")])
    setattr(msg, field, value)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the serializer warns about such values
            proven = codec._payload_proven(msg)[1]
    except InvalidEventError:
        return  # refused outright (a NaN)
    assert not proven


@pytest.mark.parametrize("provider", ["", "p" * 256])
def test_a_provider_name_outside_its_limits_is_not_proven_and_is_refused(
    tmp_path: Any, provider: str
) -> None:
    from eventstore import EventStore

    part = ProviderPart(provider="openai", item={"type": "compaction", "n": 1})
    msg = Message(role="assistant", parts=[part], provider_metadata={"source": {"line": 1}})
    assert codec._payload_proven(msg)[1]
    part.provider = provider  # models do not validate on assignment
    assert not codec._payload_proven(msg)[1]
    with EventStore(f"sqlite:///{tmp_path / 'p.db'}") as store:
        sid = store.create_session().id
        with pytest.raises(InvalidEventError, match="provider"):
            store.append(sid, [msg])
        assert store.head(sid) == 0


def test_a_naive_created_at_is_not_proven_and_is_refused(tmp_path: Any) -> None:
    from eventstore import EventStore
    from eventstore.errors import InvalidEventError

    msg = Message.user("hi")
    assert codec._payload_proven(msg)[1]
    msg.created_at = datetime(2026, 1, 1)  # naive: models do not validate on assignment
    assert not codec._payload_proven(msg)[1]
    with EventStore(f"sqlite:///{tmp_path / 'n.db'}") as store:
        sid = store.create_session().id
        with pytest.raises(InvalidEventError, match="timezone"):
            store.append(sid, [msg])
        assert store.head(sid) == 0


def test_a_validator_or_constraint_turns_the_proof_off() -> None:
    from pydantic import Field, field_validator

    class Checked(TextPart):
        @field_validator("text")
        @classmethod
        def short_error(cls, v: str) -> str:
            return v

    class Bounded(TextPart):
        text: str = Field(max_length=3)

    assert codec._READ_BACK_PROVEN
    assert codec._validates_types_only(Message) and codec._validates_types_only(TextPart)
    assert not codec._validates_types_only(Checked)
    assert not codec._validates_types_only(Bounded)
