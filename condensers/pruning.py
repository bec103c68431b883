"""Cheap, reversible strategies: compact old tool outputs with a :class:`Prune` event.

A prune stamps tool-result parts as compacted; the view shows a short placeholder instead
and the original stays readable through ``store.original(ref)``. No model is called.

* :class:`ToolOutputPruner` follows OpenCode's pruning: protect the newest ~40k tokens of
  tool output and the last two user turns, and act only when at least ~20k tokens would be
  freed (so the provider's prompt cache is not invalidated for a trifle).
* :class:`ObservationMasker` follows observation masking (OpenHands; "The Complexity Trap",
  JetBrains 2025): every tool result outside an attention window of the newest results is
  masked, whatever its size.

Both scale their absolute thresholds down to a fraction of the budget, so the documented
defaults (sized for 100k-200k windows) still behave sensibly on a 8k model.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from eventstore.events import PartRef, Prune, ToolResultPart

from .base import PlanContext, Proposal

if TYPE_CHECKING:
    from eventstore.budget import Budget
    from eventstore.views import View, ViewItem

__all__ = ["ToolOutputPruner", "ObservationMasker"]


def _placeholder_tokens(view: View, ctx: PlanContext, ref: PartRef) -> int:
    text = view.options.placeholder
    if "{" in text:
        text = text.format(seq=ref.seq, index=ref.index)
    return ctx.token_counter.count(text)


def _candidates(item: ViewItem, protected: frozenset[str]) -> Iterable[tuple[int, ToolResultPart]]:
    """Tool results of ``item`` that may be compacted: finished, visible, not protected."""
    for idx, part in enumerate(item.message.parts):
        if not isinstance(part, ToolResultPart) or idx in item.compacted:
            continue
        if part.state != "completed" or (part.name and part.name in protected):
            continue
        yield idx, part


def _is_user_turn(item: ViewItem) -> bool:
    msg = item.message
    return msg.role == "user" and not msg.tool_results


def _scaled(absolute: int, fraction: float, budget: Budget) -> int:
    return min(absolute, max(budget.fraction(fraction), 1))


def _prune_proposal(
    name: str,
    settings: dict[str, Any],
    view: View,
    targets: list[PartRef],
    freed: int,
    ctx: PlanContext,
    started: float,
) -> Proposal:
    """The :class:`Prune` both pruning strategies propose, targets in log order."""
    targets.sort(key=lambda r: (r.seq, r.index))
    evt = Prune(
        targets=targets,
        tokens_freed=freed,
        strategy=name,
        settings=settings,
        trigger=ctx.trigger,
    )
    return Proposal(
        event=evt,
        condenser=name,
        tokens_before=view.tokens,
        tokens_after=view.tokens - freed,
        view_seq=view.seq,
        latency_ms=(time.perf_counter() - started) * 1000,
    )


class ToolOutputPruner:
    """Compact old tool outputs once enough can be freed.

    Walking from the newest message back, the last ``protect_turns`` user turns are left
    alone, then the first ``protect_tokens`` of tool output are kept; every older finished
    tool result (not of a protected tool) is compacted, provided the total freed reaches
    ``minimum_tokens``. Parts already compacted are skipped, so planning twice proposes
    nothing new (idempotent).

    Args:
        protect_tokens: Newest tool-output tokens kept (OpenCode: 40,000), scaled down to
            ``protect_fraction`` of the budget when that is smaller.
        minimum_tokens: Least tokens worth a prune (OpenCode: 20,000), scaled down to
            ``minimum_fraction`` of the budget when that is smaller.
        protect_turns: Newest user turns whose tool outputs are never pruned.
        protected_tools: Tool names whose results are never pruned.
        protect_fraction: See ``protect_tokens``.
        minimum_fraction: See ``minimum_tokens``.
    """

    name = "prune_tool_outputs"

    def __init__(
        self,
        *,
        protect_tokens: int = 40_000,
        minimum_tokens: int = 20_000,
        protect_turns: int = 2,
        protected_tools: Iterable[str] = (),
        protect_fraction: float = 0.3,
        minimum_fraction: float = 0.05,
    ) -> None:
        self.protect_tokens = protect_tokens
        self.minimum_tokens = minimum_tokens
        self.protect_turns = protect_turns
        self.protected_tools = frozenset(protected_tools)
        self.protect_fraction = protect_fraction
        self.minimum_fraction = minimum_fraction

    def settings(self) -> dict[str, Any]:
        return {
            "protect_tokens": self.protect_tokens,
            "minimum_tokens": self.minimum_tokens,
            "protect_turns": self.protect_turns,
            "protected_tools": sorted(self.protected_tools),
            "protect_fraction": self.protect_fraction,
            "minimum_fraction": self.minimum_fraction,
        }

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        started = time.perf_counter()
        protect = _scaled(self.protect_tokens, self.protect_fraction, budget)
        minimum = _scaled(self.minimum_tokens, self.minimum_fraction, budget)
        turns = 0
        seen = 0
        targets: list[PartRef] = []
        freed = 0
        for item in reversed(view.items):
            if item.pinned:
                continue
            if _is_user_turn(item):
                turns += 1
            if turns < self.protect_turns:
                continue
            for idx, _part in _candidates(item, self.protected_tools):
                tokens = item.part_tokens[idx]
                if seen < protect:
                    seen += tokens
                    continue
                ref = PartRef(seq=item.seq, index=idx)
                gain = tokens - _placeholder_tokens(view, ctx, ref)
                if gain > 0:
                    targets.append(ref)
                    freed += gain
        if not targets or freed < (1 if ctx.force else minimum):
            return None
        settings = {**self.settings(), "effective_protect": protect, "effective_minimum": minimum}
        return _prune_proposal(self.name, settings, view, targets, freed, ctx, started)


class ObservationMasker:
    """Mask every tool result outside an attention window of the newest ones.

    The window is the newest ``window_events`` messages carrying tool results, or, when
    ``window_tokens`` is set, the newest tool results up to that many tokens. Results
    outside it are compacted regardless of size; a prune is proposed once at least
    ``minimum_tokens`` (scaled to ``minimum_fraction`` of the budget) would be freed, so
    the log does not gain one prune per turn for a few tokens.

    Args:
        window_events: Newest result-carrying messages kept in full (JetBrains used 10 turns).
        window_tokens: Alternative window in tokens of tool output.
        minimum_tokens: Least tokens worth a prune.
        minimum_fraction: Budget fraction the minimum is scaled down to.
        protected_tools: Tool names whose results are never masked.
    """

    name = "mask_observations"

    def __init__(
        self,
        *,
        window_events: int = 10,
        window_tokens: int | None = None,
        minimum_tokens: int = 2_000,
        minimum_fraction: float = 0.02,
        protected_tools: Iterable[str] = (),
    ) -> None:
        if window_events < 0:
            raise ValueError("window_events must not be negative")
        self.window_events = window_events
        self.window_tokens = window_tokens
        self.minimum_tokens = minimum_tokens
        self.minimum_fraction = minimum_fraction
        self.protected_tools = frozenset(protected_tools)

    def settings(self) -> dict[str, Any]:
        return {
            "window_events": self.window_events,
            "window_tokens": self.window_tokens,
            "minimum_tokens": self.minimum_tokens,
            "minimum_fraction": self.minimum_fraction,
            "protected_tools": sorted(self.protected_tools),
        }

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        started = time.perf_counter()
        minimum = _scaled(self.minimum_tokens, self.minimum_fraction, budget)
        kept_events = 0
        kept_tokens = 0
        targets: list[PartRef] = []
        freed = 0
        for item in reversed(view.items):
            if item.pinned:
                continue
            parts = item.message.parts
            results = [(i, p) for i, p in enumerate(parts) if isinstance(p, ToolResultPart)]
            if not results:
                continue
            size = sum(item.part_tokens[idx] for idx, _ in results)
            if self.window_tokens is not None:
                inside = kept_tokens + size <= self.window_tokens
            else:
                inside = kept_events < self.window_events
            if inside:
                kept_events += 1
                kept_tokens += size
                continue
            for idx, _part in _candidates(item, self.protected_tools):
                ref = PartRef(seq=item.seq, index=idx)
                gain = item.part_tokens[idx] - _placeholder_tokens(view, ctx, ref)
                if gain > 0:
                    targets.append(ref)
                    freed += gain
        if not targets or freed < (1 if ctx.force else minimum):
            return None
        settings = {**self.settings(), "effective_minimum": minimum}
        return _prune_proposal(self.name, settings, view, targets, freed, ctx, started)
