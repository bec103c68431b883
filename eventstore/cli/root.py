"""The root ``eventstore`` group: global options, the store they open, and error handling.

Also the helpers every command shares: the ``--db``/``--json`` options, resolving a
session reference and a budget from flags, and :func:`fail`.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from eventstore import Budget, EventStore, Session

DEFAULT_URL = "sqlite:///eventstore.db"


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
    from eventstore import EventStoreError, NotFoundError

    text = str(getattr(exc, "orig", None) or exc)
    if "readonly database" in text or "unable to open database file" in text:
        return (
            "the database cannot be written here (a read-only file, directory or mount) and "
            "this command writes to it; commands that write: "
            f"{WRITING_COMMANDS}. Every other command reads a read-only SQLite file (or pass "
            "--db 'sqlite:///file:PATH?immutable=1&uri=true')"
        )
    if isinstance(exc, NotFoundError):
        return (
            f"{exc}; list sessions with `eventstore sessions list` (and pass --tenant if the "
            "session belongs to another tenant)"
        )
    if type(exc).__name__ == "SummaryError":
        return f"condensation failed: {exc}"
    if isinstance(exc, EventStoreError):
        # Library messages name Python arguments; say the matching flags here.
        return (
            str(exc)
            .replace("import with new_ids=True", "import with --new-ids")
            .replace("import with new_id=True", "import with --new-id")
            .replace("max_input_tokens=...", "--max-input-tokens N")
        )
    module = type(exc).__module__
    name = type(exc).__name__
    if name == "ArgumentError" and module.startswith("sqlalchemy"):
        return f"bad database URL: {exc}; use sqlite:///path.db or postgresql://user@host/db"
    if module.startswith(("sqlalchemy", "psycopg", "sqlite3")):
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        return (
            f"database error: {first[0] if first else name}; check that the database at --db "
            "is reachable and upgraded (`eventstore db upgrade`)"
        )
    if isinstance(exc, RecursionError):
        return "the input is nested too deeply to process; flatten it and try again"
    if isinstance(exc, OverflowError):
        return f"a number is out of range ({exc}); use a smaller value"
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)
    return None


class State:
    """What the root group parsed, and the store opened from it on first use."""

    def __init__(self, url: str | None, url_explicit: bool, tenant: str) -> None:
        self.url = url
        self.url_explicit = url_explicit
        self.tenant = tenant
        self._store: EventStore | None = None

    def store(self, *, create: bool = False, read_only: bool = False) -> EventStore:
        """Open the store. Read commands refuse to create a missing SQLite file, and
        (``read_only``) open a SQLite file they cannot write read-only: ``mode=ro``, or
        ``immutable=1`` when not even SQLite's shared-memory file can be made beside it
        (a read-only mount, a backup copy); such a store is never upgraded."""
        if self._store is None:
            from eventstore import EventStore
            from eventstore.store import resolve_url

            url = resolve_url(self.url)
            path = sqlite_path(url)
            if path is not None and not create and not path.exists():
                fail(
                    f"no database at {path}; pass --db (or set EVENTSTORE_URL) to point at "
                    "one, or create it with `eventstore db upgrade`"
                )
            if path is not None and (read_only or is_read_only_uri(url)):
                if not is_read_only_uri(url) and not writable_file(path):
                    url = read_only_url(path)
                if is_read_only_uri(url):
                    self._store = EventStore(url, tenant=self.tenant, upgrade=False)
                    return self._store
            self._store = EventStore(url, tenant=self.tenant)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


#: Commands that write to the database, for the message a read-only database gets
#: (every other command only reads, and opens a read-only SQLite file read-only).
WRITING_COMMANDS = (
    "import, fork, purge, condense, prune, enqueue, dequeue, cancel, tail (numbers the "
    "feed), search (indexes new events first), db upgrade, demo"
)


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (``sqlite:///path`` or ``sqlite:///file:path?...&uri=true``),
    or ``None`` for another database or memory."""
    from urllib.parse import unquote

    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    if u.query.get("uri") == "true" and u.database.startswith("file:"):
        name = unquote(u.database.removeprefix("file:").split("?", 1)[0])
        if name.startswith("//"):  # file://host/path: only an empty host is allowed
            name = name[2:].partition("/")[2]
            name = "/" + name
        return None if name in ("", ":memory:") else Path(name)
    return Path(u.database)


def is_read_only_uri(url: str) -> bool:
    from sqlalchemy.engine import make_url

    q = make_url(url).query
    return q.get("uri") == "true" and (q.get("mode") == "ro" or q.get("immutable") == "1")


def writable_file(path: Path) -> bool:
    """Whether this process can write the file (asked of the file system itself: the
    permission bits do not tell for root, an immutable file or a read-only mount)."""
    try:
        with open(path, "r+b"):
            return True
    except OSError:
        return False


def read_only_url(path: Path) -> str:
    """A URL that opens the SQLite file at ``path`` read-only: ``mode=ro`` when SQLite can
    open it so (it reads a WAL database through the shared-memory file beside it, seeing
    other writers' commits), else ``immutable=1`` (nothing can change it meanwhile)."""
    import sqlite3
    from urllib.parse import quote

    name = quote(str(path.resolve()))
    try:
        conn = sqlite3.connect(f"file:{name}?mode=ro", uri=True)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
        return f"sqlite:///file:{name}?mode=ro&uri=true"
    except sqlite3.Error:
        return f"sqlite:///file:{name}?immutable=1&uri=true"


def fail(message: str) -> NoReturn:
    """Stop the command with ``message`` on stderr and exit status 1."""
    raise click.ClickException(message)


pass_state = click.make_pass_decorator(State)

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _set_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        state = ctx.find_object(State)
        if state is not None:
            state.url = value
            state.url_explicit = True


# Every command also takes --db after its name (``eventstore db upgrade --db URL``), which
# is how error messages spell the fix.
db_option = click.option(
    "--db", expose_value=False, callback=_set_url, help="Database URL (overrides the global --db)."
)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "url",
    envvar="EVENTSTORE_URL",
    show_envvar=True,
    help=f"Database URL: sqlite:///path.db or postgresql://user@host/db [default: {DEFAULT_URL}]",
)
@click.option("--tenant", default="default", show_default=True, help="Tenant to work in.")
@click.version_option(package_name="agent-eventstore", prog_name="eventstore")
@click.pass_context
def cli(ctx: click.Context, url: str | None, tenant: str) -> None:
    """A durable, auditable event log for LLM agents: sessions, views, condensation."""
    source = ctx.get_parameter_source("url")
    explicit = source is click.core.ParameterSource.COMMANDLINE
    state = State(url, explicit, tenant)
    ctx.obj = state
    ctx.call_on_close(state.close)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    cli.main(args=argv, prog_name="eventstore")


# --------------------------------------------------------------------------- shared lookups


def resolve_session(store: EventStore, ref: str) -> Session:
    """A session by id, or by a unique id prefix (at least 4 characters)."""
    from eventstore import NotFoundError

    try:
        return store.get_session(ref)
    except NotFoundError:
        if len(ref) < 4:
            raise
        matches = [s for s in store.list_sessions(limit=None) if s.id.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            fail(f"{ref!r} matches {len(matches)} sessions; give more of the id")
        raise


DEFAULT_WINDOW = 128_000
"""Input window ``condense`` and ``prune`` assume when nothing names a model."""
_DEFAULT_RESERVED_OUTPUT = 4_096


def _session_models(store: EventStore, session: Session) -> Iterator[tuple[str, str]]:
    """Models the session itself names, best first, each with where it was found.

    The newest recorded ``llm_call`` wins; then the newest assistant message that says
    which model wrote it (importers keep that); then a ``model`` in the session metadata.
    Lazy: the scan of the messages runs only when no earlier candidate was taken.
    """
    newest_call = store.latest_event(session.id, "llm_call")
    call_model = getattr(newest_call.event, "model", None) if newest_call else None
    if call_model:
        yield call_model, "the session's newest llm_call"
    reply_model = None
    for stored in store.read(session.id, kinds=["message"]):
        reply_model = getattr(stored.event, "model", None) or reply_model
    if reply_model:
        yield reply_model, "the session's newest assistant message"
    meta_model = _metadata_model(session.metadata)
    if meta_model:
        yield meta_model, "the session metadata"


def _metadata_model(meta: Any, depth: int = 0) -> str | None:
    """A string ``model`` (or ``model_name``) key in imported metadata, shallowest first."""
    if not isinstance(meta, dict) or depth > 3:
        return None
    for key in ("model", "model_name"):
        if isinstance(meta.get(key), str) and meta[key]:
            return str(meta[key])
    for value in meta.values():
        found = _metadata_model(value, depth + 1)
        if found:
            return found
    return None


def resolve_budget(
    store: EventStore,
    session: Session,
    model: str | None,
    max_input_tokens: int | None,
    *,
    required: bool,
) -> tuple[Budget | None, str]:
    """The budget to measure against, and one line saying where it came from.

    ``--model`` (optionally with ``--max-input-tokens``) wins; then a bare
    ``--max-input-tokens``; then a model the session names (its newest ``llm_call``, an
    imported assistant message, its metadata); then ``EVENTSTORE_MODEL``. When none of
    them gives a window, a ``required`` budget is :data:`DEFAULT_WINDOW` tokens; otherwise
    there is none (``None``, and the line says how to give one).
    """
    from eventstore import Budget, ModelInfo
    from eventstore.models import DEFAULT_WINDOW as DEFAULT_UNKNOWN_WINDOW

    if model is not None:
        if max_input_tokens is None and ModelInfo.find(model) is None:
            b = Budget.for_model(model, max_input_tokens=DEFAULT_UNKNOWN_WINDOW)
            return b, (
                f"budget: {b.max_input_tokens:,}-token default window: litellm does not know "
                f"{model!r} (pass --max-input-tokens N to set its window)"
            )
        b = Budget.for_model(model, max_input_tokens=max_input_tokens)
        return b, f"budget: {b.max_input_tokens:,}-token window of {model} (--model)"
    if max_input_tokens is not None:
        b = Budget.for_model("custom", max_input_tokens=max_input_tokens, reserved_output=0)
        return b, f"budget: {max_input_tokens:,}-token window (--max-input-tokens)"
    env_model = os.environ.get("EVENTSTORE_MODEL")
    candidates = itertools.chain(
        _session_models(store, session), [(env_model, "EVENTSTORE_MODEL")] if env_model else []
    )
    unknown: list[str] = []
    for name, source in candidates:
        if name in unknown:
            continue
        if ModelInfo.find(name) is None:
            unknown.append(name)
            continue
        b = Budget.for_model(name)
        return b, f"budget: {b.max_input_tokens:,}-token window of {name} (from {source})"
    why = (
        f"litellm does not know {', '.join(map(repr, unknown))}"
        if unknown
        else "no model is named by the session or EVENTSTORE_MODEL"
    )
    hint = "pass --model M (a litellm model name) or --max-input-tokens N, or set EVENTSTORE_MODEL"
    if not required:
        return None, f"no budget shown: {why}; {hint}"
    b = Budget.for_model(
        "default", max_input_tokens=DEFAULT_WINDOW, reserved_output=_DEFAULT_RESERVED_OUTPUT
    )
    return b, f"budget: the default {DEFAULT_WINDOW:,}-token window ({why}; {hint})"
