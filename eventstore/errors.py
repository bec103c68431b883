"""Typed errors. Every error the library raises on purpose is one of these; no driver
exception, ``OverflowError`` or ``RecursionError`` reaches a caller, and each message says
how to fix the problem.

The tree::

    EventStoreError
    ├── ConflictError            the head moved (carries expected_seq and current_seq)
    ├── NotFoundError            no such session / event / part (also: LookupError)
    ├── InvalidEventError        bad input; the message names the field (also: ValueError)
    │   ├── SessionExistsError   the session id or key is taken
    │   └── ImportFormatError    (eventstore.importers) a file that cannot be imported
    ├── PayloadTooLargeError     one event over max_event_bytes (also: ValueError)
    ├── IdempotencyError         a key reused for a different append
    │   └── IdempotencyMismatchError   same key, different events
    ├── SchemaError              the database schema is missing, behind or ahead
    ├── StorageError             the database failed in a way not mapped more precisely
    │   ├── StorageBusyError     a lock wait ran past its timeout; retry
    │   └── ReadAgain            a read the store makes again, once, on a fresh connection
    │       └── ConnectionDropped    the server closed the connection (a restart, a
    │                                failover); raised by a write that may have committed
    ├── BudgetError              a token budget cannot be built (also: ValueError)
    ├── ConfigurationError       a setting is out of range (also: ValueError)
    └── SummaryError             (condensers) a summary model call failed or misbehaved
"""

from __future__ import annotations

__all__ = [
    "EventStoreError",
    "ConflictError",
    "NotFoundError",
    "PayloadTooLargeError",
    "InvalidEventError",
    "SessionExistsError",
    "SchemaError",
    "IdempotencyError",
    "StorageError",
    "StorageBusyError",
    "ReadAgain",
    "ConnectionDropped",
    "IdempotencyMismatchError",
    "BudgetError",
    "ConfigurationError",
]


class EventStoreError(Exception):
    """Base class of every error raised by agent-eventstore."""


class ConflictError(EventStoreError):
    """The session head moved: ``expected_seq`` no longer matches.

    Attributes:
        session_id: The session.
        expected_seq: What the caller expected the head to be.
        current_seq: The head at the time of the failed append; re-read from here.
    """

    def __init__(self, session_id: str, expected_seq: int | None, current_seq: int) -> None:
        self.session_id = session_id
        self.expected_seq = expected_seq
        self.current_seq = current_seq
        super().__init__(
            f"session {session_id}: expected head seq {expected_seq}, but it is {current_seq}; "
            f"read the new events and retry with expected_seq={current_seq}"
        )


class NotFoundError(EventStoreError, LookupError):
    """A session (or event) does not exist for this tenant."""


class InvalidEventError(EventStoreError, ValueError):
    """An event failed validation; the message names the bad field."""


class SessionExistsError(InvalidEventError):
    """``create_session`` was given a ``session_id`` or ``key`` that is taken. A key is
    scoped to the tenant and user; a session id is global, and the message is the same
    whichever tenant holds it, so ids say nothing about other tenants."""


class PayloadTooLargeError(EventStoreError, ValueError):
    """An event's stored payload exceeds the configured limit."""

    def __init__(self, size: int, limit: int, index: int) -> None:
        self.size = size
        self.limit = limit
        self.index = index
        super().__init__(
            f"event #{index} in this append is {size} bytes, over the limit of {limit} bytes "
            "(raise it with EventStore(..., max_event_bytes=N)); nothing was written"
        )


class IdempotencyError(EventStoreError):
    """An idempotency key was reused for a different append."""


class IdempotencyMismatchError(IdempotencyError):
    """An idempotency key was reused for an append with different events (other kinds,
    content or ids) than the one it first recorded."""


class SchemaError(EventStoreError):
    """The database schema is missing, behind or ahead of this library."""


class StorageError(EventStoreError):
    """The database failed in a way the store cannot map to a more precise error."""


class StorageBusyError(StorageError):
    """A write waited for a lock held by another writer past its timeout (SQLite's
    ``busy_timeout_ms``, Postgres' ``lock_timeout_ms``). Nothing was written; retry."""


class BudgetError(EventStoreError, ValueError):
    """A token budget cannot be built (for example an unmapped model)."""


class ConfigurationError(EventStoreError, ValueError):
    """A setting is out of range (a condenser's fraction, a store option); the message
    names the setting and its valid range."""


class ReadAgain(StorageError):
    """:class:`StorageError` for a read that may be made again at once: what failed was
    the connection's, not the read's. The store makes it again, once; it reaches a caller
    only when that fails too."""

    #: For a write: lost before its commit was sent, so nothing of it was kept.
    rolled_back = False


class ConnectionDropped(ReadAgain):
    """The server closed the connection (a restart, a failover): SQLAlchemy has taken it
    out of the pool, so a read may be made again at once, and so may a write whose
    transaction was lost before its commit (``rolled_back``)."""
