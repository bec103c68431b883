"""Administrative purge: content goes, the chain stays provable, tampering still shows."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import PG_IS_CITUS
from sqlalchemy import text

from eventstore import (
    AsyncEventStore,
    Condensation,
    Custom,
    EventStore,
    FilePart,
    InvalidEventError,
    Message,
    NotFoundError,
    Purge,
    ToolCallPart,
    ToolResultPart,
)
from eventstore.events import PURGED
from eventstore.records import VerifyReport
from eventstore.schema import trigger_ddl

SECRET = "alice@example.com lives at 12 Secret Lane"


def _session(store: EventStore) -> str:
    sid = store.create_session(user_id="alice").id
    call = ToolCallPart(id="c1", name="lookup", arguments='{"email": "alice@example.com"}')
    store.append(
        sid,
        [
            Message.system("You are a support bot."),
            Message.user(SECRET),
            Message(role="assistant", parts=[call]),
            Message(
                role="tool",
                parts=[ToolResultPart(tool_call_id="c1", name="lookup", output=SECRET)],
            ),
            Message(
                role="user",
                parts=[FilePart(media_type="image/png", data=b"\x89PNG" + SECRET.encode() * 3000)],
            ),
            Custom(name="note", data={"who": SECRET}),
            Message.assistant("Done: " + SECRET),
        ],
    )
    return sid


def _raw_payloads(store: EventStore, sid: str) -> list[str]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT payload FROM events WHERE session_id = :s ORDER BY seq"), {"s": sid}
        )
        return [r.payload for r in rows]


def _blob_count(store: EventStore) -> int:
    with store.engine.connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM blobs WHERE tenant = :t"), {"t": store.tenant}
        ).scalar_one()


def test_purge_removes_content_and_verify_still_proves_the_chain(store: EventStore) -> None:
    sid = _session(store)
    before = store.verify(sid)
    assert before.ok and before.purged == 0
    assert _blob_count(store) == 1  # the attachment went to the blob table
    record = store.purge(sid, reason="erasure request #7")
    assert isinstance(record, Purge)
    assert (record.from_seq, record.to_seq, record.events) == (1, 7, 7)
    assert store.head(sid) == 8
    assert all(SECRET not in p and "alice@example.com" not in p for p in _raw_payloads(store, sid))
    assert _blob_count(store) == 0
    report = store.verify(sid)
    assert report.ok, report.problems
    assert report.purged == 7 and report.events == 8
    # The shape stays: roles, tool ids and names, so the view is still a valid context.
    messages = store.view(sid).to_messages()
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert messages[2]["tool_calls"][0]["id"] == "c1"
    assert messages[2]["tool_calls"][0]["function"]["name"] == "lookup"
    assert messages[3]["tool_call_id"] == "c1" and messages[3]["content"] == PURGED
    assert SECRET not in str(messages)
    # Search no longer finds it.
    store.index_search()
    assert store.search("Secret Lane", session_id=sid) == []
    # Nothing left: a second purge writes nothing.
    assert store.purge(sid) is None and store.head(sid) == 8


def test_partial_purge_keeps_the_rest_and_appends_continue(store: EventStore) -> None:
    sid = _session(store)
    record = store.purge(sid, through_seq=4)
    assert record is not None and (record.from_seq, record.to_seq) == (1, 4)
    store.append(sid, [Message.user("after the purge")])
    texts = [m.get("content") for m in store.view(sid).to_messages()]
    assert "Done: " + SECRET in texts and "after the purge" in texts
    later = store.purge(sid, through_seq=6)
    assert later is not None and (later.from_seq, later.to_seq, later.events) == (5, 6, 2)
    report = store.verify(sid)
    assert report.ok, report.problems
    assert report.purged == 6


def test_a_deleted_session_can_be_purged_and_audited(store: EventStore) -> None:
    sid = _session(store)
    store.delete_session(sid)
    assert store.purge(sid, reason="retention: 30 days") is not None
    report = store.verify(sid)
    assert report.ok and report.purged == 7


def _tamper(store: EventStore, sql: str, **params: object) -> None:
    """Change a stored row the way an attacker with database access would (guards off)."""
    with store.engine.begin() as conn:
        if store.dialect == "postgresql":
            if PG_IS_CITUS:  # Citus changes a distributed table's triggers only when told
                conn.execute(text("SET LOCAL citus.enable_unsafe_triggers = on"))
            conn.execute(text("ALTER TABLE events DISABLE TRIGGER events_append_only"))
        else:
            conn.execute(text("DROP TRIGGER events_append_only_update"))
        conn.execute(text(sql), params)
        if store.dialect == "postgresql":
            conn.execute(text("ALTER TABLE events ENABLE TRIGGER events_append_only"))
        else:
            (guard,) = [
                ddl
                for ddl in trigger_ddl("sqlite")
                if ddl.startswith("CREATE TRIGGER events_append_only_update")
            ]
            conn.execute(text(guard))


def _problems(report: VerifyReport) -> str:
    return "\n".join(report.problems)


def test_content_put_back_into_a_purged_event_is_caught(store: EventStore) -> None:
    sid = _session(store)
    store.purge(sid, through_seq=2)
    payload = Message.user("forged content").model_dump_json(exclude_none=True)
    _tamper(
        store,
        "UPDATE events SET payload = :p WHERE session_id = :s AND seq = 2",
        p=payload,
        s=sid,
    )
    report = store.verify(sid)
    assert not report.ok
    assert "holds content again" in _problems(report) or "do not match" in _problems(report)


def test_a_reshaped_purged_event_is_caught(store: EventStore) -> None:
    """A redacted payload of another shape (another tool name) breaks the record's digest."""
    sid = _session(store)
    store.purge(sid, through_seq=3)
    (payload,) = [p for p in _raw_payloads(store, sid)[2:3]]
    _tamper(
        store,
        "UPDATE events SET payload = :p WHERE session_id = :s AND seq = 3",
        p=payload.replace("lookup", "delete"),
        s=sid,
    )
    report = store.verify(sid)
    assert not report.ok and "do not match" in _problems(report)


def test_a_forged_purge_of_unpurged_content_is_caught(store: EventStore) -> None:
    """Redacting an event without a purge record is tampering, not a purge."""
    sid = _session(store)
    store.purge(sid, through_seq=2)
    redacted = _raw_payloads(store, sid)[1]
    _tamper(
        store,
        "UPDATE events SET payload = :p, size = :n WHERE session_id = :s AND seq = 7",
        p=redacted.replace('"user"', '"assistant"'),
        n=len(redacted),
        s=sid,
    )
    report = store.verify(sid)
    assert not report.ok and "hash mismatch" in _problems(report)


def test_purge_arguments_are_checked(store: EventStore) -> None:
    sid = _session(store)
    for bad in (0, 99, -1):
        with pytest.raises(InvalidEventError, match="through_seq"):
            store.purge(sid, through_seq=bad)
    with pytest.raises(InvalidEventError, match="through_seq"):
        store.purge(sid, through_seq="3")  # type: ignore[arg-type]
    # Purge records are written by purge() only.
    with pytest.raises(InvalidEventError, match="purge"):
        store.append(sid, [Purge(from_seq=1, to_seq=1, events=1, hashes="x", redacted="y")])


def test_a_fork_purges_only_its_own_events(store: EventStore) -> None:
    sid = _session(store)
    fork = store.fork(sid, 3).id
    store.append(fork, [Message.user("fork secret")])
    with pytest.raises(InvalidEventError, match="forked from"):
        store.purge(fork, through_seq=2)
    assert store.purge(fork) is not None  # seq 4, its own
    assert store.verify(fork).ok
    # The parent's purge reaches the rows the fork shares, and both still verify.
    store.purge(sid)
    for s in (sid, fork):
        report = store.verify(s)
        assert report.ok, report.problems


def test_recorded_views_over_purged_content_are_unverifiable_not_tampered(
    store: EventStore,
) -> None:
    sid = _session(store)
    view = store.view(sid)
    store.record_llm_call(sid, view, model="gpt-4o-mini")
    store.append(sid, [Condensation(forgotten_from=3, forgotten_to=4, summary=SECRET)])
    store.purge(sid)
    report = store.verify(sid)
    assert report.ok, report.problems
    assert report.unverifiable_views == 1


def test_async_purge(db_url: str) -> None:
    async def main() -> None:
        async with AsyncEventStore(db_url, tenant="purge-async", upgrade=True) as store:
            sid = (await store.create_session()).id
            await store.append(sid, [Message.user(SECRET)])
            record = await store.purge(sid)
            assert record is not None and record.events == 1
            assert (await store.verify(sid)).purged == 1

    asyncio.run(main())


def test_a_purge_takes_no_table_lock_and_changes_no_schema(db_url: str) -> None:
    """A purge switched the guard off with DDL, which locks the whole events table: it
    waited for any write in progress, and every other tenant's appends waited behind it."""
    import uuid

    store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True, lock_timeout_ms=1000)
    other = store.with_tenant(f"o-{uuid.uuid4().hex}")
    try:
        sid = _session(store)
        busy = other.create_session().id
        other.append(busy, [Message.user("before")])
        with store.engine.connect() as conn:
            version = conn.exec_driver_sql(
                "PRAGMA schema_version" if store.dialect == "sqlite" else "SELECT 0"
            ).scalar()
        with store.engine.connect() as reader:
            # Another tenant's write transaction in progress (Postgres), a long-running
            # reader (SQLite, where writers take turns anyway).
            with reader.begin():
                if store.dialect == "postgresql":
                    reader.execute(text("LOCK TABLE events IN ROW EXCLUSIVE MODE"))
                reader.execute(text("SELECT count(*) FROM events")).scalar()
                record = store.purge(sid, reason="erasure request")
                assert record is not None and record.events == 7
                other.append(busy, [Message.user("during")])
        with store.engine.connect() as conn:
            after = conn.exec_driver_sql(
                "PRAGMA schema_version" if store.dialect == "sqlite" else "SELECT 0"
            ).scalar()
        assert after == version  # no trigger was dropped or created
        assert store.verify(sid).ok and other.verify(busy).ok
        # The guard still holds for everything but a purge's own payload changes.
        with pytest.raises(Exception, match="append-only"):
            with store.engine.begin() as conn:
                conn.execute(
                    text("UPDATE events SET payload = '{}' WHERE session_id = :s"), {"s": busy}
                )
    finally:
        store.close()


def test_the_purge_pass_covers_its_own_session_and_payloads_only(db_url: str) -> None:
    import uuid

    store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        sid = _session(store)
        victim = _session(store)
        with pytest.raises(Exception, match="append-only"):
            with store.engine.begin() as conn:
                if store.dialect == "postgresql":
                    conn.exec_driver_sql(f"SET LOCAL eventstore.purging = '{sid}'")
                else:
                    conn.execute(text("INSERT INTO purge_marks VALUES (:s)"), {"s": sid})
                # Another session's rows, while one session is being purged.
                conn.execute(
                    text("UPDATE events SET payload = '{}' WHERE session_id = :s"), {"s": victim}
                )
        with pytest.raises(Exception, match="append-only"):
            with store.engine.begin() as conn:
                if store.dialect == "postgresql":
                    conn.exec_driver_sql(f"SET LOCAL eventstore.purging = '{sid}'")
                else:
                    conn.execute(text("INSERT INTO purge_marks VALUES (:s)"), {"s": sid})
                conn.execute(text("UPDATE events SET hash = 'x' WHERE session_id = :s"), {"s": sid})
        assert store.verify(victim).ok and store.verify(sid).ok
    finally:
        store.close()


def test_an_erasure_purge_erases_the_session_fields_too(store: EventStore) -> None:
    sid = store.create_session(
        user_id="alice@example.com",
        title="Alice's refund",
        metadata={"email": "alice@example.com"},
        key="ticket-alice-42",
    ).id
    store.append(sid, [Message.user(SECRET)])
    # A retention purge leaves the fields.
    store.purge(sid)
    assert store.get_session(sid).title == "Alice's refund"
    # An erasure request takes them, even with no event left to purge.
    assert store.purge(sid, session_fields=True) is None
    s = store.get_session(sid)
    assert (s.title, s.metadata, s.key, s.user_id) == (None, {}, None, None)
    with store.engine.connect() as conn:
        row = conn.execute(text("SELECT * FROM sessions WHERE id = :s"), {"s": sid}).one()
        assert "alice" not in repr(tuple(row)).lower()
    with pytest.raises(NotFoundError):
        store.get_session_by_key("ticket-alice-42", user_id="alice@example.com")
    # The name is free again, and the log still proves itself.
    assert store.create_session(user_id="alice@example.com", key="ticket-alice-42").id != sid
    assert store.verify(sid).ok
    other = store.create_session(title="keep me", key="k2").id
    store.append(other, [Message.user("x")])
    store.purge(other, session_fields=True)
    assert store.get_session(other).title is None


@pytest.mark.parametrize("how", ["same id elsewhere", "new_id", "new_ids"])
def test_the_export_of_a_purged_session_imports_as_the_purged_log(
    db_url: str, tmp_path: Any, how: str
) -> None:
    import io
    import uuid

    from eventstore.importers import ImportFormatError, export_jsonl, import_jsonl

    store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        sid = _session(store)
        store.purge(sid, through_seq=4, reason="erasure")
        store.append(sid, [Message.user("after the purge")])
        store.purge(sid, through_seq=7)
        buf = io.StringIO()
        export_jsonl(store, sid, buf)
        text_ = buf.getvalue()
        if how == "new_ids":  # fresh ids: back into the database it came from
            target = store
        else:  # the same event ids: into another database (a restore from backup)
            target = EventStore(f"sqlite:///{tmp_path / 'restore.db'}", tenant=store.tenant)
        restored = import_jsonl(
            target, io.StringIO(text_), new_id=how == "new_id", new_ids=how == "new_ids"
        )
        assert (restored.id == sid) == (how == "same id elsewhere")
        try:
            report = target.verify(restored.id)
            assert report.ok, report.problems[:3]
            assert report.purged == 7
            assert SECRET not in json.dumps(
                [e.event.model_dump(mode="json") for e in target.read(restored.id)]
            )
            if how != "new_ids":  # the same chain, hash for hash
                assert report.head_hash == store.verify(sid).head_hash
        finally:
            if target is not store:
                target.close()
        # An edited purged line is still caught.
        lines = text_.splitlines()
        tampered = json.loads(lines[2])
        tampered["payload"]["parts"][0]["text"] = "[purged] but not really"
        lines[2] = json.dumps(tampered)
        with pytest.raises(ImportFormatError, match="hash mismatch"):
            import_jsonl(store, io.StringIO("\n".join(lines) + "\n"), new_id=True)
    finally:
        store.close()


def _long_session(store: EventStore, n: int) -> str:
    sid = store.create_session().id
    for i in range(0, n, 1000):
        store.append(sid, [Message.user(f"{SECRET} number {i + j}") for j in range(1000)])
    return sid


def test_other_writers_wait_briefly_during_a_large_purge(db_url: str) -> None:
    """A purge rewrote every event in one transaction: on SQLite, which has one writer at a
    time, every other writer of the database (another tenant here) waited for all of it."""
    import threading
    import time
    import uuid

    store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    other = store.with_tenant(f"o-{uuid.uuid4().hex}")
    try:
        sid = _long_session(store, 4000)
        busy = other.create_session().id
        stop = threading.Event()
        waits: list[float] = []

        def write() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                other.append(busy, [Message.user("meanwhile")])
                waits.append(time.perf_counter() - t)
                time.sleep(0.005)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            time.sleep(0.1)
            start = time.perf_counter()
            record = store.purge(sid)
            took = time.perf_counter() - start
        finally:
            stop.set()
            writer.join()
        assert record is not None and record.events == 4000
        # Each wait is at most one short erasing transaction, not the whole purge.
        assert max(waits) < max(0.5, took / 4), (max(waits), took)
        report = store.verify(sid, fingerprints=False)
        assert report.ok and report.purged == 4000 and report.purge_pending == 0
        assert other.verify(busy).ok
    finally:
        store.close()


_KILLED_PURGE = """
import os, signal, sys
from eventstore import EventStore
from eventstore._features import purge

erases = 0
original = purge.erase

def erase(conn, *args):
    global erases
    erases += 1
    original(conn, *args)
    if erases == 3:  # inside the third erasing transaction, before its commit
        os.kill(os.getpid(), signal.SIGKILL)

purge.erase = erase
purge.CHUNK = 100
EventStore(sys.argv[1], tenant=sys.argv[2]).purge(sys.argv[3], reason="erasure")
"""


def test_a_purge_killed_between_its_steps_is_reported_and_completed(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 after the purge record committed and some events were erased: ``verify``
    proves the chain and counts what is left, the next open completes the erasure."""
    import subprocess
    import sys
    import uuid

    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant, upgrade=True) as store:
        sid = _long_session(store, 1000)
        store.append(
            sid,
            [
                Message(
                    role="user",
                    parts=[
                        FilePart(media_type="image/png", data=b"\x89PNG" + SECRET.encode() * 3000)
                    ],
                )
            ],
        )
        head = store.head(sid)
        assert store.search(SECRET.split()[2])
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_PURGE, db_url, tenant, sid], capture_output=True
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]

    # A store that cannot write yet (as a read-only file would be): verify reports.
    monkeypatch.setattr(EventStore, "_finish_interrupted_purges", lambda self: None)
    with EventStore(db_url, tenant=tenant) as store:
        assert store.head(sid) == head + 1  # the record committed
        report = store.verify(sid)
        assert report.ok, report.problems
        assert report.purged == 200 and report.purge_pending == 801
        assert sum(SECRET in p for p in _raw_payloads(store, sid)) == 800
        # The unerased events are still proven by their hashes.
        _tamper(
            store,
            "UPDATE events SET payload = replace(payload, 'Secret', 'Public') "
            "WHERE session_id = :s AND seq = 500",
            s=sid,
        )
        assert "seq 500: hash mismatch" in _problems(store.verify(sid))
        _tamper(
            store,
            "UPDATE events SET payload = replace(payload, 'Public', 'Secret') "
            "WHERE session_id = :s AND seq = 500",
            s=sid,
        )
        assert store.verify(sid).ok
    from click.testing import CliRunner

    from eventstore.cli import cli

    shown = CliRunner().invoke(cli, ["--db", db_url, "--tenant", tenant, "verify", sid])
    assert shown.exit_code == 0, shown.output
    assert "801 events a purge record lists still hold their content" in shown.output
    monkeypatch.undo()

    # The next writable open finishes it, once.
    with EventStore(db_url, tenant=tenant) as store:
        report = store.verify(sid)
        assert report.ok and report.purged == 1001 and report.purge_pending == 0
        assert store.head(sid) == head + 1
        assert not any(SECRET in p for p in _raw_payloads(store, sid))
        assert store.search(SECRET.split()[2]) == []
        assert _blob_count(store) == 0
        assert store.complete_purges() == 0
        with store.engine.connect() as conn:
            left = conn.execute(
                text("SELECT count(*) FROM purge_pending WHERE session_id = :s"), {"s": sid}
            ).scalar_one()
        assert left == 0
