"""gold_daily_activity: one row per day: who was active, what they did, what they spent."""

import datetime as dt

from dagster import AssetExecutionContext, FreshnessPolicy, MaterializeResult, asset
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..automation.bi import BI_REFRESH
from ..partitions import DAILY, SINGLE_RUN
from ..runtime.commit import Window, stage
from ..runtime.resource import LakehouseResource
from ..silver.events import silver_events
from ..tables.registry import TableSpec, col, register

GOLD_DAILY_ACTIVITY = register(TableSpec(
    name="gold_daily_activity",
    layer="gold",
    description="Daily activity: active users, sessions, events by type, purchases and revenue.",
    schema=T.StructType([
        col("activity_date", T.DateType(), False),
        col("active_users", T.LongType(), False),
        col("sessions", T.LongType(), False),
        col("events", T.LongType(), False),
        col("page_views", T.LongType(), False),
        col("add_to_carts", T.LongType(), False),
        col("purchases", T.LongType(), False),
        col("revenue", T.DecimalType(18, 2), False, "sum of purchase prices"),
        col("computed_at", T.TimestampType(), False),
    ]),
    partitioned_by=("activity_date",),
))


def _count_of(event_type: str) -> F.Column:
    return F.count(F.when(F.col("event_type") == event_type, True))


@asset(
    description=GOLD_DAILY_ACTIVITY.description,
    group_name="gold",
    kinds={"spark", "iceberg"},
    partitions_def=DAILY,
    backfill_policy=SINGLE_RUN,
    deps=[silver_events],
    automation_condition=BI_REFRESH,
    freshness_policy=FreshnessPolicy.time_window(fail_window=dt.timedelta(minutes=30)),
)
def gold_daily_activity(context: AssetExecutionContext, lakehouse: LakehouseResource) -> MaterializeResult:
    spark = lakehouse.spark
    start, end = context.partition_time_window
    source = Window.of_days("event_ts", start, end)
    target = Window.of_days("activity_date", start, end, as_date=True)
    silver = spark.table(lakehouse.ensure("silver_events")).where(source.condition)
    daily = silver.groupBy(F.to_date("event_ts").alias("activity_date")).agg(
        F.countDistinct("user_id").alias("active_users"),
        F.countDistinct("session_id").alias("sessions"),
        F.count(F.lit(1)).alias("events"),
        _count_of("page_view").alias("page_views"),
        _count_of("add_to_cart").alias("add_to_carts"),
        _count_of("purchase").alias("purchases"),
        F.coalesce(
            F.sum(F.when(F.col("event_type") == "purchase", F.col("price"))), F.lit(0)
        ).cast(T.DecimalType(18, 2)).alias("revenue"),
    ).withColumn("computed_at", F.current_timestamp())
    result = stage(lakehouse, GOLD_DAILY_ACTIVITY, context.run_id, "gold_daily_activity",
                   target.label).overwrite(daily, target).publish()
    return MaterializeResult(metadata=result.metadata())
