"""ML features are point-in-time correct, and a pinned training set is rebuilt exactly after later changes."""

import datetime as dt
import hashlib
import uuid

import pytest
from dagster import DagsterInstance, materialize

from examples.shop.events_generator import generate
from lakehouse_assets.ml.features import canonical_events, day_end, features_as_of
from lakehouse_assets.pinning import PINNED, pinned, read_pinned
from lakehouse_assets.runtime.resource import LakehouseResource

from ..shop import SHOP, assets

pytestmark = pytest.mark.slow  # a module-wide pipeline run

DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2), dt.date(2025, 1, 3)]
ASSETS = assets("bronze_events", "silver_events", "ml_user_features", "ml_training_set")


def run(lakehouse, instance, first, last):
    result = materialize(ASSETS, resources={"lakehouse": lakehouse}, instance=instance,
                         tags={"dagster/asset_partition_range_start": first,
                               "dagster/asset_partition_range_end": last})
    assert result.success
    return result


def _plain(value):
    # Arrow gives UTC-aware datetimes, Spark naive UTC ones (the session and the process run in UTC).
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def fingerprint(rows) -> str:
    """Order-independent hash of rows (lists of dicts)."""
    lines = sorted(repr(sorted((k, _plain(v)) for k, v in r.items())) for r in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


@pytest.fixture(scope="module")
def ml(spark, lake_settings, tmp_path_factory):
    landing = tmp_path_factory.mktemp("ml_landing")
    generate(landing, DAYS[:2], events_per_day=400, users=40)
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace=f"t_ml_{uuid.uuid4().hex[:6]}", landing=str(landing))
    instance = DagsterInstance.ephemeral()
    first = run(lakehouse, instance, "2025-01-01", "2025-01-02")
    return lakehouse, instance, first, landing


def test_a_feature_row_as_of_t_ignores_an_event_one_second_later(spark):
    t = dt.datetime(2025, 1, 1, 12, 0, 0)
    events = spark.createDataFrame(
        [("u1", "s1", "purchase", t - dt.timedelta(days=2), 10.0),
         ("u1", "s1", "page_view", t, None),
         ("u1", "s2", "purchase", t + dt.timedelta(seconds=1), 99.0),
         ("u1", "s0", "page_view", t - dt.timedelta(days=31), None)],
        "user_id string, session_id string, event_type string, event_ts timestamp, price double",
    )
    points = spark.createDataFrame([("u1", t), ("u1", t + dt.timedelta(seconds=1))], "user_id string, as_of_ts timestamp")
    rows = {r.as_of_ts: r for r in features_as_of(canonical_events(events, SHOP.gold), points).collect()}
    at_t = rows[t]
    assert (at_t.events_1d, at_t.events_7d, at_t.events_30d) == (1, 2, 2)
    assert (at_t.purchases_30d, float(at_t.spend_30d), at_t.seconds_since_last_event) == (1, 10.0, 0)
    later = rows[t + dt.timedelta(seconds=1)]
    assert (later.purchases_30d, float(later.spend_30d), later.events_1d) == (2, 109.0, 2)


def test_the_daily_feature_table_ignores_events_after_the_end_of_its_day(ml):
    lakehouse, _, _, _ = ml
    spark = lakehouse.spark
    features = spark.table(lakehouse.table_id("ml_user_features")).where("as_of_date = DATE'2025-01-01'")
    silver = spark.table(lakehouse.table_id("silver_events"))
    # Independent recount: events up to the last instant of day 1, nothing later (day 2 is in the table).
    end = day_end(DAYS[0]).replace(tzinfo=None)
    expected = {r.user_id: r["count"] for r in silver.where(silver.event_ts <= end).groupBy("user_id").count().collect()}
    got = {r.user_id: r.events_30d for r in features.collect()}
    assert got == expected
    assert silver.where(silver.event_ts > end).count() > 0, "later events are in the table, and were not used"
    assert {r.as_of_ts for r in features.collect()} == {end}


def test_training_rows_use_the_newest_features_at_or_before_the_observation(ml):
    lakehouse, _, _, _ = ml
    rows = lakehouse.spark.table(lakehouse.table_id("ml_training_set")).collect()
    assert rows and any(r.label_purchased for r in rows) and not all(r.label_purchased for r in rows)
    for r in rows:
        if r.features_as_of is not None:
            assert r.features_as_of <= r.observed_at
    day2 = [r for r in rows if r.observed_at.date() == DAYS[1]]
    assert day2 and all(r.features_as_of in (None, day_end(DAYS[0]).replace(tzinfo=None)) for r in day2)


def test_a_pinned_training_set_is_rebuilt_identically_after_later_writes_and_deletes(ml):
    lakehouse, instance, first, landing = ml
    pins = pinned("ml_training_set", instance=instance)
    assert pins["run_id"] == first.run_id
    meta = first.asset_materializations_for_node("ml_training_set")[0].metadata[PINNED].value
    assert set(meta) == {lakehouse.table_id(t) for t in ("silver_events", "ml_user_features", "ml_training_set")}
    original = lakehouse.spark.table(lakehouse.table_id("ml_training_set")).collect()
    expected = fingerprint([r.asDict() for r in original])

    # Later: a new day lands and is processed, and upstream rows are deleted and changed.
    generate(landing, DAYS[2:], events_per_day=400, users=40)
    run(lakehouse, instance, "2025-01-01", "2025-01-03")
    spark = lakehouse.spark
    spark.sql(f"DELETE FROM {lakehouse.table_id('ml_training_set')} WHERE label_purchased")
    spark.sql(f"DELETE FROM {lakehouse.table_id('silver_events')} WHERE event_type = 'purchase'")
    assert fingerprint([r.asDict() for r in spark.table(lakehouse.table_id("ml_training_set")).collect()]) != expected

    # Pinned to the first run: the same rows, without Spark and with Spark.
    arrow = read_pinned("ml_training_set", run_id=first.run_id, instance=instance, settings=lakehouse.settings)
    assert fingerprint(arrow.to_pylist()) == expected
    df = read_pinned("ml_training_set", run_id=first.run_id, instance=instance, as_="spark", spark=spark)
    assert fingerprint([r.asDict() for r in df.collect()]) == expected
    day = read_pinned("ml_training_set", run_id=first.run_id, partition="2025-01-02", instance=instance,
                      settings=lakehouse.settings, as_="pandas")
    assert len(day) == sum(1 for r in original if r.observed_at.date() == DAYS[1]) > 0

    # The pinned snapshots are tagged, so snapshot expiry keeps them for the declared pin retention (90 days):
    # then expiry drops the tag, and the snapshot's files can be reclaimed.
    for table_id, pin in meta.items():
        refs = lakehouse.catalog.load_table(tuple(table_id.split(".")[1:])).metadata.refs
        assert refs[pin["tag"]].snapshot_id == pin["snapshot_id"] and refs[pin["tag"]].snapshot_ref_type == "tag"
        assert refs[pin["tag"]].max_ref_age_ms == SHOP.maintenance.pin_retention.total_seconds() * 1000 == 90 * 86_400_000


def test_a_session_after_a_look_back_without_events_has_no_features(spark, lake_settings, tmp_path):
    # The same users on two days 45 days apart: on the second, their newest feature rows describe a look-back
    # (30 days) that ended two weeks earlier, in which they had no events. Those rows are not theirs as of then.
    early, late = dt.date(2025, 1, 1), dt.date(2025, 2, 15)
    generate(tmp_path, [early], events_per_day=200, users=20)
    generate(tmp_path, [late], events_per_day=200, users=20)
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace=f"t_ml_{uuid.uuid4().hex[:6]}", landing=str(tmp_path))
    instance = DagsterInstance.ephemeral()
    for day in (early, late):
        run(lakehouse, instance, day.isoformat(), day.isoformat())
    features = spark.table(lakehouse.table_id("ml_user_features"))
    stale = {r.user_id for r in features.where(features.as_of_date == early).collect()}
    training = spark.table(lakehouse.table_id("ml_training_set"))
    later = training.where(training.observed_at >= dt.datetime(2025, 2, 15)).collect()
    assert later and {r.user_id for r in later} & stale, "users with feature rows from 45 days before"
    assert all(r.features_as_of is None and r.events_30d is None for r in later)
    first = training.where(training.observed_at < dt.datetime(2025, 1, 2)).collect()
    assert first and all(r.features_as_of is None or r.features_as_of <= r.observed_at for r in first)
