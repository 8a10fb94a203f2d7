"""Point-in-time correct ML features and a training set that can be rebuilt exactly.

`features_as_of` computes a user's features at any instant T from the events
with event_ts <= T only: a feature row never sees the future, even when the
table already holds it. `ml_user_features` stores them once a day, as of the last
instant of the day; `ml_training_set` takes every session start as an
observation, labels it with whether the session ended in a purchase, and joins
the newest feature row as of that instant (an as-of join, never a later one).

Both assets read their inputs at a snapshot fixed before reading and record the
snapshot ids they read and wrote (`pinned_snapshots` in the materialisation),
and tag those snapshots so that expiry cannot remove them: `lakehouse_assets.ml.pinning`
reads the data back exactly, with or without Spark.
"""

import datetime as dt
from collections.abc import Callable

from dagster import (
    AssetDep,
    AssetExecutionContext,
    AssetsDefinition,
    MaterializeResult,
    MetadataValue,
    PartitionsDefinition,
    asset,
)
from pyspark.sql import DataFrame
from pyspark.sql import Window as W
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..automation.conditions import CHAIN_REFRESH, reads_days
from ..automation.partitions import SINGLE_RUN
from ..gold.bi import EventColumns
from ..project import Gold
from ..project.model import TRAINING_SET, USER_FEATURES
from ..runtime.commit import Window, materialize_with_retries, publish, stage
from ..runtime.resource import LakehouseResource
from ..runtime.spark import local_frame
from ..tables.registry import TableSpec, col
from ..times import UTC
from .pinning import PINNED, pin_snapshots

LOOKBACK_DAYS = 30

FEATURE_COLUMNS = [
    col("events_1d", T.LongType(), False), col("events_7d", T.LongType(), False),
    col("events_30d", T.LongType(), False), col("sessions_7d", T.LongType(), False),
    col("purchases_7d", T.LongType(), False), col("purchases_30d", T.LongType(), False),
    col("spend_30d", T.DecimalType(18, 2), False),
    col("seconds_since_last_event", T.LongType(), False),
]

ML_USER_FEATURES = TableSpec(
    name=USER_FEATURES,
    layer="ml",
    description="Per user, as of the last instant of each day: activity, purchases and spend over 1/7/30 days.",
    schema=T.StructType([
        col("user_id", T.StringType(), False),
        col("as_of_ts", T.TimestampType(), False, "features use events with event_ts <= as_of_ts only"),
        col("as_of_date", T.DateType(), False),
        *FEATURE_COLUMNS,
    ]),
    partitioned_by=("as_of_date",),
)

ML_TRAINING_SET = TableSpec(
    name=TRAINING_SET,
    layer="ml",
    description="One row per session start: label (did the session purchase) and the user's features as of then.",
    schema=T.StructType([
        col("session_id", T.StringType(), False),
        col("user_id", T.StringType(), False),
        col("observed_at", T.TimestampType(), False, "session start: the label's time"),
        col("label_purchased", T.BooleanType(), False),
        col("features_as_of", T.TimestampType(), comment="as_of_ts of the feature row joined (<= observed_at)"),
        *[col(f.name, f.dataType) for f in FEATURE_COLUMNS],
    ]),
    partitioned_by=("days(observed_at)",),
)


def canonical_events(events: DataFrame, gold: Gold) -> DataFrame:
    """Silver events in the features' terms: user_id, session_id, event_ts, is_purchase, amount."""
    c = EventColumns(gold)
    return c.with_sessions(events).select(
        F.col(c.user).cast("string").alias("user_id"), F.col("_session").alias("session_id"),
        F.col(c.ts).alias("event_ts"), c.purchase().alias("is_purchase"),
        (F.col(gold.amount) if gold.amount else F.lit(0)).cast("decimal(18,2)").alias("amount"),
    )


def features_as_of(events: DataFrame, points: DataFrame) -> DataFrame:
    """Features for each (user_id, as_of_ts) in `points`, from canonical events with event_ts <= as_of_ts.

    Users without events in the look-back get no row (the caller decides the default).
    """
    e = events.select("user_id", "session_id", "is_purchase", "event_ts", "amount")
    joined = points.join(e, "user_id").where(
        (F.col("event_ts") <= F.col("as_of_ts"))
        & (F.col("event_ts") > F.col("as_of_ts") - F.expr(f"INTERVAL {LOOKBACK_DAYS} DAYS"))
    )

    def within(days: int):
        return F.col("event_ts") > F.col("as_of_ts") - F.expr(f"INTERVAL {days} DAYS")

    purchase = F.col("is_purchase")
    return joined.groupBy("user_id", "as_of_ts").agg(
        F.count(F.when(within(1), True)).alias("events_1d"),
        F.count(F.when(within(7), True)).alias("events_7d"),
        F.count(F.lit(1)).alias("events_30d"),
        F.countDistinct(F.when(within(7), F.col("session_id"))).alias("sessions_7d"),
        F.count(F.when(within(7) & purchase, True)).alias("purchases_7d"),
        F.count(F.when(purchase, True)).alias("purchases_30d"),
        F.coalesce(F.sum(F.when(purchase, F.col("amount"))), F.lit(0)).cast("decimal(18,2)").alias("spend_30d"),
        F.floor((F.unix_micros(F.first("as_of_ts")) - F.unix_micros(F.max("event_ts"))) / 1_000_000).cast("long")
        .alias("seconds_since_last_event"),
    )


def day_end(day: dt.date) -> dt.datetime:
    """The last instant of a UTC day (timestamps are microsecond precision)."""
    return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), UTC) - dt.timedelta(microseconds=1)


def _read_events(lakehouse: LakehouseResource, silver: TableSpec, gold: Gold,
                 reader: str) -> tuple[DataFrame, dict[str, int]]:
    """Silver's events at the snapshot this read pins, and that pin."""
    table = lakehouse.table(silver)
    df, snapshot_id = table.read_pinned(reader)
    return canonical_events(df, gold), {table.id: snapshot_id}


def _publish_pinned(lakehouse: LakehouseResource, run_id: str, spec: TableSpec, frame: DataFrame, window: Window,
                    read: dict[str, int], pin_retention: dt.timedelta | None) -> MaterializeResult:
    """The window's rows published, and the snapshots read and written pinned (tags) and recorded."""
    table = lakehouse.table(spec)
    result = publish(stage(table, run_id, table.name, window.label, scope=window).overwrite(frame, window))
    assert result.snapshot_id is not None  # a published write has a head
    pins = pin_snapshots(lakehouse, run_id, table.name, {**read, table.id: result.snapshot_id}, pin_retention)
    return MaterializeResult(metadata={**result.metadata(), PINNED: MetadataValue.json(pins)})


def user_features_frame(spark, events: DataFrame, window: Window) -> DataFrame:
    """Each user's features as of the end of each day of the window, over the look-back before it."""
    days = [window.start + dt.timedelta(days=n) for n in range((window.end - window.start).days)]
    ends = local_frame(spark, [(day_end(d), d) for d in days], "as_of_ts timestamp, as_of_date date")
    lookback = events.where(
        (F.col("event_ts") > F.lit(day_end(days[0]) - dt.timedelta(days=LOOKBACK_DAYS)))
        & (F.col("event_ts") <= F.lit(day_end(days[-1])))
    )
    points = lookback.select("user_id").distinct().crossJoin(ends)
    return features_as_of(lookback, points.select("user_id", "as_of_ts")).join(
        ends, "as_of_ts").select(*ML_USER_FEATURES.column_names)


def training_frame(events: DataFrame, features: DataFrame, window: Window) -> DataFrame:
    """The window's sessions with their label and the newest features computed at or before each started."""
    # A feature row describes the look-back before its day; one older than the look-back before the window
    # describes none of a session's look-back (its user had no events in it, so has no newer row): such a
    # session has no features. The join reads the look-back's days of features, not all of them.
    first_day = (window.start - dt.timedelta(days=LOOKBACK_DAYS)).date()
    features = features.where(F.col("as_of_date") >= F.lit(first_day))
    # Sessions are read a day past each edge: a session belongs to the day it starts.
    near = events.where(
        (F.col("event_ts") >= F.lit(window.start - dt.timedelta(days=1)))
        & (F.col("event_ts") < F.lit(window.end + dt.timedelta(days=1)))
    )
    sessions = near.where(F.col("session_id").isNotNull()).groupBy("session_id", "user_id").agg(
        F.min("event_ts").alias("observed_at"),
        F.max("is_purchase").alias("label_purchased"),
    ).where(window.condition)
    # As-of join: the newest feature row computed at or before the observation.
    candidates = sessions.join(features.withColumnRenamed("as_of_ts", "features_as_of"), "user_id", "left").where(
        F.col("features_as_of").isNull() | (F.col("features_as_of") <= F.col("observed_at")))
    newest = W.partitionBy("session_id", "user_id").orderBy(F.col("features_as_of").desc_nulls_last())
    training = candidates.withColumn("_n", F.row_number().over(newest)).where("_n = 1")
    # A session whose user has only later feature rows keeps its label, with no features.
    training = sessions.join(training.select("session_id", "user_id", "features_as_of",
                                             *(f.name for f in FEATURE_COLUMNS)),
                             ["session_id", "user_id"], "left")
    return training.select(*ML_TRAINING_SET.column_names)


# What an ML asset builds from silver's events and its window: its rows, and the snapshots of any other
# table it read (table id -> snapshot id), to pin beside silver's.
RowsOf = Callable[[LakehouseResource, DataFrame, Window], tuple[DataFrame, dict[str, int]]]


def _user_features_rows(lakehouse: LakehouseResource, events: DataFrame,
                        window: Window) -> tuple[DataFrame, dict[str, int]]:
    return user_features_frame(lakehouse.spark, events, window), {}


def _training_rows(lakehouse: LakehouseResource, events: DataFrame,
                   window: Window) -> tuple[DataFrame, dict[str, int]]:
    """The training rows, joined with the feature table at the snapshot this read pins."""
    feature_table = lakehouse.table(ML_USER_FEATURES)
    features, features_snapshot = feature_table.read_pinned(ML_TRAINING_SET.name)
    return training_frame(events, features, window), {feature_table.id: features_snapshot}


def _ml_asset(spec: TableSpec, deps: list[AssetDep], window_column: str, as_date: bool, rows_of: RowsOf,
              gold: Gold, silver: TableSpec, partitions: PartitionsDefinition,
              pin_retention: dt.timedelta | None) -> AssetsDefinition:
    """The asset writing `spec` one window of days at a time (on `window_column`, a date column when `as_date`):
    silver's events and whatever `rows_of` reads are read pinned, and the rows it makes are published pinned."""
    @asset(
        name=spec.name,
        description=spec.description,
        group_name="ml",
        kinds={"spark", "iceberg"},
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        deps=deps,
        automation_condition=CHAIN_REFRESH,
    )
    def ml_table(context: AssetExecutionContext, lakehouse: LakehouseResource) -> MaterializeResult:
        def attempt() -> MaterializeResult:
            start, end = context.partition_time_window
            window = Window.of_days(window_column, start, end, as_date=as_date)
            events, read = _read_events(lakehouse, silver, gold, spec.name)
            rows, also_read = rows_of(lakehouse, events, window)
            return _publish_pinned(lakehouse, context.run_id, spec, rows, window, {**read, **also_read}, pin_retention)

        return materialize_with_retries(attempt, spec.name, context.log.info)

    return ml_table


def ml_assets(gold: Gold, silver: TableSpec, partitions: PartitionsDefinition,
              pin_retention: dt.timedelta | None = None) -> list[AssetsDefinition]:
    """Features and training set over the gold event source (none when the project has no user field)."""
    if not gold.ml_tables:
        return []
    return [
        _ml_asset(ML_USER_FEATURES,
                  # Day D's features look back over silver's days D-29..D: late data on any of them refreshes D.
                  [AssetDep(silver.name, partition_mapping=reads_days(LOOKBACK_DAYS - 1, 0))],
                  "as_of_date", True, _user_features_rows, gold, silver, partitions, pin_retention),
        _ml_asset(ML_TRAINING_SET,
                  # Sessions are read a day past each edge; a session's features are the newest at or before
                  # its start.
                  [AssetDep(silver.name, partition_mapping=reads_days(1, 1)),
                   AssetDep(ML_USER_FEATURES.name, partition_mapping=reads_days(1, 0))],
                  "observed_at", False, _training_rows, gold, silver, partitions, pin_retention),
    ]
