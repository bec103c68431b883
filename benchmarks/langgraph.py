"""``python -m benchmarks langgraph``: LangGraph checkpoint storage and ``get_tuple`` latency.

A graph whose state is a growing message list (LangGraph's ``add_messages``) runs 200 and
2,000 steps (``--smoke``: 20 and 100); each step adds one assistant message of about 200
characters, so the state at step *n* holds *n* messages and a saver that writes the whole
state per checkpoint grows quadratically. The same run is checkpointed by
:class:`~eventstore.adapters.langgraph.EventStoreSaver` and by LangGraph's own
``SqliteSaver`` (langgraph-checkpoint-sqlite) and ``PostgresSaver``
(langgraph-checkpoint-postgres), each on a database of its own.

Measured per saver and size: the bytes the database holds afterwards (SQLite: the file
after a WAL checkpoint; Postgres: ``pg_total_relation_size`` of every table in the
database, indexes and TOAST included), the time of the run, and the median ``get_tuple``
latency of the newest checkpoint and of the one half-way, each read by a new saver on the
open connection (nothing cached in the saver) and again by the saver that wrote them.

Needs the ``langgraph`` extra; writes ``LANGGRAPH.md`` and ``langgraph.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from .harness import load_average, log
from .raw import fresh_pg_database

HERE = Path(__file__).resolve().parent
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_bench_langgraph"
#: Words the messages are drawn from (seeded, so every saver stores the same text): prose
#: of about the entropy of real replies, not a repeated phrase that compression erases.
WORDS = (
    "the a of to and in is that for it as with was on be by this are from at or an "
    "which not have has but they their all can were one more will would there been if "
    "graph state message model tool call result value step thread checkpoint store agent "
    "reply question answer context window token summary history error retry output input "
    "user assistant system search file query table index write read list node edge run"
).split()


def _text(n: int) -> str:
    import random

    rng = random.Random(n)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < 200:
        words.append(rng.choice(WORDS))
    return " ".join(words)


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks langgraph", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="20 and 100 steps")
    p.add_argument("--steps", type=int, nargs="*", help="step counts (default 200 2000)")
    p.add_argument("--repeat", type=int, default=10, help="timed get_tuple reads per case")
    p.add_argument("--out", type=Path)
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("EVENTSTORE_BENCH_PG_URL", DEFAULT_PG_URL),
        help="Postgres URL; databases named after it (suffixed _ref for LangGraph's saver) "
        "are dropped and recreated (the name must contain 'bench')",
    )
    return p.parse_args(argv)


class State(TypedDict):
    """The benchmark graph's state: a message list that grows by one per step."""

    messages: Annotated[list[Any], add_messages]


def _graph(steps: int, saver: Any) -> tuple[Any, Callable[[str], None]]:
    def step(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"step {n}: {_text(n)}", id=f"m-{n}")]}

    def more(state: State) -> str:
        return "step" if len(state["messages"]) <= steps else END

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", more)
    graph = builder.compile(checkpointer=saver)

    def run(thread: str) -> None:
        config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
        graph.invoke({"messages": [HumanMessage(content="go", id="m-0")]}, config)

    return graph, run


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up (imports, statement caches)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 3)


def _recording(saver: Any) -> list[Any]:
    """The configs of the checkpoints ``saver`` stores from now on, in order (recorded as
    ``put`` returns them: finding one later needs no read of the history)."""
    stored: list[Any] = []
    put = saver.put

    def recording_put(*args: Any, **kwargs: Any) -> Any:
        config = put(*args, **kwargs)
        stored.append(config)
        return config

    saver.put = recording_put
    return stored


def _latencies(
    writer: Any, fresh: Callable[[], Any], stored: list[Any], repeat: int
) -> dict[str, float]:
    thread = stored[-1]["configurable"]["thread_id"]
    base: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    middle = stored[len(stored) // 2]
    out: dict[str, float] = {}
    for name, config in (("newest", base), ("middle", middle)):
        tup = writer.get_tuple(config)
        assert tup is not None and tup.checkpoint["channel_values"]["messages"]
        out[f"get_tuple_{name}_cold_ms"] = _median_ms(lambda c=config: fresh().get_tuple(c), repeat)
        out[f"get_tuple_{name}_warm_ms"] = _median_ms(lambda c=config: writer.get_tuple(c), repeat)
    out["checkpoints"] = len(stored)
    return out


def _sqlite_bytes(path: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def _pg_bytes(url: str) -> int:
    import psycopg

    from .raw import pg_conninfo

    with psycopg.connect(**pg_conninfo(url)) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchone()
    return int(row[0]) if row else 0


def _eventstore_case(url: str, steps: int, repeat: int, backend: str) -> dict[str, Any]:
    from eventstore import EventStore
    from eventstore.adapters.langgraph import EventStoreSaver

    store = EventStore(url, upgrade=True)
    try:
        saver = EventStoreSaver(store=store)
        stored = _recording(saver)
        _, run = _graph(steps, saver)
        t0 = time.perf_counter()
        run("bench")
        elapsed = time.perf_counter() - t0
        lat = _latencies(saver, lambda: EventStoreSaver(store=store), stored, repeat)
    finally:
        store.close()
    return {"run_s": round(elapsed, 2), **lat}


def _sqlite_ref_case(path: Path, steps: int, repeat: int) -> dict[str, Any]:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        stored = _recording(saver)
        _, run = _graph(steps, saver)
        t0 = time.perf_counter()
        run("bench")
        elapsed = time.perf_counter() - t0
        lat = _latencies(saver, lambda: SqliteSaver(conn), stored, repeat)
    finally:
        conn.close()
    return {"run_s": round(elapsed, 2), **lat}


def _pg_ref_case(url: str, steps: int, repeat: int) -> dict[str, Any]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    from .raw import pg_conninfo

    with psycopg.connect(**pg_conninfo(url), autocommit=True, row_factory=dict_row) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        stored = _recording(saver)
        _, run = _graph(steps, saver)
        t0 = time.perf_counter()
        run("bench")
        elapsed = time.perf_counter() - t0
        lat = _latencies(saver, lambda: PostgresSaver(conn), stored, repeat)
    return {"run_s": round(elapsed, 2), **lat}


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv or [])
    sizes = args.steps or ([20, 100] if args.smoke else [200, 2000])
    out_dir = args.out or HERE
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-langgraph-") as tmp:
        work = Path(tmp)
        for steps in sizes:
            cases: list[tuple[str, str, Callable[[], dict[str, Any]], Callable[[], int]]] = []
            es_path = work / f"es-{steps}.db"
            ref_path = work / f"ref-{steps}.db"
            cases.append(
                (
                    "EventStoreSaver",
                    "sqlite",
                    lambda s=steps, p=es_path: _eventstore_case(
                        f"sqlite:///{p}", s, args.repeat, "sqlite"
                    ),
                    lambda p=es_path: _sqlite_bytes(p),
                )
            )
            cases.append(
                (
                    "SqliteSaver",
                    "sqlite",
                    lambda s=steps, p=ref_path: _sqlite_ref_case(p, s, args.repeat),
                    lambda p=ref_path: _sqlite_bytes(p),
                )
            )
            if not args.no_postgres:
                es_url = fresh_pg_database(args.pg_url)
                ref_url = fresh_pg_database(_suffixed(args.pg_url, "_ref"))
                cases.append(
                    (
                        "EventStoreSaver",
                        "postgres",
                        lambda s=steps, u=es_url: _eventstore_case(u, s, args.repeat, "postgres"),
                        lambda u=es_url: _pg_bytes(u),
                    )
                )
                cases.append(
                    (
                        "PostgresSaver",
                        "postgres",
                        lambda s=steps, u=ref_url: _pg_ref_case(u, s, args.repeat),
                        lambda u=ref_url: _pg_bytes(u),
                    )
                )
            for saver, backend, measure, size in cases:
                log(f"langgraph: {saver} on {backend}, {steps} steps")
                row = {"saver": saver, "backend": backend, "steps": steps, **measure()}
                row["bytes"] = size()
                rows.append(row)
                log(f"  {row}")
    result = {"load_average": load_average(), "rows": rows}
    (out_dir / "langgraph.json").write_text(json.dumps(result, indent=2) + "\n")
    (out_dir / "LANGGRAPH.md").write_text(_report(result))
    return 0


def _suffixed(url: str, suffix: str) -> str:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return u.set(database=f"{u.database}{suffix}").render_as_string(hide_password=False)


def _report(result: dict[str, Any]) -> str:
    import platform

    rows = result["rows"]
    lines = [
        "# LangGraph checkpoint storage",
        "",
        "Generated by `python -m benchmarks langgraph` on "
        f"{platform.platform()} ({os.cpu_count()} CPUs), load {result['load_average']}. "
        "A graph whose state is a growing message list (`add_messages`, one assistant "
        "message of about 200 characters per step) runs N steps once per saver; *bytes* is "
        "what the database holds afterwards, *get_tuple* the median of "
        "the timed reads of the newest checkpoint and of the one half-way, by a new saver "
        "(cold: nothing cached) and by the saver that wrote them (warm). "
        "EventStoreSaver runs with its default `snapshot_every=50`.",
        "",
        "| steps | backend | saver | bytes | vs reference | run (s) | newest cold (ms) "
        "| newest warm (ms) | half-way cold (ms) | half-way warm (ms) |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    refs = {(r["steps"], r["backend"]): r for r in rows if r["saver"] != "EventStoreSaver"}
    for r in rows:
        ref = refs.get((r["steps"], r["backend"]))
        ratio = (
            f"{ref['bytes'] / r['bytes']:.1f}x less"
            if ref is not None and r["saver"] == "EventStoreSaver" and r["bytes"]
            else ""
        )
        lines.append(
            f"| {r['steps']:,} | {r['backend']} | {r['saver']} | {r['bytes']:,} | {ratio} "
            f"| {r['run_s']} | {r['get_tuple_newest_cold_ms']} | {r['get_tuple_newest_warm_ms']} "
            f"| {r['get_tuple_middle_cold_ms']} | {r['get_tuple_middle_warm_ms']} |"
        )
    lines += [
        "",
        "LangGraph's savers write every channel whose version changed as a whole blob per "
        "checkpoint, so a message list is written again at every step: storage grows with "
        "the square of the steps. EventStoreSaver writes the messages a step added and a "
        "full snapshot every 50 steps of a chain, so storage grows with the steps times "
        "the state size over 50; `get_tuple` decodes the nearest snapshot plus at most 49 "
        "deltas.",
        "",
    ]
    return "\n".join(lines)
