"""The lakehouse's figures in Prometheus's format: what an on-call engineer watches and alerts on.

`lakehouse metrics` prints them once (for node_exporter's textfile collector, or a look);
`lakehouse metrics serve --port 9464` serves `/metrics` for Prometheus to scrape, reading
them afresh on each scrape. Nothing here starts Spark or scans table data: every figure
comes from Iceberg metadata (snapshot summaries and manifests, through pyiceberg), the
ingest log (one row per landing file), a listing of the landing zone, the status files a
stream and a capture keep (runtime/status.py), the replication slot itself, and Dagster's
event log. A table's metadata figures are kept until its metadata file changes.

Metrics (labels in braces; `table` is a table name, `source` a landing folder such as
`events` or `cdc/customers`, `capture` a declared CDC source):

- per table: `lakehouse_table_rows`, `_data_files`, `_data_bytes`, `_small_files`,
  `_compactable_small_files`, `_delete_files`, `_deleted_rows_ratio`, `_snapshots`,
  `_stale_branches`, `_compaction_needed` (1 when compaction is due by its policy),
  `_last_commit_timestamp_seconds`, `_newest_event_timestamp_seconds`, `_event_lag_seconds`,
  `_landing_to_visible_seconds`, `_freshness_fail_after_seconds` and `_freshness_warn_after_seconds`
  (the declared freshness of BI tables), `_commit_retries_total` and `_commit_replays_total`
  (from Dagster's event log: writes run again after losing a race, and replays on a moved main);
- per landing source: `lakehouse_source_records_in_total`, `_records_kept_total`,
  `_records_quarantined_total`, `_landing_files_waiting` (landed, not yet ingested: the
  backlog), `_landing_files_refused` (never ingested: outside a day folder, or out of range); for a source on a
  Kafka topic, `lakehouse_source_kafka_offsets_behind{topic,partition}` (committed offsets not taken: the lag),
  `_kafka_lag_seconds` (the age of the oldest record not taken) and `_kafka_offsets_expired_total` (offsets the
  topic's retention deleted before they were taken: gaps);
- per capture: `lakehouse_capture_records_total`, `_retained_wal_bytes` (read from PostgreSQL when
  `LAKEHOUSE_CDC_<SOURCE>_DSN` is set, else what the last capture read), `_max_retained_wal_bytes`
  (declared), `_retained_wal_read_timestamp_seconds`;
- per stream: `lakehouse_stream_up`, `lakehouse_stream_batch_seconds` (a summary: `_count` batches,
  `_sum` seconds), `_last_batch_seconds`, `_files_total`, `_records_total`, `_backlog_files`;
- `lakehouse_metrics_errors{section}` (what could not be read in this collection, each also
  logged) and `lakehouse_metrics_collect_seconds`.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import CollectorRegistry

from ..landing.taken import newest_versions
from ..landing.versions import CHANGED, ahead_of_clock, needs_a_look
from ..project import EventSource, Project
from ..project.model import INGEST_LOG
from ..runtime.status import capture_status_file, read_status, stream_is_running, stream_status_file
from ..settings import Settings
from ..times import UTC, from_ms

PREFIX = "lakehouse"
_SEEN_SNAPSHOTS = 500  # per table: materialisations of one commit (one per partition) count once


def _seconds(value: dt.datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


@dataclass(frozen=True)
class _TableFigures:
    """What a table's metadata file says; valid as long as it is the table's metadata file."""

    rows: int
    health: Any  # maintenance.health.TableHealth
    committed_at: dt.datetime | None
    newest_event: dt.datetime | None
    newest_landed: dt.datetime | None


class _Families:
    """Metric families of one collection, declared on first use, each with its help text."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}

    def _family(self, kind: type, name: str, doc: str, labels: tuple[str, ...], unit: str = "") -> Any:
        key = f"{PREFIX}_{name}"
        if key not in self.families:
            self.families[key] = kind(key, doc, labels=list(labels), unit=unit)
        return self.families[key]

    def gauge(self, name: str, doc: str, labels: dict[str, str], value: float | None) -> None:
        if value is not None:
            self._family(GaugeMetricFamily, name, doc, tuple(labels)).add_metric(list(labels.values()), value)

    def counter(self, name: str, doc: str, labels: dict[str, str], value: float | None) -> None:
        if value is not None:
            self._family(CounterMetricFamily, name, doc, tuple(labels)).add_metric(list(labels.values()), value)

    def summary(self, name: str, doc: str, labels: dict[str, str], count: float, total: float) -> None:
        family = self._family(SummaryMetricFamily, name, doc, tuple(labels))
        family.add_metric(list(labels.values()), count_value=count, sum_value=total)


class LakehouseCollector:
    """A prometheus_client collector: each `collect()` reads the lakehouse as it stands."""

    def __init__(self, settings: Settings, project: Project, instance: Any = None,
                 log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)):
        self.settings, self.project, self.instance, self.log = settings, project, instance, log
        self._lock = threading.Lock()
        self._tables: dict[str, tuple[str, _TableFigures]] = {}  # name -> (metadata location, figures)
        self._ingest_log: tuple[str, Any] | None = None  # (metadata location, its rows as Arrow)

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # one collection at a time: scrapes that overlap wait for each other
            started = time.perf_counter()
            out, errors = _Families(), {}
            for section, read in (("tables", self._collect_tables), ("sources", self._collect_sources),
                                  ("captures", self._collect_captures), ("streams", self._collect_streams),
                                  ("commits", self._collect_commits)):
                errors[section] = read(out)
            for section, count in errors.items():
                out.gauge("metrics_errors", "Figures that could not be read in this collection (see the log)",
                          {"section": section}, count)
            out.gauge("metrics_collect_seconds", "Time this collection took", {}, time.perf_counter() - started)
            yield from out.families.values()

    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry()
        registry.register(self)  # type: ignore[arg-type]  # a Collector by its collect() method
        return registry

    def _failed(self, what: str, exc: BaseException) -> int:
        self.log(f"metrics: {what}: {type(exc).__name__}: {exc}")
        return 1

    # -- tables ------------------------------------------------------------------------------------

    @property
    def catalog(self) -> Any:
        from ..runtime.catalog import catalog_for

        return catalog_for(self.settings)

    def _figures(self, name: str) -> _TableFigures:
        from ..runtime.freshness import head_watermarks
        from .health import table_health

        table = self.catalog.load_table((self.settings.namespace, name))
        cached = self._tables.get(name)
        if cached is not None and cached[0] == table.metadata_location:
            return cached[1]
        snapshot = table.current_snapshot()
        summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
        total = {k: int(summary.get(f"total-{k}", 0) or 0) for k in ("records", "position-deletes", "equality-deletes")}
        event, landed = head_watermarks(table)
        figures = _TableFigures(
            rows=total["records"] - total["position-deletes"] - total["equality-deletes"],
            health=table_health(table, name, self.project.maintenance.policy(name)),
            committed_at=from_ms(snapshot.timestamp_ms) if snapshot else None,
            newest_event=event.astimezone(UTC) if event else None,
            newest_landed=landed.astimezone(UTC) if landed else None,
        )
        self._tables[name] = (table.metadata_location, figures)
        return figures

    def _collect_tables(self, out: _Families) -> int:
        catalog = self.catalog
        if not catalog.namespace_exists(self.settings.namespace):
            return 0
        names = sorted(identifier[-1] for identifier in catalog.list_tables(self.settings.namespace))
        freshness, now, errors = self.project.gold.bi_freshness, dt.datetime.now(UTC), 0
        for name in names:
            try:
                f = self._figures(name)
            except Exception as exc:  # noqa: BLE001 - one unreadable table leaves the others measured
                errors += self._failed(f"table {name}", exc)
                continue
            h, t = f.health, {"table": name}
            out.gauge("table_rows", "Rows the table's current snapshot holds (from its summary, deletes applied)", t, f.rows)
            out.gauge("table_data_files", "Data files of the current snapshot", t, h.data_files)
            out.gauge("table_data_bytes", "Bytes of the current snapshot's data files", t, h.data_bytes)
            out.gauge("table_small_files", "Data files smaller than the table's small-file size", t, h.small_files)
            out.gauge("table_compactable_small_files", "Small files sharing a partition with another small file", t,
                      h.compactable_small_files)
            out.gauge("table_delete_files", "Delete files of the current snapshot (merge-on-read)", t, h.delete_files)
            out.gauge("table_deleted_rows_ratio", "Rows removed by delete files / rows in data files", t, h.deleted_ratio)
            out.gauge("table_snapshots", "Snapshots the table's metadata keeps", t, h.snapshots)
            out.gauge("table_stale_branches", "Branches of writes that died, older than the branch retention", t,
                      len(h.stale_branches))
            out.gauge("table_compaction_needed", "1 when the table's small files or deletes exceed its policy", t,
                      float(h.needs_compaction))
            out.gauge("table_last_commit_timestamp_seconds", "When the current snapshot was committed", t,
                      _seconds(f.committed_at))
            out.gauge("table_newest_event_timestamp_seconds", "The newest event time the table holds", t,
                      _seconds(f.newest_event))
            if f.newest_event is not None:
                out.gauge("table_event_lag_seconds", "Now minus the newest event time the table holds", t,
                          (now - f.newest_event).total_seconds())
            if f.newest_landed is not None and f.committed_at is not None:
                out.gauge("table_landing_to_visible_seconds", "From the newest landed file to the commit showing it", t,
                          max((f.committed_at - f.newest_landed).total_seconds(), 0.0))
            declared = freshness.get(name)
            if declared is not None:
                out.gauge("table_freshness_fail_after_seconds", "Declared: the event lag beyond which it is stale", t,
                          declared.fail.total_seconds())
                if declared.warn is not None:
                    out.gauge("table_freshness_warn_after_seconds", "Declared: the event lag that warns", t,
                              declared.warn.total_seconds())
        return errors

    # -- landing sources ---------------------------------------------------------------------------

    def _ingest_rows(self) -> Any:
        """The ingest log's rows (source, source_file, records, kept, quarantined), Arrow; None before any ingest."""
        identifier = (self.settings.namespace, INGEST_LOG)
        if not self.catalog.table_exists(identifier):
            return None
        table = self.catalog.load_table(identifier)
        if self._ingest_log is None or self._ingest_log[0] != table.metadata_location:
            names = {f.name for f in table.schema().fields}
            rows = table.scan(selected_fields=tuple(c for c in (
                "source", "source_file", "records", "kept", "quarantined", "size", "modified", "etag", "sha256",
                "version", "change") if c in names)).to_arrow()
            self._ingest_log = (table.metadata_location, rows)
        return self._ingest_log[1]

    def _collect_sources(self, out: _Families) -> int:
        from ..landing.zones import landing_zone, refused_files, source_root

        errors = 0
        try:
            rows = self._ingest_rows()
        except Exception as exc:  # noqa: BLE001
            return self._failed("the ingest log", exc)
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        by_source: dict[str, list[dict]] = defaultdict(list)
        changed: dict[str, int] = defaultdict(int)
        for row in rows.to_pylist() if rows is not None else []:
            source, total = row["source"], totals[row["source"]]
            total[0], total[1], total[2] = (total[0] + row["records"], total[1] + row["kept"],
                                            total[2] + row["quarantined"])
            by_source[source].append(row)
            changed[source] += row.get("change") == CHANGED
        taken = {source: newest_versions(logged) for source, logged in by_source.items()}
        zone = landing_zone(self.settings)
        first = dt.date.fromisoformat(str(self.settings.start_date or self.project.start_date))
        today = dt.datetime.now(UTC).date()
        streamed = {e.landing for e in self.project.events.values()}
        for declared in self.project.landing_sources:
            name = declared.landing
            s = {"source": name}
            records, kept, quarantined = totals[name]
            out.counter("source_records_in", "Records in the landing files ingested", s, records)
            out.counter("source_records_kept", "Records kept in bronze", s, kept)
            out.counter("source_records_quarantined", "Records quarantined, each with its reason", s, quarantined)
            if isinstance(declared, EventSource) and declared.topic is not None:
                errors += self._collect_topic(out, name, declared.topic, by_source[name])
                continue
            out.counter("source_files_changed_after_taken", "Landed files rewritten, truncated or replaced after they "
                        "were taken: their new content is quarantined whole", s, changed[name])
            try:
                listed = zone.list(name)
                refused = refused_files([f.uri for f in listed], source_root(self.settings, name), first, today)
                newest = taken.get(name, {})
                waiting = sum(f.uri not in refused and needs_a_look(f.stat, newest.get(f.uri)) for f in listed)
                now = dt.datetime.now(UTC)
                ahead = sum(ahead_of_clock(f.stat, now) for f in listed)
            except Exception as exc:  # noqa: BLE001
                errors += self._failed(f"the landing zone of {name}", exc)
                continue
            out.gauge("source_landing_files_waiting", "Files landed, or changed, and not ingested yet as they are now "
                      "(the backlog)", s, waiting)
            out.gauge("source_landing_files_ahead_of_clock", "Files whose modification time is ahead of this "
                      "machine's clock (a writer's clock runs ahead): they settle by being seen unchanged", s, ahead)
            out.gauge("source_landing_files_refused", "Files that will not be ingested: outside a day folder or the "
                      "partition range (the landing sensor reports each)", s, len(refused))
            if name in streamed and (self.settings.home / "streams" / name).exists():
                out.gauge("stream_backlog_files", "Files landed and not taken by the stream yet", s, waiting)
        return errors

    def _collect_topic(self, out: _Families, source: str, topic: str, logged: list[dict]) -> int:
        """Per partition of a source's topic: the committed offsets no logged range covers (the consumer's lag),
        and the offsets the topic deleted before they were taken (logged as expired ranges: a gap)."""
        from ..landing.kafka import EXPIRED, Broker, Range, taken_offsets, untaken

        expired: dict[int, int] = defaultdict(int)
        for row in logged:
            gap = Range.of(row["source_file"]) if row.get("change") == EXPIRED else None
            if gap is not None and gap.topic == topic:
                expired[gap.partition] += gap.end - gap.start
        taken = taken_offsets([r["source_file"] for r in logged], topic)
        try:
            with Broker(self.settings) as broker:
                marks = broker.watermarks(topic)
                spans = {p: untaken(low, high, taken.get(p, [])) for p, (low, high) in marks.items()}
                # The lag in time: how old the oldest committed record bronze has not taken is.
                oldest = {p: broker.time_at(topic, p, s[0][0]) for p, s in spans.items() if s}
        except Exception as exc:  # noqa: BLE001
            return self._failed(f"the offsets of Kafka topic {topic}", exc)
        now = dt.datetime.now(UTC)
        for partition in sorted(marks):
            labels = {"source": source, "topic": topic, "partition": str(partition)}
            behind = sum(end - start for start, end in spans[partition])
            out.gauge("source_kafka_offsets_behind", "Committed offsets of the topic's partition that bronze has not "
                      "taken (the consumer's lag)", labels, behind)
            at = oldest.get(partition)
            out.gauge("source_kafka_lag_seconds", "How long ago the oldest record of the partition bronze has not "
                      "taken was stamped (0: nothing behind)", labels,
                      0.0 if not behind else None if at is None else max((now - at).total_seconds(), 0.0))
            out.counter("source_kafka_offsets_expired", "Offsets of the topic's partition its retention deleted "
                        "before bronze took them (gaps, each logged as an expired range)", labels,
                        expired.get(partition, 0))
        return 0

    # -- captures ----------------------------------------------------------------------------------

    def _collect_captures(self, out: _Families) -> int:
        errors = 0
        servers = {t.source: t.server for t in self.project.cdc.values()}
        for source, server in sorted(servers.items()):
            status = read_status(capture_status_file(self.settings.home, server))
            declared = self.project.captures.get(source)
            if not status and declared is None:
                continue  # captured by something else (a Kafka Connect cluster, ...): nothing of ours to read
            c = {"capture": source}
            retained, read_at = status.get("retained_wal_bytes"), status.get("retained_wal_read_at")
            if os.environ.get(f"LAKEHOUSE_CDC_{source.upper()}_DSN"):
                try:
                    from ..live.capture import CaptureSource

                    retained, read_at = CaptureSource.of(self.project, source).retained_wal_bytes(), time.time()
                except Exception as exc:  # noqa: BLE001 - the last capture's reading stands
                    errors += self._failed(f"the replication slot of {source}", exc)
            out.counter("capture_records", "Change records captured into the landing zone", c, status.get("records", 0))
            out.gauge("capture_retained_wal_bytes", "WAL the replication slot keeps on the source database", c, retained)
            out.gauge("capture_retained_wal_read_timestamp_seconds", "When the retained WAL was read", c, read_at)
            if declared is not None:
                out.gauge("capture_max_retained_wal_bytes", "Declared: the WAL the slot may retain", c,
                          declared.max_retained_wal_bytes)
        return errors

    # -- streams -----------------------------------------------------------------------------------

    def _collect_streams(self, out: _Families) -> int:
        home = self.settings.home
        for source in self.project.events.values():
            status = read_status(stream_status_file(home, source.landing))
            if not status and not (home / "streams" / source.landing).exists():
                continue  # never streamed
            s = {"source": source.landing}
            out.gauge("stream_up", "1 while `lakehouse stream` runs for the source (its heartbeat is fresh)", s,
                      float(stream_is_running(home, source.landing)))
            out.summary("stream_batch_seconds", "Micro-batches and the seconds they took, landing to gold", s,
                        status.get("batches", 0), status.get("batch_seconds", 0.0))
            out.gauge("stream_last_batch_seconds", "The last micro-batch's time", s, status.get("last_batch_seconds"))
            out.counter("stream_files", "Landing files the stream took", s, status.get("files", 0))
            out.counter("stream_records", "Records in the files the stream took", s, status.get("records_in", 0))
        return 0

    # -- commits (Dagster's event log) -------------------------------------------------------------

    def _collect_commits(self, out: _Families) -> int:
        if self.instance is None:
            return 0
        try:
            counts = CommitCounts(self.settings.home / "metrics" / "commits.json").update(
                self.instance, self.project.table_names)
        except Exception as exc:  # noqa: BLE001
            return self._failed("Dagster's event log", exc)
        for name, (retries, replays) in sorted(counts.items()):
            t = {"table": name}
            out.counter("table_commit_retries", "Writes run again from scratch after losing a commit race", t, retries)
            out.counter("table_commit_replays", "Staged writes replayed on a main another writer moved", t, replays)
        return 0


class CommitCounts:
    """Commit retries and replays per table, summed from materialisation metadata (`commit_retries`,
    `commit_replays`) and kept in a file with each table's cursor, so a collection reads only new events.
    A commit materialised for several partitions counts once (by its snapshot id)."""

    def __init__(self, path: Path):
        self.path = path

    def update(self, instance: Any, tables: list[str]) -> dict[str, tuple[int, int]]:
        from dagster import AssetKey, AssetRecordsFilter

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # `metrics` and `metrics serve` may run at once
            try:
                state = json.loads(self.path.read_text())
            except (OSError, ValueError):
                state = {}
            for name in tables:
                entry = state.setdefault(name, {"after": None, "retries": 0, "replays": 0, "seen": []})
                while True:
                    result = instance.fetch_materializations(
                        AssetRecordsFilter(asset_key=AssetKey(name), after_storage_id=entry["after"]),
                        limit=500, ascending=True)
                    for record in result.records:
                        entry["after"] = record.storage_id
                        metadata = record.asset_materialization.metadata if record.asset_materialization else {}
                        snapshot = getattr(metadata.get("snapshot_id"), "value", None)
                        if snapshot is not None and snapshot in entry["seen"]:
                            continue
                        entry["seen"] = [*entry["seen"], snapshot][-_SEEN_SNAPSHOTS:]
                        entry["retries"] += int(getattr(metadata.get("commit_retries"), "value", 0) or 0)
                        entry["replays"] += int(getattr(metadata.get("commit_replays"), "value", 0) or 0)
                    if not result.has_more:
                        break
            partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            partial.write_text(json.dumps(state))
            os.replace(partial, self.path)
        return {name: (e["retries"], e["replays"]) for name, e in state.items() if name in tables}


def collector(settings: Settings, project: Project, log: Callable[[str], None] | None = None) -> LakehouseCollector:
    """The collector of this lakehouse, with Dagster's instance when DAGSTER_HOME names one."""
    log = log or (lambda m: print(m, file=sys.stderr))
    instance = None
    if os.environ.get("DAGSTER_HOME"):
        from dagster import DagsterInstance

        instance = DagsterInstance.get()
    else:
        log("metrics: DAGSTER_HOME is not set: commit retries and replays are left out")
    return LakehouseCollector(settings, project, instance, log)
