"""The statements that read a view's rows.

:func:`view_rows` gathers what :func:`eventstore.views.assemble` needs for the view at a
seq: the latest condensation (one probe of the ``(session_id, kind, seq)`` index per
lineage segment), its pinned events, one range read of the tail's messages and their part
rows, and the control events a condensation policy answers (usually one empty probe).

On SQLite and Postgres (psycopg) all of that is one statement after the session row: the
condensation's forgotten range and pins are read from its payload inside the query (JSON
functions on SQLite, patterns over the canonical text on Postgres, whose ``json`` type
refuses the escaped lone surrogates a payload may hold), and the rows come back through
the driver, without SQLAlchemy's per-row processing. The condensation is then decoded and
checked against what the query used; on any difference (a payload written some other
way) the view is read again one statement at a time, as other drivers always do.

For a session that is not a fork, :func:`view_rows_at_once` folds the session row and the
``keep_chars`` of truncating prunes into that statement too, and runs it outside a
transaction: one statement reads one snapshot, so nothing else is needed (no lineage
query, no ``BEGIN``/``COMMIT``). Its text is built once per driver. The store tries it
first and falls back to :func:`view_rows` (forks, replicas, other drivers).
"""

from __future__ import annotations

import functools
import json
import operator
import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, cast

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from .._citus_direct import for_engine
from .._engine import driver_error
from .._routing import (
    epoch,
    forget_distribution,
    function_body,
    installed_body,
    is_distributed,
    versioned,
)
from ..codec import decode_row
from ..errors import InvalidEventError, ReadAgain
from ..events import Condensation, Prune
from ..records import StoredEvent
from ..schema import events, fork_compactions, kind_is, kind_sql, parts
from ..views import IMPLIED_TOKENS, PartState, ViewRows
from . import blobs
from .lineage import AUDITING, Segment, check_lookup, clip, lineage_and_head, not_found, owner_of
from .pages import BREAKER_PREFIX, READ_COLUMNS, latest_in, row_to_stored

__all__ = [
    "view_rows",
    "view_rows_at_once",
    "routed_view_function",
    "ROUTED_VIEW_FUNCTION",
    "ROUTED_VIEW_SIGNATURE",
    "ROUTED_VIEW_DISTRIBUTE",
    "routes_views",
    "view_source",
    "routed_view_source",
]


# --------------------------------------------------------------------------- statement builder

#: Drivers the combined query is written for, and their placeholder. On psycopg it is
#: Postgres's own, numbered (``$``): a statement this long (over psycopg's 4 KiB cache
#: limit) would otherwise be parsed for ``%s`` again on every view (about 60 µs).
_PLACEHOLDERS = {"pysqlite": "?", "psycopg": "$"}


class _Slot(NamedTuple):
    """A parameter of a statement built once and kept
    (:func:`_alone_statement`): the value is filled in per read."""

    name: str
    type: str


_SESSION = _Slot("session", "TEXT")
_TENANT = _Slot("tenant", "TEXT")
_BOUND = _Slot("bound", "BIGINT")


def _sql_type(value: Any) -> str:
    if isinstance(value, _Slot):
        return value.type
    return "BIGINT" if isinstance(value, int) else "TEXT"


class _Query:
    """A statement under construction: its positional parameters, in the order the text
    names them (so every :meth:`p` is called where its placeholder is written, inside one
    f-string, left to right).

    On Postgres the parameters are not written where they are used: each use reads a
    column of one row, ``a``, that holds them all (see :meth:`text`). The planner then
    knows no more about them when it plans with their values than without, so the plan
    it makes once for the prepared statement (psycopg prepares a statement run five
    times) costs what a plan made for the values would, and Postgres keeps that one
    instead of planning the dozen-branch statement again on every view, which took
    longer than running it. Except with ``inline``, for Citus (see
    :func:`eventstore.distribution.is_distributed`).
    """

    def __init__(self, pg: bool, placeholder: str, inline: bool = False) -> None:
        self.pg = pg
        self.ph = placeholder
        # Parameters written where they are used on Postgres too: Citus sends a statement
        # whole to one shard only when each condition shows it the session's value (its
        # worker plans the statement with the values each time).
        self.inline = inline
        self.params: list[Any] = []
        self.branches: list[str] = []

    def p(self, value: Any) -> str:
        self.params.append(value)
        if self.pg and not self.inline:
            return f"(SELECT p{len(self.params) - 1} FROM a)"
        return self._ph(len(self.params))

    def _ph(self, n: int) -> str:
        """The placeholder of the ``n``-th parameter (from 1)."""
        return f"${n}" if self.ph == "$" else self.ph

    def literal(self, sql: str) -> str:
        """SQL text holding ``%`` as written in a statement with parameters (psycopg
        reads ``%`` as the start of a placeholder)."""
        return sql.replace("%", "%%") if self.ph == "%s" else sql

    def text(self, sql: str) -> str:
        """``sql`` (a ``WITH`` statement built with :meth:`p`) as it is sent."""
        if not self.pg or self.inline:
            return sql
        cols = ", ".join(
            f"CAST({self._ph(i + 1)} AS {_sql_type(v)}) AS p{i}" for i, v in enumerate(self.params)
        )
        assert sql.startswith("WITH ")
        return f"WITH a AS (SELECT {cols}), {sql[5:]}"

    def greatest(self, a: str, b: str) -> str:
        return f"{'GREATEST' if self.pg else 'max'}({a}, {b})"

    def at_pins(self, table: str, where: str, lo: int, hi: int | None) -> str:
        """``FROM`` and ``WHERE`` for the rows of ``table`` matching ``where`` (written
        before this is called: parameters in order) whose ``seq`` is one of the
        condensation's pins in ``lo..hi``: an index probe per pin.

        SQLite probes its ``IN`` list (it would rather scan ``lo..hi`` when given the
        range too). Postgres gets a lateral probe per pin: the plan it keeps for the
        prepared statement is made without the values, and with the pins as a condition
        beside others it may scan the session's range or kind and filter by them.
        """
        if self.pg:
            return (
                "FROM (SELECT DISTINCT s FROM unnest(CAST(string_to_array("
                "(SELECT pins FROM b), ',') AS BIGINT[])) AS u(s)) AS pin "
                f"CROSS JOIN LATERAL (SELECT * FROM {table} WHERE {where} AND seq = pin.s "
                f"OFFSET 0) AS {table} WHERE pin.s >= {self.p(lo)} AND pin.s <= {self.p(hi)}"
            )
        return (
            f"FROM {table} WHERE {where} AND seq IN (SELECT value FROM json_each("
            f"(SELECT pins FROM b)) WHERE value >= {self.p(lo)} AND value <= {self.p(hi)})"
        )

    def nulls(self, *types: str) -> str:
        # Typed NULLs: Postgres resolves a UNION's column types pairwise, and two untyped
        # NULLs would become text.
        ts = "TIMESTAMPTZ" if self.pg else "TIMESTAMP"
        return ", ".join(f"CAST(NULL AS {ts if t == 'ts' else t})" for t in types)


def view_rows(
    conn: Connection, tenant: str, session_id: str, as_of: int | None, *, expand: bool = True
) -> ViewRows:
    """Everything :func:`eventstore.views.assemble` needs to build the view at ``as_of``
    (with attachments' bytes put back, unless not ``expand``).

    One indexed probe per lineage segment for the latest condensation at or before
    ``as_of`` (the ``(session_id, kind, seq)`` index), a primary-key read of its pinned
    events, one range read of the tail's message events and their part rows, and a probe
    for condensation requests in the tail. Nothing before the forgotten range is read, so
    the cost follows the tail, not the session. On SQLite and Postgres these are one
    statement (see the module docstring).
    """
    segments, head = lineage_and_head(conn, tenant, session_id)
    seq = head if as_of is None else as_of
    if not 0 <= seq <= head:
        raise InvalidEventError(f"as_of: {as_of} is outside 0..{head} for session {session_id}")
    rows = _in_one_query(conn, tenant, session_id, segments, seq, expand) if seq else None
    if rows is None:
        rows = _by_statements(conn, tenant, session_id, segments, seq, expand=expand)
    rows.truncations = _truncations(conn, segments, rows.parts)
    return rows


def _truncations(
    conn: Connection, segments: Sequence[Segment], part_states: dict[int, dict[int, PartState]]
) -> dict[int, int]:
    """``keep_chars`` of the truncating prunes among those that compacted the view's parts
    (one primary-key read per lineage session holding such prunes, only when parts are
    compacted at all)."""
    by_owner: dict[str, list[int]] = {}
    for d in part_states.values():
        for st in d.values():
            owner = owner_of(segments, st.compacted_seq) if st.compacted_seq else None
            if owner is not None:
                by_owner.setdefault(owner, []).append(st.compacted_seq)  # type: ignore[arg-type]
    out: dict[int, int] = {}
    for owner, stamps in by_owner.items():
        rows = conn.execute(
            select(events.c.seq, events.c.payload).where(
                events.c.session_id == owner,
                events.c.seq.in_(sorted(set(stamps))),
                kind_is("prune"),
                events.c.payload.contains('"keep_chars":'),
            )
        )
        for row in rows:
            keep = json.loads(row.payload).get("keep_chars")
            if isinstance(keep, int):
                out[row.seq] = keep
    return out


# --------------------------------------------------------------------------- one query

#: The SQLSTATE Citus raises for a statement it cannot plan.
_FEATURE_NOT_SUPPORTED = "0A000"

_EV = "seq, id, kind, created_at, payload, token_count, hash"
#: Where the condensation's ``forgotten_to`` and ``pinned`` are in its payload. Canonical
#: JSON sorts keys and has no whitespace, and every key before these two holds a scalar, so
#: the first match is the top-level field (a string cannot contain an unescaped quote).
#: Numbers of more digits than fit are not matched; the check after the query catches it.
_PG_FORGOTTEN_TO = "CAST(substring(payload from '\"forgotten_to\":(-?[0-9]{1,18})[,}]') AS BIGINT)"
_PG_PINNED = "substring(payload from '\"pinned\":\\[((?:-?[0-9]{1,18},)*-?[0-9]{1,18})\\]')"
_LITE_FORGOTTEN_TO = "json_extract(payload, '$.forgotten_to')"
_LITE_PINNED = "json_extract(payload, '$.pinned')"
#: Prunes that truncate instead of hiding (literal, like :data:`_BREAKER_LIKE`).
_KEEP_LIKE = "'%\"keep_chars\":%'"
#: A forgotten range the query could not read hides everything (the check then rereads).
_UNREAD = 9223372036854775806


#: What the newest breaker event's payload holds, as a literal: SQLite compiles a
#: statement again each time a parameter on the right of ``LIKE`` is bound (its value could
#: change the plan), which for the combined statement cost more than running it.
_BREAKER_LIKE = '\'%"name":"' + BREAKER_PREFIX.replace("'", "''") + "%'"


def _probe(g: int, session: str, lo: str, hi: str, more: str = "") -> str:
    """The latest condensation of ``session`` in ``lo..hi`` (one backward probe of the
    kind index), with ``more`` columns."""
    return (
        f"SELECT {g} AS g, {_EV}{more} FROM events WHERE session_id = {session} "
        f"AND {kind_sql('condensation')} AND seq >= {lo} AND seq <= {hi} "
        "ORDER BY seq DESC LIMIT 1"
    )


def _build(q: _Query, segs: list[Segment], segments: Sequence[Segment], as_of: int) -> str:
    """The combined statement; each row is tagged with what it is (``src``) and the index
    ``g`` of its segment (in ``segs``, or in ``segments`` for fork compactions)."""
    probe = [
        f"SELECT * FROM ({_probe(g, q.p(s.owner), q.p(s.lo), q.p(s.hi))}) AS c{g}"
        for g, s in enumerate(segs)
    ]
    cte = " UNION ALL ".join(probe) + (" ORDER BY seq DESC LIMIT 1" if len(probe) > 1 else "")
    ft, pins = (_PG_FORGOTTEN_TO, _PG_PINNED) if q.pg else (_LITE_FORGOTTEN_TO, _LITE_PINNED)
    sql = (
        f"WITH c AS ({cte}), b AS (SELECT COALESCE((SELECT seq FROM c), 0) AS cs, "
        f"COALESCE((SELECT COALESCE({ft}, {_UNREAD}) FROM c), 0) AS ft, "
        f"(SELECT {pins} FROM c) AS pins) "
        f"SELECT 'c' AS src, g, {_EV}, {q.nulls('INTEGER', 'INTEGER')}, "
        "(SELECT ft FROM b) AS ft, (SELECT pins FROM b) AS pins FROM c"
    )
    tail_lo = "(SELECT ft FROM b) + 1"
    after_cond = "(SELECT cs FROM b) + 1"
    ev_nulls = q.nulls("INTEGER", "INTEGER", "BIGINT", "TEXT")
    for g, s in enumerate(segs):
        where = f"session_id = {q.p(s.owner)} AND {kind_sql('message')}"
        q.branches.append(
            f"SELECT 'p', {g}, {_EV}, {ev_nulls} {q.at_pins('events', where, s.lo, s.hi)}"
        )
    for g, s in enumerate(segs):
        q.branches.append(
            f"SELECT 't', {g}, {_EV}, {ev_nulls} FROM events WHERE session_id = {q.p(s.owner)} "
            f"AND {kind_sql('message')} AND seq >= {q.greatest(q.p(s.lo), tail_lo)} "
            f"AND seq <= {q.p(s.hi)}"
        )
    for g, s in enumerate(segs):
        q.branches.append(
            f"SELECT 'r', {g}, {_EV}, {ev_nulls} FROM events WHERE session_id = {q.p(s.owner)} "
            f"AND {kind_sql('condensation_request')} "
            f"AND seq >= {q.greatest(q.p(s.lo), after_cond)} AND seq <= {q.p(s.hi)}"
        )
    for g, s in enumerate(segs):
        # The tail's prunes that hide parts whole: they may replace a truncation.
        q.branches.append(
            f"SELECT 'x', {g}, {_EV}, {ev_nulls} FROM events WHERE session_id = {q.p(s.owner)} "
            f"AND {kind_sql('prune')} AND seq >= {q.greatest(q.p(s.lo), tail_lo)} "
            f"AND seq <= {q.p(s.hi)} AND payload NOT LIKE {q.literal(_KEEP_LIKE)}"
        )
    for tag, kind, match in (("b", "custom", True), ("l", "llm_call", False)):
        for g, s in enumerate(segs):
            q.branches.append(
                f"SELECT * FROM (SELECT '{tag}' AS src, {g} AS g, {_EV}, {ev_nulls} FROM events "
                f"WHERE session_id = {q.p(s.owner)} AND {kind_sql(kind)} "
                f"AND seq >= {q.greatest(q.p(s.lo), after_cond)} AND seq <= {q.p(s.hi)}"
                f"{f' AND payload LIKE {q.literal(_BREAKER_LIKE)}' if match else ''} "
                f"ORDER BY seq DESC LIMIT 1) AS {tag}{g}"
            )
    pt_nulls = q.nulls("VARCHAR", "VARCHAR", "ts", "TEXT")
    pt_cols = f"seq, {pt_nulls}, token_count, CAST(NULL AS VARCHAR), idx, compacted_seq"
    tail_nulls = q.nulls("BIGINT", "TEXT")
    for tag, pinned in (("q", True), ("u", False)):
        for g, s in enumerate(segs):
            where = f"session_id = {q.p(s.owner)}"
            q.branches.append(
                f"SELECT '{tag}', {g}, {pt_cols}, {tail_nulls} "
                + (
                    q.at_pins("parts", where, s.lo, s.hi)
                    if pinned
                    else f"FROM parts WHERE {where} AND seq >= "
                    f"{q.greatest(q.p(s.lo), tail_lo)} AND seq <= {q.p(s.hi)}"
                )
            )
    if len(segments) > 1:
        # Compactions a fork applied to parts it inherited, counted up to its fork point.
        fc_cols = (
            f"seq, {pt_nulls}, CAST(NULL AS INTEGER), CAST(NULL AS VARCHAR), idx, compacted_seq"
        )
        for tag, pinned in (("f", True), ("h", False)):
            for g in range(1, len(segments)):
                seg = segments[g]
                limit = as_of if seg.hi is None else min(as_of, seg.hi)
                where = f"session_id = {q.p(seg.owner)} AND compacted_seq <= {q.p(limit)}"
                q.branches.append(
                    f"SELECT '{tag}', {g}, {fc_cols}, {tail_nulls} "
                    + (
                        q.at_pins("fork_compactions", where, 1, as_of)
                        if pinned
                        else f"FROM fork_compactions WHERE {where} AND seq >= "
                        f"{q.greatest(q.p(1), tail_lo)} AND seq <= {q.p(as_of)}"
                    )
                )
    return " UNION ALL ".join([sql, *q.branches])


#: Validates a :class:`StoredEvent` from a dict of its fields (a third faster than the
#: keyword constructor, with the same checks).
_STORED = StoredEvent.__pydantic_validator__.validate_python


def _stored(r: Any, owner: str) -> StoredEvent:
    event = decode_row(r[4], r[6], r[3], r[5])
    return cast(
        StoredEvent,
        _STORED(
            {"session_id": owner, "seq": r[2], "hash": r[8], "token_count": r[7], "event": event}
        ),
    )


def _in_one_query(
    conn: Connection,
    tenant: str,
    session_id: str,
    segments: list[Segment],
    seq: int,
    expand: bool,
) -> ViewRows | None:
    """The view's rows from one statement, or ``None`` when this driver has no such
    statement or the condensation's payload is not what the statement could read."""
    placeholder = _PLACEHOLDERS.get(conn.dialect.driver)
    if placeholder is None or is_distributed(conn):
        return None
    q = _Query(conn.dialect.name == "postgresql", placeholder)
    segs = clip(segments, 1, seq)
    sql = q.text(_build(q, segs, segments, seq))
    by = _fetch(conn, q.pg, sql, q.params)
    if by is None:
        return None
    return _rows(conn, tenant, session_id, segs, segments, seq, expand, by)


def _fetch(
    conn: Connection,
    pg: bool,
    sql: str,
    params: list[Any],
    *,
    alone: bool = False,
    routed: bool = False,
) -> _Tagged | None:
    """The statement's rows by tag, or ``None`` when SQLite cannot run it (``routed``:
    the rows of :func:`routed_view_function`, whose tag may name two).

    ``alone``: the statement is all the read there is, so it runs outside a transaction
    (on Postgres that saves the ``BEGIN`` and ``ROLLBACK`` round trips; one statement
    reads one snapshot either way)."""
    driver = conn.connection.driver_connection
    assert driver is not None
    manual = (
        alone
        and pg
        and not driver.autocommit
        and driver.info.transaction_status.name == "IDLE"  # else read inside it
    )
    if manual:
        driver.autocommit = True
    if pg:
        from psycopg import RawCursor  # the statement's placeholders are Postgres's own

        cur = RawCursor(driver)
        if (driver.info.parameter_status("DateStyle") or "").startswith("ISO"):
            # Event times as the server writes them: the JSON validator reads that text
            # (codec.decode_row), so a datetime made here would only be written out again.
            from psycopg.types.string import TextLoader

            cur.adapters.register_loader("timestamptz", TextLoader)
    else:
        cur = driver.cursor()
    try:
        if pg and driver.prepare_threshold is not None:
            # Prepared from the first read (not the fifth), unless prepared statements
            # are off for this connection (a transaction-pooling proxy, say).
            cur.execute(sql, params, prepare=True)
        else:
            cur.execute(sql, params)
        fetched = cur.fetchall()
    except sqlite3.OperationalError:
        return None  # an SQLite without JSON functions, or a payload they cannot parse
    except conn.dialect.loaded_dbapi.Error as exc:
        if pg and getattr(exc, "sqlstate", None) == _FEATURE_NOT_SUPPORTED:
            # Citus could not send it to one shard: the tables were distributed since
            # this connection last looked (it looks again), or this Citus cannot route
            # the statement. Either way the view is read again, statement by statement.
            forget_distribution()
            raise ReadAgain(f"database error: {str(exc).strip().splitlines()[0]}") from None
        raise driver_error(conn, exc) from None
    finally:
        cur.close()
        if manual and not driver.closed:  # a lost connection has left the pool
            driver.autocommit = False
    by: _Tagged = {}
    if routed:
        for r in fetched:
            for tag in _BOTH.get(r[0], (r[0],)):
                by.setdefault(tag, []).append(r)
        return by
    for r in fetched:
        by.setdefault(r[0], []).append(r)
    return by


#: The ``seq`` of a row of the combined statement.
_BY_SEQ = operator.itemgetter(2)
#: Rows of the combined statement by their tag (``src``).
_Tagged = dict[str, list[Any]]


def _rows(
    conn: Connection,
    tenant: str,
    session_id: str,
    segs: list[Segment],
    segments: list[Segment],
    seq: int,
    expand: bool,
    by: _Tagged,
) -> ViewRows | None:
    """:class:`ViewRows` from the combined statement's rows (and, when the tail holds
    condensation requests, attachments or custom events that only mention a breaker, the
    statements that read what those need), or ``None`` when the condensation's payload
    is not what the statement could read."""
    cond: StoredEvent | None = None
    if "c" in by:
        r = by["c"][0]
        cond = _stored(r, segs[r[1]].owner)
        evt = cond.event
        used = r[12]
        pins = set() if used is None else set(json.loads(used if used[:1] == "[" else f"[{used}]"))
        if (
            not isinstance(evt, Condensation)
            or evt.forgotten_to != r[11]
            or pins != set(evt.pinned)
        ):
            return None

    def decoded(tag: str) -> list[StoredEvent]:
        return [_stored(r, segs[r[1]].owner) for r in sorted(by.get(tag, ()), key=_BY_SEQ)]

    pinned, tail = decoded("p"), decoded("t")
    if expand:  # put attachments' bytes back (one query, only when the view names blobs)
        both = blobs.expand(conn, tenant, pinned + tail)
        pinned, tail = both[: len(pinned)], both[len(pinned) :]

    part_states: dict[int, dict[int, PartState]] = {}
    n = 0
    caps = {x.owner: x.hi for x in segments}
    for r in by.get("q", []) + by.get("u", []):
        n += 1
        # A stamp counts when its prune is visible at as_of and, for an inherited
        # segment, was made by its owner before the fork point that caps it.
        cap = caps[segs[r[1]].owner]
        limit = seq if cap is None else min(seq, cap)
        stamp = r[10]
        if stamp is not None and stamp > limit:
            stamp = None
        part_states.setdefault(r[2], {})[r[9]] = PartState(r[7], stamp)
    for r in sorted(by.get("f", []) + by.get("h", []), key=lambda r: r[1]):
        n += 1
        cur_state = part_states.get(r[2], {}).get(r[9])
        if cur_state is None:  # a part without a row (see codec.sole_text)
            part_states.setdefault(r[2], {})[r[9]] = PartState(IMPLIED_TOKENS, r[10])
        elif cur_state.compacted_seq is None:
            part_states[r[2]][r[9]] = PartState(cur_state.tokens, r[10])

    placeholders = _placeholders((r[2], r[6]) for r in by.get("x", ()))
    read = int(cond is not None) + len(pinned) + len(tail) + n + len(placeholders)
    lo = cond.seq + 1 if cond is not None else 1
    requests = decoded("r")
    customs = _read_kind(conn, segments, requests[0].seq + 1, seq, "custom") if requests else []
    first: dict[str, StoredEvent | None] = {s.owner: None for s in segs}
    for r in by.get("b", []):
        first[segs[r[1]].owner] = _stored(r, segs[r[1]].owner)
    found = _latest_breaker(conn, segs, lo, seq, first=first)
    customs = [c for c in customs if found is None or c.seq != found.seq]
    calls = decoded("l")[-1:]
    control = sorted(requests + customs + ([found] if found else []) + calls, key=lambda e: e.seq)
    return ViewRows(
        session_id=session_id,
        seq=seq,
        condensation=cond,
        pinned=pinned,
        tail=tail,
        parts=part_states,
        control=control,
        rows_read=read + len(control),
        placeholders=placeholders,
    )


def _placeholders(rows: Iterable[tuple[int, str]]) -> dict[int, list[tuple[int, int]]]:
    """The targets of the prunes without ``keep_chars`` among (seq, payload) rows."""
    out: dict[int, list[tuple[int, int]]] = {}
    for seq, payload in rows:
        p = json.loads(payload)
        if isinstance(p, dict) and p.get("keep_chars") is None:
            out[seq] = [(t["seq"], t["index"]) for t in p.get("targets") or ()]
    return out


# --------------------------------------------------------------------------- the whole view at once

#: The upper bound of a view at the head, before the statement has read the head: the
#: rows after the head are not there yet in the snapshot the statement reads.
_NO_BOUND = 1 << 62
#: Sessions known to be forks, which take :func:`view_rows` (a session's parent never
#: changes, and ids are UUIDs: one wrongly remembered costs speed, never the answer).
_FORKS: set[str] = set()
_FORKS_KEPT = 4096


def _session_row(q: _Query, session: str, tenant: str) -> str:
    """The session row: its head, whether it is deleted or a fork (in the event columns)."""
    return (
        f"SELECT 's', 0, head_seq, parent_id, CAST(NULL AS VARCHAR), deleted_at, "
        f"{q.nulls('TEXT', 'INTEGER', 'VARCHAR', 'INTEGER', 'INTEGER', 'BIGINT', 'TEXT')} "
        f"FROM sessions WHERE id = {session} AND tenant = {tenant}"
    )


def _keep_prunes(q: _Query, session: str, routed: bool = False) -> str:
    """The prunes that may truncate instead of hiding, up to the ``seq`` condition that
    names the stamps on the view's parts (``routed``: see :func:`routed_view_function`)."""
    keep = f"{_UNSTATED if routed else 'payload'} LIKE {q.literal(_KEEP_LIKE)}"
    return (
        f"SELECT 'k', 0, seq, CAST(NULL AS VARCHAR), kind, "
        f"{q.nulls('ts')}, payload, "
        f"{q.nulls('INTEGER', 'VARCHAR', 'INTEGER', 'INTEGER', 'BIGINT', 'TEXT')} "
        f"FROM events WHERE session_id = {session} AND {keep} "
        # A primary-key probe per stamp, never a scan of the session's prunes (so no
        # condition on the kind here for the planner to scan by: it is checked after); a
        # stamp after as_of is dropped with its part state.
        "AND seq "
    )


@functools.cache
def _alone_statement(
    pg: bool, placeholder: str, inline: bool = False
) -> tuple[str, tuple[Any, ...]]:
    """The statement :func:`view_rows_at_once` sends, and its parameters with
    :class:`_Slot` where the session, tenant and upper bound go (built once per driver;
    ``inline``: see :class:`_Query`)."""
    q = _Query(pg, placeholder, inline)
    session, bound = cast(str, _SESSION), cast(int, _BOUND)
    segs = [Segment(session, 1, bound)]
    sql = _build(q, segs, segs, bound)
    sql += f" UNION ALL {_session_row(q, q.p(session), q.p(_TENANT))}"
    sql += f" UNION ALL {_keep_prunes(q, q.p(session))}{'= ANY(ARRAY(' if q.pg else 'IN ('}"
    where = f"session_id = {q.p(session)} AND compacted_seq IS NOT NULL"
    sql += f"SELECT compacted_seq {q.at_pins('parts', where, 1, bound)} UNION ALL "
    sql += f"SELECT compacted_seq FROM parts WHERE session_id = {q.p(session)} "
    sql += (
        f"AND compacted_seq IS NOT NULL AND seq >= (SELECT ft FROM b) + 1 AND seq <= {q.p(bound)}"
    )
    return q.text(sql + ("))" if q.pg else ")")), tuple(q.params)


# --------------------------------------------------------------------------- on Citus

#: The function a store on Citus reads a view with (see :func:`routed_view_function`).
ROUTED_VIEW_FUNCTION = "eventstore_view_routed"
ROUTED_VIEW_SIGNATURE = f"{ROUTED_VIEW_FUNCTION}(varchar, varchar, bigint)"
#: Its call, with the session, the tenant and the upper bound.
ROUTED_VIEW_CALL = f"SELECT * FROM {ROUTED_VIEW_FUNCTION}($1, $2, $3)"
#: Distributes it by the session, co-located with ``sessions``.
ROUTED_VIEW_DISTRIBUTE = (
    f"SELECT create_distributed_function('{ROUTED_VIEW_SIGNATURE}', 'a_session', "
    "colocate_with => 'sessions')"
)
#: The columns of the statement's rows, as Postgres types them.
_ROW = (
    ("src", "text"), ("g", "integer"), ("seq", "integer"), ("id", "varchar"),
    ("kind", "varchar"), ("created_at", "timestamptz"), ("payload", "text"),
    ("token_count", "integer"), ("hash", "varchar"), ("idx", "integer"),
    ("compacted_seq", "integer"), ("ft", "bigint"), ("pins", "text"),
)  # fmt: skip
#: The payload as an expression the planner has no statistics for: it plans each of the
#: function's statements on every call, and estimating a pattern over the payload's
#: histogram (large, compressed values) took a quarter of the worker's CPU.
_UNSTATED = "(payload || '')"
#: A row the function reads once for two of the statement's branches (a pinned seq in
#: the tail) carries both tags.
_BOTH = {"pt": ("p", "t"), "qu": ("q", "u")}


#: The function's variables its statements read, with their types: each is written into
#: the statement's text as a literal (see :func:`_executed`).
_PASSED = (
    ("a_session", "varchar"), ("a_tenant", "varchar"), ("a_bound", "bigint"),
    ("v_pin", "bigint[]"), ("v_ft", "bigint"), ("v_cs", "bigint"), ("v_stamps", "integer[]"),
)  # fmt: skip


def _executed(stmt: str) -> str:
    """``stmt``, written with the routed view function's variables, as the PL/pgSQL
    ``EXECUTE`` that runs it with every variable written into its text as a literal.

    Citus plans a statement whose session is a constant and whose shard is on this node
    straight against the shard's table, once. With the session as a parameter (a
    variable in a static statement) it leaves the shard to execution time, then writes
    the statement out for the shard, parses that text and plans it again, on every call:
    the view's statements took about a third more of the worker's CPU that way (3.2
    against 2.2 ms a view, medians of 7 alternated rounds of 200 calls). The other
    values are literals too (``quote_nullable``, cast to their types), so that every
    statement is planned with all its values in every path Citus takes (under
    ``EXPLAIN ANALYZE``, as ``auto_explain`` runs it, Citus plans the shard's statement
    without the values of an ``EXECUTE``'s parameters)."""
    for name, sql_type in _PASSED:
        # The session as the bare literal Citus routes by; NULL is a value here too.
        quoted = f"quote_literal({name})" if name == "a_session" else f"quote_nullable({name})"
        cast = "" if name == "a_session" else f"::{sql_type}"
        stmt = re.sub(rf"\b{name}\b", f"$q$ || {quoted} || $q${cast}", stmt)
    return f"EXECUTE $q${stmt}$q$".replace(" || $q$$q$", "")


@functools.cache
def routed_view_function() -> str:
    """``CREATE FUNCTION`` for :func:`view_rows_at_once`'s statement on Citus: a function
    of the session, the tenant and the upper bound that returns the statement's rows.

    On Citus the one statement is planned twice on every view (the coordinator's planner
    over a dozen branches, then the worker's), which cost several times the reading.
    Distributed by the session and co-located with ``sessions`` (``db distribute``), a
    call goes whole to the session's worker, where each statement in it reads one table
    for one session (Citus's fast path). Each statement is run by ``EXECUTE`` with the
    session and the other values written in as literals (:func:`_executed`), which
    Citus plans against the local shard directly; it still costs the worker a planning
    per statement, so the branches are folded into four: the session row, the
    condensation, the events the view needs (the newest breaker event and model call by
    ``DISTINCT ON``) and the parts, whose stamps name the prunes read last (only when
    there are some).
    ``STABLE``: every statement reads the call's one snapshot, as the one statement
    does. ``force_custom_plan``: with the generic plans PL/pgSQL would settle on for a
    statement whose session is a parameter, Citus 13 plans the shard's statement again
    on every call anyway and keeps each plan (the worker's connection grew by about
    50 MB a second under repeated views); it stays as the function's setting for any
    such statement. A test holds the function and the statement to the same rows
    (``tests/test_citus.py``)."""
    q = _Query(True, "$", inline=True)
    out = ", ".join(f"r_{n}" for n, _ in _ROW)
    cond = ", ".join(f"r_{n}" for n, _ in _ROW if n not in ("src", "idx", "compacted_seq"))
    more = f", COALESCE({_PG_FORGOTTEN_TO}, {_UNREAD}), {_PG_PINNED}"
    # One row per request, prune and message; the newest breaker event and model call.
    newest = "CASE WHEN kind IN ('custom', 'llm_call') THEN kind ELSE CAST(seq AS TEXT) END"
    after_ft, after_cs = "seq >= v_ft + 1", "seq >= v_cs + 1"
    ev_nulls = q.nulls("INTEGER", "INTEGER", "BIGINT", "TEXT")
    view_events = (
        f"SELECT DISTINCT ON ({newest}) CASE kind WHEN 'message' THEN CASE WHEN seq = "
        f"ANY(v_pin) THEN CASE WHEN {after_ft} THEN 'pt' ELSE 'p' END ELSE 't' END "
        "WHEN 'condensation_request' THEN 'r' WHEN 'prune' THEN 'x' WHEN 'custom' THEN 'b' "
        f"ELSE 'l' END, 0, {_EV}, {ev_nulls} FROM events WHERE session_id = a_session "
        # The two ranges of seqs the rows are in, the pins and what follows the
        # condensation's range: the planner reads each by the primary key, where it read
        # one range per kind branch before.
        "AND seq >= 1 AND seq <= a_bound AND (seq = ANY(v_pin) OR seq >= LEAST(v_ft, v_cs) + 1) "
        f"AND (({kind_sql('message')} "
        f"AND (seq = ANY(v_pin) OR {after_ft})) "
        f"OR ({kind_sql('condensation_request')} AND {after_cs}) "
        f"OR ({kind_sql('prune')} AND {after_ft} AND {_UNSTATED} NOT LIKE {_KEEP_LIKE}) "
        f"OR ({kind_sql('custom')} AND {after_cs} AND {_UNSTATED} LIKE {_BREAKER_LIKE}) "
        f"OR ({kind_sql('llm_call')} AND {after_cs})) ORDER BY {newest}, seq DESC"
    )
    view_parts = (
        "SELECT CASE WHEN seq = ANY(v_pin) THEN CASE WHEN seq >= v_ft + 1 THEN 'qu' "
        "ELSE 'q' END ELSE 'u' END, seq, token_count, idx, compacted_seq FROM parts "
        "WHERE session_id = a_session AND seq >= 1 AND seq <= a_bound "
        "AND (seq = ANY(v_pin) OR seq >= v_ft + 1)"
    )
    session_row = _executed(_session_row(q, "a_session", "a_tenant"))
    condensation = _executed(_probe(0, "a_session", "1", "a_bound", more))
    keep = _executed(f"{_keep_prunes(q, 'a_session', routed=True)}= ANY(v_stamps)")
    ddl = f"""CREATE OR REPLACE FUNCTION {ROUTED_VIEW_FUNCTION}(
    a_session varchar, a_tenant varchar, a_bound bigint)
RETURNS TABLE ({", ".join(f"r_{n} {t}" for n, t in _ROW)}) AS $$
DECLARE
    v_cs bigint := 0; v_ft bigint := 0; v_pin bigint[]; v_stamps integer[];
    v_found bigint;
BEGIN
    {session_row} INTO {out};
    GET DIAGNOSTICS v_found = ROW_COUNT;
    IF v_found = 0 THEN
        RETURN;
    END IF;
    RETURN NEXT;
    IF r_id IS NOT NULL THEN  -- a fork: the store reads it statement by statement
        RETURN;
    END IF;
    {condensation} INTO {cond};
    GET DIAGNOSTICS v_found = ROW_COUNT;
    IF v_found > 0 THEN
        r_src := 'c'; r_idx := NULL; r_compacted_seq := NULL;
        v_cs := r_seq; v_ft := r_ft;
        v_pin := CAST(string_to_array(r_pins, ',') AS bigint[]);
        RETURN NEXT;
    END IF;
    RETURN QUERY {_executed(view_events)};
    r_g := 0; r_id := NULL; r_kind := NULL; r_created_at := NULL; r_payload := NULL;
    r_hash := NULL; r_ft := NULL; r_pins := NULL;
    FOR r_src, r_seq, r_token_count, r_idx, r_compacted_seq IN {_executed(view_parts)} LOOP
        IF r_compacted_seq IS NOT NULL THEN
            v_stamps := v_stamps || r_compacted_seq;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF v_stamps IS NOT NULL THEN
        RETURN QUERY {keep};
    END IF;
END;
$$ LANGUAGE plpgsql STABLE SET plan_cache_mode = force_custom_plan"""
    return versioned(ddl, "view")


def view_rows_at_once(
    conn: Connection,
    tenant: str,
    session_id: str,
    as_of: int | None,
    *,
    expand: bool = True,
    forks: set[str] | None = None,
) -> ViewRows | None:
    """:func:`view_rows` as one statement outside a transaction: the session row, the
    rows :func:`_build` reads and the ``keep_chars`` of the prunes that compacted the
    view's parts, all from one snapshot.

    For a session that is not a fork, on SQLite and Postgres (psycopg). ``None`` when
    this cannot answer: another driver, a fork (remembered in ``forks``, so it is not
    asked again; by default for the process), ``as_of`` below 1, or a condensation the
    statement misread; then
    :func:`view_rows` reads the view.
    """
    forks = _FORKS if forks is None else forks
    placeholder = _PLACEHOLDERS.get(conn.dialect.driver)
    if placeholder is None or session_id in forks or (as_of is not None and as_of < 1):
        return None
    check_lookup(tenant, session_id)
    bound = _NO_BOUND if as_of is None else as_of
    pg = conn.dialect.name == "postgresql"
    began = conn.in_transaction()
    routed = routes_views(conn)
    if routed:
        if not began and conn.in_transaction():
            # Asking opened a transaction (once per pooled connection): Citus sends the
            # call to the worker only outside one.
            conn.rollback()
        sql, params = ROUTED_VIEW_CALL, [session_id, tenant, bound]
    else:
        sql, template = _alone_statement(pg, placeholder, is_distributed(conn))
        values = {_SESSION: session_id, _TENANT: tenant, _BOUND: bound}
        params = [values.get(p, p) for p in template]
    if routed:
        by = _fetch_routed(conn, session_id, params)
    else:
        by = _fetch(conn, pg, sql, params, alone=True)
    if by is None:
        return None
    session = by.get("s")
    if not session or (session[0][5] is not None and not AUDITING.get()):
        raise not_found(tenant, session_id)
    if session[0][3] is not None:
        if len(forks) >= _FORKS_KEPT:
            forks.clear()
        forks.add(session_id)
        return None
    head = session[0][2]
    seq = head if as_of is None else as_of
    if seq > head:
        raise InvalidEventError(f"as_of: {as_of} is outside 0..{head} for session {session_id}")
    segments = [Segment(session_id, 1, None)]
    segs = [Segment(session_id, 1, bound)]
    rows = _rows(conn, tenant, session_id, segs, segments, seq, expand, by)
    if rows is None:
        return None
    stamped = {st.compacted_seq for d in rows.parts.values() for st in d.values()}
    for r in by.get("k", ()):
        if r[4] != "prune" or r[2] not in stamped:
            continue
        keep = json.loads(r[6]).get("keep_chars")
        if isinstance(keep, int):
            rows.truncations[r[2]] = keep
    return rows


def _fetch_routed(conn: Connection, session_id: str, params: list[Any]) -> _Tagged | None:
    """The routed view's call: on the session's worker when the store sends its routed
    calls there (``citus_direct``, :mod:`eventstore._citus_direct`), else (or when that
    fails: where the session is is then looked up again) on the coordinator, as it is
    inside a transaction of the caller's (read in its snapshot)."""
    direct = for_engine(conn.engine)
    if direct is not None and not conn.in_transaction():
        worker = direct.connect(session_id)
        if worker is not None:
            try:
                with worker:
                    return _fetch(worker, True, ROUTED_VIEW_CALL, params, alone=True, routed=True)
            except (DBAPIError, ReadAgain):
                direct.forget(session_id)
    return _fetch(conn, True, ROUTED_VIEW_CALL, params, alone=True, routed=True)


# --------------------------------------------------------------------------- statement by statement


def _by_statements(
    conn: Connection,
    tenant: str,
    session_id: str,
    segments: list[Segment],
    seq: int,
    *,
    expand: bool = False,
) -> ViewRows:
    """:func:`view_rows` one statement at a time (drivers without the combined query, and
    condensations whose payload the query cannot read)."""
    cond = latest_in(conn, segments, "condensation", seq)
    rows = 0 if cond is None else 1

    pinned: list[StoredEvent] = []
    if cond is not None and isinstance(cond.event, Condensation):
        tail_lo = cond.event.forgotten_to + 1
        pinned = _read_seqs(conn, segments, sorted(set(cond.event.pinned)), seq)
        ranges = _ranges([e.seq for e in pinned]) + [(tail_lo, seq)]
    else:
        tail_lo = 1
        ranges = [(1, seq)]
    tail = _read_kind(conn, segments, tail_lo, seq, "message")
    if expand:  # put attachments' bytes back (one query, only when the view names blobs)
        both = blobs.expand(conn, tenant, pinned + tail)
        pinned, tail = both[: len(pinned)], both[len(pinned) :]
    part_states, n = _read_parts(conn, segments, ranges, seq)
    control = _read_control(conn, segments, cond.seq + 1 if cond is not None else 1, seq)
    placeholders: dict[int, list[tuple[int, int]]] = {}
    for e in _read_kind(conn, segments, tail_lo, seq, "prune"):
        if isinstance(e.event, Prune) and e.event.keep_chars is None:
            placeholders[e.seq] = [(r.seq, r.index) for r in e.event.targets]
    rows += len(pinned) + len(tail) + n + len(control) + len(placeholders)
    return ViewRows(
        session_id=session_id,
        seq=seq,
        condensation=cond,
        pinned=pinned,
        tail=tail,
        parts=part_states,
        control=control,
        rows_read=rows,
        placeholders=placeholders,
    )


def _read_seqs(
    conn: Connection, segments: Sequence[Segment], seqs: list[int], as_of: int
) -> list[StoredEvent]:
    out = []
    for s in seqs:
        owner = owner_of(segments, s) if 1 <= s <= as_of else None
        if owner is None:
            continue
        row = conn.execute(
            select(*READ_COLUMNS).where(events.c.session_id == owner, events.c.seq == s)
        ).first()
        if row is not None and row.kind == "message":
            out.append(row_to_stored(row, owner))
    return out


def _read_kind(
    conn: Connection, segments: Sequence[Segment], lo: int, hi: int, kind: str
) -> list[StoredEvent]:
    """Every event of ``kind`` in ``lo..hi`` across the lineage, in order (an index range
    scan on ``(session_id, kind, seq)``)."""
    out: list[StoredEvent] = []
    for seg in clip(segments, lo, hi):
        q = (
            select(*READ_COLUMNS)
            .where(
                events.c.session_id == seg.owner,
                kind_is(kind),
                events.c.seq >= seg.lo,
                events.c.seq <= seg.hi,
            )
            .order_by(events.c.seq)
        )
        out.extend(row_to_stored(r, seg.owner) for r in conn.execute(q))
    return out


def _read_control(
    conn: Connection, segments: Sequence[Segment], lo: int, hi: int
) -> list[StoredEvent]:
    """Condensation requests in ``lo..hi`` and, when there is one, the custom events after
    the first (where a condensation policy records its answers), the newest breaker event
    and the newest ``llm_call``."""
    requests = _read_kind(conn, segments, lo, hi, "condensation_request")
    customs = _read_kind(conn, segments, requests[0].seq + 1, hi, "custom") if requests else []
    # And the newest breaker event (a policy's state): a backward (session_id, kind, seq) index
    # scan of the tail's custom events, stopping at the first match (usually one row or none).
    found = _latest_breaker(conn, segments, lo, hi)
    customs = [c for c in customs if found is None or c.seq != found.seq]
    # And the newest model call (its reported usage calibrates the policy's decisions):
    # one backward probe of the (session_id, kind, seq) index.
    call = latest_in(conn, segments, "llm_call", hi)
    calls = [call] if call is not None and call.seq >= lo else []
    return sorted(requests + customs + ([found] if found else []) + calls, key=lambda e: e.seq)


def _latest_breaker(
    conn: Connection,
    segments: Sequence[Segment],
    lo: int,
    hi: int,
    first: dict[str, StoredEvent | None] | None = None,
) -> StoredEvent | None:
    """The newest ``condenser.circuit*`` custom event in ``lo..hi``. ``first``: the first
    probe's answer per segment owner, when the combined query already made it."""
    like = f'%"name":"{BREAKER_PREFIX}%'
    for seg in reversed(clip(segments, lo, hi)):
        top = seg.hi if seg.hi is not None else hi
        probed = first is not None and seg.owner in first
        while top >= seg.lo:
            if probed:
                found = first[seg.owner] if first is not None else None
                probed = False
            else:
                row = conn.execute(
                    select(*READ_COLUMNS)
                    .where(events.c.session_id == seg.owner, kind_is("custom"))
                    .where(events.c.seq.between(seg.lo, top), events.c.payload.like(like))
                    .order_by(events.c.seq.desc())
                    .limit(1)
                ).first()
                found = None if row is None else row_to_stored(row, seg.owner)
            if found is None:
                break
            if getattr(found.event, "name", "").startswith(BREAKER_PREFIX):
                return found
            top = found.seq - 1
    return None


def _ranges(seqs: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs of sorted ``seqs`` as (lo, hi) pairs."""
    out: list[tuple[int, int]] = []
    for s in sorted(set(seqs)):
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def _read_parts(
    conn: Connection,
    segments: Sequence[Segment],
    ranges: list[tuple[int, int]],
    as_of: int,
) -> tuple[dict[int, dict[int, PartState]], int]:
    """Token counts and effective compaction (the prune's seq, or None) per part."""
    out: dict[int, dict[int, PartState]] = {}
    rows = 0
    caps = {seg.owner: seg.hi for seg in segments}
    for lo, hi in ranges:
        if lo > hi:
            continue
        for seg in clip(segments, lo, hi):
            # A stamp counts when its prune is visible at as_of and, for an inherited
            # segment, was made by its owner before the fork point that caps it.
            cap = caps[seg.owner]
            limit = as_of if cap is None else min(as_of, cap)
            q = select(parts.c.seq, parts.c.idx, parts.c.token_count, parts.c.compacted_seq).where(
                parts.c.session_id == seg.owner, parts.c.seq >= seg.lo, parts.c.seq <= seg.hi
            )
            for r in conn.execute(q):
                rows += 1
                stamp = r.compacted_seq
                if stamp is not None and stamp > limit:
                    stamp = None
                out.setdefault(r.seq, {})[r.idx] = PartState(r.token_count, stamp)
        if len(segments) > 1:
            # Compactions a fork applied to parts it inherited.
            for seg in segments[1:]:
                cap = caps[seg.owner]
                limit = as_of if cap is None else min(as_of, cap)
                q = select(
                    fork_compactions.c.seq, fork_compactions.c.idx, fork_compactions.c.compacted_seq
                ).where(
                    fork_compactions.c.session_id == seg.owner,
                    fork_compactions.c.seq >= lo,
                    fork_compactions.c.seq <= hi,
                    fork_compactions.c.compacted_seq <= limit,
                )
                for fr in conn.execute(q):
                    rows += 1
                    cur = out.get(fr.seq, {}).get(fr.idx)
                    if cur is None:  # a part without a row (see codec.sole_text)
                        stamped = PartState(IMPLIED_TOKENS, fr.compacted_seq)
                        out.setdefault(fr.seq, {})[fr.idx] = stamped
                    elif cur.compacted_seq is None:
                        out[fr.seq][fr.idx] = PartState(cur.tokens, fr.compacted_seq)
    return out, rows


# --------------------------------------------------------------------------- routed or not

#: Key in a pooled connection's ``info``: whether views go through the routed function.
_ROUTED_VIEW = "eventstore.routed_view"


def routes_views(conn: Connection) -> bool:
    """Whether a view on ``conn`` is read by one call of the routed view's function: the
    tables are distributed (:func:`~eventstore._routing.is_distributed`) and the function
    is there as this version writes it (``db distribute`` creates it, and brings an earlier
    version's up to date). Otherwise a distributed store reads a view with its one
    statement, which Citus plans twice on every view. Asked once per pooled connection,
    as whether the tables are distributed is."""
    if not is_distributed(conn):
        return False
    mark = conn.info.get(_ROUTED_VIEW)
    if mark is not None and mark[0] == epoch():
        return bool(mark[1])
    known = routed_view_source(conn) == view_source()
    conn.info[_ROUTED_VIEW] = (epoch(), known)
    return known


def view_source() -> str:
    """The body of the routed view's function as this version writes it."""
    return function_body(routed_view_function())


def routed_view_source(conn: Connection) -> str | None:
    """The body of the routed view's function in ``conn``'s database, if it is there."""
    return installed_body(conn, ROUTED_VIEW_SIGNATURE)
