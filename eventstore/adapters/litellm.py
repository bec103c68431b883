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

Those callbacks may overlap or arrive out of order (the next call's record may come before
this one's). A conversation is still recorded once: records of one session are made one
at a time (a lock per session, shared by every logger of the process, and the append is
conditional on the head the record was computed from, so another process writing the same
session makes it compute again), and each record compares the request with what the
session already holds. A request the session already holds in full is not stored again;
when its reply is stored right after it (a later call resent it), only the ``llm_call`` is
added, with the view the call actually saw (``as_of`` its last message).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from .. import llm
from ..chat import from_openai, to_openai
from ..codec import canonical_json
from ..errors import ConflictError
from ..events import Message
from ..store import AsyncEventStore, EventStore
from ..views import fingerprint

__all__ = ["EventStoreLogger"]

# Resolved once, through the one module that imports litellm.
CustomLogger: Any = llm.custom_logger_class()

#: Records of one session are made one at a time by every logger of the process: two
#: loggers (or two litellm callback lists holding one) that each compared a request with
#: the session before the other wrote would both store it.
_SESSION_LOCKS: dict[tuple[str, str, str], threading.Lock] = {}
_SESSION_LOCKS_GUARD = threading.Lock()
#: How often a record is computed again when another writer moved the session's head.
_RETRIES = 20


def _session_lock(store: EventStore, session_id: str) -> threading.Lock:
    key = (store.url, store.tenant, session_id)
    with _SESSION_LOCKS_GUARD:
        lock = _SESSION_LOCKS.get(key)
        if lock is None:
            lock = _SESSION_LOCKS[key] = threading.Lock()
        return lock


def _reply_key(response: Any) -> str | None:
    """The :func:`_key` of the reply in ``response`` (``None`` when it has none)."""
    if response is None:
        return None
    choices = llm.field(response, "choices") or []
    if not choices:
        return None
    raw = llm.field(choices[0], "message")
    if raw is None:
        return None
    data = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
    return _key(data)


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
            with self._lock, _session_lock(self.store, self.session_id):
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
        for _ in range(_RETRIES):
            try:
                self._write(kwargs, response, start, end, error, call_id)
                break
            except ConflictError:
                continue  # another process wrote this session: compare again
        else:
            raise ConflictError(self.session_id, -1, self.store.head(self.session_id))
        if isinstance(call_id, str):
            self._recorded.add(call_id)

    def _write(
        self,
        kwargs: Any,
        response: Any,
        start: Any,
        end: Any,
        error: BaseException | Any,
        call_id: Any,
    ) -> None:
        """One record, conditional on the head it was computed from."""
        request = list(kwargs.get("messages") or [])
        head = self.store.head(self.session_id)
        held, new = self._match(request)
        reply = _reply_key(response) if error is None else None
        append_response = True
        if held is not None:
            # The session holds the whole request: a later call's record came first.
            seq, following = held
            view = self.store.view(self.session_id, as_of=seq)
            append_response = reply is None or following != reply
            if append_response:
                view = self.store.view(self.session_id)
        else:
            if new:
                events = [from_openai(dict(m)) for m in new]
                head = self.store.append(self.session_id, events, expected_seq=head)[-1]
            view = self.store.view(self.session_id, as_of=head)
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
            append_response=append_response,
            metadata={
                "source": "litellm",
                "litellm_call_id": call_id,
                "request_fingerprint": sent_fp,
                "request_matches_view": sent_fp == view.fingerprint(),
            },
            expected_seq=head,
        )

    def _match(self, request: list[Any]) -> tuple[tuple[int, str | None] | None, list[Any]]:
        """How the request stands against the session's newest messages.

        Returns ``(held, new)``: ``held`` is ``(seq, following)`` when the session holds
        the whole request as consecutive messages (the newest such run; ``seq`` is its
        last message's, ``following`` the key of the message stored after it, if any),
        and ``new`` the request's messages after the last one the session holds.
        """
        if not request:
            return None, []
        # Out-of-order records leave a few calls' messages after the request's end.
        n = min(2 * len(request) + 64, 10_000)
        tail = self.store.read_tail(self.session_id, n)
        stored = [
            (e.seq, _key(d))
            for e in tail
            if isinstance(e.event, Message)
            for d in to_openai(e.event)
        ]
        if not stored:
            return None, request
        wanted = [_key(m) for m in request]
        keys = [k for _, k in stored]
        w = len(wanted)
        for end in range(len(keys) - 1, w - 2, -1):
            if keys[end - w + 1 : end + 1] == wanted:
                following = keys[end + 1] if end + 1 < len(keys) else None
                return (stored[end][0], following), []
        # The newest stored message that the request repeats marks where new ones start.
        for last in reversed(keys):
            for i in range(len(wanted) - 1, -1, -1):
                if wanted[i] == last:
                    return None, request[i + 1 :]
        return None, request
