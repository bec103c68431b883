"""What a demo run did: :class:`DemoReport`, filled from the store, and its rendering.

Every number comes from the events the run wrote (not from what the replay believed), so
a test, or a reader with the ``log`` and ``view`` commands, can re-derive each one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventstore import Budget, EventStore

    from .demo_script import Script

__all__ = ["DemoReport", "summarize", "render_report"]


@dataclass
class DemoReport:
    """What a demo run did, with every number the ``demo`` command prints."""

    db: str
    session_id: str
    model: str
    offline: bool
    seed: int
    turns: int
    script_fingerprint: str
    budget: dict[str, int]
    events: int = 0
    events_by_kind: dict[str, int] = field(default_factory=dict)
    llm_calls: int = 0
    raw_history_tokens: int = 0
    """Sum of the stored token counts of every message event: the view with nothing condensed."""
    max_view_tokens_sent: int = 0
    """Largest view sent to the model over the run."""
    views_over_budget: int = 0
    """Model calls whose view did not fit the budget (should be 0)."""
    final_view: dict[str, Any] = field(default_factory=dict)
    condensations: list[dict[str, Any]] = field(default_factory=list)
    prunes: list[dict[str, Any]] = field(default_factory=list)
    time_travel: dict[str, Any] = field(default_factory=dict)
    interrupted: dict[str, Any] = field(default_factory=dict)
    verify: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return asdict(self)


def summarize(
    store: EventStore, sid: str, report: DemoReport, budget: Budget, script: Script
) -> None:
    """Fill ``report`` from what the store holds (not from what the replay believed)."""
    from eventstore import Condensation, LLMCall, Prune, ViewOptions

    calls: list[tuple[int, LLMCall]] = []
    kinds: dict[str, int] = {}
    raw = 0
    for stored in store.read(sid):
        kinds[stored.kind] = kinds.get(stored.kind, 0) + 1
        evt = stored.event
        if stored.kind == "message":
            raw += stored.token_count
        elif isinstance(evt, Condensation):
            report.condensations.append(
                {
                    "seq": stored.seq,
                    "condenser": evt.condenser,
                    "trigger": evt.trigger,
                    "forgotten_from": evt.forgotten_from,
                    "forgotten_to": evt.forgotten_to,
                    "forgotten_events": evt.forgotten_events,
                    "tokens_before": evt.tokens_before,
                    "tokens_after": evt.tokens_after,
                    "summary_tokens": evt.summary_tokens,
                    "summary_model": evt.summary_model,
                }
            )
        elif isinstance(evt, Prune):
            report.prunes.append(
                {
                    "seq": stored.seq,
                    "strategy": evt.strategy,
                    "trigger": evt.trigger,
                    "parts": len(evt.targets),
                    "tokens_freed": evt.tokens_freed,
                }
            )
        elif isinstance(evt, LLMCall):
            calls.append((stored.seq, evt))
    report.events = sum(kinds.values())
    report.events_by_kind = kinds
    report.llm_calls = len(calls)
    report.raw_history_tokens = raw

    final = store.view(sid)
    report.final_view = {
        "seq": final.seq,
        "tokens": final.tokens,
        "messages": len(final.to_messages()),
        "events_shown": len(final.items),
        "pinned": len(final.pinned),
        "compacted_parts": len(final.refs()),
        "summary_tokens": final.summary_tokens,
        "condensation_seq": final.condensation.seq if final.condensation else None,
        "rows_read": final.rows_read,
        "fits_budget": budget.fits(final.tokens),
        "ratio_to_raw": round(final.tokens / raw, 4) if raw else None,
    }

    # Time travel: the last call sent before the first condensation saw events that are
    # condensed away now; rebuild its view and compare with the recorded fingerprint.
    first_cond = report.condensations[0]["seq"] if report.condensations else None
    chosen = None
    for seq, call in calls:
        if first_cond is None or seq < first_cond:
            chosen = (seq, call)
        if first_cond is None and seq >= report.events // 2:
            break
    if chosen is not None:
        seq, call = chosen
        past = store.view(
            sid, as_of=call.view_seq, options=ViewOptions.recorded(call.render_options)
        )
        rebuilt = past.fingerprint()
        report.time_travel = {
            "llm_call_seq": seq,
            "view_seq": call.view_seq,
            "recorded_fingerprint": call.fingerprint,
            "rebuilt_fingerprint": rebuilt,
            "match": rebuilt == call.fingerprint,
            "tokens": past.tokens,
            "messages": len(past.to_messages()),
            "now_condensed": first_cond is not None,
        }

    lost = next((c for t in script.turns for c in t.calls if c.output is None), None)
    if lost is not None:
        report.interrupted = _interrupted(store, sid, lost.id)

    v = store.verify(sid)
    report.verify = {
        "ok": v.ok,
        "events": v.events,
        "llm_calls": v.llm_calls,
        "problems": v.problems[:20],
    }


def _interrupted(store: EventStore, sid: str, call_id: str) -> dict[str, Any]:
    """Where the interrupted call sits and how the view right after it renders it."""
    from eventstore.views import DEFAULT_INTERRUPTED

    call_seq = None
    for stored in store.read(sid, kinds=["message"]):
        if any(getattr(p, "id", None) == call_id for p in stored.event.parts):  # type: ignore[union-attr]
            call_seq = stored.seq
            break
    out: dict[str, Any] = {"call_id": call_id, "seq": call_seq, "rendered_interrupted": False}
    if call_seq is None:
        return out
    # The view after the turn's tool results (before anything condenses the call away).
    for probe in range(call_seq, min(call_seq + 6, store.head(sid)) + 1):
        msgs = store.view(sid, as_of=probe).to_messages()
        for m in msgs:
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id:
                out["rendered_interrupted"] = m.get("content") == DEFAULT_INTERRUPTED
                out["view_seq"] = probe
                return out
    return out


# --------------------------------------------------------------------------- output


def render_report(report: DemoReport, console: Any) -> None:
    """Print ``report`` for a person, on a ``rich`` console."""
    from rich.table import Table

    r = report
    b = r.budget
    n = "{:,}".format
    kinds = r.events_by_kind
    console.print("[bold]agent-eventstore demo[/bold]")
    console.print(f"  database  {r.db}{_default_note(r.db)}")
    console.print(f"  session   {r.session_id}")
    how = "offline: scripted replies through litellm mock_response" if r.offline else "live"
    console.print(f"  model     {r.model} ({how})")
    console.print(
        f"  budget    {n(b['max_input_tokens'])}-token window - {n(b['reserved_output'])} "
        f"reserved for output - {n(b['buffer'])} buffer = {n(b['available'])} tokens for the view"
    )
    console.print(
        f"  script    {r.turns} turns, seed {r.seed}, fingerprint {r.script_fingerprint[:12]}"
    )
    console.print()
    order = ("message", "llm_call", "prune", "condensation")
    parts = [f"{n(kinds[k])} {k}s" for k in order if k in kinds]
    parts += [f"{n(v)} {k}" for k, v in kinds.items() if k not in order]
    console.print(
        f"Replayed {r.turns} turns in {r.seconds.get('replay', 0):.1f} s: "
        f"{n(r.events)} events ({', '.join(parts)})"
    )

    rows = [("prune", p["seq"], p) for p in r.prunes] + [
        ("condensation", c["seq"], c) for c in r.condensations
    ]
    rows.sort(key=lambda x: x[1])
    table = Table(title="What the condensers wrote", title_justify="left", box=None)
    for col, justify in (
        ("seq", "right"),
        ("event", "left"),
        ("strategy", "left"),
        ("what it hid", "left"),
        ("view tokens", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for kind, seq, e in rows:
        if kind == "prune":
            hid = f"{e['parts']} tool outputs"
            toks = f"-{n(e['tokens_freed'])}"
        else:
            hid = (
                f"seq {e['forgotten_from']}..{e['forgotten_to']} "
                f"({n(e['forgotten_events'])} events)"
            )
            toks = f"{n(e['tokens_before'] or 0)} -> {n(e['tokens_after'] or 0)}"
        table.add_row(str(seq), kind, e.get("condenser") or e.get("strategy") or "", hid, toks)
    console.print()
    console.print(table if rows else "No condensation was needed.")

    f = r.final_view
    console.print()
    console.print("[bold]Result[/bold]")
    console.print(
        f"  raw history        {n(r.raw_history_tokens)} tokens "
        f"(every stored message, nothing condensed)"
    )
    pct = 100 * f["tokens"] / b["available"]
    console.print(
        f"  final view         {n(f['tokens'])} tokens = {pct:.0f}% of the budget, "
        f"{100 * (f['ratio_to_raw'] or 0):.1f}% of the raw history "
        f"({f['messages']} messages at seq {f['seq']}, built from {f['rows_read']} rows)"
    )
    console.print(
        f"  largest view sent  {n(r.max_view_tokens_sent)} tokens; "
        f"views over budget: {r.views_over_budget}"
    )
    i = r.interrupted
    if i:
        shown = (
            "rendered with an explicit interrupted result"
            if i.get("rendered_interrupted")
            else "NOT rendered as interrupted"
        )
        console.print(f"  interrupted call   {i['call_id']} at seq {i['seq']}: {shown}")
    t = r.time_travel
    if t:
        console.print()
        console.print("[bold]Time travel[/bold]")
        later = " (those events are condensed away now)" if t["now_condensed"] else ""
        console.print(
            f"  llm_call at seq {t['llm_call_seq']} sent the view at seq {t['view_seq']}: "
            f"{n(t['tokens'])} tokens, {t['messages']} messages{later}"
        )
        mark = "[green]match[/green]" if t["match"] else "[red]MISMATCH[/red]"
        console.print(
            f"  recorded {t['recorded_fingerprint'][:16]}  rebuilt "
            f"{t['rebuilt_fingerprint'][:16]}  {mark}"
        )
    v = r.verify
    console.print()
    status = "[green]ok[/green]" if v.get("ok") else "[red]FAILED[/red]"
    console.print(
        f"verify: {status}: {n(v.get('events', 0))} events with gapless seqs and an intact "
        f"hash chain, {n(v.get('llm_calls', 0))} recorded view fingerprints rebuilt and matched"
    )
    for problem in v.get("problems", []):
        console.print(f"  [red]{problem}[/red]")
    console.print(f"done in {r.seconds.get('total', 0):.1f} s")
    db = r.db.replace("sqlite:///" + str(Path.cwd()) + "/", "sqlite:///")
    flag = "" if _default_note(r.db) else f"--db {db} "
    window = r.budget.get("max_input_tokens", 0)
    console.print()
    console.print("Look around:")
    console.print(f"  eventstore {flag}sessions list")
    console.print(f"  eventstore {flag}log {r.session_id} --kind condensation")
    console.print(f"  eventstore {flag}view {r.session_id} --max-input-tokens {window}")
    console.print(f"  eventstore {flag}view {r.session_id} --at 200 --messages")


def _default_note(db: str) -> str:
    """Say so when ``db`` is the database every command opens without ``--db``."""
    from eventstore.store import resolve_url

    return " (the default: every command uses it without --db)" if db == resolve_url(None) else ""
