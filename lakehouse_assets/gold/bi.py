"""BI gold tables: per-minute activity, sessions, the conversion funnel, revenue by product.

Each is a PySpark asset with a freshness policy and the BI refresh automation
condition (see automation/bi.py): it updates itself when upstream data lands
and when its freshness window fails, without anyone pressing a button.
"""

import datetime as dt

from dagster import AssetExecutionContext, FreshnessPolicy, MaterializeResult, asset
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..automation.bi import BI_REFRESH, BI_REFRESH_WHOLE
from ..partitions import DAILY, SINGLE_RUN
from ..runtime.commit import Window, stage
from ..runtime.resource import LakehouseResource
from ..silver.events import silver_events
from ..tables.registry import TableSpec, col, register

PAID = ("paid", "shipped", "delivered")

GOLD_MINUTE_ACTIVITY = register(TableSpec(
    name="gold_minute_activity",
    layer="gold",
    description="Per minute: events, active users, purchases and revenue (the live dashboard).",
    schema=T.StructType([
        col("minute", T.TimestampType(), False),
        col("events", T.LongType(), False),
        col("active_users", T.LongType(), False),
        col("purchases", T.LongType(), False),
        col("revenue", T.DecimalType(18, 2), False),
    ]),
    partitioned_by=("days(minute)",),
))

GOLD_SESSIONS = register(TableSpec(
    name="gold_sessions",
    layer="gold",
    description="One row per session: start, end, duration, events and outcome (purchase, cart or browse).",
    schema=T.StructType([
        col("session_id", T.StringType(), False),
        col("user_id", T.StringType(), False),
        col("session_start", T.TimestampType(), False),
        col("session_end", T.TimestampType(), False),
        col("duration_s", T.LongType(), False),
        col("events", T.LongType(), False),
        col("page_views", T.LongType(), False),
        col("add_to_carts", T.LongType(), False),
        col("purchases", T.LongType(), False),
        col("revenue", T.DecimalType(18, 2), False),
        col("outcome", T.StringType(), False, "purchase, cart or browse"),
    ]),
    partitioned_by=("days(session_start)",),
))

GOLD_DAILY_FUNNEL = register(TableSpec(
    name="gold_daily_funnel",
    layer="gold",
    description="Per day: sessions that viewed, added to cart and purchased, and the step conversion rates.",
    schema=T.StructType([
        col("funnel_date", T.DateType(), False),
        col("sessions", T.LongType(), False),
        col("viewed", T.LongType(), False),
        col("carted", T.LongType(), False),
        col("purchased", T.LongType(), False),
        col("view_to_cart", T.DoubleType()),
        col("cart_to_purchase", T.DoubleType()),
    ]),
    partitioned_by=("funnel_date",),
))

GOLD_DAILY_PRODUCT_REVENUE = register(TableSpec(
    name="gold_daily_product_revenue",
    layer="gold",
    description="Per order day and product: paid orders, units and revenue, from the CDC order tables' current state.",
    schema=T.StructType([
        col("order_date", T.DateType(), False),
        col("product_id", T.StringType(), False),
        col("orders", T.LongType(), False),
        col("units", T.LongType(), False),
        col("revenue", T.DecimalType(18, 2), False),
    ]),
    partitioned_by=("order_date",),
))


def _count(kind: str):
    return F.count(F.when(F.col("event_type") == kind, True))


def _revenue():
    return F.coalesce(F.sum(F.when(F.col("event_type") == "purchase", F.col("price"))), F.lit(0)).cast("decimal(18,2)")


def _daily(**kwargs):
    return asset(group_name="gold", kinds={"spark", "iceberg"}, partitions_def=DAILY, backfill_policy=SINGLE_RUN,
                 automation_condition=BI_REFRESH, **kwargs)


@_daily(description=GOLD_MINUTE_ACTIVITY.description, deps=[silver_events],
        freshness_policy=FreshnessPolicy.time_window(fail_window=dt.timedelta(minutes=5),
                                                     warn_window=dt.timedelta(minutes=2)))
def gold_minute_activity(context: AssetExecutionContext, lakehouse: LakehouseResource) -> MaterializeResult:
    window = Window.of_days("minute", *context.partition_time_window)
    events = lakehouse.spark.table(lakehouse.ensure("silver_events")).where(
        Window.of_days("event_ts", *context.partition_time_window).condition)
    minutes = events.groupBy(F.date_trunc("minute", "event_ts").alias("minute")).agg(
        F.count(F.lit(1)).alias("events"), F.countDistinct("user_id").alias("active_users"),
        _count("purchase").alias("purchases"), _revenue().alias("revenue"))
    result = stage(lakehouse, GOLD_MINUTE_ACTIVITY, context.run_id, "gold_minute_activity",
                   window.label).overwrite(minutes, window).publish()
    return MaterializeResult(metadata=result.metadata())


@_daily(description=GOLD_SESSIONS.description, deps=[silver_events],
        freshness_policy=FreshnessPolicy.time_window(fail_window=dt.timedelta(minutes=30)))
def gold_sessions(context: AssetExecutionContext, lakehouse: LakehouseResource) -> MaterializeResult:
    start, end = context.partition_time_window
    window = Window.of_days("session_start", start, end)
    # A session belongs to the day it starts; read a day past each edge to see it whole.
    events = lakehouse.spark.table(lakehouse.ensure("silver_events")).where(
        (F.col("event_ts") >= F.lit(start - dt.timedelta(days=1))) & (F.col("event_ts") < F.lit(end + dt.timedelta(days=1))))
    sessions = events.where(F.col("session_id").isNotNull()).groupBy("session_id", "user_id").agg(
        F.min("event_ts").alias("session_start"), F.max("event_ts").alias("session_end"),
        F.count(F.lit(1)).alias("events"), _count("page_view").alias("page_views"),
        _count("add_to_cart").alias("add_to_carts"), _count("purchase").alias("purchases"),
        _revenue().alias("revenue"),
    ).select(
        "*",
        F.floor((F.unix_micros("session_end") - F.unix_micros("session_start")) / 1_000_000).cast("long")
        .alias("duration_s"),
        F.when(F.col("purchases") > 0, "purchase").when(F.col("add_to_carts") > 0, "cart")
        .otherwise("browse").alias("outcome"),
    )
    result = stage(lakehouse, GOLD_SESSIONS, context.run_id, "gold_sessions",
                   window.label).overwrite(sessions, window).publish()
    return MaterializeResult(metadata=result.metadata())


@_daily(description=GOLD_DAILY_FUNNEL.description, deps=[gold_sessions],
        freshness_policy=FreshnessPolicy.time_window(fail_window=dt.timedelta(minutes=30)))
def gold_daily_funnel(context: AssetExecutionContext, lakehouse: LakehouseResource) -> MaterializeResult:
    start, end = context.partition_time_window
    window = Window.of_days("funnel_date", start, end, as_date=True)
    sessions = lakehouse.spark.table(lakehouse.ensure(GOLD_SESSIONS)).where(
        Window.of_days("session_start", start, end).condition)
    funnel = sessions.groupBy(F.to_date("session_start").alias("funnel_date")).agg(
        F.count(F.lit(1)).alias("sessions"),
        F.count(F.when(F.col("page_views") > 0, True)).alias("viewed"),
        F.count(F.when(F.col("add_to_carts") > 0, True)).alias("carted"),
        F.count(F.when(F.col("purchases") > 0, True)).alias("purchased"),
    ).select("*", (F.col("carted") / F.col("viewed")).alias("view_to_cart"),
             (F.col("purchased") / F.col("carted")).alias("cart_to_purchase"))
    result = stage(lakehouse, GOLD_DAILY_FUNNEL, context.run_id, "gold_daily_funnel",
                   window.label).overwrite(funnel, window).publish()
    return MaterializeResult(metadata=result.metadata())


@asset(
    description=GOLD_DAILY_PRODUCT_REVENUE.description, group_name="gold", kinds={"spark", "iceberg"},
    deps=["silver_orders", "silver_order_items"], automation_condition=BI_REFRESH_WHOLE,
    backfill_policy=SINGLE_RUN,  # so that it can run inside a single-run range backfill of its parents
    freshness_policy=FreshnessPolicy.time_window(fail_window=dt.timedelta(minutes=15)),
)
def gold_daily_product_revenue(context: AssetExecutionContext, lakehouse: LakehouseResource) -> MaterializeResult:
    """Recomputed whole from the current state: an order's status can change days after it was placed."""
    spark = lakehouse.spark
    orders = spark.table(lakehouse.ensure("silver_orders")).where(F.col("status").isin(*PAID))
    items = spark.table(lakehouse.ensure("silver_order_items"))
    revenue = items.join(orders.select("order_id", "order_ts"), "order_id").groupBy(
        F.to_date("order_ts").alias("order_date"), "product_id").agg(
        F.countDistinct("order_id").alias("orders"), F.sum("quantity").cast("long").alias("units"),
        F.sum(F.col("quantity") * F.col("unit_price")).cast("decimal(18,2)").alias("revenue"))
    everything = Window("order_date", dt.date(1970, 1, 1), dt.date(9999, 1, 1), "all")
    result = stage(lakehouse, GOLD_DAILY_PRODUCT_REVENUE, context.run_id, "gold_daily_product_revenue",
                   "all").overwrite(revenue, everything).publish()
    return MaterializeResult(metadata=result.metadata())


bi_assets = [gold_minute_activity, gold_sessions, gold_daily_funnel, gold_daily_product_revenue]
