"""Revision 0009: fewer index writes per appended event, every guarantee kept.

Messages touch neither the partial kind index nor the partial idempotency index; a lookup by
event id, the idempotency check and the probe for the latest condensation still use an
index; and the rebuild (SQLite) or the in-place change (Postgres) keeps every byte.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text

from eventstore import EventStore
from eventstore.errors import EventStoreError, IdempotencyMismatchError
from eventstore.events import Condensation, Message
from eventstore.migrate import check, current_revision, downgrade, upgrade
from eventstore.schema import SCHEMA_REVISION
from tests.test_scaling import _all_verify, _seed


def _index_defs(engine: Any) -> dict[str, str]:
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                "AND tbl_name = 'events'"
            )
        else:
            rows = conn.exec_driver_sql(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'events'"
            )
        return {r[0]: r[1] for r in rows}


def _foreign_keys(engine: Any) -> int:
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            return sum(
                len(conn.exec_driver_sql(f"PRAGMA foreign_key_list({t})").all())
                for t in ("events", "parts")
            )
        return conn.exec_driver_sql(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f' "
            "AND conrelid IN ('events'::regclass, 'parts'::regclass)"
        ).scalar_one()


def _has_lz4(engine: Any) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.exec_driver_sql(
                "SELECT coalesce(bool_or('lz4' = ANY(enumvals)), false) FROM pg_settings "
                "WHERE name = 'default_toast_compression'"
            ).scalar()
        )


def _payload_compression(engine: Any, table: str = "events") -> str:
    with engine.connect() as conn:
        return conn.exec_driver_sql(
            "SELECT attcompression FROM pg_attribute "
            f"WHERE attrelid = '{table}'::regclass AND attname = 'payload'"
        ).scalar_one()


def _assert_0009_shape(engine: Any) -> None:
    defs = _index_defs(engine)
    assert "ix_events_id" not in defs and "ix_events_session_id_kind_seq" not in defs
    assert "kind <> 'message'" in defs["ix_events_session_id_kind_seq_not_message"].replace(
        "::text", ""
    ).replace("(", "").replace(")", "")
    assert "IS NOT NULL" in defs["ix_events_session_id_idempotency_key"]
    assert _foreign_keys(engine) == 0
    if engine.dialect.name == "postgresql":
        assert _payload_compression(engine) == ("l" if _has_lz4(engine) else "")
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            ddl = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'parts'"
            ).scalar_one()
        assert ddl.rstrip().endswith("WITHOUT ROWID")


def test_0009_keeps_rows_chains_and_keys_down_and_up(empty_url: str) -> None:
    with EventStore(empty_url, upgrade=True) as store:
        ids = _seed(store)
        store.append(ids["b"], [Condensation(forgotten_from=1, forgotten_to=1, summary="s")])
        views = {k: store.view(v).fingerprint() for k, v in ids.items()}
        rows = {k: [(e.seq, e.hash) for e in store.read(v)] for k, v in ids.items()}
    engine = create_engine(empty_url)
    try:
        _assert_0009_shape(engine)
        downgrade(engine, "0008")
        assert current_revision(engine) == "0008"
        # events -> sessions and parts -> events (SQLite lists the second's two columns).
        assert _foreign_keys(engine) == (3 if engine.dialect.name == "sqlite" else 2)
        assert {"ix_events_id", "ix_events_session_id_kind_seq"} <= set(_index_defs(engine))
        if engine.dialect.name == "postgresql":
            assert _payload_compression(engine) == ""  # the server's default again
        upgrade(engine)
        assert current_revision(engine) == SCHEMA_REVISION
        assert check(engine) == []
        _assert_0009_shape(engine)
    finally:
        engine.dispose()
    with EventStore(empty_url) as store:
        _all_verify(store, ids)
        assert {k: store.view(v).fingerprint() for k, v in ids.items()} == views
        assert {k: [(e.seq, e.hash) for e in store.read(v)] for k, v in ids.items()} == rows
        # The idempotency key still answers a retry, and still refuses another batch.
        again = store.append(ids["b"], [Message.user("b")], idempotency_key="once")
        assert again == [1]
        with pytest.raises(IdempotencyMismatchError):
            store.append(ids["b"], [Message.user("other")], idempotency_key="once")
        first = next(iter(store.read(ids["a"])))
        assert store.find_event(first.event.id).session_id == ids["a"]
        # An event id stays unique within its session.
        dup = Message.user("dup")
        dup.id = first.event.id
        with pytest.raises(EventStoreError):
            store.append(ids["a"], [dup])


def _plan(store: EventStore, sql: str, params: dict[str, Any]) -> str:
    with store.engine.connect() as conn:
        if store.dialect == "sqlite":
            rows = conn.execute(text("EXPLAIN QUERY PLAN " + sql), params).all()
            return " ".join(str(r[-1]) for r in rows)
        conn.exec_driver_sql("SET enable_seqscan = off")
        rows = conn.execute(text("EXPLAIN " + sql), params).all()
        conn.rollback()
        return " ".join(r[0] for r in rows)


def test_the_rare_kind_probes_use_the_partial_index(store: EventStore) -> None:
    # The statements a view makes for a condensation, and a lookup by idempotency key and
    # by id, each use an index; no message is in the kind index.
    from sqlalchemy import select

    from eventstore.schema import events, kind_is

    sid = store.create_session().id
    store.append(sid, [Message.user(f"m{i}") for i in range(50)], idempotency_key="k")
    store.append(sid, [Condensation(forgotten_from=1, forgotten_to=40, summary="s")])
    latest = (
        select(events.c.seq)
        .where(events.c.session_id == sid, kind_is("condensation"), events.c.seq <= 51)
        .order_by(events.c.seq.desc())
        .limit(1)
    )
    compiled = latest.compile(store.engine, compile_kwargs={"literal_binds": True})
    plan = _plan(store, str(compiled), {})
    assert "ix_events_session_id_kind_seq_not_message" in plan, plan
    key = _plan(
        store,
        "SELECT seq FROM events WHERE session_id = :s AND idempotency_key = :k",
        {"s": sid, "k": "k"},
    )
    assert "ix_events_session_id_idempotency_key" in key, key
    by_id = _plan(store, "SELECT seq FROM events WHERE id = :i", {"i": "x"})
    assert "uq_events_id_session_id" in by_id or "autoindex_events_2" in by_id, by_id
    with store.engine.connect() as conn:
        counted = conn.execute(
            text(
                "SELECT count(*) FROM events WHERE session_id = :s AND kind <> 'message' "
                "AND idempotency_key IS NULL"
            ),
            {"s": sid},
        ).scalar_one()
    assert counted == 1  # what the kind index holds of this session: the condensation
    assert store.view(sid).summary == "s"


def test_partitioning_keeps_the_payload_compression(pg_url: str) -> None:
    from click.testing import CliRunner

    from eventstore.cli import cli

    with EventStore(pg_url, upgrade=True) as store:
        sid = store.create_session().id
        store.append(sid, [Message.user("x" * 5000)])
    result = CliRunner().invoke(cli, ["--db", pg_url, "db", "distribute", "--partition", "2"])
    assert result.exit_code == 0, result.output
    engine = create_engine(pg_url)
    try:
        want = "l" if _has_lz4(engine) else ""
        assert [_payload_compression(engine, t) for t in ("events", "events_p0", "events_p1")] == [
            want
        ] * 3
    finally:
        engine.dispose()
    with EventStore(pg_url) as store:
        assert store.verify(sid, fingerprints=False).ok
