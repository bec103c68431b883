"""Spreading a store past one machine by session: Citus, or hash partitions on Postgres.

Since schema revision 0007 every primary and unique key of a session's tables contains
the session (``sessions.id``, elsewhere ``session_id``) and no foreign key crosses from
one session to another, so a session and everything in it can live on one shard:

* **Citus** (:func:`distribute_citus`): the session tables become distributed tables on
  the session column, co-located, so an append, a read and a view each touch one worker.
  A store finds out it runs on distributed tables (:func:`is_distributed`) and then
  writes its view statements so that Citus can route them, and sets its lock timeout per
  write transaction.
  The tenant-wide tables are distributed by their own keys (``session_keys`` by the name's
  digest, ``blobs`` by content digest, ``feed`` by tenant) and the small global ones
  become reference tables.
* **Plain Postgres** (:func:`partition_by_session`): ``events`` and ``parts`` are rebuilt
  as tables hash-partitioned by ``session_id`` into ``N`` partitions, the same key rules
  checked by the server itself (a partitioned table's unique keys must include the
  partition column). The guards are re-created on the parent and on each partition.

Both return the statements they ran, for the ``eventstore db distribute`` command to show.
"""

from __future__ import annotations

import re

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from ._engine import DEFAULT_LOCK_TIMEOUT_MS
from ._routing import epoch, forget_distribution, function_body, installed_body, is_distributed
from .errors import SchemaError
from .schema import SCHEMA_REVISION

__all__ = [
    "SESSION_TABLES",
    "citus_available",
    "citus_preloaded",
    "distribute_citus",
    "AlreadyDistributed",
    "is_distributed",
    "routes_appends",
    "forget_distribution",
    "partition_by_session",
    "partitions_of",
    "is_partition_name",
]

#: Tables whose rows belong to one session, with the column that names it. Citus
#: co-locates them on that column; the first one is the one the others follow.
SESSION_TABLES: tuple[tuple[str, str], ...] = (
    ("sessions", "id"),
    ("events", "session_id"),
    ("parts", "session_id"),
    ("fork_compactions", "session_id"),
    ("feed_pending", "session_id"),
    ("search_docs", "session_id"),
    ("purge_pending", "session_id"),
)

#: Tenant-wide tables that grow with use: distributed by their own key, each on its own.
_KEYED_TABLES: tuple[tuple[str, str], ...] = (
    ("session_keys", "key_digest"),
    ("blobs", "digest"),
    ("feed", "tenant"),
)

#: Small global tables: a copy on every node.
_REFERENCE_TABLES = ("search_progress", "feed_cursor", "alembic_version")

_PARTITIONED = ("events", "parts")
_PARTITION_NAME = re.compile(r"^(events|parts)_p\d+$")


def is_partition_name(name: str) -> bool:
    """Whether ``name`` is a partition :func:`partition_by_session` creates."""
    return bool(_PARTITION_NAME.match(name))


def _require_postgres_at_head(conn: Connection, what: str) -> None:
    if conn.dialect.name != "postgresql":
        raise SchemaError(
            f"{what} needs Postgres: a SQLite database is one file on one machine, so there "
            "is nothing to spread. Move the store to Postgres (`eventstore export` / "
            "`eventstore import`), then run this command against it"
        )
    row = conn.execute(text("SELECT to_regclass('alembic_version')")).scalar()
    current = (
        conn.execute(text("SELECT version_num FROM alembic_version")).scalar() if row else None
    )
    if current != SCHEMA_REVISION:
        raise SchemaError(
            f"the database is at schema revision {current or 'empty'}; {what} needs "
            f"{SCHEMA_REVISION}, whose keys all include the session. Run `eventstore db "
            "upgrade` first"
        )


def citus_preloaded(shared_preload_libraries: str) -> bool:
    """Whether a ``shared_preload_libraries`` setting loads Citus (the only way it runs)."""
    names = (n.strip().strip('"').strip() for n in shared_preload_libraries.split(","))
    return any(n.rsplit("/", 1)[-1] in ("citus", "citus.so") for n in names)


def citus_available(conn: Connection) -> bool:
    """Whether the server can load the ``citus`` extension."""
    if conn.dialect.name != "postgresql":
        return False
    found = conn.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'citus'")).first()
    return found is not None


class AlreadyDistributed(Exception):
    """:func:`distribute_citus` found the tables distributed: nothing to do but what
    :attr:`statements` (the routed functions, where they were missing or out of date)
    did."""

    def __init__(self, statements: list[str]) -> None:
        super().__init__("already distributed")
        self.statements = statements


def _routed_append_statements(conn: Connection) -> list[str]:
    """The statements that create (or bring up to date) the routed append's function and
    distribute it by the session (see :mod:`eventstore._append.postgres`); none when it is
    there as this version writes it. An earlier version's still appends correctly, so
    appends use it until then (:func:`routes_appends`)."""
    from ._append import postgres

    ddl = postgres.ROUTED_FUNCTION_DDL
    if installed_body(conn, postgres.ROUTED_SIGNATURE) == function_body(ddl):
        return []
    # CREATE OR REPLACE of a distributed function reaches the workers by itself.
    distributed = _distributed_function(conn, postgres.ROUTED_SIGNATURE)
    return [ddl] + ([] if distributed else [postgres.ROUTED_DISTRIBUTE])


def _routed_view_statements(conn: Connection) -> list[str]:
    """The statements that create (or bring up to date) the routed view's function and
    distribute it by the session (see :func:`eventstore._sql.view_rows.routed_view_function`);
    none when it is there as this version writes it."""
    from ._sql import view_rows

    if view_rows.routed_view_source(conn) == view_rows.view_source():
        return []
    # CREATE OR REPLACE of a distributed function reaches the workers by itself.
    distributed = _distributed_function(conn, view_rows.ROUTED_VIEW_SIGNATURE)
    return [view_rows.routed_view_function()] + (
        [] if distributed else [view_rows.ROUTED_VIEW_DISTRIBUTE]
    )


def _distributed_function(conn: Connection, signature: str) -> bool:
    """Whether the function of ``signature`` is there, distributed by an argument."""
    return bool(
        conn.exec_driver_sql(
            "SELECT EXISTS (SELECT 1 FROM pg_dist_object o "
            "WHERE o.classid = 'pg_proc'::regclass "
            f"AND o.objid = to_regprocedure('{signature}') "
            "AND o.distribution_argument_index IS NOT NULL)"
        ).scalar()
    )


#: Key in a pooled connection's ``info``: whether appends go through the routed function.
_ROUTED = "eventstore.routed"


def routes_appends(conn: Connection) -> bool:
    """Whether appends on ``conn`` go through the routed append's function: the tables are
    distributed (:func:`is_distributed`) and the function is there (``db distribute``
    creates it with the distributed tables; a database distributed by an earlier version
    gets it from a second ``db distribute``). Without it a distributed store appends with
    the statements written for plain tables, which Citus commits on the workers by
    two-phase commit. Asked once per pooled connection, as :func:`is_distributed` is."""
    if not is_distributed(conn):
        return False
    mark = conn.info.get(_ROUTED)
    if mark is not None and mark[0] == epoch():
        return bool(mark[1])
    from ._append import postgres

    known = bool(
        conn.exec_driver_sql(
            f"SELECT to_regprocedure('{postgres.ROUTED_SIGNATURE}') IS NOT NULL"
        ).scalar()
    )
    conn.info[_ROUTED] = (epoch(), known)
    return known


def _workers(conn: Connection) -> int:
    """How many active primary workers this database has registered."""
    return int(
        conn.exec_driver_sql("SELECT count(*) FROM citus_get_active_worker_nodes()").scalar() or 0
    )


def distribute_citus(engine: Engine) -> list[str]:
    """Distribute the schema with Citus; returns the statements run.

    The tables' rows move to the workers' shards, and the coordinator's local copy of a
    populated database is emptied (the append-only guards let Citus's own cleanup,
    ``truncate_local_data_after_distributing_table``, through for that statement only).

    Raises:
        SchemaError: Not Postgres, the schema is not at the head revision, the server has
            no ``citus`` extension, or no worker is registered in this database; the
            message says what to do instead.
        AlreadyDistributed: The tables are distributed already.
    """
    with engine.begin() as conn:
        already = conn.dialect.name == "postgresql" and is_distributed(conn, fresh=True)
        if already:
            added = _routed_append_statements(conn) + _routed_view_statements(conn)
            for sql in added:
                _run(conn, sql)
    if already:  # (raised once the transaction above committed)
        raise AlreadyDistributed(added)
    with engine.begin() as conn:
        _require_postgres_at_head(conn, "distributing with Citus")
        if not citus_available(conn):
            raise SchemaError(
                "the citus extension is not available on this Postgres server "
                "(pg_available_extensions has no 'citus'), so the tables cannot be "
                "distributed over worker nodes. Install Citus on the server (and add it to "
                "shared_preload_libraries), or run `eventstore db distribute --partition N` "
                "to hash-partition events and parts by session on this one server"
            )
        preload = str(conn.exec_driver_sql("SHOW shared_preload_libraries").scalar())
        if not citus_preloaded(preload):
            here = f"set to {preload!r}" if preload else "empty"
            raise SchemaError(
                "the citus extension is installed on this Postgres server but not loaded: "
                f"Citus runs only from shared_preload_libraries ({here} here). Add 'citus' "
                "to shared_preload_libraries in postgresql.conf on the coordinator and every "
                "worker, restart them, add the workers (SELECT citus_add_node(...)), then run "
                "this again"
            )
        conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS citus")
        if _workers(conn) == 0:
            db = conn.exec_driver_sql("SELECT current_database()").scalar()
            raise SchemaError(
                f"no worker node is registered in database {db!r}, so Citus would keep every "
                "shard on this coordinator (Citus keeps its list of nodes per database). "
                "Create the database and the citus extension on each worker, register each "
                f"worker here (connected to {db!r} on the coordinator: SELECT "
                "citus_add_node('worker-host', 5432);), then run this again"
            )
        present = {
            r[0]
            for r in conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
            )
        }
        statements = [
            "CREATE EXTENSION IF NOT EXISTS citus",
            # The append-only guards touch only co-located rows of one session, the case
            # Citus runs safely on each shard.
            "SET LOCAL citus.enable_unsafe_triggers = on",
            # One connection per worker for the whole transaction: the function and the
            # guards' switches below may not follow parallel shard writes in it.
            "SET LOCAL citus.multi_shard_modify_mode = 'sequential'",
        ]
        first = SESSION_TABLES[0][0]
        for table, column in SESSION_TABLES:
            if table not in present:
                continue
            colocate = "none" if table == first else first
            statements.append(
                f"SELECT create_distributed_table('{table}', '{column}', "
                f"colocate_with => '{colocate}')"
            )
        for table, column in _KEYED_TABLES:
            statements.append(
                f"SELECT create_distributed_table('{table}', '{column}', colocate_with => 'none')"
            )
        statements += [f"SELECT create_reference_table('{t}')" for t in _REFERENCE_TABLES]
        # The connections Citus opens to the workers take the database's defaults, which
        # Citus copies to every node: a store sets its lock_timeout for each write (and Citus
        # passes that on), and this default is the backstop for a session that does not (a
        # store opened before the tables were distributed, another client). Without it, a
        # write blocked by a lock on a worker would wait there without limit.
        name = conn.dialect.identifier_preparer.quote(
            str(conn.exec_driver_sql("SELECT current_database()").scalar())
        )
        statements.append(f"ALTER DATABASE {name} SET lock_timeout = {DEFAULT_LOCK_TIMEOUT_MS}")
        statements += _routed_append_statements(conn)
        statements += _routed_view_statements(conn)
        # Distributing copies a populated table's rows to the shards and leaves them in the
        # coordinator's own table too, hidden (no query reads them) but on its disk. Citus's
        # cleanup truncates that copy, which the TRUNCATE guards refuse: they step aside
        # for this transaction only, which holds the tables locked, and are back before
        # it commits (on the shards too: ENABLE reaches them).
        for table in _GUARDED_TRUNCATE:
            statements.append(f"ALTER TABLE {table} DISABLE TRIGGER {table}_no_truncate")
        moved = [t for t, _ in SESSION_TABLES if t in present]
        moved += [t for t, _ in _KEYED_TABLES] + list(_REFERENCE_TABLES)
        statements += [f"SELECT truncate_local_data_after_distributing_table('{t}')" for t in moved]
        for table in _GUARDED_TRUNCATE:
            statements.append(f"ALTER TABLE {table} ENABLE TRIGGER {table}_no_truncate")
        for sql in statements:
            _run(conn, sql)
        return statements


def _run(conn: Connection, sql: str) -> None:
    """Run one statement of :func:`distribute_citus` as it is written (the driver reads
    ``%`` as a placeholder's start: the view's function holds ``LIKE`` patterns)."""
    conn.exec_driver_sql(sql.replace("%", "%%"))


#: The tables whose TRUNCATE the append-only guards refuse.
_GUARDED_TRUNCATE = ("events", "parts")


def partitions_of(conn: Connection, table: str) -> list[str]:
    """The partitions of ``table`` (empty when it is not partitioned)."""
    rows = conn.execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(:t) ORDER BY c.relname"
        ),
        {"t": table},
    )
    return [r[0] for r in rows]


def _payload_lz4(conn: Connection) -> bool:
    """Whether ``events.payload`` is compressed with lz4 (schema 0009 on a server that has
    it), so that the partitioned table is made the same way."""
    if conn.dialect.server_version_info < (14,):  # type: ignore[operator]
        return False
    method = conn.exec_driver_sql(
        "SELECT attcompression FROM pg_attribute "
        "WHERE attrelid = 'events'::regclass AND attname = 'payload'"
    ).scalar()
    return method == "l"


def partition_by_session(engine: Engine, partitions: int) -> list[str]:
    """Rebuild ``events`` and ``parts`` as tables hash-partitioned by ``session_id``.

    One transaction: the rows are copied as they are (every hash chain still verifies),
    the old tables dropped, and the keys, indexes and append-only guards re-created under
    their usual names. Writers wait on the table locks meanwhile.

    Raises:
        SchemaError: Not Postgres, not at the head revision, already partitioned, or
            ``partitions`` out of range.
    """
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 2 <= partitions:
        raise SchemaError(f"--partition: a number of partitions of 2 or more, not {partitions!r}")
    if partitions > 1024:
        raise SchemaError(f"--partition: at most 1024 partitions, not {partitions}")
    from .schema import PG_TRIGGERS, RARE_KIND

    with engine.begin() as conn:
        _require_postgres_at_head(conn, "partitioning by session")
        if partitions_of(conn, "events"):
            raise SchemaError(
                "events is already partitioned; nothing was changed (to change the number "
                "of partitions, export the sessions into a new database and partition that)"
            )
        statements = ["LOCK TABLE sessions, events, parts IN ACCESS EXCLUSIVE MODE"]
        for table in _PARTITIONED:
            statements.append(
                f"CREATE TABLE _new_{table} (LIKE {table} INCLUDING DEFAULTS) "
                "PARTITION BY HASH (session_id)"
            )
            statements += [
                f"CREATE TABLE {table}_p{i} PARTITION OF _new_{table} "
                f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
                for i in range(partitions)
            ]
            if table == "events" and _payload_lz4(conn):
                # Partitions inherit the parent's column compression when created after it.
                statements.insert(
                    -partitions,
                    "ALTER TABLE _new_events ALTER COLUMN payload SET COMPRESSION lz4",
                )
            statements.append(f"INSERT INTO _new_{table} SELECT * FROM {table}")
        # DROP fires no row triggers: the guards reject changes to rows, not the swap.
        statements += ["DROP TABLE parts", "DROP TABLE events"]
        statements += [f"ALTER TABLE _new_{t} RENAME TO {t}" for t in _PARTITIONED]
        statements += [
            "ALTER TABLE events ADD CONSTRAINT pk_events PRIMARY KEY (session_id, seq)",
            "ALTER TABLE events ADD CONSTRAINT uq_events_id_session_id UNIQUE (id, session_id)",
            "CREATE UNIQUE INDEX ix_events_session_id_idempotency_key "
            "ON events (session_id, idempotency_key) WHERE idempotency_key IS NOT NULL",
            "CREATE INDEX ix_events_session_id_kind_seq_not_message "
            f"ON events (session_id, kind, seq) WHERE {RARE_KIND}",
            "ALTER TABLE parts ADD CONSTRAINT pk_parts PRIMARY KEY (session_id, seq, idx)",
        ]
        statements += [sql for _, table, sql in PG_TRIGGERS if table in _PARTITIONED]
        # Statement triggers stay on the table they are created on: a TRUNCATE aimed at
        # one partition needs its own guard.
        for table in _PARTITIONED:
            statements += [
                f"CREATE TRIGGER {table}_p{i}_no_truncate BEFORE TRUNCATE ON {table}_p{i} "
                "FOR EACH STATEMENT EXECUTE FUNCTION eventstore_reject_change()"
                for i in range(partitions)
            ]
        statements += ["ANALYZE events", "ANALYZE parts"]
        for sql in statements:
            conn.exec_driver_sql(sql)
        return statements
