"""``python -m benchmarks mcp``: the MCP server's tools at 100k events, through the SDK.

Builds a tenant of N workload events (default 100,000; ``--smoke``: 5,000) spread over
``--sessions`` sessions (default 10), plants one phrase in a single tool output of one
session and prunes that output, adds one 5 MB tool output, indexes, then times each tool
called through the official ``mcp`` client connected to :func:`create_server` in process
(JSON-RPC framing, argument validation and result conversion included; no transport):

* ``search_history`` for the planted phrase across every session (the target: < 50 ms),
  the same scoped to its session, and a common word (a full page of 10 hits, each given
  the ``ref`` of its matching part);
* ``recall`` of the planted output, and of the first page of the 5 MB output;
* ``list_sessions``; ``get_event``; ``get_view`` of a session's head.

``store.search`` alone is timed next to the first query, so the protocol's share shows.
Writes ``MCP.md`` and ``mcp.json`` (into ``benchmarks/`` for the full run,
``benchmarks/smoke-results/`` for ``--smoke`` unless ``--out`` says otherwise). Needs the
``mcp`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from eventstore import EventStore, Message, PartRef, Prune, ToolResultPart

from .harness import load_average, log, machine_info, package_versions
from .raw import fresh_pg_database
from .workload import step, to_message

HERE = Path(__file__).resolve().parent
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_bench_mcp"
PHRASE = "quartermaster ledger overflow in settlement batch"
TARGET_MS = 50.0
BIG_CHARS = 5 * 1024 * 1024


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks mcp", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="5,000 events, few repetitions")
    p.add_argument("--events", type=int, default=None, help="events in all (default 100000)")
    p.add_argument("--sessions", type=int, default=10, help="sessions they are spread over")
    p.add_argument("--repeat", type=int, default=None, help="timed runs per call")
    p.add_argument("--out", type=Path)
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("EVENTSTORE_BENCH_MCP_PG_URL", DEFAULT_PG_URL),
        help="Postgres URL; the database is dropped and recreated (its name must contain 'bench')",
    )
    args = p.parse_args(argv)
    if args.events is not None and args.events < 100:
        p.error("--events: use at least 100")
    if not 1 <= args.sessions <= 1_000:
        p.error("--sessions: use 1 to 1000")
    return args


def _build(store: EventStore, n: int, sessions: int) -> tuple[list[str], str, int]:
    """The session ids, and the session and seq of the planted, pruned output."""
    per = max(n // sessions, 10)
    planted = (per // 2) - (per // 2) % 5  # a tool result in the workload's cycle
    ids: list[str] = []
    for i in range(sessions):
        s = store.create_session(title=f"mcp benchmark {i}", key=f"bench-{i}")
        ids.append(s.id)
        for first in range(1, per + 1, 1_000):
            msgs: list[Message] = []
            for seq in range(first, min(first + 1_000, per + 1)):
                msg = to_message(step(seq))
                if i == sessions // 2 and seq == planted:
                    part = msg.parts[0]
                    assert isinstance(part, ToolResultPart)
                    msg = Message(
                        role="tool",
                        parts=[part.model_copy(update={"output": f"{part.output}\n{PHRASE}\n"})],
                    )
                msgs.append(msg)
            store.append(s.id, msgs)
    target = ids[sessions // 2]
    store.append(target, [Prune(targets=[PartRef(seq=planted, index=0)], strategy="benchmark")])
    return ids, target, planted


async def _time(fn: Callable[[], Awaitable[Any]], repeat: int) -> dict[str, float]:
    await fn()  # warm the caches and the statement cache
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        await fn()
        runs.append((time.perf_counter() - t) * 1000)
    runs.sort()
    return {
        "median_ms": statistics.median(runs),
        "p95_ms": runs[min(len(runs) - 1, int(len(runs) * 0.95))],
    }


async def _measure_calls(
    store: EventStore, ids: list[str], target: str, planted: int, big_seq: int, repeat: int
) -> tuple[list[dict[str, Any]], bool]:
    from mcp import Client

    from eventstore.cli.mcp_server import create_server

    async def direct() -> Any:
        return await asyncio.to_thread(store.search, f'"{PHRASE}"', limit=11)

    async with (
        Client(create_server(store)) as client,
        Client(create_server(store, answers_kept=0)) as fresh,
    ):

        def tool(
            name: str, args: dict[str, Any], kept: bool = True
        ) -> Callable[[], Awaitable[Any]]:
            async def call() -> Any:
                result = await (client if kept else fresh).call_tool(name, args)
                if result.is_error:
                    raise RuntimeError(f"{name}: {result.content[0].text}")
                return result

            return call

        found = json.loads(
            (await tool("search_history", {"query": f'"{PHRASE}"'})()).content[0].text
        )
        hits = [(h["session_id"], h["seq"], h["ref"]) for h in found["hits"]]
        ok = hits == [(target, planted, f"{planted}:0")]
        recalled = await tool("recall", {"session_id": target, "ref": f"{planted}:0"})()
        ok = ok and PHRASE in recalled.content[0].text
        common = step(2).text.split()[0]
        calls = {
            "store.search, rare phrase (no MCP)": direct,
            "search_history, rare phrase, every session": tool(
                "search_history", {"query": f'"{PHRASE}"'}
            ),
            "search_history, rare phrase, one session": tool(
                "search_history", {"query": f'"{PHRASE}"', "session_id": target}
            ),
            f"search_history, common word ({common!r}, 10 hits)": tool(
                "search_history", {"query": common}
            ),
            "recall, the pruned output": tool(
                "recall", {"session_id": target, "ref": f"{planted}:0"}, kept=False
            ),
            "recall, first page of a 5 MB output": tool(
                "recall", {"session_id": target, "ref": f"{big_seq}:0"}, kept=False
            ),
            "recall, a next page of a 5 MB output": tool(
                "recall", {"session_id": target, "ref": f"{big_seq}:0", "offset": 40_000}
            ),
            "list_sessions": tool("list_sessions", {}),
            "get_event": tool("get_event", {"session_id": target, "seq": planted}, kept=False),
            f"get_view, head of a {store.head(ids[0]):,}-event session": tool(
                "get_view", {"session_id": ids[0]}, kept=False
            ),
            "get_view, a next page": tool("get_view", {"session_id": ids[0], "offset": 40_000}),
        }
        rows = []
        for label, fn in calls.items():
            log(f"  {label}")
            rows.append({"call": label, **(await _time(fn, repeat))})
    return rows, ok


def measure(backend: str, url: str, n: int, sessions: int, repeat: int) -> dict[str, Any]:
    with EventStore(url, upgrade=True) as store:
        log(f"{backend}: appending {n:,} events over {sessions} sessions")
        started = time.perf_counter()
        ids, target, planted = _build(store, n, sessions)
        big = "".join(f"build step {i:07d}: ok\n" for i in range(BIG_CHARS // 23 + 1))[:BIG_CHARS]
        (big_seq,) = store.append(target, [Message.tool("big", big, name="build")])
        append_s = time.perf_counter() - started
        log(f"{backend}: indexing")
        t = time.perf_counter()
        indexed = store.index_search()
        index_s = time.perf_counter() - t
        log(f"{backend}: calling the tools")
        rows, ok = asyncio.run(_measure_calls(store, ids, target, planted, big_seq, repeat))
    return {
        "backend": backend,
        "events": indexed,
        "sessions": sessions,
        "append_s": append_s,
        "index_s": index_s,
        "found_and_recalled": ok,
        "calls": rows,
    }


def render(data: dict[str, Any]) -> str:
    lines = [
        "# MCP server benchmark",
        "",
        f"Generated by `python -m benchmarks mcp{' --smoke' if data['smoke'] else ''}` on "
        f"{data['machine']['platform']} ({data['machine']['cpu_count']} CPUs), load "
        f"{data['load']}, mcp {data['packages'].get('mcp', '?')}. Each tool is called "
        "through the SDK's client connected to the server in process. Target: "
        f"`search_history` for a phrase from a pruned tool output, across every session of a "
        f"100k-event tenant, in under {TARGET_MS:.0f} ms.",
        "",
        "| backend | events | sessions | pruned phrase found and recalled | call | median ms "
        "| p95 ms |",
        "|---|---:|---:|---|---|---:|---:|",
    ]
    for r in data["results"]:
        for c in r["calls"]:
            lines.append(
                f"| {r['backend']} | {r['events']:,} | {r['sessions']} | "
                f"{'yes' if r['found_and_recalled'] else '**no**'} | {c['call']} | "
                f"{c['median_ms']:.2f} | {c['p95_ms']:.2f} |"
            )
    lines += [
        "",
        "Search times include the catch-up check every search makes; a search hit's `ref` "
        "costs one event read per hit. A common word ranks every event holding it, so its "
        "time grows with the number of matches (see `SEARCH.md`). A first page makes the whole "
        "answer (`get_view` also looks through the session for the model whose budget it "
        "shows, as `eventstore view` does); the server keeps the newest few answers, so a "
        "next page is a slice of one already made.",
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
        url = f"sqlite:///{Path(tmp) / 'mcp.db'}"
        results.append(measure("sqlite", url, n, args.sessions, repeat))
    if not args.no_postgres:
        pg = fresh_pg_database(args.pg_url)
        results.append(measure("postgres", pg, n, args.sessions, repeat))
    from importlib.metadata import version

    packages = {**package_versions(), "mcp": version("mcp")}
    data = {
        "smoke": args.smoke,
        "machine": machine,
        "load": load_average(),
        "packages": packages,
        "results": results,
    }
    (out / "mcp.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "MCP.md").write_text(render(data))
    print(render(data))
    ok = all(r["found_and_recalled"] for r in results)
    if not ok:
        print("the planted phrase was not found and recalled through MCP", file=sys.stderr)
    return 0 if ok else 1
