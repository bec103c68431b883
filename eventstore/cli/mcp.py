"""``mcp``: serve the tenant's sessions to MCP clients (the server is :mod:`.mcp_server`).

Only click is imported here; the ``mcp`` SDK (the ``mcp`` extra) is imported when the
command runs.
"""

from __future__ import annotations

import importlib.util

import click

from .root import State, cli, db_option, fail, pass_state

INSTALL_HINT = 'pip install "agent-eventstore[mcp]"'
TOKEN_ENV = "EVENTSTORE_MCP_TOKEN"


def missing_sdk() -> bool:
    """Whether the ``mcp`` SDK is absent."""
    return importlib.util.find_spec("mcp") is None


# --------------------------------------------------------------------------- command


def _set_tenant(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        state = ctx.find_object(State)
        if state is not None:
            state.tenant = value


@cli.command("mcp")
@click.option(
    "--tenant",
    expose_value=False,
    callback=_set_tenant,
    help="Tenant to serve (overrides the global --tenant).",
)
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (--http).")
@click.option("--port", default=8766, show_default=True, type=int, help="Port (--http).")
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    show_envvar=True,
    help="Bearer token every HTTP request must send (required off loopback).",
)
@click.option(
    "--allow-host",
    "extra_hosts",
    multiple=True,
    help="Another Host header name to accept (--http; a DNS name or proxy), repeatable.",
)
@db_option
@pass_state
def mcp_cmd(
    state: State,
    use_http: bool,
    host: str,
    port: int,
    token: str | None,
    extra_hosts: tuple[str, ...],
) -> None:
    """Serve the tenant's sessions to MCP clients (read-only), over stdio by default.

    Tools: list_sessions, search_history, recall, get_view, get_event; resource
    eventstore://sessions/{id}. With --http the endpoint is http://HOST:PORT/mcp; a host
    other than loopback needs --token (or EVENTSTORE_MCP_TOKEN).
    """
    if missing_sdk():
        fail(f"the MCP server needs the mcp SDK; install it with `{INSTALL_HINT}`")
    from .mcp_server import create_server, http_app, is_loopback

    if use_http and not is_loopback(host) and not token:
        fail(
            f"refusing to serve {host} without a token: anyone who reaches it could read every "
            f"session; pass --token T (or set {TOKEN_ENV}), or bind 127.0.0.1"
        )
    if use_http and host in ("0.0.0.0", "::") and not extra_hosts:
        fail(
            f"binding {host} accepts any address, so the Host header cannot be checked "
            "against it; name the host names clients use with --allow-host NAME"
        )
    if token is not None and len(token) < 16:
        fail("--token is too short to be a secret; use at least 16 characters")
    from .serve import open_read_only

    store = open_read_only(state)
    try:
        server = create_server(store)
        if not use_http:
            server.run("stdio")
            return
        import uvicorn

        app = http_app(server, host, token, extra_hosts)
        shown = f"[{host}]" if ":" in host else host
        click.echo(
            f"eventstore MCP on http://{shown}:{port}/mcp (tenant {state.tenant}"
            f"{', bearer token required' if token else ''}); Ctrl-C stops it",
            err=True,
        )
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        store.close()
