"""The model-backed summarizer: a summary written by a model through litellm.

:class:`LLMSummarizer` is anchored on the previous summary and fed only the newly
forgotten events (with full content, tool arguments included). The reply must carry every
template heading; one corrective retry is allowed. When the events do not fit the
summarizer's own window they are split into chunks that are folded into the running
summary one after another. Usage and cost are summed over every call, and a failure
raises :class:`SummaryError` carrying what the failed calls cost, so the condenser can
fall back and still record it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from eventstore import llm
from eventstore.errors import EventStoreError
from eventstore.events import Usage
from eventstore.records import StoredEvent
from eventstore.tokens import HeuristicTokenCounter, TokenCounter

from .protocol import SummaryResult
from .template import (
    DEFAULT_EVENT_CHARS,
    clip,
    missing_headings,
    render_event,
    retry_message,
    summary_messages,
)

__all__ = ["LLMSummarizer", "SummaryError"]


class SummaryError(EventStoreError):
    """A summarizer could not produce a valid summary (the condenser falls back).

    The message names the cause and how to fix it. Nothing was written to the store.

    Attributes:
        spent: Usage and cost of the model calls made before giving up, if any.
    """

    def __init__(self, message: str, spent: SummaryResult | None = None) -> None:
        super().__init__(message)
        self.spent = spent


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
            try:
                info = llm.model_info(self.model)
            except LookupError:
                raise SummaryError(
                    f"litellm has no window for summary model {self.model!r}; pass "
                    "LLMSummarizer(..., window=N) with its input window in tokens, or describe "
                    "the model with litellm.register_model(...)"
                ) from None
            size = info.get("max_input_tokens") or info.get("max_tokens")
            if not size:
                raise SummaryError(
                    f"litellm's entry for summary model {self.model!r} has no max_input_tokens; "
                    "pass LLMSummarizer(..., window=N) with its input window in tokens"
                )
            self._window = int(size)
        return self._window

    # -- calls

    def _complete(self, messages: list[dict[str, str]]) -> tuple[str, Any]:
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
        response = llm.completion(**kwargs)
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
                    f"summary from {self.model} lacks headings after one retry: {missing}; "
                    "use a summary model that follows the template, or raise "
                    "max_output_tokens if its replies are cut off"
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
            raise SummaryError(f"{type(exc).__name__}: {exc}; {self._fix_for(exc)}", spent) from exc
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
        prompt = max(fixed, self._fixed_floor())
        room = int(self.window * 0.9) - self.max_output_tokens - prompt
        if room < 64:
            raise SummaryError(
                f"summary model window {self.window} leaves no room for events (reply "
                f"{self.max_output_tokens}, prompt and running summary {prompt} tokens); pass "
                "a smaller max_output_tokens or use a summary model with a larger window"
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

    def _fix_for(self, exc: BaseException) -> str:
        """The fix appended to the message of a failed summary call."""
        if llm.is_context_window_error(exc):
            return (
                f"the prompt overflowed {self.model}: pass LLMSummarizer(..., window=N) with a "
                "smaller N so the events are split into smaller chunks"
            )
        return (
            f"check the summary model name {self.model!r}, its api_base and api_key; rate "
            "limits and timeouts usually pass on a later attempt"
        )

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
        usage = llm.usage_of(response)
        if usage is not None:
            self.seen_usage = True
            self.prompt += int(usage["prompt_tokens"] or 0)
            self.completion += int(usage["completion_tokens"] or 0)
        cost = llm.response_cost(response, model)
        self.cost = None if cost is None or self.cost is None else self.cost + cost

    def usage(self) -> Usage | None:
        if not self.seen_usage:
            return None
        return Usage(prompt_tokens=self.prompt, completion_tokens=self.completion)
