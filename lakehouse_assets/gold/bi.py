"""BI gold tables over the project's event source: minute activity, sessions, funnel, daily activity.

Nothing here names a domain: which event is a purchase (and where its amount
is), the funnel's steps and how sessions are cut come from the declaration's
`gold:` section. Each table is a PySpark asset with a freshness policy and the
BI refresh automation condition (automation/conditions.py): it updates itself when
upstream data lands and when its freshness window fails.

- gold_minute_activity: per minute, events, active users, purchases, revenue.
- gold_sessions: per session, start, end, duration, events, purchases, revenue,
  the deepest funnel step reached (in order) and its name as the outcome.
- gold_daily_funnel: per day and funnel step, sessions that reached it (every
  step before it too) and the conversion from the step before.
- gold_daily_activity: per day, active users, sessions, events (also by type),
  purchases and revenue.
"""


import datetime as dt
import uuid
from collections.abc import Callable

from dagster import (
    AssetDep,
    AssetExecutionContext,
    AssetsDefinition,
    FreshnessPolicy,
    MaterializeResult,
    PartitionsDefinition,
    asset,
)
from pyspark.sql import Column, DataFrame
from pyspark.sql import Window as W
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..automation.conditions import BI_REFRESH, BI_REFRESH_ACROSS_DAYS, reads_days
from ..automation.partitions import SINGLE_RUN
from ..project import Freshness, Gold
from ..project.model import DAILY_ACTIVITY, DAILY_FUNNEL, MINUTE_ACTIVITY, SESSIONS
from ..runtime.commit import (
    CommitResult,
    Window,
    current_state,
    materialize_with_retries,
    publish,
    stage,
    with_commit_retries,
)
from ..runtime.freshness import freshness_check_result, freshness_check_spec, freshness_state
from ..runtime.resource import LakehouseResource
from ..tables.registry import TableSpec, col
from ..tables.schema import conform

MONEY = T.DecimalType(18, 2)
NONE = "none"  # the outcome of a session that reached no funnel step


class EventColumns:
    """The gold vocabulary (user, session, type, purchase, amount) as silver columns of the declared source."""

    def __init__(self, gold: Gold):
        source = gold.events
        assert source is not None and source.user is not None, "gold needs an event source with a user field"
        user = source.user
        self.gold = gold
        self.ts = source.timestamp
        self.user = source.silver_column(user)
        self.type = source.event_type

    def purchase(self) -> Column:
        if self.gold.purchase_type is None or self.type is None:
            return F.lit(False)
        return F.coalesce(F.col(self.type) == F.lit(self.gold.purchase_type), F.lit(False))

    def purchases(self) -> Column:
        return F.count(F.when(self.purchase(), True))

    def revenue(self) -> Column:
        if self.gold.amount is None:
            return F.lit(0).cast(MONEY)
        return F.coalesce(F.sum(F.when(self.purchase(), F.col(self.gold.amount))), F.lit(0)).cast(MONEY)

    def per_minute(self, events: DataFrame) -> DataFrame:
        """gold_minute_activity's rows for the minutes `events` fall in."""
        return events.groupBy(F.date_trunc("minute", self.ts).alias("minute")).agg(
            F.count(F.lit(1)).alias("events"), F.countDistinct(self.user).alias("active_users"),
            self.purchases().alias("purchases"), self.revenue().alias("revenue"))

    def with_sessions(self, events: DataFrame) -> DataFrame:
        """`_session`: the declared session field, or a new session after `inactivity` without events."""
        if self.gold.session_field is not None:
            return events.withColumn("_session", F.col(self.gold.session_field).cast("string"))
        gap = int(self.gold.inactivity.total_seconds())
        by_user = W.partitionBy(self.user).orderBy(self.ts)
        previous = F.lag(self.ts).over(by_user)
        new = previous.isNull() | (F.unix_seconds(self.ts) - F.unix_seconds(previous) > gap)
        starts = events.withColumn("_start", F.when(new, F.col(self.ts)))
        started = F.last("_start", ignorenulls=True).over(by_user.rowsBetween(W.unboundedPreceding, 0))
        return starts.withColumn("_session", F.concat_ws("@", F.col(self.user).cast("string"),
                                                       F.date_format(started, "yyyyMMddHHmmssSSSSSS")))

    def funnel_steps(self) -> list[Column]:
        """Per session: has it reached step k, i.e. seen events of every step 1..k (any order)."""
        assert self.type is not None
        has = [F.max(F.coalesce(F.col(self.type) == F.lit(step), F.lit(False))) for step in self.gold.funnel]
        reached, out = F.lit(True), []
        for step_has in has:
            reached = reached & step_has
            out.append(reached)
        return out


def _spec(name: str, description: str, columns: list[T.StructField], partition: str) -> TableSpec:
    return TableSpec(name=name, layer="gold", description=description, schema=T.StructType(columns),
                     partitioned_by=(partition,))


def gold_specs(gold: Gold) -> dict[str, TableSpec]:
    specs = {
        MINUTE_ACTIVITY: _spec(
            MINUTE_ACTIVITY, "Per minute: events, active users, purchases and revenue (the live dashboard).", [
                col("minute", T.TimestampType(), False), col("events", T.LongType(), False),
                col("active_users", T.LongType(), False), col("purchases", T.LongType(), False),
                col("revenue", MONEY, False),
            ], "days(minute)"),
        SESSIONS: _spec(
            SESSIONS, "One row per session: start, end, duration, events, purchases, revenue, funnel reached.", [
                col("session_id", T.StringType(), False), col("user_id", T.StringType(), False),
                col("session_start", T.TimestampType(), False), col("session_end", T.TimestampType(), False),
                col("duration_s", T.LongType(), False), col("events", T.LongType(), False),
                col("purchases", T.LongType(), False), col("revenue", MONEY, False),
                col("funnel_step", T.IntegerType(), False, "deepest funnel step reached with every step before it"),
                col("outcome", T.StringType(), False, "the event type of that step, or 'none'"),
            ], "days(session_start)"),
        DAILY_ACTIVITY: _spec(
            DAILY_ACTIVITY, "Per day: active users, sessions, events (and by type), purchases and revenue.", [
                col("activity_date", T.DateType(), False), col("active_users", T.LongType(), False),
                col("sessions", T.LongType(), False), col("events", T.LongType(), False),
                col("events_by_type", T.MapType(T.StringType(), T.LongType()), comment="event type -> events"),
                col("purchases", T.LongType(), False), col("revenue", MONEY, False, "sum of purchase amounts"),
                col("computed_at", T.TimestampType(), False),
            ], "activity_date"),
    }
    if gold.funnel:
        specs[DAILY_FUNNEL] = _spec(
            DAILY_FUNNEL, "Per day and funnel step: sessions that reached it, and conversion from the step "
                                 "before.", [
                col("funnel_date", T.DateType(), False), col("step", T.IntegerType(), False),
                col("event_type", T.StringType(), False), col("sessions", T.LongType(), False),
                col("conversion", T.DoubleType(), comment="sessions / sessions of the step before (all, for step 1)"),
            ], "funnel_date")
    return specs


def freshness_policy(f: Freshness) -> FreshnessPolicy:
    return FreshnessPolicy.time_window(fail_window=f.fail, warn_window=f.warn) if f.warn else \
        FreshnessPolicy.time_window(fail_window=f.fail)


def _near(events: DataFrame, ts: str, start: dt.datetime, end: dt.datetime) -> DataFrame:
    """`events` of [start, end) and of a day past each edge: a session belongs to the day it starts, and must be
    seen whole when it crosses midnight."""
    return events.where((F.col(ts) >= F.lit(start - dt.timedelta(days=1))) & (F.col(ts) < F.lit(end + dt.timedelta(days=1))))


Build = Callable[[LakehouseResource, dt.datetime, dt.datetime], tuple[DataFrame, Window]]


def _daily_asset(gold: Gold, spec: TableSpec, silver: TableSpec, partitions: PartitionsDefinition,
                 deps: list[AssetDep], build: Build, automation_condition=BI_REFRESH) -> AssetsDefinition:
    """A gold table written a window of days at a time from what `build` gives, staged and published."""
    @asset(name=spec.name, description=spec.description, group_name="gold", kinds={"spark", "iceberg"},
           partitions_def=partitions, backfill_policy=SINGLE_RUN, automation_condition=automation_condition,
           deps=deps, freshness_policy=freshness_policy(gold.freshness[spec.name]),
           check_specs=[freshness_check_spec(spec.name, gold.freshness[spec.name])])
    def _asset(context: AssetExecutionContext, lakehouse: LakehouseResource) -> MaterializeResult:
        def attempt() -> MaterializeResult:
            df, window = build(lakehouse, *context.partition_time_window)
            staged = stage(lakehouse.table(spec), context.run_id, spec.name, window.label, scope=window)
            staged.derived_from(lakehouse.table(silver), window_end=window.end)
            result = publish(staged.overwrite(df, window))
            state = freshness_state(lakehouse.table(spec).iceberg(), spec.name, gold.freshness[spec.name])
            return MaterializeResult(metadata={**result.metadata(), **state.metadata()},
                                     check_results=[freshness_check_result(state, spec.name)])

        return materialize_with_retries(attempt, spec.name, context.log.info)

    return _asset


class EventGold:
    """The frames of the event gold tables for a window of days, each read from silver (or from sessions)."""

    def __init__(self, gold: Gold, silver: TableSpec):
        self.gold, self.silver, self.c, self.specs = gold, silver, EventColumns(gold), gold_specs(gold)

    def events(self, lakehouse: LakehouseResource) -> DataFrame:
        return lakehouse.table(self.silver).read(reader="gold")

    def minute_activity(self, lakehouse, start, end):
        c = self.c
        window = Window.of_days(c.ts, start, end)
        return c.per_minute(self.events(lakehouse).where(window.condition)), Window.of_days("minute", start, end)

    def sessions(self, lakehouse, start, end):
        c, funnel = self.c, self.gold.funnel
        near = c.with_sessions(_near(self.events(lakehouse), c.ts, start, end))
        steps = c.funnel_steps() if funnel else []
        reached = sum((F.when(s, 1).otherwise(0) for s in steps), F.lit(0)).cast("int")
        outcome = F.lit(NONE)
        for n, step in enumerate(funnel, start=1):
            outcome = F.when(F.col("funnel_step") == n, F.lit(step)).otherwise(outcome)
        per_session = near.groupBy(F.col("_session").alias("session_id")).agg(
            F.first(F.col(c.user).cast("string"), ignorenulls=True).alias("user_id"),
            F.min(c.ts).alias("session_start"), F.max(c.ts).alias("session_end"),
            F.count(F.lit(1)).alias("events"), c.purchases().alias("purchases"), c.revenue().alias("revenue"),
            reached.alias("funnel_step"),
        ).where(F.col("session_id").isNotNull())
        per_session = per_session.select(
            "*",
            F.floor((F.unix_micros("session_end") - F.unix_micros("session_start")) / 1_000_000).cast("long")
            .alias("duration_s"),
            outcome.alias("outcome"),
        )
        return per_session, Window.of_days("session_start", start, end)

    def daily_funnel(self, lakehouse, start, end):
        funnel_steps = self.gold.funnel
        window = Window.of_days("session_start", start, end)
        s = lakehouse.table(self.specs[SESSIONS]).read(reader=DAILY_FUNNEL).where(window.condition)
        day = F.to_date("session_start").alias("funnel_date")
        totals = s.groupBy(day).agg(F.count(F.lit(1)).alias("_all"),
                                    *(F.count(F.when(F.col("funnel_step") >= n, True)).alias(f"_s{n}")
                                      for n in range(1, len(funnel_steps) + 1)))
        rows = []
        for n, step in enumerate(funnel_steps, start=1):
            before = F.col("_all") if n == 1 else F.col(f"_s{n - 1}")
            rows.append(totals.select(
                "funnel_date", F.lit(n).alias("step"), F.lit(step).alias("event_type"),
                F.col(f"_s{n}").alias("sessions"),
                F.when(before > 0, F.col(f"_s{n}") / before).alias("conversion")))
        funnel = rows[0]
        for more in rows[1:]:
            funnel = funnel.unionByName(more)
        return funnel, Window.of_days("funnel_date", start, end, as_date=True)

    def daily_activity(self, lakehouse, start, end):
        c = self.c
        window = Window.of_days(c.ts, start, end)
        near = c.with_sessions(_near(self.events(lakehouse), c.ts, start, end))
        day_events = near.where(window.condition).withColumn("activity_date", F.to_date(c.ts))
        daily_df = day_events.groupBy("activity_date").agg(
            F.countDistinct(c.user).alias("active_users"), F.countDistinct("_session").alias("sessions"),
            F.count(F.lit(1)).alias("events"), c.purchases().alias("purchases"), c.revenue().alias("revenue"))
        if c.type is not None:
            by_type = day_events.where(F.col(c.type).isNotNull()).groupBy("activity_date", c.type).count().groupBy(
                "activity_date").agg(F.map_from_entries(F.collect_list(F.struct(c.type, "count"))).alias(
                    "events_by_type"))
            daily_df = daily_df.join(by_type, "activity_date", "left")
        return (daily_df.withColumn("computed_at", F.current_timestamp()),
                Window.of_days("activity_date", start, end, as_date=True))


def gold_event_assets(gold: Gold, silver: TableSpec, partitions: PartitionsDefinition) -> list[AssetsDefinition]:
    """The event gold assets (empty when the project declares no event source with a user)."""
    if gold.events is None or gold.events.user is None:
        return []
    frames = EventGold(gold, silver)
    specs = frames.specs

    def daily(spec: TableSpec, deps: list[AssetDep], build: Build, automation_condition=BI_REFRESH):
        return _daily_asset(gold, spec, silver, partitions, deps, build, automation_condition)

    assets = [
        daily(specs[MINUTE_ACTIVITY], [AssetDep(silver.name)], frames.minute_activity),
        # A day's sessions read silver a day past each edge: late data on either neighbour refreshes it.
        daily(specs[SESSIONS], [AssetDep(silver.name, partition_mapping=reads_days(1, 1))], frames.sessions,
              BI_REFRESH_ACROSS_DAYS),
        daily(specs[DAILY_ACTIVITY], [AssetDep(silver.name)], frames.daily_activity),
    ]
    if gold.funnel:
        assets.append(daily(specs[DAILY_FUNNEL], [AssetDep(SESSIONS)], frames.daily_funnel))
    return assets



def merge_minutes(lakehouse: LakehouseResource, gold: Gold, silver: TableSpec, minutes: DataFrame, run_id: str,
                  label: str, properties: dict[str, str], log: Callable[[str], None] = print,
                  ) -> tuple[CommitResult, int, int]:
    """Recompute the gold_minute_activity rows of `minutes` (a one-column frame of minute starts) from silver as
    it stands, and MERGE them into the table (the stream's incremental path). Returns the commit, its retries and
    the number of minutes."""
    c = EventColumns(gold)
    spec = gold_specs(gold)[MINUTE_ACTIVITY]
    table, silver_table = lakehouse.table(spec).create(), lakehouse.table(silver)
    wanted = minutes.select(F.col("minute").cast("timestamp")).distinct().cache()
    text = "yyyy-MM-dd HH:mm:ss"
    spans = wanted.groupBy(F.date_format("minute", "yyyy-MM-dd").alias("day")).agg(
        F.date_format(F.min("minute"), text).alias("first"), F.date_format(F.max("minute"), text).alias("last"),
        F.count(F.lit(1)).alias("minutes"),
    ).collect()
    days = [r.day for r in spans]
    in_days = F.lit(False)
    # One range per day, from its first to its last minute (in the Spark session's time zone): Iceberg then skips
    # silver's other partitions and, by their event-time bounds, the files of the day's earlier batches.
    for span in spans:
        in_days = in_days | ((F.col(c.ts) >= F.to_timestamp(F.lit(span.first)))
                             & (F.col(c.ts) < F.to_timestamp(F.lit(span.last)) + F.expr("INTERVAL 1 MINUTE")))
    spark = lakehouse.spark

    def attempt() -> CommitResult:
        events = silver_table.read(reader=spec.name).where(in_days)
        touched = events.withColumn("_minute", F.date_trunc("minute", c.ts)).join(
            F.broadcast(wanted.withColumnRenamed("minute", "_minute")), "_minute", "left_semi").drop("_minute")
        # Computed before the MERGE: called from the stream's foreachBatch, Spark 4.1 fails to plan this MERGE from
        # a view over silver's read ("No plan for TableReference ... silver_events"); the minutes' rows are few.
        rows = conform(table, c.per_minute(touched), evolve=False).localCheckpoint()
        view = f"minutes_{uuid.uuid4().hex[:12]}"
        rows.createOrReplaceTempView(view)
        try:
            staged = stage(table, run_id, spec.name, label).derived_from(silver_table)
            staged.properties.update(properties)
            return publish(staged.sql(f"""
                MERGE INTO {{target}} t USING {view} s ON t.minute = s.minute
                WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"""))
        finally:
            spark.catalog.dropTempView(view)

    count = sum(span.minutes for span in spans)
    try:
        if not days:
            return current_state(table), 0, 0
        return (*with_commit_retries(attempt, spec.name, log), count)
    finally:
        wanted.unpersist()
