"""When to condense: thresholds, event counts, manual requests, overflows, and a breaker.

:class:`CondensationPolicy` decides whether a session's view needs condensing and runs its
pipeline:

* **threshold**: the view uses more than ``threshold`` of the budget; condense down to
  ``target`` of it;
* **count**: the view holds more than ``max_events`` messages; keep about half;
* **manual**: a :class:`~eventstore.events.CondensationRequest` was appended (like
  ``/compact focus on the auth bug``); the summarizing step runs with its focus and the
  condensation records ``request_seq`` and ``focus``. A request that cannot be honoured
  (nothing to forget) is answered with a ``condenser.request_declined`` event;
* **overflow**: the model rejected the context (see :func:`complete`); condense to half
  of what was sent and retry once.

Every condensation rewrites the prompt prefix, which costs the provider's prompt cache
the whole view. So the policy condenses as rarely as it can: by default only when the view
no longer fits (``threshold=1.0``: the budget already sets aside the reply and a margin);
with a lower threshold, after a condensation it waits until ``regrow`` of the budget is new
(a view over the budget condenses at once); and a threshold or count run that would free
less than ``min_gain`` of a view that still fits writes nothing. When it does condense, it
condenses far enough to last: its summary takes at most the conversation room (the
available tokens less the pinned head) less ``headroom`` of it (60%), so that the next
several turns append without a rewrite even when the pinned head takes most of the budget
(there ``target`` is out of reach, and the summary used to fill the view back up to the
budget, which made every turn or two a condensation). Old tool outputs are compacted in
batches (``batch_prune``): between condensations the
:class:`~condensers.ToolOutputPruner` writes only once it frees its ``batch_fraction`` of
the conversation window (a quarter), and a threshold or count run prunes every old output
outside the pruner's protection, whatever its minimum, in its own append: the two cost one
prompt rewrite, not two. On every check, what the model has not been sent yet is held
to a share of the room first: its newest reply to the pipeline's
:class:`~condensers.NewestTruncator` cap, the results of its calls to the
:class:`~condensers.ResultTruncator` fresh cap (neither was ever sent, so this changes no
cached prefix). A summary is cut down (:func:`condensers.base.fit_summary`)
rather than push a view that could fit over the budget.

A circuit breaker stops automatic (threshold and count) condensation after
``max_failures`` consecutive runs that left the view over the budget (or raised), and
records a ``condenser.circuit_open`` event. A run that found nothing worth writing while
the view fits is not a failure, and neither is one left over the budget by a newest message
group that does not fit beside the pinned head (the next turn lets it be forgotten).
Manual requests and overflows still run, and a successful run closes the breaker again.
The breaker re-arms for one automatic attempt (half-open) once ``regrow`` of the budget is
new since it opened, or after ``retry_after_events`` events when that is set; if the
attempt fails the wait restarts.

The breaker's state lives in the log, not in the policy object: each failed automatic run
appends ``condenser.circuit_failure`` (the count so far), the run that trips it
``condenser.circuit_open``, and a success after failures ``condenser.circuit_closed``, in
the same append as the run's own events. The view read brings the newest of them along
(:attr:`~eventstore.views.View.control`), so a restarted process, or another policy
object, sees the same breaker; a condensation written after them starts a clean slate.

A run that loses a race to a concurrent writer re-plans on the new head (the pipeline's
``max_conflicts``). That is not a failure: when the winner already did the work the run
writes nothing and leaves the breaker as it was, and when every re-plan lost too the run
returns with ``skipped="conflict"`` (a manual request stays pending for the next check).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from eventstore import llm
from eventstore.errors import ConfigurationError, ConflictError
from eventstore.events import CondensationRequest, Custom, Event, LLMCall, Message
from eventstore.tokens import HeuristicTokenCounter, TiktokenCounter, TokenCounter, message_tokens
from eventstore.views import llm_call_events

from ._io import Complete, Routine, adrive, append, drive, read_view
from .base import PlanContext, Trigger
from .pipeline import Outcome, Pipeline, default_pipeline
from .pruning import NewestTruncator, ResultTruncator, ToolOutputPruner, unseen_seqs
from .window import WindowCondenser

if TYPE_CHECKING:
    from eventstore.budget import Budget
    from eventstore.store import AsyncEventStore, EventStore
    from eventstore.views import View, ViewOptions

__all__ = [
    "CondensationPolicy",
    "Decision",
    "CIRCUIT_OPEN",
    "CIRCUIT_FAILURE",
    "CIRCUIT_CLOSED",
    "Breaker",
    "REQUEST_DECLINED",
    "is_context_window_error",
    "complete",
    "acomplete",
]

CIRCUIT_OPEN = "condenser.circuit_open"
"""Name of the custom event written when the breaker opens."""
CIRCUIT_FAILURE = "condenser.circuit_failure"
"""Name of the custom event that counts a failed automatic run (``data["failures"]``)."""
CIRCUIT_CLOSED = "condenser.circuit_closed"
"""Name of the custom event written when a run succeeds after failures."""
REQUEST_DECLINED = "condenser.request_declined"
"""Name of the custom event answering a request that could not be honoured."""


REAL_CHECK_FROM = 0.35
"""Views whose estimate passes this share of the threshold are checked with the real
tokenizer. The four-characters-a-token estimate runs 10-25% low on code and listings, and
up to 2.7 times low on encoded data (base64, hashes), measured over the parts of the
quality benchmark's tune corpus against cl100k; counts are cached by text, so a check
tokenizes only what is new since the last one."""


@dataclass(frozen=True)
class Breaker:
    """A session's breaker, as the newest breaker event in a view says."""

    failures: int = 0
    """Consecutive failed automatic runs."""
    opened_at: int | None = None
    """Seq of the event that opened the breaker (or restarted its wait), when open."""

    @classmethod
    def of(cls, view: View) -> Breaker:
        """The breaker state recorded in ``view.control`` (closed when nothing is)."""
        for stored in reversed(view.control):
            evt = stored.event
            if not isinstance(evt, Custom) or not evt.name.startswith("condenser.circuit"):
                continue
            data = evt.data if isinstance(evt.data, dict) else {}
            failures = data.get("failures")
            failures = failures if isinstance(failures, int) else 0
            if evt.name == CIRCUIT_OPEN or (evt.name == CIRCUIT_FAILURE and data.get("open")):
                return cls(failures, stored.seq)
            if evt.name == CIRCUIT_FAILURE:
                return cls(failures)
            return cls()
        return cls()


@dataclass
class Decision:
    """Whether to condense now, and how."""

    trigger: Trigger | None
    """What fires (``None``: nothing to do)."""
    focus: str | None = None
    """Focus of a manual request."""
    request_seq: int | None = None
    """Seq of the manual request."""
    target_tokens: int | None = None
    """Explicit target, when the trigger sets one."""
    force: bool = False
    """Condense even below the target."""
    windows: bool = False
    """Run only the pipeline's windows that keep ``max_interactions`` (the view holds
    more interactions than one of them keeps)."""
    headroom: int = 0
    """Tokens the run leaves free below the budget (see :attr:`PlanContext.headroom`)."""


class CondensationPolicy:
    """Triggers, targets and a circuit breaker around a :class:`Pipeline`.

    Args:
        budget: The agent model's budget.
        pipeline: The strategies (default: :func:`default_pipeline`, offline).
        threshold: Condense when the view exceeds this fraction of the budget (default
            1.0: when it no longer fits; lower values condense ahead, at the price of more
            condensations and prompt-cache misses).
        target: Aim for this fraction of the budget after condensing.
        max_events: Condense when the view holds more messages than this (``None``: off).
        regrow: Hysteresis, as a fraction of the budget: after a condensation the
            threshold trigger waits until the view has grown by this much since it (a
            view over the budget condenses at once). It also re-arms an open breaker.
            Default: ``threshold - target``, the growth a fresh cycle needs.
        min_gain: A threshold or count run that would free less than this fraction of
            the view, while the view still fits, writes nothing (it would break the
            prompt cache for little).
        headroom: Hysteresis in the other direction, as a fraction of the conversation
            room (the available tokens less the pinned head): a threshold or count run
            leaves at least this much of it free, forgetting more of the tail and, if
            need be, shortening the summary, so that the next several turns append to
            the prompt without rewriting it. It matters when the pinned head takes most
            of the budget (a small model, a long system prompt), where ``target`` alone
            cannot be reached and the summary would otherwise fill the view back up to
            the budget.
        headroom_turns: The headroom is also at least this many turns at the session's
            own pace (the mean tokens a model call added to the view's tail), up to
            ``max_headroom`` of the room. Where one turn is a large share of the room (a
            small model: at 4k a turn adds about a quarter of what a 1,700-token head
            leaves), the summary gets less so that a condensation lasts several turns;
            where turns are small beside the room ``headroom`` is the larger and this
            changes nothing. ``0`` turns it off.
        max_headroom: The most of the room ``headroom_turns`` may keep free (the
            summary always gets the rest).
        batch_prune: On every check that condenses nothing, run the pipeline's
            :class:`~condensers.ToolOutputPruner` in batch mode: it writes only once the
            old tool output it can compact reaches its ``batch_fraction`` of the
            conversation window. A run with much tool output sees old outputs pruned
            even when intake truncation keeps its view under the budget; when a
            condensation runs, the pruner runs in the same append (one rewrite).
        max_failures: Consecutive automatic runs that left the view over the budget (or
            failed) before the breaker opens.
        retry_after_events: Events after which an open breaker also allows one more
            automatic attempt, whatever the growth (``None``: growth only).
        options: View options used to build and measure views.
        token_counter: Counts summary tokens (use the store's counter).
        use_usage: Decide on the provider's recorded usage when the session has it: the
            newest model call's prompt tokens (cached ones included) plus what was
            appended since, its reply among it (the heuristic fills only that gap), and
            aim the run's target so the real size lands on it.
        real_counter: Checks a view that comes near the threshold with a real tokenizer
            when the session has no recorded usage for it, and decides on the larger of
            that count and the stored estimates, so that an estimate running low never
            lets an overflowing view through; the result of every run is counted with it
            too (:attr:`Outcome.real_tokens`), and condensed once more, with the budget
            scaled by how far the estimates ran low, when it is over the budget by that
            count (see :meth:`run_budget`). Default: tiktoken ``cl100k_base`` when it
            can be read offline (litellm ships it), else the estimates alone; ``False``
            turns the check off.
    """

    def __init__(
        self,
        budget: Budget,
        pipeline: Pipeline | None = None,
        *,
        threshold: float = 1.0,
        target: float = 0.5,
        max_events: int | None = None,
        regrow: float | None = None,
        min_gain: float = 0.1,
        headroom: float = 0.6,
        headroom_turns: float = 3.0,
        max_headroom: float = 0.9,
        batch_prune: bool = True,
        max_failures: int = 3,
        retry_after_events: int | None = None,
        options: ViewOptions | None = None,
        token_counter: TokenCounter | None = None,
        use_usage: bool = True,
        real_counter: TokenCounter | bool | None = None,
    ) -> None:
        if not 0 < target <= threshold <= 1:
            raise ConfigurationError(
                f"need 0 < target <= threshold <= 1, got target={target}, threshold={threshold}"
            )
        self.budget = budget
        self.pipeline = pipeline or default_pipeline(target_fraction=target)
        self.threshold = threshold
        self.target = target
        self.max_events = max_events
        if regrow is None:
            regrow = threshold - target
        if not 0 <= regrow <= 1 or not 0 <= min_gain < 1:
            raise ConfigurationError(
                f"need 0 <= regrow <= 1 and 0 <= min_gain < 1, got regrow={regrow}, "
                f"min_gain={min_gain}"
            )
        if not 0 <= headroom < 1 or not 0 <= max_headroom < 1 or headroom_turns < 0:
            raise ConfigurationError(
                "need 0 <= headroom < 1, 0 <= max_headroom < 1 and headroom_turns >= 0, got "
                f"headroom={headroom}, max_headroom={max_headroom}, "
                f"headroom_turns={headroom_turns}"
            )
        self.regrow = regrow
        self.min_gain = min_gain
        self.headroom = headroom
        self.headroom_turns = headroom_turns
        self.max_headroom = max_headroom
        self.batch_prune = batch_prune
        self.max_failures = max_failures
        self.retry_after_events = retry_after_events
        self.options = options
        self.token_counter = token_counter or HeuristicTokenCounter()
        self.use_usage = use_usage
        self._real_counter = real_counter
        self._seen: dict[str, Breaker] = {}  # the newest state read, for is_open only
        self._opened: set[str] = set()  # sessions first_open has answered

    # -- decisions

    @property
    def real_counter(self) -> TokenCounter | None:
        """The tokenizer views near the threshold are checked with (loaded on first use)."""
        counter = self._real_counter
        if counter is None or counter is True:
            counter = self._real_counter = TiktokenCounter.load() or False
        return None if isinstance(counter, bool) else counter

    def view_size(self, view: View) -> int | None:
        """The size to decide on: the recorded usage when the session has it (with
        ``use_usage``), else, near the threshold, the larger of the stored estimates and
        the real tokenizer's count of the rendered view; ``None``: the estimates."""
        size = view.measured_tokens() if self.use_usage else None
        if size is not None and size != view.tokens:
            return size  # the provider's own count of a recent call
        if self._real_counter is False:
            return size
        near = self.budget.fraction(self.threshold * REAL_CHECK_FROM)
        if view.tokens < near:
            return size
        counter = self.real_counter
        if counter is None:
            return size
        return max(view.tokens, message_tokens(view.to_messages(), counter))

    def first_open(self, session_id: str) -> bool:
        """Whether this is the first time the session is opened through this policy (its
        first load in the process, when the process holds one policy): the moment
        :func:`complete` and the adapters run :meth:`maybe_prune`. Answers ``True``
        once per session."""
        if session_id in self._opened:
            return False
        self._opened.add(session_id)
        return True

    def is_open(self, session_id: str) -> bool:
        """Whether the breaker was open in the newest view of the session this policy read
        (the state itself is in the log: see :meth:`Breaker.of`)."""
        return self._seen.get(session_id, Breaker()).opened_at is not None

    def decide(
        self,
        view: View,
        requests: Sequence[tuple[int, CondensationRequest]] = (),
        tokens: int | None = None,
    ) -> Decision:
        """What to do for ``view``, given pending manual requests (seq, request) and, when
        known, its real size in ``tokens`` (default: the stored estimates)."""
        size = view.tokens if tokens is None else tokens
        if requests:
            seq, req = requests[-1]
            target = min(self.budget.fraction(self.target), view.tokens // 2)
            return Decision("manual", req.focus, seq, target_tokens=target, force=True)
        breaker = Breaker.of(view)
        self._seen[view.session_id] = breaker
        opened = breaker.opened_at
        regrow = self.budget.fraction(self.regrow)
        if opened is not None:
            waited = self.retry_after_events is not None and (
                view.seq - opened >= self.retry_after_events
            )
            if not waited and grown_since(view, opened) < max(regrow, 1):
                return Decision(None)
            # Half-open: one attempt; a failure records the wait's new start.
        if size > self.budget.fraction(self.threshold):
            last = view.condensation
            if (
                size <= self.budget.available
                and last is not None
                and grown_since(view, last.seq) < regrow
            ):
                return Decision(None)  # hysteresis: it fits, and little is new since
            headroom = self.headroom_tokens(view)
            if size > view.tokens > 0:
                # The estimates run low: aim lower so the real size lands on the target,
                # and leave the headroom free by the real count too.
                scaled = self.budget.fraction(self.target) * view.tokens // size
                ceiling = (self.budget.available - headroom) * view.tokens // size
                headroom = self.budget.available - ceiling
                return Decision("threshold", target_tokens=scaled, headroom=headroom)
            return Decision("threshold", headroom=headroom)
        if any(w.over_by(view) for w in self._interaction_windows()):
            # A window that keeps max_interactions acts whenever the view holds more,
            # whatever its size (DSPy's window runs on every step).
            return Decision("count", force=True, windows=True)
        if self.max_events is not None:
            tail = [i for i in view.items if not i.pinned]
            if len(tail) > self.max_events:
                keep = tail[len(tail) - max(self.max_events // 2, 1) :]
                pinned = sum(i.tokens for i in view.items if i.pinned)
                target = pinned + view.summary_tokens + sum(i.tokens for i in keep)
                target = min(target, self.budget.fraction(self.target))
                return Decision(
                    "count", target_tokens=target, force=True, headroom=self.headroom_tokens(view)
                )
        return Decision(None)

    def run_budget(self, estimate: int, real: int | None) -> Budget:
        """The budget the run after a condensation plans with, in the stored estimates
        (see :meth:`_recheck`): :attr:`budget`, or, when the view's real count (``real``)
        is over its estimate, one whose available tokens are scaled down by as much (the
        difference joins the buffer), so that every step (the head cut's floor, the room
        the summary and the kept messages get) fits by the real count, not only by the
        estimates."""
        if real is None or estimate <= 0 or real <= estimate:
            return self.budget
        cut = self.budget.available - max(self.budget.available * estimate // real, 1)
        return replace(self.budget, buffer=self.budget.buffer + cut)

    def headroom_tokens(self, view: View) -> int:
        """Tokens a threshold or count run on ``view`` leaves free below the budget:
        ``headroom`` of the room the pinned head leaves, or ``headroom_turns`` turns at
        the session's pace (:func:`turn_tokens`) when more, up to ``max_headroom`` of it."""
        pinned = sum(i.tokens for i in view.items if i.pinned) + view.extra_tokens
        room = max(self.budget.available - pinned, 0)
        share = int(self.headroom * room)
        pace = int(self.headroom_turns * turn_tokens(view))
        return max(share, min(pace, int(self.max_headroom * room)))

    def _ctx(self, d: Decision) -> PlanContext:
        return PlanContext(
            trigger=d.trigger or "manual",
            target_tokens=d.target_tokens,
            min_gain=self.min_gain
            if d.trigger in ("threshold", "count") and not d.windows
            else 0.0,
            focus=d.focus,
            request_seq=d.request_seq,
            token_counter=self.token_counter,
            force=d.force,
            headroom=d.headroom,
            condensing=d.trigger in ("threshold", "count") and not d.windows,
        )

    def _steps(self, d: Decision) -> list[Any] | None:
        if d.windows:
            return list(self._interaction_windows())
        return self.pipeline.summarizing_steps() if d.trigger == "manual" else None

    def _interaction_windows(self) -> list[WindowCondenser]:
        return [
            s
            for s in self.pipeline.steps
            if isinstance(s, WindowCondenser) and s.max_interactions is not None
        ]

    # -- running

    def pending_requests(self, view: View) -> list[tuple[int, CondensationRequest]]:
        """Manual requests after the view's condensation that were not declined yet (read
        from :attr:`View.control`, which the store fills in the same read as the view)."""
        return _pending(view.control)

    def maybe_condense(self, store: EventStore, session_id: str) -> Outcome:
        """Condense the session if a trigger fires; returns what was done.

        One read of the view and, when something is written, one append holding every
        step's event and the policy's own bookkeeping.
        """
        return drive(self.routine(session_id), store)

    async def amaybe_condense(self, store: AsyncEventStore, session_id: str) -> Outcome:
        """:meth:`maybe_condense` on an :class:`~eventstore.AsyncEventStore`."""
        return await adrive(self.routine(session_id), store)

    def maybe_prune(self, store: EventStore, session_id: str) -> Outcome:
        """Run the pipeline's tool-output pruners now, whatever the thresholds say.

        A cheap pass for the start of a session (or any quiet moment): old tool outputs
        are compacted once enough can be freed, before the view ever overflows. Each
        pruner keeps its own protection and minimum; nothing lossy runs. Writes at most
        one append; ``Outcome.skipped`` is ``"no_pruner"`` when the pipeline has none.
        """
        return drive(self.prune_routine(session_id), store)

    async def amaybe_prune(self, store: AsyncEventStore, session_id: str) -> Outcome:
        """:meth:`maybe_prune` on an :class:`~eventstore.AsyncEventStore`."""
        return await adrive(self.prune_routine(session_id), store)

    def prune_routine(self, session_id: str, view: View | None = None) -> Routine[Outcome]:
        """The routine behind :meth:`maybe_prune` (for ``condensers._io`` drivers); pass
        the ``view`` already read to read nothing."""
        if view is None:
            view = yield from read_view(session_id, self.options)
        steps = [s for s in self.pipeline.steps if isinstance(s, ToolOutputPruner)]
        if not steps:
            return _idle(view, self, "no_pruner")
        # Target 0 and no force: every pruner plans, each against its own minimum.
        ctx = PlanContext(trigger="manual", target_tokens=0, token_counter=self.token_counter)
        return (
            yield from self.pipeline.routine(
                session_id, self.budget, ctx, self.options, steps, view, catch=True
            )
        )

    def condense(
        self,
        store: EventStore,
        session_id: str,
        *,
        trigger: Trigger = "manual",
        focus: str | None = None,
    ) -> Outcome:
        """Condense now, whatever the thresholds say (used for overflows)."""
        return drive(self.routine(session_id, trigger=trigger, focus=focus), store)

    async def acondense(
        self,
        store: AsyncEventStore,
        session_id: str,
        *,
        trigger: Trigger = "manual",
        focus: str | None = None,
    ) -> Outcome:
        """:meth:`condense` on an :class:`~eventstore.AsyncEventStore`."""
        return await adrive(self.routine(session_id, trigger=trigger, focus=focus), store)

    def routine(
        self,
        session_id: str,
        *,
        trigger: Trigger | None = None,
        focus: str | None = None,
        view: View | None = None,
    ) -> Routine[Outcome]:
        """The check-and-condense routine behind the methods above (for ``condensers._io``
        drivers). With ``trigger`` it condenses whatever the thresholds say."""
        if view is None:
            view = yield from read_view(session_id, self.options)
        capped: Outcome | None = None
        if trigger is None:
            # The unseen reply and results first: capping them changes no cached prefix,
            # and may make a condensation (which would) unnecessary. Decided on the view as the cap
            # leaves it; written on its own only when nothing else runs (a run caps them
            # in its own append: one write per check).
            intake = self._intake_plan(view)
            size = self.view_size(intake)
            decision = self.decide(intake, self.pending_requests(intake), size)
            if decision.trigger is None:
                if intake is not view:
                    capped = yield from self._intake(session_id, view)
                    if capped is not None and capped.view is not None:
                        view = capped.view
                batched = None
                if self.batch_prune:
                    batched = yield from self._batch(session_id, view)
                if batched is not None:
                    if capped is not None:
                        batched.tokens_before = capped.tokens_before
                        batched.steps[:0] = capped.steps
                    return batched
                skipped = "circuit_open" if self.is_open(session_id) else "under_threshold"
                return capped if capped is not None else _idle(view, self, skipped)
        else:
            target = min(self.budget.fraction(self.target), view.tokens // 2)
            decision = Decision(trigger, focus, target_tokens=target, force=True)
        started_on = view.condensation.seq if view.condensation is not None else None
        try:
            out = yield from self.pipeline.routine(
                session_id,
                self.budget,
                self._ctx(decision),
                self.options,
                self._steps(decision),
                view,
                extra=lambda planned: self._bookkeeping(planned, decision, started_on),
                catch=True,  # a failing strategy never corrupts the log
            )
        except ConflictError:
            # Every re-plan lost to another writer: not a failure, nothing was written, and
            # a manual request stays pending for the next check.
            lost = _idle(view, self, "conflict")
            lost.trigger = decision.trigger
            lost.conflicts = self.pipeline.max_conflicts + 1
            return lost
        if capped is not None:
            out.tokens_before = capped.tokens_before
            out.steps[:0] = capped.steps
        out = yield from self._recheck(session_id, out, decision)
        first = lost_race_to(out, started_on)
        if first is not None and decision.trigger == "manual" and out.error is None:
            out.error = race_message(first)
        elif decision.trigger == "manual" and not out.fits and out.error is None:
            out.error = unfit_message(out)
        return out

    def _recheck(self, session_id: str, out: Outcome, d: Decision) -> Routine[Outcome]:
        """After a run, count the result with the real tokenizer (when at hand and the
        session has no usage to go by), into :attr:`Outcome.real_tokens`: a view the
        estimates put under the budget but the tokenizer does not is condensed once more,
        to a target and a budget (:meth:`run_budget`) scaled by how far the estimates ran
        low, and counted again. A view still over the budget by the tokenizer after that
        is as small as the rules allow: the outcome says so (``fits`` is false)."""
        view = out.view  # also when the run wrote nothing: the estimates said it fit
        if view is None or out.error is not None:
            return out
        counter = self.real_counter
        if counter is None or (self.use_usage and view.measured_tokens() != view.tokens):
            return out
        real = out.real_tokens = message_tokens(view.to_messages(), counter)
        if real <= self.budget.available or view.tokens <= 0:
            return out
        target = self.budget.fraction(self.target) * view.tokens // real
        again = Decision(d.trigger or "threshold", d.focus, target_tokens=target, force=True)
        try:
            more = yield from self.pipeline.routine(
                session_id,
                self.run_budget(view.tokens, real),
                self._ctx(again),
                self.options,
                None,
                view,
                catch=True,
            )
        except ConflictError:
            return out
        if not more.steps or more.view is None:
            return out
        more.tokens_before = out.tokens_before
        more.available = out.available  # the budget's, not the scaled one planned with
        more.steps[:0] = out.steps
        more.trigger = out.trigger
        more.real_tokens = message_tokens(more.view.to_messages(), counter)
        return more

    def _batch(self, session_id: str, view: View) -> Routine[Outcome | None]:
        """Compact old tool outputs once a batch has accumulated (see ``batch_prune``),
        on a check where nothing else runs."""
        steps = [s for s in self.pipeline.steps if isinstance(s, ToolOutputPruner)]
        if not steps:
            return None
        return (yield from self._side_run(session_id, view, steps, batch=True))

    def _intake_plan(self, view: View) -> View:
        """``view`` as capping its unseen results would leave it (``view`` itself when
        there is nothing to cap); nothing is written."""
        steps = self._intake_steps()
        if not steps or not unseen_seqs(view):
            return view
        ctx = PlanContext(
            trigger="threshold", target_tokens=0, token_counter=self.token_counter, intake=True
        )
        planned = self.pipeline.plan_all(view, self.budget, ctx, steps)
        return planned.view if planned.proposals else view

    def _intake_steps(self) -> list[Any]:
        """The pipeline's steps that cap what the model has not been sent yet: its
        newest reply's text and the results of its newest calls."""
        return [s for s in self.pipeline.steps if isinstance(s, ResultTruncator | NewestTruncator)]

    def _intake(self, session_id: str, view: View) -> Routine[Outcome | None]:
        """Cap the results the model has not seen yet (see :class:`ResultTruncator`),
        when nothing else runs: they were never sent, so no cached prefix changes."""
        steps = self._intake_steps()
        if not steps or not unseen_seqs(view):
            return None
        return (yield from self._side_run(session_id, view, steps, intake=True))

    def _side_run(
        self,
        session_id: str,
        view: View,
        steps: list[Any],
        *,
        batch: bool = False,
        intake: bool = False,
    ) -> Routine[Outcome | None]:
        """Run ``steps`` alone on a check where nothing else runs (``batch``/``intake``
        tell the steps which kind of run it is); ``None`` when they wrote nothing or
        another writer moved on (the next check looks again)."""
        ctx = PlanContext(
            trigger="threshold",
            target_tokens=0,
            token_counter=self.token_counter,
            batch=batch,
            intake=intake,
        )
        try:
            out = yield from self.pipeline.routine(
                session_id, self.budget, ctx, self.options, steps, view, catch=True
            )
        except ConflictError:
            return None
        if not out.steps:
            return None
        out.trigger = None
        return out

    # -- breaker and requests

    def _verdict(self, d: Decision, out: Outcome) -> str:
        """``failed``, ``ok``, ``lost_race`` or ``unfit``: a run that re-planned after
        losing a race and found nothing left to do (the winner did it) is neither failed
        nor ok, and so is a run left over the budget by what no condensation may drop.

        A newest message group that, with the pinned head, is over the budget although
        the head alone fits is not the condenser's failure, and it passes with the next
        turn: counting it would open the breaker, and the view would then stay over the
        budget for the turns after it, when forgetting that group would make it fit. A
        head over the budget by itself stays a failure (it does not pass).
        """
        if out.error is None and not out.fits and out.view is not None:
            head = floor_tokens(out.view, newest=False)
            if head <= out.available < floor_tokens(out.view):
                return "unfit"
        if out.error is not None or not out.fits:
            return "failed"
        if d.trigger in ("threshold", "count") and not out.condensed and out.conflicts:
            base = out.planned_on
            if base is not None and self.decide(base).trigger is None:
                return "lost_race"
        return "ok"

    def _bookkeeping(self, out: Outcome, d: Decision, started_on: int | None = None) -> list[Event]:
        """Events that answer a declined request and record the breaker's state, appended
        with the run's own events (so they exist exactly when the run was written)."""
        events: list[Event] = []
        base = out.planned_on or out.view
        breaker = Breaker.of(base) if base is not None else Breaker()
        wrote_condensation = any(s.kind == "condensation" for s in out.steps)
        verdict = self._verdict(d, out)
        if d.trigger == "manual" and not wrote_condensation:
            still_pending = (
                base is None
                or d.request_seq is None
                or any(s == d.request_seq for s, _ in _pending(base.control))
            )
            if still_pending:  # not when another writer answered it meanwhile
                first = lost_race_to(out, started_on)
                reason = out.error or (
                    race_message(first)
                    if first is not None
                    else unfit_message(out)
                    if not out.fits
                    else fitted_message(out)
                    if out.steps
                    else "nothing could be forgotten"
                )
                events.append(
                    Custom(
                        name=REQUEST_DECLINED,
                        data={"request_seq": d.request_seq, "reason": reason},
                    )
                )
        if d.trigger in ("threshold", "count") and verdict == "failed":
            failures = breaker.failures + 1
            data = {
                "failures": failures,
                "max_failures": self.max_failures,
                "tokens": out.tokens_after,
                "available": out.available,
                "last_error": out.error,
            }
            if breaker.opened_at is not None:  # a failed half-open attempt: wait again
                events.append(Custom(name=CIRCUIT_FAILURE, data={**data, "open": True}))
            elif failures >= self.max_failures:
                events.append(Custom(name=CIRCUIT_OPEN, data=data))
            else:
                events.append(Custom(name=CIRCUIT_FAILURE, data=data))
        elif verdict == "ok" and d.trigger is not None and breaker != Breaker():
            if not wrote_condensation:  # a condensation already starts a clean slate
                events.append(Custom(name=CIRCUIT_CLOSED, data={"trigger": d.trigger}))
        return events


def session_start(view: View) -> bool:
    """Whether no model call was recorded in the session yet (nothing condensed either):
    the moment a cheap prune pass pays off before the first call."""
    return view.condensation is None and not any(isinstance(e.event, LLMCall) for e in view.control)


def lost_race_to(out: Outcome, started_on: int | None) -> int | None:
    """The seq of the condensation another writer appended while this run planned (it
    re-planned on the newer view and wrote none itself), else ``None``."""
    if out.condensed or not out.conflicts:
        return None
    base = out.planned_on or out.view
    newest = base.condensation if base is not None else None
    if newest is None or newest.seq == started_on:
        return None
    return newest.seq


def race_message(seq: int) -> str:
    """What a run that lost the race to another condensation says."""
    return f"another condensation was written first: seq {seq}"


def unfit_message(out: Outcome) -> str:
    """What a manual run that could not make the view fit says (by the larger of the
    stored estimates and the tokenizer's count)."""
    return (
        f"the view still needs {max(out.tokens_after, out.real_tokens or 0):,} tokens of "
        f"{out.available:,} "
        "available: the pinned head and the newest messages alone are over the "
        "budget (use a larger budget, or a shorter system prompt or task)"
    )


def fitted_message(out: Outcome) -> str:
    """What a manual run answers when its prunes (a head cut, say) made the view fit but
    no condensation could be written."""
    done = ", ".join(f"{s.condenser} at seq {s.seq}" for s in out.steps)
    return (
        f"the view fits ({out.tokens_after:,} tokens of {out.available:,} available) after "
        f"{done}; nothing more could be forgotten"
    )


def floor_tokens(view: View, *, newest: bool = True) -> int:
    """Tokens of what no condensation may drop from ``view``: the pinned head and (with
    ``newest``) the newest message group, from the newest assistant message on, with the
    view's extra tokens."""
    items = view.items
    if not newest:
        return sum(i.tokens for i in items if i.pinned) + view.extra_tokens
    start = max(
        (
            k
            for k, item in enumerate(items)
            if not item.pinned
            and isinstance(item.stored.event, Message)
            and item.stored.event.role == "assistant"
        ),
        default=len(items),
    )
    kept = sum(i.tokens for i in items if i.pinned)
    kept += sum(i.tokens for i in items[start:] if not i.pinned)
    return kept + view.extra_tokens


def turn_tokens(view: View) -> int:
    """The mean tokens a model call added to the view's tail: its unpinned messages'
    tokens over the assistant messages among them (0 when it has none)."""
    tail = [i for i in view.items if not i.pinned]
    calls = sum(1 for i in tail if i.message.role == "assistant")
    return sum(i.tokens for i in tail) // calls if calls else 0


def grown_since(view: View, seq: int) -> int:
    """Tokens of the view's unpinned messages appended after ``seq``."""
    return sum(i.tokens for i in view.items if not i.pinned and i.stored.seq > seq)


def _pending(events: Any) -> list[tuple[int, CondensationRequest]]:
    requests: list[tuple[int, CondensationRequest]] = []
    declined: set[int] = set()
    for stored in events:
        evt = stored.event
        if isinstance(evt, CondensationRequest):
            requests.append((stored.seq, evt))
        elif (
            isinstance(evt, Custom) and evt.name == REQUEST_DECLINED and isinstance(evt.data, dict)
        ):
            rs = evt.data.get("request_seq")
            if isinstance(rs, int):
                declined.add(rs)
    # A decline answers its request and every earlier one.
    top = max(declined, default=0)
    return [(s, r) for s, r in requests if s > top]


def _idle(view: View, policy: CondensationPolicy, skipped: str | None) -> Outcome:
    return Outcome(
        view.session_id,
        None,
        view.tokens,
        view.tokens,
        policy.budget.fraction(policy.target),
        policy.budget.available,
        view=view,
        skipped=skipped,
    )


# --------------------------------------------------------------------------- reactive


def is_context_window_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the prompt was too long for the model.

    litellm maps most providers to ``ContextWindowExceededError``; others surface as a
    ``BadRequestError`` (or a bare API error) whose text litellm's own checker recognizes.
    """
    return llm.is_context_window_error(exc)


def complete(
    store: EventStore,
    session_id: str,
    *,
    model: str,
    policy: CondensationPolicy,
    record: bool = True,
    append_response: bool = True,
    view: View | None = None,
    prepare: bool = True,
    prune_on_start: bool = True,
    **completion_kwargs: Any,
) -> Any:
    """Send the session's view to ``model``; on a context overflow condense and retry once.

    Before it sends, the view gets what ``policy`` would do to it: at the start of a
    session (no model call recorded yet) and the first time a session is opened through
    ``policy`` (a session resumed by a new process), the tool-output pruners run
    (:meth:`CondensationPolicy.maybe_prune`: they write only when enough can be freed),
    and every turn the policy's triggers are checked
    (:meth:`CondensationPolicy.maybe_condense`), so a view over the threshold is
    condensed first rather than sent.

    The view sent is recorded as an ``llm_call`` event (seq and fingerprint) followed by
    the reply as an assistant message, in one append. A context-window error condenses the
    session with trigger ``overflow`` (to half of what was sent) and retries once; a second
    overflow, or any other error, is raised after being recorded on the ``llm_call``.

    A turn that needs no condensing reads the store once and writes once. Pass the view
    you already have (for example ``policy.maybe_condense(...).view``) and it reads
    nothing more.

    Args:
        store: The event store.
        session_id: The session.
        model: litellm model name.
        policy: Supplies the pipeline and budget used to condense.
        record: Whether to append the ``llm_call`` and the reply.
        append_response: Whether the reply follows the ``llm_call`` as an assistant
            message. ``False`` records the call alone, for a caller that appends its own
            assistant message (a scripted agent observing a live model, for example).
        view: The session's current view, when the caller already holds it (read with
            ``policy.options``).
        prepare: Prune at session start and condense over the threshold before sending
            (``False``: send the view as it is).
        prune_on_start: Run the pruners when the session starts or is first opened
            through ``policy`` (``False``: only the triggers run before sending).
        **completion_kwargs: Passed to ``litellm.completion`` (``api_base``, ``tools``...).

    Returns:
        The litellm response.
    """
    call = _Call(
        session_id,
        model,
        policy,
        record,
        append_response,
        view,
        completion_kwargs,
        prepare,
        prune_on_start,
    )
    return drive(call.routine(), store)


async def acomplete(
    store: AsyncEventStore,
    session_id: str,
    *,
    model: str,
    policy: CondensationPolicy,
    record: bool = True,
    append_response: bool = True,
    view: View | None = None,
    prepare: bool = True,
    prune_on_start: bool = True,
    **completion_kwargs: Any,
) -> Any:
    """:func:`complete` on an :class:`~eventstore.AsyncEventStore`, calling the model with
    ``litellm.acompletion``."""
    call = _Call(
        session_id,
        model,
        policy,
        record,
        append_response,
        view,
        completion_kwargs,
        prepare,
        prune_on_start,
    )
    return await adrive(call.routine(), store)


@dataclass
class _Call:
    session_id: str
    model: str
    policy: CondensationPolicy
    record: bool
    append_response: bool
    view: View | None
    kwargs: dict[str, Any]
    prepare: bool = True
    prune_on_start: bool = True

    def routine(self) -> Routine[Any]:
        sid, policy = self.session_id, self.policy
        view = self.view
        if view is None:
            view = yield from read_view(sid, policy.options)
        if self.prepare:
            opened = policy.first_open(sid)  # answers once per session: always asked
            if self.prune_on_start and (opened or session_start(view)):
                pruned = yield from policy.prune_routine(sid, view)
                if pruned.condensed and pruned.view is not None:
                    view = pruned.view
            out = yield from policy.routine(sid, view=view)
            if out.view is not None:
                view = out.view
        for attempt in (0, 1):
            started = time.perf_counter()
            messages = view.to_messages()
            try:
                response = yield Complete(
                    {"model": self.model, "messages": messages, **self.kwargs}
                )
            except Exception as exc:
                overflow = is_context_window_error(exc)
                if self.record:
                    try:
                        yield from append(sid, self._events(view, None, started, exc))
                    except Exception:  # recording must not hide the model's error
                        pass
                if not overflow or attempt == 1:
                    raise
                out = yield from policy.routine(sid, trigger="overflow")
                if out.view is None:  # pragma: no cover - every outcome carries its view
                    out.view = yield from read_view(sid, policy.options)
                view = out.view
                continue
            if self.record:
                # No expected_seq: what others appended while the model was thinking does not
                # make the answer wrong, and the llm_call names the view it answered.
                yield from append(sid, self._events(view, response, started, None))
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _events(
        self, view: View, response: Any, started: float, exc: BaseException | None
    ) -> list[Event]:
        error = None if exc is None else f"{type(exc).__name__}: {str(exc)[:500]}"
        return list(
            llm_call_events(
                view,
                response,
                model=self.model,
                latency_ms=(time.perf_counter() - started) * 1000,
                error=error,
                append_response=self.append_response,
            )
        )
