"""Full-text search over a tenant's history: SQLite FTS5, Postgres ``tsvector``.

The index *follows the feed* (:mod:`eventstore._features.feed`) instead of sitting on the append
path: appends stay as cheap as before, and :meth:`SearchMethods.search` first indexes
whatever the feed holds past ``search_progress`` (in pages, each page one transaction
that also moves the progress, so a crash never loses or doubles a document). A search
right after a big import therefore pays for indexing it once; call
:meth:`SearchMethods.index_search` from a background job to keep that off the query.

What is indexed: the text a person would search for, whether or not the model still sees
it: message text, tool call names and arguments, tool outputs (a pruned output is still
found: pruning hides it from views, not from the log), condensation summaries and queued
messages. Text is normalized to words (``\\w+``) on both backends, so a query finds the
same events on SQLite and Postgres; a query is words (all must occur) and ``"quoted
phrases"`` (words in that order). Ranking is the backend's (BM25 on SQLite,
``ts_rank`` on Postgres), ties broken by recency.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select, text
from sqlalchemy.engine import Connection

from .. import _sql
from ..errors import InvalidEventError, NotFoundError
from ..events import Condensation, Event, Message, Queued
from ..schema import search_progress
from . import feed

__all__ = ["SearchMethods", "SearchHit", "search_text", "INDEX_PAGE"]

T = TypeVar("T")

#: Events indexed per transaction.
INDEX_PAGE = 1_000
_MAX_LIMIT = 1_000
_WORD = re.compile(r"\w+")
_PHRASE = re.compile(r'"([^"]*)"')
_SNIPPET = 160


class SearchHit(BaseModel):
    """One event a search found."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    """The session whose log holds the event."""
    seq: int
    """The event's seq in that session."""
    kind: str
    """The event kind (``message``, ``condensation``, ``queued``)."""
    role: str | None = None
    """The message role, for messages."""
    rank: float
    """Relevance (higher is better; comparable within one result list only)."""
    snippet: str
    """A short excerpt around the first match."""


SearchHit.__module__ = "eventstore"  # its public home


def search_text(evt: Event) -> str:
    """The searchable text of an event ('' when it has none)."""
    if isinstance(evt, Queued):
        evt = evt.message
    if isinstance(evt, Message):
        bits: list[str] = []
        for p in evt.parts:
            if p.type in ("text", "reasoning"):
                bits.append(p.text)
            elif p.type == "tool_call":
                bits.append(f"{p.name} {p.arguments}")
            elif p.type == "tool_result":
                bits.append(f"{p.name or ''} {p.output}")
            elif p.type == "file":
                bits.append(p.name or "")
        return "\n".join(bits)
    if isinstance(evt, Condensation):
        return evt.summary or ""
    return ""


def _words(value: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(value)]


def _parse(query: str) -> list[list[str]]:
    """The query as groups of words: one group per phrase, one per bare word."""
    groups = [_words(p) for p in _PHRASE.findall(query)]
    groups += [[w] for w in _words(_PHRASE.sub(" ", query))]
    return [g for g in groups if g]


def _lock_key(tenant: str) -> int:
    return zlib.crc32(b"eventstore-search:" + tenant.encode("utf-8", "surrogatepass")) | (2 << 40)


#: Largest document body (UTF-8 bytes) handed to Postgres' ``to_tsvector``, whose result
#: may not exceed 1 MB: a tsvector takes at most about five times its text's bytes.
PG_BODY_BYTES = 200_000


def pg_body(body: str) -> str:
    """``body`` bounded for a Postgres tsvector.

    A short body is kept whole. A long one (a multi-megabyte build log) keeps its first
    half-budget verbatim, so phrases there are found as on SQLite, then each further
    distinct word once, in order of first appearance, until the budget is spent: every
    word of the event stays findable unless the event holds more distinct words than fit.
    Without this bound one big tool output fails the indexing transaction, and with it
    every later search of the tenant.
    """
    if len(body) * 4 <= PG_BODY_BYTES or len(body.encode("utf-8")) <= PG_BODY_BYTES:
        return body
    head = body.encode("utf-8")[: PG_BODY_BYTES // 2].decode("utf-8", "ignore")
    head = head[: head.rfind(" ")] if " " in head else head
    seen = set(head.split())
    out, size = [head], len(head.encode("utf-8"))
    for word in body[len(head) :].split():
        if word not in seen:
            seen.add(word)
            size += len(word.encode("utf-8")) + 1
            if size > PG_BODY_BYTES:
                break
            out.append(word)
    return " ".join(out)


def index_page(conn: Connection, tenant: str, page: int = INDEX_PAGE) -> int:
    """Index up to ``page`` feed events past the tenant's progress; returns how many."""
    pg = conn.dialect.name == "postgresql"
    if pg:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _lock_key(tenant)})
    row = conn.execute(
        select(search_progress.c.position).where(search_progress.c.tenant == tenant)
    ).first()
    after = row.position if row is not None else 0
    items = feed.tail_page(conn, tenant, None, after, page, expand=False)
    if not items:
        return 0
    docs = []
    for item in items:
        body = " ".join(_words(search_text(item.stored.event)))
        if pg:
            body = pg_body(body)
        if body:
            docs.append(
                {"tenant": tenant, "sid": item.session_id, "seq": item.stored.seq, "body": body}
            )
    if docs and pg:
        conn.execute(
            text(
                "INSERT INTO search_docs (session_id, seq, tenant, tsv) VALUES "
                "(:sid, :seq, :tenant, to_tsvector('simple', :body)) "
                "ON CONFLICT (session_id, seq) DO NOTHING"
            ),
            docs,
        )
    elif docs:
        conn.execute(
            text(
                "INSERT INTO search_fts (body, tenant, session_id, seq) "
                "VALUES (:body, :tenant, :sid, :seq)"
            ),
            docs,
        )
    position = items[-1].position
    if row is None:
        conn.execute(search_progress.insert(), {"tenant": tenant, "position": position})
    else:
        conn.execute(
            search_progress.update()
            .where(search_progress.c.tenant == tenant)
            .values(position=position)
        )
    return len(items)


def _scope(segments: Sequence[_sql.Segment] | None, pg: bool) -> tuple[str, dict[str, Any]]:
    if segments is None:
        return "", {}
    clauses, params = [], {}
    for i, seg in enumerate(segments):
        hi = f" AND seq <= :hi{i}" if seg.hi is not None else ""
        clauses.append(f"(session_id = :sid{i} AND seq >= :lo{i}{hi})")
        params.update({f"sid{i}": seg.owner, f"lo{i}": seg.lo, f"hi{i}": seg.hi})
    return " AND (" + " OR ".join(clauses) + ")", params


def query(
    conn: Connection,
    tenant: str,
    groups: list[list[str]],
    segments: Sequence[_sql.Segment] | None,
    limit: int,
    offset: int,
) -> list[tuple[str, int, float]]:
    """(session_id, seq, rank) of the best matches, best first."""
    pg = conn.dialect.name == "postgresql"
    scope, params = _scope(segments, pg)
    params.update({"tenant": tenant, "limit": limit, "offset": offset})
    if pg:
        params["q"] = " & ".join("(" + " <-> ".join(g) + ")" for g in groups)
        # Match through the GIN index first, then scope: left to itself the planner may
        # walk a long session's primary key instead (70 ms instead of 1 at 100k events).
        sql = (
            "WITH q AS (SELECT to_tsquery('simple', :q) AS q), "
            "m AS MATERIALIZED (SELECT session_id, seq, tsv FROM search_docs, q "
            "WHERE tenant = :tenant AND tsv @@ q.q) "
            "SELECT session_id, seq, ts_rank(tsv, q.q) AS rank FROM m, q "
            f"WHERE true{scope} "
            "ORDER BY rank DESC, session_id DESC, seq DESC LIMIT :limit OFFSET :offset"
        )
        return [(r.session_id, r.seq, float(r.rank)) for r in conn.execute(text(sql), params)]
    params["q"] = " ".join('"' + " ".join(g) + '"' for g in groups)
    sql = (
        "SELECT session_id, seq, bm25(search_fts) AS rank FROM search_fts "
        f"WHERE search_fts MATCH :q AND tenant = :tenant{scope} "
        "ORDER BY rank, session_id DESC, seq DESC LIMIT :limit OFFSET :offset"
    )
    # bm25() is lower for better matches: negate it so that higher is better everywhere.
    return [(r.session_id, int(r.seq), -float(r.rank)) for r in conn.execute(text(sql), params)]


def _snippet(body: str, groups: list[list[str]]) -> str:
    lowered = body.lower()
    at = min(
        (i for i in (lowered.find(g[0]) for g in groups) if i >= 0),
        default=0,
    )
    start = max(0, at - _SNIPPET // 3)
    excerpt = " ".join(body[start : start + _SNIPPET].split())
    return ("…" if start else "") + excerpt + ("…" if start + _SNIPPET < len(body) else "")


class SearchMethods:
    """Full-text search methods shared by :class:`~eventstore.EventStore`."""

    if TYPE_CHECKING:
        tenant: str
        dialect: str

        def _run(self, fn: Callable[..., T], *args: Any, write: bool = False, **kw: Any) -> T: ...

        def _sequence_feed(self) -> None: ...

    def index_search(self, *, progress: Callable[[int], None] | None = None) -> int:
        """Bring the tenant's search index up to date with its log; returns the number of
        events read. :meth:`search` does this first; a background job may call it to keep
        that work off the query. ``progress`` is called with the running count."""
        self._sequence_feed()
        total = 0
        while n := self._run(index_page, self.tenant, write=True):
            total += n
            if progress is not None:
                progress(total)
        return total

    def search(
        self,
        query_text: str,
        *,
        session_id: str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[SearchHit]:
        """Events whose text matches ``query_text``, best first (Letta's
        ``conversation_search``).

        Args:
            query_text: Words (all must occur) and ``"quoted phrases"``; case and
                punctuation are ignored.
            session_id: Only this session's history (a fork's includes what it inherited).
            limit: Page size (1..1000).
            offset: Hits to skip, for the next page.
        """
        groups = _parse(query_text) if isinstance(query_text, str) else []
        if not groups:
            raise InvalidEventError(f"query: {query_text!r} has no words to search for")
        if not 1 <= limit <= _MAX_LIMIT or not 0 <= offset <= 2**31:
            raise InvalidEventError(f"limit/offset: use 1 <= limit <= {_MAX_LIMIT} and offset >= 0")
        self.index_search()
        return self._run(self._search, groups, session_id, limit, offset)

    def _search(
        self,
        conn: Connection,
        groups: list[list[str]],
        session_id: str | None,
        limit: int,
        offset: int,
    ) -> list[SearchHit]:
        segments = None
        if session_id is not None:
            segments, head = _sql.lineage_and_head(conn, self.tenant, session_id)
            segments = _sql.clip(segments, 1, head)
        found = query(conn, self.tenant, groups, segments, limit, offset)
        hits = []
        for sid, seq, rank in found:
            try:
                stored = _sql.read_event(conn, self.tenant, sid, seq)
            except NotFoundError:  # a deleted session: its history is not searched
                continue
            if stored is None:  # pragma: no cover - the index only holds stored events
                continue
            evt = stored.event
            hits.append(
                SearchHit(
                    session_id=sid,
                    seq=seq,
                    kind=evt.kind,
                    role=evt.role if isinstance(evt, Message) else None,
                    rank=rank,
                    snippet=_snippet(search_text(evt), groups),
                )
            )
        return hits
