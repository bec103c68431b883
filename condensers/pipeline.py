"""Pipelines: run strategies cheapest first until the view is under its target.

A run reads the view once, plans every step on it in memory (each step sees the view as
the earlier steps' proposals will leave it), and appends all proposals in one append with
``expected_seq=view.seq``. When another writer got there first the run reads the new view
and plans again (up to ``max_conflicts`` times) instead of writing something stale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from eventstore import ConfigurationError, ConflictError
from eventstore.events import Condensation, Event, Usage
from eventstore.views import apply_event

from ._io import Routine, Work, adrive, append, drive, read_view
from .base import Condenser, PlanContext, Proposal
from .pruning import (
    HeadTruncator,
    NewestTruncator,
    ObservationMasker,
    ResultTruncator,
    ToolOutputPruner,
)
from .summarizing import ExtractiveCondenser, LLMSummaryCondenser, SummarizingCondenser
from .window import WindowCondenser

if TYPE_CHECKING:
    from eventstore.budget import Budget
    from eventstore.store import AsyncEventStore, EventStore
    from eventstore.views import View, ViewOptions

__all__ = ["Pipeline", "Planned", "StepRecord", "Outcome", "default_pipeline"]


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
    planned_on: View | None = None
    """The view the run planned against (after any re-read)."""
    real_tokens: int | None = None
    """The final view's size by a real tokenizer, when the run was checked with one (a
    :class:`~condensers.CondensationPolicy` counts the result of every run this way:
    see its ``real_counter``)."""

    @property
    def fits(self) -> bool:
        """Whether the final view fits the budget: by the stored estimates and, when
        counted, by the real tokenizer."""
        return max(self.tokens_after, self.real_tokens or 0) <= self.available

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
            raise ConfigurationError("a pipeline needs at least one step: Pipeline([step, ...])")
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
        """Steps that write summaries (what a manual request runs), else the last step;
        with the pipeline's head truncator before them, so that a manual request on a head
        that leaves the newest messages no room still ends in a view that fits (and the
        summary gets the room the cut leaves)."""
        found: list[Condenser] = [s for s in self.steps if isinstance(s, SummarizingCondenser)]
        base = found or [self.steps[-1]]
        return [s for s in self.steps if isinstance(s, HeadTruncator) and s not in base] + base

    # -- running

    def plan_all(
        self,
        view: View,
        budget: Budget,
        ctx: PlanContext,
        steps: Sequence[Condenser] | None = None,
    ) -> Planned:
        """Plan a whole run on ``view`` without reading or writing the store.

        Each step plans against the view as the previous steps will leave it (predicted by
        :func:`eventstore.views.apply_event`), until the view is under target (or, with
        ``ctx.force``, until a condensation is planned). The proposals are appended
        together, in order, with ``expected_seq=view.seq``.
        """
        target = ctx.target(budget, self.target_fraction)
        planned = Planned(view=view)
        steps = steps or self.steps
        if ctx.condensing and ctx.keep_tokens is None:
            summary = next((s for s in steps if isinstance(s, SummarizingCondenser)), None)
            if summary is not None:
                ctx = replace(ctx, keep_tokens=max(summary.keep_tokens(view, budget, ctx), 0))
        for step in steps:
            current = planned.view
            if not ctx.force and current.tokens <= target:
                break
            proposal = step.plan(current, budget, ctx)
            if proposal is None:
                continue
            try:
                after = apply_event(current, proposal.event, ctx.token_counter)
            except ValueError:
                break  # not predictable from this view: write what is planned, re-read next time
            planned.proposals.append(proposal)
            planned.view = after
            if ctx.force and proposal.event.kind == "condensation":
                break
        return planned

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
        """Plan every step on one view and append the result at once (see :meth:`plan_all`).

        One read (skipped when ``view`` is given) and one append; when another writer got
        there first the run re-reads and plans again, up to ``max_conflicts`` times.
        """
        return drive(self.routine(session_id, budget, ctx, options, steps, view), store)

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
        """:meth:`run` on an :class:`~eventstore.AsyncEventStore` (planning, which may call
        a summary model, runs in a worker thread)."""
        return await adrive(self.routine(session_id, budget, ctx, options, steps, view), store)

    def routine(
        self,
        session_id: str,
        budget: Budget,
        ctx: PlanContext,
        options: ViewOptions | None = None,
        steps: Sequence[Condenser] | None = None,
        view: View | None = None,
        *,
        extra: Callable[[Outcome], list[Event]] | None = None,
        catch: bool = False,
    ) -> Routine[Outcome]:
        """The run as a routine for :func:`condensers._io.drive` / ``adrive``.

        ``extra`` adds events (bookkeeping) to the same append, given the planned outcome;
        with ``catch`` a failing strategy ends the run with :attr:`Outcome.error` set
        instead of raising (nothing is written by the failed plan).
        """
        if view is None:
            view = yield from read_view(session_id, options)
        conflicts = 0
        while True:
            out = Outcome(
                session_id,
                ctx.trigger,
                view.tokens,
                view.tokens,
                ctx.target(budget, self.target_fraction),
                budget.available,
                conflicts=conflicts,
                planned_on=view,
            )
            try:
                planned: Planned = yield Work(self.plan_all, (view, budget, ctx, steps))
            except Exception as exc:
                if not catch:
                    raise
                planned = Planned(view=view)
                out.error = f"{type(exc).__name__}: {exc}"
            if planned.proposals and _too_little(view, planned.view, budget, ctx):
                planned = Planned(view=view)
                out.skipped = "too_little"
            out.tokens_after = planned.view.tokens
            out.view = planned.view
            out.steps = planned.records(view.seq)
            events: list[Event] = [p.event for p in planned.proposals]
            events.extend(extra(out) if extra is not None else [])
            if not events:
                return out
            try:
                yield from append(session_id, events, expected_seq=view.seq)
            except ConflictError:
                if conflicts >= self.max_conflicts:
                    raise
                conflicts += 1
                view = yield from read_view(session_id, options)
                continue
            out.view = replace(planned.view, seq=view.seq + len(events))
            return out


def _too_little(before: View, after: View, budget: Budget, ctx: PlanContext) -> bool:
    """Whether a run frees too little to be worth a new prompt prefix."""
    if ctx.force or ctx.min_gain <= 0 or before.tokens > budget.available:
        return False
    return before.tokens - after.tokens < ctx.min_gain * before.tokens


@dataclass
class Planned:
    """A run planned on an in-memory view: the proposals, in order, and the view after."""

    view: View
    """The predicted view once every proposal is appended."""
    proposals: list[Proposal] = field(default_factory=list)
    """What to append, in order."""

    def records(self, first_seq: int) -> list[StepRecord]:
        """Step records for the proposals appended after ``first_seq``."""
        out = []
        for i, proposal in enumerate(self.proposals):
            after = (
                self.proposals[i + 1].tokens_before
                if i + 1 < len(self.proposals)
                else self.view.tokens
            )
            out.append(_record(proposal, first_seq + i + 1, after))
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
    2b. :class:`ResultTruncator` (an oversized result, even the newest, shown as its head
       and tail with the way back),
    2c. :class:`HeadTruncator`, only when the pinned head leaves the newest message group
       no room (pinned texts shown as head and tail, reversibly: context and the request
       first, the system prompt and the task only when the head alone is over the
       budget); before the summary, so that the summary gets the room the cut leaves,
    2d. :class:`NewestTruncator`: the newest assistant message, never sent yet, held to a
       share of the room (its text and tool-call arguments shown as their head and tail,
       reversibly), and cut further when the head fits by itself but not beside the newest
       message group,
    3. a summary: :class:`LLMSummaryCondenser` with ``model`` (falling back to the
       extractive summary on any failure), or :class:`ExtractiveCondenser` offline,
    4. :class:`WindowCondenser` as the guard when the summary alone cannot reach
       the target (it carries the summary forward, with the facts of what it forgets
       folded in).

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
            ResultTruncator(),
            HeadTruncator(),
            NewestTruncator(),
            summary,
            WindowCondenser(target_fraction=target_fraction, fold=True),
        ],
        target_fraction=target_fraction,
    )
