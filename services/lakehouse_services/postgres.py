"""A throwaway PostgreSQL server with logical decoding, for trying and testing real change data capture.

`initdb` refuses to run as root, so when this process is root the cluster is
created and started as the `postgres` user (its folder handed to that user).
The server listens on 127.0.0.1 on a free port, keeps its socket in its own
folder, and runs with `wal_level=logical` so that Debezium's PostgreSQL
connector (`pgoutput`) can stream from it. Nothing of the machine's own server
is touched. Its pid, port and folder are written to `<root>/postgres.json`, so
one process can start it and another can ask for its status or stop it.

    with ThrowawayPostgres(Path("/tmp/pg")) as pg:
        conn = psycopg2.connect(pg.dsn)
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import MissingBinaryError, PostgresError
from .process import HOST, StateFile, alive, free_port, listening, log_tails, stop_processes, wait_ready

SERVER_USER = "postgres"
STARTUP_TIMEOUT = 30.0

def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    on_path = shutil.which(name)
    if found:
        return found[-1]
    if on_path:
        return on_path
    raise MissingBinaryError(f"{name} not found: install PostgreSQL's server package (Debian: postgresql)")


def _dsn(port: int, database: str) -> str:
    return f"host={HOST} port={port} user={SERVER_USER} dbname={database}"


def _postmaster_pid(data: Path) -> int | None:
    """The pid the server running on `data` wrote into its folder (the first line of postmaster.pid)."""
    try:
        return int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (FileNotFoundError, ValueError):
        return None


@dataclass(frozen=True)
class PostgresState:
    """What `<root>/postgres.json` records about a running server."""

    pid: int
    port: int
    database: str
    root: str
    cluster: str  # the folder of the server's files: `root`, or one of its own (ThrowawayPostgres.cluster)
    log_file: str
    started_at: float

    @property
    def dsn(self) -> str:
        return _dsn(self.port, self.database)

    def write(self) -> None:
        STATE.write(self.root, asdict(self))

    def runs(self) -> bool:
        # A server writes its pid into its folder and removes it when it stops: a recycled pid is not taken for it.
        return _postmaster_pid(Path(self.cluster) / "data") == self.pid and alive(self.pid)


STATE = StateFile("postgres.json", lambda raw: PostgresState(**raw), PostgresError)


def postgres_status(root: Path | str) -> PostgresState | None:
    """The server recorded under `root` if it is still running, else None."""
    return STATE.running(root, PostgresState.runs)


def stop_postgres(root: Path | str, timeout: float = 60.0) -> bool:
    """Stop the server recorded under `root` (from any process). True if one was running.

    A fast shutdown (SIGINT, what `pg_ctl stop -m fast` sends: sessions are ended, the server checkpoints),
    then SIGKILL after `timeout` seconds. A folder of its own (see `ThrowawayPostgres.cluster`) is removed.
    """

    def stop(state: PostgresState) -> bool:
        was_running = state.runs() and stop_processes([state.pid], timeout, sig=signal.SIGINT, error=PostgresError)
        if state.cluster != state.root:
            shutil.rmtree(state.cluster, ignore_errors=True)
        return was_running

    return STATE.stop(root, stop)


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
    def log_file(self) -> Path:
        return self.cluster / "server.log"

    @property
    def dsn(self) -> str:
        return _dsn(self.port, self.database)

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    def start(self) -> ThrowawayPostgres:
        """Start the server (creating its files the first time) and the database; it runs until `stop`."""
        running = postgres_status(self.root)
        if running is not None:
            raise PostgresError(f"a PostgreSQL server already runs under {self.root} (pid {running.pid}, port "
                                f"{running.port}): stop it first with `lakehouse postgres stop`")
        if listening(self.port):
            raise PostgresError(f"port {self.port} on {HOST} is already in use: stop whatever listens there "
                                "or choose another port")
        if not (self.data / "PG_VERSION").exists():
            done = self._run(_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", SERVER_USER, "-E", "UTF8")
            if done.returncode != 0:
                raise PostgresError(f"initdb failed: {done.stderr.strip()}")
        options = (f"-p {self.port} -c listen_addresses={HOST} -c unix_socket_directories={self.cluster} "
                   "-c wal_level=logical -c max_replication_slots=8 -c max_wal_senders=8 -c fsync=on")
        done = self._run(_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log_file), "-w",
                         "start")
        pid = _postmaster_pid(self.data)
        if done.returncode != 0 or pid is None:
            raise PostgresError(f"PostgreSQL did not start on port {self.port}: {done.stderr.strip()}\n"
                                f"{log_tails([self.log_file])}")
        PostgresState(pid=pid, port=self.port, database=self.database, root=str(self.root),
                      cluster=str(self.cluster), log_file=str(self.log_file), started_at=time.time()).write()
        try:
            self.create_database(self.database)
        except BaseException:
            self.stop()
            raise
        return self

    def _connect(self, database: str) -> Any:
        """A connection to `database`, once the server accepts one."""
        import psycopg2

        return wait_ready(lambda: psycopg2.connect(_dsn(self.port, database)), STARTUP_TIMEOUT,
                          what=f"PostgreSQL on port {self.port}", logs=[self.log_file],
                          not_yet=(psycopg2.OperationalError,), error=PostgresError)

    def create_database(self, name: str) -> None:
        """Create database `name` unless it exists."""
        conn = self._connect("postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the server (see `stop_postgres`). True if it was running."""
        return stop_postgres(self.root, timeout)

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
