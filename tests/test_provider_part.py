"""Provider items: stored losslessly, sent back only to the provider that made them."""

from __future__ import annotations

import pytest

from eventstore import EventStore, InvalidEventError, Message, ProviderPart, TextPart
from eventstore.chat import to_openai
from eventstore.views import ViewOptions

COMPACTION = {
    "type": "compaction",
    "id": "cmp_01",
    "encrypted_content": "gAAAAB" + "x" * 200,
    "nested": {"list": [1, 2.5, None, True, "ü"], "empty": {}},
}
SERVER_TOOL = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}


def _session(store: EventStore) -> str:
    sid = store.create_session().id
    store.append(
        sid,
        [
            Message.user("Summarize the thread."),
            Message(role="assistant", parts=[ProviderPart(provider="openai", item=COMPACTION)]),
            Message(
                role="assistant",
                parts=[
                    TextPart(text="Searching."),
                    ProviderPart(provider="anthropic", item=SERVER_TOOL),
                ],
            ),
            Message.user("Thanks."),
        ],
    )
    return sid


def test_items_round_trip_exactly(store: EventStore) -> None:
    sid = _session(store)
    stored = [e.event for e in store.read(sid)]
    assert stored[1].parts[0] == ProviderPart(provider="openai", item=COMPACTION)  # type: ignore[union-attr]
    assert stored[2].parts[1].item == SERVER_TOOL  # type: ignore[union-attr]
    assert store.verify(sid).ok


def test_views_send_items_only_to_their_provider(store: EventStore) -> None:
    sid = _session(store)
    plain = store.view(sid).to_messages()
    # No provider: the compaction-only message is left out, the mixed one keeps its text.
    assert [m["content"] for m in plain] == ["Summarize the thread.", "Searching.", "Thanks."]
    openai = store.view(sid, options=ViewOptions(provider="openai")).to_messages()
    assert len(openai) == 4 and openai[1]["content"] == [COMPACTION]
    assert openai[2]["content"] == "Searching."
    anthropic = store.view(sid, options=ViewOptions(provider="anthropic")).to_messages()
    assert len(anthropic) == 3
    assert anthropic[1]["content"] == [{"type": "text", "text": "Searching."}, SERVER_TOOL]
    # What was sent is what verify rebuilds (the provider is part of the recorded options).
    view = store.view(sid, options=ViewOptions(provider="openai"))
    store.record_llm_call(sid, view, model="gpt-4o-mini")
    report = store.verify(sid)
    assert report.ok and report.llm_calls == 1


def test_for_model_names_the_provider() -> None:
    assert ViewOptions.for_model("gpt-4o-mini").provider == "openai"
    assert ViewOptions.for_model("claude-haiku-4-5").provider == "anthropic"
    assert ViewOptions.for_model("gemini/not-in-the-map").provider == "gemini"
    assert ViewOptions.for_model("no-such-model-anywhere").provider is None
    assert ViewOptions.for_model("gpt-4o-mini", provider="azure").provider == "azure"


def test_to_openai_renders_only_the_named_provider() -> None:
    msg = Message(
        role="user", parts=[TextPart(text="hi"), ProviderPart(provider="x", item={"a": 1})]
    )
    assert to_openai(msg)[0]["content"] == "hi"
    assert to_openai(msg, provider="x")[0]["content"] == [{"type": "text", "text": "hi"}, {"a": 1}]


@pytest.mark.parametrize(
    "part",
    [
        {"type": "provider", "provider": "", "item": {}},
        {"type": "provider", "provider": "openai", "item": {"x": float("nan")}},
        {"type": "provider", "provider": "openai", "item": "not an object"},
    ],
)
def test_bad_items_are_rejected(store: EventStore, part: dict[str, object]) -> None:
    sid = store.create_session().id
    with pytest.raises(InvalidEventError):
        store.append(sid, [{"kind": "message", "role": "assistant", "parts": [part]}])
    assert store.head(sid) == 0


def test_purge_empties_provider_items(store: EventStore) -> None:
    sid = _session(store)
    store.purge(sid)
    parts = [e.event.parts for e in store.read(sid) if e.event.kind == "message"]  # type: ignore[union-attr]
    assert parts[1] == [ProviderPart(provider="openai", item={})]
    assert store.verify(sid).ok
