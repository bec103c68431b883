"""Post-compaction rehydration: the latest output of the last files the agent touched.

After a summary replaces the middle of a session, an agent usually reads again the files
it was working on, because the summary names them but does not hold them. With
``rehydrate_files=N`` a :class:`~condensers.SummarizingCondenser` appends the newest
content of the last ``N`` files read or written in what it forgets (the result of a call
that read the file, or the whole text a call wrote; never an edit tool's reply, which is
not the file) to the summary, as one section
after the template's, each output held to ``rehydrate_tokens`` (head and tail, with the
``recall`` reference of the whole output). The section is carried from one condensation to
the next: a file touched again replaces its entry, the oldest entries leave first, and a
file the kept tail shows a newer output of is left out.

Outputs are indented four spaces, so no line of one can pass for a heading (of the
summary, or of this section).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eventstore.events import Message, PartRef, ToolCallPart, ToolResultPart
from eventstore.views import truncated_text

from .extractive import paths_in_call

__all__ = ["HEADING", "FileEntry", "split", "section"]

HEADING = "## Latest file contents"
"""The heading of the section (always the summary's last)."""
_INDENT = "    "


@dataclass(frozen=True)
class FileEntry:
    """One file's newest output."""

    path: str
    header: str
    """``path (tool, seq N)``."""
    body: str
    """The output as shown (possibly head and tail)."""


def split(summary: str | None) -> tuple[str | None, list[FileEntry]]:
    """``summary`` without its file section, and the section's entries (oldest first)."""
    if not summary:
        return summary, []
    at = summary.find("\n" + HEADING + "\n")
    if at < 0:
        at = 0 if summary.startswith(HEADING + "\n") else -1
    if at < 0:
        return summary, []
    core, rest = summary[:at].rstrip(), summary[at:].strip("\n").split("\n")[1:]
    entries: list[FileEntry] = []
    header: str | None = None
    body: list[str] = []

    def close() -> None:
        if header is not None:
            path = header.rsplit(" (", 1)[0]
            entries.append(FileEntry(path, header, "\n".join(body)))

    for line in rest:
        if line.startswith("### "):
            close()
            header, body = line[4:], []
        elif line.startswith(_INDENT) or line == "":
            body.append(line[len(_INDENT) :])
        # Anything else (a line saying the summary was shortened) is not an entry's.
    close()
    return core or None, entries


_READ_TOOLS = frozenset({"read_file", "read", "view", "view_file", "open", "open_file", "cat"})
_WRITE_TOOLS = frozenset(
    {"write_file", "write", "create_file", "edit", "edit_file", "apply_patch", "str_replace"}
)
_EDITOR_READS = frozenset({"view", "read"})
_EDITOR_WRITES = frozenset({"create", "str_replace", "insert", "undo_edit", "edit", "write"})
_SHELL_READS = frozenset({"cat", "head", "tail", "nl", "less", "more"})
_SHELL = frozenset({"bash", "execute_bash", "shell", "run", "terminal", "execute_command"})
_TEXT_KEYS = ("file_text", "content", "contents", "text")


def _action(call: ToolCallPart) -> tuple[str, str | None]:
    """What a call does to the file it names: ``("read", None)`` (its result is the
    file's content), ``("write", text)`` (the whole new content when the call carries it,
    else ``None``), or ``("other", None)`` (its result is not the file)."""
    try:
        args = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        args = {}
    if not isinstance(args, dict):
        args = {}
    name = call.name.lower()
    command = args.get("command")
    text = next((args[k] for k in _TEXT_KEYS if isinstance(args.get(k), str)), None)
    if isinstance(command, str) and name not in _SHELL:
        if command in _EDITOR_READS:
            return "read", None
        if command in _EDITOR_WRITES:
            return "write", text if command == "create" else None
    if name in _READ_TOOLS:
        return "read", None
    if name in _WRITE_TOOLS:
        return "write", text if name in ("write_file", "write", "create_file") else None
    if name in _SHELL:
        line = command if isinstance(command, str) else args.get("cmd")
        words = line.strip().split() if isinstance(line, str) else []
        plain = not any(c in (line or "") for c in "|;&><")
        if words and words[0] in _SHELL_READS and plain:
            return "read", None
        if words[:2] == ["sed", "-n"] and plain:
            return "read", None
    return "other", None


def _latest(events: Sequence[Any], keep_chars: int) -> dict[str, FileEntry]:
    """The newest content per path in ``events`` (stored events), in order of recency:
    the result of a call that read the file, or the text a call wrote to it whole. An
    edit's reply is not the file: an edit after the newest read marks that entry as
    changed since (so the agent knows to read it again)."""
    calls: dict[str, tuple[str, str]] = {}  # call id -> (path, tool), the newest read
    out: dict[str, FileEntry] = {}
    for stored in events:
        msg = stored.event
        if not isinstance(msg, Message):
            continue
        for idx, part in enumerate(msg.parts):
            if isinstance(part, ToolCallPart) and msg.role == "assistant":
                paths = paths_in_call(part)
                calls.pop(part.id, None)
                if not paths:
                    continue
                path = paths[0]
                kind, text = _action(part)
                if kind == "read":
                    calls[part.id] = (path, part.name)
                elif kind == "write" and text is not None:
                    ref = PartRef(seq=stored.seq, index=idx)
                    body = truncated_text(ref, text, keep_chars)
                    out.pop(path, None)
                    header = f"{path} ({part.name}, written at seq {stored.seq})"
                    out[path] = FileEntry(path, header, body)
                elif kind == "write" and path in out:
                    old = out.pop(path)
                    header = f"{old.header.split(' changed')[0]} changed at seq {stored.seq}"
                    out[path] = FileEntry(path, header, old.body)
            elif isinstance(part, ToolResultPart) and part.tool_call_id in calls:
                path, tool = calls.pop(part.tool_call_id)
                ref = PartRef(seq=stored.seq, index=idx)
                body = truncated_text(ref, part.output, keep_chars)
                out.pop(path, None)
                out[path] = FileEntry(path, f"{path} ({tool}, seq {stored.seq})", body)
    return out


def section(
    before: Sequence[FileEntry],
    forgotten: Sequence[Any],
    kept: Sequence[Any],
    *,
    files: int,
    tokens: int,
) -> str:
    """The file section for a summary: ``before`` (the previous summary's entries), updated
    by the ``forgotten`` stored events, without the files ``kept`` (the tail) shows a
    newer output of; the newest ``files`` entries, each output held to about ``tokens``
    (four characters a token, as the truncations it quotes are sized).
    Empty when there is nothing to show."""
    if files <= 0:
        return ""
    entries = {e.path: e for e in before}
    for path, entry in _latest(forgotten, max(tokens * 4, 64)).items():
        entries.pop(path, None)
        entries[path] = entry
    shown = set(_latest(kept, 64))
    chosen = [e for e in entries.values() if e.path not in shown][-files:]
    if not chosen:
        return ""
    lines = [HEADING]
    for e in chosen:
        lines.append(f"### {e.header}")
        lines.extend(_INDENT + ln if ln else "" for ln in e.body.split("\n"))
    return "\n".join(lines)
