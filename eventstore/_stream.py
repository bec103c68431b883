"""Large Postgres batches, encoded while they are written.

Checking and encoding a batch (validation, canonical JSON, token counts, the hash chain)
costs about as much client time as the server spends inserting its rows. The ordinary
bulk path does one after the other; here the two overlap: the session's head is locked
first, then each event is encoded, hashed and handed to ``COPY`` as soon as it is ready,
so the server inserts the first rows while the client is still encoding the later ones
(psycopg sends ``COPY`` data in chunks as it fills up). The parts rows follow in a second
``COPY``, then the head moves, as on the bulk path.

The outcome is that of the ordinary path, all or nothing: everything happens in one
transaction, and an event refused halfway aborts the ``COPY`` and rolls the transaction
back, so nothing is written. The errors are the same ones, and when a batch has several
problems the one reported is the one the ordinary path reports: every event is encoded
(and refused if invalid) before a missing session, a head conflict or a bad reference
to a seq is reported.

Taken by batches of more than ``BULK_MIN`` events on Postgres without an idempotency key
(whose batch digest needs every payload before the first row). SQLite gains nothing from
it: its inserts run in the client's own thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from ._bulk import _PG_COPY_EVENTS, _PG_COPY_PARTS, BULK_MIN, BatchRows
from ._sql import finish_append, lock_head
from .codec import Encoded
from .errors import ConflictError, NotFoundError
from .events import utcnow
from .records import AppendResult

__all__ = ["streams", "stream_append"]

Encoder = Callable[[Any, int], Encoded]


def streams(dialect: str, events: object, idempotency_key: str | None) -> bool:
    """Whether an append of ``events`` takes this path."""
    return (
        dialect == "postgresql"
        and idempotency_key is None
        and type(events) in (list, tuple)
        and len(events) > BULK_MIN  # type: ignore[arg-type]
    )


class _Encoding:
    """The batch's events encoded one at a time, in order, as they are asked for."""

    def __init__(self, events: Sequence[Any], encode_at: Encoder) -> None:
        self.events, self.encode_at = events, encode_at
        self.done = 0  # events encoded so far
        self.failed = False  # an event was refused while being encoded
        self.blobs: dict[str, bytes] = {}

    def __iter__(self) -> Iterator[Encoded]:
        for i, evt in enumerate(self.events):
            try:
                enc = self.encode_at(evt, i)
            except BaseException:
                self.failed = True
                raise
            if enc.blobs:
                self.blobs.update(enc.blobs)
            self.done = i + 1
            yield enc

    def rest(self) -> None:
        """Encode the events not encoded yet: an invalid one raises its error (which the
        ordinary path, encoding the whole batch first, would have reported first)."""
        for i in range(self.done, len(self.events)):
            self.encode_at(self.events[i], i)
        self.done = len(self.events)


def stream_append(
    conn: Connection,
    tenant: str,
    session_id: str,
    events: Sequence[Any],
    expected_seq: int | None,
    encode_at: Encoder,
) -> AppendResult:
    """Append ``events`` (see the module docstring) inside the caller's transaction."""
    encoding = _Encoding(events, encode_at)
    try:
        head, head_hash = lock_head(conn, tenant, session_id)
    except NotFoundError:
        encoding.rest()
        raise
    if expected_seq is not None and expected_seq != head:
        encoding.rest()
        raise ConflictError(session_id, expected_seq, head)
    rows = BatchRows(
        session_id, head, head_hash, iter(encoding), None, None, utcnow(), size=len(events)
    )
    driver = conn.connection.driver_connection
    assert driver is not None
    part_rows: list[tuple[Any, ...]] = []
    try:
        with driver.cursor() as cur:
            with cur.copy(_PG_COPY_EVENTS) as copy:
                for row, parts_of in rows.tuples(sqlite=False):
                    copy.write_row(row)
                    part_rows += parts_of
            if part_rows:
                with cur.copy(_PG_COPY_PARTS) as copy:
                    for part in part_rows:
                        copy.write_row(part)
    except Exception:
        if not encoding.failed and encoding.done < len(events):
            encoding.rest()  # a refused reference: an invalid later event comes first
        raise
    assert rows.newest is not None
    return finish_append(conn, tenant, session_id, head, rows, encoding.blobs, rows.newest)
