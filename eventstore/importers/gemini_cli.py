"""Gemini CLI chat recordings: ``~/.gemini/tmp/<project hash>/chats/session-*.json[l]``.

Two layouts. The JSONL recording starts with a header (``sessionId``, ``projectHash``,
``startTime``), then appends one line per message and ``{"$set": {...}}`` lines updating
the header; a message written again with the same ``id`` (its tool calls or results
arrived) replaces the earlier version. The older layout is one JSON object holding the
header fields and a ``messages`` list (a message's position in it counts as its line).

A model message already stored when a later version of it arrives (the file was imported
while the CLI was still writing it, or other records came between its versions) cannot be
replaced in an append-only session: what the later version adds (thoughts, text, tool calls,
results) follows as a message of its own, so no part is stored twice.

``user`` messages become user messages; ``gemini`` messages become one assistant message
(``thoughts`` as reasoning parts, the text, ``toolCalls`` as tool calls), followed by a tool
message with the results embedded in the calls (``functionResponse``). ``info``, ``error``
and ``warning`` messages, ``$set`` lines, the header and unknown records are kept as
``Custom`` events named ``gemini-cli.<type>``.

Two records change the conversation the CLI sends, and each becomes one ``Condensation``
without a summary (the record kept in its settings):

* ``{"$rewindTo": id}`` (``/rewind``): that message and every later one are dropped;
  the earlier ones stay pinned. An id the conversation does not hold drops everything, as
  the CLI does.
* ``{"$set": {"messages": [...]}}``, the checkpoint the CLI writes when it replaces its
  history (chat compression, a restored checkpoint, an aborted turn rolled back): the
  messages it no longer lists are forgotten, the ones before them stay pinned and the ones
  after them follow (a message it lists between two it dropped is forgotten with them:
  a condensation forgets one range). The messages it
  adds (the compression's summary and the model's acknowledgement) are written as messages
  just before, so the view holds the same messages; it holds them in the order they were
  written, after the turns the compression kept, where the CLI lists them first.

A ``$set`` that lists the same messages (metadata, or tool output masked in place) is
kept as a ``Custom`` event.

The session's key is ``gemini-cli:<sessionId>``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..events import (
    Condensation,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ._agent import Converter, InvalidLine, parse_when, short_title, text_of
from ._loading import format_error

FORMAT = "gemini-cli"


def looks_gemini_header(record: Any) -> bool:
    """Whether a record is a Gemini CLI session header (JSONL) or whole session (JSON)."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("sessionId"), str)
        and ("projectHash" in record or "startTime" in record)
        and "type" not in record
    )


def looks_gemini(records: list[Any]) -> bool:
    return bool(records) and looks_gemini_header(records[0])


def json_session_records(path: str | Path) -> Iterator[tuple[int, Any]]:
    """The older single-JSON layout as records: the header, then each message."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise format_error(str(path), f"cannot read a Gemini CLI session: {exc}") from None
    if not (looks_gemini_header(data) and isinstance(data.get("messages"), list)):
        raise format_error(str(path), "expected a Gemini CLI session with sessionId and messages")
    yield 1, {k: v for k, v in data.items() if k != "messages"}
    yield from enumerate(data["messages"], start=2)


class GeminiCli(Converter):
    format = FORMAT

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.pending: dict[str, Any] | None = None  # the newest version of a model message
        self.first = 0
        self.held: list[tuple[str, Any, datetime | None, int]] = []
        self.context: dict[str, list[int]] = {}  # the messages sent: id -> their seqs
        self.last_condensation: int | None = None
        self.stored: dict[str, _Stored] = {}  # model message id -> what was emitted of it

    def feed(self, line: int, record: Any) -> None:
        if isinstance(record, InvalidLine):
            self._bookkeeping("invalid_line", {"text": record.text, "error": record.error})
            return
        if not isinstance(record, dict):
            self._bookkeeping("non_record", record)
            return
        header = looks_gemini_header(record)
        # The header's time is its startTime (the single-JSON layout's first records are
        # not lines, so no time is known before it).
        when = parse_when(record.get("startTime" if header else "timestamp"))
        if when is not None:
            self.when = when
        if header:
            if self.source_id is None:
                self.source_id = record["sessionId"]
                self.metadata = {
                    k: record[k]
                    for k in ("projectHash", "startTime")
                    if isinstance(record.get(k), str)
                }
            self._bookkeeping("session", record)
            return
        if isinstance(record.get("$rewindTo"), str):
            self._close()
            self._forget(record, self._rewound(record["$rewindTo"]))
            return
        if "$set" in record:
            update = record["$set"]
            listed = update.get("messages") if isinstance(update, dict) else None
            if isinstance(listed, list):
                self._close()
                self._forget(record, self._replaced(listed))
            else:
                self._bookkeeping("set", record)
            return
        kind = record.get("type")
        if kind in ("gemini", "model"):
            if self.pending is not None and self.pending.get("id") != record.get("id"):
                self._close()
            if self.pending is None:
                self.first = line
            self.pending = record  # a later version of the same message replaces it
            return
        self._close()
        if kind == "user":
            text = _text(record)
            if self.title is None:
                self.title = short_title(text_of(record.get("displayContent")) or text)
            item = self.emit(
                Message(
                    role="user",
                    parts=[TextPart(text=text)],
                    provider_metadata={FORMAT: {"id": record.get("id")}},
                    created_at=self.when,
                )
            )
            self._sent(record, [item.seq])
        else:
            self._bookkeeping(str(kind or "record"), record)

    def close(self) -> None:
        self._close()

    def _bookkeeping(self, name: str, record: Any) -> None:
        if self.pending is not None:
            self.held.append((name, record, self.when, self.line))
        else:
            self.custom(name, record, self.when)

    def _close(self) -> None:
        rec, self.pending = self.pending, None
        if rec is None:
            return
        when = parse_when(rec.get("timestamp")) or self.when
        given = rec.get("id")
        done = self.stored.get(given) if isinstance(given, str) else None
        if done is None:
            done = _Stored()
            if isinstance(given, str):
                self.stored[given] = done
        parts: list[Part] = []
        thoughts = [t for t in rec.get("thoughts") or [] if isinstance(t, dict)]
        for thought in thoughts[done.thoughts :]:
            subject, desc = thought.get("subject"), thought.get("description")
            text = f"**{subject}**\n{desc}" if subject else str(desc or "")
            parts.append(ReasoningPart(text=text, format="reasoning_content"))
        done.thoughts = max(done.thoughts, len(thoughts))
        text = _text(rec)
        if text and text != done.text:
            grown = done.text and text.startswith(done.text)
            parts.append(TextPart(text=text[len(done.text) :] if grown else text))
            done.text = text
        results: list[Part] = []
        for i, call in enumerate(rec.get("toolCalls") or []):
            if not isinstance(call, dict):
                continue
            call_id = str(call.get("id") or f"{rec.get('id')}-{i}")
            name = str(call.get("name") or "tool")
            args = call.get("args", {})
            if call_id not in done.calls:
                done.calls.add(call_id)
                parts.append(
                    ToolCallPart(
                        id=call_id,
                        name=name,
                        arguments=args
                        if isinstance(args, str)
                        else json.dumps(args, ensure_ascii=False),
                    )
                )
            if call_id in done.results:
                continue
            if call.get("result") is not None or call.get("status") in ("error", "cancelled"):
                done.results.add(call_id)
                output, error = _result(call)
                results.append(
                    ToolResultPart(
                        tool_call_id=call_id,
                        name=name,
                        output=output,
                        is_error=error,
                        state="error" if error else "completed",
                    )
                )
        meta = {k: rec[k] for k in ("id", "tokens") if rec.get(k) is not None}
        model = rec.get("model") if isinstance(rec.get("model"), str) else None
        seqs = list(done.seqs)
        if parts or not done.seqs:
            reply = self.emit(
                Message(
                    role="assistant",
                    parts=parts,
                    model=model,
                    provider_metadata={FORMAT: meta},
                    created_at=when,
                ),
                first=self.first,
                held=True,
            )
            seqs.append(reply.seq)
        if results:
            seqs.append(
                self.emit(
                    Message(role="tool", parts=results, created_at=when),
                    first=self.first,
                    held=True,
                ).seq
            )
        done.seqs = seqs
        self._sent(rec, seqs)
        held, self.held = self.held, []
        for name, record, hwhen, line in held:
            self.custom(name, record, hwhen, first=line, held=True)

    # -- what the CLI sends

    def _sent(self, record: dict[str, Any], seqs: list[int]) -> None:
        given = record.get("id")
        key = given if isinstance(given, str) else f"#{self.line}"
        self.context.pop(key, None)  # a message written again moves to its new place
        self.context[key] = seqs

    def _rewound(self, message_id: str) -> list[str]:
        """The messages a rewind to ``message_id`` drops."""
        ids = list(self.context)
        return ids[ids.index(message_id) :] if message_id in self.context else ids

    def _replaced(self, listed: list[Any]) -> list[str]:
        """The messages a checkpoint no longer lists (those it lists but the file never
        held are written first, as messages)."""
        ids = [m.get("id") for m in listed if isinstance(m, dict)]
        for msg in listed:
            if isinstance(msg, dict) and msg.get("id") not in self.context:
                self.feed(self.line, msg)
                self._close()
        keep = {i for i in ids if isinstance(i, str)}
        return [i for i in self.context if i not in keep]

    def _forget(self, record: dict[str, Any], dropped: list[str]) -> None:
        name = "rewind" if "$rewindTo" in record else "set"
        forgotten = sorted(s for i in dropped for s in self.context[i])
        if not forgotten:
            self._bookkeeping(name, record)
            return
        for i in dropped:
            del self.context[i]
            self.stored.pop(i, None)  # written again, it is a message anew
        first, last = forgotten[0], forgotten[-1]
        item = self.emit(
            Condensation(
                forgotten_from=first,
                forgotten_to=last,
                forgotten_events=last - first + 1,
                summary=None,
                condenser=FORMAT,
                trigger="import",
                pinned=sorted(s for seqs in self.context.values() for s in seqs if s < first),
                supersedes=self.last_condensation,
                settings={"record": record},
                created_at=self.when,
            )
        )
        self.last_condensation = item.seq


@dataclass
class _Stored:
    """What the events already emitted hold of one model message."""

    thoughts: int = 0
    text: str = ""
    calls: set[str] = field(default_factory=set)
    results: set[str] = field(default_factory=set)
    seqs: list[int] = field(default_factory=list)


def _text(record: dict[str, Any]) -> str:
    """A message's text: its ``content``, or (a record written as the API's ``Content``) the
    text of its ``parts``."""
    return text_of(record.get("content")) or text_of(record.get("parts"))


def _result(call: dict[str, Any]) -> tuple[str, bool]:
    """A tool call's output from its embedded ``functionResponse`` parts, and whether it
    failed."""
    error = call.get("status") in ("error", "cancelled")
    texts: list[str] = []
    result = call.get("result")
    for item in result if isinstance(result, list) else [result]:
        resp = item.get("functionResponse") if isinstance(item, dict) else None
        response = resp.get("response") if isinstance(resp, dict) else None
        if isinstance(response, dict):
            if isinstance(response.get("output"), str):
                texts.append(response["output"])
            elif isinstance(response.get("error"), str):
                texts.append(response["error"])
                error = True
            else:
                texts.append(json.dumps(response, ensure_ascii=False))
        elif item is not None:
            texts.append(item if isinstance(item, str) else json.dumps(item, ensure_ascii=False))
    if not texts and isinstance(call.get("resultDisplay"), str):
        texts.append(call["resultDisplay"])
    return "\n".join(texts), error
