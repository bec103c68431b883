"""Window condensation: keep the pinned head and a tail, forget the middle, no model call.

Like the sliding windows of Strands, Streetrace or DSPy, but nothing is deleted: the
forgotten events stay in the log, the condensation says how many there were, and the
previous summary (if any) is carried forward so the latest condensation alone still
defines the view.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from eventstore.errors import ConfigurationError
from eventstore.events import Message, ToolResultPart
from eventstore.tokens import MESSAGE_OVERHEAD

from .base import (
    PlanContext,
    Proposal,
    choose_cut,
    condensation_for,
    cut_points,
    fit_summary,
    newly_forgotten,
    previous_condensation,
    summary_room,
)
from .summarizing.extractive import ExtractiveSummarizer

if TYPE_CHECKING:
    from eventstore.budget import Budget
    from eventstore.events import Condensation
    from eventstore.views import View, ViewItem

__all__ = ["WindowCondenser", "trim_note", "DEFAULT_NOTE", "INTERACTIONS_NOTE", "TRUNCATION_NOTE"]

DEFAULT_NOTE = "[Context trimmed: {n} earlier events are omitted from this view.]"
"""The line a window condensation adds to the summary (``{n}``: events forgotten)."""
INTERACTIONS_NOTE = "[Context trimmed: {n} earlier interactions are omitted from this view.]"
"""The line of a window that keeps ``max_interactions`` (``{n}``: interactions removed from
the view so far, as DSPy's window says)."""
TRUNCATION_NOTE = "[{n} earlier messages truncated to fit context window]"
"""Streetrace's wording, used by the ``truncate`` strategy."""


def _note_re(note: str) -> re.Pattern[str]:
    head, _, tail = note.partition("{n}")
    return re.compile(r"\n*" + re.escape(head) + r"\d+" + re.escape(tail) + "$")


def _noted(summary: str | None, note: str) -> int:
    """The count the note at the end of ``summary`` states (0 when there is none)."""
    head, _, tail = note.partition("{n}")
    m = re.search(re.escape(head) + r"(\d+)" + re.escape(tail) + r"\s*$", summary or "")
    return int(m.group(1)) if m else 0


def trim_note(total: int, note: str = DEFAULT_NOTE) -> str:
    """The line a window condensation adds to the summary."""
    return note.replace("{n}", str(total))


def _carry(summary: str | None, total: int, note: str = DEFAULT_NOTE) -> str:
    base = _note_re(note).sub("", summary or "").rstrip()
    line = trim_note(total, note)
    return f"{base}\n\n{line}" if base else line


class WindowCondenser:
    """Forget the oldest unpinned messages until the view is at the target size.

    Args:
        target_fraction: Size of the view after condensing, as a fraction of the budget
            (used when the plan context gives no explicit target).
        min_forget_events: Fewest messages a condensation must forget to be written.
        min_keep: Newest messages always kept (when a valid cut allows it).
        max_interactions: Keep at most this many interactions after the pinned head (an
            interaction starts at a user or assistant message; tool results belong to the
            call before them), whatever the tokens (DSPy's window). The ``preserve_first``
            interactions count among them. A :class:`~condensers.CondensationPolicy`
            whose pipeline has such a window runs it as soon as the view holds more, not
            only when the view is over its threshold. ``None``: tokens only.
        note: The line added to the carried summary; ``{n}`` is what ``counts`` counts,
            so far (default: :data:`DEFAULT_NOTE`, or :data:`INTERACTIONS_NOTE` with
            ``max_interactions``).
        fold: Fold the facts of what the cut forgets (requests, files, errors, commands)
            into the carried summary with the free extractive summarizer, sized to the
            room left, instead of only counting them (the default pipeline folds).
        counts: What ``{n}`` in the note counts: ``"events"`` (every event the
            condensations forgot, bookkeeping included), ``"messages"`` (the messages
            forgotten, as Streetrace's marker says; ``truncate`` uses it) or
            ``"interactions"`` (the interactions removed from the view, as DSPy's window
            says). Default: ``"interactions"`` with ``max_interactions``, else
            ``"events"``.
        preserve_first: Keep the first this many interactions after the pinned head in
            the view for good (DSPy's ``preserve_first``): the first window condensation
            pins them, and every later condensation keeps its pins. Counted from the
            first condensation this window writes; interactions an earlier condensation
            already forgot cannot be brought back.

    Each condensation records ``window_stats`` in its settings, cumulative over the
    session's window condensations (read from the previous condensation when a window
    wrote it): ``removed_interactions`` (removed from the view so far),
    ``kept_interactions`` (after the pinned head, preserved ones included),
    ``preserved_interactions`` (of those, kept for good by ``preserve_first``),
    ``truncated_results`` (tool results shown truncated, by
    :class:`~condensers.ResultTruncator`, in the views the window has acted on: those it
    removed so far and those still shown) and ``removed_truncated`` (of those, the ones
    removed).
    """

    name = "window"

    def __init__(
        self,
        *,
        target_fraction: float = 0.5,
        min_forget_events: int = 1,
        min_keep: int = 1,
        max_interactions: int | None = None,
        note: str | None = None,
        fold: bool = False,
        preserve_first: int = 0,
        counts: str | None = None,
    ) -> None:
        dspy = max_interactions is not None
        if counts is None:
            counts = "interactions" if dspy else "events"
        if note is None:
            note = INTERACTIONS_NOTE if counts == "interactions" else DEFAULT_NOTE
        if not 0 < target_fraction <= 1:
            raise ConfigurationError(f"target_fraction must be in (0, 1], got {target_fraction}")
        if max_interactions is not None and max_interactions < 1:
            raise ConfigurationError(f"max_interactions must be 1 or more, got {max_interactions}")
        if preserve_first < 0:
            raise ConfigurationError(f"preserve_first must be 0 or more, got {preserve_first}")
        if counts not in ("events", "messages", "interactions"):
            raise ConfigurationError(
                f"counts must be 'events', 'messages' or 'interactions', got {counts!r}"
            )
        if max_interactions is not None and preserve_first >= max_interactions:
            raise ConfigurationError(
                f"preserve_first ({preserve_first}) must be less than max_interactions "
                f"({max_interactions}): the preserved interactions count among the kept ones"
            )
        if "{n}" not in note:
            raise ConfigurationError(f"note must contain {{n}} (the count), got {note!r}")
        self.target_fraction = target_fraction
        self.min_forget_events = max(min_forget_events, 1)
        self.min_keep = min_keep
        self.max_interactions = max_interactions
        self.note = note
        self.fold = fold
        self.preserve_first = preserve_first
        self.counts = counts

    def settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "target_fraction": self.target_fraction,
            "min_forget_events": self.min_forget_events,
            "min_keep": self.min_keep,
        }
        if self.max_interactions is not None:
            out["max_interactions"] = self.max_interactions
        if self.note not in (DEFAULT_NOTE, INTERACTIONS_NOTE):
            out["note"] = self.note
        if self.fold:
            out["fold"] = True
        if self.preserve_first:
            out["preserve_first"] = self.preserve_first
        if self.counts != ("interactions" if self.max_interactions is not None else "events"):
            out["counts"] = self.counts
        return out

    def _preserved(self, view: View) -> list[int]:
        """Seqs of the first ``preserve_first`` interactions to pin now (none when a
        condensation already ran: its pins hold any that were preserved)."""
        if not self.preserve_first or previous_condensation(view) is not None:
            return []
        tail = [i for i in view.items if not i.pinned]
        starts = [k for k in cut_points(tail) if k < len(tail)]
        if len(starts) <= self.preserve_first:
            return []
        return [i.seq for i in tail[: starts[self.preserve_first]]]

    def preserved_count(self, view: View, prev: Condensation | None, now: bool) -> int:
        """How many preserved interactions the view holds in its pinned head: those
        pinned now, or those an earlier window condensation pinned (its stats say)."""
        if not self.preserve_first:
            return 0
        if now:
            return self.preserve_first
        stats = (prev.settings or {}).get("window_stats") if prev is not None else None
        found = stats.get("preserved_interactions") if isinstance(stats, dict) else None
        return found if isinstance(found, int) else 0

    def over_by(self, view: View) -> int:
        """How many interactions after the pinned head the view holds beyond
        ``max_interactions`` (the preserved ones count among the kept), 0 when none; the
        view as given, before this window pins anything."""
        if self.max_interactions is None:
            return 0
        prev = previous_condensation(view)
        fresh = self._preserved(view)
        tail = [i for i in view.items if not i.pinned and i.seq not in set(fresh)]
        starts = [k for k in cut_points(tail) if k < len(tail)]
        room = self.max_interactions - self.preserved_count(view, prev, bool(fresh))
        return max(len(starts) - max(room, 0), 0)

    def _refit(
        self,
        view: View,
        budget: Budget,
        ctx: PlanContext,
        settings: dict[str, Any],
        started: float,
    ) -> Proposal | None:
        """The same forgotten range again with the shown summary cut to the room, when
        nothing more can be forgotten and the summary alone holds the view over the budget
        (a large newest message after the pinned head); the summary is left out when not
        a line of it fits, and also when the pinned head and the newest group are over the
        budget by themselves but within its buffer (the view is then inside the model's
        window, as :func:`~condensers.base.fit_summary` rules). The whole summary is
        carried, so the next condensation builds on every fact, and ``search_history``
        still finds what it named.

        ``None`` when the view fits, has no summary, or is over the window without it (the
        pinned head and the newest group alone: the head and newest-text cuts' case).
        """
        prev = previous_condensation(view)
        if prev is None or not prev.summary or view.tokens <= budget.available:
            return None
        room = summary_room(view, 0, budget, ctx)
        framing = MESSAGE_OVERHEAD + ctx.token_counter.count(view.options.summary_prefix)
        if room + framing < -budget.buffer:
            return None
        shown = fit_summary(prev.summary, room, ctx.token_counter) if room > 0 else None
        whole = prev.carried or prev.summary
        extra = {"carried": whole} if shown != whole else {}
        return self._proposal(view, 0, shown, {**settings, "refit": True}, ctx, started, extra)

    def plan(self, view: View, budget: Budget, ctx: PlanContext) -> Proposal | None:
        started = time.perf_counter()
        over = self.over_by(view)
        preserved = set(self._preserved(view))
        if preserved:  # plan as if they were part of the pinned head
            view = replace(
                view,
                items=[replace(i, pinned=True) if i.seq in preserved else i for i in view.items],
                _messages=None,
            )
        prev = previous_condensation(view)
        target = ctx.target(budget, self.target_fraction)
        pinned = sum(i.tokens for i in view.items if i.pinned)
        # The carried summary is about as large as the current one.
        keep = target - pinned - view.summary_tokens - 16
        forget = choose_cut(view, keep, min_keep=self.min_keep)
        tail = [i for i in view.items if not i.pinned]
        starts = [k for k in cut_points(tail) if k < len(tail)]  # where interactions start
        kept_preserved = self.preserved_count(view, prev, len(preserved) > 0)
        if over:
            forget = max(forget, starts[over])
        removed = sum(1 for k in starts if k < forget)
        settings = {
            **self.settings(),
            "window_stats": _stats(view, prev, tail, forget, removed, starts, kept_preserved),
        }
        if forget < self.min_forget_events:
            return self._refit(view, budget, ctx, settings, started)
        previously = prev.forgotten_events if prev is not None else 0
        # Count the events the new range holds (messages and bookkeeping alike).
        evt, after = condensation_for(
            view,
            forget,
            summary=None,
            condenser=self.name,
            settings=settings,
            ctx=ctx,
        )
        room = summary_room(view, forget, budget, ctx)
        total = max(evt.forgotten_events, previously)
        if self.counts == "interactions":
            total = settings["window_stats"]["removed_interactions"]
        elif self.counts == "messages":
            # Messages only (llm_call records and other bookkeeping are not messages):
            # what the previous note said, plus the messages this cut forgets.
            said = (prev.carried or prev.summary) if prev is not None else None
            total = _noted(said, self.note) + forget
        shown_base = prev.summary if prev else None
        whole_base = (prev.carried or prev.summary) if prev else None
        if self.fold and forget > 0:
            line = ctx.token_counter.count(trim_note(total, self.note)) + 2
            anchor = _note_re(self.note).sub("", whole_base or "").rstrip() or None
            forgotten = newly_forgotten(view, forget)
            folder = ExtractiveSummarizer()
            shown_base = folder.summarize(
                anchor,
                forgotten,
                limit_tokens=max(room - line, 64),
                token_counter=ctx.token_counter,
            ).text
            whole_base = folder.summarize(anchor, forgotten).text
        whole = _carry(whole_base, total, self.note)
        framing = MESSAGE_OVERHEAD + ctx.token_counter.count(view.options.summary_prefix)
        summary: str | None
        if room <= 0 <= room + framing:
            # Only leaving the summary out makes the view fit: carry it to the next one.
            summary = None
        else:
            summary = fit_summary(
                _carry(shown_base, total, self.note), room, ctx.token_counter, slack=budget.buffer
            )
        extra = {"carried": whole} if summary != whole else {}
        return self._proposal(view, forget, summary, settings, ctx, started, extra)

    def _proposal(
        self,
        view: View,
        forget: int,
        summary: str | None,
        settings: dict[str, Any],
        ctx: PlanContext,
        started: float,
        extra: dict[str, Any],
    ) -> Proposal | None:
        """The condensation forgetting ``forget`` items with ``summary`` shown, ``None``
        when it would not make the view smaller."""
        evt, after = condensation_for(
            view,
            forget,
            summary=summary,
            condenser=self.name,
            settings=settings,
            ctx=ctx,
            cost=0.0,
            **extra,
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


def _truncated(items: list[ViewItem]) -> int:
    """Tool results the items show truncated (head and tail, a :class:`ResultTruncator`'s
    doing)."""
    return sum(
        1
        for i in items
        for idx in i.kept
        if isinstance(i.message, Message)
        and idx < len(i.message.parts)
        and isinstance(i.message.parts[idx], ToolResultPart)
    )


def _stats(
    view: View,
    prev: Condensation | None,
    tail: list[ViewItem],
    forget: int,
    removed: int,
    starts: list[int],
    preserved: int,
) -> dict[str, int]:
    """``window_stats`` for a cut of ``forget`` tail items: the previous window
    condensation's counts plus this cut's."""
    before = (prev.settings or {}).get("window_stats") if prev is not None else None
    before = before if isinstance(before, dict) else {}

    def earlier(key: str) -> int:
        value = before.get(key)
        return value if isinstance(value, int) else 0

    cut = {i.seq for i in tail[:forget]}
    gone = earlier("removed_truncated") + _truncated(tail[:forget])
    return {
        "removed_interactions": earlier("removed_interactions") + removed,
        "kept_interactions": len(starts) - removed + preserved,
        "preserved_interactions": preserved,
        "truncated_results": gone + _truncated([i for i in view.items if i.seq not in cut]),
        "removed_truncated": gone,
    }
