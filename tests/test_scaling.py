"""A path past one machine: session keys everywhere (0007), `db distribute`, read replicas.

All on real databases: SQLite files, the test Postgres, and for replicas a throwaway
primary with a real streaming standby started by the test itself.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import REQUIRE_PG, skip_on_citus
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine

from eventstore import (
    AsyncEventStore,
    ConfigurationError,
    EventStore,
    EventStoreError,
    Message,
    Prune,
    SessionExistsError,
    ToolCallPart,
)
from eventstore._features.replica import parse_lsn
from eventstore._routing import _DISTRIBUTED as DISTRIBUTED_KEY
from eventstore._routing import mark_distributed
from eventstore._sql import view_rows as _view_rows
from eventstore.cli import cli
from eventstore.distribution import (
    SESSION_TABLES,
    citus_preloaded,
    forget_distribution,
    is_distributed,
    partitions_of,
)
from eventstore.migrate import check, current_revision, downgrade, upgrade
from eventstore.schema import SCHEMA_REVISION, metadata

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.replica_cluster import ClusterError, ReplicaCluster, find_bin_dir  # noqa: E402


def _tool_turn(store: EventStore, sid: str, n: int) -> None:
    call = Message.assistant(tool_calls=[ToolCallPart(id=f"c{n}", name="sh", arguments="{}")])
    store.append(sid, [Message.user(f"run {n}"), call, Message.tool(f"c{n}", "out " * 50)])


def _seed(store: EventStore) -> dict[str, str]:
    """Sessions that exercise every session table: keys, a fork, prunes, a fork prune."""
    a = store.create_session(key="ticket-1", user_id="u1")
    for n in range(3):
        _tool_turn(store, a.id, n)
    store.append(a.id, [Prune(targets=[{"seq": 3, "index": 0}])])
    fork = store.fork(a.id, 6)
    store.append(fork.id, [Prune(targets=[{"seq": 6, "index": 0}])])
    b = store.create_session(key="ticket-2")
    store.append(b.id, [Message.user("b")], idempotency_key="once")
    return {"a": a.id, "fork": fork.id, "b": b.id}


def _all_verify(store: EventStore, ids: dict[str, str]) -> None:
    for sid in ids.values():
        report = store.verify(sid, fingerprints=False)
        assert report.ok, report


# --------------------------------------------------------------------------- key rules


def _session_column(table: str) -> str:
    return "id" if table == "sessions" else "session_id"


def test_every_session_table_key_includes_the_session() -> None:
    session_tables = [t for t, _ in SESSION_TABLES if t in metadata.tables]
    assert {"sessions", "events", "parts", "fork_compactions", "feed_pending"} <= set(
        session_tables
    )
    for name in session_tables:
        table = metadata.tables[name]
        col = _session_column(name)
        assert col in table.primary_key.columns, name
        for constraint in table.constraints:
            cols = {c.name for c in getattr(constraint, "columns", [])}
            if constraint.__class__.__name__ == "UniqueConstraint":
                assert col in cols, (name, constraint.name)
        for index in table.indexes:
            if index.unique:
                assert col in {c.name for c in index.columns}, (name, index.name)
        # No foreign key crosses sessions: each one carries the session column along.
        for fk in table.foreign_key_constraints:
            local = [c.name for c in fk.columns]
            assert col in local and fk.referred_table.name in session_tables, (name, fk.name)
            target = _session_column(fk.referred_table.name)
            assert fk.elements[local.index(col)].column.name == target, (name, fk.name)
    # Lookups by event id stay one probe: a key or index leads with the id.
    events = metadata.tables["events"]
    leading = [[c.name for c in ix.columns][0] for ix in events.indexes] + [
        [c.name for c in uq.columns][0]
        for uq in events.constraints
        if uq.__class__.__name__ == "UniqueConstraint"
    ]
    assert "id" in leading


def test_0007_keeps_rows_chains_and_keys_down_and_up(empty_url: str) -> None:
    with EventStore(empty_url, upgrade=True) as store:
        ids = _seed(store)
        views = {k: store.view(v).fingerprint() for k, v in ids.items()}
    engine = create_engine(empty_url)
    try:
        downgrade(engine, "0006")
        assert current_revision(engine) == "0006"
        upgrade(engine)
        assert current_revision(engine) == SCHEMA_REVISION
        assert check(engine) == []
        with engine.connect() as conn:
            keys = conn.execute(text("SELECT count(*) FROM session_keys")).scalar_one()
            assert keys == 2
    finally:
        engine.dispose()
    with EventStore(empty_url) as store:
        _all_verify(store, ids)
        assert {k: store.view(v).fingerprint() for k, v in ids.items()} == views
        assert store.get_session_by_key("ticket-1", user_id="u1").id == ids["a"]
        with pytest.raises(SessionExistsError):
            store.create_session(key="ticket-2")
        store.delete_session(ids["b"])
        assert store.create_session(key="ticket-2").id != ids["b"]
        first = next(iter(store.read(ids["a"])))
        assert store.get_event(ids["fork"], first.event.id).seq == 1
        assert store.find_event(first.event.id).session_id == ids["a"]


def test_an_event_id_is_unique_within_its_session(store: EventStore) -> None:
    a, b = store.create_session(), store.create_session()
    msg = Message.user("same id")
    msg.id = str(uuid.uuid4())
    store.append(a.id, [msg])
    with pytest.raises(EventStoreError):
        store.append(a.id, [msg])
    # Another session may hold the id (the key is (session_id, id)); each finds its own.
    store.append(b.id, [msg])
    assert store.get_event(a.id, msg.id).session_id == a.id
    assert store.get_event(b.id, msg.id).session_id == b.id


# --------------------------------------------------------------------------- db distribute


def test_distribute_on_sqlite_explains_and_fails(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'one.db'}"
    EventStore(url).close()
    result = CliRunner().invoke(cli, ["--db", url, "db", "distribute"])
    assert result.exit_code == 1
    assert "SQLite database is one file on one machine" in result.output
    assert "Postgres" in result.output


@pytest.mark.parametrize(
    ("setting", "loaded"),
    [
        ("", False),
        ("citus", True),
        ("pg_stat_statements, citus", True),
        ('"citus" ,auto_explain', True),
        ("$libdir/citus", True),
        ("citus_columnar", False),
        ("pg_stat_statements", False),
    ],
)
def test_citus_runs_only_from_shared_preload_libraries(setting: str, loaded: bool) -> None:
    assert citus_preloaded(setting) is loaded


def test_plain_databases_are_not_distributed(tmp_path: Path, pg_url: str) -> None:
    for url in (f"sqlite:///{tmp_path / 'one.db'}", pg_url):
        EventStore(url, upgrade=True).close()
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                assert is_distributed(conn) is False
                if url == pg_url:  # asked once per pooled connection
                    assert conn.info[DISTRIBUTED_KEY][1] is False
        finally:
            engine.dispose()


def test_a_refusal_makes_every_pooled_connection_ask_again(pg_url: str) -> None:
    EventStore(pg_url, upgrade=True).close()
    engine = create_engine(pg_url)
    try:
        with engine.connect() as one, engine.connect() as two:
            mark_distributed(one.info, True)
            mark_distributed(two.info, True)
            assert is_distributed(one) and is_distributed(two)  # the marks are believed
            assert not is_distributed(one, fresh=True)  # unless asked afresh
            mark_distributed(one.info, True)
            forget_distribution()
            assert not is_distributed(one) and not is_distributed(two)
            assert one.info[DISTRIBUTED_KEY][1] is False
    finally:
        engine.dispose()


def test_a_store_on_distributed_tables_reads_views_citus_can_route(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Citus sends a statement whole to one shard only when each condition shows it the
    session's value: on a distributed store a view's one statement names its parameters
    where they are used (not through a row of parameters), a fork's view (two sessions)
    goes statement by statement, and every write sets its lock timeout for the transaction
    (what Citus passes on to the workers). Here the connections are marked as a Citus
    database would find them, on plain Postgres; the views must equal the plain store's."""
    plain = EventStore(pg_url, upgrade=True)
    ids = _seed(plain)

    def _as_on_citus(_dbapi_conn: Any, record: Any) -> None:
        mark_distributed(record.info, True)

    # Every engine made from here on: the store opens its schema as it is made.
    event.listen(Engine, "connect", _as_on_citus)
    try:
        dist = EventStore(pg_url)
    finally:
        event.remove(Engine, "connect", _as_on_citus)
    sent: list[str] = []
    fetched: list[tuple[bool, str, list[Any]]] = []  # (by the marked store, sql, params)
    fetch = _view_rows._fetch

    def _spy(conn: Any, pg: bool, sql: str, params: list[Any], **kwargs: Any) -> Any:
        fetched.append((conn.engine is dist.engine, sql, params))
        return fetch(conn, pg, sql, params, **kwargs)

    monkeypatch.setattr(_view_rows, "_fetch", _spy)

    @event.listens_for(dist.engine, "before_cursor_execute")
    def _record(_conn: Any, _cur: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    try:
        _tool_turn(dist, ids["a"], 9)  # an ordinary append, then the fast path's
        dist.append(ids["a"], [Message.user("fast")])
        assert dist._lock_local
        # One round trip per write: both settings in one query.
        both = "SET LOCAL citus.propagate_set_commands = local; SET LOCAL lock_timeout = "
        assert sum(s.startswith(both) for s in sent) == 2
        assert sum("SET LOCAL" in s for s in sent) == 2
        for sid in ids.values():
            head = plain.head(sid)
            for as_of in range(1, head + 1):
                want = plain.view(sid, as_of=as_of).to_messages()
                assert dist.view(sid, as_of=as_of).to_messages() == want
        ours = [(sql, params) for by_dist, sql, params in fetched if by_dist]
        theirs = [sql for by_dist, sql, _ in fetched if not by_dist]
        assert ours and theirs
        assert all("WITH a AS" in sql for sql in theirs)
        assert not any("WITH a AS" in sql for sql, _ in ours)
        assert all(ids["fork"] not in params for _, params in ours)
    finally:
        dist.close()
        plain.close()


def test_a_view_citus_refuses_is_read_statement_by_statement_and_the_mark_asked_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tables distributed while a store runs: its pooled connections still hold "not
    distributed", so Citus refuses the plain view statement (SQLSTATE 0A000). The view is
    read again statement by statement, and the connection asks again. Here Postgres
    refuses a statement with the same SQLSTATE in the view statement's place."""
    store = EventStore(pg_url, upgrade=True)
    try:
        ids = _seed(store)
        want = {sid: store.view(sid).to_messages() for sid in ids.values()}
        real = _view_rows._alone_statement
        refused: list[bool] = []

        def _refused_once(*args: Any) -> tuple[str, tuple[Any, ...]]:
            if refused:
                return real(*args)
            refused.append(True)
            # "FOR UPDATE is not allowed with aggregate functions": SQLSTATE 0A000.
            return "SELECT count(*) FROM sessions FOR UPDATE", ()

        forgotten: list[Any] = []
        forget = _view_rows.forget_distribution

        def _spy() -> None:
            forgotten.append(True)
            forget()

        monkeypatch.setattr(_view_rows, "_alone_statement", _refused_once)
        monkeypatch.setattr(_view_rows, "forget_distribution", _spy)
        assert store.view(ids["a"]).to_messages() == want[ids["a"]]
        assert refused == [True] and forgotten == [True]
        for sid in ids.values():  # and the next views take the one statement again
            assert store.view(sid).to_messages() == want[sid]
        assert len(forgotten) == 1
    finally:
        store.close()


@skip_on_citus("the server has Citus (tests/test_citus.py checks its refusals)")
def test_distribute_without_citus_explains_and_fails(pg_url: str) -> None:
    EventStore(pg_url, upgrade=True).close()
    result = CliRunner().invoke(cli, ["--db", pg_url, "db", "distribute"])
    assert result.exit_code == 1, result.output
    assert "citus extension is not available" in result.output
    assert "--partition N" in result.output
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            assert partitions_of(conn, "events") == []  # nothing was changed
    finally:
        engine.dispose()


def test_distribute_refuses_a_schema_behind(pg_url: str) -> None:
    engine = create_engine(pg_url)
    upgrade(engine, "0006")
    engine.dispose()
    result = CliRunner().invoke(cli, ["--db", pg_url, "db", "distribute", "--partition", "4"])
    assert result.exit_code == 1
    assert "eventstore db upgrade" in result.output


def test_partitioned_by_session_keeps_every_guarantee(pg_url: str) -> None:
    with EventStore(pg_url, upgrade=True) as store:
        ids = _seed(store)
        before = {k: store.view(v).fingerprint() for k, v in ids.items()}
    result = CliRunner().invoke(
        cli, ["--db", pg_url, "db", "distribute", "--partition", "4", "--json"]
    )
    assert result.exit_code == 0, result.output
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            assert partitions_of(conn, "events") == [f"events_p{i}" for i in range(4)]
            assert partitions_of(conn, "parts") == [f"parts_p{i}" for i in range(4)]
            strategy = conn.execute(
                text(
                    "SELECT partstrat, a.attname FROM pg_partitioned_table p "
                    "JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0] "
                    "WHERE p.partrelid = 'events'::regclass"
                )
            ).one()
            assert tuple(strategy) == ("h", "session_id")
        assert check(engine) == []
    finally:
        engine.dispose()

    with EventStore(pg_url) as store:
        _all_verify(store, ids)
        assert {k: store.view(v).fingerprint() for k, v in ids.items()} == before
        # Both append paths, idempotency, prunes and new sessions on the partitioned tables.
        _tool_turn(store, ids["a"], 9)
        _tool_turn(store, ids["a"], 10)  # the fast path (the head is remembered)
        again = store.append_result(ids["b"], [Message.user("b")], idempotency_key="once")
        assert again.replayed
        head = store.head(ids["a"])
        store.append(ids["a"], [Prune(targets=[{"seq": head, "index": 0}])])
        fresh = [store.create_session() for _ in range(12)]
        for s in fresh:
            store.append(s.id, [Message.user("spread")])
        view = store.view(ids["a"])
        assert view.seq == store.head(ids["a"])
        _all_verify(store, ids | {f"n{i}": s.id for i, s in enumerate(fresh)})
        with store.engine.connect() as conn:
            counts = conn.execute(
                text("SELECT tableoid::regclass::text, count(*) FROM events GROUP BY 1")
            ).all()
            # Row guards fire only on rows: aim them at partitions that hold some (which
            # ones do depends on the random session ids).
            parts_with_rows = conn.execute(
                text("SELECT tableoid::regclass::text FROM parts LIMIT 1")
            ).scalar_one()
        assert len(counts) >= 2  # sessions spread over partitions
        events_with_rows = counts[0][0]

        # The guards hold on the parent and on each partition.
        for sql in (
            "DELETE FROM events",
            f"DELETE FROM {events_with_rows}",
            "TRUNCATE parts_p1",
            "TRUNCATE events_p1, parts",
            "TRUNCATE parts",
            f"UPDATE {parts_with_rows} SET token_count = 0",
        ):
            with pytest.raises(Exception, match="append-only"):
                with store.engine.begin() as conn:
                    conn.execute(text(sql))
        # The key rules are the server's too: a unique key without session_id is refused.
        with pytest.raises(Exception, match="partition"):
            with store.engine.begin() as conn:
                conn.execute(text("ALTER TABLE events ADD CONSTRAINT bad UNIQUE (id)"))

    again_result = CliRunner().invoke(cli, ["--db", pg_url, "db", "distribute", "--partition", "4"])
    assert again_result.exit_code == 1
    assert "already partitioned" in again_result.output


# --------------------------------------------------------------------------- read replicas


def test_wal_positions_compare_as_numbers() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert parse_lsn("0/10") < parse_lsn("0/9A") < parse_lsn("1/0")


def test_read_url_needs_postgres(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="read_url"):
        EventStore(f"sqlite:///{tmp_path / 'x.db'}", read_url=f"sqlite:///{tmp_path / 'y.db'}")


@pytest.fixture(scope="module")
def replica_cluster() -> Iterator[ReplicaCluster]:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("no Postgres server binaries under /usr/lib/postgresql/*/bin")
    cluster = ReplicaCluster(bin_dir)
    try:
        cluster.start()
    except (ClusterError, OSError) as exc:
        cluster.stop()
        if REQUIRE_PG:
            pytest.fail(f"the streaming replica did not start (EVENTSTORE_REQUIRE_PG=1): {exc}")
        pytest.skip(f"the streaming replica did not start: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


def _replay(cluster: ReplicaCluster, action: str) -> None:
    engine = create_engine(cluster.replica_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f"SELECT pg_wal_replay_{action}()"))
    finally:
        engine.dispose()


def test_reads_go_to_the_replica_and_see_this_stores_writes(
    replica_cluster: ReplicaCluster,
) -> None:
    primary, replica = replica_cluster.primary_url, replica_cluster.replica_url
    tenant = f"t-{uuid.uuid4().hex}"
    # A generous wait: replay lag on a loaded machine must not send reads to the primary.
    writer = EventStore(primary, read_url=replica, tenant=tenant, upgrade=True, read_wait_ms=2_000)
    bystander = EventStore(primary, read_url=replica, tenant=tenant)
    try:
        s = writer.create_session()
        writer.append(s.id, [Message.user("one")])
        # Read-your-writes: the read waits for the replica to replay the append.
        assert [e.seq for e in writer.read(s.id)] == [1]
        assert writer.view(s.id).seq == 1
        routed = writer.read_routing
        assert routed["replica"] >= 2 and routed["primary"] == 0, routed

        _replay(replica_cluster, "pause")
        try:
            writer.append(s.id, [Message.user("two")])  # the fast path
            # Noting the write's position left the kept connection outside a transaction.
            kept = writer._driver_slot._free[-1].driver_connection
            assert kept.pgconn.transaction_status == 0
            time.sleep(0.05)
            # The replica is stuck before "two": a store that did not write reads there
            # and does not see it (so reads really are served by the replica) ...
            assert bystander.get_session(s.id).head_seq == 1
            assert bystander.read_routing["replica"] >= 1
            # ... while the writer waits its 2 s, then reads the primary and sees it.
            before = writer.read_routing["primary"]
            started = time.perf_counter()
            assert writer.view(s.id).seq == 2
            assert time.perf_counter() - started >= 1.9
            assert writer.read_routing["primary"] == before + 1
        finally:
            _replay(replica_cluster, "resume")
        on_replica = writer.read_routing["replica"]
        assert [e.seq for e in writer.read(s.id)] == [1, 2]
        assert writer.read_routing["replica"] > on_replica
        assert writer.verify(s.id, fingerprints=False).ok  # audits read the primary
    finally:
        writer.close()
        bystander.close()


def test_async_store_routes_reads_to_the_replica(replica_cluster: ReplicaCluster) -> None:
    async def scenario() -> tuple[Any, dict[str, int]]:
        store = AsyncEventStore(
            replica_cluster.primary_url,
            read_url=replica_cluster.replica_url,
            tenant=f"t-{uuid.uuid4().hex}",
            upgrade=True,
        )
        try:
            s = await store.create_session()
            await store.append(s.id, [Message.user("async")])
            view = await store.view(s.id)
            return view.seq, store.read_routing
        finally:
            await store.close()

    seq, routed = asyncio.run(scenario())
    assert seq == 1
    assert routed["replica"] >= 1 and routed["primary"] == 0


def test_unreachable_replica_reads_the_primary(pg_url: str) -> None:
    with EventStore(pg_url, upgrade=True) as plain:
        s = plain.create_session()
    # A port nobody listens on: every read falls back to the primary.
    dead = "postgresql+psycopg://postgres@127.0.0.1:9/none"
    with EventStore(pg_url, read_url=dead, read_wait_ms=0) as store:
        store.append(s.id, [Message.user("x")])
        assert store.view(s.id).seq == 1
        assert store.read_routing == {"replica": 0, "primary": 1}
    assert os.environ.get("EVENTSTORE_URL") != dead
