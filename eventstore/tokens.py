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
    "TiktokenCounter",
    "message_tokens",
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


class TiktokenCounter:
    """Exact counts from a tiktoken encoding (``cl100k_base`` by default), read offline
    from the data litellm ships; repeated texts are counted once (a bounded cache).

    Slower than the heuristic (a tokenizer pass over every new text), so the store does not
    use it at append time by default; :class:`~condensers.CondensationPolicy` uses it to
    check a view near the budget, where the heuristic's error could make it overflow.

    Raises:
        RuntimeError: tiktoken or the encoding's data is not on this machine
            (:meth:`load` returns ``None`` instead).
    """

    def __init__(self, encoding: str = "cl100k_base", cache_size: int = 20_000) -> None:
        enc = llm.tiktoken_encoding(encoding)
        if enc is None:
            raise RuntimeError(
                f"tiktoken encoding {encoding!r} is not available offline: install litellm "
                "(it ships tiktoken and the encodings' data) or pass another counter"
            )
        self._enc = enc
        self.name = f"tiktoken:{encoding}"
        self.provider = "openai"
        self._cache: dict[str, int] = {}
        self._cache_size = cache_size

    @classmethod
    def load(cls, encoding: str = "cl100k_base") -> TiktokenCounter | None:
        """The counter, or ``None`` when the encoding cannot be read on this machine."""
        try:
            return cls(encoding)
        except RuntimeError:
            return None

    def count(self, text: str) -> int:
        if not text:
            return 0
        n = self._cache.get(text)
        if n is None:
            n = len(self._enc.encode(text, disallowed_special=()))
            if len(self._cache) >= self._cache_size:
                self._cache.clear()  # bounded: consecutive views share most texts anyway
            self._cache[text] = n
        return n


def message_tokens(messages: list[dict[str, object]], counter: TokenCounter) -> int:
    """Tokens of rendered (OpenAI-style) messages under ``counter``: each message's text
    content, tool calls' names and arguments, plus :data:`MESSAGE_OVERHEAD` per message."""
    total = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            texts = [str(c.get("text") or "") for c in content if isinstance(c, dict)]
        else:
            texts = [str(content or "")]
        for call in m.get("tool_calls") or []:  # type: ignore[attr-defined]
            fn = call.get("function") or {}
            texts += [str(fn.get("name") or ""), str(fn.get("arguments") or "")]
        total += MESSAGE_OVERHEAD + sum(counter.count(t) for t in texts if t)
    return total


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
