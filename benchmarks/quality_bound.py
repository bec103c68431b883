"""How few prompt-cache breaks any policy could reach on the corpus: an idealized bound.

The quality benchmark counts a turn as a cache break when its messages do not extend the
previous turn's. Whatever a policy does, each condensation is one break, and a policy
that must keep the pinned head verbatim (the system prompt and the task) cannot condense
below the head plus the newest message group. This script replays every trajectory of the
corpus through an idealized policy that no real one can beat on breaks:

* it condenses only when the view no longer fits (never ahead);
* a condensation keeps nothing but the head, a summary of ``--summary`` tokens (however
  much it forgets) and the newest message group;
* optionally, every observation is cut to ``cap`` of the room the head leaves before it is
  first sent (which costs no break).

Tokens are the benchmark's own (ceil(chars / 4) + 4 per message). Run it from the
repository root: ``python -m benchmarks.quality_bound``. It prints the pooled share of
cache-breaking turns at each budget, for each summary size and cap.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from eventstore.budget import Budget
from eventstore.events import Message

from .probes import tokens
from .quality import BUDGETS, Trajectory, _render, default_corpus, load_corpus


def _size(msg: Message) -> int:
    return tokens(_render(msg))


def bound(
    trajectories: Sequence[Trajectory], budget: Budget, summary: int, cap: float | None
) -> tuple[int, int]:
    """(breaks, turns after the first) pooled over ``trajectories``."""
    breaks = turns = 0
    for traj in trajectories:
        msgs = traj.messages
        first = next((i for i, m in enumerate(msgs) if m.role == "assistant"), len(msgs))
        head = sum(_size(m) for m in msgs[:first])
        room = budget.available - head
        groups: list[int] = []  # tokens of each assistant message and what follows it
        for m in msgs[first:]:
            t = _size(m)
            if m.role == "assistant":
                groups.append(t)
                continue
            if cap is not None:
                t = min(t, max(int(cap * room), 16))
            groups[-1] += t
        tail = shown_summary = 0
        for k in range(1, len(groups)):  # the view before turn k holds groups[:k]
            tail += groups[k - 1]
            if head + shown_summary + tail > budget.available:
                breaks += 1
                shown_summary, tail = summary, groups[k - 1]
        turns += max(len(groups) - 1, 0)
    return breaks, turns


def bound_rows(
    trajectories: Sequence[Trajectory],
    summaries: Sequence[int] = (100, 300),
    caps: Sequence[float | None] = (None, 0.25, 0.15),
) -> list[dict[str, object]]:
    """The bound at every budget, summary size and observation cap (for the report)."""
    rows: list[dict[str, object]] = []
    for label, budget in BUDGETS.items():
        for summary in summaries:
            for cap in caps:
                b, t = bound(trajectories, budget, summary, cap)
                rows.append(
                    {"budget": label, "summary": summary, "cap": cap, "breaks": b, "turns": t}
                )
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.quality_bound", description=__doc__)
    p.add_argument(
        "--corpus",
        type=Path,
        help="corpus folder (default: $EVENTSTORE_CORPUS, else benchmarks/corpus)",
    )
    p.add_argument("--summary", type=int, nargs="*", default=[100, 300])
    args = p.parse_args(argv)
    trajectories = load_corpus(args.corpus or default_corpus())
    print("| budget | summary tokens | observation cap (share of room) | cache-breaking turns |")
    print("|---|---|---|---|")
    for row in bound_rows(trajectories, args.summary):
        cap = row["cap"]
        shown = "none" if cap is None else f"{cap:.0%}"
        b, t = row["breaks"], row["turns"]
        share = f"{b / t:.1%}" if isinstance(b, int) and isinstance(t, int) and t else "-"
        print(f"| {row['budget']} | {row['summary']} | {shown} | {share} ({b}/{t}) |")


if __name__ == "__main__":
    main()
