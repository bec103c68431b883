"""The one row maker: a batch's ``events`` and ``parts`` rows, made one event at a time.

Every write of events goes through :class:`Rows` (the guarded and the locked append, the
purge record): it numbers the seqs after the head, gives each event without an id a
fresh UUIDv7, stamps the time, and chains the hash with
:func:`~eventstore.codec.chain_hash_ts`. Rows are tuples in the order of
:data:`EVENT_COLUMNS` and :data:`PART_COLUMNS`, which come from the schema's tables, ready
for the driver: on SQLite ``created_at`` is the text SQLAlchemy stores there, on Postgres
the datetime itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._checks import check_references
from ..codec import Encoded, EventHead, chain_hash_ts, new_ids, time_texts
from ..events import Custom, Message, Prune
from ..schema import events, parts

__all__ = ["EVENT_COLUMNS", "PART_COLUMNS", "CREATED", "Rows", "Write"]

#: The ``events`` columns an append writes: all of them, in the table's order.
EVENT_COLUMNS: tuple[str, ...] = tuple(c.name for c in events.columns)
#: The ``parts`` columns an append writes: all but the compaction stamp a prune sets later.
PART_COLUMNS: tuple[str, ...] = tuple(
    c.name for c in parts.columns if c.name not in ("compacted_at", "compacted_seq")
)
#: Where ``created_at`` sits in an events row.
CREATED = EVENT_COLUMNS.index("created_at")

# The row layout below is written out for speed (a tuple display, not a dict per row); the
# import-time check keeps it the schema's.
_LAYOUT = (
    ("session_id", "seq", "id", "kind", "created_at", "payload", "token_count", "size",
     "idempotency_key", "batch_size", "batch_digest", "hash"),
    ("session_id", "seq", "idx", "type", "tool_call_id", "tool_name", "state", "token_count"),
)  # fmt: skip
if (EVENT_COLUMNS, PART_COLUMNS) != _LAYOUT:  # pragma: no cover - a schema change
    raise RuntimeError(
        f"the schema's events/parts columns changed ({EVENT_COLUMNS}, {PART_COLUMNS}): "
        "teach eventstore._append.rows.Rows the new layout"
    )


class Rows:
    """The rows of ``encoded`` appended after ``head`` (seq and hash) of ``session_id``.

    Iterating yields each event's row as it is asked for (each event read from
    ``encoded`` only then, so that a lazy encoding overlaps with the rows already on their
    way), and adds its parts rows to :attr:`parts`. Once every row is made, :attr:`seq`
    and :attr:`head_hash` are the new head's, :attr:`newest` the last event's time and
    :attr:`prunes` the prunes to apply. :meth:`collect` makes them all at once.

    Args:
        sqlite: Rows for SQLite (``created_at`` as its column text, the payload as the
            UTF-8 bytes the encoder made, which its inserts store as text) or Postgres.
        idempotency_key: Stored on the batch's first event, with the batch's size and
            ``batch_hash`` (see :func:`~eventstore.codec.batch_digest`).
        hashes: Each event's hash as recorded elsewhere, instead of the chain's: an
            export of a purged log, whose redacted events keep their original hashes
            (the purge records prove them).
    """

    def __init__(
        self,
        session_id: str,
        head: int,
        head_hash: str | None,
        encoded: Sequence[Encoded],
        now: datetime,
        *,
        sqlite: bool,
        idempotency_key: str | None = None,
        batch_hash: str | None = None,
        hashes: Sequence[str] | None = None,
    ) -> None:
        self.session_id, self.encoded, self.now, self.sqlite = session_id, encoded, now, sqlite
        self.hashes = hashes
        self.idempotency_key, self.batch_hash = idempotency_key, batch_hash
        self.head, self.seq, self.head_hash = head, head, head_hash
        self.parts: list[tuple[Any, ...]] = []
        self.prunes: list[tuple[int, Prune, datetime]] = []
        self.newest: datetime = now

    def collect(self) -> list[tuple[Any, ...]]:
        """Every events row (the parts rows are then in :attr:`parts`)."""
        return list(self)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        encoded, sqlite = self.encoded, self.sqlite
        session_id, key, size = self.session_id, self.idempotency_key, len(encoded)
        prev, seq, now = self.head_hash, self.seq, self.now
        ids: list[str] = []  # made a few at a time, as events without one come
        # Each distinct time formatted once (a batch usually shares one).
        stamps: dict[datetime, tuple[str, Any]] = {}
        add_part = self.parts.append
        given = self.hashes
        created = now
        for i, enc in enumerate(encoded):
            seq += 1
            evt = enc.event
            event_id = evt.id
            if not event_id:
                if not ids:
                    ids = new_ids(min(size - i, 64))
                    ids.reverse()
                event_id = ids.pop()
            created = evt.created_at or now
            known = enc.stamps  # formatted by the append's checks (see encode_one)
            got: tuple[str, Any] | None
            if known is not None and created is evt.created_at:
                got = (known[0], known[1] if sqlite else created)
            else:
                got = stamps.get(created)
                if got is None:
                    got = stamps[created] = time_texts(created, sqlite)
            kind, raw = enc.kind, enc.raw
            # SQLite's inserts store the bytes as text (see its _Table): the text itself
            # is made only for Postgres.
            payload: str | bytes = raw if sqlite and raw is not None else enc.payload
            if given is None:
                prev = chain_hash_ts(prev, seq, event_id, kind, got[0], raw or payload)
            else:
                prev = given[i]
            if (
                type(evt) is not Message
                and type(evt) is not Custom
                and not isinstance(evt, EventHead)
            ):  # none of these names a seq
                check_references(evt, seq, f"events[{i}].")
                if isinstance(evt, Prune):
                    self.prunes.append((seq, evt, created))
            for r in enc.part_rows:
                add_part(
                    (session_id, seq, r["idx"], r["type"], r["tool_call_id"], r["tool_name"],
                     r["state"], r["token_count"])
                )  # fmt: skip
            if i == 0 and key is not None:
                yield (session_id, seq, event_id, kind, got[1], payload, enc.token_count,
                       enc.size, key, size, self.batch_hash, prev)  # fmt: skip
            else:
                yield (session_id, seq, event_id, kind, got[1], payload, enc.token_count,
                       enc.size, None, None, None, prev)  # fmt: skip
        self.head_hash, self.seq, self.newest = prev, seq, created


@dataclass(slots=True)
class Write:
    """One append's rows and the head move they make: from ``head`` (``head_hash``) to
    ``seq`` (``new_hash``) of ``session_id`` in ``tenant``."""

    tenant: str
    session_id: str
    head: int
    head_hash: str | None
    seq: int
    new_hash: str | None
    event_rows: list[tuple[Any, ...]]
    part_rows: list[tuple[Any, ...]]

    @property
    def newest(self) -> Any:
        """The newest event's ``created_at`` column value (the session's ``updated_at``)."""
        return self.event_rows[-1][CREATED]
