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


def _conversation(turns: int) -> list[tuple[dict[str, Any], Any]]:
    """``turns`` calls of one conversation, each resending the whole history: the call's
    litellm kwargs and its (mock) response, made with no logger installed."""
    messages: list[Any] = [{"role": "system", "content": "Be brief."}]
    calls = []
    for i in range(turns):
        messages.append(_user(f"question {i}"))
        reply = litellm.completion(
            model="gpt-4o-mini", messages=list(messages), mock_response=f"answer {i}"
        )
        kwargs = {
            "model": "gpt-4o-mini",
            "messages": list(messages),
            "litellm_call_id": f"call-{i}",
        }
        calls.append((kwargs, reply))
        messages.append(reply.choices[0].message.model_dump())
    return calls


def _expected(turns: int) -> list[str]:
    out = ["system:Be brief."]
    for i in range(turns):
        out += [f"user:question {i}", f"assistant:answer {i}"]
    return out


def _messages_and_calls(store: EventStore, sid: str) -> tuple[list[str], list[str]]:
    kinds = _kinds(store, sid)
    calls = [
        e.event.metadata["litellm_call_id"]
        for e in store.read(sid, kinds=["llm_call"])
        if isinstance(e.event, LLMCall) and e.event.metadata
    ]
    return [k for k in kinds if k != "llm_call"], calls


@pytest.mark.parametrize("order", [(2, 1, 0), (1, 0, 2), (0, 2, 1), (2, 0, 1)])
def test_out_of_order_callbacks_record_the_conversation_once(
    store: EventStore, order: tuple[int, ...]
) -> None:
    calls = _conversation(3)
    sid = store.create_session().id
    logger = EventStoreLogger(store, sid)
    for i in order:
        kwargs, reply = calls[i]
        logger.log_success_event(kwargs, reply, None, None)
    assert not logger.errors
    messages, recorded = _messages_and_calls(store, sid)
    assert messages == _expected(3)
    assert sorted(recorded) == ["call-0", "call-1", "call-2"]
    assert store.verify(sid).ok  # each llm_call's fingerprint is its view's


def test_overlapping_callbacks_of_several_loggers_record_the_conversation_once(
    db_url: str,
) -> None:
    """Every call's record starts at once, each in its own thread, through its own logger
    and its own store object: none may store what another is storing."""
    import threading

    turns = 4
    calls = _conversation(turns)
    for attempt in range(3):
        stores = [EventStore(db_url) for _ in range(turns)]
        try:
            sid = stores[0].create_session().id
            loggers = [EventStoreLogger(s, sid) for s in stores]
            gate = threading.Barrier(turns)

            def run(i: int, gate: threading.Barrier, logger: EventStoreLogger) -> None:
                gate.wait()
                kwargs, reply = calls[i]
                logger.log_success_event(kwargs, reply, None, None)

            threads = [
                threading.Thread(target=run, args=(i, gate, loggers[i])) for i in range(turns)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert all(not lg.errors for lg in loggers), [lg.errors for lg in loggers]
            messages, recorded = _messages_and_calls(stores[0], sid)
            assert messages == _expected(turns), f"attempt {attempt}"
            assert sorted(recorded) == [f"call-{i}" for i in range(turns)]
            assert stores[0].verify(sid).ok
        finally:
            for s in stores:
                s.close()
