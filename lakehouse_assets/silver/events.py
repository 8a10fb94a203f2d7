"""silver_events: typed behavioural events, one row per event id.

A day of silver holds the events whose event time falls on that day, whichever
landing day they arrived on; duplicate deliveries keep the first one landed.
"""

import pandera.pyspark as pa
from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset
from pyspark.sql import Window as W
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..bronze.events import bronze_events
from ..checks.pandera_check import pandera_asset_check
from ..partitions import DAILY, SINGLE_RUN
from ..runtime.commit import Window, overwrite_window
from ..runtime.resource import LakehouseResource
from ..sources.events import EVENT_TYPES
from ..tables.registry import TableSpec, col, register

SILVER_EVENTS = register(TableSpec(
    name="silver_events",
    layer="silver",
    description="Typed, deduplicated behavioural events (one row per event_id).",
    schema=T.StructType([
        col("event_id", T.StringType(), False),
        col("user_id", T.StringType(), False),
        col("session_id", T.StringType()),
        col("event_type", T.StringType(), False),
        col("event_ts", T.TimestampType(), False),
        col("ip", T.StringType()),
        col("properties", T.MapType(T.StringType(), T.StringType())),
        col("price", T.DecimalType(12, 2)),
        col("source_file", T.StringType(), False, "landing file of the delivery kept"),
        col("source_line", T.IntegerType(), False),
        col("ingested_at", T.TimestampType(), False),
    ]),
    partitioned_by=("days(event_ts)",),
))


@asset(
    description=SILVER_EVENTS.description,
    group_name="silver",
    kinds={"spark", "iceberg"},
    partitions_def=DAILY,
    backfill_policy=SINGLE_RUN,
    deps=[bronze_events.keys_by_output_name["bronze_events"]],
)
def silver_events(context: AssetExecutionContext, lakehouse: LakehouseResource) -> MaterializeResult:
    spark = lakehouse.spark
    window = Window.of_days("event_ts", *context.partition_time_window)
    bronze = spark.table(lakehouse.ensure("bronze_events")).where(window.condition)
    first_landed = W.partitionBy("event_id").orderBy("ingested_at", "source_file", "source_line")
    events = (
        bronze.withColumn("_n", F.row_number().over(first_landed))
        .where(F.col("_n") == 1)
        .select(*SILVER_EVENTS.column_names)
    )
    result = overwrite_window(lakehouse, "silver_events", events, window, context.run_id, "silver_events")
    return MaterializeResult(metadata={
        **result.metadata(),
        "duplicates_dropped": MetadataValue.int(
            max(0, bronze.count() - result.added_records)
        ),
    })


class SilverEventsModel(pa.DataFrameModel):
    """What every silver event row must satisfy."""

    event_id: T.StringType() = pa.Field(str_startswith="e-")
    user_id: T.StringType() = pa.Field()
    session_id: T.StringType() = pa.Field(nullable=True)
    event_type: T.StringType() = pa.Field(isin=list(EVENT_TYPES))
    event_ts: T.TimestampType() = pa.Field()
    price: T.DecimalType(12, 2) = pa.Field(nullable=True, ge=0)

    @pa.dataframe_check
    def purchases_have_a_price(cls, df) -> bool:
        return df.where((F.col("event_type") == "purchase") & F.col("price").isNull()).limit(1).count() == 0


silver_events_schema_check = pandera_asset_check(
    asset="silver_events", table="silver_events", model=SilverEventsModel, window_column="event_ts",
    partitions_def=DAILY,
)
