"""What an agent runtime needs beyond a log and a view: a message queue and run state.

Both are events in the session's log, so they survive a restart and an auditor sees them:

* **Queue.** :meth:`~RuntimeMethods.enqueue` appends a :class:`~eventstore.events.Queued`
  event holding a message that arrived while the agent was busy;
  :meth:`~RuntimeMethods.dequeue` takes the oldest waiting one and, in the same
  transaction, appends a :class:`~eventstore.events.Dequeued` marker and the message itself
  as the next event of the session. The queue is FIFO, so the waiting messages are exactly
  the queued events after the newest marker's ``queued_seq``: two index probes, whatever
  the session's length. Dequeue holds the session's write lock (the head row lock on
  Postgres, the database write lock on SQLite) while it looks, so concurrent consumers,
  threads or processes, each get a message once.
* **Run state.** :class:`~eventstore.events.RunState` events say whether the run is
  ``idle``, ``streaming`` a reply or ``executing_tools``. A stream's text is appended as
  :class:`~eventstore.events.Delta` chunks (views never show them) and sealed into one
  assistant message. :meth:`~RuntimeMethods.cancel_run` (also the recovery step after a
  crash) keeps what was already produced: the streamed text becomes an assistant message
  marked ``interrupted``; tool calls without a result get a result marked ``interrupted``,
  while the results that did arrive stay as they are.

These methods are a mixin of :class:`~eventstore.EventStore`; the async store derives its
coroutines from them like every other method.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from sqlalchemy.engine import Connection

from .. import _sql
from .._append import locked
from .._sql import blobs
from ..codec import new_id
from ..errors import InvalidEventError, NotFoundError
from ..events import Delta, Dequeued, Event, Message, Queued, RunState, TextPart
from ..records import StoredEvent

if TYPE_CHECKING:
    from ..codec import Encoded

__all__ = ["RuntimeMethods", "CANCELLED_RESULT", "RunStateName"]

T = TypeVar("T")

RunStateName = Literal["idle", "streaming", "executing_tools"]

#: The output recorded for a tool call the run was cancelled before it answered.
CANCELLED_RESULT = "[Tool call interrupted: the run was cancelled before this call finished]"

#: How far back :meth:`RuntimeMethods.cancel_run` looks for the assistant message whose tool
#: calls were executing (messages, newest first).
_TOOL_CALL_LOOKBACK = 64


def _pending(
    conn: Connection, tenant: str, session_id: str, limit: int | None
) -> list[StoredEvent]:
    segments, head = _sql.lineage_and_head(conn, tenant, session_id)
    taken = _sql.latest_in(conn, segments, "dequeued", head)
    after = taken.event.queued_seq if taken is not None else 0  # type: ignore[union-attr]
    out: list[StoredEvent] = []
    while limit is None or len(out) < limit:
        want = _sql.READ_PAGE if limit is None else min(_sql.READ_PAGE, limit - len(out))
        page = _sql.read_page(conn, segments, after, head, ["queued"], limit=want)
        if not page:
            break
        out.extend(page)
        after = page[-1].seq
    return blobs.expand(conn, tenant, out)


def _stream_text(
    conn: Connection, tenant: str, session_id: str, started: int, stream_id: str
) -> str:
    segments, head = _sql.lineage_and_head(conn, tenant, session_id)
    chunks: list[str] = []
    after = started
    while True:
        page = _sql.read_page(conn, segments, after, head, ["delta"])
        if not page:
            break
        for st in page:
            evt = st.event
            if isinstance(evt, Delta) and evt.stream_id == stream_id:
                chunks.append(evt.text)
        after = page[-1].seq
    return "".join(chunks)


def _open_tool_calls(conn: Connection, tenant: str, session_id: str, before: int) -> list[Any]:
    """The tool calls of the newest assistant message at or before ``before`` that have no
    result after it yet (in call order)."""
    segments, head = _sql.lineage_and_head(conn, tenant, session_id)
    last = min(before, head)
    caller: StoredEvent | None = None
    for _ in range(_TOOL_CALL_LOOKBACK):
        found = _sql.latest_in(conn, segments, "message", last)
        if found is None:
            break
        msg = found.event
        if isinstance(msg, Message) and msg.role == "assistant" and msg.tool_calls:
            caller = found
            break
        last = found.seq - 1
    if caller is None:
        return []
    answered: set[str] = set()
    after = caller.seq
    while True:
        page = _sql.read_page(conn, segments, after, head, ["message"])
        if not page:
            break
        for st in page:
            if isinstance(st.event, Message):
                answered.update(r.tool_call_id for r in st.event.tool_results)
        after = page[-1].seq
    calls = caller.event.tool_calls  # type: ignore[union-attr]
    return [c for c in calls if c.id not in answered]


class RuntimeMethods:
    """Queue and run-state methods shared by :class:`~eventstore.EventStore` (see the
    module docstring)."""

    if TYPE_CHECKING:
        tenant: str

        def _run(self, fn: Callable[..., T], *args: Any, write: bool = False, **kw: Any) -> T: ...

        def _encode(self, evts: Sequence[Event | dict[str, Any]]) -> list[Encoded]: ...

        def append(
            self,
            session_id: str,
            events: Sequence[Event | dict[str, Any]],
            *,
            expected_seq: int | None = None,
            idempotency_key: str | None = None,
        ) -> list[int]: ...

        def latest_event(
            self, session_id: str, kind: str, *, as_of: int | None = None
        ) -> StoredEvent | None: ...

    # -- queue

    def enqueue(
        self,
        session_id: str,
        message: Message | str,
        *,
        idempotency_key: str | None = None,
    ) -> int:
        """Put a message in the session's queue and return the seq of its ``queued`` event.

        Use it for input that arrives while the agent is busy (a user typing during a
        tool run): it is durable at once, and :meth:`dequeue` turns it into the next
        message of the session when the agent is ready. A string is a user message.
        """
        msg = Message.user(message) if isinstance(message, str) else message
        if not isinstance(msg, Message):
            raise InvalidEventError(
                f"enqueue takes a Message or a string, not {type(message).__name__}"
            )
        return self.append(session_id, [Queued(message=msg)], idempotency_key=idempotency_key)[0]

    def pending(self, session_id: str, *, limit: int | None = None) -> list[StoredEvent]:
        """The queued events not yet dequeued, oldest first (``event.message`` is the
        message). Costs two index probes plus one row per waiting message."""
        if limit is not None and limit < 0:
            raise InvalidEventError(f"limit: {limit} is negative")
        return self._run(_pending, self.tenant, session_id, limit)

    def dequeue(self, session_id: str) -> StoredEvent | None:
        """Take the oldest waiting message: append it as the session's next event (after a
        ``dequeued`` marker, in one transaction) and return the stored message, or ``None``
        when the queue is empty. Exactly once under concurrent consumers."""
        return self._run(self._dequeue, session_id, write=True)

    def _dequeue(self, conn: Connection, session_id: str) -> StoredEvent | None:
        # Take the session's write lock before looking, so a racing consumer sees this
        # transaction's marker once it gets the lock (READ COMMITTED reads a new snapshot
        # per statement on Postgres; SQLite's write lock covers the whole transaction).
        locked.lock_head(conn, self.tenant, session_id)
        first = _pending(conn, self.tenant, session_id, 1)
        if not first:
            return None
        queued = first[0].event
        assert isinstance(queued, Queued)
        message = queued.message.model_copy(update={"created_at": None})
        encoded = self._encode([Dequeued(queued_seq=first[0].seq), message])
        result = locked.write(
            conn, self.tenant, session_id, encoded, expected_seq=None, idempotency_key=None
        )
        stored = _sql.read_event(conn, self.tenant, session_id, result.seqs[-1])
        assert stored is not None
        return stored

    # -- run state

    def run_state(self, session_id: str) -> RunState:
        """The session's current run state (``idle`` when none was ever recorded)."""
        latest = self.latest_event(session_id, "run_state")
        if latest is None:
            return RunState(state="idle")
        assert isinstance(latest.event, RunState)
        return latest.event

    def set_run_state(
        self, session_id: str, state: RunStateName, *, reason: str | None = None
    ) -> int:
        """Record a run state change (``executing_tools`` before running tools, ``idle``
        after) and return its seq. Streams use :meth:`begin_stream` instead."""
        if state == "streaming":
            raise InvalidEventError("use begin_stream() to start streaming: it names the stream")
        return self.append(session_id, [RunState(state=state, reason=reason)])[0]

    def begin_stream(self, session_id: str) -> str:
        """Record that the run started streaming a reply; returns the stream id that
        :meth:`append_delta` and :meth:`finish_stream` take."""
        stream_id = new_id()
        self.append(session_id, [RunState(state="streaming", stream_id=stream_id)])
        return stream_id

    def append_delta(self, session_id: str, stream_id: str, text: str) -> int:
        """Durably record a chunk of streamed text (one small append; batch chunks that
        arrive faster than you want to commit). Returns its seq."""
        return self.append(session_id, [Delta(stream_id=stream_id, text=text)])[0]

    def finish_stream(
        self, session_id: str, stream_id: str, message: Message | None = None
    ) -> StoredEvent:
        """Seal a stream: append the complete assistant message (by default the stream's
        chunks joined as text) and an ``idle`` state, in one transaction. Returns the
        stored message."""
        return self._run(self._finish_stream, session_id, stream_id, message, write=True)

    def _finish_stream(
        self, conn: Connection, session_id: str, stream_id: str, message: Message | None
    ) -> StoredEvent:
        locked.lock_head(conn, self.tenant, session_id)
        started = self._stream_start(conn, session_id, stream_id)
        if message is None:
            text = _stream_text(conn, self.tenant, session_id, started, stream_id)
            message = Message(role="assistant", parts=[TextPart(text=text)])
        encoded = self._encode([message, RunState(state="idle", reason="completed")])
        result = locked.write(
            conn, self.tenant, session_id, encoded, expected_seq=None, idempotency_key=None
        )
        stored = _sql.read_event(conn, self.tenant, session_id, result.seqs[0])
        assert stored is not None
        return stored

    def _stream_start(self, conn: Connection, session_id: str, stream_id: str) -> int:
        segments, head = _sql.lineage_and_head(conn, self.tenant, session_id)
        state = _sql.latest_in(conn, segments, "run_state", head)
        evt = state.event if state is not None else None
        if state is None or not isinstance(evt, RunState) or evt.stream_id != stream_id:
            raise NotFoundError(
                f"stream {stream_id!r} is not the open stream of session {session_id!r} "
                "(it was finished or cancelled, or never begun); call begin_stream() again"
            )
        if evt.state != "streaming":
            raise NotFoundError(f"stream {stream_id!r} is no longer streaming ({evt.state})")
        return state.seq

    def cancel_run(self, session_id: str, *, reason: str = "cancelled") -> list[int]:
        """Stop the current run and keep what it produced; returns the seqs appended.

        While streaming, the text streamed so far becomes an assistant message marked
        ``interrupted``. While executing tools, every call of the running assistant step
        that has no result gets one marked ``interrupted`` (results already recorded are
        kept). Then the state goes back to ``idle`` with ``reason``. Call it with
        ``reason="recovered"`` when a process restarts and finds a run it did not finish;
        it does nothing (and returns ``[]``) when the run is idle.
        """
        return self._run(self._cancel_run, session_id, reason, write=True)

    def _cancel_run(self, conn: Connection, session_id: str, reason: str) -> list[int]:
        locked.lock_head(conn, self.tenant, session_id)
        segments, head = _sql.lineage_and_head(conn, self.tenant, session_id)
        found = _sql.latest_in(conn, segments, "run_state", head)
        state = found.event if found is not None else None
        if found is None or not isinstance(state, RunState) or state.state == "idle":
            return []
        out: list[Event] = []
        if state.state == "streaming" and state.stream_id is not None:
            text = _stream_text(conn, self.tenant, session_id, found.seq, state.stream_id)
            if text:
                out.append(Message(role="assistant", parts=[TextPart(text=text)], interrupted=True))
        elif state.state == "executing_tools":
            for call in _open_tool_calls(conn, self.tenant, session_id, found.seq):
                answer = Message.tool(call.id, CANCELLED_RESULT, name=call.name, is_error=True)
                answer.interrupted = True
                out.append(answer)
        out.append(RunState(state="idle", reason=reason))
        encoded = self._encode(out)
        result = locked.write(
            conn, self.tenant, session_id, encoded, expected_seq=None, idempotency_key=None
        )
        return result.seqs
