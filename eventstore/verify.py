"""Verification of one session's log in a single pass. Pure: no SQL, no store.

The store feeds raw rows in seq order (:meth:`ChainCheck.feed`); this module checks

* the hash chain and gapless seqs, and that the chain ends at the head the session row
  records (``head_seq`` and ``head_hash``): a removed newest event is caught;
* the columns the hash does not cover: ``events.size`` and ``token_count``, and each
  ``parts`` row against the part it indexes (type, tool ids, state, token counts adding
  up to the event's count);
* every compaction stamp: it must name a prune, after the part, at or before the head,
  that targets that part; and every prune target must carry a stamp;
* every recorded ``llm_call`` fingerprint, by maintaining the view in memory while
  walking the log (once per distinct set of render options) instead of rebuilding it
  from the store per call. The rendered prefix of a view is hashed once and kept as a
  running SHA-256 state at every point where the tool calls before it are all answered
  (there the rendering of what follows cannot change what came before); a prune or a
  pinned event rolls back to the last such point before the part it touches, and a
  condensation starts over. The cost is linear in the log for an agent whose calls get
  their results before the next model call;
* optionally, anchors held outside the database: a head hash recorded elsewhere, and
  seals (``eventstore.seal`` custom events carrying an HMAC, under a key the database
  never sees, of the hash they seal). See :func:`seal_event`.
"""

from __future__ import annotations

import hashlib
import hmac
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from ._features.purge import hashes_digest, is_redacted, payloads_digest, redacted_form
from .codec import (
    blob_ref,
    blob_refs,
    canonical_json,
    chain_hash,
    decode_event,
    implied_part_tokens,
    part_columns,
    sole_text,
    with_blob_data,
)
from .events import Condensation, Custom, Message, PartRef, Prune, Purge, ToolResultPart
from .records import StoredEvent, VerifyReport
from .tokens import MESSAGE_OVERHEAD
from .views import View, ViewItem, ViewOptions, render

__all__ = ["ChainCheck", "SEAL", "seal_event", "seal_mac"]

SEAL = "eventstore.seal"
"""Name of the custom event that anchors the chain to a key held outside the database."""

_CHECKED_COLUMNS = ("type", "tool_call_id", "tool_name", "state")


def _implied_row(row: Any) -> SimpleNamespace:
    """The ``parts`` row of a :func:`~eventstore.codec.sole_text` message that has none."""
    return SimpleNamespace(
        session_id=row.session_id, seq=row.seq, idx=0, type="text", tool_call_id=None,
        tool_name=None, state=None, token_count=implied_part_tokens(row.token_count),
        compacted_seq=None, compacted_at=None,
    )  # fmt: skip


def seal_mac(key: bytes, seq: int, head_hash: str | None) -> str:
    """HMAC-SHA256 under ``key`` of the chain's hash at ``seq``."""
    return hmac.new(key, f"{seq}\n{head_hash or ''}".encode(), hashlib.sha256).hexdigest()


def seal_event(key: bytes, seq: int, head_hash: str | None) -> Custom:
    """The event that seals the chain up to ``seq`` (whose hash is ``head_hash``)."""
    return Custom(
        name=SEAL, data={"seq": seq, "hash": head_hash, "mac": seal_mac(key, seq, head_hash)}
    )


def _same_time(a: datetime | None, b: datetime | None) -> bool:
    return a is not None and b is not None and a == b


class _Tracker:
    """One view, kept up to date while the log is walked, for one set of render options."""

    def __init__(
        self, session_id: str, options: ViewOptions, keeps: dict[int, int] | None = None
    ) -> None:
        self.session_id = session_id
        self.options = options
        self.keeps = keeps if keeps is not None else {}  # prune seq -> keep_chars
        self.cond: StoredEvent | None = None
        self.cond_pins: set[int] = set()
        self.pinned: list[ViewItem] = []  # the condensation's pinned head
        self.tail: list[ViewItem] = []
        self.want_system = options.pin_system
        self.want_user = options.pin_first_user
        self._restart()

    # -- the running hash of the rendered prefix

    def _restart(self) -> None:
        # (items hashed, hash state after "[" and their messages, messages, summary shown)
        self.marks: list[tuple[int, Any, int, bool]] = [(0, hashlib.sha256(b"["), 0, False)]
        self.scan = 0
        self.balance: dict[str, int] = {}
        self.unbalanced = 0

    def _rollback(self, index: int) -> None:
        while self.marks[-1][0] > index:
            self.marks.pop()
        self.scan = self.marks[-1][0]
        self.balance = {}
        self.unbalanced = 0

    def _bump(self, call_id: str, delta: int) -> None:
        old = self.balance.get(call_id, 0)
        new = old + delta
        self.balance[call_id] = new
        if old == 0 and new != 0:
            self.unbalanced += 1
        elif old != 0 and new == 0:
            self.unbalanced -= 1

    def _count(self, item: ViewItem) -> None:
        # Results pair with calls positionally across the whole view; where every call so
        # far has its result (and no result waits for a call) the rest renders alone.
        msg = item.message
        if msg.role == "assistant":
            for call in msg.tool_calls:
                self._bump(call.id, 1)
        for part in msg.parts:
            if isinstance(part, ToolResultPart):
                self._bump(part.tool_call_id, -1)

    def _item(self, index: int) -> ViewItem:
        n = len(self.pinned)
        return self.pinned[index] if index < n else self.tail[index - n]

    def _render(self, items: list[ViewItem], summary: bool) -> list[dict[str, Any]]:
        view = View(
            session_id=self.session_id,
            seq=0,
            items=items,
            condensation=self.cond if summary else None,
            prunes=[],
            options=self.options,
        )
        return render(view)

    @staticmethod
    def _feed(h: Any, messages: list[dict[str, Any]], n: int) -> int:
        for m in messages:
            if n:
                h.update(b",")
            h.update(canonical_json(m).encode("utf-8"))
            n += 1
        return n

    def fingerprint(self) -> str:
        """SHA-256 of the canonical rendered messages, as :meth:`View.fingerprint`."""
        k, h, n, shown = self.marks[-1]
        total = len(self.pinned) + len(self.tail)
        for i in range(self.scan, total):
            self._count(self._item(i))
            if self.unbalanced == 0:
                segment = [self._item(j) for j in range(k, i + 1)]
                summary = not shown and any(not it.pinned for it in segment)
                h = h.copy()
                n = self._feed(h, self._render(segment, summary), n)
                k, shown = i + 1, shown or summary
                self.marks.append((k, h, n, shown))
        self.scan = total
        rest = [self._item(j) for j in range(k, total)]
        out = h.copy()
        self._feed(out, self._render(rest, not shown), n)
        out.update(b"]")
        return out.hexdigest()

    # -- changes to the view

    def message(self, stored: StoredEvent, compacted: dict[int, int]) -> None:
        evt = stored.event
        assert isinstance(evt, Message)
        if self.cond is None:
            pin = False
            if self.want_system and evt.role == "system":
                pin, self.want_system = True, False
            elif self.want_user and evt.role == "user":
                pin, self.want_user = True, False
            self.tail.append(_new_item(stored, compacted, pin, self.keeps))
            return
        if stored.seq in self.cond_pins:  # pinned before it existed: joins the head now
            i = bisect_left(self.pinned, stored.seq, key=lambda it: it.stored.seq)
            self.pinned.insert(i, _new_item(stored, compacted, True, self.keeps))
            self._rollback(i)
        self.tail.append(_new_item(stored, compacted, stored.seq in self.cond_pins, self.keeps))

    def condensation(
        self, stored: StoredEvent, retained: dict[int, StoredEvent], compacted: Any
    ) -> None:
        evt = stored.event
        assert isinstance(evt, Condensation)
        self.cond = stored
        pins = sorted(set(evt.pinned))
        self.pinned = [
            _new_item(retained[p], compacted.get(p, {}), True, self.keeps)
            for p in pins
            if 1 <= p <= stored.seq and p in retained
        ]
        self.cond_pins = {it.stored.seq for it in self.pinned} | {p for p in pins if p > stored.seq}
        shown = {it.stored.seq for it in self.pinned}
        self.tail = [
            _new_item(e, compacted.get(s, {}), s in shown, self.keeps)
            for s, e in retained.items()
            if s > evt.forgotten_to
        ]
        self._restart()

    def compact(self, seq: int, index: int, by: int) -> None:
        first: int | None = None
        for offset, section in ((0, self.pinned), (len(self.pinned), self.tail)):
            i = bisect_left(section, seq, key=lambda it: it.stored.seq)
            while i < len(section) and section[i].stored.seq == seq:
                item = section[i]
                # A placeholder prune also replaces a truncation (see views.superseding).
                replaces = (
                    index in item.kept and by not in self.keeps and by > item.compacted_by[index]
                )
                if index < len(item.message.parts) and (index not in item.compacted or replaces):
                    item.compacted[index] = PartRef(seq=seq, index=index)
                    item.compacted_by[index] = by
                    item.kept.pop(index, None)
                    if by in self.keeps:
                        item.kept[index] = self.keeps[by]
                    first = offset + i if first is None else min(first, offset + i)
                i += 1
        if first is not None:
            self._rollback(first)


def _new_item(
    stored: StoredEvent, compacted: dict[int, int], pinned: bool, keeps: dict[int, int]
) -> ViewItem:
    evt = stored.event
    n = len(evt.parts) if isinstance(evt, Message) else 0
    refs = {i: PartRef(seq=stored.seq, index=i) for i in compacted if 0 <= i < n}
    return ViewItem(
        stored=stored,
        part_tokens=[],
        compacted=refs,
        compacted_by={i: compacted[i] for i in refs},
        kept={i: keeps[compacted[i]] for i in refs if compacted[i] in keeps},
        pinned=pinned,
    )


class ChainCheck:
    """Everything :meth:`eventstore.EventStore.verify` checks, fed one page at a time.

    Args:
        report: Filled in as rows arrive.
        caps: For each session on the lineage, the last seq it contributes (``None``
            for the session itself).
        head_hash: The head hash the session row records.
        llm_calls: The session's ``llm_call`` events (read ahead: a call names a view
            seq the walk passes before it reaches the call). Empty: no fingerprints.
        condensations: The session's condensations (read ahead: which messages a later
            condensation shows again).
        fork_rows: Compactions the forks on the lineage applied to inherited parts.
        key: Check seals with this key.
        anchor: A head hash recorded elsewhere that must appear in the chain.
    """

    def __init__(
        self,
        report: VerifyReport,
        caps: dict[str, int | None],
        head_hash: str | None,
        llm_calls: Sequence[StoredEvent] = (),
        condensations: Sequence[StoredEvent] = (),
        fork_rows: Iterable[Any] = (),
        key: bytes | None = None,
        anchor: str | None = None,
        load_blobs: Callable[[list[str]], dict[str, bytes]] | None = None,
        purges: Sequence[tuple[str, int, Purge]] = (),
        load_range: Callable[[str, int, int], list[Any]] | None = None,
        unfinished: Collection[tuple[str, int]] = (),
    ) -> None:
        # Purges (owner, record seq) whose erasure has not finished: their events may still
        # hold content, proven by their hashes and by the redacted form the record binds.
        self.unfinished = set(unfinished)
        self.load_range = load_range
        self.load_blobs = load_blobs
        # Purge records on the lineage: which (owner, seq) they redacted, and what they bind.
        self.purges = sorted(purges, key=lambda p: (p[0], p[1]))
        self.purged_hashes: list[list[str]] = [[] for _ in self.purges]
        self.purged_payloads: list[list[str]] = [[] for _ in self.purges]
        self.purged_from = min((p[2].from_seq for p in self.purges), default=None)
        self.report = report
        self.problems = report.problems
        self.caps = caps
        self.head_hash = head_hash
        self.key = key
        self.anchor = anchor
        self.expected = 1
        self.prev: str | None = None
        self.fork: dict[tuple[int, int], list[tuple[str, int, datetime | None]]] = {}
        for r in fork_rows:
            self.fork.setdefault((r.seq, r.idx), []).append(
                (r.session_id, r.compacted_seq, r.compacted_at)
            )
        self.stamp_checks: dict[int, list[tuple[int, int, datetime | None]]] = {}
        self.beyond: list[tuple[int, int, int]] = []
        self.effective: dict[tuple[int, int], int] = {}
        self.compacted: dict[int, dict[int, int]] = {}  # stamps in force at the walk's seq
        self.pending: dict[int, list[tuple[int, int]]] = {}  # stamp seq -> parts
        self.retained: dict[int, StoredEvent] = {}
        # Which messages a later condensation shows again.
        conds = sorted(
            (c for c in condensations if isinstance(c.event, Condensation)), key=lambda c: c.seq
        )
        self.cond_seqs = [c.seq for c in conds]
        self.all_pins = {p for c in conds for p in c.event.pinned}  # type: ignore[union-attr]
        self.min_fto_from: list[int] = [0] * (len(conds) + 1)
        low = 2**63
        self.min_fto_from[len(conds)] = low
        for i in range(len(conds) - 1, -1, -1):
            low = min(low, conds[i].event.forgotten_to)  # type: ignore[union-attr]
            self.min_fto_from[i] = low
        # Fingerprints wanted, by view seq.
        self.keeps: dict[int, int] = {}  # keep_chars of the truncating prunes seen, by seq
        self.trackers: dict[str, _Tracker] = {}
        self.wanted: dict[int, set[str]] = {}
        self.fingerprints: dict[tuple[int, str], str] = {}
        self.calls: list[tuple[StoredEvent, str]] = []
        for stored in llm_calls:
            call = stored.event
            report.llm_calls += 1
            try:
                options = ViewOptions.recorded(call.render_options)  # type: ignore[union-attr]
            except (ValueError, TypeError) as exc:
                self.problems.append(f"seq {stored.seq}: cannot rebuild view: {exc}")
                continue
            view_seq = call.view_seq  # type: ignore[union-attr]
            if not 0 <= view_seq <= report.head_seq:
                self.problems.append(
                    f"seq {stored.seq}: cannot rebuild view: as_of: {view_seq} is outside "
                    f"0..{report.head_seq} for session {report.session_id}"
                )
                continue
            opt_key = canonical_json(options.model_dump())
            if opt_key not in self.trackers:
                self.trackers[opt_key] = _Tracker(report.session_id, options, self.keeps)
            self.wanted.setdefault(view_seq, set()).add(opt_key)
            self.calls.append((stored, opt_key))
        self._fingerprints(0)

    # -- the walk

    def feed(self, rows: Sequence[Any], part_rows: Iterable[Any]) -> None:
        """Check the next page: raw event rows in seq order and their ``parts`` rows."""
        by_event: dict[tuple[str, int], list[Any]] = {}
        for r in part_rows:
            by_event.setdefault((r.session_id, r.seq), []).append(r)
        for row in rows:
            self._event(row, by_event.get((row.session_id, row.seq), []))

    def _event(self, row: Any, prows: list[Any]) -> None:
        seq = row.seq
        if seq != self.expected:
            self.problems.append(f"gap: expected seq {self.expected}, found {seq}")
            self.expected = seq
        before = self.prev
        purge = self._purge_of(row)
        if purge is not None and self._not_erased_yet(purge, row):
            digest = chain_hash(before, seq, row.id, row.kind, row.created_at, row.payload)
            intact = digest == row.hash
        elif purge is not None:
            # Its content is gone; the record binds its stored hash and redacted payload.
            self.purged_hashes[purge].append(row.hash)
            self.purged_payloads[purge].append(row.payload)
            self.report.purged += 1
            intact = True
            if not is_redacted(row.kind, row.payload):
                self.problems.append(f"seq {seq}: a purged event holds content again")
        else:
            digest = chain_hash(before, seq, row.id, row.kind, row.created_at, row.payload)
            intact = digest == row.hash
        if not intact:
            self.problems.append(f"seq {seq}: hash mismatch (event changed after append)")
        elif self.anchor is not None and row.hash == self.anchor:
            self.report.anchored_seq = seq
        self.prev = row.hash
        self.expected += 1
        self.report.events += 1
        if intact and len(row.payload.encode("utf-8")) != row.size:
            self.problems.append(
                f"seq {seq}: events.size says {row.size} bytes, the payload has "
                f"{len(row.payload.encode('utf-8'))}"
            )
        evt: Any = None
        if row.kind in ("message", "prune", "condensation", "custom"):
            try:
                evt = decode_event(row.kind, row.payload, row.id, row.created_at)
            except Exception as exc:  # a changed payload may not even parse
                self.problems.append(f"seq {seq}: payload does not decode ({exc})"[:300])
        if evt is not None and self.load_blobs is not None and (named := blob_refs(evt)):
            evt = self._blobs(seq, evt, named)
        stored = (
            None
            if evt is None
            else StoredEvent(
                session_id=row.session_id,
                seq=seq,
                hash=row.hash,
                token_count=row.token_count,
                event=evt,
            )
        )
        if not prows and evt is not None and sole_text(evt):
            # Appended without its row (see codec.sole_text): the row the part implies.
            prows = [_implied_row(row)]
        self._columns(row, evt, prows)
        self._stamps(seq, row.session_id, prows)
        if isinstance(evt, Prune):
            self._prune(seq, evt, row.created_at)
        elif isinstance(evt, Custom) and evt.name == SEAL:
            self._seal(seq, evt, before)
        if stored is not None and isinstance(evt, Message):
            self._message(stored)
        elif stored is not None and isinstance(evt, Condensation):
            self._condensation(stored)
        self._apply_stamps(seq, evt, row.created_at)
        self._fingerprints(seq)

    def _not_erased_yet(self, purge: int, row: Any) -> bool:
        """Whether ``row`` is an event an unfinished purge has yet to rewrite; if so, the
        record's lists get its hash and its redacted form (the caller checks the hash)."""
        owner, rec_seq, _rec = self.purges[purge]
        if (owner, rec_seq) not in self.unfinished:
            return False
        form = redacted_form(row.kind, row.payload)
        if form is None or form == row.payload:
            return False
        self.purged_hashes[purge].append(row.hash)
        self.purged_payloads[purge].append(form)
        self.report.purge_pending += 1
        return True

    def _purge_of(self, row: Any) -> int | None:
        """Index of the purge record that redacted this row, if one did."""
        if row.kind == "purge":
            return None
        for i, (owner, rec_seq, rec) in enumerate(self.purges):
            if owner == row.session_id and rec.from_seq <= row.seq <= rec.to_seq < rec_seq:
                return i
        return None

    def _blobs(self, seq: int, evt: Any, named: list[str]) -> Any:
        """Re-hash the attachments an event keeps in the blob table (the chain covers their
        digests, so this proves their bytes) and put the bytes back for view rebuilds."""
        assert self.load_blobs is not None
        data = self.load_blobs(named)
        for digest in named:
            got = data.get(digest)
            if got is None:
                self.problems.append(f"seq {seq}: blob {digest[:19]}… is missing")
            elif blob_ref(got) != digest:
                self.problems.append(f"seq {seq}: blob {digest[:19]}… changed after append")
                del data[digest]
        return with_blob_data(evt, data)

    def _columns(self, row: Any, evt: Any, prows: list[Any]) -> None:
        seq = row.seq
        if isinstance(evt, Message):
            want = [part_columns(i, p) for i, p in enumerate(evt.parts)]
            got = sorted(prows, key=lambda r: r.idx)
            if [r.idx for r in got] != list(range(len(want))):
                self.problems.append(
                    f"seq {seq}: the message has {len(want)} parts but the parts table holds "
                    f"rows {[r.idx for r in got]}"
                )
            for r in got:
                if not 0 <= r.idx < len(want):
                    continue
                for col in _CHECKED_COLUMNS:
                    if getattr(r, col) != want[r.idx][col]:
                        self.problems.append(
                            f"seq {seq} part {r.idx}: parts.{col} is {getattr(r, col)!r}, "
                            f"the payload says {want[r.idx][col]!r}"
                        )
            expected = MESSAGE_OVERHEAD + sum(r.token_count for r in got)
        else:
            if prows:
                self.problems.append(f"seq {seq}: a {row.kind} event has rows in the parts table")
            expected = (evt.summary_tokens or 0) if isinstance(evt, Condensation) else 0
        if evt is not None or row.kind not in ("message", "condensation"):
            if row.token_count != expected:
                self.problems.append(
                    f"seq {seq}: events.token_count is {row.token_count}, its parts add up "
                    f"to {expected}"
                )

    def _stamps(self, seq: int, owner: str, prows: list[Any]) -> None:
        cap = self.caps.get(owner)
        for r in prows:
            found: list[tuple[int, datetime | None]] = []
            if r.compacted_seq is not None and (cap is None or r.compacted_seq <= cap):
                found.append((r.compacted_seq, r.compacted_at))
            for fork_owner, stamp, at in self.fork.get((seq, r.idx), []):
                fork_cap = self.caps.get(fork_owner)
                if fork_cap is None or stamp <= fork_cap:
                    found.append((stamp, at))
            for stamp, at in found:
                if stamp <= seq:
                    self.problems.append(
                        f"seq {seq} part {r.idx}: compaction stamp {stamp} is not after the part"
                    )
                elif stamp > self.report.head_seq:
                    self.beyond.append((seq, r.idx, stamp))
                else:
                    self.stamp_checks.setdefault(stamp, []).append((seq, r.idx, at))
            if found:
                # The view uses the earliest stamp in force, as the store's view read does.
                eff = min(s for s, _ in found)
                self.effective[(seq, r.idx)] = eff
                if eff <= seq:
                    self.compacted.setdefault(seq, {})[r.idx] = eff
                else:
                    self.pending.setdefault(eff, []).append((seq, r.idx))

    def _prune(self, seq: int, evt: Prune, created: datetime) -> None:
        if evt.keep_chars is not None:
            self.keeps[seq] = evt.keep_chars
        for ref in evt.targets:
            eff = self.effective.get((ref.seq, ref.index))
            if ref.seq >= seq or eff is None or eff > seq:
                self.problems.append(
                    f"seq {seq}: prune targets seq {ref.seq} part {ref.index}, which carries "
                    "no compaction stamp from it"
                )
            elif eff < seq and eff in self.keeps and evt.keep_chars is None:
                # The part was truncated; this prune hides it whole from here on.
                stamps = self.compacted.get(ref.seq, {})
                if stamps.get(ref.index) == eff:
                    stamps[ref.index] = seq
                for tracker in self.trackers.values():
                    tracker.compact(ref.seq, ref.index, seq)

    def _apply_stamps(self, seq: int, evt: Any, created: datetime) -> None:
        for part_seq, idx, at in self.stamp_checks.pop(seq, []):
            targets = {(r.seq, r.index) for r in evt.targets} if isinstance(evt, Prune) else set()
            if (part_seq, idx) not in targets:
                self.problems.append(
                    f"seq {part_seq} part {idx}: compaction stamp points at seq {seq}, "
                    "which is not a prune targeting it"
                )
            elif not _same_time(at, created):
                self.problems.append(
                    f"seq {part_seq} part {idx}: compacted_at {at} differs from the time of "
                    f"the prune at seq {seq} ({created})"
                )
        for part_seq, idx in self.pending.pop(seq, []):
            self.compacted.setdefault(part_seq, {})[idx] = seq
            for tracker in self.trackers.values():
                tracker.compact(part_seq, idx, seq)

    def _seal(self, seq: int, evt: Custom, before: str | None) -> None:
        data = evt.data if isinstance(evt.data, dict) else {}
        if data.get("seq") != seq - 1 or data.get("hash") != before:
            self.problems.append(f"seq {seq}: seal does not name the event before it")
            return
        if self.key is None:
            return
        mac = data.get("mac")
        expected = seal_mac(self.key, seq - 1, before)
        if isinstance(mac, str) and hmac.compare_digest(mac, expected):
            self.report.sealed_seq = seq - 1
        else:
            self.problems.append(
                f"seq {seq}: seal does not match the key (forged, or sealed with another key)"
            )

    def _message(self, stored: StoredEvent) -> None:
        seq = stored.seq
        nxt = bisect_left(self.cond_seqs, seq + 1)
        if seq in self.all_pins or seq > self.min_fto_from[nxt]:
            self.retained[seq] = stored
        for tracker in self.trackers.values():
            tracker.message(stored, self.compacted.get(seq, {}))

    def _condensation(self, stored: StoredEvent) -> None:
        evt = stored.event
        assert isinstance(evt, Condensation)
        for tracker in self.trackers.values():
            tracker.condensation(stored, self.retained, self.compacted)
        # Drop what no later condensation can show again.
        nxt = bisect_left(self.cond_seqs, stored.seq + 1)
        low = self.min_fto_from[nxt]
        self.retained = {s: e for s, e in self.retained.items() if s in self.all_pins or s > low}

    def _fingerprints(self, seq: int) -> None:
        for opt_key in self.wanted.pop(seq, ()):
            self.fingerprints[(seq, opt_key)] = self.trackers[opt_key].fingerprint()

    # -- the end

    def finish(self, current_head: int) -> VerifyReport:
        """Compare the end of the chain with the session row, and the recorded views.

        ``current_head`` is the head read again after the walk: a stamp beyond the head
        read at the start is a concurrent prune, not damage, when the head has reached it.
        """
        report = self.report
        last = self.expected - 1
        if last != report.head_seq:
            report.problems.append(f"head_seq is {report.head_seq} but the log ends at {last}")
        if self.prev != self.head_hash:
            report.problems.append(
                f"the log ends with hash {str(self.prev)[:12]}… but the session's head hash is "
                f"{str(self.head_hash)[:12]}…: events were removed or replaced after the append"
            )
        report.head_hash = self.prev
        for part_seq, idx, stamp in self.beyond:
            if stamp > current_head:
                report.problems.append(
                    f"seq {part_seq} part {idx}: compaction stamp {stamp} is beyond the head "
                    f"({current_head})"
                )
        for i, (owner, rec_seq, rec) in enumerate(self.purges):
            hashes, payloads = self.purged_hashes[i], self.purged_payloads[i]
            cap = self.caps.get(owner)
            if cap is not None and cap < rec.to_seq and self.load_range is not None:
                # A fork shares only part of what its parent purged: read the rest.
                for r in self.load_range(owner, cap + 1, rec.to_seq):
                    hashes.append(r.hash)
                    form = redacted_form(r.kind, r.payload)
                    if (owner, rec_seq) in self.unfinished and form is not None:
                        # Not erased yet or erased: the record binds the redacted form.
                        payloads.append(form)
                        continue
                    payloads.append(r.payload)
                    if form != r.payload:
                        report.problems.append(
                            f"seq {r.seq} of {owner[:8]}…: a purged event holds content again"
                        )
            if (
                len(hashes) != rec.events
                or hashes_digest(hashes) != rec.hashes
                or payloads_digest(payloads) != rec.redacted
            ):
                report.problems.append(
                    f"purge record seq {rec_seq} ({owner[:8]}…): the purged events "
                    f"{rec.from_seq}..{rec.to_seq} do not match what it recorded"
                )
        for stored, opt_key in self.calls:
            call = stored.event
            got = self.fingerprints.get((call.view_seq, opt_key))  # type: ignore[union-attr]
            if (
                got is not None
                and got != call.fingerprint  # type: ignore[union-attr]
                and self.purged_from is not None
                and call.view_seq >= self.purged_from  # type: ignore[union-attr]
            ):
                report.unverifiable_views += 1
            elif got is not None and got != call.fingerprint:  # type: ignore[union-attr]
                report.problems.append(
                    f"seq {stored.seq}: view at seq {call.view_seq} renders to "  # type: ignore[union-attr]
                    f"{got[:12]}…, but {call.fingerprint[:12]}… was recorded"  # type: ignore[union-attr]
                )
        if self.anchor is not None and report.anchored_seq is None:
            report.problems.append(
                f"the recorded head hash {self.anchor[:12]}… is not in this chain: events up "
                "to it were changed or removed"
            )
        if self.key is not None and report.sealed_seq is None:
            report.problems.append(
                "no seal under this key: nothing in the log is anchored to it (seal the "
                "session with EventStore.seal)"
            )
        report.ok = not report.problems
        return report
