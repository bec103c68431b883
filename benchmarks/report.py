"""RESULTS.md: one table per measure, the targets with pass/fail, and the run's context."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .harness import Recorder, Settings, median
from .peers import ADK, OPENAI, RECENT

__all__ = ["Target", "evaluate_targets", "render", "TABLE_TITLES"]

TABLE_TITLES = [
    "## Targets",
    "## 1. Single-event append latency",
    "## 2. Batch append throughput",
    "## 3. View build",
    "## 4. Condensation decision",
    "## 5. Peers",
    "## Where an append spends its time",
    "## Machine",
    "## Packages",
    "## Settings",
]

BACKENDS = ("sqlite", "postgres")
STORE_SQL = "driver, store's SQL"
SHORT = "eventstore (50-event tail)"
RAW = {"sqlite": "sqlite3", "postgres": "psycopg"}
SINGLE_RATIO_GOAL = 2.0
SINGLE_RATIO_STRETCH = 1.5
FLAT_GOAL = 1.25
BATCH_GOAL = {"sqlite": 0.35, "postgres": 0.5}
VIEW_GROWTH_GOAL = 1.2
MEMORY_GROWTH_GOAL = 1.2


@dataclass
class Target:
    """One goal the project sets, checked against this run."""

    name: str
    backend: str
    goal: str
    measured: str
    passed: bool | None  # None: not measured in this run


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "—"
    return f"{x:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _mark(passed: bool | None) -> str:
    return {True: "**pass**", False: "**FAIL**", None: "not measured"}[passed]


def _backends(rec: Recorder) -> list[str]:
    return [b for b in BACKENDS if rec.select("append_single", b)]


def _peer_compare_size(settings: Settings) -> tuple[int, int] | None:
    """(peer size, our view size) for the "view faster than a peer's last-N read" target."""
    if not settings.peer_sizes:
        return None
    peer = max(settings.peer_sizes)
    ours = [s for s in settings.view_sizes if s >= peer]
    return (peer, min(ours)) if ours else None


def evaluate_targets(rec: Recorder, settings: Settings) -> list[Target]:
    out: list[Target] = []
    for be in _backends(rec):
        raw = RAW[be]
        ratios = []
        for size in settings.append_sizes:
            r = _ratio(
                rec.med("median_ms", "append_single", be, "eventstore", size),
                rec.med("median_ms", "append_single", be, raw, size),
            )
            if r is not None:
                ratios.append((r, size))
        if ratios:
            worst, at = max(ratios)
            out.append(
                Target(
                    "single append vs raw floor (median)",
                    be,
                    f"≤ {SINGLE_RATIO_GOAL}× at every size (stretch {SINGLE_RATIO_STRETCH}×)",
                    f"worst {worst:.2f}× (at {at:,} events)",
                    worst <= SINGLE_RATIO_GOAL,
                )
            )
        lo, hi = settings.append_sizes[0], settings.append_sizes[-1]
        growth = _ratio(
            rec.med("median_ms", "append_single", be, "eventstore", hi),
            rec.med("median_ms", "append_single", be, "eventstore", lo),
        )
        floor_growth = _ratio(
            rec.med("median_ms", "append_single", be, raw, hi),
            rec.med("median_ms", "append_single", be, raw, lo),
        )
        measured = "—" if growth is None else f"{growth:.2f}×"
        if floor_growth is not None:
            measured += f" (raw floor: {floor_growth:.2f}×)"
        out.append(
            Target(
                "single append flat with session size",
                be,
                f"median at {hi:,} ≤ {FLAT_GOAL}× median at {lo:,}",
                measured,
                None if growth is None else growth <= FLAT_GOAL,
            )
        )
        # The floor itself may not be flat (a deeper B-tree, a larger WAL, the disk): this
        # row separates what the store adds from what the database does anyway.
        rel = _ratio(growth, floor_growth)
        out.append(
            Target(
                "single append flat relative to the raw floor",
                be,
                f"store growth ≤ {FLAT_GOAL}× raw floor growth ({lo:,} → {hi:,})",
                "—" if rel is None else f"{rel:.2f}×",
                None if rel is None else rel <= FLAT_GOAL,
            )
        )
        batch = _ratio(
            rec.med("events_per_s", "append_batch", be, "eventstore", settings.batch),
            rec.med("events_per_s", "append_batch", be, f"{raw} executemany", settings.batch),
        )
        out.append(
            Target(
                "batch append vs raw executemany",
                be,
                f"≥ {BATCH_GOAL[be]:.0%}",
                "—" if batch is None else f"{batch:.0%}",
                None if batch is None else batch >= BATCH_GOAL[be],
            )
        )
        ours_batch = rec.med("events_per_s", "append_batch", be, "eventstore", settings.batch)
        peer_batch = rec.med("events_per_s", "append_batch", be, OPENAI, settings.batch)
        out.append(
            Target(
                f"batch append vs {OPENAI} add_items",
                be,
                "faster",
                "peer not measured"
                if ours_batch is None or peer_batch is None
                else f"{ours_batch:,.0f} vs {peer_batch:,.0f} events/s "
                f"({ours_batch / peer_batch:.2f}×)",
                None if ours_batch is None or peer_batch is None else ours_batch > peer_batch,
            )
        )
        vlo, vhi = settings.view_sizes[0], settings.view_sizes[-1]
        vg = _ratio(
            rec.med("ms", "view", be, "eventstore", vhi),
            rec.med("ms", "view", be, "eventstore", vlo),
        )
        out.append(
            Target(
                f"view build at {vhi:,} vs at {vlo:,} (same tail)",
                be,
                f"≤ {VIEW_GROWTH_GOAL}×",
                "—" if vg is None else f"{vg:.2f}×",
                None if vg is None else vg <= VIEW_GROWTH_GOAL,
            )
        )
        mg = _ratio(
            rec.med("peak_bytes", "view_memory", be, "eventstore", vhi),
            rec.med("peak_bytes", "view_memory", be, "eventstore", vlo),
        )
        out.append(
            Target(
                f"view peak memory at {vhi:,} vs at {vlo:,}",
                be,
                f"≤ {MEMORY_GROWTH_GOAL}×",
                "—" if mg is None else f"{mg:.2f}×",
                None if mg is None else mg <= MEMORY_GROWTH_GOAL,
            )
        )
        sizes = _peer_compare_size(settings)
        for peer in (ADK, OPENAI):
            if sizes is None:
                continue
            psize, vsize = sizes
            theirs = rec.med("ms", "peer_read", be, f"{peer} last {RECENT}", psize)
            for subject, tail in (("eventstore", settings.tail), (SHORT, 50)):
                ours = rec.med("ms", "view", be, subject, vsize)
                name = (
                    f"view ({tail}-event tail) at {vsize:,} faster than {peer} "
                    f"last-{RECENT} read at {psize:,}"
                )
                if theirs is None or ours is None:
                    out.append(Target(name, be, "faster", "peer not measured", None))
                    continue
                out.append(
                    Target(
                        name,
                        be,
                        "faster",
                        f"{ours:.2f} ms vs {theirs:.2f} ms ({ours / theirs:.2f}×)",
                        ours < theirs,
                    )
                )
    return out


# --------------------------------------------------------------------------- tables


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    if not rows:
        out.append("| " + " | ".join(["(not measured)"] + [""] * (len(header) - 1)) + " |")
    return out


def _single(rec: Recorder, settings: Settings) -> list[str]:
    rows = []
    for be in _backends(rec):
        raw = RAW[be]
        for size in settings.append_sizes:
            es = rec.med("median_ms", "append_single", be, "eventstore", size)
            es95 = rec.med("p95_ms", "append_single", be, "eventstore", size)
            rw = rec.med("median_ms", "append_single", be, raw, size)
            rw95 = rec.med("p95_ms", "append_single", be, raw, size)
            r = _ratio(es, rw)
            sql = rec.med("median_ms", "append_single", be, STORE_SQL, size)
            rows.append(
                [
                    be,
                    f"{size:,}",
                    _fmt(es, 3),
                    _fmt(es95, 3),
                    f"{raw}: {_fmt(rw, 3)}",
                    _fmt(rw95, 3),
                    "—" if r is None else f"{r:.2f}×",
                    _fmt(sql, 3),
                ]
            )
    return _table(
        [
            "backend",
            "session size",
            "eventstore median ms",
            "p95 ms",
            "raw floor median ms",
            "raw p95 ms",
            "ratio (median)",
            "store's SQL via driver, median ms",
        ],
        rows,
    )


def _batch(rec: Recorder, settings: Settings) -> list[str]:
    rows = []
    n = settings.batch
    for be in _backends(rec):
        raw = RAW[be]
        es = rec.med("events_per_s", "append_batch", be, "eventstore", n)
        many = rec.med("events_per_s", "append_batch", be, f"{raw} executemany", n)
        copy = rec.med("events_per_s", "append_batch", be, f"{raw} COPY", n)
        oai = rec.med("events_per_s", "append_batch", be, OPENAI, n)
        floor = rec.med("events_per_s", "append_batch", be, "driver, store's rows", n)
        rm, rc, ro = _ratio(es, many), _ratio(es, copy), _ratio(es, oai)
        rf = _ratio(floor, many)
        rows.append(
            [
                be,
                _fmt(es, 0),
                f"{raw}: {_fmt(many, 0)}",
                "—" if rm is None else f"{rm:.0%}",
                _fmt(floor, 0) + ("" if rf is None else f" ({rf:.0%} of raw)"),
                _fmt(copy, 0),
                "—" if rc is None else f"{rc:.0%}",
                _fmt(oai, 0),
                "—" if ro is None else f"{ro:.2f}×",
            ]
        )
    return _table(
        [
            "backend",
            "eventstore events/s",
            "raw executemany events/s",
            "eventstore / raw",
            "store's rows via driver events/s",
            "COPY events/s",
            "eventstore / COPY",
            f"{OPENAI} add_items events/s",
            f"eventstore / {OPENAI}",
        ],
        rows,
    )


def _view(rec: Recorder, settings: Settings) -> list[str]:
    rows = []
    for be in _backends(rec):
        base_ms = rec.med("ms", "view", be, "eventstore", settings.view_sizes[0])
        base_mem = rec.med("peak_bytes", "view_memory", be, "eventstore", settings.view_sizes[0])
        for size in settings.view_sizes:
            ms = rec.med("ms", "view", be, "eventstore", size)
            mem = rec.med("peak_bytes", "view_memory", be, "eventstore", size)
            short = rec.med("ms", "view", be, SHORT, size)
            msgs = rec.med("messages", "view", be, "eventstore", size)
            rows_read = rec.med("rows_read", "view", be, "eventstore", size)
            tr, mr = _ratio(ms, base_ms), _ratio(mem, base_mem)
            rows.append(
                [
                    be,
                    f"{size:,}",
                    _fmt(ms, 2),
                    "—" if tr is None else f"{tr:.2f}×",
                    _fmt(None if mem is None else mem / 1024, 0),
                    "—" if mr is None else f"{mr:.2f}×",
                    _fmt(msgs, 0),
                    _fmt(rows_read, 0),
                    _fmt(short, 2),
                ]
            )
    return _table(
        [
            "backend",
            "session size",
            "view + to_messages ms",
            f"vs {settings.view_sizes[0]:,}",
            "peak KiB (tracemalloc)",
            f"vs {settings.view_sizes[0]:,}",
            "messages",
            "rows read",
            "view with a 50-event tail ms",
        ],
        rows,
    )


def _decision(rec: Recorder, settings: Settings) -> list[str]:
    rows = []
    for be in _backends(rec):
        for size in settings.view_sizes:
            v = rec.med("ms", "decision", be, "view.tokens", size)
            f = rec.med("ms", "decision", be, "full read", size)
            pol = rec.med("ms", "decision", be, "CondensationPolicy.decide", size)
            r = _ratio(f, v)
            rows.append(
                [
                    be,
                    f"{size:,}",
                    _fmt(v, 2),
                    _fmt(pol, 2),
                    _fmt(f, 1),
                    "—" if r is None else f"{r:,.0f}×",
                ]
            )
    return _table(
        [
            "backend",
            "session size",
            "view.tokens vs Budget ms",
            "CondensationPolicy: view + pending requests + decide ms",
            "full read + sum of token counts ms",
            "full read / view",
        ],
        rows,
    )


def _peers(rec: Recorder, settings: Settings) -> list[str]:
    lines = ["### 5a. Single-event append latency (median ms)", ""]
    rows = []
    for be in _backends(rec):
        for size in settings.peer_sizes:
            ours = rec.med("median_ms", "append_single", be, "eventstore", size)
            ours_note = ""
            if ours is None:
                # Our append sizes may differ from the peers' sizes: use the nearest one.
                near = min(settings.append_sizes, key=lambda s: abs(s - size))
                ours = rec.med("median_ms", "append_single", be, "eventstore", near)
                ours_note = f" (at {near:,})"
            row = [be, f"{size:,}", _fmt(ours, 3) + ours_note]
            for peer in (ADK, OPENAI):
                theirs = rec.med("median_ms", "append_single", be, peer, size)
                r = _ratio(theirs, ours)
                row += [_fmt(theirs, 3), "—" if r is None else f"{r:.2f}×"]
            rows.append(row)
    lines += _table(
        [
            "backend",
            "session size",
            "eventstore",
            ADK,
            f"{ADK} / eventstore",
            OPENAI,
            f"{OPENAI} / eventstore",
        ],
        rows,
    )
    lines += ["", "### 5b. Reading context (median ms): our view vs the peers' reads", ""]
    rows = []
    for be in _backends(rec):
        for size in settings.peer_sizes:
            near = [s for s in settings.view_sizes if s >= size]
            vsize = min(near) if near else settings.view_sizes[-1]
            ours = rec.med("ms", "view", be, "eventstore", vsize)
            short = rec.med("ms", "view", be, SHORT, vsize)
            row = [be, f"{size:,}", f"{_fmt(ours, 2)} (at {vsize:,})", _fmt(short, 2)]
            for peer in (ADK, OPENAI):
                full = rec.med("ms", "peer_read", be, f"{peer} full", size)
                recent = rec.med("ms", "peer_read", be, f"{peer} last {RECENT}", size)
                r = _ratio(recent, short)
                row += [_fmt(full, 1), _fmt(recent, 2), "—" if r is None else f"{r:.2f}×"]
            rows.append(row)
    lines += _table(
        [
            "backend",
            "peer session size",
            f"eventstore view ({settings.tail}-event tail)",
            "eventstore view (50-event tail)",
            f"{ADK} full",
            f"{ADK} last {RECENT}",
            f"{ADK} last {RECENT} / 50-tail view",
            f"{OPENAI} full",
            f"{OPENAI} last {RECENT}",
            f"{OPENAI} last {RECENT} / 50-tail view",
        ],
        rows,
    )
    return lines


def _gap(rec: Recorder, settings: Settings) -> list[str]:
    """Split the single-append gap to the floor into schema/round trips and library work."""
    lines = []
    for be in _backends(rec):
        raw = RAW[be]
        es, rw, sql = (
            median_or_none(
                [
                    rec.med("median_ms", "append_single", be, subj, size)
                    for size in settings.append_sizes
                ]
            )
            for subj in ("eventstore", raw, STORE_SQL)
        )
        if es is None or rw is None or sql is None:
            continue
        gap = es - rw
        schema, library = sql - rw, es - sql
        lines.append(
            f"- **{be}** (medians over the sizes): the store takes {es:.3f} ms per single "
            f"append against the floor's {rw:.3f} ms, {gap:+.3f} ms. Of that, "
            f"{schema:+.3f} ms is the schema and its statements (the store's SQL through the "
            f"driver takes {sql:.3f} ms) and {library:+.3f} ms is the library's Python work "
            "(validation, encoding, hashing, SQLAlchemy, the connection pool)."
        )
    return lines


def median_or_none(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return median(xs) if xs else None


def _profile(profiles: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if not profiles:
        return ["(not profiled in this run)"]
    for be, prof in profiles.items():
        one, many = prof["single"], prof["batch"]
        lines += [
            f"**{be}**: {one['ms_per_call_profiled']:.3f} ms per single append and "
            f"{many['ms_per_call_profiled']:.1f} ms per {many['events']:,}-event batch under "
            f"cProfile (into a 1,000-event session; the profiler inflates Python-heavy "
            f"layers). SQL statements per single append: {one['statements_per_call']} as "
            "sent by SQLAlchemy, plus the COMMIT (and, on Postgres, the driver's BEGIN).",
            "",
        ]
        rows = []
        for layer in dict.fromkeys([*one["layers"], *many["layers"]]):
            a = one["layers"].get(layer, {"ms_per_call": 0.0, "share": 0.0})
            b = many["layers"].get(layer, {"ms_per_call": 0.0, "share": 0.0})
            rows.append(
                [
                    layer,
                    f"{a['ms_per_call']:.3f}",
                    f"{a['share']:.0%}",
                    f"{b['ms_per_call']:.1f}",
                    f"{b['share']:.0%}",
                ]
            )
        lines += _table(
            [
                "layer (self time)",
                "single append ms",
                "share",
                f"{many['events']:,}-event batch ms",
                "share",
            ],
            rows,
        )
        for label, prof_ in (("single append", one), ("batch append", many)):
            lines += ["", f"Top functions by self time, {label}:", ""]
            rows = [
                [f"`{t['function']}`", f"{t['self_ms_per_call']:.4f}", f"{t['calls_per_call']}"]
                for t in prof_["top"][:6]
            ]
            lines += _table(["function", "self ms per call", "calls per call"], rows)
        lines.append("")
    return lines


def render(
    rec: Recorder,
    settings: Settings,
    machine: dict[str, Any],
    packages: dict[str, str | None],
    targets: list[Target],
    profiles: dict[str, Any],
    command: str,
) -> str:
    mode_note = (
        ""
        if settings.mode == "full"
        else f"\n> **{settings.mode} mode**: smaller sizes and fewer repetitions; "
        "the committed report comes from the full mode.\n"
    )
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `{command}` on {machine['date']} ({settings.mode} mode). "
        f"Every figure is the median of {settings.reps} repetitions after a warm-up "
        f"({settings.batch_reps} for batches); every repetition is in `results.json`. "
        "The store, the raw floors and the peers ran in the same process on the same "
        "machine, interleaved where they share a measure.",
        mode_note,
        "Workload: agent sessions of a ~500-character chat message per event and every "
        "fifth event a ~4,000-character tool result (the event before it is the assistant "
        "message with the matching tool call). One session per size is built with "
        f"{settings.batch:,}-event batch appends; then every measure is timed with the "
        "sizes taking turns inside each repetition, so that background load blurs all "
        "sizes alike rather than skewing one. Run it from the repository root; the "
        "machine's load average at the start and end of the run is in the Machine table "
        "(a shared machine makes the absolute figures noisier than the ratios).",
        "",
        "## Targets",
        "",
    ]
    lines += _table(
        ["target", "backend", "goal", "measured", "result"],
        [[t.name, t.backend, t.goal, t.measured, _mark(t.passed)] for t in targets],
    )
    lines += [
        "",
        "## 1. Single-event append latency",
        "",
        "`store.append(session, [event], expected_seq=head)` against the raw floor: one "
        "`INSERT` of the same payload text into a `(session_id, seq)`-keyed table, committed "
        "on its own (stdlib `sqlite3` with WAL and `synchronous=FULL`, as the store; psycopg "
        "in autocommit). Both tables hold the same number of rows at each size. The last "
        "column is a diagnostic: the statements of the store's append fast path for one "
        "event (on SQLite `BEGIN IMMEDIATE`, the guarded head move, "
        "the event insert and its parts rows' (none for a message whose one part is text), "
        "`COMMIT`; on Postgres its one guarded statement in "
        "autocommit) sent straight through the driver into the store's schema, with the head "
        "remembered as the store remembers it. On SQLite it writes to a database file of its "
        "own, as the floor does (a WAL connection drops its page cache whenever another "
        "connection has written to its file: sharing the store's file would cost both of them "
        "that on every append). Floor → store's SQL is the cost of the schema and "
        "its round trips; store's SQL → eventstore is the library's Python work. The three "
        "are timed alternately, one append each in turn.",
        "",
    ]
    lines += _single(rec, settings)
    lines += [
        "",
        "## 2. Batch append throughput",
        "",
        f"One `store.append` of {settings.batch:,} events (validation, encoding, hash chain, "
        "parts rows, head update) against the raw driver writing the same payloads in one "
        'transaction: `executemany`, and `COPY` on Postgres. "Store\'s rows via driver" '
        "sends the exact rows the store writes for the batch (events with their hash chain, "
        "parts, the head move), made beforehand, through the driver as the store's bulk "
        "path does: the schema's own cost, with none of the library's Python work. On "
        "SQLite it writes to a database file of its own, as the floor does, so that each "
        "file's write-ahead log checkpoints for its own writes only. On "
        "Postgres the store checks and encodes each event while the rows before it are on "
        "their way and being inserted, so part of its Python work hides behind the "
        "server's. On Postgres the floor's payload column is compressed as the store's is "
        "(lz4 since schema 0009, where the server has it), so that the floor stores the "
        "same bytes the same way.",
        "",
    ]
    lines += _batch(rec, settings)
    lines += [
        "",
        "## 3. View build",
        "",
        f"`store.view(session)` + `view.to_messages()` with the latest condensation keeping "
        f"the last {settings.tail} events (forgotten 3..head-{settings.tail}, events 1-2 "
        "pinned, a 1,500-character summary). The same tail at every size, so any growth "
        "with session size is overhead. Peak memory is tracemalloc's peak of Python "
        "allocations during one build.",
        "",
    ]
    lines += _view(rec, settings)
    lines += [
        "",
        "## 4. Condensation decision",
        "",
        "Whether a session needs condensing: build the view and compare `view.tokens` with "
        "`Budget(max_input_tokens=128_000, reserved_output=8_192, buffer=6_400).available`, "
        "against the approach a store without views is left with: read every event and sum "
        "its token counts. The policy column is the condensers package's own check "
        "(`CondensationPolicy(budget).decide(view, policy.pending_requests(store, view))`: "
        "threshold, event count and manual requests).",
        "",
    ]
    lines += _decision(rec, settings)
    lines += [
        "",
        "## 5. Peers",
        "",
        "Google ADK `DatabaseSessionService` and the OpenAI Agents SDK `SQLAlchemySession`, "
        "each on its own empty database (aiosqlite file / asyncpg), with the same workload "
        "through their public async APIs and their default settings. ADK has no batch "
        "append, so its sessions grow one `append_event` at a time. Ratios above 1 mean the "
        "peer is slower.",
        "",
    ]
    lines += _peers(rec, settings)
    lines += ["", "## Where an append spends its time", ""]
    lines += _gap(rec, settings) + [""]
    lines += _profile(profiles)
    lines += ["", "## Machine", ""]
    lines += _table(["", ""], [[k, str(v)] for k, v in machine.items()])
    lines += ["", "## Packages", ""]
    lines += _table(
        ["package", "version"], [[k, v or "not installed"] for k, v in packages.items()]
    )
    lines += ["", "## Settings", ""]
    lines += _table(["setting", "value"], [[k, str(v)] for k, v in asdict(settings).items()])
    if rec.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in rec.notes]
    return "\n".join(lines).rstrip() + "\n"
