"""One sensor per landing source: new files in the zone -> a bronze run for each landing day touched.

The cursor keeps a modification-time watermark and the files seen near it, so a
file is requested once even when several land in the same second; files the
ingest log already lists (read with pyiceberg, no Spark) are not requested at all,
so a fresh sensor does not ask again for what was ingested before it ran.
Requests are safe to repeat anyway: bronze takes each file exactly once, and a
run key made of the new files' names stops a double firing from launching twice.
While `lakehouse stream` runs for the source (its heartbeat is fresh), the sensor
stands aside: the stream takes the files, and the sensor resumes when it stops.
"""

import datetime as dt
import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from dagster import (
    AssetKey,
    AssetObservation,
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
from pyiceberg.expressions import And, BooleanExpression, EqualTo, In, Reference
from pyiceberg.expressions.literals import literal
from sqlalchemy import text

from ..bronze.ingest import INGEST_LOG, LandingSource
from ..runtime.catalog import catalog_for
from ..runtime.resource import LakehouseResource
from ..runtime.status import stream_is_running
from ..sources.zones import landing_zone, refusals, source_root
from ..times import UTC

# Files modified this long before the watermark are still compared by name: clocks
# and uploads are not perfectly ordered.
LOOKBACK_SECONDS = 600
# A tick lists the folders that changed since the watermark (local zones: by the folders' modification
# times) or the day folders from the day before the watermark's on (object stores). The whole source
# folder is listed this often (and on a sensor's first tick): on an object store, for files that land in
# older day folders (a replayed archive); everywhere, to report files outside any day folder.
FULL_LISTING_SECONDS = 600


# The last answer of each look-up, by the log's metadata file: a tick whose log has not changed since (most
# ticks: the log changes once per ingest run) reads the catalog's pointer only. The daemon's code server
# keeps it between ticks.
_TAKEN: dict[tuple, tuple[str, frozenset[str]]] = {}


def ingested_files(lakehouse: LakehouseResource, source: str, days: Iterable[dt.date] | None = None) -> set[str]:
    """The files of `source` the ingest log lists (of those landing `days` only: the scan then reads the
    log's data files whose landing dates can hold them, not the whole log)."""
    catalog, identifier = catalog_for(lakehouse.settings), (lakehouse.settings.namespace, INGEST_LOG.name)
    statement = text("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = :catalog "
                     "AND table_namespace = :namespace AND table_name = :name")
    with catalog.engine.connect() as connection:
        location = connection.execute(statement, {"catalog": catalog.name, "namespace": identifier[0],
                                                  "name": identifier[1]}).scalar()
    if location is None:
        return set()
    key = (catalog.engine.url, *identifier, source, None if days is None else frozenset(days))
    if key in _TAKEN and _TAKEN[key][0] == location:
        return set(_TAKEN[key][1])
    row_filter: BooleanExpression = EqualTo(term=Reference("source"), value=literal(source))
    if days is not None:
        row_filter = And(row_filter, In("landing_date", {d.isoformat() for d in days}))  # type: ignore[arg-type, call-arg]
    table = catalog.load_table(identifier)
    files = frozenset(table.scan(row_filter=row_filter, selected_fields=("source_file",))
                      .to_arrow().column("source_file").to_pylist())
    if len(_TAKEN) > 256:
        _TAKEN.clear()
    _TAKEN[key] = (table.metadata_location, files)  # the file read: a commit since the pointer's read is newer
    return set(files)


def landing_sensor(source: LandingSource, partitions: DailyPartitionsDefinition,
                   minimum_interval_seconds: int = 30) -> SensorDefinition:
    """A file that cannot be placed (no day folder, a day before the start or in the future) is reported once,
    as a run-less observation of the bronze asset and a warning, and never stops the other files."""
    keys = [AssetKey(source.bronze.name), AssetKey(source.quarantine.name)]

    @sensor(
        name=f"{source.bronze.name}_landing_sensor",
        description=f"Requests {source.bronze.name} runs for landing days with new files under {source.name}/",
        asset_selection=keys,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
    )
    def _sensor(context: SensorEvaluationContext, lakehouse: LakehouseResource):
        if stream_is_running(lakehouse.settings.home, source.name):
            return SkipReason(f"lakehouse stream is taking the new files of {source.name}/")
        state: dict[str, Any] = json.loads(context.cursor) if context.cursor else {"watermark": 0.0, "recent": []}
        watermark, recent = state["watermark"], set(state["recent"])
        now = time.time()
        whole = not watermark or now - state.get("listed_all_at", 0.0) >= FULL_LISTING_SECONDS
        since = None if whole else (dt.datetime.fromtimestamp(watermark - LOOKBACK_SECONDS, UTC).date()
                                    - dt.timedelta(days=1))
        files = landing_zone(lakehouse.settings).list(
            source.name, since=since, changed_after=None if whole else watermark - LOOKBACK_SECONDS)
        if whole:
            state["listed_all_at"] = now
        reported = set(state.get("refused", []))
        root = source_root(lakehouse.settings, source.name)
        refused = refusals((f.uri for f in files), root, partitions)
        if not whole:  # what a whole listing found stays reported until the next one
            refused.update({uri: "" for uri in reported if uri not in refused})
        events = []
        if set(refused) - reported:
            newly = {uri: why for uri, why in refused.items() if uri not in reported}
            for uri, why in newly.items():
                context.log.warning(f"{source.name}: not ingested: {uri}: {why}")
            events.append(AssetObservation(asset_key=keys[0], metadata={
                "refused_files": MetadataValue.json([{"file": u, "reason": w} for u, w in sorted(newly.items())]),
            }))
        new = [f for f in files if f.modified > watermark - LOOKBACK_SECONDS and f.uri not in recent
               and f.uri not in refused]
        if new:
            taken = ingested_files(lakehouse, source.name, {f.day for f in new if f.day is not None})
            new = [f for f in new if f.uri not in taken]
        if not new:
            if events:  # reported, and remembered so that it is reported once
                state["refused"] = sorted(refused)
                return SensorResult(asset_events=events, cursor=json.dumps(state))
            skip = f"no new files under {source.name}/ ({len(files)} listed{'' if whole else ' in recent folders'})"
            if whole:  # remembered, so that the next ticks list from the watermark's day
                return SensorResult(skip_reason=skip, cursor=json.dumps(state))
            return SkipReason(skip)

        by_day = defaultdict(list)
        for f in new:
            assert f.day is not None  # files without a landing day were left out above
            by_day[f.day.isoformat()].append(f.uri)
        requests = [
            RunRequest(
                run_key=f"{source.name}:{day}:" + hashlib.sha1("\n".join(sorted(uris)).encode()).hexdigest()[:16],
                partition_key=day,
                asset_selection=keys,
                tags={"lakehouse/new_files": str(len(uris)), "lakehouse/source": source.name},
            )
            for day, uris in sorted(by_day.items())
        ]
        watermark = max([watermark, *(f.modified for f in new)])
        still_recent = {f.uri for f in files if f.modified > watermark - LOOKBACK_SECONDS}
        if not whole:  # files of folders this listing did not read stay remembered until a whole listing
            still_recent |= recent - {f.uri for f in files}
        context.log.info(f"{len(new)} new files under {source.name}/ on {len(by_day)} landing days")
        cursor = {"watermark": watermark, "recent": sorted(still_recent), "refused": sorted(refused),
                  "listed_all_at": state.get("listed_all_at", 0.0)}
        return SensorResult(run_requests=requests, asset_events=events, cursor=json.dumps(cursor))

    return _sensor
