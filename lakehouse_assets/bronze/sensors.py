"""One sensor per landing source: it requests a bronze run for each landing day with new or changed files.

A file is new or changed when the ingest log has no row of it as it is now: the same path, size and
modification time (and ETag on S3) as the log's newest row of it (landing/versions.py).

Listing: each tick lists the folders changed since its last look (in a local zone by the folders' inode
change time, which moves even when a copy keeps old file times), and every FULL_LISTING_SECONDS the whole
source folder, so a file with any time, in any day folder, is found.

Settling: a file is requested once it has stayed unchanged for the declared `landing.settle` (by its
modification time; a file whose time is ahead of the clock, by being seen unchanged tick after tick), and,
when a ready marker is declared, once its folder holds the marker.

Retries: a request is remembered for RETRY_SECONDS; after that, a file the log still does not hold (its run
failed, or it was still being written) is requested again. Repeating a request is safe: bronze checks each
file against the log, and commits the log together with the rows.

A run yet to start takes every file of its day that is new when it starts: while one of the source's runs
for a day waits in the queue (or is being launched), the day's new files are left to it rather than requested
again, so the queue never holds more than one run per source and day, however often files land.

Queueing: a landing run goes ahead of the runs already queued (`dagster/priority`): the automation may have
queued days of downstream runs, and new records should not wait behind them for bronze.

While `lakehouse stream` runs for the source (its heartbeat is fresh), the sensor skips: the stream takes
the files.
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

from ..landing.taken import TakenIndex
from ..landing.versions import Sightings, Stat, needs_a_look, settled
from ..landing.zones import LandedFile, landing_zone, refusals, source_root
from ..runtime.resource import NEW_BYTES_TAG, LakehouseResource
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

# Dagster's queue starts runs of a higher priority first (the default is 0).
LANDING_RUN_PRIORITY = 10

# What the ingest log holds, kept between ticks (the daemon's code server stays up): a tick rereads the log
# only when it has changed.
TAKEN = TakenIndex()


def _identity(f: LandedFile) -> str:
    return f"{f.uri}|{f.size}|{f.stat.modified_ms}|{f.etag or ''}"


def landing_sensor(source: LandingSource, partitions: DailyPartitionsDefinition,
                   minimum_interval_seconds: int = 10, follow: tuple[str, ...] = ()) -> SensorDefinition:
    """A file that cannot be placed (no day folder, a day before the start or in the future) is reported once,
    as a run-less observation of the bronze asset and a warning, and never stops the other files.

    `follow`: tables whose day is bronze's landing day and that read bronze alone (a CDC table's silver and
    history), taken in the same run as bronze's, after it: their day is fresh with one run, not two, and
    never waits for the automation to find bronze idle (under a steady load it seldom is)."""
    keys = [AssetKey(source.bronze.name), AssetKey(source.quarantine.name), *map(AssetKey, follow)]
    then = f" and {', '.join(follow)}" if follow else ""

    @sensor(
        name=f"{source.bronze.name}_landing_sensor",
        description=f"Requests {source.bronze.name}{then} runs for landing days with new files under {source.name}/",
        asset_selection=keys,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
    )
    def _sensor(context: SensorEvaluationContext, lakehouse: LakehouseResource):
        if stream_is_running(lakehouse.settings.home, source.name):
            return SkipReason(f"lakehouse stream is taking the new files of {source.name}/")
        state: dict[str, Any] = json.loads(context.cursor) if context.cursor else {}
        now = time.time()
        zone = landing_zone(lakehouse.settings)
        files, whole = _list_files(zone, source.name, state, now)
        refused, newly_refused = _refused(files, whole, state, source_root(lakehouse.settings, source.name),
                                          partitions)
        events = []
        if newly_refused:
            for uri, why in newly_refused.items():
                context.log.warning(f"{source.name}: not ingested: {uri}: {why}")
            events.append(_refusal_observation(keys[0], newly_refused))
        requested = {k: at for k, at in state.get("requested", {}).items() if now - at < RETRY_SECONDS}
        candidates = _not_yet_taken(lakehouse, source.name, files, refused, requested)
        new, unsettled = _split_settled(zone, candidates, source, state, now)
        _advance_watermark(state, files, unsettled)
        state["refused"] = sorted(refused)
        if not new:
            waiting = f", {len(unsettled)} not settled yet" if unsettled else ""
            skip = f"no new files under {source.name}/ ({len(files)} listed{'' if whole else ' in recent folders'}" \
                   f"{waiting})"
            state["requested"] = requested
            return SensorResult(skip_reason=None if events else skip, asset_events=events, cursor=json.dumps(state))

        coming = _days_of_runs_to_come(context, source.name)
        requests = _run_requests(source.name, keys, [f for f in new if str(f.day) not in coming])
        requested.update({_identity(f): now for f in new})
        state["requested"] = requested
        left = f"; those of {', '.join(sorted(coming))} left to the run queued for the day" if coming else ""
        context.log.info(f"{len(new)} new or changed files under {source.name}/ on {len(requests)} landing days"
                         f"{left}")
        return SensorResult(run_requests=requests, asset_events=events, cursor=json.dumps(state))

    return _sensor


def _list_files(zone: Any, source_name: str, state: dict[str, Any], now: float) -> tuple[list[LandedFile], bool]:
    """The files to look at this tick, and whether the whole source folder was listed.

    The whole folder on the first tick and every FULL_LISTING_SECONDS; otherwise yesterday's and today's
    folders (where files are written and appended to) and any folder changed since the last look."""
    watermark = state.get("watermark", 0.0)
    whole = not watermark or now - state.get("listed_all_at", 0.0) >= FULL_LISTING_SECONDS
    if whole:
        files = zone.list(source_name, since=None, changed_after=None)
        state["listed_all_at"] = now
    else:
        since = dt.datetime.fromtimestamp(now - LOOKBACK_SECONDS, UTC).date() - dt.timedelta(days=1)
        files = zone.list(source_name, since=since, changed_after=watermark - LOOKBACK_SECONDS)
    return files, whole


def _refused(files: list[LandedFile], whole: bool, state: dict[str, Any], root: str,
             partitions: DailyPartitionsDefinition) -> tuple[dict[str, str], dict[str, str]]:
    """The files that cannot be placed (uri -> reason), and those among them not reported before."""
    reported = set(state.get("refused", []))
    refused = refusals((f.uri for f in files), root, partitions)
    if not whole:  # what a whole listing found stays reported until the next one
        refused.update({uri: "" for uri in reported if uri not in refused})
    return refused, {uri: why for uri, why in refused.items() if uri not in reported}


def _refusal_observation(key: AssetKey, refused: dict[str, str]) -> AssetObservation:
    return AssetObservation(asset_key=key, metadata={
        "refused_files": MetadataValue.json([{"file": u, "reason": w} for u, w in sorted(refused.items())]),
    })


def _not_yet_taken(lakehouse: LakehouseResource, source_name: str, files: list[LandedFile],
                   refused: dict[str, str], requested: dict[str, float]) -> list[LandedFile]:
    """The files neither refused, nor recently requested, nor held by the ingest log as they are now."""
    candidates = [f for f in files if f.uri not in refused and _identity(f) not in requested]
    if not candidates:
        return candidates
    taken = TAKEN.taken(lakehouse.settings, source_name, {f.day for f in candidates if f.day is not None})
    return [f for f in candidates if needs_a_look(f.stat, taken.get(f.uri))]


def _split_settled(zone: Any, candidates: list[LandedFile], source: LandingSource, state: dict[str, Any],
                   now: float) -> tuple[list[LandedFile], list[LandedFile]]:
    """The candidates that have settled and those still settling; records in `state` when each was seen.

    A file whose time is ahead of the clock settles by being seen unchanged, tick after tick, for the
    settle time."""
    now_dt = dt.datetime.fromtimestamp(now, UTC)
    ready = _ready(zone, candidates, source.policy.ready_marker)
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
    return new, unsettled


def _advance_watermark(state: dict[str, Any], files: list[LandedFile], unsettled: list[LandedFile]) -> None:
    """The next partial listing starts at this one's newest file, but not past a file still settling."""
    watermark = state.get("watermark", 0.0)
    newest = max((f.changed for f in files), default=watermark)
    state["watermark"] = min([max(watermark, newest), *(f.changed for f in unsettled)])


def _days_of_runs_to_come(context: SensorEvaluationContext, source_name: str) -> set[str]:
    """The landing days of the source's runs not started yet (queued, or launched with its step still to come):
    each will list its day's files after this tick did, so it takes the files this tick found new."""
    runs = context.instance.get_runs(RunsFilter(
        statuses=[DagsterRunStatus.NOT_STARTED, DagsterRunStatus.QUEUED, DagsterRunStatus.STARTING],
        tags={"lakehouse/source": source_name}))
    return {run.tags["dagster/partition"] for run in runs if "dagster/partition" in run.tags}


def _run_requests(source_name: str, keys: list[AssetKey], new: list[LandedFile]) -> list[RunRequest]:
    """One run per landing day; its run key names the exact file versions, so a repeated request is dropped. Its
    tags say how many files and bytes were new (the resource picks the run's JIT by them)."""
    by_day = defaultdict(list)
    for f in new:
        assert f.day is not None  # files without a landing day were refused above
        by_day[f.day.isoformat()].append(f)
    return [
        RunRequest(
            run_key=f"{source_name}:{day}:" + hashlib.sha1("\n".join(sorted(map(_identity, files))).encode())
            .hexdigest()[:16],
            partition_key=day,
            asset_selection=keys,
            tags={"lakehouse/new_files": str(len(files)), NEW_BYTES_TAG: str(sum(f.size for f in files)),
                  "lakehouse/source": source_name, "dagster/priority": str(LANDING_RUN_PRIORITY)},
        )
        for day, files in sorted(by_day.items())
    ]


def _ready(zone: Any, files: list[LandedFile], marker: str | None) -> dict[str, bool]:
    """Whether each folder of `files` holds the declared ready marker (no marker declared: every folder is)."""
    if marker is None:
        return {}
    return {folder: zone.has(f"{folder}/{marker}") for folder in {f.uri.rsplit("/", 1)[0] for f in files}}
