"""Bronze from a Kafka topic: the offsets a run plans (landing/kafka.py) taken like landing files, exactly once.

Each attempt reads the ingest log at its snapshot, plans the ranges no logged range covers, reads them and
writes bronze, the quarantine and the log's rows of the ranges through the same staging, judging and
records-in balance as landing files (bronze/ingest.py), published together. The log's commit is checked
against the snapshot the plan was made at: a run that planned while another committed plans again, so two
runs (a stream and a backfill, two backfills) never take one offset twice.
"""

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    DailyPartitionsDefinition,
    DefaultSensorStatus,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    multi_asset,
    sensor,
)

from ..automation.partitions import SINGLE_RUN
from ..errors import RetentionGapError
from ..landing.kafka import EXPIRED, Broker, Plan, Range, plan, read_ranges, taken_offsets, untaken
from ..landing.versions import NEW, Content, Decision, Stat
from ..runtime.commit import CommitResult, with_commit_retries
from ..runtime.resource import LakehouseResource
from ..runtime.results import reported
from ..runtime.staged import Window, current_state
from ..runtime.status import stream_is_running
from ..times import UTC
from .ingest import EVENT_DAYS, INGEST_LOG, IngestReport, LandingSource, Take, _write
from .sensors import LANDING_RUN_PRIORITY, TAKEN

# (broker, topic) -> each partition's (earliest offset held, start, end) for a plan.
Bounds = Callable[[Broker, str], dict[int, tuple[int, int, int]]]


@dataclass
class TopicReport(IngestReport):
    ranges: list[Range] = field(default_factory=list)  # taken by the attempt that published
    gaps: list[Range] = field(default_factory=list)  # offsets never taken that the topic no longer holds


def everything_new(broker: Broker, topic: str) -> dict[int, tuple[int, int, int]]:
    """From the topic's earliest offset to its last stable one: all that is committed and not taken."""
    return {p: (low, 0, high) for p, (low, high) in broker.watermarks(topic).items()}


def time_bounds(start: dt.datetime, end: dt.datetime) -> Bounds:
    """The offsets of the records whose time is from `start` to `end` (days, for a partition), as Kafka finds
    them by time (KIP-79): from the first at or after `start` to the first at or after `end`, or the last stable
    offset. Offsets are in time order only as producers stamp them; by these bounds each offset belongs to exactly
    one day all the same (a record stamped late is in the day it was appended among).

    When the first offset from `start` is the earliest the topic still holds, and records before it were deleted,
    the span may have begun before it: the plan starts at 0, so that offsets below the earliest the log does not
    hold are reported as gaps (the span would be short), not passed over."""

    def bounds(broker: Broker, topic: str) -> dict[int, tuple[int, int, int]]:
        marks = broker.watermarks(topic)
        firsts, nexts = broker.offsets_at(topic, start), broker.offsets_at(topic, end)
        out = {}
        for p, (low, high) in marks.items():
            first, after = firsts.get(p), nexts.get(p)
            stop = high if after is None else min(high, after)
            begin = stop if first is None else min(stop, first)
            out[p] = (low, 0 if begin <= low else begin, stop)
        return out

    return bounds


def ingest_topic(lakehouse: LakehouseResource, source: LandingSource, topic: str, bounds: Bounds, run_id: str,
                 label: str, log: Callable[[str], None] = print, properties: dict[str, str] | None = None,
                 record_gaps: bool = True, quiet: bool = False) -> TopicReport:
    """Take what `bounds` spans of `topic` that the ingest log does not hold; `properties` go into the summary of
    every snapshot published. Gaps (offsets never taken that the topic no longer holds) are logged as `expired`
    ranges with no records and reported, or, without `record_gaps`, refused (RetentionGapError), nothing taken.
    `quiet`: a plan with nothing to take is not logged (a stream polls every few seconds)."""
    report = TopicReport(files_listed=0)
    ingest_log, bronze, quarantine = (lakehouse.table(s).create()
                                      for s in (INGEST_LOG, source.bronze, source.quarantine))
    settings = lakehouse.settings

    def attempt() -> list[CommitResult] | None:
        base = ingest_log.snapshot_id()
        # What the log holds, read after `base` without Spark (the index is cached by the log's metadata, so a
        # stream polling a quiet topic reads nothing): it can only be newer than `base`, and the commit is
        # checked against `base`, so a range committed in between is never taken twice.
        logged = TAKEN.taken(settings, source.name)
        with Broker(settings) as broker:
            planned: Plan = plan(topic, bounds(broker, topic), taken_offsets(logged, topic))
        report.gaps = planned.gaps
        gone = [f"partition {g.partition} offsets {g.start}-{g.end - 1}" for g in planned.gaps]
        if gone and not record_gaps:
            raise RetentionGapError(
                f"{source.name} {label}: {topic} no longer holds {', '.join(gone)}, never taken: its retention "
                "deleted them, and what the lake holds of them is all there is; nothing was taken")
        for what in gone:
            log(f"{source.name}: {topic} {what} were deleted by the topic's retention before they were taken")
        report.files_listed = report.files_read = len(planned.ranges)
        report.ranges = planned.ranges
        if planned.ranges or planned.gaps or not quiet:
            log(f"{source.name} {label}: {len(planned.ranges)} offset ranges of {topic} to take, "
                f"{planned.offsets} offsets")
        if not planned.ranges and not planned.gaps:
            report.records_in = 0
            return None
        now = dt.datetime.now(UTC)
        lines, counts, newest = read_ranges(lakehouse.spark, settings, planned.ranges)
        take = Take(base, {}, now=now, lines=lines, line_counts=counts)
        for r in planned.ranges:
            take.decisions[r.uri] = Decision(NEW)
            # A range has no bytes to hash: its identity is its offsets.
            landed = newest.get(r.uri) or int(now.timestamp() * 1000)
            take.contents[r.uri] = Content(Stat(r.end - r.start, landed), "")
        for g in planned.gaps:
            take.decisions[g.uri] = Decision(EXPIRED)
            take.contents[g.uri] = Content(Stat(g.end - g.start, int(now.timestamp() * 1000)), "")
        report.records_in = sum(counts.values())
        try:
            return _write(lakehouse, source, take, (ingest_log, bronze, quarantine), run_id, label, report, log,
                          properties)
        finally:
            lines.unpersist()

    published, report.retries = with_commit_retries(attempt, source.bronze.name, log)
    if published is None:
        report.kept, report.quarantined = current_state(bronze), current_state(quarantine)
    else:
        report.kept, report.quarantined = published[0], published[1]
    return report


def topic_asset(source: LandingSource, partitions: DailyPartitionsDefinition,
                deps: list[AssetKey] | None = None) -> AssetsDefinition:
    """The bronze asset of a Kafka source: a partition's run takes the topic's offsets of that day (by record
    time) that the ingest log does not hold. A day the topic no longer holds all of, and the log does not either,
    is refused (RetentionGapError), nothing taken: the lake is then that day's history."""
    assert source.topic is not None
    topic, bronze, quarantine = source.topic, source.bronze.name, source.quarantine.name

    @multi_asset(
        name=bronze,
        specs=[
            AssetSpec(bronze, description=source.bronze.description, group_name="bronze", kinds={"spark", "iceberg"},
                      deps=deps or []),
            AssetSpec(quarantine, description=source.quarantine.description, group_name="bronze",
                      kinds={"spark", "iceberg"}),
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        can_subset=True,  # both tables are written either way (runtime/results.py)
    )
    def _asset(context: AssetExecutionContext, lakehouse: LakehouseResource):
        start, end = context.partition_time_window
        window = Window.of_days("landing_date", start, end, as_date=True)
        report = ingest_topic(lakehouse, source, topic, time_bounds(start, end), context.run_id, window.label,
                              log=context.log.info, record_gaps=False)
        metadata = {**report.metadata(report.kept), "offset_ranges": MetadataValue.json([r.uri for r in report.ranges])}
        if report.ranges and report.kept is not None and report.kept.snapshot_id is not None:
            days = lakehouse.table(source.bronze).days_added(report.kept.snapshot_id, report.kept.since)
            metadata[EVENT_DAYS] = MetadataValue.json([d.isoformat() for d in days])
        yield from reported(context, [MaterializeResult(asset_key=bronze, metadata=metadata),
                                      MaterializeResult(asset_key=quarantine, metadata=report.metadata(report.quarantined))])

    return _asset


def _or(offset: int | None, otherwise: int) -> int:
    return otherwise if offset is None else offset


def topic_sensor(source: LandingSource, partitions: DailyPartitionsDefinition,
                 minimum_interval_seconds: int = 30) -> SensorDefinition:
    """Requests runs of today's partition (and yesterday's, for offsets appended before midnight) when the topic
    holds committed offsets the ingest log does not. Older days are backfills."""
    assert source.topic is not None
    topic, keys = source.topic, [AssetKey(source.bronze.name), AssetKey(source.quarantine.name)]

    @sensor(
        name=f"{source.bronze.name}_topic_sensor",
        description=f"Requests {source.bronze.name} runs when Kafka topic {topic} has records not taken",
        asset_selection=keys,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
    )
    def _sensor(context: SensorEvaluationContext, lakehouse: LakehouseResource) -> Any:
        settings = lakehouse.settings
        if stream_is_running(settings.home, source.name):
            return SkipReason(f"lakehouse stream is taking the new records of {topic}")
        today = dt.datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        with Broker(settings) as broker:
            marks = broker.watermarks(topic)
            today_starts = broker.offsets_at(topic, today)
        taken = taken_offsets(TAKEN.taken(settings, source.name), topic)
        new = {p: untaken(low, high, taken.get(p, [])) for p, (low, high) in marks.items()}
        if not any(new.values()):
            return SkipReason(f"nothing new in {topic} ({len(marks)} partitions)")
        days = [today.date()]
        if any(s < _or(today_starts.get(p), marks[p][1]) for p, spans in new.items() for s, _ in spans):
            days.insert(0, today.date() - dt.timedelta(days=1))
        state = hashlib.sha1(json.dumps(sorted(marks.items())).encode()).hexdigest()[:16]
        return SensorResult(run_requests=[
            RunRequest(run_key=f"{source.name}:{day}:{state}", partition_key=day.isoformat(), asset_selection=keys,
                       tags={"lakehouse/source": source.name, "dagster/priority": str(LANDING_RUN_PRIORITY)})
            for day in days if partitions.has_partition_key(day.isoformat())])

    return _sensor


__all__ = ["Bounds", "TopicReport", "everything_new", "ingest_topic", "time_bounds", "topic_asset",
           "topic_sensor"]
