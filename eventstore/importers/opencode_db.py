"""OpenCode's SQLite database (``opencode.db``): its sessions, as the storage files hold them.

Since 1.2, OpenCode keeps its sessions in one SQLite database under its data folder
(``$XDG_DATA_HOME/opencode``, else ``~/.local/share/opencode``, on every OS), in WAL mode, and
moves the storage files into it on its first start. Three of its tables hold a session:
``session`` (a column per field: ``id``, ``project_id``, ``parent_id``, ``slug``,
``directory``, ``title``, ``version``, ``time_created``, ...), ``message`` (``id``,
``session_id``, ``time_created``, ``time_updated`` and ``data``: the message's info as JSON,
without its ``id`` and ``sessionID``) and ``part`` (``id``, ``message_id``, ``session_id``, the
times, and ``data``: the part without its ``id``, ``messageID`` and ``sessionID``). Columns
added since (``workspace_id``, ``agent``, ``model``, costs and token counts) are not read.

Each row is turned back into the record the storage file holds (its JSON with the ids put
back), so a session reads exactly as from the storage and goes through the same conversion:
a session that OpenCode moved into its database continues where its storage import ended.
Messages and parts are read in id order, as the storage's file names sort.

The file is opened read-only (``mode=ro``), one read transaction per session (a consistent
snapshot while OpenCode writes), and rows are streamed: only the session ids are listed
ahead.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from ._loading import ImportFormatError, format_error

SQLITE_MAGIC = b"SQLite format 3\x00"

_REQUIRED = {
    "session": {"id", "project_id", "title", "time_created", "time_updated"},
    "message": {"id", "session_id", "time_updated", "data"},
    "part": {"id", "message_id", "session_id", "time_updated", "data"},
}
"""The columns that make a SQLite file an OpenCode database (present since its first schema)."""

_SESSION_FIELDS = {
    "project_id": "projectID",
    "parent_id": "parentID",
    "slug": "slug",
    "directory": "directory",
    "title": "title",
    "version": "version",
}
"""Session columns read, and the storage file's name for each."""


def is_sqlite(path: str | Path) -> bool:
    """Whether the file is an SQLite database (by its header)."""
    try:
        with Path(path).open("rb") as fp:
            return fp.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def connect(path: str | Path) -> sqlite3.Connection:
    """The database, read-only: OpenCode may have it open and be writing to it."""
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=10, isolation_level=None)
    except sqlite3.Error as exc:
        raise format_error(str(path), f"cannot open the SQLite database: {exc}") from None
    return conn


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def missing_tables(path: str | Path) -> str | None:
    """``None`` for an OpenCode database; else what it lacks (for the error message)."""
    try:
        with closing(connect(path)) as conn:
            lacking = []
            for table, needed in _REQUIRED.items():
                absent = needed - _columns(conn, table)
                if absent == needed:
                    lacking.append(f"no {table} table")
                elif absent:
                    lacking.append(f"{table} has no {', '.join(sorted(absent))}")
    except (sqlite3.Error, ImportFormatError) as exc:
        return f"unreadable ({exc})"
    return "; ".join(lacking) or None


def is_opencode_db(path: str | Path) -> bool:
    """Whether the file is an SQLite database with OpenCode's session tables."""
    return is_sqlite(path) and missing_tables(path) is None


def not_opencode_error(path: str | Path) -> ImportFormatError | None:
    """The error for an SQLite file that is not OpenCode's database (else ``None``)."""
    if not is_sqlite(path):
        return None
    lacking = missing_tables(path)
    if lacking is None:
        return None
    return format_error(
        str(path),
        f"an SQLite database, but not OpenCode's ({lacking}); the only SQLite file "
        "imported is OpenCode's opencode.db",
    )


def session_ids(path: str | Path) -> list[str]:
    """The database's sessions, oldest first (a subagent's session after its parent's)."""
    with closing(connect(path)) as conn:
        try:
            rows = conn.execute("SELECT id FROM session ORDER BY time_created, id").fetchall()
        except sqlite3.Error as exc:
            raise format_error(str(path), f"cannot read its sessions: {exc}") from None
    return [str(r[0]) for r in rows]


def session_stamps(path: str | Path) -> list[tuple[str, tuple[Any, ...]]]:
    """Each session (oldest first, as :func:`session_ids`) with what tells that it changed:
    its update time, and its messages' and parts' count, newest update time and total size
    (OpenCode rewrites a row in place as it streams, and to prune a tool's output). Read in
    one snapshot, before the sessions are: a change made meanwhile shows at the next look."""
    with closing(connect(path)) as conn:
        try:
            conn.execute("BEGIN")
            sizes: dict[str, tuple[Any, ...]] = {}
            for table in ("message", "part"):
                for sid, *stamp in conn.execute(
                    f"SELECT session_id, count(*), max(time_updated), sum(length(data)) "
                    f"FROM {table} GROUP BY session_id"
                ):
                    sizes[sid] = (*sizes.get(sid, ()), table, *stamp)
            rows = conn.execute(
                "SELECT id, time_updated FROM session ORDER BY time_created, id"
            ).fetchall()
        except sqlite3.Error as exc:
            raise format_error(str(path), f"cannot read its sessions: {exc}") from None
    return [(str(sid), (updated, *sizes.get(sid, ()))) for sid, updated in rows]


def newer_model_only(path: str | Path) -> list[str]:
    """Sessions whose messages are only in ``session_message``, the table of OpenCode's
    newer message model (a typed row per message), which is not read: none of their
    ``message`` rows are there to read."""
    with closing(connect(path)) as conn:
        if not _columns(conn, "session_message") >= {"session_id"}:
            return []
        try:
            rows = conn.execute(
                "SELECT DISTINCT x.session_id FROM session_message x WHERE NOT EXISTS "
                "(SELECT 1 FROM message m WHERE m.session_id = x.session_id) ORDER BY 1"
            ).fetchall()
        except sqlite3.Error as exc:
            raise format_error(str(path), f"cannot read its sessions: {exc}") from None
    return [str(r[0]) for r in rows]


def newer_model_error(path: str | Path, ids: list[str]) -> ImportFormatError:
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return format_error(
        str(path),
        f"{len(ids)} session(s) hold their messages only in OpenCode's newer session_message "
        f"table, which is not read yet ({shown}); every other session was read",
    )


def db_stamp(path: str | Path) -> tuple[int, ...]:
    """The write-ahead log's size and time: OpenCode's writes land there, and reach the
    database file only at a checkpoint."""
    try:
        st = Path(f"{path}-wal").stat()
    except OSError:
        return (0, 0)
    # An empty log holds nothing (a reader, this one too, may have just created it).
    return (st.st_size, st.st_mtime_ns) if st.st_size else (0, 0)


class DbSession:
    """One OpenCode session in the database: its info, then its messages streamed."""

    def __init__(self, path: str | Path, session_id: str) -> None:
        self.path = Path(path)
        self.id = session_id
        self.where = f"{self.path} (session {session_id})"

    def info(self) -> dict[str, Any]:
        """The session as its storage file holds it (the fields the importer reads)."""
        with closing(connect(self.path)) as conn:
            return self._info(conn)

    def _info(self, conn: sqlite3.Connection) -> dict[str, Any]:
        have = _columns(conn, "session")
        fields = [c for c in _SESSION_FIELDS if c in have]
        times: list[str] = [c for c in ("time_created", "time_updated") if c in have]
        cols = ", ".join(fields + times)
        try:
            row = conn.execute(f"SELECT {cols} FROM session WHERE id = ?", (self.id,)).fetchone()
        except sqlite3.Error as exc:
            raise format_error(self.where, f"cannot read the session: {exc}") from None
        if row is None:
            raise format_error(self.where, "no such session in the database")
        values = dict(zip(fields + times, row, strict=True))
        info: dict[str, Any] = {"id": self.id}
        for col in fields:
            if values[col] is not None:
                info[_SESSION_FIELDS[col]] = values[col]
        info["time"] = {c[len("time_") :]: values[c] for c in times if values[c] is not None}
        return info

    def messages(self) -> Iterator[dict[str, Any]]:
        """Each message as ``{"info", "parts"}``, in id order, from one snapshot."""
        with closing(connect(self.path)) as conn:
            conn.execute("BEGIN")  # one read transaction: messages and parts agree
            try:
                rows = conn.execute(
                    "SELECT id, data FROM message WHERE session_id = ? ORDER BY id", (self.id,)
                )
                parts = conn.cursor()
                for message_id, data in rows:
                    info = self._row(data, "message", message_id)
                    info.update(id=message_id, sessionID=self.id)
                    parts.execute(
                        "SELECT id, data FROM part WHERE message_id = ? ORDER BY id",
                        (message_id,),
                    )
                    found = []
                    for part_id, pdata in parts:
                        part = self._row(pdata, "part", part_id)
                        part.update(id=part_id, sessionID=self.id, messageID=message_id)
                        found.append(part)
                    yield {"info": info, "parts": found}
            except sqlite3.Error as exc:
                raise format_error(self.where, f"cannot read its messages: {exc}") from None
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    def _row(self, data: Any, table: str, row_id: str) -> dict[str, Any]:
        try:
            value = json.loads(data)
        except (TypeError, ValueError) as exc:
            raise format_error(self.where, f"{table} {row_id}: data is not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise format_error(self.where, f"{table} {row_id}: data is not a JSON object")
        return value
