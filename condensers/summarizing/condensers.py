"""The summary condensers: replace the forgotten middle with a structured summary.

The summary is anchored: the summarizer sees the summary currently in the view plus only
the events this condensation newly forgets, and returns one summary covering both. The
forgotten range always starts right after the pinned head, so each condensation alone
defines its view.

When a model-backed summarizer fails (rate limit, timeout, context overflow, a summary
without the template's headings even after a retry, or any other error) the condenser
falls back to the deterministic :class:`~.extractive.ExtractiveSummarizer` and
records that it did. A summary that does not make the view smaller is never written.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from eventstore.errors import ConfigurationError

from ..base import (
    PlanContext,
    Proposal,
    choose_cut,
    condensation_for,
    fit_summary,
    newly_forgotten,
    previous_condensation,
    summary_room,
)
from . import rehydrate
from .extractive import ExtractiveSummarizer
from .llm import LLMSummarizer
from .protocol import Summarizer, SummaryResult

if TYPE_CHECKING:
    from eventstore.budget import Budget
    from eventstore.views import View

__all__ = ["SummarizingCondenser", "LLMSummaryCondenser", "ExtractiveCondenser"]


class SummarizingCondenser:
    """Forget the oldest unpinned messages and summarize them into the previous summary.

    Args:
        summarizer: Writes the summary.
        fallback: Used when ``summarizer`` raises (``None``: propose nothing instead).
        target_fraction: View size after condensing, as a fraction of the budget (when the
            plan context gives no explicit target).
        summary_fraction: Share of the target set aside for the summary when choosing how
            much to keep.
        min_forget_events: Fewest messages a condensation must forget to be written.
        min_keep: Newest messages always kept (when a valid cut allows it).
        rehydrate_files: After summarizing, keep the newest output of this many files
            read or changed in what was forgotten, in a section after the summary
            (post-compaction rehydration; see :mod:`.rehydrate`). 0: none.
        rehydrate_tokens: About how many tokens each such output may take (head and
            tail, with the ``recall`` reference of the whole output).
    """

    def __init__(
        self,
        summarizer: Summarizer,
        *,
        fallback: Summarizer | None = None,
        target_fraction: float = 0.5,
        summary_fraction: float = 0.25,
        min_forget_events: int = 2,
        min_keep: int = 1,
        rehydrate_files: int = 0,
        rehydrate_tokens: int = 500,
    ) -> None:
        if not 0 < target_fraction <= 1:
            raise ConfigurationError(f"target_fraction must be in (0, 1], got {target_fraction}")
        self.summarizer = summarizer
        self.fallback = fallback
        self.target_fraction = target_fraction
        self.summary_fraction = summary_fraction
        self.min_forget_events = max(min_forget_events, 1)
        self.min_keep = min_keep
        if rehydrate_files < 0 or rehydrate_tokens < 16:
            raise ConfigurationError(
                "rehydrate_files must not be negative and rehydrate_tokens must be at least "
                f"16, got {rehydrate_files} and {rehydrate_tokens}"
            )
        self.rehydrate_files = rehydrate_files
        self.rehydrate_tokens = rehydrate_tokens
        self.name = summarizer.name

    def settings(self) -> dict[str, Any]:
        return {
            "summarizer": self.summarizer.settings(),
            "fallback": self.fallback.name if self.fallback else None,
            "target_fraction": self.target_fraction,
            "summary_fraction": self.summary_fraction,
            "min_forget_events": self.min_forget_events,
            "min_keep": self.min_keep,
            "rehydrate_files": self.rehydrate_files,
            "rehydrate_tokens": self.rehydrate_tokens,
        }

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        started = time.perf_counter()
        prev = previous_condensation(view)
        target = ctx.target(budget, self.target_fraction)
        reserve = max(int(target * self.summary_fraction), 64)
        forget = choose_cut(view, self.keep_tokens(view, budget, ctx), min_keep=self.min_keep)
        if forget < self.min_forget_events:
            return None
        # When the pinned head and the kept tail leave less room than planned (a large
        # system prompt on a small model), the summary gets only what is left.
        room = summary_room(view, forget, budget, ctx)
        reserve = max(min(reserve, room), 64)
        events = newly_forgotten(view, forget)
        previous = (prev.carried or prev.summary) if prev is not None else None
        # The file section is not summarized: it is rebuilt after the summary.
        previous, files_before = rehydrate.split(previous)
        notes: list[str] = []
        used: Summarizer = self.summarizer
        settings = self.settings()
        try:
            result = self._summarize(self.summarizer, previous, events, ctx, reserve)
        except Exception as exc:  # any failure falls back; the log is never touched
            if self.fallback is None:
                return None
            reason = f"{type(exc).__name__}: {str(exc)[:300]}"
            notes.append(f"{self.summarizer.name} failed, fell back to {self.fallback.name}")
            settings = {**settings, "fallback_from": self.summarizer.name, "error": reason}
            used = self.fallback
            result = self._summarize(self.fallback, previous, events, ctx, reserve)
            spent = getattr(exc, "spent", None)
            if spent is not None:
                # The failed model calls still cost something: record it on the event.
                settings["failed_calls"] = spent.calls
                result.usage, result.cost = spent.usage, spent.cost
                result.model = None
        notes.extend(result.notes)
        files = rehydrate.section(
            files_before,
            events,
            [i.stored for i in view.items if not i.pinned][forget:],
            files=self.rehydrate_files,
            tokens=self.rehydrate_tokens,
        )
        if files:
            result.text = f"{result.text.rstrip()}\n\n{files}"
        room = summary_room(view, forget, budget, ctx)
        text = fit_summary(result.text, room, ctx.token_counter, slack=budget.buffer)
        whole = result.text
        if isinstance(used, ExtractiveSummarizer):
            # Sized down to the room, the lists lose entries: the next summary builds on
            # the whole one (bounded by the summarizer's own caps), so no fact is lost
            # for good to one tight moment.
            whole = used.summarize(previous, events, focus=ctx.focus).text
            whole = f"{whole.rstrip()}\n\n{files}" if files else whole
        extra: dict[str, Any] = {}
        if text != result.text:
            notes.append("summary shortened to fit the budget")
        if text != whole:
            extra["carried"] = whole
        evt, after = condensation_for(
            view,
            forget,
            summary=text,
            condenser=used.name,
            settings=settings,
            ctx=ctx,
            summary_model=result.model,
            template_version=result.template_version,
            usage=result.usage,
            cost=_cost(result),
            **extra,
        )
        if after >= view.tokens:
            # Summary rejected: it would not shrink the view.
            return None
        return Proposal(
            event=evt,
            condenser=used.name,
            tokens_before=view.tokens,
            tokens_after=after,
            view_seq=view.seq,
            latency_ms=(time.perf_counter() - started) * 1000,
            notes=notes,
        )

    def keep_tokens(self, view: View, budget: Budget, ctx: PlanContext) -> int:
        """Tokens of the newest unpinned messages a condensation of ``view`` keeps (at
        least the newest message group, whatever this says): the target less the pinned
        head and the share set aside for the summary."""
        target = ctx.target(budget, self.target_fraction)
        pinned = sum(i.tokens for i in view.items if i.pinned)
        return target - pinned - max(int(target * self.summary_fraction), 64)

    @staticmethod
    def _summarize(
        summarizer: Summarizer,
        previous: str | None,
        events: list[Any],
        ctx: PlanContext,
        reserve: int,
    ) -> SummaryResult:
        if isinstance(summarizer, ExtractiveSummarizer):
            # The extractive summary can be sized exactly; a model's reply is capped by
            # its own max_output_tokens instead.
            return summarizer.summarize(
                previous,
                events,
                focus=ctx.focus,
                limit_tokens=reserve,
                token_counter=ctx.token_counter,
            )
        return summarizer.summarize(previous, events, focus=ctx.focus)


#: The extractive summary's default share of the target (see :class:`ExtractiveCondenser`).
EXTRACTIVE_SUMMARY_FRACTION = 0.5

#: The :class:`SummarizingCondenser` arguments the ready-made forms take by keyword.
_OWN = (
    "target_fraction",
    "summary_fraction",
    "min_forget_events",
    "min_keep",
    "rehydrate_files",
    "rehydrate_tokens",
)


def _cost(result: SummaryResult) -> float | None:
    # A model call that could not be priced records None; no model call costs nothing.
    if result.usage is None and result.model is None:
        return 0.0
    return result.cost


class LLMSummaryCondenser(SummarizingCondenser):
    """A :class:`SummarizingCondenser` with an :class:`LLMSummarizer` and the extractive
    fallback.

    Args:
        model: The summary model (may be cheaper than the agent's).
        **kwargs: ``LLMSummarizer`` arguments (``api_base``, ``window``, ``call_kwargs``...)
            and ``SummarizingCondenser`` arguments (``target_fraction``...).
    """

    def __init__(self, model: str, **kwargs: Any) -> None:
        own = {k: kwargs.pop(k) for k in _OWN if k in kwargs}
        fallback = kwargs.pop("fallback", ExtractiveSummarizer())
        super().__init__(LLMSummarizer(model, **kwargs), fallback=fallback, **own)


class ExtractiveCondenser(SummarizingCondenser):
    """A :class:`SummarizingCondenser` with the deterministic extractive summarizer.

    Its summary gets half of the target by default (``summary_fraction=0.5``), not a
    quarter: it is made of inventories (files, commands, errors) that cost a few tokens an
    entry and are complete only while they fit, where the verbatim tail they replace is
    mostly tool output that the pruners shorten anyway.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("summary_fraction", EXTRACTIVE_SUMMARY_FRACTION)
        own = {k: kwargs.pop(k) for k in _OWN if k in kwargs}
        super().__init__(ExtractiveSummarizer(**kwargs), fallback=None, **own)
