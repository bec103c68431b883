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
    load_split,
    pool,
    run,
    targets,
)

HERE = Path(__file__).resolve().parent
LOST_SHOWN = 8


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks quality", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="two short trajectories (seconds)")
    p.add_argument(
        "--corpus",
        type=Path,
        help="corpus folder (default: $EVENTSTORE_CORPUS, else benchmarks/corpus)",
    )
    p.add_argument("--out", type=Path, help="directory for the report and its JSON")
    p.add_argument("--baseline", type=Path, help="an earlier quality_results.json to compare")
    p.add_argument("--label", default="", help="what the measured code is (shown in the report)")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--workdir", type=Path, help="where the SQLite files go (default: temp)")
    p.add_argument(
        "--side", choices=["tune", "test"], help="replay one side of the split only (tuning)"
    )
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
    split = load_split(corpus, smoke=args.smoke)
    if args.side:
        split = {k: v for k, v in split.items() if k == args.side}
    log(
        f"quality: {', '.join(f'{len(t)} {side}' for side, t in split.items())} trajectories "
        f"from {corpus}; budgets {', '.join(BUDGETS)}"
    )
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    sides: dict[str, Any] = {}
    all_results: dict[str, dict[str, list[RunScore]]] = {}
    all_verdicts: dict[str, list[Target]] = {}
    for side, trajectories in split.items():
        results = run(trajectories, workdir=args.workdir)
        pooled = {label: pool(scores) for label, scores in results.items()}
        verdicts = targets(pooled)
        all_results[side], all_verdicts[side] = results, verdicts
        sides[side] = {
            "pooled": pooled,
            "targets": [asdict(t) for t in verdicts],
            "runs": {label: [asdict(s) for s in scores] for label, scores in results.items()},
        }
    data: dict[str, Any] = {
        "mode": "smoke" if args.smoke else "full",
        "commit": _commit(),
        "label": args.label,
        "python": platform.python_version(),
        "duration_s": round(time.perf_counter() - started, 1),
        "budgets": {k: asdict(b) | {"available": b.available} for k, b in BUDGETS.items()},
        "sides": sides,
    }
    if baseline is not None:
        data["baseline"] = {
            "commit": baseline.get("commit"),
            "label": baseline.get("label"),
            "mode": baseline.get("mode"),
            "sides": {
                side: {k: v.get(k) for k in ("pooled", "targets")}
                for side, v in (baseline.get("sides") or {}).items()
            },
        }
    (out / "quality_results.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "QUALITY_RESULTS.md").write_text(render(data, all_verdicts, all_results))
    missed = [
        (side, t)
        for side, verdicts in all_verdicts.items()
        for t in verdicts
        if any(ok is False for ok in t.passed.values())
    ]
    log(f"quality: done in {data['duration_s']:.0f}s: {out / 'QUALITY_RESULTS.md'}")
    for side, verdicts in all_verdicts.items():
        for t in verdicts:
            log(f"  {side}: {t.name}: {t.measured} -> {t.verdict}")
    check_side = "test" if "test" in all_verdicts else next(iter(all_verdicts), "")
    return 1 if args.check and any(side == check_side for side, _ in missed) else 0


# --------------------------------------------------------------------------- markdown


def _targets_table(data: dict[str, Any], side: str, verdicts: list[Target]) -> list[str]:
    labels = list(BUDGETS)
    base = ((data.get("baseline") or {}).get("sides") or {}).get(side)
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
        "silent",
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
            str(s.silent_overflows),
            _frac(s.cache_breaks, s.cache_turns),
            f"{s.max_view_tokens:,}",
        ]
        lines.append("| " + " | ".join(row) + " |")
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
    verdicts: dict[str, list[Target]],
    results: dict[str, dict[str, list[RunScore]]],
) -> str:
    """The Markdown report: targets and totals per side (test first), then every run."""
    budgets = ", ".join(
        f"{k}: `Budget({b['max_input_tokens']}, {b['reserved_output']}, {b['buffer']})` "
        f"({b['available']:,} available)"
        for k, b in data["budgets"].items()
    )
    smoke = " (smoke mode: two short trajectories per side; not the acceptance numbers)"
    counts = ", ".join(
        f"{side} {next(iter(v['pooled'].values()))['runs']}" for side, v in data["sides"].items()
    )
    lines = [
        "# Condensation quality" + (smoke if data["mode"] == "smoke" else ""),
        "",
        "`CondensationPolicy(budget)` with no options (offline: extractive summary), replayed",
        "turn by turn over every trajectory of the benchmark corpus (`benchmarks/corpus`, see",
        "its `PROVENANCE.md`) on fresh SQLite sessions. The corpus is split once, by source",
        "repository, into *tune* (looked at while changing the policy) and *test* (never",
        "tuned on): the targets are read on test. Condensations and prunes a transcript",
        "brings (a coding agent's own compactions) are left out of the replay: the policy",
        "decides. Metric definitions: `QUALITY.md` in the",
        "shared docs. Regenerate with `python -m benchmarks quality"
        + (" --smoke" if data["mode"] == "smoke" else "")
        + "`.",
        "",
        f"- measured commit: `{data['commit']}`" + (f" ({data['label']})" if data["label"] else ""),
        f"- budgets: {budgets}",
        f"- trajectories: {counts}; run time {data['duration_s']:.0f}s; Python {data['python']}",
    ]
    base = data.get("baseline")
    if base:
        lines.append(
            f"- before: commit `{base.get('commit')}`"
            + (f" ({base['label']})" if base.get("label") else "")
        )
    for side, side_data in data["sides"].items():
        title = {"test": "Test (targets read here)", "tune": "Tune"}.get(side, side)
        lines += ["", f"## {title}", ""] + _targets_table(data, side, verdicts[side])
        lines += [
            "",
            "| budget | views | turns | over budget | silent overflows | condensations | "
            "pruner prunes | mask prunes | runs > 40k tool out |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        rows = [(label, p) for label, p in side_data["pooled"].items()]
        before = (((base or {}).get("sides") or {}).get(side) or {}).get("pooled")
        if before:
            rows = [(f"{label} before", p) for label, p in before.items()] + [
                (f"{label} after", p) for label, p in rows
            ]
        for label, p in rows:
            lines.append(
                f"| {label} | {p['views']} | {p['turns']} | {p['over_budget']} | "
                f"{p.get('silent_overflows', '-')} | {p['condensations']} | "
                f"{p['tool_prunes']} | {p['other_prunes']} | {p.get('heavy_runs', '-')} |"
            )
    lines += [
        "",
        "Counts are pooled over all trajectories of a budget (no mean of per-run ratios).",
        "Retention is measured on the final view; the task statement on every view sent after",
        f"it appears. The pruner target applies to runs with more than {PRUNE_OVER_TOKENS:,}",
        "tokens of tool output (`n/a` when a side has none). A silent overflow is a view that",
        "fits the available tokens by the library's own count but is over",
        "`max_input_tokens - reserved_output` by tiktoken `cl100k_base`.",
    ]
    for side, by_budget in results.items():
        for label, scores in by_budget.items():
            lines += ["", f"## {side}: per trajectory at {label}", ""] + _runs_table(scores)
            lines += ["", f"Lost probes ({side}, {label}):", ""] + _lost(scores)
            reasons = _reasons(scores)
            if reasons:
                lines += ["", f"Invalid-view reasons ({side}, {label}):", ""] + reasons
    lines += [
        "",
        "Columns: `tool out` = tool-output tokens (ceil(chars/4) over tool results and",
        "observation user messages); `cond` = condensations written; `prunes` = prunes by",
        "the tool-output pruner / by the observation masker; `task` = views holding the task",
        "statement / views checked; `paths`, `errors`, `tools` = probes retained in the final",
        "view / non-trivial probes; `over` = views over the available tokens (avoidable ones in",
        "parentheses); `silent` = silent overflows; `cache breaks` = turns not extending the",
        "previous turn's messages / turns after the first; `max view` = largest view in",
        "benchmark tokens.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
