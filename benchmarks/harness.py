"""Settings, timing, result records and machine facts shared by every measure."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "Settings",
    "MODES",
    "Recorder",
    "Sample",
    "log",
    "median",
    "percentile",
    "timed",
    "machine_info",
    "load_average",
    "package_versions",
]


@dataclass(frozen=True)
class Settings:
    """How big and how repeated a run is.

    Attributes:
        mode: ``full``, ``quick`` or ``smoke``.
        append_sizes: Session sizes at which single appends are timed.
        view_sizes: Session sizes at which views are built (a subset of ``append_sizes``).
        peer_sizes: Session sizes the peers are grown to (one event at a time for ADK).
        tail: Events kept after the latest condensation.
        single_appends: Single appends timed per repetition.
        reps: Repetitions of each timed measure (after one warm-up).
        batch: Events per batch append.
        batch_reps: Batches timed per repetition set.
        decision_naive_reps: Repetitions of the full-scan baseline of the decision measure.
    """

    mode: str
    append_sizes: tuple[int, ...]
    view_sizes: tuple[int, ...]
    peer_sizes: tuple[int, ...]
    tail: int
    single_appends: int
    reps: int
    batch: int
    batch_reps: int
    decision_naive_reps: int

    @property
    def decision_size(self) -> int:
        return self.view_sizes[-1]


MODES: dict[str, Settings] = {
    "full": Settings(
        mode="full",
        append_sizes=(100, 1_000, 10_000, 100_000),
        view_sizes=(1_000, 10_000, 100_000),
        peer_sizes=(100, 1_000, 10_000),
        tail=200,
        single_appends=50,
        reps=7,
        batch=1_000,
        batch_reps=10,
        decision_naive_reps=3,
    ),
    "quick": Settings(
        mode="quick",
        append_sizes=(100, 1_000, 5_000),
        view_sizes=(1_000, 5_000),
        peer_sizes=(100, 500),
        tail=200,
        single_appends=20,
        reps=3,
        batch=1_000,
        batch_reps=3,
        decision_naive_reps=1,
    ),
    "smoke": Settings(
        mode="smoke",
        append_sizes=(100, 300),
        view_sizes=(100, 300),
        peer_sizes=(20, 60),
        tail=40,
        single_appends=5,
        reps=2,
        batch=100,
        batch_reps=2,
        decision_naive_reps=1,
    ),
}


def log(msg: str) -> None:
    """Progress goes to stderr so stdout stays clean."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between closest ranks."""
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds ``fn`` took, and what it returned."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


@dataclass
class Sample:
    """One repetition of one measure for one subject."""

    measure: str
    backend: str
    subject: str
    size: int
    rep: int
    values: dict[str, Any]


@dataclass
class Recorder:
    """Every repetition of the run, plus notes (skips, errors) for the report."""

    samples: list[Sample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, measure: str, backend: str, subject: str, size: int, rep: int, **values: Any):
        self.samples.append(Sample(measure, backend, subject, size, rep, values))

    def note(self, text: str) -> None:
        log(text)
        self.notes.append(text)

    def select(
        self,
        measure: str,
        backend: str | None = None,
        subject: str | None = None,
        size: int | None = None,
    ) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.measure == measure
            and (backend is None or s.backend == backend)
            and (subject is None or s.subject == subject)
            and (size is None or s.size == size)
        ]

    def med(self, key: str, measure: str, backend: str, subject: str, size: int) -> float | None:
        """Median over repetitions of ``values[key]``, or None when not measured."""
        vals = [
            s.values[key]
            for s in self.select(measure, backend, subject, size)
            if s.values.get(key) is not None
        ]
        return median(vals) if vals else None

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": [asdict(s) for s in self.samples],
            "notes": self.notes,
            **self.extra,
        }


def package_versions() -> dict[str, str | None]:
    names = [
        "agent-eventstore",
        "sqlalchemy",
        "psycopg",
        "psycopg-binary",
        "pydantic",
        "pydantic-core",
        "orjson",  # the fast extra: canonical JSON is written by it where installed
        "google-adk",
        "openai-agents",
        "aiosqlite",
        "asyncpg",
    ]
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _fs_type(path: Path) -> str | None:
    try:
        out = subprocess.run(
            ["df", "-T", str(path)], capture_output=True, text=True, timeout=5, check=True
        ).stdout.splitlines()
        return out[1].split()[1] if len(out) > 1 else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def _git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info(workdir: Path, pg_version: str | None) -> dict[str, Any]:
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) // 1024 // 1024} GiB"
    except OSError:
        pass
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory": mem,
        "load_average_at_start": load_average(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgres": pg_version,
        "sqlite_dir_fs": _fs_type(workdir),
        "git_commit": _git_commit(),
    }


def recorder_from_json(data: dict[str, Any]) -> Recorder:
    """Rebuild a :class:`Recorder` from a ``results.json`` document."""
    rec = Recorder(notes=list(data.get("notes", [])))
    for s in data.get("samples", []):
        rec.samples.append(Sample(**s))
    return rec
