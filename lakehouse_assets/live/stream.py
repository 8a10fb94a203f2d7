"""`lakehouse stream`: minute freshness from landing file to gold, in one long-lived process.

Spark Structured Streaming watches an event source's landing folders (local or
S3) and hands each micro-batch of new files to `foreachBatch`, which runs, on the
same tables and with the same code as the daily assets:

1. bronze: `ingest` (the batch path's parsing, quarantine and records-in balance);
2. silver: `take_new_events` on exactly the rows bronze's commit appended (an
   Iceberg incremental read from the commit's parent snapshot to the commit),
   judged and audited like the daily asset, silver and its rejected table
   published together;
3. gold: `merge_minutes` recomputes the minutes those events fall in from silver
   and MERGEs them into gold_minute_activity.

Spark's file source hands over each path once. What it cannot hand over again, a file
the batch left because it was still being written, or lines appended to a file taken
before, is found by a sweep every `sweep_seconds` (SWEEP_SECONDS unless told) while no
batch runs: the files of the recent day folders whose identity the ingest log does not
hold (landing/versions.py), processed as a batch of their own (`sweep-N`).

Exactly once across crashes: Spark's checkpoint records which files make batch N
before it runs, so a restarted query re-runs batch N with the same files; every
commit of batch N carries the query id and batch id in its snapshot summary,
bronze takes a file only once, silver a key only once, and gold recomputes whole
minutes, so a re-run adds nothing twice. The daily tables (sessions, daily
activity, funnel, ML) are computed from silver by the Dagster automation.

Each commit is reported to the Dagster instance (DAGSTER_HOME) as a run-less
materialisation of its asset and partition, with the snapshot id, so the UI,
freshness policies, automation and lineage see the stream like any run.

With `maintain` (operations/schedules.py `maintenance_when_due`, what `lakehouse
stream` gives it), the stream's tables are compacted, or thinned, after a batch
once they cross their declared maintenance thresholds, as the health sensor would
have the daemon do: a batch's cost does not grow with the small files and the
snapshots the earlier batches left.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import takewhile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    DagsterInstance,
    DailyPartitionsDefinition,
    MetadataValue,
)
from pyiceberg.table.snapshots import ancestors_of
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from ..automation.partitions import daily_partitions
from ..bronze.assets import event_landing_source
from ..bronze.ingest import INGEST_LOG, IngestReport, ingest
from ..bronze.topics import everything_new, ingest_topic
from ..errors import ConfigurationError
from ..gold.bi import gold_specs, merge_minutes
from ..landing.reader import of_files
from ..landing.taken import TakenIndex
from ..landing.versions import Sightings, needs_a_look
from ..landing.zones import landing_day, landing_zone, refusals, source_root
from ..project import EventSource, Project
from ..project.model import MINUTE_ACTIVITY
from ..runtime.commit import CommitResult
from ..runtime.failpoints import failpoint
from ..runtime.freshness import freshness_check_result, freshness_state
from ..runtime.resource import LakehouseResource
from ..runtime.status import add_to_status, heartbeat_file, stream_status_file
from ..silver.events import StreamedEvents, rejected_spec, silver_spec, take_new_events
from ..tables.handle import TableHandle
from ..times import UTC

QUERY_ID = "lakehouse.stream.query-id"
BATCH_ID = "lakehouse.stream.batch-id"
SWEEP_SECONDS = 10.0
TOPIC_FAILURES = 5  # batches of a topic failing in a row before the stream gives up


@dataclass
class BatchReport:
    batch_id: int | str  # Spark's batch id, or `sweep-N`
    files: int
    refused: int = 0
    records_in: int = 0
    kept: int = 0
    quarantined: int = 0
    silver_added: int = 0
    rejected_added: int = 0
    minutes: int = 0
    seconds: float = 0.0
    newest_landed_at: dt.datetime | None = None
    visible_at: dt.datetime | None = None
    snapshots: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    landed_at: list[float] = field(default_factory=list)  # each file's modification time (epoch seconds)
    ranges: list[str] = field(default_factory=list)  # a topic batch's offset ranges, kafka://<topic>/<p>/<start>-<end>
    stage_seconds: dict[str, float] = field(default_factory=dict)  # bronze, silver, gold

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        for k in ("newest_landed_at", "visible_at"):
            out[k] = out[k].isoformat() if out[k] else None
        return out


class EventStream:
    """One event source's stream: landing -> bronze -> silver -> gold_minute_activity."""

    def __init__(self, project: Project, lakehouse: LakehouseResource, source: EventSource | None = None,
                 checkpoint: str | None = None, trigger_seconds: float = 5.0, max_files_per_batch: int | None = None,
                 sweep_seconds: float | None = None, instance: DagsterInstance | None = None, log: Callable[[str], None] = print,
                 maintain: Callable[[list[str]], list[AssetObservation]] | None = None):
        if source is None:
            if len(project.events) != 1:
                raise ConfigurationError(f"the project declares {len(project.events)} event sources: name one of "
                                         f"{sorted(project.events)} to stream")
            source = next(iter(project.events.values()))
        self.lakehouse, self.source = lakehouse, source
        self.landing = event_landing_source(source, project.landing)
        settings = lakehouse.settings
        self.partitions: DailyPartitionsDefinition = daily_partitions(settings.start_date or project.start_date)
        self.checkpoint = checkpoint or str(Path(settings.home) / "streams" / source.name / "checkpoint")
        self.trigger_seconds = trigger_seconds
        self.sweep_seconds = sweep_seconds or SWEEP_SECONDS  # each sweep lists the recent day folders again
        self.max_files_per_batch = max_files_per_batch
        self.instance = instance
        self.log = log
        self.maintain = maintain
        gold = project.gold
        self.gold = gold if (gold.events is not None and gold.events.name == source.name and gold.events.user
                             and MINUTE_ACTIVITY in gold.event_tables) else None
        self.reports: list[BatchReport] = []
        self.last_activity = time.monotonic()
        self._batch = threading.Lock()  # a sweep and a batch never run at once
        self._waiting: set[str] = set()  # files a batch left because they were still being written
        self._sightings = Sightings()  # how long each waiting file has been seen unchanged, across batches
        self._sweeps = 0
        self._taken = TakenIndex()
        self._query: StreamingQuery | None = None

    # -- the query ---------------------------------------------------------------------------------

    def start(self):
        spark = self.lakehouse.spark
        root = f"{self.lakehouse.settings.landing.rstrip('/')}/{self.landing.name}"
        if root.startswith("file:"):
            Path(urlparse(root).path).mkdir(parents=True, exist_ok=True)  # the stream may start before any file
        reader = (spark.readStream.format("binaryFile")
                  .schema("path string, modificationTime timestamp, length long, content binary")
                  .option("recursiveFileLookup", "true")
                  .option("pathGlobFilter", "{*.jsonl,*.jsonl.gz}"))
        if self.max_files_per_batch:
            reader = reader.option("maxFilesPerTrigger", self.max_files_per_batch)
        files = reader.load(root).select("path", "modificationTime")
        return (files.writeStream.queryName(f"lakehouse_{self.source.name}")
                .option("checkpointLocation", self.checkpoint)
                .trigger(processingTime=f"{self.trigger_seconds} seconds")
                .foreachBatch(self._on_batch).start())

    def run(self, until_idle: float | None = None, max_seconds: float | None = None,
            stop: threading.Event | None = None) -> list[BatchReport]:
        """Run until stopped, until no file arrived for `until_idle` seconds, or for `max_seconds`."""
        if self.source.topic is not None:
            return self._run_topic(until_idle, max_seconds, stop)
        query = self._query = self.start()
        started = self.last_activity = time.monotonic()
        self.log(f"streaming {self.landing.name}/ (query {query.id}, checkpoint {self.checkpoint})")
        beat = heartbeat_file(self.lakehouse.settings.home, self.landing.name)
        beat.parent.mkdir(parents=True, exist_ok=True)
        swept = time.monotonic()
        try:
            while query.isActive:
                beat.touch()
                time.sleep(0.5)
                now = time.monotonic()
                if now - swept >= self.sweep_seconds and not query.status.get("isTriggerActive"):
                    self.sweep()
                    swept = now = time.monotonic()
                if stop is not None and stop.is_set():
                    break
                if max_seconds is not None and now - started > max_seconds:
                    break
                if until_idle is not None and now - self.last_activity > until_idle \
                        and not query.status.get("isTriggerActive"):
                    break
            if query.exception() is not None:
                raise RuntimeError(f"the stream of {self.landing.name}/ failed: {query.exception()}")
        finally:
            query.stop()
            beat.unlink(missing_ok=True)
        return self.reports

    @property
    def busy(self) -> bool:
        """Whether a micro-batch (from its trigger on) or a sweep is running now."""
        query = self._query
        return self._batch.locked() or bool(query is not None and query.isActive
                                            and query.status.get("isTriggerActive"))

    def _query_id(self) -> str:
        if self.source.topic is not None:  # no Spark query: the ingest log is the stream's position
            key = f"{self.lakehouse.settings.namespace}|{self.source.name}|{self.source.topic}"
            return hashlib.sha1(key.encode()).hexdigest()[:16]
        metadata = Path(self.checkpoint.removeprefix("file:")) / "metadata"
        return json.loads(metadata.read_text().splitlines()[0])["id"]

    # -- a topic -------------------------------------------------------------------------------------

    def _run_topic(self, until_idle: float | None, max_seconds: float | None,
                   stop: threading.Event | None) -> list[BatchReport]:
        """Every trigger, the topic's committed records the ingest log does not hold, as one batch (bronze, silver,
        minute gold). First, a batch a killed stream left after bronze's commit is completed."""
        topic = self.source.topic
        started = self.last_activity = time.monotonic()
        self.log(f"streaming Kafka topic {topic} (stream {self._query_id()})")
        beat = heartbeat_file(self.lakehouse.settings.home, self.landing.name)
        beat.parent.mkdir(parents=True, exist_ok=True)
        try:
            beat.touch()
            self._complete_topic_batch()
            failures = 0
            while True:
                began = time.monotonic()
                beat.touch()
                try:
                    with self._batch:
                        self._topic_batch()
                    failures = 0
                except Exception as exc:  # a broker restarting, a lost connection: nothing or everything committed
                    failures += 1
                    if failures >= TOPIC_FAILURES:
                        raise
                    self.log(f"a batch of {topic} failed ({exc.__class__.__name__}: {str(exc)[:300]}); "
                             f"tried again at the next trigger ({failures} of {TOPIC_FAILURES} in a row)")
                while time.monotonic() - began < self.trigger_seconds and not (stop is not None and stop.is_set()):
                    beat.touch()
                    time.sleep(0.5)
                now = time.monotonic()
                if stop is not None and stop.is_set():
                    break
                if max_seconds is not None and now - started > max_seconds:
                    break
                if until_idle is not None and now - self.last_activity > until_idle:
                    break
        finally:
            beat.unlink(missing_ok=True)
        return self.reports

    def _stream_commits(self, table: TableHandle) -> list[Any]:
        """The snapshots of `table`'s main history this stream committed, newest first."""
        if not table.exists():
            return []
        iceberg = table.iceberg()
        if iceberg.current_snapshot() is None:
            return []
        mine = self._query_id()
        return [s for s in ancestors_of(iceberg.current_snapshot(), iceberg.metadata)
                if s.summary is not None and s.summary.additional_properties.get(QUERY_ID) == mine]

    def _topic_batch(self) -> BatchReport | None:
        bronze_commits = self._stream_commits(self.lakehouse.table(self.landing.bronze))
        batch_id = 1 + max((int(s.summary.additional_properties[BATCH_ID]) for s in bronze_commits), default=0)
        began = time.monotonic()
        topic = self.source.topic
        assert topic is not None

        def take(run_id: str, label: str, props: dict[str, str]) -> tuple[IngestReport, list[str]]:
            taken = ingest_topic(self.lakehouse, self.landing, topic, everything_new, run_id, label, log=self.log,
                                 properties=props, quiet=True)
            return taken, [r.uri for r in taken.ranges]

        report = self._publish(BatchReport(batch_id, 0), take)
        if not report.files:
            return None
        self._finish(report, began, [])
        return report

    def _complete_topic_batch(self) -> None:
        """Silver and minute gold of the stream's last bronze batch, when a kill left them undone."""
        bronze = self._stream_commits(self.lakehouse.table(self.landing.bronze))
        if not bronze:
            return
        batch_id = bronze[0].summary.additional_properties[BATCH_ID]
        tables = [self.source.silver] + ([MINUTE_ACTIVITY] if self.gold is not None else [])
        done = all(any(s.summary.additional_properties.get(BATCH_ID) == batch_id for s in self._stream_commits(
            self.lakehouse.table(spec))) for spec in (silver_spec(self.source),
                                                       *([gold_specs(self.gold)[MINUTE_ACTIVITY]] if self.gold else [])))
        if done:
            return
        run_id = f"stream-{self._query_id()[:8]}-{batch_id}"
        log = self.lakehouse.table(INGEST_LOG).read().where((F.col("run_id") == run_id) & (F.col("records") > 0))
        units = sorted({r.source_file for r in log.select("source_file").collect()})
        if not units:  # the batch took offsets that held no records (a gap retention left)
            return
        self.log(f"batch {batch_id} was taken into bronze by a stream that stopped before {', '.join(tables)}: "
                 f"completing it ({len(units)} offset ranges)")
        began = time.monotonic()
        report = self._publish(BatchReport(batch_id, 0), lambda *_: (IngestReport(files_listed=len(units)), units))
        self._finish(report, began, [])

    # -- one micro-batch ---------------------------------------------------------------------------

    def _on_batch(self, files_df: DataFrame, batch_id: int) -> None:
        rows = files_df.collect()
        if not rows:
            return
        # PySpark gives naive local times, and .timestamp() reads naive times as local: the epoch seconds are right.
        landed = sorted(r.modificationTime.timestamp() for r in rows)
        self._run_batch(sorted(r.path for r in rows), batch_id, landed)

    def sweep(self) -> BatchReport | None:
        """Process the files the file source will not hand over again: those a batch left while they were being
        written, and those of the recent day folders changed since they were taken (lines appended)."""
        settings = self.lakehouse.settings
        since = dt.datetime.now(UTC).date() - dt.timedelta(days=1)
        listed = landing_zone(settings).list(self.landing.name, since=since)
        taken = self._taken.taken(settings, self.landing.name, {f.day for f in listed if f.day is not None})
        # A file never taken is left to Spark's file source, unless it has been there for a while: then an earlier
        # run of the stream was handed it and left it while it was being written, and it will not come again.
        overdue = time.time() - 3 * self.sweep_seconds
        pending = {f.uri for f in listed if needs_a_look(f.stat, taken.get(f.uri))
                   and (f.uri in taken or f.changed < overdue)}
        paths = sorted((pending | self._waiting) - set(refusals(pending, source_root(settings, self.landing.name),
                                                                self.partitions)))
        if not paths:
            return None
        self._sweeps += 1
        chosen = set(paths)
        return self._run_batch(paths, f"sweep-{self._sweeps}", [f.modified for f in listed if f.uri in chosen])

    def _run_batch(self, paths: list[str], batch_id: int | str, landed: list[float]) -> BatchReport:
        with self._batch:
            return self._timed_batch(paths, batch_id, landed)

    def _timed_batch(self, paths: list[str], batch_id: int | str, landed: list[float]) -> BatchReport:
        self.last_activity = time.monotonic()
        began = time.monotonic()
        report = self.process(paths, batch_id, dt.datetime.fromtimestamp(max(landed), UTC) if landed else None)
        return self._finish(report, began, landed)

    def _finish(self, report: BatchReport, began: float, landed: list[float]) -> BatchReport:
        batch_id = report.batch_id
        report.landed_at = sorted(landed)
        report.seconds = round(time.monotonic() - began, 3)
        self.reports.append(report)
        self.last_activity = time.monotonic()
        try:  # running totals for `lakehouse metrics`; the batch is committed whatever happens to them
            add_to_status(stream_status_file(self.lakehouse.settings.home, self.landing.name),
                          {"batches": 1, "batch_seconds": report.seconds, "files": report.files,
                           "records_in": report.records_in},
                          last_batch_seconds=report.seconds, last_batch_at=time.time())
        except OSError as exc:
            self.log(f"could not update the stream's status file: {exc}")
        units = "files" if self.source.topic is None else "offset ranges"
        self.log(f"batch {batch_id}: {report.files} {units}, {report.records_in} records, {report.silver_added} "
                 f"events to silver, {report.minutes} minutes to gold in {report.seconds:.1f}s")
        if self.maintain is not None and report.files:
            maintained(self.maintain, [self.landing.bronze.name, self.landing.quarantine.name, self.source.silver,
                                       rejected_spec(self.source).name,
                                       *([MINUTE_ACTIVITY] if self.gold is not None else [])],
                       self._report, lambda line: self.log(f"batch {batch_id}: {line}"))
        return report

    def process(self, paths: list[str], batch_id: int | str, newest_modified: dt.datetime | None = None) -> BatchReport:
        lakehouse = self.lakehouse
        root = source_root(lakehouse.settings, self.landing.name)
        refused = refusals(paths, root, self.partitions)
        files = [p for p in paths if p not in refused]
        report = BatchReport(batch_id, len(files), refused=len(refused))
        if refused:
            for path, why in refused.items():
                self.log(f"{self.landing.name}: not ingested: {path}: {why}")
            self._report(AssetObservation(asset_key=self.landing.bronze.name, metadata={
                "refused_files": MetadataValue.json([{"file": p, "reason": w} for p, w in sorted(refused.items())]),
            }))
        if not files:
            return report

        def take(run_id: str, label: str, props: dict[str, str]) -> tuple[IngestReport, list[str]]:
            ingested = ingest(lakehouse, self.landing, files, run_id, label, log=self.log, properties=props,
                              sightings=self._sightings)
            self._waiting = (self._waiting - set(files)) | set(ingested.waiting)
            self._sightings.keep(self._waiting)
            return ingested, files

        return self._publish(report, take, newest_modified)

    def _publish(self, report: BatchReport, take: Callable[[str, str, dict[str, str]], tuple[IngestReport, list[str]]],
                 newest_modified: dt.datetime | None = None) -> BatchReport:
        """Bronze (what `take` commits, and the units it took: files, or a topic's offset ranges), then silver and
        minute gold from exactly the rows bronze's commits of the batch appended."""
        lakehouse, source, batch_id = self.lakehouse, self.source, report.batch_id
        query_id = self._query_id()
        props = {QUERY_ID: query_id, BATCH_ID: str(batch_id)}
        run_id = f"stream-{query_id[:8]}-{batch_id}"
        label = f"stream batch {batch_id}"

        bronze = lakehouse.table(self.landing.bronze)
        before = bronze.snapshot_id() if bronze.exists() else None  # this batch's commits come after it
        clock = time.monotonic()

        def lap(stage: str) -> None:
            nonlocal clock
            report.stage_seconds[stage] = round(time.monotonic() - clock, 3)
            clock = time.monotonic()

        ingested, files = take(run_id, label, props)
        report.files = len(files)
        if source.topic is not None:
            report.ranges = sorted(files)
        if not files:
            return report
        report.records_in, report.retries, report.newest_landed_at = (
            ingested.records_in, ingested.retries, ingested.newest_landed_at or newest_modified)
        report.kept = ingested.kept.added_records if ingested.kept else 0
        report.quarantined = ingested.quarantined.added_records if ingested.quarantined else 0
        # What the batch committed is reported to Dagster together at its end, bronze, silver, then gold: the
        # automation never sees bronze updated with silver not yet handled, and does not re-run what the stream did.
        pending: list[Callable[[], None]] = []
        lap("bronze")
        failpoint("stream:after-bronze")

        # The batch's bronze rows without the raw payload, cached: silver, gold and the reports all read them.
        delivered = self._delivered(bronze, query_id, batch_id, files, before).select(
            *source.fields, "source_file", "source_line", "landing_date", "ingested_at").cache()
        landed = self._landing_days(delivered, files)
        pending.append(lambda: self._report_ingest(ingested, landed, props))
        try:
            streamed = take_new_events(lakehouse, source, delivered, run_id, label, props, self.log)
            report.retries += streamed.retries
            days = self._days_brought_up_to_date(delivered, landed)
            pending.append(lambda: self._report_silver(streamed, days, props))
            lap("silver")
            failpoint("stream:after-silver")
            if not streamed.published:
                self.log(f"{source.silver}: the checks failed for batch {batch_id}; silver and gold wait for the "
                         "daily run")
                return report
            assert streamed.silver is not None and streamed.rejected is not None
            report.silver_added, report.rejected_added = streamed.silver.added_records, streamed.rejected.added_records
            report.snapshots[source.silver] = streamed.silver.snapshot_id or 0

            if self.gold is not None:
                ts = source.timestamp
                minutes = delivered.where(F.col(ts).isNotNull()).select(F.date_trunc("minute", ts).alias("minute"))
                commit, retries, report.minutes = merge_minutes(lakehouse, self.gold, silver_spec(source), minutes,
                                                                run_id, label, props, self.log)
                report.retries += retries
                report.snapshots[MINUTE_ACTIVITY] = commit.snapshot_id or 0
                pending.append(lambda: self._report_gold(commit, days, props))
                lap("gold")
        finally:
            delivered.unpersist()
            for send in pending:
                send()
        report.visible_at = dt.datetime.now(UTC)
        return report

    def _delivered(self, bronze: TableHandle, query_id: str, batch_id: int | str, files: list[str],
                   before: int | None) -> DataFrame:
        """The bronze rows of this batch: what its own commits appended (read incrementally), or, when
        another writer took these files first, those files' rows. Main's history is walked back to `before`,
        the head before the batch: a batch's cost does not grow with the table's history."""
        table = bronze.iceberg()
        published = takewhile(lambda s: s.snapshot_id != before,  # main's history: no unpublished staged write
                              ancestors_of(table.current_snapshot(), table.metadata))
        mine = [s for s in published if s.summary is not None
                and s.summary.additional_properties.get(QUERY_ID) == query_id
                and s.summary.additional_properties.get(BATCH_ID) == str(batch_id)
                and int(s.summary.additional_properties.get("added-records", 0) or 0) > 0]
        spark = self.lakehouse.spark
        if not mine:
            return bronze.read().where(of_files(files))
        parts = []
        for s in mine:
            reader = spark.read.format("iceberg")
            if s.parent_snapshot_id is None:
                reader = reader.option("versionAsOf", s.snapshot_id)
            else:
                reader = reader.option("start-snapshot-id", s.parent_snapshot_id).option("end-snapshot-id", s.snapshot_id)
            parts.append(reader.load(bronze.id))
        out = parts[0]
        for more in parts[1:]:
            out = out.unionByName(more)
        return out

    # -- telling Dagster ---------------------------------------------------------------------------

    def _report(self, event: Any) -> None:
        if self.instance is not None:
            self.instance.report_runless_asset_event(event)

    def _materialized(self, asset: str, days: list[str], commit: CommitResult, props: dict[str, str],
                      extra: dict[str, Any] | None = None) -> None:
        metadata = {**commit.metadata(), "stream_query_id": MetadataValue.text(props[QUERY_ID]),
                    "stream_batch_id": MetadataValue.text(props[BATCH_ID]), **(extra or {})}
        for day in days:
            if self.partitions.has_partition_key(day):
                self._report(AssetMaterialization(asset_key=asset, partition=day, metadata=metadata))

    def _landing_days(self, delivered: DataFrame, files: list[str]) -> set[dt.date]:
        """The landing days the batch took: its files' day folders, or, for a topic's ranges, its rows' days."""
        if self.source.topic is None:
            return {d for f in files if (d := landing_day(f))}
        return {r.landing_date for r in delivered.select("landing_date").distinct().collect()}

    def _days_brought_up_to_date(self, delivered: DataFrame, landed: set[dt.date]) -> list[str]:
        """The silver (and minute gold) days this batch brings up to date: those its events fall on, and every
        event day that reads a landing day it took (event day E reads landing days E..E+late_days), since the
        stream has now taken what those landing days hold. Reporting all of them keeps the automation from
        recomputing days the stream already made current."""
        if self.instance is None:
            return []
        ts = self.source.timestamp
        days = {r.d for r in delivered.where(F.col(ts).isNotNull())
                .select(F.date_format(ts, "yyyy-MM-dd").alias("d")).distinct().collect()}
        for day in landed:
            days |= {(day - dt.timedelta(days=k)).isoformat() for k in range(self.source.late_days + 1)}
        return sorted(days)

    def _report_ingest(self, ingested: IngestReport, landed: set[dt.date], props: dict[str, str]) -> None:
        if self.instance is None:
            return
        days = sorted(d.isoformat() for d in landed)
        for asset, commit in ((self.landing.bronze.name, ingested.kept), (self.landing.quarantine.name,
                                                                           ingested.quarantined)):
            if commit is not None:
                self._materialized(asset, days, commit, props, ingested.metadata(commit))

    def _report_silver(self, streamed: StreamedEvents, days: list[str], props: dict[str, str]) -> None:
        if self.instance is None:
            return
        for check in streamed.checks:
            self._report_check(check, self.source.silver)
        if streamed.published:
            assert streamed.silver is not None and streamed.rejected is not None
            self._materialized(self.source.silver, days, streamed.silver, props)
            self._materialized(rejected_spec(self.source).name, days, streamed.rejected, props)

    def _report_gold(self, commit: CommitResult, days: list[str], props: dict[str, str]) -> None:
        if self.instance is None or self.gold is None:
            return
        spec = gold_specs(self.gold)[MINUTE_ACTIVITY]
        state = freshness_state(self.lakehouse.table(spec).iceberg(), spec.name, self.gold.freshness.get(spec.name))
        self._materialized(spec.name, days, commit, props, state.metadata())
        self._report_check(freshness_check_result(state, spec.name), spec.name)

    def _report_check(self, check: AssetCheckResult, asset: str) -> None:
        self._report(AssetCheckEvaluation(
            asset_key=check.asset_key or AssetKey(asset), check_name=check.check_name or "", passed=check.passed,
            metadata=check.metadata, severity=check.severity, description=check.description))


def maintained(maintain: Callable[[list[str]], list[AssetObservation]], tables: list[str],
               report: Callable[[AssetObservation], None], log: Callable[[str], None]) -> None:
    """The maintenance `maintain` finds due on `tables` (a stream's, after a batch or a pass), each action reported
    and the whole logged."""
    began = time.monotonic()
    done = maintain(tables)
    for event in done:
        report(event)
    if done:
        log("maintained " + ", ".join(f"{e.asset_key.to_user_string()} ({e.metadata['maintenance/action'].value})"
                                      for e in done) + f" in {time.monotonic() - began:.1f} s")


def dagster_instance(log: Callable[[str], None] = print) -> DagsterInstance | None:
    """The instance of DAGSTER_HOME, or None (and a note) when there is none to report to."""
    import os

    if not os.environ.get("DAGSTER_HOME"):
        log("DAGSTER_HOME is not set: stream commits are not reported to Dagster")
        return None
    return DagsterInstance.get()
