"""Sessions by the caller's key, tombstones, and the small reads framework adapters need.

A framework names its sessions itself (Google ADK by app, user and id; the OpenAI Agents
SDK by a ``session_id`` string; pydantic-ai by conversation id). ``create_session(key=...)``
stores that name in ``session_keys``; :meth:`SessionMethods.get_session_by_key` finds the
session again with one probe of its key ``(tenant, key_digest)``.
:meth:`SessionMethods.delete_session` is a tombstone: the session disappears from gets,
lists, reads, views and appends, its log stays whole and verifiable (``verify`` still
checks it, for audits), and its key is free for a new session.
:meth:`SessionMethods.read_tail` reads the newest ``n`` events in one range scan, whatever
the session's length, and :meth:`SessionMethods.get_event` finds one event by its id.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from .. import _sql
from .._sql import blobs
from ..codec import storable_text_error
from ..errors import InvalidEventError, NotFoundError
from ..events import utcnow
from ..records import Session, StoredEvent
from ..schema import events, session_keys, sessions

__all__ = ["SessionMethods"]

T = TypeVar("T")

#: The most events one ``read_tail`` returns.
MAX_TAIL = 100_000


def _get_event(conn: Connection, tenant: str, session_id: str, event_id: str) -> StoredEvent:
    segments, head = _sql.lineage_and_head(conn, tenant, session_id)
    missing = NotFoundError(f"no event {event_id!r} in session {session_id!r}")
    if not isinstance(event_id, str) or not 1 <= len(event_id) <= 36:
        raise missing
    if storable_text_error(event_id):
        raise missing
    # Ids are unique per session (0007): look only in the sessions of this lineage, which
    # also keeps the probe on their shards when the tables are distributed by session.
    owners = sorted({seg.owner for seg in segments})
    rows = conn.execute(
        select(events.c.session_id, *_sql.READ_COLUMNS).where(
            events.c.id == event_id, events.c.session_id.in_(owners)
        )
    ).all()
    row = next(
        (r for r in rows if r.seq <= head and _sql.owner_of(segments, r.seq) == r.session_id),
        None,
    )
    if row is None:
        raise missing
    return blobs.expand(conn, tenant, [_sql.row_to_stored(row, row.session_id)])[0]


def _find_event(conn: Connection, tenant: str, event_id: str) -> StoredEvent:
    missing = NotFoundError(f"no event {event_id!r} for tenant {tenant!r}")
    if not isinstance(event_id, str) or not 1 <= len(event_id) <= 36:
        raise missing
    if storable_text_error(event_id):
        raise missing
    row = conn.execute(
        select(events.c.session_id, *_sql.READ_COLUMNS)
        .join(sessions, sessions.c.id == events.c.session_id)
        .where(events.c.id == event_id, sessions.c.tenant == tenant)
    ).first()
    if row is None:
        raise missing
    return blobs.expand(conn, tenant, [_sql.row_to_stored(row, row.session_id)])[0]


def _read_tail(conn: Connection, tenant: str, session_id: str, n: int) -> list[StoredEvent]:
    segments, head = _sql.lineage_and_head(conn, tenant, session_id)
    page = _sql.read_page(conn, segments, max(0, head - n), head, None, limit=max(n, 1))[:n]
    return blobs.expand(conn, tenant, page)


def _get_session_by_key(conn: Connection, tenant: str, key: str, user_id: str | None) -> Session:
    if not isinstance(key, str) or not key or storable_text_error(key):
        raise NotFoundError(f"no session with key {key!r} for tenant {tenant!r}")
    if user_id is not None and (not isinstance(user_id, str) or storable_text_error(user_id)):
        raise NotFoundError(f"no session with key {key!r} for tenant {tenant!r}")
    named = conn.execute(
        select(session_keys.c.session_id).where(
            session_keys.c.tenant == tenant,
            session_keys.c.key_digest == _sql.key_digest(user_id, key),
        )
    ).first()
    row = None
    if named is not None:
        row = conn.execute(
            select(sessions).where(sessions.c.id == named.session_id, sessions.c.tenant == tenant)
        ).first()
    if row is None:
        who = f" and user {user_id!r}" if user_id is not None else ""
        raise NotFoundError(f"no session with key {key!r} for tenant {tenant!r}{who}")
    return _sql.session_from_row(row)


def _delete_session(conn: Connection, tenant: str, session_id: str) -> Session:
    """Tombstone a session: it disappears from reads and lists, its log stays verifiable,
    and its key is free again."""
    found = _sql.get_session(conn, tenant, session_id)
    now = utcnow()
    digest = conn.execute(
        select(sessions.c.key_digest).where(sessions.c.id == session_id)
    ).scalar_one_or_none()
    if digest is not None:
        conn.execute(
            delete(session_keys).where(
                session_keys.c.tenant == tenant,
                session_keys.c.key_digest == digest,
                session_keys.c.session_id == session_id,
            )
        )
    conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.tenant == tenant)
        .values(deleted_at=now, key_digest=None)
    )
    return found.model_copy(update={"deleted_at": now})


def read_page_expanded(conn: Connection, tenant: str, *args: Any, **kw: Any) -> list[StoredEvent]:
    """:func:`eventstore._sql.read_page` with attachments' bytes put back."""
    return blobs.expand(conn, tenant, _sql.read_page(conn, *args, **kw))


def read_event_expanded(
    conn: Connection, tenant: str, session_id: str, seq: int
) -> StoredEvent | None:
    """:func:`eventstore._sql.read_event` with attachments' bytes put back."""
    found = _sql.read_event(conn, tenant, session_id, seq)
    return None if found is None else blobs.expand(conn, tenant, [found])[0]


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
        return self._read_run(_get_session_by_key, self.tenant, key, user_id)

    def delete_session(self, session_id: str) -> Session:
        """Delete a session: a tombstone, not a removal (see the module docstring).

        Afterwards gets, lists, reads, views and appends raise :class:`NotFoundError` for
        it, ``list_sessions(include_deleted=True)`` and ``verify`` still see it, and its key
        may name a new session. Forks made from it keep working. Returns the session as it
        was, with ``deleted_at`` set.
        """
        return self._run(_delete_session, self.tenant, session_id, write=True)

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
