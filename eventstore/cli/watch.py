"""``eventstore watch``: follow coding-agent transcripts as the agents write them.

Each pass lists the transcripts under the given paths and imports those that changed since
the last pass (a new file is a new session, new lines are appended to its session). What is
imported is found again from the store, by each session's key and the source position of
its newest event, so a restarted ``watch`` picks up where the store ends and two passes over
an unchanged file add nothing. A last line still being written (no newline yet) waits for
the next pass, and so does a compaction marker whose summary is not written yet.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click

from .root import State, cli, db_option, fail, json_option, pass_state

_DATA = os.environ.get("XDG_DATA_HOME") or "~/.local/share"
DEFAULT_PATHS = (
    "~/.claude/projects",
    "~/.codex/sessions",
    "~/.gemini/tmp",
    f"{_DATA}/opencode/opencode.db",
    f"{_DATA}/opencode/storage/session",
)
"""Where Claude Code, Codex CLI, Gemini CLI and OpenCode keep their sessions (OpenCode: in
its XDG data folder on every OS, its database since 1.2 and its storage files before)."""


@cli.command("watch")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "claude-code", "codex", "gemini-cli", "aider", "cline", "opencode"]),
    default="auto",
    show_default=True,
    help="Only transcripts of this format (auto: every format, detected from the content).",
)
@click.option("--once", is_flag=True, help="One pass, then exit.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="Seconds between passes.",
)
@json_option
@db_option
@pass_state
def watch_cmd(
    state: State, paths: tuple[str, ...], fmt: str, once: bool, interval: float, as_json: bool
) -> None:
    """Import coding-agent transcripts under PATHS and keep importing what they append.

    PATHS are files or directories (default: ~/.claude/projects, ~/.codex/sessions,
    ~/.gemini/tmp, and OpenCode's ~/.local/share/opencode/opencode.db and
    ~/.local/share/opencode/storage/session, or under $XDG_DATA_HOME when it is set; those
    that exist). Each changed transcript is brought up to date in its session (key
    "<format>:<session id>"; every session of OpenCode's database); a row is printed for
    each session that got new events (--json: one JSON object per line). Stop with Ctrl-C.
    """
    roots = [Path(p).expanduser() for p in paths] or [
        Path(p).expanduser() for p in DEFAULT_PATHS if Path(p).expanduser().exists()
    ]
    if not roots:
        fail(
            "no transcripts to watch: none of "
            + ", ".join(DEFAULT_PATHS)
            + " exists here; name the files or directories to watch"
        )
    missing = [str(r) for r in roots if not r.exists()]
    if missing:
        fail(f"no such file or directory: {', '.join(missing)}")
    store = state.store(create=True)
    watcher = _Watcher(store, roots, None if fmt == "auto" else fmt, as_json)
    try:
        while True:
            watcher.one_pass()
            if once:
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    if once and watcher.failed:
        raise SystemExit(1)


class _Watcher:
    def __init__(self, store: Any, roots: list[Path], fmt: str | None, as_json: bool) -> None:
        self.store, self.roots, self.fmt, self.as_json = store, roots, fmt, as_json
        self.seen: dict[Path, tuple[int, ...]] = {}  # change stamp at the last pass
        self.formats: dict[Path, str | None] = {}
        self.sessions: dict[Path, dict[str, tuple[Any, ...]]] = {}  # OpenCode's database's
        self.failed = 0

    def files(self) -> list[Path]:
        from eventstore.importers import transcripts_under

        out: list[Path] = []
        for root in self.roots:
            out.extend([root] if root.is_file() else transcripts_under(root))
        return out

    def one_pass(self) -> None:
        from eventstore.importers import (
            ImportFormatError,
            change_stamp,
            detect_agent_format,
            import_transcript,
        )

        self.failed = 0
        for path in self.files():
            try:
                stamp = change_stamp(path, self.formats.get(path) or "")
            except OSError:
                continue  # removed meanwhile
            if self.seen.get(path) == stamp:
                continue
            found = self.formats.get(path)
            if found is None:
                found = self.formats[path] = detect_agent_format(path)
                if found == "opencode":
                    stamp = change_stamp(path, found)
            if found is None or (self.fmt is not None and found != self.fmt):
                self.seen[path] = stamp
                if found is None:
                    self.formats.pop(path, None)  # an empty file may become one
                continue
            try:
                done = import_transcript(
                    self.store, path, found, final=False, seen=self.sessions.setdefault(path, {})
                )
            except ImportFormatError as exc:
                self.failed += 1
                click.echo(f"failed {path}: {exc}", err=True)
                self.seen[path] = stamp  # try again when it changes
                continue
            self.seen[path] = stamp
            for r in done:
                if r.events == 0 and not r.created:
                    continue
                if self.as_json:
                    click.echo(json.dumps(r.as_dict(), ensure_ascii=False))
                else:
                    click.echo(
                        f"{r.session_id}  {r.key}  {r.status}: +{r.events} events  "
                        f"(head {r.head_seq})"
                    )
