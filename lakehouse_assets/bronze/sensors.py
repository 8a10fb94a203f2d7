"""One sensor per landing source: new or changed files in the zone -> a bronze run for each landing day touched.

A file is new or changed when the ingest log does not hold it as it is now: its path,
size and modification time (and ETag on S3) are not those of the log's newest row
of it (landing/versions.py). Timestamps only say where to look: a tick lists the
folders that changed since its last look (local zones: by the folders' inode change
time, which copies that keep old file times still move), and every
FULL_LISTING_SECONDS the whole source folder, so a file with any time, in any day
folder, is found. A file is requested once it has settled (unchanged for the
declared `landing.settle`: by its modification time, or as seen tick after tick,
which is all a time ahead of the clock counts for; its folder marked ready when a
marker is declared); a request is remembered for RETRY_SECONDS, after which a file
the log still does not hold (a failed run, a file still being written) is
requested again. Requests are
safe to repeat anyway: bronze decides each file against the log, and publishes the
log with the rows in one commit. While `lakehouse stream` runs for the source (its
heartbeat is fresh), the sensor stands aside: the stream takes the files.
"""

import datetime as dt
import hashlib
import json
import time
from collections import defaultdict
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

from ..landing.taken import TakenIndex
from ..landing.versions import Sightings, Stat, needs_a_look, settled
from ..landing.zones import LandedFile, landing_zone, refusals, source_root
from ..runtime.resource import LakehouseResource
from ..runtime.status import stream_is_running
from ..times import UTC
from .ingest import LandingSource

# Folders changed this long before the last look are listed again: clocks and uploads are not perfectly ordered.
LOOKBACK_SECONDS = 600
# The whole source folder is listed this often (and on a sensor's first tick): on an object store, for files
# that land in older day folders (a replayed archive); everywhere, to report files outside any day folder.
FULL_LISTING_SECONDS = 600
# A file requested this long ago that the log still does not hold as it is is requested again.
RETRY_SECONDS = 600

# The daemon's code server keeps it between ticks: a tick whose log has not changed reads its pointer only.
TAKEN = TakenIndex()


def _identity(f: LandedFile) -> str:
    return f"{f.uri}|{f.size}|{f.stat.modified_ms}|{f.etag or ''}"


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
        state: dict[str, Any] = json.loads(context.cursor) if context.cursor else {}
        watermark = state.get("watermark", 0.0)
        requested: dict[str, float] = state.get("requested", {})
        now = time.time()
        whole = not watermark or now - state.get("listed_all_at", 0.0) >= FULL_LISTING_SECONDS
        # Yesterday's and today's folders (where files are written and appended to), and any folder that changed.
        since = None if whole else (dt.datetime.fromtimestamp(now - LOOKBACK_SECONDS, UTC).date()
                                    - dt.timedelta(days=1))
        zone = landing_zone(lakehouse.settings)
        files = zone.list(source.name, since=since, changed_after=None if whole else watermark - LOOKBACK_SECONDS)
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
        requested = {k: at for k, at in requested.items() if now - at < RETRY_SECONDS}
        candidates = [f for f in files if f.uri not in refused and _identity(f) not in requested]
        if candidates:
            taken = TAKEN.taken(lakehouse.settings, source.name, {f.day for f in candidates if f.day is not None})
            candidates = [f for f in candidates if needs_a_look(f.stat, taken.get(f.uri))]
        now_dt = dt.datetime.fromtimestamp(now, UTC)
        ready = _ready(zone, candidates, source.policy.ready_marker)
        # How long each file has been seen as it is, tick after tick: a file whose time is ahead of the clock
        # settles by being seen unchanged for the settle time.
        sightings = Sightings({uri: tuple(seen) for uri, seen in state.get("seen", {}).items()})  # type: ignore[misc]
        new = []
        for f in candidates:
            stat = Stat(f.size, round(max(f.modified, f.changed) * 1000))
            if settled(stat, now_dt, source.policy, ready.get(f.uri.rsplit("/", 1)[0], True),
                       sightings.see(f.uri, stat, now)):
                new.append(f)
        unsettled = [f for f in candidates if f not in new]
        sightings.keep({f.uri for f in unsettled})
        state["seen"] = sightings.seen
        # The next partial listing starts where this one's newest file is, but not past a file still settling.
        newest = max((f.changed for f in files), default=watermark)
        state["watermark"] = min([max(watermark, newest), *(f.changed for f in unsettled)])
        state["refused"] = sorted(refused)
        if not new:
            waiting = f", {len(unsettled)} not settled yet" if unsettled else ""
            skip = f"no new files under {source.name}/ ({len(files)} listed{'' if whole else ' in recent folders'}" \
                   f"{waiting})"
            state["requested"] = requested
            return SensorResult(skip_reason=None if events else skip, asset_events=events, cursor=json.dumps(state))

        by_day = defaultdict(list)
        for f in new:
            assert f.day is not None  # files without a landing day were left out above
            by_day[f.day.isoformat()].append(_identity(f))
        requests = [
            RunRequest(
                run_key=f"{source.name}:{day}:" + hashlib.sha1("\n".join(sorted(ids)).encode()).hexdigest()[:16],
                partition_key=day,
                asset_selection=keys,
                tags={"lakehouse/new_files": str(len(ids)), "lakehouse/source": source.name},
            )
            for day, ids in sorted(by_day.items())
        ]
        requested.update({_identity(f): now for f in new})
        state["requested"] = requested
        context.log.info(f"{len(new)} new or changed files under {source.name}/ on {len(by_day)} landing days")
        return SensorResult(run_requests=requests, asset_events=events, cursor=json.dumps(state))

    return _sensor


def _ready(zone: Any, files: list[LandedFile], marker: str | None) -> dict[str, bool]:
    """Whether each folder of `files` holds the declared ready marker (no marker declared: every folder is)."""
    if marker is None:
        return {}
    return {folder: zone.has(f"{folder}/{marker}") for folder in {f.uri.rsplit("/", 1)[0] for f in files}}
