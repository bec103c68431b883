"""``serve``: the read-only web audit viewer (:mod:`eventstore.cli.viewer`).

Starlette, Jinja2 and uvicorn come with the ``viewer`` extra and are imported only here,
when the command runs, so ``eventstore --help`` stays instant without them.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

import click

from .root import State, cli, db_option, fail, pass_state

if TYPE_CHECKING:
    from eventstore import EventStore

VIEWER_MODULES = ("starlette", "jinja2", "uvicorn")
INSTALL_HINT = 'pip install "agent-eventstore[viewer]"'


def missing_viewer_modules() -> list[str]:
    """The viewer's third-party modules that are not installed."""
    return [m for m in VIEWER_MODULES if importlib.util.find_spec(m) is None]


def open_read_only(state: State) -> EventStore:
    """The store at ``--db``, opened without creating or upgrading anything.

    A missing SQLite file is refused (a read-only viewer must not create one), and a schema
    that is behind raises the library's error naming ``eventstore db upgrade``.
    """
    from sqlalchemy.engine import make_url

    from eventstore import EventStore
    from eventstore.store import resolve_url

    url = resolve_url(state.url)
    u = make_url(url)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        from pathlib import Path

        if not Path(u.database).exists():
            fail(f"no database at {u.database}; pass --db (or set EVENTSTORE_URL) to point at one")
    return EventStore(url, tenant=state.tenant, upgrade=False)


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=int, help="Port to listen on.")
@db_option
@pass_state
def serve_cmd(state: State, host: str, port: int) -> None:
    """Serve a read-only web viewer of the tenant's sessions (GET only).

    Pages: the sessions table, each session's token chart and timeline, the view at any
    seq with its fingerprint, single events, verification and the JSONL export.
    Binds to localhost unless --host says otherwise.
    """
    missing = missing_viewer_modules()
    if missing:
        fail(f"the viewer needs {', '.join(missing)}; install it with `{INSTALL_HINT}`")
    import uvicorn

    from .viewer import create_app

    store = open_read_only(state)
    app = create_app(store)
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            f"warning: serving on {host}: anyone who can reach it can read the log", err=True
        )
    click.echo(
        f"eventstore viewer on http://{host}:{port}/ (tenant {state.tenant}); Ctrl-C stops it"
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        store.close()
