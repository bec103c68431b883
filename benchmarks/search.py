"""``python -m benchmarks search``: full-text search over one long session.

Builds a session of N workload events (default 100,000; ``--smoke``: 5,000) whose tool
outputs are text, plants one phrase in a single tool output and prunes that output (the
model no longer sees it; search must still find it), indexes the session, then times
``store.search`` — including its catch-up check — for:

* ``rare phrase``: the planted phrase (one hit), tenant-wide;
* ``rare phrase, session``: the same, scoped to the session;
* ``rare word``: the phrase's first word alone (one hit);
* ``common word``: a word in many events, top 20 by rank (ranking cost grows with matches);
* ``two words``: two words that are common on their own, rarely together.

Writes ``SEARCH.md`` and ``search.json`` (into ``benchmarks/`` for the full run,
``benchmarks/smoke-results/`` for ``--smoke`` unless ``--out`` says otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from eventstore import EventStore, Message, PartRef, Prune, ToolResultPart

from .harness import load_average, log, machine_info, package_versions
from .raw import fresh_pg_database
from .workload import step, to_message

HERE = Path(__file__).resolve().parent
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_bench_search"
PHRASE = "quartermaster ledger overflow in settlement batch"
TARGET_MS = 50.0


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks search", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="5,000 events, few repetitions")
    p.add_argument("--events", type=int, default=None, help="session length (default 100000)")
    p.add_argument("--repeat", type=int, default=None, help="timed runs per query")
    p.add_argument("--out", type=Path)
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("EVENTSTORE_BENCH_SEARCH_PG_URL", DEFAULT_PG_URL),
        help="Postgres URL; the database is dropped and recreated (its name must contain 'bench')",
    )
    args = p.parse_args(argv)
    if args.events is not None and args.events < 100:
        p.error("--events: use at least 100")
    return args


def _build(store: EventStore, n: int) -> tuple[str, int, float]:
    """The session, the planted seq, and the append time in seconds."""
    s = store.create_session(title="search benchmark")
    planted = (n // 2) - (n // 2) % 5  # a tool result in the workload's cycle
    started = time.perf_counter()
    batch = 1_000
    for first in range(1, n + 1, batch):
        msgs: list[Message] = []
        for seq in range(first, min(first + batch, n + 1)):
            msg = to_message(step(seq))
            if seq == planted:
                part = msg.parts[0]
                assert isinstance(part, ToolResultPart)
                msg = Message(
                    role="tool",
                    parts=[part.model_copy(update={"output": f"{part.output}\n{PHRASE}\n"})],
                )
            msgs.append(msg)
        store.append(s.id, msgs)
    store.append(s.id, [Prune(targets=[PartRef(seq=planted, index=0)], strategy="benchmark")])
    return s.id, planted, time.perf_counter() - started


def _time(fn: Any, repeat: int) -> dict[str, float]:
    fn()  # warm the caches and the statement cache
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    runs.sort()
    return {
        "median_ms": statistics.median(runs),
        "p95_ms": runs[min(len(runs) - 1, int(len(runs) * 0.95))],
    }


def measure(backend: str, url: str, n: int, repeat: int) -> dict[str, Any]:
    with EventStore(url, upgrade=True) as store:
        log(f"{backend}: appending {n:,} events")
        sid, planted, append_s = _build(store, n)
        log(f"{backend}: indexing")
        t = time.perf_counter()
        indexed = store.index_search()
        index_s = time.perf_counter() - t
        hits = store.search(f'"{PHRASE}"')
        found = [(h.session_id, h.seq) for h in hits] == [(sid, planted)]
        rare = PHRASE.split()[0]
        common = step(2).text.split()[0]
        words = f"{step(1).text.split()[1]} {step(4).text.split()[-1]}"
        queries = {
            "rare phrase": lambda: store.search(f'"{PHRASE}"'),
            "rare phrase, session": lambda: store.search(f'"{PHRASE}"', session_id=sid),
            f"rare word ({rare!r})": lambda: store.search(rare),
            f"common word ({common!r}, top 20)": lambda: store.search(common, limit=20),
            f"two words ({words!r})": lambda: store.search(words, limit=20),
        }
        rows = []
        for label, fn in queries.items():
            log(f"{backend}: {label}")
            rows.append({"query": label, "hits": len(fn()), **_time(fn, repeat)})
    return {
        "backend": backend,
        "events": n,
        "append_s": append_s,
        "indexed": indexed,
        "index_s": index_s,
        "index_events_per_s": indexed / index_s if index_s else 0.0,
        "found_pruned_phrase": found,
        "queries": rows,
    }


def render(data: dict[str, Any]) -> str:
    lines = [
        "# Full-text search benchmark",
        "",
        f"Generated by `python -m benchmarks search{' --smoke' if data['smoke'] else ''}` "
        f"on {data['machine']['platform']} ({data['machine']['cpu_count']} CPUs), load "
        f"{data['load']}. Target: a phrase from a pruned tool output in a 100k-event session "
        f"in under {TARGET_MS:.0f} ms.",
        "",
        "| backend | events | index build | phrase from a pruned output found | query | hits "
        "| median ms | p95 ms |",
        "|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in data["results"]:
        build = f"{r['index_s']:.1f} s ({r['index_events_per_s']:,.0f} ev/s)"
        for q in r["queries"]:
            lines.append(
                f"| {r['backend']} | {r['events']:,} | {build} | "
                f"{'yes' if r['found_pruned_phrase'] else '**no**'} | {q['query']} | {q['hits']} "
                f"| {q['median_ms']:.2f} | {q['p95_ms']:.2f} |"
            )
    lines += [
        "",
        "Query times include the catch-up check every search makes (is anything new in the "
        "feed to index?). The index build is paid once per event, by the first search after "
        "an append or by `index_search()` in a background job.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    n = args.events or (5_000 if args.smoke else 100_000)
    repeat = args.repeat or (5 if args.smoke else 30)
    out = args.out or (HERE / "smoke-results" if args.smoke else HERE)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        machine = machine_info(Path(tmp), None)
        results.append(measure("sqlite", f"sqlite:///{Path(tmp) / 'search.db'}", n, repeat))
    if not args.no_postgres:
        results.append(measure("postgres", fresh_pg_database(args.pg_url), n, repeat))
    data = {
        "smoke": args.smoke,
        "machine": machine,
        "load": load_average(),
        "packages": package_versions(),
        "results": results,
    }
    (out / "search.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "SEARCH.md").write_text(render(data))
    print(render(data))
    ok = all(r["found_pruned_phrase"] for r in results)
    if not ok:
        print("the planted phrase was not found", file=sys.stderr)
    return 0 if ok else 1
