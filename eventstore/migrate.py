"""Run the shipped Alembic migrations from code or from the ``eventstore db`` commands.

The migration scripts live in the top-level ``migrations/`` folder of a checkout and are
installed as ``eventstore._migrations`` inside the wheel, so an installed package can
upgrade a database without a checkout or an ``alembic.ini``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import inspect, text

from .errors import SchemaError
from .schema import SCHEMA_REVISION

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection, Engine

__all__ = ["script_location", "upgrade", "downgrade", "current_revision", "check", "ensure_schema"]


def script_location() -> str:
    """Filesystem path of the migration scripts (installed package or checkout)."""
    try:
        from . import _migrations

        return str(Path(_migrations.__file__).parent)
    except ImportError:
        pass
    here = Path(__file__).resolve().parent.parent / "migrations"
    if (here / "env.py").exists():
        return str(here)
    raise SchemaError(
        "the migration scripts are missing from this installation; reinstall agent-eventstore"
    )


def _config(connection: Connection) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", script_location())
    cfg.attributes["connection"] = connection
    return cfg


@contextmanager
def _transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction around a whole migration run, DDL included, on every backend.

    pysqlite's default transaction handling commits before every DDL statement, so with
    a plain SQLite engine a crash halfway through an upgrade would leave some tables and
    ``alembic_version`` behind, and the next upgrade would trip over them. Here the driver
    is taken out of that mode for the run and the transaction is begun explicitly (what
    the store's own engine does on every connection), so SQLite's transactional DDL
    applies: a crash rolls the whole upgrade back.
    """
    with engine.connect() as conn:
        raw = conn.connection.driver_connection if conn.dialect.name == "sqlite" else None
        saved = getattr(raw, "isolation_level", None)
        take_over = raw is not None and saved is not None
        if take_over:
            raw.isolation_level = None  # type: ignore[union-attr]
        try:
            with conn.begin():
                if take_over:
                    conn.exec_driver_sql("BEGIN IMMEDIATE")
                yield conn
        finally:
            if take_over:
                raw.isolation_level = saved  # type: ignore[union-attr]


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the database to ``revision`` (default: the newest), in one transaction."""
    from alembic import command

    with _transaction(engine) as conn:
        _refuse_half_created(conn)
        command.upgrade(_config(conn), revision)


def _refuse_half_created(conn: Connection) -> None:
    # Tables without a revision: an upgrade by a version that did not run it in one
    # transaction crashed halfway. Alembic would fail on the first CREATE TABLE; say what
    # happened and how to recover instead (nothing is deleted here).
    from .schema import metadata

    if _current(conn) is not None:
        return
    left = sorted(set(inspect(conn).get_table_names()) & set(metadata.tables))
    if left:
        raise SchemaError(
            f"the database holds tables {', '.join(left)} but no schema revision: an earlier "
            "upgrade was interrupted. If they hold no events, drop them (or delete the "
            "SQLite file) and run `eventstore db upgrade` again"
        )


def downgrade(engine: Engine, revision: str) -> None:
    """Downgrade the database to ``revision`` (``base`` removes every table), in one
    transaction."""
    from alembic import command

    with _transaction(engine) as conn:
        command.downgrade(_config(conn), revision)


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or ``None`` for an empty database."""
    with engine.connect() as conn:
        return _current(conn)


def _current(conn: Connection) -> str | None:
    if not inspect(conn).has_table("alembic_version"):
        return None
    row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
    return row[0] if row else None


def check(engine: Engine) -> list[Any]:
    """Differences between the tables in code and the database (empty when in sync)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from .distribution import is_partition_name
    from .schema import NATIVE_SEARCH_TABLES, metadata

    native = NATIVE_SEARCH_TABLES.get(engine.dialect.name, "")

    def include_name(name: str | None, type_: str, _parents: Any) -> bool:
        # The full-text index is backend-native DDL, outside the metadata on purpose; so
        # are the partitions `eventstore db distribute --partition` adds.
        if type_ != "table":
            return True
        return not ((native and (name or "").startswith(native)) or is_partition_name(name or ""))

    def include_object(obj: Any, name: str | None, type_: str, reflected: bool, _to: Any) -> bool:
        # A foreign key to a partitioned table shows up once more per partition.
        if type_ == "foreign_key_constraint" and reflected:
            return not is_partition_name(obj.referred_table.name)
        # A table one backend needs only (its ``info`` names the dialects that have it).
        if type_ == "table" and not reflected and "dialects" in obj.info:
            return engine.dialect.name in obj.info["dialects"]
        return True

    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_name": include_name,
                "include_object": include_object,
            },
        )
        return list(compare_metadata(ctx, metadata))


def ensure_schema(engine: Engine, *, upgrade_if_behind: bool, display_url: str) -> None:
    """Refuse to run against a schema this code does not match.

    Upgrades an empty or older database when ``upgrade_if_behind`` is true; otherwise
    raises :class:`~eventstore.errors.SchemaError` naming the command that fixes it.
    """

    with engine.connect() as conn:
        current = _current(conn)
    if current == SCHEMA_REVISION:
        return
    if current is not None and not _is_known(current):
        raise SchemaError(
            f"database {display_url} is at schema revision {current}, which this version of "
            f"agent-eventstore does not know (it needs {SCHEMA_REVISION}); upgrade the package"
        )
    if upgrade_if_behind:
        upgrade(engine)
        return
    where = "empty" if current is None else f"at revision {current}"
    raise SchemaError(
        f"database {display_url} is {where}; this version needs schema revision "
        f"{SCHEMA_REVISION}. Run: eventstore db upgrade --db '{display_url}'"
    )


def _is_known(revision: str) -> bool:
    versions = Path(script_location()) / "versions"
    return any(p.name.startswith(f"{revision}_") for p in versions.glob("*.py"))
