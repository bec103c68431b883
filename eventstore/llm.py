"""The one door to litellm: model windows, token counts, completions, usage, cost, overflows.

Every use of litellm in the project goes through this module, for two reasons. Importing
litellm costs seconds, so it happens lazily, on the first call that needs it and never at
``import eventstore``. And litellm reaches for the network at import (a model price map)
and when counting tokens (Hugging Face tokenizers) unless told not to; the settings below
must be in place before its first import, which only one module can guarantee.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "import_litellm",
    "model_info",
    "register_model",
    "custom_logger_class",
    "remove_callback",
    "count_tokens",
    "tiktoken_encoding",
    "completion",
    "acompletion",
    "response_cost",
    "usage_of",
    "is_context_window_error",
    "context_window_error",
    "field",
]


def import_litellm() -> Any:
    """litellm, imported with its network lookups switched off."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.disable_hf_tokenizer_download = True
    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm


def model_info(model: str) -> dict[str, Any]:
    """litellm's model map entry for ``model``.

    Raises:
        LookupError: litellm does not know the model.
    """
    litellm = import_litellm()
    try:
        return dict(litellm.get_model_info(model))
    except Exception as exc:  # litellm raises a bare Exception for unmapped models
        raise LookupError(f"litellm has no entry for model {model!r} ({exc})") from None


def custom_logger_class() -> type:
    """litellm's ``CustomLogger`` base class (for :mod:`eventstore.adapters.litellm`)."""
    import_litellm()
    from litellm.integrations.custom_logger import CustomLogger

    return CustomLogger


def remove_callback(callback: Any) -> None:
    """Take ``callback`` out of every list litellm keeps callbacks in (setting
    ``litellm.callbacks`` alone leaves it registered for success and failure events)."""
    litellm = import_litellm()
    litellm.callbacks = [c for c in litellm.callbacks if c is not callback]
    manager = getattr(litellm, "logging_callback_manager", None)
    if manager is not None and hasattr(manager, "remove_callback_from_all_lists"):
        manager.remove_callback_from_all_lists(callback)
        return
    for name in (
        "success_callback",
        "failure_callback",
        "input_callback",
        "_async_success_callback",
        "_async_failure_callback",
        "_async_input_callback",
    ):
        current = getattr(litellm, name, None)
        if isinstance(current, list):
            setattr(litellm, name, [c for c in current if c is not callback])


def register_model(entries: dict[str, dict[str, Any]]) -> None:
    """Describe models litellm does not ship (local models, custom windows)."""
    import_litellm().register_model(entries)


def count_tokens(model: str, text: str) -> int:
    """Tokens in ``text`` under ``model``'s offline tokenizer."""
    return int(import_litellm().token_counter(model=model, text=text))


_ENCODINGS: dict[str, Any] = {}


def tiktoken_encoding(name: str = "cl100k_base") -> Any | None:
    """A tiktoken encoding read offline, or ``None`` when tiktoken or its data is missing.

    tiktoken downloads an encoding's ranks on first use; litellm ships them (for
    ``cl100k_base`` and ``o200k_base``) in its package data. This points tiktoken at that
    folder, found without importing litellm (which costs seconds), unless
    ``TIKTOKEN_CACHE_DIR`` is already set.
    """
    if name in _ENCODINGS:
        return _ENCODINGS[name]
    enc = None
    try:
        import importlib.util

        spec = importlib.util.find_spec("litellm")
        if spec is not None and spec.origin and "TIKTOKEN_CACHE_DIR" not in os.environ:
            bundled = os.path.join(os.path.dirname(spec.origin), "litellm_core_utils", "tokenizers")
            if os.path.isdir(bundled):
                os.environ["TIKTOKEN_CACHE_DIR"] = bundled
        import tiktoken

        enc = tiktoken.get_encoding(name)
    except Exception:  # no tiktoken, or its data is not on this machine (no network)
        enc = None
    _ENCODINGS[name] = enc
    return enc


def completion(**kwargs: Any) -> Any:
    """``litellm.completion`` (kwargs passed through unchanged)."""
    return import_litellm().completion(**kwargs)


async def acompletion(**kwargs: Any) -> Any:
    """``litellm.acompletion`` (kwargs passed through unchanged)."""
    return await import_litellm().acompletion(**kwargs)


def response_cost(response: Any, model: str | None = None) -> float | None:
    """The call's cost in USD, or ``None`` when litellm cannot price it. Never raises."""
    if response is None:
        return None
    try:
        cost = import_litellm().completion_cost(completion_response=response, model=model)
    except Exception:
        return None
    return None if cost is None else float(cost)


def field(obj: Any, name: str) -> Any:
    """``obj.name`` or ``obj[name]``: litellm hands out objects, callers often dicts."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def usage_of(response: Any) -> dict[str, int | None] | None:
    """Token usage reported with a response (litellm object or plain dict), if any."""
    usage = field(response, "usage")
    if usage is None:
        return None
    ptd = field(usage, "prompt_tokens_details")
    ctd = field(usage, "completion_tokens_details")
    return {
        "prompt_tokens": field(usage, "prompt_tokens"),
        "completion_tokens": field(usage, "completion_tokens"),
        "cached_tokens": field(ptd, "cached_tokens"),
        "reasoning_tokens": field(ctd, "reasoning_tokens"),
    }


def context_window_error() -> type[BaseException]:
    """litellm's ``ContextWindowExceededError`` class."""
    cls: type[BaseException] = import_litellm().ContextWindowExceededError
    return cls


def is_context_window_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the prompt was too long for the model.

    litellm maps most providers to ``ContextWindowExceededError``; others surface as a
    ``BadRequestError`` (or a bare API error) whose text litellm's own checker recognizes.
    """
    if isinstance(exc, context_window_error()):
        return True
    try:
        from litellm.litellm_core_utils.exception_mapping_utils import ExceptionCheckers

        return bool(ExceptionCheckers.is_error_str_context_window_exceeded(str(exc)))
    except Exception:  # pragma: no cover - litellm internals moved
        text = str(exc).lower()
        return "context length" in text or "context window" in text
