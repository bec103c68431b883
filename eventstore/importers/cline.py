"""Cline and Roo Code tasks: ``tasks/<taskId>/api_conversation_history.json``.

The task's API history is a JSON list of Anthropic messages (``role``, ``content`` blocks),
each with its time ``ts`` in milliseconds; its blocks become parts as Claude Code's do (see
:mod:`.claude_code`): text, thinking, tool calls and results with their ids, images. Roo
Code's separate ``reasoning`` items become provider parts.

Native context management becomes condensations:

* Roo Code condenses without deleting: the summary message (``isSummary``, ``condenseId``)
  is one ``Condensation`` whose summary is its text verbatim, forgetting the messages whose
  ``condenseParent`` names it; earlier messages it did not condense stay pinned. A
  truncation marker (``isTruncationMarker``, ``truncationId``) is a condensation without a
  summary, forgetting the messages whose ``truncationParent`` names it.
* Cline truncates: ``ui_messages.json`` beside the history records, on the message of each
  API request, the range of history indices it deleted (``conversationHistoryDeletedRange``)
  and the history index it was made at (``conversationHistoryIndex``). Each new range is a
  condensation without a summary, placed after that history message, forgetting the
  range; the messages before it (the task and the first reply) stay pinned.

The session's key is ``cline:<taskId>`` (the task folder's name). The history is rewritten
whole by the extension, so it is read whole; a list that only grew is imported
incrementally, one that lost messages (old Cline versions deleted them) is refused as
rewritten.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..events import Condensation
from ._loading import format_error
from .claude_code import ClaudeCode

FORMAT = "cline"
HISTORY = "api_conversation_history.json"


def looks_cline(path: str | Path) -> bool:
    p = Path(path)
    return p.name == HISTORY


def history_records(path: str | Path) -> Iterator[tuple[int, Any]]:
    """The history's messages as records numbered from 1."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise format_error(str(path), f"cannot read a Cline task history: {exc}") from None
    if not isinstance(data, list):
        raise format_error(
            str(path), f"expected a JSON list of messages, got {type(data).__name__}"
        )
    yield from enumerate(data, start=1)


def _deleted_ranges(path: Path) -> dict[int, list[tuple[int, int]]]:
    """Cline's truncations from ``ui_messages.json``: history index -> new ranges."""
    ui = path.with_name("ui_messages.json")
    try:
        data = json.loads(ui.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    out: dict[int, list[tuple[int, int]]] = {}
    last: tuple[int, int] | None = None
    for msg in data if isinstance(data, list) else []:
        rng = msg.get("conversationHistoryDeletedRange") if isinstance(msg, dict) else None
        at = msg.get("conversationHistoryIndex") if isinstance(msg, dict) else None
        if (
            isinstance(rng, list)
            and len(rng) == 2
            and all(isinstance(x, int) for x in rng)
            and isinstance(at, int)
            and tuple(rng) != last
        ):
            last = (rng[0], rng[1])
            out.setdefault(at, []).append(last)
    return out


def _when(ts: Any) -> str | None:
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        return datetime.fromtimestamp(ts / 1000, UTC).isoformat()
    return None


class Cline(ClaudeCode):
    format = FORMAT

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        p = Path(self.path)
        self.source_id = p.parent.name
        self.ranges = _deleted_ranges(p)
        self.seq_of_index: dict[int, int] = {}  # history index -> its last seq
        self.first_of_index: dict[int, int] = {}  # history index -> its first seq
        self.tagged: dict[str, list[int]] = {}  # condenseId/truncationId -> seqs it hides
        self.message_seqs: set[int] = set()
        self.open_calls: list[str] = []  # the last reply's tool calls not yet answered

    def feed(self, line: int, record: Any) -> None:
        if not isinstance(record, dict) or record.get("role") not in ("user", "assistant"):
            if isinstance(record, dict) and record.get("type") == "reasoning":
                record = {"role": "assistant", "content": [record], "ts": record.get("ts")}
            else:
                self._bookkeeping(None, "record", record)
                self._after(line)
                return
        when = _when(record.get("ts"))
        if record.get("isSummary") or record.get("isTruncationMarker"):
            self._close(None)
            self._native(record, when)
            self._after(line)
            return
        before = self.seqs.get(None, 0)
        content = record.get("content")
        if record["role"] == "assistant":
            self.open_calls = _call_ids(content)
        else:
            content, self.open_calls = _paired_results(content, self.open_calls)
        adapted = {
            "type": record["role"],
            "timestamp": when,
            "message": {"role": record["role"], "content": content},
        }
        super().feed(line, adapted)
        self._close(None)
        made = list(range(before + 1, self.seqs.get(None, 0) + 1))
        if made:
            self.seq_of_index[line - 1] = made[-1]
            self.first_of_index[line - 1] = made[0]
            self.message_seqs.update(made)
        for key in ("condenseParent", "truncationParent"):
            if isinstance(record.get(key), str):
                self.tagged.setdefault(record[key], []).extend(made)
        self._after(line)

    def _native(self, record: dict[str, Any], when: str | None) -> None:
        """A Roo Code summary or truncation marker: one condensation."""
        tag = record.get("condenseId") or record.get("truncationId")
        hidden = sorted(self.tagged.get(tag, [])) if isinstance(tag, str) else []
        head = self.seqs.get(None, 0)
        summary = None
        if record.get("isSummary"):
            content = record.get("content")
            summary = content if isinstance(content, str) else _text(content)
        first, last = (hidden[0], hidden[-1]) if hidden else (1, head)
        pinned = [s for s in range(1, first) if s not in hidden and self._is_message(s)]
        self._condensation(first, last, summary, pinned, {"record": record}, when)

    def _after(self, line: int) -> None:
        """Cline's truncations made at this history index."""
        for start, end in self.ranges.get(line - 1, []):
            first = self.first_of_index.get(start)
            last = self.seq_of_index.get(end)
            if first is None or last is None:
                continue
            pinned = [s for s in range(1, first) if self._is_message(s)]
            self._condensation(
                first,
                last,
                None,
                pinned,
                {"deleted_range": [start, end], "at_index": line - 1},
                None,
            )

    def _is_message(self, seq: int) -> bool:
        return seq in self.message_seqs

    def _condensation(
        self,
        first: int,
        last: int,
        summary: str | None,
        pinned: list[int],
        settings: dict[str, Any],
        when: str | None,
    ) -> None:
        from ._agent import parse_when

        item = self.emit(
            Condensation(
                forgotten_from=first,
                forgotten_to=last,
                forgotten_events=max(0, last - first + 1),
                summary=summary,
                condenser=FORMAT,
                trigger="import",
                pinned=pinned,
                supersedes=self.last_condensation.get(None),
                settings=settings,
                created_at=parse_when(when) or self.when,
            )
        )
        self.last_condensation[None] = item.seq


# How Cline writes a native tool call's result: a text block of the next user message,
# "[read_file for 'src/app.ts'] Result:" and the output, one per call, in the calls' order.
# The quoted argument may hold brackets and line breaks (a search pattern, a command).
_RESULT = re.compile(r"\[[\w-]+(?: for '.*?')?\] Result:", re.S)


def _call_ids(content: Any) -> list[str]:
    blocks = content if isinstance(content, list) else []
    return [
        b["id"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str)
    ]


def _paired_results(content: Any, open_calls: list[str]) -> tuple[Any, list[str]]:
    """A user message's result texts as the results of the calls they answer.

    Cline (with native tool calling) keeps the reply's ``tool_use`` blocks but writes each
    result as a text block of the next user message; it sends them to the model as the
    calls' results. Those blocks become ``tool_result`` blocks of the open calls, in order,
    their text verbatim; other blocks stay as they are. Returns the content and the calls
    still unanswered.
    """
    if not open_calls or not isinstance(content, list):
        return content, [] if isinstance(content, list) else open_calls
    if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return content, []
    pending = list(open_calls)
    out: list[Any] = []
    for block in content:
        text = block.get("text") if isinstance(block, dict) else None
        if (
            pending
            and block.get("type") == "text"
            and isinstance(text, str)
            and _RESULT.match(text[:20_000])
        ):
            out.append({"type": "tool_result", "tool_use_id": pending.pop(0), "content": text})
        else:
            out.append(block)
    return out, []


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""
