"""Commands over a running agent's queue and run state: ``enqueue``, ``pending``,
``dequeue`` and ``cancel``.

A person uses these to leave a message for a busy agent (it is durable at once and the
agent takes it as its next user message), to see what is waiting, and to stop a run
while keeping what it already produced.
"""

from __future__ import annotations

import click

from .render import emit_json, event_dict, one_line, time_str
from .root import State, cli, db_option, json_option, pass_state, resolve_session


@cli.command("enqueue")
@click.argument("session")
@click.argument("text")
@json_option
@db_option
@pass_state
def enqueue_cmd(state: State, session: str, text: str, as_json: bool) -> None:
    """Queue TEXT as a user message for SESSION's agent to take next."""
    store = state.store()
    sid = resolve_session(store, session).id
    seq = store.enqueue(sid, text)
    waiting = len(store.pending(sid))
    if as_json:
        emit_json({"session_id": sid, "seq": seq, "pending": waiting})
        return
    click.echo(f"queued at seq {seq} ({waiting} waiting)")


@cli.command("pending")
@click.argument("session")
@json_option
@db_option
@pass_state
def pending_cmd(state: State, session: str, as_json: bool) -> None:
    """Messages queued for SESSION and not yet taken, oldest first."""
    store = state.store(read_only=True)
    sid = resolve_session(store, session).id
    waiting = store.pending(sid)
    if as_json:
        emit_json([event_dict(p) for p in waiting])
        return
    if not waiting:
        click.echo("nothing queued")
        return
    for p in waiting:
        text = p.event.message.text  # type: ignore[union-attr]
        click.echo(f"{p.seq:>6}  {time_str(p.created_at)}  {one_line(text)}")


@cli.command("dequeue")
@click.argument("session")
@json_option
@db_option
@pass_state
def dequeue_cmd(state: State, session: str, as_json: bool) -> None:
    """Take the oldest queued message: it becomes SESSION's next user message."""
    store = state.store()
    sid = resolve_session(store, session).id
    taken = store.dequeue(sid)
    if as_json:
        emit_json(None if taken is None else event_dict(taken))
        return
    if taken is None:
        click.echo("nothing queued")
        return
    text = taken.event.text  # type: ignore[union-attr]
    click.echo(f"seq {taken.seq}: {one_line(text)}")


@cli.command("cancel")
@click.argument("session")
@click.option("--reason", default="cancelled", show_default=True, help="Recorded with the stop.")
@json_option
@db_option
@pass_state
def cancel_cmd(state: State, session: str, reason: str, as_json: bool) -> None:
    """Stop SESSION's run, keeping what it produced (partial text, finished tool results)."""
    store = state.store()
    sid = resolve_session(store, session).id
    before = store.run_state(sid).state
    seqs = store.cancel_run(sid, reason=reason)
    if as_json:
        emit_json({"session_id": sid, "was": before, "seqs": seqs})
        return
    if not seqs:
        click.echo("the run is idle; nothing to cancel")
        return
    click.echo(f"cancelled a {before} run: recorded seqs {seqs[0]}..{seqs[-1]}")


@cli.command("tail")
@click.option("--session", "session", default=None, help="Only this session's events.")
@click.option(
    "--after", type=int, default=0, show_default=True, help="Feed position to resume after."
)
@click.option("-f", "--follow", is_flag=True, help="Keep waiting for new events (Ctrl-C stops).")
@click.option(
    "--idle-timeout",
    type=float,
    default=None,
    help="With --follow: stop after this many seconds without a new event.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per line (with its position)."
)
@db_option
@pass_state
def tail_cmd(
    state: State,
    session: str | None,
    after: int,
    follow: bool,
    idle_timeout: float | None,
    as_json: bool,
) -> None:
    """The tenant's events in commit order, across sessions (a live log with --follow).

    Each line starts with the event's feed position: pass the last one to --after to
    resume where you stopped.
    """
    import json

    from .render import event_preview, event_role

    store = state.store()
    sid = resolve_session(store, session).id if session else None
    items = (
        store.follow(after, session_id=sid, idle_timeout=idle_timeout)
        if follow
        else store.tail(after, session_id=sid)
    )
    try:
        for item in items:
            e = item.stored
            if as_json:
                line = {"position": item.position, "session_id": item.session_id}
                click.echo(json.dumps({**line, **event_dict(e)}, ensure_ascii=False))
            else:
                click.echo(
                    f"{item.position:>8}  {item.session_id[:8]}  {e.seq:>6}  "
                    f"{time_str(e.created_at)}  {e.kind:<12} {event_role(e):<9} {event_preview(e)}",
                )
    except KeyboardInterrupt:
        return


@cli.command("search")
@click.argument("query")
@click.option("--session", "session", default=None, help="Only this session's history.")
@click.option("-n", "--limit", default=20, show_default=True, help="Hits per page.")
@click.option("--offset", default=0, show_default=True, help="Hits to skip (next page).")
@json_option
@db_option
@pass_state
def search_cmd(
    state: State, query: str, session: str | None, limit: int, offset: int, as_json: bool
) -> None:
    """Full-text search over the tenant's history, pruned and condensed events included.

    QUERY is words (all must occur) and "quoted phrases". Indexes what is new first.
    """
    store = state.store()
    sid = resolve_session(store, session).id if session else None
    hits = store.search(query, session_id=sid, limit=limit, offset=offset)
    if as_json:
        emit_json([h.model_dump() for h in hits])
        return
    if not hits:
        click.echo("no matches")
        return
    for h in hits:
        who = h.role or h.kind
        click.echo(f"{h.session_id[:8]}  {h.seq:>6}  {who:<12}  {one_line(h.snippet, 100)}")
