"""A deterministic coding-agent session, replayed through the store and the condensers.

:func:`generate_session` writes a long, realistic session from a seeded random generator:
user requests, assistant reasoning, parallel tool calls in one assistant message, file reads
and test logs of several KB, failing commands, and one call interrupted before it returned.
The same seed and turn count always give the same script.

:func:`run_demo` replays that script turn by turn the way an agent loop would: append the
user's message, let the default condenser pipeline shrink the view when its trigger fires,
send the view to the model, record the call (``llm_call`` plus the reply), append the tool
results. Offline (the default) the model's reply is the scripted one, returned through
litellm's ``mock_response``; with a real model the view is sent for real and the call is
recorded (its reply is kept on the ``llm_call`` and not acted on, so no tool schemas are
sent), while the scripted agent keeps driving the session so the run stays reproducible.
The returned :class:`DemoReport` holds the numbers the ``eventstore demo`` command prints.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import EventStoreError

if TYPE_CHECKING:
    from .budget import Budget
    from .store import EventStore
    from .views import View

__all__ = [
    "ScriptedCall",
    "Turn",
    "Script",
    "generate_session",
    "DemoReport",
    "DemoError",
    "run_demo",
    "render_report",
    "DEFAULT_DEMO_DB",
    "DEFAULT_TURNS",
    "DEFAULT_WINDOW",
    "OFFLINE_MODEL",
]

DEFAULT_DEMO_DB = "eventstore-demo.db"
"""File the demo writes in the working directory (recreated on each run)."""
DEFAULT_TURNS = 240
"""Model calls in the generated session."""
DEFAULT_WINDOW = 12_000
"""The small input window the demo budgets against, so condensation happens often."""
OFFLINE_MODEL = "gpt-4o-mini"
"""Model name recorded offline (the reply comes from ``mock_response``; nothing is sent)."""
DEFAULT_SEED = 1729

# --------------------------------------------------------------------------- the script


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One tool call of an assistant turn and the result the tool returns."""

    id: str
    name: str
    arguments: str
    output: str | None
    """``None``: the call never returned (the run was interrupted)."""
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Turn:
    """One model call: an optional user message before it, then the assistant's reply."""

    index: int
    user: str | None
    reasoning: str
    text: str
    calls: tuple[ScriptedCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Script:
    """A whole generated session."""

    seed: int
    system: str
    turns: tuple[Turn, ...]

    def fingerprint(self) -> str:
        """SHA-256 of the script's JSON, to show two generations are identical."""
        import hashlib

        data = json.dumps(asdict(self), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(data.encode("utf-8")).hexdigest()


_SYSTEM = (
    "You are a careful software engineer working in the `ledger` repository (a small billing "
    "service in Python). You can call tools: read_file(path), grep(pattern, path), "
    "run_tests(target), edit_file(path, old, new), bash(command). Read before you edit, run "
    "the relevant tests after every change, keep the public API stable unless asked, and "
    "report what you changed and why when a task is done."
)

_TASKS: tuple[dict[str, Any], ...] = (
    {
        "request": "`tests/test_invoice.py::test_totals_round_half_even` started failing after "
        "the currency refactor. Find the cause and fix it without changing the public API.",
        "files": ["src/ledger/invoice.py", "src/ledger/currency.py"],
        "test": "tests/test_invoice.py",
        "symbol": "quantize",
        "fix": "`Money.quantize` used ROUND_HALF_UP; invoices must round half-even",
    },
    {
        "request": "Add a `--since YYYY-MM-DD` option to `ledger export` that skips invoices "
        "issued before that date. Include tests, and keep CSV output byte-identical otherwise.",
        "files": ["src/ledger/export.py", "src/ledger/cli.py"],
        "test": "tests/test_export.py",
        "symbol": "export_invoices",
        "fix": "`export_invoices` takes `since: date | None` and filters on `issued_on`",
    },
    {
        "request": "Reconciliation takes about 40 s on a ledger with 200k lines. Profile "
        "`reconcile()` and make it faster; the output must not change.",
        "files": ["src/ledger/reconcile.py", "src/ledger/models.py"],
        "test": "tests/test_reconcile.py",
        "symbol": "match_payments",
        "fix": "payments are indexed by reference once instead of scanned per line",
    },
    {
        "request": "Rename `LineItem.qty` to `quantity` everywhere, keeping `qty` as a "
        "deprecated alias for one release.",
        "files": ["src/ledger/models.py", "src/ledger/invoice.py", "src/ledger/tax.py"],
        "test": "tests/test_models.py",
        "symbol": "qty",
        "fix": "`quantity` is the field; `qty` is a property that warns",
    },
    {
        "request": "For EU customers the tax module rounds per line instead of per invoice. "
        "Fix that and add a regression test with the numbers from ticket LED-212.",
        "files": ["src/ledger/tax.py", "src/ledger/invoice.py"],
        "test": "tests/test_tax.py",
        "symbol": "vat_for",
        "fix": "VAT is summed unrounded and rounded once per invoice for EU customers",
    },
    {
        "request": "CI on Python 3.13 fails: a DeprecationWarning in `export.py` is turned "
        "into an error. Make it pass on 3.11 through 3.13.",
        "files": ["src/ledger/export.py"],
        "test": "tests/test_export.py",
        "symbol": "utcnow",
        "fix": "`datetime.utcnow()` replaced by `datetime.now(UTC)`",
    },
)

_FOLLOW_UPS = (
    "Also keep the changes small; this goes into a patch release.",
    "Please don't touch the migrations folder.",
    "Remember that `ledger` still supports Python 3.11.",
    "When you're done, tell me which files you changed.",
)

_INTERJECTION = (
    "I stopped that run: the full suite takes twenty minutes on this machine. Only run the "
    "tests for the modules you touch."
)

_WORDS = (
    "amount currency invoice line item total tax rate customer payment ledger entry balance "
    "reference issued due discount rounding precision account period export row record "
    "status region vat net gross quantity unit price"
).split()


class _Gen:
    """Content generators sharing one seeded random source."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.calls = 0

    def call_id(self) -> str:
        self.calls += 1
        return f"call_{self.rng.getrandbits(64):016x}{self.calls:04d}"

    def ident(self) -> str:
        a, b = self.rng.sample(_WORDS, 2)
        return f"{a}_{b}"

    def python_file(self, path: str, symbol: str) -> str:
        """A numbered listing (like ``cat -n``) of a plausible Python module, 3-7 KB."""
        rng = self.rng
        mod = Path(path).stem
        lines = [
            f'"""{mod.capitalize()} handling for the ledger service."""',
            "",
            "from __future__ import annotations",
            "",
            "from dataclasses import dataclass, field",
            "from decimal import ROUND_HALF_EVEN, Decimal",
            "",
            f"from .models import {rng.choice(['LineItem', 'Invoice', 'Payment'])}, Money",
            "",
        ]
        for _ in range(rng.randint(5, 9)):
            name = symbol if rng.random() < 0.25 else self.ident()
            args = ", ".join(rng.sample(_WORDS, rng.randint(1, 3)))
            lines.append("")
            lines.append(f"def {name}({args}):")
            lines.append(
                f'    """Return the {rng.choice(_WORDS)} for each {rng.choice(_WORDS)}."""'
            )
            for _ in range(rng.randint(5, 14)):
                a, b, c = (rng.choice(_WORDS) for _ in range(3))
                stmt = rng.choice(
                    (
                        f"    {a} = sum(x.{b} for x in {c}s)",
                        f"    if {a} is None:\n        raise ValueError('missing {a} on {b}')",
                        f"    {a} = Decimal({b}).quantize(Decimal('0.01'), ROUND_HALF_EVEN)",
                        f"    for {a} in sorted({b}s, key=lambda r: r.{c}):",
                        f"        {a}.{b} = {c}",
                        f"    {a} = {{k: v for k, v in {b}.items() if v.{c}}}",
                    )
                )
                lines.extend(stmt.split("\n"))
            lines.append(f"    return {rng.choice(_WORDS)}")
        return "\n".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(lines))

    def test_log(self, target: str, failing: int, total: int) -> str:
        """Pytest output: progress, tracebacks for ``failing`` tests, the summary line."""
        rng = self.rng
        out = [
            "============================= test session starts ==============================",
            "platform linux -- Python 3.12.3, pytest-8.3.2, pluggy-1.5.0",
            "rootdir: /workspace/ledger",
            "configfile: pyproject.toml",
            "plugins: hypothesis-6.112.0, cov-5.0.0",
            f"collected {total} items",
            "",
        ]
        files = (
            [target]
            if target.endswith(".py")
            else [f"tests/test_{w}.py" for w in ("invoice", "currency", "tax", "export", "models")]
        )
        per = max(1, total // len(files))
        fail_names = [f"test_{self.ident()}" for _ in range(failing)]
        for i, f in enumerate(files):
            marks = "".join(rng.choice("......s") for _ in range(per))
            if i == 0 and failing:
                marks = "F" * failing + marks[failing:]
            out.append(f"{f} {marks} [{min(100, (i + 1) * 100 // len(files)):3d}%]")
        if failing:
            out += ["", "=" * 30 + " FAILURES " + "=" * 30]
            for name in fail_names:
                want = Decimal_str(rng)
                got = Decimal_str(rng)
                out.append(f"_{'_' * 20} {name} {'_' * 20}")
                out.append("")
                for _ in range(rng.randint(14, 26)):
                    a, b = rng.sample(_WORDS, 2)
                    out.append(f"    {a} = make_{b}({rng.randint(1, 999)}, {a}={b!r})")
                out.append(f">       assert total == Decimal('{want}')")
                out.append(f"E       AssertionError: assert Decimal('{got}') == Decimal('{want}')")
                out.append(f"E        +  where Decimal('{got}') = Invoice(lines=[...]).total")
                out.append("")
                out.append(f"{files[0]}:{rng.randint(20, 400)}: AssertionError")
            out.append("=" * 28 + " short test summary info " + "=" * 28)
            out += [f"FAILED {files[0]}::{n} - AssertionError" for n in fail_names]
        secs = rng.uniform(0.8, 9.0)
        status = f"{failing} failed, {total - failing} passed" if failing else f"{total} passed"
        out.append(f"======================== {status} in {secs:.2f}s =========================")
        return "\n".join(out)

    def grep(self, symbol: str, files: list[str]) -> str:
        rng = self.rng
        hits = []
        for f in files + [f"tests/test_{rng.choice(_WORDS)}.py"]:
            for _ in range(rng.randint(2, 6)):
                hits.append(f"{f}:{rng.randint(1, 300)}:    {symbol}({rng.choice(_WORDS)}, ...)")
        return "\n".join(sorted(hits))


def Decimal_str(rng: random.Random) -> str:  # noqa: N802 - reads like the value it makes
    return f"{rng.randint(1, 9999)}.{rng.randint(0, 99):02d}"


def _args(**kw: Any) -> str:
    return json.dumps(kw, separators=(",", ":"))


def _task_turns(g: _Gen, task: dict[str, Any], round_no: int) -> Iterator[Turn]:
    """The turns of one task, without indices (numbered by the caller)."""
    rng = g.rng
    files: list[str] = task["files"]
    test = task["test"]
    sym = task["symbol"]
    request = (
        task["request"]
        if round_no == 0
        else (f"Follow-up on an earlier task (round {round_no + 1}): {task['request']}")
    )

    def call(name: str, output: str | None, err: bool = False, **args: Any) -> ScriptedCall:
        return ScriptedCall(g.call_id(), name, _args(**args), output, err)

    # Look: run the tests and read the main file in parallel.
    yield Turn(
        0,
        request,
        f"The user wants: {task['request'][:90]} I should reproduce first and read "
        f"{files[0]} at the same time.",
        "I'll run the relevant tests and read the module in parallel.",
        (
            call(
                "run_tests", g.test_log(test, rng.randint(1, 3), rng.randint(20, 60)), target=test
            ),
            call("read_file", g.python_file(files[0], sym), path=files[0]),
        ),
    )
    # Search for the symbol; sometimes first with a typo in the path (an error).
    if rng.random() < 0.5:
        bad = files[0].replace("ledger", "ledgr")
        yield Turn(
            0,
            None,
            f"Where else is `{sym}` used?",
            "",
            (call("grep", f"grep: {bad}: No such file or directory", True, pattern=sym, path=bad),),
        )
    yield Turn(
        0,
        None,
        f"Searching the package for `{sym}`.",
        "",
        (call("grep", g.grep(sym, files), pattern=sym, path="src/"),),
    )
    for f in files[1:]:
        yield Turn(
            0,
            None,
            f"{f} is involved too; reading it.",
            "",
            (call("read_file", g.python_file(f, sym), path=f),),
        )
    for attempt in range(rng.randint(1, 3)):
        target = rng.choice(files)
        old = f"{sym}({rng.choice(_WORDS)})"
        if attempt == 0 and rng.random() < 0.35:
            yield Turn(
                0,
                None,
                "Applying the change.",
                "",
                (
                    call(
                        "edit_file",
                        f"error: edit_file: old text not found in {target}: {old!r}",
                        True,
                        path=target,
                        old=old,
                        new=old.replace("(", "_v2("),
                    ),
                ),
            )
        yield Turn(
            0,
            None,
            f"Editing {target}: {task['fix']}.",
            "Making the edit.",
            (
                call(
                    "edit_file",
                    f"Applied 1 edit to {target} ({rng.randint(1, 12)} lines changed)",
                    path=target,
                    old=old,
                    new=old.replace("(", "_fixed("),
                ),
            ),
        )
        failing = 0 if attempt >= 1 or rng.random() < 0.4 else rng.randint(1, 2)
        yield Turn(
            0,
            None,
            "Re-running the tests after the change.",
            "",
            (call("run_tests", g.test_log(test, failing, rng.randint(20, 60)), target=test),),
        )
    # Wider check in parallel: the whole suite and the linter.
    yield Turn(
        0,
        None,
        "Checking nothing else broke: full suite and lint together.",
        "",
        (
            call("run_tests", g.test_log("tests/", 0, rng.randint(150, 260)), target="tests/"),
            call(
                "bash",
                "All checks passed!\n"
                if rng.random() < 0.7
                else f"src/ledger/{rng.choice(_WORDS)}.py:{rng.randint(1, 200)}:1: F401 unused",
                command="ruff check src tests",
            ),
        ),
    )
    yield Turn(
        0,
        None,
        "Done; summarizing for the user.",
        f"Done. {task['fix'].capitalize()}. Files changed: {', '.join(files)}. "
        f"`{test}` and the full suite pass.",
    )


def generate_session(turns: int = DEFAULT_TURNS, seed: int = DEFAULT_SEED) -> Script:
    """Generate a coding-agent session of ``turns`` model calls, deterministically.

    The script cycles through a set of repository tasks (each several turns long), adds
    follow-up requests, and interrupts one parallel tool call about a third of the way in:
    that call never gets a result, and the user explains in the next turn.
    """
    if turns < 1:
        raise ValueError("turns must be at least 1")
    g = _Gen(seed)
    out: list[Turn] = []
    round_no = 0
    while len(out) < turns:
        for task in _TASKS:
            for t in _task_turns(g, task, round_no):
                user = t.user
                if user is None and g.rng.random() < 0.06:
                    user = g.rng.choice(_FOLLOW_UPS)
                out.append(Turn(len(out), user, t.reasoning, t.text, t.calls))
                if len(out) >= turns:
                    break
            if len(out) >= turns:
                break
        round_no += 1
    # One interrupted call: the first parallel turn after a third of the session loses the
    # result of its first call, and the user says why in the next turn.
    for i in range(turns // 3, len(out) - 1):
        t = out[i]
        if len(t.calls) >= 2:
            lost = t.calls[0]
            calls = (ScriptedCall(lost.id, lost.name, lost.arguments, None), *t.calls[1:])
            out[i] = Turn(t.index, t.user, t.reasoning, t.text, calls)
            nxt = out[i + 1]
            user = _INTERJECTION if nxt.user is None else f"{_INTERJECTION}\n\n{nxt.user}"
            out[i + 1] = Turn(nxt.index, user, nxt.reasoning, nxt.text, nxt.calls)
            break
    return Script(seed=seed, system=_SYSTEM, turns=tuple(out))


# --------------------------------------------------------------------------- the replay


class DemoError(EventStoreError):
    """The demo could not run (for example a live model call failed)."""


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


def _fresh_sqlite(path: Path) -> str:
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = path.with_name(path.name + suffix)
        if p.exists():
            p.unlink()
    return f"sqlite:///{path}"


def _register_offline_model(model: str, window: int) -> None:
    """Describe the offline model to litellm so budgets come from its model map."""
    from .tokens import import_litellm

    litellm = import_litellm()
    litellm.register_model(
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


def _assistant_message(turn: Turn, model: str) -> Any:
    from .events import Message, ReasoningPart, TextPart, ToolCallPart

    parts: list[Any] = [ReasoningPart(text=turn.reasoning, format="reasoning_content")]
    if turn.text:
        parts.append(TextPart(text=turn.text))
    parts += [ToolCallPart(id=c.id, name=c.name, arguments=c.arguments) for c in turn.calls]
    return Message(role="assistant", parts=parts, model=model)


def _tool_messages(turn: Turn) -> list[Any]:
    from .events import Message

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


Condense = Callable[["EventStore", str, "Budget"], "View | None"]
"""``(store, session_id, budget) -> view``: one condensation check before a model call,
returning the session's current view (or ``None`` to have it rebuilt)."""


def _default_condense(model: str | None, live: dict[str, Any] | None = None) -> Condense:
    """The default condensation policy: condense at 80% of the budget down to 50%.

    The demo is an application on top of both packages, so it may import ``condensers``
    (lazily); the library modules never do.
    """
    from condensers import CondensationPolicy, default_pipeline

    policies: dict[Budget, CondensationPolicy] = {}

    def condense(store: EventStore, sid: str, budget: Budget) -> View | None:
        policy = policies.get(budget)
        if policy is None:
            policy = policies[budget] = CondensationPolicy(
                budget, default_pipeline(model, **(live or {})), token_counter=store.token_counter
            )
        outcome = policy.maybe_condense(store, sid)
        if outcome.view is not None and outcome.view.seq == store.head(sid):
            return outcome.view
        return None

    def overflow(store: EventStore, sid: str, budget: Budget) -> None:
        # The model rejected the context: condense to half of what was sent.
        condense(store, sid, budget)
        policies[budget].condense(store, sid, trigger="overflow")

    condense.overflow = overflow  # type: ignore[attr-defined]
    return condense


def run_demo(
    url: str | None = None,
    *,
    turns: int = DEFAULT_TURNS,
    model: str | None = None,
    seed: int = DEFAULT_SEED,
    window: int = DEFAULT_WINDOW,
    tenant: str = "demo",
    condense: Condense | None = None,
    progress: Callable[[int, int], None] | None = None,
    api_base: str | None = None,
) -> DemoReport:
    """Replay a generated session through the store and the default condenser pipeline.

    Args:
        url: Database URL. Default: a fresh ``eventstore-demo.db`` in the working directory,
            deleted and recreated on each run.
        turns: Model calls in the generated session.
        model: A real litellm model to send each view to. Default: offline, the scripted
            reply comes back through litellm's ``mock_response`` and nothing leaves the
            machine.
        seed: Seed of the session generator.
        window: Input window (tokens) the budget is computed from; small on purpose.
        tenant: Tenant the demo session is created under.
        condense: Replaces the default pipeline (for tests and experiments).
        progress: Called with ``(turns_done, turns)`` after each turn.
        api_base: Where to reach ``model`` (an OpenAI-compatible server, for example).

    Raises:
        DemoError: The live model call failed (it is recorded on the ``llm_call`` first).
    """
    from .budget import Budget
    from .store import EventStore
    from .tokens import import_litellm
    from .views import record_llm_call

    t0 = time.perf_counter()
    script = generate_session(turns, seed)
    t_gen = time.perf_counter() - t0
    offline = model is None
    model_name = model or f"openai/eventstore-demo-{window // 1000}k"
    live: dict[str, Any] = {"api_base": api_base} if api_base else {}
    if offline:
        _register_offline_model(model_name, window)
        budget = Budget.for_model(model_name)
    else:
        budget = Budget.for_model(model_name, max_input_tokens=_live_window(model_name, window))
    litellm = import_litellm()
    if url is None:
        url = _fresh_sqlite(Path.cwd() / DEFAULT_DEMO_DB)
    is_sqlite = url.startswith("sqlite")
    store = EventStore(
        url,
        tenant=tenant,
        upgrade=True,
        # A demo database is disposable: skip the per-commit fsync.
        **({"sqlite_synchronous": "NORMAL"} if is_sqlite else {}),
    )
    condense = condense or _default_condense(None if offline else model_name, live)
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
        from .events import Message

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
            view = condense(store, sid, budget) or store.view(sid)
            report.max_view_tokens_sent = max(report.max_view_tokens_sent, view.tokens)
            if not budget.fits(view.tokens):
                report.views_over_budget += 1
            messages = view.to_messages()
            start = time.perf_counter()
            if offline:
                response = litellm.completion(
                    model=model_name,
                    messages=messages,
                    mock_response=_reply(turn, model_name, view.tokens),
                )
                record_llm_call(
                    store,
                    sid,
                    view,
                    response,
                    model=model_name,
                    latency_ms=(time.perf_counter() - start) * 1000,
                    expected_seq=view.seq,
                )
            else:
                view, response = _live_call(
                    litellm, store, sid, view, budget, model_name, live, condense
                )
                reply = response.choices[0].message
                record_llm_call(
                    store,
                    sid,
                    view,
                    response,
                    model=model_name,
                    latency_ms=(time.perf_counter() - start) * 1000,
                    append_response=False,
                    metadata={"reply": (reply.content or "")[:2000], "scripted_reply": True},
                    expected_seq=view.seq,
                )
                store.append(sid, [_assistant_message(turn, model_name)])
            tools = _tool_messages(turn)
            if tools:
                store.append(sid, tools)
            if progress is not None:
                progress(turn.index + 1, len(script.turns))
        t2 = time.perf_counter()
        _summarize(store, sid, report, budget, script)
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
    litellm: Any,
    store: EventStore,
    sid: str,
    view: View,
    budget: Budget,
    model: str,
    live: dict[str, Any],
    condense: Condense,
) -> tuple[View, Any]:
    """Send ``view`` to a real model; on a context overflow condense and retry once.

    Estimated token counts can be lower than the model's own tokenizer says, so a view
    that fits the budget on paper may still be rejected; that is the reactive trigger.
    """
    from .views import record_llm_call

    for attempt in (0, 1):
        start = time.perf_counter()
        try:
            return view, litellm.completion(
                model=model, messages=view.to_messages(), max_tokens=256, **live
            )
        except Exception as exc:
            error = f"{type(exc).__name__}: {str(exc)[:500]}"
            record_llm_call(
                store, sid, view, None, model=model, error=error,
                latency_ms=(time.perf_counter() - start) * 1000,
            )  # fmt: skip
            overflow = getattr(condense, "overflow", None)
            if attempt == 0 and overflow is not None and _is_overflow(exc):
                overflow(store, sid, budget)
                view = store.view(sid)
                continue
            hint = (
                "the view is still too large for the model; lower --window"
                if _is_overflow(exc)
                else "check the provider's credentials (for example OPENAI_API_KEY) and "
                "--api-base, or run the demo without --model to stay offline"
            )
            raise DemoError(
                f"the call to {model} failed ({error.splitlines()[0][:300]}); {hint}"
            ) from None
    raise AssertionError("unreachable")  # pragma: no cover


def _is_overflow(exc: BaseException) -> bool:
    from condensers import is_context_window_error

    return is_context_window_error(exc)


def _live_window(model: str, window: int) -> int:
    """The demo's small window, but never more than the live model's own."""
    from .errors import BudgetError

    try:
        from .budget import Budget

        return min(window, Budget.for_model(model).max_input_tokens)
    except BudgetError:
        return window


def _hide_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _summarize(
    store: EventStore, sid: str, report: DemoReport, budget: Budget, script: Script
) -> None:
    """Fill ``report`` from what the store holds (not from what the replay believed)."""
    from .events import Condensation, LLMCall, Prune
    from .views import ViewOptions

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
        past = store.view(sid, as_of=call.view_seq, options=ViewOptions(**call.render_options))
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
    from .views import DEFAULT_INTERRUPTED

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
    console.print(f"  database  {r.db}")
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
    window = r.budget.get("max_input_tokens", 0)
    console.print()
    console.print("Look around:")
    console.print(f"  eventstore --db {db} log {r.session_id} --kind condensation")
    console.print(f"  eventstore --db {db} view {r.session_id} --max-input-tokens {window}")
    console.print(f"  eventstore --db {db} view {r.session_id} --at 200 --messages")
