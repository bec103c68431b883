"""Strategies by name: pick them per agent, in configuration files and on the command line.

::

    from condensers import CondensationPolicy, registry

    pipeline = registry.pipeline(["prune", "summarize", "window"])
    policy = CondensationPolicy(budget, pipeline)
    registry.strategy("window", max_interactions=20)  # one strategy, with its options

Names: ``prune`` (:class:`ToolOutputPruner`), ``mask`` (:class:`ObservationMasker`),
``truncate_results`` (:class:`ResultTruncator`), ``truncate_head`` (:class:`HeadTruncator`),
``truncate_newest`` (:class:`NewestTruncator`), ``summarize`` (:class:`ExtractiveCondenser`,
or :class:`LLMSummaryCondenser` when a ``model`` is given), ``llm``
(:class:`LLMSummaryCondenser`, needs ``model``), ``window`` (:class:`WindowCondenser`) and
``truncate`` (a window that keeps 70% of the budget and says ``[N earlier messages
truncated to fit context window]``). :func:`register` adds your own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eventstore.errors import ConfigurationError

from .base import Condenser
from .pipeline import Pipeline
from .pruning import (
    HeadTruncator,
    NewestTruncator,
    ObservationMasker,
    ResultTruncator,
    ToolOutputPruner,
)
from .summarizing import ExtractiveCondenser, LLMSummaryCondenser
from .window import TRUNCATION_NOTE, WindowCondenser

__all__ = ["STRATEGIES", "names", "pipeline", "register", "strategy"]

Factory = Callable[..., Condenser]


def _summarize(*, model: str | None = None, **options: Any) -> Condenser:
    if model:
        return LLMSummaryCondenser(model, **options)
    return ExtractiveCondenser(**options)


def _llm(*, model: str | None = None, **options: Any) -> Condenser:
    if not model:
        raise ConfigurationError("strategy 'llm' needs model=... (the summary model)")
    return LLMSummaryCondenser(model, **options)


def _truncate(**options: Any) -> Condenser:
    return WindowCondenser(
        **{"target_fraction": 0.7, "note": TRUNCATION_NOTE, "counts": "messages", **options}
    )


STRATEGIES: dict[str, Factory] = {
    "prune": ToolOutputPruner,
    "mask": ObservationMasker,
    "truncate_results": ResultTruncator,
    "truncate_head": HeadTruncator,
    "truncate_newest": NewestTruncator,
    "summarize": _summarize,
    "llm": _llm,
    "window": WindowCondenser,
    "truncate": _truncate,
}
"""Every strategy by name (:func:`register` adds to it)."""

# The pipeline-wide options each built-in strategy takes.
_TAKES = {
    "prune": (),
    "mask": (),
    "truncate_results": (),
    "truncate_head": (),
    "truncate_newest": (),
    "summarize": ("model", "target_fraction"),
    "llm": ("model", "target_fraction"),
    "window": ("target_fraction",),
    "truncate": (),
}


def names() -> list[str]:
    """The registered strategy names, sorted."""
    return sorted(STRATEGIES)


def register(name: str, factory: Factory, *, replace: bool = False) -> None:
    """Add a strategy under ``name`` (``factory(**options)`` returns a condenser)."""
    if not name or not isinstance(name, str):
        raise ConfigurationError(f"a strategy name must be a non-empty string, got {name!r}")
    if name in STRATEGIES and not replace:
        raise ConfigurationError(f"strategy {name!r} exists; pass replace=True to replace it")
    STRATEGIES[name] = factory


def strategy(name: str, **options: Any) -> Condenser:
    """The strategy ``name`` built with ``options`` (its constructor's keyword arguments)."""
    factory = STRATEGIES.get(name)
    if factory is None:
        raise ConfigurationError(
            f"unknown strategy {name!r}; known: {', '.join(names())} (or register your own)"
        )
    try:
        return factory(**options)
    except TypeError as exc:
        raise ConfigurationError(f"strategy {name!r}: {exc}") from None


def pipeline(
    steps: Sequence[str] | str,
    *,
    model: str | None = None,
    target_fraction: float = 0.5,
    options: dict[str, dict[str, Any]] | None = None,
) -> Pipeline:
    """A pipeline of named strategies, in order (cheapest first, as a rule).

    Args:
        steps: Names, as a list or comma-separated (``"prune,summarize,window"``).
        model: Summary model for ``summarize`` / ``llm``.
        target_fraction: Target view size after a run, as a fraction of the budget.
        options: Per-name keyword arguments (``{"window": {"max_interactions": 20}}``).
    """
    chosen = [s.strip() for s in steps.split(",")] if isinstance(steps, str) else list(steps)
    chosen = [s for s in chosen if s]
    if not chosen:
        raise ConfigurationError("a pipeline needs at least one strategy name")
    extra = options or {}
    unknown = set(extra) - set(chosen)
    if unknown:
        raise ConfigurationError(f"options for strategies not in the pipeline: {sorted(unknown)}")
    shared = {"model": model, "target_fraction": target_fraction}
    built = []
    for name in chosen:
        takes = _TAKES.get(name, ())
        kw = {k: v for k, v in shared.items() if k in takes and v is not None}
        built.append(strategy(name, **{**kw, **extra.get(name, {})}))
    return Pipeline(built, target_fraction=target_fraction)
