"""Events of any age reach silver: every event day a bronze commit adds rows to is decided again, not only those
within a fixed window.

Silver's event day E reads bronze's landing days E..E+late_days by its partition
mapping, so the automation re-runs those days when a landing day is ingested. A
landing day can hold far older events (a replayed archive, a device that was
offline for a week). Each bronze materialisation says which event days its
commit added rows to (`event_days`, read from the commit's manifests); this
sensor requests silver for each such day that the mapping does not reach, and
keeps asking (a failed run is run again) until silver has decided it. Gold and
ML follow silver by their automation conditions. Event days outside the partitions (before the first one, or in the
future) cannot be decided by a day of silver: they are reported as an
observation of silver, with the days and the landing run, and logged.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict

from dagster import (
    AssetKey,
    AssetObservation,
    AssetRecordsFilter,
    DagsterRunStatus,
    DailyPartitionsDefinition,
    DefaultSensorStatus,
    MetadataValue,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from ..project import EventSource
from .ingest import EVENT_DAYS

BATCH = 200  # bronze materialisations read per tick; the cursor carries on from the last one
ATTEMPTS = 3  # runs of one late day that may fail before the sensor stops asking (and says so)
DAY_TAG, AFTER_TAG = "lakehouse/late_events_day", "lakehouse/late_events_after"
_FINISHED = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)


def late_events_sensor(source: EventSource, partitions: DailyPartitionsDefinition,
                       minimum_interval_seconds: int = 30) -> SensorDefinition:
    """The cursor keeps the last bronze materialisation read and the days still to decide: a day stays until
    silver has materialised it after the bronze commit that holds it, so a run that failed is asked for again
    (up to ATTEMPTS times, then reported)."""
    bronze, silver = AssetKey(source.bronze), AssetKey(source.silver)

    @sensor(
        name=f"{source.silver}_late_events_sensor",
        description=f"Requests {source.silver} for the event days a {source.bronze} commit holds beyond the "
                    f"{source.late_days} late days its partition mapping reaches",
        asset_selection=[silver],
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
    )
    def _sensor(context: SensorEvaluationContext):
        instance = context.instance
        state = json.loads(context.cursor) if context.cursor else {"after": None, "pending": {}}
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=bronze, after_storage_id=state["after"]), limit=BATCH, ascending=True).records
        pending: dict[str, int] = state["pending"]  # silver day -> the newest bronze commit (storage id) holding it
        events = []
        for run_id, (days, storage_id) in _beyond_the_late_days(records, source.late_days).items():
            outside = [d for d in days if not partitions.has_partition_key(d)]
            for day in sorted(set(days) - set(outside)):
                pending[day] = max(pending.get(day, 0), storage_id)
            if outside:
                context.log.warning(f"{source.bronze} run {run_id} holds events on {len(outside)} days outside the "
                                    f"partitions of {source.silver} ({outside[0]}..{outside[-1]}): no day of "
                                    "silver decides them")
                events.append(AssetObservation(asset_key=silver, metadata={
                    "undecidable_event_days": MetadataValue.json(outside), "bronze_run": MetadataValue.text(run_id)}))
        requests = []
        for day, storage_id in sorted(pending.items()):
            decided = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=silver, asset_partitions=[day], after_storage_id=storage_id), limit=1)
            if decided.records:  # silver's day ran after that commit (by the stream, the automation or this sensor)
                del pending[day]
                continue
            runs = instance.get_runs(RunsFilter(tags={DAY_TAG: day, AFTER_TAG: str(storage_id)}))
            if any(r.status not in _FINISHED for r in runs):
                continue  # asked for and not finished yet
            if len(runs) >= ATTEMPTS:
                context.log.error(f"{source.silver} {day}: {len(runs)} runs failed to decide the events a "
                                  f"{source.bronze} commit brought; see the failed runs, then re-run the day")
                del pending[day]
                continue
            requests.append(RunRequest(
                run_key=f"{source.silver}:{day}:{storage_id}:{len(runs)}", partition_key=day, asset_selection=[silver],
                tags={DAY_TAG: day, AFTER_TAG: str(storage_id)}))
        if requests:
            context.log.info(f"{source.silver}: {len(requests)} event days beyond the late days: "
                             + ", ".join(r.partition_key or "" for r in requests))
        after = records[-1].storage_id if records else state["after"]
        cursor = json.dumps({"after": after, "pending": pending})
        if not requests and not events and cursor == context.cursor:
            return SkipReason(f"no new {source.bronze} materialisation and no late day left to decide")
        return SensorResult(run_requests=requests, asset_events=events, cursor=cursor)

    return _sensor


def _beyond_the_late_days(records, late_days: int) -> dict[str, tuple[list[str], int]]:
    """Per bronze run: the event days its commit holds that the late days of its landing days do not reach,
    and its newest materialisation's storage id. A range run materialises each landing day with the same
    metadata, so a run is judged as a whole."""
    runs: dict[str, dict] = defaultdict(lambda: {"reached": set(), "days": set(), "storage_id": 0})
    for record in records:
        materialization = record.asset_materialization
        days = materialization.metadata.get(EVENT_DAYS) if materialization else None
        if days is None:
            continue
        run = runs[record.run_id]
        run["days"] |= set(days.value)  # type: ignore[arg-type]
        run["storage_id"] = max(run["storage_id"], record.storage_id)
        if record.partition_key:
            landed = dt.date.fromisoformat(record.partition_key)
            run["reached"] |= {(landed - dt.timedelta(days=k)).isoformat() for k in range(late_days + 1)}
    return {run_id: (sorted(run["days"] - run["reached"]), run["storage_id"]) for run_id, run in runs.items()}
