"""A throwaway PostgreSQL server with logical decoding, for trying and testing real change data capture.

`initdb` refuses to run as root, so when this process is root the cluster is
created and started as the `postgres` user (its folder handed to that user).
The server listens on 127.0.0.1 on a free port, keeps its socket in its own
folder, and runs with `wal_level=logical` so that Debezium's PostgreSQL
connector (`pgoutput`) can stream from it. Nothing of the machine's own server
is touched.

    with ThrowawayPostgres(Path("/tmp/pg")) as pg:
        conn = psycopg2.connect(pg.dsn)
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import MissingBinaryError

SERVER_USER = "postgres"


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    on_path = shutil.which(name)
    if found:
        return found[-1]
    if on_path:
        return on_path
    raise MissingBinaryError(f"{name} not found: install PostgreSQL's server package (Debian: postgresql)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ThrowawayPostgres:
    root: Path
    port: int = 0
    database: str = "source"

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self.port = self.port or free_port()
        self._cluster: Path | None = None

    @property
    def cluster(self) -> Path:
        """Where the server's files live: `root`, or, when the `postgres` user cannot reach it (a root-only
        temporary folder), a folder of its own under the system's temporary directory."""
        if self._cluster is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._cluster = self.root
            if os.geteuid() == 0:
                shutil.chown(self.root, SERVER_USER)
                if self._run("test", "-w", str(self.root)).returncode != 0:
                    self._cluster = Path(tempfile.mkdtemp(prefix="lakehouse-pg-"))
                    shutil.chown(self._cluster, SERVER_USER)
                    (self.root / "cluster").write_text(str(self._cluster))
        return self._cluster

    @property
    def data(self) -> Path:
        return self.cluster / "data"

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={SERVER_USER} dbname={self.database}"

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    def start(self) -> ThrowawayPostgres:
        if not (self.data / "PG_VERSION").exists():
            done = self._run(_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", SERVER_USER, "-E", "UTF8")
            if done.returncode != 0:
                raise RuntimeError(f"initdb failed: {done.stderr.strip()}")
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.cluster} "
                   "-c wal_level=logical -c max_replication_slots=8 -c max_wal_senders=8 -c fsync=on")
        log_file = self.cluster / "server.log"
        done = self._run(_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(log_file), "-w", "start")
        if done.returncode != 0:
            log = log_file.read_text()[-2000:] if log_file.exists() else ""
            raise RuntimeError(f"PostgreSQL did not start on port {self.port}: {done.stderr.strip()} {log}")
        self.create_database(self.database)
        return self

    def create_database(self, name: str) -> None:
        """Create database `name` unless it exists."""
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                conn = psycopg2.connect(f"host=127.0.0.1 port={self.port} user={SERVER_USER} dbname=postgres")
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        if self._cluster is not None and self._cluster != self.root:
            shutil.rmtree(self._cluster, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
