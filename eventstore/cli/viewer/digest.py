"""One pass over a session's log, kept per process: the numbers the viewer charts and badges.

A :class:`Digest` holds, per seq, the tokens stored in messages so far (the *raw* curve)
and the view's tokens estimated from stored counts (the *view* curve: it grows with each
message, drops to ``tokens_after`` at a condensation and by ``tokens_freed`` at a prune),
plus the seqs of condensations, prunes and llm calls, which condensation forgot which
seqs, which parts were pruned, and where each tool call and its result are.

The log is append-only, so a digest built at head ``h`` stays true: a later request reads
only the events after ``h``. Big sessions are digested in a background thread and the
pages poll for it (with its progress), so no request waits for a 100k-event read.
"""

from __future__ import annotations

import bisect
import threading
import time
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eventstore import EventStore, StoredEvent

INLINE_LIMIT = 5_000
"""Sessions with at most this many new events are digested inside the request."""


@dataclass(slots=True)
class LLMCallPoint:
    seq: int
    view_seq: int
    model: str
    prompt_tokens: int | None
    fingerprint: str


@dataclass
class Digest:
    """What one read of a session's events says, extended as the head moves."""

    session_id: str
    head: int = 0
    raw: array = field(default_factory=lambda: array("q"))
    """``raw[i]``: tokens of every message at seqs ``1..i+1``."""
    view: array = field(default_factory=lambda: array("q"))
    """``view[i]``: estimated view tokens at seq ``i+1``."""
    msg_tokens: array = field(default_factory=lambda: array("q"))
    """Tokens of the message at each seq (0 for other kinds)."""
    kinds: dict[str, int] = field(default_factory=dict)
    condensations: list[int] = field(default_factory=list)
    forgotten: list[tuple[int, int, int]] = field(default_factory=list)
    """``(from, to, condensation seq)`` for each condensation, in seq order."""
    prunes: list[int] = field(default_factory=list)
    pruned: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """By message seq: ``(part index, prune seq)`` of its pruned parts."""
    llm_calls: list[LLMCallPoint] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    """Seq of each tool call, by call id."""
    results: dict[str, int] = field(default_factory=dict)
    """Seq of each tool result, by call id."""
    _view_now: int = 0

    @property
    def raw_tokens(self) -> int:
        return self.raw[-1] if self.raw else 0

    def add(self, stored: StoredEvent, *, sparse: bool = False) -> None:
        """Fold the next event in. Events come in seq order and without gaps, unless
        ``sparse``: then only the markers (condensations, prunes, calls) are recorded and
        the per-seq curves are left alone."""
        from eventstore import Condensation, LLMCall, Message, Prune

        evt = stored.event
        self.kinds[stored.kind] = self.kinds.get(stored.kind, 0) + 1
        raw = self.raw_tokens
        tokens = 0
        if isinstance(evt, Message):
            tokens = stored.token_count
            self._view_now += tokens
            for p in evt.parts:
                if p.type == "tool_call":
                    self.calls.setdefault(p.id, stored.seq)
                elif p.type == "tool_result":
                    self.results.setdefault(p.tool_call_id, stored.seq)
        elif isinstance(evt, Condensation):
            self.condensations.append(stored.seq)
            self.forgotten.append((evt.forgotten_from, evt.forgotten_to, stored.seq))
            if sparse:
                pass
            elif evt.tokens_after is not None:
                self._view_now = evt.tokens_after
            else:
                pinned = sum(self._msg(s) for s in evt.pinned)
                tail = self._msg_sum(evt.forgotten_to + 1, stored.seq - 1)
                self._view_now = pinned + evt.summary_tokens + tail
        elif isinstance(evt, Prune):
            self.prunes.append(stored.seq)
            for ref in evt.targets:
                self.pruned.setdefault(ref.seq, []).append((ref.index, stored.seq))
            self._view_now = max(0, self._view_now - evt.tokens_freed)
        elif isinstance(evt, LLMCall):
            prompt = evt.usage.prompt_tokens if evt.usage is not None else None
            self.llm_calls.append(
                LLMCallPoint(stored.seq, evt.view_seq, evt.model, prompt, evt.fingerprint)
            )
        if sparse:
            return
        self.msg_tokens.append(tokens)
        self.raw.append(raw + tokens)
        self.view.append(self._view_now)
        self.head = stored.seq

    def _msg(self, seq: int) -> int:
        return self.msg_tokens[seq - 1] if 1 <= seq <= len(self.msg_tokens) else 0

    def _msg_sum(self, first: int, last: int) -> int:
        if last < first:
            return 0
        lo = self.raw[first - 2] if first >= 2 else 0
        return self.raw[min(last, len(self.raw)) - 1] - lo

    def forgotten_by(self, seq: int) -> int | None:
        """The first condensation that hid ``seq`` from the view, if any."""
        for lo, hi, cseq in self.forgotten:
            if lo <= seq <= hi:
                return cseq
        return None

    def previous_llm_call(self, seq: int) -> LLMCallPoint | None:
        """The newest llm call at or before ``seq`` whose view is older than ``seq``."""
        idx = bisect.bisect_right([c.seq for c in self.llm_calls], seq)
        for call in reversed(self.llm_calls[:idx]):
            if call.view_seq < seq:
                return call
        return None

    @property
    def model(self) -> str | None:
        """The model of the newest recorded call."""
        return self.llm_calls[-1].model if self.llm_calls else None


@dataclass
class _Job:
    thread: threading.Thread
    started: float
    target: int
    done_seq: int = 0
    error: str | None = None


class Digests:
    """The digests of one server process, built inline or in the background."""

    def __init__(self, store: EventStore, inline_limit: int = INLINE_LIMIT) -> None:
        self.store = store
        self.inline_limit = inline_limit
        self._lock = threading.Lock()
        self._digests: dict[str, Digest] = {}
        self._jobs: dict[str, _Job] = {}

    def get(self, session_id: str, head: int) -> Digest | None:
        """The digest up to ``head``, or ``None`` while a background read catches up."""
        with self._lock:
            digest = self._digests.get(session_id)
            if digest is not None and digest.head >= head:
                return digest
            job = self._jobs.get(session_id)
            if job is not None and job.thread.is_alive():
                return None
            have = digest.head if digest is not None else 0
            if head - have > self.inline_limit:
                self._start(session_id, head, digest)
                return None
        digest = self._extend(session_id, head, digest, None)
        return digest

    def progress(self, session_id: str) -> tuple[int, int, float, str | None]:
        """``(events read, events to read, seconds so far, error)`` of the background read."""
        with self._lock:
            job = self._jobs.get(session_id)
        if job is None:
            return 0, 0, 0.0, None
        return job.done_seq, job.target, time.monotonic() - job.started, job.error

    def _start(self, session_id: str, head: int, digest: Digest | None) -> None:
        job = _Job(threading.Thread(target=lambda: None), time.monotonic(), head)

        def run() -> None:
            try:
                self._extend(session_id, head, digest, job)
            except Exception as exc:  # shown on the page that polls
                job.error = f"{type(exc).__name__}: {exc}"

        job.thread = threading.Thread(target=run, name=f"digest-{session_id}", daemon=True)
        self._jobs[session_id] = job
        job.thread.start()

    def _extend(
        self, session_id: str, head: int, digest: Digest | None, job: _Job | None
    ) -> Digest:
        # Work on a copy-free extension of the cached digest: only this thread (or the
        # request holding no job) extends a given session at a time.
        base = digest if digest is not None else Digest(session_id)
        if digest is not None:
            base = _copy(digest)
        for stored in self.store.read(session_id, base.head + 1, head):
            base.add(stored)
            if job is not None and stored.seq % 1000 == 0:
                job.done_seq = stored.seq
        with self._lock:
            current = self._digests.get(session_id)
            if current is None or current.head < base.head:
                self._digests[session_id] = base
            return self._digests[session_id]


def _copy(d: Digest) -> Digest:
    """A digest that can be extended without changing ``d`` (which requests may be reading)."""
    return Digest(
        session_id=d.session_id,
        head=d.head,
        raw=array("q", d.raw),
        view=array("q", d.view),
        msg_tokens=array("q", d.msg_tokens),
        kinds=dict(d.kinds),
        condensations=list(d.condensations),
        forgotten=list(d.forgotten),
        prunes=list(d.prunes),
        pruned={k: list(v) for k, v in d.pruned.items()},
        llm_calls=list(d.llm_calls),
        calls=dict(d.calls),
        results=dict(d.results),
        _view_now=d._view_now,
    )
