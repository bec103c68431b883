"""Summarizing: condensers that replace the forgotten middle with a structured summary.

* :mod:`.condensers`: :class:`SummarizingCondenser` and its two ready-made forms,
  :class:`LLMSummaryCondenser` (a model, with the extractive fallback) and
  :class:`ExtractiveCondenser` (offline, free).
* :mod:`.protocol`: the :class:`Summarizer` protocol and the :class:`SummaryResult` a
  summarizer returns.
* :mod:`.extractive`: :class:`ExtractiveSummarizer`, deterministic and free.
* :mod:`.llm`: :class:`LLMSummarizer` (litellm, chunking, usage and cost) and
  :class:`SummaryError`.
* :mod:`.template`: the headings every summary uses, their validation, the prompt and the
  rendering of events for a summarizer.
"""

from __future__ import annotations

from .condensers import ExtractiveCondenser, LLMSummaryCondenser, SummarizingCondenser
from .extractive import ExtractiveSummarizer, parse_sections
from .llm import LLMSummarizer, SummaryError
from .protocol import Summarizer, SummaryResult
from .template import HEADINGS, TEMPLATE_VERSION, missing_headings

__all__ = [
    "HEADINGS",
    "TEMPLATE_VERSION",
    "ExtractiveCondenser",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "LLMSummaryCondenser",
    "SummarizingCondenser",
    "Summarizer",
    "SummaryError",
    "SummaryResult",
    "missing_headings",
    "parse_sections",
]
