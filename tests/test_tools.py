"""The recall and search_history tools: the model gets back what a view hid, exactly."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from eventstore import (
    AsyncEventStore,
    Condensation,
    EventStore,
    Message,
    PartRef,
    Prune,
    ToolCallPart,
)
from eventstore.tools import RECALL_TOOL, SEARCH_TOOL, TOOLS, ahandle_tool_call, handle_tool_call
from eventstore.views import DEFAULT_PLACEHOLDER, ViewOptions

ORIGINAL = "résumé.txt\r\n\tline two  \nZeroDivisionError: boom\n\n"


def _session(store: Any) -> str:
    s = store.create_session()
    call = ToolCallPart(id="c1", name="cat", arguments='{"path": "notes.txt"}')
    store.append(
        s.id,
        [
            Message.user("what is in notes.txt?"),
            Message(role="assistant", parts=[call]),
            Message.tool("c1", ORIGINAL, name="cat"),
            Message.assistant("It lists a résumé and an error."),
        ],
    )
    store.append(s.id, [Prune(targets=[PartRef(seq=3, index=0)])])
    return s.id


def test_the_placeholder_names_the_reference_recall_takes(api_store: Any) -> None:
    sid = _session(api_store)
    tool_msg = [m for m in api_store.view(sid).to_messages() if m["role"] == "tool"][0]
    assert 'recall(ref="3:0")' in tool_msg["content"]
    assert ORIGINAL not in json.dumps(api_store.view(sid).to_messages())
    out = handle_tool_call(api_store, sid, "recall", json.dumps({"ref": "3:0"}))
    assert out == ORIGINAL  # byte for byte


def test_recall_whole_events_and_errors_the_model_can_read(api_store: Any) -> None:
    sid = _session(api_store)
    whole = handle_tool_call(api_store, sid, "recall", {"ref": "4"})
    assert whole == "[4] assistant:\nIt lists a résumé and an error."
    for bad in ({"ref": "x"}, {"ref": "99:0"}, {"ref": "3:7"}, {"ref": "0"}, "not json"):
        out = handle_tool_call(api_store, sid, "recall", bad)
        assert out is not None and out.startswith("Error: ")
    assert handle_tool_call(api_store, sid, "my_own_tool", "{}") is None


def test_search_history_lists_references_for_recall(api_store: Any) -> None:
    sid = _session(api_store)
    out = handle_tool_call(api_store, sid, "search_history", {"query": "ZeroDivisionError"})
    assert out is not None and out.startswith('ref="3" (tool): ')
    assert handle_tool_call(
        api_store, sid, "search_history", {"query": "ZeroDivisionError", "page": 1}
    ) == ("No more matches.")
    assert handle_tool_call(api_store, sid, "search_history", {"query": "..."}).startswith("Error")
    # Another session's history is not searched.
    other = _session(api_store)
    found = handle_tool_call(api_store, other, "search_history", {"query": "résumé"})
    assert found is not None and found.count("ref=") == 2


def test_summaries_say_how_to_get_condensed_events_back(store: EventStore) -> None:
    sid = _session(store)
    store.append(
        sid,
        [
            Condensation(
                forgotten_from=2, forgotten_to=5, summary="Read notes.txt.", summary_tokens=4
            )
        ],
    )
    msgs = store.view(sid).to_messages()
    summary = [m for m in msgs if "Read notes.txt." in (m.get("content") or "")][0]
    assert "search_history" in summary["content"] and "recall" in summary["content"]
    assert handle_tool_call(store, sid, "recall", {"ref": "6"}).startswith(
        "[6] summary of events 2..5:"
    )


def test_calls_recorded_under_render_version_2_rebuild_unchanged(store: EventStore) -> None:
    sid = _session(store)
    old = store.view(sid, options=ViewOptions(render_version=2))
    assert DEFAULT_PLACEHOLDER in json.dumps(old.to_messages())
    store.record_llm_call(sid, old, model="gpt-4o-mini")
    assert store.verify(sid).ok  # the fingerprint is rebuilt with version 2's text


def test_schemas_are_openai_tools_and_async_handler_works(db_url: str) -> None:
    assert [t["function"]["name"] for t in TOOLS] == ["recall", "search_history"]
    for tool in (RECALL_TOOL, SEARCH_TOOL):
        params = tool["function"]["parameters"]
        assert tool["type"] == "function" and params["type"] == "object"
        assert set(params["required"]) <= set(params["properties"])

    async def main() -> str | None:
        async with AsyncEventStore(db_url, tenant=f"t-{uuid.uuid4().hex}") as store:
            sid = _session(store.sync)
            return await ahandle_tool_call(store, sid, "recall", '{"ref": "3:0"}')

    assert asyncio.run(main()) == ORIGINAL
