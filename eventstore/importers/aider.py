"""Aider chat histories: ``.aider.chat.history.md`` in a project.

Aider appends every chat to one Markdown file; each chat starts with a line
``# aider chat started at <time>`` and becomes its own session, keyed
``"aider:<digest of the file's path>#<n>"`` with ``n`` counting those lines from 1 (the file
holds no session id of its own). Within a chat, lines starting ``#### `` are what the user
typed (consecutive ones make one user message), lines starting ``> `` are aider's own console
output (kept as a ``Custom`` event ``aider.output``, as is any text before the first chat;
the header line is a ``Custom`` event ``aider.chat_started``),
and the other lines are the model's reply (one assistant message up to the next user or
console line). A user line that is an aider command (``/add``, ``/run`` ...) is kept as a
``Custom`` event ``aider.command``, except ``/ask``, ``/code`` and ``/architect``, whose text
goes to the model: their text is the user message.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ..events import Message, TextPart
from ._agent import ChildInfo, Converter, short_title

FORMAT = "aider"
HEADER = "# aider chat started at"
_CHAT_COMMANDS = ("/ask", "/code", "/architect")


def looks_aider(path: str | Path, lines: int = 2000) -> bool:
    """Whether a Markdown file is an aider chat history (a chat header near its start)."""
    try:
        with Path(path).open(encoding="utf-8", errors="replace") as fp:
            for _, line in zip(range(lines), fp, strict=False):
                if line.startswith(HEADER):
                    return True
    except OSError:
        return False
    return False


def first_header_time(path: str | Path, lines: int = 2000) -> datetime | None:
    """The time of the first chat (for text before it)."""
    try:
        with Path(path).open(encoding="utf-8", errors="replace") as fp:
            for _, line in zip(range(lines), fp, strict=False):
                if line.startswith(HEADER):
                    return _header_time(line[len(HEADER) :].strip())
    except OSError:
        return None
    return None


def _header_time(stamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp).replace(tzinfo=UTC)
    except ValueError:
        return None


def path_digest(path: str | Path) -> str:
    """The digest of a history file's absolute path that names its chats."""
    return hashlib.sha256(str(Path(path).resolve()).encode("utf-8")).hexdigest()[:16]


def _strip(line: str) -> str:
    """A history line without the two spaces aider appends to keep Markdown line breaks."""
    return line[:-2] if line.endswith("  ") else line


class Aider(Converter):
    format = FORMAT
    multi = True

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.chat = "0"  # text before the first header is kept with chat 1
        self.count = 0
        self.headers = 0
        self.block: str | None = None  # "user", "output" or "assistant"
        self.lines: list[str] = []
        self.first = 0
        self.source_id = path_digest(self.path)

    def feed(self, line: int, record: Any) -> None:
        text = str(record)
        if text.startswith(HEADER):
            self._close(held=True)
            self.headers += 1
            self.count = self.headers  # text before the first header went to chat 1
            self.chat = str(self.count)
            stamp = text[len(HEADER) :].strip()
            self.when = _header_time(stamp) or self.when
            self.children.setdefault(self.chat, _child(self.chat, stamp))
            # Kept as an event, so that every chat has a session (the keys count them).
            self.custom("chat_started", {"text": text}, self.when, self.chat)
            return
        if self.chat == "0":
            self.chat = "1"
            self.count = 1
            self.children.setdefault("1", _child("1", ""))
        # Aider writes its prefixes with a space after them (or alone on an empty line):
        # ">>>>>>> REPLACE" in a reply is not console output.
        if text.startswith("#### ") or text.rstrip() == "####":
            kind, body = "user", _strip(text[5:])
        elif text.startswith("> ") or text.rstrip() == ">":
            kind, body = "output", _strip(text[2:])
        else:
            kind, body = "assistant", _strip(text)
            if self.block != "assistant" and not body.strip():
                # A blank line ends what the user typed (aider writes one after each
                # message) and belongs to no block.
                self._close(held=False)
                return
        if kind != self.block:
            self._close(held=True)
            self.block, self.first = kind, line
        self.lines.append(body)

    def close(self) -> None:
        self._close(held=True)

    def _close(self, *, held: bool) -> None:
        kind, lines = self.block, self.lines
        self.block, self.lines = None, []
        if kind is None:
            return
        while lines and not lines[-1].strip():
            lines.pop()
        text = "\n".join(lines)
        chat = self.chat if self.chat != "0" else "1"
        if kind == "output":
            self.custom("output", {"text": text}, self.when, chat, first=self.first, held=held)
            return
        if kind == "user":
            word = text.split(maxsplit=1)[0] if text.strip() else ""
            if word.startswith("/") and word not in _CHAT_COMMANDS:
                self.custom("command", {"text": text}, self.when, chat, first=self.first, held=held)
                return
            if word in _CHAT_COMMANDS:
                text = text.split(maxsplit=1)[1] if len(text.split(maxsplit=1)) > 1 else ""
            info = self.children[chat]
            if info.title is None or info.title.startswith("aider chat"):
                info.title = short_title(text) or info.title
        role: Literal["user", "assistant"] = "user" if kind == "user" else "assistant"
        self.emit(
            Message(role=role, parts=[TextPart(text=text)], created_at=self.when),
            chat,
            first=self.first,
            held=held,
        )


def _child(chat: str, stamp: str) -> ChildInfo:
    return ChildInfo(
        title=f"aider chat {stamp}".strip(),
        metadata={"aider": {"chat": int(chat), "started": stamp}},
    )
