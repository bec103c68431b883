"""The event and part models on their own: parsing, serialization, validation."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from eventstore import (
    Condensation,
    CondensationRequest,
    Custom,
    Delta,
    Dequeued,
    FilePart,
    LLMCall,
    Message,
    PartRef,
    Prune,
    Queued,
    ReasoningPart,
    RunState,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    decode_tool_output,
)
from eventstore.codec import (
    canonical_json,
    decode_event,
    encode_event,
    format_ts,
    sqlite_time_text,
    time_texts,
    utc_texts,
)
from eventstore.events import EVENT_ADAPTER, PART_ADAPTER, Purge

EVENT_DICTS: dict[str, tuple[dict[str, Any], type]] = {
    "message": (
        {"kind": "message", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
        Message,
    ),
    "condensation": (
        {"kind": "condensation", "forgotten_from": 2, "forgotten_to": 5, "summary": "s"},
        Condensation,
    ),
    "condensation_request": (
        {"kind": "condensation_request", "focus": "auth bug", "requested_by": "user"},
        CondensationRequest,
    ),
    "prune": ({"kind": "prune", "targets": [{"seq": 3, "index": 0}]}, Prune),
    "llm_call": (
        {"kind": "llm_call", "model": "gpt-4o", "view_seq": 7, "fingerprint": "ab" * 32},
        LLMCall,
    ),
    "custom": ({"kind": "custom", "name": "checkpoint", "data": {"x": [1, None]}}, Custom),
    "queued": (
        {"kind": "queued", "message": {"role": "user", "parts": [{"type": "text", "text": "q"}]}},
        Queued,
    ),
    "dequeued": ({"kind": "dequeued", "queued_seq": 4}, Dequeued),
    "run_state": ({"kind": "run_state", "state": "streaming", "stream_id": "s-1"}, RunState),
    "delta": ({"kind": "delta", "stream_id": "s-1", "text": "chunk"}, Delta),
    "purge": (
        {"kind": "purge", "from_seq": 1, "to_seq": 2, "events": 2, "hashes": "h", "redacted": "r"},
        Purge,
    ),
}


@pytest.mark.parametrize("kind", sorted(EVENT_DICTS))
def test_event_union_parses_every_kind(kind: str) -> None:
    raw, cls = EVENT_DICTS[kind]
    evt = EVENT_ADAPTER.validate_python(raw)
    assert type(evt) is cls
    assert evt.kind == kind
    # JSON in, same model out; and the stored payload decodes back to an equal model.
    assert EVENT_ADAPTER.validate_json(json.dumps(raw)) == evt
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    back = decode_event(kind, encode_event(evt), "id-1", when)
    assert type(back) is cls
    assert back.model_dump(exclude={"id", "created_at"}) == evt.model_dump(
        exclude={"id", "created_at"}
    )
    assert (back.id, back.created_at) == ("id-1", when)


def test_every_kind_is_covered() -> None:
    from typing import get_args

    from eventstore.events import EventKind

    assert set(get_args(EventKind)) == set(EVENT_DICTS)


@pytest.mark.parametrize(
    ("raw", "cls"),
    [
        ({"type": "text", "text": "t"}, TextPart),
        ({"type": "reasoning", "text": "r", "signature": "sig"}, ReasoningPart),
        ({"type": "tool_call", "id": "c1", "name": "sh", "arguments": '{"a":1}'}, ToolCallPart),
        ({"type": "tool_result", "tool_call_id": "c1", "output": "o"}, ToolResultPart),
        ({"type": "file", "media_type": "image/png", "uri": "https://x/y.png"}, FilePart),
    ],
)
def test_part_union_parses_every_type(raw: dict[str, Any], cls: type) -> None:
    part = PART_ADAPTER.validate_python(raw)
    assert type(part) is cls
    dumped = PART_ADAPTER.dump_python(part, mode="json", exclude_none=True)
    assert {k: dumped[k] for k in raw} == raw
    assert PART_ADAPTER.validate_python(dumped) == part


def test_unknown_discriminators_are_rejected() -> None:
    with pytest.raises(ValidationError):
        EVENT_ADAPTER.validate_python({"kind": "telepathy"})
    with pytest.raises(ValidationError):
        PART_ADAPTER.validate_python({"type": "hologram"})
    with pytest.raises(ValidationError, match="role"):
        EVENT_ADAPTER.validate_python({"kind": "message", "role": "narrator"})
    with pytest.raises(ValidationError, match="extra"):
        EVENT_ADAPTER.validate_python({"kind": "message", "role": "user", "colour": "red"})


def test_file_part_bytes_roundtrip_as_base64() -> None:
    data = bytes(range(256)) * 3
    part = FilePart(media_type="application/octet-stream", name="blob.bin", data=data)
    as_json = PART_ADAPTER.dump_python(part, mode="json")
    assert as_json["data"] == base64.b64encode(data).decode("ascii")
    assert PART_ADAPTER.validate_python(as_json).data == data  # type: ignore[union-attr]
    msg = Message(role="user", parts=[TextPart(text="see"), part])
    back = decode_event("message", encode_event(msg), "i", datetime.now(UTC))
    assert back.parts[1].data == data  # type: ignore[union-attr]
    with pytest.raises(ValidationError):
        FilePart(data="not base64!!")  # type: ignore[arg-type]


def test_created_at_must_be_timezone_aware() -> None:
    with pytest.raises(ValidationError, match="timezone-aware"):
        Message(role="user", created_at=datetime(2024, 1, 1))
    with pytest.raises(ValidationError, match="timezone-aware"):
        EVENT_ADAPTER.validate_python(
            {"kind": "custom", "name": "x", "created_at": "2024-01-01T00:00:00"}
        )
    plus_two = timezone(timedelta(hours=2))
    m = Message(role="user", created_at=datetime(2024, 1, 1, 12, tzinfo=plus_two))
    assert m.created_at == datetime(2024, 1, 1, 10, tzinfo=UTC)
    assert m.created_at.utcoffset() == timedelta(0)  # type: ignore[union-attr]
    parsed = EVENT_ADAPTER.validate_python(
        {"kind": "custom", "name": "x", "created_at": "2024-01-01T00:00:00+05:30"}
    )
    assert parsed.created_at == datetime(2023, 12, 31, 18, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    "data",
    [None, 0, -1.5, True, "s\x00", [], {}, [1, "two", None, {"3": [4.0]}], {"a": {"b": {"c": []}}}],
)
def test_custom_data_is_any_json(data: Any) -> None:
    c = Custom(name="x", data=data)
    back = decode_event("custom", encode_event(c), "i", datetime.now(UTC))
    assert back.data == data  # type: ignore[union-attr]
    # ``type_name`` is accepted as an alias of ``name`` for older JSON.
    assert EVENT_ADAPTER.validate_python({"kind": "custom", "type_name": "y"}).name == "y"


def test_message_helpers() -> None:
    call = ToolCallPart(id="c1", name="ls", arguments="{}")
    a = Message.assistant("thinking", tool_calls=[call], model="m")
    assert (a.role, a.text, a.tool_calls, a.model) == ("assistant", "thinking", [call], "m")
    assert Message.assistant(tool_calls=[call]).parts == [call]
    t = Message.tool("c1", "out", name="ls", is_error=True)
    assert t.tool_results == [
        ToolResultPart(tool_call_id="c1", output="out", name="ls", is_error=True)
    ]
    assert Message.system("s").role == "system"
    assert Message.user("u").text == "u"


def test_decode_tool_output_is_reversible() -> None:
    raw = b"ok \xff\xfe \xe2\x82 \x00 \xf0\x9f\xa6\x80"
    text = decode_tool_output(raw)
    assert ToolResultPart(tool_call_id="c", output=text).output_bytes() == raw
    payload = encode_event(Message.tool("c", text))
    payload.encode("utf-8")  # storable: lone surrogates are escaped in the JSON text
    back = decode_event("message", payload, "i", datetime.now(UTC))
    assert back.parts[0].output_bytes() == raw  # type: ignore[union-attr]


def test_canonical_json_is_deterministic() -> None:
    a = canonical_json({"b": 1, "a": [1, 2], "ü": "\x00"})
    b = canonical_json({"ü": "\x00", "a": [1, 2], "b": 1})
    assert a == b == '{"a":[1,2],"b":1,"ü":"\\u0000"}'


def test_usage_and_refs() -> None:
    u = Usage(prompt_tokens=10, completion_tokens=2)
    call = LLMCall(model="m", view_seq=1, fingerprint="f", usage=u)
    assert EVENT_ADAPTER.validate_json(EVENT_ADAPTER.dump_json(call)) == call
    assert Prune(targets=[PartRef(seq=1, index=2)]).targets[0].index == 2
    with pytest.raises(ValidationError):
        Prune(targets=[{"seq": "x", "index": 0}])  # type: ignore[list-item]


_DECODE_CASES = [
    *((kind, raw) for kind, (raw, _cls) in sorted(EVENT_DICTS.items())),
    ("custom", {"kind": "custom", "name": "n", "data": [0.1, 1e308, 5e-324, 2**70, -0.0, "\x00"]}),
    ("custom", {"kind": "custom", "type_name": "old", "data": {"kind": "nested"}}),
    (
        "message",
        {
            "kind": "message",
            "role": "tool",
            "parts": [
                {
                    "type": "tool_result",
                    "tool_call_id": "c",
                    "output": decode_tool_output(b"ok \xff\xfe"),
                }
            ],
        },
    ),
    (
        "message",
        {
            "kind": "message",
            "role": "user",
            "parts": [
                {
                    "type": "file",
                    "media_type": "image/png",
                    "data": base64.b64encode(b"\x89PNG").decode(),
                },
                {"type": "text", "text": "\U0001f600 and \\ud800 spelled out"},
            ],
        },
    ),
]


@pytest.mark.parametrize(("kind", "raw"), _DECODE_CASES)
@pytest.mark.parametrize(
    "created_at", [datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC), datetime(2024, 1, 1, 3, 0)]
)
def test_decode_event_matches_the_json_loads_path(
    kind: str, raw: dict[str, Any], created_at: datetime
) -> None:
    # decode_event parses with pydantic's JSON validator and falls back to json.loads where
    # that parser refuses the text (lone surrogates): both must give the same event, or
    # the same error (a naive created_at).
    from eventstore.codec import _decode_event_loads

    payload = encode_event(EVENT_ADAPTER.validate_python(raw))
    if created_at.tzinfo is None:
        with pytest.raises(ValidationError):
            decode_event(kind, payload, "i", created_at)
        with pytest.raises(ValidationError):
            _decode_event_loads(kind, payload, "i", created_at)
        return
    fast = decode_event(kind, payload, "i", created_at)
    assert fast == _decode_event_loads(kind, payload, "i", created_at)
    assert encode_event(fast) == payload


@pytest.mark.parametrize(
    "ts",
    [
        datetime(2026, 11, 25, 14, 26, 8, 0, tzinfo=UTC),  # no microseconds
        datetime(2026, 11, 25, 14, 26, 8, 123456, tzinfo=UTC),
        datetime(2026, 11, 25, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-5))),
        datetime(2000, 1, 1, 0, 30, 0, 5, tzinfo=timezone(timedelta(hours=1))),  # 1999 in UTC
        datetime(2026, 3, 4, 5, 6, 7, 89),  # naive: taken as UTC
        datetime(999, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
        datetime(1, 1, 1, 0, 0, 0, 0, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_hashed_timestamp_text_is_the_strftime_text(ts: datetime) -> None:
    """The timestamp text inside every stored hash must never change: it is the text
    ``strftime`` gave when the first hashes were written."""
    aware = ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
    assert format_ts(ts) == aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(
    "ts",
    [
        datetime(2026, 11, 25, 14, 26, 8, 0, tzinfo=UTC),
        datetime(2026, 11, 25, 14, 26, 8, 123456, tzinfo=UTC),
        datetime(1000, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime.fromisoformat("2025-08-01T12:34:56.789Z"),  # as the importers parse times
    ],
)
def test_both_texts_of_a_utc_time_are_the_ones_formatted_apart(ts: datetime) -> None:
    """An append formats a UTC time once, for its hash and for SQLite's column: the two
    texts must be what format_ts and sqlite_time_text give."""
    assert utc_texts(ts) == (format_ts(ts), sqlite_time_text(ts))
    assert time_texts(ts, True) == utc_texts(ts)


@pytest.mark.parametrize(
    "value",
    [
        {"b": [1, 2.5, None, True], "a": "é\u2028\x00\n", "c": {"z": {}, "y": []}},
        ["\ud800 lone", 1e16, -0.0, 10**30],
        "plain",
    ],
)
def test_canonical_json_is_the_json_dumps_text(value: Any) -> None:
    expected = json.dumps(
        value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
    )
    if not expected.isascii():
        expected = expected.replace("\ud800", "\\ud800")
    assert canonical_json(value) == expected


@pytest.mark.parametrize(("kind", "raw"), _DECODE_CASES)
@pytest.mark.parametrize(
    "created_at",
    [
        "2024-05-06 07:08:09.123456",  # SQLite's naive UTC text, as the driver returns it
        "2024-05-06 07:08:09",
        "2024-05-06T07:08:09.5+02:00",  # not SQLite's form: parsed in Python first
        "2024-05-06 07:08:09.123456+00",  # Postgres's ISO text, as a view's statement reads it
        "2024-05-06 07:08:09+05:30",
        "2024-05-06 07:08:09.5-03",
        "2024-05-06 07:08:09.123-03:00:15",  # an offset in seconds: parsed in Python first
        datetime(2024, 5, 6, 9, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2))),
        datetime(2024, 5, 6, 7, 8, 9, 123456),  # naive: read as UTC, as the column type does
    ],
)
def test_decode_row_equals_decoding_the_parsed_column(
    kind: str, raw: dict[str, Any], created_at: str | datetime
) -> None:
    # The view's rows come straight from the driver: decode_row hands SQLite's timestamp
    # text to the JSON validator unparsed, and must give exactly what decode_event gives
    # for the aware UTC datetime the column type reads.
    from eventstore.codec import _decode_event_loads, decode_row

    parsed = datetime.fromisoformat(created_at) if isinstance(created_at, str) else created_at
    utc = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    payload = encode_event(EVENT_ADAPTER.validate_python(raw))
    got = decode_row(kind, payload, "i", created_at)
    reference = _decode_event_loads(kind, payload, "i", utc)
    assert got == reference and type(got) is type(reference)
    assert got.created_at == utc and got.created_at.tzinfo is UTC
    assert got.model_fields_set == reference.model_fields_set
    assert encode_event(got) == payload
