"""``eventstore demo``: a generated coding-agent session, replayed through the condensers.

:func:`run_demo` replays the :mod:`.demo_script` session turn by turn the way an agent loop
would: append the user's message, let the default condensation policy shrink the view when
its trigger fires, send the view to the model with :func:`condensers.complete` (which
records the ``llm_call``, and on a context-window error condenses with trigger
``overflow`` and retries once), then append the tool results.

Offline (the default) the model's reply is the scripted one, returned through litellm's
``mock_response``, and ``complete`` appends it. With a real model the view is sent for
real and recorded, but the reply is not acted on (no tool schemas are sent): the scripted
assistant message is appended instead, keeping the live reply's text in its
``provider_metadata``, so the run stays reproducible. The returned
:class:`~.demo_report.DemoReport` holds the numbers the command prints.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from eventstore import EventStoreError

from .demo_script import DEFAULT_SEED, DEFAULT_TURNS
from .render import console, emit_json, progress
from .root import State, cli, pass_state

if TYPE_CHECKING:
    from condensers import CondensationPolicy
    from eventstore import EventStore, Message, View

    from .demo_report import DemoReport
    from .demo_script import Turn

__all__ = [
    "run_demo",
    "DemoError",
    "DEFAULT_SEED",
    "DEFAULT_TURNS",
    "DEFAULT_WINDOW",
]

DEFAULT_WINDOW = 12_000
"""The small input window the demo budgets against, so condensation happens often."""
_LIVE_MAX_TOKENS = 256
"""Output cap of a live call: the reply is recorded, not acted on."""


class DemoError(EventStoreError):
    """The demo could not run (for example a live model call failed)."""


# --------------------------------------------------------------------------- command


@cli.command("demo")
@click.option(
    "--db",
    "demo_url",
    help="Database URL (default: the one every command uses, EVENTSTORE_URL or "
    "./eventstore.db; each run adds one session).",
)
@click.option(
    "--turns",
    type=click.IntRange(1, 100_000),
    default=None,
    help="Model calls in the generated session. [default: 240]",
)
@click.option(
    "--model",
    help="Send every view to this real model through litellm (default: offline, scripted replies).",
)
@click.option(
    "--window",
    type=click.IntRange(2_000),
    default=None,
    help="Input window the budget is computed from. [default: 12000]",
)
@click.option("--seed", type=int, default=None, help="Generator seed. [default: 1729]")
@click.option("--api-base", help="Base URL of the --model's server (OpenAI-compatible).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def demo_cmd(
    state: State,
    demo_url: str | None,
    turns: int | None,
    model: str | None,
    window: int | None,
    seed: int | None,
    api_base: str | None,
    as_json: bool,
) -> None:
    """Replay a long generated coding-agent session through the condensers, then audit it."""
    from eventstore.store import resolve_url

    from .demo_report import render_report

    # The database every other command opens by default, so that `eventstore sessions
    # list` right after the demo shows its session.
    url = resolve_url(demo_url or state.url)
    with progress("replaying", enabled=not as_json) as update:
        report = run_demo(
            url,
            turns=turns or DEFAULT_TURNS,
            model=model,
            window=window or DEFAULT_WINDOW,
            seed=DEFAULT_SEED if seed is None else seed,
            tenant=state.tenant,
            progress=update,
            api_base=api_base,
        )
    if as_json:
        emit_json(report.to_dict())
    else:
        render_report(report, console())
    if not report.verify.get("ok") or not report.time_travel.get("match", True):
        sys.exit(1)


# --------------------------------------------------------------------------- the replay


def run_demo(
    url: str | None = None,
    *,
    turns: int = DEFAULT_TURNS,
    model: str | None = None,
    seed: int = DEFAULT_SEED,
    window: int = DEFAULT_WINDOW,
    tenant: str = "demo",
    policy: CondensationPolicy | None = None,
    progress: Callable[[int, int], None] | None = None,
    api_base: str | None = None,
) -> DemoReport:
    """Replay a generated session through the store and the default condensation policy.

    Args:
        url: Database URL. Default: the store's default (``EVENTSTORE_URL``, else
            ``sqlite:///eventstore.db`` in the working directory), the database every
            ``eventstore`` command opens without ``--db``. Each run adds one session.
        turns: Model calls in the generated session.
        model: A real litellm model to send each view to. Default: offline, the scripted
            reply comes back through litellm's ``mock_response`` and nothing leaves the
            machine.
        seed: Seed of the session generator.
        window: Input window (tokens) the budget is computed from; small on purpose.
        tenant: Tenant the demo session is created under.
        policy: Replaces the default condensation policy (for tests and experiments); its
            budget is the one the run is measured against.
        progress: Called with ``(turns_done, turns)`` after each turn.
        api_base: Where to reach ``model`` (an OpenAI-compatible server, for example).

    Raises:
        DemoError: The live model call failed (it is recorded on the ``llm_call`` first).
    """
    from condensers import CondensationPolicy, complete, default_pipeline
    from eventstore import Budget, EventStore, Message
    from eventstore.store import resolve_url

    from .demo_report import DemoReport, summarize
    from .demo_script import generate_session

    t0 = time.perf_counter()
    script = generate_session(turns, seed)
    t_gen = time.perf_counter() - t0
    offline = model is None
    model_name = model or f"openai/eventstore-demo-{window // 1000}k"
    live: dict[str, Any] = {"api_base": api_base} if api_base else {}
    url = resolve_url(url)
    is_sqlite = url.startswith("sqlite")
    if offline:
        _register_offline_model(model_name, window)
    # The demo's own commits skip the per-commit fsync: a power cut could at worst lose
    # its newest turns, never another session's events.
    fast: dict[str, Any] = {"sqlite_synchronous": "NORMAL"} if is_sqlite else {}
    store = EventStore(url, tenant=tenant, upgrade=True, **fast)
    if policy is None:
        if offline:
            budget = Budget.for_model(model_name)
        else:
            budget = Budget.for_model(model_name, max_input_tokens=_live_window(model_name, window))
        pipeline = default_pipeline(None if offline else model_name, **live)
        policy = CondensationPolicy(budget, pipeline, token_counter=store.token_counter)
    budget = policy.budget
    report = DemoReport(
        db=store.url if is_sqlite else _hide_password(store.url),
        session_id="",
        model=model_name,
        offline=offline,
        seed=seed,
        turns=turns,
        script_fingerprint=script.fingerprint(),
        budget={
            "max_input_tokens": budget.max_input_tokens,
            "reserved_output": budget.reserved_output,
            "buffer": budget.buffer,
            "available": budget.available,
        },
    )
    try:
        session = store.create_session(
            title="ledger: fix rounding, add export --since, speed up reconcile",
            metadata={"generator": "eventstore.demo", "seed": seed, "turns": turns},
        )
        sid = report.session_id = session.id
        store.append(sid, [Message.system(script.system)], expected_seq=0)
        t1 = time.perf_counter()
        for turn in script.turns:
            if turn.user is not None:
                store.append(sid, [Message.user(turn.user)])
            outcome = policy.maybe_condense(store, sid)
            view = outcome.view  # the view after condensing: what ``complete`` sends
            if view is None:  # pragma: no cover - every outcome carries its view
                view = store.view(sid, options=policy.options)
            report.max_view_tokens_sent = max(report.max_view_tokens_sent, view.tokens)
            if not budget.fits(view.tokens):
                report.views_over_budget += 1
            if offline:
                reply = _reply(turn, model_name, view.tokens)
                complete(
                    store, sid, model=model_name, policy=policy, view=view, mock_response=reply
                )
            else:
                response = _live_call(store, sid, model_name, policy, view, live)
                store.append(sid, [_assistant_message(turn, model_name, response)])
            tools = _tool_messages(turn)
            if tools:
                store.append(sid, tools)
            if progress is not None:
                progress(turn.index + 1, len(script.turns))
        # The final view is what the next model call would be sent: checked like every
        # other turn's.
        policy.maybe_condense(store, sid)
        t2 = time.perf_counter()
        summarize(store, sid, report, budget, script)
        report.seconds = {
            "generate": round(t_gen, 3),
            "replay": round(t2 - t1, 3),
            "report": round(time.perf_counter() - t2, 3),
            "total": round(time.perf_counter() - t0, 3),
        }
        return report
    finally:
        store.close()


def _live_call(
    store: EventStore,
    sid: str,
    model: str,
    policy: CondensationPolicy,
    view: View,
    live: dict[str, Any],
) -> Any:
    """Send the view to a real model and record the call; the reply is returned, not appended.

    ``complete`` records a failed call on an ``llm_call`` event (and on a context-window
    error condenses with trigger ``overflow`` and retries once) before the error reaches
    here, where it becomes a :class:`DemoError` saying what to do.
    """
    from condensers import complete
    from eventstore.llm import is_context_window_error

    try:
        return complete(
            store, sid, model=model, policy=policy, append_response=False, view=view,
            max_tokens=_LIVE_MAX_TOKENS, **live,
        )  # fmt: skip
    except Exception as exc:
        error = f"{type(exc).__name__}: {str(exc)[:500]}"
        hint = (
            "the view is still too large for the model; lower --window"
            if is_context_window_error(exc)
            else "check the provider's credentials (for example OPENAI_API_KEY) and "
            "--api-base, or run the demo without --model to stay offline"
        )
        raise DemoError(
            f"the call to {model} failed ({error.splitlines()[0][:300]}); {hint}"
        ) from None


def _register_offline_model(model: str, window: int) -> None:
    """Describe the offline model to litellm so budgets come from its model map."""
    from eventstore.llm import register_model

    register_model(
        {
            model: {
                "max_input_tokens": window,
                "max_output_tokens": 1024,
                "input_cost_per_token": 0.0,
                "output_cost_per_token": 0.0,
                "cache_creation_input_token_cost": 0.0,
                "cache_read_input_token_cost": 0.0,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
    )


def _live_window(model: str, window: int) -> int:
    """The demo's small window, but never more than the live model's own."""
    from eventstore import ModelInfo

    info = ModelInfo.find(model)
    return window if info is None else min(window, info.max_input_tokens)


def _hide_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


# --------------------------------------------------------------------------- scripted turns


def _reply(turn: Turn, model: str, prompt_tokens: int) -> dict[str, Any]:
    """The scripted assistant reply as a chat completion (for ``mock_response``)."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": turn.text or None,
        "reasoning_content": turn.reasoning,
    }
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.calls
        ]
    completion = max(
        1, (len(turn.text) + len(turn.reasoning) + sum(len(c.arguments) for c in turn.calls)) // 4
    )
    return {
        "id": f"demo-{turn.index}",
        "model": model,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls" if turn.calls else "stop",
                "message": message,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        },
    }


def _assistant_message(turn: Turn, model: str, response: Any) -> Message:
    """The scripted reply that drives a live run, with the model's real reply alongside."""
    from eventstore import Message, ReasoningPart, TextPart, ToolCallPart

    parts: list[Any] = [ReasoningPart(text=turn.reasoning, format="reasoning_content")]
    if turn.text:
        parts.append(TextPart(text=turn.text))
    parts += [ToolCallPart(id=c.id, name=c.name, arguments=c.arguments) for c in turn.calls]
    reply = response.choices[0].message
    live = {"scripted": True, "live_reply": (reply.content or "")[:2000]}
    return Message(role="assistant", parts=parts, model=model, provider_metadata=live)


def _tool_messages(turn: Turn) -> list[Message]:
    from eventstore import Message

    return [
        Message.tool(
            c.id,
            c.output,
            name=c.name,
            is_error=c.is_error,
            state="error" if c.is_error else "completed",
        )
        for c in turn.calls
        if c.output is not None
    ]
