"""A Spark standalone cluster on this machine: one master and N workers, each its own JVM.

The pip `pyspark` distribution carries the standalone Master and Worker classes and
`bin/spark-class`, but not the `sbin/start-*` scripts, so the processes are started
here directly. Everything listens on 127.0.0.1. The pids, ports and master URL are
written to `<root>/cluster.json`, so one process can start the cluster detached and
another can ask for its status or stop it.

    with SparkCluster(tmp_path, workers=2) as cluster:
        os.environ["LAKEHOUSE_SPARK_MASTER"] = cluster.master_url
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SparkClusterError

HOST = "127.0.0.1"
STATE_FILE = "cluster.json"


def spark_home() -> Path:
    """The pip pyspark distribution, which is a Spark home (bin/spark-class, jars/)."""
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists():
        raise SparkClusterError(f"{home} has no bin/spark-class: is pyspark installed from its wheel?")
    return home


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):  # held open together, so the ports are distinct
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((HOST, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class ClusterState:
    """What `<root>/cluster.json` records."""

    root: str
    master_url: str
    master_ui: str
    pids: dict[str, int] = field(default_factory=dict)  # process name -> pid (its own process group)
    workers: int = 0
    started_at: float = 0.0

    @classmethod
    def read(cls, root: Path | str) -> ClusterState | None:
        path = Path(root) / STATE_FILE
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise SparkClusterError(f"{path} is unreadable ({exc}); delete it if no cluster runs") from exc

    def write(self) -> None:
        path = Path(self.root) / STATE_FILE
        path.with_suffix(".tmp").write_text(json.dumps(asdict(self), indent=2) + "\n")
        path.with_suffix(".tmp").replace(path)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def master_json(master_ui: str, timeout: float = 2.0) -> dict[str, Any]:
    """The master's own status page as JSON: workers, their state, cores and memory, applications."""
    with urllib.request.urlopen(f"{master_ui}/json/", timeout=timeout) as response:
        return json.loads(response.read())


def cluster_status(root: Path | str) -> ClusterState | None:
    """The cluster recorded under `root` if its master still runs, else None."""
    state = ClusterState.read(Path(root).resolve())
    if state is None or not _alive(state.pids.get("master", -1)):
        return None
    return state


def stop_cluster(root: Path | str, timeout: float = 20.0) -> bool:
    """Stop the cluster recorded under `root` (workers first, then the master). True if one ran."""
    root = Path(root).resolve()
    state = ClusterState.read(root)
    if state is None:
        return False
    running = [pid for pid in state.pids.values() if _alive(pid)]
    for name in sorted(state.pids, key=lambda n: n == "master"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(state.pids[name], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in state.pids.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in state.pids.values():
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    (root / STATE_FILE).unlink(missing_ok=True)
    return bool(running)


class SparkCluster:
    """A standalone master and `workers` workers of `cores` cores and `memory` each, under `root`."""

    def __init__(self, root: Path | str, workers: int = 2, cores: int = 1, memory: str = "2g",
                 startup_timeout: float = 90.0) -> None:
        self.root = Path(root).expanduser().resolve()
        self.workers, self.cores, self.memory = workers, cores, memory
        self.startup_timeout = startup_timeout
        self.state: ClusterState | None = None

    @property
    def master_url(self) -> str:
        if self.state is None:
            raise SparkClusterError("the cluster is not started")
        return self.state.master_url

    @property
    def master_ui(self) -> str:
        if self.state is None:
            raise SparkClusterError("the cluster is not started")
        return self.state.master_ui

    def _spawn(self, name: str, args: list[str]) -> int:
        home = spark_home()
        log = open(self.root / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST, "SPARK_NO_DAEMONIZE": "1",
               "SPARK_LOG_DIR": str(self.root / "logs"), "SPARK_WORKER_DIR": str(self.root / "work")}
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        process = subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=env, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        return process.pid

    def start(self) -> SparkCluster:
        """Start the master and the workers; return once every worker has registered as ALIVE."""
        running = cluster_status(self.root)
        if running is not None:
            raise SparkClusterError(f"a cluster already runs under {self.root} ({running.master_url}): "
                                    "stop it with `lakehouse cluster stop`")
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        (self.root / "work").mkdir(exist_ok=True)
        port, ui, *worker_uis = _free_ports(2 + self.workers)
        self.state = ClusterState(root=str(self.root), master_url=f"spark://{HOST}:{port}",
                                  master_ui=f"http://{HOST}:{ui}", workers=self.workers, started_at=time.time())
        self.state.pids["master"] = self._spawn("master", [
            "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(port), "--webui-port", str(ui)])
        self.state.write()
        for n, worker_ui in enumerate(worker_uis, 1):
            self.state.pids[f"worker{n}"] = self._spawn(f"worker{n}", [
                "org.apache.spark.deploy.worker.Worker", self.state.master_url, "--host", HOST,
                "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(worker_ui),
                "--work-dir", str(self.root / "work" / f"worker{n}")])
            self.state.write()
        try:
            self._wait_for_workers()
        except BaseException:
            stop_cluster(self.root)
            raise
        return self

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        seen: Any = None
        while time.monotonic() < deadline:
            dead = [name for name, pid in self.state.pids.items() if not _alive(pid)]  # type: ignore[union-attr]
            if dead:
                raise SparkClusterError(f"{', '.join(dead)} exited while starting:\n{self._logs(dead)}")
            with contextlib.suppress(OSError, ValueError):
                seen = master_json(self.master_ui)
                if sum(w["state"] == "ALIVE" for w in seen.get("workers", [])) >= self.workers:
                    return
            time.sleep(0.5)
        raise SparkClusterError(f"{self.workers} workers did not register within {self.startup_timeout:.0f} s "
                                f"(master said: {seen})\n{self._logs(list(self.state.pids))}")  # type: ignore[union-attr]

    def _logs(self, names: list[str], lines: int = 15) -> str:
        out = []
        for name in names:
            path = self.root / "logs" / f"{name}.log"
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(no log)"]
            out.append(f"--- {path}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        stop_cluster(self.root)
        self.state = None

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
