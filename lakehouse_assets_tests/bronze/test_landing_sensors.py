"""Sensors notice new landing files, locally and on S3, and their runs take them into bronze."""

import datetime as dt
import json
import os
import time
import uuid

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, Definitions, build_sensor_context, materialize
from dagster._core.storage.dagster_run import DagsterRun

from examples.shop.cdc_generator import generate_cdc
from examples.shop.events_generator import generate_day
from lakehouse_assets.automation.partitions import daily_partitions
from lakehouse_assets.bronze.assets import event_landing_source
from lakehouse_assets.bronze.sensors import FULL_LISTING_SECONDS, landing_sensor
from lakehouse_assets.landing.zones import landing_zone
from lakehouse_assets.runtime.resource import NEW_BYTES_TAG, LakehouseResource
from lakehouse_assets.runtime.status import heartbeat_file

from ..shop import ALL_ASSETS, DEFS, SHOP, asset
from ..silver.test_cdc_silver import assert_current_state_is_the_source

DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2)]
EVENTS = event_landing_source(SHOP.events["events"], SHOP.landing)
bronze_events = asset("bronze_events")
PARTITIONS = daily_partitions(SHOP.start_date)
SENSOR = landing_sensor(EVENTS, PARTITIONS)


def evaluate(lakehouse, instance, cursor=None):
    definitions = Definitions(assets=[bronze_events], sensors=[SENSOR], resources={"lakehouse": lakehouse})
    context = build_sensor_context(instance=instance, cursor=cursor, definitions=definitions,
                                   resources={"lakehouse": lakehouse})
    return SENSOR.evaluate_tick(context)


def execute(lakehouse, instance, run_request):
    """Run what the sensor asked for, as the daemon would."""
    assert set(run_request.asset_selection) == {AssetKey("bronze_events"), AssetKey("bronze_events_quarantine")}
    result = materialize([bronze_events], resources={"lakehouse": lakehouse}, instance=instance,
                         partition_key=run_request.partition_key, tags=run_request.tags)
    assert result.success
    return result


def bronze_rows(lakehouse):
    return {(r.source_file, r.source_line) for r in
            lakehouse.spark.table(lakehouse.table_id("bronze_events")).select("source_file", "source_line").collect()}


@pytest.fixture(params=["local", "s3"])
def zone_lakehouse(request, spark, lake_settings, tmp_path):
    landing = str(tmp_path / "landing") if request.param == "local" else f"s3://raw/{uuid.uuid4().hex[:8]}/landing"
    return LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                             namespace=f"t_sensor_{request.param}_{uuid.uuid4().hex[:6]}", landing=landing)


def test_new_files_trigger_runs_that_take_them_exactly_once(zone_lakehouse, tmp_path):
    lakehouse = zone_lakehouse
    zone = landing_zone(lakehouse.settings)
    instance = DagsterInstance.ephemeral()
    expected_good = 0
    for day in DAYS:
        generated = generate_day(tmp_path / "gen", day, events_per_day=60, files_per_day=2, malformed_rate=0.05)
        for f in generated.files:
            zone.put(f, "events", day, f.name)
        expected_good += generated.lines - sum(generated.malformed.values())

    tick = evaluate(lakehouse, instance)
    assert sorted(r.partition_key for r in tick.run_requests) == [d.isoformat() for d in DAYS]
    # Each run says how many bytes were new for its day (its JVM's JIT is picked by them).
    assert {r.partition_key: int(r.tags[NEW_BYTES_TAG]) for r in tick.run_requests} == {
        d.isoformat(): sum(f.size for f in zone.list("events") if f.day == d) for d in DAYS}
    # Queued ahead of the automation's runs (priority 0): new records do not wait behind days of downstream runs.
    assert all(int(r.tags["dagster/priority"]) > 0 for r in tick.run_requests)
    for request in tick.run_requests:
        execute(lakehouse, instance, request)
    rows = bronze_rows(lakehouse)
    assert len(rows) == expected_good
    scheme = "s3://" if lakehouse.settings.landing.startswith("s3") else "file:"
    assert all(source_file.startswith(scheme) for source_file, _ in rows)

    # Nothing new: the sensor skips; the same requests again would launch nothing (same run keys).
    again = evaluate(lakehouse, instance, tick.cursor)
    assert not again.run_requests and again.skip_message

    # A file dropped into day 1 later: one request, for day 1 only, taking just that file.
    late = tmp_path / "late.jsonl"
    late.write_text('{"event_id":"e-late","user_id":"u1","event_type":"page_view",'
                    '"event_ts":"2025-01-01T23:59:00Z","properties":{}}\n')
    zone.put(late, "events", DAYS[0], "late.jsonl")
    cursor = again.cursor
    if scheme == "s3://":  # ticks list the day folders from the watermark's day on: older ones at a whole listing
        assert not evaluate(lakehouse, instance, cursor).run_requests
        cursor = json.dumps({**json.loads(cursor), "listed_all_at": time.time() - FULL_LISTING_SECONDS})
    tick = evaluate(lakehouse, instance, cursor)
    assert [r.partition_key for r in tick.run_requests] == ["2025-01-01"]
    assert tick.run_requests[0].tags[NEW_BYTES_TAG] == str(late.stat().st_size)
    meta = execute(lakehouse, instance, tick.run_requests[0]).asset_materializations_for_node("bronze_events")[0].metadata
    assert meta["landing_files_taken"].value == 1 and meta["records_kept"].value == 1
    [(new_file, line)] = bronze_rows(lakehouse) - rows
    assert new_file.endswith("/events/date=2025-01-01/late.jsonl") and line == 1

    # A sensor without a cursor (new, or reset) asks only for files the ingest log does not list.
    fresh = evaluate(lakehouse, instance)
    assert not fresh.run_requests
    zone.put(late, "events", DAYS[1], "late-2.jsonl")
    fresh = evaluate(lakehouse, instance)
    assert [r.partition_key for r in fresh.run_requests] == ["2025-01-02"]


@pytest.mark.parametrize("status", [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING])
def test_files_landing_while_the_days_run_is_yet_to_start_are_left_to_it(lakehouse, tmp_path, status):
    """A run yet to start takes every file that is new when it starts: while the source's run for a day waits
    (created, queued, or launched with its step to come), the day's new files are not requested again (the queue
    holds one run per source and day, however often files land) and that run takes them; once it has started,
    new files are requested again."""
    zone = landing_zone(lakehouse.settings)
    instance = DagsterInstance.ephemeral()
    generated = generate_day(tmp_path / "gen", DAYS[0], events_per_day=60, files_per_day=3, malformed_rate=0.0)
    first, second, third = generated.files
    zone.put(first, "events", DAYS[0], first.name)
    tick = evaluate(lakehouse, instance)
    [request] = tick.run_requests
    queued = instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=uuid.uuid4().hex,
                                         status=status,
                                         tags={**request.tags, "dagster/partition": request.partition_key}))

    zone.put(second, "events", DAYS[0], second.name)
    left = evaluate(lakehouse, instance, tick.cursor)
    assert not left.run_requests, "the day's run yet to start takes the new file"
    execute(lakehouse, instance, request)
    assert {f.rsplit("/", 1)[1] for f, _ in bronze_rows(lakehouse)} == {first.name, second.name}

    instance.delete_run(queued.run_id)  # it ran: what lands now is requested again
    zone.put(third, "events", DAYS[0], third.name)
    after = evaluate(lakehouse, instance, left.cursor)
    assert [r.partition_key for r in after.run_requests] == [DAYS[0].isoformat()]
    execute(lakehouse, instance, after.run_requests[0])
    assert {f.rsplit("/", 1)[1] for f, _ in bronze_rows(lakehouse)} == {first.name, second.name, third.name}


def test_a_sensor_with_nothing_landed_skips(lakehouse):
    tick = evaluate(lakehouse, DagsterInstance.ephemeral())
    assert not tick.run_requests
    assert "no new files" in tick.skip_message


def test_a_file_that_cannot_be_placed_is_reported_once_and_never_blocks_the_others(lakehouse, tmp_path):
    """Today is a partition; a future day, a day before the start and a folder that is no day are refused."""
    landing = lakehouse.settings.local_path(lakehouse.settings.landing) / "events"
    today = dt.datetime.now(dt.timezone.utc).date()
    bad = {
        f"date={today + dt.timedelta(days=3)}": "is in the future",
        "date=2024-06-01": "is before the first partition",
        "date=2025-13-45": "not in a date=YYYY-MM-DD folder",
        "latest": "not in a date=YYYY-MM-DD folder",
    }
    line = '{"event_id": "e-1", "user_id": "u", "event_type": "page_view", "event_ts": "2025-01-01T00:00:00Z"}\n'
    for folder in bad:
        (landing / folder).mkdir(parents=True)
        (landing / folder / "x.jsonl").write_text(line)
    (landing / f"date={today}").mkdir(parents=True)
    (landing / f"date={today}" / "today.jsonl").write_text(line)
    instance = DagsterInstance.ephemeral()

    first = evaluate(lakehouse, instance)
    assert [r.partition_key for r in first.run_requests] == [today.isoformat()], "today is a partition"
    [observation] = first.asset_events
    refused = {r["file"].split("/events/")[1].split("/")[0]: r["reason"]
               for r in observation.metadata["refused_files"].value}
    assert refused.keys() == bad.keys()
    for folder, reason in bad.items():
        assert reason in refused[folder], folder

    # A good file landing later is still requested; the refused ones are not reported again.
    (landing / "date=2025-01-02").mkdir()
    (landing / "date=2025-01-02" / "late.jsonl").write_text(line)
    second = evaluate(lakehouse, instance, cursor=first.cursor)
    assert [r.partition_key for r in second.run_requests] == ["2025-01-02"]
    assert not second.asset_events


def test_the_sensor_stands_aside_while_the_stream_runs_and_resumes_when_it_stops(spark, lake_settings, tmp_path):
    lakehouse = LakehouseResource(home=str(tmp_path / "home"), spark_master=lake_settings.spark_master,
                                  namespace=f"t_sensor_stream_{uuid.uuid4().hex[:6]}", landing=str(tmp_path / "landing"))
    generate_day(lakehouse.settings.local_path(lakehouse.settings.landing), DAYS[0], events_per_day=20, files_per_day=1)
    beat = heartbeat_file(lakehouse.settings.home, EVENTS.name)
    beat.parent.mkdir(parents=True)
    beat.touch()  # what a running `lakehouse stream` does every half second
    tick = evaluate(lakehouse, DagsterInstance.ephemeral())
    assert not tick.run_requests and "lakehouse stream is taking" in tick.skip_message

    old = time.time() - 120  # the stream stopped (or died) two minutes ago
    os.utime(beat, (old, old))
    tick = evaluate(lakehouse, DagsterInstance.ephemeral())
    assert [r.partition_key for r in tick.run_requests] == [DAYS[0].isoformat()]


def test_a_cdc_tables_new_files_go_through_bronze_and_silver_in_one_run(spark, lake_settings, tmp_path):
    """A CDC table whose silver reads its bronze alone: the landing sensor's run takes the new files through bronze,
    then silver and history, so the day is fresh after one run that never waits for the automation to find bronze
    idle. A table that references another's silver (applied first, by the automation) runs bronze alone."""
    landing = tmp_path / "landing"
    generated = generate_cdc(landing, DAYS[:1], changes_per_day=80, late_share=0.0, duplicate_rate=0.0,
                             malformed_rate=0.0)
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace=f"t_cdc_sensor_{uuid.uuid4().hex[:6]}", landing=str(landing))
    instance = DagsterInstance.ephemeral()
    sensors = {s.name: s for s in DEFS.sensors}
    requests = {}
    for table in ("customers", "orders"):
        sensor = sensors[f"bronze_cdc_{table}_landing_sensor"]
        context = build_sensor_context(instance=instance, resources={"lakehouse": lakehouse}, definitions=Definitions(
            assets=ALL_ASSETS, sensors=[sensor], resources={"lakehouse": lakehouse}))
        [requests[table]] = sensor.evaluate_tick(context).run_requests
    assert {k.to_user_string() for k in requests["orders"].asset_selection} == {"bronze_cdc_orders",
                                                                               "bronze_cdc_orders_quarantine"}
    run = requests["customers"]
    assert {k.to_user_string() for k in run.asset_selection} == {
        "bronze_cdc_customers", "bronze_cdc_customers_quarantine", "silver_customers", "silver_customers_history"}
    result = materialize(ALL_ASSETS, selection=run.asset_selection, partition_key=run.partition_key,
                         resources={"lakehouse": lakehouse}, instance=instance, tags=run.tags)
    assert result.success
    assert_current_state_is_the_source(lakehouse, generated, "customers", drifted=False)
