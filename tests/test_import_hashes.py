"""Imported transcripts are stored byte for byte as the reference encoder writes them.

Every shared transcript under ``tests/data/transcripts`` is imported the way ``eventstore
import`` imports it (its appends take every fast encoder the store has); each stored
event's payload is then compared with the reference encoding of the same event (the
serializer's dump written by ``json.dumps``, none of the fast writers), and its hash with
the chain recomputed over those reference bytes. A fast path that wrote one byte
differently would change the hash of that event and of every one after it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from eventstore import EventStore
from eventstore.codec import canonical_dumps, chain_hash, decode_row
from eventstore.events import EVENT_ADAPTER
from eventstore.importers import detect_agent_format, import_transcript, transcripts_under
from eventstore.schema import events

DATA = Path(__file__).parent / "data" / "transcripts"
TRANSCRIPTS = [p for p in transcripts_under(DATA) if detect_agent_format(p) is not None]


def _reference_payload(kind: str, payload: str, event_id: str, created_at: Any) -> str:
    evt = decode_row(kind, payload, event_id, created_at)
    data = EVENT_ADAPTER.dump_python(
        evt, mode="json", exclude_none=True, exclude={"id", "created_at", "kind"}
    )
    return canonical_dumps(data)


def _aware(value: datetime | str) -> datetime:
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def test_the_shared_transcripts_are_found() -> None:
    formats = {detect_agent_format(p) for p in TRANSCRIPTS}
    assert {"claude-code", "codex", "gemini-cli"} <= formats


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_imported_events_hash_as_the_reference_encoding_does(store: EventStore, path: Path) -> None:
    done = import_transcript(store, path)
    assert sum(r.events for r in done) > 0
    checked = 0
    with store.engine.connect() as conn:
        for r in done:
            rows = conn.execute(
                select(
                    events.c.seq,
                    events.c.id,
                    events.c.kind,
                    events.c.created_at,
                    events.c.payload,
                    events.c.hash,
                )
                .where(events.c.session_id == r.session_id)
                .order_by(events.c.seq)
            ).all()
            assert len(rows) == r.head_seq
            prev: str | None = None
            for row in rows:
                want = _reference_payload(row.kind, row.payload, row.id, row.created_at)
                assert row.payload == want, f"{r.key} seq {row.seq}"
                prev = chain_hash(prev, row.seq, row.id, row.kind, _aware(row.created_at), want)
                assert row.hash == prev, f"{r.key} seq {row.seq}"
                checked += 1
    assert checked == sum(r.events for r in done)
    # Importing again finds every session up to date: the stored copy is the file's.
    again = import_transcript(store, path)
    assert [r.status for r in again] == ["up to date"] * len(again)
