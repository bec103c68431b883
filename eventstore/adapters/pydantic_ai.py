"""A pydantic-ai ``ConversationStore`` backed by the event store (pydantic-ai-slim 2.68).

::

    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from eventstore.adapters.pydantic_ai import EventStoreConversationStore

    store = EventStoreConversationStore("sqlite:///chats.db")
    conversation = await store.load("chat-1") or Conversation(conversation_id="chat-1")
    result = await agent.run("Hi!", conversation=conversation)
    await store.save(result)

It implements the five storage primitives; pydantic-ai's base class does the rest (which
messages are new, where a rewritten history branches, what a fork shares). Each
conversation is a session of the event store, found by its ``conversation_id`` (the
session key). A save is one append to that session: the new entries, each an event whose
id is the entry id and which keeps the exact pydantic-ai message (also as a typed message,
for views, search and condensers), then the new record. The record's revision check is the
append's ``expected_seq``, so two writers cannot both win. A record is the newest
``pydantic_ai.record`` event of its session: one probe of the tail.

Entries are shared the way pydantic-ai shares them: a fork's or a branch's history points
at entries stored in another conversation's session, found by id. ``delete`` is a
tombstone: the conversation no longer loads or lists, and its entries stay in the log
(forks that reach them keep working, and nothing is ever removed behind the audit's back).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from pydantic_ai import messages as pai_messages
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.usage import RunUsage

from ..errors import ConflictError, NotFoundError, SessionExistsError
from ..events import (
    Custom,
    Event,
    Message,
    Part,
    ProviderPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    empty_assistant,
)
from ..records import StoredEvent
from ..store import AsyncEventStore, EventStore

__all__ = ["EventStoreConversationStore"]

RECORD = "pydantic_ai.record"
_ENTRY = "pydantic_ai_entry"
_MARK = "pydantic_ai"
_ADAPTER = pai_messages.ModelMessagesTypeAdapter


def _dump_message(message: Any) -> dict[str, Any]:
    return _ADAPTER.dump_python([message], mode="json")[0]


def _load_message(data: dict[str, Any]) -> Any:
    return _ADAPTER.validate_python([data])[0]


def _typed(message: Any) -> tuple[str, list[Part]]:
    """The chat role and parts that stand for a pydantic-ai message in views."""
    parts: list[Part] = []
    if isinstance(message, pai_messages.ModelResponse):
        for p in message.parts:
            if isinstance(p, pai_messages.TextPart):
                parts.append(TextPart(text=p.content))
            elif isinstance(p, pai_messages.ToolCallPart):
                parts.append(
                    ToolCallPart(
                        id=p.tool_call_id, name=p.tool_name, arguments=p.args_as_json_str()
                    )
                )
        return "assistant", parts
    returns = 0
    for p in message.parts:
        if isinstance(p, pai_messages.ToolReturnPart | pai_messages.RetryPromptPart):
            if p.tool_call_id:
                text = (
                    p.model_response_str() if hasattr(p, "model_response_str") else str(p.content)
                )
                parts.append(
                    ToolResultPart(tool_call_id=p.tool_call_id, name=p.tool_name, output=text)
                )
                returns += 1
        elif isinstance(p, pai_messages.UserPromptPart | pai_messages.SystemPromptPart):
            content = p.content if isinstance(p.content, str) else str(p.content)
            parts.append(TextPart(text=content))
    if returns and returns == len(parts):
        return "tool", parts
    return "user", [p for p in parts if not isinstance(p, ToolResultPart)] or [TextPart(text="")]


def _entry_event(entry: ConversationEntry) -> Event:
    role, parts = _typed(entry.message)
    dumped = _dump_message(entry.message)
    extra = {_ENTRY: {"parent_id": entry.parent_id, "kind": entry.kind, "message": dumped}}
    msg = Message(id=entry.id, role=role, parts=parts, extra=extra)  # type: ignore[arg-type]
    if empty_assistant(msg):
        # A response with nothing a chat message holds (only thinking, or nothing), which
        # appends refuse as a message: it is kept as the framework's own part, which
        # views for other providers leave out.
        msg.parts = [ProviderPart(provider="pydantic-ai", item=dumped)]
    return msg


def _entry_of(stored: StoredEvent) -> ConversationEntry:
    evt = stored.event
    data = evt.extra.get(_ENTRY) if isinstance(evt, Message) and evt.extra else None
    if not isinstance(data, dict):
        raise KeyError(stored.id)
    return ConversationEntry(
        id=stored.id,
        parent_id=data["parent_id"],
        message=_load_message(data["message"]),
        kind=data.get("kind", "message"),
    )


def _record_data(record: ConversationRecord) -> dict[str, Any]:
    data = dataclasses.asdict(record)
    data["usage"] = dataclasses.asdict(record.usage)
    data["updated_at"] = record.updated_at.isoformat()
    if record.deferred_tool_requests is not None:
        from pydantic import TypeAdapter

        data["deferred_tool_requests"] = TypeAdapter(
            type(record.deferred_tool_requests)
        ).dump_python(record.deferred_tool_requests, mode="json")
    return data


def _record_of(data: dict[str, Any]) -> ConversationRecord:
    from datetime import datetime

    fields = dict(data)
    fields["usage"] = RunUsage(**fields.get("usage") or {})
    fields["updated_at"] = datetime.fromisoformat(fields["updated_at"])
    if fields.get("deferred_tool_requests") is not None:
        from pydantic import TypeAdapter
        from pydantic_ai import DeferredToolRequests

        fields["deferred_tool_requests"] = TypeAdapter(DeferredToolRequests).validate_python(
            fields["deferred_tool_requests"]
        )
    return ConversationRecord(**fields)


class EventStoreConversationStore(ConversationStore):
    """pydantic-ai's ``ConversationStore`` over an event store.

    Args:
        db_url: Database URL (default: ``EVENTSTORE_URL`` or ``./eventstore.db``).
        store: An existing store to use instead (its tenant applies).
    """

    def __init__(self, db_url: str | None = None, *, store: AsyncEventStore | None = None) -> None:
        self.store = store if store is not None else AsyncEventStore(db_url)
        self._owns_store = store is None

    @property
    def _sync(self) -> EventStore:
        return self.store.sync

    async def close(self) -> None:
        """Release the connections (when this store opened them)."""
        if self._owns_store:
            await self.store.close()

    # -- records

    def _latest(self, conversation_id: str) -> tuple[str, int, ConversationRecord] | None:
        """The conversation's session, its head, and its newest record (if it has one)."""
        try:
            s = self._sync.get_session_by_key(conversation_id)
        except NotFoundError:
            return None
        found = self._sync.latest_event(s.id, "custom")
        while found is not None:
            evt = found.event
            if isinstance(evt, Custom) and evt.name == RECORD:
                return s.id, s.head_seq, _record_of(evt.data)
            found = self._sync.latest_event(s.id, "custom", as_of=found.seq - 1)
        return None

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        found = await asyncio.to_thread(self._latest, conversation_id)
        return None if found is None else found[2]

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        return await asyncio.to_thread(self._records, scope, limit)

    def _records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        out = []
        for s in self._sync.list_sessions(limit=None):
            if not (isinstance(s.metadata, dict) and s.metadata.get(_MARK)) or s.key is None:
                continue
            found = self._latest(s.key)
            if found is not None and (scope is None or found[2].scope == scope):
                out.append(found[2])
        out.sort(key=lambda r: r.updated_at, reverse=True)
        return out[:limit] if limit is not None else out

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        await asyncio.to_thread(self._write, record, list(new_entries), expected_revision)

    def _write(
        self,
        record: ConversationRecord,
        new_entries: list[ConversationEntry],
        expected_revision: str | None,
    ) -> None:
        cid = record.conversation_id
        found = self._latest(cid)
        if (found[2].revision if found is not None else None) != expected_revision:
            raise ConversationConflict(cid)
        new_ids = {e.id for e in new_entries}
        if record.head_id is not None and record.head_id not in new_ids:
            try:
                self._sync.find_event(record.head_id)
            except NotFoundError:
                raise ConversationConflict(cid) from None
        if found is None:
            try:
                sid = self._sync.create_session(key=cid, title=cid, metadata={_MARK: True}).id
            except SessionExistsError:
                raise ConversationConflict(cid) from None
            head = 0
        else:
            sid, head = found[0], found[1]
        batch: list[Event] = [_entry_event(e) for e in new_entries]
        batch.append(Custom(name=RECORD, data=_record_data(record)))
        try:
            self._sync.append(sid, batch, expected_seq=head)
        except ConflictError:
            raise ConversationConflict(cid) from None

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await asyncio.to_thread(self._delete, conversation_id, expected_revision)

    def _delete(self, conversation_id: str, expected_revision: str) -> None:
        found = self._latest(conversation_id)
        if found is None or found[2].revision != expected_revision:
            raise ConversationConflict(conversation_id)
        try:
            self._sync.delete_session(found[0])
        except NotFoundError:
            raise ConversationConflict(conversation_id) from None

    # -- entries

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return await asyncio.to_thread(self._entry, entry_id)

    def _entry(self, entry_id: str) -> ConversationEntry:
        try:
            return _entry_of(self._sync.find_event(entry_id))
        except NotFoundError:
            raise KeyError(entry_id) from None

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        return await asyncio.to_thread(self._history, head_id, limit)

    def _history(self, head_id: str | None, limit: int | None) -> list[ConversationEntry]:
        entries: list[ConversationEntry] = []
        entry_id = head_id
        while entry_id is not None and (limit is None or len(entries) < limit):
            entry = self._entry(entry_id)
            entries.append(entry)
            entry_id = entry.parent_id
        entries.reverse()
        return entries
