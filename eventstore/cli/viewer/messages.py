"""What the viewer shows of a chat message: its role and one block per piece of it.

The view page works from the exact chat messages the model was sent (the dicts whose
canonical JSON the fingerprint hashes), the event page from a stored message's parts; both
come out as the same :class:`Block` list, so one template shows them alike. Text keeps its
line breaks, tool-call arguments are laid out key by key (a string value shown as the text
it holds, not as an escaped JSON string), and every tool result names the message that
holds its call. Nothing here marks anything safe: the templates escape every value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from eventstore.events import (
    FilePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

#: A block with more lines or characters than these starts folded.
LONG_LINES = 30
LONG_CHARS = 3_000
#: How many colours tell tool-call pairs apart (``pair-0`` .. ``pair-7`` in the stylesheet).
PAIR_COLOURS = 8

#: The keys of a chat message that :func:`message_blocks` lays out; any other is shown
#: as JSON in an "other fields" block, so the readable form leaves nothing out.
SHOWN_KEYS = frozenset(
    {
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "reasoning_content",
        "thinking_blocks",
    }
)

BlockKind = Literal["text", "reasoning", "tool_call", "tool_result", "attachment", "other"]


@dataclass
class Block:
    """One piece of a message as the viewer shows it."""

    kind: BlockKind
    """What the piece is."""
    text: str = ""
    """The text, reasoning, tool output or (for ``other``) indented JSON, verbatim."""
    label: str = ""
    """A short description: the tool name, a file's name and type, a result's state."""
    call_id: str | None = None
    """The tool call id, on a call and on its result."""
    arguments: list[tuple[str, str]] | None = None
    """A call's arguments key by key when they are a JSON object (strings as they read)."""
    pair: int | None = None
    """Where the other half of a call/result pair is: the number of the message holding
    it (the view page) or the seq of its event (the event page)."""
    pair_href: str = ""
    """The link to the other half: ``#`` and its anchor, or its event's page."""
    pair_in: Literal["message", "seq"] = "message"
    """What :attr:`pair` counts."""
    colour: int | None = None
    """Which pair colour a call and its result share."""
    anchor: str = ""
    """The element id a paired block is reached by."""

    @property
    def lines(self) -> int:
        """How many lines the block's text (or its arguments) spans."""
        if self.arguments is not None:
            return sum(v.count("\n") + 1 for _, v in self.arguments)
        return self.text.count("\n") + 1 if self.text else 0

    @property
    def size(self) -> int:
        """How many characters the block's text (or its arguments) holds."""
        if self.arguments is not None:
            return sum(len(k) + len(v) for k, v in self.arguments)
        return len(self.text)

    @property
    def long(self) -> bool:
        """Whether the block starts folded."""
        return self.lines > LONG_LINES or self.size > LONG_CHARS


@dataclass
class ShownMessage:
    """A chat message laid out for reading, with its exact JSON."""

    number: int
    """Its 1-based position in the list."""
    role: str
    """The role the model saw."""
    name: str | None
    """The message's ``name`` field (a tool's name on a tool message)."""
    blocks: list[Block] = field(default_factory=list)
    """Its pieces, in the order they are shown."""
    json: str = ""
    """The message exactly, as indented JSON."""


def pretty_arguments(arguments: Any) -> tuple[list[tuple[str, str]] | None, str]:
    """A tool call's arguments laid out to read: key by key when they are a JSON object
    (a string value as its text, anything else as indented JSON), else the whole value
    indented (or verbatim when it is not JSON at all).

    Returns:
        ``(pairs, text)``: the key/value pairs or ``None``, and the text shown without them.
    """
    value = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except ValueError:
            return None, arguments
    if isinstance(value, dict) and value:
        return [(str(k), v if isinstance(v, str) else _indented(v)) for k, v in value.items()], ""
    return None, _indented(value)


def _indented(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:,.1f} KB"
    return f"{n / (1024 * 1024):,.1f} MB"


def _b64_size(text: str) -> int:
    """How many bytes base64 ``text`` decodes to (without decoding it)."""
    return len(text) * 3 // 4 - (len(text) - len(text.rstrip("=")))


def _data_url_label(url: str) -> str:
    """``data:image/png;base64,...`` -> ``image/png, 12.3 KB inline``; a URL as itself."""
    if not url.startswith("data:"):
        return url
    head, _, body = url.partition(",")
    media = head[5:].split(";", 1)[0] or "data"
    size = _b64_size(body) if head.endswith(";base64") else len(body)
    return f"{media}, {_size(size)} inline"


def _content_blocks(content: Any) -> list[Block]:
    """The blocks of a chat message's ``content`` (a string or a list of content parts)."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [Block("text", text=content)]
    if not isinstance(content, list):
        return [Block("other", text=_indented(content), label="content")]
    out: list[Block] = []
    for c in content:
        kind = c.get("type") if isinstance(c, dict) else None
        if kind == "text" and isinstance(c.get("text"), str):
            out.append(Block("text", text=c["text"]))
            marks = {k: v for k, v in c.items() if k not in ("type", "text")}
            if marks:  # a cache breakpoint, citations: shown, not dropped
                out.append(Block("other", text=_indented(marks), label="text part fields"))
        elif kind == "image_url":
            image = c.get("image_url")
            url = image.get("url", "") if isinstance(image, dict) else str(image or "")
            out.append(Block("attachment", label=f"image: {_data_url_label(url)}"))
        elif kind == "file" and isinstance(c.get("file"), dict):
            f = c["file"]
            bits = [str(f["filename"])] if f.get("filename") else []
            if f.get("file_data"):
                bits.append(_data_url_label(str(f["file_data"])))
            if f.get("file_id"):
                bits.append(str(f["file_id"]))
            out.append(Block("attachment", label="file: " + ", ".join(bits or ["(unnamed)"])))
        elif kind == "input_audio" and isinstance(c.get("input_audio"), dict):
            audio = c["input_audio"]
            size = _b64_size(str(audio.get("data", "")))
            out.append(
                Block("attachment", label=f"audio: {audio.get('format', '?')}, {_size(size)}")
            )
        else:  # a provider's own item, sent back as stored
            out.append(Block("other", text=_indented(c), label=str(kind or "content part")))
    return out


def _reasoning_blocks(m: dict[str, Any]) -> list[Block]:
    out: list[Block] = []
    if isinstance(m.get("reasoning_content"), str) and m["reasoning_content"]:
        out.append(Block("reasoning", text=m["reasoning_content"], label="reasoning"))
    for b in m.get("thinking_blocks") or []:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "redacted_thinking":
            size = len(str(b.get("data", "")))
            out.append(Block("reasoning", label=f"redacted thinking ({size:,} characters)"))
        else:
            signed = " (signed)" if b.get("signature") else ""
            out.append(
                Block("reasoning", text=str(b.get("thinking", "")), label="thinking" + signed)
            )
    return out


def _call_block(call_id: str | None, name: str, arguments: Any) -> Block:
    pairs, text = pretty_arguments(arguments)
    return Block("tool_call", text=text, label=name, call_id=call_id, arguments=pairs)


def message_blocks(m: dict[str, Any]) -> list[Block]:
    """One chat message's blocks: reasoning, content, tool calls or its tool result, and
    any other field it carries."""
    if m.get("role") == "tool":
        content = m.get("content")
        if isinstance(content, list) and all(
            isinstance(c, dict) and c.get("type") == "text" for c in content
        ):
            content = "\n".join(str(c.get("text", "")) for c in content)
        plain = content is None or isinstance(content, str)
        result = Block(
            "tool_result",
            text=(content or "") if plain else "",
            label=str(m.get("name") or ""),
            call_id=m.get("tool_call_id"),
        )
        out = [result] if plain else [result, *_content_blocks(content)]
    else:
        out = _reasoning_blocks(m) + _content_blocks(m.get("content"))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                out.append(
                    _call_block(call.get("id"), str(fn.get("name", "")), fn.get("arguments"))
                )
            else:
                out.append(Block("other", text=_indented(call), label="tool call"))
    rest = {k: v for k, v in m.items() if k not in SHOWN_KEYS}
    if rest:
        out.append(Block("other", text=_indented(rest), label="other fields"))
    return out


def link_pairs(messages: Sequence[Sequence[Block]], start: int = 1) -> None:
    """Point each tool result at the message holding its call and back, giving the two
    one colour and anchors to reach each other by. Calls and results pair by id in order
    (some agents reuse an id within one history, as the view's rendering allows).
    ``start`` is the number of the first message."""
    waiting: dict[str, list[tuple[int, Block]]] = {}
    count = 0
    for number, blocks in enumerate(messages, start):
        for i, b in enumerate(blocks):
            if b.call_id is None:
                continue
            if b.kind == "tool_call":
                b.anchor = f"m{number}-call-{i}"
                waiting.setdefault(b.call_id, []).append((number, b))
            elif b.kind == "tool_result":
                queue = waiting.get(b.call_id)
                if not queue:
                    continue
                call_number, call = queue.pop(0)
                b.anchor = f"m{number}-result-{i}"
                b.colour = call.colour = count % PAIR_COLOURS
                count += 1
                b.pair, b.pair_href = call_number, f"#{call.anchor}"
                call.pair, call.pair_href = number, f"#{b.anchor}"


def show_messages(messages: Iterable[dict[str, Any]], start: int = 1) -> list[ShownMessage]:
    """Chat messages laid out for reading, each with its exact JSON, calls and results
    linked; ``start`` is the number of the first (a page of a longer list)."""
    shown = [
        ShownMessage(
            number=n,
            role=str(m.get("role", "")),
            name=m.get("name") if isinstance(m.get("name"), str) else None,
            blocks=message_blocks(m),
            json=json.dumps(m, indent=2, ensure_ascii=False),
        )
        for n, m in enumerate(messages, start)
    ]
    link_pairs([s.blocks for s in shown], start)
    return shown


def part_blocks(parts: Iterable[Part]) -> list[Block]:
    """A stored message's parts as blocks (the event page shows what was stored, before
    any compaction or provider filtering the view applies)."""
    out: list[Block] = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append(Block("text", text=p.text))
        elif isinstance(p, ReasoningPart):
            if p.redacted_data is not None:
                size = len(p.redacted_data)
                out.append(Block("reasoning", label=f"redacted thinking ({size:,} characters)"))
            else:
                signed = " (signed)" if p.signature else ""
                out.append(Block("reasoning", text=p.text, label="reasoning" + signed))
        elif isinstance(p, ToolCallPart):
            out.append(_call_block(p.id, p.name, p.arguments))
        elif isinstance(p, ToolResultPart):
            state = "error" if p.is_error and p.state == "completed" else p.state
            label = f"{p.name or ''} ({state})" if state != "completed" else p.name or ""
            out.append(Block("tool_result", text=p.output, label=label, call_id=p.tool_call_id))
        elif isinstance(p, FilePart):
            bits = [p.name] if p.name else []
            bits.append(p.media_type)
            if p.data is not None:
                bits.append(f"{_size(len(p.data))} inline")
            if p.blob is not None:
                bits.append(f"blob {p.blob[:16]}…")
            if p.uri is not None:
                bits.append(p.uri)
            kind = "image" if p.media_type.startswith("image/") else "file"
            out.append(Block("attachment", label=f"{kind}: " + ", ".join(bits)))
        elif isinstance(p, ProviderPart):
            out.append(Block("other", text=_indented(p.item), label=f"{p.provider} item"))
    return out


def link_events(
    blocks: Iterable[Block], calls: dict[str, int], results: dict[str, int], session_id: str
) -> None:
    """Point the calls and results of one stored message at the events holding their
    other halves (``calls`` and ``results`` map a call id to the seq of its call or of its
    result)."""
    for b in blocks:
        if b.call_id is None:
            continue
        seq = (results if b.kind == "tool_call" else calls).get(b.call_id)
        if seq is not None and b.kind in ("tool_call", "tool_result"):
            b.pair, b.pair_in = seq, "seq"
            b.pair_href = f"/sessions/{session_id}/events/{seq}"
