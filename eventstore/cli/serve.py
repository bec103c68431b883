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

    A missing SQLite file is refused (a read-only viewer must not create one), a file this
    process cannot write is opened read-only (``mode=ro``, else ``immutable=1``), and a
    schema that is behind raises the library's error naming ``eventstore db upgrade``.
    """
    from eventstore import EventStore
    from eventstore.store import resolve_url

    from .root import is_read_only_uri, read_only_url, sqlite_path, writable_file

    url = resolve_url(state.url)
    path = sqlite_path(url)
    if path is not None:
        if not path.exists():
            fail(f"no database at {path}; pass --db (or set EVENTSTORE_URL) to point at one")
        if not is_read_only_uri(url) and not writable_file(path):
            url = read_only_url(path)
    return EventStore(url, tenant=state.tenant, upgrade=False)


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Another name the viewer may be reached by (repeatable; the bound address and "
    "localhost always are). Requests naming any other host are refused (DNS rebinding).",
)
@db_option
@pass_state
def serve_cmd(state: State, host: str, port: int, allow_hosts: tuple[str, ...]) -> None:
    """Serve a read-only web viewer of the tenant's sessions (GET only).

    Pages: the sessions table, each session's token chart and timeline, the view at any
    seq with its fingerprint, single events, verification and the JSONL export.
    Binds to localhost unless --host says otherwise; answers only requests addressed to
    that host, localhost or an --allow-host name.
    """
    missing = missing_viewer_modules()
    if missing:
        fail(f"the viewer needs {', '.join(missing)}; install it with `{INSTALL_HINT}`")
    import uvicorn

    from .viewer import create_app
    from .viewer.app import LOOPBACK

    store = open_read_only(state)
    app = create_app(store, allowed_hosts=[*LOOPBACK, host, *allow_hosts])
    if host not in LOOPBACK:
        click.echo(
            f"warning: serving on {host}: anyone who can reach it can read the log", err=True
        )
        if host in ("0.0.0.0", "::") and not allow_hosts:
            click.echo(
                "warning: requests must name an allowed host: add --allow-host with the "
                "name or address clients use to reach this machine",
                err=True,
            )
    click.echo(
        f"eventstore viewer on http://{host}:{port}/ (tenant {state.tenant}); Ctrl-C stops it"
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        store.close()
