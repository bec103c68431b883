"""The benchmark workload: one agent session, described once and rendered for every subject.

A session follows a five-event cycle keyed on its seq, so any seq range can be generated
on its own and every subject (the store, the raw drivers, the peers) stores the same
conversation:

====== =========================================================================
seq%5  event
====== =========================================================================
1      user message, ~500 characters
2      assistant message, ~500 characters
3      user message, ~500 characters
4      assistant message: ~400 characters of text and one tool call
0      tool message with the call's result, ~4,000 characters
====== =========================================================================

So every fifth event is a large tool result and every view has real call/result pairs.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Literal

from eventstore.codec import encode_event
from eventstore.events import Condensation, Message, TextPart, ToolCallPart, ToolResultPart

__all__ = [
    "CHAT_CHARS",
    "TOOL_CHARS",
    "CYCLE",
    "Step",
    "step",
    "steps",
    "to_message",
    "raw_payload",
    "condensation",
    "tool_pair_boundary",
]

CHAT_CHARS = 500
TOOL_CHARS = 4_000
CALL_TEXT_CHARS = 400
CYCLE = 5

_WORDS = (
    "the agent reads file config parser returns error value test passes build fails "
    "function class module import patch diff line branch commit review query index "
    "table session event tool result call output input token budget summary view "
    "python sqlite postgres request response retry timeout cache latency memory"
).split()


def _corpus(size: int = 1 << 17, seed: int = 7) -> str:
    rng = random.Random(seed)
    words: list[str] = []
    total = 0
    while total < size:
        w = rng.choice(_WORDS)
        words.append(w)
        total += len(w) + 1
    return " ".join(words)


# Slicing one pseudo-random text is far cheaper than generating words per event, which
# matters when a benchmark writes 100,000 events.
_TEXT = _corpus()


def _text(seq: int, n: int) -> str:
    start = (seq * 7_919) % (len(_TEXT) - n)
    return _TEXT[start : start + n]


@dataclass(frozen=True, slots=True)
class Step:
    """One event of the workload, independent of any subject's data model."""

    seq: int
    kind: Literal["user", "assistant", "call", "result"]
    text: str
    call_id: str | None = None
    tool_name: str | None = None
    arguments: str | None = None


def step(seq: int) -> Step:
    """The workload event at ``seq`` (1-based)."""
    r = seq % CYCLE
    if r in (1, 3):
        return Step(seq, "user", _text(seq, CHAT_CHARS))
    if r == 2:
        return Step(seq, "assistant", _text(seq, CHAT_CHARS))
    call_seq = seq if r == 4 else seq - 1
    call_id = f"call_{call_seq:08d}"
    if r == 4:
        args = json.dumps({"path": f"src/module_{seq % 97}.py", "pattern": _text(seq, 60)})
        return Step(
            seq,
            "call",
            _text(seq, CALL_TEXT_CHARS),
            call_id=call_id,
            tool_name="grep",
            arguments=args,
        )
    return Step(seq, "result", _text(seq, TOOL_CHARS), call_id=call_id, tool_name="grep")


def steps(first: int, last: int) -> list[Step]:
    """Workload events ``first..last`` inclusive."""
    return [step(s) for s in range(first, last + 1)]


def to_message(s: Step) -> Message:
    """The workload event as an eventstore :class:`Message`."""
    if s.kind == "user":
        return Message(role="user", parts=[TextPart(text=s.text)])
    if s.kind == "assistant":
        return Message(role="assistant", parts=[TextPart(text=s.text)])
    if s.kind == "call":
        assert s.call_id and s.tool_name
        return Message(
            role="assistant",
            parts=[
                TextPart(text=s.text),
                ToolCallPart(id=s.call_id, name=s.tool_name, arguments=s.arguments or ""),
            ],
        )
    assert s.call_id
    return Message(
        role="tool",
        parts=[ToolResultPart(tool_call_id=s.call_id, name=s.tool_name, output=s.text)],
    )


def raw_payload(s: Step) -> str:
    """The payload text the store writes for this event, for the raw-driver floors."""
    return encode_event(to_message(s))


def tool_pair_boundary(seq: int) -> int:
    """The largest seq ``<= seq`` after which no tool call is left without its result."""
    return seq - (seq % CYCLE)


def condensation(head: int, tail: int) -> Condensation:
    """A condensation appended at ``head + 1`` that keeps the last ``tail`` events.

    Events 1 and 2 stay pinned; 3 .. ``head - tail`` (moved back to a tool-pair boundary)
    are represented by a short summary.
    """
    forgotten_to = tool_pair_boundary(head - tail)
    return Condensation(
        forgotten_from=3,
        forgotten_to=forgotten_to,
        summary="Summary of the conversation so far: " + _text(head, 1_500),
        pinned=[1, 2],
        forgotten_events=max(0, forgotten_to - 2),
        condenser="benchmark",
        trigger="manual",
    )
