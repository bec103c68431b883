"""Importers: agent trajectories and transcripts into sessions, and a lossless JSONL export.

Every importer works in two phases. First the whole file is read, validated and converted
into :class:`Transcript` objects (a title, metadata and a list of events); a malformed
file raises :class:`ImportFormatError` naming the file and the line or record, and
nothing has been written. Then everything ``append`` would refuse is checked (and event
ids repeated in the file or taken in the database), and only then are the sessions
created and their events appended, in batches, all in one transaction: a file that fails
anywhere, or a process killed halfway, leaves nothing behind.

Formats (see :func:`detect_format`):

``eventstore``
    The JSONL written by :func:`export_jsonl`: a header line, then one line per stored
    event with its seq, id, created_at and hash. Re-importing reproduces the session id,
    the events and the hash chain exactly (``new_id=True`` gives the session a fresh id).
``openai``
    A chat transcript: a JSON list of OpenAI/litellm messages, JSONL with one message per
    line, or an object with a ``messages`` list.
``mini-swe-agent``
    A mini-swe-agent run, 1.x (a message list) or 2.x (``trajectory_format``, tool calls,
    and a final ``exit`` message that becomes a ``run_end`` event). Text-mode commands and
    their ``<returncode>`` outputs become tool calls and results.
``swe-agent``
    A SWE-agent ``.traj`` file: its ``history`` becomes the session; ``info`` and
    ``environment`` go to the session metadata. Text-mode ``action``/observation pairs
    become tool calls and results.
``openhands``
    An OpenHands event stream (a JSON list of events, or an object with ``history``), or
    resolver/evaluation output (JSONL, one run with a ``history`` per line: one session per
    run). Tool actions and their observations become assistant tool calls and tool
    results; everything else becomes a ``Custom`` event named ``openhands.<type>``.
``openhands-v1``
    OpenHands agent-SDK events tagged ``kind`` (``ActionEvent``, ``ObservationEvent``,
    ``MessageEvent``, ...): a list, JSONL, an object with ``events``, or evaluation output
    with one run's ``history`` per record.

Coding-agent transcripts (``claude-code``, ``codex``, ``gemini-cli``, ``aider``, ``cline``,
``opencode``) are sessions that keep
growing on disk: :func:`import_transcript` streams one into the session named by its key
``"<format>:<source session id>"``, appending only what the store does not hold yet (see
:mod:`eventstore.importers.claude_code`, :mod:`~eventstore.importers.codex` and
:mod:`~eventstore.importers.gemini_cli`). :func:`import_file` sends these formats there too;
:func:`import_files` imports many, reading and converting them in worker processes while
this one writes.

Anything none of these recognises fails with the file, the record and the field, naming the
formats tried.
"""

from __future__ import annotations

from ._formats import Format, detect_format, load_transcripts
from ._keyed import (
    AGENT_FORMATS,
    SessionImport,
    change_stamp,
    detect_agent_format,
    import_transcript,
    transcripts_under,
)
from ._loading import EMPTY_ASSISTANT_IMPORTED, ImportFormatError, Transcript, empty_replies_kept
from ._pipeline import default_jobs, import_files
from ._writer import Progress, import_file, import_jsonl, import_transcripts
from .jsonl import EXPORT_FORMAT, export_jsonl, export_lines

__all__ = [
    "EMPTY_ASSISTANT_IMPORTED",
    "empty_replies_kept",
    "AGENT_FORMATS",
    "EXPORT_FORMAT",
    "Format",
    "ImportFormatError",
    "Progress",
    "SessionImport",
    "Transcript",
    "change_stamp",
    "detect_agent_format",
    "detect_format",
    "export_jsonl",
    "export_lines",
    "import_file",
    "import_jsonl",
    "import_files",
    "import_transcript",
    "import_transcripts",
    "default_jobs",
    "load_transcripts",
    "transcripts_under",
]
