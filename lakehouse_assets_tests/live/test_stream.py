"""`lakehouse stream`: files landing now reach bronze, silver and gold_minute_activity in micro-batches,
exactly once across SIGKILL, side by side with a daily backfill of the same tables.

The oracle is computed in Python from the lines that landed, never from the tables.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance, materialize
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse_assets.bronze.assets import event_bronze_spec
from lakehouse_assets.landing.zones import landing_zone
from lakehouse_assets.live.stream import BATCH_ID, QUERY_ID, EventStream
from lakehouse_assets.operations.schedules import maintenance_when_due
from lakehouse_assets.project.declaration import ValueCheck
from lakehouse_assets.project.model import TablePolicy
from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.runtime.freshness import freshness_rows
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.settings import Settings
from lakehouse_assets.silver.events import take_new_events

from ..shop import SHOP, SHOP_FILE, assets
from .test_cdc_stream import compacted_between_commits, operations

# lakehouse stream in processes of its own, as a user runs it, for minutes: with the whole deployments (make e2e).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TODAY = dt.datetime.now(dt.timezone.utc).date()


def now() -> dt.datetime:
    """The clock when a test runs (not when the module was collected: freshness is measured against it)."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
OLD_DAY = TODAY - dt.timedelta(days=4)
SWEEP = 3.0  # the streams' sweep interval here: a file taken twice shows within seconds, not the default 10


def _event(key: str, ts: dt.datetime, user: int, kind: str = "page_view") -> str:
    event = {"event_id": key, "user_id": f"u{user}", "session_id": f"s-{user}", "event_type": kind,
             "event_ts": ts.isoformat().replace("+00:00", "Z"), "properties": {}}
    if kind == "purchase":
        event["price"] = "10.50"
    return json.dumps(event)


def land(landing: Path, day: dt.date | str, name: str, lines: list[str]) -> None:
    """Write whole, then rename: a producer's file appears complete."""
    folder = landing / "events" / f"date={day}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{name}.part").write_text("\n".join(lines) + "\n")
    (folder / f".{name}.part").rename(folder / name)


def batch_of(prefix: str, n: int, start: dt.datetime) -> list[str]:
    return [_event(f"{prefix}-{i}", start + dt.timedelta(seconds=7 * i), i % 4,
                   "purchase" if i % 5 == 0 else "page_view") for i in range(n)]


def minute_oracle(lines: list[str]) -> Counter:
    """Events per minute, one per event key (the first delivery), from the raw lines."""
    seen: dict[str, str] = {}
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        seen.setdefault(event["event_id"], event["event_ts"])
    return Counter(dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).replace(second=0, tzinfo=None)
                   for ts in seen.values())


def run_until_taken(stream: EventStream, records: int, *feeders: threading.Thread, max_seconds: float = 240,
                    stop: threading.Event | None = None) -> list:
    """Run the stream until the feeders are done, its batches have taken `records` records and no batch has run
    (none running) for a sweep's interval and more (a file taken twice would show by then), or for `max_seconds`."""
    stop = stop or threading.Event()

    def watch():
        while not stop.wait(0.5):
            if any(f.is_alive() for f in feeders) or sum(r.records_in for r in stream.reports) < records:
                continue
            # Never in a batch: its start counts as activity, and a batch may take longer than the wait.
            if not stream.busy and time.monotonic() - stream.last_activity > stream.sweep_seconds + 2:
                stop.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return stream.run(max_seconds=max_seconds, stop=stop)
    finally:
        stop.set()


def gold_minutes(spark, table_id: str) -> Counter:
    return Counter({r.minute: r.events for r in spark.table(table_id).collect()})


def test_files_landing_today_reach_bronze_silver_and_minute_gold_with_dagster_told(lakehouse, tmp_path):
    """Files landing one after another reach every layer, each commit told to Dagster; silver, declared to be
    compacted past one small file, is compacted between two batches (the stream's own maintenance)."""
    landing = lakehouse.settings.local_path(lakehouse.settings.landing)
    instance = DagsterInstance.ephemeral()
    maintenance = dataclasses.replace(SHOP.maintenance, tables={"silver_events": TablePolicy(max_small_files=1)})
    stream = EventStream(SHOP, lakehouse, checkpoint=str(tmp_path / "checkpoint"), trigger_seconds=1,
                         sweep_seconds=SWEEP, instance=instance, maintain=maintenance_when_due(lakehouse, maintenance))
    lines_a = batch_of("a", 30, now() - dt.timedelta(minutes=20))
    # The newest event a few seconds old: the freshness asserted below (warn after 2 min) is measured minutes later.
    lines_b = batch_of("b", 20, now() - dt.timedelta(seconds=150)) + [lines_a[3], "{not json"]  # a re-delivery, a bad line
    late = batch_of("late", 10, dt.datetime.combine(OLD_DAY, dt.time(13, 0), dt.timezone.utc))
    land(landing, TODAY, "a.jsonl", lines_a)

    def more():
        time.sleep(12)
        land(landing, TODAY, "b.jsonl", lines_b)
        land(landing, "2999-01-01", "future.jsonl", batch_of("f", 3, now()))  # refused, never blocking
        land(landing, "not-a-day", "odd.jsonl", batch_of("o", 3, now()))
        time.sleep(6)
        land(landing, OLD_DAY, "late.jsonl", late)  # landed after the refused ones: still taken

    feeder = threading.Thread(target=more)
    feeder.start()
    reports = run_until_taken(stream, len(lines_a) + len(lines_b) + len(late), feeder)
    feeder.join()

    spark = lakehouse.spark
    assert sum(r.refused for r in reports) == 2
    assert sum(r.records_in for r in reports) == len(lines_a) + len(lines_b) + len(late)
    bronze = spark.table(lakehouse.table_id("bronze_events"))
    assert bronze.count() == len(lines_a) + len(lines_b) - 1 + len(late)
    assert spark.table(lakehouse.table_id("bronze_events_quarantine")).count() == 1
    silver = spark.table(lakehouse.table_id("silver_events"))
    assert silver.count() == silver.select("event_id").distinct().count() == 60
    assert gold_minutes(spark, lakehouse.table_id("gold_minute_activity")) == minute_oracle(lines_a + lines_b + late)

    # Silver was compacted between two batches, and holds each event once (above); bronze, of default thresholds,
    # was left alone.
    assert compacted_between_commits(lakehouse, "silver_events"), operations(lakehouse, "silver_events")
    observed = instance.fetch_observations(AssetKey("silver_events"), limit=10).records
    assert "compact" in {o.asset_observation.metadata["maintenance/action"].value for o in observed}
    assert "replace" not in operations(lakehouse, "bronze_events")

    # Every commit of the stream names its query and micro-batch.
    gold = lakehouse.iceberg_table("gold_minute_activity").current_snapshot()
    stamps = gold.summary.additional_properties
    assert stamps[QUERY_ID] and stamps[BATCH_ID] == str([r.batch_id for r in reports if r.minutes][-1])

    # Dagster saw the commits as materialisations of those assets and partitions, with the snapshot id.
    latest = instance.get_latest_materialization_event(AssetKey("gold_minute_activity"))
    assert latest is not None and latest.asset_materialization is not None
    assert latest.asset_materialization.metadata["snapshot_id"].value == gold.snapshot_id
    # Bronze's days are the folders the files landed in; silver's and gold's the events' (around midnight, two).
    days = {minute.date().isoformat() for minute in minute_oracle(lines_a + lines_b + late)}
    assert OLD_DAY.isoformat() in days
    for asset, want in (("bronze_events", {TODAY.isoformat(), OLD_DAY.isoformat()}), ("silver_events", days),
                        ("gold_minute_activity", days)):
        assert want <= instance.get_materialized_partitions(AssetKey(asset)), asset
    observed = instance.fetch_observations(AssetKey("bronze_events"), limit=10).records
    refused = [f["file"] for o in observed for f in o.asset_observation.metadata["refused_files"].value]
    assert sorted(Path(f).parent.name for f in refused) == ["date=2999-01-01", "date=not-a-day"]

    # Freshness on event time: the watermark is the newest event, the lag is small and measured.
    newest = max(dt.datetime.fromisoformat(json.loads(line)["event_ts"].replace("Z", "+00:00"))
                 for line in lines_a + lines_b if line.startswith("{\""))
    assert dt.datetime.fromisoformat(stamps["lakehouse.newest-event-time"]) == newest
    fresh = {r["table"]: r for r in freshness_rows(lakehouse.settings, SHOP)}
    minute = fresh["gold_minute_activity"]
    assert minute["status"] == "ok" and 0 < minute["event_lag_s"] < 300  # declared: fail after 5 min
    assert 0 <= minute["landing_to_visible_s"] < 120
    assert fresh["gold_daily_activity"]["status"] == "missing"  # the daily tables are the automation's, not the stream's
    check_key = AssetCheckKey(AssetKey("gold_minute_activity"), "event_time_freshness")
    assert check_key in instance.event_log_storage.get_latest_asset_check_execution_by_key([check_key])


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_lines_appended_to_a_file_the_stream_took_are_taken_once_by_its_sweep(lakehouse, tmp_path):
    """Spark's file source hands a path over once; the stream's sweep finds the file changed (its identity is not
    the ingest log's) and takes the appended lines, each once, through silver to gold."""
    landing = lakehouse.settings.local_path(lakehouse.settings.landing)
    stream = EventStream(SHOP, lakehouse, checkpoint=str(tmp_path / "checkpoint"), trigger_seconds=1,
                         sweep_seconds=SWEEP)
    first = batch_of("a", 6, now() - dt.timedelta(minutes=10))
    more = batch_of("m", 4, now() - dt.timedelta(minutes=3))
    land(landing, TODAY, "a.jsonl", first)
    path = landing / "events" / f"date={TODAY}" / "a.jsonl"

    def append():
        time.sleep(8)  # after the first batch took the file
        with path.open("a") as f:
            f.write("\n".join(more) + "\n")

    writer = threading.Thread(target=append)
    writer.start()
    reports = run_until_taken(stream, len(first) + len(more), writer, max_seconds=150)
    writer.join()

    spark = lakehouse.spark
    assert [r.records_in for r in reports if r.records_in] == [len(first), len(more)]
    assert any(str(r.batch_id).startswith("sweep-") and r.records_in == len(more) for r in reports)
    bronze = spark.table(lakehouse.table_id("bronze_events"))
    assert sorted(r.source_line for r in bronze.collect()) == list(range(1, 11))
    assert spark.table(lakehouse.table_id("silver_events")).count() == 10
    assert gold_minutes(spark, lakehouse.table_id("gold_minute_activity")) == minute_oracle(first + more)


def _stream_cli(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lakehouse_assets.cli", "stream", "--no-dagster",
                           "--trigger-seconds", "1", "--sweep-seconds", str(SWEEP), *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_a_stream_killed_in_a_micro_batch_restarts_and_holds_each_record_once(tmp_path):
    """Killed after its batch's bronze commit, then, restarted, killed again replaying that batch before gold's
    commit (bronze and silver done): the next start completes the batch, each record once in every table."""
    home = tmp_path / "lake"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")},
           "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PROJECT": str(SHOP_FILE), "LAKEHOUSE_SPARK_MASTER": "local[2]",
           "LAKEHOUSE_DRIVER_MEMORY": "1g", "LAKEHOUSE_PII_KEY": "stream-test-key-for-pseudonyms-in-tests"}
    landing = home / "landing"
    lines = batch_of("k1", 40, now() - dt.timedelta(minutes=30))
    more = batch_of("k2", 25, now() - dt.timedelta(minutes=8)) + [lines[0]]
    land(landing, TODAY, "one.jsonl", lines)
    land(landing, TODAY, "two.jsonl", more)

    settings = Settings.from_env(home=home, project=str(SHOP_FILE), namespace="lake")

    def rows(table: str) -> list[dict]:
        catalog = catalog_for(settings)
        if not catalog.table_exists((settings.namespace, table)):
            return []
        return catalog.load_table((settings.namespace, table)).scan().to_arrow().to_pylist()

    for point in ("stream:after-bronze", "gold_minute_activity:before-publish"):
        killed = _stream_cli({**env, "LAKEHOUSE_FAILPOINTS": point}, "--until-idle", "20")
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-3000:])
    # The second start replayed the batch as far as gold: silver holds it, gold nothing of it yet.
    assert len(rows("silver_events")) == 65 and rows("gold_minute_activity") == []
    restarted = _stream_cli(env, "--until-idle", "5", "--json")
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    bronze = rows("bronze_events")
    assert len(bronze) == len(lines) + len(more)
    assert Counter((r["source_file"], r["source_line"]) for r in bronze).most_common(1)[0][1] == 1
    silver = rows("silver_events")
    assert len(silver) == len({r["event_id"] for r in silver}) == 65
    gold = Counter({r["minute"].replace(tzinfo=None): r["events"] for r in rows("gold_minute_activity")})
    assert gold == minute_oracle(lines + more)


def _stamps(snapshot) -> dict:
    return snapshot.summary.additional_properties if snapshot.summary is not None else {}


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_a_backfill_of_an_old_day_and_the_stream_write_the_same_tables_and_both_succeed(lakehouse, tmp_path):
    landing = lakehouse.settings.local_path(lakehouse.settings.landing)
    old = batch_of("old", 40, dt.datetime.combine(OLD_DAY, dt.time(9, 0), dt.timezone.utc))
    land(landing, OLD_DAY, "old.jsonl", old)
    live = [batch_of(f"live{n}", 15, now() - dt.timedelta(minutes=10 - n)) for n in range(4)]
    stream = EventStream(SHOP, lakehouse, checkpoint=str(tmp_path / "checkpoint"), trigger_seconds=1,
                         sweep_seconds=SWEEP)
    stop = threading.Event()
    errors: list[BaseException] = []

    def feed():
        for n, lines in enumerate(live):
            land(landing, TODAY, f"live{n}.jsonl", lines)
            time.sleep(4)

    feeder = threading.Thread(target=feed)

    def run_stream():
        try:
            run_until_taken(stream, sum(len(lines) for lines in live), feeder, max_seconds=300, stop=stop)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run_stream), feeder]
    for t in threads:
        t.start()
    time.sleep(5)
    backfill_started = time.time()
    try:
        backfill = materialize(assets("bronze_events", "silver_events", "gold_minute_activity"),
                               resources={"lakehouse": lakehouse}, partition_key=OLD_DAY.isoformat(),
                               instance=DagsterInstance.ephemeral())
    except BaseException:
        stop.set()  # the stream stops with the test: its query name stays free for the next test
        raise
    finally:
        backfill_ended = time.time()
        for t in threads:
            t.join()
    assert backfill.success and not errors, errors
    mats = [e.event_specific_data.materialization for e in backfill.get_asset_materialization_events()]
    retries = {m.asset_key.to_user_string(): m.metadata["commit_retries"].value for m in mats}
    print(f"backfill commit retries: {retries}; stream retries: {sum(r.retries for r in stream.reports)}")

    # Side by side, not one after the other: the stream committed to these tables while the backfill ran. The
    # stream's commits are the snapshots stamped with its query id (Iceberg's own commit times), the backfill's
    # interval the run's wall clock from start to end.
    tables = ("bronze_events", "silver_events", "gold_minute_activity")
    snapshots = [s for name in tables for s in lakehouse.iceberg_table(name).snapshots()]
    streamed = sorted(s.timestamp_ms / 1000 for s in snapshots if QUERY_ID in _stamps(s))
    assert streamed
    assert streamed[0] < backfill_ended and backfill_started < streamed[-1], (
        f"no overlap: stream committed {streamed[0]:.1f}..{streamed[-1]:.1f}, "
        f"backfill ran {backfill_started:.1f}..{backfill_ended:.1f}")
    during = [t for t in streamed if backfill_started < t < backfill_ended]
    assert during, f"no stream commit while the backfill ran ({backfill_started:.1f}..{backfill_ended:.1f}): {streamed}"

    spark = lakehouse.spark
    everything = old + [line for lines in live for line in lines]
    assert spark.table(lakehouse.table_id("bronze_events")).count() == len(everything)
    silver = spark.table(lakehouse.table_id("silver_events"))
    assert silver.count() == silver.select("event_id").distinct().count() == len(everything)
    assert silver.where(F.to_date("event_ts") == F.lit(OLD_DAY)).count() == len(old)
    assert gold_minutes(spark, lakehouse.table_id("gold_minute_activity")) == minute_oracle(everything)


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_the_stream_reads_an_s3_landing_zone(spark, lake_settings, tmp_path):
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace=f"t_stream_s3_{uuid.uuid4().hex[:6]}",
                                  landing=f"s3://raw/{uuid.uuid4().hex[:8]}/landing")
    zone = landing_zone(lakehouse.settings)
    first, second = batch_of("s3a", 25, now() - dt.timedelta(minutes=6)), batch_of("s3b", 15, now() - dt.timedelta(minutes=2))
    for name, lines in (("a.jsonl", first), ("b.jsonl", second)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    zone.put(tmp_path / "a.jsonl", "events", TODAY, "a.jsonl")

    def later():
        time.sleep(10)
        zone.put(tmp_path / "b.jsonl", "events", TODAY, "b.jsonl")

    feeder = threading.Thread(target=later)
    feeder.start()
    stream = EventStream(SHOP, lakehouse, checkpoint=str(tmp_path / "checkpoint"), trigger_seconds=1,
                         sweep_seconds=SWEEP)
    reports = run_until_taken(stream, len(first) + len(second), feeder, max_seconds=180)
    feeder.join()

    assert sum(r.files for r in reports) == 2 and all(r.refused == 0 for r in reports)
    assert spark.table(lakehouse.table_id("bronze_events")).count() == 40
    assert gold_minutes(spark, lakehouse.table_id("gold_minute_activity")) == minute_oracle(first + second)


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_a_micro_batch_of_silver_is_audited_on_the_rows_it_wrote_and_nothing_fails_into_main(lakehouse):
    # A declared check no rule repeats: a price above 100 passes every rule and must fail the audit.
    source = dataclasses.replace(SHOP.events["events"], checks={"price": ValueCheck(max=100)})
    spark, at = lakehouse.spark, now() - dt.timedelta(minutes=5)
    spec = event_bronze_spec(source)
    lakehouse.table(spec).create()  # silver's commits carry bronze's landing watermark
    columns = [*source.fields, "source_file", "source_line", "landing_date", "ingested_at"]

    def bronze_rows(*events: tuple[str, str | None], kind: str | None = None):
        """A batch's bronze rows, as the stream hands them to silver."""
        return spark.createDataFrame([
            {"event_id": key, "user_id": "u1", "session_id": "s1",
             "event_type": kind or ("purchase" if price else "page_view"),
             "event_ts": at, "ip": None, "email": None, "properties": {}, "price": Decimal(price) if price else None,
             "source_file": "f.jsonl", "source_line": n, "landing_date": TODAY, "ingested_at": at}
            for n, (key, price) in enumerate(events, start=1)], T.StructType([spec.schema[c] for c in columns]))

    def silver_keys() -> set[str]:
        return {r.event_id for r in spark.table(lakehouse.table_id("silver_events")).collect()}

    first = take_new_events(lakehouse, source, bronze_rows(("k1", "10.00"), ("k2", None)), "run-1", "batch 1", {})
    assert first.published and first.silver is not None and first.silver.added_records == 2

    failing = take_new_events(lakehouse, source, bronze_rows(("k3", "20.00"), ("k4", "500.00")), "run-2", "batch 2", {})
    assert not failing.published
    [failed] = [c for c in failing.checks if not c.passed]
    assert "price" in (failed.description or "") and "less_than_or_equal_to(100" in (failed.description or "")
    assert silver_keys() == {"k1", "k2"}  # nothing of the failed batch reached main
    assert spark.table(lakehouse.table_id("silver_events_rejected")).count() == 0

    # A batch whose every key silver holds: its append writes nothing, and that empty write is audited and published.
    again = take_new_events(lakehouse, source, bronze_rows(("k1", "10.00")), "run-3", "batch 3", {})
    assert again.published and again.silver is not None and again.silver.added_records == 0
    assert all(c.passed for c in again.checks)
    assert silver_keys() == {"k1", "k2"}

    # A batch of an event a rule rejects (an event type the source does not declare): the rejected table gets it.
    unknown = take_new_events(lakehouse, source, bronze_rows(("k6", None), kind="teleport"), "run-4", "batch 4", {})
    assert unknown.published and unknown.rejected is not None and unknown.rejected.added_records == 1
    rejected = spark.table(lakehouse.table_id("silver_events_rejected")).collect()
    assert [(r.event_id, r.rule) for r in rejected] == [("k6", "unknown_event_type")]
    assert silver_keys() == {"k1", "k2"}
