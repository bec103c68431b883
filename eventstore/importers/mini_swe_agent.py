"""mini-swe-agent trajectories, 1.x and 2.x.

A run is a JSON object ``{"info": ..., "messages": [...], "trajectory_format":
"mini-swe-agent-…"}`` (older runs: just the message list). Messages are OpenAI-style, with
an ``extra`` dict the agent keeps (its parsed actions, raw responses, timings), and every
2.x run ends with ``{"role": "exit", "content": …, "extra": {"exit_status", "submission"}}``:
that becomes a ``Custom`` event named ``run_end``, not a dropped line. Tool-calling runs
keep their calls and results; text-mode runs (one fenced bash command per reply, its
``<returncode>``/``<output>`` in the next user message) become tool calls and results too
(see :mod:`._textmode`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..events import Custom, Event
from ._loading import LoadedFile, Transcript, format_error
from ._textmode import pair_actions
from .openai import convert_message

_FENCE = re.compile(r"```(?:bash|sh|mswea_bash_command)\s*\n(.*?)\n```", re.S)
RUN_END = "run_end"


def looks_mini(data: Any) -> bool:
    """A mini-swe-agent run: tagged so, or messages with its observations or exit."""
    if isinstance(data, dict):
        if str(data.get("trajectory_format", "")).startswith("mini-swe-agent"):
            return True
        data = data.get("messages")
    if not isinstance(data, list):
        return False
    for m in data:
        if isinstance(m, dict) and m.get("role") == "exit":
            return True
        if isinstance(m, dict) and m.get("role") == "user" and _is_observation(m):
            return True
    return False


def _action(raw: dict[str, Any]) -> str | None:
    extra = raw.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get("actions"), list):
        actions = extra["actions"]
        if len(actions) == 1:
            a = actions[0]
            cmd = (a.get("command") or a.get("action")) if isinstance(a, dict) else a
            return cmd if isinstance(cmd, str) else None
        return None
    content = raw.get("content")
    if not isinstance(content, str):
        return None
    found = _FENCE.findall(content)
    return found[0] if len(found) == 1 else None


def _is_observation(raw: dict[str, Any]) -> bool:
    content = raw.get("content")
    extra = raw.get("extra")
    if isinstance(extra, dict) and "returncode" in extra:
        return True
    return isinstance(content, str) and content.lstrip().startswith("<returncode>")


def mini_transcript(loaded: LoadedFile) -> Transcript:
    path, data = loaded.path, loaded.data
    meta: dict[str, Any] = {"import": {"format": "mini-swe-agent", "file": Path(path).name}}
    if isinstance(data, dict):
        if not isinstance(data.get("messages"), list):
            raise format_error(path, "a mini-swe-agent run is an object with a `messages` list")
        meta.update({k: v for k, v in data.items() if k != "messages"})
        records = data["messages"]
    elif isinstance(data, list):
        records = data
    else:
        raise format_error(
            path, f"expected a run object or a message list, got {type(data).__name__}"
        )
    paired = pair_actions(records, _action, _is_observation, "bash")
    events: list[Event] = []
    for i, raw in enumerate(paired):
        where = f"{path}: messages[{i}]"
        if not isinstance(raw, dict):
            raise format_error(where, f"expected a message object, got {type(raw).__name__}")
        if raw.get("role") == "exit":
            data_ = {k: v for k, v in raw.items() if k != "role"}
            events.append(Custom(name=RUN_END, data=data_))
            continue
        events.append(convert_message(raw, where))
    info = meta.get("info")
    title = Path(path).name.removesuffix(".json").removesuffix(".traj")
    if isinstance(info, dict) and info.get("exit_status"):
        title = f"{title} ({info['exit_status']})"
    return Transcript(events=events, title=title, metadata=meta)
