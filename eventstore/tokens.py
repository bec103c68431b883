"""Token counting.

Counts are computed once, per part, when an event is appended, and stored; a view's total
is then a sum, never a re-tokenization. The default counter, :class:`HeuristicTokenCounter`,
is the four-characters-a-token rule: it costs nothing, and runs low on code and encoded
data. :class:`BoundedTokenCounter` (one per process: :func:`bounded_token_counter`) counts
each text as the larger of that rule and tiktoken ``cl100k_base``, so that a view that
fits by the stored counts also fits by the tokenizer most providers' counts are close to,
at the price of a tokenizer pass over every appended text; :class:`LiteLLMTokenCounter`
uses litellm's offline tokenizers for a given model.
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
    "BoundedTokenCounter",
    "bounded_token_counter",
    "FALLBACK_CHARS_PER_TOKEN",
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
    """About four characters per token, the store's default: free and offline, but it
    runs low on code and encoded data (:class:`BoundedTokenCounter` never counts less, and
    stays at or above the tokenizer)."""

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

    def __init__(
        self,
        encoding: str = "cl100k_base",
        cache_size: int = 20_000,
        cache_max_chars: int | None = None,
    ) -> None:
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
        self._cache_max_chars = cache_max_chars

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
            if self._cache_max_chars is not None and len(text) > self._cache_max_chars:
                return n
            if len(self._cache) >= self._cache_size:
                self._cache.clear()  # bounded: consecutive views share most texts anyway
            self._cache[text] = n
        return n


FALLBACK_CHARS_PER_TOKEN = 3.0
"""Characters a token :class:`BoundedTokenCounter` assumes when tiktoken cannot be read."""


class BoundedTokenCounter:
    """Each text counts as the larger of ``ceil(chars / 4)`` and its tiktoken
    ``cl100k_base`` count: ``EventStore(token_counter=bounded_token_counter())``.

    The character estimate alone runs low where providers count more: by 10-25% on code
    and listings, and up to six times on encoded data (base64, hashes, binary dumps read
    as text), so a view that fits by it can be over the model's window. Taking the larger
    count per part keeps the stored counts at or above the tokenizer's: over the views of
    the quality benchmark's tune runs, a view's stored count is never more than a few
    tokens under its cl100k count (message framing and the joins between parts), far
    inside any budget's safety buffer. Other providers' tokenizers differ from cl100k by
    a few percent, which is what :attr:`~eventstore.budget.Budget.buffer` is for. Counting
    costs a tokenizer pass over each new text, once, when it is appended: about 2% of the
    quality benchmark's replay time, but about 60 microseconds a kilobyte of text, which
    took a transcript import from about 10,900 events per CPU second to about 3,700, and
    is about three quarters of the client CPU the rest of a single append costs (0.081 ms
    in the concurrency benchmark). Short texts (placeholders, notes) are cached.

    When tiktoken or the encoding's data cannot be read (litellm ships both), it counts
    ``ceil(chars / 3)`` (:data:`FALLBACK_CHARS_PER_TOKEN`): a third more than the usual
    estimate, which covers code and prose (on the tune runs, 11% of the parts of 200+
    characters still count more by cl100k, nearly all of them encoded data, the worst
    4.6 times more). :attr:`exact` says which rule is in use.

    Args:
        encoding: The tiktoken encoding to bound the estimate with.
        provider: Whose image pricing attachments are counted with (default: OpenAI's).
    """

    def __init__(self, encoding: str = "cl100k_base", provider: str | None = None) -> None:
        self.provider = provider
        """Whose image pricing attachments are counted with (default: OpenAI's)."""
        self._real: TiktokenCounter | None
        try:
            self._real = TiktokenCounter(encoding, cache_size=4096, cache_max_chars=512)
        except RuntimeError:
            self._real = None
        if self._real is not None:
            self._estimate = HeuristicTokenCounter(provider=provider)
            self.name = f"max(chars/4,tiktoken:{encoding})"
        else:
            self._estimate = HeuristicTokenCounter(FALLBACK_CHARS_PER_TOKEN, provider)
            self.name = f"heuristic:{FALLBACK_CHARS_PER_TOKEN:g}"

    @property
    def exact(self) -> bool:
        """Whether the tokenizer bounds the counts (``False``: the fallback estimate)."""
        return self._real is not None

    def count(self, text: str) -> int:
        n = self._estimate.count(text)
        if self._real is not None and n:
            n = max(n, self._real.count(text))
        return n


_BOUNDED: BoundedTokenCounter | None = None


def bounded_token_counter() -> BoundedTokenCounter:
    """One :class:`BoundedTokenCounter` per process (the encoding is loaded once, on first
    use), to give the store and the condensation policy alike."""
    global _BOUNDED
    if _BOUNDED is None:
        _BOUNDED = BoundedTokenCounter()
    return _BOUNDED


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
