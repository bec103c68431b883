"""``condense`` and ``prune``: shrink a session's view now, the way an agent's /compact does."""

from __future__ import annotations

import sys
from typing import Any

import click

from .render import emit_json
from .root import (
    State,
    cli,
    db_option,
    fail,
    json_option,
    pass_state,
    resolve_budget,
    resolve_session,
)


@cli.command("condense")
@click.argument("session")
@click.option(
    "--strategy",
    "strategies",
    multiple=True,
    default=("extractive",),
    show_default=True,
    help="A strategy by name, repeatable to chain them in order: extractive (free, offline "
    "structured summary), llm (a model writes it, extractive fallback: needs "
    "--summary-model or --model), window (drop the middle, carry the summary), or any "
    "name of condensers.registry (prune, mask, summarize, truncate, ...).",
)
@click.option("--focus", help="What the summary should concentrate on.")
@click.option("--model", help="The agent's model: its window is the budget.")
@click.option("--max-input-tokens", type=int, help="Override the model's input window.")
@click.option("--summary-model", help="Model for --strategy llm (default: --model).")
@json_option
@db_option
@pass_state
def condense_cmd(
    state: State,
    session: str,
    strategies: tuple[str, ...],
    focus: str | None,
    model: str | None,
    max_input_tokens: int | None,
    summary_model: str | None,
    as_json: bool,
) -> None:
    """Condense SESSION now (like /compact): a request event, then the condensation."""
    from condensers import CondensationPolicy, default_pipeline, registry
    from eventstore import CondensationRequest, ConfigurationError

    store = state.store()
    s = resolve_session(store, session)
    budget, source = resolve_budget(store, s, model, max_input_tokens, required=True)
    assert budget is not None
    name = summary_model or model
    if strategies == ("llm",):
        if not name:
            fail("--strategy llm needs --summary-model M or --model M")
        pipeline = default_pipeline(name)
    else:
        steps = ["summarize" if s == "extractive" else s for s in strategies]
        if "llm" in steps and not name:
            fail("--strategy llm needs --summary-model M or --model M")
        try:
            pipeline = registry.pipeline(steps, model=name if "llm" in steps else None)
        except ConfigurationError as exc:
            fail(str(exc))
    store.append(s.id, [CondensationRequest(focus=focus, requested_by="eventstore-cli")])
    policy = CondensationPolicy(budget, pipeline, token_counter=store.token_counter)
    out = policy.maybe_condense(store, s.id)
    _report_outcome(out, as_json, what="condensation", budget=budget, source=source)


def _report_outcome(
    out: Any, as_json: bool, *, what: str, budget: Any, source: str, reason: str | None = None
) -> None:
    reason = out.error or reason or "nothing could be forgotten or compacted"
    data = {
        "session_id": out.session_id,
        "budget": {
            "model": budget.model,
            "max_input_tokens": budget.max_input_tokens,
            "available": budget.available,
            "source": source,
        },
        "trigger": out.trigger,
        "tokens_before": out.tokens_before,
        "tokens_after": out.tokens_after,
        "available": out.available,
        "fits": out.fits,
        "error": out.error,
        "reason": None if out.steps else reason,
        "steps": [
            {
                "seq": st.seq,
                "kind": st.kind,
                "condenser": st.condenser,
                "tokens_before": st.tokens_before,
                "tokens_after": st.tokens_after,
                "cost": st.cost,
                "notes": st.notes,
            }
            for st in out.steps
        ],
    }
    if as_json:
        emit_json(data)
    else:
        click.echo(source)
        for st in out.steps:
            notes = f" ({'; '.join(st.notes)})" if st.notes else ""
            click.echo(
                f"seq {st.seq}: {st.kind} by {st.condenser}, view {st.tokens_before:,} -> "
                f"{st.tokens_after:,} tokens{notes}"
            )
        if out.steps:
            click.echo(f"view now {out.tokens_after:,} tokens of {out.available:,} available")
    if not out.steps:
        click.echo(f"no {what} written: {reason}", err=True)
        # A declined condensation request or a failed run is an error; a prune with
        # nothing old enough to compact is not.
        if what != "prune" or out.error:
            sys.exit(1)


@cli.command("prune")
@click.argument("session")
@click.option(
    "--mask",
    is_flag=True,
    help="Mask every tool result outside the 10 newest instead of pruning by size.",
)
@click.option("--model", help="The agent's model: its window is the budget.")
@click.option("--max-input-tokens", type=int, help="Override the model's input window.")
@json_option
@db_option
@pass_state
def prune_cmd(
    state: State,
    session: str,
    mask: bool,
    model: str | None,
    max_input_tokens: int | None,
    as_json: bool,
) -> None:
    """Compact old tool outputs of SESSION (their content stays in the database)."""
    from condensers import ObservationMasker, Pipeline, PlanContext, ToolOutputPruner

    store = state.store()
    s = resolve_session(store, session)
    budget, source = resolve_budget(store, s, model, max_input_tokens, required=True)
    assert budget is not None
    step = ObservationMasker() if mask else ToolOutputPruner()
    ctx = PlanContext(trigger="manual", token_counter=store.token_counter, force=True)
    out = Pipeline([step]).run(store, s.id, budget, ctx)
    reason = None if out.steps else _why_nothing_to_prune(store.view(s.id), step, budget)
    _report_outcome(out, as_json, what="prune", budget=budget, source=source, reason=reason)


def _why_nothing_to_prune(view: Any, step: Any, budget: Any) -> str:
    """Say what the view holds and which rule kept every tool result in it."""
    results = [
        (item, i)
        for item in view.items
        for i, part in enumerate(item.message.parts)
        if part.type == "tool_result"
    ]
    if not results:
        return "the view holds no tool results"
    open_ = [(item, i) for item, i in results if i not in item.compacted]
    tokens = sum(item.part_tokens[i] for item, i in open_)
    if not open_:
        return f"all {len(results)} tool results in the view are compacted already"
    if hasattr(step, "protect_steps"):
        protect, minimum = step.thresholds(budget)
        rule = (
            f"the pruner keeps the tool output of the newest {step.protect_steps} assistant "
            f"steps and the newest {protect:,} tokens of tool output, and prunes only when "
            f"{minimum:,} tokens or more would be freed; --mask compacts more"
        )
    else:
        rule = "the masker keeps the newest tool results and any that would not shrink"
    return (
        f"{len(open_)} tool results ({tokens:,} tokens) in the view, none old enough or large "
        f"enough to compact: {rule}"
    )
