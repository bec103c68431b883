"""Typed notifications over the tenant feed, for listeners.

A listener wants to know *what happened* (a tool was called, a result came back, a message
was queued, the context was condensed), not to decode events itself. :func:`notifications`
turns the items of :meth:`EventStore.tail` / :meth:`EventStore.follow` into those, in feed
order; each carries the feed ``position`` of its event, so a listener that stores the last
position it handled resumes after a restart with ``follow(after=position)`` and sees every
notification exactly once more from there::

    for note in notifications(store.follow(after=saved)):
        if isinstance(note, ToolCalled):
            print(note.session_id, "calls", note.call.name)
        saved = note.position  # persist it wherever the listener keeps state

An event may give several notifications (an assistant message with two tool calls gives a
:class:`MessageAdded` and two :class:`ToolCalled`); they share its position.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .events import Condensation, Message, Prune, RunState, ToolCallPart, ToolResultPart
from .events import Queued as QueuedEvent
from .records import TailItem

__all__ = [
    "Notification",
    "MessageAdded",
    "ToolCalled",
    "ToolAnswered",
    "MessageQueued",
    "Condensed",
    "Pruned",
    "RunStateChanged",
    "notifications",
    "anotifications",
    "notifications_of",
]


class _Note(BaseModel):
    model_config = ConfigDict(frozen=True)

    position: int
    """Feed position of the event (resume after it)."""
    session_id: str
    """The session the event belongs to."""
    seq: int
    """The event's seq in that session."""


class MessageAdded(_Note):
    """A message joined the session (user, assistant, system or tool)."""

    type: Literal["message"] = "message"
    message: Message
    """The message."""


class ToolCalled(_Note):
    """The model asked for a tool call."""

    type: Literal["tool_call"] = "tool_call"
    call: ToolCallPart
    """The call (id, name, arguments)."""


class ToolAnswered(_Note):
    """A tool call got its result (``result.is_error`` for failures)."""

    type: Literal["tool_result"] = "tool_result"
    result: ToolResultPart
    """The result."""
    interrupted: bool = False
    """Whether the result stands for a call the run was cancelled before it finished."""


class MessageQueued(_Note):
    """A message was queued for the agent to take next (:meth:`EventStore.enqueue`)."""

    type: Literal["message_queued"] = "message_queued"
    message: Message
    """The waiting message."""


class Condensed(_Note):
    """The session's context was condensed."""

    type: Literal["condensation"] = "condensation"
    condensation: Condensation
    """The condensation event (its forgotten range, summary and counts)."""


class Pruned(_Note):
    """Tool outputs were compacted out of the view (reversibly)."""

    type: Literal["prune"] = "prune"
    prune: Prune
    """The prune event."""


class RunStateChanged(_Note):
    """The run went idle, started streaming or started executing tools."""

    type: Literal["run_state"] = "run_state"
    state: RunState
    """The new state."""


Notification = Annotated[
    MessageAdded | ToolCalled | ToolAnswered | MessageQueued | Condensed | Pruned | RunStateChanged,
    Field(discriminator="type"),
]
"""Anything :func:`notifications` yields."""


def notifications_of(item: TailItem) -> list[Notification]:
    """The notifications one feed item gives (none for bookkeeping events such as
    stream chunks, ``llm_call`` records or custom events)."""
    st = item.stored
    where: dict[str, Any] = {"position": item.position, "session_id": st.session_id, "seq": st.seq}
    evt = st.event
    out: list[Notification] = []
    if isinstance(evt, Message):
        out.append(MessageAdded(message=evt, **where))
        out += [ToolCalled(call=c, **where) for c in evt.tool_calls]
        out += [
            ToolAnswered(result=r, interrupted=bool(evt.interrupted), **where)
            for r in evt.tool_results
        ]
    elif isinstance(evt, QueuedEvent):
        out.append(MessageQueued(message=evt.message, **where))
    elif isinstance(evt, Condensation):
        out.append(Condensed(condensation=evt, **where))
    elif isinstance(evt, Prune):
        out.append(Pruned(prune=evt, **where))
    elif isinstance(evt, RunState):
        out.append(RunStateChanged(state=evt, **where))
    return out


def notifications(items: Iterable[TailItem]) -> Iterator[Notification]:
    """Notifications for feed items (from ``tail`` or ``follow``), in order."""
    for item in items:
        yield from notifications_of(item)


async def anotifications(items: AsyncIterable[TailItem]) -> AsyncIterator[Notification]:
    """:func:`notifications` over the async store's ``tail`` or ``follow``."""
    async for item in items:
        for note in notifications_of(item):
            yield note
