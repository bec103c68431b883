"""The structured summary template: headings, validation, and event rendering.

Every summary, whether an LLM wrote it or it was extracted from the events, uses the same
Markdown headings in the same order, so a later summary can be anchored on an earlier one
and a reader always knows where to look. :data:`TEMPLATE_VERSION` is recorded on every
condensation; change it whenever the headings or the prompt change meaning.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from eventstore.events import (
    Condensation,
    CondensationRequest,
    Custom,
    FilePart,
    LLMCall,
    Message,
    Prune,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from eventstore.records import StoredEvent

__all__ = [
    "TEMPLATE_VERSION",
    "HEADINGS",
    "DEFAULT_EVENT_CHARS",
    "missing_headings",
    "render_event",
    "render_events",
    "summary_messages",
    "retry_message",
    "skeleton",
    "clip",
]

TEMPLATE_VERSION = "structured-v1"
"""Version of the headings and prompt below."""

HEADINGS: tuple[str, ...] = (
    "User intent and constraints",
    "Progress",
    "Key decisions",
    "Errors and fixes",
    "Current state",
    "Files and resources touched",
    "Next steps",
)
"""Section headings, in order. ``Progress`` holds ``Done`` and ``In progress`` lists."""

DEFAULT_EVENT_CHARS = 6000
"""Per-event character cap when rendering events for a summarizer.

High on purpose: a 500-character cap (as some agents use) cuts off exactly the tool
arguments and error messages a summary needs.
"""

_HEADING_RE = re.compile(r"^\s{0,3}(?:#{1,6}\s*|\*\*)\s*(.+?)\s*(?:\*\*)?\s*:?\s*$", re.MULTILINE)


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def missing_headings(summary: str) -> list[str]:
    """The template headings that ``summary`` lacks (empty when it is valid).

    A heading counts when it is on its own line as a Markdown heading (``## Progress``) or
    in bold (``**Progress**``); case and punctuation are ignored.
    """
    found = {_norm(m.group(1)) for m in _HEADING_RE.finditer(summary or "")}
    return [h for h in HEADINGS if _norm(h) not in found]


def clip(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping its start and its end.

    Both ends matter in agent logs: the command at the top, the error at the bottom.
    """
    if limit <= 0 or len(text) <= limit:
        return text
    head = int(limit * 0.6)
    tail = max(limit - head - 40, 0)
    dropped = len(text) - head - tail
    end = text[len(text) - tail :] if tail else ""
    return f"{text[:head]}\n[... {dropped} characters omitted ...]\n{end}"


def _render_part(part: object, limit: int) -> str:
    if isinstance(part, TextPart):
        return clip(part.text, limit)
    if isinstance(part, ReasoningPart):
        return f"(reasoning) {clip(part.text, limit)}" if part.text else "(reasoning redacted)"
    if isinstance(part, ToolCallPart):
        return f"-> call {part.name} [{part.id}] {clip(part.arguments, limit)}"
    if isinstance(part, ToolResultPart):
        flag = " ERROR" if part.is_error or part.state == "error" else ""
        if part.state == "interrupted":
            flag = " INTERRUPTED"
        label = part.name or "tool"
        return f"<- result {label} [{part.tool_call_id}]{flag}:\n{clip(part.output, limit)}"
    if isinstance(part, FilePart):
        return f"(file {part.name or part.uri or part.media_type})"
    return ""


def render_event(stored: StoredEvent, limit: int = DEFAULT_EVENT_CHARS) -> str:
    """One event as plain text for a summarizer, with its full content up to ``limit``.

    Tool arguments and outputs are included; a part longer than the cap keeps its start
    and end. Bookkeeping events (prunes, model-call records) render as one short line.
    """
    evt = stored.event
    if isinstance(evt, Message):
        body = "\n".join(t for t in (_render_part(p, limit) for p in evt.parts) if t)
        return f"[{stored.seq}] {evt.role}: {body}"
    if isinstance(evt, Condensation):
        return f"[{stored.seq}] (earlier condensation of {evt.forgotten_from}-{evt.forgotten_to})"
    if isinstance(evt, CondensationRequest):
        focus = f": {evt.focus}" if evt.focus else ""
        return f"[{stored.seq}] (condensation requested{focus})"
    if isinstance(evt, Prune):
        return f"[{stored.seq}] (pruned {len(evt.targets)} tool outputs)"
    if isinstance(evt, LLMCall):
        return f"[{stored.seq}] (model call to {evt.model})"
    if isinstance(evt, Custom):
        return f"[{stored.seq}] (event {evt.name}) {clip(str(evt.data), min(limit, 500))}"
    return f"[{stored.seq}] ({stored.kind})"


def render_events(events: Iterable[StoredEvent], limit: int = DEFAULT_EVENT_CHARS) -> str:
    """Events rendered with :func:`render_event`, separated by blank lines."""
    return "\n\n".join(render_event(e, limit) for e in events)


_SYSTEM = """You maintain the working memory of a software agent whose conversation is too \
long to keep in full. Write a summary that lets the agent continue the task without the \
original messages.

Use exactly these Markdown headings, in this order, each on its own line:
{headings}

Under "## Progress" write two lists, "Done:" and "In progress:". Quote user requests, \
constraints, file paths, commands, identifiers and error messages exactly. Keep every fact \
from the previous summary that still matters; update facts the new events changed. Write \
"- none" under a heading with nothing to say. Output only the summary."""


def summary_messages(
    previous: str | None,
    events_text: str,
    *,
    focus: str | None = None,
) -> list[dict[str, str]]:
    """The chat messages asking a model for an updated summary.

    Args:
        previous: The summary currently in the view (the anchor), if any.
        events_text: Only the newly forgotten events, rendered by :func:`render_events`.
        focus: Optional instructions on what to concentrate on.
    """
    headings = "\n".join(f"## {h}" for h in HEADINGS)
    system = _SYSTEM.format(headings=headings)
    chunks = []
    if previous:
        chunks.append(f"<previous_summary>\n{previous}\n</previous_summary>")
    else:
        chunks.append("<previous_summary>\n(none: this is the first summary)\n</previous_summary>")
    chunks.append(f"<new_events>\n{events_text}\n</new_events>")
    ask = "Write the updated summary of the previous summary and the new events."
    if focus:
        ask += f"\nFocus: {focus}"
    # Ending on the skeleton to fill in makes even small models keep the headings.
    ask += "\nFill in this template:\n\n" + skeleton()
    chunks.append(ask)
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(chunks)}]


def skeleton() -> str:
    """The empty template: every heading with a placeholder bullet."""
    body = {HEADINGS[1]: "Done:\n- ...\nIn progress:\n- ..."}
    return "\n\n".join(f"## {h}\n{body.get(h, '- ...')}" for h in HEADINGS)


def retry_message(missing: Sequence[str]) -> dict[str, str]:
    """The follow-up user message when a summary lacks headings."""
    names = ", ".join(f'"## {h}"' for h in missing)
    return {
        "role": "user",
        "content": (
            f"The summary is missing these headings: {names}. Rewrite the whole summary with "
            "all seven headings, in order, each on its own line, filling in this template:"
            f"\n\n{skeleton()}"
        ),
    }
