"""Importing coding-agent transcripts with worker processes (``import_files(jobs=N)``,
``eventstore import --jobs N``) gives what the import in one process gives: the same
sessions, keys, seqs, payloads, times and hash chains, "up to date" on a re-import, only
the new entries of a grown file, and the same errors, with nothing but whole batches
written. On SQLite and Postgres, against the samples under ``tests/data/transcripts``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import EventStore
from eventstore.cli import cli
from eventstore.codec import chain_hash, encode_event
from eventstore.importers import (
    ImportFormatError,
    SessionImport,
    detect_agent_format,
    import_files,
    transcripts_under,
)

DATA = Path(__file__).parent / "data" / "transcripts"
CLAUDE = DATA / "claude-code" / "vibecodingtracker-claude_code.jsonl"
CODEX = DATA / "codex" / "vibecodingtracker-codex.jsonl"


def _files(root: Path) -> list[tuple[Path, str | None]]:
    out: list[tuple[Path, str | None]] = []
    for p in transcripts_under(root):
        fmt = detect_agent_format(p)
        if fmt is not None:
            out.append((p, fmt))
    return out


def _run(
    store: EventStore, files: list[tuple[Path, str | None]], jobs: int, **kw: Any
) -> list[tuple[Path, list[SessionImport] | ImportFormatError]]:
    return list(import_files(store, files, jobs=jobs, **kw))


def _workers(before: Iterable[int] = ()) -> list[int]:
    """This process's children that are running and not among ``before`` (children the
    test process had already, such as a model server another test started): its imports'
    workers."""
    me, old = str(os.getpid()), set(before)
    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if stat[1] == me and stat[0] != "Z" and int(proc.name) not in old:
            found.append(int(proc.name))
    return found


def _reported(done: list[tuple[Path, list[SessionImport] | ImportFormatError]]) -> list[Any]:
    """What an import reported per file, without the session ids (fresh per store)."""
    out: list[Any] = []
    for path, res in done:
        if isinstance(res, Exception):
            out.append((path.name, "error", str(res)))
        else:
            out.append(
                (path.name, [(r.key, r.status, r.events, r.condensations, r.head_seq) for r in res])
            )
    return out


def _log(store: EventStore) -> dict[str, Any]:
    """Every session of the store's tenant by key: its title, metadata, parent's key and
    events (seq, kind, time, payload, token count, id, hash)."""
    sessions = store.list_sessions(limit=None)
    key_of = {s.id: s.key for s in sessions}
    out: dict[str, Any] = {}
    for s in sessions:
        events = [
            (e.seq, e.kind, e.event.created_at, encode_event(e.event), e.token_count, e.id, e.hash)
            for e in store.read(s.id)
            if e.session_id == s.id
        ]
        out[str(s.key)] = {
            "title": s.title,
            "metadata": s.metadata,
            "parent": key_of.get(s.parent_id) if s.parent_id else None,
            "head": s.head_seq,
            "events": events,
        }
    return out


def _assert_same_log(one: dict[str, Any], other: dict[str, Any]) -> None:
    """The same sessions and events; each event's hash equal to the one the other log's
    event id gives over this event's columns (event ids are fresh per import, and every
    hash chains over its id: with the same ids, the chains are byte for byte the same)."""
    assert one.keys() == other.keys()
    for key, a in one.items():
        b = other[key]
        assert (a["title"], a["metadata"], a["parent"], a["head"]) == (
            b["title"], b["metadata"], b["parent"], b["head"],
        ), key  # fmt: skip
        assert [e[:5] for e in a["events"]] == [e[:5] for e in b["events"]], key
        prev = None
        for (seq, kind, created, payload, _, _, _), (*_, b_id, b_hash) in zip(
            a["events"], b["events"], strict=True
        ):
            prev = chain_hash(prev, seq, b_id, kind, created, payload)
            assert prev == b_hash, (key, seq)


@pytest.fixture
def two_stores(db_url: str) -> Any:
    """Two stores on one database (two tenants): one imports in one process, the other
    with workers."""
    a = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    b = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_workers_import_the_samples_as_one_process_does(two_stores: Any) -> None:
    one, many = two_stores
    files = _files(DATA)
    assert len(files) > 10
    here = _run(one, files, 1)
    before = _workers()
    workers = []
    for item in import_files(many, files, jobs=3, batch_size=7):  # several batches a file
        if not workers:
            assert len(_workers(before)) == 2  # the writer is this process
        workers.append(item)
    assert _workers(before) == []
    assert _reported(workers) == _reported(here)
    assert not any(isinstance(r, Exception) for _, r in here)
    _assert_same_log(_log(one), _log(many))
    for s in many.list_sessions(limit=None):
        assert many.verify(s.id).ok, s.key
    # Imported again: every session is up to date, nothing is written.
    again = _run(many, files, 3)
    assert {r.status for _, res in again if isinstance(res, list) for r in res} == {"up to date"}
    assert sum(r.events for _, res in again if isinstance(res, list) for r in res) == 0
    _assert_same_log(_log(one), _log(many))


def test_with_a_thread_running_the_workers_are_fresh_interpreters(two_stores: Any) -> None:
    """A process running threads is not forked (a child would inherit whatever locks
    they hold): its workers start as new interpreters, and import the same."""
    one, many = two_stores
    files = _files(DATA / "claude-code") + _files(DATA / "codex")
    stop = threading.Event()
    busy = threading.Thread(target=stop.wait, daemon=True)
    busy.start()
    before = _workers()
    try:
        workers = []
        for item in import_files(many, files, jobs=3, batch_size=7):
            if not workers:
                kids = _workers(before)
                assert len(kids) == 2
                assert all(b"_serve" in Path(f"/proc/{k}/cmdline").read_bytes() for k in kids)
            workers.append(item)
    finally:
        stop.set()
        busy.join()
    assert _reported(workers) == _reported(_run(one, files, 1))
    _assert_same_log(_log(one), _log(many))


def test_a_grown_file_appends_only_its_new_entries(two_stores: Any, tmp_path: Path) -> None:
    one, many = two_stores
    lines = CLAUDE.read_text(encoding="utf-8").splitlines(keepends=True)
    folder = tmp_path / "t"
    (folder / "claude").mkdir(parents=True)
    (folder / "codex").mkdir()
    grown = folder / "claude" / CLAUDE.name
    grown.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    shutil.copy(CODEX, folder / "codex" / CODEX.name)
    files = _files(folder)
    _run(one, files, 1)
    _run(many, files, 2, batch_size=5)
    before = _log(many)
    grown.write_text("".join(lines), encoding="utf-8")
    here = _run(one, files, 1)
    workers = _run(many, files, 2, batch_size=5)
    assert _reported(workers) == _reported(here)
    statuses = {r.key: r.status for _, res in workers if isinstance(res, list) for r in res}
    assert sorted(statuses.values()) == ["up to date", "updated"]
    after = _log(many)
    _assert_same_log(_log(one), after)
    # The events stored before keep their seqs, ids and hashes.
    for key, old in before.items():
        assert after[key]["events"][: len(old["events"])] == old["events"], key
    assert sum(len(s["events"]) for s in after.values()) > sum(
        len(s["events"]) for s in before.values()
    )


def _oversized(tmp_path: Path) -> tuple[Path, int]:
    """A folder of two transcripts, the second with an event far larger than the rest
    halfway through it; and a size limit only that event is over."""
    folder = tmp_path / "bad"
    folder.mkdir()
    shutil.copy(CODEX, folder / "a-codex.jsonl")
    lines = CLAUDE.read_text(encoding="utf-8").splitlines()
    at = next(
        i
        for i, ln in enumerate(lines)
        if i > len(lines) // 2 and json.loads(ln).get("type") == "user"
    )
    rec = json.loads(lines[at])
    rec["message"] = {"role": "user", "content": "x" * 400_000}
    lines[at] = json.dumps(rec)
    (folder / "b-claude.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder, 200_000


def test_an_event_a_worker_refuses_fails_its_file_as_in_one_process(
    db_url: str, tmp_path: Path
) -> None:
    folder, limit = _oversized(tmp_path)
    files = _files(folder)
    logs, reports = [], []
    for jobs in (1, 3):
        store = EventStore(
            db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True, max_event_bytes=limit
        )
        try:
            done = _run(store, files, jobs, batch_size=10)
            logs.append(_log(store))
            reports.append(_reported(done))
        finally:
            store.close()
    assert reports[0] == reports[1]
    (name, status, message) = reports[1][1]
    assert (name, status) == ("b-claude.jsonl", "error")
    assert "over the limit" in message or "bytes" in message, message
    assert "the events before them were imported" in message
    assert reports[1][0][1][0][1] == "created"  # the other file is imported all the same
    # Whole batches only: the failing file's session holds the batches before the one
    # with the event, and the same events as the import in one process left.
    _assert_same_log(logs[0], logs[1])
    claude = next(v for k, v in logs[1].items() if k.startswith("claude-code:"))
    assert claude["head"] % 10 == 0 and claude["head"] > 0


def test_cli_jobs_reports_a_worker_error_and_exits_1(db_url: str, tmp_path: Path) -> None:
    """A transcript cut short since its import: the worker converting it finds that out
    (the file makes fewer events than its session holds) and the command reports it as
    the import in one process does, imports the other file, and exits 1."""
    folder = tmp_path / "cut"
    folder.mkdir()
    shutil.copy(CODEX, folder / "a-codex.jsonl")
    cut = folder / "b-claude.jsonl"
    lines = CLAUDE.read_text(encoding="utf-8").splitlines(keepends=True)
    runs = []
    for jobs in ("1", "2"):
        tenant = f"t-{uuid.uuid4().hex}"
        cut.write_text("".join(lines[: len(lines) * 2 // 3]), encoding="utf-8")

        def run(*args: str, tenant: str = tenant) -> Any:
            return CliRunner().invoke(cli, ["--db", db_url, "--tenant", tenant, *args])

        first = run("import", str(folder), "--jobs", jobs, "--json")
        assert first.exit_code == 0, first.output
        cut.write_text("".join(lines[: len(lines) // 3]), encoding="utf-8")
        (folder / "a-codex.jsonl").write_text(CODEX.read_text(encoding="utf-8"), encoding="utf-8")
        again = run("import", str(folder), "--jobs", jobs, "--json")
        one = run("import", str(cut), "--jobs", jobs)
        runs.append((first, again, one))
    for _, again, one in runs:
        assert again.exit_code == 1
        assert "failed " in again.stderr and "no longer matches" in again.stderr
        assert [r["status"] for r in json.loads(again.stdout)] == ["up to date"]
        assert one.exit_code == 1 and "no longer matches" in one.output
    (a1, b1, c1), (a2, b2, c2) = runs

    def same(x: Any) -> Any:
        return [{k: v for k, v in r.items() if k != "session_id"} for r in json.loads(x.stdout)]

    assert same(a1) == same(a2) and same(b1) == same(b2)
    assert _no_ids(b1.stderr) == _no_ids(b2.stderr)


def _no_ids(text: str) -> str:
    return re.sub(r"session [0-9a-f-]{36}", "session ID", text)


def test_an_opencode_database_among_the_files(two_stores: Any, tmp_path: Path) -> None:
    """The database (many sessions) is imported by the writing process, between the files
    the workers convert before and after it."""
    from tests.test_importers_opencode_db import build_db

    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(CODEX, folder / "a.jsonl")
    build_db(folder / "b-opencode.db")
    shutil.copy(CLAUDE, folder / "c.jsonl")
    files = _files(folder)
    assert [p.name for p, _ in files] == ["a.jsonl", "b-opencode.db", "c.jsonl"]
    one, many = two_stores
    here = _run(one, files, 1)
    workers = _run(many, files, 3, batch_size=5)
    assert _reported(workers) == _reported(here)
    assert len(here[1][1]) > 1  # type: ignore[arg-type]  # several sessions from the database
    _assert_same_log(_log(one), _log(many))


def test_jobs_must_be_positive(store: EventStore) -> None:
    with pytest.raises(ValueError, match="jobs"):
        list(import_files(store, [(CLAUDE, None)], jobs=0))
