"""The events slice end to end: landing files -> bronze (+ quarantine) -> silver -> gold.

One three-day single-run backfill is materialised once for the module; the tests
check its data against an independent reading of the landing files, its Iceberg
metadata, and its Dagster events.
"""

import datetime as dt
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import uuid
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, materialize

from examples.shop.events_generator import generate
from lakehouse_assets.bronze.reconcile import reconcile
from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.runtime.commit import RUN_ID
from lakehouse_assets.runtime.freshness import NEWEST_EVENT
from lakehouse_assets.runtime.pii import pii_key
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.settings import Settings

from .shop import ALL_ASSETS, SHOP, SHOP_FILE, SPECS

pytestmark = pytest.mark.slow  # a module-wide pipeline run

DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2), dt.date(2025, 1, 3)]
ASSETS = ALL_ASSETS
EVENT_TYPES = SHOP.events["events"].event_types
BOT = re.compile(r"(?i)(bot|crawler|spider|slurp|headless)")


def run(lakehouse, instance, start, end=None, raise_on_error=True):
    return materialize(
        ASSETS,
        resources={"lakehouse": lakehouse},
        instance=instance,
        raise_on_error=raise_on_error,
        tags={"dagster/asset_partition_range_start": start,
              "dagster/asset_partition_range_end": end or start},
    )


def materializations(result, asset):
    return [e.materialization for e in result.get_asset_materialization_events()
            if e.materialization.asset_key == AssetKey(asset)]


def expected_daily_activity(landing_files):
    """Gold recomputed in plain Python from the landing files (the independent answer)."""
    seen, bots, days = set(), set(), defaultdict(lambda: {"users": set(), "sessions": set(), "events": 0,
                                             "purchases": 0, "revenue": Decimal("0")})
    for path in landing_files:
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
                ts = dt.datetime.fromisoformat(e["event_ts"].replace("Z", "+00:00"))
                price = Decimal(str(e["price"])) if "price" in e else None
            except (ValueError, KeyError, TypeError, AttributeError, ArithmeticError):
                continue
            if not isinstance(e.get("properties"), dict) or not e.get("event_id") or e["event_id"] in seen:
                continue
            seen.add(e["event_id"])
            if BOT.search(e["properties"].get("user_agent", "")):
                bots.add(e["event_id"])
                continue
            day = days[ts.date()]
            day["users"].add(e["user_id"])
            day["sessions"].add(e["session_id"])
            day["events"] += 1
            if e["event_type"] == "purchase":
                day["purchases"] += 1
                day["revenue"] += price
    return {d: (len(v["users"]), len(v["sessions"]), v["events"], v["purchases"], v["revenue"])
            for d, v in days.items()}, len(seen), len(bots)


@pytest.fixture(scope="module")
def lake(spark, lake_settings, tmp_path_factory):
    landing = tmp_path_factory.mktemp("pipeline_landing")
    generated = generate(landing, DAYS, events_per_day=300, files_per_day=3, malformed_rate=0.03)
    lakehouse = LakehouseResource(
        home=str(lake_settings.home), spark_master=lake_settings.spark_master,
        namespace=f"t_pipeline_{uuid.uuid4().hex[:6]}", landing=str(landing),
    )
    instance = DagsterInstance.ephemeral()
    result = run(lakehouse, instance, "2025-01-01", "2025-01-03")
    return lakehouse, instance, result, generated


def test_a_three_day_backfill_is_one_run_that_commits_all_days_at_once(lake):
    lakehouse, instance, result, _ = lake
    assert result.success
    assert len(instance.get_runs()) == 1
    for asset in ("bronze_events", "bronze_events_quarantine", "silver_events", "gold_daily_activity"):
        mats = materializations(result, asset)
        assert sorted(m.partition for m in mats) == [d.isoformat() for d in DAYS], asset
        # One Iceberg commit for the whole range, stamped with the run id.
        snapshot_ids = {m.metadata["snapshot_id"].value for m in mats}
        assert len(snapshot_ids) == 1, asset
        snapshot = lakehouse.iceberg_table(asset).snapshot_by_id(snapshot_ids.pop())
        assert snapshot.summary[RUN_ID] == result.run_id
        assert snapshot.summary["dagster.partitions"] == "2025-01-01..2025-01-03"


def test_records_in_equal_rows_kept_plus_rows_quarantined(lake):
    lakehouse, _, result, generated = lake
    reconciled = reconcile(lakehouse.settings, SHOP, "events")
    assert [r["landing_date"] for r in reconciled] == [d.isoformat() for d in DAYS]
    for row, day in zip(reconciled, generated):
        assert row["records_in"] == day.lines
        assert row["quarantined"] == sum(day.malformed.values()) > 0
        assert row["kept"] == day.events + day.duplicates
        assert row["balanced"]
    meta = materializations(result, "bronze_events")[0].metadata
    assert meta["records_in"].value == sum(d.lines for d in generated)
    assert meta["records_in"].value == meta["records_kept"].value + meta["records_quarantined"].value


def test_silver_holds_each_event_once_and_gold_matches_an_independent_count(lake):
    lakehouse, _, _, generated = lake
    spark = lakehouse.spark
    silver = spark.table(lakehouse.table_id("silver_events"))
    files = [f for day in generated for f in day.files]
    expected_gold, distinct_events, bots = expected_daily_activity(files)
    rejected = spark.table(lakehouse.table_id("silver_events_rejected"))

    assert silver.count() == silver.select("event_id").distinct().count() == distinct_events - bots
    assert distinct_events == sum(d.events for d in generated)
    # Bronze, deduplicated = silver + rejected; here the rejects are the crawlers' sessions.
    assert {r.rule: r["count"] for r in rejected.groupBy("rule").count().collect()} == {"bot_user_agent": bots}
    assert bots > 0
    assert {r.event_type for r in silver.select("event_type").distinct().collect()} <= set(EVENT_TYPES)

    gold = {
        r.activity_date: (r.active_users, r.sessions, r.events, r.purchases, r.revenue)
        for r in spark.table(lakehouse.table_id("gold_daily_activity")).collect()
    }
    assert gold == expected_gold
    assert all(row[3] > 0 for row in gold.values()), "the sample has purchases every day"


def test_materialization_metadata_pins_a_snapshot_pyiceberg_can_read(lake):
    lakehouse, _, result, _ = lake
    mat = materializations(result, "silver_events")[0]
    table = lakehouse.iceberg_table("silver_events")
    snapshot_id = mat.metadata["snapshot_id"].value
    pinned = table.scan(snapshot_id=snapshot_id).to_arrow()
    assert pinned.num_rows == mat.metadata["dagster/row_count"].value == mat.metadata["rows_written"].value
    assert mat.metadata["data_files_added"].value >= 1
    assert mat.metadata["table"].value == lakehouse.table_id("silver_events")


def test_rematerialising_a_partition_changes_no_row_count(lake):
    lakehouse, instance, first, _ = lake
    tables = ("bronze_events", "bronze_events_quarantine", "silver_events", "gold_daily_activity")
    before = {t: lakehouse.iceberg_table(t).scan().count() for t in tables}
    snapshots = {t: lakehouse.iceberg_table(t).current_snapshot().snapshot_id for t in tables}

    again = run(lakehouse, instance, "2025-01-02")
    assert again.success
    after = {t: lakehouse.iceberg_table(t).scan().count() for t in tables}
    assert after == before
    # Bronze took every file of the day already: nothing to append, no new snapshot.
    bronze = materializations(again, "bronze_events")[0].metadata
    assert bronze["landing_files_taken"].value == 0 and bronze["landing_files_listed"].value == 3
    assert bronze["snapshot_id"].value == snapshots["bronze_events"]
    # Silver and gold recompute the day and replace exactly it.
    for t in ("silver_events", "gold_daily_activity"):
        assert lakehouse.iceberg_table(t).current_snapshot().snapshot_id != snapshots[t], t
        meta = materializations(again, t)[0].metadata
        assert meta["rows_written"].value == meta["rows_replaced"].value > 0, t
        assert meta["partition_range"].value == "2025-01-02..2025-01-02"


def test_checks_pass_and_personal_data_is_pseudonymised(lake):
    lakehouse, _, result, _ = lake
    evaluations = result.get_asset_check_evaluations()
    # Freshness on event time is about the clock: the sample days lie in the past, so those checks fail, saying by how much.
    stale = [c for c in evaluations if c.check_name == "event_time_freshness"]
    assert stale and not any(c.passed for c in stale)
    assert all(c.metadata["event_lag_s"].value > 86_400 for c in stale)
    checks = [c for c in evaluations if c.check_name != "event_time_freshness"]
    assert {c.asset_key.to_user_string() for c in checks} >= {"silver_events", "silver_orders", "silver_orders_history"}
    assert all(c.passed for c in checks)
    [check] = [c for c in checks if c.asset_key == AssetKey("silver_events")]
    assert check.passed and check.metadata["audit_branch"].value.startswith("audit_")
    silver = lakehouse.spark.table(lakehouse.table_id("silver_events"))
    assert "ip" not in silver.columns and "email" not in silver.columns
    key = pii_key(lakehouse.settings)
    bronze = {r.event_id: r for r in lakehouse.spark.table(lakehouse.table_id("bronze_events")).collect()}
    for row in silver.where("email_hash IS NOT NULL").limit(5).collect():
        source = bronze[row.event_id]
        assert row.email_hash == hmac.new(key, source.email.encode(), hashlib.sha256).hexdigest()
        assert row.ip_hash == hmac.new(key, source.ip.encode(), hashlib.sha256).hexdigest()
    # No audit branch is left behind by a write that passed (tags pinned by ML runs are expected).
    refs = lakehouse.iceberg_table("silver_events").metadata.refs
    assert [name for name, ref in refs.items() if ref.snapshot_ref_type == "branch"] == ["main"]


def _tables_as_read(settings, namespace):
    """Every table's rows (less which run wrote them and when) and its event-time watermark, via pyiceberg."""
    catalog = catalog_for(settings)
    out = {}
    for name in SPECS:
        if not catalog.table_exists((namespace, name)):
            continue
        table = catalog.load_table((namespace, name))
        rows = [{k: sorted(v, key=repr) if isinstance(v, list) else v  # a map's entries come in any order
                 for k, v in r.items() if k not in ("run_id", "ingested_at", "computed_at")}
                for r in table.scan().to_arrow().to_pylist()]
        snapshot = table.current_snapshot()
        props = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
        out[name] = (sorted(map(repr, rows)), props.get(NEWEST_EVENT))
    return out


@pytest.mark.parametrize("zone", ["America/Los_Angeles", pytest.param("Asia/Tokyo", marks=pytest.mark.soak)])
def test_the_hosts_time_zone_changes_no_table_and_no_watermark(lake, lake_settings, tmp_path, zone):
    """The same backfill, run by `dagster asset materialize` on a host in another zone (behind UTC across a
    change of daylight saving time; ahead of it in `make soak`), gives the same rows in every table and the same
    event-time watermarks as the run in UTC."""
    lakehouse, _, _, _ = lake
    home = tmp_path / zone.replace("/", "-")
    home.mkdir()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_"))},
           "TZ": zone, "LAKEHOUSE_HOME": str(home / "lake"), "LAKEHOUSE_PROJECT": str(SHOP_FILE),
           "LAKEHOUSE_LANDING": lakehouse.landing, "LAKEHOUSE_NAMESPACE": lakehouse.namespace,
           "LAKEHOUSE_PII_KEY": pii_key(lakehouse.settings).decode(), "LAKEHOUSE_SPARK_MASTER": "local[1]",
           "LAKEHOUSE_DRIVER_MEMORY": "1g", "DAGSTER_HOME": str(home)}
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with open(home / "run.log", "w") as out:
        run = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster")), "asset", "materialize", "-m",
             "lakehouse_assets.definitions", "--select", "*", "--partition-range", "2025-01-01...2025-01-03"],
            env=env, cwd=home, stdout=out, stderr=subprocess.STDOUT)
    try:
        here = _tables_as_read(lakehouse.settings, lakehouse.namespace)
        assert len(here) > 10
        assert run.wait(timeout=900) == 0, (home / "run.log").read_text()[-4000:]
        there = _tables_as_read(Settings.from_env(home=home / "lake", project=str(SHOP_FILE),
                                                  namespace=lakehouse.namespace), lakehouse.namespace)
        assert set(there) == set(here)
        for name in here:
            assert there[name][1] == here[name][1], f"{name}: the event-time watermark differs under TZ={zone}"
            assert set(there[name][0]) ^ set(here[name][0]) == set(), f"{name}: rows differ under TZ={zone}"
            assert there[name][0] == here[name][0], f"{name}: row counts differ under TZ={zone}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
