"""Hostile input on both backends: exact round trips, typed errors, nothing half-written."""

from __future__ import annotations

import json
import uuid
import warnings
from datetime import datetime
from typing import Any

import pytest
from conftest import row_count

from eventstore import (
    Custom,
    EventStore,
    EventStoreError,
    InvalidEventError,
    Message,
    NotFoundError,
    PartRef,
    PayloadTooLargeError,
    ProviderPart,
    Prune,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    decode_tool_output,
)
from eventstore.events import Event


def _roundtrip(store: EventStore, evt: Event) -> Event:
    s = store.create_session()
    (seq,) = store.append(s.id, [evt])
    (got,) = list(store.read(s.id, from_seq=seq, to_seq=seq))
    assert store.verify(s.id, fingerprints=False).ok
    return got.event


NASTY = [
    "nul\x00inside",
    "\x00",
    "\x00\x00leading and trailing\x00",
    "control \x01\x07\x1b[31m\x7f chars",
    "emoji 🦀🧪👩‍👩‍👧 and astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀",
    "right-to-left \u202e and bom \ufeff and nbsp \u00a0",
    'quotes " \\ \\u0000 literal backslash-u',
    "line\r\nbreaks\u2028\u2029",
    "",
]


@pytest.mark.parametrize("value", NASTY, ids=range(len(NASTY)))
def test_text_everywhere_roundtrips_exactly(store: EventStore, value: str) -> None:
    msg = Message(
        role="assistant",
        parts=[
            TextPart(text=value),
            ReasoningPart(text=value, signature=value),
            ToolCallPart(id=f"call{value}", name=f"tool{value}", arguments=value),
        ],
        name=value or None,
        provider_metadata={value: value, "k": [value]},
    )
    got = _roundtrip(store, msg)
    assert isinstance(got, Message)
    assert got.parts == msg.parts
    assert got.parts[0].text == value  # type: ignore[union-attr]
    assert got.tool_calls[0].arguments == value
    assert got.tool_calls[0].id == f"call{value}"
    assert got.provider_metadata == {value: value, "k": [value]}
    result = Message.tool(f"call{value}", value, name=f"tool{value}", is_error=True)
    got_result = _roundtrip(store, result)
    assert got_result.parts == result.parts  # type: ignore[union-attr]
    custom = Custom(name=f"n{value}", data={value: [value, {"x": value}]})
    got_custom = _roundtrip(store, custom)
    assert got_custom.data == {value: [value, {"x": value}]}  # type: ignore[union-attr]
    assert got_custom.name == f"n{value}"  # type: ignore[union-attr]


def test_nul_in_session_metadata(store: EventStore) -> None:
    meta = {"a\x00b": "c\x00d", "nested": {"z": "\x00"}}
    s = store.create_session(metadata=meta)
    assert store.get_session(s.id).metadata == meta


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe\x00binary",
        b"valid \xe2\x82\xac then invalid \xe2\x82 and \xc3\x28",
        bytes(range(256)),
        b"\xed\xa0\x80 encoded surrogate",
        b"",
    ],
    ids=["bom-nul", "truncated", "all-bytes", "cesu", "empty"],
)
def test_invalid_utf8_tool_output_roundtrips_bytes(store: EventStore, raw: bytes) -> None:
    text = decode_tool_output(raw)
    got = _roundtrip(store, Message.tool("c1", text, name="cat"))
    part = got.parts[0]  # type: ignore[union-attr]
    assert isinstance(part, ToolResultPart)
    assert part.output == text
    assert part.output_bytes() == raw


def test_lone_surrogates_in_ids_and_arguments(store: EventStore) -> None:
    weird = decode_tool_output(b"id\xff\xfe")
    msg = Message.assistant(tool_calls=[ToolCallPart(id=weird, name=weird, arguments=weird)])
    got = _roundtrip(store, msg)
    assert got.parts == msg.parts  # type: ignore[union-attr]


def test_ten_megabyte_tool_result(store: EventStore) -> None:
    big = ("0123456789abcdef" * 64 + "\n") * (10 * 1024 * 1024 // 1025)
    big += "\x00tail 🦀" * 100
    assert len(big.encode()) > 10 * 1024 * 1024
    s = store.create_session()
    store.append(s.id, [Message.user("go"), Message.tool("c", big, name="dump")])
    got = list(store.read(s.id))
    assert got[1].event.parts[0].output == big  # type: ignore[union-attr]
    assert store.verify(s.id, fingerprints=False).ok


def test_batch_of_multi_megabyte_events(store: EventStore) -> None:
    # Several multi-MB rows in one statement: drivers that pipeline executemany have been
    # seen to hang on statements of a few hundred KB.
    chunk = "x" * (3 * 1024 * 1024)
    s = store.create_session()
    seqs = store.append(s.id, [Message.tool(f"c{i}", chunk + str(i)) for i in range(3)])
    assert seqs == [1, 2, 3]
    outs = [e.event.parts[0].output for e in store.read(s.id)]  # type: ignore[union-attr]
    assert outs == [chunk + str(i) for i in range(3)]


def _nested(depth: int) -> Any:
    value: Any = "bottom\x00"
    for i in range(depth):
        value = {"k": value, "i": i} if i % 2 else [value, i]
    return value


def test_deeply_nested_json(store: EventStore) -> None:
    data = _nested(200)
    got = _roundtrip(store, Custom(name="deep", data=data))
    assert got.data == data  # type: ignore[union-attr]
    args = json.dumps(_nested(200))
    got_call = _roundtrip(
        store, Message.assistant(tool_calls=[ToolCallPart(id="c", name="f", arguments=args)])
    )
    assert got_call.tool_calls[0].arguments == args  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "args",
    [
        '{"a": 1,',
        "{'single': 'quotes'}",
        "NaN",
        '{"dup": 1, "dup": 2}',
        '  {"spaced"  :  true }  ',
        '{"b": 1, "a": 2}',
        "not json at all \x00",
        '{"big": 123456789012345678901234567890}',
    ],
)
def test_arguments_stored_exactly_as_given(store: EventStore, args: str) -> None:
    call = ToolCallPart(id="c", name="f", arguments=args)
    got = _roundtrip(store, Message.assistant(tool_calls=[call]))
    assert got.tool_calls[0].arguments == args  # type: ignore[union-attr]


# --------------------------------------------------------------------------- rejected input


def _unchanged(store: EventStore, sid: str, head: int, rows: int) -> None:
    assert store.head(sid) == head
    assert row_count(store, "events", sid) == rows
    # The messages kept below have one text part each, stored without a parts row; each
    # refused batch starts with a tool result, whose row a partial write would leave.
    assert row_count(store, "parts", sid) == 0


def test_oversize_event_is_rejected_and_nothing_written(db_url: str) -> None:
    with EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", max_event_bytes=1000) as store:
        s = store.create_session()
        store.append(s.id, [Message.user("ok")])
        with pytest.raises(PayloadTooLargeError) as info:
            store.append(
                s.id, [Message.tool("c", "fine"), Message.user("y" * 2000)], expected_seq=1
            )
        err = info.value
        assert (err.limit, err.index) == (1000, 1)
        assert err.size > 2000
        assert "1000 bytes" in str(err) and "max_event_bytes" in str(err)
        _unchanged(store, s.id, 1, 1)
        # The limit counts stored bytes, not characters: 400 four-byte characters is too big.
        with pytest.raises(PayloadTooLargeError):
            store.append(s.id, [Message.user("🦀" * 400)])
        _unchanged(store, s.id, 1, 1)
        assert store.append(s.id, [Message.user("z" * 900)]) == [2]


def test_batch_with_invalid_third_event_writes_none(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, [Message.user("first")])
    batch: list[Any] = [
        Message.tool("c", "a"),
        {"kind": "message", "role": "user", "parts": [{"type": "text", "text": "b"}]},
        {"kind": "message", "role": "robot", "parts": []},
    ]
    with pytest.raises(InvalidEventError, match=r"events\[2\]\.message\.role"):
        store.append(s.id, batch)
    _unchanged(store, s.id, 1, 1)


def test_batch_failing_inside_the_transaction_writes_none(store: EventStore) -> None:
    # The third event is only found invalid after the first two rows were inserted:
    # the whole transaction must roll back.
    s = store.create_session()
    store.append(s.id, [Message.user("first")])
    batch = [Message.tool("c", "out"), Message.user("b"), Prune(targets=[PartRef(seq=1, index=0)])]
    with pytest.raises(InvalidEventError, match="prune.targets"):
        store.append(s.id, batch, expected_seq=1)
    _unchanged(store, s.id, 1, 1)
    assert store.verify(s.id, fingerprints=False).ok
    assert store.append(s.id, batch[:2], expected_seq=1) == [2, 3]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"kind": "message", "role": "wizard"}, r"events\[0\]\.message\.role"),
        ({"kind": "message", "role": "user", "parts": [{"type": "video"}]}, r"parts\.0"),
        ({"kind": "message", "role": "user", "parts": [{"type": "text"}]}, r"parts\.0\.text\.text"),
        ({"kind": "nope"}, r"events\[0\]"),
        ({"role": "user"}, r"events\[0\]"),
        ({"kind": "custom"}, r"events\[0\]\.custom\.name"),
        ({"kind": "message", "role": "user", "bogus": 1}, r"events\[0\]\.message\.bogus"),
        (
            {"kind": "message", "role": "user", "created_at": "2024-01-01T00:00:00"},
            r"events\[0\]\.message\.created_at",
        ),
    ],
)
def test_invalid_dict_names_the_field(store: EventStore, bad: dict[str, Any], field: str) -> None:
    s = store.create_session()
    with pytest.raises(InvalidEventError, match=field):
        store.append(s.id, [bad])
    assert store.head(s.id) == 0


def test_mutated_model_is_validated_before_storing(store: EventStore) -> None:
    # Models do not validate on assignment; storing one that cannot be read back would
    # make the whole session unreadable.
    s = store.create_session()
    bad_role = Message.user("x")
    bad_role.role = "robot"  # type: ignore[assignment]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InvalidEventError, match=r"events\[1\]\.message\.role"):
            store.append(s.id, [Message.user("ok"), bad_role])
    naive = Message.user("x")
    naive.created_at = datetime(2024, 1, 1)  # no timezone
    with pytest.raises(InvalidEventError, match=r"created_at"):
        store.append(s.id, [naive])
    for kind in ("custom", "bogus", 5):
        # Stored under another kind, the payload would be read with the wrong model (or
        # none): the session could never be read again.
        other_kind = Message.user("x")
        other_kind.kind = kind  # type: ignore[assignment]
        with pytest.raises(InvalidEventError, match=r"events\[1\]\.kind: .* is not the kind of"):
            store.append(s.id, [Message.user("ok"), other_kind])
    custom = Custom(name="c", data={})
    custom.kind = "message"  # type: ignore[assignment]
    with pytest.raises(InvalidEventError, match=r"events\[0\]\.kind: 'message' is not"):
        store.append(s.id, [custom])
    long_id = Message.user("x")
    long_id.id = "x" * 37
    with pytest.raises(InvalidEventError, match=r"events\[0\]\.id"):
        store.append(s.id, [long_id])
    unserializable = Custom(name="c", data=b"\xff\xfe")
    with pytest.raises(InvalidEventError, match=r"events\[0\]"):
        store.append(s.id, [unserializable])
    not_a_part = Message.user("x")
    not_a_part.parts.append({"type": "bogus"})  # type: ignore[arg-type]  # in place
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InvalidEventError, match=r"events\[0\]: cannot be serialized"):
            store.append(s.id, [not_a_part])
    no_parts = Message.user("x")
    del no_parts.__dict__["parts"]  # a field gone from the model: refused, not a crash
    with pytest.raises(InvalidEventError, match=r"events\[0\]: cannot be serialized"):
        store.append(s.id, [no_parts])
    with pytest.raises(InvalidEventError, match="not an event"):
        store.append(s.id, [object()])  # type: ignore[list-item]
    with pytest.raises(InvalidEventError, match="list of events"):
        store.append(s.id, Message.user("x"))  # type: ignore[arg-type]
    assert store.head(s.id) == 0
    assert list(store.read(s.id)) == []


def test_a_message_models_free_form_data_is_checked_whichever_part_holds_it(
    store: EventStore,
) -> None:
    """A message model is checked after it is encoded when none of its own free-form
    fields is set; the check still names the field, as when it runs first, for data the
    encoder would refuse in its own words (a NaN) and for data it would store (a
    surrogate in a key)."""
    s = store.create_session()
    nan = Message(role="user", parts=[TextPart(text="a"), ProviderPart(provider="p", item={})])
    nan.parts[1].item["x"] = float("nan")  # type: ignore[union-attr]
    with pytest.raises(InvalidEventError, match=r"^events\[0\]\.parts\[1\]\.item: "):
        store.append(s.id, [nan])
    key = Message(role="user", parts=[ProviderPart(provider="p", item={"k\ud800": 1})])
    with pytest.raises(InvalidEventError, match=r"^events\[1\]\.parts\[0\]\.item: the key"):
        store.append(s.id, [Message.user("ok"), key])
    meta = Message.user("x")
    meta.provider_metadata = {"deep": float("inf")}
    with pytest.raises(InvalidEventError, match=r"^events\[0\]\.provider_metadata: "):
        store.append(s.id, [meta])
    assert store.head(s.id) == 0


@pytest.mark.parametrize("value", ["a\x00b", decode_tool_output(b"a\xffb")], ids=["nul", "surr"])
def test_unstorable_keys_fail_the_same_way_on_every_backend(store: EventStore, value: str) -> None:
    s = store.create_session()
    with pytest.raises(InvalidEventError, match="title"):
        store.create_session(title=value)
    with pytest.raises(InvalidEventError, match="user_id"):
        store.create_session(user_id=value)
    with pytest.raises(InvalidEventError, match="session_id"):
        store.create_session(session_id=value)
    with pytest.raises(InvalidEventError, match="idempotency_key"):
        store.append(s.id, [Message.user("x")], idempotency_key=value)
    with pytest.raises(InvalidEventError, match="tenant"):
        store.with_tenant(value)
    for call in (
        lambda: store.get_session(value),
        lambda: store.append(value, [Message.user("x")]),
        lambda: list(store.read(value)),
        lambda: store.fork(value, 0),
    ):
        with pytest.raises(NotFoundError):
            call()
    assert store.list_sessions(user_id=value) == []
    assert store.head(s.id) == 0


def test_overlong_keys_are_typed_errors(store: EventStore) -> None:
    s = store.create_session()
    with pytest.raises(InvalidEventError, match="user_id"):
        store.create_session(user_id="u" * 256)
    with pytest.raises(InvalidEventError, match="idempotency_key"):
        store.append(s.id, [Message.user("x")], idempotency_key="k" * 256)
    with pytest.raises(NotFoundError):
        store.get_session("s" * 37)
    # Over-long tool ids are kept verbatim in the payload (the index copy is capped).
    long_call = ToolCallPart(id="c" * 1000, name="n" * 1000, arguments="{}")
    got = _roundtrip(store, Message.assistant(tool_calls=[long_call]))
    assert got.tool_calls[0] == long_call  # type: ignore[union-attr]


def test_duplicate_event_id_is_a_typed_error(store: EventStore) -> None:
    s = store.create_session()
    m = Message.user("x")
    m.id = str(uuid.uuid4())
    store.append(s.id, [m])
    with pytest.raises(EventStoreError) as info:
        store.append(s.id, [m])
    assert type(info.value).__module__.startswith("eventstore")
    assert store.head(s.id) == 1


@pytest.mark.parametrize("size", [1, 2, 40])  # the fast path, the ordinary, the bulk one
def test_a_taken_event_id_is_named_on_every_append_path(store: EventStore, size: int) -> None:
    s = store.create_session()
    first = Message.user("first")
    first.id = "the-id"
    store.append(s.id, [first])
    batch = [Message.user(f"m{i}") for i in range(size)]
    batch[-1].id = "the-id"
    with pytest.raises(
        InvalidEventError,
        match=rf"events\[{size - 1}\]\.id: 'the-id' is already the id of event 1 ",
    ):
        store.append(s.id, batch)
    batch[-1].id = "twice"
    batch[0].id = "twice"
    if size > 1:
        with pytest.raises(
            InvalidEventError,
            match=rf"events\[{size - 1}\]\.id: 'twice' is also the id of events\[0\]",
        ):
            store.append(s.id, batch)
    assert store.head(s.id) == 1 and store.verify(s.id).ok
