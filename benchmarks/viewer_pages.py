"""Render time of the audit viewer's pages on a 100k-event session.

Builds (once) a SQLite session of ``--events`` events shaped like a long agent run: tool
calls and results, a condensation every 1,000 events, a prune every 500 and an llm call
every 10; then times each route through Starlette's TestClient, cold (first request of a
fresh application) and warm (median of five).

    python -m benchmarks.viewer_pages [--events 100000] [--db /tmp/viewer-bench.db]

With ``--sessions N`` it times the sessions index instead, over a tenant of N sessions
(first page, a later page, a filter), on SQLite or on ``--url`` (Postgres).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def build(path: Path, n: int) -> str:
    from eventstore import Condensation, EventStore, Message, PartRef, Prune, ToolCallPart

    store = EventStore(f"sqlite:///{path}", upgrade=True, sqlite_synchronous="NORMAL")
    found = store.list_sessions(limit=1)
    if found and found[0].head_seq >= n:
        store.close()
        return found[0].id
    sid = store.create_session(title=f"{n:,}-event benchmark").id
    store.append(sid, [Message.system("You are an agent."), Message.user("Do the long task.")])
    seq, last_cond, batch = 2, 0, []
    while seq < n:
        seq += 1
        if seq % 1000 == 0:
            batch.append(
                Condensation(
                    forgotten_from=3,
                    forgotten_to=seq - 200,
                    summary=f"summary up to {seq}",
                    summary_tokens=200,
                    pinned=[1, 2],
                    forgotten_events=seq - 202,
                    condenser="extractive",
                    trigger="threshold",
                    supersedes=last_cond or None,
                )
            )
            last_cond = seq
        elif seq % 500 == 0:
            store.append(sid, batch)  # the prune's target must be stored first
            batch = [Prune(targets=[PartRef(seq=seq - 2, index=0)], tokens_freed=100)]
        elif seq % 10 == 0:
            batch.append(Message.user(f"note {seq}"))
        elif seq % 2 == 1:
            call = ToolCallPart(id=f"c{seq}", name="bash", arguments=f"cat file{seq}.py")
            batch.append(Message.assistant("reading", tool_calls=[call]))
        else:
            batch.append(Message.tool(f"c{seq - 1}", "line of output\n" * 20, name="bash"))
        if len(batch) >= 2000 or seq >= n:
            store.append(sid, batch)
            batch = []
    store.close()
    return sid


def session_routes(sid: str, head: int) -> list[str]:
    """Every page kind of one session: the timeline, its log pages (first, later, filtered
    by kind), one event, the view (head and earlier), the row and chart fragments, the
    verify page and the export."""
    return [
        f"/sessions/{sid}",
        f"/sessions/{sid}/events",
        f"/sessions/{sid}/events?after={max(0, head - 30)}",
        f"/sessions/{sid}/events?kind=condensation",
        f"/sessions/{sid}/events/{max(1, head // 2)}",
        f"/sessions/{sid}/view",
        f"/sessions/{sid}/view?at={max(1, head // 2)}",
        f"/sessions/{sid}/row",
        f"/sessions/{sid}/chart",
        f"/sessions/{sid}/verify",
        f"/sessions/{sid}/export.jsonl",
    ]


def index_routes(after: str, user: str) -> list[str]:
    """The index's page kinds: the first page, a later one (keyset), and the text filter
    matching a user's sessions, an exact id and nothing at all."""
    return ["/", f"/?after={after}&page=2", f"/?q={user}", f"/?q={after}", "/?q=no-such-title"]


def page_times(store: Any, routes: list[str], reps: int = 5) -> list[dict[str, Any]]:
    """Each route through a fresh viewer application: cold (first request) and warm
    (median of ``reps``), in ms, with the response's size."""
    from starlette.testclient import TestClient

    from eventstore.cli.viewer import create_app

    client = TestClient(create_app(store), base_url="http://127.0.0.1:8765")
    out = []
    for route in routes:
        t = time.perf_counter()
        r = client.get(route)
        cold = (time.perf_counter() - t) * 1000
        warm = []
        for _ in range(reps):
            t = time.perf_counter()
            r = client.get(route)
            warm.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, (route, r.status_code)
        out.append(
            {
                "route": route,
                "cold_ms": round(cold, 1),
                "warm_ms": round(statistics.median(warm), 1),
                "bytes": len(r.content),
            }
        )
    return out


def fill_sessions(store: Any, n: int) -> None:
    """Give the store's tenant ``n`` sessions: copies of one real session's row with
    their own id, title, user and creation time (one second apart), inserted in batches
    (creating 100,000 sessions one by one takes minutes on a busy machine)."""
    import uuid
    from datetime import timedelta

    from sqlalchemy import func, insert, select

    from eventstore.schema import sessions

    with store.engine.connect() as conn:
        have = conn.execute(
            select(func.count()).select_from(sessions).where(sessions.c.tenant == store.tenant)
        ).scalar_one()
    if have >= n:
        return
    template = store.get_session(store.create_session(title="template").id)
    with store.engine.connect() as conn:
        row = dict(
            conn.execute(select(sessions).where(sessions.c.id == template.id)).one()._mapping
        )
        base = row["created_at"] - timedelta(seconds=n)
        batch = []
        for i in range(have + 1, n):
            when = base + timedelta(seconds=i)
            batch.append(
                {
                    **row,
                    "id": str(uuid.uuid4()),
                    "title": f"task {i}",
                    "user_id": f"user{i % 97}",
                    "created_at": when,
                    "updated_at": when,
                }
            )
            if len(batch) == 5_000 or i == n - 1:
                conn.execute(insert(sessions), batch)
                conn.commit()
                batch = []


def time_index(url: str, n: int) -> None:
    """Build (once) a tenant of ``n`` sessions and time the index pages."""
    from eventstore import EventStore

    store = EventStore(url, tenant=f"index-{n}", upgrade=True)
    fill_sessions(store, n)
    middle = store.list_sessions(limit=1, offset=n // 2)[0].id
    sid = _worked_session(store)
    print(f"{n:,} sessions ({url.split(':')[0]}); ID2 is the middle one, ID has 200 events")
    print(f"{'route':<50} {'cold ms':>8} {'warm ms':>8}")
    routes = index_routes(middle, "user42") + session_routes(sid, store.head(sid))
    for t in page_times(store, routes):
        route = t["route"].replace(middle, "ID2").replace(sid, "ID")
        print(f"{route:<50} {t['cold_ms']:>8.0f} {t['warm_ms']:>8.0f}")
    store.close()


def _worked_session(store: Any) -> str:
    """The tenant's session with events (made once): 199 workload events and a
    condensation keeping the last 50."""
    from benchmarks.workload import condensation, steps, to_message

    for s in store.list_sessions(limit=5):
        if s.title == "worked":
            return str(s.id)
    sid = str(store.create_session(title="worked").id)
    store.append(sid, [to_message(s) for s in steps(1, 199)] + [condensation(199, 50)])
    return sid


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--db", default="/tmp/viewer-bench.db")
    parser.add_argument("--sessions", type=int, default=0, help="time the index instead")
    parser.add_argument("--url", default=None, help="database for --sessions")
    args = parser.parse_args()
    if args.sessions:
        time_index(args.url or f"sqlite:///{args.db}", args.sessions)
        return
    from starlette.testclient import TestClient

    from eventstore import EventStore
    from eventstore.cli.viewer import create_app

    sid = build(Path(args.db), args.events)
    store = EventStore(f"sqlite:///{args.db}", upgrade=False)
    head = store.head(sid)
    routes = [
        "/",
        f"/sessions/{sid}",
        f"/sessions/{sid}/events",
        f"/sessions/{sid}/events?after={head - 150}",
        f"/sessions/{sid}/events?kind=condensation",
        f"/sessions/{sid}/events/{head // 2}",
        f"/sessions/{sid}/events/{(head // 1000) * 1000}",
        f"/sessions/{sid}/view?at={head // 2}",
        f"/sessions/{sid}/view",
        f"/sessions/{sid}/chart",
        f"/sessions/{sid}/row",
    ]
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8765")
    print(f"session {sid}: {head:,} events")
    print(f"{'route':<60} {'cold ms':>8} {'warm ms':>8}")
    for url in routes:
        t = time.perf_counter()
        r = client.get(url)
        cold = (time.perf_counter() - t) * 1000
        warm = []
        for _ in range(5):
            t = time.perf_counter()
            r = client.get(url)
            warm.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, (url, r.status_code)
        print(f"{url.replace(sid, 'ID'):<60} {cold:>8.0f} {statistics.median(warm):>8.0f}")
    # The chart's one read of the log runs in the background; wait for it and time again.
    t = time.perf_counter()
    while "<svg" not in client.get(f"/sessions/{sid}/chart").text:
        time.sleep(0.2)
    print(f"background digest of the log ready after {time.perf_counter() - t:.1f} s more")
    for url in (f"/sessions/{sid}/chart", f"/sessions/{sid}/row", f"/sessions/{sid}/events"):
        warm = []
        for _ in range(5):
            t = time.perf_counter()
            client.get(url)
            warm.append((time.perf_counter() - t) * 1000)
        label = url.replace(sid, "ID") + " (digest ready)"
        print(f"{label:<60} {'':>8} {statistics.median(warm):>8.0f}")
    store.close()


if __name__ == "__main__":
    main()
