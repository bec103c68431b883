"""``python -m benchmarks adk``: ADK ``get_session`` on a short and a long session.

Measures ``get_session(num_recent_events=10)`` (what a runner asks for each turn when it
keeps a bounded context) on a session of 1,000 events and one of 100,000 (``--smoke``:
200 and 2,000), for :class:`~eventstore.adapters.adk.EventStoreSessionService` on SQLite
(and Postgres unless ``--no-postgres``) and for ADK's own ``DatabaseSessionService`` on
SQLite. The sessions are filled in bulk (the same ADK events for both services) and only
the reads are timed. Needs the ``adk`` extra; writes ``ADK.md`` and ``adk.json``.
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
from pathlib import Path
from typing import Any

from .harness import load_average, log, machine_info

HERE = Path(__file__).resolve().parent
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_bench_adk"


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks adk", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="200 and 2,000 events")
    p.add_argument("--repeat", type=int, default=None, help="timed reads per size")
    p.add_argument("--out", type=Path)
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("EVENTSTORE_BENCH_ADK_PG_URL", DEFAULT_PG_URL),
        help="Postgres URL; the database is dropped and recreated (its name must contain 'bench')",
    )
    return p.parse_args(argv)


def _events(n: int) -> list[Any]:
    from google.adk.events.event import Event
    from google.genai import types

    base = time.time() - n
    out = []
    for i in range(n):
        author, role = ("user", "user") if i % 2 == 0 else ("helper", "model")
        text = f"turn {i}: " + "lorem ipsum dolor sit amet " * 8
        out.append(
            Event(
                invocation_id=f"inv-{i // 2}",
                author=author,
                content=types.Content(role=role, parts=[types.Part(text=text)]),
                timestamp=base + i,
            )
        )
    return out


async def _fill_ours(service: Any, sid: str, events: list[Any]) -> None:
    from eventstore.adapters.adk import stored_event

    sync = service.store.sync
    key = json.dumps(["adk", "bench", sid], separators=(",", ":"))
    real = sync.get_session_by_key(key, user_id="u")
    for i in range(0, len(events), 1_000):
        batch = [stored_event(e, {}) for e in events[i : i + 1_000]]
        await asyncio.to_thread(sync.append, real.id, batch)


async def _fill_adk(service: Any, session: Any, events: list[Any]) -> None:
    schema = service._get_schema_classes()
    for i in range(0, len(events), 1_000):
        async with service.database_session_factory() as db:
            rows = [schema.StorageEvent.from_event(session, e) for e in events[i : i + 1_000]]
            db.add_all(rows)
            await db.commit()


async def _time_reads(service: Any, sid: str, repeat: int) -> dict[str, float]:
    from google.adk.sessions.base_session_service import GetSessionConfig

    cfg = GetSessionConfig(num_recent_events=10)
    got = await service.get_session(app_name="bench", user_id="u", session_id=sid, config=cfg)
    assert got is not None and len(got.events) == 10
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        await service.get_session(app_name="bench", user_id="u", session_id=sid, config=cfg)
        runs.append((time.perf_counter() - t) * 1000)
    return {"median_ms": statistics.median(runs), "min_ms": min(runs)}


async def _measure(name: str, make: Any, sizes: list[int], repeat: int) -> dict[str, Any]:
    service, kind = await make()
    row: dict[str, Any] = {"service": name, "sizes": {}}
    try:
        for n in sizes:
            sid = f"s{n}"
            session = await service.create_session(app_name="bench", user_id="u", session_id=sid)
            log(f"{name}: filling {n:,} events")
            events = _events(n)
            if kind == "ours":
                await _fill_ours(service, sid, events)
            else:
                await _fill_adk(service, session, events)
            log(f"{name}: reading the last 10 of {n:,}")
            row["sizes"][str(n)] = await _time_reads(service, sid, repeat)
    finally:
        await service.close()
    small, large = (row["sizes"][str(n)]["median_ms"] for n in sizes)
    row["growth"] = large / small if small else float("nan")
    return row


def _fresh_pg(url: str) -> str:
    import psycopg
    from sqlalchemy.engine import make_url

    from .raw import pg_conninfo

    u = make_url(url).set(drivername="postgresql+psycopg")
    name = u.database or ""
    if "bench" not in name:
        raise SystemExit(f"refusing to drop database {name!r}: its name must contain 'bench'")
    admin = pg_conninfo(u.set(database="postgres").render_as_string(hide_password=False))
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return u.render_as_string(hide_password=False)


def render(data: dict[str, Any]) -> str:
    sizes = data["sizes"]
    head = " | ".join(f"{n:,} events (ms)" for n in sizes)
    lines = [
        "# ADK get_session benchmark",
        "",
        f"Generated by `python -m benchmarks adk{' --smoke' if data['smoke'] else ''}` on "
        f"{data['machine']['platform']} ({data['machine']['cpu_count']} CPUs), load "
        f"{data['load']}. `get_session(num_recent_events=10)`, median of {data['repeat']} reads "
        "after one warm-up; growth is the long session's time over the short one's (1.0: "
        "flat).",
        "",
        f"| service | {head} | growth |",
        "|---|" + "---:|" * (len(sizes) + 1),
    ]
    for r in data["rows"]:
        cells = " | ".join(f"{r['sizes'][str(n)]['median_ms']:.2f}" for n in sizes)
        lines.append(f"| {r['service']} | {cells} | {r['growth']:.2f}x |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    try:
        from google.adk.sessions.database_session_service import DatabaseSessionService
    except ImportError:
        print("needs the adk extra: pip install 'agent-eventstore[adk]'", file=sys.stderr)
        return 2
    from eventstore import AsyncEventStore
    from eventstore.adapters.adk import EventStoreSessionService

    sizes = [200, 2_000] if args.smoke else [1_000, 100_000]
    repeat = args.repeat or (5 if args.smoke else 30)
    out = args.out or (HERE / "smoke-results" if args.smoke else HERE)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        machine = machine_info(Path(tmp), None)

        async def ours_sqlite() -> Any:
            store = AsyncEventStore(f"sqlite:///{Path(tmp) / 'ours.db'}")
            return EventStoreSessionService(store=store), "ours"

        async def adk_sqlite() -> Any:
            return DatabaseSessionService(f"sqlite+aiosqlite:///{Path(tmp) / 'adk.db'}"), "adk"

        rows.append(asyncio.run(_measure("eventstore (SQLite)", ours_sqlite, sizes, repeat)))
        adk_name = "ADK DatabaseSessionService (SQLite)"
        rows.append(asyncio.run(_measure(adk_name, adk_sqlite, sizes, repeat)))
        if not args.no_postgres:
            url = _fresh_pg(args.pg_url)

            async def ours_pg() -> Any:
                store = AsyncEventStore(url, upgrade=True)
                return EventStoreSessionService(store=store), "ours"

            rows.append(asyncio.run(_measure("eventstore (Postgres)", ours_pg, sizes, repeat)))
    data = {
        "smoke": args.smoke,
        "sizes": sizes,
        "repeat": repeat,
        "machine": machine,
        "load": load_average(),
        "rows": rows,
    }
    (out / "adk.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "ADK.md").write_text(render(data))
    print(render(data))
    return 0
