"""Formats agents write today: mini-swe-agent 2.x runs and OpenHands V1 (agent SDK) events.

The fixtures are built here, field for field as those projects serialize them; every import
auto-detects its format, converts tool use into calls and results, and verifies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eventstore import Custom, EventStore, Message
from eventstore.importers import ImportFormatError, detect_format, import_file


def _call(call_id: str, command: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
    }


def _mini_tool_calling_run() -> dict[str, Any]:
    return {
        "info": {
            "exit_status": "Submitted",
            "submission": "diff --git a/x.py b/x.py",
            "model_stats": {"instance_cost": 0.02, "api_calls": 2},
            "mini_version": "2.0.0",
        },
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Fix the failing test in x.py"},
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [_call("call_1", "cat x.py")],
                "extra": {"actions": [{"command": "cat x.py", "tool_call_id": "call_1"}]},
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": "<returncode>0</returncode>\n<output>\nx = 1/0\n</output>",
                "extra": {"returncode": 0},
            },
            {
                "role": "assistant",
                "content": "Patching and submitting.",
                "tool_calls": [_call("call_2", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")],
            },
            {"role": "tool", "tool_call_id": "call_2", "content": "<returncode>0</returncode>"},
            {
                "role": "exit",
                "content": "diff --git a/x.py b/x.py",
                "extra": {"exit_status": "Submitted", "submission": "diff --git a/x.py b/x.py"},
            },
        ],
        "trajectory_format": "mini-swe-agent-1.1",
    }


def test_mini_swe_agent_2_run_with_an_exit_message(store: EventStore, tmp_path: Path) -> None:
    path = tmp_path / "x__x-1.traj.json"
    path.write_text(json.dumps(_mini_tool_calling_run()))
    assert detect_format(path) == "mini-swe-agent"
    (s,) = import_file(store, path)
    assert s.title == "x__x-1 (Submitted)"
    assert s.metadata["info"]["model_stats"]["api_calls"] == 2
    events = [e.event for e in store.read(s.id)]
    assert len(events) == 7
    end = events[-1]
    assert isinstance(end, Custom) and end.name == "run_end"
    assert end.data["extra"]["exit_status"] == "Submitted"
    calls = [c for e in events if isinstance(e, Message) for c in e.tool_calls]
    results = [r for e in events if isinstance(e, Message) for r in e.tool_results]
    assert [c.id for c in calls] == [r.tool_call_id for r in results] == ["call_1", "call_2"]
    assert events[2].extra["extra"]["actions"][0]["command"] == "cat x.py"  # kept
    assert store.verify(s.id).ok
    # The exit record is not sent to a model.
    assert all(m["role"] != "exit" for m in store.view(s.id).to_messages())


def test_mini_swe_agent_2_text_mode(store: EventStore, tmp_path: Path) -> None:
    run = {
        "info": {"exit_status": "LimitsExceeded"},
        "trajectory_format": "mini-swe-agent-1.1",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {
                "role": "assistant",
                "content": "THOUGHT: list\n\n```bash\nls -la\n```",
                "extra": {"actions": [{"command": "ls -la"}]},
            },
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\na.py\n</output>"},
            {"role": "assistant", "content": "two blocks ```bash\nls\n``` ```bash\npwd\n```"},
            {"role": "user", "content": "Please always provide EXACTLY ONE action."},
            {"role": "exit", "content": "", "extra": {"exit_status": "LimitsExceeded"}},
        ],
    }
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(run))
    (s,) = import_file(store, path)
    msgs = [e.event for e in store.read(s.id, kinds=["message"])]
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool", "assistant", "user"]
    (call,) = msgs[2].tool_calls
    assert json.loads(call.arguments) == {"command": "ls -la"} and call.name == "bash"
    assert msgs[3].tool_results[0].output.endswith("a.py\n</output>")
    assert msgs[3].extra["imported_role"] == "user"
    assert msgs[5].text.startswith("Please always")  # a format error stays a user message
    assert store.verify(s.id).ok


def _v1_events() -> list[dict[str, Any]]:
    ts = "2025-10-01T12:00:0{}"
    return [
        {
            "kind": "SystemPromptEvent",
            "id": "e0",
            "timestamp": ts.format(0),
            "source": "agent",
            "system_prompt": {"type": "text", "text": "You are OpenHands."},
            "tools": [{"name": "terminal"}],
        },
        {
            "kind": "MessageEvent",
            "id": "e1",
            "timestamp": ts.format(1),
            "source": "user",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": "Fix bug"}]},
        },
        *[
            {
                "kind": "ActionEvent",
                "id": f"a{i}",
                "timestamp": ts.format(2),
                "source": "agent",
                "thought": [{"type": "text", "text": "Look at both files."}],
                "tool_name": "terminal",
                "tool_call_id": f"tc{i}",
                "tool_call": {
                    "id": f"tc{i}",
                    "name": "terminal",
                    "arguments": json.dumps({"command": f"cat f{i}.py"}),
                    "origin": "completion",
                },
                "llm_response_id": "resp-1",
                "action": {"kind": "TerminalAction", "command": f"cat f{i}.py"},
            }
            for i in (1, 2)
        ],
        {
            "kind": "ObservationEvent",
            "id": "o1",
            "timestamp": ts.format(3),
            "source": "environment",
            "tool_name": "terminal",
            "tool_call_id": "tc1",
            "action_id": "a1",
            "observation": {
                "kind": "TerminalObservation",
                "content": [{"type": "text", "text": "print(1/0)"}],
                "is_error": False,
            },
        },
        {
            "kind": "AgentErrorEvent",
            "id": "o2",
            "timestamp": ts.format(4),
            "source": "agent",
            "tool_name": "terminal",
            "tool_call_id": "tc2",
            "error": "f2.py: no such file",
        },
        {
            "kind": "ConversationStateUpdateEvent",
            "id": "s1",
            "timestamp": ts.format(5),
            "source": "environment",
            "key": "execution_status",
            "value": "finished",
        },
        {
            "kind": "MessageEvent",
            "id": "e9",
            "timestamp": ts.format(6),
            "source": "agent",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        },
    ]


@pytest.mark.parametrize("shape", ["list", "jsonl", "events-object"])
def test_openhands_v1_event_stream(store: EventStore, tmp_path: Path, shape: str) -> None:
    events = _v1_events()
    path = tmp_path / ("events.jsonl" if shape == "jsonl" else "events.json")
    if shape == "jsonl":
        path.write_text("\n".join(json.dumps(e) for e in events))
    elif shape == "list":
        path.write_text(json.dumps(events))
    else:
        path.write_text(json.dumps({"id": "conv-1", "events": events}))
    assert detect_format(path) == "openhands-v1"
    (s,) = import_file(store, path)
    stored = [e.event for e in store.read(s.id)]
    kinds = [e.role if isinstance(e, Message) else e.name for e in stored]  # type: ignore[union-attr]
    assert kinds == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "openhands.ConversationStateUpdateEvent",
        "assistant",
    ]
    parallel = stored[2]
    assert [c.id for c in parallel.tool_calls] == ["tc1", "tc2"]  # one model response
    assert parallel.text == "Look at both files."
    assert stored[3].tool_results[0].output == "print(1/0)"
    assert stored[4].tool_results[0].is_error and "no such file" in stored[4].text + (
        stored[4].tool_results[0].output
    )
    assert stored[1].created_at.isoformat().startswith("2025-10-01T12:00:01")
    assert store.verify(s.id).ok
    answered = [m["tool_call_id"] for m in store.view(s.id).to_messages() if m["role"] == "tool"]
    assert answered == ["tc1", "tc2"]


def test_openhands_v1_evaluation_output(store: EventStore, tmp_path: Path) -> None:
    runs = [
        {"instance_id": f"repo__proj-{i}", "history": _v1_events(), "test_result": {"ok": i}}
        for i in range(2)
    ]
    path = tmp_path / "output.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in runs))
    assert detect_format(path) == "openhands-v1"
    sessions = import_file(store, path)
    assert [s.title for s in sessions] == ["repo__proj-0", "repo__proj-1"]
    assert sessions[1].metadata["test_result"] == {"ok": 1}
    assert all(store.verify(s.id).ok for s in sessions)


def test_unknown_records_name_the_file_the_record_and_the_field(
    store: EventStore, tmp_path: Path
) -> None:
    events = _v1_events()
    del events[3]["kind"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(events))
    with pytest.raises(ImportFormatError, match=r"bad\.json: event 3: kind"):
        import_file(store, bad)
    run = _mini_tool_calling_run()
    run["messages"][1]["role"] = "narrator"
    bad2 = tmp_path / "bad2.traj.json"
    bad2.write_text(json.dumps(run))
    with pytest.raises(ImportFormatError, match=r"bad2\.traj\.json: messages\[1\].*role"):
        import_file(store, bad2)
    assert store.list_sessions() == []  # nothing was written
