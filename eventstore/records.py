"""What the store returns: sessions, stored events and verification reports."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .events import Event

__all__ = ["Session", "StoredEvent", "VerifyReport", "AppendResult", "TailItem"]


class Session(BaseModel):
    """One agent conversation: an append-only stream of events."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Time-sortable session id."""
    tenant: str
    """Owning tenant; every call is scoped to one."""
    user_id: str | None = None
    """Optional end user."""
    title: str | None = None
    """Human title."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Application metadata."""
    parent_id: str | None = None
    """The session this one was forked from."""
    fork_seq: int | None = None
    """The parent's seq this fork shares events up to."""
    head_seq: int = 0
    """Seq of the newest event (0 for an empty session)."""
    created_at: datetime
    """Creation time (UTC)."""
    updated_at: datetime
    """Time of the newest event (its ``created_at``, caller-supplied or not), or of
    creation for an empty session (UTC)."""
    key: str | None = None
    """The caller's own name for the session (:meth:`EventStore.get_session_by_key`)."""
    deleted_at: datetime | None = None
    """When :meth:`EventStore.delete_session` deleted it (only seen by audits)."""


class StoredEvent(BaseModel):
    """An event as stored: its position, hash and token count around the event model."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    """The session whose log holds the row (an ancestor's, for a fork's shared prefix)."""
    seq: int
    """Position in the session, 1-based and gapless."""
    hash: str
    """SHA-256 chained over the previous event's hash and this event's canonical bytes."""
    token_count: int
    """Tokens the event contributes to a view (sum of its parts plus framing)."""
    event: Event
    """The event itself, with ``id`` and ``created_at`` filled in."""

    @property
    def id(self) -> str:
        """The event id."""
        return self.event.id or ""

    @property
    def kind(self) -> str:
        """The event kind."""
        return self.event.kind

    @property
    def created_at(self) -> datetime:
        """The event timestamp (UTC)."""
        # Stored events always carry their time; the epoch stands in for a model that
        # was built by hand without one.
        return self.event.created_at or datetime(1970, 1, 1, tzinfo=UTC)


class AppendResult(BaseModel):
    """The outcome of an append."""

    model_config = ConfigDict(frozen=True)

    seqs: list[int]
    """The seqs written (or, for a repeated idempotency key, written the first time)."""
    head_seq: int
    """The session head after the append."""
    head_hash: str | None = None
    """The hash of the event at the new head (``None`` for a replayed or empty append)."""
    replayed: bool = False
    """True when the idempotency key matched an earlier append and nothing was written."""


class VerifyReport(BaseModel):
    """Result of checking one session's log."""

    session_id: str
    """The session checked."""
    ok: bool
    """True when no problem was found."""
    events: int = 0
    """Events checked."""
    head_seq: int = 0
    """The session's recorded head."""
    llm_calls: int = 0
    """Recorded ``llm_call`` fingerprints re-checked."""
    problems: list[str] = Field(default_factory=list)
    """One line per problem found."""
    head_hash: str | None = None
    """Hash of the newest event in the log: record it outside the database and pass it
    back as ``verify(..., head_hash=...)`` (``eventstore verify --head-hash``) to prove
    that nothing up to it was changed or removed since."""
    anchored_seq: int | None = None
    """Seq whose hash equals the ``head_hash`` that was passed in, if any."""
    sealed_seq: int | None = None
    """Newest seq covered by a seal that matches the ``key`` passed in, if any."""
    purged: int = 0
    """Events whose content an administrative purge removed (their hashes are bound by
    the purge records, so the chain is still proven)."""
    purge_pending: int = 0
    """Events a purge record lists that still hold their content: the purge was
    interrupted after its record committed (a killed process). Their hashes and the
    redacted form the record binds are checked; the next purge, or the next open of a
    writable store, erases them (:meth:`EventStore.complete_purges`)."""
    unverifiable_views: int = 0
    """Recorded model calls whose view held content purged since: their fingerprints
    cannot be re-derived (not counted as problems)."""


class TailItem(BaseModel):
    """An event seen through the tenant's feed (:meth:`EventStore.tail`)."""

    model_config = ConfigDict(frozen=True)

    position: int
    """The event's place in the tenant's feed: dense, increasing in commit order. Store
    the last one handled and pass it back as ``after`` to resume."""
    stored: StoredEvent
    """The event, as :meth:`EventStore.read` returns it."""

    @property
    def session_id(self) -> str:
        """The session the event was appended to."""
        return self.stored.session_id
