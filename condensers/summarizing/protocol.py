"""What every summarizer is: the :class:`Summarizer` protocol and the :class:`SummaryResult`.

A summarizer folds the previous summary and the events a condensation newly forgets into
one new summary in the structured template (:mod:`.template`). Two implementations ship:
:class:`~.extractive.ExtractiveSummarizer` (deterministic, free) and
:class:`~.llm.LLMSummarizer` (a model through litellm). Summarizers never touch the store;
a condenser decides what to forget and writes the event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from eventstore.events import Usage
from eventstore.records import StoredEvent

from .template import TEMPLATE_VERSION

__all__ = ["Summarizer", "SummaryResult"]


@dataclass
class SummaryResult:
    """A summary and what it cost to make."""

    text: str
    """The summary, in the structured template."""
    model: str | None = None
    """The model that wrote it (``None`` for extractive summaries)."""
    template_version: str = TEMPLATE_VERSION
    """Template the summary follows."""
    usage: Usage | None = None
    """Tokens used over all calls (``None`` when no model was called)."""
    cost: float | None = None
    """USD over all calls; ``None`` when any call could not be priced."""
    calls: int = 0
    """Model calls made (retries and chunks included)."""
    chunks: int = 1
    """How many pieces the events were split into."""
    latency_ms: float = 0.0
    """Wall time spent."""
    notes: list[str] = field(default_factory=list)
    """What happened on the way (retries, truncation)."""


@runtime_checkable
class Summarizer(Protocol):
    """Anything that folds newly forgotten events into the previous summary."""

    name: str

    def settings(self) -> dict[str, Any]:
        """Settings recorded on the condensation event."""
        ...

    def summarize(
        self,
        previous: str | None,
        events: Sequence[StoredEvent],
        *,
        focus: str | None = None,
    ) -> SummaryResult:
        """A new summary of ``previous`` plus ``events``.

        Raises:
            SummaryError: No valid summary could be made (the condenser falls back).
        """
        ...
