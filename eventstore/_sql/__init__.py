"""The statement layer's reads, against a sync ``Connection``: sessions (create, fork,
get, list), a session's lineage, pages of events, stats, the rows a view is assembled
from (:mod:`.view_rows`) and attachments (:mod:`.blobs`). The write statements are the
write path's (:mod:`eventstore._append`). Nothing here commits: the caller (the store)
owns the transaction, and nothing here decides what a view looks like
(:mod:`eventstore.views`, which never touches the database).
"""

from __future__ import annotations

from . import blobs, view_rows
from .lineage import (
    AUDITING,
    Segment,
    auditing,
    check_lookup,
    clip,
    lineage,
    lineage_and_head,
    not_found,
    owner_of,
)
from .pages import (
    BREAKER_PREFIX,
    READ_COLUMNS,
    READ_PAGE,
    event_hash,
    fork_compaction_rows,
    latest_in,
    latest_of_kind,
    read_event,
    read_page,
    read_verify_page,
    row_to_stored,
    verify_head,
)
from .sessions import (
    create_session,
    fork_session,
    get_session,
    key_digest,
    list_sessions,
    session_from_row,
)
from .stats import stats, taken_event_ids

__all__ = [
    "blobs",
    "view_rows",
    "AUDITING",
    "BREAKER_PREFIX",
    "READ_COLUMNS",
    "READ_PAGE",
    "Segment",
    "auditing",
    "check_lookup",
    "clip",
    "create_session",
    "event_hash",
    "fork_compaction_rows",
    "fork_session",
    "get_session",
    "key_digest",
    "latest_in",
    "latest_of_kind",
    "lineage",
    "lineage_and_head",
    "list_sessions",
    "not_found",
    "owner_of",
    "read_event",
    "read_page",
    "read_verify_page",
    "row_to_stored",
    "session_from_row",
    "stats",
    "taken_event_ids",
    "verify_head",
]
