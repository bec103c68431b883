"""Post-compaction rehydration: the latest output of the last files the agent touched.

After a summary replaces the middle of a session, an agent usually reads again the files
it was working on, because the summary names them but does not hold them. With
``rehydrate_files=N`` a :class:`~condensers.SummarizingCondenser` appends the newest tool
output of the last ``N`` files read or changed in what it forgets (a tool call whose
arguments name a path, and the result that answers it) to the summary, as one section
after the template's, each output held to ``rehydrate_tokens`` (head and tail, with the
``recall`` reference of the whole output). The section is carried from one condensation to
the next: a file touched again replaces its entry, the oldest entries leave first, and a
file the kept tail shows a newer output of is left out.

Outputs are indented four spaces, so no line of one can pass for a heading (of the
summary, or of this section).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eventstore.events import Message, PartRef, ToolCallPart, ToolResultPart
from eventstore.views import truncated_text

from .extractive import _paths_in_call

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


def _latest(events: Sequence[Any], keep_chars: int) -> dict[str, FileEntry]:
    """The newest output per path in ``events`` (stored events), in order of recency."""
    calls: dict[str, tuple[str, str]] = {}  # call id -> (path, tool), the newest call
    out: dict[str, FileEntry] = {}
    for stored in events:
        msg = stored.event
        if not isinstance(msg, Message):
            continue
        for idx, part in enumerate(msg.parts):
            if isinstance(part, ToolCallPart) and msg.role == "assistant":
                paths = _paths_in_call(part)
                if paths:
                    calls[part.id] = (paths[0], part.name)
                else:
                    calls.pop(part.id, None)
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
