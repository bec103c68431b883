"""Context views: what the model sees, rebuilt from the log at any seq.

A view at ``as_of`` is the pinned head, the summary of the latest condensation at or before
``as_of``, and the message events after the range that condensation forgot. Prunes stamp
parts with the seq that compacted them, so a prune made after ``as_of`` is invisible to the
view at ``as_of``; that is what makes time travel exact.

Cost: one indexed probe per lineage segment for the latest condensation, a primary-key read
of the pinned events, and one range read of the tail's events and parts. Nothing before
the forgotten range's end is read, so the cost follows the tail, not the session.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select
from sqlalchemy.engine import Connection

from . import _core
from .codec import canonical_json
from .errors import InvalidEventError, NotFoundError
from .events import Condensation, LLMCall, Message, PartRef, ToolResultPart, Usage
from .records import StoredEvent, VerifyReport
from .schema import events, fork_compactions, parts
from .tokens import MESSAGE_OVERHEAD, TokenCounter

if TYPE_CHECKING:
    from .store import EventStore

__all__ = [
    "View",
    "ViewItem",
    "ViewOptions",
    "build_view",
    "fingerprint",
    "record_llm_call",
    "verify_llm_calls",
    "calibrated_tokens",
    "original_part",
]

DEFAULT_PLACEHOLDER = "[Old tool result content cleared]"
DEFAULT_INTERRUPTED = "[Tool call interrupted: no result was recorded]"
DEFAULT_SUMMARY_PREFIX = "Summary of the earlier conversation (older events were condensed):\n\n"


class ViewOptions(BaseModel):
    """How a view is assembled and rendered. Recorded with each ``llm_call`` so the exact
    messages can be rebuilt later."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    placeholder: str = DEFAULT_PLACEHOLDER
    """Text shown instead of a compacted tool result. ``{seq}`` and ``{index}`` are filled
    with the original's reference when present."""
    interrupted: str = DEFAULT_INTERRUPTED
    """Text of the synthetic result rendered for a call that never got one."""
    summary_role: str = "user"
    """Role of the message that carries the condensation summary."""
    summary_prefix: str = DEFAULT_SUMMARY_PREFIX
    """Text placed before the summary."""
    pin_system: bool = True
    """Keep the first system message verbatim (used when nothing was condensed yet)."""
    pin_first_user: bool = True
    """Keep the first user message verbatim (used when nothing was condensed yet)."""
    keep_extra: bool = False
    """Also send message fields that have no typed slot (``Message.extra``, kept so imports
    round-trip exactly). Off by default: providers may reject keys such as a trajectory's
    private ``thought`` or ``agent`` fields."""


@dataclass(slots=True)
class ViewItem:
    """One message event in a view."""

    stored: StoredEvent
    """The stored event."""
    part_tokens: list[int]
    """Stored token count of each part."""
    compacted: dict[int, PartRef] = field(default_factory=dict)
    """Parts shown as a placeholder, by index, with the reference to the original."""
    pinned: bool = False
    """Whether the item belongs to the pinned head."""
    tokens: int = 0
    """Tokens this item contributes (placeholders counted instead of compacted parts)."""

    @property
    def seq(self) -> int:
        """The event's seq."""
        return self.stored.seq

    @property
    def message(self) -> Message:
        """The message as stored (compacted parts still hold their full content)."""
        evt = self.stored.event
        assert isinstance(evt, Message)
        return evt


@dataclass(slots=True)
class View:
    """The model-ready context of a session at one seq."""

    session_id: str
    """The session."""
    seq: int
    """The head seq this view reflects."""
    items: list[ViewItem]
    """Pinned head, then the tail, in render order."""
    condensation: StoredEvent | None
    """The latest condensation at or before ``seq``, if any."""
    prunes: list[int]
    """Seqs of the prunes that compacted parts shown in this view."""
    options: ViewOptions
    """How it was assembled."""
    summary_tokens: int = 0
    """Tokens of the summary message."""
    rows_read: int = 0
    """Database rows fetched to build it (a cost measure: follows the tail, not the session)."""
    extra_tokens: int = 0
    """Tokens of synthetic content (interrupted results)."""
    _messages: list[dict[str, Any]] | None = None

    @property
    def pinned(self) -> list[StoredEvent]:
        """The head events kept verbatim."""
        return [i.stored for i in self.items if i.pinned]

    @property
    def tail(self) -> list[StoredEvent]:
        """The message events after the forgotten range."""
        return [i.stored for i in self.items if not i.pinned]

    @property
    def summary(self) -> str | None:
        """The condensation summary shown, if any."""
        if self.condensation is None:
            return None
        evt = self.condensation.event
        assert isinstance(evt, Condensation)
        return evt.summary

    @property
    def tokens(self) -> int:
        """Estimated tokens of the rendered view: a sum of stored counts."""
        return sum(i.tokens for i in self.items) + self.summary_tokens + self.extra_tokens

    def to_messages(self) -> list[dict[str, Any]]:
        """The view as litellm/OpenAI chat messages (a fresh copy each call)."""
        if self._messages is None:
            self._messages = _render(self)
        return json.loads(json.dumps(self._messages))

    def fingerprint(self) -> str:
        """SHA-256 over the canonical rendered messages."""
        return fingerprint(self.to_messages())

    def refs(self) -> list[PartRef]:
        """References of every compacted part in the view."""
        return [ref for item in self.items for ref in item.compacted.values()]


def fingerprint(messages: Sequence[dict[str, Any]]) -> str:
    """SHA-256 hex digest of ``messages`` in canonical JSON."""
    return hashlib.sha256(canonical_json(list(messages)).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- building


def build_view(
    conn: Connection,
    tenant: str,
    session_id: str,
    as_of: int | None,
    options: ViewOptions | None,
    counter: TokenCounter,
) -> View:
    """Materialize the view of ``session_id`` at ``as_of`` (default: the head)."""
    options = options or ViewOptions()
    segments, head = _core.lineage_and_head(conn, tenant, session_id)
    seq = head if as_of is None else as_of
    if not 0 <= seq <= head:
        raise InvalidEventError(f"as_of: {as_of} is outside 0..{head} for session {session_id}")
    rows = 0

    cond: StoredEvent | None = None
    for seg in reversed(_core.clip(segments, 1, seq)):
        row = conn.execute(
            select(*_core._EVENT_COLS)
            .where(
                events.c.session_id == seg.owner,
                events.c.kind == "condensation",
                events.c.seq >= seg.lo,
                events.c.seq <= seg.hi,
            )
            .order_by(events.c.seq.desc())
            .limit(1)
        ).first()
        if row is not None:
            rows += 1
            cond = _core.row_to_stored(row, seg.owner)
            break

    items: list[ViewItem] = []
    if cond is not None:
        c = cond.event
        assert isinstance(c, Condensation)
        pinned_seqs = sorted(set(c.pinned))
        tail_lo = c.forgotten_to + 1
        pinned_events = _read_seqs(conn, segments, pinned_seqs)
        rows += len(pinned_events)
        tail_events = _read_messages(conn, segments, tail_lo, seq)
        rows += len(tail_events)
        wanted = pinned_events + tail_events
        ranges = _ranges([e.seq for e in pinned_events]) + [(tail_lo, seq)]
    else:
        tail_events = _read_messages(conn, segments, 1, seq)
        rows += len(tail_events)
        wanted = tail_events
        pinned_seqs = _default_pins(tail_events, options)
        ranges = [(1, seq)]

    part_info, n = _read_parts(conn, segments, ranges, seq)
    rows += n
    pinned_set = set(pinned_seqs)
    placeholder_cache: dict[str, int] = {}
    prunes: set[int] = set()
    for stored in wanted:
        info = part_info.get(stored.seq, {})
        ptoks = [info[i][0] if i in info else 0 for i in range(len(stored.event.parts))]  # type: ignore[union-attr]
        item = ViewItem(stored=stored, part_tokens=ptoks, pinned=stored.seq in pinned_set)
        tokens = MESSAGE_OVERHEAD
        for idx, tok in enumerate(ptoks):
            compacted_by = info.get(idx, (0, None))[1]
            if compacted_by is not None:
                item.compacted[idx] = PartRef(seq=stored.seq, index=idx)
                prunes.add(compacted_by)
                text = _placeholder(options, stored.seq, idx)
                if text not in placeholder_cache:
                    placeholder_cache[text] = counter.count(text)
                tokens += placeholder_cache[text]
            else:
                tokens += tok
        item.tokens = tokens
        items.append(item)

    view = View(
        session_id=session_id,
        seq=seq,
        items=items,
        condensation=cond,
        prunes=sorted(prunes),
        options=options,
        rows_read=rows,
    )
    if cond is not None and view.summary is not None:
        summary = options.summary_prefix + view.summary
        view.summary_tokens = MESSAGE_OVERHEAD + counter.count(summary)
    interrupted = _unanswered_calls(items)
    if interrupted:
        view.extra_tokens = len(interrupted) * (
            MESSAGE_OVERHEAD + counter.count(options.interrupted)
        )
    return view


def _placeholder(options: ViewOptions, seq: int, index: int) -> str:
    if "{" in options.placeholder:
        return options.placeholder.format(seq=seq, index=index)
    return options.placeholder


def _default_pins(tail: list[StoredEvent], options: ViewOptions) -> list[int]:
    pins: list[int] = []
    want_system, want_user = options.pin_system, options.pin_first_user
    for stored in tail:
        evt = stored.event
        assert isinstance(evt, Message)
        if want_system and evt.role == "system":
            pins.append(stored.seq)
            want_system = False
        elif want_user and evt.role == "user":
            pins.append(stored.seq)
            want_user = False
        if not (want_system or want_user):
            break
    return pins


def _read_seqs(
    conn: Connection, segments: Sequence[_core.Segment], seqs: list[int]
) -> list[StoredEvent]:
    out = []
    for s in seqs:
        owner = _core.owner_of(segments, s)
        if owner is None:
            continue
        row = conn.execute(
            select(*_core._EVENT_COLS).where(events.c.session_id == owner, events.c.seq == s)
        ).first()
        if row is not None and row.kind == "message":
            out.append(_core.row_to_stored(row, owner))
    return out


def _read_messages(
    conn: Connection, segments: Sequence[_core.Segment], lo: int, hi: int
) -> list[StoredEvent]:
    out: list[StoredEvent] = []
    for seg in _core.clip(segments, lo, hi):
        q = (
            select(*_core._EVENT_COLS)
            .where(
                events.c.session_id == seg.owner,
                events.c.seq >= seg.lo,
                events.c.seq <= seg.hi,
                events.c.kind == "message",
            )
            .order_by(events.c.seq)
        )
        out.extend(_core.row_to_stored(r, seg.owner) for r in conn.execute(q))
    return out


def _ranges(seqs: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs of sorted ``seqs`` as (lo, hi) pairs."""
    out: list[tuple[int, int]] = []
    for s in sorted(set(seqs)):
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def _read_parts(
    conn: Connection,
    segments: Sequence[_core.Segment],
    ranges: list[tuple[int, int]],
    as_of: int,
) -> tuple[dict[int, dict[int, tuple[int, int | None]]], int]:
    """Token counts and effective compaction (the prune's seq, or None) per part."""
    out: dict[int, dict[int, tuple[int, int | None]]] = {}
    rows = 0
    caps = {seg.owner: seg.hi for seg in segments}
    for lo, hi in ranges:
        if lo > hi:
            continue
        for seg in _core.clip(segments, lo, hi):
            # A stamp counts when its prune is visible at as_of and, for an inherited
            # segment, was made by its owner before the fork point that caps it.
            cap = caps[seg.owner]
            limit = as_of if cap is None else min(as_of, cap)
            q = select(parts.c.seq, parts.c.idx, parts.c.token_count, parts.c.compacted_seq).where(
                parts.c.session_id == seg.owner, parts.c.seq >= seg.lo, parts.c.seq <= seg.hi
            )
            for r in conn.execute(q):
                rows += 1
                stamp = r.compacted_seq
                if stamp is not None and stamp > limit:
                    stamp = None
                out.setdefault(r.seq, {})[r.idx] = (r.token_count, stamp)
        if len(segments) > 1:
            # Compactions a fork applied to parts it inherited.
            for seg in segments[1:]:
                cap = caps[seg.owner]
                limit = as_of if cap is None else min(as_of, cap)
                q = select(
                    fork_compactions.c.seq, fork_compactions.c.idx, fork_compactions.c.compacted_seq
                ).where(
                    fork_compactions.c.session_id == seg.owner,
                    fork_compactions.c.seq >= lo,
                    fork_compactions.c.seq <= hi,
                    fork_compactions.c.compacted_seq <= limit,
                )
                for r in conn.execute(q):
                    rows += 1
                    cur = out.get(r.seq, {}).get(r.idx)
                    if cur is not None and cur[1] is None:
                        out[r.seq][r.idx] = (cur[0], r.compacted_seq)
    return out, rows


# --------------------------------------------------------------------------- rendering


def _unanswered_calls(items: Sequence[ViewItem]) -> list[str]:
    answered = {p.tool_call_id for i in items for p in i.message.parts if p.type == "tool_result"}
    return [
        p.id
        for i in items
        if i.message.role == "assistant"
        for p in i.message.parts
        if p.type == "tool_call" and p.id not in answered
    ]


def _shown(item: ViewItem, options: ViewOptions) -> Message:
    msg = item.message
    if not item.compacted:
        return msg
    new_parts = list(msg.parts)
    for idx, ref in item.compacted.items():
        part = new_parts[idx]
        assert isinstance(part, ToolResultPart)
        new_parts[idx] = part.model_copy(
            update={"output": _placeholder(options, ref.seq, ref.index)}
        )
    return msg.model_copy(update={"parts": new_parts})


def _render(view: View) -> list[dict[str, Any]]:
    from .interop import to_openai

    options = view.options
    extra = options.keep_extra
    msgs = [(_shown(i, options), i.pinned) for i in view.items]
    # Pair results with calls: every call's result goes right after its call group, a call
    # with no result gets an explicit interrupted result, a result with no call is left
    # out (it stays in the log).
    # Queues per id: some agents reuse call ids within one history, so pairing is positional.
    results: dict[str, list[tuple[ToolResultPart, Message]]] = {}
    for m, _ in msgs:
        for p in m.parts:
            if isinstance(p, ToolResultPart):
                results.setdefault(p.tool_call_id, []).append((p, m))

    out: list[dict[str, Any]] = []
    summary = view.summary
    summary_done = summary is None
    for m, pinned in msgs:
        if not summary_done and not pinned:
            out.append({"role": options.summary_role, "content": options.summary_prefix + summary})
            summary_done = True
        if m.role == "tool" or (m.tool_results and m.role != "assistant"):
            rest = [p for p in m.parts if not isinstance(p, ToolResultPart)]
            if rest:
                out.extend(to_openai(m.model_copy(update={"parts": rest}), extra=extra))
            continue
        own_results = [p for p in m.parts if isinstance(p, ToolResultPart)]
        if own_results:
            m = m.model_copy(
                update={"parts": [p for p in m.parts if not isinstance(p, ToolResultPart)]}
            )
        out.extend(to_openai(m, extra=extra))
        if m.role == "assistant":
            for call in m.tool_calls:
                queue = results.get(call.id)
                found = queue.pop(0) if queue else None
                if found is None:
                    res = ToolResultPart(
                        tool_call_id=call.id,
                        name=call.name,
                        output=options.interrupted,
                        is_error=True,
                        state="interrupted",
                    )
                    out.extend(to_openai(Message(role="tool", parts=[res]), extra=extra))
                else:
                    res, carrier = found
                    out.extend(to_openai(carrier.model_copy(update={"parts": [res]}), extra=extra))
    if not summary_done:
        out.append({"role": options.summary_role, "content": options.summary_prefix + summary})
    return out


# --------------------------------------------------------------------------- audit


def _usage_from(response: Any) -> Usage | None:
    usage = _get(response, "usage")
    if usage is None:
        return None
    ptd = _get(usage, "prompt_tokens_details")
    ctd = _get(usage, "completion_tokens_details")
    return Usage(
        prompt_tokens=_get(usage, "prompt_tokens"),
        completion_tokens=_get(usage, "completion_tokens"),
        cached_tokens=_get(ptd, "cached_tokens") if ptd is not None else None,
        reasoning_tokens=_get(ctd, "reasoning_tokens") if ctd is not None else None,
    )


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def response_cost(response: Any, model: str | None = None) -> float | None:
    """The call's cost in USD from litellm, or ``None`` when it cannot be priced."""
    try:
        from .tokens import import_litellm

        litellm = import_litellm()
        cost = litellm.completion_cost(completion_response=response, model=model)
    except Exception:
        return None
    return float(cost) if cost else (0.0 if cost == 0 else None)


def record_llm_call(
    store: EventStore,
    session_id: str,
    view: View,
    response: Any = None,
    *,
    model: str | None = None,
    latency_ms: float | None = None,
    error: str | None = None,
    append_response: bool = True,
    metadata: dict[str, Any] | None = None,
    expected_seq: int | None = None,
) -> int:
    """Record that ``view`` was sent to a model, and (by default) the reply.

    Appends an ``llm_call`` event carrying the view's seq and fingerprint, the usage and the
    cost (``None`` when litellm cannot price the model; pricing never fails the write),
    followed by the assistant message from ``response`` when ``append_response`` is true.
    Both go in one append.

    Returns:
        The seq of the ``llm_call`` event.
    """
    from .interop import from_openai

    model_name = model or _get(response, "model") or "unknown"
    messages = view.to_messages()
    call = LLMCall(
        model=model_name,
        view_seq=view.seq,
        fingerprint=fingerprint(messages),
        message_count=len(messages),
        usage=_usage_from(response),
        cost=response_cost(response, model) if response is not None else None,
        latency_ms=latency_ms,
        response_id=_get(response, "id"),
        error=error,
        render_options=view.options.model_dump(exclude_defaults=True),
        metadata=metadata,
    )
    batch: list[Any] = [call]
    if append_response and response is not None:
        choices = _get(response, "choices") or []
        if choices:
            raw = _get(choices[0], "message")
            data = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
            data = {k: v for k, v in data.items() if v is not None or k == "content"}
            msg = from_openai(data)
            batch.append(msg.model_copy(update={"model": model_name}))
    return store.append(session_id, batch, expected_seq=expected_seq)[0]


def verify_llm_calls(store: EventStore, session_id: str, report: VerifyReport) -> None:
    """Rebuild every recorded view and compare fingerprints; problems go to ``report``."""
    for stored in store.read(session_id, kinds=["llm_call"]):
        call = stored.event
        assert isinstance(call, LLMCall)
        report.llm_calls += 1
        try:
            options = ViewOptions(**call.render_options)
            view = store.view(session_id, as_of=call.view_seq, options=options)
        except (InvalidEventError, NotFoundError, ValueError) as exc:
            report.problems.append(f"seq {stored.seq}: cannot rebuild view: {exc}")
            continue
        got = view.fingerprint()
        if got != call.fingerprint:
            report.problems.append(
                f"seq {stored.seq}: view at seq {call.view_seq} renders to {got[:12]}…, "
                f"but {call.fingerprint[:12]}… was recorded"
            )


def calibrated_tokens(store: EventStore, view: View) -> int:
    """The view's tokens, anchored on the provider's count when one is available.

    When the newest ``llm_call`` at or before the view reported real prompt tokens and the
    view has not been reshaped since (no newer condensation or prune), the estimate is that
    number plus the stored counts of what was appended after the call's view.
    """
    last: LLMCall | None = None
    for stored in store.read(
        view.session_id, from_seq=_calibration_floor(view), to_seq=view.seq, kinds=["llm_call"]
    ):
        evt = stored.event
        assert isinstance(evt, LLMCall)
        if evt.usage is not None and evt.usage.prompt_tokens:
            last = evt
    if last is None or last.usage is None or last.usage.prompt_tokens is None:
        return view.tokens
    newer = sum(i.tokens for i in view.items if i.seq > last.view_seq and not i.pinned)
    return last.usage.prompt_tokens + newer


def _calibration_floor(view: View) -> int:
    floor = view.condensation.seq + 1 if view.condensation is not None else 1
    if view.prunes:
        floor = max(floor, max(view.prunes) + 1)
    return floor


def original_part(conn: Connection, tenant: str, session_id: str, ref: PartRef) -> Any:
    """The full stored part behind ``ref`` (for example a pruned tool result)."""
    segments = _core.lineage(conn, tenant, session_id)
    owner = _core.owner_of(segments, ref.seq)
    row = None
    if owner is not None:
        row = conn.execute(
            select(*_core._EVENT_COLS).where(events.c.session_id == owner, events.c.seq == ref.seq)
        ).first()
    if row is None:
        raise NotFoundError(f"no event at seq {ref.seq} in session {session_id}")
    stored = _core.row_to_stored(row, owner)  # type: ignore[arg-type]
    evt = stored.event
    if not isinstance(evt, Message) or not 0 <= ref.index < len(evt.parts):
        raise NotFoundError(f"no part {ref.index} at seq {ref.seq} in session {session_id}")
    return evt.parts[ref.index]
