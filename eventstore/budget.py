"""Token budgets: how many tokens a view may use for a given model."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import BudgetError

__all__ = ["Budget"]


@dataclass(frozen=True, slots=True)
class Budget:
    """The tokens a view may use: the model's input window minus reserved output and a buffer.

    Build one from litellm's model map with :meth:`for_model`, or directly::

        Budget(max_input_tokens=8_000, reserved_output=1_000, buffer=400)
    """

    max_input_tokens: int
    """The model's input (context) window."""
    reserved_output: int = 0
    """Tokens kept free for the reply."""
    buffer: int = 0
    """Safety margin for estimation error and framing."""
    model: str | None = None
    """The model the numbers came from, if any."""

    def __post_init__(self) -> None:
        if self.max_input_tokens <= 0:
            raise BudgetError(f"max_input_tokens must be positive, got {self.max_input_tokens}")
        if self.reserved_output < 0 or self.buffer < 0:
            raise BudgetError("reserved_output and buffer must not be negative")
        if self.available <= 0:
            raise BudgetError(
                f"nothing left for the view: {self.max_input_tokens} input tokens minus "
                f"{self.reserved_output} reserved for output minus a {self.buffer} buffer; "
                "lower reserved_output or buffer"
            )

    @property
    def available(self) -> int:
        """Tokens the view itself may use."""
        return self.max_input_tokens - self.reserved_output - self.buffer

    def fraction(self, f: float) -> int:
        """``f`` of the available tokens, rounded down (for thresholds and targets)."""
        return math.floor(self.available * f)

    def fits(self, tokens: int) -> bool:
        """Whether ``tokens`` fit."""
        return tokens <= self.available

    @classmethod
    def for_model(
        cls,
        model: str,
        *,
        max_input_tokens: int | None = None,
        reserved_output: int | None = None,
        buffer: int | None = None,
    ) -> Budget:
        """A budget from the model's limits (:meth:`ModelInfo.lookup`: litellm's model map,
        read without importing litellm), with explicit overrides.

        Defaults: reserve the model's maximum output up to 8,192 tokens (and at most a
        quarter of the window), and keep a buffer of 5% of the window. A model the map does
        not know gets a 4,096-token window and an :class:`UnknownModelWarning`; pass
        ``max_input_tokens`` to say what it has. Local models can also be described with
        ``litellm.register_model``.
        """
        from .models import ModelInfo

        info = ModelInfo.lookup(model, override={"max_input_tokens": max_input_tokens})
        window = info.max_input_tokens
        if reserved_output is None:
            out = info.max_output_tokens or 4096
            reserved_output = min(int(out), 8192, int(window) // 4)
        if buffer is None:
            buffer = math.ceil(int(window) * 0.05)
        return cls(
            max_input_tokens=int(window),
            reserved_output=int(reserved_output),
            buffer=int(buffer),
            model=model,
        )
