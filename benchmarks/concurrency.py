"""``python -m benchmarks concurrency``: N writers on N sessions, store against raw driver.

Each writer owns one session and appends single events (the workload's five-event cycle,
one transaction each) for a fixed number of seconds. Writers run as threads sharing one
``EventStore`` (and, for the floor, one connection per thread), or as processes each
opening its own. The report gives total appends/s for the store and for the raw driver
under the same concurrency, and their ratio; each is the mean of two runs, taken in the
order store, floor, floor, store.

SQLite has one writer at a time per database file: its numbers show how the store
behaves under that lock (no errors, fair progress), not parallel speed-up.

On Postgres it also measures the CPU one append costs on each side, one writer at a
time: the benchmark process's own CPU time (the client) and the CPU time of every
``postgres`` process on the machine (the server, when it runs here), for the store's
append and the raw insert in alternating blocks. With few cores, the two sides share them,
and their sum is what bounds many writers' throughput.

Writes ``CONCURRENCY.md`` and ``concurrency.json`` (into ``benchmarks/`` for the full
mode, ``benchmarks/smoke-results/`` for ``--smoke`` unless ``--out`` says otherwise).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from .harness import load_average, log, machine_info, package_versions
from .raw import RawPostgres, RawSQLite, fresh_pg_database, pg_analyze
from .workload import raw_payload, step, to_message

HERE = Path(__file__).resolve().parent
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_bench_conc"


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks concurrency", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="short runs, 1 and 2 writers")
    p.add_argument("--writers", default=None, help="comma-separated writer counts (1,2,4,8)")
    p.add_argument("--seconds", type=float, default=None, help="run time per measurement")
    p.add_argument("--out", type=Path)
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("EVENTSTORE_BENCH_CONC_PG_URL", DEFAULT_PG_URL),
        help="Postgres URL; the database is dropped and recreated (its name must contain 'bench')",
    )
    return p.parse_args(argv)


# --------------------------------------------------------------------------- writers


def _store_writer(url: str, session_id: str, seconds: float, start: float) -> int:
    """Append single events to one session until the deadline; return how many."""
    from eventstore import EventStore

    store = EventStore(url)
    try:
        return _store_loop(store, session_id, seconds, start)
    finally:
        store.close()


def _store_loop(store: Any, session_id: str, seconds: float, start: float) -> int:
    deadline = _wait(start) + seconds
    n = 0
    while time.time() < deadline:
        n += 1
        store.append(session_id, [to_message(step(n))])
    return n


def _raw_writer(url: str, session_id: str, seconds: float, start: float) -> int:
    conn = _raw_connection(url)
    sql = _raw_insert_sql(url)  # once, as the store prepares its statements once
    try:
        deadline = _wait(start) + seconds
        n = 0
        while time.time() < deadline:
            n += 1
            conn.execute(sql, (session_id, n, raw_payload(step(n))))
        return n
    finally:
        conn.close()


def _raw_connection(url: str) -> Any:
    u = make_url(url)
    if u.get_backend_name() == "postgresql":
        import psycopg

        from .raw import pg_conninfo

        return psycopg.connect(**pg_conninfo(url), autocommit=True)
    import sqlite3

    conn = sqlite3.connect(u.database or "", isolation_level=None, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def _raw_insert_sql(url: str) -> str:
    p = "%s" if make_url(url).get_backend_name() == "postgresql" else "?"
    return f"INSERT INTO bench_raw VALUES ({p}, {p}, {p})"


def _wait(start: float) -> float:
    """Sleep until ``start``; returns when the writer really starts. A writer that was not
    ready in time (a process slow to spawn on a loaded machine) starts late but still
    writes for the whole measured time, instead of finding its deadline already passed."""
    delay = start - time.time()
    if delay > 0:
        time.sleep(delay)
    return max(start, time.time())


def _run(
    kind: str,
    n: int,
    fn: Callable[[str, str, float, float], int],
    url: str,
    sessions: list[str],
    seconds: float,
) -> float:
    """Run ``n`` writers of ``fn`` as threads or processes; return total appends/s."""
    start = time.time() + (2.0 if kind == "processes" else 0.3)
    args = [(url, sessions[i], seconds, start) for i in range(n)]
    if kind == "processes":
        with mp.get_context("spawn").Pool(n) as pool:
            counts = pool.starmap(fn, args)
    else:
        counts = [0] * n

        def worker(i: int) -> None:
            counts[i] = fn(*args[i])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return sum(counts) / seconds


def _shared_store_run(url: str, sessions: list[str], n: int, seconds: float) -> float:
    """Threads sharing ONE EventStore (its connection pool), as an application would."""
    from eventstore import EventStore

    store = EventStore(url)
    try:
        start = time.time() + 0.3
        counts = [0] * n

        def worker(i: int) -> None:
            counts[i] = _store_loop(store, sessions[i], seconds, start)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(counts) / seconds
    finally:
        store.close()


# --------------------------------------------------------------------------- setup


def _prepare(url: str, max_writers: int, fresh_raw: Callable[[], Any]) -> list[str]:
    from eventstore import EventStore

    with EventStore(url, upgrade=True) as store:
        sessions = [store.create_session(title=f"writer {i}").id for i in range(max_writers)]
    raw = fresh_raw()
    raw.close()
    return sessions


def measure(
    backend: str, url: str, fresh_raw: Callable[[], Any], writers: list[int], seconds: float
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind in ("threads", "processes"):
        for n in writers:
            # Fresh sessions and a fresh floor table for every measurement, so each
            # starts from the same state. Store and floor run twice, in the order store,
            # floor, floor, store: a machine whose other load drifts during the
            # measurement then weighs on both alike, not on whichever ran second.
            sessions = _prepare(url, n, fresh_raw)
            if backend == "postgres":
                pg_analyze(url)
            store_rates: list[float] = []
            raw_rates: list[float] = []
            for order in ("store", "raw", "raw", "store"):
                if order == "raw":
                    fresh_raw().close()  # an empty floor table: its seqs start at 1 again
                    raw_rates.append(_run(kind, n, _raw_writer, url, sessions, seconds))
                elif kind == "threads":
                    store_rates.append(_shared_store_run(url, sessions, n, seconds))
                else:
                    store_rates.append(_run(kind, n, _store_writer, url, sessions, seconds))
            store_rate = sum(store_rates) / len(store_rates)
            raw_rate = sum(raw_rates) / len(raw_rates)
            row = {
                "backend": backend,
                "writers": n,
                "kind": kind,
                "store_appends_per_s": round(store_rate, 1),
                "raw_inserts_per_s": round(raw_rate, 1),
                "ratio": round(store_rate / raw_rate, 3) if raw_rate else None,
            }
            ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.0%}"
            log(
                f"{backend} {kind} x{n}: store {store_rate:,.0f}/s, raw {raw_rate:,.0f}/s ({ratio})"
            )
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- CPU per append


def _server_cpu_s() -> float | None:
    """CPU seconds used so far by the processes named ``postgres`` on this machine (the
    server, when it runs here: its backends and its writers), or None when none can be
    read (another machine's server, or no ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, found = 0.0, False
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "comm").read_text().strip() != "postgres":
                continue
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        found = True
    return total if found else None


def cpu_per_append(url: str, fresh_raw: Callable[[], Any], appends: int) -> list[dict[str, Any]]:
    """The client's and the server's CPU per single append, store against raw insert, one
    writer each, in alternating blocks (the events and payloads made beforehand: the
    append alone is measured). Server figures are None when the server's processes
    cannot be read."""
    from eventstore import EventStore

    blocks = 10
    per = max(1, appends // blocks)
    warm = min(200, per)
    total = warm + per * blocks
    msgs = [to_message(step(n)) for n in range(1, total + 1)]
    payloads = [raw_payload(step(n)) for n in range(1, total + 1)]
    client = {"eventstore": 0.0, "raw insert": 0.0}
    server = {"eventstore": 0.0, "raw insert": 0.0}
    readable = _server_cpu_s() is not None  # the server runs on this machine
    raw = fresh_raw()
    try:
        with EventStore(url) as store:
            sid = store.create_session(title="cpu per append").id
            cursor = {"eventstore": 0, "raw insert": 0}

            def run(subject: str, count: int) -> None:
                at = cursor[subject]
                if subject == "eventstore":
                    for m in msgs[at : at + count]:
                        store.append(sid, [m])
                else:
                    for i in range(at, at + count):
                        raw.insert_one((sid, i + 1, payloads[i]))
                cursor[subject] = at + count

            for subject in client:
                run(subject, warm)
            for b in range(blocks):
                for subject in list(client) if b % 2 == 0 else list(client)[::-1]:
                    s0, c0 = _server_cpu_s() or 0.0, time.process_time()
                    run(subject, per)
                    c1, s1 = time.process_time(), _server_cpu_s() or 0.0
                    client[subject] += c1 - c0
                    server[subject] += s1 - s0
    finally:
        raw.close()
    rows = []
    for subject in client:
        rows.append(
            {
                "backend": "postgres",
                "subject": subject,
                "appends": per * blocks,
                "client_cpu_ms": round(client[subject] / (per * blocks) * 1e3, 4),
                "server_cpu_ms": (
                    round(server[subject] / (per * blocks) * 1e3, 4) if readable else None
                ),
            }
        )
    log(
        "postgres CPU per append: "
        + "; ".join(
            f"{r['subject']} client {r['client_cpu_ms']:.3f} ms, server "
            + ("n/a" if r["server_cpu_ms"] is None else f"{r['server_cpu_ms']:.3f} ms")
            for r in rows
        )
    )
    return rows


def render(
    rows: list[dict[str, Any]], meta: dict[str, Any], cpu: list[dict[str, Any]] | None = None
) -> str:
    out = [
        "# Concurrent writers: store against the raw driver",
        "",
        f"Command: `{meta['command']}`. Each writer appends single events (one transaction "
        f"each) to its own session for {meta['seconds']:g} s, twice for the store and twice "
        "for the floor (store, floor, floor, store; the rates are the means). *threads*: one "
        "shared `EventStore` (its connection pool) and, for the floor, one connection per thread; "
        "*processes*: each process opens its own store or connection. The floor inserts "
        "the same payload text into a `(session_id, seq, payload)` table with the "
        "store's durability settings.",
        "",
        f"Machine: {meta['machine'].get('cpu_model') or 'unknown CPU'}, "
        f"{meta['machine'].get('cpu_count')} CPUs; Postgres {meta['machine'].get('postgres')}; "
        f"load average at end {meta.get('load_average_at_end')}.",
        "",
        "| backend | writers | mode | store appends/s | raw inserts/s | store / raw |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.1%}"
        out.append(
            f"| {r['backend']} | {r['writers']} | {r['kind']} | "
            f"{r['store_appends_per_s']:,.0f} | {r['raw_inserts_per_s']:,.0f} | {ratio} |"
        )
    out += [
        "",
        "SQLite serialises writers on one database file (`BEGIN IMMEDIATE` plus the busy "
        "timeout): more writers share the same single-writer throughput. Postgres takes a "
        "row lock on the appended session's head only, so writers on different sessions do "
        "not wait for each other; with few cores the client and the server compete for CPU.",
        "",
    ]
    if cpu:
        out += [
            "## CPU per append (Postgres, one writer)",
            "",
            f"{cpu[0]['appends']:,} single appends each, store and raw insert in alternating "
            "blocks, events and payloads made beforehand. Client: this process's CPU time. "
            "Server: the CPU time of every `postgres` process on the machine over the same "
            "blocks (its backends and its WAL writer; other work on the server counts too, "
            "and the kernel counts in 10 ms ticks, so read it to about 0.01 ms).",
            "",
            "| subject | client CPU ms | server CPU ms | total ms |",
            "|---|---:|---:|---:|",
        ]
        for r in cpu:
            srv = r["server_cpu_ms"]
            both = "n/a" if srv is None else f"{r['client_cpu_ms'] + srv:.3f}"
            srv_text = "n/a (server not on this machine)" if srv is None else f"{srv:.3f}"
            out.append(f"| {r['subject']} | {r['client_cpu_ms']:.3f} | {srv_text} | {both} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    try:
        writers = (
            [int(x) for x in args.writers.split(",")]
            if args.writers
            else ([1, 2] if args.smoke else [1, 2, 4, 8])
        )
    except ValueError:
        raise SystemExit(f"--writers: expected counts like 1,2,4,8, got {args.writers!r}") from None
    if any(n < 1 for n in writers):
        raise SystemExit("--writers: counts must be positive integers")
    seconds = args.seconds or (1.0 if args.smoke else 5.0)
    out = args.out or (HERE / "smoke-results" if args.smoke else HERE)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="eventstore-conc-"))
    rows: list[dict[str, Any]] = []
    cpu: list[dict[str, Any]] = []
    pg_version = None
    started = time.perf_counter()
    machine = machine_info(workdir, None)
    try:
        sqlite_url = f"sqlite:///{workdir / 'store.db'}"
        rows += measure(
            "sqlite",
            sqlite_url,
            lambda: RawSQLite(workdir / "store.db"),
            writers,
            seconds,
        )
        if not args.no_postgres:
            pg_url = fresh_pg_database(args.pg_url)
            raw = RawPostgres(pg_url)
            pg_version = raw.server_version()
            raw.close()
            rows += measure("postgres", pg_url, lambda: RawPostgres(pg_url), writers, seconds)
            appends = 1_000 if args.smoke else 5_000
            cpu = cpu_per_append(pg_url, lambda: RawPostgres(pg_url), appends)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    machine["postgres"] = pg_version
    meta = {
        "command": "python -m benchmarks concurrency" + (" --smoke" if args.smoke else ""),
        "seconds": seconds,
        "machine": machine,
        "packages": package_versions(),
        "load_average_at_end": load_average(),
        "duration_s": round(time.perf_counter() - started, 1),
    }
    (out / "CONCURRENCY.md").write_text(render(rows, meta, cpu))
    data = {"rows": rows, "cpu_per_append": cpu, **meta}
    (out / "concurrency.json").write_text(json.dumps(data, indent=1) + "\n")
    log(f"done in {meta['duration_s']:.0f}s: {out / 'CONCURRENCY.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
