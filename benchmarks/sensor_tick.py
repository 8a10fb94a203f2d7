"""Cost follows the change: a landing sensor's tick with 100,000 files in the zone vs with 100.

Two landing zones of the shop's `events` source: one with 100 files, one with 100,000, spread over
a year of day folders (a year of hourly drops), every one of them already ingested (the ingest log,
a real Iceberg table, lists them). Then one new file lands today in each, and the sensor ticks as
the daemon runs it, with the cursor the previous tick left: it reads the folders that changed since
its watermark and the ingest log of the new file's day only. Every FULL_LISTING_SECONDS a tick lists
the whole folder instead; that tick is timed too.
The sensor uses no Spark: it lists the zone and reads the log with pyiceberg (Spark creates the log's table
from its declaration, as the platform does).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import time
from pathlib import Path

import pyarrow as pa
from dagster import DagsterInstance, Definitions, build_sensor_context

from lakehouse_assets.automation.landing_sensors import FULL_LISTING_SECONDS, landing_sensor
from lakehouse_assets.bronze.ingest import INGEST_LOG
from lakehouse_assets.bronze.sources import event_landing_source
from lakehouse_assets.partitions import daily_partitions
from lakehouse_assets.project import load_project
from lakehouse_assets.runtime.catalog import append_retrying, catalog_for
from lakehouse_assets.settings import Settings

from .common import SHOP_FILE, lakehouse, shop_assets

TARGET = 1.3
DAYS = 365
REPEATS = 5


def _fill(landing: Path, files: int, today: dt.date) -> list[str]:
    """`files` landed and ingested files over the DAYS day folders before today; their URIs."""
    uris, per_day = [], max(1, files // DAYS)
    stamp = time.time() - 2 * 86_400
    for n in range(files):
        day = today - dt.timedelta(days=DAYS - n // per_day % DAYS)
        path = landing / "events" / f"date={day.isoformat()}" / f"drop-{n:06d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b'{"event_id": "e"}\n')
        os.utime(path, (stamp, stamp))
        uris.append(f"file:{path}")
    return uris


def _case(settings: Settings, name: str, files: int) -> dict:
    project = load_project(SHOP_FILE)
    source = event_landing_source(project.events["events"])
    sensor = landing_sensor(source, daily_partitions(project.start_date))
    landing = Path(settings.home) / f"sensor_{name}"
    resource = lakehouse(settings, f"bench_sensor_{name}", landing)
    today = dt.datetime.now(dt.timezone.utc).date()
    started = time.perf_counter()
    uris = _fill(landing, files, today)
    catalog = catalog_for(resource.settings)
    catalog.create_namespace_if_not_exists(resource.namespace)
    resource.table(INGEST_LOG).create()  # as the platform declares it (Spark's DDL)
    identifier = (resource.namespace, INGEST_LOG.name)
    days = [dt.date.fromisoformat(u.split("date=")[1][:10]) for u in uris]
    now = dt.datetime.now(dt.timezone.utc)
    log = pa.table({"source": ["events"] * len(uris), "source_file": uris, "landing_date": days,
                    "records": [1] * len(uris), "kept": [1] * len(uris), "quarantined": [0] * len(uris),
                    "ingested_at": [now] * len(uris), "run_id": ["bench"] * len(uris)},
                   schema=catalog.load_table(identifier).schema().as_arrow())
    for start in range(0, len(uris), 1_000):  # as ingest runs leave it: many small appends, many data files
        append_retrying(catalog, identifier, log.slice(start, 1_000))
    fill_s = time.perf_counter() - started
    definitions = Definitions(assets=shop_assets("bronze_events"), sensors=[sensor], resources={"lakehouse": resource})

    def tick(cursor: str | None):
        context = build_sensor_context(instance=DagsterInstance.ephemeral(), cursor=cursor, definitions=definitions,
                                       resources={"lakehouse": resource})
        begun = time.perf_counter()
        result = sensor.evaluate_tick(context)
        return result, time.perf_counter() - begun

    first, whole_first_s = tick(None)  # everything is ingested: nothing to ask for
    if first.run_requests:
        raise RuntimeError(f"{name}: the sensor asked for files the ingest log holds")
    cursor = json.loads(first.cursor)
    cursor["watermark"] = max(cursor.get("watermark", 0.0), time.time() - 2 * 86_400)
    steady, whole = [], []
    for n in range(REPEATS):
        path = landing / "events" / f"date={today.isoformat()}" / f"new-{n}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b'{"event_id": "new"}\n')
        result, seconds = tick(json.dumps(cursor))
        if [r.partition_key for r in result.run_requests] != [today.isoformat()]:
            raise RuntimeError(f"{name}: the new file was not requested: {result.run_requests}")
        steady.append(seconds)
        full = dict(cursor, listed_all_at=time.time() - FULL_LISTING_SECONDS)
        _, seconds = tick(json.dumps(full))
        whole.append(seconds)
        cursor = json.loads(result.cursor)
    log_files = int(catalog.load_table(identifier).current_snapshot().summary["total-data-files"])
    return {"files": files, "log_data_files": log_files, "fill_s": fill_s, "first_tick_s": whole_first_s,
            "tick_s": statistics.median(steady), "whole_listing_tick_s": statistics.median(whole)}


def run(settings: Settings, files: int = 100_000) -> dict:
    """Runs beside the benchmarks' Spark session (the resource's tables are created through it)."""
    small, large = _case(settings, "small", 100), _case(settings, "large", files)
    return {"small": small, "large": large, "ratio": large["tick_s"] / small["tick_s"],
            "whole_ratio": large["whole_listing_tick_s"] / small["whole_listing_tick_s"]}


def markdown(results: dict) -> str:
    small, large, ratio = results["small"], results["large"], results["ratio"]
    verdict = (f"**Target reached**: {ratio:.2f}x (target: at most {TARGET}x)." if ratio <= TARGET else
               f"**Target not reached**: {ratio:.2f}x (target: at most {TARGET}x).")
    rows = [f"| {c['files']:,} files over {DAYS} day folders, log in {c['log_data_files']:,} data files | "
            f"{c['tick_s'] * 1000:.0f} | {c['whole_listing_tick_s'] * 1000:.0f} | {c['first_tick_s'] * 1000:.0f} |"
            for c in (small, large)]
    return "\n".join([
        f"### Growth: a landing sensor's tick with {large['files']:,} files in the zone vs {small['files']:,}",
        "",
        "| the zone holds | tick (ms, median of 5) | whole-listing tick (ms) | first tick (ms) |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Each tick finds one new file of today among files all ingested before (a local zone). A tick reads the "
        f"folders that changed since its watermark and looks the new files up in the ingest log (partitioned by "
        f"landing day) within their days. "
        f"{large['files']:,} over {small['files']:,} files: {verdict} Every {FULL_LISTING_SECONDS // 60} minutes a "
        f"tick lists the whole source folder (on S3, for files landing in old day folders; everywhere, files outside "
        f"any day folder): "
        f"{results['whole_ratio']:.1f}x its small case, once per {FULL_LISTING_SECONDS // 60} minutes.",
        "",
    ])
