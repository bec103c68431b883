"""Text-mode agents: an action written in the assistant's text, its output in the next
user message. Turned into a tool call and a tool result where the pair is recognisable, so
that pruning, masking and summaries treat the output as tool output, not as a user request.

The rewrite is recorded on the messages (``imported_role: "user"`` on the result, the
generated call id ``import-<n>``), so an audit can tell converted pairs from native ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

ActionOf = Callable[[dict[str, Any]], str | None]
IsObservation = Callable[[dict[str, Any]], bool]


def pair_actions(
    records: list[Any], action_of: ActionOf, is_observation: IsObservation, tool_name: str | None
) -> list[Any]:
    """``records`` (raw chat messages) with each recognisable action/observation pair
    rewritten as an assistant tool call and a tool result. ``tool_name`` names the tool
    (``None``: the first word of the action)."""
    out = list(records)
    for i in range(len(out) - 1):
        raw, nxt = out[i], out[i + 1]
        if not (isinstance(raw, dict) and isinstance(nxt, dict)):
            continue
        if raw.get("role") != "assistant" or raw.get("tool_calls") or nxt.get("role") != "user":
            continue
        action = action_of(raw)
        if not action or not action.strip() or not is_observation(nxt):
            continue
        name = tool_name or (action.split() or ["action"])[0]
        call_id = f"import-{i}"
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"command": action.strip()})},
        }
        out[i] = {**raw, "tool_calls": [call]}
        out[i + 1] = {
            **{k: v for k, v in nxt.items() if k != "role"},
            "role": "tool",
            "tool_call_id": call_id,
            "name": name,
            "imported_role": "user",
        }
    return out
