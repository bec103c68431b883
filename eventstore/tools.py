"""Tools that let the model get back what condensation hid: ``recall`` and ``search_history``.

Pruning and condensation only change what a view *shows*; the log keeps every byte. These
two tools hand that back to the model on request, Letta-style:

* ``recall(ref)`` returns an original by the reference a view names: ``"12:0"`` (part 0
  of the event at seq 12, as every placeholder says since render version 3) or ``"12"``
  (the whole event). A tool output comes back byte for byte.
* ``search_history(query, page)`` runs :meth:`EventStore.search` over the session's
  history (what a fork inherited included) and lists hits with their references.

Offer :data:`TOOLS` to the model next to your own tools, and route its calls through
:func:`handle_tool_call`, which returns ``None`` for calls that are not these two::

    response = litellm.completion(model=..., messages=view.to_messages(),
                                  tools=[*my_tools, *TOOLS])
    for call in response.choices[0].message.tool_calls or []:
        output = handle_tool_call(store, session_id, call.function.name,
                                  call.function.arguments)
        if output is None:
            output = run_my_tool(call)

Both work with :class:`~eventstore.EventStore` and :class:`~eventstore.AsyncEventStore`
(``ahandle_tool_call``).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from .errors import EventStoreError, InvalidEventError, NotFoundError
from .events import (
    Condensation,
    FilePart,
    Message,
    Part,
    PartRef,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

if TYPE_CHECKING:
    from .store import AsyncEventStore, EventStore

__all__ = [
    "RECALL_TOOL",
    "SEARCH_TOOL",
    "TOOLS",
    "parse_ref",
    "recall",
    "search_history",
    "handle_tool_call",
    "ahandle_tool_call",
]

#: Hits per ``search_history`` page.
SEARCH_PAGE = 10

RECALL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "recall",
        "description": (
            "Return the full original of something that was cleared or condensed out of the "
            'conversation, by the reference shown where it was: "12:0" for part 0 of event '
            '12 (a cleared tool result says which), or "12" for the whole event 12 '
            "(search_history lists references)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "ref": {
                    "type": "string",
                    "description": 'An event seq ("12") or seq:part ("12:0").',
                }
            },
            "required": ["ref"],
            "additionalProperties": False,
        },
    },
}

SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search_history",
        "description": (
            "Full-text search over this conversation's complete history, including tool "
            "outputs that were cleared and events that were condensed into a summary. "
            "Words must all occur; put exact phrases in double quotes. Returns matches with "
            "the reference to pass to recall."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words and quoted phrases."},
                "page": {
                    "type": "integer",
                    "minimum": 0,
                    "description": f"Result page, {SEARCH_PAGE} hits each (0 first).",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}

TOOLS: list[dict[str, Any]] = [RECALL_TOOL, SEARCH_TOOL]
"""Both tool schemas, in the OpenAI (and litellm) ``tools`` format."""

_REF = re.compile(r"\s*(\d{1,10})(?::(\d{1,10}))?\s*")


def parse_ref(ref: str) -> tuple[int, int | None]:
    """``"12:0"`` -> ``(12, 0)``; ``"12"`` -> ``(12, None)``."""
    m = _REF.fullmatch(ref) if isinstance(ref, str) else None
    if m is None or int(m.group(1)) < 1:
        raise InvalidEventError(f'ref: {ref!r} is not a reference; use "12" or "12:0"')
    return int(m.group(1)), None if m.group(2) is None else int(m.group(2))


def _part_text(part: Part) -> str:
    if isinstance(part, ToolResultPart):
        return part.output
    if isinstance(part, (TextPart, ReasoningPart)):
        return part.text
    if isinstance(part, ToolCallPart):
        return f"{part.name}({part.arguments})"
    if isinstance(part, FilePart):
        return f"[file {part.name or part.media_type}]"
    return f"[{part.type} part]"


def _event_text(seq: int, event: Any) -> str:
    if isinstance(event, Message):
        body = "\n".join(_part_text(p) for p in event.parts)
        return f"[{seq}] {event.role}:\n{body}"
    if isinstance(event, Condensation):
        return f"[{seq}] summary of events {event.forgotten_from}..{event.forgotten_to}:\n" + (
            event.summary or ""
        )
    return f"[{seq}] {event.kind} event (nothing to recall)"


def recall(store: EventStore, session_id: str, ref: str) -> str:
    """The original behind ``ref`` as text (a part exactly as stored; a whole event with a
    short header). Raises :class:`NotFoundError` for a reference outside the session."""
    seq, index = parse_ref(ref)
    if index is not None:
        return _part_text(store.original(session_id, PartRef(seq=seq, index=index)))
    for stored in store.read(session_id, seq, seq):
        return _event_text(seq, stored.event)
    raise NotFoundError(f"no event at seq {seq} in session {session_id}")


def _format_hits(hits: list[Any], page: int) -> str:
    if not hits:
        return "No matches." if page == 0 else "No more matches."
    lines = [_bounded(f'ref="{h.seq}" ({h.role or h.kind}): {h.snippet}') for h in hits]
    more = f"\n(page {page}; ask for page {page + 1} for more)" if len(hits) == SEARCH_PAGE else ""
    return "\n".join(lines) + more


#: The most characters of one line (or error) a tool hands the model.
LINE_LIMIT = 400


def _bounded(text: str, limit: int = LINE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying so: what a tool returns goes into the
    model's context, and nothing stored or typed (a hit, a query echoed in an error) may
    put an unbounded text there."""
    if len(text) <= limit:
        return text
    return text[: limit - 30] + f"… [{len(text) - limit + 30:,} more characters]"


def search_history(store: EventStore, session_id: str, query: str, page: int = 0) -> str:
    """Search hits in the session's history as text for the model, with references."""
    if isinstance(page, bool) or not isinstance(page, int) or page < 0:
        raise InvalidEventError(f"page: {page!r} is not a page number (0, 1, ...)")
    hits = store.search(query, session_id=session_id, limit=SEARCH_PAGE, offset=page * SEARCH_PAGE)
    return _format_hits(hits, page)


def _arguments(arguments: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        data = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise InvalidEventError(f"tool arguments are not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidEventError("tool arguments must be a JSON object")
    return data


def handle_tool_call(
    store: EventStore, session_id: str, name: str, arguments: str | dict[str, Any]
) -> str | None:
    """Run a ``recall`` or ``search_history`` call and return its output for the model
    (errors come back as text the model can act on); ``None`` for any other tool."""
    if name not in ("recall", "search_history"):
        return None
    try:
        args = _arguments(arguments)
        if name == "recall":
            return recall(store, session_id, str(args.get("ref", "")))
        return search_history(store, session_id, str(args.get("query", "")), args.get("page", 0))
    except EventStoreError as exc:
        return _bounded(f"Error: {exc}", 2 * LINE_LIMIT)


async def ahandle_tool_call(
    store: AsyncEventStore, session_id: str, name: str, arguments: str | dict[str, Any]
) -> str | None:
    """:func:`handle_tool_call` for the async store (runs in a worker thread)."""
    import asyncio

    return await asyncio.to_thread(handle_tool_call, store.sync, session_id, name, arguments)
