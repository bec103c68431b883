"""OpenAI/litellm chat transcripts (mini-swe-agent trajectories are these).

A JSON list of messages, JSONL with one message per line, or an object with a
``messages`` list (its other keys go to the session metadata, ``title`` to the title).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..chat import from_openai
from ..errors import InvalidEventError
from ..events import Event, Message
from ._loading import LoadedFile, Transcript, format_error


def openai_transcript(loaded: LoadedFile) -> Transcript:
    path = loaded.path
    meta: dict[str, Any] = {"import": {"format": "openai", "file": Path(path).name}}
    title: str | None = Path(path).name
    if loaded.jsonl:
        records = [(f"{path}:{n}", raw) for n, raw in loaded.data]
    else:
        data = loaded.data
        if isinstance(data, dict):
            if not isinstance(data.get("messages"), list):
                raise format_error(path, "expected a `messages` list")
            rest = {k: v for k, v in data.items() if k != "messages"}
            if isinstance(rest.get("title"), str):
                title = rest.pop("title")
            meta.update(rest)
            data = data["messages"]
        if not isinstance(data, list):
            raise format_error(path, f"expected a list of messages, got {type(data).__name__}")
        records = [(f"{path}: message {i}", raw) for i, raw in enumerate(data)]
    events: list[Event] = [convert_message(raw, where) for where, raw in records]
    return Transcript(events=events, title=title, metadata=meta)


def convert_message(raw: Any, where: str) -> Message:
    try:
        return from_openai(raw)
    except InvalidEventError as exc:
        raise format_error(where, str(exc)) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise format_error(where, f"{loc}: {err['msg']}") from None
