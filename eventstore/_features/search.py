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
phrases"`` (words in that order). A document is indexed up to the words that fit one
Postgres ``tsvector`` (about 1 MB of distinct words: a huge tool output of distinct tokens,
such as a lock file, is indexed from its start, on both backends alike, and the cut is
logged on ``eventstore.search``); search never fails on a large document.

Ranking uses nothing but the document and the query, so no tenant's documents move
another's ranks: ``ts_rank`` on Postgres, and on SQLite BM25's term-frequency part with a
fixed average length (FTS5's own ``bm25()`` weighs terms by statistics over the whole
table, every tenant's documents included), counted in the index's tokens from FTS5's
per-row statistics rather than from the text, so its cost does not grow with the size of
the matching documents. Ties are broken by recency. Hits of deleted
sessions are left out before the page is cut; a fork's search includes the history it
inherited, even from a deleted parent.

The index is written under the tenant's lock (Postgres: an advisory lock, SQLite: the
write lock), which :meth:`~eventstore.EventStore.purge` takes too: a purge never commits
between the indexer's read of a payload and its write of the words.
"""

from __future__ import annotations

import logging
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

__all__ = ["SearchMethods", "SearchHit", "search_text", "INDEX_PAGE", "index_lock", "indexable"]

log = logging.getLogger("eventstore.search")

T = TypeVar("T")

#: Events indexed per transaction.
INDEX_PAGE = 1_000
_MAX_LIMIT = 1_000
_WORD = re.compile(r"\w+")
_PHRASE = re.compile(r'"([^"]*)"')
# What FTS5's unicode61 tokenizer makes of a word: it splits ``\w+`` at underscores.
_TOKEN = re.compile(r"[^\W_]+")
_INSTANCES = "search_fts_instance"
_BYTES = bytes(range(256))
_SNIPPET = 160
#: What one document's words may take in a Postgres tsvector (its limit is 1 MiB - 1).
TSVECTOR_BUDGET = 900_000
# BM25's term-frequency saturation and length normalization, against a fixed average
# document length (words) instead of one measured over the table.
_K1, _B, _AVGDL = 1.2, 0.75, 64.0


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


def index_lock(conn: Connection, tenant: str) -> None:
    """Take the tenant's search-index lock for the transaction (Postgres; a SQLite writer
    already holds the database's). The indexer holds it from reading the feed to writing
    the words, and a purge from its first read to its commit."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _lock_key(tenant)})


def indexable(words: list[str]) -> tuple[list[str], bool]:
    """The leading words of a document that fit one Postgres ``tsvector``
    (:data:`TSVECTOR_BUDGET`), and whether any were left out. Each distinct word costs its
    UTF-8 bytes and an entry header, each occurrence a position (at most 256 are kept)."""
    seen: dict[str, int] = {}
    size = 0
    for i, w in enumerate(words):
        n = seen.get(w)
        if n is None:
            seen[w] = 1
            size += len(w.encode("utf-8", "surrogatepass")) + 10
        elif n < 256:
            seen[w] = n + 1
            size += 2
        if size > TSVECTOR_BUDGET:
            return words[:i], True
    return words, False


def index_page(conn: Connection, tenant: str, page: int = INDEX_PAGE) -> int:
    """Index up to ``page`` feed events past the tenant's progress; returns how many."""
    pg = conn.dialect.name == "postgresql"
    index_lock(conn, tenant)
    row = conn.execute(
        select(search_progress.c.position).where(search_progress.c.tenant == tenant)
    ).first()
    after = row.position if row is not None else 0
    items = feed.tail_page(conn, tenant, None, after, page, expand=False)
    if not items:
        return 0
    docs = []
    for item in items:
        words, cut = indexable(_words(search_text(item.stored.event)))
        if cut:
            log.warning(
                "session %s seq %d: indexed for search up to word %d of its text (the rest "
                "does not fit one document)",
                item.session_id,
                item.stored.seq,
                len(words),
            )
        body = " ".join(words)
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
    """(session_id, seq, rank) of the best matches, best first. Without ``segments`` (the
    whole tenant) deleted sessions' documents are left out before the page is cut; with
    them (one session's lineage) every segment counts, a deleted ancestor's included."""
    pg = conn.dialect.name == "postgresql"
    scope, params = _scope(segments, pg)
    params.update({"tenant": tenant, "limit": limit, "offset": offset})
    live = ""
    if segments is None:
        live = (
            " AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = {t}.session_id"
            " AND s.deleted_at IS NOT NULL)"
        )
    if pg:
        params["q"] = " & ".join("(" + " <-> ".join(g) + ")" for g in groups)
        # Match through the GIN index first, then scope: left to itself the planner may
        # walk a long session's primary key instead (70 ms instead of 1 at 100k events).
        sql = (
            "WITH q AS (SELECT to_tsquery('simple', :q) AS q), "
            "m AS MATERIALIZED (SELECT session_id, seq, tsv FROM search_docs, q "
            "WHERE tenant = :tenant AND tsv @@ q.q) "
            # Deleted sessions by a join, not a correlated subquery: Citus plans a join
            # of co-located tables, and refuses a correlated subquery next to a CTE.
            "SELECT m.session_id, m.seq, ts_rank(m.tsv, q.q) AS rank FROM m CROSS JOIN q"
            + (
                " JOIN sessions s ON s.id = m.session_id AND s.deleted_at IS NULL"
                if segments is None
                else ""
            )
            + f" WHERE true{scope} "
            + "ORDER BY rank DESC, m.session_id DESC, m.seq DESC LIMIT :limit OFFSET :offset"
        )
        return [(r.session_id, r.seq, float(r.rank)) for r in conn.execute(text(sql), params)]
    params["q"] = " ".join('"' + " ".join(g) + '"' for g in groups)
    # BM25's per-document part from FTS5's own per-row statistics, so that its cost does
    # not grow with the text of the matching documents: each query token's frequency is
    # its number of instances in the document (fts5vocab 'instance' rows, counted by a
    # GROUP BY that also gathers the matching documents), the length the document's
    # token count (the table's docsize row).
    terms = sorted({t for g in groups for w in g for t in _TOKEN.findall(w)})
    _instance_table(conn)
    counts, parts = [], []
    for i, w in enumerate(terms):
        params[f"w{i}"] = w
        counts.append(f", sum(term = :w{i}) AS n{i}")
        parts.append(f"(n{i} * {_K1 + 1} / (n{i} + {_K1} * ({1 - _B} + {_B} * dl / {_AVGDL})))")
    params["bytes"] = _BYTES
    wanted = ", ".join(f":w{i}" for i in range(len(terms)))
    sql = (
        f"SELECT sid, seq, {' + '.join(parts) or '0.0'} AS rank FROM ("
        f"SELECT max(sid) AS sid, max(seq) AS seq, max(dl) AS dl{''.join(counts)} "
        # One row per matching document (term NULL), one per instance of a query token.
        "FROM (SELECT search_fts.rowid AS doc, session_id AS sid, seq, "
        f"{_docsize_tokens('d.sz')} AS dl, NULL AS term "
        "FROM search_fts JOIN search_fts_docsize d ON d.id = search_fts.rowid "
        f"WHERE search_fts MATCH :q AND tenant = :tenant{scope}{live.format(t='search_fts')} "
        f"UNION ALL SELECT doc, NULL, NULL, NULL, term FROM temp.{_INSTANCES} "
        f"WHERE term IN ({wanted or 'NULL'})) "
        "GROUP BY doc HAVING max(sid) IS NOT NULL"
        ") ORDER BY rank DESC, sid DESC, seq DESC LIMIT :limit OFFSET :offset"
    )
    return [(r.sid, int(r.seq), float(r.rank)) for r in conn.execute(text(sql), params)]


def _instance_table(conn: Connection) -> None:
    """Declare the connection's fts5vocab table over the index's term instances (a view
    of the index, nothing stored; in ``temp``, so no migration and no write)."""
    conn.exec_driver_sql(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_INSTANCES} "
        "USING fts5vocab(main, search_fts, instance)"
    )


def _docsize_tokens(sz: str) -> str:
    """SQL for the first SQLite varint of FTS5's docsize blob ``sz``: the body's token
    count (the other, unindexed columns follow at 0). Five bytes hold 35 bits, more than
    the tokens of any SQLite string (under 2**31 bytes)."""

    def byte(i: int) -> str:  # the byte's value: its offset in the blob of all 256 bytes
        return f"(instr(:bytes, substr({sz}, {i}, 1)) - 1)"

    whens, value = [], ""
    for i in range(1, 6):
        value = f"({value} - 128) * 128 + {byte(i)}" if value else byte(i)
        whens.append(f"WHEN {byte(i)} < 128 THEN {value}" if i < 5 else f"ELSE {value}")
    return "CASE " + " ".join(whens) + " END"


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
                # Through the searched session's lineage: a fork reads what it inherited
                # from a deleted parent (the whole tenant's search has left those out).
                stored = _sql.read_event(conn, self.tenant, session_id or sid, seq)
            except NotFoundError:  # deleted since the query: not a hit
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
