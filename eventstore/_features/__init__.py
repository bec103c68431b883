"""The store's features beyond appends and views, one mixin each: sessions (keys,
deletion, tails), runtime (the run queue, streams, cancellation), the tenant feed,
full-text search, purges (erasure) and read replicas. :class:`~eventstore.EventStore`
inherits them all."""

from __future__ import annotations

from .feed import FeedMethods, afollow
from .purge import PurgeMethods
from .replica import DEFAULT_READ_WAIT_MS, ReplicaMethods
from .runtime import RuntimeMethods
from .search import SearchHit, SearchMethods
from .sessions import SessionMethods, audit_for_async, read_event_expanded, read_page_expanded

__all__ = [
    "DEFAULT_READ_WAIT_MS",
    "FeedMethods",
    "PurgeMethods",
    "ReplicaMethods",
    "RuntimeMethods",
    "SearchHit",
    "SearchMethods",
    "SessionMethods",
    "afollow",
    "audit_for_async",
    "read_event_expanded",
    "read_page_expanded",
]
