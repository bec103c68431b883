"""A LangGraph checkpointer that stores each step's change, not the whole state.

::

    from langgraph.graph import StateGraph
    from eventstore.adapters.langgraph import EventStoreSaver

    saver = EventStoreSaver("sqlite:///graphs.db")
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "user-42"}})

:class:`EventStoreSaver` is a ``BaseCheckpointSaver`` (langgraph-checkpoint 4.3) with the
sync and async methods LangGraph calls: ``put``, ``put_writes``, ``get_tuple``, ``list``,
``delete_thread``, their ``a*`` twins, and ``get_next_version``. The optional methods
(``prune``, ``copy_thread``, ``delete_for_runs``) are left to the base class, which
LangGraph reads as "not supported".

How it is stored:

* A thread is a session, found by the key ``langgraph:<thread_id>``; its subgraphs
  (``checkpoint_ns``) live in the same session, so deleting the thread deletes them too.
* A checkpoint is one ``Custom`` event (``langgraph.checkpoint``) holding only the
  channels whose version changed since its parent. A list that grew (a message list, the
  usual LangGraph state) is stored as the elements it gained. Every ``snapshot_every``
  steps of a chain the checkpoint holds every channel in full instead, so rebuilding
  any checkpoint reads at most that many events: the nearest snapshot and the deltas
  after it. Storage therefore grows with what changed, not with the state's size.
* Pending writes are ``langgraph.writes`` events, one per ``put_writes`` call, whose
  event ids are derived from their checkpoint and a batch number: ``get_tuple`` finds
  them by indexed lookups wherever they landed (LangGraph writes them from a background
  thread, sometimes before the checkpoint's own event; a run resumed from a past
  checkpoint writes them after its successors).
* The event id of a checkpoint is derived from its namespace and id, so ``get_tuple`` of
  any checkpoint starts from one indexed lookup.

Nothing is rewritten: ``delete_thread`` deletes the session the way the store deletes
(a tombstone; :meth:`~eventstore.EventStore.verify` and audits still read it), and the log
of every step stays verifiable.

Values are serialized by the saver's ``serde`` (LangGraph's ``JsonPlusSerializer`` by
default), exactly as LangGraph's own savers do. A list element is compared with the
parent's by identity first and by its serialized bytes otherwise; as with LangGraph's
reducers, a value handed to ``put`` must not be mutated in place afterwards.
"""

from __future__ import annotations

import asyncio
import base64
import random
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..errors import InvalidEventError, NotFoundError, SessionExistsError
from ..events import Custom
from ..records import StoredEvent
from ..store import AsyncEventStore, EventStore

__all__ = ["EventStoreSaver", "DEFAULT_SNAPSHOT_EVERY"]

CHECKPOINT = "langgraph.checkpoint"
WRITES = "langgraph.writes"
KEY_PREFIX = "langgraph:"
DEFAULT_SNAPSHOT_EVERY = 50
"""Steps between full snapshots: rebuilding a checkpoint reads at most this many events."""
_CACHE = 32
_BATCHES = 100_000  # the most batches of writes one checkpoint may have
_MAX_TAIL = 100_000  # the most events one read_tail returns
#: Event ids of checkpoints: a UUID derived from (namespace, checkpoint id), so one
#: session holds the checkpoints of every namespace of its thread.
_IDS = uuid.UUID("6f1d3c52-6c1b-4a51-9a43-1c8e1d2a9b70")

Typed = tuple[str, bytes]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _event_id(ns: str, checkpoint_id: str) -> str:
    return str(uuid.uuid5(_IDS, f"{ns}\x00{checkpoint_id}"))


def _batch_id(ns: str, checkpoint_id: str, n: int) -> str:
    """The event id of the ``n``-th batch of pending writes of a checkpoint."""
    return str(uuid.uuid5(_IDS, f"{ns}\x00{checkpoint_id}\x00writes\x00{n}"))


@dataclass
class _Channel:
    """One channel's stored value: whole (``value``) or a list element by element."""

    value: Typed | None = None
    elems: list[Typed] | None = None
    objs: list[Any] | None = None
    """The objects last handed out or put for ``elems`` (identity is checked first)."""


@dataclass
class _State:
    """A checkpoint's channels as stored bytes, and where it sits in its chain."""

    seq: int
    depth: int
    snap: int
    versions: dict[str, Any]
    channels: dict[str, _Channel] = field(default_factory=dict)


class EventStoreSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer over an event store.

    Args:
        db_url: Database URL (default: ``EVENTSTORE_URL`` or ``./eventstore.db``).
        store: An existing store (sync or async) to use instead; its tenant applies.
        snapshot_every: Steps between full snapshots of a chain of checkpoints.
        serde: LangGraph's serializer (default: ``JsonPlusSerializer``).
    """

    def __init__(
        self,
        db_url: str | None = None,
        *,
        store: EventStore | AsyncEventStore | None = None,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int):
            raise TypeError(f"snapshot_every: a number of steps, not {snapshot_every!r}")
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every: 1 or more steps, not {snapshot_every}")
        self._owns_store = store is None
        if store is None:
            store = EventStore(db_url)
        self.store: EventStore = store.sync if isinstance(store, AsyncEventStore) else store
        self.snapshot_every = snapshot_every
        self._sids: dict[str, str] = {}
        self._states: OrderedDict[tuple[str, int], _State] = OrderedDict()
        self._seqs: dict[tuple[str, str], int] = {}  # (session, event id) -> seq, cached
        # (session, ns, checkpoint id) -> the number of its next batch of writes
        self._batches: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Release the store's connections when this saver opened the store."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> EventStoreSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions

    def _session(self, thread_id: str, create: bool) -> str | None:
        sid = self._sids.get(thread_id)
        if sid is not None:
            return sid
        key = KEY_PREFIX + thread_id
        try:
            sid = self.store.get_session_by_key(key).id
        except NotFoundError:
            if not create:
                return None
            try:
                sid = self.store.create_session(key=key, title=thread_id).id
            except SessionExistsError:  # another writer created it first
                sid = self.store.get_session_by_key(key).id
        self._sids[thread_id] = sid
        return sid

    def _forget(self, thread_id: str) -> None:
        sid = self._sids.pop(thread_id, None)
        if sid is not None:
            with self._lock:
                for k in [k for k in self._states if k[0] == sid]:
                    del self._states[k]
                for i in [i for i in self._seqs if i[0] == sid]:
                    del self._seqs[i]
                for j in [j for j in self._batches if j[0] == sid]:
                    del self._batches[j]

    # -- encoding

    def _dump(self, value: Any) -> Typed:
        kind, data = self.serde.dumps_typed(value)
        return kind, data

    def _load(self, typed: Typed) -> Any:
        return self.serde.loads_typed(typed)

    def _value_of(self, ch: _Channel) -> Any:
        """A fresh object for the channel (never one handed out before: callers may
        mutate what they get)."""
        if ch.elems is not None:
            objs = self._load_list(ch.elems)
            ch.objs = list(objs)
            return objs
        assert ch.value is not None
        return self._load(ch.value)

    def _load_list(self, elems: list[Typed]) -> list[Any]:
        """The elements of a list, decoded in one call when all are msgpack (a msgpack
        array is its header followed by its elements' encodings: the bytes LangGraph's
        own savers would have stored for the whole list)."""
        if elems and all(kind == "msgpack" for kind, _ in elems):
            header = b"\xdd" + len(elems).to_bytes(4, "big")
            return list(self._load(("msgpack", header + b"".join(d for _, d in elems))))
        return [self._load(t) for t in elems]

    # -- put

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint: the channels that changed since its parent (every channel
        every ``snapshot_every`` steps). Returns the config naming it."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        parent_id = conf.get("checkpoint_id")
        sid = self._session(thread_id, create=True)
        assert sid is not None
        parent = self._state_of(sid, ns, parent_id) if parent_id else None
        snapshot = parent is None or parent.depth + 1 >= self.snapshot_every
        values = checkpoint["channel_values"]
        versions = dict(checkpoint["channel_versions"])
        channels: dict[str, _Channel] = {}
        stored: dict[str, Any] = {}
        for name, version in versions.items():
            old = parent.channels.get(name) if parent is not None else None
            unchanged = (
                parent is not None
                and name not in new_versions
                and parent.versions.get(name) == version
                and (old is not None or name not in values)
            )
            if unchanged:
                if old is not None:
                    channels[name] = old
                if not snapshot:
                    continue
            elif name not in values:
                stored[name] = None  # a channel with a version and no value: empty
                continue
            else:
                channels[name] = self._channel(values[name], old)
            ch = channels.get(name)
            if ch is None:
                continue
            stored[name] = self._stored(ch, None if snapshot else old)
        skeleton = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        data = {
            "ns": ns,
            "id": checkpoint["id"],
            "parent": parent_id,
            "parent_seq": parent.seq if parent is not None else None,
            "depth": 0 if snapshot else parent.depth + 1,  # type: ignore[union-attr]
            "snap": None if snapshot else parent.snap,  # type: ignore[union-attr]
            "checkpoint": self._enc(self._dump(skeleton)),
            "metadata": self._enc(self._dump(get_checkpoint_metadata(config, metadata))),
            "values": stored,
        }
        event = Custom(id=_event_id(ns, checkpoint["id"]), name=CHECKPOINT, data=data)
        seq = self._append(thread_id, sid, event)
        state = _State(
            seq=seq,
            depth=int(data["depth"]),
            snap=seq if snapshot else int(data["snap"]),
            versions=versions,
            channels=channels,
        )
        self._remember(sid, state, event.id)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _append(self, thread_id: str, sid: str, event: Custom) -> int:
        try:
            return self.store.append(sid, [event])[0]
        except NotFoundError:
            # The thread was deleted through another saver: start it again.
            self._forget(thread_id)
            fresh = self._session(thread_id, create=True)
            assert fresh is not None
            return self.store.append(fresh, [event])[0]

    @staticmethod
    def _enc(typed: Typed) -> list[str]:
        return [typed[0], _b64(typed[1])]

    @staticmethod
    def _dec(pair: Sequence[str]) -> Typed:
        return str(pair[0]), _unb64(pair[1])

    def _channel(self, value: Any, old: _Channel | None) -> _Channel:
        """The stored form of ``value``, reusing the parent's element bytes for the
        elements it kept (the same objects, or objects that serialize the same)."""
        if type(value) is not list:
            return _Channel(value=self._dump(value))
        elems: list[Typed] = []
        old_elems = old.elems if old is not None and old.elems is not None else []
        old_objs = old.objs if old is not None and old.objs is not None else []
        for i, item in enumerate(value):
            if i < len(old_elems):
                if i < len(old_objs) and old_objs[i] is item:
                    elems.append(old_elems[i])
                    continue
                typed = self._dump(item)
                elems.append(old_elems[i] if typed == old_elems[i] else typed)
            else:
                elems.append(self._dump(item))
        return _Channel(elems=elems, objs=list(value))

    def _stored(self, ch: _Channel, old: _Channel | None) -> Any:
        """What the checkpoint event holds for a changed channel: the elements a list
        gained when it kept its parent's as a prefix, else the whole value."""
        if ch.elems is None:
            assert ch.value is not None
            return {"v": self._enc(ch.value)}
        if old is not None and old.elems is not None:
            n = len(old.elems)
            if len(ch.elems) >= n and all(
                a is b or a == b for a, b in zip(ch.elems[:n], old.elems, strict=True)
            ):
                return {"keep": n, "add": [self._enc(t) for t in ch.elems[n:]]}
        return {"list": [self._enc(t) for t in ch.elems]}

    # -- put_writes

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for the checkpoint ``config`` names."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        sid = self._session(thread_id, create=True)
        assert sid is not None
        rows = [
            [WRITES_IDX_MAP.get(channel, i), channel, *self._enc(self._dump(value))]
            for i, (channel, value) in enumerate(writes)
        ]
        data = {
            "ns": ns,
            "checkpoint_id": conf["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": rows,
        }
        checkpoint_id = str(conf["checkpoint_id"])
        key = (sid, ns, checkpoint_id)
        for _ in range(_BATCHES):
            with self._lock:
                n = self._batches.pop(key, 0)
                self._batches[key] = n + 1  # newest last: the oldest are dropped first
                if len(self._batches) > _CACHE * 128:
                    del self._batches[next(iter(self._batches))]
            event = Custom(id=_batch_id(ns, checkpoint_id, n), name=WRITES, data=data)
            try:
                self._append(thread_id, sid, event)
                return
            except InvalidEventError:
                # Another saver wrote that batch: move past the batches stored.
                with self._lock:
                    self._batches[key] = max(self._batches.get(key, 0), n + 1)
                continue
        raise InvalidEventError(
            f"checkpoint {checkpoint_id} of thread {thread_id} has {_BATCHES} batches of "
            "writes already"
        )

    def _writes_for(self, sid: str, ns: str, checkpoint_id: str) -> list[StoredEvent]:
        """The batches of writes of a checkpoint: indexed lookups of their ids, in order,
        until one is missing (a batch's id is derived from the checkpoint and its number,
        so they are found wherever they landed: before the checkpoint itself when
        LangGraph's background writer got there first, or after its successors when a
        run resumed from it)."""
        out = []
        for n in range(_BATCHES):
            try:
                out.append(self.store.get_event(sid, _batch_id(ns, checkpoint_id, n)))
            except NotFoundError:
                break
        return out

    # -- get_tuple

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (the thread's newest in its namespace when it
        names none), rebuilt from the nearest snapshot, with its pending writes."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        sid = self._session(thread_id, create=False)
        if sid is None:
            return None
        checkpoint_id = get_checkpoint_id(config)
        try:
            if checkpoint_id:
                stored: StoredEvent | None = self.store.get_event(sid, _event_id(ns, checkpoint_id))
            else:
                stored = self._newest(sid, ns)
        except NotFoundError:
            self._forget(thread_id)
            return None
        if stored is None:
            return None
        state = self._rebuild(sid, stored)
        cid = stored.event.data["id"]  # type: ignore[union-attr]
        batches = [st.event.data for st in self._writes_for(sid, ns, cid)]  # type: ignore[union-attr]
        return self._tuple(thread_id, stored, state, self._pending(batches))

    def _newest(self, sid: str, ns: str) -> StoredEvent | None:
        """The newest checkpoint of ``ns``: the session's tail, read from the head in
        growing steps (a step's pending writes and other namespaces' checkpoints sit
        after it)."""
        n = 8
        while True:
            tail = self.store.read_tail(sid, n)
            for st in reversed(tail):
                if _is(st, CHECKPOINT) and st.event.data["ns"] == ns:  # type: ignore[union-attr]
                    return st
            if len(tail) < n or n >= _MAX_TAIL:
                return None
            n = min(n * 8, _MAX_TAIL)

    def _pending(self, found: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
        """Writes keyed by (task, index) as LangGraph's savers keep them: a regular write
        is stored once (the first), a special one (error, interrupt) replaced by the
        latest; ordered by task id and index."""
        rows: dict[tuple[str, int], tuple[str, str, Typed]] = {}
        for data in found:
            task = str(data["task_id"])
            for idx, channel, kind, b64 in data["writes"]:
                key = (task, int(idx))
                if key in rows and idx >= 0:
                    continue
                rows[key] = (task, channel, (kind, _unb64(b64)))
        return [
            (task, channel, self._load(typed)) for _, (task, channel, typed) in sorted(rows.items())
        ]

    def _tuple(
        self,
        thread_id: str,
        stored: StoredEvent,
        state: _State,
        writes: list[tuple[str, str, Any]],
    ) -> CheckpointTuple:
        data = stored.event.data  # type: ignore[union-attr]
        ns = data["ns"]
        checkpoint: Checkpoint = self._load(self._dec(data["checkpoint"]))
        checkpoint["channel_values"] = {
            name: self._value_of(ch) for name, ch in state.channels.items()
        }
        metadata: CheckpointMetadata = self._load(self._dec(data["metadata"]))
        parent = data.get("parent")
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": data["id"],
                }
            },
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=writes,
        )

    # -- rebuilding states

    def _remember(self, sid: str, state: _State, event_id: str | None = None) -> None:
        with self._lock:
            self._states[(sid, state.seq)] = state
            self._states.move_to_end((sid, state.seq))
            if event_id is not None:
                self._seqs[(sid, event_id)] = state.seq
            while len(self._states) > _CACHE:
                self._states.popitem(last=False)
            if len(self._seqs) > 4 * _CACHE:
                live = {k[1] for k in self._states}
                self._seqs = {k: v for k, v in self._seqs.items() if v in live}

    def _cached(self, sid: str, seq: int) -> _State | None:
        with self._lock:
            return self._states.get((sid, seq))

    def _state_of(self, sid: str, ns: str, checkpoint_id: str) -> _State | None:
        """The stored state of a checkpoint (``None`` when the thread has no such one)."""
        eid = _event_id(ns, checkpoint_id)
        with self._lock:
            seq = self._seqs.get((sid, eid))
            hit = self._states.get((sid, seq)) if seq is not None else None
        if hit is not None:
            return hit
        try:
            stored = self.store.get_event(sid, eid)
        except NotFoundError:
            return None
        return self._rebuild(sid, stored)

    def _rebuild(self, sid: str, stored: StoredEvent) -> _State:
        """The state of a checkpoint event: from the nearest cached state or snapshot on
        its chain, plus the deltas after it (one range read of at most
        ``snapshot_every`` steps)."""
        cached = self._cached(sid, stored.seq)
        if cached is not None:
            return cached
        data = stored.event.data  # type: ignore[union-attr]
        if data["depth"] == 0:
            state = self._apply(None, stored)
            self._remember(sid, state)
            return state
        chain = {stored.seq: stored}
        start = int(data["snap"])
        for st in self.store.read(sid, start, stored.seq - 1):
            if _is(st, CHECKPOINT):
                chain[st.seq] = st
        # Walk the parent pointers back to a cached state or the snapshot.
        path: list[StoredEvent] = []
        base: _State | None = None
        cur: StoredEvent | None = stored
        while cur is not None:
            hit = self._cached(sid, cur.seq)
            if hit is not None:
                base = hit
                break
            path.append(cur)
            d = cur.event.data  # type: ignore[union-attr]
            if d["depth"] == 0:
                break
            cur = chain.get(int(d["parent_seq"]))
            if cur is None:
                raise NotFoundError(
                    f"checkpoint chain of seq {stored.seq} in session {sid} is broken at "
                    f"seq {d['parent_seq']}"
                )
        built = base
        for st in reversed(path):
            built = self._apply(built, st)
        assert built is not None
        self._remember(sid, built)
        return built

    def _apply(self, parent: _State | None, stored: StoredEvent) -> _State:
        data = stored.event.data  # type: ignore[union-attr]
        checkpoint = self._load(self._dec(data["checkpoint"]))
        versions = dict(checkpoint["channel_versions"])
        channels: dict[str, _Channel] = {}
        delta = data["values"]
        for name in versions:
            if name in delta:
                entry = delta[name]
                if entry is None:
                    continue
                if "v" in entry:
                    channels[name] = _Channel(value=self._dec(entry["v"]))
                elif "list" in entry:
                    channels[name] = _Channel(elems=[self._dec(t) for t in entry["list"]])
                else:
                    old = parent.channels.get(name) if parent is not None else None
                    kept = old.elems[: entry["keep"]] if old is not None and old.elems else []
                    channels[name] = _Channel(elems=kept + [self._dec(t) for t in entry["add"]])
            elif parent is not None and name in parent.channels:
                channels[name] = parent.channels[name]
        return _State(
            seq=stored.seq,
            depth=int(data["depth"]),
            snap=stored.seq if data["depth"] == 0 else int(data["snap"]),
            versions=versions,
            channels=channels,
        )

    # -- list

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id): of the thread ``config`` names
        (of one namespace when it names one), or of every thread when ``config`` is
        ``None``; ``filter`` keeps those whose metadata has every given key and value,
        ``before`` those older than the checkpoint it names, ``limit`` the first ones."""
        conf = (config or {}).get("configurable", {})
        ns_wanted = conf.get("checkpoint_ns")
        wanted_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before is not None else None
        if conf.get("thread_id") is not None:
            thread_id = str(conf["thread_id"])
            sid = self._session(thread_id, create=False)
            threads = [(thread_id, sid)] if sid is not None else []
        else:
            threads = [
                (s.key[len(KEY_PREFIX) :], s.id)
                for s in self.store.list_sessions(limit=None)
                if s.key is not None and s.key.startswith(KEY_PREFIX)
            ]
        picked: list[tuple[str, str, StoredEvent, list[dict[str, Any]]]] = []
        for thread_id, sid in threads:
            checkpoints: list[StoredEvent] = []
            writes: dict[tuple[str, str], list[dict[str, Any]]] = {}
            try:
                events = list(self.store.read(sid))
            except NotFoundError:
                self._forget(thread_id)
                continue
            for st in events:
                if _is(st, CHECKPOINT):
                    d = st.event.data  # type: ignore[union-attr]
                    if ns_wanted is not None and d["ns"] != ns_wanted:
                        continue
                    if wanted_id and d["id"] != wanted_id:
                        continue
                    if before_id is not None and not d["id"] < before_id:
                        continue
                    checkpoints.append(st)
                elif _is(st, WRITES):
                    d = st.event.data  # type: ignore[union-attr]
                    writes.setdefault((d["ns"], d["checkpoint_id"]), []).append(d)
            for st in checkpoints:
                d = st.event.data  # type: ignore[union-attr]
                picked.append((thread_id, sid, st, writes.get((d["ns"], d["id"]), [])))
        picked.sort(key=lambda p: p[2].event.data["id"], reverse=True)  # type: ignore[union-attr]
        count = 0
        for thread_id, sid, st, found in picked:
            if limit is not None and count >= limit:
                return
            if filter:
                metadata = self._load(self._dec(st.event.data["metadata"]))  # type: ignore[union-attr]
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            state = self._rebuild(sid, st)
            yield self._tuple(thread_id, st, state, self._pending(found))
            count += 1

    # -- delete

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread (every namespace): it is gone for LangGraph, while the store
        keeps its log as a deleted session for audits."""
        thread_id = str(thread_id)
        sid = self._session(thread_id, create=False)
        self._forget(thread_id)
        if sid is None:
            return
        try:
            self.store.delete_session(sid)
        except NotFoundError:
            pass

    # -- versions

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """A version after ``current``: a zero-padded counter (so versions sort as
        strings) and a random fraction, the form LangGraph's own savers use."""
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(str(current).split(".")[0])
        return f"{n + 1:032}.{random.random():016}"

    # -- async twins: the sync methods in a worker thread

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple` in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list` in a worker thread."""
        found = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for tup in found:
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put` in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes` in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread` in a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)


def _is(st: StoredEvent, name: str) -> bool:
    return isinstance(st.event, Custom) and st.event.name == name


EventStoreSaver.__module__ = "eventstore.adapters.langgraph"
