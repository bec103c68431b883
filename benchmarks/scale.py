"""Ten million events on one Postgres: appends, views and verify at 10M against 100k.

    python -m benchmarks scale [--smoke] [--events N] [--sessions N] [--baseline N]
                               [--partitions N] [--ops N] [--pg-url URL] [--out DIR] [--keep]

Two databases on the same server, both hash-partitioned by session as
``eventstore db distribute --partition N`` makes them: the large one
(``eventstore_bench_scale``, default 10,000,000 events over 100,000 sessions) and a small
one beside it (``eventstore_bench_scale_small``, the baseline: 100,000 events in sessions
of the same shape). Both are loaded through the store's batch append (a batch over 16
events streams its rows by ``COPY``), with a progress line on stderr. Then the measures
take turns between the two databases in alternating rounds, so load on the machine falls
on both alike:

- an append of one event to a random session, first from a fresh store (the locked path,
  which reads the head) and again once the store knows the head (the fast path);
- the view of a random session (``view()`` + ``to_messages()``; each session ends with a
  condensation keeping its last 50 events, so a view reads a 50-event tail);
- ``verify`` of a random session.

Reports p50/p99 (ms) and the large/small ratio (goal <= 1.2x for appends and views), the
load's rate, and the large database's size per event (``pg_database_size`` and the
``events``/``parts`` tables with their indexes). Writes ``SCALE.md`` and ``scale.json``
(``benchmarks/`` in the full mode, ``benchmarks/smoke-results/`` with ``--smoke``).
Both databases are dropped afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from eventstore import EventStore, Message
from eventstore.distribution import partition_by_session

from .harness import load_average, log, median, package_versions, percentile
from .raw import fresh_pg_database, pg_analyze
from .workload import condensation, steps, to_message

HERE = Path(__file__).resolve().parent
DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_bench_scale"
#: Each large-database median at most this many times the small one's.
GOAL = 1.2
TAIL = 50
#: Distinct session bodies the load cycles through (building messages costs client CPU).
TEMPLATES = 32


@dataclass
class Side:
    """One database: its store, its sessions and the times measured on it."""

    label: str
    url: str
    events: int
    sids: list[str] = field(default_factory=list)
    times: dict[str, list[float]] = field(default_factory=dict)


def _templates(per_session: int) -> list[list[Any]]:
    """Session bodies: ``per_session - 1`` workload events and a condensation keeping the
    last ``TAIL`` (or half the session when it is shorter)."""
    out = []
    body = per_session - 1
    tail = min(TAIL, body // 2)
    for t in range(TEMPLATES):
        first = 1 + t * 7
        msgs: list[Any] = [to_message(s) for s in steps(first, first + body - 1)]
        out.append(msgs + [condensation(body, tail)])
    return out


_TEMPLATES: dict[int, list[list[Any]]] = {}


def _load_chunk(job: tuple[str, int, int]) -> list[str]:
    """Create ``count`` sessions (numbered from ``first``) in ``url``, one batch append
    each; runs in a loader process."""
    url, first, count = job
    per = _PER_SESSION[0]
    templates = _TEMPLATES.setdefault(per, _templates(per))
    out = []
    with EventStore(url) as store:
        for i in range(first, first + count):
            sid = store.create_session(title=f"scale {i}", user_id=f"user{i % 997}").id
            store.append(sid, templates[i % len(templates)])
            out.append(sid)
    return out


#: Events per session, set before the loader processes start (they inherit it).
_PER_SESSION = [0]
#: Sessions per loader job at most.
CHUNK = 250


def _load(side: Side, sessions: int, per: int, workers: int) -> dict[str, Any]:
    """Create ``sessions`` sessions of ``per`` events in ``workers`` processes, with a
    progress line every 10 s. The database commits asynchronously meanwhile
    (``synchronous_commit = off``: a crash could lose the last moments of the load, never
    corrupt it); the measures run with the server's setting again."""
    _PER_SESSION[0] = per
    _set_sync(side.url, off=True)
    chunk = max(1, min(CHUNK, sessions // (4 * workers)))
    jobs = [(side.url, i, min(chunk, sessions - i)) for i in range(0, sessions, chunk)]
    started = time.perf_counter()
    last_log = started
    ctx = multiprocessing.get_context("fork")
    try:
        with ctx.Pool(workers) as pool:
            for n, sids in enumerate(pool.imap(_load_chunk, jobs), 1):
                side.sids.extend(sids)
                now = time.perf_counter()
                if now - last_log >= 10 or n == len(jobs):
                    last_log = now
                    done = len(side.sids) * per
                    rate = done / (now - started)
                    left = (sessions - len(side.sids)) * per / rate
                    log(
                        f"{side.label}: {done:,}/{sessions * per:,} events "
                        f"({100 * len(side.sids) / sessions:.1f}%), {rate:,.0f} events/s, "
                        f"about {left / 60:.1f} min left"
                    )
    finally:
        _set_sync(side.url, off=False)
    took = time.perf_counter() - started
    return {
        "sessions": sessions,
        "events": sessions * per,
        "workers": workers,
        "seconds": round(took, 1),
        "events_per_s": round(sessions * per / took),
    }


def _set_sync(url: str, *, off: bool) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            name = conn.execute(text("SELECT current_database()")).scalar_one()
            setting = "SET synchronous_commit = off" if off else "RESET synchronous_commit"
            conn.execute(text(f'ALTER DATABASE "{name}" {setting}'))
    finally:
        engine.dispose()


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


MEASURES = (
    "append 1 event, head unknown (locked)",
    "append 1 event, head known (fast)",
    "view (50-event tail)",
    "verify one session",
)
#: The measures the goal applies to.
GOALED = MEASURES[:3]


def _measure_round(side: Side, ops: int, verifies: int, rng: random.Random) -> None:
    """One round on one database: a fresh store (so the first append to each session
    reads its head), ``ops`` of each measure on random sessions."""
    one = [Message.user("one more step")]
    with EventStore(side.url) as store:
        picked = rng.sample(side.sids, ops)
        times = side.times
        for sid in picked:
            times[MEASURES[0]].append(_timed(lambda sid=sid: store.append(sid, one)))  # type: ignore[misc]
        for sid in picked:
            times[MEASURES[1]].append(_timed(lambda sid=sid: store.append(sid, one)))  # type: ignore[misc]
        for _ in range(ops):
            sid = rng.choice(side.sids)
            times[MEASURES[2]].append(_timed(lambda sid=sid: store.view(sid).to_messages()))  # type: ignore[misc]
        for _ in range(verifies):
            sid = rng.choice(side.sids)
            report: Any = None

            def check(sid: str = sid) -> None:
                nonlocal report
                report = store.verify(sid)

            times[MEASURES[3]].append(_timed(check))
            if not report.ok:
                raise SystemExit(f"verify failed on {side.label} session {sid}: {report}")


def _viewer(side: Side, rng: random.Random) -> list[dict[str, Any]]:
    """The audit viewer's pages over the large database (``None`` without the viewer
    extra)."""
    try:
        from .viewer_pages import index_routes, page_times, session_routes
    except ImportError:
        return []
    log("timing the viewer's pages on the large database")
    with EventStore(side.url) as store:
        sid = rng.choice(side.sids)
        middle = side.sids[len(side.sids) // 2]
        user = store.get_session(sid).user_id or ""
        routes = index_routes(middle, user) + session_routes(sid, store.head(sid))
        times = page_times(store, routes)
    for t in times:
        t["route"] = t["route"].replace(sid, "ID").replace(middle, "ID2")
    return times


def _sizes(url: str, events: int) -> dict[str, Any]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            db = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            tables = {}
            for table in ("events", "parts", "sessions"):
                tables[table] = int(
                    conn.execute(
                        text(
                            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) "
                            "FROM pg_class c WHERE c.relname = :t OR c.oid IN "
                            "(SELECT inhrelid FROM pg_inherits "
                            "WHERE inhparent = CAST(:t AS regclass))"
                        ),
                        {"t": table},
                    ).scalar_one()
                )
    finally:
        engine.dispose()
    return {
        "database_bytes": int(db),
        "database_bytes_per_event": round(db / events, 1),
        "tables_bytes": tables,
        "events_and_parts_bytes_per_event": round((tables["events"] + tables["parts"]) / events, 1),
    }


def _prepare(url: str, partitions: int) -> str:
    url = fresh_pg_database(url)
    EventStore(url, upgrade=True).close()
    engine = create_engine(url)
    try:
        partition_by_session(engine, partitions)
    finally:
        engine.dispose()
    return url


def _drop(url: str) -> None:
    import psycopg

    from .raw import pg_conninfo

    u = make_url(url)
    admin = pg_conninfo(u.set(database="postgres").render_as_string(hide_password=False))
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{u.database}" WITH (FORCE)')


def run(args: argparse.Namespace) -> dict[str, Any]:
    per = args.events // args.sessions
    if per < 4 or args.baseline < per:
        raise SystemExit("--events / --sessions must be at least 4 and at most --baseline")
    small_sessions = args.baseline // per
    big = Side("large", "", args.sessions * per)
    small = Side("small", "", small_sessions * per)
    u = make_url(args.pg_url)
    small_url = u.set(database=f"{u.database}_small").render_as_string(hide_password=False)
    started = time.perf_counter()
    load_start = load_average()
    result: dict[str, Any] = {
        "settings": {
            "events": big.events,
            "sessions": args.sessions,
            "events_per_session": per,
            "baseline_events": small.events,
            "baseline_sessions": small_sessions,
            "partitions": args.partitions,
            "ops_per_measure": args.ops * args.rounds,
            "verifies": args.verifies * args.rounds,
            "rounds": args.rounds,
            "mode": "smoke" if args.smoke else "full",
        },
        "load_average_at_start": load_start,
    }
    try:
        small.url = _prepare(small_url, args.partitions)
        big.url = _prepare(args.pg_url, args.partitions)
        with create_engine(big.url).connect() as conn:
            result["postgres"] = conn.execute(text("SHOW server_version")).scalar_one()
            result["shared_buffers"] = conn.execute(text("SHOW shared_buffers")).scalar_one()
        result["load_small"] = _load(small, small_sessions, per, args.load_workers)
        result["load_large"] = _load(big, args.sessions, per, args.load_workers)
        for side in (small, big):
            pg_analyze(side.url)
        result["size_large"] = _sizes(big.url, big.events)
        result["size_small"] = _sizes(small.url, small.events)
        result["load_average_after_load"] = load_average()
        rng = random.Random(7)
        for side in (small, big):
            side.times = {m: [] for m in MEASURES}
        log(f"measuring: {args.rounds} rounds alternating between the two databases")
        for r in range(args.rounds):
            for side in (small, big) if r % 2 == 0 else (big, small):
                _measure_round(side, args.ops, args.verifies, rng)
        rows = []
        for m in MEASURES:
            a, b = small.times[m], big.times[m]
            ratio = median(b) / median(a)
            rows.append(
                {
                    "measure": m,
                    "small_p50_ms": round(median(a), 3),
                    "small_p99_ms": round(percentile(a, 0.99), 3),
                    "large_p50_ms": round(median(b), 3),
                    "large_p99_ms": round(percentile(b, 0.99), 3),
                    "ratio_p50": round(ratio, 3),
                    "ratio_p99": round(percentile(b, 0.99) / percentile(a, 0.99), 3),
                    "goal": f"<= {GOAL}x" if m in GOALED else None,
                    "passed": (ratio <= GOAL) if m in GOALED else None,
                }
            )
        result["measures"] = rows
        if not args.no_viewer:
            result["viewer"] = _viewer(big, rng)
    finally:
        if not args.keep:
            for url in (small_url, args.pg_url):
                _drop(url)
    result["load_average_at_end"] = load_average()
    result["duration_s"] = round(time.perf_counter() - started, 1)
    result["packages"] = {k: v for k, v in package_versions().items() if v}
    return result


def render(r: dict[str, Any]) -> str:
    s = r["settings"]
    big, small = r["load_large"], r["load_small"]
    size = r["size_large"]
    flag = " --smoke" if s["mode"] == "smoke" else ""
    kept = min(TAIL, (s["events_per_session"] - 1) // 2)
    lines = [
        "# Ten million events on one Postgres",
        "",
        f"Command: `python -m benchmarks scale{flag}`. Postgres {r['postgres']} "
        f"(shared_buffers {r['shared_buffers']}), both databases hash-partitioned by session "
        f"into {s['partitions']} partitions (`eventstore db distribute --partition "
        f"{s['partitions']}`). Load average (1, 5, 15 min) at the start "
        f"{r['load_average_at_start']}, after the load {r['load_average_after_load']}, at "
        f"the end {r['load_average_at_end']}: the machine's 2 vCPUs are shared with other "
        "work, so absolute times are noisy; the two databases were measured in "
        f"{s['rounds']} alternating rounds so drift falls on both.",
        "",
        f"- **large**: {s['events']:,} events in {s['sessions']:,} sessions of "
        f"{s['events_per_session']} (the workload's user, assistant, tool-call and "
        f"tool-result events, then a condensation keeping the last {kept});",
        f"- **small** (the baseline): {s['baseline_events']:,} events in "
        f"{s['baseline_sessions']:,} sessions of the same shape.",
        "",
        "## Load",
        "",
        f"Each session is one `create_session` and one batch append of its "
        f"{s['events_per_session']} events (streamed by `COPY`), {big['workers']} loader "
        "processes, `synchronous_commit = off` for the load only: the large "
        f"database took {big['seconds'] / 60:.1f} min, {big['events_per_s']:,} events/s "
        f"(the small one {small['events_per_s']:,} events/s).",
        "",
        "## Size",
        "",
        f"`pg_database_size`: {size['database_bytes'] / 2**30:.2f} GiB, "
        f"{size['database_bytes_per_event']:,.0f} bytes per event; `events` and `parts` "
        f"with their indexes and TOAST: {size['events_and_parts_bytes_per_event']:,.0f} "
        f"bytes per event (events {size['tables_bytes']['events'] / 2**30:.2f} GiB, parts "
        f"{size['tables_bytes']['parts'] / 2**30:.2f} GiB, sessions "
        f"{size['tables_bytes']['sessions'] / 2**20:.1f} MiB). The small database: "
        f"{r['size_small']['database_bytes_per_event']:,.0f} bytes per event.",
        "",
        "## Latency",
        "",
        f"{s['ops_per_measure']:,} appends of each kind and views on random sessions per "
        f"database, {s['verifies']} verifies; ms.",
        "",
        "| measure | small p50 | small p99 | large p50 | large p99 | ratio p50 | ratio p99 "
        "| goal |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for m in r["measures"]:
        goal = m["goal"] or ""
        if m["passed"] is not None:
            goal += " **pass**" if m["passed"] else " **FAIL**"
        lines.append(
            f"| {m['measure']} | {m['small_p50_ms']:.2f} | {m['small_p99_ms']:.2f} | "
            f"{m['large_p50_ms']:.2f} | {m['large_p99_ms']:.2f} | {m['ratio_p50']:.2f}x | "
            f"{m['ratio_p99']:.2f}x | {goal} |"
        )
    if r.get("viewer"):
        lines += [
            "",
            "## The audit viewer on the large database",
            "",
            "Each route through a fresh viewer application (Starlette's test client, in the "
            "benchmark's process): the first request (cold) and the median of five more "
            "(warm), ms. ID is a random session, ID2 the middle one of the load.",
            "",
            "| route | cold ms | warm ms | bytes |",
            "|---|---:|---:|---:|",
        ]
        for t in r["viewer"]:
            lines.append(
                f"| `{t['route']}` | {t['cold_ms']:.0f} | {t['warm_ms']:.0f} | {t['bytes']:,} |"
            )
    lines += ["", f"Whole run: {r['duration_s'] / 60:.1f} min.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks scale", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="tiny sizes (tests the harness)")
    p.add_argument("--events", type=int, help="events in the large database (10,000,000)")
    p.add_argument("--sessions", type=int, help="sessions in the large database (100,000)")
    p.add_argument("--baseline", type=int, help="events in the small database (100,000)")
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--ops", type=int, help="appends and views per round and database")
    p.add_argument("--verifies", type=int, help="verifies per round and database")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--load-workers", type=int, default=2, help="loader processes")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("EVENTSTORE_BENCH_SCALE_URL", DEFAULT_URL),
        help="the large database (dropped and recreated, as is a sibling suffixed _small)",
    )
    p.add_argument("--out", type=Path, help="directory for SCALE.md and scale.json")
    p.add_argument("--keep", action="store_true", help="do not drop the databases")
    p.add_argument("--no-viewer", action="store_true", help="skip the viewer's pages")
    args = p.parse_args(argv)
    full = {"events": 10_000_000, "sessions": 100_000, "baseline": 100_000, "ops": 250}
    smoke = {"events": 4_000, "sessions": 200, "baseline": 400, "ops": 10}
    for key, value in (smoke if args.smoke else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.verifies is None:
        args.verifies = 5 if args.smoke else 25
    if args.smoke:
        args.rounds = min(args.rounds, 2)
    out = args.out or (HERE / "smoke-results" if args.smoke else HERE)
    out.mkdir(parents=True, exist_ok=True)
    result = run(args)
    (out / "scale.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "SCALE.md").write_text(render(result))
    log(f"wrote {out / 'SCALE.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
