"""The store on a real Citus cluster: routed appends, and `db distribute`.

``EVENTSTORE_TEST_CITUS_URL`` names a database on a Citus coordinator whose workers are
registered in it (``../shared/citus/cluster.sh createdb NAME`` makes one); the tests here
drop and re-create the store's tables in it. Without it they skip (or fail under
``EVENTSTORE_REQUIRE_CITUS=1``, as CI's Citus mode sets).
"""

from __future__ import annotations

import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import Pool

from benchmarks.citus import drop_store
from eventstore import Condensation, EventStore, Message, PartRef, Prune, ToolCallPart
from eventstore.cli import cli

CITUS_URL = os.environ.get("EVENTSTORE_TEST_CITUS_URL")
REQUIRE_CITUS = os.environ.get("EVENTSTORE_REQUIRE_CITUS") == "1"

pytestmark = pytest.mark.skipif(
    not CITUS_URL and not REQUIRE_CITUS,
    reason="no Citus cluster: set EVENTSTORE_TEST_CITUS_URL (see ../shared/citus/README.md)",
)


def _url() -> str:
    if not CITUS_URL:
        pytest.fail("EVENTSTORE_REQUIRE_CITUS=1 but EVENTSTORE_TEST_CITUS_URL is not set")
    return make_url(CITUS_URL).set(drivername="postgresql+psycopg").render_as_string(False)


def _distribute(url: str) -> Any:
    return CliRunner().invoke(cli, ["--db", url, "db", "distribute"])


@pytest.fixture
def citus_url() -> Iterator[str]:
    """The Citus database, emptied and brought to the current schema (not distributed)."""
    url = _url()
    drop_store(url)
    EventStore(url, upgrade=True).close()
    yield url


@pytest.fixture
def distributed_url(citus_url: str) -> str:
    result = _distribute(citus_url)
    assert result.exit_code == 0, result.output
    return citus_url


class _RemoteCommands:
    """The commands the coordinator sends to the workers, as ``citus.log_remote_commands``
    reports them to the client."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(
            url, connect_args={"options": "-c citus.log_remote_commands=on"}
        )
        self.sent: list[str] = []
        self.recording = False
        event.listen(self.engine, "connect", self._on_connect)

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.add_notice_handler(self._notice)

    def _notice(self, diag: Any) -> None:
        if self.recording and diag.message_primary:
            self.sent.append(diag.message_primary)

    def count(self, pattern: str) -> int:
        return sum(1 for s in self.sent if re.search(pattern, s))


def _workers_touched(sent: list[str]) -> set[str]:
    """The shard ids named in the commands (one session's shards share a worker)."""
    return set(re.findall(r"_(\d{6,})\b", " ".join(sent)))


def test_appends_are_routed_to_one_worker_without_two_phase_commit(distributed_url: str) -> None:
    from eventstore._append import postgres

    log = _RemoteCommands(distributed_url)
    store = EventStore(engine=log.engine, tenant=f"t-{uuid.uuid4().hex}")
    try:
        session = store.create_session()
        log.recording = True
        store.append(session.id, [Message.user("first")])  # the locked path (no head known)
        first = list(log.sent)
        log.sent.clear()
        store.append(session.id, [Message.user("one")])  # the routed call
        one = list(log.sent)
        log.sent.clear()
        # One event of one part row, then one of several: the function's one-row insert
        # and its many-row insert of parts.
        call = ToolCallPart(id="c1", name="sh", arguments='{"cmd": "ls"}')
        store.append(session.id, [Message.assistant(tool_calls=[call])])
        store.append(session.id, [Message.tool("c1", "a.py", name="sh")])
        calls = [ToolCallPart(id=f"d{i}", name="sh", arguments=f'{{"i": {i}}}') for i in range(3)]
        store.append(session.id, [Message.assistant("three", tool_calls=calls)])
        store.append(session.id, [Message.tool(f"d{i}", f"out {i}", name="sh") for i in range(3)])
        parts = list(log.sent)
        log.sent.clear()
        batch = [Message.user(f"event {i}") for i in range(1_000)]
        store.append(session.id, batch)
        thousand = list(log.sent)
        log.sent.clear()
        other = store.create_session()
        store.append(other.id, batch)  # a first append of 1,000: the head read, then routed
        first_batch = list(log.sent)
        log.recording = False
        every = (
            ("first", first),
            ("one", one),
            ("parts", parts),
            ("1,000", thousand),
            ("first 1,000", first_batch),
        )
        for name, sent in every:
            assert sent, f"{name}: no remote command logged (is this a Citus coordinator?)"
            assert not any("PREPARE TRANSACTION" in s for s in sent), (name, sent)
            assert not any("COMMIT PREPARED" in s for s in sent), (name, sent)
            # No COPY (Citus commits every COPY into a distributed table by two-phase
            # commit), and one worker: every shard named is one session's.
            assert not any(" COPY " in s for s in sent), (name, sent)
        # A guarded append, of one event or of 1,000, goes whole to the worker: one
        # delegated function call.
        for name, sent in (("one", one), ("1,000", thousand), ("first 1,000", first_batch)):
            assert sum(postgres.ROUTED_FUNCTION in s for s in sent) == 1, (name, sent)
        assert sum(postgres.ROUTED_FUNCTION in s for s in parts) == 4, parts
        assert store.head(session.id) == 1_008
        with store.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT seq, idx, tool_call_id FROM parts WHERE session_id = :s ORDER BY 1, 2"
                ),
                {"s": session.id},
            ).all()
        assert [r[2] for r in rows] == ["c1", "c1", None, "d0", "d1", "d2", "d0", "d1", "d2"]
        assert store.head(other.id) == 1_000
        assert store.verify(session.id).ok and store.verify(other.id).ok
        assert [m["content"] for m in store.view(session.id).to_messages()[-2:]] == [
            "event 998",
            "event 999",
        ]
    finally:
        store.close()
        log.engine.dispose()


def test_routed_payloads_are_split_at_their_separator_only(distributed_url: str) -> None:
    """The routed call joins a batch's payloads by a control character, which a payload's
    JSON holds only escaped: content with that character (and with quotes, backslashes
    and braces) reads back as written, and a call whose payloads do not split into one
    per event is refused with nothing written."""
    from eventstore._append import postgres

    store = EventStore(distributed_url, tenant=f"t-{uuid.uuid4().hex}")
    try:
        sid = store.create_session().id
        store.append(sid, [Message.user("first")])  # the locked path: the head is known
        texts = [
            f"a{postgres.PAYLOAD_SEPARATOR}b",
            '{"x": "\\"quoted\\"", "y": [1, 2]}',
            "c\\d\x1f\ne",
        ]
        store.append(sid, [Message.user(t) for t in texts])  # one routed call of three
        store.append(sid, [Message.user(texts[0])])  # and one of one event
        got = [m["content"] for m in store.view(sid).to_messages()]
        assert got == ["first", *texts, texts[0]]
        assert store.verify(sid).ok
        head = store.head(sid)
        with store.engine.connect() as conn:
            h = conn.execute(
                text("SELECT head_hash FROM sessions WHERE id = :s"), {"s": sid}
            ).scalar()
        driver = store.engine.raw_connection()
        try:
            # Two events, one payload: refused before the head moves.
            args = [sid, store.tenant, head, h, head + 2, "x", "2030-01-01T00:00:00+00:00",
                    5000, "{1,2}", '{"i1","i2"}', "{message,message}",
                    '{"2030-01-01T00:00:00+00:00","2030-01-01T00:00:00+00:00"}',
                    '{"role":"user"}', "{1,1}", "{1,1}", "{NULL,NULL}", "{NULL,NULL}",
                    "{NULL,NULL}", '{"h1","h2"}', "{}", "{}", "{}", "{}", "{}", "{}",
                    "{}"]  # fmt: skip
            placeholders = ", ".join(["%s"] * len(args))
            with pytest.raises(Exception, match="1 payloads for 2 events"):
                with driver.cursor() as cur:
                    cur.execute(f"SELECT {postgres.ROUTED_FUNCTION}({placeholders})", args)
            driver.rollback()
        finally:
            driver.close()
        assert store.head(sid) == head
        assert store.verify(sid).ok
    finally:
        store.close()


def test_prunes_condensations_seals_and_purges_commit_without_two_phase_commit(
    distributed_url: str,
) -> None:
    log = _RemoteCommands(distributed_url)
    store = EventStore(engine=log.engine, tenant=f"t-{uuid.uuid4().hex}")
    try:
        s = store.create_session()
        store.append(s.id, [Message.user("task"), Message.tool("c", "out")])
        store.append(s.id, [Message.user(f"event {i}") for i in range(20)])
        sent: dict[str, list[str]] = {}

        def run(name: str, fn: Any) -> None:
            log.sent.clear()
            log.recording = True
            fn()
            log.recording = False
            sent[name] = list(log.sent)

        run("prune", lambda: store.append(s.id, [Prune(targets=[PartRef(seq=2, index=0)])]))
        cut = Condensation(summary="earlier", forgotten_from=3, forgotten_to=10)
        run("condensation", lambda: store.append(s.id, [cut]))
        run("seal", lambda: store.seal(s.id, b"k" * 32))
        run("purge", lambda: store.purge(s.id, through_seq=5))
        for name, commands in sent.items():
            assert commands, f"{name}: no remote command logged"
            assert not any("PREPARE TRANSACTION" in c for c in commands), (name, commands)
            assert not any(" COPY " in c for c in commands), (name, commands)
        assert store.verify(s.id, key=b"k" * 32).ok
        assert store.view(s.id).to_messages()[0]["content"].endswith("earlier")
    finally:
        store.close()
        log.engine.dispose()


def test_routed_append_refuses_a_moved_head(distributed_url: str) -> None:
    """Two stores on one session: the second's remembered head is stale, so the routed
    call writes nothing and the locked path appends after the real head."""
    tenant = f"t-{uuid.uuid4().hex}"
    a = EventStore(distributed_url, tenant=tenant)
    b = EventStore(distributed_url, tenant=tenant)
    try:
        s = a.create_session()
        a.append(s.id, [Message.user("a1")])
        b.append(s.id, [Message.user("b1")])  # b learns the head (2)
        a.append(s.id, [Message.user("a2")])  # a's head is stale: locked, then 3
        b.append(s.id, [Message.user("b2")])  # b's head is stale too
        assert a.head(s.id) == 4
        assert [m["content"] for m in a.view(s.id).to_messages()] == ["a1", "b1", "a2", "b2"]
        assert a.verify(s.id).ok
    finally:
        a.close()
        b.close()


def _local_bytes(url: str, tables: tuple[str, ...]) -> dict[str, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                t: int(conn.execute(text("SELECT pg_relation_size(:t)"), {"t": t}).scalar() or 0)
                for t in tables
            }
    finally:
        engine.dispose()


def test_distributing_a_populated_database_leaves_no_coordinator_copy(citus_url: str) -> None:
    store = EventStore(citus_url, tenant="populated")
    sessions = [store.create_session() for _ in range(5)]
    for s in sessions:
        store.append(s.id, [Message.user(f"{s.id} {i}") for i in range(50)])
    store.close()
    before = _local_bytes(citus_url, ("events", "parts", "sessions"))
    assert before["events"] > 0 and before["sessions"] > 0
    result = _distribute(citus_url)
    assert result.exit_code == 0, result.output
    assert "truncate_local_data_after_distributing_table('events')" in result.output
    assert _local_bytes(citus_url, ("events", "parts", "sessions")) == {
        "events": 0,
        "parts": 0,
        "sessions": 0,
    }
    store = EventStore(citus_url, tenant="populated")
    try:
        for s in sessions:  # every row is on the workers, and the chains still verify
            assert store.head(s.id) == 50
            assert store.verify(s.id).ok
            assert store.view(s.id).to_messages()[0]["content"] == f"{s.id} 0"
    finally:
        store.close()
    # The guards are back, on the coordinator and on the shards.
    engine = create_engine(citus_url)
    try:
        for sql in ("UPDATE events SET kind = kind", "DELETE FROM events", "TRUNCATE events"):
            with engine.connect() as conn, pytest.raises(Exception, match="append-only"):
                conn.execute(text(sql))
    finally:
        engine.dispose()


def test_distributing_twice_says_already_distributed(distributed_url: str) -> None:
    result = _distribute(distributed_url)
    assert result.exit_code == 0, result.output
    assert "already distributed" in result.output


def test_distribute_without_a_registered_worker_refuses(citus_url: str) -> None:
    """A database made with a plain CREATE DATABASE on the coordinator has no workers."""
    name = f"es_lone_{uuid.uuid4().hex[:10]}"
    admin = create_engine(
        make_url(citus_url).set(database="postgres").render_as_string(False),
        isolation_level="AUTOCOMMIT",
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(citus_url).set(database=name).render_as_string(False)
    try:
        EventStore(url, upgrade=True).close()
        result = _distribute(url)
        assert result.exit_code == 1, result.output
        assert "no worker node is registered" in result.output
        assert "citus_add_node" in result.output
        engine = create_engine(url)
        try:
            with engine.connect() as conn:  # nothing was changed
                dist = conn.execute(text("SELECT to_regclass('pg_dist_partition')")).scalar()
                assert dist is None
        finally:
            engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_a_view_is_one_call_on_the_sessions_worker_and_reads_what_the_statement_reads(
    distributed_url: str,
) -> None:
    """The routed view's function gives the rows of the one statement a plain Postgres
    store sends, for a session with everything a view reads (pins in and before the
    tail, hiding and truncating prunes, requests, breaker events, model calls), at every
    seq; a view is one delegated call, committed without two-phase commit; a fork is
    left to the statement-by-statement read."""
    from eventstore._sql import view_rows as vr
    from tests.test_views import busy_lineage

    log = _RemoteCommands(distributed_url)
    store = EventStore(engine=log.engine, tenant=f"t-{uuid.uuid4().hex}")
    try:
        root, fork, grand = busy_lineage(store)
        statement, template = vr._alone_statement(True, "$", True)
        with store.engine.connect() as conn:
            assert vr.routes_views(conn)
            head = store.head(root)
            for as_of in [*range(1, head + 1), None]:
                bound = vr._NO_BOUND if as_of is None else as_of
                values = {vr._SESSION: root, vr._TENANT: store.tenant, vr._BOUND: bound}
                params = [values.get(p, p) for p in template]
                called = vr._fetch(
                    conn, True, vr.ROUTED_VIEW_CALL, [root, store.tenant, bound], routed=True
                )
                sent = vr._fetch(conn, True, statement, params)
                assert called is not None and sent is not None
                # (Each row under each of its tags; the tag column itself may name two.)
                assert {k: sorted(r[1:] for r in v) for k, v in called.items()} == {
                    k: sorted(r[1:] for r in v) for k, v in sent.items()
                }, as_of
            # Every tag the statement has for a busy session came back (a pin in the
            # tail is one row with both tags).
            assert set(called) == {"s", "c", "p", "t", "r", "x", "b", "l", "q", "u", "k"}
            for sid in (fork, grand):  # the session row only: the store reads it otherwise
                rows = vr._fetch(
                    conn, True, vr.ROUTED_VIEW_CALL, [sid, store.tenant, 1], routed=True
                )
                assert rows is not None and list(rows) == ["s"]
            assert vr._fetch(conn, True, vr.ROUTED_VIEW_CALL, [root, "other", 1], routed=True) == {}
        log.recording = True
        view = store.view(root)
        log.recording = False
        assert sum(vr.ROUTED_VIEW_FUNCTION in s for s in log.sent) == 1, log.sent
        assert not any("PREPARE TRANSACTION" in s for s in log.sent), log.sent
        assert view.seq == head and view.to_messages()
        assert store.view(fork).to_messages() and store.view(grand).to_messages()
    finally:
        store.close()
        log.engine.dispose()


def test_distributing_again_brings_the_routed_functions_up_to_date(distributed_url: str) -> None:
    """A database distributed by an earlier version (no view function, an append
    function of another body, without its plan setting) gets both from a second `db
    distribute`; until then a store reads views with the one statement and appends with
    the earlier function."""
    from eventstore._append import postgres
    from eventstore._sql import view_rows as vr

    engine = create_engine(distributed_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f"DROP FUNCTION {vr.ROUTED_VIEW_SIGNATURE}"))
            earlier = re.sub(r"-- eventstore append \w+\n", "", postgres.ROUTED_FUNCTION_DDL)
            earlier = earlier.replace(f" SET {postgres.ROUTED_PLANS.replace('=', ' = ')}", "")
            assert earlier != postgres.ROUTED_FUNCTION_DDL and "plan_cache_mode" not in earlier
            conn.exec_driver_sql(earlier.replace("%", "%%"))
        store = EventStore(distributed_url, tenant=f"t-{uuid.uuid4().hex}")
        try:
            sid = store.create_session().id
            store.append(sid, [Message.user("one"), Message.user("two")])
            store.append(sid, [Message.user("three")])  # the earlier function, one row
            before = store.view(sid).to_messages()
            with store.engine.connect() as conn:
                assert not vr.routes_views(conn)
        finally:
            store.close()
        result = _distribute(distributed_url)
        assert result.exit_code == 0, result.output
        assert "added the routed functions" in result.output
        assert "plan_cache_mode" in result.output and vr.ROUTED_VIEW_FUNCTION in result.output
        with engine.connect() as conn:
            config = conn.execute(
                text("SELECT proconfig FROM pg_proc WHERE oid = to_regprocedure(:f)"),
                {"f": postgres.ROUTED_SIGNATURE},
            ).scalar()
            assert postgres.ROUTED_PLANS in config
        store = EventStore(distributed_url, tenant=store.tenant)
        try:
            with store.engine.connect() as conn:
                assert vr.routes_views(conn)
            assert store.view(sid).to_messages() == before
        finally:
            store.close()
        again = _distribute(distributed_url)
        assert "nothing to do" in again.output, again.output
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- citus_direct


class _Notices:
    """Every notice any pooled connection opened from now on receives, with the port of
    the node it came from (the store's worker pools are opened inside the store)."""

    def __init__(self) -> None:
        self.got: list[tuple[int, str]] = []

    def __enter__(self) -> _Notices:
        event.listen(Pool, "connect", self._on_connect)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(Pool, "connect", self._on_connect)

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        port = int(dbapi_conn.info.port)
        dbapi_conn.add_notice_handler(lambda d: self.got.append((port, d.message_primary or "")))

    def take(self) -> list[tuple[int, str]]:
        got, self.got = self.got, []
        return got


#: What a node logs for a command it runs on its own shards (a statement or a COPY).
_LOCAL = re.compile(r"executing the (command|copy) locally")


def _logged(url: str, *, direct: bool) -> str:
    """``url`` with Citus's remote commands reported to the client, ``citus_direct`` on
    or off."""
    query = {"options": "-c citus.log_remote_commands=on"}
    if direct:
        query["citus_direct"] = "true"
    return make_url(url).update_query_dict(query).render_as_string(False)


def _shard_node(url: str, session_id: str) -> int:
    """The port of the worker holding ``session_id``'s shard, as Citus says."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            port: int = conn.execute(
                text(
                    "SELECT nodeport FROM citus_shards WHERE table_name = 'sessions'::regclass "
                    "AND shardid = "
                    "get_shard_id_for_distribution_column('sessions', CAST(:s AS varchar))"
                ),
                {"s": session_id},
            ).scalar_one()
        return port
    finally:
        engine.dispose()


def test_citus_direct_runs_appends_and_views_on_the_sessions_worker(distributed_url: str) -> None:
    """With ``citus_direct=true`` a guarded append (one event, 1,000) and a view are each
    one call the session's worker runs on its own shards: the coordinator sends nothing,
    the worker nothing to another node (no two-phase commit); what is written and read
    equals what the coordinator's path writes and reads."""
    coordinator = make_url(distributed_url).port
    tenant = f"t-{uuid.uuid4().hex}"
    with _Notices() as notices:
        store = EventStore(_logged(distributed_url, direct=True), tenant=tenant)
        plain = EventStore(distributed_url, tenant=tenant)
        try:
            assert store._direct is not None and plain._direct is None
            sid = store.create_session().id
            twin = plain.create_session().id
            first = [Message.user("first")]  # the same events (their ids too) to each
            store.append(sid, first)  # the locked path
            plain.append(twin, first)
            worker = _shard_node(distributed_url, sid)
            assert worker != coordinator
            notices.take()
            for step in (
                [Message.user("one")],
                [Message.assistant("two", tool_calls=[ToolCallPart(id="c", name="sh")])],
                [Message.user(f"event {i}") for i in range(1_000)],
            ):
                store.append(sid, step)
                got = notices.take()
                assert got, "no command logged on the worker (is this a Citus cluster?)"
                assert {port for port, _ in got} == {worker}, got
                # Run where the call landed: no command issued to another node.
                assert all(_LOCAL.match(m) for _, m in got), got
                assert not any("PREPARE TRANSACTION" in m for _, m in got), got
                plain.append(twin, step)
            view = store.view(sid)
            got = notices.take()
            assert {port for port, _ in got} == {worker}, got
            assert all(_LOCAL.match(m) for _, m in got), got
            assert store.head(sid) == 1_003
            assert store._direct.lookups == 1  # the session's place, looked up once
            # The same rows as through the coordinator: the events' content and the view.
            mine, theirs = (
                [(e.seq, e.event.model_dump(exclude={"id", "created_at"})) for e in s.read(x)]
                for s, x in ((store, sid), (plain, twin))
            )
            assert len(mine) == 1_003
            assert mine == theirs
            assert view.to_messages() == plain.view(twin).to_messages()
            assert store.verify(sid).ok
        finally:
            store.close()
            plain.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_citus_direct_goes_by_the_coordinator_while_a_worker_cannot_be_reached(
    distributed_url: str,
) -> None:
    """A worker the client cannot connect to (here: the session's place pointed at a port
    nothing listens on) is left out: the append and the view go through the coordinator,
    which routes them as without the option, and are right."""
    from eventstore._append import postgres
    from eventstore._sql import view_rows as vr

    coordinator = make_url(distributed_url).port
    with _Notices() as notices:
        store = EventStore(_logged(distributed_url, direct=True), tenant=f"t-{uuid.uuid4().hex}")
        try:
            assert store._direct is not None
            sid = store.create_session().id
            store.append(sid, [Message.user("first")])
            nowhere = ("127.0.0.1", _free_port())
            store._direct._where[sid] = (nowhere, time.monotonic())
            notices.take()
            store.append(sid, [Message.user("second")])
            messages = store.view(sid).to_messages()
            got = notices.take()
            on_coordinator = [m for port, m in got if port == coordinator]
            assert sum(postgres.ROUTED_FUNCTION in m for m in on_coordinator) == 1, got
            assert sum(vr.ROUTED_VIEW_FUNCTION in m for m in on_coordinator) == 1, got
            assert [m["content"] for m in messages] == ["first", "second"]
            assert store._direct.node(sid) is None  # left out for a while
            assert store.head(sid) == 2 and store.verify(sid).ok
        finally:
            store.close()


def test_citus_direct_follows_a_moved_shard(distributed_url: str) -> None:
    """After the session's shards move to the other worker, the call sent to the old one
    is still right (its Citus sends the statements on); once the session's place is
    looked up again, calls run on the new worker."""
    tenant = f"t-{uuid.uuid4().hex}"
    with _Notices() as notices:
        store = EventStore(_logged(distributed_url, direct=True), tenant=tenant)
        admin = create_engine(distributed_url, isolation_level="AUTOCOMMIT")
        try:
            assert store._direct is not None
            sid = store.create_session().id
            store.append(sid, [Message.user("first")])
            store.append(sid, [Message.user("second")])
            old = _shard_node(distributed_url, sid)
            with admin.connect() as conn:
                new = conn.execute(
                    text(
                        "SELECT nodeport FROM pg_dist_node WHERE noderole = 'primary' "
                        "AND shouldhaveshards AND nodeport <> :p ORDER BY nodeid LIMIT 1"
                    ),
                    {"p": old},
                ).scalar_one()
                conn.execute(
                    text(
                        "SELECT citus_move_shard_placement("
                        "get_shard_id_for_distribution_column('sessions', CAST(:s AS varchar)), "
                        "'127.0.0.1', :old, '127.0.0.1', :new, shard_transfer_mode => "
                        "'block_writes')"
                    ),
                    {"s": sid, "old": old, "new": new},
                )
            assert _shard_node(distributed_url, sid) == new
            notices.take()
            store.append(sid, [Message.user("third")])  # sent to the old worker still
            assert [m["content"] for m in store.view(sid).to_messages()] == [
                "first",
                "second",
                "third",
            ]
            got = notices.take()
            assert got and {port for port, _ in got} == {old}, got
            store._direct.forget(sid)  # as MAP_SECONDS running out does
            store.append(sid, [Message.user("fourth")])
            got = notices.take()
            assert got and {port for port, _ in got} == {new}, got
            assert all(_LOCAL.match(m) for _, m in got), got
            assert store.head(sid) == 4 and store.verify(sid).ok
        finally:
            store.close()
            admin.dispose()
