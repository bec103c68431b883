"""Our own export format: a session as JSONL, and parsing such a file back.

The first line is a header ``{"format": "agent-eventstore/v1", "session": {...}}``; each
further line is one stored event with its seq, id, created_at and hash. Parsing an export
recomputes the hash chain line by line, so an edited line is caught before anything is
written (the chain does not include the session id, so it survives a new session).
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from typing import IO, Any

from pydantic import ValidationError

from .._features.purge import hashes_digest, is_redacted, payloads_digest
from ..codec import chain_hash, encode_event
from ..events import EVENT_ADAPTER, Event, Purge
from ..store import EventStore
from ._loading import LoadedFile, Transcript, format_error, short_error

_HASH = re.compile(r"[0-9a-f]{64}")

EXPORT_FORMAT = "agent-eventstore/v1"
"""Value of ``format`` in the header line of an export."""


def export_jsonl(store: EventStore, session_id: str, fp: IO[str]) -> int:
    """Write a session as JSONL: a header line, then one line per event.

    The header is ``{"format": "agent-eventstore/v1", "session": {...}}``; each event line
    holds ``seq``, ``id``, ``kind``, ``created_at``, ``hash`` and ``payload`` (the event as
    JSON). A forked session is written flattened, its inherited events included.

    Returns:
        The number of events written.
    """
    count = -1  # the header is not an event
    for line in export_lines(store, session_id):
        fp.write(line)
        count += 1
    return count


def export_lines(store: EventStore, session_id: str) -> Generator[str, None, None]:
    """The lines :func:`export_jsonl` writes (each ending in a newline), pulled one at a
    time: a caller that stops pulling (a cancelled download) leaves nothing running."""
    session = store.get_session(session_id)
    header = {"format": EXPORT_FORMAT, "session": session.model_dump(mode="json")}
    yield json.dumps(header, ensure_ascii=True) + "\n"
    for stored in store.read(session_id):
        line = {
            "seq": stored.seq,
            "id": stored.id,
            "kind": stored.kind,
            "created_at": stored.created_at.isoformat(),
            "hash": stored.hash,
            "payload": EVENT_ADAPTER.dump_python(stored.event, mode="json", exclude_none=True),
        }
        # ensure_ascii keeps lone surrogates (undecodable tool output) writable as UTF-8.
        yield json.dumps(line, ensure_ascii=True) + "\n"


def parse_export(loaded: LoadedFile) -> Transcript:
    path = loaded.path
    records = loaded.data if loaded.jsonl else [(1, loaded.data)]
    n, header = records[0]
    if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
        raise format_error(f"{path}:{n}", f"expected a header with format {EXPORT_FORMAT!r}")
    sess = header.get("session")
    if not isinstance(sess, dict):
        raise format_error(f"{path}:{n}", "header.session: expected an object")
    events: list[Event] = []
    hashes: list[str] = []
    sizes: list[int] = []
    prev: str | None = None
    unproven: dict[int, str] = {}  # seq -> where: purged, proven by a later purge record
    for n, line in records[1:]:
        event, digest, size, proven = _export_line(line, len(events) + 1, prev, f"{path}:{n}")
        events.append(event)
        hashes.append(digest)
        sizes.append(size)
        prev = digest
        if not proven:
            unproven[len(events)] = f"{path}:{n}"
    if unproven:
        _check_purges(events, hashes, unproven, path)
    raw_meta = sess.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    title = sess.get("title") if isinstance(sess.get("title"), str) else None
    user_id = sess.get("user_id") if isinstance(sess.get("user_id"), str) else None
    sid = sess.get("id") if isinstance(sess.get("id"), str) else None
    key = sess.get("key") if isinstance(sess.get("key"), str) and sess.get("key") else None
    return Transcript(
        events=events,
        title=title,
        metadata=meta,
        user_id=user_id,
        hashes=hashes,
        payload_sizes=sizes,
        session_id=sid,
        key=key if sid is not None else None,
        purged=bool(unproven),
    )


def _check_purges(
    events: list[Event], hashes: list[str], unproven: dict[int, str], path: str
) -> None:
    """Every event whose payload does not reproduce its hash must be a purged one: in
    redacted form (checked per line) and named by a later purge record that binds its
    hash and its redacted payload, as ``verify`` requires of the stored log."""
    covered: set[int] = set()
    for i, evt in enumerate(events, start=1):
        if not isinstance(evt, Purge):
            continue
        todo = [
            j
            for j in range(max(1, evt.from_seq), min(evt.to_seq, i - 1) + 1)
            if events[j - 1].kind != "purge" and j not in covered
        ]
        bound = hashes_digest([hashes[j - 1] for j in todo])
        redacted = payloads_digest([encode_event(events[j - 1]) for j in todo])
        if bound != evt.hashes or redacted != evt.redacted:
            raise format_error(
                f"{path}: seq {i}",
                f"the purge record of seqs {evt.from_seq}..{evt.to_seq} does not match the "
                "events it names (a purged line was edited)",
            )
        covered.update(todo)
    for seq, where in unproven.items():
        if seq not in covered:
            raise format_error(
                where,
                f"hash mismatch for seq {seq}: the event is in purged form but no later purge "
                "record names it (the line was edited, or an earlier one was)",
            )


def _export_line(line: Any, seq: int, prev: str | None, where: str) -> tuple[Event, str, int, bool]:
    if not isinstance(line, dict):
        raise format_error(where, f"expected an event object, got {type(line).__name__}")
    for key, typ in (("seq", int), ("id", str), ("kind", str), ("created_at", str), ("hash", str)):
        if not isinstance(line.get(key), typ):
            raise format_error(where, f"{key}: missing or not a {typ.__name__}")
    if line["seq"] != seq:
        raise format_error(
            where, f"seq: expected {seq} (events must be gapless), got {line['seq']}"
        )
    payload = line.get("payload")
    if not isinstance(payload, dict):
        raise format_error(where, "payload: missing or not an object")
    data = {**payload, "id": line["id"], "kind": line["kind"], "created_at": line["created_at"]}
    try:
        event = EVENT_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise format_error(where, f"payload.{short_error(exc)}") from None
    if event.created_at is None or event.id is None:
        raise format_error(where, "id and created_at: required on every exported event")
    encoded = encode_event(event)
    digest = chain_hash(prev, seq, event.id, event.kind, event.created_at, encoded)
    size = len(encoded.encode("utf-8"))
    if digest != line["hash"]:
        if is_redacted(event.kind, encoded) and _HASH.fullmatch(line["hash"]):
            # A purged event keeps its original hash; a later purge record must prove it.
            return event, line["hash"], size, False
        raise format_error(
            where,
            f"hash mismatch for seq {seq}: the file says {line['hash'][:16]}..., the event "
            f"hashes to {digest[:16]}... (the line was edited, or an earlier one was)",
        )
    return event, digest, size, True
