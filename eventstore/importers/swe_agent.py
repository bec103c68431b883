"""SWE-agent ``.traj`` files: the ``history`` becomes the session.

``info``, ``environment`` and ``replay_config`` go to the session metadata. The history
holds OpenAI-style messages, except that tool messages may answer several calls at once.
In text mode (no function calling) an assistant message carries its command in
``action`` and the next user message is its output: such pairs become a tool call (named
after the command's first word) and its result, see :mod:`._textmode`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..events import Event
from ._loading import LoadedFile, Transcript, format_error
from ._textmode import pair_actions
from .openai import convert_message


def _action(raw: dict[str, Any]) -> str | None:
    action = raw.get("action")
    return action if isinstance(action, str) else None


def _is_observation(raw: dict[str, Any]) -> bool:
    return raw.get("message_type") in (None, "observation")


def swe_agent_transcript(loaded: LoadedFile) -> Transcript:
    path, data = loaded.path, loaded.data
    if loaded.jsonl or not isinstance(data, dict) or not isinstance(data.get("history"), list):
        raise format_error(path, "a SWE-agent trajectory is a JSON object with a `history` list")
    events: list[Event] = []
    history = pair_actions(data["history"], _action, _is_observation, None)
    for i, raw in enumerate(history):
        where = f"{path}: history[{i}]"
        if not isinstance(raw, dict):
            raise format_error(where, f"expected a message object, got {type(raw).__name__}")
        events.extend(convert_message(m, where) for m in _split_swe_tool(raw, where))
    meta: dict[str, Any] = {"import": {"format": "swe-agent", "file": Path(path).name}}
    for key in ("environment", "info", "replay_config"):
        if key in data:
            meta[key] = data[key]
    env = data.get("environment")
    title = Path(path).stem if not isinstance(env, str) else f"{Path(path).stem} ({env})"
    return Transcript(events=events, title=title, metadata=meta)


def _split_swe_tool(raw: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """SWE-agent tool messages list their call ids; emit one standard message per id."""
    if raw.get("role") != "tool" or "tool_call_id" in raw:
        return [raw]
    ids = raw.get("tool_call_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(x, str) for x in ids):
        raise format_error(where, "tool message without `tool_call_id` or a `tool_call_ids` list")
    base = {k: v for k, v in raw.items() if k != "tool_call_ids"}
    return [{**base, "tool_call_id": call_id} for call_id in ids]
