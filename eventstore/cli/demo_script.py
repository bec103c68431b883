"""The demo's session: a deterministic coding-agent conversation from a seeded generator.

:func:`generate_session` writes a long, realistic session: user requests, assistant
reasoning, parallel tool calls in one assistant message, file reads and test logs of
several KB, failing commands, and one call interrupted before it returned. The same seed
and turn count always give the same :class:`Script`. Only the standard library is used.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ScriptedCall",
    "Turn",
    "Script",
    "generate_session",
    "DEFAULT_TURNS",
    "DEFAULT_SEED",
]

DEFAULT_TURNS = 240
"""Model calls in the generated session."""
DEFAULT_SEED = 1729
"""Seed of the generator."""


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
