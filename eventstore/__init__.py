"""agent-eventstore: a durable, auditable event log and context views for LLM agents."""

from __future__ import annotations

from .budget import Budget
from .errors import (
    BudgetError,
    ConflictError,
    EventStoreError,
    IdempotencyError,
    InvalidEventError,
    NotFoundError,
    PayloadTooLargeError,
    SchemaError,
    StorageError,
)
from .events import (
    Condensation,
    CondensationRequest,
    Custom,
    Event,
    FilePart,
    LLMCall,
    Message,
    Part,
    PartRef,
    Prune,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    decode_tool_output,
)
from .records import AppendResult, Session, StoredEvent, VerifyReport
from .store import AsyncEventStore, EventStore
from .tokens import HeuristicTokenCounter, LiteLLMTokenCounter, TokenCounter
from .views import (
    View,
    ViewItem,
    ViewOptions,
    calibrated_tokens,
    fingerprint,
    record_llm_call,
)

__version__ = "0.1.0"

__all__ = [
    "AppendResult",
    "AsyncEventStore",
    "Budget",
    "BudgetError",
    "Condensation",
    "CondensationRequest",
    "ConflictError",
    "Custom",
    "Event",
    "EventStore",
    "EventStoreError",
    "FilePart",
    "HeuristicTokenCounter",
    "IdempotencyError",
    "InvalidEventError",
    "LLMCall",
    "LiteLLMTokenCounter",
    "Message",
    "NotFoundError",
    "Part",
    "PartRef",
    "PayloadTooLargeError",
    "Prune",
    "ReasoningPart",
    "SchemaError",
    "Session",
    "StorageError",
    "StoredEvent",
    "TextPart",
    "TokenCounter",
    "ToolCallPart",
    "ToolResultPart",
    "Usage",
    "VerifyReport",
    "View",
    "ViewItem",
    "ViewOptions",
    "calibrated_tokens",
    "decode_tool_output",
    "fingerprint",
    "record_llm_call",
]
