"""Record every litellm call in a session, with no other code change.

::

    import litellm
    from eventstore import EventStore
    from eventstore.adapters.litellm import EventStoreLogger

    store = EventStore("sqlite:///agent.db")
    session = store.create_session(title="chat")
    litellm.callbacks = [EventStoreLogger(store, session.id)]
    litellm.completion(model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}])

For each call the logger appends, in order: the request messages the session does not
hold yet (an agent loop resends its whole history; only the new tail is stored), an
``llm_call`` event (model, usage, cost, latency, or the error of a failed call) and the
reply as an assistant message. The ``llm_call`` fingerprint is the session's own view at
that point, so ``verify`` checks it; the fingerprint of what litellm actually sent is kept
in its metadata (``request_fingerprint``) with ``request_matches_view`` saying whether the
two agree (they differ when the caller trimmed or reshaped its messages).

litellm runs success callbacks of synchronous calls in a background thread, so a call may
return before it is recorded; :meth:`EventStoreLogger.flush` waits for the records.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from .. import llm
from ..chat import from_openai, to_openai
from ..codec import canonical_json
from ..events import Message
from ..store import AsyncEventStore, EventStore
from ..views import fingerprint

__all__ = ["EventStoreLogger"]

# Resolved once, through the one module that imports litellm.
CustomLogger: Any = llm.custom_logger_class()


def _key(message: Any) -> str:
    """What identifies a chat message across re-sends: role, text, tool call ids. Clients
    resend replies with extra null fields (``function_call``, ``provider_specific_fields``)
    that must not make a stored message look new."""
    m = dict(message) if not isinstance(message, dict) else message
    content = m.get("content")
    if isinstance(content, list):
        content = "".join(
            str(c.get("text", ""))
            for c in content
            if isinstance(c, dict) and c.get("type") == "text"
        )
    calls = m.get("tool_calls") or []
    ids = sorted(str(c.get("id") if isinstance(c, dict) else getattr(c, "id", "")) for c in calls)
    return canonical_json([m.get("role"), content or "", ids, m.get("tool_call_id")])


class EventStoreLogger(CustomLogger):
    """A litellm ``CustomLogger`` that records calls in one session.

    Args:
        store: The store (sync or async).
        session_id: The session to record in.
    """

    def __init__(self, store: EventStore | AsyncEventStore, session_id: str) -> None:
        super().__init__()
        self.store: EventStore = store.sync if isinstance(store, AsyncEventStore) else store
        self.session_id = session_id
        self.store.get_session(session_id)  # fail now, not in a callback thread
        self._lock = threading.Lock()  # one record at a time, in call order
        self._pending = 0
        self._started: set[str] = set()
        self._idle = threading.Condition()  # guards _pending only: never waits on a write
        self._recorded: set[str] = set()  # litellm call ids: a call is recorded once
        self.errors: list[BaseException] = []
        """Exceptions raised while recording (callbacks must not raise into litellm)."""

    # -- litellm hooks

    def log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._record(kwargs, response_obj, start_time, end_time, None)

    def log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._record(kwargs, None, start_time, end_time, kwargs.get("exception") or response_obj)

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        await asyncio.to_thread(self._record, kwargs, response_obj, start_time, end_time, None)

    async def async_log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        error = kwargs.get("exception") or response_obj
        await asyncio.to_thread(self._record, kwargs, None, start_time, end_time, error)

    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        call_id = kwargs.get("litellm_call_id") if isinstance(kwargs, dict) else None
        with self._idle:
            if call_id is None or call_id not in self._started:
                self._pending += 1
                if call_id is not None:
                    self._started.add(call_id)

    def uninstall(self) -> None:
        """Stop recording: remove this logger from every litellm callback list."""
        llm.remove_callback(self)

    # -- recording

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every call seen so far is recorded; ``False`` on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def _record(
        self, kwargs: Any, response: Any, start: Any, end: Any, error: BaseException | Any
    ) -> None:
        try:
            with self._lock:
                self._record_locked(kwargs, response, start, end, error)
        except Exception as exc:  # never raise into litellm's callback machinery
            self.errors.append(exc)
        finally:
            with self._idle:
                self._pending = max(0, self._pending - 1)
                self._idle.notify_all()

    def _record_locked(
        self, kwargs: Any, response: Any, start: Any, end: Any, error: BaseException | Any
    ) -> None:
        call_id = kwargs.get("litellm_call_id")
        if isinstance(call_id, str):
            # litellm may hold a logger in more than one of its callback lists.
            if call_id in self._recorded:
                return
            self._recorded.add(call_id)
        request = list(kwargs.get("messages") or [])
        new = self._new_messages(request)
        if new:
            self.store.append(self.session_id, [from_openai(dict(m)) for m in new])
        view = self.store.view(self.session_id)
        sent_fp = fingerprint([dict(m) for m in request])
        latency = None
        if start is not None and end is not None:
            try:
                latency = (end - start).total_seconds() * 1000
            except (AttributeError, TypeError):
                latency = None
        self.store.record_llm_call(
            self.session_id,
            view,
            response,
            model=kwargs.get("model"),
            latency_ms=latency,
            error=None if error is None else f"{type(error).__name__}: {error}"[:2000],
            metadata={
                "source": "litellm",
                "litellm_call_id": call_id,
                "request_fingerprint": sent_fp,
                "request_matches_view": sent_fp == view.fingerprint(),
            },
        )

    def _new_messages(self, request: list[Any]) -> list[Any]:
        """The request's messages after the last one the session already holds."""
        if not request:
            return []
        tail = self.store.read_tail(self.session_id, len(request) + 2)
        stored = [_key(d) for e in tail if isinstance(e.event, Message) for d in to_openai(e.event)]
        if not stored:
            return request
        wanted = [_key(m) for m in request]
        # The newest stored message that the request repeats marks where new ones start.
        for last in reversed(stored):
            for i in range(len(wanted) - 1, -1, -1):
                if wanted[i] == last:
                    return request[i + 1 :]
        return request
