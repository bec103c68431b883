"""The extractive summarizer: a structured summary copied out of the events. Costs nothing.

:class:`ExtractiveSummarizer` quotes user requests, counts tool calls, lists errors and
file paths, and quotes the last assistant message, under the template's headings. It is
deterministic, needs no model, and is the offline default and the fallback whenever a
model-backed summarizer fails.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from eventstore.events import Message, ToolCallPart, ToolResultPart
from eventstore.records import StoredEvent
from eventstore.tokens import HeuristicTokenCounter, TokenCounter

from .protocol import SummaryResult
from .template import HEADINGS, clip

__all__ = ["ExtractiveSummarizer", "parse_sections"]


_SECTION_RE = re.compile(r"^\s{0,3}#{1,6}\s*(.+?)\s*$", re.MULTILINE)


def parse_sections(summary: str | None) -> dict[str, list[str]]:
    """Split a templated summary into ``{heading: lines}`` (unknown headings are kept)."""
    out: dict[str, list[str]] = {}
    if not summary:
        return out
    matches = list(_SECTION_RE.finditer(summary))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(summary)
        body = summary[m.end() : end].strip("\n")
        out[m.group(1).strip()] = [ln for ln in body.splitlines() if ln.strip()]
    return out


_PATH_KEYS = {"path", "file", "filename", "file_path", "filepath", "paths", "files", "target"}
_PATH_RE = re.compile(
    r"(?<![\w.:/-])(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]+|[\w@+-]+\.[A-Za-z]\w{0,5}\b"
)
_ERROR_RE = re.compile(
    r"(Traceback \(most recent call last\)|\b\w*Error\b:?|\bException\b|command not found|"
    r"No such file or directory|\bFAILED\b|\bfatal:)"
)
_TOOLS_RE = re.compile(r"^- tools called: (.*)$")
_TOOL_COUNT_RE = re.compile(r"([^\s,]+) x(\d+)")
_TRIM_RE = re.compile(r"^- \((\d+) (?:earlier|more) (?:requests|errors|files) omitted\)$")
_NONE = "- none"


def _looks_like_path(token: str) -> bool:
    if "://" in token or len(token) > 200 or len(token) < 3:
        return False
    if "/" in token:
        return bool(re.search(r"[A-Za-z]", token))
    # A bare name counts only with a typical source/data extension.
    return bool(
        re.search(
            r"\.(py|js|ts|tsx|jsx|go|rs|java|c|h|cpp|md|txt|json|ya?ml|toml|"
            r"cfg|ini|sh|html|css|sql|rb|php|lock|csv|xml)$",
            token,
        )
    )


def _paths_in_value(value: Any, key: str | None = None) -> Iterable[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths_in_value(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _paths_in_value(v, key)
    elif isinstance(value, str):
        if key and key.lower() in _PATH_KEYS and value.strip() and "\n" not in value:
            yield value.strip()
        else:
            for m in _PATH_RE.finditer(value):
                if _looks_like_path(m.group(0)):
                    yield m.group(0)


def _paths_in_call(call: ToolCallPart) -> list[str]:
    try:
        parsed = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        parsed = call.arguments
    return list(dict.fromkeys(_paths_in_value(parsed)))


def _error_line(text: str) -> str | None:
    for line in text.splitlines():
        if _ERROR_RE.search(line):
            return clip(line.strip(), 240)
    return None


def _bullets(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("- ") and ln != _NONE and not _TRIM_RE.match(ln)]


def _omitted(lines: list[str]) -> int:
    for ln in lines:
        m = _TRIM_RE.match(ln)
        if m:
            return int(m.group(1))
    return 0


def _bounded(
    items: list[str], keep_first: int, keep_last: int, what: str, dropped: int
) -> list[str]:
    """``items`` reduced to the first and last few, with a count of what was dropped."""
    if len(items) > keep_first + keep_last:
        dropped += len(items) - keep_first - keep_last
        items = items[:keep_first] + items[len(items) - keep_last :]
    if dropped:
        items = items[:keep_first] + [f"- ({dropped} {what} omitted)"] + items[keep_first:]
    return items or [_NONE]


@dataclass(frozen=True)
class _Caps:
    request_chars: int
    max_requests: int
    max_errors: int
    max_files: int
    last_message_chars: int

    def halved(self) -> _Caps:
        # The floor keeps the task statement and the last assistant message, briefly, and
        # reduces every list to its count.
        return _Caps(
            max(self.request_chars // 2, 120),
            self.max_requests // 2,
            self.max_errors // 2,
            self.max_files // 2,
            max(self.last_message_chars // 2, 120),
        )


class ExtractiveSummarizer:
    """A deterministic structured summary built from the events themselves. Costs nothing.

    Anchored like the LLM summary: the previous summary's lists are parsed and extended, so
    facts survive any number of condensations. Each list is bounded (the first and the
    newest entries are kept, with a count of what was dropped) so the summary cannot grow
    without limit.

    Args:
        request_chars: Cap on each quoted user request (start and end kept).
        max_requests: User requests kept besides the first one (the task statement).
        max_errors: Newest error lines kept.
        max_files: File paths kept (first seen first).
        last_message_chars: Cap on the quoted last assistant message.
    """

    name = "extractive_summary"

    def __init__(
        self,
        *,
        request_chars: int = 1500,
        max_requests: int = 6,
        max_errors: int = 8,
        max_files: int = 40,
        last_message_chars: int = 1500,
    ) -> None:
        self.request_chars = request_chars
        self.max_requests = max_requests
        self.max_errors = max_errors
        self.max_files = max_files
        self.last_message_chars = last_message_chars

    def settings(self) -> dict[str, Any]:
        return {
            "request_chars": self.request_chars,
            "max_requests": self.max_requests,
            "max_errors": self.max_errors,
            "max_files": self.max_files,
            "last_message_chars": self.last_message_chars,
        }

    def summarize(
        self,
        previous: str | None,
        events: Sequence[StoredEvent],
        *,
        focus: str | None = None,
        limit_tokens: int | None = None,
        token_counter: TokenCounter | None = None,
    ) -> SummaryResult:
        """The summary; with ``limit_tokens`` the caps are halved until it fits (or reach
        their floor: the task statement and the last assistant message, briefly, and a
        count of everything else)."""
        started = time.perf_counter()
        counter = token_counter or HeuristicTokenCounter()
        caps = _Caps(
            self.request_chars,
            self.max_requests,
            self.max_errors,
            self.max_files,
            self.last_message_chars,
        )
        while True:
            result = self._build(previous, events, focus, caps)
            if limit_tokens is None or counter.count(result.text) <= limit_tokens:
                break
            smaller = caps.halved()
            if smaller == caps:
                result.notes.append(f"summary exceeds {limit_tokens} tokens at minimum caps")
                break
            caps = smaller
        result.latency_ms = (time.perf_counter() - started) * 1000
        return result

    def _build(
        self, previous: str | None, events: Sequence[StoredEvent], focus: str | None, caps: _Caps
    ) -> SummaryResult:
        prev = parse_sections(previous)
        requests = _bullets(prev.get(HEADINGS[0], []))
        req_dropped = _omitted(prev.get(HEADINGS[0], []))
        errors = _bullets(prev.get(HEADINGS[3], []))
        err_dropped = _omitted(prev.get(HEADINGS[3], []))
        files = _bullets(prev.get(HEADINGS[5], []))
        file_dropped = _omitted(prev.get(HEADINGS[5], []))
        tools: Counter[str] = Counter()
        condensed = 0
        for line in prev.get(HEADINGS[1], []):
            m = _TOOLS_RE.match(line)
            if m:
                tools.update({n: int(c) for n, c in _TOOL_COUNT_RE.findall(m.group(1))})
            m2 = re.match(r"^- (\d+) messages condensed", line)
            if m2:
                condensed = int(m2.group(1))
        last_assistant: tuple[int, str] | None = None
        first_seq = last_seq = None

        for stored in events:
            msg = stored.event
            if not isinstance(msg, Message):
                continue
            condensed += 1
            first_seq = stored.seq if first_seq is None else first_seq
            last_seq = stored.seq
            if msg.role == "user" and msg.text.strip():
                quoted = clip(msg.text.strip(), caps.request_chars).replace("\n", "\n  ")
                requests.append(f"- [{stored.seq}] {quoted}")
            for part in msg.parts:
                if isinstance(part, ToolCallPart):
                    tools[part.name] += 1
                    files.extend(f"- {p}" for p in _paths_in_call(part))
                elif isinstance(part, ToolResultPart):
                    err_line = _error_line(part.output)
                    if part.is_error or part.state != "completed" or err_line:
                        what = err_line or clip(part.output.strip(), 240) or part.state
                        errors.append(f"- [{stored.seq}] {part.name or 'tool'}: {what}")
            if msg.role == "user":
                err_line = _error_line(msg.text)
                if err_line:
                    errors.append(f"- [{stored.seq}] {err_line}")
            if msg.role == "assistant" and (msg.text.strip() or msg.tool_calls):
                calls = ", ".join(f"{c.name}({clip(c.arguments, 200)})" for c in msg.tool_calls)
                text = msg.text.strip()
                body = text + (f"\n  calls: {calls}" if calls else "")
                last_assistant = (stored.seq, body)

        files = list(dict.fromkeys(files))
        sections: dict[str, list[str]] = {}
        sections[HEADINGS[0]] = _bounded(
            requests, 1, caps.max_requests, "earlier requests", req_dropped
        )
        if focus:
            sections[HEADINGS[0]].append(f"- focus requested: {focus}")
        done = [f"- {condensed} messages condensed so far"]
        if tools:
            done.append("- tools called: " + ", ".join(f"{n} x{c}" for n, c in tools.most_common()))
        prev_progress = prev.get(HEADINGS[1], [])
        in_progress = [ln for ln in _after(prev_progress, "In progress:") if ln.startswith("- ")]
        if last_assistant is not None:
            # One line only: the full quote is under "Current state".
            first_line = last_assistant[1].strip().splitlines()[0] if last_assistant[1] else ""
            in_progress = [f"- at [{last_assistant[0]}]: {first_line[:160]}"]
        sections[HEADINGS[1]] = ["Done:", *done, "In progress:", *(in_progress or [_NONE])]
        sections[HEADINGS[2]] = _bullets(prev.get(HEADINGS[2], [])) or [_NONE]
        sections[HEADINGS[3]] = _bounded(errors, 0, caps.max_errors, "earlier errors", err_dropped)
        if last_assistant is not None:
            quoted = clip(last_assistant[1], caps.last_message_chars).replace("\n", "\n  ")
            state = [f"- last assistant message [{last_assistant[0]}]: {quoted}"]
        else:
            state = prev.get(HEADINGS[4], []) or [_NONE]
        sections[HEADINGS[4]] = state
        sections[HEADINGS[5]] = _bounded(files, caps.max_files, 0, "more files", file_dropped)
        nxt = f"- continue from the conversation below (condensed through seq {last_seq})"
        if last_seq is None:
            nxt = (prev.get(HEADINGS[6]) or [_NONE])[0]
        sections[HEADINGS[6]] = [nxt]
        text = "\n\n".join(f"## {h}\n" + "\n".join(sections[h]) for h in HEADINGS)
        return SummaryResult(
            text=text,
            notes=[f"events {first_seq}-{last_seq}"] if first_seq is not None else [],
        )


def _after(lines: list[str], marker: str) -> list[str]:
    for i, ln in enumerate(lines):
        if ln.strip() == marker:
            return lines[i + 1 :]
    return []
