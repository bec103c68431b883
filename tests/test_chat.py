"""Message <-> OpenAI chat dict conversion: exact round trips and the rendered shape."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import corpus_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import (
    FilePart,
    InvalidEventError,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from eventstore.chat import (
    OMIT_KEY,
    from_openai,
    messages_from_openai,
    messages_to_openai,
    to_openai,
)
from eventstore.codec import decode_event, encode_event
from eventstore.events import EVENT_ADAPTER


def _roundtrip(m: dict[str, Any]) -> Message:
    msg = from_openai(m)
    assert to_openai(msg) == [m]
    # The message must also survive storage: encode, decode, render again.
    stored = decode_event("message", encode_event(msg), "id-1", _NOW)
    assert isinstance(stored, Message)
    assert to_openai(stored) == [m]
    return msg


_NOW = datetime(2025, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------- hand-written


def test_plain_string_messages_become_one_text_part() -> None:
    for role in ("system", "user", "assistant"):
        msg = _roundtrip({"role": role, "content": "hello"})
        assert msg.role == role
        assert msg.parts == [TextPart(text="hello")]
        assert msg.extra is None
        assert msg.content_list is False


def test_content_list_is_remembered() -> None:
    m = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    msg = _roundtrip(m)
    assert msg.content_list is True
    assert [p.text for p in msg.parts] == ["a", "b"]  # type: ignore[union-attr]
    assert msg.extra is None


def test_a_tool_call_only_message_goes_out_with_null_content() -> None:
    call = ToolCallPart(id="c1", name="ls", arguments="{}")
    (rendered,) = to_openai(Message.assistant("", tool_calls=[call]))
    assert rendered["content"] is None and rendered["tool_calls"][0]["id"] == "c1"
    # Text beside the calls, or list content, still renders as before.
    (with_text,) = to_openai(Message.assistant("looking", tool_calls=[call]))
    assert with_text["content"] == "looking"
    listed = Message(role="assistant", parts=[call], content_list=True)
    assert to_openai(listed)[0]["content"] == []
    # A producer that sent "" gets "" back exactly (kept in extra); null needs no extra.
    for content in ("", None):
        m = {"role": "assistant", "content": content, "tool_calls": [rendered["tool_calls"][0]]}
        msg = _roundtrip(m)
        assert msg.extra == (None if content is None else {"content": ""})


def test_assistant_tool_calls_keep_arguments_verbatim() -> None:
    args = '{ "path" : "a.py",\n "x": 1.50 }'  # odd spacing, trailing zero: never re-parsed
    m = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "open", "arguments": args}},
            {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ],
    }
    msg = _roundtrip(m)
    assert msg.parts == [
        ToolCallPart(id="c1", name="open", arguments=args),
        ToolCallPart(id="c2", name="ls", arguments="{}"),
    ]
    assert msg.extra is None


def test_assistant_with_only_tool_calls_renders_null_content() -> None:
    msg = Message.assistant(tool_calls=[ToolCallPart(id="c", name="f", arguments="{}")])
    (d,) = to_openai(msg)
    assert d["content"] is None  # as providers send it; an empty text is refused by some
    assert d["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}


@pytest.mark.parametrize("content", [None, "", "x"])
def test_assistant_content_none_empty_and_absent_round_trip(content: str | None) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    _roundtrip({"role": "assistant", "content": content, "tool_calls": [call]})
    msg = _roundtrip({"role": "assistant", "tool_calls": [call]})
    assert msg.extra == {OMIT_KEY: ["content"]}
    none = from_openai({"role": "assistant", "content": None, "tool_calls": [call]})
    assert none.extra is None  # null is what a tool-call-only message renders to
    empty = from_openai({"role": "assistant", "content": "", "tool_calls": [call]})
    assert empty.extra == {"content": ""}


def test_tool_messages_and_names() -> None:
    msg = _roundtrip({"role": "tool", "tool_call_id": "c1", "content": "out", "name": "ls"})
    assert msg.parts == [ToolResultPart(tool_call_id="c1", output="out", name="ls")]
    msg = _roundtrip(
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "o"}]}
    )
    assert msg.content_list and msg.tool_results[0].output == "o"
    msg = _roundtrip({"role": "user", "content": "hi", "name": "alice"})
    assert msg.name == "alice"


def test_tool_message_with_several_results_renders_one_dict_each() -> None:
    msg = Message(
        role="tool",
        parts=[
            ToolResultPart(tool_call_id="a", output="1", name="f"),
            ToolResultPart(tool_call_id="b", output="2"),
        ],
    )
    assert to_openai(msg) == [
        {"role": "tool", "tool_call_id": "a", "content": "1", "name": "f"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
    ]


def test_swe_agent_tool_call_ids_survive() -> None:
    m = {
        "role": "tool",
        "content": "ok",
        "agent": "main",
        "message_type": "observation",
        "tool_call_ids": ["call_1"],
    }
    msg = _roundtrip(m)
    assert msg.tool_results[0].tool_call_id == "call_1"
    # Provider-clean rendering drops the private keys and names the call properly.
    assert to_openai(msg, extra=False) == [
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    ]


def test_reasoning_content_and_thinking_blocks() -> None:
    m = {
        "role": "assistant",
        "content": "answer",
        "reasoning_content": "let me think",
        "thinking_blocks": [
            {"type": "thinking", "thinking": "step 1", "signature": "sig=="},
            {"type": "redacted_thinking", "data": "opaque"},
        ],
    }
    msg = _roundtrip(m)
    assert msg.parts[:3] == [
        ReasoningPart(text="let me think", format="reasoning_content"),
        ReasoningPart(text="step 1", signature="sig=="),
        ReasoningPart(redacted_data="opaque"),
    ]
    assert msg.extra is None


def test_images_audio_and_files() -> None:
    png = b"\x89PNG\r\n\x1a\n\x00binary"
    b64 = base64.b64encode(png).decode()
    wav = base64.b64encode(b"RIFF....WAVE").decode()
    pdf = base64.b64encode(b"%PDF-1.7").decode()
    m = {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}},
            {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}},
            {
                "type": "file",
                "file": {"file_data": f"data:application/pdf;base64,{pdf}", "filename": "a.pdf"},
            },
            {"type": "file", "file": {"file_id": "file-123"}},
        ],
    }
    msg = _roundtrip(m)
    assert msg.extra is None
    img_url, img_data, audio, doc, ref = msg.parts[1:]
    assert img_url == FilePart(uri="https://x/y.png", media_type="image/*", detail="low")
    assert img_data == FilePart(data=png, media_type="image/png")
    assert audio == FilePart(data=b"RIFF....WAVE", media_type="audio/wav")
    assert doc == FilePart(data=b"%PDF-1.7", media_type="application/pdf", name="a.pdf")
    assert ref == FilePart(uri="file-123")


def test_unknown_fields_and_part_fields_survive_in_extra() -> None:
    m = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        "refusal": None,
        "audio": {"id": "a1"},
        "annotations": [],
        "function_call": None,
        "provider_specific_fields": {"x": 1},
    }
    msg = _roundtrip(m)
    assert msg.text == "hi"  # the meaning is still in the parts
    assert msg.extra is not None and msg.extra["refusal"] is None
    assert "content" in msg.extra


def test_odd_shapes_survive() -> None:
    for m in [
        {"role": "user", "content": None},
        {"role": "user"},
        {"role": "user", "content": [{"type": "image_url", "image_url": "https://a/b.jpg"}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x"}}]},
        {"role": "user", "content": [{"type": "weird", "x": 1}, "string item"]},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "assistant", "content": "x", "tool_calls": None, "reasoning_content": None},
        {"role": "assistant", "content": "x", "thinking_blocks": []},
        {"role": "developer", "content": "rules"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"index": 0, "id": "c", "type": "function", "function": {"name": "f"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "a"}] * 2},
    ]:
        _roundtrip(m)


def test_placeholder_replaces_part_content_and_beats_extra() -> None:
    m = {"role": "tool", "tool_call_id": "c", "content": "huge output", "agent": "main"}
    msg = from_openai(m)
    (d,) = to_openai(msg, placeholder_for=lambda i, p: "[output pruned]")
    assert d == {"role": "tool", "tool_call_id": "c", "content": "[output pruned]", "agent": "main"}
    # Even when the original content had to be kept verbatim, the placeholder wins.
    m2 = {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "a"}] * 2}
    (d2,) = to_openai(from_openai(m2), placeholder_for=lambda i, p: "[pruned]")
    assert d2["content"] == [{"type": "text", "text": "[pruned]"}]


def test_invalid_messages_raise_clear_errors() -> None:
    with pytest.raises(InvalidEventError, match="role"):
        from_openai({"role": "robot", "content": "x"})
    with pytest.raises(InvalidEventError, match="object"):
        from_openai(["role", "user"])  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError, match="tool_call_id"):
        from_openai({"role": "tool", "content": "x"})
    with pytest.raises(InvalidEventError, match=r"messages\[1\].*tool_calls\[0\]"):
        messages_from_openai(
            [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [{}]}]
        )
    with pytest.raises(InvalidEventError, match="tool message"):
        to_openai(Message(role="tool", parts=[TextPart(text="x")]))
    with pytest.raises(InvalidEventError, match="assistant"):
        to_openai(Message(role="user", parts=[ToolCallPart(id="c", name="f")]))


def test_messages_list_helpers() -> None:
    ms = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
    ]
    assert messages_to_openai(messages_from_openai(ms)) == ms


# --------------------------------------------------------------------------- property

_text = st.text(max_size=40)
_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_b64 = st.binary(max_size=24).map(lambda b: base64.b64encode(b).decode())
_text_part = st.builds(lambda t: {"type": "text", "text": t}, _text)
_image_part = st.one_of(
    st.builds(
        lambda u, d: {"type": "image_url", "image_url": {"url": u, **({"detail": d} if d else {})}},
        st.sampled_from(["https://e.com/a.png", "http://x"])
        | _b64.map(lambda b: f"data:image/jpeg;base64,{b}"),
        st.sampled_from([None, "auto", "low", "high"]),
    ),
)
_audio_part = st.builds(
    lambda b, f: {"type": "input_audio", "input_audio": {"data": b, "format": f}},
    _b64,
    st.sampled_from(["wav", "mp3"]),
)
_file_part = st.builds(
    lambda data, fid, name: {
        "type": "file",
        "file": {
            **({"file_data": f"data:application/pdf;base64,{data}"} if data is not None else {}),
            **({"file_id": fid} if fid else {}),
            **({"filename": name} if name else {}),
        },
    },
    st.none() | _b64,
    st.none() | _ids,
    st.none() | _text,
)
_content = st.one_of(
    _text,
    st.lists(st.one_of(_text_part, _image_part, _audio_part, _file_part), max_size=4),
)
_call = st.builds(
    lambda i, n, a, t: {"id": i, "type": t, "function": {"name": n, "arguments": a}},
    _ids,
    _ids,
    st.one_of(_text, _json.map(json.dumps)),
    st.just("function"),
)
_block = st.one_of(
    st.builds(
        lambda t, s: {"type": "thinking", "thinking": t, **({"signature": s} if s else {})},
        _text,
        st.none() | _ids,
    ),
    st.builds(lambda d: {"type": "redacted_thinking", "data": d}, _ids),
)
# Keys with no slot in the parts; they must come back through extra unchanged.
_extra_keys = st.dictionaries(
    st.sampled_from(
        [
            "refusal",
            "audio",
            "annotations",
            "function_call",
            "agent",
            "thought",
            "provider_specific_fields",
            "cache_control",
            "x-custom",
        ]
    ),
    _json,
    max_size=3,
)


@st.composite
def _messages(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
    m: dict[str, Any] = {"role": role}
    if role == "tool":
        m["content"] = draw(st.one_of(_text, st.lists(_text_part, min_size=1, max_size=1)))
        if draw(st.booleans()):
            m["tool_call_id"] = draw(_ids)
        else:
            m["tool_call_ids"] = [draw(_ids)]
        if draw(st.booleans()):
            m["name"] = draw(_ids)
    else:
        choice = draw(st.sampled_from(["value", "none", "absent"]))
        if choice == "value":
            m["content"] = draw(_content)
        elif choice == "none":
            m["content"] = None
        if draw(st.booleans()):
            m["name"] = draw(_ids)
        if role == "assistant":
            if draw(st.booleans()):
                m["tool_calls"] = draw(st.lists(_call, min_size=1, max_size=3))
            if draw(st.booleans()):
                m["reasoning_content"] = draw(_text)
            if draw(st.booleans()):
                m["thinking_blocks"] = draw(st.lists(_block, min_size=1, max_size=3))
    m.update(draw(_extra_keys))
    return m


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_messages())
def test_property_round_trip_is_exact(m: dict[str, Any]) -> None:
    msg = _roundtrip(m)
    # The parts carry the meaning: text and calls are there without consulting extra.
    if m["role"] == "assistant" and m.get("tool_calls"):
        assert [c.id for c in msg.tool_calls] == [c["id"] for c in m["tool_calls"]]
    if isinstance(m.get("content"), str) and m["role"] != "tool":
        assert msg.text == m["content"]
    EVENT_ADAPTER.validate_python(EVENT_ADAPTER.dump_python(msg, mode="json"))


# --------------------------------------------------------------------------- corpus


_SWE = corpus_files("swe-agent/**/*.traj")


@pytest.mark.skipif(not _SWE, reason="trajectory corpus not present")
@pytest.mark.parametrize("path", _SWE, ids=lambda p: p.parent.name[:40] + "/" + p.name)
def test_swe_agent_history_round_trips(path: Any) -> None:
    history = json.loads(path.read_text())["history"]
    assert history
    for m in history:
        msg = _roundtrip(m)
        if m["role"] == "tool":
            assert msg.tool_results[0].tool_call_id == m["tool_call_ids"][0]
        if m.get("tool_calls"):
            assert [c.arguments for c in msg.tool_calls] == [
                c["function"]["arguments"] for c in m["tool_calls"]
            ]
