"""ML features are point-in-time correct, and a pinned training set is rebuilt exactly after later changes."""

import datetime as dt
import hashlib
import uuid
from decimal import Decimal

import pytest
from dagster import DagsterInstance, materialize

from examples.shop.events_generator import generate
from lakehouse_assets.ml.features import canonical_events, day_end, features_as_of
from lakehouse_assets.ml.pinning import PINNED, pinned, read_pinned
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


FEATURES = ("events_1d", "events_7d", "events_30d", "sessions_7d", "purchases_7d", "purchases_30d", "spend_30d",
            "seconds_since_last_event")


def oracle_features(events, user, as_of):
    """A user's features as of `as_of`, recomputed in plain Python from (user, session, type, ts, price) events:
    those with as_of - 30 days < ts <= as_of. None when the user has none (no feature row)."""
    mine = [e for e in events if e[0] == user and as_of - dt.timedelta(days=30) < e[3] <= as_of]
    if not mine:
        return None

    def within(days):
        return [e for e in mine if e[3] > as_of - dt.timedelta(days=days)]

    def purchases(rows):
        return [e for e in rows if e[2] == "purchase"]

    return {
        "events_1d": len(within(1)), "events_7d": len(within(7)), "events_30d": len(mine),
        "sessions_7d": len({e[1] for e in within(7) if e[1] is not None}),
        "purchases_7d": len(purchases(within(7))), "purchases_30d": len(purchases(mine)),
        "spend_30d": sum((Decimal(str(e[4])) for e in purchases(mine) if e[4] is not None),
                         Decimal(0)).quantize(Decimal("0.01")),
        "seconds_since_last_event": (as_of - max(e[3] for e in mine)) // dt.timedelta(seconds=1),
    }


def oracle_training_set(events, feature_days, first, last):
    """ml_training_set's rows for days first..last, recomputed in plain Python: one per session (session_id, user_id)
    that starts in those days (its events read a day past each edge), labelled by whether it has a purchase, with
    the user's features as of the newest feature day's last instant at or before the session start. A feature day
    exists for a user when they had events in its look-back; a session with none at or before its start has no
    features (None), and so has every feature column."""
    start = dt.datetime.combine(first, dt.time())
    end = dt.datetime.combine(last + dt.timedelta(days=1), dt.time())
    sessions = {}
    for user, session, kind, ts, _ in events:
        if session is not None and start - dt.timedelta(days=1) <= ts < end + dt.timedelta(days=1):
            observed, label = sessions.get((session, user), (ts, False))
            sessions[(session, user)] = (min(observed, ts), label or kind == "purchase")
    ends = sorted(day_end(d).replace(tzinfo=None) for d in feature_days)
    rows = {}
    for (session, user), (observed, label) in sessions.items():
        if not start <= observed < end:
            continue
        rows[(session, user)] = row = {"session_id": session, "user_id": user, "observed_at": observed,
                                       "label_purchased": label, "features_as_of": None, **dict.fromkeys(FEATURES)}
        for as_of in ends:
            if as_of <= observed and (features := oracle_features(events, user, as_of)) is not None:
                row.update(features_as_of=as_of, **features)
    return rows


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
         ("u1", "s0", "page_view", t - dt.timedelta(days=31), None),
         ("u2", "s9", "purchase", t - dt.timedelta(days=31), 5.0)],
        "user_id string, session_id string, event_type string, event_ts timestamp, price double",
    )
    points = spark.createDataFrame([("u1", t), ("u1", t + dt.timedelta(seconds=1)), ("u2", t)],
                                   "user_id string, as_of_ts timestamp")
    rows = {r.as_of_ts: r for r in features_as_of(canonical_events(events, SHOP.gold), points).collect()
            if r.user_id == "u1"}
    at_t = rows[t]
    assert (at_t.events_1d, at_t.events_7d, at_t.events_30d) == (1, 2, 2)
    assert (at_t.purchases_30d, float(at_t.spend_30d), at_t.seconds_since_last_event) == (1, 10.0, 0)
    later = rows[t + dt.timedelta(seconds=1)]
    assert (later.purchases_30d, float(later.spend_30d), later.events_1d) == (2, 109.0, 2)
    # Every column of every row, and no row for a user whose only event is older than the look-back.
    inputs = [(r.user_id, r.session_id, r.event_type, r.event_ts, r.price) for r in events.collect()]
    expected = {(u, ts): oracle_features(inputs, u, ts) for u, ts in points.collect()}
    assert expected[("u2", t)] is None
    got = {(r.user_id, r.as_of_ts): {f: r[f] for f in FEATURES}
           for r in features_as_of(canonical_events(events, SHOP.gold), points).collect()}
    assert got == {k: v for k, v in expected.items() if v is not None}


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
    spark = lakehouse.spark
    rows = spark.table(lakehouse.table_id("ml_training_set")).collect()
    assert rows and any(r.label_purchased for r in rows) and not all(r.label_purchased for r in rows)
    # Every row, every column, against the oracle over the pipeline's input events (silver, which the run wrote).
    events = [(r.user_id, r.session_id, r.event_type, r.event_ts, r.price) for r in spark.table(
        lakehouse.table_id("silver_events")).select("user_id", "session_id", "event_type", "event_ts", "price").collect()]
    expected = oracle_training_set(events, DAYS[:2], DAYS[0], DAYS[1])
    got = {(r.session_id, r.user_id): r.asDict() for r in rows}
    assert len(got) == len(rows)
    assert got.keys() == expected.keys()
    assert got == expected
    # Not vacuous: day 1's sessions have no earlier feature row (None, legitimately); day 2's mostly use day 1's.
    day1 = [r for r in expected.values() if r["observed_at"].date() == DAYS[0]]
    day2 = [r for r in expected.values() if r["observed_at"].date() == DAYS[1]]
    assert day1 and all(r["features_as_of"] is None for r in day1)
    with_features = [r for r in day2 if r["features_as_of"] is not None]
    assert with_features and all(r["features_as_of"] == day_end(DAYS[0]).replace(tzinfo=None) for r in with_features)
    assert any(r["events_30d"] > 1 and r["purchases_30d"] > 0 for r in with_features)


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
