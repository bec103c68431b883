"""Lossless conversion between :class:`~eventstore.events.Message` and OpenAI chat dicts.

The OpenAI chat format (which litellm speaks for every provider) is the lingua franca of
agent frameworks: traces, trajectories and live calls all use it. :func:`from_openai`
turns one chat message dict into a :class:`Message` and :func:`to_openai` turns it back,
so that for any valid message ``m``::

    to_openai(from_openai(m)) == [m]

How that is guaranteed: :func:`from_openai` maps every field it understands to parts (text,
files, tool calls, tool results, reasoning), then renders the message back and compares. Any
top-level field whose rendering differs from the original (an unknown key such as
``refusal`` or SWE-agent's ``thought``, a content part with a field the part models have no
slot for, ``content: ""`` beside tool calls) is kept verbatim in :attr:`Message.extra`, and
:func:`to_openai` lays ``extra`` over what it renders. Fields the original did not have but
the rendering would add (``tool_call_id`` of a SWE-agent tool message, which carries
``tool_call_ids`` instead) are listed under :data:`OMIT_KEY` in ``extra``. So the parts
always hold the meaning (token counts, views, pruning work on them), and ``extra`` holds
only the difference needed to reproduce the exact original.

A tool-role :class:`Message` may hold several :class:`ToolResultPart` objects; it renders
as one ``{"role": "tool"}`` dict per result.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Callable, Iterable
from typing import Any

from .codec import copy_json
from .errors import InvalidEventError
from .events import (
    PURGED,
    FilePart,
    Message,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

__all__ = [
    "OMIT_KEY",
    "PlaceholderFor",
    "to_openai",
    "from_openai",
    "messages_to_openai",
    "messages_from_openai",
]

OMIT_KEY = "eventstore:omit"
"""Key in :attr:`Message.extra` listing rendered fields the original message did not have."""

PlaceholderFor = Callable[[int, Part], "str | None"]
"""``(part_index, part) -> text``: text to show instead of a part (``None``: show the part)."""

_ROLES = {"system", "user", "assistant", "tool"}
# Roles the Message model has no literal for; rendered as the nearest role and restored
# exactly through ``extra["role"]``.
_ROLE_ALIASES = {"developer": "system"}


# --------------------------------------------------------------------------- rendering


def to_openai(
    message: Message,
    *,
    placeholder_for: PlaceholderFor | None = None,
    extra: bool = True,
    null_content: bool = True,
    provider: str | None = None,
) -> list[dict[str, Any]]:
    """Render a message as OpenAI/litellm chat message dicts.

    Args:
        message: The message.
        placeholder_for: Called with ``(index, part)`` for every part; a returned string
            is shown instead of the part (a compacted tool output, for example).
        extra: Lay :attr:`Message.extra` over the rendering, reproducing the original
            dict exactly. Pass ``False`` to emit only the standard OpenAI fields (what a
            provider expects when a message came from a trajectory with private keys).
        null_content: Render a message that only calls tools with ``content: None``, as
            providers send it (``False``: an empty string, as the first release did).
        provider: Whose :class:`~eventstore.events.ProviderPart` items to send back (as
            content blocks, exactly as stored); every other provider's are left out.

    Returns:
        One dict, or one per tool result for a tool message.

    Raises:
        InvalidEventError: The parts cannot be expressed in the OpenAI format (a tool
            result outside a tool message, a tool call outside an assistant message).
    """
    if message.role == "tool":
        out = _render_tool(message, placeholder_for)
    else:
        out = [_render_chat(message, placeholder_for, null_content, provider)]
    if extra and message.extra:
        replaced = placeholder_for is not None and _any_placeholder(message, placeholder_for)
        _overlay(out, message.extra, keep_rendered_content=replaced)
    return out


def messages_to_openai(messages: Iterable[Message], *, extra: bool = True) -> list[dict[str, Any]]:
    """Render several messages (tool messages may expand to several dicts)."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        out.extend(to_openai(msg, extra=extra))
    return out


def _any_placeholder(message: Message, placeholder_for: PlaceholderFor) -> bool:
    return any(placeholder_for(i, p) is not None for i, p in enumerate(message.parts))


def _overlay(
    out: list[dict[str, Any]], extra: dict[str, Any], *, keep_rendered_content: bool
) -> None:
    omit = extra.get(OMIT_KEY) or []
    per_result = len(out) > 1
    for d in out:
        for key, value in extra.items():
            if key == OMIT_KEY:
                continue
            if key == "content" and keep_rendered_content:
                # A placeholder replaced part of the content; the verbatim original would
                # bring the hidden text back.
                continue
            if per_result and key in ("content", "tool_call_id", "name"):
                continue
            d[key] = _copy(value)
        for key in omit:
            d.pop(key, None)


def _copy(value: Any) -> Any:
    """A deep copy of stored JSON data (``copy.deepcopy`` for anything built in code)."""
    try:
        return copy_json(value)
    except TypeError:
        return copy.deepcopy(value)


def _render_tool(message: Message, placeholder_for: PlaceholderFor | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, part in enumerate(message.parts):
        if isinstance(part, ProviderPart):
            continue  # a tool message's results are what providers read back
        if not isinstance(part, ToolResultPart):
            raise InvalidEventError(
                f"parts[{i}]: a tool message holds only tool results, not {part.type!r}"
            )
        text = placeholder_for(i, part) if placeholder_for else None
        output = part.output if text is None else text
        content: Any = [{"type": "text", "text": output}] if message.content_list else output
        d: dict[str, Any] = {"role": "tool", "tool_call_id": part.tool_call_id, "content": content}
        if part.name is not None:
            d["name"] = part.name
        out.append(d)
    return out


def _render_chat(
    message: Message,
    placeholder_for: PlaceholderFor | None,
    null_content: bool = True,
    provider: str | None = None,
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning_text: str | None = None
    blocks: list[dict[str, Any]] = []
    for i, part in enumerate(message.parts):
        text = placeholder_for(i, part) if placeholder_for else None
        if isinstance(part, ToolResultPart):
            raise InvalidEventError(
                f"parts[{i}]: a tool result belongs in a tool message, not {message.role!r}"
            )
        if isinstance(part, ToolCallPart):
            if message.role != "assistant":
                raise InvalidEventError(
                    f"parts[{i}]: only assistant messages hold tool calls, not {message.role!r}"
                )
            # A truncated call shows its cut arguments (still JSON); else it stays whole.
            calls.append(_render_call(part, text))
        elif text is not None:
            content.append({"type": "text", "text": text})
        elif isinstance(part, ReasoningPart):
            if part.format == "reasoning_content":
                reasoning_text = (reasoning_text or "") + part.text
            else:
                blocks.append(_render_block(part))
        elif isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, ProviderPart):
            if provider is not None and part.provider == provider:
                content.append(_copy(part.item))
        else:
            content.append(_render_file(part))
    d: dict[str, Any] = {"role": message.role}
    if null_content and calls and not content and not message.content_list:
        # Providers send a message that only calls tools with ``content: null``; some
        # reject an empty string there.
        d["content"] = None
    else:
        d["content"] = _content_value(content, message.content_list)
    if message.name is not None:
        d["name"] = message.name
    if calls:
        d["tool_calls"] = calls
    if reasoning_text is not None:
        d["reasoning_content"] = reasoning_text
    if blocks:
        d["thinking_blocks"] = blocks
    return d


def _content_value(content: list[dict[str, Any]], as_list: bool) -> Any:
    if len(content) == 1 and not as_list and content[0].get("type") == "text":
        return content[0]["text"]  # the usual case: one text part
    if as_list or any(c.get("type") != "text" for c in content):
        return content
    # A plain-string message: several text parts (built by code, not parsed) join the way
    # Message.text joins them.
    return "\n".join(c["text"] for c in content)


def _render_call(part: ToolCallPart, arguments: str | None = None) -> dict[str, Any]:
    return {
        "id": part.id,
        "type": part.call_type,
        "function": {
            "name": part.name,
            "arguments": part.arguments if arguments is None else arguments,
        },
    }


def _render_block(part: ReasoningPart) -> dict[str, Any]:
    if part.redacted_data is not None:
        return {"type": "redacted_thinking", "data": part.redacted_data}
    block: dict[str, Any] = {"type": "thinking", "thinking": part.text}
    if part.signature is not None:
        block["signature"] = part.signature
    return block


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _data_url(part: FilePart) -> str:
    return f"data:{part.media_type};base64,{_b64(part.data or b'')}"


def _render_file(part: FilePart) -> dict[str, Any]:
    if part.uri == PURGED and part.data is None and part.blob is None:
        return {"type": "text", "text": "[purged attachment]"}
    is_file = part.name is not None or (part.uri is not None and part.data is not None)
    if not is_file and part.media_type.startswith("image/"):
        image: dict[str, Any] = {"url": part.uri if part.uri is not None else _data_url(part)}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if not is_file and part.media_type.startswith("audio/") and part.data is not None:
        fmt = part.media_type.split("/", 1)[1]
        return {"type": "input_audio", "input_audio": {"data": _b64(part.data), "format": fmt}}
    file: dict[str, Any] = {}
    if part.data is not None:
        file["file_data"] = _data_url(part)
    if part.uri is not None:
        file["file_id"] = part.uri
    if part.name is not None:
        file["filename"] = part.name
    return {"type": "file", "file": file}


# --------------------------------------------------------------------------- parsing


def from_openai(msg: dict[str, Any]) -> Message:
    """Convert one OpenAI/litellm chat message dict into a :class:`Message`.

    Every field survives: what the parts cannot reproduce exactly is kept in
    :attr:`Message.extra` (see the module docstring), so ``to_openai(from_openai(m)) == [m]``.

    Raises:
        InvalidEventError: ``msg`` is not a chat message (not a dict, unknown role, a
            tool message without a tool call id, a malformed tool call).
    """
    if not isinstance(msg, dict):
        raise InvalidEventError(f"a chat message must be an object, not {type(msg).__name__}")
    role = msg.get("role")
    if not isinstance(role, str) or (role not in _ROLES and role not in _ROLE_ALIASES):
        raise InvalidEventError(f"role: expected one of system/user/assistant/tool, got {role!r}")
    role = _ROLE_ALIASES.get(role, role)
    if role == "tool":
        message = _parse_tool(msg)
    else:
        message = _parse_chat(role, msg)
    rendered = to_openai(message, extra=False)[0]
    diff = {k: copy.deepcopy(v) for k, v in msg.items() if k not in rendered or rendered[k] != v}
    omit = sorted(k for k in rendered if k not in msg)
    if omit:
        diff[OMIT_KEY] = omit
    if diff:
        message.extra = diff
    return message


def messages_from_openai(messages: Iterable[dict[str, Any]]) -> list[Message]:
    """Convert a list of chat message dicts; errors name the index of the bad message."""
    out: list[Message] = []
    for i, msg in enumerate(messages):
        try:
            out.append(from_openai(msg))
        except InvalidEventError as exc:
            raise InvalidEventError(f"messages[{i}]: {exc}") from None
    return out


def _parse_tool(msg: dict[str, Any]) -> Message:
    call_id = msg.get("tool_call_id")
    if call_id is None:
        # SWE-agent writes a list of ids; a message answers one call.
        ids = msg.get("tool_call_ids")
        if isinstance(ids, list) and ids and isinstance(ids[0], str):
            call_id = ids[0]
    if not isinstance(call_id, str):
        raise InvalidEventError("tool_call_id: a tool message needs the id of the call it answers")
    name = msg.get("name")
    content = msg.get("content")
    as_list = isinstance(content, list)
    if isinstance(content, list):
        output = "\n".join(_texts(content))
    else:
        output = content if isinstance(content, str) else ""
    part = ToolResultPart(
        tool_call_id=call_id, output=output, name=name if isinstance(name, str) else None
    )
    return Message(role="tool", parts=[part], content_list=as_list)


def _texts(content: list[Any]) -> list[str]:
    return [
        c["text"]
        for c in content
        if isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str)
    ]


def _parse_chat(role: str, msg: dict[str, Any]) -> Message:
    parts: list[Part] = []
    reasoning = msg.get("reasoning_content")
    if role == "assistant" and isinstance(reasoning, str):
        parts.append(ReasoningPart(text=reasoning, format="reasoning_content"))
    blocks = msg.get("thinking_blocks")
    if role == "assistant" and isinstance(blocks, list):
        parts.extend(_parse_block(b) for b in blocks if isinstance(b, dict))
    content = msg.get("content")
    as_list = isinstance(content, list)
    if isinstance(content, str):
        if content:
            parts.append(TextPart(text=content))
    elif isinstance(content, list):
        parts.extend(p for p in (_parse_content_part(c) for c in content) if p is not None)
    calls = msg.get("tool_calls")
    if role == "assistant" and isinstance(calls, list):
        parts.extend(_parse_call(i, c) for i, c in enumerate(calls))
    name = msg.get("name")
    return Message(
        role=role,  # type: ignore[arg-type]
        parts=parts,
        name=name if isinstance(name, str) else None,
        content_list=as_list,
    )


def _parse_block(block: dict[str, Any]) -> ReasoningPart:
    if block.get("type") == "redacted_thinking":
        data = block.get("data")
        return ReasoningPart(redacted_data=data if isinstance(data, str) else "")
    text = block.get("thinking")
    sig = block.get("signature")
    return ReasoningPart(
        text=text if isinstance(text, str) else "",
        signature=sig if isinstance(sig, str) else None,
    )


def _parse_call(index: int, call: Any) -> ToolCallPart:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise InvalidEventError(f"tool_calls[{index}].function.name: missing or not a string")
    call_id = call.get("id")
    args = fn.get("arguments")
    if args is not None and not isinstance(args, str):
        # Some producers hand over parsed arguments; the verbatim original stays in extra.
        args = json.dumps(args)
    return ToolCallPart(
        id=call_id if isinstance(call_id, str) else "",
        name=fn["name"],
        arguments=args or "",
        call_type=call.get("type") if isinstance(call.get("type"), str) else "function",
    )


def _parse_content_part(item: Any) -> Part | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind == "text" and isinstance(item.get("text"), str):
        return TextPart(text=item["text"])
    if kind == "image_url":
        image = item.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str):
            return None
        detail = image.get("detail") if isinstance(image, dict) else None
        part = _from_url(url, default_type="image/*")
        part.detail = detail if isinstance(detail, str) else None
        return part
    if kind == "input_audio":
        audio = item.get("input_audio")
        if not isinstance(audio, dict):
            return None
        data = _decode_b64(audio.get("data"))
        fmt = audio.get("format")
        if data is None or not isinstance(fmt, str):
            return None
        return FilePart(data=data, media_type=f"audio/{fmt}")
    if kind == "file":
        return _parse_file(item.get("file"))
    return None


def _parse_file(file: Any) -> FilePart | None:
    if not isinstance(file, dict):
        return None
    part = FilePart()
    file_data = file.get("file_data")
    if isinstance(file_data, str):
        parsed = _from_url(file_data, default_type="application/octet-stream")
        part.data, part.media_type = parsed.data, parsed.media_type
        if parsed.uri is not None:
            return None  # not a base64 data URL; kept verbatim through extra
    file_id = file.get("file_id")
    if isinstance(file_id, str):
        part.uri = file_id
    filename = file.get("filename")
    if isinstance(filename, str):
        part.name = filename
    return part


def _decode_b64(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _from_url(url: str, *, default_type: str) -> FilePart:
    """A data URL becomes inline bytes and a media type; anything else stays a URI."""
    if url.startswith("data:") and ";base64," in url:
        head, _, payload = url[5:].partition(";base64,")
        data = _decode_b64(payload)
        if data is not None and head and ";" not in head and "," not in head:
            return FilePart(data=data, media_type=head)
    return FilePart(uri=url, media_type=default_type)
