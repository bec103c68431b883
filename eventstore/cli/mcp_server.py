"""The MCP server behind ``eventstore mcp``: every stored session, searchable and
recallable by any MCP client.

``eventstore mcp`` serves the Model Context Protocol over stdio (what Claude Code, Codex CLI
and Cursor launch); ``eventstore mcp --http`` serves it over streamable HTTP. The server is
read-only and works inside one tenant. Its five tools:

* ``list_sessions``: the tenant's sessions, newest first, optionally filtered;
* ``search_history``: full-text search across the tenant's sessions (or one), each hit with
  the ``ref`` to pass to ``recall``;
* ``recall``: an original exactly as stored (a pruned tool output, a condensed-away message);
* ``get_view``: what the model saw at a seq, exactly as ``eventstore view --json`` prints it;
* ``get_event``: one event, as ``eventstore log --json`` prints it.

Long answers (a 5 MB tool output, a view of a long session) come back in pages of
:data:`PAGE_CHARS` characters; the page's last content block says which ``offset`` to ask
for next, and the pages joined are the whole answer, character for character. Errors come
back as MCP tool errors saying what to do; a session of another tenant is answered exactly
like one that does not exist.

This module imports the ``mcp`` SDK (the ``mcp`` extra); the command in :mod:`.mcp` imports
it only when it runs, so ``eventstore --help`` stays instant without it. The tool bodies
(:class:`Tools`) need only the store; :func:`create_server` wraps them in the protocol.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import Field

from eventstore import __version__

from .render import event_dict, json_text, session_dict

if TYPE_CHECKING:
    from eventstore import EventStore, Session

__all__ = ["Tools", "ToolFailure", "Page", "create_server", "http_app", "is_loopback"]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")

PAGE_CHARS = 40_000
"""Characters per page of a long answer: about 10k tokens, under the 25k-token default cap
some clients (Claude Code) put on one tool result."""
MAX_PAGE_CHARS = 200_000
ANSWERS_KEPT = 8
"""Long answers kept for their next pages (a 5 MB recall is read once, not once a page)."""
LIST_LIMIT = 20
MAX_LIST_LIMIT = 200
SEARCH_PAGE = 10
_WORD = re.compile(r"\w+")

INSTRUCTIONS = """\
This server holds the complete, verbatim history of past agent sessions: every message and \
every tool output, including those pruned from the model's context or condensed into a \
summary. It is read-only.

Typical use: search_history("words or \\"an exact phrase\\"") finds events across all \
sessions; each hit names its session_id and a ref; recall(session_id, ref) returns that \
original exactly as stored. list_sessions shows what sessions exist; get_view shows what \
the model saw at a point of a session; get_event shows one whole event. Long answers come \
in pages: the last block says which offset to ask for next."""


# --------------------------------------------------------------------------- tool bodies


class ToolFailure(Exception):
    """A tool call that cannot be answered; the message says why and what to do."""


@dataclass
class Page:
    """One page of a long text answer."""

    text: str
    """The characters ``offset .. offset + len(text)`` of the answer."""
    offset: int
    """Where the page starts in the whole answer."""
    total: int
    """Length of the whole answer, in characters."""

    @property
    def next_offset(self) -> int | None:
        """The offset of the next page, or ``None`` on the last one."""
        end = self.offset + len(self.text)
        return end if end < self.total else None


def page_of(text: str, offset: int, max_chars: int, again: str) -> Page:
    """The page of ``text`` at ``offset``; ``again`` names the call that pages on."""
    if offset < 0 or (offset > len(text) and text):
        raise ToolFailure(
            f"offset {offset} is outside the answer ({len(text):,} characters); "
            f"call {again} with offset between 0 and {max(len(text) - 1, 0)}"
        )
    if not 1 <= max_chars <= MAX_PAGE_CHARS:
        raise ToolFailure(f"max_chars: use 1 to {MAX_PAGE_CHARS:,} (default {PAGE_CHARS:,})")
    return Page(text=text[offset : offset + max_chars], offset=offset, total=len(text))


def _fields(s: Session) -> tuple[str | None, ...]:
    """What ``list_sessions(query=...)`` looks in."""
    return (s.id, s.title, s.key, s.user_id)


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _part_words(part: Any) -> set[str]:
    """The searchable words of one message part (what the index holds for it)."""
    if part.type in ("text", "reasoning"):
        return _words(part.text)
    if part.type == "tool_call":
        return _words(f"{part.name} {part.arguments}")
    if part.type == "tool_result":
        return _words(f"{part.name or ''} {part.output}")
    if part.type == "file":
        return _words(part.name or "")
    return set()


@dataclass
class Tools:
    """The server's tools over one store (one tenant), without the protocol around them.

    Every method returns JSON-ready data or a :class:`Page`, and raises
    :class:`ToolFailure` with the fix for anything the caller can correct.
    """

    store: EventStore
    answers_kept: int = ANSWERS_KEPT
    """How many long answers to keep for their next pages (0: make every page afresh)."""
    _answers: OrderedDict[tuple[Any, ...], str] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, s: Session, key: tuple[Any, ...], make: Callable[[], str]) -> str:
        """A long answer, made once for all its pages: the few newest are kept, keyed by
        the session's head (an append-only log gives the same answer at the same head)."""
        key = (s.id, s.head_seq, s.updated_at, *key)
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
        text = make()
        with self._lock:
            self._answers[key] = text
            while len(self._answers) > self.answers_kept:
                self._answers.popitem(last=False)
        return text

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Turn the library's and the database's errors into :class:`ToolFailure`."""
        from eventstore import EventStoreError, NotFoundError

        try:
            yield
        except ToolFailure:
            raise
        except NotFoundError as exc:
            raise ToolFailure(
                f"{exc}; call list_sessions for session ids, search_history for refs"
            ) from None
        except EventStoreError as exc:
            raise ToolFailure(str(exc)) from None
        except Exception as exc:
            module = type(exc).__module__
            if module.startswith(("sqlalchemy", "psycopg", "sqlite3")):
                first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
                raise ToolFailure(
                    f"database error: {first[0] if first else type(exc).__name__}; the "
                    "server's database may be down or not upgraded (`eventstore db upgrade`)"
                ) from None
            raise

    def session(self, session_id: str) -> Session:
        """The session by id or unique id prefix; another tenant's is never found."""
        from eventstore import NotFoundError

        if not isinstance(session_id, str) or not session_id.strip():
            raise ToolFailure("session_id is empty; call list_sessions for session ids")
        sid = session_id.strip()
        try:
            return self.store.get_session(sid)
        except NotFoundError:
            pass
        if len(sid) >= 4:
            matches = [s for s in self.store.list_sessions(limit=None) if s.id.startswith(sid)]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise ToolFailure(
                    f"{sid!r} is the start of {len(matches)} session ids; give more of the id"
                )
        raise ToolFailure(f"no session {sid!r} here; call list_sessions for the session ids")

    def list_sessions(
        self, query: str | None = None, limit: int = LIST_LIMIT, offset: int = 0
    ) -> dict[str, Any]:
        """Sessions newest first, those whose id, title, key or user contain ``query``."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise ToolFailure(f"limit: use 1 to {MAX_LIST_LIMIT}")
        if offset < 0:
            raise ToolFailure("offset: use 0 or more")
        with self.errors():
            if query:
                needle = query.casefold()
                every = self.store.list_sessions(limit=None)
                found = [
                    s for s in every if any(needle in (v or "").casefold() for v in _fields(s))
                ]
                picked = found[offset : offset + limit + 1]
            else:
                picked = self.store.list_sessions(limit=limit + 1, offset=offset)
        more = len(picked) > limit
        return {
            "sessions": [
                {
                    "session_id": s.id,
                    "title": s.title,
                    "key": s.key,
                    "user_id": s.user_id,
                    "updated_at": s.updated_at.isoformat(),
                    "events": s.head_seq,
                    "parent_id": s.parent_id,
                }
                for s in picked[:limit]
            ],
            "next_offset": offset + limit if more else None,
        }

    def search_history(
        self, query: str, session_id: str | None = None, page: int = 0
    ) -> dict[str, Any]:
        """Full-text hits, best first, :data:`SEARCH_PAGE` a page, each with its ``ref``."""
        if page < 0:
            raise ToolFailure("page: use 0 for the first page, 1 for the next, ...")
        with self.errors():
            sid = self.session(session_id).id if session_id else None
            hits = self.store.search(
                query, session_id=sid, limit=SEARCH_PAGE + 1, offset=page * SEARCH_PAGE
            )
            wanted = _words(query)
            rows = [
                {
                    "session_id": h.session_id,
                    "seq": h.seq,
                    "ref": self._ref(h.session_id, h.seq, wanted),
                    "kind": h.kind,
                    "role": h.role,
                    "snippet": h.snippet,
                }
                for h in hits[:SEARCH_PAGE]
            ]
        return {
            "hits": rows,
            "page": page,
            "next_page": page + 1 if len(hits) > SEARCH_PAGE else None,
        }

    def _ref(self, session_id: str, seq: int, wanted: set[str]) -> str:
        """``"seq:part"`` for the part of a message holding most of the query's words (so
        ``recall`` returns that part byte for byte), ``"seq"`` for other events."""
        from eventstore import Message

        for stored in self.store.read(session_id, seq, seq):
            evt = stored.event
            if isinstance(evt, Message) and evt.parts:
                scores = [len(wanted & _part_words(p)) for p in evt.parts]
                return f"{seq}:{scores.index(max(scores))}"
        return str(seq)

    def recall(
        self, session_id: str, ref: str, offset: int = 0, max_chars: int = PAGE_CHARS
    ) -> Page:
        """The original behind ``ref`` (a part byte for byte; a whole event with a header)."""
        from eventstore.tools import recall

        with self.errors():
            s = self.session(session_id)
            text = self.answer(s, ("recall", ref), lambda: recall(self.store, s.id, ref))
        return page_of(text, offset, max_chars, "recall")

    def get_view(
        self, session_id: str, at: int | None = None, offset: int = 0, max_chars: int = PAGE_CHARS
    ) -> Page:
        """What ``eventstore view SESSION [--at AT] --json`` prints, paged."""
        from .inspect import view_data

        with self.errors():
            s = self.session(session_id)
            if at is not None and not 0 <= at <= s.head_seq:
                raise ToolFailure(f"at: session {s.id} has seqs 0..{s.head_seq}; pick one of them")
            text = self.answer(s, ("view", at), lambda: json_text(view_data(self.store, s, at)[3]))
        return page_of(text, offset, max_chars, "get_view")

    def get_event(
        self, session_id: str, seq: int, offset: int = 0, max_chars: int = PAGE_CHARS
    ) -> Page:
        """One event as ``eventstore log --json`` prints it (seq, id, kind, hash, event)."""
        with self.errors():
            s = self.session(session_id)
            if not 1 <= seq <= s.head_seq:
                raise ToolFailure(
                    f"seq: session {s.id} has events 1..{s.head_seq}; pick one of them"
                    if s.head_seq
                    else f"session {s.id} has no events yet"
                )
            text = self.answer(s, ("event", seq), lambda: json_text(event_dict(self._read(s, seq))))
        return page_of(text, offset, max_chars, "get_event")

    def _read(self, s: Session, seq: int) -> Any:
        for stored in self.store.read(s.id, seq, seq):
            return stored
        raise ToolFailure(f"no event at seq {seq} in session {s.id}")  # pragma: no cover

    def session_resource(self, session_id: str) -> dict[str, Any]:
        """A session's record: what ``eventstore sessions show --json`` starts with."""
        with self.errors():
            return session_dict(self.session(session_id))


# --------------------------------------------------------------------------- the server

SessionId = Annotated[
    str,
    Field(
        description="A session id from list_sessions or search_history (a unique prefix of at "
        "least 4 characters also works)."
    ),
]
Offset = Annotated[
    int,
    Field(
        ge=0,
        description="Where to start in a long answer; 0 first, then the offset the previous "
        "page names.",
    ),
]
MaxChars = Annotated[
    int,
    Field(ge=1, le=MAX_PAGE_CHARS, description="Largest page, in characters."),
]


def create_server(
    store: EventStore, *, name: str = "eventstore", answers_kept: int = ANSWERS_KEPT
) -> MCPServer:
    """An MCP server exposing the tools over ``store`` (its tenant only), read-only.

    Args:
        store: The store; the server sees its tenant only.
        name: The server name clients show.
        answers_kept: Long answers kept for their next pages (0: none).
    """
    tools = Tools(store, answers_kept)
    server: MCPServer = MCPServer(
        name,
        title="agent-eventstore history",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )

    def call(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ToolFailure as exc:
            raise ToolError(str(exc)) from None

    def as_json(data: dict[str, Any]) -> CallToolResult:
        return CallToolResult(content=[TextContent(text=json_text(data))])

    def as_pages(page: Page, again: str) -> CallToolResult:
        content: list[ContentBlock] = [TextContent(text=page.text)]
        if page.next_offset is not None:
            content.append(
                TextContent(
                    text=f"[characters {page.offset:,}..{page.next_offset:,} of "
                    f"{page.total:,} shown; call {again} with offset={page.next_offset} "
                    "for the next page]"
                )
            )
        return CallToolResult(content=content)

    @server.tool(
        title="List stored sessions",
        description=(
            "List the stored agent sessions, newest first: session_id, title, key, user_id, "
            "updated_at and number of events. Pass query to keep only sessions whose id, "
            "title, key or user contain it (case-insensitive). Use next_offset as offset "
            "for more."
        ),
        annotations=read_only,
        structured_output=False,
    )
    def list_sessions(
        query: Annotated[
            str | None, Field(description="Text to look for in id, title, key or user.")
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=MAX_LIST_LIMIT, description="Sessions per answer.")
        ] = LIST_LIMIT,
        offset: Annotated[int, Field(ge=0, description="Sessions to skip.")] = 0,
    ) -> CallToolResult:
        return as_json(call(lambda: tools.list_sessions(query, limit, offset)))

    @server.tool(
        title="Search all session history",
        description=(
            "Full-text search over the complete stored history of every session (or of one "
            "session), including tool outputs that were pruned from the context and events "
            "condensed into a summary. All words must occur; put exact phrases in double "
            'quotes, e.g. "connection refused" retry. Returns hits, best first, each with '
            "session_id, seq, a snippet and a ref; pass session_id and ref to recall for the "
            f"full original. {SEARCH_PAGE} hits a page; ask for next_page for more."
        ),
        annotations=read_only,
        structured_output=False,
    )
    def search_history(
        query: Annotated[str, Field(description='Words and "quoted phrases" to find.')],
        session_id: Annotated[
            str | None,
            Field(description="Only this session's history (default: every session)."),
        ] = None,
        page: Annotated[int, Field(ge=0, description="Result page, 0 first.")] = 0,
    ) -> CallToolResult:
        return as_json(call(lambda: tools.search_history(query, session_id, page)))

    @server.tool(
        title="Recall an original",
        description=(
            "Return the full original of something stored, exactly as it was: a tool "
            "output, message or summary, including ones pruned or condensed out of the "
            'context. ref is "SEQ:PART" (part PART of event SEQ, as search_history and '
            'pruned placeholders name it) or "SEQ" (the whole event, with a one-line '
            "header). Long originals come in pages: the last block names the offset of "
            "the next page."
        ),
        annotations=read_only,
        structured_output=False,
    )
    def recall(
        session_id: SessionId,
        ref: Annotated[str, Field(description='"12:0" for part 0 of event 12, or "12".')],
        offset: Offset = 0,
        max_chars: MaxChars = PAGE_CHARS,
    ) -> CallToolResult:
        return as_pages(call(lambda: tools.recall(session_id, ref, offset, max_chars)), "recall")

    @server.tool(
        title="Get the context view",
        description=(
            "What the model saw in a session at seq `at` (default: now), as JSON: the pinned "
            "head, the condensation summary, the tail items with previews, which parts were "
            "pruned, the token count and the view fingerprint (the same JSON as `eventstore "
            "view SESSION --json`). Long views come in pages."
        ),
        annotations=read_only,
        structured_output=False,
    )
    def get_view(
        session_id: SessionId,
        at: Annotated[
            int | None, Field(ge=0, description="The seq to rebuild the view at (default: now).")
        ] = None,
        offset: Offset = 0,
        max_chars: MaxChars = PAGE_CHARS,
    ) -> CallToolResult:
        return as_pages(call(lambda: tools.get_view(session_id, at, offset, max_chars)), "get_view")

    @server.tool(
        title="Get one event",
        description=(
            "One stored event of a session by its seq, as JSON: seq, id, kind, created_at, "
            "tokens, hash and the whole event (messages with all their parts). Long events "
            "come in pages."
        ),
        annotations=read_only,
        structured_output=False,
    )
    def get_event(
        session_id: SessionId,
        seq: Annotated[int, Field(ge=1, description="The event's seq (1 is the first).")],
        offset: Offset = 0,
        max_chars: MaxChars = PAGE_CHARS,
    ) -> CallToolResult:
        return as_pages(
            call(lambda: tools.get_event(session_id, seq, offset, max_chars)), "get_event"
        )

    @server.resource(
        "eventstore://sessions/{session_id}",
        name="session",
        title="A stored session",
        description="A session's record: id, title, key, user, head seq, times, metadata.",
        mime_type="application/json",
    )
    def session_resource(session_id: str) -> str:
        try:
            return json_text(tools.session_resource(session_id))
        except ToolFailure as exc:
            raise ResourceError(str(exc)) from None

    return server


# --------------------------------------------------------------------------- HTTP


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server to this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, extra: tuple[str, ...]) -> list[str]:
    """``Host`` header values the HTTP server answers (DNS-rebinding protection)."""
    names = list(LOOPBACK_NAMES) if is_loopback(host) else []
    if host not in ("0.0.0.0", "::") and not is_loopback(host):
        names.append(host)
    names += [h for h in extra if h not in names]
    out: list[str] = []
    for n in names:
        shown = f"[{n}]" if ":" in n and not n.startswith("[") else n
        out += [shown, f"{shown}:*"]
    return out


def allowed_origins(hosts: list[str]) -> list[str]:
    """Browser ``Origin`` values accepted: the allowed hosts, over http or https."""
    return [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]


class BearerToken:
    """ASGI middleware: every request needs ``Authorization: Bearer <token>``, else 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = b'{"error": "unauthorized: send the header Authorization: Bearer <token>"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="eventstore"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(
    server: MCPServer, host: str, token: str | None, extra_hosts: tuple[str, ...] = ()
) -> Any:
    """The streamable-HTTP ASGI app at ``/mcp``: Host/Origin checked, bearer token if given.

    Stateless, with JSON responses: every request stands alone, so a restart or a second
    worker loses nothing.
    """
    hosts = allowed_hosts(host, extra_hosts)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=allowed_origins(hosts),
    )
    app = server.streamable_http_app(
        stateless_http=True, json_response=True, transport_security=security, host=host
    )
    return BearerToken(app, token) if token else app
