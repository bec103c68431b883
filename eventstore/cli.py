"""The ``eventstore`` command line.

Every command takes the database from ``--db`` (or ``EVENTSTORE_URL``, default
``sqlite:///eventstore.db``) and works inside one ``--tenant`` (default ``default``).
Commands that print data print it for people by default and as JSON with ``--json``.
Errors go to stderr with what to do about them, and the exit status is non-zero.

Only ``click`` is imported at module level: the store, SQLAlchemy, pydantic, rich, Alembic
and litellm are imported inside the commands that need them, so ``eventstore --help``
answers at once.

Definitions used by the output:

* ``log`` shows the newest 20 events by default (``-n 0``: all); with ``--from`` it shows
  the first ``-n`` events from there instead.
* ``stats`` reports *tokens saved*: over the tenant's sessions, the tokens of every stored
  message (the view with nothing condensed) minus the tokens of the current view. It also
  reports the sum of ``tokens_before - tokens_after`` over condensation events, which
  counts every reduction made along the way.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from .budget import Budget
    from .records import Session, StoredEvent
    from .store import EventStore
    from .views import View

__all__ = ["main", "cli"]

_DEFAULT_URL = "sqlite:///eventstore.db"
_PREVIEW = 100


# --------------------------------------------------------------------------- plumbing


class _Group(click.Group):
    """A group that turns library errors into one clean line on stderr."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # The reader went away (``eventstore log ... | head``): stop quietly.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(1)
        except Exception as exc:
            message = _error_message(exc)
            if message is None:
                raise
            raise click.ClickException(message) from None


def _error_message(exc: Exception) -> str | None:
    """A one-line explanation with the fix, or ``None`` for a bug (shown as a traceback)."""
    from .errors import EventStoreError, NotFoundError

    if isinstance(exc, NotFoundError):
        return (
            f"{exc}; list sessions with `eventstore sessions list` (and pass --tenant if the "
            "session belongs to another tenant)"
        )
    if isinstance(exc, EventStoreError):
        # Library messages name Python arguments; say the matching flags here.
        return (
            str(exc)
            .replace("import with new_ids=True", "import with --new-ids")
            .replace("max_input_tokens=...", "--max-input-tokens N")
        )
    name = type(exc).__name__
    if name == "ArgumentError" and type(exc).__module__.startswith("sqlalchemy"):
        return f"bad database URL: {exc}; use sqlite:///path.db or postgresql://user@host/db"
    if name in ("SummaryError",):
        return f"condensation failed: {exc}"
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)
    return None


class _State:
    """What the root group parsed, and the store opened from it on first use."""

    def __init__(self, url: str | None, url_explicit: bool, tenant: str) -> None:
        self.url = url
        self.url_explicit = url_explicit
        self.tenant = tenant
        self._store: EventStore | None = None

    def store(self, *, create: bool = False) -> EventStore:
        """Open the store. Read commands refuse to create a missing SQLite file."""
        if self._store is None:
            from .store import EventStore, resolve_url

            url = resolve_url(self.url)
            path = _sqlite_path(url)
            if path is not None and not create and not path.exists():
                _fail(
                    f"no database at {path}; pass --db (or set EVENTSTORE_URL) to point at "
                    "one, or create it with `eventstore db upgrade`"
                )
            self._store = EventStore(url, tenant=self.tenant)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def _sqlite_path(url: str) -> Path | None:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def _fail(message: str) -> NoReturn:
    raise click.ClickException(message)


def _state(ctx: click.Context) -> _State:
    return ctx.find_object(_State)  # type: ignore[return-value]


pass_state = click.make_pass_decorator(_State)

_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _set_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        state = ctx.find_object(_State)
        if state is not None:
            state.url = value
            state.url_explicit = True


# Every command also takes --db after its name (``eventstore db upgrade --db URL``), which
# is how error messages spell the fix.
_db_option = click.option(
    "--db", expose_value=False, callback=_set_url, help="Database URL (overrides the global --db)."
)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON-serializable: {type(value).__name__}")


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=not stderr)


@contextmanager
def _progress(label: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr, or nothing when stderr is not a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _resolve_session(store: EventStore, ref: str) -> Session:
    """A session by id, or by a unique id prefix (at least 4 characters)."""
    from .errors import NotFoundError

    try:
        return store.get_session(ref)
    except NotFoundError:
        if len(ref) < 4:
            raise
        matches = [s for s in store.list_sessions(limit=None) if s.id.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            _fail(f"{ref!r} matches {len(matches)} sessions; give more of the id")
        raise


def _session_dict(s: Session) -> dict[str, Any]:
    return s.model_dump(mode="json")


def _time(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%d %H:%M:%S")


# --------------------------------------------------------------------------- root


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "url",
    envvar="EVENTSTORE_URL",
    show_envvar=True,
    help=f"Database URL: sqlite:///path.db or postgresql://user@host/db [default: {_DEFAULT_URL}]",
)
@click.option("--tenant", default="default", show_default=True, help="Tenant to work in.")
@click.version_option(package_name="agent-eventstore", prog_name="eventstore")
@click.pass_context
def cli(ctx: click.Context, url: str | None, tenant: str) -> None:
    """A durable, auditable event log for LLM agents: sessions, views, condensation."""
    source = ctx.get_parameter_source("url")
    explicit = source is click.core.ParameterSource.COMMANDLINE
    state = _State(url, explicit, tenant)
    ctx.obj = state
    ctx.call_on_close(state.close)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    cli.main(args=argv, prog_name="eventstore")


# --------------------------------------------------------------------------- db


@cli.group()
def db() -> None:
    """Create, upgrade and check the database schema."""


def _engine(state: _State) -> Any:
    from sqlalchemy import create_engine

    from .store import resolve_url

    return create_engine(resolve_url(state.url))


def _display_url(state: _State) -> str:
    from sqlalchemy.engine import make_url

    from .store import resolve_url

    return make_url(resolve_url(state.url)).render_as_string(hide_password=True)


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Target revision.")
@_json_option
@_db_option
@pass_state
def db_upgrade(state: _State, revision: str, as_json: bool) -> None:
    """Create the tables, or upgrade them to the newest schema."""
    from . import migrate

    engine = _engine(state)
    try:
        before = migrate.current_revision(engine)
        migrate.upgrade(engine, revision)
        after = migrate.current_revision(engine)
    finally:
        engine.dispose()
    if as_json:
        _emit_json({"url": _display_url(state), "from": before, "to": after})
    elif before == after:
        click.echo(f"{_display_url(state)} is already at revision {after}")
    else:
        click.echo(f"upgraded {_display_url(state)} from {before or 'empty'} to {after}")


@db.command("current")
@_json_option
@_db_option
@pass_state
def db_current(state: _State, as_json: bool) -> None:
    """Show the database's schema revision and the one this version needs."""
    from . import migrate
    from .schema import SCHEMA_REVISION

    engine = _engine(state)
    try:
        current = migrate.current_revision(engine)
    finally:
        engine.dispose()
    status = (
        "empty" if current is None else "up to date" if current == SCHEMA_REVISION else "behind"
    )
    if as_json:
        _emit_json(
            {
                "url": _display_url(state),
                "current": current,
                "head": SCHEMA_REVISION,
                "status": status,
            }
        )
    else:
        click.echo(
            f"{_display_url(state)}: {current or 'empty'} (head {SCHEMA_REVISION}, {status})"
        )


@db.command("check")
@_json_option
@_db_option
@pass_state
def db_check(state: _State, as_json: bool) -> None:
    """Exit non-zero when the schema is behind or differs from the code."""
    from . import migrate
    from .schema import SCHEMA_REVISION

    engine = _engine(state)
    try:
        current = migrate.current_revision(engine)
        diffs = migrate.check(engine) if current == SCHEMA_REVISION else []
    finally:
        engine.dispose()
    lines = [str(d) for d in diffs]
    ok = current == SCHEMA_REVISION and not lines
    if as_json:
        _emit_json(
            {
                "url": _display_url(state),
                "ok": ok,
                "current": current,
                "head": SCHEMA_REVISION,
                "differences": lines,
            }
        )
    elif ok:
        click.echo(f"{_display_url(state)}: schema {current} matches the code")
    if ok:
        return
    if current != SCHEMA_REVISION:
        click.echo(
            f"schema is {current or 'empty'}, this version needs {SCHEMA_REVISION}; run "
            f"`eventstore db upgrade --db '{_display_url(state)}'`",
            err=True,
        )
    else:
        click.echo("the database differs from the schema in code:", err=True)
        for line in lines:
            click.echo(f"  {line}", err=True)
    sys.exit(1)


# --------------------------------------------------------------------------- sessions


@cli.group()
def sessions() -> None:
    """List, show and fork sessions."""


@sessions.command("list")
@click.option("--user", "user_id", help="Only this user's sessions.")
@click.option("-n", "--limit", default=20, show_default=True, help="How many (0: all).")
@_json_option
@_db_option
@pass_state
def sessions_list(state: _State, user_id: str | None, limit: int, as_json: bool) -> None:
    """Sessions of the tenant, newest first."""
    found = state.store().list_sessions(user_id=user_id, limit=limit or None)
    if as_json:
        _emit_json([_session_dict(s) for s in found])
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
        click.echo(f"{s.id:<36}  {_time(s.updated_at)}  {s.head_seq:>6}  {user:<12}  {title}")


@sessions.command("show")
@click.argument("session")
@_json_option
@_db_option
@pass_state
def sessions_show(state: _State, session: str, as_json: bool) -> None:
    """A session's details: counts by kind, raw and current view tokens."""
    store = state.store()
    s = _resolve_session(store, session)
    kinds: dict[str, int] = {}
    raw = 0
    for stored in store.read(s.id):
        kinds[stored.kind] = kinds.get(stored.kind, 0) + 1
        if stored.kind == "message":
            raw += stored.token_count
    view_tokens = store.view(s.id).tokens
    data = _session_dict(s) | {
        "events_by_kind": kinds,
        "raw_tokens": raw,
        "view_tokens": view_tokens,
    }
    if as_json:
        _emit_json(data)
        return
    click.echo(f"# {s.title or s.id}")
    rows = [
        ("id", s.id),
        ("tenant", s.tenant),
        ("user", s.user_id or "-"),
        ("created", _time(s.created_at)),
        ("updated", _time(s.updated_at)),
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
@_json_option
@_db_option
@pass_state
def sessions_fork(
    state: _State, session: str, at_seq: int, title: str | None, as_json: bool
) -> None:
    """Start a new session sharing SESSION's events up to --at (nothing is copied)."""
    store = state.store()
    s = _resolve_session(store, session)
    fork = store.fork(s.id, at_seq, title=title)
    if as_json:
        _emit_json(_session_dict(fork))
    else:
        click.echo(f"forked {s.id} at seq {at_seq}: {fork.id}")


# --------------------------------------------------------------------------- log


def _one_line(text: str, width: int = _PREVIEW) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _preview(stored: StoredEvent) -> str:
    """One line saying what an event is."""
    from .events import Condensation, CondensationRequest, Custom, LLMCall, Message, Prune

    evt = stored.event
    if isinstance(evt, Message):
        bits: list[str] = []
        for p in evt.parts:
            if p.type == "text":
                bits.append(_one_line(p.text, 80))
            elif p.type == "reasoning":
                bits.append(f"(thinking) {_one_line(p.text, 50)}")
            elif p.type == "tool_call":
                bits.append(f"-> {p.name}({_one_line(p.arguments, 50)})")
            elif p.type == "tool_result":
                flag = (
                    " [error]" if p.is_error else f" [{p.state}]" if p.state != "completed" else ""
                )
                n_lines = p.output.count("\n") + 1 if p.output else 0
                bits.append(
                    f"<- {p.name or p.tool_call_id}{flag}: {_one_line(p.output, 60)}"
                    f" ({n_lines} lines)"
                )
            elif p.type == "file":
                bits.append(f"[file {p.name or p.media_type}]")
        return _one_line(" | ".join(bits) or "(empty)", 160)
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
        err = f", error: {_one_line(evt.error, 60)}" if evt.error else ""
        return (
            f"{evt.model}: view@{evt.view_seq}, {evt.message_count} messages, "
            f"fingerprint {evt.fingerprint[:12]}{usage}{err}"
        )
    if isinstance(evt, CondensationRequest):
        return f"requested by {evt.requested_by or '?'}: {evt.focus or '(no focus)'}"
    if isinstance(evt, Custom):
        return f"{evt.name}: {_one_line(json.dumps(evt.data, ensure_ascii=False), 100)}"
    return stored.kind


def _role(stored: StoredEvent) -> str:
    return getattr(stored.event, "role", "") or ""


def _full(stored: StoredEvent) -> str:
    """An event in full, Markdown-ish."""
    from .events import EVENT_ADAPTER, Message

    evt = stored.event
    head = f"## {stored.seq} · {_time(stored.created_at)} · {stored.kind}"
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


def _event_dict(stored: StoredEvent) -> dict[str, Any]:
    from .events import EVENT_ADAPTER

    return {
        "seq": stored.seq,
        "id": stored.id,
        "kind": stored.kind,
        "created_at": stored.created_at.isoformat(),
        "tokens": stored.token_count,
        "hash": stored.hash,
        "event": EVENT_ADAPTER.dump_python(stored.event, mode="json", exclude_none=True),
    }


@cli.command("log")
@click.argument("session")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(
        ["message", "condensation", "condensation_request", "prune", "llm_call", "custom"]
    ),
    help="Only these kinds (repeatable).",
)
@click.option(
    "-n",
    "--limit",
    default=20,
    show_default=True,
    help="At most N events: the newest N, or the first N after --from (0: all).",
)
@click.option("--from", "from_seq", type=int, help="First seq.")
@click.option("--to", "to_seq", type=int, help="Last seq.")
@click.option("--full", is_flag=True, help="Whole events, not one line each.")
@_json_option
@_db_option
@pass_state
def log_cmd(
    state: _State,
    session: str,
    kinds: tuple[str, ...],
    limit: int,
    from_seq: int | None,
    to_seq: int | None,
    full: bool,
    as_json: bool,
) -> None:
    """The events of SESSION: seq, time, kind, role, a preview and tokens."""
    from collections import deque

    store = state.store()
    s = _resolve_session(store, session)
    last = min(to_seq, s.head_seq) if to_seq is not None else s.head_seq
    first = from_seq or 1
    picked: list[StoredEvent]
    if limit and from_seq is not None:
        picked = []
        for stored in store.read(s.id, first, last, kinds=kinds or None):
            picked.append(stored)
            if len(picked) >= limit:
                break
    elif limit and not kinds:
        picked = list(store.read(s.id, max(first, last - limit + 1), last))
    else:
        window: deque[StoredEvent] = deque(maxlen=limit or None)
        window.extend(store.read(s.id, first, last, kinds=kinds or None))
        picked = list(window)
    if as_json:
        _emit_json([_event_dict(e) for e in picked])
        return
    if not picked:
        click.echo("no events")
        return
    if full:
        click.echo("\n".join(_full(e) for e in picked))
        return
    width = len(str(picked[-1].seq))
    for e in picked:
        click.echo(
            f"{e.seq:>{width}}  {_time(e.created_at)}  {e.kind:<12} {_role(e):<9} "
            f"{e.token_count:>6,}  {_preview(e)}"
        )
    shown = len(picked)
    if limit and shown == limit and (picked[0].seq > 1 or from_seq):
        click.echo(f"({shown} shown; -n 0 shows all)", err=True)


# --------------------------------------------------------------------------- view


def _latest_model(store: EventStore, session_id: str) -> str | None:
    """The model of the session's newest recorded call, if any."""
    model = None
    for stored in store.read(session_id, kinds=["llm_call"]):
        model = getattr(stored.event, "model", None) or model
    return model


def _budget(
    store: EventStore,
    session_id: str,
    model: str | None,
    max_input_tokens: int | None,
    *,
    required: bool,
) -> tuple[Budget | None, str | None]:
    """The budget to measure against, and a note when none could be found.

    ``--model`` (optionally with ``--max-input-tokens``) wins; then a bare
    ``--max-input-tokens``; then the model of the session's newest ``llm_call``.
    """
    from .budget import Budget
    from .errors import BudgetError

    if model is not None:
        return Budget.for_model(model, max_input_tokens=max_input_tokens), None
    if max_input_tokens is not None:
        return Budget.for_model(
            "custom", max_input_tokens=max_input_tokens, reserved_output=0
        ), None
    inferred = _latest_model(store, session_id)
    hint = "pass --model M (a litellm model name) or --max-input-tokens N"
    if inferred is None:
        if required:
            _fail(f"no budget: the session records no model call; {hint}")
        return None, f"no budget shown: {hint}"
    try:
        return Budget.for_model(inferred), None
    except BudgetError:
        if required:
            _fail(f"no budget: litellm does not know {inferred!r} (the session's model); {hint}")
        return None, f"no budget shown: litellm does not know {inferred!r}; {hint}"


def _unanswered(view: View) -> set[str]:
    answered = {
        p.tool_call_id for i in view.items for p in i.message.parts if p.type == "tool_result"
    }
    return {
        p.id
        for i in view.items
        for p in i.message.parts
        if p.type == "tool_call" and p.id not in answered
    }


def _item_preview(item: Any, interrupted: set[str]) -> str:
    msg = item.message
    bits: list[str] = []
    for idx, p in enumerate(msg.parts):
        if idx in item.compacted:
            bits.append(f"<- {getattr(p, 'name', None) or 'tool'} [compacted]")
        elif p.type == "text":
            bits.append(_one_line(p.text, 80))
        elif p.type == "reasoning":
            bits.append(f"(thinking) {_one_line(p.text, 40)}")
        elif p.type == "tool_call":
            flag = " [interrupted: no result]" if p.id in interrupted else ""
            bits.append(f"-> {p.name}({_one_line(p.arguments, 40)}){flag}")
        elif p.type == "tool_result":
            flag = " [error]" if p.is_error else ""
            bits.append(f"<- {p.name or 'tool'}{flag}: {_one_line(p.output, 50)}")
        else:
            bits.append(f"[{p.type}]")
    return _one_line(" | ".join(bits) or "(empty)", 140)


def _view_dict(view: View, budget: Budget | None) -> dict[str, Any]:
    from .events import Condensation

    cond = None
    if view.condensation is not None:
        evt = view.condensation.event
        assert isinstance(evt, Condensation)
        cond = {
            "seq": view.condensation.seq,
            "condenser": evt.condenser,
            "trigger": evt.trigger,
            "forgotten_from": evt.forgotten_from,
            "forgotten_to": evt.forgotten_to,
            "forgotten_events": evt.forgotten_events,
            "summary_tokens": view.summary_tokens,
        }
    interrupted = _unanswered(view)
    return {
        "session_id": view.session_id,
        "seq": view.seq,
        "tokens": view.tokens,
        "budget": None
        if budget is None
        else {
            "model": budget.model,
            "max_input_tokens": budget.max_input_tokens,
            "reserved_output": budget.reserved_output,
            "buffer": budget.buffer,
            "available": budget.available,
            "fits": budget.fits(view.tokens),
        },
        "condensation": cond,
        "summary": view.summary,
        "prunes": view.prunes,
        "interrupted_calls": sorted(interrupted),
        "items": [
            {
                "seq": i.seq,
                "role": i.message.role,
                "pinned": i.pinned,
                "tokens": i.tokens,
                "compacted_parts": sorted(i.compacted),
                "preview": _item_preview(i, interrupted),
            }
            for i in view.items
        ],
        "messages": len(view.to_messages()),
        "fingerprint": view.fingerprint(),
    }


@cli.command("view")
@click.argument("session")
@click.option("--at", "at_seq", type=int, help="Rebuild the view as it was at this seq.")
@click.option("--model", help="Measure against this model's budget (litellm name).")
@click.option("--max-input-tokens", type=int, help="Override the model's input window.")
@click.option(
    "--messages", "as_messages", is_flag=True, help="Print the exact litellm messages (JSON)."
)
@_json_option
@_db_option
@pass_state
def view_cmd(
    state: _State,
    session: str,
    at_seq: int | None,
    model: str | None,
    max_input_tokens: int | None,
    as_messages: bool,
    as_json: bool,
) -> None:
    """What the model sees for SESSION: pinned head, summary, tail, and tokens."""
    store = state.store()
    s = _resolve_session(store, session)
    view = store.view(s.id, as_of=at_seq)
    if as_messages:
        _emit_json(view.to_messages())
        return
    budget, note = _budget(store, s.id, model, max_input_tokens, required=False)
    data = _view_dict(view, budget)
    if as_json:
        _emit_json(data)
        return
    at = f"seq {view.seq}" + ("" if view.seq == s.head_seq else f" (head is {s.head_seq})")
    click.echo(f"# view of {s.id} at {at}")
    if budget is not None:
        pct = 100 * view.tokens / budget.available
        verdict = "fits" if budget.fits(view.tokens) else "OVER BUDGET"
        click.echo(
            f"{view.tokens:,} tokens of {budget.available:,} available ({pct:.0f}%, {verdict}) "
            f"for {budget.model}: window {budget.max_input_tokens:,} - "
            f"{budget.reserved_output:,} reserved output - {budget.buffer:,} buffer"
        )
    else:
        click.echo(f"{view.tokens:,} tokens ({note})")
    click.echo(f"{data['messages']} messages, fingerprint {data['fingerprint'][:16]}")
    interrupted = set(data["interrupted_calls"])

    def show(items: list[Any]) -> None:
        for i in items:
            mark = " *" if i.compacted else "  "
            preview = _item_preview(i, interrupted)
            click.echo(f"{i.seq:>7}{mark}{i.message.role:<9} {i.tokens:>6,}  {preview}")

    pinned = [i for i in view.items if i.pinned]
    tail = [i for i in view.items if not i.pinned]
    click.echo("\n## pinned")
    show(pinned)
    cond = data["condensation"]
    if cond is not None:
        click.echo(
            f"\n## summary (condensation at seq {cond['seq']} by {cond['condenser']}, "
            f"{cond['trigger']}: seq {cond['forgotten_from']}..{cond['forgotten_to']} "
            f"condensed, {cond['forgotten_events']} events; {view.summary_tokens:,} tokens)"
        )
        for line in (view.summary or "(no summary text: the events were dropped)").splitlines():
            click.echo(f"    {line}")
    click.echo(f"\n## tail ({len(tail)} events)")
    show(tail)
    if view.prunes:
        click.echo(f"\n* parts compacted by the prunes at seq {', '.join(map(str, view.prunes))}")


# --------------------------------------------------------------------------- condense


@cli.command("condense")
@click.argument("session")
@click.option(
    "--strategy",
    type=click.Choice(["extractive", "llm", "window"]),
    default="extractive",
    show_default=True,
    help="extractive: free, offline structured summary; llm: a model writes it "
    "(extractive fallback); window: drop the middle, carry the summary.",
)
@click.option("--focus", help="What the summary should concentrate on.")
@click.option("--model", help="The agent's model: its window is the budget.")
@click.option("--max-input-tokens", type=int, help="Override the model's input window.")
@click.option("--summary-model", help="Model for --strategy llm (default: --model).")
@_json_option
@_db_option
@pass_state
def condense_cmd(
    state: _State,
    session: str,
    strategy: str,
    focus: str | None,
    model: str | None,
    max_input_tokens: int | None,
    summary_model: str | None,
    as_json: bool,
) -> None:
    """Condense SESSION now (like /compact): a request event, then the condensation."""
    from condensers import CondensationPolicy, ExtractiveCondenser, Pipeline, WindowCondenser
    from condensers.pipeline import default_pipeline

    from .events import CondensationRequest

    store = state.store()
    s = _resolve_session(store, session)
    budget, _ = _budget(store, s.id, model, max_input_tokens, required=True)
    assert budget is not None
    if strategy == "llm":
        name = summary_model or model
        if not name:
            _fail("--strategy llm needs --summary-model M or --model M")
        pipeline = default_pipeline(name)
    elif strategy == "window":
        pipeline = Pipeline([WindowCondenser()])
    else:
        pipeline = Pipeline([ExtractiveCondenser()])
    store.append(s.id, [CondensationRequest(focus=focus, requested_by="eventstore-cli")])
    policy = CondensationPolicy(budget, pipeline, token_counter=store.token_counter)
    _report_outcome(policy.maybe_condense(store, s.id), as_json, what="condensation")


def _report_outcome(out: Any, as_json: bool, *, what: str) -> None:
    data = {
        "session_id": out.session_id,
        "trigger": out.trigger,
        "tokens_before": out.tokens_before,
        "tokens_after": out.tokens_after,
        "available": out.available,
        "fits": out.fits,
        "error": out.error,
        "steps": [
            {
                "seq": st.seq,
                "kind": st.kind,
                "condenser": st.condenser,
                "tokens_before": st.tokens_before,
                "tokens_after": st.tokens_after,
                "cost": st.cost,
                "notes": st.notes,
            }
            for st in out.steps
        ],
    }
    if as_json:
        _emit_json(data)
    else:
        for st in out.steps:
            notes = f" ({'; '.join(st.notes)})" if st.notes else ""
            click.echo(
                f"seq {st.seq}: {st.kind} by {st.condenser}, view {st.tokens_before:,} -> "
                f"{st.tokens_after:,} tokens{notes}"
            )
        if out.steps:
            click.echo(f"view now {out.tokens_after:,} tokens of {out.available:,} available")
    if not out.steps:
        reason = out.error or "nothing could be forgotten or compacted"
        click.echo(f"no {what} written: {reason}", err=True)
        # A declined condensation request or a failed run is an error; a prune with
        # nothing old enough to compact is not.
        if what != "prune" or out.error:
            sys.exit(1)


@cli.command("prune")
@click.argument("session")
@click.option(
    "--mask",
    is_flag=True,
    help="Mask every tool result outside the 10 newest instead of pruning by size.",
)
@click.option("--model", help="The agent's model: its window is the budget.")
@click.option("--max-input-tokens", type=int, help="Override the model's input window.")
@_json_option
@_db_option
@pass_state
def prune_cmd(
    state: _State,
    session: str,
    mask: bool,
    model: str | None,
    max_input_tokens: int | None,
    as_json: bool,
) -> None:
    """Compact old tool outputs of SESSION (their content stays in the database)."""
    from condensers import ObservationMasker, Pipeline, PlanContext, ToolOutputPruner

    store = state.store()
    s = _resolve_session(store, session)
    budget, _ = _budget(store, s.id, model, max_input_tokens, required=True)
    assert budget is not None
    step = ObservationMasker() if mask else ToolOutputPruner()
    ctx = PlanContext(trigger="manual", token_counter=store.token_counter, force=True)
    out = Pipeline([step]).run(store, s.id, budget, ctx)
    _report_outcome(out, as_json, what="prune")


# --------------------------------------------------------------------------- verify


@cli.command("verify")
@click.argument("session", required=False)
@click.option("--all", "all_", is_flag=True, help="Every session of the tenant.")
@click.option("--no-fingerprints", is_flag=True, help="Skip rebuilding recorded views.")
@_json_option
@_db_option
@pass_state
def verify_cmd(
    state: _State, session: str | None, all_: bool, no_fingerprints: bool, as_json: bool
) -> None:
    """Check gapless seqs, the hash chain and every recorded view fingerprint."""
    if bool(session) == all_:
        _fail("give a SESSION or --all")
    store = state.store()
    ids = (
        [s.id for s in store.list_sessions(limit=None)]
        if all_
        else [_resolve_session(store, session or "").id]
    )
    reports = []
    with _progress("verifying", enabled=len(ids) > 1 and not as_json) as update:
        for n, sid in enumerate(ids, 1):
            reports.append(store.verify(sid, fingerprints=not no_fingerprints))
            if update:
                update(n, len(ids))
    bad = [r for r in reports if not r.ok]
    if as_json:
        _emit_json({"ok": not bad, "sessions": [r.model_dump(mode="json") for r in reports]})
    else:
        for r in reports:
            status = "ok" if r.ok else "FAILED"
            click.echo(
                f"{r.session_id}: {status}: {r.events} events, {r.llm_calls} "
                f"view fingerprints re-checked"
            )
            for p in r.problems:
                click.echo(f"  {p}", err=True)
        if all_:
            click.echo(f"{len(reports) - len(bad)} of {len(reports)} sessions ok")
    if bad:
        sys.exit(1)


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
@_db_option
@pass_state
def export_cmd(state: _State, session: str, fmt: str, output: str | None) -> None:
    """Write SESSION out as JSONL or OpenAI chat messages."""
    from .importers import export_jsonl

    store = state.store()
    s = _resolve_session(store, session)
    fp = open(output, "w", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
    try:
        if fmt == "jsonl":
            count = export_jsonl(store, s.id, fp)
        else:
            from .interop import to_openai

            msgs: list[dict[str, Any]] = []
            count = 0
            for stored in store.read(s.id, kinds=["message"]):
                msgs.extend(to_openai(stored.event))  # type: ignore[arg-type]
                count += 1
            fp.write(json.dumps(msgs, indent=2, ensure_ascii=True) + "\n")
    finally:
        if output:
            fp.close()
    if output:
        click.echo(
            f"wrote {count} {'events' if fmt == 'jsonl' else 'messages'} to {output}", err=True
        )


@cli.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "openai", "swe-agent", "openhands"]),
    help="Input format (default: detected from the content).",
)
@click.option(
    "--new-ids",
    is_flag=True,
    help="Give an export's events fresh ids (to import it into the database it came from; "
    "the hashes change).",
)
@_json_option
@_db_option
@pass_state
def import_cmd(state: _State, file: str, fmt: str | None, new_ids: bool, as_json: bool) -> None:
    """Import FILE (an export, chat transcript or agent trajectory) as new sessions."""
    from .importers import import_file

    store = state.store(create=True)
    fmt_name: Any = {"jsonl": "eventstore"}.get(fmt, fmt) if fmt else None
    with _progress(f"importing {Path(file).name}", enabled=not as_json) as update:
        created = import_file(store, file, fmt_name, update, new_ids=new_ids)
    if as_json:
        _emit_json([_session_dict(s) for s in created])
        return
    for s in created:
        click.echo(f"{s.id}  {s.head_seq} events  {s.title or ''}")


# --------------------------------------------------------------------------- stats


@cli.command("stats")
@_json_option
@_db_option
@pass_state
def stats_cmd(state: _State, as_json: bool) -> None:
    """Totals for the tenant: sessions, events, bytes, condensations, tokens saved."""
    from .events import Condensation

    store = state.store()
    data = store.stats()
    raw_total = view_total = reduced = 0
    for s in store.list_sessions(limit=None):
        raw = 0
        for stored in store.read(s.id, kinds=["message", "condensation"]):
            if stored.kind == "message":
                raw += stored.token_count
            elif isinstance(stored.event, Condensation) and stored.session_id == s.id:
                evt = stored.event
                if evt.tokens_before is not None and evt.tokens_after is not None:
                    reduced += evt.tokens_before - evt.tokens_after
        raw_total += raw
        view_total += store.view(s.id).tokens if s.head_seq else 0
    kinds = data.get("by_kind", {})
    data |= {
        "condensations": kinds.get("condensation", 0),
        "prunes": kinds.get("prune", 0),
        "llm_calls": kinds.get("llm_call", 0),
        "raw_message_tokens": raw_total,
        "view_tokens": view_total,
        "tokens_saved": raw_total - view_total,
        "condensation_reduction": reduced,
    }
    if as_json:
        _emit_json(data)
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
        ("tokens saved", f"{raw_total - view_total:,} (raw minus current views)"),
        ("reductions", f"{reduced:,} (sum of before-after over condensations)"),
    ]
    for k, v in rows:
        click.echo(f"{k:>14}  {v}")


# --------------------------------------------------------------------------- demo


@cli.command("demo")
@click.option(
    "--db",
    "demo_url",
    help="Database URL (default: a fresh ./eventstore-demo.db, recreated each run).",
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
@_json_option
@pass_state
def demo_cmd(
    state: _State,
    demo_url: str | None,
    turns: int | None,
    model: str | None,
    window: int | None,
    seed: int | None,
    api_base: str | None,
    as_json: bool,
) -> None:
    """Replay a long generated coding-agent session through the condensers, then audit it."""
    from . import demo

    url = demo_url or (state.url if state.url_explicit else None)
    if url is not None:
        from .store import resolve_url

        url = resolve_url(url)
    with _progress("replaying", enabled=not as_json) as update:
        report = demo.run_demo(
            url,
            turns=turns or demo.DEFAULT_TURNS,
            model=model,
            window=window or demo.DEFAULT_WINDOW,
            seed=demo.DEFAULT_SEED if seed is None else seed,
            tenant=state.tenant,
            progress=update,
            api_base=api_base,
        )
    if as_json:
        _emit_json(report.to_dict())
    else:
        demo.render_report(report, _console())
    if not report.verify.get("ok") or not report.time_travel.get("match", True):
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
