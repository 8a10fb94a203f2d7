"""A local Kafka Connect worker (standalone mode) that runs connectors, as a team runs Debezium in Kafka Connect.

Its jars are those the platform's `jars.tsv` names under the use `kafka-connect` (Kafka Connect 4.3's runtime and
JSON converter, Debezium's PostgreSQL connector, and every jar they need at run time), resolved by `make setup`
into the installation's local Maven repository: starting it downloads nothing. The connectors are on the worker's
class path, which Connect scans for plugins as it scans a `plugin.path`. It runs on the machine's Java (17 or
later), serves Connect's REST API on 127.0.0.1 only, and keeps everything under one folder:

    <root>/worker.properties       written at each start: the worker's settings below and the broker
    <root>/connectors/<name>.properties   each connector's configuration, as given
    <root>/offsets.dat             the source connectors' offsets (standalone mode keeps them in a file): a restart
                                   on the same folder goes on from where the connectors' last flush left them
    <root>/logs/connect.log        the worker's log (each start appends)

    with LocalKafkaConnect(tmp_path, kafka.bootstrap_servers, {"app": debezium_config}) as connect:
        connect.status("app")   # Connect's own answer: {"connector": {"state": "RUNNING", ...}, "tasks": [...]}

The worker writes records as Kafka Connect's JSON converter does by default: key and value each with its schema
(`{"schema": ..., "payload": ...}`); `schemas=False` writes the bare payloads (`schemas.enable=false`).
"""

from __future__ import annotations

import atexit
import functools
import json
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import KafkaError, MissingBinaryError
from .kafka import LOG4J2, _properties_text, java_binary
from .process import HOST, NotReady, free_port, listening, spawn, stop_processes, wait_ready

MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
DEFAULT_HEAP = "512m"
STARTUP_TIMEOUT = 120.0  # the JVM, the plugin scan of ~70 jars, then each connector's first task
STOP_TIMEOUT = 30.0
_NAME = re.compile(r"[A-Za-z0-9_.-]+")

# The worker's settings besides the broker, its REST listener and its offsets file: Connect's JSON converter for
# keys and values, offsets flushed every second (Connect's 60 s would send a minute of records again after a crash;
# either way each record is delivered at least once), and topics a connector writes created by the worker as the
# connector's `topic.creation.*` settings say.
DEFAULT_PROPERTIES: Mapping[str, str] = {
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "offset.flush.interval.ms": "1000",
    "topic.creation.enable": "true",
    "plugin.discovery": "only_scan",  # the connectors are on the class path: no plugin manifests to trust
}


def connect_jars() -> list[Path]:
    """The worker's class path: the jars of `jars.tsv`'s use `kafka-connect` in the installation's local repository,
    or a `MissingJarError` naming the command that resolves them."""
    try:
        from lakehouse_assets.runtime.jars import KAFKA_CONNECT, jars_for
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "lakehouse_assets":
            raise
        raise MissingBinaryError("Kafka Connect's jars are named by the platform (lakehouse_assets/runtime/jars.tsv): "
                                 "install it (make setup), or pass LocalKafkaConnect(jars=[...])") from None
    return jars_for({KAFKA_CONNECT})


class LocalKafkaConnect:
    """A Kafka Connect worker in standalone mode on `bootstrap_servers`, its files under `root`, running
    `connectors` ({name: configuration}, each with its `connector.class`). `port` is the REST API's (0: a free
    one)."""

    def __init__(
        self,
        root: Path | str,
        bootstrap_servers: str,
        connectors: Mapping[str, Mapping[str, str]],
        *,
        schemas: bool = True,
        port: int = 0,
        heap: str = DEFAULT_HEAP,
        jars: Sequence[Path | str] | None = None,
        java: Path | str | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self.root = Path(root).expanduser().resolve()
        self.bootstrap_servers = bootstrap_servers
        bad = [name for name in connectors if not _NAME.fullmatch(name)]
        if bad or not connectors:
            raise KafkaError(f"connector names {bad or '(none)'}: one or more, each of letters, digits, '_', '.', '-'")
        missing = [name for name, config in connectors.items() if "connector.class" not in config]
        if missing:
            raise KafkaError(f"connectors {missing} name no connector.class")
        self.connectors = {name: dict(config) for name, config in connectors.items()}
        self.schemas = schemas
        self.port = port or free_port()
        self.heap = heap
        self._jars = [Path(jar) for jar in jars] if jars is not None else None
        self._java = Path(java) if java else None
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Connect's REST API."""
        return f"http://{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.root / "logs" / "connect.log"

    @property
    def offsets_file(self) -> Path:
        return self.root / "offsets.dat"

    def worker_properties(self) -> dict[str, str]:
        flag = "true" if self.schemas else "false"
        return {**DEFAULT_PROPERTIES, "bootstrap.servers": self.bootstrap_servers, "listeners": self.url,
                "offset.storage.file.filename": str(self.offsets_file),
                "key.converter.schemas.enable": flag, "value.converter.schemas.enable": flag}

    def command(self) -> list[str]:
        jars = self._jars if self._jars is not None else connect_jars()
        files = [str(self.root / "connectors" / f"{name}.properties") for name in self.connectors]
        return [str(self._java or java_binary()), "-Xms128m", f"-Xmx{self.heap}", "-Djava.awt.headless=true",
                "-Dlog4j2.shutdownHookEnabled=false", f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}",
                "-cp", ":".join(str(jar) for jar in jars), MAIN_CLASS, str(self.root / "worker.properties"), *files]

    def _write_files(self) -> None:
        (self.root / "connectors").mkdir(parents=True, exist_ok=True)
        # They may hold the broker's and the database's passwords: for their owner only.
        for path, values in [(self.root / "worker.properties", self.worker_properties()),
                             *((self.root / "connectors" / f"{name}.properties", {"name": name, **config})
                               for name, config in self.connectors.items())]:
            path.touch(mode=0o600)
            path.chmod(0o600)
            path.write_text(_properties_text(values))
        (self.root / "log4j2.properties").write_text(LOG4J2)

    @property
    def pid(self) -> int | None:
        """The worker's process while it runs."""
        return None if self._proc is None else self._proc.pid

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> LocalKafkaConnect:
        """Start the worker and wait until every connector and each of its tasks runs (a connector that fails is
        an error with Connect's own trace)."""
        if self.is_running():
            return self
        if listening(self.port):
            raise KafkaError(f"port {self.port} on {HOST} is already in use: choose another for Connect's REST API")
        command = self.command()
        self._write_files()
        self._proc = spawn(command, self.log_file, cwd=self.root, append=True)
        atexit.register(self.stop)
        try:
            for name in self.connectors:
                wait_ready(functools.partial(self._running, name), self.startup_timeout,
                           what=f"Kafka Connect's connector {name!r} on {self.url}", logs=[self.log_file],
                           not_yet=(OSError,), error=KafkaError, exited=self._exited)
        except BaseException:
            self.stop()
            raise
        return self

    def _exited(self) -> str | None:
        code = None if self._proc is None else self._proc.poll()
        return None if code is None else f"the Kafka Connect worker exited with code {code}"

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as answer:
            return json.loads(answer.read())

    def status(self, name: str) -> dict[str, Any]:
        """Connect's status of connector `name`: its state and each task's."""
        return self._get(f"/connectors/{name}/status")

    def _running(self, name: str) -> dict[str, Any]:
        try:
            status = self.status(name)
        except urllib.error.HTTPError as exc:
            raise NotReady(f"{name}: HTTP {exc.code}") from None
        states = [status["connector"]["state"], *(task["state"] for task in status.get("tasks", []))]
        if "FAILED" in states:
            traces = [part.get("trace", "") for part in [status["connector"], *status.get("tasks", [])]]
            raise KafkaError(f"Kafka Connect's connector {name!r} failed: {' '.join(t for t in traces if t)[:4000]}")
        if not status.get("tasks") or any(state != "RUNNING" for state in states):
            raise NotReady(f"{name}: {states}")
        return status

    def stop(self, timeout: float = STOP_TIMEOUT) -> bool:
        """SIGTERM (the worker stops its connectors and flushes their offsets), then SIGKILL after `timeout` s.
        True if it was running (a worker killed from outside is only waited for)."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is None:
            return False
        was_running = stop_processes([proc.pid], timeout, error=KafkaError)
        proc.wait()
        return was_running

    def __enter__(self) -> LocalKafkaConnect:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalKafkaConnect(root={str(self.root)!r}, url={self.url!r}, connectors={sorted(self.connectors)})"

