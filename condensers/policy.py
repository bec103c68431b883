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

A circuit breaker stops automatic (threshold and count) condensation after
``max_failures`` consecutive runs that failed to bring the view under the budget, and
records a ``condenser.circuit_open`` event. Manual requests and overflows still run, and
a successful run closes the breaker again. After ``retry_after_events`` more events the
breaker lets one automatic attempt through (half-open); if it fails the breaker stays
open for another ``retry_after_events``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eventstore.events import CondensationRequest, Custom
from eventstore.tokens import HeuristicTokenCounter, TokenCounter

from .base import PlanContext, Trigger
from .pipeline import Outcome, Pipeline, default_pipeline

if TYPE_CHECKING:
    from eventstore.budget import Budget
    from eventstore.store import AsyncEventStore, EventStore
    from eventstore.views import View, ViewOptions

__all__ = [
    "CondensationPolicy",
    "Decision",
    "CIRCUIT_OPEN",
    "REQUEST_DECLINED",
    "is_context_window_error",
    "complete",
]

CIRCUIT_OPEN = "condenser.circuit_open"
"""Name of the custom event written when the breaker opens."""
REQUEST_DECLINED = "condenser.request_declined"
"""Name of the custom event answering a request that could not be honoured."""


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


class CondensationPolicy:
    """Triggers, targets and a circuit breaker around a :class:`Pipeline`.

    Args:
        budget: The agent model's budget.
        pipeline: The strategies (default: :func:`default_pipeline`, offline).
        threshold: Condense when the view exceeds this fraction of the budget.
        target: Aim for this fraction of the budget after condensing.
        max_events: Condense when the view holds more messages than this (``None``: off).
        max_failures: Consecutive failed automatic runs before the breaker opens.
        retry_after_events: Events after which an open breaker allows one more automatic
            attempt (``None``: stay open until a manual request or overflow succeeds).
        options: View options used to build and measure views.
        token_counter: Counts summary tokens (use the store's counter).
    """

    def __init__(
        self,
        budget: Budget,
        pipeline: Pipeline | None = None,
        *,
        threshold: float = 0.8,
        target: float = 0.5,
        max_events: int | None = None,
        max_failures: int = 3,
        retry_after_events: int | None = 50,
        options: ViewOptions | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        if not 0 < target <= threshold <= 1:
            raise ValueError("need 0 < target <= threshold <= 1")
        self.budget = budget
        self.pipeline = pipeline or default_pipeline(target_fraction=target)
        self.threshold = threshold
        self.target = target
        self.max_events = max_events
        self.max_failures = max_failures
        self.retry_after_events = retry_after_events
        self.options = options
        self.token_counter = token_counter or HeuristicTokenCounter()
        self._failures: dict[str, int] = {}
        self._open: dict[str, int] = {}

    # -- decisions

    def is_open(self, session_id: str) -> bool:
        """Whether the breaker stops automatic condensation for the session."""
        return session_id in self._open

    def decide(
        self, view: View, requests: Sequence[tuple[int, CondensationRequest]] = ()
    ) -> Decision:
        """What to do for ``view``, given pending manual requests (seq, request)."""
        if requests:
            seq, req = requests[-1]
            target = min(self.budget.fraction(self.target), view.tokens // 2)
            return Decision("manual", req.focus, seq, target_tokens=target, force=True)
        opened = self._open.get(view.session_id)
        if opened is not None:
            if self.retry_after_events is None or view.seq - opened < self.retry_after_events:
                return Decision(None)
            self._open[view.session_id] = view.seq  # half-open: one attempt, then wait again
        if view.tokens > self.budget.fraction(self.threshold):
            return Decision("threshold")
        if self.max_events is not None:
            tail = [i for i in view.items if not i.pinned]
            if len(tail) > self.max_events:
                keep = tail[len(tail) - max(self.max_events // 2, 1) :]
                pinned = sum(i.tokens for i in view.items if i.pinned)
                target = pinned + view.summary_tokens + sum(i.tokens for i in keep)
                target = min(target, self.budget.fraction(self.target))
                return Decision("count", target_tokens=target, force=True)
        return Decision(None)

    def _ctx(self, d: Decision) -> PlanContext:
        assert d.trigger is not None
        return PlanContext(
            trigger=d.trigger,
            target_tokens=d.target_tokens,
            focus=d.focus,
            request_seq=d.request_seq,
            token_counter=self.token_counter,
            force=d.force,
        )

    def _steps(self, d: Decision) -> list[Any] | None:
        return self.pipeline.summarizing_steps() if d.trigger == "manual" else None

    # -- sync

    def pending_requests(
        self, store: EventStore, view: View
    ) -> list[tuple[int, CondensationRequest]]:
        """Manual requests after the view's condensation that were not declined yet."""
        floor = view.condensation.seq + 1 if view.condensation is not None else 1
        events = store.read(
            view.session_id, floor, view.seq, kinds=["condensation_request", "custom"]
        )
        return _pending(events)

    def maybe_condense(self, store: EventStore, session_id: str) -> Outcome:
        """Condense the session if a trigger fires; returns what was done."""
        view = store.view(session_id, options=self.options)
        decision = self.decide(view, self.pending_requests(store, view))
        if decision.trigger is None:
            skipped = "circuit_open" if self.is_open(session_id) else "under_threshold"
            return _idle(view, self, skipped)
        return self._run(store, view, decision)

    def condense(
        self,
        store: EventStore,
        session_id: str,
        *,
        trigger: Trigger = "manual",
        focus: str | None = None,
    ) -> Outcome:
        """Condense now, whatever the thresholds say (used for overflows)."""
        view = store.view(session_id, options=self.options)
        target = min(self.budget.fraction(self.target), view.tokens // 2)
        return self._run(store, view, Decision(trigger, focus, target_tokens=target, force=True))

    def _run(self, store: EventStore, view: View, d: Decision) -> Outcome:
        ctx = self._ctx(d)
        try:
            out = self.pipeline.run(
                store, view.session_id, self.budget, ctx, options=self.options,
                steps=self._steps(d), view=view,
            )  # fmt: skip
        except Exception as exc:  # a failing strategy never corrupts the log
            out = _idle(view, self, None)
            out.trigger = d.trigger
            out.error = f"{type(exc).__name__}: {exc}"
        self._after(store, view, d, out)
        return out

    def _after(self, store: EventStore, view: View, d: Decision, out: Outcome) -> None:
        events = self._bookkeeping(view, d, out)
        for evt in events:
            try:
                store.append(view.session_id, [evt])
            except Exception:  # bookkeeping must not mask the outcome
                pass

    # -- async

    async def amaybe_condense(self, store: AsyncEventStore, session_id: str) -> Outcome:
        """The asyncio twin of :meth:`maybe_condense`."""
        view = await store.view(session_id, options=self.options)
        floor = view.condensation.seq + 1 if view.condensation is not None else 1
        found = [
            e
            async for e in store.read(
                session_id, floor, view.seq, kinds=["condensation_request", "custom"]
            )
        ]
        decision = self.decide(view, _pending(found))
        if decision.trigger is None:
            skipped = "circuit_open" if self.is_open(session_id) else "under_threshold"
            return _idle(view, self, skipped)
        ctx = self._ctx(decision)
        try:
            out = await self.pipeline.arun(
                store, session_id, self.budget, ctx, options=self.options,
                steps=self._steps(decision), view=view,
            )  # fmt: skip
        except Exception as exc:
            out = _idle(view, self, None)
            out.trigger = decision.trigger
            out.error = f"{type(exc).__name__}: {exc}"
        for evt in self._bookkeeping(view, decision, out):
            try:
                await store.append(session_id, [evt])
            except Exception:
                pass
        return out

    # -- breaker and requests

    def _bookkeeping(self, view: View, d: Decision, out: Outcome) -> list[Custom]:
        events: list[Custom] = []
        sid = view.session_id
        wrote_condensation = any(s.kind == "condensation" for s in out.steps)
        if d.trigger == "manual" and not wrote_condensation:
            reason = out.error or "nothing could be forgotten"
            events.append(
                Custom(name=REQUEST_DECLINED, data={"request_seq": d.request_seq, "reason": reason})
            )
        if d.trigger in ("threshold", "count", "overflow", "manual"):
            failed = (
                out.error is not None
                or not out.fits
                or (d.trigger in ("threshold", "count") and not out.condensed)
            )
            if failed and d.trigger in ("threshold", "count"):
                self._failures[sid] = self._failures.get(sid, 0) + 1
                if self._failures[sid] >= self.max_failures and sid not in self._open:
                    self._open[sid] = view.seq
                    events.append(
                        Custom(
                            name=CIRCUIT_OPEN,
                            data={
                                "failures": self._failures[sid],
                                "max_failures": self.max_failures,
                                "tokens": out.tokens_after,
                                "available": out.available,
                                "last_error": out.error,
                            },
                        )
                    )
            elif not failed:
                self._failures.pop(sid, None)
                self._open.pop(sid, None)
        return events


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
    from eventstore.tokens import import_litellm

    litellm = import_litellm()
    if isinstance(exc, litellm.ContextWindowExceededError):
        return True
    try:
        from litellm.litellm_core_utils.exception_mapping_utils import ExceptionCheckers

        return bool(ExceptionCheckers.is_error_str_context_window_exceeded(str(exc)))
    except Exception:  # pragma: no cover - litellm internals moved
        text = str(exc).lower()
        return "context length" in text or "context window" in text


def complete(
    store: EventStore,
    session_id: str,
    *,
    model: str,
    policy: CondensationPolicy,
    record: bool = True,
    **completion_kwargs: Any,
) -> Any:
    """Send the session's view to ``model``; on a context overflow condense and retry once.

    The view sent is recorded as an ``llm_call`` event (seq and fingerprint) followed by
    the reply as an assistant message. A context-window error condenses the session with
    trigger ``overflow`` (to half of what was sent) and retries once; a second overflow, or
    any other error, is raised after being recorded on the ``llm_call``.

    Args:
        store: The event store.
        session_id: The session.
        model: litellm model name.
        policy: Supplies the pipeline and budget used to condense.
        record: Whether to append the ``llm_call`` and the reply.
        **completion_kwargs: Passed to ``litellm.completion`` (``api_base``, ``tools``...).

    Returns:
        The litellm response.
    """
    from eventstore.tokens import import_litellm
    from eventstore.views import record_llm_call

    litellm = import_litellm()
    for attempt in (0, 1):
        view = store.view(session_id, options=policy.options)
        started = time.perf_counter()
        try:
            response = litellm.completion(
                model=model, messages=view.to_messages(), **completion_kwargs
            )
        except litellm.ContextWindowExceededError as exc:
            overflow: BaseException | None = exc
        except Exception as exc:  # BadRequestError and friends: check the text as well
            if not is_context_window_error(exc):
                if record:
                    _record_error(store, session_id, view, model, started, exc)
                raise
            overflow = exc
        else:
            if record:
                record_llm_call(
                    store, session_id, view, response, model=model,
                    latency_ms=(time.perf_counter() - started) * 1000,
                )  # fmt: skip
            return response
        if record:
            _record_error(store, session_id, view, model, started, overflow)
        if attempt == 1:
            raise overflow
        policy.condense(store, session_id, trigger="overflow")
    raise AssertionError("unreachable")  # pragma: no cover


def _record_error(
    store: EventStore, session_id: str, view: View, model: str, started: float, exc: BaseException
) -> None:
    from eventstore.views import record_llm_call

    try:
        record_llm_call(
            store, session_id, view, None, model=model,
            latency_ms=(time.perf_counter() - started) * 1000,
            error=f"{type(exc).__name__}: {str(exc)[:500]}",
        )  # fmt: skip
    except Exception:  # recording must not hide the model's error
        pass
