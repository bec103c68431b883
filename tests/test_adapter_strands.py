"""EventStoreSessionRepository beyond Strands' own suite (tests/test_adapter_strands_contract.py):
what lasts across a restart, what the log keeps, and racing writers.

Runs where the ``strands`` extra is installed (``.ci/run`` gives it its own environment and
requires these tests there with ``EVENTSTORE_REQUIRE_ADAPTERS``).
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest

if os.environ.get("EVENTSTORE_REQUIRE_ADAPTERS"):
    import strands  # noqa: F401
else:
    pytest.importorskip("strands")

from strands.session.repository_session_manager import RepositorySessionManager  # noqa: E402
from strands.types.exceptions import SessionException  # noqa: E402
from strands.types.session import (  # noqa: E402
    Session,
    SessionAgent,
    SessionMessage,
    SessionType,
)

from eventstore import EventStore  # noqa: E402
from eventstore.adapters.strands import EventStoreSessionRepository  # noqa: E402


def _agent(agent_id: str = "helper") -> SessionAgent:
    return SessionAgent(agent_id=agent_id, state={"k": 1}, conversation_manager_state={})


def _message(i: int, text: str) -> SessionMessage:
    return SessionMessage.from_message({"role": "user", "content": [{"text": text}]}, i)


def test_a_session_is_read_back_by_a_new_repository(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant) as store:
        repo = EventStoreSessionRepository(store=store)
        repo.create_session(Session(session_id="s1", session_type=SessionType.AGENT))
        repo.create_agent("s1", _agent())
        for i in range(3):
            repo.create_message("s1", "helper", _message(i, f"m{i}"))
    with EventStore(db_url, tenant=tenant) as store:
        repo = EventStoreSessionRepository(store=store)
        assert repo.read_session("s1") is not None
        agent = repo.read_agent("s1", "helper")
        assert agent is not None and agent.state == {"k": 1}
        texts = [m.message["content"][0]["text"] for m in repo.list_messages("s1", "helper")]
        assert texts == ["m0", "m1", "m2"]
        assert [m.message_id for m in repo.list_messages("s1", "helper", limit=1, offset=1)] == [1]


def test_a_redaction_keeps_the_original_in_the_log(store: EventStore) -> None:
    repo = EventStoreSessionRepository(store=store)
    repo.create_session(Session(session_id="s2", session_type=SessionType.AGENT))
    repo.create_agent("s2", _agent())
    original = _message(0, "my card is 4111")
    repo.create_message("s2", "helper", original)
    redacted = _message(0, "[redacted]")
    repo.update_message("s2", "helper", redacted)
    got = repo.read_message("s2", "helper", 0)
    assert got is not None and got.message["content"][0]["text"] == "[redacted]"
    assert got.created_at == original.created_at
    sid = store.get_session_by_key("strands:s2").id
    texts = [
        e.event.data["message"]["message"]["content"][0]["text"]
        for e in store.read(sid)
        if getattr(e.event, "name", None) == "strands.message"
    ]
    assert texts == ["my card is 4111", "[redacted]"]
    assert store.verify(sid).ok


def test_racing_writers_create_a_message_once(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    stores = [EventStore(db_url, tenant=tenant) for _ in range(4)]
    try:
        repos = [EventStoreSessionRepository(store=s) for s in stores]
        repos[0].create_session(Session(session_id="s3", session_type=SessionType.AGENT))
        repos[0].create_agent("s3", _agent())
        gate = threading.Barrier(len(repos))
        outcomes: list[str] = []

        def write(repo: EventStoreSessionRepository, n: int) -> None:
            gate.wait()
            try:
                repo.create_message("s3", "helper", _message(0, f"writer {n}"))
                outcomes.append("created")
            except SessionException:
                outcomes.append("refused")

        threads = [threading.Thread(target=write, args=(r, n)) for n, r in enumerate(repos)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["created", "refused", "refused", "refused"]
        assert len(repos[0].list_messages("s3", "helper")) == 1
    finally:
        for s in stores:
            s.close()


def test_the_session_manager_restores_an_agent(db_url: str) -> None:
    """Strands' RepositorySessionManager over two stores in turn (a restart)."""
    from strands import Agent

    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant) as store:
        manager = RepositorySessionManager(
            session_id="chat", session_repository=EventStoreSessionRepository(store=store)
        )
        agent = Agent(agent_id="helper", session_manager=manager)
        agent.messages.append({"role": "user", "content": [{"text": "remember me"}]})
        manager.append_message(agent.messages[-1], agent)
        agent.state.set("color", "blue")
        manager.sync_agent(agent)
    with EventStore(db_url, tenant=tenant) as store:
        manager = RepositorySessionManager(
            session_id="chat", session_repository=EventStoreSessionRepository(store=store)
        )
        again = Agent(agent_id="helper", session_manager=manager)
        assert again.messages == [{"role": "user", "content": [{"text": "remember me"}]}]
        assert again.state.get("color") == "blue"


# -- the documentation's example


def test_the_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/adapters-langgraph.md's example marked ``test: extra strands`` runs as
    written."""
    import re

    doc = Path(__file__).resolve().parent.parent / "docs" / "adapters-langgraph.md"
    blocks = re.findall(r"<!-- test: extra strands -->\n```python\n(.*?)```", doc.read_text(), re.S)
    assert len(blocks) == 1, "the docs lost their strands example"
    monkeypatch.chdir(tmp_path)
    code = compile(blocks[0], str(doc), "exec", dont_inherit=True)  # no __future__ here
    exec(code, {"__name__": "docs_example"})
