"""One body for the sync and async entry points of the condensers.

A routine that touches the store or a model (a pipeline run, a policy check, a completion
with overflow recovery) is written once, as a generator that *yields* what it needs done
(read a view, append events, plan, call the model) and receives the result. Two small
drivers carry the requests out: :func:`drive` on an :class:`~eventstore.EventStore`,
:func:`adrive` on an :class:`~eventstore.AsyncEventStore` (planning, which may call a
model synchronously, runs in a worker thread there; the model call is awaited). An
exception from a request is thrown back into the routine at the ``yield``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from eventstore import llm

if TYPE_CHECKING:
    from eventstore import AsyncEventStore, Event, EventStore, View, ViewOptions

T = TypeVar("T")


@dataclass
class ReadView:
    """Read the session's view."""

    session_id: str
    options: ViewOptions | None = None


@dataclass
class Append:
    """Append events; the result is their seqs. ``ConflictError`` is thrown back."""

    session_id: str
    events: Sequence[Event]
    expected_seq: int | None = None


@dataclass
class Work:
    """Run ``fn(*args)``: CPU work or a blocking model call (a thread in async)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass
class Complete:
    """Call the model through litellm; the result is the response."""

    kwargs: dict[str, Any] = field(default_factory=dict)


Request = ReadView | Append | Work | Complete
Routine = Generator[Request, Any, T]


def drive(routine: Routine[T], store: EventStore) -> T:
    """Run ``routine`` against a synchronous store."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = routine.throw(error) if error is not None else routine.send(result)
        except StopIteration as stop:
            return stop.value
        result, error = None, None
        try:
            if isinstance(request, ReadView):
                result = store.view(request.session_id, options=request.options)
            elif isinstance(request, Append):
                result = store.append(
                    request.session_id, request.events, expected_seq=request.expected_seq
                )
            elif isinstance(request, Work):
                result = request.fn(*request.args)
            else:
                result = llm.completion(**request.kwargs)
        except Exception as exc:
            error = exc


async def adrive(routine: Routine[T], store: AsyncEventStore) -> T:
    """Run ``routine`` against an asyncio store, without blocking the event loop."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = routine.throw(error) if error is not None else routine.send(result)
        except StopIteration as stop:
            return stop.value
        result, error = None, None
        try:
            if isinstance(request, ReadView):
                result = await store.view(request.session_id, options=request.options)
            elif isinstance(request, Append):
                result = await store.append(
                    request.session_id, request.events, expected_seq=request.expected_seq
                )
            elif isinstance(request, Work):
                result = await asyncio.to_thread(request.fn, *request.args)
            else:
                result = await llm.acompletion(**request.kwargs)
        except Exception as exc:
            error = exc


def read_view(session_id: str, options: ViewOptions | None) -> Routine[View]:
    """``view = yield from read_view(...)``: a typed read."""
    view: View = yield ReadView(session_id, options)
    return view


def append(
    session_id: str, events: Sequence[Event], expected_seq: int | None = None
) -> Routine[list[int]]:
    """``seqs = yield from append(...)``: a typed append."""
    seqs: list[int] = yield Append(session_id, events, expected_seq)
    return seqs
