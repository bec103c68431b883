"""An OpenAI Agents SDK session backed by the event store.

::

    from agents import Agent, Runner
    from eventstore.adapters.openai_agents import EventStoreSession

    session = EventStoreSession("user-42-chat", "sqlite:///agents.db")
    result = await Runner.run(Agent(name="helper"), "Hi!", session=session)

It implements the SDK's ``Session`` protocol (``get_items``, ``add_items``, ``pop_item``,
``clear_session``; openai-agents 0.24) with the SDK's semantics, but nothing is ever
deleted: each item is an event, ``pop_item`` and ``clear_session`` append markers, and the
items the SDK sees are the ones after the newest clear, minus the popped ones. The whole
history stays auditable and ``verify`` proves it.

Items come back exactly as added (the raw item is kept with each event). Those the store
understands also become typed messages, so views, search and condensers work on them:
``message`` items (user, assistant, system, developer), ``function_call`` and
``function_call_output``. Anything else (reasoning with encrypted content, compaction
items, hosted tool calls) is kept opaque as a ``Custom`` event named
``openai_agents.item``.

``get_items(limit=n)`` reads backwards from the head in pages and stops after ``n`` items:
its cost follows ``n``, not the session's length. The SDK's ``session_id`` is stored as
the session's key (:meth:`EventStore.get_session_by_key`), so the same id finds the same
session after a restart; one instance may be used from several threads, each with its own
event loop.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ConflictError, NotFoundError, SessionExistsError
from ..events import Custom, Event, Message, TextPart, ToolCallPart, ToolResultPart
from ..records import StoredEvent
from ..store import AsyncEventStore

__all__ = ["EventStoreSession", "item_to_event"]

ITEM = "openai_agents.item"
POP = "openai_agents.pop"
CLEAR = "openai_agents.clear"
_RAW = "openai_agents_item"
_PAGE = 64
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [c.get("text") for c in content if isinstance(c, dict)]
        if all(isinstance(t, str) for t in texts):
            return "".join(t for t in texts if isinstance(t, str))
    return None


def item_to_event(item: dict[str, Any]) -> Event:
    """The event an SDK item is stored as (the raw item always goes with it)."""
    kind = item.get("type", "message" if "role" in item else None)
    raw = {_RAW: item}
    if kind == "message" and item.get("role") in _ROLES:
        text = _text(item.get("content"))
        if text is not None:
            role = _ROLES[item["role"]]
            return Message(role=role, parts=[TextPart(text=text)], extra=raw)  # type: ignore[arg-type]
    if kind == "function_call" and isinstance(item.get("call_id"), str):
        call = ToolCallPart(
            id=item["call_id"],
            name=str(item.get("name", "")),
            arguments=str(item.get("arguments", "")),
        )
        return Message(role="assistant", parts=[call], extra=raw)
    if kind == "function_call_output" and isinstance(item.get("call_id"), str):
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        return Message(
            role="tool",
            parts=[ToolResultPart(tool_call_id=item["call_id"], output=text)],
            extra=raw,
        )
    return Custom(name=ITEM, data=item)


def _item_of(evt: Event) -> dict[str, Any] | None:
    if isinstance(evt, Message) and evt.extra and isinstance(evt.extra.get(_RAW), dict):
        return evt.extra[_RAW]
    if isinstance(evt, Custom) and evt.name == ITEM and isinstance(evt.data, dict):
        return evt.data
    return None


class EventStoreSession:
    """The ``agents.memory.Session`` protocol over an event store session.

    Args:
        session_id: The SDK's session id (any string; stored as the session key).
        db_url: Database URL (default: ``EVENTSTORE_URL`` or ``./eventstore.db``).
        store: An existing store to use instead (its tenant applies).
        session_settings: The SDK's ``SessionSettings`` (its ``limit`` is the default
            for :meth:`get_items`).
    """

    session_settings: Any = None

    def __init__(
        self,
        session_id: str,
        db_url: str | None = None,
        *,
        store: AsyncEventStore | None = None,
        session_settings: Any = None,
    ) -> None:
        self.session_id = session_id
        self.store = store if store is not None else AsyncEventStore(db_url)
        self._owns_store = store is None
        self.session_settings = session_settings
        self._sid: str | None = None

    # -- the store session behind the SDK id

    def _session_id(self) -> str:
        if self._sid is None:
            sync = self.store.sync
            try:
                self._sid = sync.get_session_by_key(self.session_id).id
            except NotFoundError:
                try:
                    self._sid = sync.create_session(key=self.session_id, title=self.session_id).id
                except SessionExistsError:  # another thread created it first
                    self._sid = sync.get_session_by_key(self.session_id).id
        return self._sid

    async def _run(self, fn: Any, *args: Any) -> Any:
        import asyncio

        return await asyncio.to_thread(fn, *args)

    # -- the protocol

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The items after the last clear, minus popped ones, oldest first; with
        ``limit``, the newest ``limit`` of them."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        return await self._run(self._items, limit)

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        """Append items (one transaction)."""
        if items:
            await self._run(self._add, items)

    async def pop_item(self) -> dict[str, Any] | None:
        """Remove the newest item from the SDK's view and return it (the log keeps it)."""
        return await self._run(self._pop)

    async def clear_session(self) -> None:
        """Start over: the SDK sees no items; the log keeps them all."""
        await self._run(self._clear)

    async def close(self) -> None:
        """Release the store's connections when this session opened the store."""
        if self._owns_store:
            await self.store.close()

    # -- sync bodies (run in a worker thread)

    def _add(self, items: list[dict[str, Any]]) -> None:
        sync = self.store.sync
        sync.append(self._session_id(), [item_to_event(dict(i)) for i in items])

    def _backwards(self) -> Any:
        """(stored event, item) pairs from the newest back to the newest clear, skipping
        popped items; a page of events at a time."""
        sync = self.store.sync
        sid = self._session_id()
        hi = sync.head(sid)
        popped: set[int] = set()
        while hi >= 1:
            lo = max(1, hi - _PAGE + 1)
            page: list[StoredEvent] = list(sync.read(sid, lo, hi))
            for st in reversed(page):
                evt = st.event
                if isinstance(evt, Custom) and evt.name == CLEAR:
                    return
                if isinstance(evt, Custom) and evt.name == POP:
                    popped.add(int(evt.data["seq"]))
                    continue
                item = _item_of(evt)
                if item is not None and st.seq not in popped:
                    yield st, item
            hi = lo - 1

    def _items(self, limit: int | None) -> list[dict[str, Any]]:
        if limit is not None and limit <= 0:
            return []
        out: list[dict[str, Any]] = []
        for _, item in self._backwards():
            out.append(item)
            if limit is not None and len(out) >= limit:
                break
        out.reverse()
        return out

    def _pop(self) -> dict[str, Any] | None:
        sync = self.store.sync
        sid = self._session_id()
        for _ in range(5):  # retry when a concurrent writer moves the head
            head = sync.head(sid)
            found = next(iter(self._backwards()), None)
            if found is None:
                return None
            st, item = found
            try:
                sync.append(sid, [Custom(name=POP, data={"seq": st.seq})], expected_seq=head)
            except ConflictError:
                continue
            return item
        raise ConflictError(sid, head, sync.head(sid))

    def _clear(self) -> None:
        self.store.sync.append(self._session_id(), [Custom(name=CLEAR, data={})])
