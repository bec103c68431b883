"""Where a single append spends its time: cProfile self-time grouped by layer.

Run on a session that already holds events, so the numbers describe a steady state.
Layers are told apart by the file (or C method) each profiled function belongs to.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import event

from eventstore import EventStore

from .harness import log
from .workload import step, to_message

__all__ = ["profile_append", "LAYERS"]

#: Layer name -> substrings of a profiler key that put a function in it (first match wins).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("database (sqlite3 C calls: execute, commit/fsync)", ("sqlite3.",)),
    # The fast path's libpq calls are C methods cProfile does not see: their time is the
    # self time of the function that makes them (its own Python is a few microseconds).
    (
        "database (psycopg/libpq: round trips, commit)",
        ("psycopg", "pq.", "_psycopg", "postgres.py:write_guarded_prepared"),
    ),
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


def _profile(store: EventStore, calls: list[Callable[[], Any]]) -> dict[str, Any]:
    """Profile ``calls`` one after the other; figures are per call."""
    n = len(calls)
    statements = [0]

    def _count(*_args: Any) -> None:
        statements[0] += 1

    event.listen(store.engine, "before_cursor_execute", _count)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for call in calls:
        call()
    prof.disable()
    wall = time.perf_counter() - t0
    event.remove(store.engine, "before_cursor_execute", _count)
    raw: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
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
            "self_ms_per_call": round(t * 1_000 / n, 4),
            "calls_per_call": round(c / n, 2),
        }
        for t, _cum, c, k in rows[:12]
    ]
    return {
        "calls": n,
        "ms_per_call_profiled": round(wall * 1_000 / n, 4),
        "layers": {
            k: {"ms_per_call": round(v * 1_000 / n, 4), "share": round(v / total, 4)}
            for k, v in sorted(layers.items(), key=lambda kv: -kv[1])
        },
        "statements_per_call": round(statements[0] / n, 2),
        "top": top,
    }


def profile_append(store: EventStore, appends: int, batch: int) -> dict[str, Any]:
    """Profile ``appends`` single appends and two ``batch``-event appends.

    Both run on a fresh session that first gets 1,000 events, so they describe a steady
    state. Returns, per kind, the wall time per call, self-time per layer and the top
    functions.
    """
    sid = store.create_session(title="profile").id
    store.append(sid, [to_message(step(s)) for s in range(1, 1_001)], expected_seq=0)
    head = [1_000]

    def _append(msgs: list[Any]) -> Callable[[], Any]:
        def run() -> None:
            store.append(sid, msgs, expected_seq=head[0])
            head[0] += len(msgs)

        return run

    first = head[0] + 1
    singles = [[to_message(step(s))] for s in range(first, first + appends)]
    single = _profile(store, [_append(m) for m in singles])
    first += appends
    batches = [
        [to_message(step(s)) for s in range(lo, lo + batch)] for lo in (first, first + batch)
    ]
    many = _profile(store, [_append(m) for m in batches])
    log(
        f"profiled appends: {single['ms_per_call_profiled']:.3f} ms per single append, "
        f"{many['ms_per_call_profiled']:.1f} ms per {batch}-event batch (under cProfile)"
    )
    return {"single": single, "batch": {**many, "events": batch}}
