"""What a landing sensor's tick reads on a local zone: yesterday's and today's folders and those that changed
since its watermark, the whole source folder every FULL_LISTING_SECONDS, and the ingest log of the new files'
days only (an S3 zone's old day folders: test_landing_sensors). No Spark: the ingest log is a real Iceberg table
written with pyiceberg (here with the columns of a log written before files' identities were recorded)."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pyarrow as pa
from dagster import DagsterInstance, Definitions, build_sensor_context

from lakehouse_assets.bronze import sensors as landing_sensors
from lakehouse_assets.landing.zones import landing_zone
from lakehouse_assets.runtime.catalog import append_retrying, catalog_for
from lakehouse_assets.runtime.resource import LakehouseResource

from .test_landing_sensors import SENSOR, bronze_events

TODAY = dt.datetime.now(dt.timezone.utc).date()
OLD_DAY = dt.date(2025, 1, 1)


def tick(lakehouse: LakehouseResource, cursor: str | None):
    definitions = Definitions(assets=[bronze_events], sensors=[SENSOR], resources={"lakehouse": lakehouse})
    context = build_sensor_context(instance=DagsterInstance.ephemeral(), cursor=cursor, definitions=definitions,
                                   resources={"lakehouse": lakehouse})
    return SENSOR.evaluate_tick(context)


def land(landing: Path, day: dt.date, name: str, age_s: float = 0.0) -> str:
    path = landing / "events" / f"date={day.isoformat()}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"event_id": "x"}\n')
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return f"file:{path}"


def requested(result) -> set[str]:
    return {r.tags["lakehouse/new_files"] + "@" + r.partition_key for r in result.run_requests}


def remembered(cursor: dict) -> set[str]:
    """The files a cursor remembers having requested (by identity: path, size, modification time)."""
    return {identity.split("|")[0] for identity in cursor["requested"]}


def test_ticks_read_only_the_folders_that_changed_and_a_file_landing_in_an_old_day_folder_is_taken_at_once(
        tmp_path, monkeypatch):
    # No look-back: the old folder, written moments ago by this test, is then behind the first tick's watermark.
    monkeypatch.setattr(landing_sensors, "LOOKBACK_SECONDS", 0)
    lakehouse = LakehouseResource(home=str(tmp_path / "lake"), namespace="lake", landing=str(tmp_path / "landing"))
    landing = tmp_path / "landing"
    for n in range(30):  # an old day's files, taken long ago (the log says so)
        land(landing, OLD_DAY, f"old-{n:02d}.jsonl", age_s=86_400 * 30)
    old_folder = landing / "events" / f"date={OLD_DAY.isoformat()}"
    month_ago = time.time() - 86_400 * 30
    os.utime(old_folder, (month_ago, month_ago))
    old = sorted(f.uri for f in landing_zone(lakehouse.settings).list("events"))
    first = land(landing, TODAY, "a.jsonl")
    catalog = catalog_for(lakehouse.settings)
    catalog.create_namespace_if_not_exists("lake")
    log = pa.table({"source": ["events"] * len(old), "source_file": old, "landing_date": [OLD_DAY] * len(old)})
    catalog.create_table(("lake", "bronze_ingest_log"), log.schema)
    append_retrying(catalog, ("lake", "bronze_ingest_log"), log)

    # A first tick lists everything, and asks only for what the ingest log does not hold.
    result = tick(lakehouse, None)
    assert requested(result) == {f"1@{TODAY}"}
    cursor = json.loads(result.cursor)
    assert first in remembered(cursor) and cursor["listed_all_at"] > 0

    # The next ticks read today's folder and those that changed since the watermark: not the old one.
    second = land(landing, TODAY, "b.jsonl")
    result = tick(lakehouse, json.dumps(cursor))
    assert requested(result) == {f"1@{TODAY}"}
    cursor = json.loads(result.cursor)
    assert {first, second} <= remembered(cursor) and not set(old) & remembered(cursor)
    result = tick(lakehouse, json.dumps(cursor))
    assert not result.run_requests
    assert "(2 listed in recent folders)" in result.skip_message, result.skip_message  # none of the old 30

    # A file copied now into a folder of 2025 with its times kept three days old (`cp -p`, `rsync -a`, a replayed
    # archive) changes that folder's inode change time, which no copy sets back: the next tick takes it.
    late = land(landing, OLD_DAY, "replayed-archive.jsonl", age_s=3 * 86_400)
    result = tick(lakehouse, json.dumps(cursor))
    assert requested(result) == {f"1@{OLD_DAY}"}
    assert late in remembered(json.loads(result.cursor))


def test_a_file_outside_any_day_folder_is_reported_once_across_partial_and_whole_listings(tmp_path):
    lakehouse = LakehouseResource(home=str(tmp_path / "lake"), namespace="lake", landing=str(tmp_path / "landing"))
    landing = tmp_path / "landing"
    land(landing, TODAY, "a.jsonl")
    stray = landing / "events" / "incoming" / "stray.jsonl"
    stray.parent.mkdir(parents=True)
    stray.write_text("{}\n")
    result = tick(lakehouse, None)
    assert [e.metadata["refused_files"].value for e in result.asset_events] == [
        [{"file": f"file:{stray}", "reason": "not in a date=YYYY-MM-DD folder"}]]
    cursor = json.loads(result.cursor)
    result = tick(lakehouse, json.dumps(cursor))  # partial: does not see it, still remembers it
    assert not result.asset_events
    cursor["listed_all_at"] -= landing_sensors.FULL_LISTING_SECONDS
    result = tick(lakehouse, json.dumps(cursor))  # whole: sees it again, does not report it again
    assert not result.asset_events
    assert f"file:{stray}" in json.loads(result.cursor)["refused"]


def test_the_log_look_up_answers_from_its_last_read_until_the_log_changes(tmp_path, monkeypatch):
    """A tick reads the log only when its metadata moved since the last look-up (the catalog's pointer says so);
    an ingest's commit is seen at once."""
    lakehouse = LakehouseResource(home=str(tmp_path / "lake"), namespace="lake", landing=str(tmp_path / "landing"))
    catalog = catalog_for(lakehouse.settings)
    catalog.create_namespace_if_not_exists("lake")
    identifier = ("lake", "bronze_ingest_log")
    index = landing_sensors.TakenIndex()

    def taken(day: dt.date) -> set[str]:
        return set(index.taken(lakehouse.settings, "events", {day}))

    assert taken(TODAY) == set()  # no log yet: nothing taken

    def logged(*files: str) -> None:
        rows = pa.table({"source": ["events"] * len(files), "source_file": list(files),
                         "landing_date": [TODAY] * len(files)})
        if not catalog.table_exists(identifier):
            catalog.create_table(identifier, rows.schema)
        append_retrying(catalog, identifier, rows)

    logged("file:/a.jsonl")
    assert taken(TODAY) == {"file:/a.jsonl"}
    reads = []
    original = type(catalog).load_table
    monkeypatch.setattr(type(catalog), "load_table", lambda self, ident: reads.append(ident) or original(self, ident))
    assert taken(TODAY) == {"file:/a.jsonl"}
    assert reads == [], "the log did not change: its files were not read again"
    logged("file:/b.jsonl")  # an ingest run's commit
    reads.clear()
    assert taken(TODAY) == {"file:/a.jsonl", "file:/b.jsonl"}
    assert reads == [identifier]
    assert taken(OLD_DAY) == set()  # another day: its own answer
