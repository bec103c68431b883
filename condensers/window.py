"""Window condensation: keep the pinned head and a tail, forget the middle, no model call.

Like the sliding windows of Strands, Streetrace or DSPy, but nothing is deleted: the
forgotten events stay in the log, the condensation says how many there were, and the
previous summary (if any) is carried forward so the latest condensation alone still
defines the view.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from eventstore.errors import ConfigurationError

from .base import (
    PlanContext,
    Proposal,
    choose_cut,
    condensation_for,
    fit_summary,
    previous_condensation,
    summary_room,
)

if TYPE_CHECKING:
    from eventstore.budget import Budget
    from eventstore.views import View

__all__ = ["WindowCondenser", "trim_note"]

_NOTE_RE = re.compile(r"\n*\[Context trimmed: \d+ earlier events are omitted from this view\.\]$")


def trim_note(total: int) -> str:
    """The line a window condensation adds to the summary."""
    return f"[Context trimmed: {total} earlier events are omitted from this view.]"


def _carry(summary: str | None, total: int) -> str:
    base = _NOTE_RE.sub("", summary or "").rstrip()
    note = trim_note(total)
    return f"{base}\n\n{note}" if base else note


class WindowCondenser:
    """Forget the oldest unpinned messages until the view is at the target size.

    Args:
        target_fraction: Size of the view after condensing, as a fraction of the budget
            (used when the plan context gives no explicit target).
        min_forget_events: Fewest messages a condensation must forget to be written.
        min_keep: Newest messages always kept (when a valid cut allows it).
    """

    name = "window"

    def __init__(
        self, *, target_fraction: float = 0.5, min_forget_events: int = 1, min_keep: int = 1
    ) -> None:
        if not 0 < target_fraction <= 1:
            raise ConfigurationError(f"target_fraction must be in (0, 1], got {target_fraction}")
        self.target_fraction = target_fraction
        self.min_forget_events = max(min_forget_events, 1)
        self.min_keep = min_keep

    def settings(self) -> dict[str, Any]:
        return {
            "target_fraction": self.target_fraction,
            "min_forget_events": self.min_forget_events,
            "min_keep": self.min_keep,
        }

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        started = time.perf_counter()
        prev = previous_condensation(view)
        target = ctx.target(budget, self.target_fraction)
        pinned = sum(i.tokens for i in view.items if i.pinned)
        # The carried summary is about as large as the current one.
        keep = target - pinned - view.summary_tokens - 16
        forget = choose_cut(view, keep, min_keep=self.min_keep)
        if forget < self.min_forget_events:
            return None
        previously = prev.forgotten_events if prev is not None else 0
        # Count the events the new range holds (messages and bookkeeping alike).
        evt, after = condensation_for(
            view,
            forget,
            summary=None,
            condenser=self.name,
            settings=self.settings(),
            ctx=ctx,
        )
        summary = fit_summary(
            _carry(prev.summary if prev else None, max(evt.forgotten_events, previously)),
            summary_room(view, forget, budget, ctx),
            ctx.token_counter,
        )
        evt, after = condensation_for(
            view,
            forget,
            summary=summary,
            condenser=self.name,
            settings=self.settings(),
            ctx=ctx,
            cost=0.0,
        )
        if after >= view.tokens:
            return None
        return Proposal(
            event=evt,
            condenser=self.name,
            tokens_before=view.tokens,
            tokens_after=after,
            view_seq=view.seq,
            latency_ms=(time.perf_counter() - started) * 1000,
        )
