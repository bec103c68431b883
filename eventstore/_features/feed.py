"""The tenant feed: every event of a tenant in one commit-ordered sequence, for live tails.

A follower reads "every event after position P" across all of a tenant's sessions and
must never skip one. The classic trap is a transaction that takes a position, commits
late, and lands *below* a position a follower has already passed. Here no append takes a
position at all (there is no tenant-wide lock or counter on the append path):

* a reader of the feed first numbers what was appended since the feed was last read
  (:func:`sequence`), in a write transaction, and only then reads ``feed``;
* on SQLite the append writes nothing for the feed: the rows of ``events`` are inserted
  in commit order (writers take turns, each holding the database lock until it commits,
  and events are never deleted), so the reader numbers the rows inserted after the last
  event numbered (``feed_cursor``), in rowid order, consecutive events of one session as
  one range;
* on Postgres each statement that moves a head (both of :mod:`eventstore._append.postgres`)
  queues the range in ``feed_pending``, with the time of the
  append. The reader moves the queued ranges into ``feed``, numbering them in the order
  of those times, under a per-tenant advisory lock. It can only see committed ranges,
  and every later run numbers above it, so a range that commits late simply gets a later
  position than the ones already read.

Positions are dense per tenant (one per event, no gaps), so ``after`` is all a follower
has to remember. :meth:`FeedMethods.tail` returns what is there now; :meth:`follow` keeps
waiting for more, polling with backoff (new events wake it within ``poll_max`` seconds).
Postgres ``NOTIFY`` is deliberately not used on the append path: it takes a database-wide
lock at commit, which would serialize every writer of every tenant.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy import and_, func, insert, literal_column, select, text, tuple_
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from .. import _sql
from .._sql import blobs
from ..errors import InvalidEventError, SchemaError
from ..records import Session, TailItem
from ..schema import events, feed, feed_cursor, feed_pending, sessions

__all__ = [
    "FeedMethods",
    "Backoff",
    "TAIL_PAGE",
    "SQLITE_NUMBER_PAGE",
    "afollow",
    "has_pending",
    "sequence",
    "tail_page",
]

T = TypeVar("T")

#: Events per page a tail reads at once.
TAIL_PAGE = 500

#: Events a reader numbers per write transaction on SQLite: a store whose feed was not
#: read for a long time is caught up in several short transactions, not one long one.
SQLITE_NUMBER_PAGE = 20_000

_FEED_LOCK = text("SELECT pg_advisory_xact_lock(:key)")
_NUMBER_PENDING = text(
    """
WITH moved AS (
    DELETE FROM feed_pending WHERE tenant = :tenant
    RETURNING session_id, from_seq, to_seq, queued_at
), base AS (
    SELECT coalesce(max(position_end), 0) AS b FROM feed WHERE tenant = :tenant
), numbered AS (
    SELECT session_id, from_seq, to_seq,
           sum(to_seq - from_seq + 1) OVER (ORDER BY queued_at, session_id, from_seq) AS upto
    FROM moved
)
INSERT INTO feed (tenant, position_start, position_end, session_id, from_seq, to_seq)
SELECT :tenant, b + upto - (to_seq - from_seq), b + upto, session_id, from_seq, to_seq
FROM numbered, base
"""
)


def _lock_key(tenant: str) -> int:
    # A stable 63-bit key per tenant (advisory locks take a bigint).
    return zlib.crc32(b"eventstore-feed:" + tenant.encode("utf-8", "surrogatepass")) | (1 << 40)


# SQLite: the rowid of the last event numbered (NULL before the first; NULL as well when
# the cursor names an event that is not there, which :func:`_sqlite_after` refuses).
_SQLITE_CURSOR_ROWID = (
    "(SELECT e.rowid FROM feed_cursor c JOIN events e "
    "ON e.session_id = c.session_id AND e.seq = c.seq WHERE c.id = 1)"
)
_SQLITE_HAS_NEW = text(
    f"SELECT EXISTS (SELECT 1 FROM events WHERE rowid > coalesce({_SQLITE_CURSOR_ROWID}, 0))"
)
_SQLITE_NEW = text(
    "SELECT rowid, session_id, seq FROM events WHERE rowid > :after ORDER BY rowid LIMIT :n"
)


def has_pending(conn: Connection, tenant: str) -> bool:
    """Whether appended events wait to be numbered: the tenant's queued ranges on
    Postgres, any event on SQLite (whose readers number every tenant's at once)."""
    if conn.dialect.name != "postgresql":
        return bool(conn.execute(_SQLITE_HAS_NEW).scalar())
    q = select(feed_pending.c.session_id).where(feed_pending.c.tenant == tenant).limit(1)
    return conn.execute(q).first() is not None


def sequence(conn: Connection, tenant: str) -> bool:
    """Number what was appended and not yet numbered, in one write transaction; whether
    more may be left (SQLite numbers :data:`SQLITE_NUMBER_PAGE` events at a time).

    Postgres: the tenant's committed, queued ranges, under the tenant's advisory lock, so
    two readers never number the same range or interleave their positions. SQLite: every
    tenant's events past the cursor, under the database's write lock.
    """
    if conn.dialect.name != "postgresql":
        return _sequence_sqlite(conn, SQLITE_NUMBER_PAGE)
    conn.execute(_FEED_LOCK, {"key": _lock_key(tenant)})
    conn.execute(_NUMBER_PENDING, {"tenant": tenant})
    return False


def _sqlite_after(conn: Connection) -> int:
    """The rowid of the last event numbered (0 before the first)."""
    c = feed_cursor.c
    at = events.c.session_id == c.session_id, events.c.seq == c.seq
    mark = conn.execute(
        select(c.session_id, c.seq, literal_column("events.rowid"))
        .select_from(feed_cursor.outerjoin(events, and_(*at)))
        .where(c.id == 1)
    ).first()
    if mark is None:
        return 0
    rowid = mark[2]
    if rowid is None:
        raise SchemaError(
            f"the feed's cursor names event {mark.seq} of session {mark.session_id}, which "
            "is not in the events table: the database was changed outside the store"
        )
    return int(rowid)


def _sequence_sqlite(conn: Connection, limit: int) -> bool:
    rows = conn.execute(_SQLITE_NEW, {"after": _sqlite_after(conn), "n": limit}).all()
    if not rows:
        return False
    # Runs of consecutive events of one session, in insertion (commit) order.
    runs: list[list[Any]] = []
    for _, session_id, seq in rows:
        if runs and runs[-1][0] == session_id and runs[-1][2] == seq - 1:
            runs[-1][2] = seq
        else:
            runs.append([session_id, seq, seq])
    tenants: dict[str, str] = {}
    ids = list({r[0] for r in runs})
    for at in range(0, len(ids), 500):
        q = select(sessions.c.id, sessions.c.tenant).where(sessions.c.id.in_(ids[at : at + 500]))
        tenants.update({sid: t for sid, t in conn.execute(q)})
    bases: dict[str, int] = {}
    numbered = []
    for session_id, first, last in runs:
        owner = tenants[session_id]
        base = bases.get(owner)
        if base is None:
            base = last_position(conn, owner)
        bases[owner] = base + last - first + 1
        numbered.append(
            {"tenant": owner, "position_start": base + 1, "position_end": bases[owner],
             "session_id": session_id, "from_seq": first, "to_seq": last}
        )  # fmt: skip
    conn.execute(insert(feed), numbered)
    _, session_id, seq = rows[-1]
    conn.execute(
        sqlite_insert(feed_cursor)
        .values(id=1, session_id=session_id, seq=seq)
        .on_conflict_do_update(index_elements=["id"], set_={"session_id": session_id, "seq": seq})
    )
    return len(rows) == limit


def tail_page(
    conn: Connection,
    tenant: str,
    session_id: str | None,
    after: int,
    limit: int,
    *,
    expand: bool = True,
) -> list[TailItem]:
    """Up to ``limit`` events with position ``> after``, in position order (with
    attachments' bytes put back unless ``expand`` is false)."""
    q = select(feed).where(feed.c.tenant == tenant, feed.c.position_end > after)
    if session_id is not None:
        q = q.where(feed.c.session_id == session_id)
    ranges = list(conn.execute(q.order_by(feed.c.position_end).limit(limit)))
    wanted: list[tuple[str, int]] = []
    position: dict[tuple[str, int], int] = {}
    for r in ranges:
        first = r.from_seq + max(0, after + 1 - r.position_start)
        for seq in range(first, r.to_seq + 1):
            if len(wanted) >= limit:
                break
            wanted.append((r.session_id, seq))
            position[(r.session_id, seq)] = r.position_start + seq - r.from_seq
    if not wanted:
        return []
    rows = conn.execute(
        select(events.c.session_id, *_sql.READ_COLUMNS).where(
            tuple_(events.c.session_id, events.c.seq).in_(wanted)
        )
    )
    items = [
        TailItem(
            position=position[(row.session_id, row.seq)],
            stored=_sql.row_to_stored(row, row.session_id),
        )
        for row in rows
    ]
    items.sort(key=lambda i: i.position)
    if not expand:
        return items
    expanded = blobs.expand(conn, tenant, [i.stored for i in items])
    if any(a is not b for a, b in zip(expanded, (i.stored for i in items), strict=True)):
        items = [i.model_copy(update={"stored": st}) for i, st in zip(items, expanded, strict=True)]
    return items


def last_position(conn: Connection, tenant: str) -> int:
    """The tenant's newest numbered position (0 when the feed is empty)."""
    q = select(func.max(feed.c.position_end)).where(feed.c.tenant == tenant)
    return int(conn.execute(q).scalar() or 0)


class Backoff:
    """The waiting rule of :meth:`FeedMethods.follow`, shared by the sync and async store:
    10 ms doubling to ``poll_max`` while idle, reset by news, ended by ``idle_timeout``."""

    def __init__(self, poll_max: float, idle_timeout: float | None) -> None:
        if poll_max <= 0 or (idle_timeout is not None and idle_timeout < 0):
            raise InvalidEventError("poll_max must be > 0 and idle_timeout >= 0 (or None)")
        self.poll_max = poll_max
        self.idle_timeout = idle_timeout
        self.delay = 0.01
        self.idle_since = time.monotonic()

    def news(self) -> None:
        self.delay = 0.01
        self.idle_since = time.monotonic()

    def next_wait(self) -> float | None:
        """Seconds to sleep before the next poll, or ``None`` to stop."""
        now = time.monotonic()
        if self.idle_timeout is not None and now - self.idle_since >= self.idle_timeout:
            return None
        wait = min(self.delay, self.poll_max)
        self.delay = min(self.delay * 2, self.poll_max)
        return wait


class FeedMethods:
    """Tail and follow methods shared by :class:`~eventstore.EventStore` (see the module
    docstring)."""

    if TYPE_CHECKING:
        tenant: str
        dialect: str

        def _run(self, fn: Callable[..., T], *args: Any, write: bool = False, **kw: Any) -> T: ...

        def get_session(self, session_id: str) -> Session: ...

    def _sequence_feed(self) -> None:
        if self._run(has_pending, self.tenant):
            while self._run(sequence, self.tenant, write=True):
                pass

    def _tail_page(self, session_id: str | None, after: int, limit: int) -> list[TailItem]:
        self._sequence_feed()
        return self._run(tail_page, self.tenant, session_id, after, limit)

    def _check_tail(self, after: int, session_id: str | None) -> None:
        if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < 2**63:
            raise InvalidEventError(f"after: {after!r} is not a feed position (an int >= 0)")
        if session_id is not None:
            self.get_session(session_id)  # NotFoundError for another tenant's id

    def feed_position(self) -> int:
        """The tenant's newest feed position: pass it to :meth:`follow` to see only what
        is appended from now on."""
        self._sequence_feed()
        return self._run(last_position, self.tenant)

    def tail(
        self, after: int = 0, *, session_id: str | None = None, limit: int | None = None
    ) -> Iterator[TailItem]:
        """The tenant's events after feed position ``after``, in commit order, up to what
        is committed now (then the iterator ends; :meth:`follow` waits for more).

        Args:
            after: The last position already handled (0: from the beginning).
            session_id: Only this session's events (positions stay tenant-wide).
            limit: At most this many events.
        """
        self._check_tail(after, session_id)
        left = limit
        while left is None or left > 0:
            want = TAIL_PAGE if left is None else min(TAIL_PAGE, left)
            page = self._tail_page(session_id, after, want)
            yield from page
            if len(page) < want:
                return
            after = page[-1].position
            if left is not None:
                left -= len(page)

    def follow(
        self,
        after: int = 0,
        *,
        session_id: str | None = None,
        poll_max: float = 0.5,
        idle_timeout: float | None = None,
    ) -> Iterator[TailItem]:
        """Like :meth:`tail`, but keeps waiting for new events (a live tail).

        It polls with backoff, from 10 ms up to ``poll_max`` seconds while nothing comes.
        With ``idle_timeout`` it ends after that many seconds without a new event;
        otherwise it runs until the caller stops iterating. Resume after a restart by
        passing the last position handled as ``after``.
        """
        self._check_tail(after, session_id)
        backoff = Backoff(poll_max, idle_timeout)
        while True:
            page = self._tail_page(session_id, after, TAIL_PAGE)
            if page:
                yield from page
                after = page[-1].position
                backoff.news()
                continue
            wait = backoff.next_wait()
            if wait is None:
                return
            time.sleep(wait)


class _AsyncFace(Protocol):
    @property
    def sync(self) -> FeedMethods: ...


async def afollow(
    self: _AsyncFace,
    after: int = 0,
    *,
    session_id: str | None = None,
    poll_max: float = 0.5,
    idle_timeout: float | None = None,
) -> AsyncIterator[TailItem]:
    """Like :meth:`EventStore.follow`: a live tail that waits with ``asyncio.sleep``
    between polls, holding no worker thread while idle (``AsyncEventStore.follow``)."""
    await asyncio.to_thread(self.sync._check_tail, after, session_id)
    backoff = Backoff(poll_max, idle_timeout)
    while True:
        page = await asyncio.to_thread(self.sync._tail_page, session_id, after, TAIL_PAGE)
        if page:
            for item in page:
                yield item
            after = page[-1].position
            backoff.news()
            continue
        wait = backoff.next_wait()
        if wait is None:
            return
        await asyncio.sleep(wait)
