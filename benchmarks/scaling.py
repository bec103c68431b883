"""Scaling measures: the session-partitioned schema against the plain one, and replica reads.

    python -m benchmarks.scaling [--sessions 400] [--events 50] [--ops 400] [--partitions 8]
    python -m benchmarks.scaling --citus URL [--sessions 400] [--events 50] [--ops 400]

Part 1 runs on the machine's Postgres (``EVENTSTORE_BENCH_PG_URL``, default a database
named ``eventstore_bench_scaling`` on 127.0.0.1): it fills a plain database and a copy
partitioned by ``eventstore db distribute --partition N`` with the same sessions, then
times single-event appends (fast path) and views on random sessions. Part 2 starts a
throwaway primary with a streaming replica (``benchmarks.replica_cluster``) and times a
view on the primary, on the replica when it is already caught up, and on the replica
right after the same store's append (the read-your-writes wait). With ``--citus`` it
runs only the fill, appends and views of part 1, on a Citus coordinator's database,
distributed by session. Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import create_engine

from eventstore import EventStore, Message, ToolCallPart
from eventstore.distribution import distribute_citus, partition_by_session

from .harness import median, percentile
from .raw import fresh_pg_database
from .replica_cluster import ReplicaCluster, find_bin_dir

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_bench_scaling"


def _fill(store: EventStore, sessions: int, events: int) -> list[str]:
    ids = []
    for i in range(sessions):
        s = store.create_session()
        batch: list[Any] = []
        for n in range(events // 3):
            call = ToolCallPart(id=f"c{n}", name="sh", arguments='{"cmd": "ls"}')
            batch += [
                Message.user(f"step {n} of session {i}"),
                Message.assistant(tool_calls=[call]),
                Message.tool(f"c{n}", "file.txt\n" * 20),
            ]
        store.append(s.id, batch)
        ids.append(s.id)
    return ids


def _lat(fn: Callable[[], Any], ops: int) -> list[float]:
    out = []
    for _ in range(ops):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _row(name: str, ms: list[float]) -> str:
    return (
        f"| {name} | {median(ms):.3f} | {percentile(ms, 0.95):.3f} | {percentile(ms, 0.99):.3f} |"
    )


def partitioned_vs_plain(url: str, sessions: int, events: int, ops: int, parts: int) -> list[str]:
    """Both databases are filled first, then measured in alternating rounds, so drift on a
    busy machine (caches, autovacuum, other load) falls on both alike."""
    labels = ("plain", f"hash-partitioned ({parts})")
    dbs: dict[str, tuple[str, list[str]]] = {}
    for n, label in enumerate(labels):
        db = fresh_pg_database(url.replace("bench_scaling", f"bench_scaling_{n}"))
        with EventStore(db, upgrade=True) as store:
            ids = _fill(store, sessions, events)
            for sid in ids:  # warm the head cache so appends take the fast path
                store.append(sid, [Message.user("warm")])
        if n:
            engine = create_engine(db)
            partition_by_session(engine, parts)
            engine.dispose()
        dbs[label] = (db, ids)
    results: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in labels}
    stores = {label: EventStore(db) for label, (db, _) in dbs.items()}
    try:
        rounds = 5
        for r in range(rounds):
            for label in labels if r % 2 == 0 else reversed(labels):
                appends, views = _append_and_view(stores[label], dbs[label][1], ops // rounds)
                results[label][0].extend(appends)
                results[label][1].extend(views)
    finally:
        for store in stores.values():
            store.close()
    rows = []
    for label in labels:
        appends, views = results[label]
        rows += [_row(f"{label}: append 1 event", appends), _row(f"{label}: view", views)]
    return rows


def _append_and_view(
    store: EventStore, ids: list[str], ops: int
) -> tuple[list[float], list[float]]:
    rng = random.Random(len(ids) + ops)
    appends = _lat(lambda: store.append(rng.choice(ids), [Message.user("hello")]), ops)
    views = _lat(lambda: store.view(rng.choice(ids)), ops)
    return appends, views


def replica_reads(ops: int) -> list[str]:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        return ["| replica | no Postgres server binaries here | | |"]
    cluster = ReplicaCluster(bin_dir).start()
    try:
        with EventStore(cluster.primary_url, upgrade=True) as plain:
            ids = _fill(plain, 50, 30)
            primary_views = _lat(lambda: plain.view(random.choice(ids)), ops)
        with EventStore(cluster.primary_url, read_url=cluster.replica_url) as store:
            caught_up = _lat(lambda: store.view(random.choice(ids)), ops)
            after_write = []
            for _ in range(ops):
                sid = random.choice(ids)
                store.append(sid, [Message.user("x")])
                t0 = time.perf_counter()
                store.view(sid)
                after_write.append((time.perf_counter() - t0) * 1000)
            routed = store.read_routing
        return [
            _row("view on the primary (throwaway cluster)", primary_views),
            _row("view on the replica, caught up", caught_up),
            _row("view on the replica right after own append (RYW wait)", after_write),
            f"| reads routed | replica {routed['replica']}, primary {routed['primary']} | | |",
        ]
    finally:
        cluster.stop()


def on_citus(url: str, sessions: int, events: int, ops: int) -> list[str]:
    """The same fill and measures on a Citus coordinator: ``url`` names an empty database
    with the ``citus`` extension created and its workers added, which this upgrades and
    distributes as ``eventstore db distribute`` does."""
    EventStore(url, upgrade=True).close()
    engine = create_engine(url)
    try:
        distribute_citus(engine)
        with engine.connect() as conn:
            workers = conn.exec_driver_sql(
                "SELECT count(*) FROM citus_get_active_worker_nodes()"
            ).scalar()
    finally:
        engine.dispose()
    with EventStore(url) as store:
        ids = _fill(store, sessions, events)
        for sid in ids:
            store.append(sid, [Message.user("warm")])
        appends, views = _append_and_view(store, ids, ops)
    label = f"citus ({workers} worker{'s' if workers != 1 else ''})"
    return [_row(f"{label}: append 1 event", appends), _row(f"{label}: view", views)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=400)
    ap.add_argument("--events", type=int, default=48)
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument(
        "--citus",
        metavar="URL",
        help="measure on this Citus coordinator database instead (empty, with the citus "
        "extension created and its workers added; it is upgraded and distributed)",
    )
    args = ap.parse_args()
    url = os.environ.get("EVENTSTORE_BENCH_PG_URL", DEFAULT_URL)
    print("| measure | p50 ms | p95 ms | p99 ms |")
    print("|---|---|---|---|")
    if args.citus:
        for line in on_citus(args.citus, args.sessions, args.events, args.ops):
            print(line, flush=True)
        return
    for line in partitioned_vs_plain(url, args.sessions, args.events, args.ops, args.partitions):
        print(line, flush=True)
    for line in replica_reads(args.ops):
        print(line, flush=True)


if __name__ == "__main__":
    main()
