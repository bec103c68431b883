"""Measures 1-4: the store against the raw-driver floors on one backend.

One session per size is built with batch appends and mirrored row for row into the raw
floor's table. The view sizes get two condensations (keeping the last ``tail`` events,
then the last 50). Then every measure is timed with the sizes taking turns inside each
repetition, and the store, the floor and the diagnostic taking turns inside each size,
so that a noisy machine blurs every figure alike instead of skewing one size. Batch
throughput is measured on a separate session.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy.engine import make_url

from eventstore import Budget, EventStore
from eventstore.codec import encode, encode_event

from .harness import Recorder, Settings, log, median, percentile
from .raw import StoreRows, StoreSQL, pg_analyze
from .workload import condensation, raw_payload, step, to_message

__all__ = ["Backend", "run_store", "DECISION_BUDGET", "decision_check"]

WARMUP_APPENDS = 5
#: Warm-up rounds of the view measure. On Postgres the view is one prepared statement,
#: planned for its values the first five times it runs on a connection before Postgres
#: keeps one plan (asyncpg, under the peers, prepares at the first read): the measure is
#: of that steady state, as the peers' is, not of a connection's first views.
VIEW_WARMUP = 3
MEMORY_REPS = 2
#: The short tail of the like-for-like comparison with the peers' "last 50" reads.
SHORT_TAIL = 50
SHORT_SUBJECT = f"eventstore ({SHORT_TAIL}-event tail)"
#: On Postgres, statistics are refreshed every this many events while a session grows
#: (autovacuum's autoanalyze would do it; some servers run with autovacuum off).
ANALYZE_EVERY = 20_000

#: The budget the decision measure checks against: a 128k-token model with 8k reserved
#: for output and a 5% buffer (what ``Budget.for_model`` gives gpt-4o-like models).
DECISION_BUDGET = Budget(max_input_tokens=128_000, reserved_output=8_192, buffer=6_400)


class Raw(Protocol):
    name: str

    def insert_one(self, row: tuple[str, int, str]) -> None: ...

    def insert_many(self, rows: list[tuple[str, int, str]]) -> None: ...

    def close(self) -> None: ...


@dataclass
class Backend:
    """A database the measures run on."""

    name: str
    """``sqlite`` or ``postgres``."""
    store_url: str
    """URL the store opens."""
    make_raw: Callable[[], Raw]
    """Opens the raw floor on an empty table."""
    peer_urls: dict[str, str]
    """Async URL per peer, each pointing at its own empty database."""


def _ms(seconds: float) -> float:
    return round(seconds * 1_000, 4)


class _Session:
    """One benchmark session on the store, mirrored row for row on the raw floor."""

    def __init__(self, store: EventStore, raw: Raw, be: str, batch: int):
        self.store, self.raw, self.be, self.batch = store, raw, be, batch
        self.pg = store.dialect == "postgresql"
        self.sid = store.create_session(title="benchmark").id
        self.head = 0
        self.marks: dict[str, int] = {}

    def grow_to(self, size: int) -> None:
        """Batch-append workload events until the head is ``size``."""
        t0 = time.perf_counter()
        start = self.head
        while self.head < size:
            last = min(size, self.head + self.batch)
            seqs = range(self.head + 1, last + 1)
            msgs = [to_message(step(s)) for s in seqs]
            self.store.append(self.sid, msgs, expected_seq=self.head)
            rows = [(self.sid, s, encode_event(m)) for s, m in zip(seqs, msgs, strict=True)]
            self.raw.insert_many(rows)
            self.head = last
            if self.pg and self.head % ANALYZE_EVERY == 0:
                pg_analyze(self.store.url)
        if self.head > start:
            took = time.perf_counter() - t0
            log(f"{self.be}: grew a session to {self.head:,} events in {took:.1f}s")

    def append_other(self, evt: Any) -> int:
        """Append a non-workload event to both (keeps their sizes equal); return its seq."""
        self.store.append(self.sid, [evt], expected_seq=self.head)
        self.head += 1
        self.raw.insert_one((self.sid, self.head, encode_event(evt)))
        return self.head

    def store_once(self) -> float:
        seq = self.head + 1
        msg = to_message(step(seq))
        t0 = time.perf_counter()
        self.store.append(self.sid, [msg], expected_seq=self.head)
        took = time.perf_counter() - t0
        self.head = seq
        return took

    def raw_once(self) -> float:
        # The raw table receives the row the store just wrote (same seq, same bytes).
        row = (self.sid, self.head, raw_payload(step(self.head)))
        t0 = time.perf_counter()
        self.raw.insert_one(row)
        return time.perf_counter() - t0


def _single_appends(
    sessions: dict[int, _Session], diag: StoreSQL, settings: Settings, rec: Recorder, be: str
) -> None:
    """Single appends at every size, interleaved: session sizes take turns within each
    repetition, and the store, the floor and the diagnostic take turns within each size,
    so that background noise hits every figure alike."""
    n, reps = settings.single_appends, settings.reps

    def diag_once(sess: _Session) -> float:
        enc = encode(to_message(step(sess.head)), sess.store.token_counter)
        t0 = time.perf_counter()
        diag.append_one(enc.kind, enc.payload, enc.token_count, enc.part_rows)
        return time.perf_counter() - t0

    for sess in sessions.values():
        for _ in range(WARMUP_APPENDS):
            sess.store_once()
            sess.raw_once()
            diag_once(sess)
    for rep in range(reps):
        for size, sess in sessions.items():
            lat: dict[str, list[float]] = {"eventstore": [], sess.raw.name: [], diag.name: []}
            for _ in range(n):
                lat["eventstore"].append(sess.store_once())
                lat[sess.raw.name].append(sess.raw_once())
                lat[diag.name].append(diag_once(sess))
            for subject, xs in lat.items():
                rec.add(
                    "append_single",
                    be,
                    subject,
                    size,
                    rep,
                    median_ms=_ms(median(xs)),
                    p95_ms=_ms(percentile(xs, 0.95)),
                    latencies_ms=[_ms(x) for x in xs],
                )
    raw_name = next(iter(sessions.values())).raw.name
    for size in sessions:
        es = rec.med("median_ms", "append_single", be, "eventstore", size)
        rw = rec.med("median_ms", "append_single", be, raw_name, size)
        log(f"{be}: single append at {size:,}: store {es:.3f} ms, raw {rw:.3f} ms")


def _view_once(store: EventStore, sid: str, as_of: int) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    view = store.view(sid, as_of=as_of)
    messages = view.to_messages()
    took = time.perf_counter() - t0
    return took, {
        "messages": len(messages),
        "tokens": view.tokens,
        "rows_read": view.rows_read,
        "view_seq": view.seq,
    }


def _peak_memory(fn: Callable[[], Any]) -> int:
    """Peak bytes Python allocated while ``fn`` ran (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del result
    return peak - base


def decision_check(
    store: EventStore, sid: str, as_of: int | None = None, budget: Budget = DECISION_BUDGET
) -> bool:
    """Whether the session's view exceeds the budget (the condensation trigger)."""
    return store.view(sid, as_of=as_of).tokens > budget.available


def _policy_check() -> Callable[[EventStore, str, int], bool] | None:
    """The condensers package's own trigger check, when the package is importable."""
    try:
        from condensers import CondensationPolicy
    except ImportError:
        return None
    policy = CondensationPolicy(DECISION_BUDGET)

    def check(store: EventStore, sid: str, as_of: int) -> bool:
        view = store.view(sid, as_of=as_of)
        return policy.decide(view, policy.pending_requests(view)).trigger is not None

    return check


def _naive_check(store: EventStore, sid: str, as_of: int, budget: Budget = DECISION_BUDGET):
    """The same decision by reading the whole session and summing its token counts."""
    return sum(e.token_count for e in store.read(sid, to_seq=as_of)) > budget.available


def _views(sessions: dict[int, _Session], settings: Settings, rec: Recorder, be: str) -> None:
    """View build, memory and decision at every view size, sizes taking turns.

    Each session holds two condensations at its size: one keeping ``settings.tail``
    events and, after it, one keeping 50. ``as_of`` picks the view each one defines
    (time travel is exact), so every view is built from the same session state.
    """
    store = next(iter(sessions.values())).store
    reps = settings.reps
    for rep in range(-VIEW_WARMUP, reps):  # negative reps are the warm-up
        for size, sess in sessions.items():
            for subject, mark in (("eventstore", "long"), (SHORT_SUBJECT, "short")):
                took, info = _view_once(store, sess.sid, sess.marks[mark])
                if rep >= 0:
                    rec.add("view", be, subject, size, rep, ms=_ms(took), **info)
    for rep in range(MEMORY_REPS):
        for size, sess in sessions.items():
            as_of = sess.marks["long"]
            peak = _peak_memory(lambda s=sess, a=as_of: store.view(s.sid, as_of=a).to_messages())
            rec.add("view_memory", be, "eventstore", size, rep, peak_bytes=peak)
    for size in sessions:
        ms = rec.med("ms", "view", be, "eventstore", size)
        log(f"{be}: view at {size:,}: {ms:.2f} ms")

    policy_check = _policy_check()
    checks: list[tuple[str, Callable[[EventStore, str, int], bool], int]] = [
        ("view.tokens", lambda st, sid, a: decision_check(st, sid, a), reps)
    ]
    if policy_check is not None:
        checks.append(("CondensationPolicy.decide", policy_check, reps))
    checks.append(("full read", _naive_check, settings.decision_naive_reps))
    for subject, check, n in checks:
        for rep in range(-1, n):
            for size, sess in sessions.items():
                if rep < 0 and subject == "full read":
                    continue
                t0 = time.perf_counter()
                over = check(store, sess.sid, sess.marks["long"])
                took = time.perf_counter() - t0
                if rep >= 0:
                    rec.add("decision", be, subject, size, rep, ms=_ms(took), over_budget=over)
    for size in sessions:
        log(
            f"{be}: decision at {size:,}: "
            f"{rec.med('ms', 'decision', be, 'view.tokens', size):.2f} ms via the view, "
            f"{rec.med('ms', 'decision', be, 'full read', size):.1f} ms by full read"
        )


def _batch(store: EventStore, raw: Raw, settings: Settings, rec: Recorder, be: str) -> None:
    sid = store.create_session(title="benchmark batches").id
    # The diagnostic writes to a file of its own on SQLite (see _own_sqlite_url): else the
    # write-ahead log's checkpoints, run by whichever commit takes the log past its limit,
    # would land on the store's batches for the diagnostic's pages as well as its own.
    own_url = _own_sqlite_url(store, "rows")
    rows_store = store if own_url is None else EventStore(own_url, upgrade=True)
    rows = StoreRows(rows_store, rows_store.create_session(title="benchmark batch rows").id)
    n = settings.batch
    head = 0
    try:
        for rep in range(-1, settings.batch_reps):  # rep -1 is the warm-up
            _batch_rep(store, raw, rows, sid, head, rep, n, rec, be)
            head += n
    finally:
        rows.close()
        if rows_store is not store:
            rows_store.close()
    es = rec.med("events_per_s", "append_batch", be, "eventstore", n)
    rw = rec.med("events_per_s", "append_batch", be, f"{raw.name} executemany", n)
    fl = rec.med("events_per_s", "append_batch", be, StoreRows.name, n)
    log(
        f"{be}: batch append: store {es:,.0f} ev/s, the store's rows via the driver "
        f"{fl:,.0f} ev/s, raw executemany {rw:,.0f} ev/s"
    )


def _batch_rep(
    store: EventStore,
    raw: Raw,
    rows: StoreRows,
    sid: str,
    head: int,
    rep: int,
    n: int,
    rec: Recorder,
    be: str,
) -> None:
    """One repetition of the batch measure: every subject writes the same ``n`` events."""
    seqs = range(head + 1, head + n + 1)
    msgs = [to_message(step(s)) for s in seqs]
    payloads = [encode_event(m) for m in msgs]
    t0 = time.perf_counter()
    store.append(sid, msgs, expected_seq=head)
    t_store = time.perf_counter() - t0
    timings = {"eventstore": t_store}
    prepared = rows.prepare(msgs)
    t0 = time.perf_counter()
    rows.insert(prepared)
    timings[StoreRows.name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    raw.insert_many([(f"{sid}-many", s, p) for s, p in zip(seqs, payloads, strict=True)])
    timings[f"{raw.name} executemany"] = time.perf_counter() - t0
    copy = getattr(raw, "copy", None)
    if copy is not None:
        t0 = time.perf_counter()
        copy([(f"{sid}-copy", s, p) for s, p in zip(seqs, payloads, strict=True)])
        timings[f"{raw.name} COPY"] = time.perf_counter() - t0
    if rep < 0:
        return
    for subject, took in timings.items():
        rec.add("append_batch", be, subject, n, rep, ms=_ms(took), events_per_s=round(n / took, 1))


#: Events the SQLite diagnostic's own file is filled with before it is timed: about 1,500
#: pages, past the write-ahead log's automatic checkpoint at 1,000.
DIAG_WARM_EVENTS = 3_000


def _own_sqlite_url(store: EventStore, name: str) -> str | None:
    """On a SQLite file, the URL of a file of its own next to the store's (``name`` tells
    which diagnostic's) for a diagnostic to write to, as the raw floor has; None on
    Postgres or in memory, where the diagnostic shares the store's database."""
    url = make_url(store.url)
    if store.dialect != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    path = Path(url.database)
    own = url.set(database=str(path.with_name(f"{path.stem}-{name}{path.suffix}")))
    return own.render_as_string(hide_password=False)


def _diagnostic(store: EventStore) -> StoreSQL:
    """The store's SQL sent through the driver, on a session of its own.

    On SQLite it writes to a database file of its own, as the raw floor does: a WAL
    connection drops its whole page cache when it finds that another connection has
    written to the file since its last transaction. Writing to the store's file, the
    diagnostic would empty the store's cache (and the store the diagnostic's) before every
    append, a cost neither the floor nor a store with one writer pays (measured: about
    0.03 ms per append for each of the two). Postgres keeps its pages in shared buffers,
    so there the diagnostic writes to the store's database.
    """
    own_url = _own_sqlite_url(store, "sql")
    if own_url is None:
        return StoreSQL(store.url, store.create_session(title="benchmark sql").id)
    with EventStore(own_url, upgrade=True) as schema_only:
        sid = schema_only.create_session(title="benchmark sql").id
        # Opened before the store closes: the last connection to a file to close deletes
        # its write-ahead log, and a new log grows again, every commit then also waiting
        # for the file's new size.
        diag = StoreSQL(own_url, sid)
        # Past the first checkpoint, as the store's and the floor's files are.
        head, head_hash = 0, None
        while head < DIAG_WARM_EVENTS:
            batch = [to_message(step(s)) for s in range(head + 1, head + 1_001)]
            done = schema_only.append_result(sid, batch, expected_seq=head)
            head, head_hash = done.head_seq, done.head_hash
    diag.head, diag.prev = head, head_hash
    return diag


def run_store(backend: Backend, settings: Settings, rec: Recorder) -> None:
    """Measures 1-4 on ``backend``."""
    log(f"{backend.name}: eventstore vs raw floor")
    store = EventStore(backend.store_url, upgrade=True)
    raw = backend.make_raw()
    diag = None
    try:
        # One session per size, built with batch appends; the views' sizes get their two
        # condensations right when they reach their size.
        sessions: dict[int, _Session] = {}
        for size in settings.append_sizes:
            sess = _Session(store, raw, backend.name, settings.batch)
            sess.grow_to(size)
            if size in settings.view_sizes:
                sess.marks["long"] = sess.append_other(condensation(sess.head, settings.tail))
                sess.marks["short"] = sess.append_other(condensation(sess.head, SHORT_TAIL))
            sessions[size] = sess
        if store.dialect == "postgresql":
            pg_analyze(store.url)
        _views({s: sessions[s] for s in settings.view_sizes}, settings, rec, backend.name)
        diag = _diagnostic(store)
        _single_appends(sessions, diag, settings, rec, backend.name)
        if store.dialect == "postgresql":
            pg_analyze(store.url)
        _batch(store, raw, settings, rec, backend.name)
    finally:
        raw.close()
        if diag is not None:
            diag.close()
        store.close()
