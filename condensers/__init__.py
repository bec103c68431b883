"""Condensers: strategies that shrink a context view without deleting history.

Cheap and reversible first, lossy last: prune old tool outputs, mask observations outside
an attention window, summarize (with a model through litellm, or extractively for free),
and as a last guard drop the middle of the conversation. Every strategy proposes one event
(a prune or a condensation) that is appended with optimistic concurrency; nothing is ever
deleted, and every condensation records how and why it was made.
"""

from __future__ import annotations

from . import registry
from .base import (
    Condenser,
    PlanContext,
    Proposal,
    Trigger,
    apply,
    apply_async,
    cut_points,
    pending_call_ids,
)
from .pipeline import Outcome, Pipeline, Planned, StepRecord, default_pipeline
from .policy import (
    CIRCUIT_OPEN,
    REQUEST_DECLINED,
    CondensationPolicy,
    Decision,
    acomplete,
    complete,
    is_context_window_error,
)
from .pruning import (
    HeadTruncator,
    NewestTruncator,
    ObservationMasker,
    ResultTruncator,
    ToolOutputPruner,
)
from .summarizing import (
    HEADINGS,
    TEMPLATE_VERSION,
    ExtractiveCondenser,
    ExtractiveSummarizer,
    LLMSummarizer,
    LLMSummaryCondenser,
    Summarizer,
    SummarizingCondenser,
    SummaryError,
    SummaryResult,
    missing_headings,
)
from .window import WindowCondenser

__all__ = [
    "registry",
    "CIRCUIT_OPEN",
    "HEADINGS",
    "REQUEST_DECLINED",
    "TEMPLATE_VERSION",
    "CondensationPolicy",
    "Condenser",
    "Decision",
    "ExtractiveCondenser",
    "ExtractiveSummarizer",
    "HeadTruncator",
    "LLMSummarizer",
    "LLMSummaryCondenser",
    "NewestTruncator",
    "ObservationMasker",
    "ResultTruncator",
    "Outcome",
    "Pipeline",
    "Planned",
    "PlanContext",
    "Proposal",
    "StepRecord",
    "SummarizingCondenser",
    "Summarizer",
    "SummaryError",
    "SummaryResult",
    "ToolOutputPruner",
    "Trigger",
    "WindowCondenser",
    "apply",
    "apply_async",
    "acomplete",
    "complete",
    "cut_points",
    "default_pipeline",
    "is_context_window_error",
    "missing_headings",
    "pending_call_ids",
]
