"""OpenHands V1 (the agent SDK) event streams and evaluation output.

V1 events are tagged by a ``kind`` field: ``SystemPromptEvent`` (the system message and
tools), ``MessageEvent`` (a user or agent message, ``llm_message`` in chat form),
``ActionEvent`` (one tool call: ``thought``, ``tool_call``; parallel calls of one model
response share ``llm_response_id`` and become one assistant message), ``ObservationEvent``
/ ``AgentErrorEvent`` / ``UserRejectObservation`` (tool results). Any other kind
(condensations, state updates, pauses, errors of the conversation) is kept as a ``Custom``
event named ``openhands.<kind>``, nothing dropped.

Accepted shapes: a JSON list of events, an object with an ``events`` or ``history`` list,
JSONL with one event per line, and evaluation output (JSONL or JSON, one run with a
``history`` list per record: one session per run).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from ..events import (
    Custom,
    Event,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ._loading import LoadedFile, Transcript, format_error
from .openhands import parse_time

_RESULT_KINDS = {"ObservationEvent", "AgentErrorEvent", "UserRejectObservation"}
_LLM_KINDS = {"SystemPromptEvent", "MessageEvent", "ActionEvent"} | _RESULT_KINDS


def _is_v1_event(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and isinstance(item.get("kind"), str)
        and (item["kind"] in _LLM_KINDS or item["kind"].endswith(("Event", "Observation")))
    )


def looks_v1(loaded: LoadedFile) -> bool:
    """Whether the file holds V1 events (directly, or in runs' ``history`` lists)."""
    data = loaded.data
    items = [v for _, v in data] if loaded.jsonl else data
    if isinstance(items, dict):
        items = items.get("events") or items.get("history") or []
    if not isinstance(items, list) or not items:
        return False
    first = items[0]
    if isinstance(first, dict) and isinstance(first.get("history"), list):
        return bool(first["history"]) and _is_v1_event(first["history"][0])
    return any(_is_v1_event(x) for x in items[:5])


def v1_transcripts(loaded: LoadedFile) -> list[Transcript]:
    path, data = loaded.path, loaded.data
    name = Path(path).name
    if loaded.jsonl:
        records = [(f"{path}:{n}", v) for n, v in data]
    elif isinstance(data, dict):
        if isinstance(data.get("history"), list):
            records = [(path, data)]
        elif isinstance(data.get("events"), list):
            meta = {k: v for k, v in data.items() if k != "events"}
            return [_transcript(data["events"], path, name, meta)]
        else:
            raise format_error(path, "expected an `events` or `history` list of V1 events")
    elif isinstance(data, list):
        records = [(f"{path}: item {i}", v) for i, v in enumerate(data)]
    else:
        raise format_error(path, f"expected a JSON list or object, got {type(data).__name__}")
    runs = [
        (w, v) for w, v in records if isinstance(v, dict) and isinstance(v.get("history"), list)
    ]
    if not runs:  # one event stream
        return [_transcript([v for _, v in records], path, name, {})]
    if len(runs) != len(records):
        where = next(w for w, v in records if (w, v) not in runs)
        raise format_error(where, "history: every run record of evaluation output needs one")
    out = []
    for where, run in runs:
        meta = {k: v for k, v in run.items() if k != "history"}
        title = str(run.get("instance_id") or f"{name}:{where.rsplit(':', 1)[-1]}")
        out.append(_transcript(run["history"], where, title, meta))
    return out


def _transcript(events: Any, where: str, title: str, meta: dict[str, Any]) -> Transcript:
    if not isinstance(events, list):
        raise format_error(where, "expected a list of V1 events")
    meta = {**meta, "import": {"format": "openhands-v1", "file": Path(where).name}}
    return Transcript(events=_Convert(where).run(events), title=title, metadata=meta)


def _text(content: Any) -> str:
    """Text of a V1 content list (``[{"type": "text", "text": ...}]``) or a string."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return _text([content])
    if isinstance(content, list):
        return "".join(c.get("text", "") for c in content if isinstance(c, dict))
    return ""


class _Convert:
    def __init__(self, where: str) -> None:
        self.where = where
        self.out: list[Event] = []
        self.response: str | None = None  # llm_response_id of the open assistant message

    def run(self, events: list[Any]) -> list[Event]:
        for i, raw in enumerate(events):
            where = f"{self.where}: event {i}"
            if not isinstance(raw, dict):
                raise format_error(where, f"expected an event object, got {type(raw).__name__}")
            kind = raw.get("kind")
            if not isinstance(kind, str):
                raise format_error(where, "kind: missing (a V1 event names its kind)")
            when = parse_time(raw.get("timestamp"), where)
            if kind == "ActionEvent":
                self._action(raw, when, where)
                continue
            self.response = None
            if kind == "SystemPromptEvent":
                self._system(raw, when)
            elif kind == "MessageEvent":
                self._message(raw, when, where)
            elif kind in _RESULT_KINDS:
                self._result(raw, kind, when, where)
            else:
                data = {k: v for k, v in raw.items() if k not in ("kind", "timestamp")}
                self.out.append(Custom(name=f"openhands.{kind}", data=data, created_at=when))
        return self.out

    def _system(self, raw: dict[str, Any], when: datetime | None) -> None:
        parts: list[Part] = [TextPart(text=_text(raw.get("system_prompt")))]
        if raw.get("dynamic_context"):
            parts.append(TextPart(text=_text(raw["dynamic_context"])))
        extra = {"tools": raw["tools"]} if raw.get("tools") else None
        self.out.append(Message(role="system", parts=parts, extra=extra, created_at=when))

    def _message(self, raw: dict[str, Any], when: datetime | None, where: str) -> None:
        llm = raw.get("llm_message")
        if not isinstance(llm, dict):
            raise format_error(where, "llm_message: a MessageEvent needs its chat message")
        role = llm.get("role") or ("user" if raw.get("source") == "user" else "assistant")
        if role not in ("system", "user", "assistant"):
            raise format_error(
                where, f"llm_message.role: expected system/user/assistant, got {role!r}"
            )
        parts: list[Part] = []
        if llm.get("reasoning_content"):
            parts.append(ReasoningPart(text=str(llm["reasoning_content"])))
        parts.append(TextPart(text=_text(llm.get("content")) + _text(raw.get("extended_content"))))
        self.out.append(Message(role=role, parts=parts, created_at=when))  # type: ignore[arg-type]

    def _action(self, raw: dict[str, Any], when: datetime | None, where: str) -> None:
        call = raw.get("tool_call")
        if not isinstance(call, dict):
            raise format_error(where, "tool_call: an ActionEvent needs its tool call")
        call_id = call.get("id") or raw.get("tool_call_id")
        name = call.get("name") or raw.get("tool_name")
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise format_error(where, "tool_call.id/name: missing")
        args = call.get("arguments", "")
        part = ToolCallPart(
            id=call_id, name=name, arguments=args if isinstance(args, str) else json.dumps(args)
        )
        response = raw.get("llm_response_id")
        last = self.out[-1] if self.out else None
        if response and response == self.response and isinstance(last, Message):
            last.parts.append(part)  # a parallel call of the same model response
            return
        parts: list[Part] = []
        if raw.get("reasoning_content"):
            parts.append(ReasoningPart(text=str(raw["reasoning_content"])))
        thought = _text(raw.get("thought"))
        if thought:
            parts.append(TextPart(text=thought))
        parts.append(part)
        self.out.append(Message(role="assistant", parts=parts, created_at=when))
        self.response = response if isinstance(response, str) else None

    def _result(self, raw: dict[str, Any], kind: str, when: datetime | None, where: str) -> None:
        call_id, name = raw.get("tool_call_id"), raw.get("tool_name")
        if not isinstance(call_id, str):
            raise format_error(where, f"tool_call_id: a {kind} answers a tool call")
        error = False
        if kind == "AgentErrorEvent":
            output, error = str(raw.get("error", "")), True
        elif kind == "UserRejectObservation":
            output, error = f"Action rejected: {raw.get('rejection_reason', '')}", True
        else:
            obs = raw.get("observation")
            if not isinstance(obs, dict):
                raise format_error(where, "observation: an ObservationEvent needs its observation")
            output = _text(obs.get("content")) or _text(obs.get("output"))
            if not output:
                output = json.dumps({k: v for k, v in obs.items() if k != "kind"})
            error = bool(obs.get("is_error") or obs.get("error"))
        part = ToolResultPart(
            tool_call_id=call_id,
            name=name if isinstance(name, str) else None,
            output=output,
            is_error=error,
        )
        self.out.append(Message(role="tool", parts=[part], created_at=when))
