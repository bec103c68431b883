"""Commands over whole sessions: list/show/fork, verify, export/import, and tenant stats.

``stats`` reports *tokens saved*: over the tenant's sessions, the tokens of every stored
message (the view with nothing condensed) minus the tokens of the current view, where that
is positive; what views add beyond their messages (a result rendered for an interrupted
call, for instance) is reported apart as *view overhead*, never as a negative saving. It also
reports the sum of ``tokens_before - tokens_after`` over condensation events, which counts
every reduction made along the way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from .render import emit_json, files_progress, progress, session_dict, time_str
from .root import State, cli, db_option, fail, json_option, pass_state, resolve_session

# --------------------------------------------------------------------------- sessions


@cli.group()
def sessions() -> None:
    """List, show and fork sessions."""


@sessions.command("list")
@click.option("--user", "user_id", help="Only this user's sessions.")
@click.option("-n", "--limit", default=20, show_default=True, help="How many (0: all).")
@json_option
@db_option
@pass_state
def sessions_list(state: State, user_id: str | None, limit: int, as_json: bool) -> None:
    """Sessions of the tenant, newest first."""
    found = state.store(read_only=True).list_sessions(user_id=user_id, limit=limit or None)
    if as_json:
        emit_json([session_dict(s) for s in found])
        return
    if not found:
        click.echo(f"no sessions for tenant {state.tenant!r}")
        return
    click.echo(f"{'id':<36}  {'updated':<19}  {'events':>6}  {'user':<12}  title")
    for s in found:
        title = s.title or ""
        if s.parent_id:
            title = f"{title} (fork of {s.parent_id[:8]}@{s.fork_seq})".strip()
        user = (s.user_id or "-")[:12]
        click.echo(f"{s.id:<36}  {time_str(s.updated_at)}  {s.head_seq:>6}  {user:<12}  {title}")


@sessions.command("show")
@click.argument("session")
@json_option
@db_option
@pass_state
def sessions_show(state: State, session: str, as_json: bool) -> None:
    """A session's details: counts by kind, raw and current view tokens."""
    store = state.store(read_only=True)
    s = resolve_session(store, session)
    kinds: dict[str, int] = {}
    raw = 0
    for stored in store.read(s.id):
        kinds[stored.kind] = kinds.get(stored.kind, 0) + 1
        if stored.kind == "message":
            raw += stored.token_count
    view_tokens = store.view(s.id).tokens
    data = session_dict(s) | {
        "events_by_kind": kinds,
        "raw_tokens": raw,
        "view_tokens": view_tokens,
    }
    if as_json:
        emit_json(data)
        return
    click.echo(f"# {s.title or s.id}")
    rows = [
        ("id", s.id),
        ("tenant", s.tenant),
        ("user", s.user_id or "-"),
        ("created", time_str(s.created_at)),
        ("updated", time_str(s.updated_at)),
        ("head seq", str(s.head_seq)),
    ]
    if s.parent_id:
        rows.append(("fork of", f"{s.parent_id} at seq {s.fork_seq}"))
    rows.append(("events", ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())) or "none"))
    rows.append(("tokens", f"{raw:,} stored in messages, {view_tokens:,} in the current view"))
    if s.metadata:
        rows.append(("metadata", json.dumps(s.metadata, ensure_ascii=False)))
    for k, v in rows:
        click.echo(f"{k:>9}  {v}")


@sessions.command("fork")
@click.argument("session")
@click.option("--at", "at_seq", type=int, required=True, help="Share events up to this seq.")
@click.option("--title", help="Title of the new session.")
@json_option
@db_option
@pass_state
def sessions_fork(
    state: State, session: str, at_seq: int, title: str | None, as_json: bool
) -> None:
    """Start a new session sharing SESSION's events up to --at (nothing is copied)."""
    store = state.store()
    s = resolve_session(store, session)
    fork = store.fork(s.id, at_seq, title=title)
    if as_json:
        emit_json(session_dict(fork))
    else:
        click.echo(f"forked {s.id} at seq {at_seq}: {fork.id}")


# --------------------------------------------------------------------------- verify


@cli.command("verify")
@click.argument("session", required=False)
@click.option("--all", "all_", is_flag=True, help="Every session of the tenant.")
@click.option("--no-fingerprints", is_flag=True, help="Skip rebuilding recorded views.")
@click.option(
    "--head-hash",
    help="A head hash recorded outside the database (printed by an earlier verify): fail "
    "unless it is the hash of an event in SESSION's chain.",
)
@click.option(
    "--key-file",
    type=click.Path(exists=True, dir_okay=False),
    help="File holding the key the session was sealed with (EventStore.seal): fail "
    "unless a seal matches it.",
)
@json_option
@db_option
@pass_state
def verify_cmd(
    state: State,
    session: str | None,
    all_: bool,
    no_fingerprints: bool,
    head_hash: str | None,
    key_file: str | None,
    as_json: bool,
) -> None:
    """Check gapless seqs, the hash chain up to the recorded head, the unhashed columns,
    compaction stamps and every recorded view fingerprint. Prints each session's head
    hash: keep it outside the database and pass it back with --head-hash."""
    if bool(session) == all_:
        fail("give a SESSION or --all")
    if head_hash is not None and all_:
        fail("--head-hash names one session's head: give a SESSION instead of --all")
    key = None
    if key_file is not None:
        with open(key_file, "rb") as fp:
            key = fp.read().rstrip(b"\r\n")
    store = state.store(read_only=True)
    ids = (
        [s.id for s in store.list_sessions(limit=None)]
        if all_
        else [resolve_session(store, session or "").id]
    )
    reports = []
    with progress("verifying", enabled=len(ids) > 1 and not as_json) as update:
        for n, sid in enumerate(ids, 1):
            reports.append(
                store.verify(sid, fingerprints=not no_fingerprints, head_hash=head_hash, key=key)
            )
            if update:
                update(n, len(ids))
    bad = [r for r in reports if not r.ok]
    if as_json:
        emit_json({"ok": not bad, "sessions": [r.model_dump(mode="json") for r in reports]})
    else:
        for r in reports:
            status = "ok" if r.ok else "FAILED"
            click.echo(
                f"{r.session_id}: {status}: {r.events} events, {r.llm_calls} "
                f"view fingerprints re-checked, head hash {r.head_hash or '-'}"
            )
            if r.anchored_seq is not None:
                click.echo(f"  the recorded head hash is seq {r.anchored_seq}")
            if r.sealed_seq is not None:
                click.echo(f"  sealed under the key up to seq {r.sealed_seq}")
            if r.purged or r.unverifiable_views:
                click.echo(
                    f"  {r.purged} events purged (hashes bound by their purge records), "
                    f"{r.unverifiable_views} recorded views held purged content"
                )
            if r.purge_pending:
                click.echo(
                    f"  {r.purge_pending} events a purge record lists still hold their content "
                    "(an interrupted purge: opening the store for writing, or the next purge, "
                    "erases them)"
                )
            for p in r.problems:
                click.echo(f"  {p}", err=True)
        if all_:
            click.echo(f"{len(reports) - len(bad)} of {len(reports)} sessions ok")
    if bad:
        sys.exit(1)


@cli.command("purge")
@click.argument("session")
@click.option("--reason", required=True, help="Why: the retention rule or erasure request.")
@click.option("--through-seq", type=int, help="Purge seqs up to this one (default: all).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@db_option
@pass_state
def purge_cmd(
    state: State, session: str, reason: str, through_seq: int | None, yes: bool, as_json: bool
) -> None:
    """Remove the content of SESSION's events for good (retention, erasure requests); a
    deleted session too (give its full id). Hashes stay and a purge record binds them, so
    `eventstore verify` still proves the log. This cannot be undone."""
    store = state.store()
    upto = f"through seq {through_seq}" if through_seq is not None else "all events"
    if not yes and not as_json:
        click.confirm(f"purge the content of {session} ({upto})? this cannot be undone", abort=True)
    record = store.purge(session, through_seq=through_seq, reason=reason)
    if as_json:
        emit_json({"purged": record.model_dump(mode="json") if record is not None else None})
    elif record is None:
        click.echo(f"{session}: nothing left to purge")
    else:
        click.echo(
            f"{session}: purged {record.events} events (seqs {record.from_seq}..{record.to_seq})"
        )


# --------------------------------------------------------------------------- export/import


@cli.command("export")
@click.argument("session")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "openai"]),
    default="jsonl",
    show_default=True,
    help="jsonl: every event with its hash (re-importable, lossless); openai: the "
    "stored messages as a JSON list of chat messages.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="Write here instead of stdout.",
)
@json_option
@db_option
@pass_state
def export_cmd(state: State, session: str, fmt: str, output: str | None, as_json: bool) -> None:
    """Write SESSION out as JSONL or OpenAI chat messages.

    With -o and --json, what was written is reported as JSON on stdout; without -o the
    export itself (JSONL or a JSON list) is what goes to stdout.
    """
    from eventstore.importers import export_jsonl

    store = state.store(read_only=True)
    s = resolve_session(store, session)
    fp = open(output, "w", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
    try:
        if fmt == "jsonl":
            count = export_jsonl(store, s.id, fp)
        else:
            from eventstore.chat import to_openai

            msgs: list[dict[str, Any]] = []
            count = 0
            for stored in store.read(s.id, kinds=["message"]):
                msgs.extend(to_openai(stored.event))  # type: ignore[arg-type]
                count += 1
            fp.write(json.dumps(msgs, indent=2, ensure_ascii=True) + "\n")
    finally:
        if output:
            fp.close()
    if not output:
        return
    unit = "events" if fmt == "jsonl" else "messages"
    if as_json:
        emit_json({"session_id": s.id, "format": fmt, unit: count, "output": output})
    else:
        click.echo(f"wrote {count} {unit} to {output}", err=True)


_AGENT_FORMATS = ("claude-code", "codex", "gemini-cli", "aider", "cline", "opencode")
_FILE_FORMATS = ("jsonl", "openai", "swe-agent", "mini-swe-agent", "openhands", "openhands-v1")


@cli.command("import")
@click.argument("path", type=click.Path(exists=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", *_AGENT_FORMATS, *_FILE_FORMATS]),
    default="auto",
    show_default=True,
    help="Input format (auto: detected from the content).",
)
@click.option(
    "--new-ids",
    is_flag=True,
    help="Give an export's events (and its session) fresh ids, to import it into the "
    "database it came from; the hashes change.",
)
@click.option(
    "--new-id",
    is_flag=True,
    help="Give an export's session a fresh id instead of keeping the exported one.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Processes for coding-agent transcripts: N - 1 read and convert them while one "
    "writes; 1 does everything in this one. [default: the CPU cores, at most 8; 1 under "
    "4 MB of transcripts]",
)
@json_option
@db_option
@pass_state
def import_cmd(
    state: State,
    path: str,
    fmt: str,
    new_ids: bool,
    new_id: bool,
    jobs: int | None,
    as_json: bool,
) -> None:
    """Import PATH: a coding-agent transcript (Claude Code, Codex, Gemini CLI, aider, Cline,
    OpenCode), an export, a chat transcript or an agent trajectory; or a directory of
    transcripts.

    A coding-agent transcript goes to the session keyed "<format>:<its session id>": importing
    it again adds only what is new ("up to date" when nothing is). OpenCode's SQLite database
    (~/.local/share/opencode/opencode.db, opened read-only) imports each of its sessions so.
    Every other file becomes new sessions; an export keeps its session id, event ids and
    hashes, and each such file is one transaction (a file that fails leaves nothing behind).
    A transcript goes in batches: one that fails halfway is completed by the next import.
    Transcripts are read and converted by --jobs processes while this one writes them.
    """
    from eventstore.importers import detect_agent_format

    store = state.store(create=True)
    target = Path(path)
    chosen = None if fmt == "auto" else fmt
    if target.is_dir():
        _import_agent_dir(state, store, target, chosen, as_json, jobs)
        return
    agent = chosen if chosen in _AGENT_FORMATS else None
    if chosen is None:
        agent = detect_agent_format(target)
    if agent is not None:
        _import_agent_files(store, [(target, agent)], [], as_json, strict=True, jobs=jobs)
        return
    from eventstore.importers import detect_format, import_file

    fmt_name: Any = {"jsonl": "eventstore"}.get(chosen, chosen) if chosen else None
    if fmt_name is None:
        fmt_name = detect_format(target)  # names the formats tried when none fits
    with progress(f"importing {target.name}", enabled=not as_json) as update:
        created = import_file(store, target, fmt_name, update, new_ids=new_ids, new_id=new_id)
    if as_json:
        emit_json([session_dict(s) for s in created])
        return
    for s in created:
        click.echo(f"{s.id}  {s.head_seq} events  {s.title or ''}")


def _import_agent_dir(
    state: State, store: Any, root: Path, chosen: str | None, as_json: bool, jobs: int | None
) -> None:
    from eventstore.importers import detect_agent_format, transcripts_under

    if chosen is not None and chosen not in _AGENT_FORMATS:
        fail(
            f"--format {chosen} imports one file; a directory holds coding-agent transcripts "
            f"({', '.join(_AGENT_FORMATS)})"
        )
    todo: list[tuple[Path, str]] = []
    skipped: list[tuple[Path, str]] = []
    for p in transcripts_under(root):
        found = detect_agent_format(p)
        if found is None or (chosen is not None and found != chosen):
            why = "not a coding-agent transcript" if found is None else f"a {found} transcript"
            skipped.append((p, why))
        else:
            todo.append((p, found))
    _import_agent_files(store, todo, skipped, as_json, strict=False, jobs=jobs)


def _import_agent_files(
    store: Any,
    todo: list[tuple[Path, str]],
    skipped: list[tuple[Path, str]],
    as_json: bool,
    *,
    strict: bool,
    jobs: int | None,
) -> None:
    """Import coding-agent transcripts in order (see
    :func:`~eventstore.importers.import_files`); print one row per session. ``strict``: a
    failure is the command's error (one file); else it is reported and the others go on
    (a directory), and the exit status says one failed."""
    from eventstore.importers import import_files

    results: list[dict[str, Any]] = []
    failed: list[tuple[Path, str]] = []
    with files_progress(enabled=not as_json) as update:
        for path, done in import_files(store, todo, jobs=jobs, progress=update):
            if isinstance(done, Exception):
                if strict:
                    raise done
                failed.append((path, str(done)))
                continue
            results.extend(r.as_dict() for r in done)
    if as_json:
        emit_json(results)
    else:
        for r in results:
            what = (
                "up to date"
                if r["status"] == "up to date"
                else (
                    f"{r['status']}: +{r['events']} events"
                    + (f" ({r['condensations']} condensations)" if r["condensations"] else "")
                )
            )
            click.echo(f"{r['session_id']}  {r['key']}  {what}  (head {r['head_seq']})")
            if r["pending_line"]:
                click.echo(
                    f"  line {r['pending_line']} of {r['path']} is still being written; "
                    "import again to take it",
                    err=True,
                )
        if not results and not failed:
            click.echo("no coding-agent transcripts found", err=True)
    for path, why in skipped:
        click.echo(f"skipped {path}: {why}", err=True)
    for path, why in failed:
        click.echo(f"failed {path}: {why}", err=True)
    if failed:
        raise SystemExit(1)


# --------------------------------------------------------------------------- stats


@cli.command("stats")
@json_option
@db_option
@pass_state
def stats_cmd(state: State, as_json: bool) -> None:
    """Totals for the tenant: sessions, events, bytes, condensations, tokens saved."""
    from eventstore import Condensation

    store = state.store(read_only=True)
    data = store.stats()
    raw_total = view_total = reduced = saved = added = 0
    for s in store.list_sessions(limit=None):
        raw = 0
        for stored in store.read(s.id, kinds=["message", "condensation"]):
            if stored.kind == "message":
                raw += stored.token_count
            elif isinstance(stored.event, Condensation) and stored.session_id == s.id:
                evt = stored.event
                if evt.tokens_before is not None and evt.tokens_after is not None:
                    reduced += evt.tokens_before - evt.tokens_after
        view_tokens = store.view(s.id).tokens if s.head_seq else 0
        raw_total += raw
        view_total += view_tokens
        # Per session: a view can be larger than its messages (a result rendered for an
        # interrupted call, a summary that replaced little), and that is not a saving.
        saved += max(0, raw - view_tokens)
        added += max(0, view_tokens - raw)
    kinds = data.get("by_kind", {})
    data |= {
        "condensations": kinds.get("condensation", 0),
        "prunes": kinds.get("prune", 0),
        "llm_calls": kinds.get("llm_call", 0),
        "raw_message_tokens": raw_total,
        "view_tokens": view_total,
        "tokens_saved": saved,
        "view_overhead": added,
        "condensation_reduction": reduced,
    }
    if as_json:
        emit_json(data)
        return
    rows = [
        ("sessions", f"{data['sessions']:,}"),
        (
            "events",
            f"{data['events']:,} ("
            + ", ".join(f"{v:,} {k}" for k, v in sorted(kinds.items()))
            + ")",
        ),
        ("bytes", f"{data['bytes']:,}"),
        ("condensations", f"{data['condensations']:,} (and {data['prunes']:,} prunes)"),
        ("raw tokens", f"{raw_total:,} in stored messages"),
        ("view tokens", f"{view_total:,} in the current views"),
        ("tokens saved", f"{saved:,} (raw minus current view, over the sessions it shrank)"),
        ("reductions", f"{reduced:,} (sum of before-after over condensations)"),
    ]
    if added:
        rows.append(
            (
                "view overhead",
                f"{added:,} tokens the views add to their stored messages (results for "
                "interrupted tool calls, summaries)",
            )
        )
    for k, v in rows:
        click.echo(f"{k:>14}  {v}")
