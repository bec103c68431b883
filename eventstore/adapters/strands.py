"""A Strands Agents session repository backed by the event store.

::

    from strands import Agent
    from strands.session.repository_session_manager import RepositorySessionManager
    from eventstore.adapters.strands import EventStoreSessionRepository

    repository = EventStoreSessionRepository("sqlite:///agents.db")
    manager = RepositorySessionManager(session_id="user-42", session_repository=repository)
    agent = Agent(session_manager=manager)

:class:`EventStoreSessionRepository` implements Strands' ``SessionRepository``
(strands-agents 1.62): sessions, agents, messages and the multi-agent state, with the
semantics of Strands' own repositories (creating what exists, or updating what does not,
raises ``SessionException``; an update keeps the original ``created_at``; messages list in
``message_id`` order with ``offset``/``limit``).

A Strands session is a store session found by the key ``strands:<session_id>``. Every
create and update is one ``Custom`` event (``strands.session``, ``strands.agent``,
``strands.message``, ``strands.multi_agent``) holding the object's ``to_dict()``; a read
returns the newest version. Nothing is overwritten: a message a guardrail redacted keeps
its original in the log, and :meth:`~eventstore.EventStore.verify` proves the history.
Each write is conditional on the head its checks read, so two writers cannot both create
the same agent or message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strands.session.session_repository import SessionRepository
from strands.types.exceptions import SessionException
from strands.types.session import Session, SessionAgent, SessionMessage

from ..errors import ConflictError, NotFoundError, SessionExistsError
from ..events import Custom
from ..store import AsyncEventStore, EventStore

if TYPE_CHECKING:
    from strands.multiagent import MultiAgentBase

__all__ = ["EventStoreSessionRepository"]

KEY_PREFIX = "strands:"
SESSION = "strands.session"
AGENT = "strands.agent"
MESSAGE = "strands.message"
MULTI_AGENT = "strands.multi_agent"
_RETRIES = 20


def _json(value: Any) -> Any:
    """``value`` as plain JSON (enums that are strings become their value)."""
    return json.loads(json.dumps(value))


@dataclass
class _Snapshot:
    """The newest version of everything in one Strands session, and the head it was
    read at."""

    head: int
    session: dict[str, Any] | None = None
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    multi_agents: dict[str, dict[str, Any]] = field(default_factory=dict)


class EventStoreSessionRepository(SessionRepository):
    """Strands' ``SessionRepository`` over an event store.

    Args:
        db_url: Database URL (default: ``EVENTSTORE_URL`` or ``./eventstore.db``).
        store: An existing store (sync or async) to use instead; its tenant applies.
    """

    def __init__(
        self,
        db_url: str | None = None,
        *,
        store: EventStore | AsyncEventStore | None = None,
    ) -> None:
        self._owns_store = store is None
        if store is None:
            store = EventStore(db_url)
        self.store: EventStore = store.sync if isinstance(store, AsyncEventStore) else store

    def close(self) -> None:
        """Release the store's connections when this repository opened the store."""
        if self._owns_store:
            self.store.close()

    # -- reading

    def _sid(self, session_id: str) -> str | None:
        try:
            return self.store.get_session_by_key(KEY_PREFIX + session_id).id
        except NotFoundError:
            return None

    def _snapshot(self, sid: str) -> _Snapshot:
        head = self.store.head(sid)
        snap = _Snapshot(head=head)
        for st in self.store.read(sid, 1, head):
            evt = st.event
            if not isinstance(evt, Custom) or not isinstance(evt.data, dict):
                continue
            data = evt.data
            if evt.name == SESSION:
                snap.session = data
            elif evt.name == AGENT:
                snap.agents[data["agent_id"]] = data
                snap.messages.setdefault(data["agent_id"], {})
            elif evt.name == MESSAGE:
                msg = data["message"]
                snap.messages.setdefault(data["agent_id"], {})[int(msg["message_id"])] = msg
            elif evt.name == MULTI_AGENT:
                snap.multi_agents[data["id"]] = data["state"]
        return snap

    def _write(self, session_id: str, make: Any) -> None:
        """Append what ``make(snapshot)`` returns, conditional on the head the snapshot
        was read at (read again when another writer moved it)."""
        sid = self._sid(session_id)
        if sid is None:
            raise SessionException(f"Session {session_id} does not exist")
        for _ in range(_RETRIES):
            snap = self._snapshot(sid)
            event = make(snap)
            try:
                self.store.append(sid, [event], expected_seq=snap.head)
                return
            except ConflictError:
                continue
        raise SessionException(f"Session {session_id} kept changing while writing to it; try again")

    # -- sessions

    def create_session(self, session: Session, **kwargs: Any) -> Session:
        """Create a session; ``SessionException`` when it exists."""
        try:
            created = self.store.create_session(
                key=KEY_PREFIX + session.session_id, title=session.session_id
            )
        except SessionExistsError:
            raise SessionException(f"Session {session.session_id} already exists") from None
        self.store.append(created.id, [Custom(name=SESSION, data=_json(session.to_dict()))])
        return session

    def read_session(self, session_id: str, **kwargs: Any) -> Session | None:
        """The session, or ``None``."""
        sid = self._sid(session_id)
        if sid is None:
            return None
        for st in self.store.read(sid, kinds=["custom"]):
            if isinstance(st.event, Custom) and st.event.name == SESSION:
                return Session.from_dict(st.event.data)
        return None

    # -- agents

    def create_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        """Create an agent; ``SessionException`` when the session is missing or the
        agent exists."""
        agent_id = session_agent.agent_id

        def make(snap: _Snapshot) -> Custom:
            if agent_id in snap.agents:
                raise SessionException(f"Agent {agent_id} already exists in session {session_id}")
            return Custom(name=AGENT, data=_json(session_agent.to_dict()))

        self._write(session_id, make)

    def read_agent(self, session_id: str, agent_id: str, **kwargs: Any) -> SessionAgent | None:
        """The agent's newest version, or ``None``."""
        sid = self._sid(session_id)
        if sid is None:
            return None
        data = self._snapshot(sid).agents.get(agent_id)
        return SessionAgent.from_dict(data) if data is not None else None

    def update_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        """Store a new version of an agent (its ``created_at`` kept);
        ``SessionException`` when it does not exist."""
        agent_id = session_agent.agent_id

        def make(snap: _Snapshot) -> Custom:
            previous = snap.agents.get(agent_id)
            if previous is None:
                raise SessionException(f"Agent {agent_id} in session {session_id} does not exist")
            session_agent.created_at = previous["created_at"]
            return Custom(name=AGENT, data=_json(session_agent.to_dict()))

        self._write(session_id, make)

    # -- messages

    def create_message(
        self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any
    ) -> None:
        """Add a message; ``SessionException`` when the session or agent is missing or
        the message id is taken."""
        message_id = session_message.message_id

        def make(snap: _Snapshot) -> Custom:
            if agent_id not in snap.agents:
                raise SessionException(f"Agent {agent_id} does not exist in session {session_id}")
            if message_id in snap.messages.get(agent_id, {}):
                raise SessionException(
                    f"Message {message_id} already exists in agent {agent_id} in session "
                    f"{session_id}"
                )
            data = {"agent_id": agent_id, "message": _json(session_message.to_dict())}
            return Custom(name=MESSAGE, data=data)

        self._write(session_id, make)

    def read_message(
        self, session_id: str, agent_id: str, message_id: int, **kwargs: Any
    ) -> SessionMessage | None:
        """The message's newest version, or ``None``."""
        sid = self._sid(session_id)
        if sid is None:
            return None
        data = self._snapshot(sid).messages.get(agent_id, {}).get(message_id)
        return SessionMessage.from_dict(data) if data is not None else None

    def update_message(
        self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any
    ) -> None:
        """Store a new version of a message (a redaction; its ``created_at`` kept, the
        original stays in the log); ``SessionException`` when it does not exist."""
        message_id = session_message.message_id

        def make(snap: _Snapshot) -> Custom:
            previous = snap.messages.get(agent_id, {}).get(message_id)
            if previous is None:
                raise SessionException(f"Message {message_id} does not exist")
            session_message.created_at = previous["created_at"]
            data = {"agent_id": agent_id, "message": _json(session_message.to_dict())}
            return Custom(name=MESSAGE, data=data)

        self._write(session_id, make)

    def list_messages(
        self,
        session_id: str,
        agent_id: str,
        limit: int | None = None,
        offset: int = 0,
        **kwargs: Any,
    ) -> list[SessionMessage]:
        """The agent's messages in ``message_id`` order, from ``offset``, at most
        ``limit`` (all when ``None``)."""
        sid = self._sid(session_id)
        if sid is None:
            return []
        found = self._snapshot(sid).messages.get(agent_id, {})
        ordered = [found[k] for k in sorted(found)]
        picked = ordered[offset : offset + limit] if limit is not None else ordered[offset:]
        return [SessionMessage.from_dict(m) for m in picked]

    # -- multi-agent state

    def create_multi_agent(
        self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any
    ) -> None:
        """Store a multi-agent's state; ``SessionException`` when the session is missing."""
        state = _json(multi_agent.serialize_state())

        def make(snap: _Snapshot) -> Custom:
            return Custom(name=MULTI_AGENT, data={"id": multi_agent.id, "state": state})

        self._write(session_id, make)

    def read_multi_agent(
        self, session_id: str, multi_agent_id: str, **kwargs: Any
    ) -> dict[str, Any] | None:
        """The multi-agent's newest state, or ``None``."""
        sid = self._sid(session_id)
        if sid is None:
            return None
        return self._snapshot(sid).multi_agents.get(multi_agent_id)

    def update_multi_agent(
        self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any
    ) -> None:
        """Store a new state of a multi-agent; ``SessionException`` when it does not
        exist."""
        state = _json(multi_agent.serialize_state())

        def make(snap: _Snapshot) -> Custom:
            if multi_agent.id not in snap.multi_agents:
                raise SessionException(
                    f"MultiAgent state {multi_agent.id} in session {session_id} does not exist"
                )
            return Custom(name=MULTI_AGENT, data={"id": multi_agent.id, "state": state})

        self._write(session_id, make)


EventStoreSessionRepository.__module__ = "eventstore.adapters.strands"
