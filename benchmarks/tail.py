"""The 50-event-tail view at 10,000 events against the OpenAI Agents SDK's
``SQLAlchemySession.get_items(limit=50)``, on SQLite and Postgres, in one run.

    python -m benchmarks tail [--smoke] [--events 10000] [--reps 300] [--pg-url URL]

Needs the ``openai-agents`` package (the ``bench`` extra; it moves litellm, so use an
environment of its own: ``python3 -m venv .venv-bench && .venv-bench/bin/pip install -e
".[bench]"``). On each backend one eventstore session and one SDK session get the same
workload (:mod:`benchmarks.workload`, appended in batches of 1,000); the eventstore
session then gets a condensation keeping its last 50 events. The reads take turns, each
repetition timing ``store.view(session).to_messages()`` (sync),
``await AsyncEventStore.view(session)`` + ``to_messages()`` and ``await
session.get_items(limit=50)`` one after another, so load on the machine falls on all
alike. Postgres databases (``--pg-url``, default ``eventstore_bench_tail``, and a sibling
suffixed ``_openai``) are dropped and recreated, and ANALYZEd after the fill. Prints
Markdown (also written to ``TAIL.md`` and ``tail.json`` in ``benchmarks/``, or
``benchmarks/smoke-results/`` with ``--smoke``): medians and p99 in ms, each eventstore
read's ratio to the SDK's, and the client process's CPU time per read
(``time.process_time``, every thread: steadier than wall time on a busy machine; on
Postgres the server's share is not in it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from eventstore import AsyncEventStore, EventStore

from .harness import load_average, log, median, package_versions, percentile
from .peers import RECENT, _OpenAIAdapter
from .raw import fresh_pg_database, pg_analyze
from .workload import condensation, steps, to_message

HERE = Path(__file__).resolve().parent
_SHOWN = ("eventstore", "openai-agents", "sqlalchemy", "psycopg", "asyncpg", "aiosqlite")
DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_bench_tail"
SUBJECTS = ("eventstore view (sync)", "eventstore view (async)", f"SDK get_items({RECENT})")


async def _measure(store_url: str, sdk_url: str, events: int, reps: int) -> dict[str, list[float]]:
    store = EventStore(store_url, upgrade=True)
    sid = store.create_session().id
    for first in range(1, events + 1, 1_000):
        store.append(sid, [to_message(s) for s in steps(first, min(events, first + 999))])
    store.append(sid, [condensation(events, RECENT)])
    sdk = _OpenAIAdapter(sdk_url)
    await sdk.open()
    for first in range(1, events + 1, 1_000):
        await sdk.append_batch(steps(first, min(events, first + 999)))
    if store_url.startswith("postgresql"):
        pg_analyze(store_url)
        pg_analyze(sdk_url)
    astore = AsyncEventStore(store_url)
    times: dict[str, list[float]] = {s: [] for s in SUBJECTS}
    cpu = dict.fromkeys(SUBJECTS, 0.0)

    async def sync_view() -> int:
        return len(store.view(sid).to_messages())

    async def async_view() -> int:
        return len((await astore.view(sid)).to_messages())

    reads = dict(zip(SUBJECTS, (sync_view, async_view, sdk.read_recent), strict=True))
    counts: dict[str, int] = {}
    try:
        for rep in range(-10, reps):  # negative reps warm up
            for subject, read in reads.items():
                c0, t0 = time.process_time(), time.perf_counter()
                counts[subject] = await read()
                took, used = time.perf_counter() - t0, time.process_time() - c0
                if rep >= 0:
                    times[subject].append(took * 1000)
                    cpu[subject] += used * 1000 / reps
        log(f"messages or items read: {counts}")
    finally:
        await astore.close()
        await sdk.close()
        store.close()
    times.update({f"{s} cpu": [ms] for s, ms in cpu.items()})
    return times


def _urls(args: argparse.Namespace, workdir: Path) -> list[tuple[str, str, str]]:
    out = [
        (
            "sqlite",
            f"sqlite:///{workdir / 'eventstore.db'}",
            f"sqlite+aiosqlite:///{workdir / 'openai.db'}",
        )
    ]
    if not args.no_postgres:
        store_url = fresh_pg_database(args.pg_url)
        u = make_url(args.pg_url)
        sdk = fresh_pg_database(u.set(database=f"{u.database}_openai").render_as_string(False))
        sdk_url = make_url(sdk).set(drivername="postgresql+asyncpg")
        out.append(("postgres", store_url, sdk_url.render_as_string(hide_password=False)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks tail", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="tiny sizes (tests the harness)")
    p.add_argument("--events", type=int)
    p.add_argument("--reps", type=int)
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument("--out", type=Path, help="directory for TAIL.md and tail.json")
    p.add_argument("--pg-url", default=os.environ.get("EVENTSTORE_BENCH_TAIL_URL", DEFAULT_URL))
    args = p.parse_args(argv)
    events = args.events or (300 if args.smoke else 10_000)
    reps = args.reps or (10 if args.smoke else 300)
    started = load_average()
    rows: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="eventstore-tail-") as tmp:
        for backend, store_url, sdk_url in _urls(args, Path(tmp)):
            log(f"{backend}: {events:,} events, {reps} reads each")
            rows.append((backend, asyncio.run(_measure(store_url, sdk_url, events, reps))))
    lines = [
        "# The 50-event-tail view against the OpenAI Agents SDK's get_items(50)",
        "",
        f"Command: `python -m benchmarks tail{' --smoke' if args.smoke else ''}`. "
        f"{events:,} events per session, {reps} reads per subject taking turns; load "
        f"average {started} at the start, {load_average()} at the end (2 shared vCPUs); "
        "ms. Packages: "
        + ", ".join(f"{k} {v}" for k, v in package_versions().items() if v and k in _SHOWN)
        + ".",
        "",
        "| backend | read | p50 | p99 | p50 / SDK p50 | client CPU per read | CPU / SDK CPU |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    data: dict[str, Any] = {"events": events, "reps": reps, "results": []}
    for backend, times in rows:
        sdk = median(times[SUBJECTS[-1]])
        sdk_cpu = times[f"{SUBJECTS[-1]} cpu"][0]
        for subject in SUBJECTS:
            ms, used = times[subject], times[f"{subject} cpu"][0]
            lines.append(
                f"| {backend} | {subject} | {median(ms):.3f} | {percentile(ms, 0.99):.3f} | "
                f"{median(ms) / sdk:.2f}x | {used:.3f} | {used / sdk_cpu:.2f}x |"
            )
            data["results"].append(
                {
                    "backend": backend,
                    "read": subject,
                    "p50_ms": round(median(ms), 4),
                    "p99_ms": round(percentile(ms, 0.99), 4),
                    "cpu_ms": round(used, 4),
                    "p50_vs_sdk": round(median(ms) / sdk, 3),
                }
            )
    text = "\n".join(lines) + "\n"
    print(text)
    out = args.out or (HERE / "smoke-results" if args.smoke else HERE)
    out.mkdir(parents=True, exist_ok=True)
    (out / "TAIL.md").write_text(text)
    (out / "tail.json").write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
