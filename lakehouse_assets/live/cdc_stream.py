"""`lakehouse stream --source <cdc source>`: a CDC source's changes from landing file to silver in one
long-lived process.

A run of the daily assets pays a process, a JVM and its warm-up before its data (the `cdc_freshness`
benchmark). The stream keeps one Spark session and, every `poll_seconds`, takes each table's new landing files
of yesterday's and today's folders as a run of the assets would, with the same code: bronze (`ingest`: the
parsing, quarantine, records-in balance and ingest log) and, when bronze committed, silver and history (the
apply of `silver_<table>`, which reads of bronze what was appended since the day's last apply). Tables that
reference others are applied after them in the same pass.

Exactly once: bronze takes a file once (the ingest log) and re-applying changes to silver changes nothing, so a
crash anywhere is repaired by the next pass, or by the daily assets' next run.

A pass starts only when the listing and the ingest log's index (no Spark) show a file the log does not hold as
it is now; a file that cannot be placed is logged once and left, as the landing sensor leaves it.

While it runs, its heartbeat per table keeps the tables' landing sensors quiet; each commit is reported to the
Dagster instance as a run-less materialisation of its asset and landing day, so the automation, freshness and
the UI see it like a run's.

Every pass leaves small files, and delete files in silver and history (merge-on-read), which every later pass
reads, and snapshots, which every commit writes again into the table's metadata: with `maintain` (what
`lakehouse stream` gives it: operations/schedules.py `maintenance_when_due`), the tables a pass committed to are
compacted, or thinned, after it once they cross their declared maintenance thresholds, as the health sensor
would have the daemon do, so a pass's cost stays bounded however long the stream runs.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    DagsterInstance,
    MetadataValue,
)

from ..automation.partitions import daily_partitions
from ..bronze.assets import cdc_landing_source
from ..bronze.ingest import LandingSource, ingest
from ..errors import ConfigurationError
from ..landing.reader import landing_date_value
from ..landing.taken import TakenIndex
from ..landing.versions import needs_a_look
from ..landing.zones import landing_zone, refusals, source_root
from ..project import CdcTable, Project
from ..runtime.commit import Window, with_commit_retries
from ..runtime.resource import LakehouseResource
from ..runtime.status import heartbeat_file
from ..silver.cdc import apply_window
from ..times import UTC
from .stream import maintained


@dataclass
class Pass:
    """One pass of the stream over a table: what bronze took and what silver applied."""

    table: str
    files: int
    records_in: int
    changes_applied: int
    seconds: float


class CdcStream:
    """The tables of one `cdc:` entry, each landing -> bronze -> silver and history, every `poll_seconds`."""

    def __init__(self, project: Project, lakehouse: LakehouseResource, source: str, poll_seconds: float = 1.0,
                 instance: DagsterInstance | None = None, log: Callable[[str], None] = print,
                 maintain: Callable[[list[str]], list[AssetObservation]] | None = None):
        tables = [t for t in project.cdc.values() if t.source == source]
        if not tables:
            raise ConfigurationError(f"no CDC source {source!r} in {project.file}; declared: "
                                     f"{', '.join(sorted({t.source for t in project.cdc.values()})) or 'none'}")
        if any(t.on_kafka for t in tables):
            raise ConfigurationError(f"CDC source {source!r} is declared on Kafka (kafka: true): its topics are "
                                     "taken by `lakehouse kafka` and the topic sensors, not from landing files")
        self.project, self.lakehouse, self.source = project, lakehouse, source
        self.tables = _in_reference_order(tables)
        self.landings = {t.name: cdc_landing_source(t, project.landing) for t in tables}
        self.partitions = daily_partitions(lakehouse.settings.start_date or project.start_date)
        self._taken = TakenIndex()  # what the ingest log holds, reread only when the log moved
        self._refused: set[str] = set()  # files that cannot be placed, logged once
        self.poll_seconds, self.instance, self.log, self.maintain = poll_seconds, instance, log, maintain
        self.passes: list[Pass] = []
        self.last_activity = time.monotonic()

    def run(self, until_idle: float | None = None, max_seconds: float | None = None,
            stop: threading.Event | None = None) -> list[Pass]:
        """Run until stopped, until no change landed for `until_idle` seconds, or for `max_seconds`."""
        home = self.lakehouse.settings.home
        beats = [heartbeat_file(home, t.landing) for t in self.tables]
        for beat in beats:
            beat.parent.mkdir(parents=True, exist_ok=True)
            beat.touch()
        started = self.last_activity = time.monotonic()
        self.log(f"streaming CDC source {self.source}: {', '.join(t.landing + '/' for t in self.tables)}")
        keep_beating = threading.Event()
        beating = threading.Thread(target=_beat, args=(beats, keep_beating), daemon=True)
        beating.start()
        try:
            while not (stop is not None and stop.is_set()):
                began = time.monotonic()
                for table in self.tables:
                    self._pass(table)
                now = time.monotonic()
                if max_seconds is not None and now - started > max_seconds:
                    break
                if until_idle is not None and now - self.last_activity > until_idle:
                    break
                wait = self.poll_seconds - (now - began)
                if wait > 0:
                    stop.wait(wait) if stop is not None else time.sleep(wait)
        finally:
            keep_beating.set()
            beating.join()
            for beat in beats:
                beat.unlink(missing_ok=True)
        return self.passes

    def _new_files(self, landing: LandingSource, since: dt.date) -> list[str]:
        """The files of the day folders from `since` on that the ingest log does not hold as they are now, as the
        landing sensor finds them (a listing and the log's index: no Spark); those that cannot be placed are
        logged once and left."""
        settings = self.lakehouse.settings
        listed = landing_zone(settings).list(landing.name, since=since)
        taken = self._taken.taken(settings, landing.name, {f.day for f in listed if f.day is not None})
        new = [f.uri for f in listed if needs_a_look(f.stat, taken.get(f.uri))]
        refused = refusals(new, source_root(settings, landing.name), self.partitions)
        for uri in sorted(set(refused) - self._refused):
            self.log(f"{landing.name}: not ingested: {uri}: {refused[uri]}")
        self._refused |= set(refused)
        return sorted(set(new) - set(refused))

    def _pass(self, table: CdcTable) -> None:
        began = time.monotonic()
        landing = self.landings[table.name]
        today = dt.datetime.now(UTC).date()
        files = self._new_files(landing, today - dt.timedelta(days=1))
        if not files:
            return
        run_id = f"stream-{uuid.uuid4().hex[:12]}"
        report = ingest(self.lakehouse, landing, files, run_id, f"{today - dt.timedelta(days=1)}..{today}",
                        log=lambda _: None)
        if not report.files_read or report.kept is None or report.kept.snapshot_id is None:
            return
        self.last_activity = time.monotonic()
        days = sorted({d for f in report.taken if (d := landing_date_value(f)) is not None})
        # Told to Dagster together once silver is applied too: the automation never sees bronze's commit without
        # silver's, and requests no run of silver for what the stream applies.
        events: list = self._materialized(landing.bronze.name, days, report.metadata(report.kept))
        if report.quarantined is not None:
            events += self._materialized(landing.quarantine.name, days, report.metadata(report.quarantined))
        applied = 0
        for day in days:
            window = Window.of_days("landing_date", dt.datetime.combine(day, dt.time(), UTC),
                                    dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), UTC), as_date=True)
            (commits, checks, changes, read), _ = with_commit_retries(
                partial(apply_window, self.lakehouse, table, landing.bronze, run_id, window), table.silver, self.log)
            events += [AssetCheckEvaluation(
                asset_key=check.asset_key or AssetKey(table.silver), check_name=check.check_name or "",
                passed=check.passed, metadata=check.metadata, severity=check.severity, description=check.description)
                for check in checks]
            if not commits:
                self.log(f"{table.silver} {day}: a check failed; nothing published (the daily asset reports it)")
                continue
            applied += changes
            counts = {"changes_read": MetadataValue.int(changes), "bronze_read": MetadataValue.text(read)}
            for name, commit in zip((table.history, table.silver), commits):
                events += self._materialized(name, [day], {**commit.metadata(), **counts})
        if self.instance is not None:
            for event in events:
                self.instance.report_runless_asset_event(event)
        seconds = time.monotonic() - began
        self.passes.append(Pass(table.name, report.files_read, report.records_in, applied, seconds))
        self.log(f"{table.landing}: {report.files_read} files, {report.records_in} records, {applied} changes "
                 f"applied in {seconds:.1f} s")
        if self.maintain is not None:
            maintained(self.maintain, [landing.bronze.name, landing.quarantine.name, table.history, table.silver],
                       self.instance.report_runless_asset_event if self.instance is not None else lambda _: None,
                       lambda line: self.log(f"{table.landing}: {line}"))

    @staticmethod
    def _materialized(asset: str, days: list[dt.date], metadata: dict) -> list:
        return [AssetMaterialization(asset_key=asset, partition=day.isoformat(), metadata=metadata) for day in days]


def _in_reference_order(tables: list[CdcTable]) -> list[CdcTable]:
    """Referenced tables before the tables that reference them (a cycle keeps the declaration's order)."""
    names = {t.name for t in tables}
    ordered: list[CdcTable] = []
    pending = list(tables)
    while pending:
        ready = [t for t in pending if not ({ref for ref, _ in t.references.values()} & names
                                            - {o.name for o in ordered} - {t.name})]
        ordered += ready or pending[:1]
        pending = [t for t in pending if t not in ordered]
    return ordered


def _beat(beats: list, stopped: threading.Event) -> None:
    while not stopped.wait(0.5):
        for beat in beats:
            beat.touch()
