"""``eventstore db``: create, upgrade and check the database schema."""

from __future__ import annotations

import sys
from typing import Any

import click

from .render import emit_json
from .root import State, cli, db_option, json_option, pass_state


@cli.group()
def db() -> None:
    """Create, upgrade and check the database schema."""


def _engine(state: State) -> Any:
    from sqlalchemy import create_engine

    from eventstore._citus_direct import split_option
    from eventstore.store import resolve_url

    return create_engine(split_option(resolve_url(state.url))[0])


def _display_url(state: State) -> str:
    from sqlalchemy.engine import make_url

    from eventstore.store import resolve_url

    return make_url(resolve_url(state.url)).render_as_string(hide_password=True)


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Target revision.")
@json_option
@db_option
@pass_state
def db_upgrade(state: State, revision: str, as_json: bool) -> None:
    """Create the tables, or upgrade them to the newest schema."""
    from eventstore import migrate

    engine = _engine(state)
    try:
        before = migrate.current_revision(engine)
        migrate.upgrade(engine, revision)
        after = migrate.current_revision(engine)
    finally:
        engine.dispose()
    if as_json:
        emit_json({"url": _display_url(state), "from": before, "to": after})
    elif before == after:
        click.echo(f"{_display_url(state)} is already at revision {after}")
    else:
        click.echo(f"upgraded {_display_url(state)} from {before or 'empty'} to {after}")


@db.command("current")
@json_option
@db_option
@pass_state
def db_current(state: State, as_json: bool) -> None:
    """Show the database's schema revision and the one this version needs."""
    from eventstore import migrate
    from eventstore.schema import SCHEMA_REVISION

    engine = _engine(state)
    try:
        current = migrate.current_revision(engine)
    finally:
        engine.dispose()
    status = (
        "empty" if current is None else "up to date" if current == SCHEMA_REVISION else "behind"
    )
    if as_json:
        emit_json(
            {
                "url": _display_url(state),
                "current": current,
                "head": SCHEMA_REVISION,
                "status": status,
            }
        )
    else:
        click.echo(
            f"{_display_url(state)}: {current or 'empty'} (head {SCHEMA_REVISION}, {status})"
        )


@db.command("check")
@json_option
@db_option
@pass_state
def db_check(state: State, as_json: bool) -> None:
    """Exit non-zero when the schema is behind or differs from the code."""
    from eventstore import migrate
    from eventstore.schema import SCHEMA_REVISION

    engine = _engine(state)
    try:
        current = migrate.current_revision(engine)
        diffs = migrate.check(engine) if current == SCHEMA_REVISION else []
    finally:
        engine.dispose()
    lines = [str(d) for d in diffs]
    ok = current == SCHEMA_REVISION and not lines
    if as_json:
        emit_json(
            {
                "url": _display_url(state),
                "ok": ok,
                "current": current,
                "head": SCHEMA_REVISION,
                "differences": lines,
            }
        )
    elif ok:
        click.echo(f"{_display_url(state)}: schema {current} matches the code")
    if ok:
        return
    if current != SCHEMA_REVISION:
        click.echo(
            f"schema is {current or 'empty'}, this version needs {SCHEMA_REVISION}; run "
            f"`eventstore db upgrade --db '{_display_url(state)}'`",
            err=True,
        )
    else:
        click.echo("the database differs from the schema in code:", err=True)
        for line in lines:
            click.echo(f"  {line}", err=True)
    sys.exit(1)


@db.command("distribute")
@click.option(
    "--partition",
    "partitions",
    type=int,
    default=None,
    metavar="N",
    help="Plain Postgres: hash-partition events and parts by session into N partitions.",
)
@json_option
@db_option
@pass_state
def db_distribute(state: State, partitions: int | None, as_json: bool) -> None:
    """Spread the store by session: Citus when the server has it, else explain.

    With Citus, the session tables become distributed tables on the session, co-located,
    and the small global tables reference tables. With --partition N on plain Postgres,
    events and parts become tables hash-partitioned by session. See docs/scaling.md.
    """
    from eventstore import distribution
    from eventstore.errors import SchemaError

    engine = _engine(state)
    try:
        if partitions is None:
            statements = distribution.distribute_citus(engine)
        else:
            statements = distribution.partition_by_session(engine, partitions)
    except distribution.AlreadyDistributed as done:
        if as_json:
            emit_json({"url": _display_url(state), "ok": True, "mode": "citus",
                       "already": True, "statements": done.statements})  # fmt: skip
            return
        added = "; added the routed functions:" if done.statements else "; nothing to do"
        click.echo(f"{_display_url(state)} is already distributed with Citus{added}")
        for sql in done.statements:
            click.echo(f"  {sql};")
        return
    except SchemaError as exc:
        if as_json:
            emit_json({"url": _display_url(state), "ok": False, "error": str(exc)})
        click.echo(f"cannot distribute {_display_url(state)}: {exc}", err=True)
        sys.exit(1)
    finally:
        engine.dispose()
    mode = "citus" if partitions is None else "partition"
    if as_json:
        emit_json({"url": _display_url(state), "ok": True, "mode": mode, "statements": statements})
        return
    if partitions is None:
        click.echo(
            f"distributed {_display_url(state)} with Citus: the session tables are "
            "distributed on the session and co-located (one session's rows on one worker); "
            "session_keys, blobs and feed by their own keys; search_progress, "
            "feed_cursor and alembic_version are reference tables. Statements run:"
        )
    else:
        click.echo(
            f"partitioned events and parts of {_display_url(state)} into {partitions} hash "
            "partitions by session_id; rows, keys and append-only guards kept. Statements run:"
        )
    for sql in statements:
        click.echo(f"  {sql};")
