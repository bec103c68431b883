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
items, hosted tool calls) is kept as a message holding one
:class:`~eventstore.events.ProviderPart` (provider ``openai``): stored exactly, sent back
only in views for OpenAI (``ViewOptions(provider="openai")``), left out of any other
provider's. Sessions written before kept them as ``Custom`` events named
``openai_agents.item``; those still read back.

Condensation goes through the SDK's own hooks; give the session a
:class:`~condensers.CondensationPolicy`::

    session = EventStoreSession("user-42-chat", "sqlite:///agents.db", policy=policy)
    config = RunConfig(call_model_input_filter=session.model_input_filter())
    result = await Runner.run(agent, "Hi!", session=session, run_config=config)

* :meth:`EventStoreSession.model_input_filter` (``RunConfig.call_model_input_filter``):
  the model gets the condensed view, ``get_items`` keeps returning everything;
* :meth:`EventStoreSession.run_compaction` (the SDK's
  ``OpenAIResponsesCompactionAwareSession`` hook, called by the Runner after each turn):
  a condensation the policy writes becomes the compacted history ``get_items`` returns;
* wrapped in the SDK's ``OpenAIResponsesCompactionSession``, the compacted history it
  gets from ``responses.compact`` replaces the old one as a condensation, not a clear.

A clear is a condensation too (it forgets everything before it), so views and condensers
start over with the SDK's history. Nothing is deleted on any of these paths.

``get_items(limit=n)`` reads backwards from the head in pages and stops after ``n`` items:
its cost follows ``n``, not the session's length. The SDK's ``session_id`` is stored as
the session's key (:meth:`EventStore.get_session_by_key`), so the same id finds the same
session after a restart; one instance may be used from several threads, each with its own
event loop.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ConflictError, NotFoundError, SessionExistsError
from ..events import (
    Condensation,
    Custom,
    Event,
    Message,
    ProviderPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ..records import StoredEvent
from ..store import AsyncEventStore
from ..views import View, ViewItem, ViewOptions, shown_text

if TYPE_CHECKING:
    from condensers.policy import CondensationPolicy

__all__ = ["EventStoreSession", "condensed_items", "item_to_event"]

ITEM = "openai_agents.item"
POP = "openai_agents.pop"
CLEAR = "openai_agents.clear"
COMPACTION = "openai_agents.compaction"
"""Marker naming the condensation that ``get_items`` honours (written by
:meth:`EventStoreSession.run_compaction` and by the SDK's compaction session)."""
_RAW = "openai_agents_item"
PROVIDER = "openai"
"""The provider named on the opaque parts of items the store does not model."""
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
        # An assistant message of empty text is neither content nor a call (appends refuse
        # it): it stays an opaque item, as below.
        if text is not None and (text.strip() or item.get("role") != "assistant"):
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
    # Anything else (reasoning with encrypted content, compaction items, hosted tool
    # calls, non-text content): an opaque part that only views for OpenAI send back.
    role = _ROLES.get(str(item.get("role")), "assistant")
    return Message(
        role=role,  # type: ignore[arg-type]
        parts=[ProviderPart(provider=PROVIDER, item=item)],
        extra=raw,
    )


def _item_of(evt: Event) -> dict[str, Any] | None:
    if isinstance(evt, Message) and evt.extra and isinstance(evt.extra.get(_RAW), dict):
        return evt.extra[_RAW]
    if isinstance(evt, Custom) and evt.name == ITEM and isinstance(evt.data, dict):
        return evt.data
    return None


def _key(item: Any) -> str:
    """What two items are compared by when input items are matched to stored ones: the
    SDK may drop item ids (its reasoning-id policy), so ids do not count."""
    if not isinstance(item, dict):
        return repr(item)
    return json.dumps({k: v for k, v in item.items() if k != "id"}, sort_keys=True, default=str)


def condensed_items(
    pairs: list[tuple[int, dict[str, Any]]], inputs: list[Any], view: View
) -> list[Any]:
    """``inputs`` as the condensed ``view`` shows them.

    ``pairs`` are the stored items the SDK sees (seq and item, oldest first). Each input
    item equal to one of them (in order) takes its seq: it is left out when the view's
    condensation forgot that seq, and a tool output the view shows as compacted gets the
    placeholder (or, when a prune truncated it, the same head and tail the view shows).
    The summary goes where the forgotten items were, after the pinned head.
    Input items that match nothing (the new turn) pass through unchanged.
    """
    cond = view.condensation.event if view.condensation is not None else None
    hidden_lo, hidden_hi, pinned = 1, 0, set[int]()
    if isinstance(cond, Condensation):
        hidden_lo, hidden_hi, pinned = cond.forgotten_from, cond.forgotten_to, set(cond.pinned)
    by_seq = {i.seq: i for i in view.items}
    keys = [_key(item) for _, item in pairs]
    j = 0
    out: list[Any] = []
    dropped = False
    summary = view.summary
    for x in inputs:
        seq = None
        k = _key(x)
        for m in range(j, len(keys)):
            if keys[m] == k:
                seq, j = pairs[m][0], m + 1
                break
        if seq is not None and hidden_lo <= seq <= hidden_hi and seq not in pinned:
            dropped = True
            continue
        if dropped and summary is not None and (seq is None or seq not in pinned):
            out.append(_summary_item(view.options, summary))
            summary = None
        vitem = by_seq.get(seq) if seq is not None else None
        if vitem is not None and vitem.compacted and isinstance(x, dict):
            x = _as_shown(x, vitem, view.options)
        out.append(x)
    if dropped and summary is not None:
        out.append(_summary_item(view.options, summary))
    return out


def _as_shown(item: dict[str, Any], vitem: ViewItem, options: ViewOptions) -> dict[str, Any]:
    """An SDK item whose part the view shows compacted, as the view shows it: a tool
    output's placeholder or head and tail, a call's cut arguments, a message's cut text."""
    ref = next(iter(vitem.compacted.values()))
    shown = shown_text(options, ref, vitem.message.parts[ref.index], vitem.kept.get(ref.index))
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "function_call_output":
        return {**item, "output": shown}
    if kind == "function_call":
        return {**item, "arguments": shown}
    content = item.get("content")
    if kind == "message" and isinstance(content, str):
        return {**item, "content": shown}
    if kind == "message" and isinstance(content, list):
        texts = [c for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)]
        if texts:  # the stored text joined the entries: the cut stands for all of them
            return {**item, "content": [{**texts[0], "text": shown}]}
    return item


def _settings(value: Any) -> Any:
    """``value`` as the SDK's own sessions keep it: ``SessionSettings()`` for ``None``, a
    dict made a ``SessionSettings`` (unknown keys raise the SDK's ``TypeError``). Where
    the SDK is not installed ``value`` is kept as given."""
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:
        return value
    return SessionSettings() if value is None else coerce_session_settings(value)


def _summary_item(options: ViewOptions, summary: str) -> dict[str, Any]:
    return {"role": options.summary_role, "content": options.summary_prefix + summary}


class EventStoreSession:
    """The ``agents.memory.Session`` protocol over an event store session.

    Args:
        session_id: The SDK's session id (any string; stored as the session key).
        db_url: Database URL (default: ``EVENTSTORE_URL`` or ``./eventstore.db``).
        store: An existing store to use instead (its tenant applies).
        session_settings: The SDK's ``SessionSettings`` or a dict of its fields
            (default: ``SessionSettings()``, as the SDK's own sessions have); its
            ``limit`` is what :meth:`get_items` returns when called without one.
        policy: The :class:`~condensers.CondensationPolicy` used by
            :meth:`model_input_filter` and :meth:`run_compaction` (``None``: the filter
            needs one passed in and ``run_compaction`` does nothing).
        prune_on_start: Run the policy's tool-output pruners
            (:meth:`~condensers.CondensationPolicy.maybe_prune`) the first time the session
            is opened through the policy, before its first model input: a session resumed
            by a new process starts lean, with no model call (``False``: only the policy's
            triggers run).
    """

    session_settings: Any = None

    def __init__(
        self,
        session_id: str,
        db_url: str | None = None,
        *,
        store: AsyncEventStore | None = None,
        session_settings: Any = None,
        policy: CondensationPolicy | None = None,
        prune_on_start: bool = True,
    ) -> None:
        self.session_id = session_id
        self.prune_on_start = prune_on_start
        self.session_settings = _settings(session_settings)  # refuses bad ones first
        self.store = store if store is not None else AsyncEventStore(db_url)
        self._owns_store = store is None
        self.policy = policy
        self._sid: str | None = None

    # -- the store session behind the SDK id

    @property
    def store_session_id(self) -> str:
        """The id of the store session behind the SDK id (created on first use)."""
        return self._session_id()

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
        ``limit``, the newest ``limit`` of them. After :meth:`run_compaction` the items it
        compacted are replaced by its summary item (pinned head items stay)."""
        if limit is None and self.session_settings is not None:
            # An explicit limit wins over the settings' (the SDK's resolve_session_limit).
            limit = _settings(self.session_settings).limit
        return await self._run(self._items, limit)

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        """Append items (one transaction)."""
        if items:
            await self._run(self._add, items)

    async def pop_item(self) -> dict[str, Any] | None:
        """Remove the newest item from the SDK's view and return it (the log keeps it)."""
        return await self._run(self._pop)

    async def clear_session(self) -> None:
        """Start over: the SDK sees no items; the log keeps them all. The clear is also a
        condensation that forgets everything before it, so views and condensers start
        over too."""
        await self._run(self._clear)

    async def close(self) -> None:
        """Release the store's connections when this session opened the store."""
        if self._owns_store:
            await self.store.close()

    # -- condensation through the SDK's hooks

    def model_input_filter(
        self, policy: CondensationPolicy | None = None
    ) -> Callable[[Any], Awaitable[Any]]:
        """A ``RunConfig.call_model_input_filter`` that sends the model the condensed view.

        Before each model call the policy runs on this session (writing a condensation or
        prune when a trigger fires), and the model gets the SDK's input with the items
        the view forgot replaced by the view's summary and pruned tool outputs shown as
        placeholders. The session's items are untouched: ``get_items`` still returns the
        whole history, and the log keeps every event.

        Args:
            policy: The policy to run (default: the session's ``policy``).

        ::

            session = EventStoreSession("chat", store=store, policy=policy)
            config = RunConfig(call_model_input_filter=session.model_input_filter())
            await Runner.run(agent, "Hi", session=session, run_config=config)
        """
        chosen = policy if policy is not None else self.policy
        if chosen is None:
            raise ValueError(
                "model_input_filter needs a CondensationPolicy: pass policy=... here or "
                "to EventStoreSession(...)"
            )

        async def call_model_input_filter(data: Any) -> Any:
            from agents.run_config import ModelInputData

            model_data = data.model_data
            inputs = await self._run(self._condensed_input, chosen, list(model_data.input))
            return ModelInputData(input=inputs, instructions=model_data.instructions)

        return call_model_input_filter

    async def run_compaction(self, args: Any = None) -> None:
        """The SDK's compaction hook (``OpenAIResponsesCompactionAwareSession``).

        The Runner calls it after each turn it saved (when the model returned a response
        id) with ``{"response_id": ..., "force": ...}``. It runs the session's policy
        (condensing only when a trigger fires, or now when ``force`` is set or it is
        called without arguments) and, when a condensation was written, makes it the one
        ``get_items`` honours: the compacted items give way to the summary item. Nothing
        is deleted; ``verify`` stays ok and the original items stay readable
        (:meth:`~eventstore.EventStore.forgotten`). Without a policy it does nothing.
        """
        if self.policy is None:
            return
        force = args is None or bool(args.get("force"))
        await self._run(self._compact, self.policy, force)

    async def _atomic_replace_items(self, items: list[dict[str, Any]]) -> bool:
        """Called by the SDK's ``OpenAIResponsesCompactionSession`` when it replaces the
        history with a compacted one: instead of clearing, a condensation forgets the
        replaced items and the new ones are appended, in one transaction."""
        await self._run(self._replace, [dict(i) for i in items])
        return True

    # -- sync bodies (run in a worker thread)

    def _add(self, items: list[dict[str, Any]]) -> None:
        sync = self.store.sync
        sync.append(self._session_id(), [item_to_event(dict(i)) for i in items])

    def _backwards(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(seq, item) pairs from the newest back to the newest clear, skipping popped
        items and what the newest compaction replaced (its summary item is yielded with
        the compaction's seq); a page of events at a time."""
        sync = self.store.sync
        sid = self._session_id()
        hi = sync.head(sid)
        popped: set[int] = set()
        compaction: dict[str, Any] | None = None
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
                if isinstance(evt, Custom) and evt.name == COMPACTION and compaction is None:
                    compaction = dict(evt.data, seq=st.seq)
                    continue
                if compaction is not None and st.seq <= int(compaction["forgotten_to"]):
                    yield from self._compacted_head(compaction, popped)
                    return
                item = _item_of(evt)
                if item is not None and st.seq not in popped:
                    yield st.seq, item
            hi = lo - 1

    def _compacted_head(
        self, compaction: dict[str, Any], popped: set[int]
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """What stands for a compacted range: its summary item, then the pinned items."""
        seq = int(compaction["seq"])
        if isinstance(compaction.get("item"), dict) and seq not in popped:
            yield seq, compaction["item"]
        sync = self.store.sync
        for p in sorted(compaction.get("pinned") or [], reverse=True):
            if p in popped:
                continue
            for st in sync.read(self._session_id(), p, p):
                item = _item_of(st.event)
                if item is not None:
                    yield st.seq, item

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
            seq, item = found
            try:
                sync.append(sid, [Custom(name=POP, data={"seq": seq})], expected_seq=head)
            except ConflictError:
                continue
            return item
        raise ConflictError(sid, head, sync.head(sid))

    def _forget_all(self, head: int, upto: int, reason: str) -> Condensation | None:
        """A condensation, to be appended after ``head``, forgetting every event up to
        ``upto`` (``None`` when the session is empty)."""
        if head < 1:
            return None
        sync = self.store.sync
        view = sync.view(self._session_id(), as_of=head)
        return Condensation(
            forgotten_from=1,
            forgotten_to=upto,
            forgotten_events=upto,
            condenser=reason,
            trigger="manual",
            tokens_before=view.tokens,
            tokens_after=0,
            supersedes=view.condensation.seq if view.condensation is not None else None,
        )

    def _clear(self) -> None:
        sync = self.store.sync
        sid = self._session_id()
        for _ in range(5):
            head = sync.head(sid)
            # The marker first: the condensation then forgets it as well.
            events: list[Event] = [Custom(name=CLEAR, data={})]
            forget = self._forget_all(head, head + 1, CLEAR)
            if forget is not None:
                events.append(forget)
            try:
                sync.append(sid, events, expected_seq=head)
            except ConflictError:
                continue
            return
        raise ConflictError(sid, head, sync.head(sid))

    def _opened(self, policy: CondensationPolicy) -> str:
        """The store session's id, pruned first when the policy opens it the first time."""
        sid = self._session_id()
        if policy.first_open(sid) and self.prune_on_start:
            policy.maybe_prune(self.store.sync, sid)
        return sid

    def _condensed_input(self, policy: CondensationPolicy, inputs: list[Any]) -> list[Any]:
        sync = self.store.sync
        sid = self._opened(policy)
        policy.maybe_condense(sync, sid)
        view = sync.view(sid, options=policy.options)
        pairs = list(self._backwards())
        pairs.reverse()
        return condensed_items(pairs, inputs, view)

    def _compact(self, policy: CondensationPolicy, force: bool) -> None:
        sync = self.store.sync
        sid = self._opened(policy)
        outcome = (
            policy.condense(sync, sid, trigger="manual")
            if force
            else policy.maybe_condense(sync, sid)
        )
        seqs = [s.seq for s in outcome.steps if s.kind == "condensation"]
        if not seqs:
            return
        stored = next(iter(sync.read(sid, seqs[-1], seqs[-1])))
        cond = stored.event
        assert isinstance(cond, Condensation)
        options = policy.options or ViewOptions()
        marker = {
            "condensation_seq": stored.seq,
            "forgotten_to": cond.forgotten_to,
            "pinned": list(cond.pinned),
            "item": _summary_item(options, cond.summary) if cond.summary is not None else None,
        }
        sync.append(sid, [Custom(name=COMPACTION, data=marker)])

    def _replace(self, items: list[dict[str, Any]]) -> None:
        sync = self.store.sync
        sid = self._session_id()
        for _ in range(5):
            head = sync.head(sid)
            forget = self._forget_all(head, head, "openai_agents.responses_compact")
            events: list[Event] = []
            if forget is not None:
                events.append(forget)
                marker = {"condensation_seq": head + 1, "forgotten_to": head, "pinned": []}
                events.append(Custom(name=COMPACTION, data=marker))
            events.extend(item_to_event(i) for i in items)
            if not events:
                return
            try:
                sync.append(sid, events, expected_seq=head)
            except ConflictError:
                continue
            return
        raise ConflictError(sid, head, sync.head(sid))
