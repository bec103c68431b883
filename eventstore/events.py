"""Typed event and part models.

Every record in a session is one of the event models below, told apart by its ``kind``
field. Messages carry a list of parts, told apart by their ``type`` field. Both unions are
validated through module-level ``TypeAdapter`` objects so that (de)serialization is one call.

Text policy: every string is stored exactly as given. A NUL character is escaped by the
JSON encoder (``\\u0000``) and restored on read, so it survives Postgres ``TEXT``. A lone
surrogate (what ``bytes.decode("utf-8", "surrogateescape")`` produces for invalid UTF-8) is
escaped the same way and also round-trips exactly; :func:`decode_tool_output` and
:meth:`ToolResultPart.output_bytes` convert raw tool output to and from that form.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_serializer,
    field_validator,
)

from .errors import InvalidEventError

__all__ = [
    "Role",
    "TextPart",
    "ReasoningPart",
    "ToolCallPart",
    "ToolResultPart",
    "FilePart",
    "ProviderPart",
    "Part",
    "PartRef",
    "Message",
    "Condensation",
    "CondensationRequest",
    "Prune",
    "LLMCall",
    "Usage",
    "Custom",
    "Queued",
    "Dequeued",
    "RunState",
    "Delta",
    "Purge",
    "PURGED",
    "Event",
    "EventKind",
    "EVENT_ADAPTER",
    "PART_ADAPTER",
    "decode_tool_output",
    "empty_assistant",
    "EMPTY_ASSISTANT",
    "utcnow",
]

Role = Literal["system", "user", "assistant", "tool"]
EventKind = Literal[
    "message",
    "condensation",
    "condensation_request",
    "prune",
    "llm_call",
    "custom",
    "queued",
    "dequeued",
    "run_state",
    "delta",
    "purge",
]


def utcnow() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


def decode_tool_output(raw: bytes) -> str:
    """Decode raw tool output so that invalid UTF-8 survives storage byte for byte.

    Invalid bytes become lone surrogates (``surrogateescape``); the store keeps them and
    :meth:`ToolResultPart.output_bytes` turns the text back into the original bytes.
    """
    return raw.decode("utf-8", "surrogateescape")


class _Model(BaseModel):
    # NaN and infinities reach the encoder, which refuses them, instead of turning into null.
    model_config = ConfigDict(extra="forbid", frozen=False, ser_json_inf_nan="constants")


# --------------------------------------------------------------------------- parts


class TextPart(_Model):
    """Plain text written by a user, the system or the model."""

    type: Literal["text"] = "text"
    """Discriminator."""
    text: str
    """The text, verbatim."""


class ReasoningPart(_Model):
    """Model reasoning ("thinking"), kept so it can be sent back to the provider."""

    type: Literal["reasoning"] = "reasoning"
    """Discriminator."""
    text: str = ""
    """The visible reasoning text (empty for redacted blocks)."""
    signature: str | None = None
    """Provider signature that must accompany the block when it is sent back."""
    redacted_data: str | None = None
    """Opaque encrypted content of a redacted thinking block."""
    format: Literal["thinking_block", "reasoning_content"] = "thinking_block"
    """Where litellm carried it: an entry of ``thinking_blocks`` or ``reasoning_content``."""


class ToolCallPart(_Model):
    """A tool invocation requested by the model."""

    type: Literal["tool_call"] = "tool_call"
    """Discriminator."""
    id: str
    """The provider's tool call id; results refer to it."""
    name: str
    """The tool (function) name."""
    arguments: str = ""
    """The arguments exactly as the model produced them: usually JSON, but never re-parsed."""
    call_type: str = "function"
    """The OpenAI ``type`` of the call (``function`` for every current provider)."""


class ToolResultPart(_Model):
    """The output of a tool call."""

    type: Literal["tool_result"] = "tool_result"
    """Discriminator."""
    tool_call_id: str
    """Id of the :class:`ToolCallPart` this answers."""
    name: str | None = None
    """The tool name, when known."""
    output: str = ""
    """The tool output as text (see the module docstring for bytes that are not UTF-8)."""
    is_error: bool = False
    """Whether the tool reported a failure."""
    state: Literal["completed", "error", "interrupted"] = "completed"
    """``interrupted`` marks a call that never finished (for example a crashed run)."""

    def output_bytes(self) -> bytes:
        """The output as the bytes the tool originally produced."""
        return self.output.encode("utf-8", "surrogateescape")


class FilePart(_Model):
    """A file or media attachment, inline or by reference."""

    type: Literal["file"] = "file"
    """Discriminator."""
    media_type: str = "application/octet-stream"
    """MIME type such as ``image/png`` or ``audio/wav``."""
    name: str | None = None
    """File name, when known."""
    data: bytes | None = None
    """Inline content (base64 in JSON)."""
    uri: str | None = None
    """A URL, data URL or provider file id instead of inline content."""
    detail: str | None = None
    """OpenAI image ``detail`` (``auto``/``low``/``high``), when given."""
    blob: str | None = None
    """``sha256:<hex>`` of ``data`` when the store keeps the content in the tenant's blob
    table (large attachments, stored once however often they are sent). The stored payload
    then holds this reference instead of the bytes; reads and views put ``data`` back."""

    @field_validator("data", mode="before")
    @classmethod
    def _decode_b64(cls, value: Any) -> Any:
        if isinstance(value, str):
            return base64.b64decode(value, validate=True)
        return value

    @field_serializer("data", when_used="json")
    def _encode_b64(self, value: bytes | None) -> str | None:
        return None if value is None else base64.b64encode(value).decode("ascii")


class ProviderPart(_Model):
    """An item of a provider's own format that no other part models: an OpenAI
    ``compaction`` item or encrypted reasoning, a hosted (server-side) tool call and its
    result, a framework's native part. Stored losslessly and sent back only to the
    provider that made it (:attr:`eventstore.views.ViewOptions.provider`); views for any
    other provider leave it out, and a message holding nothing else is left out too."""

    type: Literal["provider"] = "provider"
    """Discriminator."""
    provider: str = Field(min_length=1, max_length=255)
    """Who made it and may read it back: a litellm provider name (``openai``,
    ``anthropic``, ``gemini``) or a framework's (``openai-agents``, ``pydantic-ai``)."""
    item: dict[str, Any]
    """The item exactly as the provider gave it (JSON)."""


Part = Annotated[
    TextPart | ReasoningPart | ToolCallPart | ToolResultPart | FilePart | ProviderPart,
    Field(discriminator="type"),
]
"""One piece of a message."""

PART_ADAPTER: TypeAdapter[Part] = TypeAdapter(Part)


class PartRef(_Model):
    """A reference to one stored part: the event's seq and the part's index in it."""

    seq: int
    """Seq of the message event holding the part."""
    index: int
    """Index of the part inside the message."""


# --------------------------------------------------------------------------- events


class _Event(_Model):
    id: str | None = None
    """Time-sortable event id (UUIDv7). Assigned by the store when left empty."""
    created_at: datetime | None = None
    """UTC timestamp. Assigned by the store when left empty."""

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("created_at must be timezone-aware")
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError(
                "created_at is outside the range a UTC timestamp can hold "
                "(years 1-9999 after conversion to UTC)"
            ) from None


class Message(_Event):
    """A chat message: a role and a list of parts."""

    kind: Literal["message"] = "message"
    """Discriminator."""
    role: Role
    """Who wrote it."""
    parts: list[Part] = Field(default_factory=list)
    """The content, in order."""
    name: str | None = None
    """The OpenAI participant ``name`` (not the tool name; that lives on tool parts)."""
    model: str | None = None
    """The model that produced an assistant message."""
    provider_metadata: dict[str, Any] | None = None
    """Free-form provider data (response id, finish reason, ...)."""
    content_list: bool = False
    """Whether the original chat message used a content list rather than a string."""
    extra: dict[str, Any] | None = None
    """Chat-message fields this model has no slot for, kept so conversion is lossless."""
    interrupted: bool | None = None
    """Set on an assistant message whose generation was cut off (a cancelled stream or a
    crash): the text is what had been generated so far."""

    @property
    def text(self) -> str:
        """All text parts joined by newlines."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        """The tool call parts, in order."""
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def tool_results(self) -> list[ToolResultPart]:
        """The tool result parts, in order."""
        return [p for p in self.parts if isinstance(p, ToolResultPart)]

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message with one text part."""
        return cls(role="system", parts=[TextPart(text=text)])

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message with one text part."""
        return cls(role="user", parts=[TextPart(text=text)])

    @classmethod
    def assistant(
        cls, text: str = "", tool_calls: list[ToolCallPart] | None = None, **kw: Any
    ) -> Message:
        """An assistant message with text, tool calls, or both.

        Raises:
            InvalidEventError: Neither is given (see :func:`empty_assistant`).
        """
        parts: list[Any] = [TextPart(text=text)] if text else []
        parts.extend(tool_calls or [])
        msg = cls(role="assistant", parts=parts, **kw)
        if empty_assistant(msg):
            raise InvalidEventError(EMPTY_ASSISTANT)
        return msg

    @classmethod
    def tool(cls, tool_call_id: str, output: str, name: str | None = None, **kw: Any) -> Message:
        """A tool message holding one result."""
        return cls(
            role="tool",
            parts=[ToolResultPart(tool_call_id=tool_call_id, output=output, name=name, **kw)],
        )


EMPTY_ASSISTANT = (
    "an assistant message needs content or tool calls (providers refuse an empty one and it "
    "says nothing): give it text or tool calls, or record the empty reply as a Custom event"
)
"""Why an assistant message with neither content nor tool calls is refused."""


def empty_assistant(message: Message) -> bool:
    """Whether ``message`` is an assistant message with neither content nor tool calls:
    no parts, or only text parts holding nothing but whitespace. Reasoning, files and
    provider items are content. Appends refuse such a message; importers keep it as a
    :class:`Custom` event instead."""
    fields = message.__dict__  # plain reads: an append asks this of every message
    if fields.get("role") != "assistant":
        return False
    for part in fields.get("parts") or ():
        if type(part) is not TextPart:
            return False
        text = part.__dict__.get("text")
        if text and not text.isspace():  # isspace(): no stripped copy of a long text
            return False
    return True


class Usage(_Model):
    """Token usage reported by a model call."""

    prompt_tokens: int | None = None
    """Input tokens."""
    completion_tokens: int | None = None
    """Output tokens."""
    cached_tokens: int | None = None
    """Input tokens served from the provider's prompt cache."""
    reasoning_tokens: int | None = None
    """Output tokens spent on reasoning."""


class Condensation(_Event):
    """From here on, events ``forgotten_from..forgotten_to`` are represented by ``summary``.

    The latest condensation at or before a seq alone defines the view at that seq: its
    summary already folds in every earlier summary, and ``pinned`` names the head events
    that stay verbatim.
    """

    kind: Literal["condensation"] = "condensation"
    """Discriminator."""
    forgotten_from: int
    """First forgotten seq (inclusive)."""
    forgotten_to: int
    """Last forgotten seq (inclusive); the view's tail starts after it."""
    summary: str | None = None
    """Text shown in place of the forgotten events (``None``: nothing is shown)."""
    summary_tokens: int = 0
    """Token count of the summary."""
    carried: str | None = None
    """The whole summary the next condensation builds on, when the view shows a shortened
    :attr:`summary` (the window had no room for all of it): facts survive the squeeze."""
    pinned: list[int] = Field(default_factory=list)
    """Seqs of head events kept verbatim before the summary."""
    forgotten_events: int = 0
    """How many events the forgotten range held (all kinds)."""
    condenser: str = ""
    """Name of the strategy that produced it."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The strategy's settings."""
    trigger: Literal["threshold", "count", "manual", "overflow", "import"] = "manual"
    """What caused it."""
    tokens_before: int | None = None
    """View tokens before."""
    tokens_after: int | None = None
    """View tokens after."""
    summary_model: str | None = None
    """The model that wrote the summary (``None`` for extractive or window-only)."""
    template_version: str | None = None
    """Version of the summary prompt template."""
    usage: Usage | None = None
    """Summarizer usage."""
    cost: float | None = None
    """Summarizer cost in USD, ``None`` when it cannot be priced."""
    supersedes: int | None = None
    """Seq of the previous condensation this one folds in."""
    focus: str | None = None
    """Focus instructions that were honoured."""
    request_seq: int | None = None
    """Seq of the :class:`CondensationRequest` it answers, if any."""


class CondensationRequest(_Event):
    """Ask the next condensation to run (like ``/compact focus on the auth bug``)."""

    kind: Literal["condensation_request"] = "condensation_request"
    """Discriminator."""
    focus: str | None = None
    """What the summary should concentrate on."""
    requested_by: str | None = None
    """Who asked (user, agent, operator)."""


class Prune(_Event):
    """Marks tool-result parts as compacted (or, with ``keep_chars``, texts and tool-call
    arguments as truncated). Their content stays in the database."""

    kind: Literal["prune"] = "prune"
    """Discriminator."""
    targets: list[PartRef]
    """The parts to compact."""
    tokens_freed: int = 0
    """Tokens the prune removes from the view."""
    strategy: str = ""
    """Name of the strategy that produced it."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The strategy's settings."""
    trigger: str | None = None
    """What caused it."""
    note: str | None = None
    """Free text (for example a circuit-breaker message)."""
    keep_chars: int | None = Field(default=None, ge=64)
    """A truncation instead of a placeholder: each target shows its first and last
    characters, ``keep_chars`` in all, around a line saying how much was left out and how
    to recall it (``None``: the placeholder replaces the whole part)."""


class LLMCall(_Event):
    """A record of one model call: which view was sent and what it cost."""

    kind: Literal["llm_call"] = "llm_call"
    """Discriminator."""
    model: str
    """The litellm model name."""
    view_seq: int
    """Seq the sent view reflected."""
    fingerprint: str
    """SHA-256 of the canonical rendered messages."""
    message_count: int = 0
    """Number of messages sent."""
    usage: Usage | None = None
    """Usage reported by the provider."""
    cost: float | None = None
    """Cost in USD, ``None`` when litellm cannot price the model."""
    latency_ms: float | None = None
    """Wall time of the call."""
    response_id: str | None = None
    """Provider response id."""
    error: str | None = None
    """Error text when the call failed."""
    render_options: dict[str, Any] = Field(default_factory=dict)
    """View and render settings needed to rebuild the exact messages."""
    metadata: dict[str, Any] | None = None
    """Free-form data."""


class Custom(_Event):
    """An application-defined event."""

    kind: Literal["custom"] = "custom"
    """Discriminator."""
    name: str = Field(validation_alias=AliasChoices("name", "type_name"))
    """Application event name."""
    data: Any = None
    """Any JSON value."""


class Queued(_Event):
    """A message that arrived while the agent was busy, waiting in the session's FIFO queue
    (see :meth:`EventStore.enqueue`). It is not part of any view until it is dequeued."""

    kind: Literal["queued"] = "queued"
    """Discriminator."""
    message: Message
    """The waiting message (its ``id`` and ``created_at`` are assigned on dequeue)."""


class Dequeued(_Event):
    """Marks the queued event at ``queued_seq`` as taken; the message itself follows as the
    next event of the same append."""

    kind: Literal["dequeued"] = "dequeued"
    """Discriminator."""
    queued_seq: int = Field(ge=1)
    """The seq of the :class:`Queued` event taken."""


class RunState(_Event):
    """What the agent run is doing: ``idle``, ``streaming`` a reply, or ``executing_tools``."""

    kind: Literal["run_state"] = "run_state"
    """Discriminator."""
    state: Literal["idle", "streaming", "executing_tools"]
    """The new state."""
    reason: str | None = None
    """Why the state changed (``completed``, ``cancelled``, ``recovered``, ...)."""
    stream_id: str | None = None
    """The stream a ``streaming`` state (and its :class:`Delta` events) belongs to."""


class Delta(_Event):
    """A chunk of assistant text streamed so far: durable progress that the sealed message
    supersedes. Views never show deltas."""

    kind: Literal["delta"] = "delta"
    """Discriminator."""
    stream_id: str
    """The stream this chunk belongs to."""
    text: str
    """The chunk."""


PURGED = "[purged]"
"""The text a purged field holds (see :meth:`~eventstore.EventStore.purge`)."""


class Purge(_Event):
    """The record of an administrative purge (retention or erasure): the content of events
    ``from_seq..to_seq`` was removed, their hashes were kept. Written by
    :meth:`~eventstore.EventStore.purge`, the one way past the append-only guards; it binds
    the purged events' stored hashes (``hashes``), so ``verify`` reports them as purged and
    still proves the rest of the chain."""

    kind: Literal["purge"] = "purge"
    """Discriminator."""
    from_seq: int = Field(ge=1)
    """First purged seq."""
    to_seq: int = Field(ge=1)
    """Last purged seq (earlier purges and purge records inside the range stay as they were)."""
    events: int = Field(ge=0)
    """How many events this purge redacted."""
    hashes: str
    """SHA-256 over the redacted events' stored hashes, in seq order, one per line."""
    redacted: str
    """SHA-256 over the redacted payloads, in the same order (so a purged event's shape,
    its roles and tool names, cannot be changed afterwards either)."""
    reason: str | None = None
    """Why (a retention rule, an erasure request id)."""


Event = Annotated[
    Message
    | Condensation
    | CondensationRequest
    | Prune
    | LLMCall
    | Custom
    | Queued
    | Dequeued
    | RunState
    | Delta
    | Purge,
    Field(discriminator="kind"),
]
"""Anything that can be appended to a session."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
