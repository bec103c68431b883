"""Optimistic concurrency under real contention: threads and a separate process.

Writers loop read-head-then-append with ``expected_seq``; the store must hand every seq to
exactly one writer, never leave a gap, and report every lost race as a typed
:class:`ConflictError` carrying the head the loser should retry from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import row_count

from eventstore import ConflictError, EventStore, Message

ROOT = Path(__file__).resolve().parent.parent


class _Tally:
    """What the writers saw, shared between threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.written: dict[int, str] = {}
        self.duplicates: list[int] = []
        self.conflicts = 0
        self.bad_conflicts: list[str] = []
        self.unexpected: list[BaseException] = []

    def won(self, seq: int, tag: str) -> None:
        with self.lock:
            if seq in self.written:
                self.duplicates.append(seq)
            self.written[seq] = tag

    def lost(self, err: ConflictError, expected: int) -> None:
        with self.lock:
            self.conflicts += 1
            if err.current_seq <= expected or err.expected_seq != expected:
                self.bad_conflicts.append(str(err))


def _writer(
    store: EventStore, sid: str, name: str, count: int, tally: _Tally, fresh_read: bool
) -> Callable[[], None]:
    def run() -> None:
        try:
            head = store.head(sid)
            done = 0
            while done < count:
                if fresh_read:
                    head = store.head(sid)
                tag = f"{name}-{done}"
                try:
                    (seq,) = store.append(sid, [Message.user(tag)], expected_seq=head)
                except ConflictError as err:
                    tally.lost(err, head)
                    head = err.current_seq  # retry from the head the error reports
                    continue
                assert seq == head + 1
                tally.won(seq, tag)
                head = seq
                done += 1
        except BaseException as exc:  # noqa: BLE001 - every escape is a failure
            with tally.lock:
                tally.unexpected.append(exc)

    return run


def _check_log(store: EventStore, sid: str, tally: _Tally, total: int) -> None:
    assert tally.unexpected == [], [f"{type(e).__module__}.{e!r}" for e in tally.unexpected]
    assert tally.duplicates == []
    assert tally.bad_conflicts == []
    assert sorted(tally.written) == list(range(1, total + 1))
    assert store.head(sid) == total
    assert row_count(store, "events", sid) == total
    texts = {e.seq: e.event.text for e in store.read(sid)}  # type: ignore[union-attr]
    assert texts == tally.written
    report = store.verify(sid, fingerprints=False)
    assert report.ok, report.problems[:5]
    assert report.events == total


_PROCESS_WRITER = textwrap.dedent(
    """
    import json, sys
    from eventstore import ConflictError, EventStore, Message

    url, tenant, sid, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = EventStore(url, tenant=tenant)
    written, conflicts, head, done = {}, 0, store.head(sid), 0
    print("ready", flush=True)
    sys.stdin.readline()  # start together with the threads
    while done < count:
        head = store.head(sid)
        tag = f"proc-{done}"
        try:
            (seq,) = store.append(sid, [Message.user(tag)], expected_seq=head)
        except ConflictError as err:
            assert err.current_seq > head, (err.current_seq, head)
            conflicts += 1
            continue
        written[seq] = tag
        done += 1
    store.close()
    print(json.dumps({"written": written, "conflicts": conflicts}), flush=True)
    """
)


def _start_process(tmp_path: Path, store: EventStore, sid: str, count: int) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(_PROCESS_WRITER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), store.url, store.tenant, sid, str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", line + (proc.stderr.read() if proc.stderr else "")
    return proc


def test_threads_and_a_process_race_on_one_session(store: EventStore, tmp_path: Path) -> None:
    threads_n, per_thread, per_proc = 8, 50, 60
    s = store.create_session()
    proc = _start_process(tmp_path, store, s.id, per_proc)
    tally = _Tally()
    threads = [
        threading.Thread(target=_writer(store, s.id, f"t{i}", per_thread, tally, i % 2 == 0))
        for i in range(threads_n)
    ]
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    for seq, tag in result["written"].items():
        tally.won(int(seq), tag)
    total = threads_n * per_thread + per_proc
    _check_log(store, s.id, tally, total)
    # The race was real: writers lost and retried, and the process interleaved with threads.
    assert tally.conflicts + result["conflicts"] > 0
    proc_seqs = sorted(int(k) for k in result["written"])
    assert proc_seqs[0] < total - per_proc or proc_seqs[-1] > per_proc


@pytest.mark.parametrize(
    "per_writer", [300, pytest.param(2500, marks=pytest.mark.slow, id="10k")], ids=str
)
def test_single_event_appends_race(db_url: str, per_writer: int) -> None:
    # Four writers race single-event appends with expected_seq and retry on conflict.
    # The 10,000-event run takes about a minute on Postgres on a small machine (every
    # append is a handful of round trips), so it carries the ``slow`` mark; on SQLite, which
    # fsyncs every commit (synchronous=FULL), the 300-per-writer run is the one that runs.
    # On Postgres commits skip the WAL flush wait (a session setting that changes
    # durability, not visibility or locking) so the race is about contention, not fsync.
    tenant = f"t-{uuid.uuid4().hex}"
    writers = 4
    if db_url.startswith("sqlite"):
        if per_writer > 300:
            pytest.skip("the 10,000-event race runs on Postgres")
        store = EventStore(db_url, tenant=tenant)
    else:
        store = EventStore(
            db_url,
            tenant=tenant,
            pool_size=writers,
            connect_args={"options": "-c synchronous_commit=off"},
        )
    with store:
        s = store.create_session()
        tally = _Tally()
        threads = [
            threading.Thread(target=_writer(store, s.id, f"w{i}", per_writer, tally, False))
            for i in range(writers)
        ]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        elapsed = time.perf_counter() - started
        _check_log(store, s.id, tally, writers * per_writer)
        assert tally.conflicts > 0
        print(
            f"{store.dialect}: {writers * per_writer} appends in {elapsed:.1f}s, "
            f"{tally.conflicts} conflicts"
        )


def test_appends_without_expected_seq_never_collide(store: EventStore) -> None:
    s = store.create_session()
    errors: list[BaseException] = []
    got: list[list[int]] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        try:
            for j in range(20):
                seqs = store.append(s.id, [Message.user(f"{i}-{j}-a"), Message.user(f"{i}-{j}-b")])
                with lock:
                    got.append(seqs)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # Each batch is contiguous and batches never interleave.
    assert all(b == a + 1 for a, b in got)
    assert sorted(x for pair in got for x in pair) == list(range(1, 241))
    events = list(store.read(s.id))
    for a, b in zip(events[::2], events[1::2], strict=True):
        assert a.event.text[:-1] == b.event.text[:-1]  # type: ignore[union-attr]
    assert store.verify(s.id, fingerprints=False).ok


def test_concurrent_retries_with_one_idempotency_key_write_once(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, [Message.user("before")])
    results: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def run() -> None:
        try:
            barrier.wait()
            r = store.append_result(
                s.id, [Message.user("once"), Message.user("twice?")], idempotency_key="k"
            )
            results.append(r)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {tuple(r.seqs) for r in results} == {(2, 3)}
    assert sorted(r.replayed for r in results) == [False] + [True] * 5
    assert row_count(store, "events", s.id) == 3


def test_conflict_error_carries_the_head(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, [Message.user("a"), Message.user("b")])
    with pytest.raises(ConflictError) as info:
        store.append(s.id, [Message.user("c")], expected_seq=1)
    err = info.value
    assert (err.session_id, err.expected_seq, err.current_seq) == (s.id, 1, 2)
    assert "expected_seq=2" in str(err)
    with pytest.raises(ConflictError) as info:
        store.append(s.id, [Message.user("c")], expected_seq=5)
    assert info.value.current_seq == 2
    assert row_count(store, "events", s.id) == 2
