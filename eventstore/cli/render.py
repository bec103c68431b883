"""Output for people and machines: JSON emission, one-line previews, full events, progress.

Nothing here opens a store; every function turns something already read into text.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from eventstore import Session, StoredEvent, ViewItem

_PREVIEW = 100


# --------------------------------------------------------------------------- plumbing


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON (datetimes, pydantic models and sets included)."""
    click.echo(json_text(data))


def json_text(data: Any) -> str:
    """``data`` as the indented JSON every ``--json`` flag prints (no trailing newline)."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON-serializable: {type(value).__name__}")


def console(stderr: bool = False) -> Any:
    """A ``rich`` console (imported on first use)."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=not stderr)


def _bar(counts: str) -> Any:
    """A transient rich progress bar on stderr: the description, a bar, ``counts``
    (``"items"``: done of total; ``"bytes"``: bytes read of total) and the time elapsed."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TimeElapsedColumn,
    )

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn() if counts == "bytes" else MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
    )


@contextmanager
def progress(label: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr, or nothing when stderr is not a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    with _bar("items") as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@contextmanager
def files_progress(enabled: bool) -> Iterator[Callable[[Path, int, int], None] | None]:
    """A rich progress bar on stderr for files read one after the other (called with
    ``(file, bytes_read, bytes_total)``), or nothing when stderr is not a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    with _bar("bytes") as bar:
        task = bar.add_task("importing", total=None)
        shown: list[Path | None] = [None]

        def update(path: Path, done: int, total: int) -> None:
            if path != shown[0]:
                shown[0] = path
                bar.reset(task, description=f"importing {path.name}", total=total)
            bar.update(task, completed=done, total=total)

        yield update


def session_dict(s: Session) -> dict[str, Any]:
    """A session as JSON-ready data."""
    return s.model_dump(mode="json")


def time_str(dt: datetime) -> str:
    """A timestamp to the second, for tables."""
    return dt.strftime("%Y-%m-%d %H:%M:%S")


def one_line(text: str, width: int = _PREVIEW) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


# --------------------------------------------------------------------------- events


def event_preview(stored: StoredEvent) -> str:
    """One line saying what an event is."""
    from eventstore import (
        Condensation,
        CondensationRequest,
        Custom,
        Delta,
        Dequeued,
        LLMCall,
        Message,
        Prune,
        Queued,
        RunState,
    )

    evt = stored.event
    if isinstance(evt, Message):
        bits: list[str] = []
        for p in evt.parts:
            if p.type == "text":
                bits.append(one_line(p.text, 80))
            elif p.type == "reasoning":
                bits.append(f"(thinking) {one_line(p.text, 50)}")
            elif p.type == "tool_call":
                bits.append(f"-> {p.name}({one_line(p.arguments, 50)})")
            elif p.type == "tool_result":
                flag = (
                    " [error]" if p.is_error else f" [{p.state}]" if p.state != "completed" else ""
                )
                n_lines = p.output.count("\n") + 1 if p.output else 0
                bits.append(
                    f"<- {p.name or p.tool_call_id}{flag}: {one_line(p.output, 60)}"
                    f" ({n_lines} lines)"
                )
            elif p.type == "file":
                bits.append(f"[file {p.name or p.media_type}]")
        return one_line(" | ".join(bits) or "(empty)", 160)
    if isinstance(evt, Condensation):
        how = f"{evt.condenser or 'condensation'} ({evt.trigger})"
        toks = ""
        if evt.tokens_before is not None and evt.tokens_after is not None:
            toks = f", view {evt.tokens_before:,} -> {evt.tokens_after:,} tokens"
        return (
            f"{how}: forgot seq {evt.forgotten_from}..{evt.forgotten_to} "
            f"({evt.forgotten_events} events), summary {evt.summary_tokens:,} tokens{toks}"
        )
    if isinstance(evt, Prune):
        return (
            f"{evt.strategy or 'prune'}: compacted {len(evt.targets)} parts, "
            f"freed {evt.tokens_freed:,} tokens"
        )
    if isinstance(evt, LLMCall):
        usage = ""
        if evt.usage is not None and evt.usage.prompt_tokens is not None:
            usage = f", {evt.usage.prompt_tokens:,} prompt tokens"
        err = f", error: {one_line(evt.error, 60)}" if evt.error else ""
        return (
            f"{evt.model}: view@{evt.view_seq}, {evt.message_count} messages, "
            f"fingerprint {evt.fingerprint[:12]}{usage}{err}"
        )
    if isinstance(evt, CondensationRequest):
        return f"requested by {evt.requested_by or '?'}: {evt.focus or '(no focus)'}"
    if isinstance(evt, Custom):
        return f"{evt.name}: {one_line(json.dumps(evt.data, ensure_ascii=False), 100)}"
    if isinstance(evt, Queued):
        return f"queued: {one_line(evt.message.text, 100)}"
    if isinstance(evt, Dequeued):
        return f"took the message queued at seq {evt.queued_seq}"
    if isinstance(evt, RunState):
        why = f" ({evt.reason})" if evt.reason else ""
        return f"run {evt.state}{why}"
    if isinstance(evt, Delta):
        return f"stream {evt.stream_id[:8]}: {one_line(evt.text, 80)}"
    return stored.kind


def event_role(stored: StoredEvent) -> str:
    """The message role of an event, or ``""`` for other kinds."""
    return getattr(stored.event, "role", "") or ""


def event_full(stored: StoredEvent) -> str:
    """An event in full, Markdown-ish."""
    from eventstore import Message
    from eventstore.events import EVENT_ADAPTER

    evt = stored.event
    head = f"## {stored.seq} · {time_str(stored.created_at)} · {stored.kind}"
    if isinstance(evt, Message):
        head += f" · {evt.role}"
    head += f" · {stored.token_count:,} tokens"
    out = [head, ""]
    if isinstance(evt, Message):
        for p in evt.parts:
            if p.type == "text":
                out.append(p.text)
            elif p.type == "reasoning":
                out.append("> " + p.text.replace("\n", "\n> "))
            elif p.type == "tool_call":
                out.append(f"**call** `{p.name}` ({p.id})\n```json\n{p.arguments}\n```")
            elif p.type == "tool_result":
                state = "error" if p.is_error else p.state
                out.append(
                    f"**result** `{p.name or ''}` ({p.tool_call_id}, {state})\n```\n{p.output}\n```"
                )
            elif p.type == "file":
                out.append(f"[file {p.name or ''} {p.media_type} {p.uri or ''}]")
            out.append("")
    else:
        data = EVENT_ADAPTER.dump_python(evt, mode="json", exclude_none=True)
        for key in ("id", "created_at", "kind"):
            data.pop(key, None)
        summary = data.pop("summary", None)
        out.append("```json\n" + json.dumps(data, indent=2, ensure_ascii=False) + "\n```")
        if summary:
            out += ["", summary]
        out.append("")
    return "\n".join(out)


def event_dict(stored: StoredEvent) -> dict[str, Any]:
    """A stored event as JSON-ready data (with its seq, hash and token count)."""
    from eventstore.events import EVENT_ADAPTER

    return {
        "seq": stored.seq,
        "id": stored.id,
        "kind": stored.kind,
        "created_at": stored.created_at.isoformat(),
        "tokens": stored.token_count,
        "hash": stored.hash,
        "event": EVENT_ADAPTER.dump_python(stored.event, mode="json", exclude_none=True),
    }


def item_preview(item: ViewItem, interrupted: set[str]) -> str:
    """One line for a view item: compacted parts and interrupted calls marked."""
    msg = item.message
    bits: list[str] = []
    for idx, p in enumerate(msg.parts):
        if idx in item.compacted:
            bits.append(f"<- {getattr(p, 'name', None) or 'tool'} [compacted]")
        elif p.type == "text":
            bits.append(one_line(p.text, 80))
        elif p.type == "reasoning":
            bits.append(f"(thinking) {one_line(p.text, 40)}")
        elif p.type == "tool_call":
            flag = " [interrupted: no result]" if p.id in interrupted else ""
            bits.append(f"-> {p.name}({one_line(p.arguments, 40)}){flag}")
        elif p.type == "tool_result":
            flag = " [error]" if p.is_error else ""
            bits.append(f"<- {p.name or 'tool'}{flag}: {one_line(p.output, 50)}")
        else:
            bits.append(f"[{p.type}]")
    return one_line(" | ".join(bits) or "(empty)", 140)
