"""Cheap, reversible strategies: compact old tool outputs with a :class:`Prune` event.

A prune stamps tool-result parts as compacted; the view shows a short placeholder instead
and the original stays readable through ``store.original(ref)``. No model is called.

* :class:`ToolOutputPruner` follows OpenCode's pruning: protect the newest 40k tokens of
  tool output and the last two assistant steps, and act only when at least 20k tokens
  would be freed (so the provider's prompt cache is not invalidated for a trifle).
* :class:`ObservationMasker` follows observation masking (OpenHands; "The Complexity Trap",
  JetBrains 2025): every tool result outside an attention window of the newest results is
  masked, whatever its size.

The pruner keeps its absolute thresholds unless the window is smaller than what it
protects; the masker scales its minimum down to a fraction of the budget. So the
documented defaults (sized for 100k-200k windows) still behave sensibly on a 8k model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from eventstore.errors import ConfigurationError
from eventstore.events import PartRef, Prune, TextPart, ToolCallPart, ToolResultPart
from eventstore.tokens import part_text
from eventstore.views import (
    cut_text,
    is_marked_task,
    placeholder_text,
    shared_cap,
    truncated_text,
)

from .base import PlanContext, Proposal

if TYPE_CHECKING:
    from eventstore.budget import Budget
    from eventstore.views import View, ViewItem

__all__ = [
    "ToolOutputPruner",
    "ObservationMasker",
    "ResultTruncator",
    "HeadTruncator",
    "NewestTruncator",
]


def _placeholder_tokens(view: View, ctx: PlanContext, ref: PartRef) -> int:
    # The same text the view will show and count (one placeholder mechanism).
    return ctx.token_counter.count(placeholder_text(view.options, ref))


def _shown_tokens(view: View, ctx: PlanContext, item: ViewItem, idx: int) -> int:
    """Tokens part ``idx`` of ``item`` takes in the view: whole, or as its truncation."""
    keep = item.kept.get(idx)
    if keep is None:
        return item.part_tokens[idx]
    ref = PartRef(seq=item.seq, index=idx)
    return ctx.token_counter.count(truncated_text(ref, part_text(item.message.parts[idx]), keep))


_COMPLETED = frozenset({"completed"})
_PRUNABLE = frozenset({"completed", "error"})


def _candidates(
    item: ViewItem,
    protected: frozenset[str],
    states: frozenset[str] = _COMPLETED,
    *,
    truncated: bool = False,
) -> Iterable[tuple[int, ToolResultPart]]:
    """Tool results of ``item`` that may be compacted: in ``states``, visible (or, with
    ``truncated``, shown truncated: a placeholder may replace that), not of a protected
    tool."""
    for idx, part in enumerate(item.message.parts):
        if not isinstance(part, ToolResultPart):
            continue
        if idx in item.compacted and not (truncated and idx in item.kept):
            continue
        if part.state not in states or (part.name and part.name in protected):
            continue
        yield idx, part


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
    """Compact old tool outputs once enough can be freed (OpenCode's pruning, RFC 007).

    Walking from the newest message back, the results of the newest ``protect_steps``
    assistant steps (messages with tool calls) are kept, and so is the newest
    ``protect_tokens`` of tool output; every older finished or failed tool result (not of
    a protected tool) is compacted, provided the prunable total reaches
    ``minimum_tokens``. Protection counts tokens and assistant steps, not user turns: a
    single-task agent run has one user message, and counting user turns would protect
    all of it. Parts already compacted are skipped, so planning twice proposes nothing
    new (idempotent).

    The thresholds are absolute, as in OpenCode, whatever the budget. Only when the window
    the conversation has (the budget less the pinned head) is smaller than
    ``protect_tokens`` (a window in which 40k tokens of output could never be kept) are
    both clamped to ``protect_fraction`` and ``minimum_fraction`` of that window: a long
    system prompt on a small model leaves less to protect, not more.

    Args:
        protect_tokens: Newest tool-output tokens kept (OpenCode: 40,000).
        minimum_tokens: Least prunable tokens worth a prune (OpenCode: 20,000).
        protect_steps: Newest assistant steps whose tool results are never pruned.
        protected_tools: Tool names whose results are never pruned.
        protected_prefixes: Tool-name prefixes whose results are never pruned.
        max_part_tokens: Cap on any one part's token estimate (a huge output counts as
            this much towards protection and the minimum).
        protect_fraction: Window fraction ``protect_tokens`` is clamped to in a small
            window.
        minimum_fraction: Window fraction ``minimum_tokens`` is clamped to in a small
            window.
        min_output_tokens: Only outputs of at least this many tokens are pruned (a
            per-output threshold, as dynamiq compacts); smaller ones stay as they are.
        batch_fraction: In a pass between condensations (``ctx.batch``, which a
            :class:`~condensers.CondensationPolicy` runs on every check), the least
            prunable tokens are also this fraction of the conversation window: such a
            prune rewrites the prompt prefix by itself, so it waits until it frees a
            batch rather than nibbling every turn. In a run that condenses anyway
            (``ctx.condensing``) the minimum does not apply: the prompt is rewritten
            once for both. There the token protection also ends where the summary's cut
            does (``ctx.keep_tokens``): protecting more would only keep outputs from
            the pruner for the summary to forget, and in a small window, where every
            condensation keeps little more than the newest steps, no output would ever
            be compacted, however long the run. The newest ``protect_steps`` stay
            protected.
    """

    name = "prune_tool_outputs"

    def __init__(
        self,
        *,
        protect_tokens: int = 40_000,
        minimum_tokens: int = 20_000,
        protect_steps: int = 2,
        protected_tools: Iterable[str] = ("skill",),
        protected_prefixes: Iterable[str] = ("tool-",),
        max_part_tokens: int = 50_000,
        protect_fraction: float = 0.3,
        minimum_fraction: float = 0.05,
        min_output_tokens: int = 0,
        batch_fraction: float = 0.25,
    ) -> None:
        if not 0 <= batch_fraction <= 1:
            raise ConfigurationError(f"batch_fraction must be in [0, 1], got {batch_fraction}")
        if protect_steps < 0 or max_part_tokens <= 0 or min_output_tokens < 0:
            raise ConfigurationError(
                "protect_steps and min_output_tokens must not be negative and "
                f"max_part_tokens must be positive, got {protect_steps}, {min_output_tokens} "
                f"and {max_part_tokens}"
            )
        self.protect_tokens = protect_tokens
        self.minimum_tokens = minimum_tokens
        self.protect_steps = protect_steps
        self.protected_tools = frozenset(protected_tools)
        self.protected_prefixes = tuple(protected_prefixes)
        self.max_part_tokens = max_part_tokens
        self.protect_fraction = protect_fraction
        self.minimum_fraction = minimum_fraction
        self.min_output_tokens = min_output_tokens
        self.batch_fraction = batch_fraction

    def settings(self) -> dict[str, Any]:
        extra = {"min_output_tokens": self.min_output_tokens} if self.min_output_tokens else {}
        return {
            **extra,
            "protect_tokens": self.protect_tokens,
            "minimum_tokens": self.minimum_tokens,
            "protect_steps": self.protect_steps,
            "protected_tools": sorted(self.protected_tools),
            "protected_prefixes": list(self.protected_prefixes),
            "max_part_tokens": self.max_part_tokens,
            "protect_fraction": self.protect_fraction,
            "minimum_fraction": self.minimum_fraction,
            "batch_fraction": self.batch_fraction,
        }

    def thresholds(self, budget: Budget, pinned: int = 0) -> tuple[int, int]:
        """The (protect, minimum) tokens in effect for ``budget`` when the pinned head
        takes ``pinned`` of it: the conversation's window is what the head leaves."""
        window = max(budget.available - pinned, 1)
        if window >= self.protect_tokens:
            return self.protect_tokens, self.minimum_tokens
        return (
            min(self.protect_tokens, max(math.floor(window * self.protect_fraction), 1)),
            min(self.minimum_tokens, max(math.floor(window * self.minimum_fraction), 1)),
        )

    def batch_minimum(self, budget: Budget, pinned: int = 0) -> int:
        """The least prunable tokens of a pass between condensations (``ctx.batch``): the
        minimum in effect, or ``batch_fraction`` of the conversation window if larger."""
        window = max(budget.available - pinned, 1)
        return max(self.thresholds(budget, pinned)[1], math.floor(window * self.batch_fraction))

    def is_protected(self, tool: str | None) -> bool:
        """Whether results of ``tool`` are never pruned."""
        if not tool:
            return False
        return tool in self.protected_tools or tool.startswith(self.protected_prefixes)

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        started = time.perf_counter()
        pinned = sum(i.tokens for i in view.items if i.pinned)
        protect, minimum = self.thresholds(budget, pinned)
        if ctx.batch:
            minimum = self.batch_minimum(budget, pinned)
        elif ctx.condensing:
            minimum = 1  # the run rewrites the prompt anyway: prune all that is old
        # In a condensing run, token protection ends where the summary's cut does.
        tail_room = ctx.keep_tokens if ctx.condensing and ctx.keep_tokens is not None else None
        kept_from = _newest_steps_start(view, self.protect_steps)
        seen = 0
        tail = 0
        prunable = 0
        targets: list[PartRef] = []
        freed = 0
        for item in reversed(view.items):
            if item.pinned:
                continue
            tail += item.tokens
            kept = tail_room is None or tail <= tail_room
            for idx, part in _candidates(item, frozenset(), _PRUNABLE, truncated=True):
                if self.is_protected(part.name):
                    continue
                shown = _shown_tokens(view, ctx, item, idx)
                estimate = min(shown, self.max_part_tokens)
                guarded = seen < protect and kept
                if item.seq >= kept_from or guarded or shown < self.min_output_tokens:
                    seen += estimate
                    continue
                ref = PartRef(seq=item.seq, index=idx)
                gain = shown - _placeholder_tokens(view, ctx, ref)
                if gain > 0:
                    targets.append(ref)
                    freed += gain
                    prunable += min(gain, self.max_part_tokens)
        if not targets or prunable < (1 if ctx.force else minimum):
            return None
        settings = {**self.settings(), "effective_protect": protect, "effective_minimum": minimum}
        return _prune_proposal(self.name, settings, view, targets, freed, ctx, started)


def _newest_steps_start(view: View, steps: int) -> float:
    """Seq of the oldest of the newest ``steps`` assistant messages that made tool calls:
    results from there on belong to those steps. By position, not by call id, since some
    agents reuse call ids within one history."""
    start: float = math.inf
    if steps <= 0:
        return start
    for item in reversed(view.items):
        if item.message.role == "assistant" and item.message.tool_calls:
            start = item.seq
            steps -= 1
            if steps == 0:
                break
    return start


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
            raise ConfigurationError(f"window_events must not be negative, got {window_events}")
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
            size = sum(_shown_tokens(view, ctx, item, idx) for idx, _ in results)
            if self.window_tokens is not None:
                inside = kept_tokens + size <= self.window_tokens
            else:
                inside = kept_events < self.window_events
            if inside:
                kept_events += 1
                kept_tokens += size
                continue
            for idx, _part in _candidates(item, self.protected_tools, truncated=True):
                ref = PartRef(seq=item.seq, index=idx)
                gain = _shown_tokens(view, ctx, item, idx) - _placeholder_tokens(view, ctx, ref)
                if gain > 0:
                    targets.append(ref)
                    freed += gain
        if not targets or freed < (1 if ctx.force else minimum):
            return None
        settings = {**self.settings(), "effective_minimum": minimum}
        return _prune_proposal(self.name, settings, view, targets, freed, ctx, started)


class ResultTruncator:
    """Truncate oversized tool results to their head and tail (DSPy, Dexto), reversibly.

    One tool result larger than ``max_fraction`` of the budget (a 20 KB file read) can
    hold the view over the budget by itself, and every other step protects the newest call
    group. This step shows such a result as its first two thirds and last third of about
    ``keep_fraction`` of the budget, around a line that states the original size and the
    ``recall`` reference that returns it whole: a prune with ``keep_chars``, so the
    original stays in the log. It runs before anything lossier.

    Results the model has not seen yet (those after the view's newest assistant message)
    are also held, together, to ``fresh_fraction`` of the *conversation room*: the
    available tokens minus the pinned head and the summary (results of parallel calls
    share it: the small ones keep what they have and the large ones split the rest, see
    :func:`shared_cap`). Truncating a result before it is first sent costs no prompt-cache
    break, and one turn's output no longer fills a small room by itself, which would force
    a condensation (and a break) on the very next turn. The default, 8%, follows from the
    break rate: a condensation frees the room once, and it lasts as many turns as new
    groups (assistant message plus its results) fit in it, so one break in five turns needs
    a group to take at most about a fifth of the room; the assistant messages alone took
    about 70% of the growth per turn over the benchmark's tuning runs, which leaves the
    results a few percent. A turn adds about the same tokens whatever the budget, so a
    smaller room holds fewer turns: below ``fresh_full_room`` (8,000 tokens) the share
    shrinks with the room, down to ``fresh_min_fraction`` (5%), while a large room, where
    a turn is a few percent of it, keeps its 8% (a tighter cap there cut error lines out
    of long outputs for no cache gain). A :class:`~condensers.CondensationPolicy` applies
    this cap on every check, even when nothing else needs doing.

    Args:
        max_fraction: A result over this fraction of the budget's available tokens is
            oversized.
        keep_fraction: How much of the budget a truncated result keeps.
        min_tokens: Results under this many tokens are never truncated by the
            ``max_fraction`` rule, whatever the budget.
        protected_tools: Tool names whose results are never truncated.
        fresh_fraction: Largest share of the conversation room the unseen results may
            take together (``None``: no cap on unseen results).
        fresh_min_tokens: Unseen results under this many tokens are never truncated.
        fresh_full_room: Rooms of at least this many tokens give the unseen results their
            whole ``fresh_fraction``; a smaller room gives them proportionally less, down
            to ``fresh_min_fraction``.
        fresh_min_fraction: The smallest share of the room the unseen results get
            (``None``: ``fresh_fraction`` at every size).
    """

    name = "truncate_large_results"

    def __init__(
        self,
        *,
        max_fraction: float = 0.25,
        keep_fraction: float = 0.1,
        min_tokens: int = 500,
        protected_tools: Iterable[str] = (),
        fresh_fraction: float | None = 0.08,
        fresh_min_tokens: int = 64,
        fresh_full_room: int = 8_000,
        fresh_min_fraction: float | None = 0.05,
    ) -> None:
        if not 0 < keep_fraction < max_fraction <= 1:
            raise ConfigurationError(
                "need 0 < keep_fraction < max_fraction <= 1, got "
                f"keep_fraction={keep_fraction}, max_fraction={max_fraction}"
            )
        if fresh_fraction is not None and not 0 < fresh_fraction <= 1:
            raise ConfigurationError(
                f"fresh_fraction must be in (0, 1] or None, got {fresh_fraction}"
            )
        if fresh_min_tokens < 16:
            raise ConfigurationError(f"fresh_min_tokens must be >= 16, got {fresh_min_tokens}")
        if fresh_min_fraction is not None and not (
            0 < fresh_min_fraction <= (fresh_fraction or 1) and fresh_full_room > 0
        ):
            raise ConfigurationError(
                "need 0 < fresh_min_fraction <= fresh_fraction and fresh_full_room > 0, got "
                f"fresh_min_fraction={fresh_min_fraction}, fresh_full_room={fresh_full_room}"
            )
        self.max_fraction = max_fraction
        self.keep_fraction = keep_fraction
        self.min_tokens = min_tokens
        self.protected_tools = frozenset(protected_tools)
        self.fresh_fraction = fresh_fraction
        self.fresh_min_tokens = fresh_min_tokens
        self.fresh_full_room = fresh_full_room
        self.fresh_min_fraction = fresh_min_fraction

    def settings(self) -> dict[str, Any]:
        return {
            "max_fraction": self.max_fraction,
            "keep_fraction": self.keep_fraction,
            "min_tokens": self.min_tokens,
            "protected_tools": sorted(self.protected_tools),
            "fresh_fraction": self.fresh_fraction,
            "fresh_min_tokens": self.fresh_min_tokens,
            "fresh_full_room": self.fresh_full_room,
            "fresh_min_fraction": self.fresh_min_fraction,
        }

    def fresh_limit(self, view: View, budget: Budget) -> int | None:
        """Tokens the unseen results of ``view`` may take together (``None``: no cap)."""
        if self.fresh_fraction is None:
            return None
        pinned = sum(i.tokens for i in view.items if i.pinned)
        room = budget.available - pinned - view.summary_tokens - view.extra_tokens
        fraction = self.fresh_fraction
        if self.fresh_min_fraction is not None and room < self.fresh_full_room:
            scaled = fraction * max(room, 0) / self.fresh_full_room
            fraction = max(self.fresh_min_fraction, scaled)
        return max(math.floor(room * fraction), self.fresh_min_tokens)

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        """Truncate oversized results (unless ``ctx.intake``) and unseen results over the
        fresh cap; one prune, each target cut to the smaller ``keep_chars`` that applies."""
        started = time.perf_counter()
        limit = max(budget.fraction(self.max_fraction), self.min_tokens)
        # About keep_fraction of the budget in characters (four a token, as estimated).
        keep = max(budget.fraction(self.keep_fraction) * 4, 64)
        fresh = self.fresh_limit(view, budget)
        unseen = unseen_seqs(view) if fresh is not None else set()
        if fresh is not None and unseen:
            sizes = [
                item.part_tokens[idx]
                for item in view.items
                if item.seq in unseen
                for idx, _ in _candidates(item, self.protected_tools, _PRUNABLE)
            ]
            fresh = max(shared_cap(sizes, fresh), self.fresh_min_tokens)
        fresh_keep = max((fresh or 0) * 4, 64)
        if unseen and fresh is not None and fresh_keep < keep:
            # One prune carries one keep_chars: when the room is smaller than the budget
            # share, every result this prune cuts keeps the smaller size.
            keep = fresh_keep
        found: list[tuple[PartRef, str, int]] = []
        for item in view.items:
            is_unseen = item.seq in unseen
            if ctx.intake and not is_unseen:
                continue
            for idx, part in _candidates(item, self.protected_tools, _PRUNABLE):
                tokens = item.part_tokens[idx]
                over = tokens > limit and not ctx.intake
                over_fresh = is_unseen and fresh is not None and tokens > fresh
                if over or over_fresh:
                    found.append((PartRef(seq=item.seq, index=idx), part.output, tokens))
        # keep is four characters a token; text the counter finds denser (numbers, code,
        # encoded data) keeps fewer, so that the cut holds by the stored count too.
        dense = min((len(text) / tokens for _, text, tokens in found if tokens), default=4.0)
        if dense < 4:
            keep = max(int(keep * dense / 4), 64)
        targets: list[PartRef] = []
        freed = 0
        for ref, text, tokens in found:
            if keep >= len(text):
                continue
            gain = tokens - ctx.token_counter.count(truncated_text(ref, text, keep))
            if gain > 0:
                targets.append(ref)
                freed += gain
        if not targets:
            return None
        proposal = _prune_proposal(self.name, self.settings(), view, targets, freed, ctx, started)
        evt = proposal.event
        assert isinstance(evt, Prune)
        evt.keep_chars = keep
        if ctx.intake:
            evt.trigger = "intake"  # the log says it capped unseen results, not a threshold
        return proposal


def unseen_seqs(view: View) -> set[int]:
    """Seqs of the view's messages after its newest assistant message: what the model has
    not been sent yet (the results of its latest calls, and anything after them)."""
    seqs: set[int] = set()
    for item in reversed(view.items):
        if item.message.role == "assistant" or item.pinned:
            return seqs
        seqs.add(item.seq)
    return set()  # no assistant message yet: nothing was ever answered


class HeadTruncator:
    """Cut pinned texts to their head and tail when the pinned head leaves the newest
    messages no room, reversibly.

    Every other step keeps the pinned head (system prompt, task, anything else the agent
    sent before its first reply) verbatim. When the head and the newest message group
    (the last assistant message to the end: what no condensation may drop) are over the
    budget together, this step cuts pinned texts to their first two thirds and last third
    around a line that states the size and the ``recall`` reference that returns the text
    whole (a prune with ``keep_chars``: the originals stay in the log), and notes on the
    prune what it cut. It plans on that floor, not on the view, so it runs before the
    summary step (which then gets the room the cut leaves). A text is cut only once (a
    cut text is not cut again), so context and the request are cut as far as allowed when their
    turn comes; the system prompt and the task keep as much as still brings the floor
    down to the run's target.

    What it cuts, in this order, each group only when the ones before it, cut as far as
    allowed, leave the floor over the budget:

    1. context: pinned user messages other than the task and the request (an environment
       description, a demonstration, a template);
    2. the request: the last pinned user message, when the task came before it (a coding
       agent that sends its instructions file first, then the user's request);
    3. the system prompt;
    4. the task: a message an importer marked, else the first pinned user message that is
       not a demonstration (one starting with a ``demonstration_prefixes`` entry).

    The system prompt and the task are what the model must see whole: an automatic run
    cuts them only when the pinned head alone is over the budget (it would stay over
    whatever the turn), and a manual request, which must end in a view that fits, when
    the head with the newest group is. An automatic run whose newest group is over the
    budget even beside the cut context and request leaves the head alone: cutting the
    request for it would be for nothing (:class:`NewestTruncator` cuts that group's own
    text instead).

    Args:
        min_keep_chars: Fewest characters a cut text keeps.
        demonstration_prefixes: Pinned user messages starting with one of these are
            demonstrations, never the task (SWE-agent's demonstration template).
    """

    name = "truncate_pinned_head"

    def __init__(
        self,
        *,
        min_keep_chars: int = 400,
        demonstration_prefixes: Iterable[str] = ("Here is a demonstration",),
    ) -> None:
        if min_keep_chars < 64:
            raise ConfigurationError(f"min_keep_chars must be >= 64, got {min_keep_chars}")
        self.min_keep_chars = min_keep_chars
        self.demonstration_prefixes = tuple(demonstration_prefixes)

    def settings(self) -> dict[str, Any]:
        return {
            "min_keep_chars": self.min_keep_chars,
            "demonstration_prefixes": list(self.demonstration_prefixes),
        }

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        started = time.perf_counter()
        head = sum(i.tokens for i in view.items if i.pinned)
        floor = head + newest_group_tokens(view) + view.extra_tokens
        if floor <= budget.available:
            return None
        # A text is cut once (a cut text is not cut again), so context and the request,
        # when their turn comes, are cut as far as allowed: cut just to fit, the next
        # large message would leave the view over the budget with nothing left to cut.
        # The system prompt and the task keep as much as still brings the floor down to
        # the run's target; each later group is cut only when the earlier ones, cut as
        # far as allowed, leave the floor over the budget.
        need = floor - min(ctx.target(budget), budget.available)
        fit = floor - budget.available
        groups = head_groups(view, self.demonstration_prefixes)
        whole_head = head > budget.available or ctx.trigger == "manual"
        if not whole_head:
            # The head fits by itself: only context and the request may be cut, and only
            # when that makes the view fit (else the newest group passes next turn).
            groups = [(kind, g) for kind, g in groups if kind in CUTTABLE]
        chosen: list[tuple[PartRef, str, int]] = []
        kinds: dict[tuple[int, int], str] = {}
        for kind, group in groups:
            chosen.extend(group)
            kinds.update(((ref.seq, ref.index), kind) for ref, _, _ in group)
            if kind in CUTTABLE:
                if _largest_keep(chosen, fit, self.min_keep_chars, ctx) is not None:
                    keep = self.min_keep_chars
                    break
                continue
            found = _largest_keep(chosen, need, self.min_keep_chars, ctx)
            if found is not None:
                keep = found
                break
            if _largest_keep(chosen, fit, self.min_keep_chars, ctx) is not None:
                keep = self.min_keep_chars  # fits: as close to the target as these allow
                break
        else:
            if not whole_head:
                return None
            keep = self.min_keep_chars  # cut everything as far as allowed: the closest fit
        targets, freed = _cut_to(chosen, keep, ctx)
        if not targets:
            return None
        refs = ", ".join(f'"{r.seq}:{r.index}"' for r in targets)
        named = {kinds.get((r.seq, r.index)) for r in targets}
        cut = [k for k in ("context", "request", "system", "task") if k in named]
        note = (
            f"the pinned head ({head:,} tokens) leaves no room in the budget "
            f"({budget.available:,} available) for the newest messages "
            f"({floor - head:,} tokens): {len(targets)} pinned text(s) cut to "
            f"{keep:,} characters ({', '.join(cut)}); recall(ref=...) with {refs} "
            "returns each whole, and search_history finds what they said"
        )
        return _cut_proposal(self, view, targets, freed, ctx, started, keep, note)


class NewestTruncator:
    """Hold the newest assistant message to a share of the room before it is first sent,
    and cut it further when the pinned head fits by itself but not beside the newest
    message group, reversibly.

    The newest reply is the model's own latest message: no view sent before carried it, so
    cutting it changes no cached prefix, as capping the results of its calls does
    (:class:`ResultTruncator`). A reply is most of an agent's growth per turn (a text-mode
    agent's thought and heredoc, a coding agent's file written through a call's
    arguments), and one that fills a small room by itself forces a condensation, a prompt
    rewrite, on the next turns. So on every check (``ctx.intake``) its text parts and its
    tool calls' arguments are held, together, to ``fresh_fraction`` of the conversation
    room (the available tokens less the pinned head and the summary): each is shown as
    its first two thirds and last third around a line that states the size and the
    ``recall`` reference that returns it whole (a prune with ``keep_chars``: the original
    stays in the log); the short ones keep what they have and the long ones share the rest
    (:func:`~eventstore.views.shared_cap`). A call's arguments are cut as JSON that still
    parses (:func:`~eventstore.views.truncated_arguments`): its long string values (a
    file's contents, a patch) are cut and its short ones (a path, a flag) kept, and the
    call keeps its name and id beside its result; arguments that are not a JSON object are
    never cut.

    Every other step keeps the newest message group (the last assistant message to the
    end) whole, and :class:`HeadTruncator` keeps the system prompt and the task verbatim
    while the head alone fits. When the two together are still over the budget (a long
    task beside a reply that thinks aloud at length), a condensing run cuts the reply as
    far as allowed (``min_keep_chars``), with a note on the prune saying why: the stored
    estimates run low on the code and listings a reply holds, and a cut sized by them could
    leave the view over the model's window with nothing left to cut. A part is cut only
    once.

    It leaves the group alone when the assistant message is the view's last message (the
    newest message stays as it was written) and when it has nothing to cut.

    Args:
        min_keep_chars: Fewest characters a cut part keeps.
        fresh_fraction: The share of the conversation room the newest reply may take
            before it is first sent (``None``: no cap, only the cut beside a head that
            leaves it no room).
    """

    name = "truncate_newest_text"

    def __init__(self, *, min_keep_chars: int = 400, fresh_fraction: float | None = 0.15) -> None:
        if min_keep_chars < 64:
            raise ConfigurationError(f"min_keep_chars must be >= 64, got {min_keep_chars}")
        if fresh_fraction is not None and not 0 < fresh_fraction <= 1:
            raise ConfigurationError(
                f"fresh_fraction must be in (0, 1] or None, got {fresh_fraction}"
            )
        self.min_keep_chars = min_keep_chars
        self.fresh_fraction = fresh_fraction

    def settings(self) -> dict[str, Any]:
        return {"min_keep_chars": self.min_keep_chars, "fresh_fraction": self.fresh_fraction}

    def fresh_limit(self, view: View, budget: Budget) -> int | None:
        """Tokens the newest reply (its text and its calls' arguments) may take before it
        is first sent (``None``: no cap): ``fresh_fraction`` of the conversation room, at
        least ``min_keep_chars`` characters' worth."""
        if self.fresh_fraction is None:
            return None
        pinned = sum(i.tokens for i in view.items if i.pinned)
        room = budget.available - pinned - view.summary_tokens - view.extra_tokens
        return max(math.floor(max(room, 0) * self.fresh_fraction), self.min_keep_chars // 4)

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        started = time.perf_counter()
        group = newest_group(view)
        if len(group) < 2 or group[0].message.role != "assistant":
            return None
        item = group[0]
        parts = {
            idx: part
            for idx, part in enumerate(item.message.parts)
            if isinstance(part, TextPart | ToolCallPart) and idx not in item.compacted
        }
        chosen = [
            (PartRef(seq=item.seq, index=idx), part_text(part), item.part_tokens[idx])
            for idx, part in parts.items()
        ]
        if not chosen:
            return None

        def cut(ref: PartRef, text: str, keep: int) -> str:
            return cut_text(ref, parts[ref.index], keep)

        head = sum(i.tokens for i in view.items if i.pinned) + view.extra_tokens
        floor = head + sum(i.tokens for i in group)
        if not ctx.intake and budget.available < floor and head <= budget.available:
            keep = self.min_keep_chars
            targets, freed = _cut_to(chosen, keep, ctx, cut)
            reason = (
                f"the pinned head ({head:,} tokens) and the newest messages "
                f"({floor - head:,} tokens) are over the budget ({budget.available:,} "
                "available)"
            )
        else:
            limit = self.fresh_limit(view, budget)
            size = sum(tokens for _, _, tokens in chosen)
            if limit is None or size <= limit:
                return None
            # Four characters a token, fewer for text the counter finds denser (code,
            # numbers), so that the cut holds by the stored count too; the large texts
            # share what the small ones leave.
            chars = sum(len(t) for _, t, _ in chosen)
            allowed = int(limit * min(chars / size, 4.0))
            keep = max(shared_cap([len(t) for _, t, _ in chosen], allowed), self.min_keep_chars)
            targets, freed = _cut_to(chosen, keep, ctx, cut)
            reason = (
                f"the newest reply ({size:,} tokens) is over its share of the room "
                f"({limit:,} tokens), and it was never sent"
            )
        if not targets:
            return None
        refs = ", ".join(f'"{r.seq}:{r.index}"' for r in targets)
        note = (
            f"{reason}: its text and tool-call arguments cut to {keep:,} characters; "
            f"recall(ref=...) with {refs} returns it whole"
        )
        proposal = _cut_proposal(self, view, targets, freed, ctx, started, keep, note)
        if ctx.intake:
            assert isinstance(proposal.event, Prune)
            proposal.event.trigger = "intake"
        return proposal


def _cut_proposal(
    step: HeadTruncator | NewestTruncator,
    view: View,
    targets: list[PartRef],
    freed: int,
    ctx: PlanContext,
    started: float,
    keep: int,
    note: str,
) -> Proposal:
    """The prune that shows ``targets`` as their first and last ``keep`` characters,
    with ``note`` on it and among the proposal's notes."""
    proposal = _prune_proposal(step.name, step.settings(), view, targets, freed, ctx, started)
    evt = proposal.event
    assert isinstance(evt, Prune)
    evt.keep_chars = keep
    evt.note = note
    proposal.notes.append(note)
    return proposal


def _cut_to(
    chosen: list[tuple[PartRef, str, int]],
    keep: int,
    ctx: PlanContext,
    cut: Callable[[PartRef, str, int], str] = truncated_text,
) -> tuple[list[PartRef], int]:
    """The texts of ``chosen`` that shown as ``keep`` characters (``cut``: head and tail)
    count fewer tokens, and the tokens that frees."""
    targets: list[PartRef] = []
    freed = 0
    for ref, text, tokens in chosen:
        if len(text) <= keep:
            continue
        shown = cut(ref, text, keep)
        if shown == text:
            continue
        gain = tokens - ctx.token_counter.count(shown)
        if gain > 0:
            targets.append(ref)
            freed += gain
    return targets, freed


def newest_group(view: View) -> list[ViewItem]:
    """What no condensation may drop after the pinned head: the newest message group (the
    last assistant message to the end) among the unpinned items, else the last of them."""
    tail = [i for i in view.items if not i.pinned]
    last = max((n for n, i in enumerate(tail) if i.message.role == "assistant"), default=None)
    return tail[-1:] if last is None else tail[last:]


def newest_group_tokens(view: View) -> int:
    """Tokens of :func:`newest_group`."""
    return sum(i.tokens for i in newest_group(view))


HeadGroup = tuple[str, list[tuple[PartRef, str, int]]]

CUTTABLE = ("context", "request")
"""The pinned texts :class:`HeadTruncator` may cut while the head fits by itself."""


def head_groups(view: View, demonstrations: Sequence[str] = ()) -> list[HeadGroup]:
    """Pinned text parts in the order :class:`HeadTruncator` may cut them, by kind
    (``context``, ``request``, ``system``, ``task``), largest first in each group.

    The task is a message an importer marked, else the first pinned user message that
    does not start with one of ``demonstrations`` (else the last one); the request is the
    last pinned user message when it comes after the task; every other pinned user
    message is context."""
    pinned = [i for i in view.items if i.pinned]
    users = [i for i in pinned if i.message.role == "user"]
    marked = {i.seq for i in users if is_marked_task(i.message)}
    if marked:
        tasks = marked
    else:
        first = next(
            (i for i in users if not i.message.text.lstrip().startswith(tuple(demonstrations))),
            users[-1] if users else None,
        )
        tasks = {first.seq} if first is not None else set()
    request = users[-1].seq if users and users[-1].seq > max(tasks, default=0) else None
    kinds: dict[str, list[tuple[PartRef, str, int]]] = {
        "context": [],
        "request": [],
        "system": [],
        "task": [],
    }
    for item in pinned:
        for idx, part in enumerate(item.message.parts):
            if not isinstance(part, TextPart) or idx in item.compacted:
                continue
            entry = (PartRef(seq=item.seq, index=idx), part.text, item.part_tokens[idx])
            if item.seq in tasks:
                kinds["task"].append(entry)
            elif item.seq == request:
                kinds["request"].append(entry)
            elif item.message.role == "system":
                kinds["system"].append(entry)
            else:
                kinds["context"].append(entry)
    return [(kind, sorted(g, key=lambda e: -e[2])) for kind, g in kinds.items() if g]


def _largest_keep(
    chosen: list[tuple[PartRef, str, int]], need: int, floor: int, ctx: PlanContext
) -> int | None:
    """The most characters each chosen text may keep while freeing ``need`` tokens, or
    ``None`` when even ``floor`` characters free too little."""

    def freed(keep: int) -> int:
        total = 0
        for ref, text, tokens in chosen:
            if len(text) > keep:
                total += max(tokens - ctx.token_counter.count(truncated_text(ref, text, keep)), 0)
        return total

    if freed(floor) < need:
        return None
    lo, hi = floor, max((len(text) for _, text, _ in chosen), default=floor)
    while lo < hi:  # the largest keep that still frees enough (freed shrinks as keep grows)
        mid = (lo + hi + 1) // 2
        if freed(mid) >= need:
            lo = mid
        else:
            hi = mid - 1
    return lo
