"""bronze_events: every event line as landed, typed, with where and when it came from.

Append-only and exactly once per landing file: a run over landing days takes the
files of those days that bronze does not hold yet. Lines that are not valid
events go to bronze_events_quarantine with the reason; records in = rows kept +
rows quarantined. New top-level fields become new columns (older rows read null).
"""

from dagster import AssetExecutionContext, AssetSpec, MaterializeResult, multi_asset
from pyspark.sql import types as T

from ..partitions import DAILY, SINGLE_RUN
from ..runtime.commit import Window
from ..runtime.resource import LakehouseResource
from ..sources.events import new_event_fields, parse_events
from ..sources.landing import day_folders, list_landing_files
from ..tables.registry import TableSpec, col, register
from .ingest import LandingSource, ingest, lineage_columns, quarantine_spec

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
        col("ip", T.StringType(), comment="personal data: pseudonymised in silver"),
        col("email", T.StringType(), comment="personal data: pseudonymised in silver"),
        col("properties", T.MapType(T.StringType(), T.StringType())),
        col("price", T.DecimalType(12, 2)),
        *lineage_columns(),
    ]),
    partitioned_by=("days(event_ts)",),
))

BRONZE_EVENTS_QUARANTINE = quarantine_spec(
    "bronze_events_quarantine",
    "Event lines that could not be taken, with the reason; nothing is dropped silently.",
)

EVENTS = LandingSource(
    name="events",
    bronze=BRONZE_EVENTS,
    quarantine=BRONZE_EVENTS_QUARANTINE,
    parse=parse_events,
    new_fields=new_event_fields,
)


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
    """Partitions are landing days: the `date=` folders whose files a run takes."""
    window = Window.of_days("landing_date", *context.partition_time_window, as_date=True)
    files = list_landing_files(
        lakehouse.spark, day_folders(lakehouse.settings.landing, EVENTS.name, window.start, window.end)
    )
    report = ingest(lakehouse, EVENTS, files, context.run_id, window.label, log=context.log.info)
    yield MaterializeResult(asset_key="bronze_events", metadata=report.metadata(report.kept))
    yield MaterializeResult(asset_key="bronze_events_quarantine", metadata=report.metadata(report.quarantined))
