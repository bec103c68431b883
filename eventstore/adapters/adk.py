"""A Google ADK session service backed by the event store (google-adk 2.13).

::

    from google.adk.runners import Runner
    from eventstore.adapters.adk import EventStoreSessionService

    service = EventStoreSessionService("sqlite:///adk.db")
    runner = Runner(app_name="helper", agent=agent, session_service=service)

``get_session`` reads the tail only: ``num_recent_events=10`` costs the same on a session
of a thousand events as on one of a hundred thousand (ADK's ``DatabaseSessionService``
loads every event), and ``after_timestamp`` stops at the first older event. Each ADK event
is one event in the log, kept exactly (its JSON goes with it) and, where it has content,
also as a typed message (text, function calls and responses, inline data), so views,
search and condensers work on ADK sessions. State follows ADK's scoping: session state
rides with the session's events, ``app:`` and ``user:`` state live in per-app and
per-user state logs shared by all sessions, ``temp:`` state is never persisted. Every
read of state is one probe of a log's newest event.

A session is found by ``(app_name, user_id, session_id)`` (the session key);
``delete_session`` is a tombstone (``verify`` still proves the log). A stale writer, one
appending to a ``Session`` object older than the stored session, gets ADK's
``StaleSessionError``: the object carries the head it was read at.

ADK's event compaction maps onto condensations. An event whose ``actions.compaction`` is
set (ADK's summarizer writes one after an invocation when the app has an
``EventsCompactionConfig``) is appended together with a :class:`Condensation` that
forgets the stored events inside the compaction's timestamp range, with the compacted
content's text as the summary. So the store's views of the session show what ADK's own
request builder shows, while ``get_session`` still returns every event, the compaction
event included, exactly as ADK wrote them::

    config = EventsCompactionConfig(compaction_interval=4, overlap_size=1)
    app = App(name="helper", root_agent=agent, events_compaction_config=config)
    runner = Runner(app=app, session_service=service)
    # ... after a few invocations, the summary and the recent events:
    sid = service.store_session_id(app_name="helper", user_id="ada", session_id="chat")
    messages = service.store.sync.view(sid).to_messages()

A compaction that starts after the previous condensation's range folds the previous
summary in (the latest condensation alone defines a view); one that lies inside it
writes none.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session as AdkSession
from google.adk.sessions.state import State

from ..codec import canonical_json
from ..errors import ConflictError, NotFoundError, SessionExistsError
from ..events import (
    Condensation,
    Custom,
    Event,
    FilePart,
    Message,
    Part,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    empty_assistant,
)
from ..records import StoredEvent
from ..store import AsyncEventStore, EventStore
from ..views import apply_event

__all__ = ["EventStoreSessionService", "StaleSessionError", "stored_event"]

_RAW = "adk_event"
_STATE = "adk_state"
_EVENT = "adk.event"
_STATE_EVENT = "adk.state"
_PAGE = 64

try:  # ADK's error for stale writers is private; fall back to its base class.
    from google.adk.errors._stale_session_error import StaleSessionError
except ImportError:  # pragma: no cover - older or newer ADK
    StaleSessionError = ValueError


def _key(app_name: str, session_id: str) -> str:
    return canonical_json(["adk", app_name, session_id])


def _scoped_key(scope: str, app_name: str, user_id: str | None) -> str:
    return canonical_json(["adk-state", scope, app_name, user_id])


def _bytes(value: Any) -> bytes | None:
    """Inline data as ADK dumps it to JSON (URL-safe base64) back to bytes."""
    if value is None or isinstance(value, bytes):
        return value
    text = str(value)
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _to_message(raw: dict[str, Any], author: str) -> Message | None:
    """The typed message for an ADK event's content, or ``None`` when it has none."""
    content = raw.get("content") or {}
    parts: list[Part] = []
    results = False
    for p in content.get("parts") or []:
        if p.get("text") is not None and not p.get("thought"):
            parts.append(TextPart(text=p["text"]))
        elif p.get("function_call"):
            fc = p["function_call"]
            args = json.dumps(fc.get("args") or {}, sort_keys=True)
            parts.append(
                ToolCallPart(id=fc.get("id") or "", name=fc.get("name", ""), arguments=args)
            )
        elif p.get("function_response"):
            fr = p["function_response"]
            output = json.dumps(fr.get("response"), sort_keys=True)
            parts.append(
                ToolResultPart(tool_call_id=fr.get("id") or "", name=fr.get("name"), output=output)
            )
            results = True
        elif p.get("inline_data"):
            blob = p["inline_data"]
            parts.append(
                FilePart(
                    media_type=blob.get("mime_type") or "application/octet-stream",
                    name=blob.get("display_name"),
                    data=_bytes(blob.get("data")),
                )
            )
    if not parts:
        return None
    role = (
        "tool"
        if results and all(isinstance(x, ToolResultPart) for x in parts)
        else ("user" if author == "user" else "assistant")
    )
    if role != "tool" and any(isinstance(x, ToolResultPart) for x in parts):
        return None  # a mix the chat format cannot hold: keep it opaque
    msg = Message(role=role, parts=parts)  # type: ignore[arg-type]
    if empty_assistant(msg):
        return None  # a reply of empty text says nothing, and appends refuse it: opaque
    return msg


def stored_event(event: AdkEvent, state: dict[str, Any]) -> Event:
    """How an ADK event is kept: a typed message when it has content (a ``Custom`` event
    otherwise), with the ADK event's JSON and the session state after it."""
    raw = event.model_dump(mode="json", exclude_none=True)
    msg = _to_message(raw, event.author)
    if msg is not None:
        msg.extra = {_RAW: raw, _STATE: state}
        return msg
    return Custom(name=_EVENT, data={_RAW: raw, _STATE: state})


def _raw_of(evt: Event) -> dict[str, Any] | None:
    if isinstance(evt, Message) and evt.extra and isinstance(evt.extra.get(_RAW), dict):
        return evt.extra[_RAW]
    if isinstance(evt, Custom) and evt.name == _EVENT and isinstance(evt.data, dict):
        return evt.data.get(_RAW)
    return None


def _state_of(evt: Event) -> dict[str, Any] | None:
    if isinstance(evt, Message) and evt.extra:
        return evt.extra.get(_STATE)
    if isinstance(evt, Custom) and isinstance(evt.data, dict):
        return evt.data.get(_STATE)
    return None


class EventStoreSessionService(BaseSessionService):
    """ADK's ``BaseSessionService`` over an event store.

    Args:
        db_url: Database URL (default: ``EVENTSTORE_URL`` or ``./eventstore.db``).
        store: An existing store to use instead (its tenant applies).
    """

    def __init__(self, db_url: str | None = None, *, store: AsyncEventStore | None = None) -> None:
        super().__init__()
        self.store = store if store is not None else AsyncEventStore(db_url)
        self._owns_store = store is None

    @property
    def _sync(self) -> EventStore:
        return self.store.sync

    async def close(self) -> None:
        """Release the connections (when this service opened the store)."""
        if self._owns_store:
            await self.store.close()

    # -- scoped state logs

    def _state_log(self, scope: str, app_name: str, user_id: str | None) -> str:
        key = _scoped_key(scope, app_name, user_id)
        try:
            return self._sync.get_session_by_key(key).id
        except NotFoundError:
            try:
                return self._sync.create_session(key=key, title=f"ADK {scope} state").id
            except SessionExistsError:
                return self._sync.get_session_by_key(key).id

    def _read_scoped(self, scope: str, app_name: str, user_id: str | None) -> dict[str, Any]:
        key = _scoped_key(scope, app_name, user_id)
        try:
            sid = self._sync.get_session_by_key(key).id
        except NotFoundError:
            return {}
        tail = self._sync.read_tail(sid, 1)
        state = _state_of(tail[0].event) if tail else None
        return dict(state or {})

    def _write_scoped(
        self, scope: str, app_name: str, user_id: str | None, delta: dict[str, Any]
    ) -> None:
        sid = self._state_log(scope, app_name, user_id)
        for _ in range(10):  # read-modify-write under optimistic concurrency
            head = self._sync.head(sid)
            current = self._read_scoped(scope, app_name, user_id)
            current.update(delta)
            try:
                self._sync.append(
                    sid,
                    [Custom(name=_STATE_EVENT, data={_STATE: current, "delta": delta})],
                    expected_seq=head,
                )
                return
            except ConflictError:
                continue
        raise ConflictError(sid, head, self._sync.head(sid))

    def _merged(self, app_name: str, user_id: str, session_state: dict[str, Any]) -> dict[str, Any]:
        state = dict(session_state)
        for k, v in self._read_scoped("app", app_name, None).items():
            state[State.APP_PREFIX + k] = v
        for k, v in self._read_scoped("user", app_name, user_id).items():
            state[State.USER_PREFIX + k] = v
        return state

    # -- sessions

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        return await asyncio.to_thread(self._create, app_name, user_id, state, session_id)

    def _create(
        self, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str | None
    ) -> AdkSession:
        from google.adk.platform import uuid as platform_uuid
        from google.adk.sessions import _session_util

        session_id = (session_id.strip() if session_id else None) or platform_uuid.new_uuid()
        deltas = _session_util.extract_state_delta(state or {})
        now = time.time()
        meta = {"adk": {"app_name": app_name, "user_id": user_id, "session_id": session_id}}
        try:
            s = self._sync.create_session(
                key=_key(app_name, session_id), user_id=user_id, title=session_id, metadata=meta
            )
        except SessionExistsError:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        if deltas["app"]:
            self._write_scoped("app", app_name, None, deltas["app"])
        if deltas["user"]:
            self._write_scoped("user", app_name, user_id, deltas["user"])
        session_state = _session_util.make_json_safe_state(deltas["session"])
        self._sync.append(
            s.id,
            [Custom(name=_STATE_EVENT, data={_STATE: session_state, "created": now})],
        )
        session = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=self._merged(app_name, user_id, session_state),
            last_update_time=now,
        )
        session._storage_update_marker = str(self._sync.head(s.id))
        return session

    def store_session_id(self, *, app_name: str, user_id: str, session_id: str) -> str:
        """The id of the store session behind an ADK session (for views, search and
        condensers). Raises :class:`~eventstore.errors.NotFoundError` when there is none."""
        found = self._find(app_name, user_id, session_id)
        if found is None:
            raise NotFoundError(
                f"no ADK session {session_id!r} for app {app_name!r} and user {user_id!r}; "
                "create it with create_session first"
            )
        return str(found.id)

    def _find(self, app_name: str, user_id: str, session_id: str) -> Any:
        try:
            found = self._sync.get_session_by_key(
                _key(app_name, session_id.strip()), user_id=user_id
            )
        except NotFoundError:
            return None
        return found

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        return await asyncio.to_thread(self._get, app_name, user_id, session_id, config)

    def _backwards(self, sid: str, head: int, first: int = _PAGE) -> Any:
        """Stored events from ``head`` back, a page at a time (the first page ``first``
        events long: a bounded read asks for no more than it needs)."""
        hi, size = head, max(1, first)
        while hi >= 1:
            lo = max(1, hi - size + 1)
            yield from reversed(list(self._sync.read(sid, lo, hi)))
            hi, size = lo - 1, _PAGE

    def _get(
        self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None
    ) -> AdkSession | None:
        found = self._find(app_name, user_id, session_id)
        if found is None:
            return None
        sid = found.id
        head = found.head_seq
        limit = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        events: list[AdkEvent] = []
        state: dict[str, Any] | None = None
        last_time: float | None = None
        created: float | None = None
        first = limit + 1 if limit is not None and after is None else _PAGE
        for st in self._backwards(sid, head, first):
            if state is None:
                state = _state_of(st.event)
            raw = _raw_of(st.event)
            if raw is None:
                if isinstance(st.event, Custom) and "created" in st.event.data:
                    created = float(st.event.data["created"])
                    break  # the session's first event: nothing older
                continue
            if last_time is None:
                last_time = float(raw.get("timestamp", 0.0))
            if state is not None and (limit is not None and len(events) >= limit):
                break
            if after is not None and float(raw.get("timestamp", 0.0)) < after:
                if state is not None:
                    break
                continue
            if limit is None or len(events) < limit:
                events.append(AdkEvent.model_validate(raw))
        events.reverse()
        session = AdkSession(
            id=session_id.strip(),
            app_name=app_name,
            user_id=user_id,
            state=self._merged(app_name, user_id, state or {}),
            events=events,
            last_update_time=last_time if last_time is not None else (created or 0.0),
        )
        session._storage_update_marker = str(head)
        return session

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        return await asyncio.to_thread(self._list, app_name, user_id)

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        out = []
        for s in self._sync.list_sessions(user_id=user_id, limit=None):
            meta = s.metadata.get("adk") if isinstance(s.metadata, dict) else None
            if not isinstance(meta, dict) or meta.get("app_name") != app_name:
                continue
            got = self._get(
                app_name, meta["user_id"], meta["session_id"], GetSessionConfig(num_recent_events=0)
            )
            if got is not None:
                out.append(got)
        out.sort(key=lambda x: (x.last_update_time, x.user_id, x.id))
        return ListSessionsResponse(sessions=out)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await asyncio.to_thread(self._delete, app_name, user_id, session_id)

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        found = self._find(app_name, user_id, session_id)
        if found is not None:
            self._sync.delete_session(found.id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self._read_scoped, "user", app_name, user_id)

    # -- events

    async def append_event(self, session: AdkSession, event: AdkEvent) -> AdkEvent:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await asyncio.to_thread(self._append, session, event)
        return self._commit_event_to_session(session, event)

    def _append(self, session: AdkSession, event: AdkEvent) -> None:
        from google.adk.sessions import _session_util

        found = self._find(session.app_name, session.user_id, session.id)
        if found is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        marker = session._storage_update_marker
        expected = int(marker) if marker is not None else None
        if expected is None and found.updated_at.timestamp() > session.last_update_time + 1e-6:
            raise StaleSessionError("the session object is older than the stored session")
        state_changed = False
        current: dict[str, Any] = {}
        if event.actions and event.actions.state_delta:
            deltas = _session_util.extract_json_safe_state_delta(event.actions.state_delta)
            if deltas["app"]:
                self._write_scoped("app", session.app_name, None, deltas["app"])
            if deltas["user"]:
                self._write_scoped("user", session.app_name, session.user_id, deltas["user"])
            if deltas["session"]:
                state_changed = True
                current = dict(self._session_state(found.id))
                current.update(deltas["session"])
        if not state_changed:
            current = self._session_state(found.id)
        stored = stored_event(event, current)
        # The condensation goes first: the session's newest event stays the ADK event,
        # which carries the session state.
        events: list[Event] = [*self._condensation_for(found.id, event), stored]
        try:
            self._sync.append(found.id, events, expected_seq=expected)
        except ConflictError:
            raise StaleSessionError(
                "The session object is older than the stored session: another writer "
                "appended since it was read. Get the session again and retry."
            ) from None
        session.last_update_time = event.timestamp
        session._storage_update_marker = str(self._sync.head(found.id))

    def _condensation_for(self, sid: str, event: AdkEvent) -> list[Condensation]:
        """The condensation standing for ``event``'s compaction (none when it has none,
        or when it covers nothing the current view still shows)."""
        compaction = event.actions.compaction if event.actions else None
        if compaction is None or compaction.compacted_content is None:
            return []
        start, end = compaction.start_timestamp, compaction.end_timestamp
        seqs: list[int] = []
        for st in self._backwards(sid, self._sync.head(sid)):
            raw = _raw_of(st.event)
            if raw is None:
                continue
            ts = float(raw.get("timestamp", 0.0))
            if ts < start:
                break  # events are in time order: nothing older is compacted
            if ts <= end:
                seqs.append(st.seq)
        if not seqs:
            return []
        lo, hi = min(seqs), max(seqs)
        parts = compaction.compacted_content.parts or []
        text = "\n".join(p.text for p in parts if p.text and not p.thought) or None
        view = self._sync.view(sid)
        prev = view.condensation.event if view.condensation is not None else None
        if isinstance(prev, Condensation):
            if prev.forgotten_from <= lo and hi <= prev.forgotten_to:
                return []  # ADK ignores a compaction inside an earlier one's range
            if lo > prev.forgotten_from:
                # Neither range contains the other, so ADK shows both summaries: fold the
                # earlier one in, as every condensation does.
                lo = prev.forgotten_from
                text = "\n\n".join(t for t in (prev.summary, text) if t) or None
            hi = max(hi, prev.forgotten_to)
        counter = self._sync.token_counter
        cond = Condensation(
            forgotten_from=lo,
            forgotten_to=hi,
            summary=text,
            summary_tokens=counter.count(text) if text else 0,
            forgotten_events=hi - lo + 1,
            condenser="adk.compaction",
            settings={"start_timestamp": start, "end_timestamp": end},
            trigger="import",
            tokens_before=view.tokens,
            supersedes=view.condensation.seq if view.condensation is not None else None,
        )
        cond.tokens_after = apply_event(view, cond, counter).tokens
        return [cond]

    def _session_state(self, sid: str) -> dict[str, Any]:
        tail: list[StoredEvent] = self._sync.read_tail(sid, 1)
        state = _state_of(tail[0].event) if tail else None
        return dict(state or {})
