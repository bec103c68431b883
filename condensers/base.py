"""The condenser protocol and the planning helpers every strategy shares.

A condenser looks at a :class:`~eventstore.views.View` and a
:class:`~eventstore.budget.Budget` and proposes one event (a :class:`Prune` or a
:class:`Condensation`) or nothing. Planning never writes; :func:`apply` appends the proposal
with ``expected_seq=view.seq``, so if anything was appended after the view was read the
store raises :class:`~eventstore.errors.ConflictError` and the caller plans again against
the new view instead of writing a stale condensation.

Cut points: a condensation forgets a prefix of the view's tail. :func:`cut_points` lists
the positions where the tail may be cut without separating a tool call from its result
(parallel calls of one assistant message stay together with all their results) and
without forgetting a call that is still waiting for its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from eventstore.events import Condensation, Prune, ToolCallPart, ToolResultPart
from eventstore.tokens import MESSAGE_OVERHEAD, HeuristicTokenCounter, TokenCounter

if TYPE_CHECKING:
    from eventstore.budget import Budget
    from eventstore.store import AsyncEventStore, EventStore
    from eventstore.views import View, ViewItem

__all__ = [
    "SHORTENED",
    "fit_summary",
    "summary_room",
    "Trigger",
    "PlanContext",
    "Proposal",
    "Condenser",
    "apply",
    "apply_async",
    "cut_points",
    "pending_call_ids",
    "choose_cut",
    "condensation_for",
    "previous_condensation",
    "newly_forgotten",
    "range_start",
]

Trigger = Literal["threshold", "count", "manual", "overflow", "import"]


@dataclass
class PlanContext:
    """Why and how far to condense, handed to every strategy.

    Attributes:
        trigger: What asked for condensation.
        target_tokens: The view size to aim for after condensing.
        focus: Focus instructions for a summary (from a manual request).
        request_seq: Seq of the :class:`~eventstore.events.CondensationRequest` answered.
        token_counter: Counts summary tokens the way the store counts parts.
        force: Condense even when the view is under target (manual requests, overflows).
        min_gain: Write nothing when the whole run would free less than this fraction of
            the view and the view already fits the budget (``0``: no minimum).
        intake: Only act on what the model has not been sent yet (the results of its
            newest calls), so nothing already in the provider's prompt cache changes: the
            pass a policy runs on every check.
        headroom: Tokens of the conversation room (the available tokens less the pinned
            head) a summary leaves free: it takes at most the rest, so that the turns
            after a condensation append without rewriting the prompt prefix (``0``: the
            summary may fill the view up to the budget).
        batch: A pass between condensations: a prune there is a prompt-cache break of
            its own, so :class:`~condensers.ToolOutputPruner` acts only when it frees a
            batch (its ``batch_fraction`` of the conversation window).
        condensing: The view is over the threshold and the run rewrites the prompt
            prefix anyway: :class:`~condensers.ToolOutputPruner` compacts every old
            output it may, whatever its minimum, in the same append.
        keep_tokens: In a condensing run, the tokens of newest unpinned messages the
            pipeline's summary step keeps (set by :meth:`~condensers.Pipeline.plan_all`):
            older outputs are forgotten by the summary, so the pruner's token protection
            does not reach past them (only its newest steps stay protected).
    """

    trigger: Trigger = "threshold"
    target_tokens: int | None = None
    focus: str | None = None
    request_seq: int | None = None
    token_counter: TokenCounter = field(default_factory=HeuristicTokenCounter)
    force: bool = False
    min_gain: float = 0.0
    intake: bool = False
    headroom: int = 0
    batch: bool = False
    condensing: bool = False
    keep_tokens: int | None = None

    def target(self, budget: Budget, fraction: float = 0.5) -> int:
        """The target in tokens: explicit, or ``fraction`` of the budget."""
        return self.target_tokens if self.target_tokens is not None else budget.fraction(fraction)


@dataclass
class Proposal:
    """One event a condenser wants to append, with its expected effect."""

    event: Prune | Condensation
    """The event to append."""
    condenser: str
    """Name of the strategy that made it."""
    tokens_before: int
    """View tokens when planned."""
    tokens_after: int
    """Estimated view tokens once applied."""
    view_seq: int
    """The view's seq; the append expects the head still to be there."""
    latency_ms: float = 0.0
    """Time spent planning (summaries included)."""
    notes: list[str] = field(default_factory=list)
    """What happened while planning (fallbacks, retries)."""


@runtime_checkable
class Condenser(Protocol):
    """A strategy that shrinks a view by proposing one event."""

    name: str

    def settings(self) -> dict[str, Any]:
        """Settings recorded on the events it writes."""
        ...

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        """Propose a prune or condensation for ``view``, or ``None`` when there is nothing
        worth doing. Must not write."""
        ...


def apply(store: EventStore, view: View, proposal: Proposal) -> int:
    """Append ``proposal`` if the session head is still ``view.seq``; returns its seq.

    Raises:
        ConflictError: something was appended after the view was read; plan again.
    """
    return store.append(view.session_id, [proposal.event], expected_seq=proposal.view_seq)[0]


async def apply_async(store: AsyncEventStore, view: View, proposal: Proposal) -> int:
    """The asyncio twin of :func:`apply`."""
    seqs = await store.append(view.session_id, [proposal.event], expected_seq=proposal.view_seq)
    return seqs[0]


# --------------------------------------------------------------------------- tool pairs


def _pairs(
    items: Sequence[ViewItem],
) -> tuple[list[tuple[int, int]], list[tuple[int, str]]]:
    """Call/result pairs as positions into ``items``, and the unanswered calls (position, id).

    Pairing is positional, as the view renders it: the k-th call with an id takes the k-th
    result with that id (some agents reuse call ids within one history, so an id alone
    does not name one call).
    """
    calls: dict[str, list[int]] = {}
    results: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        for p in item.message.parts:
            if isinstance(p, ToolCallPart) and item.message.role == "assistant":
                calls.setdefault(p.id, []).append(i)
            elif isinstance(p, ToolResultPart):
                results.setdefault(p.tool_call_id, []).append(i)
    pairs: list[tuple[int, int]] = []
    unanswered: list[tuple[int, str]] = []
    for cid, at in calls.items():
        got = results.get(cid, [])
        pairs.extend(zip(at, got, strict=False))
        unanswered.extend((i, cid) for i in at[len(got) :])
    return pairs, sorted(unanswered)


def _trailing(items: Sequence[ViewItem]) -> int | None:
    """Position of the newest assistant message that nothing but tool output follows."""
    for i in range(len(items) - 1, -1, -1):
        msg = items[i].message
        if msg.role == "user":
            return None
        if msg.role == "assistant" and (msg.tool_calls or msg.text):
            return i
    return None


def pending_call_ids(items: Sequence[ViewItem]) -> set[str]:
    """Calls still waiting for a result: unanswered, with no user or assistant message after.

    An unanswered call followed by more conversation belongs to an interrupted run (the
    view renders an explicit "interrupted" result for it) and may be condensed; a trailing
    one may still be answered and must stay visible.
    """
    last = _trailing(items)
    return {cid for i, cid in _pairs(items)[1] if i == last}


def cut_points(items: Sequence[ViewItem]) -> list[int]:
    """Indexes ``i`` into the unpinned items where ``items[:i]`` may be forgotten.

    A cut is valid when no tool call before it has its result at or after it (and no
    result before it belongs to a call after it), and nothing before it is a pending call.
    Index 0 (forget nothing) is always valid; ``len(items)`` is valid when the whole tail
    could go. Calls and results pair by position (see :func:`_pairs`).
    """
    n = len(items)
    pairs, unanswered = _pairs(items)
    blocked = [False] * (n + 1)
    for a, b in pairs:
        lo, hi = min(a, b), max(a, b)
        for k in range(lo + 1, hi + 1):
            blocked[k] = True
    last = _trailing(items)
    first_pending = last if any(i == last for i, _ in unanswered) else None
    out = []
    for k in range(n + 1):
        if blocked[k]:
            continue
        if first_pending is not None and k > first_pending:
            continue
        out.append(k)
    return out


def previous_condensation(view: View) -> Condensation | None:
    """The condensation that defines ``view``, if any."""
    if view.condensation is None:
        return None
    evt = view.condensation.event
    return evt if isinstance(evt, Condensation) else None


def range_start(view: View) -> int:
    """First seq of the forgotten range: right after the pinned head.

    The range may not contain a pinned seq; a stray unpinned message before the last pin
    (unusual) is forgotten together with the range.
    """
    prev = previous_condensation(view)
    start = prev.forgotten_from if prev is not None else 1
    pinned = [i.seq for i in view.items if i.pinned]
    if pinned:
        start = max(start, max(pinned) + 1)
    return start


def choose_cut(
    view: View,
    keep_tokens: int,
    *,
    min_keep: int = 1,
) -> int:
    """How many unpinned items to forget so the rest fits ``keep_tokens``.

    Keeps the newest items whose tokens fit, moving the cut to the nearest valid cut point
    that keeps at least as much as fits (never splitting a tool group). At least the newest
    ``min_keep`` items stay when a valid cut allows it.
    Returns the count of unpinned items to forget (0: nothing).
    """
    tail = [i for i in view.items if not i.pinned]
    n = len(tail)
    points = cut_points(tail)
    # suffix[k] = tokens of tail[k:]
    suffix = [0] * (n + 1)
    for k in range(n - 1, -1, -1):
        suffix[k] = suffix[k + 1] + tail[k].tokens
    limit = max(n - min_keep, 0)
    start = range_start(view)
    floor = sum(1 for i in tail if i.seq < start)
    best = 0
    for k in points:
        if k > limit:
            break
        best = k
        if suffix[k] <= keep_tokens and k >= floor:
            break
    return best


def condensation_for(
    view: View,
    forget: int,
    *,
    summary: str | None,
    condenser: str,
    settings: dict[str, Any],
    ctx: PlanContext,
    **fields: Any,
) -> tuple[Condensation, int]:
    """A condensation forgetting the first ``forget`` unpinned items, and the view's tokens
    after it.

    The forgotten range starts right after the pinned head and ends just before the first
    kept item, so it covers everything the previous condensation forgot as well: the new
    condensation alone defines the view.
    """
    pinned = [i for i in view.items if i.pinned]
    tail = [i for i in view.items if not i.pinned]
    pinned_seqs = [i.seq for i in pinned]
    start = range_start(view)
    forget = max(forget, sum(1 for i in tail if i.seq < start))
    end = tail[forget].seq - 1 if forget < len(tail) else view.seq
    pinned_inside = sum(1 for s in pinned_seqs if start <= s <= end)
    counter = ctx.token_counter
    prefix = view.options.summary_prefix
    summary_tokens = counter.count(summary) if summary else 0
    shown_tokens = (MESSAGE_OVERHEAD + counter.count(prefix + summary)) if summary else 0
    kept = sum(i.tokens for i in pinned) + sum(i.tokens for i in tail[forget:])
    after = kept + shown_tokens + view.extra_tokens
    evt = Condensation(
        forgotten_from=start,
        forgotten_to=end,
        summary=summary,
        summary_tokens=summary_tokens,
        pinned=pinned_seqs,
        forgotten_events=end - start + 1 - pinned_inside,
        condenser=condenser,
        settings=settings,
        trigger=ctx.trigger,
        tokens_before=view.tokens,
        tokens_after=after,
        supersedes=view.condensation.seq if view.condensation is not None else None,
        focus=ctx.focus,
        request_seq=ctx.request_seq,
        **fields,
    )
    return evt, after


SHORTENED = "[summary shortened to fit the context window]"
"""The line that ends a summary :func:`fit_summary` had to cut."""


def summary_room(view: View, forget: int, budget: Budget, ctx: PlanContext) -> int:
    """Tokens a summary may use so that the view, cut at ``forget``, fits the budget; with
    ``ctx.headroom``, at most the conversation room (the available tokens less the pinned
    head) less the headroom."""
    pinned = sum(i.tokens for i in view.items if i.pinned)
    kept = pinned + sum(i.tokens for i in [i for i in view.items if not i.pinned][forget:])
    framing = MESSAGE_OVERHEAD + ctx.token_counter.count(view.options.summary_prefix)
    room = budget.available - kept - view.extra_tokens - framing
    conversation = budget.available - pinned - view.extra_tokens
    if ctx.headroom <= 0 or room <= 0 or conversation <= ctx.headroom:
        return room
    return min(room, conversation - ctx.headroom)


def fit_summary(
    summary: str | None, room: int, counter: TokenCounter, *, slack: int = 0
) -> str | None:
    """``summary`` cut to at most ``room`` tokens (``None`` when not even a line fits).

    A view that fits beats a complete summary: the model rejects one that does not. The
    longest section loses its newest lines first, so every heading (and the start of
    every list) survives as long as possible; a line saying the summary was shortened
    ends the result.

    A ``room`` below 0 means what no condensation may drop (the pinned head, the newest
    group) is over the budget by itself. Within ``slack`` of it (pass the budget's
    buffer: the view is then still inside the model's window) the summary is left out,
    which is what lets the view through; further over, the view is over the window
    whatever is shown, and the summary is kept (it is what the view knows). Either way
    the condensers carry the whole summary on the event (``carried``), so the next one
    builds on every fact it held.
    """
    if room < 0:
        return None if room >= -slack else summary
    if not summary or counter.count(summary) <= room:
        return summary
    budget = room - counter.count("\n" + SHORTENED)
    if budget < 8:
        return None
    sections: list[list[str]] = [[]]
    for line in summary.splitlines():
        if line.startswith("#") and sections[-1]:
            sections.append([])
        sections[-1].append(line)

    def text() -> str:
        return "\n".join(ln for sec in sections for ln in sec).strip()

    # Long quotes first (a list entry costs a few tokens, a quote hundreds), then entries.
    while counter.count(text()) > budget:
        sec, i = max(
            ((sec, i) for sec in sections for i in range(len(sec))),
            key=lambda at: len(at[0][at[1]]),
        )
        line = sec[i]
        if len(line) <= 160:
            break
        half = len(line) // 4
        sec[i] = f"{line[:half]} … {line[-half:]}"
    while counter.count(text()) > budget:
        longest = max(sections, key=lambda sec: (len(sec), sum(map(len, sec))))
        body = len(longest) - (1 if longest[0].startswith("#") else 0)
        if body <= 1:
            break  # one line per section left: cut characters instead
        longest.pop()
    out = text()
    if counter.count(out) > budget:
        out = out[: max(budget, 0) * 3].rstrip()  # 3 chars a token: under any estimate
        while out and counter.count(out) > budget:
            out = out[: len(out) * 3 // 4].rstrip()
    return f"{out}\n{SHORTENED}" if out else None


def newly_forgotten(view: View, forget: int) -> list[Any]:
    """The stored events a cut of ``forget`` unpinned items removes from the view."""
    return [i.stored for i in view.items if not i.pinned][:forget]
