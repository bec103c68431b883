"""The extractive summarizer: a structured summary copied out of the events. Costs nothing.

:class:`ExtractiveSummarizer` quotes user requests, counts tool calls, lists errors and
file paths, and quotes the last assistant message, under the template's headings. It is
deterministic, needs no model, and is the offline default and the fallback whenever a
model-backed summarizer fails.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eventstore.events import Message, ToolCallPart, ToolResultPart
from eventstore.paths import FILE_EXTENSIONS, paths_in_value
from eventstore.records import StoredEvent
from eventstore.tokens import HeuristicTokenCounter, TokenCounter

from .protocol import SummaryResult
from .template import HEADINGS, clip

__all__ = ["ExtractiveSummarizer", "parse_sections"]


_SECTION_RE = re.compile(r"^\s{0,3}#{1,6}\s*(.+?)\s*$", re.MULTILINE)


def parse_sections(summary: str | None) -> dict[str, list[str]]:
    """Split a templated summary into ``{heading: lines}`` (unknown headings are kept)."""
    out: dict[str, list[str]] = {}
    if not summary:
        return out
    matches = list(_SECTION_RE.finditer(summary))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(summary)
        body = summary[m.end() : end].strip("\n")
        out[m.group(1).strip()] = [ln for ln in body.splitlines() if ln.strip()]
    return out


_ERROR_RE = re.compile(
    r"(\b\w*(?:Error|Exception)\b|command not found|No such file or directory|\bFAILED\b|"
    r"ERROR|\bfatal:|exit (?:code|status):? *[1-9]|non-zero|Segmentation fault)"
)
# An exception line proper: ``ValueError: bad input`` (what a traceback ends with).
_EXCEPTION_RE = re.compile(r"^(?:[\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b")
# Lines a file viewer or a traceback shows as code, not as the error itself.
# A viewer numbers its lines ``12:``, ``12|``, ``12 `` or ``12→`` (a tab, an arrow).
_CODE_RE = re.compile(
    r"^(?:\d+[:|\s\u2192]|raise\b|except\b|class\b|def\b|import\b|from\b|#|//|\*|>>>)"
)
_TRACEBACK = "Traceback (most recent call last)"
_TRACE_FILE_RE = re.compile(r'File "([^"]+)", line \d+')
_SHELL_TOOLS = {"execute_bash", "bash", "run", "execute_command", "shell", "terminal"}
_SEGMENT_RE = re.compile(r"&&|\|\||;|\||\n")
_FENCE_RE = re.compile(r"```[\w-]*\n(.*?)```", re.S)
_COMMANDS_RE = re.compile(r"^- commands run: (.*)$")
_TOOLS_RE = re.compile(r"^- tools called: (.*)$")
_TOOL_COUNT_RE = re.compile(r"([^\s,]+) x(\d+)")
_TRIM_RE = re.compile(
    r"^- \((\d+) (?:earlier|more|older|less referenced) (?:requests|errors|files) omitted"
    r"(?:[;:][^)]*)?\)$"
)
# Text-mode actions: ``ACTION: cmd`` / ``Action: cmd`` lines (ReAct-style agents).
_ACTION_RE = re.compile(r"^\s*(?:ACTION|Action)\s*:\s*(.+)$", re.MULTILINE)
#: How a dropped entry can still be found: the log keeps every event, and the agent's
#: ``search_history`` tool searches it.
LOOKUP_HINT = "search_history finds them by name"
_NONE = "- none"
#: Distinct command words listed (most used first): far more than a run uses.
MAX_COMMAND_WORDS = 200


def _weak_path(path: str) -> bool:
    """Whether a listed name may be prose rather than a file: one slash between two
    words, with no extension and nothing marking it as a path (``on/off``,
    ``application/json``, ``Ein/Aus-Status``)."""
    if " " in path or path.startswith(("/", "~", ".")) or path.count("/") != 1:
        return False
    if path.endswith("/"):
        return False
    ext = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    return ext not in FILE_EXTENSIONS


def _arguments(call: ToolCallPart) -> Any:
    """The call's decoded arguments, or their text when it is not JSON."""
    try:
        return json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        return call.arguments


def paths_in_call(call: ToolCallPart) -> list[str]:
    return list(dict.fromkeys(paths_in_value(_arguments(call))))


MAX_ERROR_LINES = 40
"""Most error lines one output adds to the inventory (a failing suite prints hundreds);
the rest are counted among the omitted errors, which ``search_history`` finds."""


def _error_lines(text: str, limit: int = MAX_ERROR_LINES) -> tuple[list[str], int]:
    """The error lines of an output, most telling first: the exception line a traceback
    ends with, then the others, skipping the traceback header and lines of code a viewer
    shows; de-duplicated, at most ``limit``, and how many more there were."""
    found: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(_TRACEBACK) or _CODE_RE.match(line):
            continue
        if " raise " in f" {line} " or "except " in line:
            continue
        if _ERROR_RE.search(line):
            found.append(line)
    exceptions = [ln for ln in reversed(found) if _EXCEPTION_RE.match(ln)]
    ordered = list(dict.fromkeys(exceptions + found))
    return [clip(ln, 240) for ln in ordered[:limit]], max(len(ordered) - limit, 0)


_TRACE_LINE_RE = re.compile(r'File "([^"]+)", line (\d+)')


def _located(lines: list[str], text: str) -> list[str]:
    """Error lines with where they happened: an exception line gets the innermost
    ``file:line`` of the traceback it ends (``ValueError: x (at pkg/mod.py:12)``)."""
    frames = _TRACE_LINE_RE.findall(text)
    if not frames:
        return lines
    where = f"{frames[-1][0]}:{frames[-1][1]}"
    return [f"{ln} (at {where})" if _EXCEPTION_RE.match(ln) else ln for ln in lines]


def _output_errors(text: str) -> tuple[list[str], int]:
    """The error lines of an output with where they happened (:func:`_located`), and how
    many more it had than one output adds."""
    lines, more = _error_lines(text)
    return _located(lines, text), more


def _text_actions(text: str) -> list[str]:
    """The commands a text-mode assistant message writes out: every fenced block, and
    ``ACTION:`` lines."""
    return _FENCE_RE.findall(text) + _ACTION_RE.findall(text)


def _command_words(command: str) -> list[str]:
    """First word of each shell command segment (``VAR=value`` prefixes skipped)."""
    words = []
    for segment in _SEGMENT_RE.split(command):
        tokens = [t for t in segment.strip().split() if not re.match(r"^\w+=", t)]
        if tokens and re.match(r"^[\w./-]+$", tokens[0]):
            words.append(tokens[0].rsplit("/", 1)[-1])
    return words


def _call_commands(call: ToolCallPart) -> list[str]:
    if call.name not in _SHELL_TOOLS:
        return []
    try:
        args = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        return _command_words(call.arguments)
    command = args.get("command") or args.get("cmd") if isinstance(args, dict) else None
    return _command_words(command) if isinstance(command, str) else []


def _strings(value: Any) -> list[str]:
    """Every string inside a decoded JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _call_brief(call: ToolCallPart, text: str) -> str:
    """A call as the summary shows it: ``name(arguments)``, or ``name(...)`` when every
    argument value is already in the message text quoted beside it (a text-mode agent
    writes its command out, and the importer made it a call)."""
    values = [v.strip() for v in _strings(_arguments(call)) if v.strip()]
    norm = " ".join(text.split())
    if values and all(" ".join(v.split()) in norm for v in values):
        return f"{call.name}(...)"
    return f"{call.name}({clip(call.arguments, 200)})"


def _bullets(lines: list[str]) -> list[str]:
    """The bullets of a section, each with its continuation lines (a multi-line quote
    stays whole when a summary is summarized again)."""
    out: list[str] = []
    keep = False
    for ln in lines:
        if ln.startswith("- "):
            keep = ln != _NONE and not _TRIM_RE.match(ln)
            if keep:
                out.append(ln)
        elif keep and ln.startswith("  ") and out:
            out[-1] += "\n" + ln
        else:
            keep = False
    return out


_SEQ_BULLET_RE = re.compile(r"^- \[(\d+(?:, \d+)*)\] (.*)$", re.DOTALL)


def _merge_repeats(items: list[str], labels: frozenset[str] = frozenset()) -> list[str]:
    """Bullets that say the same thing at different seqs, merged into one that lists the
    seqs (``- [36, 42] bash: ValueError: x``), placed where it last occurred. With
    ``labels`` (tool names), the same line from different tools is one entry too, under
    the newest one's name."""
    seqs: dict[str, list[str]] = {}
    last: dict[str, tuple[int, str]] = {}
    for i, item in enumerate(items):
        m = _SEQ_BULLET_RE.match(item)
        text = m.group(2) if m else item
        label, sep, rest = text.partition(": ")
        key = rest if m and sep and label in labels else text
        found = m.group(1).split(", ") if m else []
        seqs.setdefault(key, [])
        seqs[key] += [s for s in found if s not in seqs[key]]
        last[key] = (i, text)
    out: list[str] = []
    for key, (_, text) in sorted(last.items(), key=lambda kv: kv[1][0]):
        ordered = sorted(seqs[key], key=int)
        out.append(f"- [{', '.join(ordered)}] {text}" if ordered else text)
    return out


def _without_subsumed(entries: list[str], refs: Counter[str]) -> list[str]:
    """File entries (``- path``, oldest first) without those another entry holds as
    written, whole names between slashes: ``decrypt.py`` beside ``/work/ctf/decrypt.py``,
    ``~/.cfg/`` or ``~/.cfg`` beside ``~/.cfg/app.json``. The longer entry names the same
    file, or a file inside the directory, and its text contains the shorter one, so
    nothing is lost and the list spends its room on distinct names. The holder takes the
    dropped entry's mentions (``refs``) and, when that one is newer, its place (so a
    directory named last keeps the file it was named with). Entries with a note (a space)
    are kept as they are.
    """
    holders: dict[str, str] = {}  # a run of whole names -> the newest entry holding it
    for e in entries:
        if e.startswith("- ") and " " not in e[2:]:
            parts = e[2:].split("/")
            runs = {
                "/".join(parts[i:j]) + tail
                for i in range(len(parts))
                for j in range(i + 1, len(parts) + 1)
                for tail in ("", "/")
            }
            holders.update((run, e) for run in runs if run != e[2:] and run in e[2:])
    place = {e: i for i, e in enumerate(entries)}
    for e in entries:
        held = holders.get(e[2:]) if e.startswith("- ") and e[2:].strip("/.~") else None
        if held is None:
            continue
        while held[2:] in holders:  # up to the outermost holder, which nothing holds
            held = holders[held[2:]]
        place[held] = max(place[held], place.pop(e))
        refs[held] += refs.pop(e, 0)
    return sorted(place, key=place.__getitem__)


def _omitted(lines: list[str]) -> int:
    for ln in lines:
        m = _TRIM_RE.match(ln)
        if m:
            return int(m.group(1))
    return 0


def _bounded(
    items: list[str],
    keep_first: int,
    keep_last: int,
    what: str,
    dropped: int,
    refs: Counter[str] | None = None,
) -> list[str]:
    """``items`` reduced to the first and last few, with a count of what was dropped and
    how to find it (never silently). With ``refs`` (mentions per item), a quarter of the
    kept room goes to the most referenced of the entries that would be dropped, so an
    entry the run keeps coming back to stays although it was first named long ago."""
    if len(items) > keep_first + keep_last:
        dropped += len(items) - keep_first - keep_last
        head, middle = items[:keep_first], items[keep_first : len(items) - keep_last]
        tail = items[len(items) - keep_last :]
        if refs and keep_last >= 4:
            k = keep_last // 4
            popular = set(sorted(middle, key=lambda e: -refs[e])[:k])
            popular = {e for e in popular if refs[e] > 1}
            if popular:
                tail = tail[len(popular) :]
                middle_kept = [e for e in middle if e in popular]
                tail = middle_kept + tail
        items = head + tail
    if dropped:
        note = f"- ({dropped} {what} omitted; {LOOKUP_HINT})"
        items = items[:keep_first] + [note] + items[keep_first:]
    return items or [_NONE]


@dataclass(frozen=True)
class _Caps:
    request_chars: int
    max_requests: int
    max_errors: int
    max_files: int
    last_message_chars: int

    def quotes_halved(self) -> _Caps:
        """Long quotes go first: a fact list (paths, errors) costs a few tokens an entry,
        a quote costs hundreds, so the quotes are halved to their floor (enough to keep
        the task statement and the last assistant message, briefly) before any list
        shrinks."""
        return _Caps(
            max(self.request_chars // 2, 120),
            self.max_requests,
            self.max_errors,
            self.max_files,
            max(self.last_message_chars // 2, 120),
        )

    def lists_at(self, share: float) -> _Caps:
        """Every list cut to ``share`` of its cap, never below three entries: an emptied
        list would stay empty, since the next summary builds on this one."""

        def cut(cap: int) -> int:
            return max(int(cap * share), min(cap, 3))

        return _Caps(
            self.request_chars,
            cut(self.max_requests),
            cut(self.max_errors),
            cut(self.max_files),
            self.last_message_chars,
        )


#: Steps of the search for the largest share of the lists that fits a limit.
_SHARE_STEPS = 10


class ExtractiveSummarizer:
    """A deterministic structured summary built from the events themselves. Costs nothing.

    Anchored like the LLM summary: the previous summary's lists are parsed and extended, so
    facts survive any number of condensations. The lists are inventories (files named,
    commands run, errors seen, with their file and line when a traceback gives them):
    complete while they fit; when the summary must fit a limit, the newest and the most
    referenced entries are kept verbatim and the rest is counted, with a note that
    ``search_history`` finds it (never dropped silently).

    Args:
        request_chars: Cap on each quoted user request (start and end kept).
        max_requests: User requests kept besides the first one (the task statement).
        max_errors: Newest error lines kept (fewer when the summary must fit a limit).
        max_files: File paths kept: the most recently named, and some of the most often
            named (fewer when the summary must fit a limit). What is dropped is counted,
            with a note saying that ``search_history`` finds it.
        last_message_chars: Cap on the quoted last assistant message.
    """

    name = "extractive_summary"

    def __init__(
        self,
        *,
        request_chars: int = 1500,
        max_requests: int = 6,
        max_errors: int = 128,
        max_files: int = 256,
        last_message_chars: int = 1500,
    ) -> None:
        self.request_chars = request_chars
        self.max_requests = max_requests
        self.max_errors = max_errors
        self.max_files = max_files
        self.last_message_chars = last_message_chars

    def settings(self) -> dict[str, Any]:
        return {
            "request_chars": self.request_chars,
            "max_requests": self.max_requests,
            "max_errors": self.max_errors,
            "max_files": self.max_files,
            "last_message_chars": self.last_message_chars,
        }

    def summarize(
        self,
        previous: str | None,
        events: Sequence[StoredEvent],
        *,
        focus: str | None = None,
        limit_tokens: int | None = None,
        token_counter: TokenCounter | None = None,
    ) -> SummaryResult:
        """The summary; with ``limit_tokens``, the quotes are halved first, then the lists
        get the largest share of their caps that fits (their floor: three entries each,
        and a count of the rest with the way to find it)."""
        started = time.perf_counter()
        counter = token_counter or HeuristicTokenCounter()
        caps = _Caps(
            self.request_chars,
            self.max_requests,
            self.max_errors,
            self.max_files,
            self.last_message_chars,
        )
        result = self._build(previous, events, focus, caps)

        def fits(r: SummaryResult) -> bool:
            return limit_tokens is None or counter.count(r.text) <= limit_tokens

        while not fits(result) and caps.quotes_halved() != caps:
            caps = caps.quotes_halved()
            result = self._build(previous, events, focus, caps)
        if not fits(result):
            # The largest share of the lists that fits, found by bisection: the inventory
            # fills the room it has rather than a power-of-two fraction of it.
            low = self._build(previous, events, focus, caps.lists_at(0.0))
            if not fits(low):
                low.notes.append(f"summary exceeds {limit_tokens} tokens at minimum caps")
            else:
                lo, hi = 0.0, 1.0
                for _ in range(_SHARE_STEPS):
                    mid = (lo + hi) / 2
                    tried = self._build(previous, events, focus, caps.lists_at(mid))
                    if fits(tried):
                        lo, low = mid, tried
                    else:
                        hi = mid
            result = low
        result.latency_ms = (time.perf_counter() - started) * 1000
        return result

    def _build(
        self, previous: str | None, events: Sequence[StoredEvent], focus: str | None, caps: _Caps
    ) -> SummaryResult:
        prev = parse_sections(previous)
        requests = _bullets(prev.get(HEADINGS[0], []))
        req_dropped = _omitted(prev.get(HEADINGS[0], []))
        errors = _bullets(prev.get(HEADINGS[3], []))
        err_dropped = _omitted(prev.get(HEADINGS[3], []))
        files = _bullets(prev.get(HEADINGS[5], []))
        file_dropped = _omitted(prev.get(HEADINGS[5], []))
        tools: Counter[str] = Counter()
        commands: Counter[str] = Counter()
        condensed = 0
        for line in prev.get(HEADINGS[1], []):
            m = _TOOLS_RE.match(line)
            if m:
                tools.update({n: int(c) for n, c in _TOOL_COUNT_RE.findall(m.group(1))})
            mc = _COMMANDS_RE.match(line)
            if mc:
                commands.update({n: int(c) for n, c in _TOOL_COUNT_RE.findall(mc.group(1))})
            m2 = re.match(r"^- (\d+) messages condensed", line)
            if m2:
                condensed = int(m2.group(1))
        last_assistant: tuple[int, str] | None = None
        first_seq = last_seq = None
        # Paths that outputs mention (tracebacks) rank after those the agent named: when the
        # list is capped, what the agent worked on stays.
        seen_in_output: list[str] = []
        labels = {"tool"}  # names error entries are filed under

        for stored in events:
            msg = stored.event
            if not isinstance(msg, Message):
                continue
            condensed += 1
            first_seq = stored.seq if first_seq is None else first_seq
            last_seq = stored.seq
            if msg.role == "user" and msg.text.strip():
                quoted = clip(msg.text.strip(), caps.request_chars).replace("\n", "\n  ")
                requests.append(f"- [{stored.seq}] {quoted}")
            for part in msg.parts:
                if isinstance(part, ToolCallPart):
                    tools[part.name] += 1
                    commands.update(_call_commands(part))
                    files.extend(f"- {p}" for p in paths_in_call(part))
                elif isinstance(part, ToolResultPart):
                    lines, more = _output_errors(part.output)
                    err_dropped += more
                    if not lines and (part.is_error or part.state != "completed"):
                        lines = [clip(part.output.strip(), 240) or part.state]
                    tool = part.name or "tool"
                    labels.add(tool)
                    errors.extend(f"- [{stored.seq}] {tool}: {ln}" for ln in lines)
                    seen_in_output.extend(f"- {p}" for p in _TRACE_FILE_RE.findall(part.output))
            if msg.role == "user":
                found, more = _output_errors(msg.text)
                err_dropped += more
                errors.extend(f"- [{stored.seq}] {ln}" for ln in found)
                seen_in_output.extend(f"- {p}" for p in _TRACE_FILE_RE.findall(msg.text))
            if msg.role == "assistant" and msg.text.strip():
                # Paths the assistant names and commands it writes out (text-mode agents).
                files.extend(f"- {p}" for p in paths_in_value(msg.text))
                if not msg.tool_calls:
                    for action in _text_actions(msg.text):
                        commands.update(_command_words(action))
            if msg.role == "assistant" and (msg.text.strip() or msg.tool_calls):
                text = msg.text.strip()
                calls = ", ".join(_call_brief(c, text) for c in msg.tool_calls)
                body = text + (f"\n  calls: {calls}" if calls else "")
                last_assistant = (stored.seq, body)

        # Newest mention last (a file named again moves to the end), with its mentions
        # counted: the bound keeps the newest and some of the most referenced.
        refs = Counter(files)
        files = list(dict.fromkeys(reversed(files)))[::-1]
        named = set(files)
        files = _without_subsumed(
            [f for f in dict.fromkeys(seen_in_output) if f not in named] + files, refs
        )
        sections: dict[str, list[str]] = {}
        # A message sent again word for word (a harness's format reminder) is one entry
        # listing its seqs; the first request, the task statement, stays first.
        requests = requests[:1] + _merge_repeats(requests[1:])
        sections[HEADINGS[0]] = _bounded(
            requests, 1, caps.max_requests, "earlier requests", req_dropped
        )
        if focus:
            sections[HEADINGS[0]].append(f"- focus requested: {focus}")
        done = [f"- {condensed} messages condensed so far"]
        if tools:
            done.append("- tools called: " + ", ".join(f"{n} x{c}" for n, c in tools.most_common()))
        if commands:
            top = commands.most_common(MAX_COMMAND_WORDS)
            done.append("- commands run: " + ", ".join(f"{n} x{c}" for n, c in top))
        prev_progress = prev.get(HEADINGS[1], [])
        in_progress = [ln for ln in _after(prev_progress, "In progress:") if ln.startswith("- ")]
        if last_assistant is not None:
            # A pointer only: the message is quoted under "Current state".
            in_progress = [f"- at [{last_assistant[0]}]: quoted under {HEADINGS[4]}"]
        sections[HEADINGS[1]] = ["Done:", *done, "In progress:", *(in_progress or [_NONE])]
        sections[HEADINGS[2]] = _bullets(prev.get(HEADINGS[2], [])) or [_NONE]
        errors = _merge_repeats(errors, frozenset(labels | set(tools)))
        sections[HEADINGS[3]] = _bounded(errors, 0, caps.max_errors, "earlier errors", err_dropped)
        if last_assistant is not None:
            quoted = clip(last_assistant[1], caps.last_message_chars).replace("\n", "\n  ")
            state = [f"- last assistant message [{last_assistant[0]}]: {quoted}"]
        else:
            state = prev.get(HEADINGS[4], []) or [_NONE]
        sections[HEADINGS[4]] = state
        # Over the cap, names that may be prose (``on/off``) give way first.
        over = max(len(files) - caps.max_files, 0)
        weak = set([f for f in files if _weak_path(f[2:])][:over])
        files = [f for f in files if f not in weak]
        sections[HEADINGS[5]] = _bounded(
            files, 0, caps.max_files, "older files", file_dropped + len(weak), refs
        )
        nxt = f"- continue from the conversation below (condensed through seq {last_seq})"
        if last_seq is None:
            nxt = (prev.get(HEADINGS[6]) or [_NONE])[0]
        sections[HEADINGS[6]] = [nxt]
        text = "\n\n".join(f"## {h}\n" + "\n".join(sections[h]) for h in HEADINGS)
        return SummaryResult(
            text=text,
            notes=[f"events {first_seq}-{last_seq}"] if first_seq is not None else [],
        )


def _after(lines: list[str], marker: str) -> list[str]:
    for i, ln in enumerate(lines):
        if ln.strip() == marker:
            return lines[i + 1 :]
    return []
