"""silver_events: clean behavioural events, one row per event id, personal data pseudonymised.

A day of silver holds the events whose event time falls on that day, whichever
landing day brought them. Duplicate deliveries keep the first one landed, across
days too: an event id that silver already holds on another day is not taken
again. Events that break an explicit rule go to silver_events_rejected with the
rule's name, so bronze (deduplicated) = silver + rejected, always.
IP and email become keyed hashes (HMAC-SHA256, key from settings).

The write is audited before anyone sees it: staged on a branch, checked by the
Pandera model, published to main only when it passes.
"""

import pandera.pyspark as pa
from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset
from pyspark.sql import Column
from pyspark.sql import Window as W
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..bronze.events import bronze_events
from ..checks.pandera_check import Audit, audit_and_publish, check_spec, raise_if_failed
from ..partitions import DAILY, SINGLE_RUN
from ..runtime.commit import Window, stage
from ..runtime.pii import keyed_hash, pii_key
from ..runtime.resource import LakehouseResource
from ..sources.events import EVENT_TYPES
from ..tables.registry import COPY_ON_WRITE, TableSpec, col, register

# Read far more than written (dashboards, features): copy-on-write keeps reads free of delete files.
SILVER_EVENTS = register(TableSpec(
    name="silver_events",
    layer="silver",
    description="Clean behavioural events (one row per event_id), personal data pseudonymised.",
    schema=T.StructType([
        col("event_id", T.StringType(), False),
        col("user_id", T.StringType(), False),
        col("session_id", T.StringType()),
        col("event_type", T.StringType(), False),
        col("event_ts", T.TimestampType(), False),
        col("ip_hash", T.StringType(), comment="HMAC-SHA256 of the IP address"),
        col("email_hash", T.StringType(), comment="HMAC-SHA256 of the email address"),
        col("properties", T.MapType(T.StringType(), T.StringType())),
        col("price", T.DecimalType(12, 2)),
        col("source_file", T.StringType(), False, "landing file of the delivery kept"),
        col("source_line", T.IntegerType(), False),
        col("ingested_at", T.TimestampType(), False),
    ]),
    partitioned_by=("days(event_ts)",),
    write_mode=COPY_ON_WRITE,
))

SILVER_EVENTS_REJECTED = register(TableSpec(
    name="silver_events_rejected",
    layer="silver",
    description="Bronze events that silver does not take, with the rule they break.",
    schema=T.StructType([
        col("event_id", T.StringType(), False),
        col("event_ts", T.TimestampType(), False),
        col("rule", T.StringType(), False, "name of the first rule the event breaks"),
        col("event_type", T.StringType()),
        col("source_file", T.StringType(), False),
        col("source_line", T.IntegerType(), False),
    ]),
    partitioned_by=("days(event_ts)",),
))

BOT_AGENT = r"(?i)(bot|crawler|spider|slurp|headless)"

def rules() -> dict[str, Column]:
    """An event is rejected by the first rule it breaks, in this order."""
    return {
        "unknown_event_type": ~F.col("event_type").isin(*EVENT_TYPES),
        "bot_user_agent": F.coalesce(F.col("properties")["user_agent"].rlike(BOT_AGENT), F.lit(False)),
        "purchase_without_price": (F.col("event_type") == "purchase") & F.col("price").isNull(),
        "negative_price": F.coalesce(F.col("price") < 0, F.lit(False)),
        "event_after_ingestion": F.col("event_ts") > F.col("ingested_at") + F.expr("INTERVAL 1 HOUR"),
    }


def first_broken_rule() -> Column:
    rule = F.lit(None).cast("string")
    for name, broken in reversed(rules().items()):
        rule = F.when(broken, F.lit(name)).otherwise(rule)
    return rule


class SilverEventsModel(pa.DataFrameModel):
    """What every silver event row must satisfy."""

    event_id: T.StringType() = pa.Field(str_startswith="e-")
    user_id: T.StringType() = pa.Field()
    session_id: T.StringType() = pa.Field(nullable=True)
    event_type: T.StringType() = pa.Field(isin=list(EVENT_TYPES))
    event_ts: T.TimestampType() = pa.Field()
    ip_hash: T.StringType() = pa.Field(nullable=True, str_matches=r"^[0-9a-f]{64}$")
    email_hash: T.StringType() = pa.Field(nullable=True, str_matches=r"^[0-9a-f]{64}$")
    price: T.DecimalType(12, 2) = pa.Field(nullable=True, ge=0)

    @pa.dataframe_check
    def purchases_have_a_price(cls, df) -> bool:
        return df.where((F.col("event_type") == "purchase") & F.col("price").isNull()).limit(1).count() == 0


@asset(
    description=SILVER_EVENTS.description,
    group_name="silver",
    kinds={"spark", "iceberg"},
    partitions_def=DAILY,
    backfill_policy=SINGLE_RUN,
    deps=[bronze_events.keys_by_output_name["bronze_events"]],
    check_specs=[check_spec("silver_events", SilverEventsModel)],
)
def silver_events(context: AssetExecutionContext, lakehouse: LakehouseResource):
    spark = lakehouse.spark
    window = Window.of_days("event_ts", *context.partition_time_window)
    silver_id = lakehouse.ensure(SILVER_EVENTS)
    bronze = spark.table(lakehouse.ensure("bronze_events")).where(window.condition)
    first_landed = W.partitionBy("event_id").orderBy("ingested_at", "source_file", "source_line")
    deduped = bronze.withColumn("_n", F.row_number().over(first_landed)).where(F.col("_n") == 1).drop("_n")
    # An event id silver holds on another day came first: it is not taken twice.
    elsewhere = spark.table(silver_id).where(~window.condition).select("event_id")
    fresh = deduped.join(elsewhere, "event_id", "left_anti")
    judged = fresh.withColumn("rule", first_broken_rule()).cache()
    try:
        key = pii_key(lakehouse.settings)
        clean = judged.where(F.col("rule").isNull()).select(
            *(c for c in SILVER_EVENTS.column_names if c not in ("ip_hash", "email_hash")),
            keyed_hash(F.col("ip"), key).alias("ip_hash"),
            keyed_hash(F.col("email"), key).alias("email_hash"),
        ).select(*SILVER_EVENTS.column_names)
        rejected = judged.where(F.col("rule").isNotNull()).select(*SILVER_EVENTS_REJECTED.column_names)

        staged = stage(lakehouse, "silver_events", context.run_id, "silver_events", window.label,
                       prefix="audit").overwrite(clean, window)
        commits, checks = audit_and_publish([Audit(staged, [
            ("silver_events", "pandera_schema", SilverEventsModel, staged.read().where(window.condition)),
        ])])
        if not commits:
            yield from checks
            raise_if_failed(checks)
        rejects = stage(lakehouse, "silver_events_rejected", context.run_id, "silver_events",
                        window.label).overwrite(rejected, window).publish()
        by_rule = {r.rule: r["count"] for r in rejected.groupBy("rule").count().collect()}
        duplicates = bronze.count() - judged.count()
    finally:
        judged.unpersist()
    yield MaterializeResult(
        metadata={
            **commits[0].metadata(),
            "duplicates_dropped": MetadataValue.int(duplicates),
            "rejected": MetadataValue.int(rejects.added_records),
            "rejected_by_rule": MetadataValue.json(by_rule),
        },
        check_results=checks,
    )
