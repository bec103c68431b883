"""Importing coding-agent transcripts with the machine's cores: processes that read and
convert, one that writes.

:func:`import_files` imports transcripts in order, as :func:`import_transcript` does one
after the other, with the same result: the same sessions, seqs, hashes, keys and
condensations, "up to date" on a re-import, only the new entries of a grown file. With
``jobs`` above 1 it starts ``jobs - 1`` worker processes. For each transcript this
process (the writer) reads what the store holds of its sessions (their heads and newest
events, see :func:`plan_import`) and hands the file to a worker, which reads, parses and
converts it and checks and encodes the new events (the canonical JSON and token counts:
everything an append does before it takes the write lock). The worker sends back, in
order, the sessions to create and batches of encoded events (:mod:`eventstore._append.wire`);
the writer makes their rows, chains their hashes and commits them through the one write
path (:func:`eventstore._append.append_encoded`), one transaction per batch as before.

Memory stays bounded: a worker streams its file, and each worker's queue holds at most
:data:`BATCHES_AHEAD` batches; one that is full makes the worker wait for the writer. The
files are written in the order given; a worker converts the files after the one being
written meanwhile. A transcript whose sessions an earlier file of the same import still
has to write (a subagent's file after its main session's) is handed out only once that
file is written, and OpenCode's database is imported by the writer itself, alone.

A file that cannot be imported gives the error :func:`import_transcript` gives, after the
batches before the failing one are written (each batch is one transaction, and the next
import resumes after them). A worker that dies ends the import with an error.

How a worker starts: forked from this process when no other thread runs in it (the
command line's case), so that it starts at once with the library imported; a fork copies
only the forking thread, and with no other thread no lock can be copied held. The
child uses nothing of the parent's but its two pipes, never touches the database
connections it inherited, and ends with ``os._exit``: no exit handler, finalizer or
driver of the parent's runs in it (a Postgres driver closing an inherited connection
would end the parent's session). When other threads run (an application's, a driver's
pool), each worker is a fresh interpreter instead (``python -c``, with this process's
module search path): about 0.7 s of CPU to import the library, but nothing inherited.
Unlike :mod:`multiprocessing`'s ``spawn`` and ``forkserver``, neither imports the
caller's main module again, so a script need not guard its import with
``if __name__ == "__main__"``. Messages go through two pipes per worker as
length-prefixed pickles, fed and read by two threads of the writer (started once every
worker is); the reader holds at most :data:`BATCHES_AHEAD`, and the writer unpickles
them as it writes.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._append.encode import encode_all
from .._append.wire import pack, unpack
from ..errors import EventStoreError
from ..store import EventStore
from ._collection import fewer_collections
from ._keyed import (
    DEFAULT_BATCH,
    Plan,
    SessionImport,
    StoreSink,
    Target,
    append_failed,
    checked_format,
    convert_into,
    import_transcript,
    is_database,
    peek_source_id,
    plan_import,
    results,
)
from ._loading import ImportFormatError

__all__ = ["import_files", "default_jobs", "FilesProgress", "BATCHES_AHEAD", "MAX_JOBS"]

FilesProgress = Callable[[Path, int, int], None]
"""Called with ``(file, bytes_read, bytes_total)`` as each file is imported."""

BATCHES_AHEAD = 4
"""Batches of encoded events a worker may send ahead of the writer (each at most the
batch size: 1,000 events, about 2 MB of transcript)."""

FILES_AHEAD = 2
"""Files handed to a worker before the writer has taken the first of them."""

MAX_JOBS = 8
"""The most processes :func:`default_jobs` picks (one writer takes what more workers
could convert well before that)."""

AUTO_MIN_BYTES = 4_000_000
"""Below this many bytes of transcripts, ``jobs=None`` imports in this process: starting
the workers costs more than they save."""

_PROGRESS_BYTES = 1 << 20  # a worker reports its reading every this many bytes


def default_jobs() -> int:
    """Processes for an import: the cores this process may run on, at most
    :data:`MAX_JOBS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_JOBS))


def import_files(
    store: EventStore,
    files: Iterable[tuple[str | Path, str | None]],
    *,
    jobs: int | None = None,
    progress: FilesProgress | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> Iterator[tuple[Path, list[SessionImport] | ImportFormatError]]:
    """Import coding-agent transcripts, each as :func:`import_transcript` does, in order.

    Args:
        store: Where to write.
        files: ``(path, format)`` pairs; a ``None`` format is detected.
        jobs: Processes to use: 1 imports in this process, N starts N - 1 workers that
            read, convert and encode while this process writes (see the module). ``None``:
            :func:`default_jobs`, or 1 when the files hold less than
            :data:`AUTO_MIN_BYTES`. A store whose token counter cannot be pickled imports
            in this process.
        progress: Called with ``(path, bytes_read, bytes_total)`` as each file is read.
        batch_size: Events per append.

    Yields:
        Each file and what :func:`import_transcript` returns for it, or the
        :class:`ImportFormatError` it raises (the files after it are imported all the
        same), in the order given.
    """
    todo = [(Path(p), fmt) for p, fmt in files]
    if jobs is None:
        size = sum(p.stat().st_size for p, _ in todo if p.is_file())
        jobs = default_jobs() if size >= AUTO_MIN_BYTES else 1
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs: a positive number of processes, not {jobs!r}")
    settings = (store.token_counter, store.blob_threshold, store.max_event_bytes)
    if jobs == 1 or not _picklable(settings):
        yield from _here(store, todo, progress, batch_size)
        return
    with fewer_collections(), Pipeline(store, jobs - 1, settings, batch_size) as pipe:
        yield from pipe.run(todo, progress)


def _here(
    store: EventStore,
    todo: list[tuple[Path, str | None]],
    progress: FilesProgress | None,
    batch_size: int,
) -> Iterator[tuple[Path, list[SessionImport] | ImportFormatError]]:
    """:func:`import_files` in this process."""
    for path, fmt in todo:
        bar = _bound(progress, path)
        try:
            yield path, import_transcript(store, path, fmt, progress=bar, batch_size=batch_size)
        except ImportFormatError as exc:
            yield path, exc


class _Refused(Exception):
    """A worker could not unpickle the store's encoding settings (a token counter whose
    class only the caller's main module defines)."""


def _bound(progress: FilesProgress | None, path: Path) -> Callable[[int, int], None] | None:
    if progress is None:
        return None
    return lambda done, total: progress(path, done, total)


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


_HEADER = struct.Struct("!Q")  # a message's length, before its pickle
_CLOSE = object()  # what closes a worker's pipe of files

# What a worker runs: this process's module search path, then this module's ``_serve``.
_BOOT = "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); " + (
    f"from {__name__} import _serve; _serve(int(sys.argv[2]), int(sys.argv[3]))"
)


def _send(fp: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fp.write(_HEADER.pack(len(data)))
    fp.write(data)
    fp.flush()


def _read(fp: IO[bytes]) -> bytes | None:
    """The next message's pickle, or ``None`` at the end of the stream."""
    head = fp.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    data = fp.read(size)
    return data if len(data) == size else None


# --------------------------------------------------------------------------- the writer


@dataclass
class _Entry:
    """A file handed out (or to import here, or that failed before it was)."""

    index: int
    path: Path
    fmt: str | None
    key: str | None = None
    worker: _Worker | None = None
    plan: Plan | None = None
    error: ImportFormatError | None = None
    local: bool = False  # OpenCode's database: imported by the writer


class _Worker:
    """A worker process, the pipe its files go down (written by a thread: a large task,
    a plan holding a large event, never makes the writer wait for a worker that waits for
    the writer) and the one its messages come back on (read by a thread into a queue of
    at most :data:`BATCHES_AHEAD` messages)."""

    def __init__(self, fork: bool, others: list[int]) -> None:
        task_r, self._task_w = os.pipe()
        self._out_r, out_w = os.pipe()
        self.proc: subprocess.Popen[bytes] | _Forked
        if fork:
            self.proc = _Forked(task_r, out_w, [self._task_w, self._out_r, *others])
        else:
            paths = json.dumps([p for p in sys.path if isinstance(p, str)])
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, paths, str(task_r), str(out_w)],
                pass_fds=(task_r, out_w),
                stdin=subprocess.DEVNULL,
            )
        os.close(task_r)
        os.close(out_w)
        self.tasks: queue.Queue[Any] = queue.Queue()  # at most FILES_AHEAD and a stop
        self.out: queue.Queue[bytes | None] = queue.Queue(BATCHES_AHEAD)
        self.outstanding = 0
        self._reader: threading.Thread | None = None
        self._writer: threading.Thread | None = None

    @property
    def fds(self) -> list[int]:
        """This process's ends of the worker's pipes (for a worker forked later to close)."""
        return [self._task_w, self._out_r]

    def start(self) -> None:
        """Start the threads that feed and read the pipes (once every worker is started:
        a worker is forked only from a process without threads)."""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._writer = threading.Thread(target=self._write, daemon=True)
        self._writer.start()

    def _write(self) -> None:
        with os.fdopen(self._task_w, "wb") as fp:
            while (obj := self.tasks.get()) is not _CLOSE:
                try:
                    _send(fp, obj)
                except OSError:  # the worker is gone: its reader reports it
                    return

    def _read(self) -> None:
        with os.fdopen(self._out_r, "rb") as fp:
            while True:
                data = _read(fp)
                self.out.put(data)
                if data is None:
                    return

    def send(self, obj: Any) -> None:
        self.tasks.put(obj)

    def receive(self, what: str) -> tuple[Any, ...]:
        """The worker's next message; an error when it ended without one."""
        data = self.out.get()
        if data is None:
            self.out.put(None)  # any later reading ends here too
            code = self.proc.wait()
            raise EventStoreError(
                f"{what}: the worker process converting it exited with code {code}; what "
                "it had sent is imported, import again to resume"
            )
        op: tuple[Any, ...] = pickle.loads(data)
        if op[0] == "ready":  # the answer to the settings, before anything else
            return self.receive(what)
        if op[0] == "refused":
            self.out.put(None)
            raise _Refused(op[1])
        return op

    def close(self, kill: bool) -> None:
        if kill and self.proc.poll() is None:
            self.proc.kill()
        if self._writer is None:  # never started: its pipes are closed here
            os.close(self._task_w)
            os.close(self._out_r)
        else:
            self.tasks.put(_CLOSE)  # the end of its files' pipe: the worker exits
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a worker that hangs
            self.proc.kill()
            self.proc.wait()
        if self._writer is not None:
            self._writer.join()
        while self._reader is not None and self._reader.is_alive():
            try:  # let the reader see the end of the stream
                self.out.get(timeout=0.1)
            except queue.Empty:
                pass


class _Forked:
    """A worker forked from this process: it serves its pipes, then ends without running
    anything this process registered to run at exit (nor closing its connections: the
    child never touches them, and a driver closing one would end this process's
    session)."""

    def __init__(self, task_r: int, out_w: int, close: list[int]) -> None:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child (its coverage is not collected)
            # Nothing of the parent's is ever collected here: a cycle of its garbage
            # holding a connection would close it (and end the parent's session).
            gc.freeze()
            code = 0
            try:
                for fd in close:
                    os.close(fd)
                _serve(task_r, out_w)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


class Pipeline:
    """The workers of one :func:`import_files` (see the module); a context manager that
    stops them."""

    def __init__(
        self, store: EventStore, workers: int, settings: tuple[Any, ...], batch_size: int
    ) -> None:
        self.store, self.batch_size = store, max(1, batch_size)
        self.workers: list[_Worker] = []
        self.refused = False  # a worker could not take the settings: imported here
        # Forked when no thread runs here (none can hold a lock the child would inherit
        # held): the worker starts at once, with the library imported.
        fork = hasattr(os, "fork") and threading.active_count() == 1
        try:
            for _ in range(workers):
                others = [fd for w in self.workers for fd in w.fds]
                self.workers.append(_Worker(fork, others))
            # Not waited for: the writer reads the store meanwhile (each worker's first
            # message says whether it took the settings, see _Worker.receive).
            for w in self.workers:
                w.start()
                w.send((settings, self.batch_size))
        except BaseException:
            self.__exit__(RuntimeError)
            raise

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None and not self.refused:
            self._stop()
        for w in self.workers:
            w.close(kill=exc_type is not None or self.refused)

    def _stop(self) -> None:
        """Tell each worker it is done (it exits; :meth:`_Worker.close` waits for it)."""
        for w in self.workers:
            w.send(None)

    def run(
        self, todo: list[tuple[Path, str | None]], progress: FilesProgress | None
    ) -> Iterator[tuple[Path, list[SessionImport] | ImportFormatError]]:
        entries: deque[_Entry] = deque()
        keys: dict[int, str | None] = {}
        i = 0
        while i < len(todo) or entries:
            while i < len(todo) and self._free(entries, todo[i], i, keys):
                entries.append(self._hand_out(i, *todo[i], keys.pop(i, None)))
                i += 1
            entry = entries.popleft()
            try:
                done = self._finish(entry, progress)
            except _Refused:
                # Every worker refuses the same settings, and at the first file it reads:
                # nothing of it is written. This file and the rest are imported here.
                self.refused = True
                rest = [(e.path, e.fmt) for e in (entry, *entries)] + todo[i:]
                yield from _here(self.store, rest, progress, self.batch_size)
                return
            yield entry.path, done

    def _free(
        self,
        entries: deque[_Entry],
        item: tuple[Path, str | None],
        i: int,
        keys: dict[int, str | None],
    ) -> bool:
        """Whether file ``i`` can be handed out now."""
        if any(e.local for e in entries):
            return False  # nothing goes past the database until it is written
        if i not in keys:
            keys[i] = _key_of(*item)
        key = keys[i]
        if key is not None and any(e.key == key for e in entries):
            return False  # an earlier file of these sessions is not written yet
        return any(w.outstanding < FILES_AHEAD for w in self.workers)

    def _hand_out(self, i: int, path: Path, fmt: str | None, key: str | None) -> _Entry:
        """File ``i`` handed to the least busy worker (a database is kept, to import
        here)."""
        entry = _Entry(i, path, fmt, key)
        try:
            entry.fmt = checked_format(path, fmt)
            if is_database(path, entry.fmt):
                entry.local = True
                return entry
            entry.plan = plan_import(self.store, path, entry.fmt)
        except ImportFormatError as exc:
            entry.error = exc
            return entry
        worker = min(self.workers, key=lambda w: w.outstanding)
        worker.send((i, str(path), entry.fmt, entry.plan))
        worker.outstanding += 1
        entry.worker = worker
        return entry

    def _finish(
        self, entry: _Entry, progress: FilesProgress | None
    ) -> list[SessionImport] | ImportFormatError:
        if entry.error is not None:
            return entry.error
        assert entry.fmt is not None
        if entry.local:
            try:
                return import_transcript(
                    self.store,
                    entry.path,
                    entry.fmt,
                    progress=_bound(progress, entry.path),
                    batch_size=self.batch_size,
                )
            except ImportFormatError as exc:
                return exc
        return self._write(entry, progress)

    def _write(
        self, entry: _Entry, progress: FilesProgress | None
    ) -> list[SessionImport] | ImportFormatError:
        """Apply what the worker sends for ``entry``, in order."""
        w, plan, path = entry.worker, entry.plan, entry.path
        assert w is not None and plan is not None and entry.fmt is not None
        targets = plan.targets  # this process's own: the sessions it creates go here
        sink = StoreSink(self.store, str(path))
        total = path.stat().st_size
        failed: ImportFormatError | None = None
        while True:
            op = w.receive(str(path))
            if op[1] != entry.index:  # pragma: no cover - the queue keeps the order
                raise RuntimeError(
                    f"{path}: a worker sent file {op[1]}'s data for file {entry.index}"
                )
            kind = op[0]
            if kind in ("done", "failed", "crashed"):
                w.outstanding -= 1
            if kind == "crashed":
                exc = op[2]
                exc.add_note(f"in the worker process converting {path}:\n{op[3]}")
                raise exc
            if kind == "failed":
                return failed or op[2]
            if kind == "done":
                if failed is not None:
                    return failed
                _, _, made, multi, pending = op
                order: dict[str | None, Target] = {}
                for name, appended, condensations, created, head in made:
                    t = order[name] = targets.get(name) or Target(None, name)
                    t.appended, t.condensations, t.created, t.head = (
                        appended, condensations, created, head,
                    )  # fmt: skip
                if progress:
                    progress(path, total, total)
                return results(order, plan.key, multi, entry.fmt, str(path), pending)
            if failed is not None:
                continue  # the rest of a file the writer failed: not written
            try:
                if kind == "create":
                    _, _, name, title, meta, child, key = op
                    t = targets.setdefault(name, Target(None, name))
                    sink.create(t, title, meta, targets[None] if child else None, key)
                    t.exists = t.created = True
                elif kind == "append":
                    _, _, name, head, packed, key = op
                    t = targets[name]
                    if head != t.head:  # pragma: no cover - both count the same events
                        raise RuntimeError(f"{path}: {key!r} at {t.head}, the worker says {head}")
                    t.head = sink.append_encoded(t, unpack(packed), key, len(packed))
                elif kind == "progress" and progress:
                    progress(path, op[2], total)
            except ImportFormatError as exc:
                failed = exc


def _key_of(path: Path, fmt: str | None) -> str | None:
    """The key of the sessions the file fills, as far as it tells before it is checked
    (``None``: it says none; its checks will fail, or it is a database)."""
    try:
        found = fmt or checked_format(path, None)
        return None if is_database(path, found) else f"{found}:{peek_source_id(path, found)}"
    except (ImportFormatError, OSError, StopIteration, KeyError, TypeError):
        return None


# --------------------------------------------------------------------------- a worker


class _Sender:
    """A worker's :class:`~._keyed.Sink`: what the writer is to do, sent in order."""

    def __init__(self, out: IO[bytes], index: int, path: str, settings: tuple[Any, ...]) -> None:
        self.out, self.index, self.path, self.settings = out, index, path, settings
        self.reported = 0

    def create(
        self,
        target: Target,
        title: str | None,
        metadata: dict[str, Any],
        parent: Target | None,
        key: str,
    ) -> None:
        _send(
            self.out, ("create", self.index, target.name, title, metadata, parent is not None, key)
        )

    def append(self, target: Target, events: list[Any], key: str) -> int:
        try:
            encoded = encode_all(events, *self.settings)
        except EventStoreError as exc:
            raise append_failed(self.path, key, target.head, len(events), exc) from exc
        _send(self.out, ("append", self.index, target.name, target.head, pack(encoded), key))
        return target.head + len(events)

    def progress(self, done: int, total: int) -> None:
        if done - self.reported >= _PROGRESS_BYTES:
            self.reported = done
            _send(self.out, ("progress", self.index, done))


def _serve(tasks_fd: int, out_fd: int) -> None:
    """A worker: convert each file it is handed, until its pipe ends or it is handed
    ``None``."""
    with os.fdopen(tasks_fd, "rb") as tasks, os.fdopen(out_fd, "wb") as out:
        first = _read(tasks)
        if first is None:
            return
        try:
            settings, batch_size = pickle.loads(first)
        except Exception as exc:
            _send(out, ("refused", f"{type(exc).__name__}: {exc}"))
            return
        _send(out, ("ready",))
        with fewer_collections():
            while (data := _read(tasks)) is not None and (task := pickle.loads(data)):
                _convert(out, task, settings, batch_size)


def _convert(out: IO[bytes], task: Any, settings: tuple[Any, ...], batch_size: int) -> None:
    index, path, fmt, plan = task
    sink = _Sender(out, index, path, settings)
    try:
        writer, pending = convert_into(
            Path(path), fmt, None, plan, sink, True, sink.progress, batch_size
        )
    except ImportFormatError as exc:
        _send(out, ("failed", index, exc))
        return
    except Exception as exc:
        _send(out, ("crashed", index, _portable(exc), traceback.format_exc()))
        return
    made = [
        (name, t.appended, t.condensations, t.created, t.head) for name, t in writer.targets.items()
    ]
    _send(out, ("done", index, made, writer.conv.multi, pending))


def _portable(exc: BaseException) -> BaseException:
    """``exc``, or a stand-in naming it when it cannot be pickled."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc
