"""Probes for the condensation quality benchmark: facts taken from a source trajectory.

A probe is a short piece of text the agent would need later: a file path it named, an
error line it was shown, a tool or command it used. The benchmark checks which probes
still occur in the view the model is sent (see ``QUALITY.md`` in the shared docs for the
definitions this module implements).

Everything here is pure: it reads rendered OpenAI-style message dicts and
:class:`~eventstore.events.Message` objects, never a store.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from eventstore.events import Message

__all__ = [
    "KINDS",
    "Probes",
    "extract_probes",
    "error_lines",
    "path_probes",
    "tool_probes",
    "is_observation",
    "message_text",
    "normalize",
    "occurs",
    "real_tokens",
    "tokens",
    "view_text",
]

KINDS = ("paths", "errors", "tools")

SHELL_TOOLS = frozenset({"execute_bash", "bash", "run", "execute_command", "shell"})
"""Tool names whose ``command`` argument is a shell command line."""

EXTENSIONS = frozenset(
    """
    py pyi pyx pyc ipynb c h cc cpp cxx hpp hh rs go js mjs cjs ts tsx jsx java kt scala rb
    php pl lua swift cs m mm r jl sh bash zsh fish ps1 bat sql html htm css scss vue svelte
    md rst txt adoc tex json jsonl yaml yml toml ini cfg conf env lock xml csv tsv log
    patch diff proto graphql dockerfile mk cmake gradle properties traj out err bin so o a
    """.split()
)
"""Code, documentation and data extensions a bare file name must carry."""


def normalize(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends."""
    return " ".join(text.split())


def tokens(messages: Sequence[dict[str, Any]]) -> int:
    """The benchmark's token estimate: ceil(chars / 4) + 4 per rendered message, where the
    chars are the content plus every tool call's name and arguments."""
    total = 0
    for m in messages:
        chars = len(_content(m))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            chars += len(fn.get("name") or "") + len(fn.get("arguments") or "")
        total += math.ceil(chars / 4) + 4
    return total


_ENCODING: Any = None


def real_tokens(messages: Sequence[dict[str, Any]], cache: dict[str, int] | None = None) -> int:
    """The view's size by a real tokenizer: tiktoken ``cl100k_base`` over each message's
    content plus its tool calls' names and arguments, + 4 per message. ``cache`` keeps
    counts by message text (consecutive views share most of their messages)."""
    global _ENCODING
    if _ENCODING is None:
        from eventstore.llm import tiktoken_encoding

        _ENCODING = tiktoken_encoding("cl100k_base")
        if _ENCODING is None:
            raise RuntimeError(
                "tiktoken's cl100k_base is not available offline: install litellm "
                "(it ships tiktoken and the encoding's data)"
            )
    total = 0
    for m in messages:
        texts = [_content(m)]
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            texts += [fn.get("name") or "", fn.get("arguments") or ""]
        key = "\x00".join(texts)
        n = cache.get(key) if cache is not None else None
        if n is None:
            n = sum(len(_ENCODING.encode(t, disallowed_special=())) for t in texts if t)
            if cache is not None:
                cache[key] = n
        total += n + 4
    return total


def _content(m: dict[str, Any]) -> str:
    content = m.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) if isinstance(c, dict) else str(c) for c in content)
    return str(content)


def _strings(value: Any) -> Iterable[str]:
    """Every string inside a decoded JSON value (dict keys excluded)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _decoded(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except (ValueError, TypeError):
        return None


def view_text(messages: Sequence[dict[str, Any]]) -> str:
    """All message contents, tool-call names and arguments (raw and decoded), normalized."""
    chunks: list[str] = []
    for m in messages:
        chunks.append(_content(m))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            args = fn.get("arguments") or ""
            chunks.append(fn.get("name") or "")
            chunks.append(args)
            chunks.extend(_strings(_decoded(args)))
    return normalize("\n".join(chunks))


def occurs(kind: str, probe: str, text: str) -> bool:
    """Whether ``probe`` occurs in the normalized ``text`` (tools as whole words)."""
    if kind == "tools":
        return re.search(rf"(?<![\w-]){re.escape(probe)}(?![\w-])", text) is not None
    return probe in text


# --------------------------------------------------------------------------- messages


def message_text(msg: Message) -> str:
    """A message's text, tool-result outputs included (what the model reads of it)."""
    chunks = [msg.text] if msg.text else []
    chunks.extend(r.output for r in msg.tool_results)
    return "\n".join(chunks)


def is_observation(msg: Message, index: int, first_assistant: int | None, tool_role: bool) -> bool:
    """Tool messages; without a tool role, also user messages after the first assistant."""
    if msg.role == "tool":
        return True
    if tool_role or msg.role != "user" or first_assistant is None:
        return False
    return index > first_assistant


# --------------------------------------------------------------------------- paths

_PATH_TOKEN = re.compile(r"(?<![<\w~./+@-])[~\w./+@-]+")  # not the tail of ``</div>``
_URL = re.compile(r"[A-Za-z][\w+.-]*://\S+")
_LETTER = re.compile(r"[A-Za-z]")


def _extension(name: str) -> str | None:
    base = name.rsplit("/", 1)[-1]
    if "." not in base.strip("."):
        return None
    return base.rsplit(".", 1)[-1]  # as written: ``string.So`` ends a sentence


def _path_ok(token: str) -> bool:
    if not 3 <= len(token) <= 200 or not _LETTER.search(token):
        return False
    if token.startswith("//") or "..." in token:
        return False
    if "/" in token:
        if token.startswith(("/", "./", "../", "~/")) and len(token.strip("/.~")) > 0:
            return True
        if token.count("/") >= 2:
            return True
        return _extension(token) in EXTENSIONS
    return _extension(token) in EXTENSIONS


def path_probes(text: str) -> list[str]:
    """File paths named in ``text`` (see the module docs for the rules)."""
    out = []
    for match in _PATH_TOKEN.finditer(_URL.sub(" ", text)):  # a URL is not a file path
        token = match.group(0).rstrip(".,-+")
        if _path_ok(token):
            out.append(token)
    return out


# --------------------------------------------------------------------------- errors

_ERROR = re.compile(
    r"\w*(?:Error|Exception)\b|FAILED|ERROR|\bexit (?:code|status)\b(?![\s:=]*0\b)"
    r"|non-zero|command not found|No such file or directory|Segmentation fault|fatal:"
)
_VIEWER_CODE = re.compile(
    r"^(?:\d+\b|(?:raise|except|class|def|import|from)\b|#|//|\*|>>>)|\sraise\s|except\s"
)
_TRACEBACK_HEADER = "Traceback (most recent call last):"


def error_lines(text: str) -> list[str]:
    """Error probes in ``text``: each matching line's first 120 chars (normalized)."""
    out = []
    for raw in text.splitlines():
        line = normalize(raw)
        if not line or line.startswith(_TRACEBACK_HEADER) or _VIEWER_CODE.search(line):
            continue
        if _ERROR.search(line):
            out.append(line[:120].strip())
    return out


# --------------------------------------------------------------------------- tools

_SEGMENT_SPLIT = re.compile(r"&&|\|\||;|\||\n")
_WORD = re.compile(r"^[A-Za-z_./][\w./+-]*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)```", re.DOTALL)


def _without_heredocs(command: str) -> str:
    """Drop heredoc bodies: their lines are data, not commands."""
    lines = command.split("\n")
    kept: list[str] = []
    end: str | None = None
    for line in lines:
        if end is not None:
            if line.strip() == end:
                end = None
            continue
        kept.append(line)
        found = _HEREDOC.search(line)
        if found:
            end = found.group(1)
    return "\n".join(kept)


def command_words(command: str) -> list[str]:
    """The first word of each command segment, skipping ``VAR=value`` assignments."""
    out = []
    for segment in _SEGMENT_SPLIT.split(_without_heredocs(command)):
        for word in segment.split():
            if _ASSIGNMENT.match(word):
                continue
            if _WORD.match(word) and _LETTER.search(word):
                out.append(word)
            break
    return out


def _first_word(block: str) -> list[str]:
    words = block.split()
    return [words[0]] if words and _WORD.match(words[0]) and _LETTER.search(words[0]) else []


def tool_probes(msg: Message) -> list[str]:
    """Tool names and command words of one assistant message."""
    out: list[str] = []
    for call in msg.tool_calls:
        out.append(call.name)
        if call.name in SHELL_TOOLS:
            args = _decoded(call.arguments)
            cmd = args.get("command") or args.get("cmd") if isinstance(args, dict) else None
            if isinstance(cmd, str):
                out.extend(command_words(cmd))
    if not msg.tool_calls and msg.text:
        blocks = _FENCE.findall(msg.text)
        if blocks:
            lang, body = blocks[-1]
            # A shell-tagged block is a command line (mini-swe-agent); any other block is
            # one command of an agent's own language (SWE-agent text mode).
            shell = any(s in lang.lower() for s in ("bash", "sh", "shell", "console"))
            out.extend(command_words(body) if shell else _first_word(body))
    return out


# --------------------------------------------------------------------------- extraction


@dataclass
class Probes:
    """Non-trivial probes of one trajectory, each with the index of the message that
    introduced it, and the context used to filter them."""

    found: dict[str, dict[str, int]] = field(default_factory=lambda: {k: {} for k in KINDS})
    """kind -> probe -> index of the first message that showed it."""
    trivial: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    """kind -> probes skipped because the system prompt or first user message has them."""

    def seen_before(self, kind: str, index: int) -> list[str]:
        """Probes of ``kind`` introduced by messages before ``index``."""
        return [p for p, i in self.found[kind].items() if i < index]


def extract_probes(messages: Sequence[Message]) -> Probes:
    """Probes of a trajectory's messages (non-trivial ones only, de-duplicated)."""
    system = next((m for m in messages if m.role == "system"), None)
    first_user = next((m for m in messages if m.role == "user"), None)
    head = normalize("\n".join(message_text(m) for m in (system, first_user) if m is not None))
    probes = Probes()
    skipped: set[tuple[str, str]] = set()
    for index, msg in enumerate(messages):
        found: dict[str, list[str]] = {k: [] for k in KINDS}
        if msg.role == "assistant":
            texts = [msg.text] if msg.text else []
            for call in msg.tool_calls:
                texts.extend(_strings(_decoded(call.arguments)))
            for text in texts:
                found["paths"].extend(path_probes(text))
            found["tools"].extend(tool_probes(msg))
        elif msg.role in ("user", "tool"):
            found["errors"].extend(error_lines(message_text(msg)))
        for kind, items in found.items():
            for raw in items:
                probe = normalize(raw)
                if not probe or probe in probes.found[kind] or (kind, probe) in skipped:
                    continue
                if occurs(kind, probe, head):
                    skipped.add((kind, probe))
                    probes.trivial[kind] += 1
                    continue
                probes.found[kind][probe] = index
    return probes
