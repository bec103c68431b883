"""A Citus cluster against plain Postgres, in one run: single appends, 1,000-event batches
and the 50-event-tail view, through the coordinator and straight to the workers
(``citus_direct=true``).

    python -m benchmarks citus [--smoke] [--citus-url URL] [--pg-url URL] [--before]

``--citus-url`` (``EVENTSTORE_BENCH_CITUS_URL``, default the ``eventstore_bench_citus``
database on a coordinator at 127.0.0.1:5441) must be a database whose workers are
registered in it (``../shared/citus/cluster.sh createdb eventstore_bench_citus``); the
store's tables in it are dropped and distributed again. ``--pg-url`` (plain Postgres;
default the ``eventstore_bench_citus_plain`` database on the coordinator's own server, so
that both have the same settings and disk) is dropped and recreated. Each store gets the same
sessions; the measures take turns between them, so load on the machine falls on both
alike. ``--before`` drops the routed append's function after
distributing: appends then take the statements written for plain tables (the numbers
before routed appends). Prints Markdown: medians and p99 in ms, and the ratios.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from eventstore import EventStore
from eventstore._append.postgres import ROUTED_FUNCTION
from eventstore._citus_direct import OPTION
from eventstore.distribution import distribute_citus
from eventstore.schema import NATIVE_SEARCH_TABLES, metadata

from .harness import median, percentile
from .workload import condensation, steps, to_message

DEFAULT_CITUS = "postgresql+psycopg://postgres@127.0.0.1:5441/eventstore_bench_citus"
#: The goals: each Citus median at most this many times plain Postgres's.
GOALS = {"append 1 event": 2.0, "append 1,000 events": 1.5, "view, 50-event tail": 1.5}
#: Every table a store may have on Postgres: the schema's, the native search index's and
#: Alembic's.
STORE_TABLES = (*metadata.tables, NATIVE_SEARCH_TABLES["postgresql"], "alembic_version")


def drop_store(url: str) -> None:
    """Drop the store's tables and functions in ``url`` (Citus passes DROP to workers)."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            # Every table first, so that no trigger still needs the guards' functions.
            conn.execute(text(f"DROP TABLE IF EXISTS {', '.join(STORE_TABLES)} CASCADE"))
            names = conn.execute(
                text(
                    "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n "
                    "ON n.oid = p.pronamespace WHERE n.nspname = current_schema() "
                    "AND p.proname LIKE 'eventstore%'"
                )
            ).scalars()
            for name in list(names):
                conn.execute(text(f"DROP FUNCTION IF EXISTS {name} CASCADE"))
    finally:
        engine.dispose()


def _fresh_plain(url: str) -> None:
    u = make_url(url)
    if "bench" not in (u.database or ""):
        raise SystemExit(f"refusing to recreate {u.database!r}: its name must contain 'bench'")
    admin = create_engine(
        u.set(database="postgres").render_as_string(False), isolation_level="AUTOCOMMIT"
    )
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{u.database}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{u.database}"'))
    finally:
        admin.dispose()


class _Side:
    """One backend's store and the sessions it measures on."""

    def __init__(self, name: str, url: str, sessions: int, events: int) -> None:
        self.name = name
        self.store = EventStore(url, tenant="bench")
        self.sids: list[str] = []
        self.tail_sids: list[str] = []
        msgs = [to_message(s) for s in steps(1, events)]
        for _ in range(sessions):
            sid = self.store.create_session().id
            self.store.append(sid, msgs)
            self.store.append(sid, [condensation(events, 50)])
            self.sids.append(sid)
        self.batch_sid = self.store.create_session().id
        self.store.append(self.batch_sid, msgs[:1])
        self.times: dict[str, list[float]] = {k: [] for k in GOALS}
        self._i = 0

    def next_sid(self) -> str:
        self._i += 1
        return self.sids[self._i % len(self.sids)]


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def run(citus_url: str, pg_url: str, *, smoke: bool, before: bool) -> str:
    sessions, events = (4, 120) if smoke else (20, 500)
    ops, batches = (20, 3) if smoke else (300, 10)
    drop_store(citus_url)
    EventStore(citus_url, upgrade=True).close()
    distribute_citus(create_engine(citus_url))
    if before:
        _drop_store_function(citus_url)
    _fresh_plain(pg_url)
    EventStore(pg_url, upgrade=True).close()
    sides = [
        _Side("postgres", pg_url, sessions, events),
        _Side("citus", citus_url, sessions, events),
        _Side("citus direct", _direct(citus_url), sessions, events),
    ]
    one = [to_message(s) for s in steps(events + 2, events + 2)]
    thousand = [to_message(s) for s in steps(1, 1_000)]
    for side in sides:  # the heads are remembered from here on: the guarded path
        for sid in side.sids:
            side.store.append(sid, one)
    for rep in range(-20, ops):  # negative reps warm up
        for side in sides:
            st, sid, other = side.store, side.next_sid(), side.next_sid()
            took = _timed(lambda st=st, sid=sid: st.append(sid, one))  # type: ignore[misc]
            view = _timed(lambda st=st, o=other: st.view(o).to_messages())  # type: ignore[misc]
            if rep >= 0:
                side.times["append 1 event"].append(took)
                side.times["view, 50-event tail"].append(view)
    for rep in range(-2, batches):
        for side in sides:
            st, sid = side.store, side.batch_sid
            took = _timed(lambda st=st, sid=sid: st.append(sid, thousand))  # type: ignore[misc]
            if rep >= 0:
                side.times["append 1,000 events"].append(took)
    lines = [
        f"Sessions: {sessions} per store, {events} events each and a condensation keeping "
        f"50; {ops} single appends and views, {batches} batches of 1,000 per store"
        + (" (before routed appends: the function dropped)" if before else "")
        + ". Citus direct: the same cluster with `citus_direct=true` (routed calls sent "
        "to the session's worker). Times in ms, p50 (p99); ratios of the p50 to Postgres's.",
        "",
        "| measure | Postgres | Citus | ratio | Citus direct | ratio | goal |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    pg, ci, di = sides
    for measure, goal in GOALS.items():
        a, b, c = pg.times[measure], ci.times[measure], di.times[measure]
        cells = [f"{median(t):.2f} ({percentile(t, 0.99):.2f})" for t in (a, b, c)]
        lines.append(
            f"| {measure} | {cells[0]} | {cells[1]} | {median(b) / median(a):.2f}x | "
            f"{cells[2]} | {median(c) / median(a):.2f}x | <= {goal}x |"
        )
    for side in sides:
        side.store.close()
    return "\n".join(lines)


def _direct(url: str) -> str:
    """``url`` with the store's ``citus_direct`` option on."""
    return make_url(url).update_query_dict({OPTION: "true"}).render_as_string(False)


def _drop_store_function(url: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for name in list(
                conn.execute(
                    text(
                        "SELECT oid::regprocedure::text FROM pg_proc "
                        f"WHERE proname = '{ROUTED_FUNCTION}'"
                    )
                ).scalars()
            ):
                conn.execute(text(f"DROP FUNCTION {name}"))
    finally:
        engine.dispose()


def args_citus_url(argv: list[str] | None) -> str:
    """The ``--citus-url`` given, or its default (the plain database's default follows it)."""
    args = list(argv or [])
    for i, a in enumerate(args):
        if a == "--citus-url" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--citus-url="):
            return a.split("=", 1)[1]
    return os.environ.get("EVENTSTORE_BENCH_CITUS_URL", DEFAULT_CITUS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks citus", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="tiny sizes (tests the harness)")
    p.add_argument(
        "--citus-url", default=os.environ.get("EVENTSTORE_BENCH_CITUS_URL", DEFAULT_CITUS)
    )
    # Plain Postgres on the coordinator's own server: the same settings, the same disk.
    plain = make_url(args_citus_url(argv)).set(database="eventstore_bench_citus_plain")
    p.add_argument("--pg-url", default=plain.render_as_string(hide_password=False))
    p.add_argument("--before", action="store_true", help="without the routed append's function")
    args = p.parse_args(argv)
    print(run(args.citus_url, args.pg_url, smoke=args.smoke, before=args.before))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
