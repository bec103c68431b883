"""The format names, detection from a file's content, and dispatch to the format modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from ._loading import ImportFormatError, Transcript, _fail, _load, _Loaded, nesting_guard
from .jsonl import EXPORT_FORMAT, _parse_export
from .mini_swe_agent import _mini_transcript, looks_mini
from .openai import _openai_transcript
from .openhands import _looks_openhands, _openhands_transcripts
from .openhands_v1 import _v1_transcripts, looks_v1
from .swe_agent import _swe_agent_transcript

Format = Literal["eventstore", "openai", "swe-agent", "openhands", "openhands-v1", "mini-swe-agent"]


def _detect(loaded: _Loaded) -> Format:
    data = loaded.data
    if looks_v1(loaded):
        return "openhands-v1"
    if loaded.jsonl:
        first = data[0][1]
        if isinstance(first, dict) and first.get("format") == EXPORT_FORMAT:
            return "eventstore"
        if isinstance(first, dict) and "history" in first:
            return "openhands"
        if isinstance(first, dict) and "role" in first:
            return "openai"
        raise _fail(f"{loaded.path}:{data[0][0]}", "unrecognized JSONL record " + _keys(first))
    if isinstance(data, dict):
        if data.get("format") == EXPORT_FORMAT:
            return "eventstore"
        if isinstance(data.get("history"), list):
            return "openhands" if _looks_openhands(data["history"]) else "swe-agent"
        if isinstance(data.get("messages"), list):
            return "mini-swe-agent" if looks_mini(data) else "openai"
        raise _fail(loaded.path, "unrecognized JSON object " + _keys(data))
    if isinstance(data, list):
        if _looks_openhands(data):
            return "openhands"
        return "mini-swe-agent" if looks_mini(data) else "openai"
    raise _fail(loaded.path, f"expected a JSON list or object, got {type(data).__name__}")


def _keys(value: Any) -> str:
    if isinstance(value, dict):
        return "with keys " + ", ".join(sorted(value)[:8])
    return f"of type {type(value).__name__}"


def detect_format(path: str | Path) -> Format:
    """Guess the format of a file from its content.

    Raises:
        ImportFormatError: The file is unreadable, not JSON/JSONL, or of no known shape.
    """
    return _detect(_load(path))


def load_transcripts(path: str | Path, format: Format | None = None) -> list[Transcript]:
    """Read and convert a file without touching any store.

    Args:
        path: The file.
        format: One of :data:`Format`; detected from the content when omitted.

    Raises:
        ImportFormatError: Malformed input; the message names the file and line/record.
    """
    with nesting_guard(str(path)):
        return _load_transcripts(path, format)


def _load_transcripts(path: str | Path, format: Format | None) -> list[Transcript]:
    loaded = _load(path)
    fmt = format or _detect(loaded)
    if fmt == "eventstore":
        return [_parse_export(loaded)]
    if fmt == "openai":
        return [_openai_transcript(loaded)]
    if fmt == "swe-agent":
        return [_swe_agent_transcript(loaded)]
    if fmt == "openhands":
        return _openhands_transcripts(loaded)
    if fmt == "openhands-v1":
        return _v1_transcripts(loaded)
    if fmt == "mini-swe-agent":
        return [_mini_transcript(loaded)]
    raise ImportFormatError(f"{loaded.path}: unknown format {fmt!r}")
