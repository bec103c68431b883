"""Sessions by the caller's key, tombstones, and the small reads framework adapters need.

A framework names its sessions itself (Google ADK by app, user and id; the OpenAI Agents
SDK by a ``session_id`` string; pydantic-ai by conversation id). ``create_session(key=...)``
stores that name; :meth:`SessionMethods.get_session_by_key` finds the session again with
one index probe on ``(tenant, key_digest)``. :meth:`SessionMethods.delete_session` is a
tombstone: the session disappears from gets, lists, reads, views and appends, its log
stays whole and verifiable (``verify`` still checks it, for audits), and its key is free
for a new session. :meth:`SessionMethods.read_tail` reads the newest ``n`` events in one
range scan, whatever the session's length, and :meth:`SessionMethods.get_event` finds one
event by its id.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import select
from sqlalchemy.engine import Connection

from . import _blobs, _sql
from .errors import InvalidEventError, NotFoundError
from .records import Session, StoredEvent
from .schema import events, sessions

__all__ = ["SessionMethods"]

T = TypeVar("T")

#: The most events one ``read_tail`` returns.
MAX_TAIL = 100_000


def _get_event(conn: Connection, tenant: str, session_id: str, event_id: str) -> StoredEvent:
    segments, head = _sql.lineage_and_head(conn, tenant, session_id)
    missing = NotFoundError(f"no event {event_id!r} in session {session_id!r}")
    if not isinstance(event_id, str) or not 1 <= len(event_id) <= 36:
        raise missing
    if _sql.storable_text_error(event_id):
        raise missing
    row = conn.execute(
        select(events.c.session_id, *_sql._EVENT_COLS).where(events.c.id == event_id)
    ).first()
    if row is None or row.seq > head or _sql.owner_of(segments, row.seq) != row.session_id:
        raise missing
    return _blobs.expand(conn, tenant, [_sql.row_to_stored(row, row.session_id)])[0]


def _find_event(conn: Connection, tenant: str, event_id: str) -> StoredEvent:
    missing = NotFoundError(f"no event {event_id!r} for tenant {tenant!r}")
    if not isinstance(event_id, str) or not 1 <= len(event_id) <= 36:
        raise missing
    if _sql.storable_text_error(event_id):
        raise missing
    row = conn.execute(
        select(events.c.session_id, *_sql._EVENT_COLS)
        .join(sessions, sessions.c.id == events.c.session_id)
        .where(events.c.id == event_id, sessions.c.tenant == tenant)
    ).first()
    if row is None:
        raise missing
    return _blobs.expand(conn, tenant, [_sql.row_to_stored(row, row.session_id)])[0]


def _read_tail(conn: Connection, tenant: str, session_id: str, n: int) -> list[StoredEvent]:
    segments, head = _sql.lineage_and_head(conn, tenant, session_id)
    page = _sql.read_page(conn, segments, max(0, head - n), head, None, limit=max(n, 1))[:n]
    return _blobs.expand(conn, tenant, page)


def read_page_expanded(conn: Connection, tenant: str, *args: Any, **kw: Any) -> list[StoredEvent]:
    """:func:`eventstore._sql.read_page` with attachments' bytes put back."""
    return _blobs.expand(conn, tenant, _sql.read_page(conn, *args, **kw))


def read_event_expanded(
    conn: Connection, tenant: str, session_id: str, seq: int
) -> StoredEvent | None:
    """:func:`eventstore._sql.read_event` with attachments' bytes put back."""
    found = _sql.read_event(conn, tenant, session_id, seq)
    return None if found is None else _blobs.expand(conn, tenant, [found])[0]


def audit_for_async(self: Any) -> AbstractContextManager[None]:
    """``AsyncEventStore.audit``: the same context (a plain ``with``, no ``await``)."""
    return _sql.auditing()


class SessionMethods:
    """Key, tombstone and small-read methods shared by :class:`~eventstore.EventStore`."""

    if TYPE_CHECKING:
        tenant: str

        def _run(self, fn: Callable[..., T], *args: Any, write: bool = False, **kw: Any) -> T: ...

        def _read_run(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T: ...

    def audit(self) -> AbstractContextManager[None]:
        """A context in which reads see deleted sessions too (in this thread and the
        coroutines it starts), for auditors::

            with store.audit():
                events = list(store.read(deleted_session_id))
        """
        return _sql.auditing()

    def get_session_by_key(self, key: str, *, user_id: str | None = None) -> Session:
        """The session created with ``key`` (and ``user_id``) in this tenant, or
        :class:`NotFoundError`."""
        return self._read_run(_sql.get_session_by_key, self.tenant, key, user_id)

    def delete_session(self, session_id: str) -> Session:
        """Delete a session: a tombstone, not a removal (see the module docstring).

        Afterwards gets, lists, reads, views and appends raise :class:`NotFoundError` for
        it, ``list_sessions(include_deleted=True)`` and ``verify`` still see it, and its key
        may name a new session. Forks made from it keep working. Returns the session as it
        was, with ``deleted_at`` set.
        """
        return self._run(_sql.delete_session, self.tenant, session_id, write=True)

    def get_event(self, session_id: str, event_id: str) -> StoredEvent:
        """The event with id ``event_id`` in the session's log (a fork's inherited events
        included), or :class:`NotFoundError`."""
        return self._read_run(_get_event, self.tenant, session_id, event_id)

    def find_event(self, event_id: str) -> StoredEvent:
        """The event with id ``event_id`` in any of the tenant's sessions (deleted ones
        included: their events stay part of the log), or :class:`NotFoundError`. Its
        ``session_id`` says which session holds it."""
        return self._read_run(_find_event, self.tenant, event_id)

    def read_tail(self, session_id: str, n: int) -> list[StoredEvent]:
        """The newest ``n`` events, oldest first: one index range scan, O(n) whatever the
        session's length (a session shorter than ``n`` returns all of it)."""
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_TAIL:
            raise InvalidEventError(f"n: {n!r} is not an event count (0..{MAX_TAIL})")
        if n == 0:
            self._read_run(_sql.lineage_and_head, self.tenant, session_id)  # NotFoundError
            return []
        return self._read_run(_read_tail, self.tenant, session_id, n)
