"""Reading one session: ``log`` (its events) and ``view`` (what the model sees).

``log`` shows the newest 20 events by default (``-n 0``: all); with ``--from`` it shows the
first ``-n`` events from there instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .render import (
    emit_json,
    event_dict,
    event_full,
    event_preview,
    event_role,
    item_preview,
    time_str,
)
from .root import State, cli, db_option, json_option, pass_state, resolve_budget, resolve_session

if TYPE_CHECKING:
    from eventstore import Budget, EventStore, Session, StoredEvent, View

# --------------------------------------------------------------------------- log


@cli.command("log")
@click.argument("session")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(
        ["message", "condensation", "condensation_request", "prune", "llm_call", "custom"]
    ),
    help="Only these kinds (repeatable).",
)
@click.option(
    "-n",
    "--limit",
    default=20,
    show_default=True,
    help="At most N events: the newest N, or the first N after --from (0: all).",
)
@click.option("--from", "from_seq", type=int, help="First seq.")
@click.option("--to", "to_seq", type=int, help="Last seq.")
@click.option("--full", is_flag=True, help="Whole events, not one line each.")
@json_option
@db_option
@pass_state
def log_cmd(
    state: State,
    session: str,
    kinds: tuple[str, ...],
    limit: int,
    from_seq: int | None,
    to_seq: int | None,
    full: bool,
    as_json: bool,
) -> None:
    """The events of SESSION: seq, time, kind, role, a preview and tokens."""
    from collections import deque

    store = state.store(read_only=True)
    s = resolve_session(store, session)
    last = min(to_seq, s.head_seq) if to_seq is not None else s.head_seq
    first = from_seq or 1
    picked: list[StoredEvent]
    if limit and from_seq is not None:
        picked = []
        for stored in store.read(s.id, first, last, kinds=kinds or None):
            picked.append(stored)
            if len(picked) >= limit:
                break
    elif limit and not kinds:
        picked = list(store.read(s.id, max(first, last - limit + 1), last))
    else:
        window: deque[StoredEvent] = deque(maxlen=limit or None)
        window.extend(store.read(s.id, first, last, kinds=kinds or None))
        picked = list(window)
    if as_json:
        emit_json([event_dict(e) for e in picked])
        return
    if not picked:
        click.echo("no events")
        return
    if full:
        click.echo("\n".join(event_full(e) for e in picked))
        return
    width = len(str(picked[-1].seq))
    for e in picked:
        click.echo(
            f"{e.seq:>{width}}  {time_str(e.created_at)}  {e.kind:<12} {event_role(e):<9} "
            f"{e.token_count:>6,}  {event_preview(e)}"
        )
    shown = len(picked)
    if limit and shown == limit and (picked[0].seq > 1 or from_seq):
        click.echo(f"({shown} shown; -n 0 shows all)", err=True)


# --------------------------------------------------------------------------- view


def _unanswered(view: View) -> set[str]:
    answered = {
        p.tool_call_id for i in view.items for p in i.message.parts if p.type == "tool_result"
    }
    return {
        p.id
        for i in view.items
        for p in i.message.parts
        if p.type == "tool_call" and p.id not in answered
    }


def view_dict(view: View, budget: Budget | None) -> dict[str, Any]:
    """What ``view --json`` prints for ``view`` (the MCP server's ``get_view`` too)."""
    from eventstore import Condensation

    cond = None
    if view.condensation is not None:
        evt = view.condensation.event
        assert isinstance(evt, Condensation)
        cond = {
            "seq": view.condensation.seq,
            "condenser": evt.condenser,
            "trigger": evt.trigger,
            "forgotten_from": evt.forgotten_from,
            "forgotten_to": evt.forgotten_to,
            "forgotten_events": evt.forgotten_events,
            "summary_tokens": view.summary_tokens,
        }
    interrupted = _unanswered(view)
    return {
        "session_id": view.session_id,
        "seq": view.seq,
        "tokens": view.tokens,
        "budget": None
        if budget is None
        else {
            "model": budget.model,
            "max_input_tokens": budget.max_input_tokens,
            "reserved_output": budget.reserved_output,
            "buffer": budget.buffer,
            "available": budget.available,
            "fits": budget.fits(view.tokens),
        },
        "condensation": cond,
        "summary": view.summary,
        "prunes": view.prunes,
        "interrupted_calls": sorted(interrupted),
        "items": [
            {
                "seq": i.seq,
                "role": i.message.role,
                "pinned": i.pinned,
                "tokens": i.tokens,
                "compacted_parts": sorted(i.compacted),
                "preview": item_preview(i, interrupted),
            }
            for i in view.items
        ],
        "messages": len(view.to_messages()),
        "fingerprint": view.fingerprint(),
    }


def view_data(
    store: EventStore,
    session: Session,
    at_seq: int | None,
    model: str | None = None,
    max_input_tokens: int | None = None,
) -> tuple[View, Budget | None, str, dict[str, Any]]:
    """The view of ``session`` at ``at_seq``, the budget it is measured against, the line
    saying where that budget came from, and :func:`view_dict` of the two."""
    view = store.view(session.id, as_of=at_seq)
    budget, note = resolve_budget(store, session, model, max_input_tokens, required=False)
    return view, budget, note, view_dict(view, budget)


@cli.command("view")
@click.argument("session")
@click.option("--at", "at_seq", type=int, help="Rebuild the view as it was at this seq.")
@click.option("--model", help="Measure against this model's budget (litellm name).")
@click.option("--max-input-tokens", type=int, help="Override the model's input window.")
@click.option(
    "--messages", "as_messages", is_flag=True, help="Print the exact litellm messages (JSON)."
)
@json_option
@db_option
@pass_state
def view_cmd(
    state: State,
    session: str,
    at_seq: int | None,
    model: str | None,
    max_input_tokens: int | None,
    as_messages: bool,
    as_json: bool,
) -> None:
    """What the model sees for SESSION: pinned head, summary, tail, and tokens."""
    store = state.store(read_only=True)
    s = resolve_session(store, session)
    if as_messages:
        emit_json(store.view(s.id, as_of=at_seq).to_messages())
        return
    view, budget, note, data = view_data(store, s, at_seq, model, max_input_tokens)
    if budget is not None and "does not know" in note:
        click.echo(note, err=True)  # an assumed window: say so, once
    if as_json:
        emit_json(data)
        return
    at = f"seq {view.seq}" + ("" if view.seq == s.head_seq else f" (head is {s.head_seq})")
    click.echo(f"# view of {s.id} at {at}")
    if budget is not None:
        pct = 100 * view.tokens / budget.available
        verdict = "fits" if budget.fits(view.tokens) else "OVER BUDGET"
        click.echo(
            f"{view.tokens:,} tokens of {budget.available:,} available ({pct:.0f}%, {verdict}) "
            f"for {budget.model}: window {budget.max_input_tokens:,} - "
            f"{budget.reserved_output:,} reserved output - {budget.buffer:,} buffer"
        )
    else:
        click.echo(f"{view.tokens:,} tokens ({note})")
    click.echo(f"{data['messages']} messages, fingerprint {data['fingerprint'][:16]}")
    interrupted = set(data["interrupted_calls"])

    def show(items: list[Any]) -> None:
        for i in items:
            mark = " *" if i.compacted else "  "
            preview = item_preview(i, interrupted)
            click.echo(f"{i.seq:>7}{mark}{i.message.role:<9} {i.tokens:>6,}  {preview}")

    pinned = [i for i in view.items if i.pinned]
    tail = [i for i in view.items if not i.pinned]
    click.echo("\n## pinned")
    show(pinned)
    cond = data["condensation"]
    if cond is not None:
        click.echo(
            f"\n## summary (condensation at seq {cond['seq']} by {cond['condenser']}, "
            f"{cond['trigger']}: seq {cond['forgotten_from']}..{cond['forgotten_to']} "
            f"condensed, {cond['forgotten_events']} events; {view.summary_tokens:,} tokens)"
        )
        for line in (view.summary or "(no summary text: the events were dropped)").splitlines():
            click.echo(f"    {line}")
    click.echo(f"\n## tail ({len(tail)} events)")
    show(tail)
    if view.prunes:
        click.echo(f"\n* parts compacted by the prunes at seq {', '.join(map(str, view.prunes))}")
