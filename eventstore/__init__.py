"""agent-eventstore: a durable, auditable event log and context views for LLM agents."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._features.search import SearchHit
    from .budget import Budget
    from .errors import (
        BudgetError,
        ConfigurationError,
        ConflictError,
        ConnectionDropped,
        EventStoreError,
        IdempotencyError,
        IdempotencyMismatchError,
        InvalidEventError,
        NotFoundError,
        PayloadTooLargeError,
        SchemaError,
        SessionExistsError,
        StorageBusyError,
        StorageError,
    )
    from .events import (
        Condensation,
        CondensationRequest,
        Custom,
        Delta,
        Dequeued,
        Event,
        FilePart,
        LLMCall,
        Message,
        Part,
        PartRef,
        ProviderPart,
        Prune,
        Purge,
        Queued,
        ReasoningPart,
        RunState,
        TextPart,
        ToolCallPart,
        ToolResultPart,
        Usage,
        decode_tool_output,
    )
    from .models import ModelInfo, UnknownModelWarning
    from .records import AppendResult, Session, StoredEvent, TailItem, VerifyReport
    from .store import AsyncEventStore, EventStore, calibrated_tokens, record_llm_call
    from .tokens import (
        BoundedTokenCounter,
        HeuristicTokenCounter,
        LiteLLMTokenCounter,
        TokenCounter,
    )
    from .views import View, ViewItem, ViewOptions, fingerprint

# Public names are loaded on first use, so that importing a submodule (the command line,
# for one) does not pay for SQLAlchemy and pydantic before it needs them.
_LAZY: dict[str, str] = {
    "AppendResult": "records",
    "AsyncEventStore": "store",
    "Budget": "budget",
    "BudgetError": "errors",
    "Condensation": "events",
    "CondensationRequest": "events",
    "ConfigurationError": "errors",
    "ConflictError": "errors",
    "ConnectionDropped": "errors",
    "Custom": "events",
    "Delta": "events",
    "Dequeued": "events",
    "Event": "events",
    "EventStore": "store",
    "EventStoreError": "errors",
    "FilePart": "events",
    "BoundedTokenCounter": "tokens",
    "HeuristicTokenCounter": "tokens",
    "IdempotencyError": "errors",
    "IdempotencyMismatchError": "errors",
    "InvalidEventError": "errors",
    "LLMCall": "events",
    "LiteLLMTokenCounter": "tokens",
    "Message": "events",
    "ModelInfo": "models",
    "NotFoundError": "errors",
    "Part": "events",
    "PartRef": "events",
    "ProviderPart": "events",
    "PayloadTooLargeError": "errors",
    "Prune": "events",
    "Purge": "events",
    "Queued": "events",
    "ReasoningPart": "events",
    "RunState": "events",
    "SchemaError": "errors",
    "SessionExistsError": "errors",
    "SearchHit": "_features.search",
    "Session": "records",
    "StorageBusyError": "errors",
    "StorageError": "errors",
    "StoredEvent": "records",
    "TailItem": "records",
    "TextPart": "events",
    "TokenCounter": "tokens",
    "UnknownModelWarning": "models",
    "ToolCallPart": "events",
    "ToolResultPart": "events",
    "Usage": "events",
    "VerifyReport": "records",
    "View": "views",
    "ViewItem": "views",
    "ViewOptions": "views",
    "calibrated_tokens": "store",
    "decode_tool_output": "events",
    "fingerprint": "views",
    "record_llm_call": "store",
}

__version__ = "0.1.0"

__all__ = [
    "AppendResult",
    "AsyncEventStore",
    "Budget",
    "BudgetError",
    "Condensation",
    "CondensationRequest",
    "ConfigurationError",
    "ConflictError",
    "ConnectionDropped",
    "Custom",
    "Delta",
    "Dequeued",
    "Event",
    "EventStore",
    "EventStoreError",
    "FilePart",
    "BoundedTokenCounter",
    "HeuristicTokenCounter",
    "IdempotencyError",
    "IdempotencyMismatchError",
    "InvalidEventError",
    "LLMCall",
    "LiteLLMTokenCounter",
    "Message",
    "ModelInfo",
    "NotFoundError",
    "Part",
    "PartRef",
    "PayloadTooLargeError",
    "ProviderPart",
    "Prune",
    "Purge",
    "Queued",
    "ReasoningPart",
    "RunState",
    "SchemaError",
    "SessionExistsError",
    "SearchHit",
    "Session",
    "StorageBusyError",
    "StorageError",
    "StoredEvent",
    "TailItem",
    "TextPart",
    "TokenCounter",
    "UnknownModelWarning",
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
