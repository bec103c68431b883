"""How a view is rendered: its options, and the text shown for a compacted part or an
attachment the model does not take. Pure, like :mod:`eventstore.views`, which re-exports
all of it.

Compacted tool results have one rendering everywhere: :func:`placeholder_text` (or, for a
prune with ``keep_chars``, :func:`truncated_text`). The same text is counted for the
view's tokens, estimated by the condensers, and shown by the CLI.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from .events import FilePart, Message, PartRef
from .media import is_accepted
from .tokens import part_text

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
RENDER_VERSION = 3
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
    """How messages are rendered. 3: the default placeholder and summary prefix name how to
    get the original back (:data:`RECALL_PLACEHOLDER`, :data:`RECALL_SUMMARY_PREFIX`);
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


def truncated_text(ref: PartRef, text: str, keep: int) -> str:
    """The text shown for part ``ref`` truncated by a prune with ``keep_chars=keep``: its
    first two thirds and last third of ``keep`` characters around a line that says how
    much was left out and how to get it back."""
    if len(text) <= keep:
        return text
    head = keep * 2 // 3
    tail = keep - head
    mark = (
        f"[... {len(text) - keep:,} of {len(text):,} characters omitted; "
        f'recall(ref="{ref.seq}:{ref.index}") returns the whole output ...]'
    )
    return f"{text[:head]}\n{mark}\n{text[len(text) - tail :]}"


def _shown(options: ViewOptions, ref: PartRef, part: Any, keep: int | None) -> str:
    """What a compacted part renders as: its truncation, or the placeholder."""
    if keep is not None:
        return truncated_text(ref, part_text(part), keep)
    return placeholder_text(options, ref)


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


def media_stand_in(part: Any) -> str:
    """The text sent instead of an attachment the model does not accept."""
    what = part.name or part.media_type
    size = len(part.data) if part.data is not None else None
    bytes_ = f", {size:,} bytes" if size is not None else ""
    return (
        f"[attachment {what} ({part.media_type}{bytes_}) not shown: the model does not accept it]"
    )
