"""OpenCode's SQLite database (``opencode.db``): every session in it, the same events as its
storage files make, read-only and streamed, on SQLite and Postgres stores.

No OpenCode database is public under a permissive licence, so each test builds one: the
tables with OpenCode's DDL (``tests/data/transcripts/opencode/db/schema.sql``, restated from
OpenCode's table definitions, see the note there), filled from the storage sample the way
OpenCode moves its storage files into the database (each row's ``data`` is the file's JSON
without the ids the columns hold). The events are checked against the storage import, which
has its own checks against the raw files.
"""

from __future__ import annotations

import json
import sqlite3
import tracemalloc
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import Condensation, EventStore, Message, Prune
from eventstore.cli import cli
from eventstore.importers import (
    ImportFormatError,
    detect_agent_format,
    detect_format,
    import_transcript,
    load_transcripts,
    transcripts_under,
)
from eventstore.importers.opencode import numbered
from eventstore.importers.opencode_db import DbSession, connect
from tests.test_coding_importers import event_payloads
from tests.test_importers_opencode import CHILD_ID, MAIN_ID, SESSION, STORAGE

SCHEMA = Path(__file__).parent / "data" / "transcripts" / "opencode" / "db" / "schema.sql"


def _schema(first: bool) -> str:
    """OpenCode's DDL: the first schema alone, or with the columns added since."""
    text = SCHEMA.read_text()
    return text.split("-- part 2")[0] if first else text


def _message_files(sid: str) -> list[Path]:
    return sorted((STORAGE / "message" / sid).glob("*.json"))


def _insert_messages(conn: sqlite3.Connection, files: list[Path]) -> None:
    """Messages and their parts as OpenCode moves them into its database."""
    for file in files:
        info = json.loads(file.read_text())
        mid, sid = info.pop("id"), info.pop("sessionID")
        created = info["time"]["created"]
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (mid, sid, created, created, json.dumps(info)),
        )
        for pfile in sorted((STORAGE / "part" / mid).glob("*.json")):
            part = json.loads(pfile.read_text())
            pid = part.pop("id")
            del part["messageID"], part["sessionID"]
            conn.execute(
                "INSERT INTO part (id, message_id, session_id, time_created, time_updated, "
                "data) VALUES (?, ?, ?, ?, ?, ?)",
                (pid, mid, sid, created, created, json.dumps(part)),
            )


def build_db(path: Path, *, first: bool = False, held: int = 0) -> Path:
    """An OpenCode database holding the storage sample (``held``: the main session's last
    messages left out, for a test to add later)."""
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(_schema(first))
        conn.execute("PRAGMA journal_mode = WAL")
        sessions = [json.loads(p.read_text()) for p in (STORAGE / "session").glob("*/*.json")]
        for s in sessions:
            conn.execute(
                "INSERT OR IGNORE INTO project (id, worktree, time_created, time_updated, "
                "sandboxes) VALUES (?, ?, ?, ?, '[]')",
                (s["projectID"], s["directory"], s["time"]["created"], s["time"]["created"]),
            )
            conn.execute(
                "INSERT INTO session (id, project_id, parent_id, slug, directory, title, "
                "version, time_created, time_updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    s["id"],
                    s["projectID"],
                    s.get("parentID"),
                    s["slug"],
                    s["directory"],
                    s["title"],
                    s["version"],
                    s["time"]["created"],
                    s["time"]["updated"],
                ),
            )
        main = _message_files(MAIN_ID)
        _insert_messages(conn, main[: len(main) - held] + _message_files(CHILD_ID))
        conn.commit()
    return path


@pytest.fixture(params=["first", "current"])
def opencode_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The sample as a database of OpenCode's first schema and of its current one."""
    return build_db(tmp_path / "opencode.db", first=request.param == "first")


def _storage_events(tmp_path: Path, sid: str) -> list[Any]:
    other = EventStore(f"sqlite:///{tmp_path / 'storage-import.db'}")
    try:
        file = next((STORAGE / "session").glob(f"*/{sid}.json"))
        [r] = import_transcript(other, file)
        return event_payloads(other, r.session_id)
    finally:
        other.close()


def test_each_session_makes_the_events_its_storage_files_make(
    store: EventStore, opencode_db: Path, tmp_path: Path
) -> None:
    rows = import_transcript(store, opencode_db)
    assert [r.key for r in rows] == [f"opencode:{MAIN_ID}", f"opencode:{CHILD_ID}"]
    assert all(r.status == "created" and r.format == "opencode" for r in rows)
    for r in rows:
        sid = r.key.split(":", 1)[1]
        assert event_payloads(store, r.session_id) == _storage_events(tmp_path, sid)
    main, child = (store.get_session(r.session_id) for r in rows)
    assert rows[0].condensations == 1 and rows[0].events == 15
    assert main.title == "Add a --verbose flag to the CLI"
    assert child.metadata["parentID"] == MAIN_ID and "parentID" not in main.metadata
    assert child.metadata["import"]["key"] == f"opencode:{CHILD_ID}"
    # Every event says where it came from: the message (its row id) and its place.
    for stored in store.read(main.id):
        event = stored.event
        if isinstance(event, Message):
            src = event.provider_metadata["source"]
            assert src["file"] == f"{MAIN_ID}.json" and 1 <= src["line"] <= src["upto"] <= 8
            row = event.provider_metadata["opencode"].get("message") or {
                "id": event.provider_metadata["opencode"]["message_id"]
            }
            assert row["id"].startswith("msg_")


def test_detection_and_the_explicit_format_agree(opencode_db: Path, tmp_path: Path) -> None:
    assert detect_agent_format(opencode_db) == detect_format(opencode_db) == "opencode"
    a = EventStore(f"sqlite:///{tmp_path / 'a.db'}")
    b = EventStore(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        ra = import_transcript(a, opencode_db)
        rb = import_transcript(b, opencode_db, "opencode")
        for x, y in zip(ra, rb, strict=True):
            assert event_payloads(a, x.session_id) == event_payloads(b, y.session_id)
        transcripts = load_transcripts(opencode_db)
        assert [t.metadata["import"]["key"] for t in transcripts] == [r.key for r in ra]
        assert [len(t.events) for t in transcripts] == [r.events for r in ra]
    finally:
        a.close()
        b.close()


def test_an_sqlite_file_that_is_not_opencodes_is_a_clear_error(
    store: EventStore, tmp_path: Path
) -> None:
    other = tmp_path / "notes.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE session (id text, name text)")
    own = tmp_path / "events.db"
    EventStore(f"sqlite:///{own}").close()  # the store's own file is not OpenCode's either
    for path in (other, own):
        assert detect_agent_format(path) is None
        for fmt in (None, "opencode"):
            with pytest.raises(ImportFormatError, match="an SQLite database, but not OpenCode"):
                import_transcript(store, path, fmt)
        with pytest.raises(ImportFormatError, match="not OpenCode's"):
            detect_format(path)
    lacking = "session has no project_id, time_created, time_updated"
    with pytest.raises(ImportFormatError, match=lacking):
        import_transcript(store, other)
    args = ["--db", f"sqlite:///{tmp_path / 'cli.db'}", "import", str(other)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and "not OpenCode's" in result.output
    assert store.list_sessions(limit=None) == []


def test_reimport_adds_nothing_and_a_longer_database_only_its_new_messages(
    store: EventStore, tmp_path: Path
) -> None:
    db = build_db(tmp_path / "opencode.db", held=4)
    rows = import_transcript(store, db)
    assert [(r.status, r.events, r.condensations) for r in rows] == [
        ("created", 10, 0),
        ("created", 4, 0),
    ]
    hashes = [s.hash for s in store.read(rows[0].session_id)]
    again = import_transcript(store, db)
    assert [(r.status, r.events) for r in again] == [("up to date", 0)] * 2
    with closing(sqlite3.connect(db)) as conn:  # OpenCode goes on writing
        _insert_messages(conn, _message_files(MAIN_ID)[-4:])
        conn.commit()
    grown = import_transcript(store, db)
    assert [(r.status, r.events, r.condensations) for r in grown] == [
        ("updated", 5, 1),
        ("up to date", 0, 0),
    ]
    assert [s.hash for s in store.read(rows[0].session_id)][: len(hashes)] == hashes
    assert event_payloads(store, rows[0].session_id) == _storage_events(tmp_path, MAIN_ID)


def test_a_session_opencode_moved_into_its_database_continues_its_storage_import(
    store: EventStore, tmp_path: Path
) -> None:
    [before] = import_transcript(store, SESSION)
    db = build_db(tmp_path / "opencode.db")
    main, child = import_transcript(store, db)
    assert (main.session_id, main.status, main.events) == (before.session_id, "up to date", 0)
    assert child.status == "created"


def _prune_row(conn: sqlite3.Connection, part_id: str = "prt_19b76dd7148027Mx39") -> None:
    """OpenCode's prune of a tool's output: its part row rewritten in place, stamped."""
    (data,) = conn.execute("SELECT data FROM part WHERE id = ?", (part_id,)).fetchone()
    part = json.loads(data)
    part["state"]["time"]["compacted"] = 1767225790000
    conn.execute("UPDATE part SET data = ? WHERE id = ?", (json.dumps(part), part_id))
    conn.commit()


def test_a_prune_opencode_stamped_on_a_part_row_appends_one_prune(
    store: EventStore, tmp_path: Path
) -> None:
    db = build_db(tmp_path / "opencode.db")
    first, _ = import_transcript(store, db)
    with closing(sqlite3.connect(db)) as conn:
        _prune_row(conn)
    again, _ = import_transcript(store, db)
    assert (again.status, again.events) == ("updated", 1)
    last = list(store.read(first.session_id))[-1].event
    assert isinstance(last, Prune) and last.strategy == "opencode.prune"
    events = [s.event for s in store.read(first.session_id)]
    assert sum(isinstance(e, Condensation) for e in events) == 1


def test_the_file_is_read_only_while_opencode_writes_it(store: EventStore, tmp_path: Path) -> None:
    db = build_db(tmp_path / "opencode.db", held=4)
    writer = sqlite3.connect(db)  # OpenCode, running: its last messages sit in the WAL
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        _insert_messages(writer, _message_files(MAIN_ID)[-4:])
        writer.commit()
        before = db.read_bytes(), db.stat().st_mtime_ns
        wal = Path(f"{db}-wal").read_bytes()
        main, _ = import_transcript(store, db)
        assert main.events == 15  # what OpenCode committed, read from its WAL
        assert (db.read_bytes(), db.stat().st_mtime_ns) == before
        assert Path(f"{db}-wal").read_bytes() == wal
        # A transaction OpenCode has not committed is not seen.
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE session SET title = 'x'")
        assert [r.status for r in import_transcript(store, db)] == ["up to date"] * 2
        writer.rollback()
    finally:
        writer.close()
    with closing(connect(db)) as conn, pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("CREATE TABLE t (x)")


def test_messages_are_streamed_not_loaded_whole(tmp_path: Path) -> None:
    db = build_db(tmp_path / "opencode.db")
    with closing(sqlite3.connect(db)) as conn:
        big = "x" * 20_000
        for n in range(600):
            mid = f"msg_9{n:020d}"
            conn.execute(
                "INSERT INTO message VALUES (?, ?, 1, 1, ?)",
                (mid, CHILD_ID, json.dumps({"role": "user", "time": {"created": n}, "x": big})),
            )
            conn.execute(
                "INSERT INTO part VALUES (?, ?, ?, 1, 1, ?)",
                (f"prt_9{n:020d}", mid, CHILD_ID, json.dumps({"type": "text", "text": big})),
            )
        conn.commit()
    records: Iterator[Any] = numbered(DbSession(db, CHILD_ID).messages())
    tracemalloc.start()
    try:
        count = sum(1 for _ in records)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 602
    assert peak < 1_000_000  # 24 MB of rows went through, a few of them at a time


def test_cli_imports_a_directory_finding_the_database_among_other_sqlite_files(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EVENTSTORE_URL", raising=False)
    folder = tmp_path / "opencode"
    folder.mkdir()
    build_db(folder / "opencode.db")
    EventStore(f"sqlite:///{folder / 'events.db'}").close()
    assert [p.name for p in transcripts_under(folder)] == ["opencode.db"]
    args = ["--db", db_url, "--tenant", f"oc-{uuid.uuid4().hex}", "import", str(folder), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [(r["key"], r["status"]) for r in rows] == [
        (f"opencode:{MAIN_ID}", "created"),
        (f"opencode:{CHILD_ID}", "created"),
    ]
    one = CliRunner().invoke(cli, [*args[:-2], str(folder / "opencode.db"), "--json"])
    assert [r["status"] for r in json.loads(one.output)] == ["up to date"] * 2


def test_watch_once_follows_the_database(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from eventstore.cli.watch import _Watcher

    monkeypatch.delenv("EVENTSTORE_URL", raising=False)
    db = build_db(tmp_path / "opencode.db", held=4)
    args = ["--db", db_url, "--tenant", f"oc-{uuid.uuid4().hex}", "watch", "--once", "--json"]
    first = CliRunner().invoke(cli, [*args, str(db)])
    assert first.exit_code == 0, first.output
    rows = [json.loads(line) for line in first.output.splitlines()]
    assert {r["key"]: r["events"] for r in rows} == {
        f"opencode:{MAIN_ID}": 10,
        f"opencode:{CHILD_ID}": 4,
    }
    again = CliRunner().invoke(cli, [*args, str(db)])
    assert again.exit_code == 0 and again.output == ""
    store = EventStore(db_url, tenant=f"oc-{uuid.uuid4().hex}")
    try:
        watcher = _Watcher(store, [db], None, True)
        watcher.one_pass()
        writer = sqlite3.connect(db)  # OpenCode writes into its WAL, not the main file
        try:
            writer.execute("PRAGMA wal_autocheckpoint = 0")
            _insert_messages(writer, _message_files(MAIN_ID)[-4:])
            writer.commit()
            capsys.readouterr()
            watcher.one_pass()
            # Only the session that changed was read again.
            rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
            assert [(r["key"], r["events"]) for r in rows] == [(f"opencode:{MAIN_ID}", 5)]
            assert sorted(watcher.sessions[db]) == sorted([MAIN_ID, CHILD_ID])
            # A part OpenCode rewrote in place (a prune) is seen too.
            _prune_row(writer)
            watcher.one_pass()
            rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
            assert [(r["key"], r["events"]) for r in rows] == [(f"opencode:{MAIN_ID}", 1)]
        finally:
            writer.close()
        assert store.get_session_by_key(f"opencode:{MAIN_ID}").head_seq == 16
    finally:
        store.close()


def test_a_row_whose_data_is_not_json_names_the_session_and_the_row(
    store: EventStore, tmp_path: Path
) -> None:
    db = build_db(tmp_path / "opencode.db")
    first = _message_files(MAIN_ID)[0].stem
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE message SET data = '{\"role\": ' WHERE id = ?", (first,))
        conn.commit()
    with pytest.raises(ImportFormatError, match=f"session {MAIN_ID}.*message {first}"):
        import_transcript(store, db)
    assert store.list_sessions(limit=None) == []


def test_a_session_held_only_in_the_newer_message_table_is_named_not_dropped(
    store: EventStore, tmp_path: Path
) -> None:
    db = build_db(tmp_path / "opencode.db")
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "INSERT INTO session (id, project_id, slug, directory, title, version, "
            "time_created, time_updated) SELECT 'ses_newer', project_id, 's', directory, 't', "
            "'2.0.0', time_created + 1, time_updated FROM session WHERE id = ?",
            (MAIN_ID,),
        )
        conn.execute(
            "INSERT INTO session_message VALUES ('msg_newer', 'ses_newer', 'user', 1, 1, '{}')"
        )
        conn.commit()
    with pytest.raises(ImportFormatError, match="1 session.*session_message.*ses_newer"):
        import_transcript(store, db)
    keys = sorted(s.key for s in store.list_sessions(limit=None))
    assert keys == sorted([f"opencode:{MAIN_ID}", f"opencode:{CHILD_ID}"])
