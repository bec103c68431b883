"""OpenAI Codex CLI sessions: ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``.

Each line is ``{"timestamp", "type", "payload"}``. ``response_item`` lines are what the model
saw and said: ``message`` (user, developer or assistant text), ``reasoning`` (its summary as a
reasoning part, the whole item with its ``encrypted_content`` as a provider part),
``function_call``, ``custom_tool_call`` and ``local_shell_call`` (tool calls), and their
outputs, paired by ``call_id`` (tool results). Consecutive model items (reasoning, text, calls)
make one assistant message. A ``compacted`` line (Codex's own compaction) becomes one
``Condensation`` whose summary is its ``message`` verbatim, forgetting everything before it;
when the message is empty (the server compacted) and the line carries the
``replacement_history`` Codex sends from then on, the summary is that history's messages' text,
with a count of its encrypted items.
``session_meta``, ``turn_context``, ``event_msg`` and anything unknown are kept as ``Custom``
events named ``codex.<type>``.

Rollouts written before ``session_meta`` existed (Codex CLI until about September 2025) have
no envelope: the first line is the session's header ``{"id", "timestamp", "instructions",
"git"}`` (read as ``session_meta``), ``{"record_type": "state"}`` lines are bookkeeping
(``codex.state``), and every other line is a response item of its own, without a payload
wrapper or a timestamp (each takes the time of the latest record that had one).

The session's key is ``codex:<session_meta.payload.id>`` (the header's ``id`` in the older
layout).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from ..events import (
    Condensation,
    FilePart,
    Message,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ._agent import Converter, InvalidLine, parse_when, short_title, text_of

FORMAT = "codex"
_LINE_TYPES = {"session_meta", "response_item", "turn_context", "event_msg", "compacted"}
_MODEL_ITEMS = {"reasoning", "function_call", "custom_tool_call", "local_shell_call"}
_ITEM_TYPES = _MODEL_ITEMS | {
    "message",
    "function_call_output",
    "custom_tool_call_output",
    "local_shell_call_output",
}


def looks_codex(records: list[Any]) -> bool:
    """Whether the first records of a JSONL file are a Codex rollout's (either layout)."""
    if records and looks_legacy_header(records[0]):
        return "instructions" in records[0] or any(
            isinstance(r, dict) and ("record_type" in r or r.get("type") in _ITEM_TYPES)
            for r in records[1:]
        )
    return any(
        isinstance(r, dict) and r.get("type") in _LINE_TYPES and isinstance(r.get("payload"), dict)
        for r in records
    )


def looks_legacy_header(record: Any) -> bool:
    """Whether a record is the first line of a rollout of the older layout (no envelope):
    a session id and a timestamp, and none of the fields that mark another record."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("id"), str)
        and isinstance(record.get("timestamp"), str)
        and not {"type", "payload", "record_type", "sessionId"} & record.keys()
    )


def codex_session_id(record: Any) -> str | None:
    """The session id a record names: a ``session_meta`` line's, or the older header's."""
    if not isinstance(record, dict):
        return None
    if looks_legacy_header(record):
        return str(record["id"])
    payload = record.get("payload")
    if record.get("type") == "session_meta" and isinstance(payload, dict):
        sid = payload.get("id")
        return sid if isinstance(sid, str) else None
    return None


class Codex(Converter):
    format = FORMAT

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.parts: list[Part] | None = None  # the open assistant message
        self.first = 0
        self.group_when: datetime | None = None
        self.model: str | None = None
        self.held: list[tuple[str, Any, datetime | None, int]] = []
        self.tool_names: dict[str, str] = {}
        self.last_condensation: int | None = None
        self.legacy = False  # the older layout: bare response items, no envelope

    def feed(self, line: int, record: Any) -> None:
        if isinstance(record, InvalidLine):
            self._bookkeeping("invalid_line", {"text": record.text, "error": record.error})
            return
        if not isinstance(record, dict):
            self._bookkeeping("non_record", record)
            return
        when = parse_when(record.get("timestamp"))
        if when is not None:
            self.when = when
        kind = record.get("type")
        payload = record.get("payload")
        payload = payload if isinstance(payload, dict) else {}
        if self.source_id is None and looks_legacy_header(record):
            self.legacy = True
            kind, payload = "session_meta", record
        elif self.legacy and "payload" not in record:
            if kind is None and isinstance(record.get("record_type"), str):
                self._bookkeeping(record["record_type"], record)
            elif isinstance(kind, str):
                self._item(record, record)
            else:
                self._bookkeeping("record", record)
            return
        if kind == "session_meta":
            if self.source_id is None and isinstance(payload.get("id"), str):
                self.source_id = payload["id"]
                self.metadata = {
                    k: payload[k]
                    for k in ("cwd", "cli_version", "originator", "model_provider", "source")
                    if isinstance(payload.get(k), str)
                }
            self._bookkeeping("session_meta", record)
        elif kind == "turn_context":
            if isinstance(payload.get("model"), str):
                self.model = payload["model"]
            self._bookkeeping("turn_context", record)
        elif kind == "event_msg":
            if (
                self.title is None
                and payload.get("type") == "user_message"
                and isinstance(payload.get("message"), str)
            ):
                self.title = short_title(payload["message"])
            self._bookkeeping(f"event_msg.{payload.get('type') or 'event'}", record)
        elif kind == "response_item":
            self._item(payload, record)
        elif kind == "compacted":
            self._close()
            self._compacted(payload)
        else:
            self._bookkeeping(str(kind or "record"), record)

    def close(self) -> None:
        self._close()

    # -- conversion

    def _bookkeeping(self, name: str, record: Any) -> None:
        if self.parts is not None:
            self.held.append((name, record, self.when, self.line))
        else:
            self.custom(name, record, self.when)

    def _open(self) -> list[Part]:
        if self.parts is None:
            self.parts = []
            self.first = self.line
            self.group_when = self.when
        return self.parts

    def _close(self) -> None:
        if self.parts is None:
            return
        parts, self.parts = self.parts, None
        self.emit(
            Message(role="assistant", parts=parts, model=self.model, created_at=self.group_when),
            first=self.first,
            held=True,
        )
        held, self.held = self.held, []
        for name, record, when, line in held:
            self.custom(name, record, when, first=line, held=True)

    def _item(self, item: dict[str, Any], record: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            if role == "assistant":
                self._open().extend(_content_parts(item.get("content")))
                return
            self._close()
            parts = _content_parts(item.get("content"))
            mapped: Literal["system", "user"] = (
                "system" if role in ("developer", "system") else "user"
            )
            self.emit(
                Message(
                    role=mapped,
                    parts=parts,
                    provider_metadata={FORMAT: {"role": role}} if role != mapped else None,
                    created_at=self.when,
                )
            )
        elif kind in _MODEL_ITEMS:
            self._open().extend(self._model_parts(item))
        elif (
            isinstance(kind, str)
            and kind.endswith("_output")
            and isinstance(item.get("call_id"), str)
        ):
            self._close()
            call_id = item["call_id"]
            output = item.get("output")
            error = isinstance(output, dict) and output.get("success") is False
            self.emit(
                Message(
                    role="tool",
                    parts=[
                        ToolResultPart(
                            tool_call_id=call_id,
                            name=self.tool_names.get(call_id),
                            output=_output_text(output),
                            is_error=error,
                            state="error" if error else "completed",
                        )
                    ],
                    created_at=self.when,
                )
            )
        else:
            self._bookkeeping(f"response_item.{kind or 'item'}", record)

    def _model_parts(self, item: dict[str, Any]) -> list[Part]:
        kind = item["type"]
        if kind == "reasoning":
            parts: list[Part] = []
            summary = "\n\n".join(
                str(s.get("text", "")) for s in item.get("summary") or [] if isinstance(s, dict)
            )
            if summary:
                parts.append(ReasoningPart(text=summary, format="reasoning_content"))
            parts.append(ProviderPart(provider="openai", item=item))
            return parts
        call_id = item.get("call_id") or item.get("id")
        if not isinstance(call_id, str):
            return [ProviderPart(provider="openai", item=item)]
        if kind == "function_call":
            name = str(item.get("name") or "function")
            args = item.get("arguments", "")
            arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            call_type = "function"
        elif kind == "custom_tool_call":
            name = str(item.get("name") or "custom")
            raw = item.get("input", "")
            arguments = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
            call_type = "custom"
        else:  # local_shell_call
            name = "local_shell"
            arguments = json.dumps(item.get("action", {}), ensure_ascii=False)
            call_type = "local_shell"
        self.tool_names[call_id] = name
        return [ToolCallPart(id=call_id, name=name, arguments=arguments, call_type=call_type)]

    def _compacted(self, payload: dict[str, Any]) -> None:
        before = self.seqs.get(None, 0)
        message = payload.get("message")
        summary = message if isinstance(message, str) else None
        if not summary and isinstance(payload.get("replacement_history"), list):
            summary = _replacement_text(payload["replacement_history"])
        item = self.emit(
            Condensation(
                forgotten_from=1,
                forgotten_to=before,
                forgotten_events=before,
                summary=summary,
                condenser=FORMAT,
                trigger="import",
                pinned=[],
                supersedes=self.last_condensation,
                settings={"record": payload},
                created_at=self.when,
            )
        )
        self.last_condensation = item.seq


def _replacement_text(history: list[Any]) -> str | None:
    """The text of a compaction's replacement history, for a ``compacted`` line whose
    ``message`` is empty (a compaction made by the server): the messages Codex sends from
    then on, in order, and how many encrypted items it sends with them (kept, whole, in the
    condensation's settings)."""
    texts: list[str] = []
    sealed = 0
    for item in history:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            text = text_of(item.get("content"))
            if text:
                texts.append(text)
        elif "encrypted_content" in item:
            sealed += 1
    if sealed:
        texts.append(
            f"[{sealed} encrypted compaction item{'s' if sealed > 1 else ''}, "
            "readable only by the model]"
        )
    return "\n\n".join(texts) or None


def _content_parts(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(text=content)]
    parts: list[Part] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in ("input_text", "output_text", "text") and "text" in block:
            parts.append(TextPart(text=str(block["text"])))
        elif kind == "input_image" and isinstance(block.get("image_url"), str):
            url = block["image_url"]
            media = url[5 : url.index(";")] if url.startswith("data:") and ";" in url else "image/*"
            parts.append(FilePart(media_type=media, uri=url))
        else:
            parts.append(ProviderPart(provider="openai", item=block))
    return parts


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        return output["content"]
    if isinstance(output, list) and all(isinstance(b, dict) and "text" in b for b in output):
        return text_of(output)
    return json.dumps(output, ensure_ascii=False)
