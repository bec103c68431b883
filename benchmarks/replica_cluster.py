"""A throwaway Postgres primary with a streaming replica, for the replica test and benchmark.

The machine's own server is left alone: its ``pg_hba.conf`` has no ``replication`` entry
(``all`` does not match replication connections), and adding one would change its
configuration. Instead this starts a fresh primary of its own (``initdb`` with trust
authentication, whose default ``pg_hba.conf`` allows replication from localhost) on a free
port, takes a base backup of it with ``pg_basebackup -R`` and starts that as a hot
standby on a second port. Postgres refuses to run as root, so when we are root every
server binary runs as the ``postgres`` user (``runuser``).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ReplicaCluster", "find_bin_dir", "ClusterError"]


class ClusterError(RuntimeError):
    """The binaries are there but the primary or its replica did not start."""


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/*/bin`` holding the server tools, or ``None``."""
    need = ("initdb", "pg_ctl", "pg_basebackup", "postgres")

    def version(p: str) -> float:
        try:
            return float(Path(p).parent.name)
        except ValueError:
            return 0.0

    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if all((Path(cand) / n).exists() for n in need):
            return Path(cand)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ReplicaCluster:
    """Start with :meth:`start`, stop (and delete) with :meth:`stop`."""

    bin_dir: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="es-replica-")))
    primary_port: int = field(default_factory=_free_port)
    replica_port: int = field(default_factory=_free_port)

    @property
    def primary_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.primary_port}/postgres"

    @property
    def replica_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.replica_port}/postgres"

    def _run(self, *args: str, timeout: float = 120) -> str:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise ClusterError(f"{' '.join(cmd)} failed: {done.stderr.strip() or done.stdout}")
        return done.stdout

    def start(self) -> ReplicaCluster:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        os.chmod(self.root, 0o700)
        primary, replica = self.root / "primary", self.root / "replica"
        self._run("initdb", "-D", str(primary), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        with open(primary / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {self.primary_port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\nwal_level = replica\n"
                "max_wal_senders = 4\nfsync = off\n"
            )
        self._pg_ctl(primary, "start")
        self._run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "postgres",
            "-D", str(replica), "-R", "-X", "stream",
        )  # fmt: skip
        self._pg_ctl(replica, "start", f"-p {self.replica_port}")
        self._wait_standby()
        return self

    def _pg_ctl(self, data: Path, action: str, options: str = "") -> None:
        args = ["pg_ctl", "-D", str(data), "-l", str(data / "server.log"), "-w", action]
        if options:
            args[1:1] = ["-o", options]
        try:
            self._run(*args)
        except ClusterError as exc:
            log = data / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise ClusterError(f"{exc}\n{tail}") from None

    def _wait_standby(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=self.replica_port, user="postgres", dbname="postgres"
                ) as conn:
                    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                    if row and row[0]:
                        return
            except psycopg.OperationalError:
                pass
            if time.monotonic() > deadline:
                raise ClusterError("the replica did not come up as a standby within 30 s")
            time.sleep(0.2)

    def stop(self) -> None:
        for name in ("replica", "primary"):
            data = self.root / name
            if (data / "postmaster.pid").exists():
                try:
                    self._run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
                except ClusterError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)
