"""The combined view statement under construction (:class:`_Query`): its parameters,
written as each driver and backend needs them. :mod:`eventstore._view_rows` builds the
statement with it and reads its rows."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["_PLACEHOLDERS", "_Query", "_Slot", "_SESSION", "_TENANT", "_BOUND"]

#: Drivers the combined query is written for, and their placeholder. On psycopg it is
#: Postgres's own, numbered (``$``): a statement this long (over psycopg's 4 KiB cache
#: limit) would otherwise be parsed for ``%s`` again on every view (about 60 µs).
_PLACEHOLDERS = {"pysqlite": "?", "psycopg": "$"}


class _Slot(NamedTuple):
    """A parameter of a statement built once and kept
    (:func:`eventstore._view_rows._alone_statement`): the value is filled in per read."""

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
