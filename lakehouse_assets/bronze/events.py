"""bronze_events: every event line as landed, typed, with where and when it came from.

Bronze is partitioned by landing day (the `date=` folder the file landed in), so
re-materialising a day replaces exactly the rows read from that day's files: a
re-run never duplicates, and a file added to a day is taken on the next run.
Lines that are not valid events go to bronze_events_quarantine with the reason;
records in = rows kept + rows quarantined.
"""

from dagster import AssetExecutionContext, AssetSpec, MaterializeResult, MetadataValue, multi_asset
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..partitions import DAILY, SINGLE_RUN
from ..runtime.commit import Window, overwrite_window
from ..runtime.resource import LakehouseResource
from ..sources.events import day_folders, list_landing_files, parse_events, read_lines
from ..tables.registry import TableSpec, col, register

_INGEST_COLUMNS = [
    col("payload", T.StringType(), False, "the line exactly as it landed"),
    col("source_file", T.StringType(), False, "landing file the line was read from"),
    col("source_line", T.IntegerType(), False, "1-based line number in source_file"),
    col("landing_date", T.DateType(), False, "day folder the file landed in"),
    col("ingested_at", T.TimestampType(), False),
    col("run_id", T.StringType(), False, "Dagster run that ingested the line"),
]

BRONZE_EVENTS = register(TableSpec(
    name="bronze_events",
    layer="bronze",
    description="Behavioural events as landed: typed fields, raw payload, ingest lineage.",
    schema=T.StructType([
        col("event_id", T.StringType(), False),
        col("user_id", T.StringType(), False),
        col("session_id", T.StringType()),
        col("event_type", T.StringType(), False),
        col("event_ts", T.TimestampType(), False, "when the event happened (UTC)"),
        col("ip", T.StringType()),
        col("properties", T.MapType(T.StringType(), T.StringType())),
        col("price", T.DecimalType(12, 2)),
        *_INGEST_COLUMNS,
    ]),
    partitioned_by=("landing_date",),
))

BRONZE_EVENTS_QUARANTINE = register(TableSpec(
    name="bronze_events_quarantine",
    layer="bronze",
    description="Event lines that could not be taken, with the reason; nothing is dropped silently.",
    schema=T.StructType([
        col("reason", T.StringType(), False, "why the line was not taken"),
        *_INGEST_COLUMNS,
    ]),
    partitioned_by=("landing_date",),
))


@multi_asset(
    specs=[
        AssetSpec("bronze_events", description=BRONZE_EVENTS.description, group_name="bronze",
                  kinds={"spark", "iceberg"}),
        AssetSpec("bronze_events_quarantine", description=BRONZE_EVENTS_QUARANTINE.description,
                  group_name="bronze", kinds={"spark", "iceberg"}),
    ],
    partitions_def=DAILY,
    backfill_policy=SINGLE_RUN,
)
def bronze_events(context: AssetExecutionContext, lakehouse: LakehouseResource):
    spark = lakehouse.spark
    window = Window.of_days("landing_date", *context.partition_time_window, as_date=True)
    files = list_landing_files(
        spark, day_folders(lakehouse.settings.landing, "events", window.start, window.end)
    )
    context.log.info(f"reading {len(files)} landing files for {window.label}")

    lines = read_lines(spark, files).cache()
    try:
        events, rejects = parse_events(lines)
        stamp = [F.current_timestamp().alias("ingested_at"), F.lit(context.run_id).alias("run_id")]
        kept = overwrite_window(lakehouse, "bronze_events", events.select("*", *stamp),
                                window, context.run_id, "bronze_events")
        quarantined = overwrite_window(lakehouse, "bronze_events_quarantine", rejects.select("*", *stamp),
                                       window, context.run_id, "bronze_events_quarantine")
        records_in = lines.count()
    finally:
        lines.unpersist()

    if records_in != kept.added_records + quarantined.added_records:
        raise RuntimeError(
            f"bronze_events {window.label}: {records_in} lines read but {kept.added_records} kept "
            f"+ {quarantined.added_records} quarantined; refusing to report a lossy ingest"
        )
    counts = {
        "records_in": MetadataValue.int(records_in),
        "records_kept": MetadataValue.int(kept.added_records),
        "records_quarantined": MetadataValue.int(quarantined.added_records),
        "landing_files": MetadataValue.int(len(files)),
    }
    yield MaterializeResult(asset_key="bronze_events", metadata={**kept.metadata(), **counts})
    yield MaterializeResult(asset_key="bronze_events_quarantine", metadata={**quarantined.metadata(), **counts})
