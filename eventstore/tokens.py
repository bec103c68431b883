"""Token counting.

Counts are computed once, per part, when an event is appended, and stored; a view's total
is then a sum, never a re-tokenization. The default counter is a character heuristic that
costs nothing; :class:`LiteLLMTokenCounter` uses litellm's offline tokenizers for a model.
"""

from __future__ import annotations

import json
import math
from typing import Protocol, runtime_checkable

from . import llm
from .events import (
    FilePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

__all__ = [
    "TokenCounter",
    "HeuristicTokenCounter",
    "LiteLLMTokenCounter",
    "part_text",
    "count_part",
    "MESSAGE_OVERHEAD",
]

#: Tokens charged per message for role and framing, as OpenAI's chat format does.
MESSAGE_OVERHEAD = 4
#: Estimate for an attachment whose size cannot be read (images are priced by size and
#: provider: see :mod:`eventstore.media`).
FILE_TOKENS = 765


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that turns text into a token count."""

    name: str

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""
        ...


class HeuristicTokenCounter:
    """About four characters per token: fast, offline, and close enough to budget with."""

    name = "heuristic"

    def __init__(self, chars_per_token: float = 4.0, provider: str | None = None) -> None:
        self.chars_per_token = chars_per_token
        self.provider = provider
        """Whose image pricing attachments are counted with (default: OpenAI's)."""

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token) if text else 0


class LiteLLMTokenCounter:
    """Exact counts from litellm's tokenizer for ``model`` (tiktoken for OpenAI models)."""

    def __init__(self, model: str) -> None:
        from .models import ModelInfo

        self.model = model
        self.name = f"litellm:{model}"
        found = ModelInfo.find(model)
        self.provider = found.provider if found is not None else None
        llm.import_litellm()  # fail here, not on the first count, if it is missing

    def count(self, text: str) -> int:
        if not text:
            return 0
        return llm.count_tokens(self.model, text)


def part_text(part: Part) -> str:
    """The text of a part that counts toward the context window."""
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ReasoningPart):
        return part.text
    if isinstance(part, ToolCallPart):
        return f"{part.name} {part.arguments}"
    if isinstance(part, ToolResultPart):
        return part.output
    if isinstance(part, ProviderPart):
        return json.dumps(part.item, ensure_ascii=False, separators=(",", ":"))
    return ""


def count_part(counter: TokenCounter, part: Part) -> int:
    """Tokens of one part under ``counter``."""
    if isinstance(part, FilePart):
        from .media import file_tokens

        return file_tokens(part, getattr(counter, "provider", None))
    return counter.count(part_text(part))
