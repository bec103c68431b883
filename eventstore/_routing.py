"""Whether a database's session tables are distributed by Citus, asked once per pooled
connection: the low-level check the read and write paths share (the ``db distribute``
machinery is :mod:`eventstore.distribution`)."""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy.engine import Connection

__all__ = [
    "epoch",
    "forget_distribution",
    "function_body",
    "installed_body",
    "is_distributed",
    "mark_distributed",
    "versioned",
]


#: Key in a pooled connection's ``info``: whether its database's events are distributed,
#: as of which :data:`_epoch`.
_DISTRIBUTED = "eventstore.distributed"
#: Moved on when Citus refuses a statement written for plain tables: every pooled
#: connection of the process then asks again, once.
_epoch = 0


def is_distributed(conn: Connection, *, fresh: bool = False) -> bool:
    """Whether ``events`` is a Citus distributed table in ``conn``'s database, asked once
    per pooled connection (a connection opened after ``db distribute`` sees it; one opened
    before learns it from :func:`forget_distribution`), or now with ``fresh``.

    Citus sends a statement whole to the session's worker only when each condition shows
    it the session's value: on a distributed store a view is one call of the routed view
    function (:func:`~eventstore._sql.view_rows.routes_views`; without it, the view's one
    statement names its parameters where they are used), a fork's view (two sessions)
    goes statement by statement, and each write sets its lock timeout for its
    transaction."""
    if conn.dialect.name != "postgresql":
        return False
    mark = conn.info.get(_DISTRIBUTED)
    if mark is not None and mark[0] == _epoch and not fresh:
        return bool(mark[1])
    known = bool(
        conn.exec_driver_sql(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
        ).scalar()
    )
    if known:  # pg_dist_partition exists only where the extension is created
        known = bool(
            conn.exec_driver_sql(
                "SELECT EXISTS (SELECT 1 FROM pg_dist_partition "
                "WHERE logicalrelid = to_regclass('events'))"
            ).scalar()
        )
    mark_distributed(conn.info, known)
    return known


def mark_distributed(info: dict[Any, Any], known: bool) -> None:
    """Record in a pooled connection's ``info`` what :func:`is_distributed` found."""
    info[_DISTRIBUTED] = (_epoch, known)


def forget_distribution() -> None:
    """Make :func:`is_distributed` ask again, once, on every pooled connection (Citus
    refused a statement the store wrote for plain tables: they were distributed since the
    connection asked, so its pool-mates may be just as wrong)."""
    global _epoch
    _epoch += 1


def epoch() -> int:
    """The current :data:`_epoch`: a mark a pooled connection holds for an older one is to
    be asked again."""
    return _epoch


def versioned(ddl: str, what: str) -> str:
    """``CREATE FUNCTION`` ``ddl`` with a first body line naming its version (a digest of
    the whole definition, its settings too): the body alone then tells whether a database
    holds the function as this version writes it (:func:`installed_body`)."""
    version = hashlib.sha1(ddl.encode()).hexdigest()[:16]
    return ddl.replace("AS $$\n", f"AS $$\n-- eventstore {what} {version}\n", 1)


def function_body(ddl: str) -> str:
    """The body of the function ``ddl`` creates, as ``pg_proc.prosrc`` holds it."""
    return ddl[ddl.index("$$") + 2 : ddl.rindex("$$")]


def installed_body(conn: Connection, signature: str) -> str | None:
    """The body of the function of ``signature`` in ``conn``'s database, if it is there."""
    found: str | None = conn.exec_driver_sql(
        f"SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure('{signature}')"
    ).scalar()
    return found
