"""Context views: what the model sees, assembled from stored rows. Pure: no SQL, no store.

A view at ``as_of`` is the pinned head, the summary of the latest condensation at or before
``as_of``, and the message events after the range that condensation forgot. Prunes stamp
parts with the seq that compacted them, so a prune made after ``as_of`` is invisible to the
view at ``as_of``; that is what makes time travel exact.

The statement layer reads a :class:`ViewRows` (see :func:`eventstore._sql.view_rows.view_rows`: one
probe for the condensation, the pinned events, one range read of the tail), and
:func:`assemble` turns it into a :class:`View`. :func:`apply_event` predicts the view
after a prune or condensation without reading anything, which is how a condenser pipeline
plans several steps on one read and writes them in one append.

Compacted tool results have one rendering everywhere: :func:`placeholder_text`. The same
text is counted for the view's tokens, estimated by the pruner, and shown by the CLI; and
a message with a compacted part never carries its stored ``extra`` fields (which may hold
the verbatim original), whatever the options say.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, model_validator

from .codec import canonical_json, copy_json, implied_part_tokens, sole_text
from .events import (
    Condensation,
    Custom,
    FilePart,
    LLMCall,
    Message,
    Part,
    PartRef,
    ProviderPart,
    Prune,
    ToolCallPart,
    ToolResultPart,
    Usage,
    empty_assistant,
)
from .media import is_accepted
from .paths import path_spans
from .records import StoredEvent
from .tokens import MESSAGE_OVERHEAD, TokenCounter, part_text

__all__ = [
    "EMPTY_REPLY",
    "View",
    "ViewItem",
    "ViewOptions",
    "ViewRows",
    "PartState",
    "assemble",
    "apply_event",
    "render",
    "placeholder_text",
    "truncated_text",
    "truncated_arguments",
    "cut_text",
    "shown_text",
    "media_stand_in",
    "fingerprint",
    "llm_call_events",
    "calibrate",
    "calibration_floor",
    "DEFAULT_PLACEHOLDER",
    "DEFAULT_INTERRUPTED",
    "DEFAULT_SUMMARY_PREFIX",
    "RECALL_PLACEHOLDER",
    "RECALL_SUMMARY_PREFIX",
    "RENDER_VERSION",
    "TASK_MARK",
    "is_marked_task",
]


# --------------------------------------------------------------------------- options
# How a view is rendered: its options, and the text shown for a compacted part or an
# attachment the model does not take. Compacted tool results have one rendering
# everywhere: placeholder_text (or, for a prune with keep_chars, truncated_text). The same
# text is counted for the view's tokens, estimated by the condensers, and shown by the CLI.

DEFAULT_PLACEHOLDER = "[Old tool result content cleared]"
DEFAULT_INTERRUPTED = "[Tool call interrupted: no result was recorded]"
DEFAULT_SUMMARY_PREFIX = "Summary of the earlier conversation (older events were condensed):\n\n"
RECALL_PLACEHOLDER = '[Old tool result content cleared; recall(ref="{seq}:{index}") returns it]'
"""The placeholder from render version 3 on: it names the reference the ``recall`` tool
takes (:mod:`eventstore.tools`)."""
RECALL_SUMMARY_PREFIX = (
    "Summary of the earlier conversation (older events were condensed; "
    "search_history(query) finds them and recall(ref) returns one in full):\n\n"
)
"""The summary prefix from render version 3 on: it says how to get the condensed events
back."""
RENDER_VERSION = 4
"""The current rendering (see :attr:`ViewOptions.render_version`)."""


class ViewOptions(BaseModel):
    """How a view is assembled and rendered. Recorded with each ``llm_call`` so the exact
    messages can be rebuilt later."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    placeholder: str = RECALL_PLACEHOLDER
    """Text shown instead of a compacted tool result. ``{seq}`` and ``{index}`` are filled
    with the original's reference; any other brace is literal text."""
    interrupted: str = DEFAULT_INTERRUPTED
    """Text of the synthetic result rendered for a call that never got one."""
    summary_role: str = "user"
    """Role of the message that carries the condensation summary."""
    summary_prefix: str = RECALL_SUMMARY_PREFIX
    """Text placed before the summary."""
    pin_system: bool = True
    """Keep the first system message verbatim (used when nothing was condensed yet)."""
    pin_first_user: bool = True
    """Keep the user messages before the first assistant message verbatim (the task and
    anything shown before it; used when nothing was condensed yet)."""
    render_version: int = RENDER_VERSION
    """How messages are rendered. 4: the results of parallel tool calls follow their call
    group in the order they were appended (before: in call order); 3: the default
    placeholder and summary prefix name how to get the original back
    (:data:`RECALL_PLACEHOLDER`, :data:`RECALL_SUMMARY_PREFIX`);
    2: a message that only calls tools goes out with ``content: null``, as providers send
    it; 1: with ``""`` (the first release). Recorded with every ``llm_call``; a call
    recorded before the field existed rebuilds with 1 (see :meth:`recorded`)."""
    accepts: tuple[str, ...] | None = None
    """Media types the model takes (``image/*``, ``application/pdf``, ``audio/*``); any
    other attachment of those kinds goes out as a one-line text stand-in instead of being
    dropped or rejected. ``None`` sends every attachment. :meth:`for_model` fills it from
    litellm's model map."""
    provider: str | None = None
    """Whose opaque items (:class:`~eventstore.events.ProviderPart`) go out, as content
    blocks exactly as stored: the provider the view is sent to. Every other provider's
    items are left out, and so is a message holding nothing else. :meth:`for_model` fills
    it from litellm's model map."""
    keep_extra: bool = False

    """Also send message fields that have no typed slot (``Message.extra``, kept so imports
    round-trip exactly). Off by default: providers may reject keys such as a trajectory's
    private ``thought`` or ``agent`` fields. Never applied to a message with a compacted
    part: its extra fields may hold the original content."""

    @model_validator(mode="before")
    @classmethod
    def _version_defaults(cls, data: Any) -> Any:
        # Version 3 changed two defaults. An ``llm_call`` records only options that differ
        # from the defaults, so a call recorded under an earlier version rebuilds with the
        # defaults of its own version.
        if isinstance(data, dict) and data.get("render_version", RENDER_VERSION) < 3:
            data = {
                "placeholder": DEFAULT_PLACEHOLDER,
                "summary_prefix": DEFAULT_SUMMARY_PREFIX,
                **data,
            }
        return data

    @classmethod
    def for_model(cls, model: str, **options: Any) -> ViewOptions:
        """Options for ``model``: :attr:`accepts` from its ``supports_vision`` /
        ``supports_pdf_input`` / ``supports_audio_input`` flags in litellm's model map
        (unknown models: everything is sent), and :attr:`provider` from the same map (or
        the ``provider/`` prefix of the name)."""
        from .media import accepted_types
        from .models import ModelInfo

        found = ModelInfo.find(model)
        provider = found.provider if found is not None else None
        if provider is None and "/" in model:
            provider = model.split("/", 1)[0]  # litellm routes "provider/model" by its prefix
        return cls(**{"accepts": accepted_types(model), "provider": provider, **options})

    @classmethod
    def recorded(cls, render_options: dict[str, Any]) -> ViewOptions:
        """The options an ``llm_call`` recorded (``render_options``), as they were when the
        call was made: a call that names no ``render_version`` predates it (version 1)."""
        return cls(**{"render_version": 1, **render_options})


def placeholder_text(options: ViewOptions, ref: PartRef) -> str:
    """The text shown (and counted) instead of the compacted part ``ref``."""
    text = options.placeholder
    if "{" in text:
        # Plain replacement, not str.format: a template may contain other braces.
        text = text.replace("{seq}", str(ref.seq)).replace("{index}", str(ref.index))
    return text


def truncated_text(
    ref: PartRef, text: str, keep: int, what: str = "output", *, names: bool = False
) -> str:
    """The text shown for part ``ref`` truncated by a prune with ``keep_chars=keep``: its
    first two thirds and last third of ``keep`` characters around a line that says how
    much was left out and how to get the whole ``what`` back (with ``names``, also the
    files the omitted part names, :data:`MAX_NAMED` at most)."""
    if len(text) <= keep:
        return text
    head = keep * 2 // 3
    tail = keep - head
    rest = text[len(text) - tail :]
    named = ""
    if names:
        # Files the omitted part names, whole (a name the cut splits counts), that the
        # kept start and end do not show.
        end = len(text) - tail
        found = dict.fromkeys(p for a, b, p in path_spans(text) if b > head and a < end)
        shown = text[:head] + "\n" + rest
        left = [p for p in found if p not in shown]
        if left:
            more = len(left) - MAX_NAMED
            named = ", naming " + ", ".join(left[:MAX_NAMED])
            named += f" and {more:,} more" if more > 0 else ""
    mark = (
        f"[... {len(text) - keep:,} of {len(text):,} characters omitted{named}; "
        f'recall(ref="{ref.seq}:{ref.index}") returns the whole {what} ...]'
    )
    return f"{text[:head]}\n{mark}\n{rest}"


MAX_NAMED = 8
"""Most files the marker of a cut tool call names (the rest are counted)."""


def shared_cap(sizes: Sequence[int], total: int) -> int:
    """The largest size each of ``sizes`` may keep so that together they take at most
    ``total``: sizes under an equal share keep what they have, and what they leave is
    shared among the larger ones (``total`` when they fit as they are)."""
    left, n = total, len(sizes)
    for size in sorted(sizes):
        if size * n > left:
            return left // n
        left -= size
        n -= 1
    return total


MIN_KEPT_VALUE = 32
"""Fewest characters a string value of cut tool-call arguments keeps."""


def truncated_arguments(ref: PartRef, arguments: str, keep: int) -> str:
    """Tool-call arguments cut to about ``keep`` characters as JSON that still parses:
    the long string values (a file's contents, a patch) shown as their first two thirds
    and last third around a line that says how to get the whole call back and which files
    the omitted part names, the short ones (a path, a flag) whole. Arguments that are not
    a JSON object stay as they are (a provider would refuse them cut)."""
    if len(arguments) <= keep:
        return arguments
    return _cut_arguments(ref.seq, ref.index, arguments, keep)


@functools.lru_cache(maxsize=64)
def _cut_arguments(seq: int, index: int, arguments: str, keep: int) -> str:
    # Cached: every view build that shows the cut call renders it again, and parsing a
    # large patch and finding the files it names costs milliseconds.
    ref = PartRef(seq=seq, index=index)
    try:
        obj = json.loads(arguments)
    except ValueError:
        return arguments
    if not isinstance(obj, dict):
        return arguments
    sizes: list[int] = []

    def collect(value: Any) -> None:
        if isinstance(value, str):
            sizes.append(len(value))
        elif isinstance(value, dict):
            for v in value.values():
                collect(v)
        elif isinstance(value, list):
            for v in value:
                collect(v)

    collect(obj)
    overhead = len(arguments) - sum(sizes)
    cap = max(shared_cap(sizes, max(keep - overhead, 0)), MIN_KEPT_VALUE)
    cut = False

    def shorten(value: Any) -> Any:
        nonlocal cut
        if isinstance(value, str):
            short = truncated_text(ref, value, cap, "call", names=True)
            if len(short) < len(value):
                cut = True
                return short
            return value
        if isinstance(value, dict):
            return {k: shorten(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shorten(v) for v in value]
        return value

    shown = shorten(obj)
    return json.dumps(shown, ensure_ascii=False) if cut else arguments


def cut_text(ref: PartRef, part: Any, keep: int) -> str:
    """The text part ``ref`` counts as when a prune with ``keep_chars=keep`` truncates it
    (as :func:`~eventstore.tokens.part_text` counts it whole): a tool call's name and its
    arguments as :func:`truncated_arguments`, any other part's text as
    :func:`truncated_text`."""
    if isinstance(part, ToolCallPart):
        return f"{part.name} {truncated_arguments(ref, part.arguments, keep)}"
    return truncated_text(ref, part_text(part), keep)


def shown_text(options: ViewOptions, ref: PartRef, part: Any, keep: int | None) -> str:
    """What a compacted part renders as: its truncation, or the placeholder (a tool call
    is never replaced whole: it stays beside its result)."""
    if isinstance(part, ToolCallPart):
        return part.arguments if keep is None else truncated_arguments(ref, part.arguments, keep)
    if keep is not None:
        return truncated_text(ref, part_text(part), keep)
    return placeholder_text(options, ref)


def _counted(options: ViewOptions, ref: PartRef, part: Any, keep: int | None) -> str:
    """The text a compacted part counts as: its cut (:func:`cut_text`), a tool call whole
    without one (it is never replaced), else the placeholder."""
    if keep is not None:
        return cut_text(ref, part, keep)
    return part_text(part) if isinstance(part, ToolCallPart) else placeholder_text(options, ref)


_NONE_REFUSED: frozenset[int] = frozenset()


def _refused_media(evt: Any, options: ViewOptions) -> frozenset[int] | set[int]:
    """Indexes of the message's attachments the model does not accept (``options.accepts``)."""
    if options.accepts is None or not isinstance(evt, Message):
        return _NONE_REFUSED
    return {
        i
        for i, p in enumerate(evt.parts)
        if isinstance(p, FilePart) and not is_accepted(p.media_type, options.accepts)
    }


def _unsent_items(evt: Any, options: ViewOptions) -> frozenset[int] | set[int]:
    """Indexes of the message's provider items the rendering leaves out (another
    provider's, or any in a tool message): they take no room in the view."""
    if not isinstance(evt, Message):
        return _NONE_REFUSED
    unsent: frozenset[int] | set[int] = _NONE_REFUSED
    for i, p in enumerate(evt.parts):  # a loop, not a set per message: few have any
        if isinstance(p, ProviderPart) and (
            evt.role == "tool" or options.provider is None or p.provider != options.provider
        ):
            unsent = {*unsent, i}
    return unsent


def media_stand_in(part: Any) -> str:
    """The text sent instead of an attachment the model does not accept."""
    what = part.name or part.media_type
    size = len(part.data) if part.data is not None else None
    bytes_ = f", {size:,} bytes" if size is not None else ""
    return (
        f"[attachment {what} ({part.media_type}{bytes_}) not shown: the model does not accept it]"
    )


class PartState(NamedTuple):
    """What the ``parts`` table says about one part at the view's seq."""

    tokens: int
    """Stored token count (:data:`IMPLIED_TOKENS` for a part that has no row)."""
    compacted_seq: int | None
    """Seq of the prune that compacted it, if that prune is visible at the view's seq."""


#: The token count of a state made without a ``parts`` row (a fork's compaction of a
#: :func:`~eventstore.codec.sole_text` message's part): the event's count says it.
IMPLIED_TOKENS = -1

#: A part the ``parts`` table has no row for.
_NO_STATE = PartState(0, None)


@dataclass(slots=True)
class ViewRows:
    """The stored rows a view is assembled from (read by the statement layer)."""

    session_id: str
    seq: int
    """The view's seq (``as_of``, or the head)."""
    condensation: StoredEvent | None
    """The latest condensation at or before ``seq``."""
    pinned: list[StoredEvent]
    """Message events the condensation pins (empty without a condensation)."""
    tail: list[StoredEvent]
    """Message events after the forgotten range (all of them without a condensation)."""
    parts: dict[int, dict[int, PartState]]
    """Part state by seq and index, for the pinned and tail events."""
    control: list[StoredEvent]
    """Condensation requests after the condensation, the custom events after the first,
    the newest ``condenser.circuit*`` custom event and the newest ``llm_call`` after the
    condensation."""
    rows_read: int = 0
    """Rows fetched."""
    truncations: dict[int, int] = field(default_factory=dict)
    """``keep_chars`` of the truncating prunes that compacted parts of these rows, by the
    prune's seq."""
    placeholders: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """The prunes without ``keep_chars`` in the tail's range, by seq, with their targets as
    (seq, index): a part a truncation compacted shows the placeholder from the first of
    them that targets it (see :func:`superseding`)."""


def superseding(rows: ViewRows) -> dict[tuple[int, int], int]:
    """The parts whose truncation a later placeholder prune replaced, with that prune's seq.

    A part's ``parts`` row is stamped once, by the first prune that compacts it. When that
    prune only truncated the part (``keep_chars``), a later prune without ``keep_chars``
    may still hide it whole: its own event says so, and the row keeps the first stamp. So
    the view shows a truncated part as a placeholder from the first such prune on (both
    prunes at or before the view's seq). Prunes of a part come after it, so those of the
    tail's parts are in the tail's range, and reading them keeps the view O(tail).
    """
    out: dict[tuple[int, int], int] = {}
    if not rows.truncations or not rows.placeholders:
        return out
    for prune_seq in sorted(rows.placeholders):
        if prune_seq > rows.seq:
            continue
        for seq, idx in rows.placeholders[prune_seq]:
            state = rows.parts.get(seq, {}).get(idx)
            if (
                state is not None
                and state.compacted_seq is not None
                and state.compacted_seq in rows.truncations
                and state.compacted_seq < prune_seq
                and (seq, idx) not in out
            ):
                out[(seq, idx)] = prune_seq
    return out


@dataclass(slots=True)
class ViewItem:
    """One message event in a view."""

    stored: StoredEvent
    """The stored event."""
    part_tokens: list[int]
    """Stored token count of each part."""
    compacted: dict[int, PartRef] = field(default_factory=dict)
    """Parts shown as a placeholder, by index, with the reference to the original."""
    compacted_by: dict[int, int] = field(default_factory=dict)
    """Seq of the prune that compacted each part in :attr:`compacted`, by index."""
    kept: dict[int, int] = field(default_factory=dict)
    """Compacted parts shown truncated instead (head and tail, ``keep_chars`` in all), by
    index."""
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
        if not isinstance(evt, Message):  # pragma: no cover - views hold messages only
            raise TypeError(f"seq {self.stored.seq} is a {evt.kind}, not a message")
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
    control: list[StoredEvent] = field(default_factory=list)
    """Condensation requests made since the view's condensation (with the custom events
    that follow the first one, where a policy records its answers), the newest
    ``condenser.circuit*`` custom event since the condensation (a policy's breaker state),
    and the newest ``llm_call`` since it (its reported usage measures the view: see
    :meth:`measured_tokens`)."""
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
        if self.condensation is None or not isinstance(self.condensation.event, Condensation):
            return None
        return self.condensation.event.summary

    def measured_tokens(self) -> int:
        """The view's size by the provider's count where the session recorded one: the
        newest model call's prompt tokens (when the view has not been reshaped since) plus
        the stored estimates of what was appended after it; else :attr:`tokens`."""
        floor = calibration_floor(self)
        calls = [e.event for e in self.control if isinstance(e.event, LLMCall) and e.seq >= floor]
        return calibrate(self, calls)

    @property
    def tokens(self) -> int:
        """Estimated tokens of the rendered view: a sum of stored counts."""
        return sum(i.tokens for i in self.items) + self.summary_tokens + self.extra_tokens

    def to_messages(self) -> list[dict[str, Any]]:
        """The view as litellm/OpenAI chat messages (a fresh copy each call)."""
        if self._messages is None:
            self._messages = _render(self)
        try:
            return copy_json(self._messages)
        except TypeError:  # data built in code (a tuple in ``extra``): what JSON makes of it
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


class _Counts:
    """Token counts of synthetic texts, computed once per view."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._cache: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        n = self._cache.get(text)
        if n is None:
            n = self._cache[text] = self.counter.count(text)
        return n


def assemble(rows: ViewRows, options: ViewOptions | None, counter: TokenCounter) -> View:
    """Build the :class:`View` described by ``rows``."""
    options = options or ViewOptions()
    cond = rows.condensation
    if cond is not None and isinstance(cond.event, Condensation):
        pinned_seqs = {e.seq for e in rows.pinned}
        wanted = rows.pinned + rows.tail
    else:
        pinned_seqs = set(_default_pins(rows.tail, options))
        wanted = rows.tail
    counts = _Counts(counter)
    items: list[ViewItem] = []
    prunes: set[int] = set()
    no_rows: dict[int, PartState] = {}
    replaced = superseding(rows)
    by_seq = rows.parts
    for stored in wanted:
        evt = stored.event
        info = by_seq.get(stored.seq, no_rows)
        n_parts = len(evt.parts) if isinstance(evt, Message) else 0
        states = [info.get(i, _NO_STATE) for i in range(n_parts)]
        if n_parts == 1 and (0 not in info or states[0].tokens == IMPLIED_TOKENS):
            if sole_text(evt):  # no row: the event's count is the part's
                compacted = info[0].compacted_seq if 0 in info else None
                states = [PartState(implied_part_tokens(stored.token_count), compacted)]
        if replaced:
            states = [
                PartState(st.tokens, replaced.get((stored.seq, i), st.compacted_seq))
                for i, st in enumerate(states)
            ]
        unsent = _unsent_items(evt, options)
        part_tokens = (
            [0 if i in unsent else s.tokens for i, s in enumerate(states)]
            if unsent
            else [s.tokens for s in states]
        )
        item = ViewItem(stored=stored, part_tokens=part_tokens, pinned=stored.seq in pinned_seqs)
        # (A message of another provider's items alone is not sent at all.)
        tokens = MESSAGE_OVERHEAD if len(unsent) < n_parts or not n_parts else 0
        if options.accepts is None and not [s for s in states if s.compacted_seq is not None]:
            # Nothing shown in place of a part: the stored counts are the item's tokens.
            item.tokens = tokens + sum(part_tokens)
            items.append(item)
            continue
        refused = _refused_media(stored.event, options)
        for idx, state in enumerate(states):
            if state.compacted_seq is not None:
                ref = PartRef(seq=stored.seq, index=idx)
                item.compacted[idx] = ref
                item.compacted_by[idx] = state.compacted_seq
                prunes.add(state.compacted_seq)
                keep = rows.truncations.get(state.compacted_seq)
                if keep is not None:
                    item.kept[idx] = keep
                part = stored.event.parts[idx]  # type: ignore[union-attr]
                tokens += counts(_counted(options, ref, part, keep))
            elif idx in refused:
                tokens += counts(media_stand_in(stored.event.parts[idx]))  # type: ignore[union-attr]
            else:
                tokens += part_tokens[idx]
        item.tokens = tokens
        items.append(item)
    view = View(
        session_id=rows.session_id,
        seq=rows.seq,
        items=items,
        condensation=cond,
        prunes=sorted(prunes),
        options=options,
        rows_read=rows.rows_read,
        control=list(rows.control),
    )
    _measure_synthetic(view, counts)
    return view


def _measure_synthetic(view: View, counts: _Counts) -> None:
    options = view.options
    summary = view.summary
    view.summary_tokens = (
        MESSAGE_OVERHEAD + counts(options.summary_prefix + summary) if summary is not None else 0
    )
    interrupted = _unanswered_calls(view.items)
    view.extra_tokens = len(interrupted) * (MESSAGE_OVERHEAD + counts(options.interrupted))


TASK_MARK = "task"
"""Key under ``Message.provider_metadata["eventstore"]`` by which an importer marks the
message that states the task (pinned wherever it appears)."""


def is_marked_task(msg: Message) -> bool:
    """Whether an importer marked ``msg`` as the task statement."""
    meta = (msg.provider_metadata or {}).get("eventstore")
    return isinstance(meta, dict) and meta.get(TASK_MARK) is True


def _default_pins(tail: list[StoredEvent], options: ViewOptions) -> list[int]:
    """The head kept verbatim before anything is condensed: the first system message,
    every user message before the first assistant message (a demonstration or template
    may come before the task), and any message marked as the task."""
    pins: list[int] = []
    want_system = options.pin_system
    head = options.pin_first_user
    for stored in tail:
        evt = stored.event
        if not isinstance(evt, Message):
            continue
        if want_system and evt.role == "system":
            pins.append(stored.seq)
            want_system = False
        elif evt.role == "assistant":
            head = False
        elif (head and evt.role == "user" and not evt.tool_results) or is_marked_task(evt):
            pins.append(stored.seq)
    return pins


def apply_event(view: View, event: Prune | Condensation, counter: TokenCounter) -> View:
    """The view as it will be once ``event`` is appended at seq ``view.seq + 1``.

    Pure prediction, equal to what the store builds after the append (a test holds it to
    that). Raises :class:`ValueError` for an event this view cannot predict (a
    condensation pinning an event the view does not show); read the view again instead.
    """
    seq = view.seq + 1
    counts = _Counts(counter)
    options = view.options
    if isinstance(event, Prune):
        targets = {(r.seq, r.index) for r in event.targets}
        items = []
        prunes = set(view.prunes)
        whole = event.keep_chars is None  # a placeholder also replaces a truncation
        for item in view.items:
            hit = [
                i
                for s, i in targets
                if s == item.seq and (i not in item.compacted or (whole and i in item.kept))
            ]
            hit = [i for i in hit if 0 <= i < len(item.part_tokens)]
            if not hit:
                items.append(item)
                continue
            new = replace(
                item,
                compacted=dict(item.compacted),
                compacted_by=dict(item.compacted_by),
                kept=dict(item.kept),
            )
            for idx in hit:
                ref = PartRef(seq=item.seq, index=idx)
                part = item.message.parts[idx]
                before = (
                    counts(_counted(options, ref, part, item.kept[idx]))
                    if idx in item.kept
                    else item.part_tokens[idx]
                )
                new.compacted[idx] = ref
                new.compacted_by[idx] = seq
                new.kept.pop(idx, None)
                if event.keep_chars is not None:
                    new.kept[idx] = event.keep_chars
                new.tokens += counts(_counted(options, ref, part, event.keep_chars)) - before
            prunes.add(seq)
            items.append(new)
        return replace(view, seq=seq, items=items, prunes=sorted(prunes), _messages=None)
    pins = set(event.pinned)
    shown = {i.seq for i in view.items}
    if any(p <= view.seq and p not in shown for p in pins):
        raise ValueError("the condensation pins an event this view does not show")
    items = [
        replace(i, pinned=i.seq in pins)
        for i in view.items
        if i.seq in pins or i.seq > event.forgotten_to
    ]
    stored = StoredEvent(
        session_id=view.session_id,
        seq=seq,
        hash="",
        token_count=event.summary_tokens or 0,
        event=event,
    )
    kept_prunes = {by for i in items for by in i.compacted_by.values()}
    new_view = replace(
        view,
        seq=seq,
        items=items,
        condensation=stored,
        prunes=sorted(kept_prunes),
        control=[],
        _messages=None,
    )
    _measure_synthetic(new_view, counts)
    return new_view


def _unanswered_calls(items: Sequence[ViewItem]) -> list[str]:
    """Calls the rendering gives an interrupted result: the k-th call with an id takes
    the k-th result with that id (ids may be reused within one history)."""
    results: dict[str, int] = {}
    messages = [item.message for item in items]
    for msg in messages:
        for p in msg.parts:
            if p.type == "tool_result":
                results[p.tool_call_id] = results.get(p.tool_call_id, 0) + 1
    out: list[str] = []
    for msg in messages:
        if msg.role != "assistant":
            continue
        for p in msg.parts:
            if p.type == "tool_call":
                left = results.get(p.id, 0)
                if left:
                    results[p.id] = left - 1
                else:
                    out.append(p.id)
    return out


# --------------------------------------------------------------------------- rendering


def render(view: View) -> list[dict[str, Any]]:
    """The chat messages ``view`` renders to (what :meth:`View.to_messages` returns)."""
    return _render(view)


def _render(view: View) -> list[dict[str, Any]]:
    from .chat import to_openai

    options = view.options
    null = options.render_version >= 2

    def emit(
        msg: Message, compacted: dict[int, PartRef], kept: dict[int, int] | None = None
    ) -> list[dict[str, Any]]:
        refused = _NONE_REFUSED if options.accepts is None else _refused_media(msg, options)
        parts = msg.parts
        if (
            parts
            and isinstance(parts[0], ProviderPart)
            and all(isinstance(p, ProviderPart) and p.provider != options.provider for p in parts)
        ):
            return []  # only another provider's items: nothing this model may read
        if not compacted and not refused:
            return to_openai(
                msg, extra=options.keep_extra, null_content=null, provider=options.provider
            )

        def placeholder_for(index: int, part: Part) -> str | None:
            ref = compacted.get(index)
            if ref is not None:
                return shown_text(options, ref, part, (kept or {}).get(index))
            return media_stand_in(part) if index in refused else None

        return to_openai(
            msg,
            placeholder_for=placeholder_for,
            extra=False,
            null_content=null,
            provider=options.provider,
        )

    # Pair results with calls: every call's result goes right after its call group, a call
    # with no result gets an explicit interrupted result, a result with no call is left
    # out (it stays in the log). From version 4 a group's results go in the order they were
    # appended (parallel calls may finish in any order: the newest result stays last, as
    # the model saw it arrive), its interrupted results first; before, in call order.
    # Queues per id: some agents reuse call ids within one history, so pairing is positional.
    arrival = options.render_version >= 4
    results: dict[str, list[tuple[Message, dict[int, PartRef], dict[int, int], int, int]]] = {}
    carriers: set[int] = set()  # positions of the items that hold a tool result
    messages = [item.message for item in view.items]
    for pos, item in enumerate(view.items):
        msg = messages[pos]
        for idx, p in enumerate(msg.parts):
            if isinstance(p, ToolResultPart):
                carriers.add(pos)
                ref = item.compacted.get(idx)
                # A result carried by a non-tool message renders as a plain tool message
                # (its extra fields describe the carrier, not the result).
                single = (
                    Message(role="tool", parts=[p])
                    if msg.role != "tool"
                    else msg  # renders as a copy holding only this part would
                    if len(msg.parts) == 1
                    else msg.model_copy(update={"parts": [p]})
                )
                keep = item.kept.get(idx)
                results.setdefault(p.tool_call_id, []).append(
                    (
                        single,
                        {0: ref} if ref is not None else {},
                        {0: keep} if keep is not None else {},
                        pos,
                        idx,
                    )
                )

    out: list[dict[str, Any]] = []
    summary = view.summary
    summary_msg = (
        None
        if summary is None
        else {"role": options.summary_role, "content": options.summary_prefix + summary}
    )
    for pos, item in enumerate(view.items):
        msg = messages[pos]
        if summary_msg is not None and not item.pinned:
            out.append(summary_msg)
            summary_msg = None
        if msg.role != "tool" and pos not in carriers:
            out.extend(emit(msg, item.compacted, item.kept))  # every part is its own
        else:
            others = {i: p for i, p in enumerate(msg.parts) if not isinstance(p, ToolResultPart)}
            if msg.role == "tool" or (len(others) < len(msg.parts) and msg.role != "assistant"):
                if others:
                    rest = msg.model_copy(update={"parts": list(others.values())})
                    out.extend(emit(rest, {}))
                continue
            if len(others) < len(msg.parts):
                msg = msg.model_copy(update={"parts": list(others.values())})
            whole = len(others) == len(item.message.parts)
            out.extend(emit(msg, item.compacted if whole else {}, item.kept if whole else {}))
        if msg.role == "assistant":
            answered = []
            for call in msg.tool_calls:
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
                    out.extend(_plain(Message(role="tool", parts=[res])))
                elif arrival:
                    answered.append(found)
                else:
                    out.extend(emit(*found[:3]))
            for found in sorted(answered, key=lambda f: (f[3], f[4])):
                out.extend(emit(*found[:3]))
    if summary_msg is not None:
        out.append(summary_msg)
    return out


def _plain(msg: Message) -> list[dict[str, Any]]:
    """A synthetic message rendered without stored extras."""
    from .chat import to_openai

    return to_openai(msg, extra=False)


# --------------------------------------------------------------------------- audit


EMPTY_REPLY = "llm.empty_reply"
"""Name of the custom event that records a model reply with neither content nor tool
calls (see :func:`llm_call_events`)."""


def llm_call_events(
    view: View,
    response: Any = None,
    *,
    model: str | None = None,
    latency_ms: float | None = None,
    error: str | None = None,
    append_response: bool = True,
    metadata: dict[str, Any] | None = None,
) -> list[LLMCall | Message | Custom]:
    """The events that record ``view`` being sent to a model: an ``llm_call`` carrying the
    view's seq and fingerprint, usage and cost, then (by default) the reply message. A
    reply with neither content nor tool calls follows as a custom event named
    :data:`EMPTY_REPLY` holding the provider's message (appends refuse an empty assistant
    message)."""
    from . import llm
    from .chat import from_openai

    model_name = model or llm.field(response, "model") or "unknown"
    messages = view.to_messages()
    usage = llm.usage_of(response) if response is not None else None
    call = LLMCall(
        model=model_name,
        view_seq=view.seq,
        fingerprint=fingerprint(messages),
        message_count=len(messages),
        usage=Usage(**usage) if usage is not None else None,
        cost=llm.response_cost(response, model) if response is not None else None,
        latency_ms=latency_ms,
        response_id=llm.field(response, "id"),
        error=error,
        render_options={
            **view.options.model_dump(exclude_defaults=True),
            "render_version": view.options.render_version,
        },
        metadata=metadata,
    )
    batch: list[LLMCall | Message | Custom] = [call]
    if append_response and response is not None:
        choices = llm.field(response, "choices") or []
        if choices:
            raw = llm.field(choices[0], "message")
            data = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
            data = {k: v for k, v in data.items() if v is not None or k == "content"}
            msg = from_openai(data)
            if empty_assistant(msg):
                # Appends refuse an empty assistant message; the reply is kept, as the
                # provider sent it, beside the call that got it.
                batch.append(Custom(name=EMPTY_REPLY, data={"message": data}))
            else:
                batch.append(msg.model_copy(update={"model": model_name}))
    return batch


def calibration_floor(view: View) -> int:
    """The first seq whose ``llm_call`` can calibrate ``view``: after the latest reshaping
    (condensation or prune) the view shows."""
    floor = view.condensation.seq + 1 if view.condensation is not None else 1
    if view.prunes:
        floor = max(floor, max(view.prunes) + 1)
    return floor


#: A reported prompt size further than this factor from the estimate of the same view is
#: not trusted (a mock's fixed usage, a provider that reports only uncached input).
CALIBRATION_RANGE = 3.0


def calibrate(view: View, calls: Iterable[LLMCall]) -> int:
    """The view's tokens, anchored on the newest provider-reported prompt size in ``calls``
    (``llm_call`` events from :func:`calibration_floor` to the view's seq) plus the stored
    counts of what was appended after that call's view. A reported size more than
    :data:`CALIBRATION_RANGE` times off the estimate of the view it measured is ignored."""
    last: LLMCall | None = None
    for call in calls:
        if call.usage is not None and call.usage.prompt_tokens:
            last = call
    if last is None or last.usage is None or last.usage.prompt_tokens is None:
        return view.tokens
    newer = sum(i.tokens for i in view.items if i.seq > last.view_seq and not i.pinned)
    estimated = view.tokens - newer  # the view the call measured (nothing reshaped since)
    reported = last.usage.prompt_tokens
    if estimated > 0 and not 1 / CALIBRATION_RANGE <= reported / estimated <= CALIBRATION_RANGE:
        return view.tokens
    return reported + newer
