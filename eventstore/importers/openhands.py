"""OpenHands event streams and resolver/evaluation output.

An event stream is a JSON list of events, or an object with a ``history`` list; resolver
output is JSONL with one run (and its ``history``) per line, one session per run. Tool
actions and their observations become assistant tool calls and tool results; everything
else becomes a ``Custom`` event named ``openhands.<type>``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ..events import Custom, Event, FilePart, Message, Part, TextPart, ToolCallPart, ToolResultPart
from ._loading import ImportFormatError, LoadedFile, Transcript, format_error, short_error

# Actions that are tools the model called; without tool_call_metadata (older output) they
# still pair with the observation that follows them.
_OH_TOOL_ACTIONS = {
    "run",
    "run_ipython",
    "read",
    "write",
    "edit",
    "browse",
    "browse_interactive",
    "think",
    "finish",
    "delegate",
    "call_tool_mcp",
    "mcp",
    "task_tracking",
}


def parse_time(ts: Any, where: str) -> datetime | None:
    """An OpenHands event's ``timestamp`` (ISO text, naive meaning UTC), or ``None``."""
    if ts is None:
        return None
    if not isinstance(ts, str):
        raise format_error(where, f"timestamp: expected a string, got {type(ts).__name__}")
    try:
        value = datetime.fromisoformat(ts)
    except ValueError:
        raise format_error(where, f"timestamp: not an ISO date {ts!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def looks_openhands(items: list[Any]) -> bool:
    for item in items[:5]:
        if isinstance(item, dict):
            if "role" in item:
                return False
            if "action" in item or "observation" in item:
                return True
    return False


def openhands_transcripts(loaded: LoadedFile) -> list[Transcript]:
    path, data = loaded.path, loaded.data
    name = Path(path).name
    if loaded.jsonl:
        out = []
        for n, run in data:
            where = f"{path}:{n}"
            if not isinstance(run, dict) or not isinstance(run.get("history"), list):
                raise format_error(where, "expected a run object with a `history` list")
            meta = {k: v for k, v in run.items() if k != "history"}
            meta["import"] = {"format": "openhands", "file": name, "line": n}
            events = _OpenHands(where).convert(run["history"])
            out.append(
                Transcript(events=events, title=_run_title(run, f"{name}:{n}"), metadata=meta)
            )
        return out
    if isinstance(data, dict):
        meta = {k: v for k, v in data.items() if k != "history"}
        history = data.get("history")
        title = _run_title(data, name)
    else:
        meta, history, title = {}, data, name
    if not isinstance(history, list):
        raise format_error(path, "expected a list of OpenHands events")
    meta["import"] = {"format": "openhands", "file": name}
    return [Transcript(events=_OpenHands(path).convert(history), title=title, metadata=meta)]


def _run_title(run: dict[str, Any], default: str) -> str:
    issue = run.get("issue")
    if isinstance(issue, dict) and issue.get("title"):
        repo = f"{issue.get('owner', '')}/{issue.get('repo', '')}".strip("/")
        return f"{repo}#{issue.get('number', '')}: {issue['title']}".strip()
    iid = run.get("instance_id")
    return str(iid) if iid else default


class _OpenHands:
    """Converts one OpenHands event list; keeps the pairing state between events."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.events: list[Event] = []
        self.by_action: dict[Any, str] = {}  # action event id -> tool call id
        self.pending: dict[str, str] = {}  # open tool call id -> tool name
        self.last_call: str | None = None  # for older output without ids or causes
        self.responses: dict[str, Message] = {}  # model response id -> assistant message

    def convert(self, history: list[Any]) -> list[Event]:
        for i, raw in enumerate(history):
            where = f"{self.where}: history[{i}]"
            if not isinstance(raw, dict):
                raise format_error(where, f"expected an event object, got {type(raw).__name__}")
            try:
                if isinstance(raw.get("action"), str):
                    self._action(raw, i, where)
                elif isinstance(raw.get("observation"), str):
                    self._observation(raw, where)
                else:
                    raise format_error(where, "an event needs an `action` or `observation` string")
            except (ValidationError, TypeError, ValueError) as exc:
                if isinstance(exc, ImportFormatError):
                    raise
                raise format_error(where, short_error(exc)) from None
        return self.events

    # -- helpers

    def _time(self, raw: dict[str, Any], where: str) -> datetime | None:
        return parse_time(raw.get("timestamp"), where)

    @staticmethod
    def _args(raw: dict[str, Any], key: str, skip: set[str]) -> dict[str, Any]:
        value = raw.get(key)
        if isinstance(value, dict):
            return value
        # Older output flattens args/extras into the event itself.
        return {k: v for k, v in raw.items() if k not in skip}

    def _custom(self, raw: dict[str, Any], kind: str, where: str) -> None:
        self.events.append(
            Custom(name=f"openhands.{kind}", data=raw, created_at=self._time(raw, where))
        )

    # -- actions

    def _action(self, raw: dict[str, Any], index: int, where: str) -> None:
        action = raw["action"]
        args = self._args(raw, "args", {"action", "id", "timestamp", "source", "message"})
        tcm = raw.get("tool_call_metadata")
        if action == "message":
            self._message(raw, args, where)
        elif action == "system":
            text = args.get("content") if isinstance(args.get("content"), str) else ""
            self._append_message(Message.system(text or raw.get("message") or ""), raw, where)
        elif isinstance(tcm, dict) or action in _OH_TOOL_ACTIONS:
            self._tool_call(raw, args, tcm if isinstance(tcm, dict) else None, index, where)
        else:
            self._custom(raw, action, where)

    def _append_message(self, msg: Message, raw: dict[str, Any], where: str) -> Message:
        msg.created_at = self._time(raw, where)
        msg.provider_metadata = {"openhands": [raw]}
        self.events.append(msg)
        return msg

    def _message(self, raw: dict[str, Any], args: dict[str, Any], where: str) -> None:
        source = raw.get("source")
        if source is None:
            # Older output has no source; the agent's messages wait for the user's reply.
            source = "agent" if args.get("wait_for_response") else "user"
        content = args.get("content", raw.get("message", ""))
        if not isinstance(content, str):
            raise format_error(
                where, f"args.content: expected a string, got {type(content).__name__}"
            )
        parts: list[Part] = [TextPart(text=content)] if content else []
        urls = args.get("image_urls") or args.get("images_urls") or []
        if isinstance(urls, list):
            parts.extend(FilePart(uri=u, media_type="image/*") for u in urls if isinstance(u, str))
        role: Literal["assistant", "user"] = "assistant" if source == "agent" else "user"
        self._append_message(Message(role=role, parts=parts), raw, where)

    def _tool_call(
        self,
        raw: dict[str, Any],
        args: dict[str, Any],
        tcm: dict[str, Any] | None,
        index: int,
        where: str,
    ) -> None:
        thought = args.get("thought") if isinstance(args.get("thought"), str) else ""
        call_args = {k: v for k, v in args.items() if k != "thought"}
        response: dict[str, Any] = {}
        if tcm is not None:
            call_id, name = tcm.get("tool_call_id"), tcm.get("function_name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise format_error(where, "tool_call_metadata needs tool_call_id and function_name")
            mr = tcm.get("model_response")
            response = mr if isinstance(mr, dict) else {}
        else:
            call_id = f"openhands-{raw.get('id', index)}"
            name = raw["action"]
        choice_msg = _first_choice_message(response)
        arguments = _raw_arguments(choice_msg, call_id)
        if arguments is None:
            arguments = json.dumps(call_args, ensure_ascii=False)
        part = ToolCallPart(id=call_id, name=name, arguments=arguments)
        resp_id = response.get("id")
        group = self.responses.get(resp_id) if isinstance(resp_id, str) else None
        if group is not None:
            # Parallel calls from one model response share one assistant message.
            group.parts.append(part)
            meta = group.provider_metadata if group.provider_metadata is not None else {}
            meta.setdefault("openhands", []).append(raw)
            group.provider_metadata = meta
        else:
            text = (
                choice_msg.get("content") if isinstance(choice_msg.get("content"), str) else thought
            )
            parts: list[Part] = [TextPart(text=text)] if text else []
            parts.append(part)
            model = response.get("model") if isinstance(response.get("model"), str) else None
            msg = self._append_message(
                Message(role="assistant", parts=parts, model=model), raw, where
            )
            if isinstance(resp_id, str):
                self.responses[resp_id] = msg
        if "id" in raw:
            self.by_action[raw["id"]] = call_id
        self.pending[call_id] = name
        self.last_call = call_id

    # -- observations

    def _observation(self, raw: dict[str, Any], where: str) -> None:
        kind = raw["observation"]
        call_id = self._answers(raw, kind)
        if call_id is None:
            self._custom(raw, kind, where)
            return
        content = raw.get("content", "")
        if not isinstance(content, str):
            raise format_error(where, f"content: expected a string, got {type(content).__name__}")
        name = self.pending.pop(call_id)
        if self.last_call == call_id:
            self.last_call = None
        result = ToolResultPart(
            tool_call_id=call_id,
            name=name,
            output=content,
            is_error=kind == "error",
            state="error" if kind == "error" else "completed",
        )
        self._append_message(Message(role="tool", parts=[result]), raw, where)

    def _answers(self, raw: dict[str, Any], kind: str) -> str | None:
        if kind in ("null", "agent_state_changed", "recall"):
            return None
        tcm = raw.get("tool_call_metadata")
        if isinstance(tcm, dict) and tcm.get("tool_call_id") in self.pending:
            return tcm["tool_call_id"]
        cause = raw.get("cause")
        if cause is not None:
            call_id = self.by_action.get(cause)
            return call_id if call_id in self.pending else None
        if "id" not in raw and self.last_call in self.pending:
            return self.last_call
        return None


def _first_choice_message(response: dict[str, Any]) -> dict[str, Any]:
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        msg = choices[0].get("message")
        if isinstance(msg, dict):
            return msg
    return {}


def _raw_arguments(choice_msg: dict[str, Any], call_id: str) -> str | None:
    for call in choice_msg.get("tool_calls") or []:
        if isinstance(call, dict) and call.get("id") == call_id:
            fn = call.get("function")
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                return fn["arguments"]
    return None
