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
    store = state.store()
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
