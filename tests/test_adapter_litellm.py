"""The litellm recorder: every completion lands in the session, once, with no other code."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import litellm
import pytest

from eventstore import AsyncEventStore, EventStore, LLMCall, Message, NotFoundError
from eventstore.adapters.litellm import EventStoreLogger


@pytest.fixture
def callbacks() -> Iterator[None]:
    """Loggers a test installs are removed from every litellm list afterwards (a logger
    left behind would record later tests' calls into a closed store)."""
    saved = list(litellm.callbacks)
    try:
        yield
    finally:
        lists = (
            "callbacks",
            "success_callback",
            "failure_callback",
            "input_callback",
            "_async_success_callback",
            "_async_failure_callback",
            "_async_input_callback",
        )
        for name in lists:
            for cb in list(getattr(litellm, name, [])):
                if isinstance(cb, EventStoreLogger):
                    cb.uninstall()
        litellm.callbacks = saved


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _kinds(store: EventStore, sid: str) -> list[str]:
    out = []
    for e in store.read(sid):
        if isinstance(e.event, Message):
            out.append(f"{e.event.role}:{e.event.text}")
        else:
            out.append(e.kind)
    return out


def test_calls_are_recorded_with_only_the_new_messages(store: EventStore, callbacks: None) -> None:
    sid = store.create_session().id
    logger = EventStoreLogger(store, sid)
    litellm.callbacks = [logger]
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    first = litellm.completion(model="gpt-4o-mini", messages=messages, mock_response="Hello!")
    assert logger.flush() and not logger.errors
    messages += [first.choices[0].message.model_dump(), {"role": "user", "content": "And?"}]
    litellm.completion(model="gpt-4o-mini", messages=messages, mock_response="More.")
    assert logger.flush() and not logger.errors
    assert _kinds(store, sid) == [
        "system:Be brief.",
        "user:Hi",
        "llm_call",
        "assistant:Hello!",
        "user:And?",
        "llm_call",
        "assistant:More.",
    ]
    calls = [e.event for e in store.read(sid, kinds=["llm_call"])]
    assert all(isinstance(c, LLMCall) and c.model == "gpt-4o-mini" for c in calls)
    assert calls[0].usage is not None and calls[0].usage.prompt_tokens
    assert calls[0].metadata["request_matches_view"] is True
    assert store.verify(sid).ok


def test_a_restarted_logger_does_not_store_history_twice(
    store: EventStore, callbacks: None
) -> None:
    sid = store.create_session().id
    litellm.callbacks = [first := EventStoreLogger(store, sid)]
    history: list[Any] = [{"role": "user", "content": "one"}]
    reply = litellm.completion(model="gpt-4o-mini", messages=history, mock_response="two")
    first.flush()
    # A new process: a new logger on the same session, the whole history resent.
    litellm.callbacks = [second := EventStoreLogger(store, sid)]
    history += [reply.choices[0].message.model_dump(), {"role": "user", "content": "three"}]
    litellm.completion(model="gpt-4o-mini", messages=history, mock_response="four")
    second.flush()
    texts = [e.event.text for e in store.read(sid, kinds=["message"])]
    assert texts == ["one", "two", "three", "four"]


def test_failures_are_recorded(store: EventStore, callbacks: None) -> None:
    sid = store.create_session().id
    logger = EventStoreLogger(store, sid)
    litellm.callbacks = [logger]
    with pytest.raises(Exception, match="provider down"):
        litellm.completion(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "boom?"}],
            mock_response=Exception("provider down"),
        )
    assert logger.flush() and not logger.errors
    (call,) = [e.event for e in store.read(sid, kinds=["llm_call"])]
    assert isinstance(call, LLMCall) and call.error and "provider down" in call.error
    assert [e.event.text for e in store.read(sid, kinds=["message"])] == ["boom?"]


def test_acompletion_is_recorded_with_the_async_store(db_url: str, callbacks: None) -> None:
    async def main() -> list[str]:
        async with AsyncEventStore(db_url, tenant="litellm-async") as store:
            sid = (await store.create_session()).id
            logger = EventStoreLogger(store, sid)
            litellm.callbacks = [logger]
            await litellm.acompletion(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": "async hi"}],
                mock_response="async hello",
            )
            for _ in range(100):
                if await store.latest_event(sid, "llm_call") is not None:
                    break
                await asyncio.sleep(0.05)
            return [e.kind async for e in store.read(sid)]

    assert asyncio.run(main()) == ["message", "llm_call", "message"]


def test_uninstall_stops_recording(store: EventStore, callbacks: None) -> None:
    sid = store.create_session().id
    logger = EventStoreLogger(store, sid)
    litellm.callbacks = [logger]
    litellm.completion(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "a"}], mock_response="b"
    )
    assert logger.flush()
    logger.uninstall()
    litellm.completion(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "c"}], mock_response="d"
    )
    import time

    time.sleep(0.3)
    assert [e.kind for e in store.read(sid)] == ["message", "llm_call", "message"]


def test_an_unknown_session_fails_at_construction(store: EventStore) -> None:
    with pytest.raises(NotFoundError):
        EventStoreLogger(store, "no-such-session")
