"""A local Apache Kafka broker (KRaft mode: broker and controller in one JVM) that the project starts and stops itself.

Its jars are those the platform's `jars.tsv` names under the use `kafka-broker` (Apache Kafka 4.4 and every jar it
needs at run time), resolved by `make setup` into the installation's local Maven repository: starting it downloads
nothing. It runs on the machine's Java (17 or later: `JAVA_HOME`, else `java` on PATH), listens on 127.0.0.1 only
(one port for clients, one for its controller) and keeps everything under one folder:

    <root>/node.json          the node's identity, kept across restarts: its cluster id and ports
    <root>/server.properties  written at each start: the defaults below, the ports, any overrides (and
                              log4j2.properties, the broker log's levels)
    <root>/data/              its storage, formatted once for the cluster id: topics, group offsets, transactions
    <root>/logs/kafka.log     the broker's log (each start appends); logs/format.log the storage tool's
    <root>/kafka.json         the running broker's pid and address, so that another process can ask or stop it
    <root>/tls/               with `tls=True`: a certificate authority of its own (ca.pem) and the broker's key
                              and certificate, signed by it for 127.0.0.1

    with LocalKafka(tmp_path) as kafka:
        kafka.create_topic("events", partitions=3)
        producer = confluent_kafka.Producer(kafka.client_config())

A stop and a start on the same folder give the same cluster on the same clients' port, with its records and its
consumer groups' offsets.

`sasl_users={"alice": "secret"}` makes the clients' listener SASL_PLAINTEXT (mechanism PLAIN, the users defined in
the listener's JAAS configuration): a client that does not sign in as one of them is refused. `tls=True` adds a
listener with TLS on a port of its own (`tls_bootstrap_servers`; SASL_SSL with `sasl_users`, else SSL), its
certificate signed by the CA in `ca_file`. `client_config()` signs in as the broker's own user, so that the
broker's owner can always create topics and produce.
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import KafkaError, MissingBinaryError
from .process import HOST, NotReady, StateFile, alive, free_ports, listening, log_tails, spawn, stop_processes, wait_ready

NODE_ID = 1
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
DEFAULT_HEAP = "512m"
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0  # a clean stop (SIGTERM: the broker closes its logs) takes about 2 s
MiB = 1024 * 1024

# What this broker runs with unless `properties` say otherwise: one node, so every internal topic has one replica,
# and a few partitions each rather than Kafka's 50 (each is a log to create and load on 2 cores); topics are created
# explicitly, never by a client that names one; segments and retention kept small for a machine's disk.
DEFAULT_PROPERTIES: Mapping[str, str] = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.segment.bytes": str(16 * MiB),
    "log.retention.hours": "168",
    "log.retention.bytes": str(1024 * MiB),
    "log.cleaner.dedupe.buffer.size": str(16 * MiB),  # Kafka's 128 MiB would take a quarter of the heap
}
# Set from the node's ports and folder: an override of one of these is refused.
MANAGED = ("process.roles", "node.id", "controller.quorum.voters", "listeners", "advertised.listeners",
           "controller.listener.names", "inter.broker.listener.name", "listener.security.protocol.map", "log.dirs",
           "sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol", "ssl.keystore.type",
           "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password")
# With `sasl_users`: the user the broker signs in as to itself (inter-broker requests, such as transaction markers)
# and the one `client_config()` gives.
BROKER_USER = "broker"
_USER = re.compile(r"[A-Za-z0-9_.-]+")

# The broker's own log: INFO, without the full dump of every configuration each client and server prints.
LOG4J2 = """\
rootLogger.level=INFO
rootLogger.appenderRef.out.ref=out
appender.out.type=Console
appender.out.name=out
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.config.name=org.apache.kafka.common.config.AbstractConfig
logger.config.level=WARN
"""

# librdkafka reports each refused connection while the broker starts; kept out of the caller's stderr.
_CLIENT_LOG = logging.getLogger(f"{__name__}.client")
_CLIENT_LOG.addHandler(logging.NullHandler())
_CLIENT_LOG.propagate = False


def java_binary() -> Path:
    """The `java` the broker runs on: $JAVA_HOME/bin/java, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME", "").strip()
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not found or not os.access(found, os.X_OK):
        raise MissingBinaryError(f"no Java found ({'JAVA_HOME=' + java_home if java_home else 'no java on PATH'}): "
                                 "Kafka's broker needs Java 17 or later (Debian: openjdk-17-jre-headless)")
    return Path(found)


def broker_jars() -> list[Path]:
    """The broker's class path: the jars of `jars.tsv`'s use `kafka-broker` in the installation's local repository,
    or a `MissingJarError` naming the command that resolves them."""
    try:
        from lakehouse_assets.runtime.jars import KAFKA_BROKER, jars_for
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "lakehouse_assets":
            raise
        raise MissingBinaryError("the broker's jars are named by the platform (lakehouse_assets/runtime/jars.tsv): "
                                 "install it (make setup), or pass LocalKafka(jars=[...])") from None
    return jars_for({KAFKA_BROKER})


def kafka_version(jars: Sequence[Path]) -> str:
    """Apache Kafka's version, read from the name of the broker's jar (kafka_<scala>-<version>.jar)."""
    for jar in jars:
        found = re.fullmatch(r"kafka_2\.\d+-(.+)\.jar", Path(jar).name)
        if found:
            return found.group(1)
    raise KafkaError(f"no kafka_2.*.jar (the broker) among the {len(jars)} jars of the class path")


def new_cluster_id() -> str:
    """A cluster id as Kafka makes one (`kafka-storage random-uuid`): 16 random bytes, URL-safe base64 without
    padding, never starting with '-' (a command line would take it for an option)."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


@dataclass(frozen=True)
class Node:
    """What `<root>/node.json` keeps across restarts: the cluster the storage is formatted for, and the ports the
    broker listened on last (a restart takes them again, so that clients' bootstrap servers stay right)."""

    cluster_id: str
    port: int
    controller_port: int


@dataclass(frozen=True)
class KafkaState:
    """What `<root>/kafka.json` records about a running broker."""

    pid: int
    bootstrap_servers: str
    port: int
    controller_port: int
    cluster_id: str
    version: str
    root: str
    log_file: str
    started_at: float

    def write(self) -> None:
        STATE.write(self.root, asdict(self))

    @property
    def markers(self) -> tuple[str, ...]:
        return _markers(Path(self.root))


NODE = StateFile("node.json", lambda raw: Node(**raw), KafkaError)
STATE = StateFile("kafka.json", lambda raw: KafkaState(**raw), KafkaError)


def _markers(root: Path) -> tuple[str, ...]:
    """What the command line of the broker serving `root` holds: a recycled pid is not taken for it."""
    return MAIN_CLASS, str(root / "server.properties")


def kafka_status(root: Path | str) -> KafkaState | None:
    """The broker recorded under `root` if it is still running, else None."""
    return STATE.running(root, lambda state: alive(state.pid, *state.markers))


def stop_kafka(root: Path | str, timeout: float = STOP_TIMEOUT) -> bool:
    """Stop the broker recorded under `root` (from any process): SIGTERM, then SIGKILL after `timeout` seconds.
    True if one was running. Its data stays: a later start under `root` serves the same cluster."""
    return STATE.stop(root, lambda state: stop_processes([state.pid], timeout, markers=state.markers,
                                                         error=KafkaError))


def _formatted_cluster(data: Path) -> str | None:
    """The cluster id the storage under `data` is formatted for (its meta.properties), None if not formatted."""
    try:
        text = (data / "meta.properties").read_text()
    except FileNotFoundError:
        return None
    found = re.search(r"^cluster\.id=(\S+)$", text, re.M)
    if found is None:
        raise KafkaError(f"{data / 'meta.properties'} names no cluster.id: the storage is damaged")
    return found.group(1)


def _jaas_quoted(value: str) -> str:
    """A value of a JAAS configuration, quoted as its parser reads it."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise MissingBinaryError("LocalKafka(tls=True) makes its certificates with the openssl command: install it "
                                 "(Debian: openssl)")
    done = subprocess.run([openssl, *args], cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                          check=False)
    if done.returncode != 0:
        raise KafkaError(f"openssl {args[0]} failed (exit code {done.returncode}): {done.stderr.decode().strip()}")


def make_certificates(folder: Path, password: str) -> None:
    """A certificate authority of its own (`ca.pem`) and a key and certificate for 127.0.0.1 (and localhost)
    signed by it, as a PKCS#12 key store under `password` (`broker.p12`): what a TLS listener on this machine
    needs, and what its clients trust."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
             "-subj", "/CN=lakehouse local Kafka CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
             "-subj", "/CN=127.0.0.1", cwd=folder)
    (folder / "broker.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                       "extendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "broker.crt", "-days", "30", "-extfile", "broker.ext", cwd=folder)
    _openssl("pkcs12", "-export", "-in", "broker.crt", "-inkey", "broker.key", "-out", "broker.p12",
             "-name", "broker", "-passout", f"pass:{password}", cwd=folder)


def _utf16(c: str) -> list[int]:
    data = c.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def _properties_text(properties: Mapping[str, str]) -> str:
    lines = []
    for key, value in properties.items():
        escaped = str(value).replace("\\", "\\\\")  # a backslash starts an escape in a Java properties file
        # Java reads the file as ISO-8859-1: anything else (a password's letters) as \uXXXX escapes of UTF-16.
        escaped = "".join(c if ord(c) < 128 else "".join(f"\\u{unit:04x}" for unit in _utf16(c)) for c in escaped)
        lines.append(f"{key}={escaped}\n")
    return "".join(lines)


def _ports(port: int, controller_port: int, node: Node | None) -> tuple[int, int]:
    """The ports asked for; in place of 0, the node's last ones, else free ones."""
    if node is not None:
        port, controller_port = port or node.port, controller_port or node.controller_port
    free = iter([candidate for candidate in free_ports(4) if candidate not in (port, controller_port)])
    return port or next(free), controller_port or next(free)


class LocalKafka:
    """One Kafka node (broker and KRaft controller) on 127.0.0.1, its data under `root`.

    `port` is the clients' port, `controller_port` the controller's; 0 takes those the node used last, else free
    ones (a controller port taken since is replaced: only the node itself connects to it). `partitions` is the
    default partition count of a topic created without one. `heap` is the JVM's maximum heap. `properties` override
    the broker's defaults (`DEFAULT_PROPERTIES`), e.g. `{"log.retention.hours": "24"}`.

    `start(detach=True)` leaves the broker running after this process exits; `stop_kafka(root)` (or
    `LocalKafka(root).stop()`) ends it from anywhere.
    """

    def __init__(
        self,
        root: Path | str,
        port: int = 0,
        controller_port: int = 0,
        *,
        partitions: int = 1,
        heap: str = DEFAULT_HEAP,
        properties: Mapping[str, str] | None = None,
        jars: Sequence[Path | str] | None = None,
        java: Path | str | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
        sasl_users: Mapping[str, str] | None = None,
        tls: bool = False,
    ) -> None:
        self.root = Path(root).expanduser().resolve()
        self.port, self.controller_port = _ports(port, controller_port, NODE.read(self.root))
        self._controller_port_asked = bool(controller_port)
        if self.port == self.controller_port:
            raise KafkaError(f"the clients' port and the controller's must differ (both {self.port})")
        if not re.fullmatch(r"[1-9]\d*[kKmMgG]?", heap):
            raise KafkaError(f"heap {heap!r} is not a JVM memory size such as 512m or 1g")
        self.partitions = partitions
        self.heap = heap
        self.properties = dict(properties or {})
        refused = sorted(set(self.properties) & set(MANAGED))
        if refused:
            raise KafkaError(f"{', '.join(refused)}: set by LocalKafka from its ports and folder, not by properties")
        self.sasl_users = dict(sasl_users or {})
        for user in self.sasl_users:
            if not _USER.fullmatch(user) or user == BROKER_USER:
                raise KafkaError(f"SASL user {user!r}: letters, digits, '.', '_' and '-' only, and not "
                                 f"{BROKER_USER!r} (the broker's own)")
        # The broker's own password, new at each LocalKafka (server.properties is written at each start).
        self._broker_password = secrets.token_urlsafe(16)
        self.tls = tls
        self.tls_port = next(p for p in free_ports(3) if p not in (self.port, self.controller_port)) if tls else 0
        self._jars = [Path(jar) for jar in jars] if jars is not None else None
        self._java = Path(java) if java else None
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._detached = False
        self.version: str | None = None  # Apache Kafka's, once started

    @classmethod
    def attach(cls, root: Path | str) -> LocalKafka:
        """The broker already running under `root` (started by another process)."""
        state = kafka_status(root)
        if state is None:
            raise KafkaError(f"no Kafka broker is running under {root}: start one with `lakehouse kafka start`")
        broker = cls(root, state.port, state.controller_port)
        broker._pid = state.pid
        return broker

    # -- where things are -------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def tls_bootstrap_servers(self) -> str:
        """The TLS listener's address (with `tls=True`)."""
        if not self.tls:
            raise KafkaError("this broker has no TLS listener: LocalKafka(..., tls=True) adds one")
        return f"{HOST}:{self.tls_port}"

    @property
    def security_protocol(self) -> str:
        """The clients' listener's protocol: PLAINTEXT, or SASL_PLAINTEXT with `sasl_users`."""
        return "SASL_PLAINTEXT" if self.sasl_users else "PLAINTEXT"

    @property
    def tls_security_protocol(self) -> str:
        return "SASL_SSL" if self.sasl_users else "SSL"

    @property
    def ca_file(self) -> Path:
        """The PEM file of the certificate authority that signed the TLS listener's certificate."""
        return self.root / "tls" / "ca.pem"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "logs" / "kafka.log"

    @property
    def format_log(self) -> Path:
        return self.root / "logs" / "format.log"

    @property
    def properties_file(self) -> Path:
        return self.root / "server.properties"

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def cluster_id(self) -> str | None:
        """The cluster id of this node's storage; None before its first start."""
        formatted = _formatted_cluster(self.data_dir)
        if formatted:
            return formatted
        node = NODE.read(self.root)
        return node.cluster_id if node else None

    def server_properties(self) -> dict[str, str]:
        """What `server.properties` holds: the defaults, the overrides, then what this node's ports and folder set
        (and, with `sasl_users` or `tls`, its listeners' sign-in and certificate)."""
        clients = {self.security_protocol: self.port}
        if self.tls:
            clients[self.tls_security_protocol] = self.tls_port
        advertised = ",".join(f"{name}://{HOST}:{port}" for name, port in clients.items())
        security: dict[str, str] = {}
        if self.sasl_users:
            users = {BROKER_USER: self._broker_password, **self.sasl_users}
            jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f"username={_jaas_quoted(BROKER_USER)} password={_jaas_quoted(self._broker_password)} "
                    + " ".join(f"user_{user}={_jaas_quoted(password)}" for user, password in users.items()) + ";")
            security |= {"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
                         **{f"listener.name.{name.lower()}.plain.sasl.jaas.config": jaas for name in clients}}
        if self.tls:
            security |= {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(self.root / "tls" / "broker.p12"),
                         "ssl.keystore.password": self._broker_password, "ssl.key.password": self._broker_password}
        return {
            **DEFAULT_PROPERTIES,
            "num.partitions": str(self.partitions),
            **self.properties,
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@{HOST}:{self.controller_port}",
            "listeners": f"{advertised},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": self.security_protocol,
            "listener.security.protocol.map": ",".join(f"{name}:{name}" for name in clients) + ",CONTROLLER:PLAINTEXT",
            **security,
            "log.dirs": str(self.data_dir),
        }

    def client_config(self, **config: Any) -> dict[str, Any]:
        """Settings for a confluent_kafka Producer, Consumer or AdminClient of this broker (`config` added): with
        `sasl_users`, signed in as the broker's own user."""
        sign_in = {"security.protocol": self.security_protocol, "sasl.mechanisms": "PLAIN",
                   "sasl.username": BROKER_USER, "sasl.password": self._broker_password} if self.sasl_users else {}
        return {"bootstrap.servers": self.bootstrap_servers, **sign_in, **config}

    def admin(self, **config: Any):
        """An AdminClient of this broker; librdkafka's own messages go to the logger `lakehouse_services.kafka.client`."""
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.client_config(logger=_CLIENT_LOG, **config))

    # -- lifecycle --------------------------------------------------------------------

    def _java_command(self, jars: Sequence[Path], main_class: str, *args: str) -> list[str]:
        return [str(self._java or java_binary()), "-Xms128m", f"-Xmx{self.heap}", "-Djava.awt.headless=true",
                # Logging goes on until the JVM exits, so that the log shows the whole shutdown.
                "-Dlog4j2.shutdownHookEnabled=false",
                f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}",
                "-cp", ":".join(str(jar) for jar in jars), main_class, *args]

    def command(self, jars: Sequence[Path] | None = None) -> list[str]:
        """The broker's command line."""
        return self._java_command(jars or self._class_path(), MAIN_CLASS, str(self.properties_file))

    def _class_path(self) -> list[Path]:
        return self._jars if self._jars is not None else broker_jars()

    def is_running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self._pid is not None and alive(self._pid, *_markers(self.root))

    def start(self, detach: bool = False) -> LocalKafka:
        """Start the broker (its storage formatted the first time) and wait until it answers a metadata request.

        Without `detach` the broker is stopped when this object's context ends or the interpreter exits; with it,
        it outlives this process.
        """
        if self.is_running():
            return self
        running = kafka_status(self.root)
        if running is not None:
            raise KafkaError(f"a Kafka broker already runs under {self.root} (pid {running.pid}, "
                             f"{running.bootstrap_servers}): stop it first with `lakehouse kafka stop`")
        if not self._controller_port_asked and listening(self.controller_port):
            # Only this node reaches its controller, on the port its configuration names: another will do.
            self.controller_port = next(p for p in free_ports(2) if p != self.port)
        busy = [port for port in (self.port, self.controller_port) if listening(port)]
        if busy:
            raise KafkaError(f"ports {busy} on {HOST} are already in use: stop whatever listens there or choose "
                             "other ports (LocalKafka(root, port=..., controller_port=...), `lakehouse kafka start "
                             "--port N`)")
        jars = self._class_path()
        self.version = kafka_version(jars)
        cluster_id = self._cluster_id()
        self._write_files(cluster_id)
        self._format(jars, cluster_id)
        self._proc = spawn(self.command(jars), self.log_file, cwd=self.root, append=True)
        self._pid = self._proc.pid
        KafkaState(pid=self._proc.pid, bootstrap_servers=self.bootstrap_servers, port=self.port,
                   controller_port=self.controller_port, cluster_id=cluster_id, version=self.version, root=str(self.root),
                   log_file=str(self.log_file), started_at=time.time()).write()
        self._detached = detach
        if not detach:
            atexit.register(self.stop)
        try:
            self._wait_ready(self._proc, cluster_id)
        except BaseException:
            self.stop()
            raise
        return self

    def _cluster_id(self) -> str:
        """The cluster the storage is formatted for; for a new node, the one its node.json names, else a new one."""
        formatted = _formatted_cluster(self.data_dir)
        node = NODE.read(self.root)
        if formatted and node and node.cluster_id != formatted:
            raise KafkaError(f"{self.data_dir} holds cluster {formatted}, {NODE.path(self.root)} names "
                             f"{node.cluster_id}: the folder mixes two nodes' files; remove one of them")
        return formatted or (node.cluster_id if node else new_cluster_id())

    def _write_files(self, cluster_id: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(exist_ok=True)
        NODE.write(self.root, asdict(Node(cluster_id, self.port, self.controller_port)))
        if self.tls:
            make_certificates(self.root / "tls", self._broker_password)
        # It holds the passwords of the SASL users and of the key store: for its owner only.
        self.properties_file.touch(mode=0o600)
        self.properties_file.chmod(0o600)
        self.properties_file.write_text(_properties_text(self.server_properties()))
        (self.root / "log4j2.properties").write_text(LOG4J2)

    def _format(self, jars: Sequence[Path], cluster_id: str) -> None:
        """Format the storage for `cluster_id`, once: a formatted folder is left as it is."""
        if _formatted_cluster(self.data_dir):
            return
        command = self._java_command(jars, STORAGE_TOOL, "format", "--cluster-id", cluster_id,
                                     "--config", str(self.properties_file))
        with open(self.format_log, "wb") as log:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=120, check=False)
        if done.returncode != 0 or not _formatted_cluster(self.data_dir):
            raise KafkaError(f"formatting the storage {self.data_dir} failed (exit code {done.returncode})\n"
                             f"{log_tails([self.format_log])}")

    def _wait_ready(self, proc: subprocess.Popen[bytes], cluster_id: str) -> None:
        from confluent_kafka import KafkaException

        # Reconnect quickly while the broker starts (librdkafka backs off up to 10 s by default).
        admin = self.admin(**{"reconnect.backoff.max.ms": 250, "socket.connection.setup.timeout.ms": 2000})

        def answers() -> None:
            metadata = admin.list_topics(timeout=2)
            if NODE_ID not in metadata.brokers:
                raise NotReady(f"the metadata lists brokers {sorted(metadata.brokers)}, not yet node {NODE_ID}")
            if metadata.cluster_id != cluster_id:
                raise KafkaError(f"{self.bootstrap_servers} answers for cluster {metadata.cluster_id}, not for "
                                 f"{cluster_id}: another broker listens there")

        wait_ready(answers, self.startup_timeout, what=f"the Kafka broker on {self.bootstrap_servers}",
                   logs=[self.log_file], not_yet=(KafkaException,), error=KafkaError,
                   exited=lambda: None if proc.poll() is None else
                   f"the Kafka broker on {self.bootstrap_servers} exited with code {proc.returncode}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> bool:
        """SIGTERM (the broker closes its logs and leaves cleanly), wait up to `timeout` seconds, then SIGKILL.
        True if it was running. The data stays under `root`."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is None:
            self._pid = None
            return stop_kafka(self.root, timeout)
        was_running = stop_processes([proc.pid], timeout, error=KafkaError)
        proc.wait()
        state = STATE.read(self.root)
        if state is not None and state.pid == proc.pid:
            STATE.path(self.root).unlink(missing_ok=True)
        self._pid = None
        return was_running

    def restart(self) -> LocalKafka:
        """Stop and start again on the same folder and clients' port: the same cluster, its topics, records and
        consumer groups' offsets."""
        detach = self._detached
        self.stop()
        return self.start(detach=detach)

    # -- topics -----------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None = None, config: Mapping[str, str] | None = None,
                     timeout: float = 30.0) -> None:
        """Create topic `name` with `partitions` partitions (default: the broker's) and one replica, and wait until
        every partition has its leader (a producer's first send then finds it). An existing topic is an error."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        count = partitions or self.partitions
        admin = self.admin()
        topic = NewTopic(name, num_partitions=count, replication_factor=1, config=dict(config or {}))
        try:
            admin.create_topics([topic], operation_timeout=timeout)[name].result(timeout)
        except KafkaException as exc:
            raise KafkaError(f"topic {name!r} was not created on {self.bootstrap_servers}: {exc}") from exc

        def led() -> None:
            found = admin.list_topics(name, timeout=2).topics.get(name)
            if found is None or found.error is not None or len(found.partitions) != count \
                    or any(p.leader < 0 for p in found.partitions.values()):
                raise NotReady(f"topic {name!r} is not yet served: {found and found.partitions}")

        wait_ready(led, timeout, what=f"topic {name!r}", logs=[self.log_file], not_yet=(KafkaException,),
                   error=KafkaError)

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalKafka(root={str(self.root)!r}, bootstrap_servers={self.bootstrap_servers!r})"
