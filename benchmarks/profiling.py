"""Where a single append spends its time: cProfile self-time grouped by layer.

Run on a session that already holds events, so the numbers describe a steady state.
Layers are told apart by the file (or C method) each profiled function belongs to.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from typing import Any

from sqlalchemy import event

from eventstore import EventStore

from .harness import log
from .workload import step, to_message

__all__ = ["profile_append", "LAYERS"]

#: Layer name -> substrings of a profiler key that put a function in it (first match wins).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("database (sqlite3 C calls: execute, commit/fsync)", ("sqlite3.",)),
    ("database (psycopg: round trips, commit)", ("psycopg", "pq.", "_psycopg")),
    ("pydantic (validation, dump)", ("pydantic",)),
    ("JSON encoding", ("json/", "json.")),
    ("hashing (SHA-256 chain)", ("_hashlib", "hashlib")),
    ("SQLAlchemy (compile, execute, pool, rows)", ("sqlalchemy",)),
    ("eventstore (own code)", ("eventstore/", "benchmarks/")),
]


def _layer(key: tuple[str, int, str]) -> str:
    filename, _line, func = key
    text = f"{filename}:{func}"
    for name, needles in LAYERS:
        if any(n in text for n in needles):
            return name
    return "other (stdlib, interpreter)"


def profile_append(store: EventStore, appends: int) -> dict[str, Any]:
    """Profile ``appends`` single appends into a fresh session that first gets 1,000 events.

    Returns the wall time per append, self-time shares per layer, and the top functions.
    """
    sid = store.create_session(title="profile").id
    head = 0
    msgs = [to_message(step(s)) for s in range(1, 1_001)]
    store.append(sid, msgs, expected_seq=0)
    head = 1_000
    batch = [to_message(step(s)) for s in range(head + 1, head + appends + 1)]
    statements = [0]

    def _count(*_args: Any) -> None:
        statements[0] += 1

    event.listen(store.engine, "before_cursor_execute", _count)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for msg in batch:
        store.append(sid, [msg], expected_seq=head)
        head += 1
    prof.disable()
    wall = time.perf_counter() - t0
    event.remove(store.engine, "before_cursor_execute", _count)
    stats = pstats.Stats(prof)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    layers: dict[str, float] = {}
    total = 0.0
    rows = []
    for key, (_cc, ncalls, tottime, cumtime, _callers) in raw.items():
        layers[_layer(key)] = layers.get(_layer(key), 0.0) + tottime
        total += tottime
        rows.append((tottime, cumtime, ncalls, key))
    rows.sort(reverse=True)
    top = [
        {
            "function": f"{k[0].rsplit('site-packages/', 1)[-1]}:{k[1]}({k[2]})",
            "self_ms_per_append": round(t * 1_000 / appends, 4),
            "calls_per_append": round(n / appends, 2),
        }
        for t, _c, n, k in rows[:12]
    ]
    log(f"profiled {appends} appends: {wall * 1_000 / appends:.3f} ms each under cProfile")
    return {
        "appends": appends,
        "ms_per_append_profiled": round(wall * 1_000 / appends, 4),
        "layers": {
            k: {"ms_per_append": round(v * 1_000 / appends, 4), "share": round(v / total, 4)}
            for k, v in sorted(layers.items(), key=lambda kv: -kv[1])
        },
        "statements_per_append": round(statements[0] / appends, 2),
        "top": top,
    }
