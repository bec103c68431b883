"""Condensation quality: replay real trajectories turn by turn and measure what survives.

``python -m benchmarks quality`` loads every trajectory of the shared corpus with
:func:`eventstore.importers.load_transcripts`, appends its events one at a time to a fresh
SQLite session and, before each assistant message (one model call, a *turn*), lets
``CondensationPolicy(budget)`` condense and records the view that would be sent. One more
view is recorded after the last event (the *final view*). Condensations and prunes that
come with a transcript (a coding agent's own compactions, imported as such) are left out
of the replay: they are another condenser's decisions, and the benchmark measures the
policy's. The views are then scored
against the source trajectory: task statement kept, file paths / error lines / tool names
retained, invalid views, views avoidably over budget, cache-breaking turns, and whether
the tool-output pruner fired on runs with a lot of tool output. Definitions and targets
are those of ``QUALITY.md`` in the shared docs; the report is written by
:mod:`benchmarks.quality_report`.

Scoring is pure (:func:`score`) so that tests can check it on hand-made views.
"""

from __future__ import annotations

import lzma
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from condensers import CondensationPolicy, ToolOutputPruner
from eventstore import EventStore
from eventstore.budget import Budget
from eventstore.chat import messages_to_openai, to_openai
from eventstore.events import Condensation, Event, Message, Prune
from eventstore.importers import detect_format, load_transcripts

from .harness import log
from .probes import (
    KINDS,
    extract_probes,
    is_observation,
    normalize,
    occurs,
    real_tokens,
    tokens,
    view_text,
)

__all__ = [
    "BUDGETS",
    "PRUNE_OVER_TOKENS",
    "Trajectory",
    "ViewRecord",
    "RunScore",
    "load_corpus",
    "replay",
    "score",
    "pool",
    "targets",
    "run",
]

BUDGETS: dict[str, Budget] = {
    "4k": Budget(4096, 512, 205),
    "8k": Budget(8192, 1024, 410),
    "32k": Budget(32768, 4096, 1638),
}
"""The budgets every trajectory is replayed at (3,379, 6,758 and 27,034 available tokens)."""

PRUNE_OVER_TOKENS = 40_000
"""Runs with more tool output than this must see the tool-output pruner fire."""

CACHE_GOALS = {"4k": 0.20, "8k": 0.10, "32k": 0.05}
"""Most cache-breaking turns allowed, as a share of turns after the first."""

RETENTION_GOALS: dict[str, dict[str, float]] = {
    "32k": {"paths": 0.95, "errors": 0.90, "tools": 0.95},
    "8k": {"paths": 0.90, "errors": 0.85, "tools": 0.90},
}
"""Least final-view retention per budget and probe kind (4k: reported, no target)."""

SIDES = ("test", "tune")
"""The two halves of the corpus, split once by source repository (``SPLIT.json``)."""

DEMONSTRATION = "Here is a demonstration"
NO_TOOL_ROLE_EXCEPT = frozenset({"openhands"})
"""Formats whose importer always writes tool messages for actions."""

PolicyFactory = Callable[[Budget], Any]


# --------------------------------------------------------------------------- corpus


@dataclass
class Trajectory:
    """One transcript of a corpus file."""

    name: str
    """Path relative to the corpus (``#n`` for the n-th run of a multi-run file)."""
    format: str
    """Import format."""
    events: list[Event]
    """Events in order, as the importer converted them."""

    @property
    def messages(self) -> list[Message]:
        return [e for e in self.events if isinstance(e, Message)]

    @property
    def tool_role(self) -> bool:
        """Whether tool output arrives as tool messages (else as user messages)."""
        return self.format in NO_TOOL_ROLE_EXCEPT or any(m.role == "tool" for m in self.messages)


def _load_file(path: Path, root: Path, tmp: Path) -> list[Trajectory]:
    rel = str(path.relative_to(root))
    if path.suffix == ".xz":
        # Stored compressed; the importer reads the upstream file byte for byte.
        rel = rel[: -len(".xz")]
        plain = tmp / rel
        plain.parent.mkdir(parents=True, exist_ok=True)
        plain.write_bytes(lzma.decompress(path.read_bytes()))
        path = plain
    transcripts = load_transcripts(path)
    out: list[Trajectory] = []
    for i, t in enumerate(transcripts):
        name = rel if len(transcripts) == 1 else f"{rel}#{i + 1}"
        fmt = str((t.metadata.get("import") or {}).get("format") or "") or detect_format(path)
        out.append(Trajectory(name, fmt, list(t.events)))
    return out


def load_corpus(root: Path, *, smoke: bool = False) -> list[Trajectory]:
    """Every trajectory under ``root`` (README, PROVENANCE and SPLIT files skipped; ``.xz``
    files decompressed first), sorted by name.

    With ``smoke``: only the two shortest trajectories (fewest events) that make at least
    two model calls and outgrow the smallest budget, so that condensation runs.
    """
    out: list[Trajectory] = []
    skip = ("readme", "provenance", "split")
    with tempfile.TemporaryDirectory(prefix="eventstore-corpus-") as tmp:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            if path.name.lower().startswith(skip) or path.name.startswith("."):
                continue
            out += _load_file(path, root, Path(tmp))
    if smoke:
        smallest = min(b.available for b in BUDGETS.values())
        calls = [t for t in out if sum(m.role == "assistant" for m in t.messages) >= 2]
        big = [t for t in calls if tokens(messages_to_openai(t.messages, extra=False)) > smallest]
        out = sorted(big or calls, key=lambda t: (len(t.events), t.name))[:2]
    return out


def load_split(root: Path, *, smoke: bool = False) -> dict[str, list[Trajectory]]:
    """The corpus by side: ``{"test": [...], "tune": [...]}`` when ``root`` holds ``test/``
    and ``tune/`` folders (the split made once, by source repository), else
    ``{"corpus": [...]}`` for a folder of trajectories without a split."""
    sides = [s for s in SIDES if (root / s).is_dir()]
    if not sides:
        return {"corpus": load_corpus(root, smoke=smoke)}
    return {s: load_corpus(root / s, smoke=smoke) for s in sides}


def stitched(trajectories: Sequence[Trajectory], over: int = PRUNE_OVER_TOKENS) -> list[Trajectory]:
    """Long runs made from the corpus: the trajectories of one format (and tool role)
    back to back as one session, after the first one's head (its messages before the
    first assistant message), kept when their tool output passes ``over`` tokens.

    The corpus has no single run that long; these show what a long session does to the
    pruner, the cache and the summary's lists (a measure, not one of the corpus targets).
    """
    groups: dict[tuple[str, bool], list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault((t.format, t.tool_role), []).append(t)
    out: list[Trajectory] = []
    for (fmt, _), group in sorted(groups.items()):
        events: list[Event] = []
        for n, t in enumerate(group):
            first = next(
                (
                    i
                    for i, e in enumerate(t.events)
                    if isinstance(e, Message) and e.role == "assistant"
                ),
                len(t.events),
            )
            events += t.events if n == 0 else t.events[first:]
        run = Trajectory(f"{fmt}: {len(group)} trajectories back to back", fmt, events)
        if tool_output_tokens(run.messages, run.tool_role) > over:
            out.append(run)
    return out


# --------------------------------------------------------------------------- replay


@dataclass
class ViewRecord:
    """One view the policy produced."""

    messages: list[dict[str, Any]]
    """``store.view(sid).to_messages()``."""
    history: int
    """Message events appended before it (the view answers ``messages[:history]``)."""
    turn: bool
    """A model call (``False``: the final view)."""
    error: str | None = None
    """The policy's error, if any."""
    library_tokens: int | None = None
    """The view's size by the library's own count (``View.measured_tokens``)."""


@dataclass
class Replay:
    """What a replay produced: the views and the pruning events written."""

    views: list[ViewRecord]
    tool_prunes: int
    """Prunes written by :class:`~condensers.ToolOutputPruner`."""
    other_prunes: int
    """Prunes written by any other strategy (masking)."""
    condensations: int
    seconds: float


def replay(
    store: EventStore,
    traj: Trajectory,
    budget: Budget,
    policy_factory: PolicyFactory = CondensationPolicy,
) -> Replay:
    """Append ``traj`` event by event; condense and record the view before each turn."""
    started = time.perf_counter()
    sid = store.create_session(title=traj.name).id
    policy = policy_factory(budget)
    views: list[ViewRecord] = []
    history = 0

    def record(turn: bool) -> None:
        error = None
        try:
            out = policy.maybe_condense(store, sid)
            error = getattr(out, "error", None)
        except Exception as exc:  # a policy error is a measured failure, not a crash
            error = f"{type(exc).__name__}: {exc}"
        view = store.view(sid)
        views.append(ViewRecord(view.to_messages(), history, turn, error, view.measured_tokens()))

    for evt in traj.events:
        if isinstance(evt, Condensation | Prune):
            continue  # the agent's own compaction: the policy decides here
        if isinstance(evt, Message) and evt.role == "assistant":
            record(turn=True)
        store.append(sid, [evt])
        if isinstance(evt, Message):
            history += 1
    record(turn=False)
    tool_prunes = other_prunes = condensations = 0
    for stored in store.read(sid, kinds=["prune", "condensation"]):
        if isinstance(stored.event, Prune):
            if stored.event.strategy == ToolOutputPruner.name:
                tool_prunes += 1
            else:
                other_prunes += 1
        else:
            condensations += 1
    return Replay(views, tool_prunes, other_prunes, condensations, time.perf_counter() - started)


# --------------------------------------------------------------------------- scoring


@dataclass
class RunScore:
    """Counts for one trajectory at one budget (pooled across runs by :func:`pool`)."""

    name: str
    format: str = ""
    messages: int = 0
    turns: int = 0
    views: int = 0
    tool_output_tokens: int = 0
    tool_prunes: int = 0
    other_prunes: int = 0
    condensations: int = 0
    task_checked: int = 0
    task_kept: int = 0
    retained: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    probes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    lost: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    invalid: int = 0
    invalid_reasons: list[str] = field(default_factory=list)
    over_budget: int = 0
    avoidable_over: int = 0
    silent_overflows: int = 0
    """Views that fit by the library's count but not by the real tokenizer (cl100k)."""
    max_undercount: int = 0
    """Largest (real - library) count over the views, in tokens."""
    cache_breaks: int = 0
    cache_turns: int = 0
    """Turns after the first (the denominator of the cache-break share)."""
    max_view_tokens: int = 0
    seconds: float = 0.0


def _render(msg: Message) -> list[dict[str, Any]]:
    try:
        return to_openai(msg, extra=False)
    except Exception:
        return [{"role": msg.role, "content": msg.text}]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether rendered ``b`` shows history message ``a`` (a tool result by its call id,
    so a result shortened in place still counts as present)."""
    if a.get("role") != b.get("role"):
        return False
    if a.get("role") == "tool":
        return bool(a.get("tool_call_id") == b.get("tool_call_id"))
    ids_a = [c.get("id") for c in a.get("tool_calls") or []]
    ids_b = [c.get("id") for c in b.get("tool_calls") or []]
    return ids_a == ids_b and normalize(str(a.get("content") or "")) == normalize(
        str(b.get("content") or "")
    )


def _cache_key(m: dict[str, Any]) -> tuple[Any, ...]:
    return (
        m.get("role"),
        m.get("content"),
        m.get("tool_calls"),
        m.get("tool_call_id"),
        m.get("name"),
    )


def is_cache_break(previous: Sequence[dict[str, Any]], current: Sequence[dict[str, Any]]) -> bool:
    """Whether ``current`` does not begin with the whole of ``previous``."""
    if len(current) < len(previous):
        return True
    return any(_cache_key(a) != _cache_key(b) for a, b in zip(previous, current, strict=False))


def invalid_reasons(
    view: Sequence[dict[str, Any]],
    history: Sequence[Message],
    error: str | None = None,
) -> list[str]:
    """Why a view is invalid (empty: valid). ``history`` is what had been appended."""
    reasons: list[str] = []
    if error:
        reasons.append(f"policy error: {error[:200]}")
    i, n = 0, len(view)
    while i < n:
        m = view[i]
        calls = [c.get("id") for c in m.get("tool_calls") or []] if m["role"] == "assistant" else []
        if calls:
            j = i + 1
            got = []
            while j < n and view[j]["role"] == "tool":
                got.append(view[j].get("tool_call_id"))
                j += 1
            if sorted(map(str, got)) != sorted(map(str, calls)):
                reasons.append(f"message {i}: tool calls {calls} answered by {got}")
            i = j
            continue
        if m["role"] == "tool":
            reasons.append(f"message {i}: result {m.get('tool_call_id')} without its call")
        i += 1
    system = next((h for h in history if h.role == "system"), None)
    if system is not None:
        first = view[0] if view else {}
        want = _render(system)[0]
        if first.get("role") != "system" or first.get("content") != want.get("content"):
            reasons.append("system prompt not first and verbatim")
    if history:
        newest = _render(history[-1])[-1]
        if not any(_same(newest, m) for m in view[-3:]):
            reasons.append("newest message not among the last 3")
    return reasons


def _head(messages: Sequence[Message], task: int | None) -> list[int]:
    """Indexes of the system prompt, first user message and task message."""
    out: list[int] = []
    system = next((i for i, m in enumerate(messages) if m.role == "system"), None)
    first_user = next((i for i, m in enumerate(messages) if m.role == "user"), None)
    for i in (system, first_user, task):
        if i is not None and i not in out:
            out.append(i)
    return out


def floor_tokens(history: Sequence[Message], task: int | None) -> int:
    """Tokens of what no condensation could drop: the kept head plus the newest message
    group (the last assistant message to the end)."""
    head = [i for i in _head(history, task) if i < len(history)]
    last = max((i for i, m in enumerate(history) if m.role == "assistant"), default=len(history))
    keep = sorted(set(head) | set(range(last, len(history))))
    return tokens([d for i in keep for d in _render(history[i])])


def task_index(messages: Sequence[Message], tool_role: bool) -> int | None:
    """The task statement: the first user message that is not an observation and does
    not start with a demonstration."""
    first_assistant = next((i for i, m in enumerate(messages) if m.role == "assistant"), None)
    for i, m in enumerate(messages):
        if m.role != "user" or is_observation(m, i, first_assistant, tool_role):
            continue
        if m.text.lstrip().startswith(DEMONSTRATION):
            continue
        return i
    return None


def tool_output_tokens(messages: Sequence[Message], tool_role: bool) -> int:
    """ceil(chars / 4) over every tool result and observation user message."""
    first_assistant = next((i for i, m in enumerate(messages) if m.role == "assistant"), None)
    total = 0
    for i, m in enumerate(messages):
        if m.role == "tool":
            total += sum(math.ceil(len(r.output) / 4) for r in m.tool_results)
        elif m.role == "user" and is_observation(m, i, first_assistant, tool_role):
            total += math.ceil(len(m.text) / 4)
    return total


def score(
    name: str,
    messages: Sequence[Message],
    views: Sequence[ViewRecord],
    budget: Budget,
    *,
    tool_role: bool = True,
    format: str = "",
) -> RunScore:
    """Score the views a replay of ``messages`` produced."""
    s = RunScore(name, format=format, messages=len(messages))
    task = task_index(messages, tool_role)
    task_text = normalize(messages[task].text) if task is not None else ""
    s.tool_output_tokens = tool_output_tokens(messages, tool_role)
    available = budget.available
    real_cache: dict[str, int] = {}
    previous: list[dict[str, Any]] | None = None
    for v in views:
        s.views += 1
        history = messages[: v.history]
        text = view_text(v.messages)
        if task is not None and v.history > task:
            s.task_checked += 1
            s.task_kept += task_text in text
        reasons = invalid_reasons(v.messages, history, v.error)
        if reasons:
            s.invalid += 1
            s.invalid_reasons.extend(reasons[:3])
        size = tokens(v.messages)
        s.max_view_tokens = max(s.max_view_tokens, size)
        if v.library_tokens is not None:
            real = real_tokens(v.messages, real_cache)
            s.max_undercount = max(s.max_undercount, real - v.library_tokens)
            window = budget.max_input_tokens - budget.reserved_output
            if v.library_tokens <= available and real > window:
                s.silent_overflows += 1
        if size > available:
            s.over_budget += 1
            if floor_tokens(history, task) <= available:
                s.avoidable_over += 1
        if v.turn:
            s.turns += 1
            if previous is not None:
                s.cache_turns += 1
                s.cache_breaks += is_cache_break(previous, v.messages)
            previous = v.messages
    final = views[-1] if views else None
    if final is not None:
        probes = extract_probes(messages)
        text = view_text(final.messages)
        for kind in KINDS:
            for probe in probes.seen_before(kind, final.history):
                s.probes[kind] += 1
                if occurs(kind, probe, text):
                    s.retained[kind] += 1
                else:
                    s.lost[kind].append(probe)
    return s


# --------------------------------------------------------------------------- pooling


def pool(scores: Sequence[RunScore]) -> dict[str, Any]:
    """Pooled counts and ratios over the runs of one budget (no mean of ratios)."""
    total: dict[str, Any] = {
        "runs": len(scores),
        "views": sum(s.views for s in scores),
        "turns": sum(s.turns for s in scores),
        "task_checked": sum(s.task_checked for s in scores),
        "task_kept": sum(s.task_kept for s in scores),
        "invalid": sum(s.invalid for s in scores),
        "over_budget": sum(s.over_budget for s in scores),
        "avoidable_over": sum(s.avoidable_over for s in scores),
        "silent_overflows": sum(s.silent_overflows for s in scores),
        "max_undercount": max((s.max_undercount for s in scores), default=0),
        "cache_breaks": sum(s.cache_breaks for s in scores),
        "cache_turns": sum(s.cache_turns for s in scores),
        "condensations": sum(s.condensations for s in scores),
        "tool_prunes": sum(s.tool_prunes for s in scores),
        "other_prunes": sum(s.other_prunes for s in scores),
    }
    for kind in KINDS:
        total[f"{kind}_probes"] = sum(s.probes[kind] for s in scores)
        total[f"{kind}_retained"] = sum(s.retained[kind] for s in scores)
    heavy = [s for s in scores if s.tool_output_tokens > PRUNE_OVER_TOKENS]
    total["heavy_runs"] = len(heavy)
    total["heavy_pruned"] = sum(1 for s in heavy if s.tool_prunes > 0)
    return total


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


@dataclass
class Target:
    """One acceptance target, measured at every budget."""

    name: str
    goal: str
    measured: dict[str, str]
    """Budget label -> shown value."""
    passed: dict[str, bool | None]
    """Budget label -> verdict (``None``: nothing to measure)."""

    @property
    def verdict(self) -> str:
        failed = [b for b, ok in self.passed.items() if ok is False]
        if failed:
            return "**FAIL** (" + ", ".join(failed) + ")"
        if all(ok is None for ok in self.passed.values()):
            return "n/a"
        return "**pass**"


def _pct(r: float | None) -> str:
    return "n/a" if r is None else f"{100 * r:.1f}%"


def targets(pooled: dict[str, dict[str, Any]]) -> list[Target]:
    """The targets of ``QUALITY.md``, evaluated on pooled counts per budget."""

    def each(fn: Callable[[str, dict[str, Any]], tuple[str, bool | None]]) -> tuple[dict, dict]:
        shown, ok = {}, {}
        for label, p in pooled.items():
            shown[label], ok[label] = fn(label, p)
        return shown, ok

    out: list[Target] = []

    def task(_: str, p: dict[str, Any]) -> tuple[str, bool | None]:
        r = _ratio(p["task_kept"], p["task_checked"])
        return f"{_pct(r)} ({p['task_kept']}/{p['task_checked']})", None if r is None else r >= 1

    out.append(Target("task statement in views", "100%", *each(task)))
    for kind in KINDS:

        def ret(label: str, p: dict[str, Any], kind: str = kind) -> Any:
            r = _ratio(p[f"{kind}_retained"], p[f"{kind}_probes"])
            shown = f"{_pct(r)} ({p[f'{kind}_retained']}/{p[f'{kind}_probes']})"
            goal = RETENTION_GOALS.get(label, {}).get(kind)
            return shown, None if r is None or goal is None else r >= goal

        goals = ", ".join(f">= {g[kind]:.0%} at {label}" for label, g in RETENTION_GOALS.items())
        out.append(Target(f"final-view retention: {kind}", goals + " (4k reported)", *each(ret)))
    out.append(
        Target(
            "invalid views",
            "0",
            *each(lambda _, p: (f"{p['invalid']} of {p['views']}", p["invalid"] == 0)),
        )
    )
    out.append(
        Target(
            "views avoidably over budget",
            "0",
            *each(
                lambda _, p: (
                    f"{p['avoidable_over']} of {p['views']} ({p['over_budget']} over)",
                    p["avoidable_over"] == 0,
                )
            ),
        )
    )

    out.append(
        Target(
            "silent overflows (fit by the library's count, over the window by cl100k)",
            "0",
            *each(
                lambda _, p: (
                    f"{p.get('silent_overflows', 0)} of {p['views']} "
                    f"(worst under-count {p.get('max_undercount', 0):,})",
                    p.get("silent_overflows", 0) == 0,
                )
            ),
        )
    )

    def cache(label: str, p: dict[str, Any]) -> tuple[str, bool | None]:
        r = _ratio(p["cache_breaks"], p["cache_turns"])
        goal = CACHE_GOALS.get(label, 0.1)
        shown = f"{_pct(r)} ({p['cache_breaks']}/{p['cache_turns']})"
        return shown, None if r is None else r <= goal

    goal = ", ".join(f"<= {g:.0%} at {label}" for label, g in CACHE_GOALS.items())
    out.append(Target("cache-breaking turns", goal, *each(cache)))

    def prune(_: str, p: dict[str, Any]) -> tuple[str, bool | None]:
        if not p["heavy_runs"]:
            return "no run over 40k", None
        shown = f"{p['heavy_pruned']} of {p['heavy_runs']} runs"
        return shown, p["heavy_pruned"] == p["heavy_runs"]

    out.append(Target("pruner fires on runs > 40k tool-output tokens", "every run", *each(prune)))
    return out


# --------------------------------------------------------------------------- running


def default_corpus() -> Path:
    """``EVENTSTORE_CORPUS``, else the benchmark's own corpus (``benchmarks/corpus``: its
    ``PROVENANCE.md`` says where every file comes from and how it is split)."""
    env = os.environ.get("EVENTSTORE_CORPUS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent / "corpus"


def run(
    trajectories: Sequence[Trajectory],
    budgets: dict[str, Budget] | None = None,
    *,
    workdir: Path | None = None,
    policy_factory: PolicyFactory = CondensationPolicy,
) -> dict[str, list[RunScore]]:
    """Replay every trajectory at every budget (a fresh SQLite file per budget)."""
    budgets = budgets or BUDGETS
    results: dict[str, list[RunScore]] = {}
    with tempfile.TemporaryDirectory(prefix="eventstore-quality-", dir=workdir) as tmp:
        for label, budget in budgets.items():
            store = EventStore(f"sqlite:///{Path(tmp) / f'quality-{label}.db'}", upgrade=True)
            scores: list[RunScore] = []
            try:
                for n, traj in enumerate(trajectories, start=1):
                    rep = replay(store, traj, budget, policy_factory)
                    s = score(
                        traj.name,
                        traj.messages,
                        rep.views,
                        budget,
                        tool_role=traj.tool_role,
                        format=traj.format,
                    )
                    s.tool_prunes, s.other_prunes = rep.tool_prunes, rep.other_prunes
                    s.condensations, s.seconds = rep.condensations, rep.seconds
                    scores.append(s)
                    log(
                        f"[{label} {n}/{len(trajectories)}] {traj.name}: {s.turns} turns, "
                        f"{s.condensations} condensations, {s.tool_prunes} prunes, "
                        f"{s.invalid} invalid, {s.avoidable_over} avoidably over "
                        f"({rep.seconds:.1f}s)"
                    )
            finally:
                store.close()
            results[label] = scores
    return results
