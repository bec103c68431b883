"""Summarizers: turn the previous summary plus newly forgotten events into a new summary.

Two implementations share the :class:`Summarizer` protocol and the template in
:mod:`condensers.template`:

* :class:`ExtractiveSummarizer` is deterministic and free: it copies user requests, counts
  tool calls, lists errors and file paths, and quotes the last assistant message. It is the
  offline default and the fallback whenever a model call fails.
* :class:`LLMSummarizer` asks a model through litellm, anchored on the previous summary and
  fed only the newly forgotten events (with full content, tool arguments included). The
  reply must carry every template heading; one corrective retry is allowed. When the
  events do not fit the summarizer's own window they are split into chunks that are folded
  into the running summary one after another.

Summarizers never touch the store; a condenser decides what to forget and writes the event.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from eventstore.events import Message, ToolCallPart, ToolResultPart, Usage
from eventstore.records import StoredEvent
from eventstore.tokens import HeuristicTokenCounter, TokenCounter

from .template import (
    DEFAULT_EVENT_CHARS,
    HEADINGS,
    TEMPLATE_VERSION,
    clip,
    missing_headings,
    render_event,
    retry_message,
    summary_messages,
)

__all__ = [
    "Summarizer",
    "SummaryResult",
    "SummaryError",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "parse_sections",
]


class SummaryError(Exception):
    """A summarizer could not produce a valid summary (the caller falls back).

    Attributes:
        spent: Usage and cost of the model calls made before giving up, if any.
    """

    def __init__(self, message: str, spent: SummaryResult | None = None) -> None:
        super().__init__(message)
        self.spent = spent


@dataclass
class SummaryResult:
    """A summary and what it cost to make."""

    text: str
    """The summary, in the structured template."""
    model: str | None = None
    """The model that wrote it (``None`` for extractive summaries)."""
    template_version: str = TEMPLATE_VERSION
    """Template the summary follows."""
    usage: Usage | None = None
    """Tokens used over all calls (``None`` when no model was called)."""
    cost: float | None = None
    """USD over all calls; ``None`` when any call could not be priced."""
    calls: int = 0
    """Model calls made (retries and chunks included)."""
    chunks: int = 1
    """How many pieces the events were split into."""
    latency_ms: float = 0.0
    """Wall time spent."""
    notes: list[str] = field(default_factory=list)
    """What happened on the way (retries, truncation)."""


@runtime_checkable
class Summarizer(Protocol):
    """Anything that folds newly forgotten events into the previous summary."""

    name: str

    def settings(self) -> dict[str, Any]:
        """Settings recorded on the condensation event."""
        ...

    def summarize(
        self,
        previous: str | None,
        events: Sequence[StoredEvent],
        *,
        focus: str | None = None,
    ) -> SummaryResult:
        """A new summary of ``previous`` plus ``events``; raises :class:`SummaryError`."""
        ...


# --------------------------------------------------------------------------- parsing

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


# --------------------------------------------------------------------------- extractive

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
                    line = _error_line(part.output)
                    if part.is_error or part.state != "completed" or line:
                        what = line or clip(part.output.strip(), 240) or part.state
                        errors.append(f"- [{stored.seq}] {part.name or 'tool'}: {what}")
            if msg.role == "user":
                line = _error_line(msg.text)
                if line:
                    errors.append(f"- [{stored.seq}] {line}")
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


# --------------------------------------------------------------------------- LLM

CallKwargs = dict[str, Any] | Callable[[int], dict[str, Any]]


class LLMSummarizer:
    """A summary written by a model through ``litellm.completion``.

    Args:
        model: litellm model name (for example a cheaper model than the agent's).
        api_base: Endpoint override (an OpenAI-compatible server).
        api_key: Key for that endpoint.
        window: The summarizer's input window in tokens; default from
            ``litellm.get_model_info(model)``. Events that do not fit are chunked.
        max_output_tokens: Cap on each reply.
        event_chars: Per-event character cap when rendering events (start and end kept).
        timeout: Seconds per call.
        temperature: Sampling temperature.
        token_counter: Counts prompt tokens against ``window``; the default (three
            characters per token) errs on the side of smaller chunks.
        call_kwargs: Extra ``litellm.completion`` arguments, or a function of the call
            number (0, 1, ... counted over this summarizer's lifetime) returning them.
    """

    name = "llm_summary"

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        window: int | None = None,
        max_output_tokens: int = 1024,
        event_chars: int = DEFAULT_EVENT_CHARS,
        timeout: float = 120.0,
        temperature: float = 0.0,
        token_counter: TokenCounter | None = None,
        call_kwargs: CallKwargs | None = None,
    ) -> None:
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self._window = window
        self.max_output_tokens = max_output_tokens
        self.event_chars = event_chars
        self.timeout = timeout
        self.temperature = temperature
        self.counter = token_counter or HeuristicTokenCounter(chars_per_token=3.0)
        self.call_kwargs = call_kwargs
        self._calls = 0

    def settings(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "window": self._window,
            "max_output_tokens": self.max_output_tokens,
            "event_chars": self.event_chars,
            "temperature": self.temperature,
            "timeout": self.timeout,
        }

    @property
    def window(self) -> int:
        """The summarizer's input window in tokens."""
        if self._window is None:
            from eventstore.tokens import import_litellm

            litellm = import_litellm()
            try:
                info = litellm.get_model_info(self.model)
            except Exception as exc:
                raise SummaryError(
                    f"litellm has no window for summary model {self.model!r}; pass "
                    f"LLMSummarizer(..., window=N) or litellm.register_model(...) ({exc})"
                ) from None
            size = info.get("max_input_tokens") or info.get("max_tokens")
            if not size:
                raise SummaryError(f"no max_input_tokens for {self.model!r}; pass window=N")
            self._window = int(size)
        return self._window

    # -- calls

    def _complete(self, messages: list[dict[str, str]]) -> tuple[str, Any]:
        from eventstore.tokens import import_litellm

        litellm = import_litellm()
        extra = self.call_kwargs(self._calls) if callable(self.call_kwargs) else self.call_kwargs
        self._calls += 1
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "timeout": self.timeout,
        }
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key:
            kwargs["api_key"] = self.api_key
        kwargs.update(extra or {})
        response = litellm.completion(**kwargs)
        content = response.choices[0].message.content or ""
        return content.strip(), response

    def _one(self, previous: str | None, text: str, focus: str | None, acc: _Accumulator) -> str:
        messages = summary_messages(previous, text, focus=focus)
        summary, response = self._complete(messages)
        acc.add(response, self.model)
        missing = missing_headings(summary)
        if missing:
            acc.notes.append(f"retry: missing {len(missing)} headings")
            reply = {"role": "assistant", "content": summary}
            messages = [*messages, reply, retry_message(missing)]
            summary, response = self._complete(messages)
            acc.add(response, self.model)
            missing = missing_headings(summary)
            if missing:
                raise SummaryError(
                    f"summary from {self.model} lacks headings after one retry: {missing}"
                )
        return summary

    def summarize(
        self,
        previous: str | None,
        events: Sequence[StoredEvent],
        *,
        focus: str | None = None,
    ) -> SummaryResult:
        started = time.perf_counter()
        acc = _Accumulator()
        chunks = self._chunks(previous, events, focus)
        summary = previous
        try:
            for chunk in chunks:
                summary = self._one(summary, chunk, focus, acc)
        except Exception as exc:
            # Keep what the failed attempt cost so the condensation can still record it.
            spent = None
            if acc.calls:
                spent = SummaryResult(
                    text="",
                    model=self.model,
                    usage=acc.usage(),
                    cost=acc.cost,
                    calls=acc.calls,
                    chunks=len(chunks),
                    latency_ms=(time.perf_counter() - started) * 1000,
                    notes=acc.notes,
                )
            if isinstance(exc, SummaryError):
                exc.spent = spent
                raise
            raise SummaryError(f"{type(exc).__name__}: {exc}", spent) from exc
        if len(chunks) > 1:
            acc.notes.append(f"chunked into {len(chunks)} parts")
        return SummaryResult(
            text=summary or "",
            model=self.model,
            usage=acc.usage(),
            cost=acc.cost,
            calls=acc.calls,
            chunks=len(chunks),
            latency_ms=(time.perf_counter() - started) * 1000,
            notes=acc.notes,
        )

    def _chunks(
        self, previous: str | None, events: Sequence[StoredEvent], focus: str | None
    ) -> list[str]:
        """Rendered events split so that each prompt fits the summarizer's window.

        Room for a chunk is the window minus the reply, the fixed prompt and the running
        summary (which can grow up to the reply size), with a tenth kept as a margin.
        """
        base = summary_messages(previous, "", focus=focus)
        fixed = sum(self.counter.count(m["content"]) + 4 for m in base)
        room = int(self.window * 0.9) - self.max_output_tokens - max(fixed, self._fixed_floor())
        if room < 64:
            raise SummaryError(
                f"summary model window {self.window} leaves no room for events "
                f"(reply {self.max_output_tokens}, prompt {fixed} tokens)"
            )
        # One event may not take more than the room: cap its characters accordingly.
        chars_per_token = max(len("x" * 300) / max(self.counter.count("x" * 300), 1), 1.0)
        cap = min(self.event_chars, int(room * chars_per_token * 0.95))
        chunks: list[str] = []
        current: list[str] = []
        used = 0
        for stored in events:
            text = render_event(stored, cap)
            if len(text) > cap * 2:
                text = clip(text, cap)
            cost = self.counter.count(text) + 2
            if current and used + cost > room:
                chunks.append("\n\n".join(current))
                current, used = [], 0
            current.append(text)
            used += cost
        if current or not chunks:
            chunks.append("\n\n".join(current))
        return chunks

    def _fixed_floor(self) -> int:
        # The running summary replaces the previous one after the first chunk; it may be as
        # long as a full reply, so later chunks need that much room too.
        base = summary_messages(None, "", focus=None)
        return sum(self.counter.count(m["content"]) + 4 for m in base) + self.max_output_tokens


class _Accumulator:
    """Sums usage and cost over several calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.prompt = 0
        self.completion = 0
        self.seen_usage = False
        self.cost: float | None = 0.0
        self.notes: list[str] = []

    def add(self, response: Any, model: str) -> None:
        self.calls += 1
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.seen_usage = True
            self.prompt += int(getattr(usage, "prompt_tokens", 0) or 0)
            self.completion += int(getattr(usage, "completion_tokens", 0) or 0)
        cost = _price(response, model)
        self.cost = None if cost is None or self.cost is None else self.cost + cost

    def usage(self) -> Usage | None:
        if not self.seen_usage:
            return None
        return Usage(prompt_tokens=self.prompt, completion_tokens=self.completion)


def _price(response: Any, model: str) -> float | None:
    """The call's USD cost, or ``None`` when litellm cannot price it. Never raises."""
    try:
        from eventstore.tokens import import_litellm

        litellm = import_litellm()
        cost = litellm.completion_cost(completion_response=response, model=model)
    except Exception:
        return None
    return None if cost is None else float(cost)
