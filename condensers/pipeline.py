"""Pipelines: run strategies cheapest first until the view is under its target.

Each step plans against a fresh view and its proposal is appended with
``expected_seq=view.seq``; when another writer got there first the step plans again on
the new view (up to ``max_conflicts`` times) instead of writing something stale.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eventstore.errors import ConflictError
from eventstore.events import Condensation, Usage

from .base import Condenser, PlanContext, Proposal, apply, apply_async
from .pruning import ObservationMasker, ToolOutputPruner
from .summarizing import ExtractiveCondenser, LLMSummaryCondenser, SummarizingCondenser
from .window import WindowCondenser

if TYPE_CHECKING:
    from eventstore.budget import Budget
    from eventstore.store import AsyncEventStore, EventStore
    from eventstore.views import View, ViewOptions

__all__ = ["Pipeline", "StepRecord", "Outcome", "default_pipeline"]


@dataclass
class StepRecord:
    """One event a pipeline step wrote."""

    condenser: str
    """Strategy name."""
    seq: int
    """Seq of the written event."""
    kind: str
    """``prune`` or ``condensation``."""
    tokens_before: int
    """View tokens before the step (as measured on the view it planned against)."""
    tokens_after: int
    """View tokens after the step (re-measured on the new view)."""
    latency_ms: float
    """Planning time (summaries included)."""
    usage: Usage | None = None
    """Summary model usage, if a model was called."""
    cost: float | None = None
    """Summary cost in USD (``None`` when unpriced)."""
    notes: list[str] = field(default_factory=list)
    """Fallbacks and retries that happened."""


@dataclass
class Outcome:
    """What a condensation run did."""

    session_id: str
    """The session."""
    trigger: str | None
    """What started it (``None`` when nothing needed doing)."""
    tokens_before: int
    """View tokens at the start."""
    tokens_after: int
    """View tokens at the end."""
    target: int
    """The target the run aimed for."""
    available: int
    """The budget's available tokens."""
    steps: list[StepRecord] = field(default_factory=list)
    """Events written, in order."""
    view: View | None = None
    """The final view."""
    skipped: str | None = None
    """Why nothing ran (for example ``circuit_open``)."""
    error: str | None = None
    """An error that stopped the run (the log is intact)."""
    conflicts: int = 0
    """Re-plans caused by concurrent appends."""

    @property
    def fits(self) -> bool:
        """Whether the final view fits the budget."""
        return self.tokens_after <= self.available

    @property
    def condensed(self) -> bool:
        """Whether any event was written."""
        return bool(self.steps)


def _record(proposal: Proposal, seq: int, after: int) -> StepRecord:
    evt = proposal.event
    usage = evt.usage if isinstance(evt, Condensation) else None
    cost = evt.cost if isinstance(evt, Condensation) else 0.0
    return StepRecord(
        condenser=proposal.condenser,
        seq=seq,
        kind=evt.kind,
        tokens_before=proposal.tokens_before,
        tokens_after=after,
        latency_ms=proposal.latency_ms,
        usage=usage,
        cost=cost,
        notes=list(proposal.notes),
    )


class Pipeline:
    """Strategies tried in order, cheapest first; stops once the view is under target.

    With ``ctx.force`` (a manual request or an overflow) the target check is skipped and
    the run stops after the first condensation written instead.

    Args:
        steps: The strategies, cheapest first.
        target_fraction: Target view size as a fraction of the budget (when the context
            has no explicit target).
        max_conflicts: Re-plans allowed per step after concurrent appends.
    """

    name = "pipeline"

    def __init__(
        self,
        steps: Sequence[Condenser],
        *,
        target_fraction: float = 0.5,
        max_conflicts: int = 3,
    ) -> None:
        if not steps:
            raise ValueError("a pipeline needs at least one step")
        self.steps = list(steps)
        self.target_fraction = target_fraction
        self.max_conflicts = max_conflicts

    def settings(self) -> dict[str, Any]:
        return {
            "steps": [s.name for s in self.steps],
            "target_fraction": self.target_fraction,
        }

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        """The first step's proposal that is not ``None`` (one event, not a whole run)."""
        for step in self.steps:
            proposal = step.plan(view, budget, ctx)
            if proposal is not None:
                return proposal
        return None

    def summarizing_steps(self) -> list[Condenser]:
        """Steps that write summaries (what a manual request runs), else the last step."""
        found = [s for s in self.steps if isinstance(s, SummarizingCondenser)]
        return found or [self.steps[-1]]

    # -- running

    def run(
        self,
        store: EventStore,
        session_id: str,
        budget: Budget,
        ctx: PlanContext,
        *,
        options: ViewOptions | None = None,
        steps: Sequence[Condenser] | None = None,
        view: View | None = None,
    ) -> Outcome:
        """Plan and append step by step until the view is under target."""
        view = view or store.view(session_id, options=options)
        target = ctx.target(budget, self.target_fraction)
        out = Outcome(session_id, ctx.trigger, view.tokens, view.tokens, target, budget.available)
        for step in steps or self.steps:
            if not ctx.force and view.tokens <= target:
                break
            for _ in range(self.max_conflicts + 1):
                proposal = step.plan(view, budget, ctx)
                if proposal is None:
                    break
                try:
                    seq = apply(store, view, proposal)
                except ConflictError:
                    out.conflicts += 1
                    view = store.view(session_id, options=options)
                    continue
                view = store.view(session_id, options=options)
                out.steps.append(_record(proposal, seq, view.tokens))
                break
            if ctx.force and any(s.kind == "condensation" for s in out.steps):
                break
        out.tokens_after = view.tokens
        out.view = view
        return out

    async def arun(
        self,
        store: AsyncEventStore,
        session_id: str,
        budget: Budget,
        ctx: PlanContext,
        *,
        options: ViewOptions | None = None,
        steps: Sequence[Condenser] | None = None,
        view: View | None = None,
    ) -> Outcome:
        """The asyncio twin of :meth:`run`. Planning (which may call a model) runs in a
        worker thread so the event loop stays free."""
        view = view or await store.view(session_id, options=options)
        target = ctx.target(budget, self.target_fraction)
        out = Outcome(session_id, ctx.trigger, view.tokens, view.tokens, target, budget.available)
        for step in steps or self.steps:
            if not ctx.force and view.tokens <= target:
                break
            for _ in range(self.max_conflicts + 1):
                proposal = await asyncio.to_thread(step.plan, view, budget, ctx)
                if proposal is None:
                    break
                try:
                    seq = await apply_async(store, view, proposal)
                except ConflictError:
                    out.conflicts += 1
                    view = await store.view(session_id, options=options)
                    continue
                view = await store.view(session_id, options=options)
                out.steps.append(_record(proposal, seq, view.tokens))
                break
            if ctx.force and any(s.kind == "condensation" for s in out.steps):
                break
        out.tokens_after = view.tokens
        out.view = view
        return out


def default_pipeline(
    model: str | None = None,
    *,
    target_fraction: float = 0.5,
    **summary_kwargs: Any,
) -> Pipeline:
    """Cheap and reversible first, lossy last.

    1. :class:`ToolOutputPruner` (OpenCode defaults, scaled to the budget),
    2. :class:`ObservationMasker` (a window of the 10 newest tool results),
    3. a summary: :class:`LLMSummaryCondenser` with ``model`` (falling back to the
       extractive summary on any failure), or :class:`ExtractiveCondenser` offline,
    4. :class:`WindowCondenser` as the last guard when the summary alone cannot reach
       the target (it carries the summary forward).

    Args:
        model: Summary model; ``None`` keeps everything offline and free.
        target_fraction: Target view size after a run, as a fraction of the budget.
        **summary_kwargs: Passed to the summary condenser (``api_base``, ``window``...).
    """
    summary: Condenser
    if model:
        summary = LLMSummaryCondenser(model, target_fraction=target_fraction, **summary_kwargs)
    else:
        summary = ExtractiveCondenser(target_fraction=target_fraction, **summary_kwargs)
    return Pipeline(
        [
            ToolOutputPruner(),
            ObservationMasker(),
            summary,
            WindowCondenser(target_fraction=target_fraction),
        ],
        target_fraction=target_fraction,
    )
