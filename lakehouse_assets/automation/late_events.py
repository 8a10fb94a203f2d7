"""Events of any age reach silver: the event days a bronze commit holds, not a fixed window, are decided again.

Silver's event day E reads bronze's landing days E..E+late_days by its partition
mapping, so the automation re-runs those days when a landing day is ingested. A
landing day can hold far older events (a replayed archive, a device that was
offline for a week). Each bronze materialisation says which event days its
commit added rows to (`event_days`, read from the commit's manifests); this
sensor requests silver for each such day that the mapping does not reach and
that silver has not decided since. Gold and ML follow silver by their automation
conditions. Event days outside the partitions (before the first one, or in the
future) cannot be decided by a day of silver: they are reported as an
observation of silver, with the days and the landing run, and logged.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from dagster import (
    AssetKey,
    AssetObservation,
    AssetRecordsFilter,
    DailyPartitionsDefinition,
    DefaultSensorStatus,
    MetadataValue,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from ..bronze.ingest import EVENT_DAYS
from ..project import EventSource

BATCH = 200  # bronze materialisations read per tick; the cursor carries on from the last one


def late_events_sensor(source: EventSource, partitions: DailyPartitionsDefinition,
                       minimum_interval_seconds: int = 30) -> SensorDefinition:
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
        after = int(context.cursor) if context.cursor else None
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=bronze, after_storage_id=after), limit=BATCH, ascending=True).records
        if not records:
            return SkipReason(f"no new {source.bronze} materialisation")
        # A range run materialises each landing day with the same metadata: judge a run as a whole.
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
                run["reached"] |= {(landed - dt.timedelta(days=k)).isoformat() for k in range(source.late_days + 1)}
        due: dict[str, int] = {}
        outside: dict[str, list[str]] = {}
        for run_id, run in runs.items():
            for day in sorted(run["days"] - run["reached"]):
                if partitions.has_partition_key(day):
                    due[day] = max(due.get(day, 0), run["storage_id"])
                else:
                    outside.setdefault(run_id, []).append(day)
        requests = []
        for day, storage_id in sorted(due.items()):
            decided = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=silver, asset_partitions=[day], after_storage_id=storage_id), limit=1)
            if decided.records:  # the stream, or a run since, already took what that commit brought
                continue
            requests.append(RunRequest(run_key=f"{source.silver}:{day}:{storage_id}", partition_key=day,
                                       asset_selection=[silver], tags={"lakehouse/late_events": source.bronze}))
        events = []
        for run_id, undecidable in outside.items():
            context.log.warning(f"{source.bronze} run {run_id} holds events on {len(undecidable)} days outside the "
                                f"partitions of {source.silver} ({undecidable[0]}..{undecidable[-1]}): no day of "
                                "silver decides them")
            events.append(AssetObservation(asset_key=silver, metadata={
                "undecidable_event_days": MetadataValue.json(undecidable), "bronze_run": MetadataValue.text(run_id)}))
        if requests:
            context.log.info(f"{source.silver}: {len(requests)} event days beyond the late days: "
                             + ", ".join(r.partition_key or "" for r in requests))
        return SensorResult(run_requests=requests, asset_events=events, cursor=str(records[-1].storage_id))

    return _sensor
