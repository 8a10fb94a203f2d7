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

import json
import os
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import SparkClusterError
from .process import HOST, NotReady, StateFile, alive, free_ports, spawn, stop_processes, wait_ready


def spark_home() -> Path:
    """The pip pyspark distribution, which is a Spark home (bin/spark-class, jars/)."""
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists():
        raise SparkClusterError(f"{home} has no bin/spark-class: is pyspark installed from its wheel?")
    return home


@dataclass
class ClusterState:
    """What `<root>/cluster.json` records."""

    root: str
    master_url: str
    master_ui: str
    pids: dict[str, int] = field(default_factory=dict)  # process name -> pid (its own process group)
    workers: int = 0
    started_at: float = 0.0

    def write(self) -> None:
        STATE.write(self.root, asdict(self))


STATE = StateFile("cluster.json", lambda raw: ClusterState(**raw), SparkClusterError)


def master_json(master_ui: str, timeout: float = 2.0) -> dict[str, Any]:
    """The master's own status page as JSON: workers, their state, cores and memory, applications."""
    with urllib.request.urlopen(f"{master_ui}/json/", timeout=timeout) as response:
        return json.loads(response.read())


def cluster_status(root: Path | str) -> ClusterState | None:
    """The cluster recorded under `root` if its master still runs, else None."""
    return STATE.running(root, lambda state: alive(state.pids.get("master", -1)))


def stop_cluster(root: Path | str, timeout: float = 20.0) -> bool:
    """Stop the cluster recorded under `root` (workers first, then the master). True if one ran.

    Each process leads a process group: the executors a worker started go with it.
    """
    return STATE.stop(root, lambda state: stop_processes(
        [state.pids[name] for name in sorted(state.pids, key=lambda n: n == "master")], timeout, group=True,
        error=SparkClusterError))


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

    def _log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def _spawn(self, name: str, args: list[str]) -> int:
        home = spark_home()
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST, "SPARK_NO_DAEMONIZE": "1",
               "SPARK_LOG_DIR": str(self.root / "logs"), "SPARK_WORKER_DIR": str(self.root / "work")}
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        return spawn([str(home / "bin" / "spark-class"), *args], self._log(name), env=env, append=True).pid

    def start(self) -> SparkCluster:
        """Start the master and the workers; return once every worker has registered as ALIVE."""
        running = cluster_status(self.root)
        if running is not None:
            raise SparkClusterError(f"a cluster already runs under {self.root} ({running.master_url}): "
                                    "stop it with `lakehouse cluster stop`")
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        (self.root / "work").mkdir(exist_ok=True)
        port, ui, *worker_uis = free_ports(2 + self.workers)
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
        pids = self.state.pids if self.state is not None else {}

        def registered() -> None:
            seen = master_json(self.master_ui)
            if sum(w["state"] == "ALIVE" for w in seen.get("workers", [])) < self.workers:
                raise NotReady(f"the master said: {seen}")

        def exited() -> str | None:
            dead = [name for name, pid in pids.items() if not alive(pid)]
            return f"{', '.join(dead)} exited" if dead else None

        wait_ready(registered, self.startup_timeout, what=f"a master with {self.workers} ALIVE workers",
                   logs=[self._log(name) for name in pids], not_yet=(OSError, ValueError), exited=exited,
                   error=SparkClusterError, interval=0.5)

    def stop(self) -> None:
        stop_cluster(self.root)
        self.state = None

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
