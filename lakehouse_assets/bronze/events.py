"""bronze_events: every event line as landed, typed, with where and when it came from.

Append-only and exactly once per landing file: a run over landing days takes the
files of those days that bronze does not hold yet. Lines that are not valid
events go to bronze_events_quarantine with the reason; records in = rows kept +
rows quarantined. New top-level fields become new columns (older rows read null).
"""

from pyspark.sql import types as T

from ..sources.events import new_event_fields, parse_events
from ..tables.registry import TableSpec, col, register
from .ingest import LandingSource, landing_asset, lineage_columns, quarantine_spec

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


bronze_events = landing_asset(EVENTS)
