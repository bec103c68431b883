"""Every write statement of an append on Postgres, on psycopg connections and cursors.

The head moves two ways, side by side below, and both queue the appended range for the
tenant feed in the same statement (see :mod:`eventstore._features.feed`):

* *guarded*: one data-modifying statement, its own transaction: ``UPDATE sessions ...
  WHERE head_seq = <remembered> AND head_hash = <remembered>`` in a CTE, and the
  ``events`` and ``parts`` inserts guarded by it. If another writer moved the head, the
  update matches no row (Postgres re-checks the condition after waiting for the row
  lock) and nothing is inserted. Its text is fixed per batch shape, so it is prepared
  once per connection and sent through libpq (:func:`write_guarded_prepared`).
* *locked*: the head was read ``FOR UPDATE`` in the caller's transaction; the rows go by
  ``COPY`` (:func:`copy_rows`) and the head moves unconditionally (:func:`move_head`).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy.dialects import postgresql

from .._routing import versioned
from ..schema import events, parts
from .rows import EVENT_COLUMNS, PART_COLUMNS, Write

__all__ = [
    "MAX_GUARDED_BATCH",
    "write_guarded",
    "write_guarded_prepared",
    "move_head",
    "copy_rows",
    "libpq",
    "ROUTED_FUNCTION",
    "ROUTED_SIGNATURE",
    "ROUTED_FUNCTION_DDL",
    "ROUTED_DISTRIBUTE",
    "ROUTED_PLANS",
    "write_routed",
    "insert_rows_routed",
    "move_head_routed",
]

#: Larger batches go the locked way, where ``COPY`` streams the rows: one statement with
#: thousands of parameters costs more to parse than the round trips it saves.
MAX_GUARDED_BATCH = 16


def _types(table: Any, names: tuple[str, ...]) -> tuple[str, ...]:
    """Each column's Postgres type, as the schema declares it but without a length (the
    guarded statement's ``VALUES`` need the types, a bare parameter there being text; a
    cast to ``varchar(n)`` would cut a longer value where the column refuses it)."""
    dialect = postgresql.dialect()
    return tuple(re.sub(r"\(\d+\)", "", table.c[n].type.compile(dialect=dialect)) for n in names)


_EVENT_TYPES = _types(events, EVENT_COLUMNS)
_PART_TYPES = _types(parts, PART_COLUMNS)
# The range, queued for the tenant feed as the head moves.
_QUEUE_FEED = (
    "INSERT INTO feed_pending (session_id, from_seq, to_seq, tenant, queued_at) "
    "SELECT id, %s::integer, %s::integer, tenant, clock_timestamp() FROM h"
)
_LOCKED_HEAD = (
    "WITH h AS (UPDATE sessions SET head_seq = %s, head_hash = %s, updated_at = %s "
    f"WHERE id = %s RETURNING id, tenant) {_QUEUE_FEED}"
)
_COPY_EVENTS = f"COPY events ({', '.join(EVENT_COLUMNS)}) FROM STDIN"
_COPY_PARTS = f"COPY parts ({', '.join(PART_COLUMNS)}) FROM STDIN"


def move_head(
    cur: Any, session_id: str, head: int, new_seq: int, new_hash: str | None, newest: datetime
) -> None:
    """A locked append's head move from ``head`` to ``new_seq``, queueing the range for
    the feed."""
    cur.execute(_LOCKED_HEAD, (new_seq, new_hash, newest, session_id, head + 1, new_seq))


def copy_rows(
    cur: Any, event_rows: Iterable[tuple[Any, ...]], part_rows: list[tuple[Any, ...]]
) -> None:
    """``COPY`` a locked append's rows; ``part_rows`` may fill as ``event_rows`` are made
    (a :class:`~.rows.Rows` and its ``parts``). Each row is then made while psycopg sends
    the ones before it and the server inserts them: the two overlap (an event refused on
    the way stops the COPY, and the transaction with it). Text COPY: binary COPY with the
    column types set up front measured no faster (the server's inserts, not the parsing,
    are the cost)."""
    with cur.copy(_COPY_EVENTS) as copy:
        for r in event_rows:
            copy.write_row(r)
    if part_rows:
        with cur.copy(_COPY_PARTS) as copy:
            for r in part_rows:
                copy.write_row(r)


class _Statement:
    """A guarded append's statement for one batch shape: its text with psycopg's ``%s``
    placeholders, and with libpq's ``$n`` ones under the name it is prepared as."""

    __slots__ = ("text", "numbered", "name")

    def __init__(self, text: str) -> None:
        self.text = text
        pieces = text.split("%s")
        self.numbered = "".join(
            f"{piece}${i}" if i < len(pieces) else piece for i, piece in enumerate(pieces, 1)
        ).encode()
        self.name = b"eventstore_append_" + hashlib.sha1(self.numbered).hexdigest()[:16].encode()


@functools.cache
def _guarded(events: int, parts: int) -> _Statement:
    """The one statement of a guarded append of ``events`` events with ``parts`` parts."""

    def values(types: tuple[str, ...], rows: int) -> str:
        group = "(" + ", ".join(f"%s::{t}" for t in types) + ")"
        return ", ".join([group] * rows)

    sql = (
        "WITH h AS (UPDATE sessions SET head_seq = %s, head_hash = %s, updated_at = %s "
        "WHERE id = %s AND tenant = %s AND head_seq = %s "
        "AND head_hash IS NOT DISTINCT FROM %s AND deleted_at IS NULL RETURNING id, tenant), "
        f"f AS ({_QUEUE_FEED}), "
        f"e AS (INSERT INTO events ({', '.join(EVENT_COLUMNS)}) "
        f"SELECT * FROM (VALUES {values(_EVENT_TYPES, events)}) AS v "
        "WHERE EXISTS (SELECT 1 FROM h))"
    )
    if parts:
        sql += (
            f", p AS (INSERT INTO parts ({', '.join(PART_COLUMNS)}) "
            f"SELECT * FROM (VALUES {values(_PART_TYPES, parts)}) AS v "
            "WHERE EXISTS (SELECT 1 FROM h))"
        )
    return _Statement(sql + " SELECT count(*) FROM h")


def _params(w: Write) -> list[Any]:
    params: list[Any] = [w.seq, w.new_hash, w.newest, w.session_id, w.tenant, w.head,
                         w.head_hash, w.head + 1, w.seq]  # fmt: skip
    for r in w.event_rows:
        params += r
    for r in w.part_rows:
        params += r
    return params


def write_guarded(cur: Any, w: Write) -> bool:
    """A guarded append on a psycopg cursor; ``False`` (nothing written) when the head
    moved."""
    cur.execute(_guarded(len(w.event_rows), len(w.part_rows)).text, _params(w))
    row = cur.fetchone()
    return bool(row and row[0])


def _text_values(w: Write) -> list[bytes | None]:
    """:func:`_params` in Postgres's text format (what :func:`_text` makes of each), in
    one loop: the common types inline, and the time every row of a batch and the head
    shares formatted once."""
    out: list[bytes | None] = []
    add = out.append
    last: Any = None
    last_text: bytes | None = None
    for value in _params(w):
        t = type(value)
        if t is str:
            if "\x00" in value:
                raise _nul_refused()
            add(value.encode())
        elif value is None:
            add(None)
        elif t is int:
            add(b"%d" % value)
        elif value is last:
            add(last_text)
        else:
            last, last_text = value, _text(value)
            add(last_text)
    return out


def _text(value: Any) -> bytes | None:
    """A parameter in Postgres's text format, as psycopg would send it."""
    if value is None:
        return None
    t = type(value)
    if t is str:
        if "\x00" in value:
            raise _nul_refused()
        return value.encode()
    if t is int:
        return str(value).encode()
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.isoformat().encode()
    raise TypeError(f"no text form for a guarded-append parameter of type {t.__name__}")


class Libpq:
    """What the prepared path needs from psycopg, imported on first use (a store on
    SQLite never loads the driver)."""

    def __init__(self) -> None:
        from psycopg import DataError, errors, pq

        self.DataError = DataError
        self.error_from_result = errors.error_from_result
        self.IDLE = pq.TransactionStatus.IDLE
        self.ACTIVE = pq.TransactionStatus.ACTIVE
        self.FATAL = pq.ExecStatus.FATAL_ERROR
        self.COMMAND_OK = pq.ExecStatus.COMMAND_OK
        self.TUPLES_OK = pq.ExecStatus.TUPLES_OK
        self.SQLSTATE = pq.DiagnosticField.SQLSTATE


@functools.cache
def libpq() -> Libpq:
    """The psycopg names the prepared path uses (imported once)."""
    return Libpq()


def _nul_refused() -> Exception:
    """What psycopg raises for a NUL in a text parameter (libpq would cut the text there)."""
    return libpq().DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")


def write_guarded_prepared(db: Any, w: Write) -> bool:
    """:func:`write_guarded` through libpq on a psycopg connection outside any transaction
    (the statement is then its own): the statement prepared once per connection, its
    parameters sent in text format. psycopg's own ``execute`` costs about as much client
    CPU as the rest of a one-event append, and on a machine where the client and the
    server share cores that is the writers' throughput. A connection that does not speak
    UTF-8 takes psycopg's cursor, which encodes for it."""
    pq = libpq()
    pgconn = db.pgconn
    if pgconn.transaction_status != pq.IDLE:
        # Nothing of the guarded path's is open on a connection it was given: a
        # transaction left on it is rolled back, not written into (nor kept open for good).
        db.rollback()
    if pgconn.parameter_status(b"client_encoding") != b"UTF8":
        auto = db.autocommit
        if not auto:
            db.autocommit = True
        try:
            with db.cursor() as cur:
                return write_guarded(cur, w)
        finally:
            if not auto:
                db.autocommit = False
    stmt = _guarded(len(w.event_rows), len(w.part_rows))
    values = _text_values(w)
    return _run_prepared(pgconn, stmt, values).get_value(0, 0) not in (None, b"0")


def _run_prepared(pgconn: Any, stmt: _Statement, values: list[Any]) -> Any:
    """``stmt``'s result on ``pgconn``, prepared there first when it is not yet."""
    pq = libpq()
    res = pgconn.exec_prepared(stmt.name, values)
    if res.status == pq.FATAL and res.error_field(pq.SQLSTATE) == b"26000":
        # Not prepared on this connection yet (or deallocated since: psycopg deallocates
        # every prepared statement when it rolls a transaction back).
        made = pgconn.prepare(stmt.name, stmt.numbered)
        if made.status != pq.COMMAND_OK:
            raise pq.error_from_result(made, encoding="utf-8")
        res = pgconn.exec_prepared(stmt.name, values)
    if res.status != pq.TUPLES_OK:
        raise pq.error_from_result(res, encoding="utf-8")
    return res


# Citus. On distributed tables the guarded statement above (a CTE over four tables that
# inserts from VALUES) is planned recursively: its parts reach every worker and commit by
# two-phase commit. The same append routes whole as one call of a function distributed by
# the session (Citus sends it to the session's worker, where every statement in it is on
# that worker's shards), and the locked head move as two statements that each name the
# session. ``db distribute`` creates the function (see eventstore.distribution).


def _array_args(prefix: str, columns: tuple[str, ...]) -> list[tuple[str, str]]:
    """An argument for each column but the first (the session): the column's values as
    the text of a Postgres array (see :func:`_array_text`)."""
    return [(prefix + c, "text") for c in columns[1:]]


#: The routed append's function: the guarded head move, the feed range and the rows,
#: the rows as one array per column. The arrays come as text, cast on the worker: typed
#: array arguments are parsed on the coordinator, written out again into the call it
#: sends the worker and parsed there once more (for a 1,000-event batch that was about a
#: third of the cluster's CPU); text passes through. The payloads, most of a batch's
#: bytes, come as one text, joined by :data:`PAYLOAD_SEPARATOR` (see :func:`_payloads`).
#: (The function of the earlier versions, ``eventstore_append_routed``, took them as an
#: array too: a new name, so that a store of an earlier version never sends its arrays to
#: this one.)
ROUTED_FUNCTION = "eventstore_append_delegated"
#: What joins the payloads in the routed call: ASCII's record separator, a control
#: character, which a payload (canonical JSON, every control character escaped) never
#: holds.
PAYLOAD_SEPARATOR = "\x1e"
_ROUTED_ARGS = (
    ("a_session", "varchar"), ("a_tenant", "varchar"), ("a_head", "integer"),
    ("a_head_hash", "varchar"), ("a_seq", "integer"), ("a_hash", "varchar"),
    ("a_newest", "timestamptz"), ("a_lock_ms", "integer"),
    *_array_args("e_", EVENT_COLUMNS),
    *_array_args("p_", PART_COLUMNS),
)  # fmt: skip
#: Its signature, as ``create_distributed_function`` names it.
ROUTED_SIGNATURE = f"{ROUTED_FUNCTION}({', '.join(t for _, t in _ROUTED_ARGS)})"


def _typed(prefix: str, columns: tuple[str, ...], types: tuple[str, ...]) -> list[str]:
    """The declarations of the typed arrays the text arguments are read into (the
    payloads split at the separator: see :func:`_payloads`)."""
    return [
        f"{prefix}{c}_ text[] := string_to_array({prefix}{c}, E'\\x1e');"
        if prefix == "e_" and c == "payload"
        else f"{prefix}{c}_ {t.lower()}[] := {prefix}{c}::{t.lower()}[];"
        for c, t in zip(columns[1:], types[1:], strict=True)
    ]


def _insert_rows(table: str, prefix: str, columns: tuple[str, ...]) -> str:
    """The function's insert of ``table``'s rows from the typed arrays: one row as a
    ``VALUES`` insert, which Citus routes to the shard, many as ``INSERT ... SELECT FROM
    unnest``, which Citus runs through its coordinator path on the worker (the rows
    gathered, then copied into the shard: about a quarter millisecond more for one row)."""
    names = ", ".join(columns)
    one = ", ".join(f"{prefix}{c}_[1]" for c in columns[1:])
    many = ", ".join(f"{prefix}{c}_" for c in columns[1:])
    return (
        f"IF cardinality({prefix}seq_) = 1 THEN\n"
        f"        INSERT INTO {table} ({names}) VALUES (a_session, {one});\n"
        "    ELSE\n"
        f"        INSERT INTO {table} ({names}) SELECT a_session, * FROM unnest({many});\n"
        "    END IF;"
    )


# The text is read into typed arrays once, as the function starts: an INSERT whose
# unnest() cast the text arguments itself took a third more of the worker's CPU. The
# head moves by EXECUTE with the session written in as a literal, which Citus plans
# against the local shard directly (see eventstore._sql.view_rows._executed; the
# cluster's CPU for a single append about 4% less). Its INSERTs gain nothing that way:
# Citus leaves an INSERT's shard to execution time and writes it out for the shard
# whatever its values.
# ``force_custom_plan`` (see ROUTED_PLANS): with the generic plans PL/pgSQL settles on
# after five calls, Citus 13 plans each statement for the shard again on every call and
# keeps every such plan, and the worker's connection grew by about 57 kB an append.
ROUTED_FUNCTION_DDL = versioned(
    f"""CREATE OR REPLACE FUNCTION {ROUTED_FUNCTION}(
    {", ".join(f"{n} {t}" for n, t in _ROUTED_ARGS)}) RETURNS boolean AS $$
DECLARE
    v_moved bigint;
    {" ".join(_typed("e_", EVENT_COLUMNS, _EVENT_TYPES))}
BEGIN
    IF cardinality(e_payload_) <> cardinality(e_seq_) THEN  -- a separator in a payload
        RAISE EXCEPTION 'eventstore: % payloads for % events',
            cardinality(e_payload_), cardinality(e_seq_) USING ERRCODE = 'data_exception';
    END IF;
    PERFORM set_config('lock_timeout', a_lock_ms::text, true);
    EXECUTE 'UPDATE sessions SET head_seq = $1, head_hash = $2, updated_at = $3 WHERE id = '
        || quote_literal(a_session) || ' AND tenant = $4 AND head_seq = $5 '
        || 'AND head_hash IS NOT DISTINCT FROM $6 AND deleted_at IS NULL'
        USING a_seq, a_hash, a_newest, a_tenant, a_head, a_head_hash;
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    IF v_moved = 0 THEN
        RETURN false;
    END IF;
    INSERT INTO feed_pending (session_id, from_seq, to_seq, tenant, queued_at)
    VALUES (a_session, a_head + 1, a_seq, a_tenant, clock_timestamp());
    {_insert_rows("events", "e_", EVENT_COLUMNS)}
    IF p_seq <> '{{}}' THEN
        DECLARE
            {" ".join(_typed("p_", PART_COLUMNS, _PART_TYPES))}
        BEGIN
            {_insert_rows("parts", "p_", PART_COLUMNS)}
        END;
    END IF;
    RETURN true;
END;
$$ LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan""",
    "append",
)

#: The setting the function runs with, as ``pg_proc.proconfig`` lists it.
ROUTED_PLANS = "plan_cache_mode=force_custom_plan"
#: Distributes it by the session, co-located with ``sessions``: a call that is its own
#: transaction runs on the session's worker, in one transaction there. (Not forced inside
#: a transaction block: Citus then refuses its ``INSERT ... SELECT FROM unnest``, whose
#: rows it cannot see are the session's.)
ROUTED_DISTRIBUTE = (
    f"SELECT create_distributed_function('{ROUTED_SIGNATURE}', 'a_session', "
    "colocate_with => 'sessions')"
)
_NO_PARTS: list[tuple[Any, ...]] = [()] * (len(PART_COLUMNS) - 1)
# psycopg's own list dumping escaped each element with a regular expression, which for a
# 1,000-event batch cost more client CPU than making its rows.
_ROUTED_CALL = _Statement(f"SELECT {ROUTED_FUNCTION}({', '.join(['%s'] * len(_ROUTED_ARGS))})")


def _array_text(values: Iterable[Any]) -> str:
    """``values`` as a Postgres array literal: each element in its text form (as
    :func:`_text` makes it), quoted, ``NULL`` unquoted; the time a batch's rows share
    formatted once."""
    out: list[str] = []
    add = out.append
    last: Any = None
    last_text = ""
    for value in values:
        t = type(value)
        if t is str:
            if "\x00" in value:
                raise _nul_refused()
            add('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
        elif value is None:
            add("NULL")
        elif t is int:
            add(str(value))
        elif value is last:
            add(last_text)
        else:
            last = value
            last_text = '"' + (_text(value) or b"").decode() + '"'
            add(last_text)
    return "{" + ",".join(out) + "}"


#: Where the payloads are among the columns the routed call sends (the session's is not).
_PAYLOAD = EVENT_COLUMNS.index("payload") - 1


def _payloads(values: Iterable[str]) -> str:
    """The payloads of a routed call: joined by :data:`PAYLOAD_SEPARATOR`, which the
    worker splits them at (``string_to_array``). As an array literal each payload was
    escaped on the client (every quote of its JSON), and the worker read the array back
    unescaping it: for a 1,000-event batch that took about a third of the client's CPU
    and a sixth of the cluster's. A payload holding the separator would make the worker
    count more payloads than events, which it refuses."""
    joined = PAYLOAD_SEPARATOR.join(values)
    if "\x00" in joined:
        raise _nul_refused()
    return joined


def write_routed(db: Any, w: Write, lock_timeout_ms: int) -> bool:
    """A guarded append on distributed tables: one call, its own transaction, which Citus
    runs on the session's worker (on a psycopg connection outside any transaction);
    ``False`` (nothing written) when the head moved. Sent as
    :func:`write_guarded_prepared` sends its statement: prepared once per connection,
    through libpq, its parameters in text format (psycopg's ``execute`` took about as
    much client CPU as the rest of a one-event append)."""
    # Rows to columns (the first, the session, is the call's own argument).
    events_cols = list(zip(*w.event_rows, strict=True))[1:]
    parts_cols = list(zip(*w.part_rows, strict=True))[1:] if w.part_rows else _NO_PARTS
    events_text = [
        _payloads(c) if i == _PAYLOAD else _array_text(c) for i, c in enumerate(events_cols)
    ]
    params = [*map(_text, (w.session_id, w.tenant, w.head, w.head_hash, w.seq, w.new_hash,
                           w.newest, lock_timeout_ms)),
              *(t.encode() for t in events_text),
              *(_array_text(c).encode() for c in parts_cols)]  # fmt: skip
    pq = libpq()
    pgconn = db.pgconn
    if pgconn.transaction_status != pq.IDLE:
        db.rollback()  # as write_guarded_prepared: nothing of a caller's is written into
    if pgconn.parameter_status(b"client_encoding") != b"UTF8":
        auto = db.autocommit
        db.autocommit = True  # Citus sends a function call to a worker only outside a block
        try:
            with db.cursor() as cur:
                cur.execute(_ROUTED_CALL.text, [None if v is None else v.decode() for v in params])
                row = cur.fetchone()
        finally:
            db.autocommit = auto
        return bool(row and row[0])
    return _run_prepared(pgconn, _ROUTED_CALL, params).get_value(0, 0) == b"t"


def insert_rows_routed(
    cur: Any, event_rows: list[tuple[Any, ...]], part_rows: list[tuple[Any, ...]]
) -> None:
    """:func:`copy_rows` on distributed tables, inside the caller's transaction: ``INSERT``
    statements of many rows, which Citus sends to the session's worker on the connection
    the transaction already has there (a ``COPY`` into a distributed table always commits
    by two-phase commit)."""
    for table, columns, rows in (("events", EVENT_COLUMNS, event_rows),
                                 ("parts", PART_COLUMNS, part_rows)):  # fmt: skip
        group = "(" + ", ".join(["%s"] * len(columns)) + ")"
        for at in range(0, len(rows), _ROUTED_INSERT_ROWS):
            chunk = rows[at : at + _ROUTED_INSERT_ROWS]
            cur.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                + ", ".join([group] * len(chunk)),
                [v for r in chunk for v in r],
            )


#: Rows per INSERT of :func:`insert_rows_routed` (12 parameters each: under libpq's 65,535).
_ROUTED_INSERT_ROWS = 2_000


_ROUTED_HEAD = (
    "UPDATE sessions SET head_seq = %s, head_hash = %s, updated_at = %s "
    "WHERE id = %s RETURNING tenant"
)
_ROUTED_QUEUE = (
    "INSERT INTO feed_pending (session_id, from_seq, to_seq, tenant, queued_at) "
    "VALUES (%s, %s, %s, %s, clock_timestamp())"
)


def move_head_routed(
    cur: Any, session_id: str, head: int, new_seq: int, new_hash: str | None, newest: datetime
) -> None:
    """:func:`move_head` on distributed tables: two statements that each name the
    session, so that Citus sends both to its worker (the one statement reads the tenant
    from the moved row, which Citus would pass through the coordinator to every worker)."""
    cur.execute(_ROUTED_HEAD, (new_seq, new_hash, newest, session_id))
    row = cur.fetchone()
    if row is not None:
        cur.execute(_ROUTED_QUEUE, (session_id, head + 1, new_seq, row[0]))
