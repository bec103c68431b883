"""Measures 1-4: the store against the raw-driver floors on one backend.

One session grows through the append sizes by batch appends. At each size the single
append latency of the store and of the raw floor are timed in alternating repetitions
(so background noise hits both alike); at the view sizes a condensation that keeps the
last ``tail`` events is appended first and the view build, its peak memory and the
condensation decision are timed. Batch throughput is measured on a separate session.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from eventstore import Budget, EventStore
from eventstore._core import encode
from eventstore.codec import encode_event

from .harness import Recorder, Settings, log, median, percentile
from .raw import StoreSQL
from .workload import condensation, raw_payload, step, to_message

__all__ = ["Backend", "run_store", "DECISION_BUDGET", "decision_check"]

WARMUP_APPENDS = 5
MEMORY_REPS = 2
#: The short tail of the like-for-like comparison with the peers' "last 50" reads.
SHORT_TAIL = 50

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
    """The growing benchmark session on the store, mirrored row for row on the raw floor."""

    def __init__(self, store: EventStore, raw: Raw, settings: Settings, rec: Recorder, be: str):
        self.store, self.raw, self.settings, self.rec, self.be = store, raw, settings, rec, be
        self.sid = store.create_session(title="benchmark").id
        self.head = 0
        self.diag = StoreSQL(store.url, store.create_session(title="benchmark sql").id)

    def grow_to(self, size: int) -> None:
        """Batch-append workload events until the head is ``size``."""
        t0 = time.perf_counter()
        start = self.head
        while self.head < size:
            last = min(size, self.head + self.settings.batch)
            msgs = [to_message(step(s)) for s in range(self.head + 1, last + 1)]
            self.store.append(self.sid, msgs, expected_seq=self.head)
            self.raw.insert_many(
                [
                    (self.sid, s, encode_event(m))
                    for s, m in zip(range(self.head + 1, last + 1), msgs, strict=True)
                ]
            )
            self.head = last
        if self.head > start:
            took = time.perf_counter() - t0
            log(f"{self.be}: grew session to {self.head} events in {took:.1f}s")

    def append_other(self, evt: Any) -> None:
        """Append a non-workload event to both (keeps their sizes equal)."""
        self.store.append(self.sid, [evt], expected_seq=self.head)
        self.head += 1
        self.raw.insert_one((self.sid, self.head, encode_event(evt)))

    def single_appends(self, size: int) -> None:
        n, reps = self.settings.single_appends, self.settings.reps
        for _ in range(WARMUP_APPENDS):
            self._store_once()
            self._raw_once()
            self._diag_once()
        for rep in range(reps):
            # Alternate one by one so that background noise hits both alike.
            store_lat, raw_lat, diag_lat = [], [], []
            for _ in range(n):
                store_lat.append(self._store_once())
                raw_lat.append(self._raw_once())
                diag_lat.append(self._diag_once())
            for subject, lat in (
                ("eventstore", store_lat),
                (self.raw.name, raw_lat),
                (self.diag.name, diag_lat),
            ):
                self.rec.add(
                    "append_single",
                    self.be,
                    subject,
                    size,
                    rep,
                    median_ms=_ms(median(lat)),
                    p95_ms=_ms(percentile(lat, 0.95)),
                    latencies_ms=[_ms(x) for x in lat],
                )
        es = self.rec.med("median_ms", "append_single", self.be, "eventstore", size)
        rw = self.rec.med("median_ms", "append_single", self.be, self.raw.name, size)
        log(f"{self.be}: single append at {size}: store {es:.3f} ms, raw {rw:.3f} ms")

    def _store_once(self) -> float:
        seq = self.head + 1
        msg = to_message(step(seq))
        t0 = time.perf_counter()
        self.store.append(self.sid, [msg], expected_seq=self.head)
        took = time.perf_counter() - t0
        self.head = seq
        self._raw_pending = (self.sid, seq, raw_payload(step(seq)))
        return took

    def _diag_once(self) -> float:
        enc = encode(to_message(step(self.head)), self.store.token_counter)
        t0 = time.perf_counter()
        self.diag.append_one(enc.kind, enc.payload, enc.token_count, enc.part_rows)
        return time.perf_counter() - t0

    def _raw_once(self) -> float:
        # The raw table receives the same row the store just wrote (same seq, same bytes).
        row = self._raw_pending
        t0 = time.perf_counter()
        self.raw.insert_one(row)
        return time.perf_counter() - t0


def _view_once(store: EventStore, sid: str) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    view = store.view(sid)
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


def decision_check(store: EventStore, sid: str, budget: Budget = DECISION_BUDGET) -> bool:
    """Whether the session's current view exceeds the budget (the condensation trigger)."""
    return store.view(sid).tokens > budget.available


def _policy_check() -> Callable[[EventStore, str], bool] | None:
    """The condensers package's own trigger check, when the package is importable."""
    try:
        from condensers import CondensationPolicy
    except ImportError:
        return None
    policy = CondensationPolicy(DECISION_BUDGET)

    def check(store: EventStore, sid: str) -> bool:
        view = store.view(sid)
        return policy.decide(view, policy.pending_requests(store, view)).trigger is not None

    return check


def _naive_check(store: EventStore, sid: str, budget: Budget = DECISION_BUDGET) -> bool:
    """The same decision by reading the whole session and summing its token counts."""
    return sum(e.token_count for e in store.read(sid)) > budget.available


def _views(sess: _Session, size: int) -> None:
    store, rec, be, reps = sess.store, sess.rec, sess.be, sess.settings.reps
    _view_once(store, sess.sid)  # warm-up
    for rep in range(reps):
        took, info = _view_once(store, sess.sid)
        rec.add("view", be, "eventstore", size, rep, ms=_ms(took), **info)
    for rep in range(MEMORY_REPS):
        peak = _peak_memory(lambda: store.view(sess.sid).to_messages())
        rec.add("view_memory", be, "eventstore", size, rep, peak_bytes=peak)
    ms = rec.med("ms", "view", be, "eventstore", size)
    log(f"{be}: view at {size}: {ms:.2f} ms")


def _short_views(sess: _Session, size: int) -> None:
    """The view once a newer condensation keeps only the last 50 events."""
    store, rec, be, reps = sess.store, sess.rec, sess.be, sess.settings.reps
    sess.append_other(condensation(sess.head, SHORT_TAIL))
    _view_once(store, sess.sid)
    for rep in range(reps):
        took, info = _view_once(store, sess.sid)
        rec.add(
            "view", be, f"eventstore ({SHORT_TAIL}-event tail)", size, rep, ms=_ms(took), **info
        )


def _decision(sess: _Session, size: int) -> None:
    store, rec, be, reps = sess.store, sess.rec, sess.be, sess.settings.reps
    decision_check(store, sess.sid)
    for rep in range(reps):
        t0 = time.perf_counter()
        over = decision_check(store, sess.sid)
        rec.add(
            "decision",
            be,
            "view.tokens",
            size,
            rep,
            ms=_ms(time.perf_counter() - t0),
            over_budget=over,
        )
    policy_check = _policy_check()
    if policy_check is not None:
        policy_check(store, sess.sid)
        for rep in range(reps):
            t0 = time.perf_counter()
            fires = policy_check(store, sess.sid)
            rec.add(
                "decision",
                be,
                "CondensationPolicy.decide",
                size,
                rep,
                ms=_ms(time.perf_counter() - t0),
                over_budget=fires,
            )
    for rep in range(sess.settings.decision_naive_reps):
        t0 = time.perf_counter()
        over = _naive_check(store, sess.sid)
        rec.add(
            "decision",
            be,
            "full read",
            size,
            rep,
            ms=_ms(time.perf_counter() - t0),
            over_budget=over,
        )
    log(
        f"{be}: decision at {size}: "
        f"{rec.med('ms', 'decision', be, 'view.tokens', size):.2f} ms via the view, "
        f"{rec.med('ms', 'decision', be, 'full read', size):.1f} ms by full read"
    )


def _batch(store: EventStore, raw: Raw, settings: Settings, rec: Recorder, be: str) -> None:
    sid = store.create_session(title="benchmark batches").id
    n = settings.batch
    head = 0
    for rep in range(-1, settings.batch_reps):  # rep -1 is the warm-up
        seqs = range(head + 1, head + n + 1)
        msgs = [to_message(step(s)) for s in seqs]
        payloads = [encode_event(m) for m in msgs]
        t0 = time.perf_counter()
        store.append(sid, msgs, expected_seq=head)
        t_store = time.perf_counter() - t0
        head += n
        timings = {"eventstore": t_store}
        t0 = time.perf_counter()
        raw.insert_many([(f"{sid}-many", s, p) for s, p in zip(seqs, payloads, strict=True)])
        timings[f"{raw.name} executemany"] = time.perf_counter() - t0
        copy = getattr(raw, "copy", None)
        if copy is not None:
            t0 = time.perf_counter()
            copy([(f"{sid}-copy", s, p) for s, p in zip(seqs, payloads, strict=True)])
            timings[f"{raw.name} COPY"] = time.perf_counter() - t0
        if rep < 0:
            continue
        for subject, took in timings.items():
            rec.add(
                "append_batch", be, subject, n, rep, ms=_ms(took), events_per_s=round(n / took, 1)
            )
    es = rec.med("events_per_s", "append_batch", be, "eventstore", n)
    rw = rec.med("events_per_s", "append_batch", be, f"{raw.name} executemany", n)
    log(f"{be}: batch append: store {es:,.0f} ev/s, raw executemany {rw:,.0f} ev/s")


def run_store(backend: Backend, settings: Settings, rec: Recorder) -> None:
    """Measures 1-4 on ``backend``."""
    log(f"{backend.name}: eventstore vs raw floor")
    store = EventStore(backend.store_url, upgrade=True)
    raw = backend.make_raw()
    try:
        sess = _Session(store, raw, settings, rec, backend.name)
        for size in settings.append_sizes:
            sess.grow_to(size)
            if size in settings.view_sizes:
                sess.append_other(condensation(sess.head, settings.tail))
                _views(sess, size)
                _decision(sess, size)
                _short_views(sess, size)
            sess.single_appends(size)
        _batch(store, raw, settings, rec, backend.name)
    finally:
        raw.close()
        if "sess" in locals():
            sess.diag.close()
        store.close()
