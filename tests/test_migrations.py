"""Migrations on real databases: up, down, up again; drift checks; schema guards on open."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from conftest import drop_pg_database, fresh_pg_database
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Connection, Engine

from eventstore import EventStore, Message, SchemaError
from eventstore.migrate import check, current_revision, downgrade, script_location, upgrade
from eventstore.schema import (
    NATIVE_SEARCH_TABLES,
    SCHEMA_REVISION,
    drop_feed_trigger_ddl,
    drop_trigger_ddl,
    feed_trigger_ddl,
    metadata,
    trigger_ddl,
)
from eventstore.tokens import MESSAGE_OVERHEAD

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ROOT / "migrations" / "versions"
TABLES = {
    "sessions",
    "session_keys",
    "events",
    "parts",
    "fork_compactions",
    "feed",
    "feed_pending",
    "feed_cursor",
    "search_progress",
    "blobs",
    "purge_marks",
    "purge_pending",
}
# Read by SQLite's append-only trigger only: Postgres drops it at 0012.
SQLITE_ONLY_TABLES = {"purge_marks"}
SQLITE_TRIGGERS = {
    "events_append_only_update",
    "events_append_only_delete",
    "parts_append_only_delete",
    "parts_compact_once",
    "fork_compactions_append_only_update",
    "fork_compactions_append_only_delete",
}
PG_TRIGGERS = {
    "events_append_only",
    "events_no_truncate",
    "parts_append_only_delete",
    "parts_no_truncate",
    "parts_compact_once",
    "fork_compactions_append_only",
}


def _tables(engine: Engine) -> set[str]:
    """The metadata's tables present (the backend-native search index is checked apart)."""
    native = NATIVE_SEARCH_TABLES[engine.dialect.name]
    names = set(inspect(engine).get_table_names()) - {"alembic_version"}
    return {n for n in names if not n.startswith(native)}


def _expected_tables(engine: Engine) -> set[str]:
    return TABLES if engine.dialect.name == "sqlite" else TABLES - SQLITE_ONLY_TABLES


def _native_search_tables(engine: Engine) -> set[str]:
    native = NATIVE_SEARCH_TABLES[engine.dialect.name]
    return {n for n in inspect(engine).get_table_names() if n.startswith(native)}


def _triggers(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            rows = conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'"))
        else:
            rows = conn.execute(text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"))
        return {r[0] for r in rows}


def _expected_triggers(engine: Engine) -> set[str]:
    return SQLITE_TRIGGERS if engine.dialect.name == "sqlite" else PG_TRIGGERS


def test_schema_revision_is_the_migration_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", script_location())
    heads = ScriptDirectory.from_config(cfg).get_heads()
    assert heads == [SCHEMA_REVISION]


def test_upgrade_downgrade_upgrade(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        assert current_revision(engine) is None
        upgrade(engine)
        assert current_revision(engine) == SCHEMA_REVISION
        assert _tables(engine) == _expected_tables(engine)
        assert _native_search_tables(engine)
        assert _triggers(engine) == _expected_triggers(engine)
        assert check(engine) == []

        downgrade(engine, "base")
        assert current_revision(engine) is None
        assert _tables(engine) == set()
        assert _native_search_tables(engine) == set()
        assert _triggers(engine) == set()
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                funcs = conn.execute(
                    text("SELECT proname FROM pg_proc WHERE proname LIKE 'eventstore_%'")
                ).all()
            assert funcs == []

        upgrade(engine)
        assert current_revision(engine) == SCHEMA_REVISION
        assert _tables(engine) == _expected_tables(engine)
        assert _triggers(engine) == _expected_triggers(engine)
        assert check(engine) == []
    finally:
        engine.dispose()
    # The re-created guards work, and the store runs on the re-upgraded database.
    with EventStore(empty_url, upgrade=False) as store:
        s = store.create_session()
        store.append(s.id, [Message.user("after up-down-up")])
        with pytest.raises(Exception, match="append-only"):
            with store.engine.begin() as conn:
                conn.execute(text("DELETE FROM events"))
        assert store.verify(s.id, fingerprints=False).ok


# --------------------------------------------------------------------------- frozen migrations


def _migration_files() -> list[Path]:
    return sorted(p for p in VERSIONS.glob("*.py") if p.name != "__init__.py")


def _load_migration(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) for every import in ``tree``, at any depth; relative ones keep their dots."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == "__import__")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def test_migrations_import_nothing_from_eventstore() -> None:
    """A migration is frozen: live code may change after it ships, what it does to a
    database may not. Relative imports count too: installed, ``versions`` sits inside
    the ``eventstore`` package."""
    files = _migration_files()
    assert files, f"no migrations found in {VERSIONS}"
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: imports {name}"
        for path in files
        for line, name in _imported_modules(ast.parse(path.read_text(), str(path)))
        if name == "eventstore" or name.startswith(("eventstore.", "."))
    ]
    assert not offenders, (
        "migrations must hold their own frozen DDL, not import live code:\n" + "\n".join(offenders)
    )


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_initial_migration_guards_equal_the_live_schema(dialect: str) -> None:
    """The newest guard migration's frozen trigger SQL (0011, which let purges through the
    events guard without DDL) is what ``eventstore.schema`` produces today. If this fails,
    the live guards changed: write a new migration that installs them (and point this test
    at it), never edit an old one."""
    migration = _load_migration(VERSIONS / "0011_purge_guard.py")
    assert migration._trigger_ddl(dialect) == trigger_ddl(dialect), (
        f"eventstore.schema.trigger_ddl({dialect!r}) drifted from migration 0011"
    )
    assert migration._drop_trigger_ddl(dialect) == drop_trigger_ddl(dialect), (
        f"eventstore.schema.drop_trigger_ddl({dialect!r}) drifted from migration 0011"
    )


def _guards(conn: Connection) -> dict[str, str]:
    """The append-only guards as the database stores them: name -> definition."""
    if conn.dialect.name == "sqlite":
        sql = "SELECT 'trigger ' || name, sql FROM sqlite_master WHERE type = 'trigger'"
    else:
        sql = (
            "SELECT 'trigger ' || tgname, pg_get_triggerdef(oid) FROM pg_trigger"
            " WHERE NOT tgisinternal"
            " UNION ALL SELECT 'function ' || proname, pg_get_functiondef(oid)"
            " FROM pg_proc WHERE proname LIKE 'eventstore\\_%'"
        )
    return {name: definition for name, definition in conn.execute(text(sql))}


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_feed_migration_trigger_equals_the_live_schema(dialect: str) -> None:
    """No feed trigger is live on either backend: 0010 dropped SQLite's (readers number
    new event rows) and 0008 Postgres's (the append statements queue their ranges); each
    downgrade puts back exactly what 0003 installed."""
    feed = _load_migration(VERSIONS / "0003_feed.py")
    queued = _load_migration(VERSIONS / "0008_feed_queued_by_appends.py")
    read_side = _load_migration(VERSIONS / "0010_fewer_rows_per_append.py")
    assert feed._drop_feed_trigger_ddl(dialect) == drop_feed_trigger_ddl(dialect)
    assert feed_trigger_ddl(dialect) == []
    if dialect == "sqlite":
        assert [read_side._SQLITE_TRIGGER] == feed._feed_trigger_ddl(dialect)
    else:
        assert queued._DROP_PG == drop_feed_trigger_ddl(dialect)
        assert queued._RESTORE_PG == feed._feed_trigger_ddl(dialect)


def test_migrated_database_has_the_live_schema_guards(empty_url: str) -> None:
    """The guards the migrations install are, as the database stores them, the ones the
    live ``trigger_ddl`` would install: replacing one set with the other changes nothing."""
    engine = create_engine(empty_url)
    try:
        upgrade(engine)
        with engine.connect() as conn:
            migrated = _guards(conn)
        assert migrated, "the migrations installed no guards"
        name = engine.dialect.name
        with engine.begin() as conn:
            for statement in drop_trigger_ddl(name) + drop_feed_trigger_ddl(name):
                conn.execute(text(statement))
            assert _guards(conn) == {}, "the live drop DDL left guards behind"
            for statement in trigger_ddl(name) + feed_trigger_ddl(name):
                conn.execute(text(statement))
        with engine.connect() as conn:
            live = _guards(conn)
        assert live == migrated, "the live trigger_ddl differs from what the migrations install"
    finally:
        engine.dispose()


def test_check_reports_drift(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        upgrade(engine)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE stray (x INTEGER)"))
        diffs = check(engine)
        assert any(d[0] == "remove_table" and d[1].name == "stray" for d in diffs), diffs
    finally:
        engine.dispose()


def test_metadata_matches_the_tables_a_migration_creates() -> None:
    assert set(metadata.tables) == TABLES


def test_postgres_without_schema_refuses_to_open() -> None:
    url = fresh_pg_database()
    try:
        for kwargs in ({"upgrade": False}, {}):
            with pytest.raises(SchemaError) as info:
                EventStore(url, **kwargs)  # type: ignore[arg-type]
            msg = str(info.value)
            assert "eventstore db upgrade" in msg
            assert "empty" in msg
        engine = create_engine(url)
        assert _tables(engine) == set()  # refusing did not create anything
        engine.dispose()
        with EventStore(url, upgrade=True) as store:
            assert store.list_sessions() == []
    finally:
        drop_pg_database(url)


def test_sqlite_upgrades_on_open_by_default(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'auto.db'}"
    with EventStore(url) as store:
        assert _tables(store.engine) == _expected_tables(store.engine)
        assert current_revision(store.engine) == SCHEMA_REVISION
        s = store.create_session()
        store.append(s.id, [Message.user("x")])
    with EventStore(url) as again:  # reopening an up-to-date database is a no-op
        assert again.head(s.id) == 1
    with pytest.raises(SchemaError, match="eventstore db upgrade"):
        EventStore(f"sqlite:///{tmp_path / 'manual.db'}", upgrade=False)


def test_unknown_future_revision_is_refused(empty_url: str) -> None:
    with EventStore(empty_url, upgrade=True):
        pass
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    for kwargs in ({"upgrade": True}, {"upgrade": False}):
        with pytest.raises(SchemaError, match="9999") as info:
            EventStore(empty_url, **kwargs)  # type: ignore[arg-type]
        assert "upgrade the package" in str(info.value)


def _dev_console_script() -> Path:
    return Path(sys.executable).parent / "eventstore"


def test_schema_error_names_a_command_that_works() -> None:
    """The fix printed in the SchemaError, run verbatim, makes the database usable."""
    script = _dev_console_script()
    if not script.exists():
        pytest.skip("the eventstore console script is not installed in this environment")
    url = fresh_pg_database()
    try:
        with pytest.raises(SchemaError) as info:
            EventStore(url)
        match = re.search(r"Run: (eventstore .+)$", str(info.value))
        assert match, str(info.value)
        argv = shlex.split(match.group(1))
        proc = subprocess.run([str(script), *argv[1:]], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        with EventStore(url, upgrade=False) as store:
            assert store.list_sessions() == []
    finally:
        drop_pg_database(url)


# --------------------------------------------------------------------------- installed wheel


@pytest.mark.slow
def test_installed_wheel_upgrades_a_database(tmp_path: Path) -> None:
    """Build the wheel, install it in a new venv, and upgrade a database from outside the
    checkout, so the migrations can only come from inside the installed package."""
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = dist.glob("agent_eventstore-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    # The wheel goes in without dependencies; the development environment's site-packages
    # supplies them through PYTHONPATH. PYTHONPATH does not run .pth files, so the
    # editable install of the checkout stays invisible and ``eventstore`` is the wheel's.
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    dev_site = sysconfig.get_paths()["purelib"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | {
        "PYTHONPATH": dev_site,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    db_file = outside / "installed.db"

    code = textwrap.dedent(
        f"""
        import eventstore, eventstore.migrate as m
        from sqlalchemy import create_engine, inspect
        assert "{venv}" in eventstore.__file__, eventstore.__file__
        assert "{venv}" in m.script_location(), m.script_location()
        engine = create_engine("sqlite:///{db_file}")
        m.upgrade(engine)
        print(sorted(inspect(engine).get_table_names()))
        print(m.current_revision(engine))
        """
    )
    run = subprocess.run(
        [str(py), "-c", code], cwd=outside, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    tables, revision = run.stdout.strip().splitlines()[-2:]
    found = {t for t in eval(tables) if not t.startswith("search_fts")}  # noqa: S307 - our own output
    assert found == TABLES | {"alembic_version"}
    assert revision == SCHEMA_REVISION

    # The console script from the wheel, run the way the SchemaError message says.
    console = venv / "bin" / "eventstore"
    assert console.exists(), "the wheel did not install the eventstore console script"
    helped = subprocess.run(
        [str(console), "--help"], cwd=outside, env=env, capture_output=True, text=True
    )
    assert helped.returncode == 0, helped.stderr
    cli_db = outside / "cli.db"
    upgraded = subprocess.run(
        [str(console), "db", "upgrade", "--db", f"sqlite:///{cli_db}"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert upgraded.returncode == 0, upgraded.stderr
    engine = create_engine(f"sqlite:///{cli_db}")
    try:
        assert _tables(engine) == _expected_tables(engine)
        assert current_revision(engine) == SCHEMA_REVISION
        assert _triggers(engine) == SQLITE_TRIGGERS
    finally:
        engine.dispose()


def _columns(engine: Engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def test_batch_digest_migration_keeps_data_and_old_keys(empty_url: str) -> None:
    """0001 -> 0002 -> 0001 -> 0002 with rows in place: the column comes and goes, the
    events and their guards stay, and a key stored before 0002 (no digest) still replays."""
    engine = create_engine(empty_url)
    try:
        upgrade(engine, "0001")
        assert "batch_digest" not in _columns(engine, "events")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO sessions (id, tenant, metadata, head_seq, created_at, updated_at)"
                    " VALUES ('old', 'legacy', '{}', 1, :now, :now)"
                ),
                {"now": "2026-01-01 00:00:00"},
            )
            conn.execute(
                text(
                    "INSERT INTO events (session_id, seq, id, kind, created_at, payload,"
                    " token_count, size, idempotency_key, batch_size, hash) VALUES ('old', 1,"
                    " 'e1', 'custom', :now, '{\"name\":\"x\"}', 0, 12, 'k-old', 1, :h)"
                ),
                {"now": "2026-01-01 00:00:00", "h": "0" * 64},
            )
        upgrade(engine)
        assert "batch_digest" in _columns(engine, "events")
        assert check(engine) == []
        downgrade(engine, "0001")
        assert current_revision(engine) == "0001"
        assert "batch_digest" not in _columns(engine, "events")
        assert _triggers(engine) == _expected_triggers(engine) - {"sessions_feed"}
        upgrade(engine)
        assert check(engine) == []
        assert _triggers(engine) == _expected_triggers(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM events")).scalar_one() == 1
    finally:
        engine.dispose()
    with EventStore(empty_url, tenant="legacy", upgrade=False) as store:
        from eventstore import Custom, IdempotencyMismatchError

        # Events stored before the feed existed were numbered by the upgrade.
        assert [(i.session_id, i.stored.seq, i.position) for i in store.tail()] == [("old", 1, 1)]

        # No digest was stored with the old key: compared by batch size, as before.
        again = store.append_result("old", [Custom(name="y")], idempotency_key="k-old")
        assert again.replayed and again.seqs == [1]
        with pytest.raises(IdempotencyMismatchError):
            store.append("old", [Custom(name="y"), Custom(name="z")], idempotency_key="k-old")
        # A new key gets a digest and is compared by content.
        store.append("old", [Custom(name="a")], idempotency_key="k-new")
        assert [(i.stored.seq, i.position) for i in store.tail(after=1)] == [(2, 2)]
        with pytest.raises(IdempotencyMismatchError):
            store.append("old", [Custom(name="b")], idempotency_key="k-new")
        with pytest.raises(Exception, match="append-only"):
            with store.engine.begin() as conn:
                conn.execute(text("DELETE FROM events"))


_KILL_UPGRADE = """
import os, signal, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine
from eventstore.cli import main

created = []

@event.listens_for(Engine, "after_cursor_execute")
def _crash_after_two_tables(conn, cursor, statement, *args):
    if statement.lstrip().upper().startswith("CREATE TABLE"):
        created.append(statement)
        if len(created) == 3:  # alembic_version, then two of ours
            os.kill(os.getpid(), signal.SIGKILL)

main(["--db", sys.argv[1], "db", "upgrade"])
"""


def test_an_upgrade_killed_halfway_leaves_nothing_and_reruns(
    empty_url: str, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from eventstore.cli import cli

    script = tmp_path / "kill_upgrade.py"
    script.write_text(_KILL_UPGRADE)
    proc = subprocess.run(
        [sys.executable, str(script), empty_url], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -9, proc.stderr
    engine = create_engine(empty_url)
    try:
        # The upgrade was one transaction: not a table, not a version row survived it.
        assert set(inspect(engine).get_table_names()) == set()
    finally:
        engine.dispose()
    again = CliRunner().invoke(cli, ["--db", empty_url, "db", "upgrade"])
    assert again.exit_code == 0, again.output
    assert f"to {SCHEMA_REVISION}" in again.stdout
    with EventStore(empty_url) as store:
        s = store.create_session()
        store.append(s.id, [Message.user("after the crash")])
        assert store.verify(s.id).ok
    checked = CliRunner().invoke(cli, ["--db", empty_url, "db", "check"])
    assert checked.exit_code == 0, checked.output


def test_tables_without_a_revision_get_a_clear_error(empty_url: str) -> None:
    from click.testing import CliRunner

    from eventstore.cli import cli

    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:  # what an interrupted, non-transactional upgrade left
            conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32))"))
            conn.execute(text("CREATE TABLE sessions (id VARCHAR(36) PRIMARY KEY)"))
        with pytest.raises(SchemaError, match="sessions but no schema revision"):
            upgrade(engine)
    finally:
        engine.dispose()
    result = CliRunner().invoke(cli, ["--db", empty_url, "db", "upgrade"])
    assert result.exit_code == 1 and "interrupted" in result.stderr
    assert "Traceback" not in result.output


def test_feed_trigger_migration_keeps_queued_ranges_and_the_chain(empty_url: str) -> None:
    """0007 -> 0008 in place: ranges the old trigger fed (numbered on SQLite, queued on
    Postgres) keep their place in the feed, appends after the upgrade continue it without
    a gap or a duplicate, and 0008 -> 0007 -> 0008 round-trips the Postgres trigger."""
    from datetime import UTC, datetime

    from eventstore import Custom
    from eventstore.codec import chain_hash, encode
    from eventstore.tokens import HeuristicTokenCounter

    tenant, sid = "legacy", "00000000-0000-4000-8000-000000000008"
    when = datetime(2026, 1, 1, tzinfo=UTC)
    engine = create_engine(empty_url)
    try:
        upgrade(engine, "0007")
        prev = None
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO sessions (id, tenant, metadata, head_seq, created_at, updated_at)"
                    " VALUES (:sid, :tenant, '{}', 0, :now, :now)"
                ),
                {"sid": sid, "tenant": tenant, "now": when},
            )
            for seq in (1, 2):
                enc = encode(Custom(name="before", data={"n": seq}), HeuristicTokenCounter())
                eid = f"e{seq}"
                prev = chain_hash(prev, seq, eid, enc.kind, when, enc.payload)
                conn.execute(
                    text(
                        "INSERT INTO events (session_id, seq, id, kind, created_at, payload,"
                        " token_count, size, hash) VALUES (:sid, :seq, :id, :kind, :now,"
                        " :payload, :tokens, :size, :hash)"
                    ),
                    {
                        "sid": sid,
                        "seq": seq,
                        "id": eid,
                        "kind": enc.kind,
                        "now": when,
                        "payload": enc.payload,
                        "tokens": enc.token_count,
                        "size": enc.size,
                        "hash": prev,
                    },
                )
            # The head moves as 0007's appends moved it: the trigger feeds the range.
            conn.execute(
                text("UPDATE sessions SET head_seq = 2, head_hash = :h WHERE id = :sid"),
                {"h": prev, "sid": sid},
            )
        upgrade(engine)
        assert current_revision(engine) == SCHEMA_REVISION
        assert _triggers(engine) == _expected_triggers(engine)
        assert check(engine) == []
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                queued = conn.execute(text("SELECT from_seq, to_seq FROM feed_pending")).all()
                gone = conn.execute(
                    text("SELECT count(*) FROM pg_proc WHERE proname = 'eventstore_feed_pending'")
                ).scalar_one()
            assert [tuple(r) for r in queued] == [(1, 2)]  # waiting for a reader, as before
            assert gone == 0
    finally:
        engine.dispose()
    with EventStore(empty_url, tenant=tenant, upgrade=False) as store:
        store.append(sid, [Message.user("after 3")])  # learns the head: ordinary path
        store.append(sid, [Message.user("after 4")], expected_seq=3)  # fast path
        store.append(sid, [Message.user("after 5"), Message.user("after 6")], expected_seq=4)
        items = list(store.tail())
        assert [(i.stored.seq, i.position) for i in items] == [(s, s) for s in range(1, 7)]
        report = store.verify(sid, fingerprints=False)
        assert report.ok, report.problems
    engine = create_engine(empty_url)
    try:
        downgrade(engine, "0007")
        assert _triggers(engine) == _expected_triggers(engine) | {"sessions_feed"}
        upgrade(engine)
        assert _triggers(engine) == _expected_triggers(engine)
        assert check(engine) == []
    finally:
        engine.dispose()


def test_sqlite_feed_numbering_moves_to_readers_and_back(tmp_path: Path) -> None:
    """0010 on SQLite: events appended and not yet read are numbered by the downgrade (in
    commit order, per tenant, after what was numbered before), the trigger is back, and
    the upgrade after it hands the numbering back to readers without a gap or a
    repeat."""
    url = f"sqlite:///{tmp_path / 'feed.db'}"
    with EventStore(url, tenant="t1") as one:
        two = one.with_tenant("t2")
        a, b = one.create_session().id, two.create_session().id
        one.append(a, [Message.user("a1")])
        assert one.feed_position() == 1  # numbered by a reader; the cursor is at a1
        one.append(a, [Message.user("a2"), Message.user("a3")], expected_seq=1)
        two.append(b, [Message.user("b1")])
        one.append(a, [Message.user("a4")], expected_seq=3)
    engine = create_engine(url)
    try:
        downgrade(engine, "0009")
        assert "feed_cursor" not in _tables(engine)
        assert "sessions_feed" in _triggers(engine)
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT tenant, position_start, position_end, from_seq, to_seq FROM feed "
                    "ORDER BY tenant, position_end"
                )
            ).all()
            assert [tuple(r) for r in rows] == [
                ("t1", 1, 1, 1, 1),
                ("t1", 2, 2, 2, 2),
                ("t1", 3, 3, 3, 3),
                ("t1", 4, 4, 4, 4),
                ("t2", 1, 1, 1, 1),
            ]
            # 0009's code reads a row for every part: the downgrade wrote the implied ones.
            implied = conn.execute(
                text(
                    "SELECT e.seq, p.idx, p.type, p.token_count, e.token_count FROM events e "
                    "JOIN parts p ON p.session_id = e.session_id AND p.seq = e.seq "
                    "ORDER BY e.session_id = :a DESC, e.seq"
                ),
                {"a": a},
            ).all()
            assert [(r[0], r[1], r[2]) for r in implied] == [
                (1, 0, "text"),
                (2, 0, "text"),
                (3, 0, "text"),
                (4, 0, "text"),
                (1, 0, "text"),
            ]
            assert all(r[3] == r[4] - MESSAGE_OVERHEAD > 0 for r in implied)
        upgrade(engine)
        assert check(engine) == []
        assert "sessions_feed" not in _triggers(engine)
    finally:
        engine.dispose()
    with EventStore(url, tenant="t1", upgrade=False) as one:
        one.append(a, [Message.user("a5")], expected_seq=4)
        one.append(a, [Message.user("a6")], expected_seq=5)
        items = list(one.tail())
        assert [(i.position, i.stored.seq) for i in items] == [(n, n) for n in range(1, 7)]
        assert [(i.position, i.stored.seq) for i in one.with_tenant("t2").tail()] == [(1, 1)]
        assert one.verify(a, fingerprints=False).ok
