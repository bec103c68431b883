"""What the store needs to know about a model: its window and output limit.

:meth:`ModelInfo.lookup` reads litellm's bundled model map (the JSON file inside the
installed ``litellm`` package) directly: tens of milliseconds the first time, instead of
the seconds ``import litellm`` takes. Models registered at run time with
``litellm.register_model`` are seen too, when litellm is already imported. A model the map
does not know gets :data:`DEFAULT_WINDOW` tokens and one :class:`UnknownModelWarning`,
rather than an error: pass ``override={"max_input_tokens": ...}`` (or ``Budget.for_model(...,
max_input_tokens=...)``) to say what it really has::

    >>> ModelInfo.lookup("gpt-4o").max_input_tokens
    128000
    >>> ModelInfo.lookup("my-local-model", override={"max_input_tokens": 32_768}).known
    True
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import ConfigurationError

__all__ = ["ModelInfo", "UnknownModelWarning", "DEFAULT_WINDOW", "model_map"]

#: The input window assumed for a model nobody describes.
DEFAULT_WINDOW = 4096

_MAP_FILE = "model_prices_and_context_window_backup.json"


class UnknownModelWarning(UserWarning):
    """A model is not in litellm's model map; the default window was assumed."""


@lru_cache(maxsize=1)
def model_map() -> dict[str, dict[str, Any]]:
    """litellm's bundled model map, read from the installed package without importing it
    (empty when litellm is not installed)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    for root in spec.submodule_search_locations:
        path = Path(root) / _MAP_FILE
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            return {k: v for k, v in data.items() if isinstance(v, dict)}
    return {}


def _registered(name: str) -> dict[str, Any] | None:
    """An entry from litellm's live map, if litellm is imported (``register_model``)."""
    litellm = sys.modules.get("litellm")
    live = getattr(litellm, "model_cost", None) if litellm is not None else None
    if isinstance(live, dict):
        entry = live.get(name)
        if isinstance(entry, dict):
            return entry
    return None


_REGION_RE = re.compile(r"^(?:us|eu|apac|au|jp|ca|global|us-gov)\.")
_VERSION_RE = re.compile(r"(?:-v\d+(?::\d+)?|:\d+|@[\w.-]+)$")


def _normal(name: str) -> str:
    """A model name as litellm's matching compares it: the last path segment (no provider
    or region routes), no cross-region prefix (``us.``), no vendor prefix of a hosted
    copy (``anthropic.``), no deployment version suffix (``-v1:0``), lower case."""
    base = name.rsplit("/", 1)[-1].lower()
    base = _REGION_RE.sub("", base)
    for vendor in ("anthropic.", "meta.", "mistral.", "amazon.", "cohere.", "ai21."):
        if base.startswith(vendor):
            base = base[len(vendor) :]
            break
    return _VERSION_RE.sub("", base)


@lru_cache(maxsize=1)
def _normal_index() -> dict[str, str]:
    """Normalized name -> the map key it came from (the first with a window wins)."""
    out: dict[str, str] = {}
    for key, entry in model_map().items():
        if entry.get("max_input_tokens") or entry.get("max_tokens"):
            out.setdefault(_normal(key), key)
    return out


def model_entry(name: str) -> tuple[str, dict[str, Any]] | None:
    """The map entry for ``name``: exact, then without each provider prefix, then the
    entry whose name means the same model (litellm's name matching: routes, regions,
    hosted-copy prefixes and deployment versions aside), all without importing litellm."""
    candidates = [name]
    parts = name.split("/")
    candidates += ["/".join(parts[i:]) for i in range(1, len(parts))]
    for key in candidates:
        entry = _registered(key) or model_map().get(key)
        if entry is not None:
            return key, entry
    same = _normal_index().get(_normal(name))
    if same is not None:
        return same, model_map()[same]
    return None


_warned: set[str] = set()


@dataclass(frozen=True)
class ModelInfo:
    """A model's limits, from litellm's model map or an explicit override."""

    name: str
    """The model name as given."""
    provider: str | None
    """The provider litellm routes it to (``openai``, ``anthropic``, ...), when known."""
    max_input_tokens: int
    """The input (context) window in tokens."""
    max_output_tokens: int | None
    """The most tokens one reply may have, when known."""
    known: bool = True
    """False when nothing described the model and :data:`DEFAULT_WINDOW` was assumed."""

    @classmethod
    def find(cls, name: str) -> ModelInfo | None:
        """The model's limits from the map, or ``None`` (no warning) when it is unknown."""
        if not isinstance(name, str) or not name:
            return None
        found = model_entry(name)
        window = (found[1].get("max_input_tokens") or found[1].get("max_tokens")) if found else 0
        if not window:
            return None
        return cls.lookup(name)

    @classmethod
    def lookup(cls, name: str, *, override: Mapping[str, Any] | None = None) -> ModelInfo:
        """The limits of ``name``; ``override`` fields (``max_input_tokens``,
        ``max_output_tokens``, ``provider``) win over the map."""
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"model: expected a model name, got {name!r}")
        found = model_entry(name)
        entry = found[1] if found else {}
        provider = entry.get("litellm_provider")
        if "/" in name and (provider is None or (found and not name.endswith(found[0]))):
            # No provider in the entry, or an entry of another host matched by name: the
            # route the caller wrote says where the model is served.
            provider = name.split("/", 1)[0]
        window = entry.get("max_input_tokens") or entry.get("max_tokens")
        out = entry.get("max_output_tokens")
        info = cls(
            name=name,
            provider=provider,
            max_input_tokens=int(window) if window else DEFAULT_WINDOW,
            max_output_tokens=int(out) if out else None,
            known=bool(window),
        )
        if override:
            unknown = set(override) - {"max_input_tokens", "max_output_tokens", "provider"}
            if unknown:
                raise ConfigurationError(f"override: unknown fields {sorted(unknown)}")
            fields = {k: v for k, v in override.items() if v is not None}
            if fields.get("max_input_tokens") is not None:
                fields["known"] = True
            info = replace(info, **fields)
        if info.max_input_tokens <= 0:
            raise ConfigurationError(f"max_input_tokens must be positive for {name!r}")
        if not info.known and name not in _warned:
            _warned.add(name)
            warnings.warn(
                f"model {name!r} is not in litellm's model map: assuming a "
                f"{DEFAULT_WINDOW:,}-token window (pass max_input_tokens=... to set it)",
                UnknownModelWarning,
                stacklevel=2,
            )
        return info
