"""Claude Code sessions: ``~/.claude/projects/<project>/<sessionId>.jsonl``.

Each line is one record. ``user`` and ``assistant`` records carry an Anthropic API message;
Claude Code 2.x writes one line per content block, so consecutive assistant lines of one API
message (the same ``message.id``) become one assistant message. Content blocks keep their
ids: ``text``, ``thinking`` (a reasoning part with its signature), ``redacted_thinking``,
``tool_use`` (a tool call) and ``tool_result`` (a tool message; text beside results becomes a
user message after it); images become file parts, anything else a provider part. A
record's ``toolUseResult`` (the CLI's own structured copy of a tool's result) is not kept.

A native compaction (a ``system`` record with subtype ``compact_boundary``, then the user
record with ``isCompactSummary``) becomes one ``Condensation`` whose summary is the summary
text verbatim and whose forgotten range is everything before it: after a compaction Claude
Code sends the summary and what follows, nothing earlier. A microcompaction (``system``
subtype ``microcompact_boundary``) clears the output of the tool calls its
``microcompactMetadata.compactedToolIds`` names: it becomes one ``Prune`` of those results.

Sidechain records (``isSidechain``: a subagent's conversation, in the main file in 1.x or in
``<sessionId>/subagents/agent-*.jsonl`` in 2.x) go to a child session of the main one, one
per subagent. Every other record (``summary``, ``file-history-snapshot``, ``progress``,
``queue-operation``, other ``system`` subtypes, records of types not known here, and lines
that are not JSON) is kept as a ``Custom`` event named ``claude-code.<type>``: never lost,
never in the view.

The session's key is ``claude-code:<sessionId>``.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from ..events import (
    Condensation,
    FilePart,
    Message,
    Part,
    PartRef,
    ProviderPart,
    Prune,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ._agent import ChildInfo, Converter, InvalidLine, parse_when, short_title, text_of

FORMAT = "claude-code"
_RECORD_TYPES = {
    "user",
    "assistant",
    "system",
    "summary",
    "file-history-snapshot",
    "queue-operation",
    "progress",
    "attachment",
}


def looks_claude_code(records: list[Any]) -> bool:
    """Whether the first records of a JSONL file are Claude Code's."""
    for rec in records:
        if not isinstance(rec, dict):
            continue
        if rec.get("type") in _RECORD_TYPES and (
            "sessionId" in rec or "leafUuid" in rec or "parentUuid" in rec
        ):
            return True
        # 2.x opens a session with a snapshot of the files it tracks, before any line that
        # names the session.
        if rec.get("type") == "file-history-snapshot" and isinstance(rec.get("snapshot"), dict):
            return True
    return False


class _Group:
    """The assistant message being assembled from the lines of one API message."""

    def __init__(self, msg_id: str | None, first: int) -> None:
        self.msg_id = msg_id
        self.first = first
        self.parts: list[Part] = []
        self.uuids: list[str] = []
        self.model: str | None = None
        self.when: datetime | None = None
        self.meta: dict[str, Any] = {}
        self.held: list[tuple[str, Any, datetime | None, int]] = []  # bookkeeping after it


class ClaudeCode(Converter):
    format = FORMAT

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.groups: dict[str | None, _Group] = {}
        self.boundary: dict[str | None, tuple[int, dict[str, Any]]] = {}
        self.last_condensation: dict[str | None, int] = {}
        self.tool_names: dict[str, str] = {}
        self.child_of_uuid: dict[str, str] = {}
        self.last_child: str | None = None
        self.results: dict[tuple[str | None, str], PartRef] = {}  # (session, call id) -> part

    # -- records

    def feed(self, line: int, record: Any) -> None:
        if isinstance(record, InvalidLine):
            self._bookkeeping(None, "invalid_line", {"text": record.text, "error": record.error})
            return
        if not isinstance(record, dict):
            self._bookkeeping(None, "non_record", record)
            return
        when = parse_when(record.get("timestamp"))
        if when is not None:
            self.when = when
        if self.source_id is None and isinstance(record.get("sessionId"), str):
            self.source_id = record["sessionId"]
            self.metadata = {
                k: record[k]
                for k in ("cwd", "version", "gitBranch")
                if isinstance(record.get(k), str)
            }
        kind = record.get("type")
        target = self._target(record)
        if kind == "summary" and self.title is None and isinstance(record.get("summary"), str):
            self.title = short_title(record["summary"])
        if kind == "custom-title" and isinstance(record.get("customTitle"), str):
            self.title = short_title(record["customTitle"])
        if target in self.boundary and not (kind == "user" and record.get("isCompactSummary")):
            self._condense(target, None, None, held=True)
        if kind == "assistant" and isinstance(record.get("message"), dict):
            self._assistant(target, record)
        elif kind == "user" and isinstance(record.get("message"), dict):
            self._close(target)
            if record.get("isCompactSummary"):
                self._condense(target, record, text_of(record["message"].get("content")))
            else:
                self._user(target, record)
        elif kind == "system" and record.get("subtype") == "compact_boundary":
            self._close(target)
            self.boundary[target] = (line, record)
        elif kind == "system" and record.get("subtype") == "microcompact_boundary":
            self._close(target)
            self._microcompact(target, record)
        elif kind == "system":
            self._bookkeeping(target, f"system.{record.get('subtype') or 'message'}", record)
        else:
            self._bookkeeping(target, str(kind or "record"), record)

    def close(self) -> None:
        for target in list(self.groups):
            self._close(target)
        for target, (line, _rec) in list(self.boundary.items()):
            if not self.final and line == self.line:
                continue  # its summary is the next line, not written yet: wait for it
            self._condense(target, None, None, held=True)

    # -- sessions

    def _target(self, rec: dict[str, Any]) -> str | None:
        """The child session a sidechain record belongs to (``None``: the main one)."""
        if rec.get("isSidechain") is not True:
            return None
        parent, uuid = rec.get("parentUuid"), rec.get("uuid")
        agent = rec.get("agentId") if isinstance(rec.get("agentId"), str) else None
        name: str | None = None
        if isinstance(parent, str) and parent in self.child_of_uuid:
            name = self.child_of_uuid[parent]
        elif agent is not None:
            name = f"agent-{agent}"
        elif parent is not None and self.last_child is not None:
            name = self.last_child
        else:
            name = f"sidechain-{uuid or self.line}"
        if name not in self.children:
            label = agent or name
            self.children[name] = ChildInfo(
                title=f"subagent {label}",
                metadata={"subagent": {"name": name, "agent_id": agent, "first_line": self.line}},
            )
        if isinstance(uuid, str):
            self.child_of_uuid[uuid] = name
        self.last_child = name
        return name

    # -- conversion

    def _bookkeeping(self, target: str | None, name: str, record: Any) -> None:
        group = self.groups.get(target)
        if group is not None:
            # Progress lines interleave with the lines of one API message; keep them after
            # the message rather than splitting it.
            group.held.append((name, record, self.when, self.line))
            return
        self.custom(name, record, self.when, target)

    def _assistant(self, target: str | None, rec: dict[str, Any]) -> None:
        msg = rec["message"]
        msg_id = msg.get("id") if isinstance(msg.get("id"), str) else None
        group = self.groups.get(target)
        if group is not None and (msg_id is None or group.msg_id != msg_id):
            self._close(target)
            group = None
        if group is None:
            group = self.groups[target] = _Group(msg_id, self.line)
            group.when = self.when
        group.parts.extend(self._assistant_parts(msg.get("content")))
        if isinstance(rec.get("uuid"), str):
            group.uuids.append(rec["uuid"])
        if isinstance(msg.get("model"), str):
            group.model = msg["model"]
        for key in ("usage", "stop_reason"):
            if msg.get(key) is not None:
                group.meta[key] = msg[key]
        if isinstance(rec.get("requestId"), str):
            group.meta["request_id"] = rec["requestId"]
        if rec.get("isApiErrorMessage"):
            group.meta["api_error"] = True
        if msg_id is None:  # nothing to continue it by
            self._close(target, held=False)

    def _assistant_parts(self, content: Any) -> list[Part]:
        if isinstance(content, str):
            return [TextPart(text=content)] if content else []
        parts: list[Part] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                parts.append(TextPart(text=str(block.get("text", ""))))
            elif kind == "thinking":
                sig = block.get("signature")
                parts.append(
                    ReasoningPart(
                        text=str(block.get("thinking", "")),
                        signature=sig if isinstance(sig, str) and sig else None,
                    )
                )
            elif kind == "redacted_thinking":
                parts.append(ReasoningPart(redacted_data=str(block.get("data", ""))))
            elif kind == "tool_use" and isinstance(block.get("id"), str):
                name = str(block.get("name") or "tool")
                self.tool_names[block["id"]] = name
                parts.append(
                    ToolCallPart(
                        id=block["id"],
                        name=name,
                        arguments=json.dumps(block.get("input", {}), ensure_ascii=False),
                    )
                )
            else:
                parts.append(_file_part(block) or ProviderPart(provider="anthropic", item=block))
        return parts

    def _close(self, target: str | None, *, held: bool = True) -> None:
        group = self.groups.pop(target, None)
        if group is None:
            return
        meta: dict[str, Any] = {FORMAT: {"uuid": group.uuids, **group.meta}}
        if group.msg_id:
            meta[FORMAT]["message_id"] = group.msg_id
        self.emit(
            Message(
                role="assistant",
                parts=group.parts,
                model=group.model,
                provider_metadata=meta,
                created_at=group.when,
            ),
            target,
            first=group.first,
            held=held,
        )
        for name, record, when, line in group.held:
            self.custom(name, record, when, target, first=line, held=held)

    def _user(self, target: str | None, rec: dict[str, Any]) -> None:
        content = rec["message"].get("content")
        results: list[Part] = []
        parts: list[Part] = []
        if isinstance(content, str):
            parts.append(TextPart(text=content))
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
                call_id = block["tool_use_id"]
                results.append(
                    ToolResultPart(
                        tool_call_id=call_id,
                        name=self.tool_names.get(call_id),
                        output=_result_text(block.get("content")),
                        is_error=bool(block.get("is_error")),
                        state="error" if block.get("is_error") else "completed",
                    )
                )
            elif kind == "text":
                parts.append(TextPart(text=str(block.get("text", ""))))
            else:
                parts.append(_file_part(block) or ProviderPart(provider="anthropic", item=block))
        meta: dict[str, Any] = {"uuid": rec.get("uuid")}
        # ``toolUseResult`` (the CLI's structured copy of a result, often the whole file
        # read or written) is not kept: the model saw the ``tool_result`` content.
        for key in ("isMeta", "agentId"):
            if rec.get(key) is not None:
                meta[key] = rec[key]
        if results:
            item = self.emit(
                Message(
                    role="tool",
                    parts=results,
                    provider_metadata={FORMAT: meta},
                    created_at=self.when,
                ),
                target,
            )
            for index, part in enumerate(results):
                assert isinstance(part, ToolResultPart)
                self.results[(target, part.tool_call_id)] = PartRef(seq=item.seq, index=index)
            meta = {"uuid": rec.get("uuid")}
        if parts or not results:
            if self.title is None and target is None and not rec.get("isMeta"):
                self.title = short_title(
                    text_of(content) if not isinstance(content, str) else content
                )
            self.emit(
                Message(
                    role="user", parts=parts, provider_metadata={FORMAT: meta}, created_at=self.when
                ),
                target,
            )

    def _microcompact(self, target: str | None, record: dict[str, Any]) -> None:
        """A microcompaction: the CLI clears the output of the tool calls it names, from
        then on, as a prune does."""
        meta = record.get("microcompactMetadata")
        meta = meta if isinstance(meta, dict) else {}
        ids = meta.get("compactedToolIds")
        refs = [
            self.results[(target, i)]
            for i in (ids if isinstance(ids, list) else [])
            if isinstance(i, str) and (target, i) in self.results
        ]
        if not refs:
            self._bookkeeping(target, "system.microcompact_boundary", record)
            return
        saved = meta.get("tokensSaved")
        self.emit(
            Prune(
                targets=sorted(
                    {(r.seq, r.index): r for r in refs}.values(), key=lambda r: (r.seq, r.index)
                ),
                tokens_freed=saved if isinstance(saved, int) and saved >= 0 else 0,
                strategy=f"{FORMAT}.microcompact",
                settings={"record": record},
                trigger="import",
                created_at=self.when,
            ),
            target,
        )

    def _condense(
        self,
        target: str | None,
        rec: dict[str, Any] | None,
        summary: str | None,
        *,
        held: bool = False,
    ) -> None:
        """One native compaction: the boundary record (if any) and the summary (if any)."""
        line, boundary = self.boundary.pop(target, (None, None))
        before = self.seqs.get(target, 0)
        cmeta = boundary.get("compactMetadata") if boundary else None
        cmeta = cmeta if isinstance(cmeta, dict) else {}
        settings: dict[str, Any] = {"boundary": boundary, "summary_record": rec}
        pre, post = cmeta.get("preTokens"), cmeta.get("postTokens")
        item = self.emit(
            Condensation(
                forgotten_from=1,
                forgotten_to=before,
                forgotten_events=before,
                summary=summary,
                condenser=FORMAT,
                trigger="import",
                pinned=[],
                supersedes=self.last_condensation.get(target),
                settings=settings,
                tokens_before=pre if isinstance(pre, int) else None,
                tokens_after=post if isinstance(post, int) else None,
                created_at=parse_when((rec or boundary or {}).get("timestamp")) or self.when,
            ),
            target,
            first=line,
            held=held,
        )
        self.last_condensation[target] = item.seq


def _result_text(content: Any) -> str:
    """A tool result's output: its text, or its blocks as JSON when they hold more."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "text" for b in content
    ):
        return "".join(str(b.get("text", "")) for b in content)
    return json.dumps(content, ensure_ascii=False)


def _file_part(block: dict[str, Any]) -> FilePart | None:
    """An ``image`` or ``document`` block as a file part (base64 data or a URL)."""
    if block.get("type") not in ("image", "document"):
        return None
    src = block.get("source")
    if not isinstance(src, dict):
        return None
    media = str(src.get("media_type") or "application/octet-stream")
    if src.get("type") == "base64" and isinstance(src.get("data"), str):
        try:
            return FilePart(media_type=media, data=base64.b64decode(src["data"], validate=True))
        except (binascii.Error, ValueError):
            return None
    if src.get("type") == "url" and isinstance(src.get("url"), str):
        return FilePart(media_type=media, uri=src["url"])
    return None
