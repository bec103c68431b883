"""The format names, detection from a file's content, and dispatch to the format modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from ._loading import (
    ImportFormatError,
    LoadedFile,
    Transcript,
    empty_replies_kept,
    format_error,
    load_file,
    nesting_guard,
)
from .jsonl import EXPORT_FORMAT, parse_export
from .mini_swe_agent import looks_mini, mini_transcript
from .openai import openai_transcript
from .opencode_db import not_opencode_error
from .openhands import looks_openhands, openhands_transcripts
from .openhands_v1 import looks_v1, v1_transcripts
from .swe_agent import swe_agent_transcript

Format = Literal[
    "eventstore",
    "openai",
    "swe-agent",
    "openhands",
    "openhands-v1",
    "mini-swe-agent",
    "claude-code",
    "codex",
    "gemini-cli",
    "aider",
    "cline",
    "opencode",
]

FILE_FORMATS = ("eventstore", "openai", "swe-agent", "openhands", "openhands-v1", "mini-swe-agent")
"""Formats imported whole, as new sessions."""


def _detect(loaded: LoadedFile) -> Format:
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
        raise format_error(
            f"{loaded.path}:{data[0][0]}", "unrecognized JSONL record " + _keys(first)
        )
    if isinstance(data, dict):
        if data.get("format") == EXPORT_FORMAT:
            return "eventstore"
        if isinstance(data.get("history"), list):
            return "openhands" if looks_openhands(data["history"]) else "swe-agent"
        if isinstance(data.get("messages"), list):
            return "mini-swe-agent" if looks_mini(data) else "openai"
        raise format_error(loaded.path, "unrecognized JSON object " + _keys(data))
    if isinstance(data, list):
        if looks_openhands(data):
            return "openhands"
        return "mini-swe-agent" if looks_mini(data) else "openai"
    raise format_error(loaded.path, f"expected a JSON list or object, got {type(data).__name__}")


def _keys(value: Any) -> str:
    if isinstance(value, dict):
        return "with keys " + ", ".join(sorted(value)[:8])
    return f"of type {type(value).__name__}"


def detect_format(path: str | Path) -> Format:
    """Guess the format of a file from its content.

    Raises:
        ImportFormatError: The file is unreadable, not JSON/JSONL, or of no known shape; the
            message names the formats tried.
    """
    from ._keyed import AGENT_FORMATS, detect_agent_format

    agent = detect_agent_format(path)
    if agent is not None:
        return agent  # type: ignore[return-value]
    refused = not_opencode_error(path)
    if refused is not None:
        raise refused
    try:
        return _detect(load_file(path))
    except ImportFormatError as exc:
        tried = ", ".join([*AGENT_FORMATS, *FILE_FORMATS])
        raise ImportFormatError(f"{exc} (formats tried: {tried}; pass --format)") from None


def load_transcripts(path: str | Path, format: Format | None = None) -> list[Transcript]:
    """Read and convert a file without touching any store (an assistant message with
    neither content nor tool calls becomes a custom event: see
    :func:`~eventstore.importers.empty_replies_kept`).

    Args:
        path: The file.
        format: One of :data:`Format`; detected from the content when omitted.

    Raises:
        ImportFormatError: Malformed input; the message names the file and line/record.
    """
    with nesting_guard(str(path)):
        transcripts = _load_transcripts(path, format)
    for t in transcripts:
        if t.hashes is None:  # an export is restored as it was
            t.events = empty_replies_kept(t.events)
    return transcripts


def _load_transcripts(path: str | Path, format: Format | None) -> list[Transcript]:
    fmt = format or detect_format(path)
    from ._keyed import AGENT_FORMATS, convert_transcript

    if fmt in AGENT_FORMATS:
        return convert_transcript(path, fmt)
    loaded = load_file(path)
    if fmt == "eventstore":
        return [parse_export(loaded)]
    if fmt == "openai":
        return [openai_transcript(loaded)]
    if fmt == "swe-agent":
        return [swe_agent_transcript(loaded)]
    if fmt == "openhands":
        return openhands_transcripts(loaded)
    if fmt == "openhands-v1":
        return v1_transcripts(loaded)
    if fmt == "mini-swe-agent":
        return [mini_transcript(loaded)]
    raise ImportFormatError(f"{loaded.path}: unknown format {fmt!r}")
