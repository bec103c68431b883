"""``python -m benchmarks quality``: run the condensation quality benchmark and write its
report (``QUALITY_RESULTS.md`` and ``quality_results.json``).

A previous JSON passed with ``--baseline`` is shown next to the new numbers (a before /
after table). Progress goes to stderr; the exit status is 0 unless ``--check`` is given
and a target is missed.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .harness import log
from .probes import KINDS
from .quality import (
    BUDGETS,
    PRUNE_OVER_TOKENS,
    RunScore,
    Target,
    default_corpus,
    load_corpus,
    pool,
    run,
    stitched,
    targets,
)
from .quality_bound import bound_rows

HERE = Path(__file__).resolve().parent
LOST_SHOWN = 8


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks quality", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="two short trajectories (seconds)")
    p.add_argument("--corpus", type=Path, help="corpus folder (default: ../shared/corpus)")
    p.add_argument("--out", type=Path, help="directory for the report and its JSON")
    p.add_argument("--baseline", type=Path, help="an earlier quality_results.json to compare")
    p.add_argument("--label", default="", help="what the measured code is (shown in the report)")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--workdir", type=Path, help="where the SQLite files go (default: temp)")
    return p.parse_args(argv)


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=HERE, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _commit() -> str:
    head = _git("rev-parse", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--", "condensers", "eventstore")
    return head + (" (with uncommitted changes to the library)" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    corpus = args.corpus or default_corpus()
    if not corpus.is_dir():
        log(f"quality: corpus folder {corpus} not found; nothing measured (pass --corpus DIR)")
        return 0
    out = args.out or (HERE / "quality-smoke-results" if args.smoke else HERE)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    trajectories = load_corpus(corpus, smoke=args.smoke)
    log(f"quality: {len(trajectories)} trajectories from {corpus}; budgets {', '.join(BUDGETS)}")
    results = run(trajectories, workdir=args.workdir)
    long_runs = [] if args.smoke else stitched(trajectories)
    long_results = run(long_runs, workdir=args.workdir) if long_runs else {}
    pooled = {label: pool(scores) for label, scores in results.items()}
    verdicts = targets(pooled)
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    data = {
        "mode": "smoke" if args.smoke else "full",
        "commit": _commit(),
        "label": args.label,
        "python": platform.python_version(),
        "duration_s": round(time.perf_counter() - started, 1),
        "budgets": {k: asdict(b) | {"available": b.available} for k, b in BUDGETS.items()},
        "pooled": pooled,
        "targets": [asdict(t) for t in verdicts],
        "runs": {label: [asdict(s) for s in scores] for label, scores in results.items()},
        "bound": bound_rows(trajectories),
        "long_runs": {label: [asdict(s) for s in scores] for label, scores in long_results.items()},
    }
    if baseline is not None:
        data["baseline"] = {
            k: baseline.get(k) for k in ("commit", "label", "pooled", "targets", "mode")
        }
    (out / "quality_results.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "QUALITY_RESULTS.md").write_text(render(data, verdicts, results, long_results))
    missed = [t for t in verdicts if any(ok is False for ok in t.passed.values())]
    log(
        f"quality: done in {data['duration_s']:.0f}s: {out / 'QUALITY_RESULTS.md'}; "
        f"{len(verdicts) - len(missed)} targets met or n/a, {len(missed)} missed"
    )
    for t in verdicts:
        log(f"  {t.name}: {t.measured} -> {t.verdict}")
    return 1 if args.check and missed else 0


# --------------------------------------------------------------------------- markdown


def _targets_table(data: dict[str, Any], verdicts: list[Target]) -> list[str]:
    labels = list(BUDGETS)
    base = data.get("baseline")
    before: dict[str, dict[str, str]] = {}
    if base:
        before = {t["name"]: t["measured"] for t in base.get("targets") or []}
        head = ["target", "goal"]
        head += [f"before {b}" for b in labels] + [f"after {b}" for b in labels] + ["after"]
    else:
        head = ["target", "goal"] + [f"measured at {b}" for b in labels] + ["pass/fail"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in verdicts:
        row = [t.name, t.goal]
        if base:
            row += [before.get(t.name, {}).get(b, "-") for b in labels]
        row += [t.measured.get(b, "-") for b in labels] + [t.verdict]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _bound_table(data: dict[str, Any]) -> list[str]:
    pooled = data["pooled"]
    lines = [
        "A model of the room itself (`python -m benchmarks.quality_bound`, in benchmark",
        "tokens): a policy that condenses only when the view no longer fits and then keeps",
        "nothing but the verbatim head (system prompt, task), a summary of the given size and",
        "the newest message group, optionally with every observation cut to a share of the",
        "room the head leaves before it is first sent. Each condensation is a break. It is a",
        "model, not a proof (the measured policy sizes its summaries and its cuts per view),",
        "but it shows where the 4k share comes from: with observations left whole even a",
        "100-token summary breaks the cache on about a third of the turns, because the head",
        "takes 53-89% of the 4k budget in 15 of the 27 runs.",
        "",
        "| budget | summary tokens | observations cut to | cache-breaking turns | measured |",
        "|---|---|---|---|---|",
    ]
    for row in data["bound"]:
        p = pooled.get(row["budget"], {})
        measured = _share(p.get("cache_breaks", 0), p.get("cache_turns", 0)) if p else "-"
        cap = "not cut" if row["cap"] is None else f"{row['cap']:.0%} of the room"
        lines.append(
            f"| {row['budget']} | {row['summary']} | {cap} | "
            f"{_share(row['breaks'], row['turns'])} | {measured} |"
        )
    return lines


def _share(num: int, den: int) -> str:
    return f"{num / den:.1%} ({num}/{den})" if den else "-"


def _frac(num: int, den: int) -> str:
    return f"{num}/{den}" if den else "-"


def _runs_table(scores: list[RunScore]) -> list[str]:
    head = [
        "trajectory",
        "format",
        "msgs",
        "turns",
        "tool out",
        "cond",
        "prunes (tool/mask)",
        "task",
        "paths",
        "errors",
        "tools",
        "invalid",
        "over (avoidable)",
        "cache breaks",
        "max view",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in scores:
        row = [
            f"`{s.name}`",
            s.format,
            str(s.messages),
            str(s.turns),
            f"{s.tool_output_tokens:,}",
            str(s.condensations),
            f"{s.tool_prunes}/{s.other_prunes}",
            _frac(s.task_kept, s.task_checked),
            *(_frac(s.retained[k], s.probes[k]) for k in KINDS),
            str(s.invalid),
            f"{s.over_budget} ({s.avoidable_over})",
            _frac(s.cache_breaks, s.cache_turns),
            f"{s.max_view_tokens:,}",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _long_runs(results: dict[str, list[RunScore]]) -> list[str]:
    """The long-runs section: a table per budget, and what it shows."""
    lines = [
        "No trajectory of the corpus has more than "
        f"{PRUNE_OVER_TOKENS:,} tokens of tool output, so the pruner target",
        "cannot be read from it. Here the trajectories of one format are replayed back to",
        "back as one session, after the first one's head (`quality.stitched`), the same way",
        "and with the same metrics. These runs are not part of the targets above.",
        "",
    ]
    for label, scores in results.items():
        lines += [f"At {label}:", ""] + _runs_table(scores) + [""]
    fired = {
        label: all(s.tool_prunes > 0 for s in scores if s.tool_output_tokens > PRUNE_OVER_TOKENS)
        for label, scores in results.items()
    }
    lines.append(
        "The tool-output pruner fired on every long run: "
        + ", ".join(f"{label} {'yes' if ok else 'no'}" for label, ok in fired.items())
        + "."
    )
    return lines


def _lost(scores: list[RunScore]) -> list[str]:
    lines = []
    for kind in KINDS:
        lost = [(s.name, p) for s in scores for p in s.lost[kind]]
        if not lost:
            continue
        lines.append(f"- **{kind}** ({len(lost)} lost), for example:")
        for name, probe in lost[:LOST_SHOWN]:
            shown = (probe if len(probe) <= 100 else probe[:97] + "...").replace("`", "'")
            where = name.rsplit("/", 1)[-1]
            lines.append(f"  - `{shown}` ({where})")
    return lines or ["- none"]


def _reasons(scores: list[RunScore]) -> list[str]:
    counts: dict[str, int] = {}
    for s in scores:
        for r in s.invalid_reasons:
            key = r.split(": ", 1)[-1] if r.startswith("message ") else r
            key = "tool calls answered by other results" if "answered by" in key else key
            key = "result without its call" if "without its call" in key else key
            counts[key] = counts.get(key, 0) + 1
    return [f"- {n} x {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]


def render(
    data: dict[str, Any],
    verdicts: list[Target],
    results: dict[str, list[RunScore]],
    long_results: dict[str, list[RunScore]] | None = None,
) -> str:
    """The Markdown report."""
    budgets = ", ".join(
        f"{k}: `Budget({b['max_input_tokens']}, {b['reserved_output']}, {b['buffer']})` "
        f"({b['available']:,} available)"
        for k, b in data["budgets"].items()
    )
    smoke = " (smoke mode: two short trajectories; not the acceptance numbers)"
    lines = [
        "# Condensation quality" + (smoke if data["mode"] == "smoke" else ""),
        "",
        "`CondensationPolicy(budget)` with no options (offline: extractive summary), replayed",
        "turn by turn over every trajectory of the shared corpus on fresh SQLite sessions.",
        "Metric definitions: `QUALITY.md` in the shared docs. Regenerate with",
        "`python -m benchmarks quality" + (" --smoke" if data["mode"] == "smoke" else "") + "`.",
        "",
        f"- measured commit: `{data['commit']}`" + (f" ({data['label']})" if data["label"] else ""),
        f"- budgets: {budgets}",
        f"- trajectories: {data['pooled'][next(iter(data['pooled']))]['runs']}; "
        f"run time {data['duration_s']:.0f}s; Python {data['python']}",
    ]
    base = data.get("baseline")
    if base:
        lines.append(
            f"- before: commit `{base.get('commit')}`"
            + (f" ({base['label']})" if base.get("label") else "")
        )
    lines += ["", "## Targets", ""] + _targets_table(data, verdicts)
    lines += [
        "",
        "Counts are pooled over all trajectories of a budget (no mean of per-run ratios).",
        "Retention is measured on the final view; the task statement on every view sent after",
        f"it appears. The pruner target applies to runs with more than {PRUNE_OVER_TOKENS:,}",
        "tokens of tool output (`n/a` when the corpus has none).",
        "",
        "## Totals",
        "",
        "| budget | views | turns | over budget | condensations | pruner prunes | mask prunes |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = [(label, p) for label, p in data["pooled"].items()]
    if base and base.get("pooled"):
        rows = [(f"{label} before", p) for label, p in base["pooled"].items()] + [
            (f"{label} after", p) for label, p in rows
        ]
    for label, p in rows:
        lines.append(
            f"| {label} | {p['views']} | {p['turns']} | {p['over_budget']} | "
            f"{p['condensations']} | {p['tool_prunes']} | {p['other_prunes']} |"
        )
    if data.get("bound"):
        lines += ["", "## Cache breaks: what no policy could beat", ""] + _bound_table(data)
    if long_results:
        lines += ["", "## Long runs", ""] + _long_runs(long_results)
    for label, scores in results.items():
        lines += ["", f"## Per trajectory at {label}", ""] + _runs_table(scores)
        lines += ["", f"Lost probes at {label}:", ""] + _lost(scores)
        reasons = _reasons(scores)
        if reasons:
            lines += ["", f"Invalid-view reasons at {label}:", ""] + reasons
    lines += [
        "",
        "Columns: `tool out` = tool-output tokens (ceil(chars/4) over tool results and",
        "observation user messages); `cond` = condensations written; `prunes` = prunes by",
        "the tool-output pruner / by the observation masker; `task` = views holding the task",
        "statement / views checked; `paths`, `errors`, `tools` = probes retained in the final",
        "view / non-trivial probes; `over` = views over the available tokens (avoidable ones in",
        "parentheses); `cache breaks` = turns not extending the previous turn's messages /",
        "turns after the first; `max view` = largest view in benchmark tokens.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
