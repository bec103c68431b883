"""The canonical encoding: the fast encoder writes exactly the bytes ``json.dumps`` writes.

Stored payloads are hashed into the chain, so two encoders that disagree on one byte would
make the same event hash differently depending on which path encoded it. The reference is
``canonical_dumps`` (``json.dumps`` with sorted keys, no whitespace, non-ASCII kept,
surrogates escaped); every test here holds ``canonical_json`` and ``canonical_json_bytes``
to it.
"""

from __future__ import annotations

import enum
import json
import random
import re
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from eventstore import EventStore, InvalidEventError, codec
from eventstore.codec import (
    _NotPlain,
    _sorted_plain,
    canonical_dumps,
    canonical_json,
    canonical_json_bytes,
    encode_event,
    new_id,
    new_ids,
)
from eventstore.events import (
    EVENT_ADAPTER,
    Custom,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

# Every test here runs with each writer of plain data (orjson, pydantic_core.to_json).
pytestmark = pytest.mark.usefixtures("plain_encoder")


def _same(value: Any) -> str:
    """Assert both public encoders agree with the reference; return the text."""
    ref = canonical_dumps(value)
    assert canonical_json(value) == ref
    assert canonical_json_bytes(value) == ref.encode("utf-8")
    return ref


class _Level(enum.IntEnum):
    LOW = 1


class _Text(str):
    pass


TRICKY: list[Any] = [
    {},
    [],
    "",
    {"b": 1, "a": 2, "B": 3, "_": 4, "é": 5, "z": 6, "😀": 7, "\uffff": 8, "": 9},
    {"nested": {"z": {"y": [{"b": None, "a": True}, False, 0, -1]}, "a": []}},
    'quotes " backslash \\ slash / tab \t newline \n cr \r bell \x07 nul \x00 del \x7f',
    "\u2028\u2029 line separators, \ufeff bom, é, 中文, 😀, \U0010ffff",
    2**63 - 1,
    -(2**63),
    2**63,
    2**64,
    -(2**63) - 1,
    10**100,
    [1e16, -0.0, 0.0, 1e-5, 1e-4, 0.1, 5e-324, 1.7976931348623157e308, 123456789012345678.0],
    {"float": 1.5, "int": 1, "bool": True},
    [True, False, None, 1, "1"],
    _Level.LOW,
    {"k": _Level.LOW},
    _Text("a str subclass"),
    {_Text("key"): "subclass key"},
    {"tuple": (1, 2, "three")},
]


@pytest.mark.parametrize("value", TRICKY, ids=lambda v: repr(v)[:40])
def test_fast_encoder_matches_json_dumps_on_tricky_values(value: Any) -> None:
    _same(value)


def test_every_code_point_is_escaped_as_json_dumps_escapes_it() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    out = _same({"text": text, text[:200]: text[:50]})
    assert json.loads(out)["text"] == text


def test_lone_surrogates_are_escaped_by_the_reference_path() -> None:
    value = {"out": "bad \udc80 byte", "k\ud800": ["\udfff"]}
    out = _same(value)
    assert "\\udc80" in out and "\\ud800" in out and "\\udfff" in out
    out.encode("utf-8")  # always storable
    assert json.loads(out) == value


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_infinity_are_refused_on_every_path(bad: float) -> None:
    for value in (bad, [bad], {"a": {"b": bad}}):
        with pytest.raises(InvalidEventError, match="NaN or infinite"):
            canonical_json(value)
        with pytest.raises(InvalidEventError, match="NaN or infinite"):
            canonical_json_bytes(value)


def test_non_string_keys_are_written_as_json_dumps_writes_them() -> None:
    _same({1: "a", 2: "b"})
    _same({True: 1, False: 2})


@pytest.mark.parametrize("depth", [1, 99, 100, 101, 102, 150, 400])
def test_deep_nesting_matches_the_reference(depth: int) -> None:
    value: Any = "leaf"
    for i in range(depth):
        value = {"d": value, "c": i} if i % 2 else [value, i]
    _same(value)


def test_nesting_too_deep_for_json_dumps_is_refused_on_every_path() -> None:
    value: Any = "leaf"
    for _ in range(5_000):
        value = [value]
    with pytest.raises(InvalidEventError, match="nested too deeply"):
        canonical_json(value)
    with pytest.raises(InvalidEventError, match="nested too deeply"):
        canonical_json_bytes(value)


def test_plain_data_takes_the_fast_path_and_the_rest_does_not() -> None:
    # The fast path must be the one under test above, not silently skipped.
    assert _sorted_plain({"b": [1, "x", None, True], "a": {}}) == {
        "a": {},
        "b": [1, "x", None, True],
    }
    assert list(_sorted_plain({"b": 1, "a": 2})) == ["a", "b"]
    for other in (1.0, [1.0], {"a": (1,)}, {1: "a"}, 2**63, _Level.LOW, _Text("s")):
        with pytest.raises(_NotPlain):
            _sorted_plain(other)


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(9 if depth < 6 else 5)
    if choice == 0:
        return rng.choice([None, True, False])
    if choice == 1:
        return rng.randrange(-(2**70), 2**70) if rng.random() < 0.2 else rng.randrange(-1000, 1000)
    if choice == 2:
        return rng.choice([rng.random() * 10 ** rng.randrange(-30, 30), -0.0, 1e16, 1e-7])
    if choice in (3, 4):
        alphabet = 'abcZ _-"\\/\n\t\x00\x1f\x7fé中😀\u2028'
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
    if choice in (5, 6):
        return {
            "".join(rng.choice("abAB_é😀") for _ in range(rng.randrange(4))): _random_value(
                rng, depth + 1
            )
            for _ in range(rng.randrange(6))
        }
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(6))]


def test_random_json_data_encodes_byte_identically() -> None:
    rng = random.Random(20260517)
    for _ in range(3_000):
        _same(_random_value(rng))


def test_event_payloads_equal_the_reference_encoding_of_their_dump() -> None:
    events = [
        Message(role="user", parts=[TextPart(text='héllo \x00 \u2028 😀 "q"')]),
        Message(
            role="tool",
            parts=[ToolResultPart(tool_call_id="c1", name="sh", output="bad \udc80 byte")],
        ),
        Custom(name="n", data={"z": 1e16, "a": [-0.0, 2**80, {"é": None}], "m": 1e-5}),
        Custom(name="n", data={"b": {"d": [1, 2], "c": "x"}, "a": True}),
    ]
    for evt in events:
        data = EVENT_ADAPTER.dump_python(
            evt, mode="json", exclude_none=True, exclude={"id", "created_at", "kind"}
        )
        assert encode_event(evt) == canonical_dumps(data)


def test_stored_payloads_and_hashes_do_not_depend_on_the_batch_size(store: EventStore) -> None:
    """A 1-event append (single-row path) and a large batch (bulk path) store the same
    bytes for the same events, and both chains verify."""
    at = datetime(2026, 5, 17, 12, 0, 0, 123456, tzinfo=UTC)

    def batch() -> list[Any]:
        odd_id = "id \x00 \udc80 é" + "x" * 300  # index copies are escaped and capped
        call = ToolCallPart(id=odd_id, name="n" * 300, arguments='{"a": 1e-05}')
        result = ToolResultPart(tool_call_id=odd_id, name="sh", output="\udc80", state="error")
        return [
            Message(id="m1", role="assistant", parts=[TextPart(text="t"), call], created_at=at),
            Message(id="m2", role="tool", parts=[result], created_at=at),
            Message(
                id="m3",
                role="tool",
                parts=[ToolResultPart(tool_call_id="", output="")],
                created_at=at,
            ),
        ] + [
            Custom(
                id=f"e{i}",
                created_at=at,
                name="n",
                data={"i": i, "f": 1e16, "s": "é😀\u2028\x00", "big": 2**70, "z": {"b": 1, "a": 2}},
            )
            for i in range(40)
        ]

    one, many = store.create_session(), store.create_session()
    for evt in batch():
        store.append(one.id, [evt])
    store.append(many.id, batch())
    a, b = list(store.read(one.id)), list(store.read(many.id))
    assert len(a) == len(b) == 43
    assert [e.hash for e in a] == [e.hash for e in b]
    assert [e.event for e in a] == [e.event for e in b] == batch()
    assert store.verify(one.id).ok and store.verify(many.id).ok

    def parts(sid: str) -> list[tuple[Any, ...]]:
        q = text(
            "SELECT seq, idx, type, tool_call_id, tool_name, state, token_count "
            "FROM parts WHERE session_id = :s ORDER BY seq, idx"
        )
        with store.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(q, {"s": sid})]

    rows = parts(many.id)
    assert rows == parts(one.id)
    assert rows[1][3] == ("id \\u0000 \\udc80 é" + "x" * 300)[:255] and rows[1][4] == "n" * 255
    assert rows[2][3:6] == rows[1][3:4] + ("sh", "error") and rows[3][3] is None


_UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def test_new_ids_are_uuid7_unique_and_increasing() -> None:
    ids = [new_id(), *new_ids(5_000), new_id(), *new_ids(1), *new_ids(0)]
    assert len(ids) == 5_003
    assert all(_UUID7.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)


def _id_ms(value: str) -> int:
    return int(value.replace("-", "")[:12], 16)


def test_new_ids_carry_the_clock_and_their_counter() -> None:
    """An id holds the millisecond it was made in (or a later one, once 4,096 ids in one
    millisecond carried its counter over), its counter goes up by one per id within a
    millisecond, and rand_b is random (no two ids share it)."""
    import time as _time

    from eventstore import codec

    while _time.time_ns() // 1_000_000 <= codec._last_ms:  # a millisecond of its own
        _time.sleep(0.001)
    before = _time.time_ns() // 1_000_000
    ids = new_ids(10_000)
    after = _time.time_ns() // 1_000_000
    stamps = [_id_ms(i) for i in ids]
    assert before <= stamps[0] <= after
    # 10,000 ids from one clock reading, the counter starting below 2,048 in a new
    # millisecond: they carry into the next two.
    assert stamps[-1] - stamps[0] == 2
    counters = [int(i[15:18], 16) for i in ids]
    for k in range(1, len(ids)):
        if stamps[k] == stamps[k - 1]:
            assert counters[k] == counters[k - 1] + 1
        else:
            assert (stamps[k], counters[k], counters[k - 1]) == (stamps[k - 1] + 1, 0, 4095)
    assert len({i[19:] for i in ids}) == len(ids)


def test_new_ids_go_on_after_a_carry_while_the_clock_stands_still(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ids made faster than the clock moves (a carried counter) are followed by larger
    ones: the next call goes on from the millisecond the last id carried into."""
    from eventstore import codec

    frozen = (codec._last_ms + 10) * 1_000_000
    monkeypatch.setattr(codec.time, "time_ns", lambda: frozen)
    first, second, third = new_ids(5_000), new_ids(5_000), new_ids(1)
    every = first + second + third
    assert every == sorted(every) and len(set(every)) == len(every)
    assert _id_ms(third[0]) > _id_ms(first[0]) + 1


def test_new_ids_from_many_threads_are_unique_and_each_call_in_order() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        batches = list(pool.map(new_ids, [k % 97 for k in range(800)]))
    every = [i for b in batches for i in b]
    assert len(set(every)) == len(every) == sum(k % 97 for k in range(800))
    assert all(b == sorted(b) for b in batches)
    assert all(_UUID7.fullmatch(i) for i in every)


def test_every_event_class_is_dumped_as_the_union_dumps_it() -> None:
    """Each event class is dumped by its own serializer (skipping the union's dispatch);
    the payload must be what the union's serializer gives, for every kind."""
    from tests.test_events import EVENT_DICTS

    for raw, cls in EVENT_DICTS.values():
        evt = EVENT_ADAPTER.validate_python(raw)
        assert type(evt) is cls
        data = EVENT_ADAPTER.dump_python(
            evt, mode="json", exclude_none=True, exclude={"id", "created_at", "kind"}
        )
        assert encode_event(evt) == canonical_dumps(data)


def test_an_event_subclass_is_dumped_through_the_union() -> None:
    class Tagged(Message):
        tag: str = "t"

    evt = Tagged(role="user", parts=[TextPart(text="hi")])
    data = EVENT_ADAPTER.dump_python(
        evt, mode="json", exclude_none=True, exclude={"id", "created_at", "kind"}, warnings=False
    )
    assert encode_event(evt) == canonical_dumps(data)


def test_message_part_rows_are_those_of_count_part_and_part_columns() -> None:
    from eventstore.codec import encode, part_columns
    from eventstore.events import FilePart, ProviderPart, ReasoningPart
    from eventstore.tokens import MESSAGE_OVERHEAD, HeuristicTokenCounter, count_part

    class _Sub(TextPart):
        pass

    odd = ["", "c" * 300, "nul\x00id", "bad \udc80 id", "é" * 260, "plain"]
    parts: list[Any] = [TextPart(text="hello"), _Sub(text="sub"), ReasoningPart(text="r")]
    for v in odd:
        parts += [
            ToolCallPart(id=v, name=v, arguments='{"a": 1}'),
            ToolResultPart(tool_call_id=v, name=v or None, output="out", state="error"),
        ]
    parts += [FilePart(data=b"x" * 10, media_type="image/png"), ProviderPart(provider="p", item={})]
    counter = HeuristicTokenCounter()
    enc = encode(Message(role="assistant", parts=parts), counter)
    want = []
    for i, p in enumerate(parts):
        row = part_columns(i, p)
        row["token_count"] = count_part(counter, p)
        want.append(row)
    assert enc.part_rows == want
    assert enc.token_count == MESSAGE_OVERHEAD + sum(r["token_count"] for r in want)


def _writer_in_a_fresh_process(block_orjson: bool) -> str:
    code = (
        "import sys\n"
        + ("sys.modules['orjson'] = None\n" if block_orjson else "")
        + "from eventstore import codec\n"
        "print(codec._plain_json.__module__, codec._plain_json.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_the_writer_is_orjson_where_installed_and_to_json_without_it() -> None:
    pytest.importorskip("orjson")
    assert _writer_in_a_fresh_process(block_orjson=False) == "orjson dumps"
    assert _writer_in_a_fresh_process(block_orjson=True) == "pydantic_core._pydantic_core to_json"


def test_the_writer_refuses_what_the_reference_path_must_write(plain_encoder: str) -> None:
    # What the encoder catches to fall back: a lone surrogate cannot be written as UTF-8.
    with pytest.raises(codec._PLAIN_JSON_REFUSED):
        codec._plain_json({"out": "bad \udc80 byte"})
    value = {"out": "bad \udc80 byte", "n": 1}
    assert canonical_json(value) == '{"n":1,"out":"bad \\udc80 byte"}'


@pytest.mark.parametrize(
    "data",
    [
        {"b": [1, "é\n", {"z": None, "a": True}], "a": "x", "n": -(2**63)},
        "just text",
        None,
        {"f": 0.00001},  # a float: the general path writes it
        {"big": 2**70},
        {"s": "\ud800"},  # a lone surrogate: the general path escapes it
    ],
)
def test_a_custom_event_is_encoded_exactly_as_the_general_path_writes_it(data: Any) -> None:
    from eventstore import Custom
    from eventstore.codec import EVENT_ADAPTER, canonical_json, encode
    from eventstore.tokens import HeuristicTokenCounter

    evt = Custom(name="tool.log", data=data, created_at=datetime(2026, 1, 2, tzinfo=UTC))
    enc = encode(evt, HeuristicTokenCounter())
    dumped = EVENT_ADAPTER.dump_python(
        evt, mode="json", exclude_none=True, exclude={"id", "created_at", "kind"}
    )
    assert enc.payload == canonical_json(dumped)
    plain = not isinstance(data, dict) or not any(k in data for k in ("f", "big", "s"))
    assert enc.proven is plain  # only plain data skips the read-back parse


def test_a_custom_event_the_store_cannot_keep_is_still_refused(tmp_path: Any) -> None:
    from eventstore import Custom, EventStore, InvalidEventError

    store = EventStore(f"sqlite:///{tmp_path / 'c.db'}")
    sid = store.create_session().id
    deep: Any = "leaf"
    for _ in range(250):
        deep = {"d": deep}
    for data in ({"\ud800": 1}, {"x": float("nan")}, deep):
        with pytest.raises(InvalidEventError):
            store.append(sid, [Custom(name="bad", data=data)])
    assert store.get_session(sid).head_seq == 0
