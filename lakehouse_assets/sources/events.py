"""Behavioural event logs: one JSON object per line.

Every field is read as text first, so a wrong type becomes a precise reason
instead of Spark nulling the whole record; fields the schema does not know yet
are found so that the bronze table can grow a column for them.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .landing import LINEAGE_COLUMNS, blank, json_reason

EVENT_TYPES = ("page_view", "add_to_cart", "purchase")
REQUIRED_FIELDS = ("event_id", "user_id", "event_type", "event_ts")
KNOWN_FIELDS = ("event_id", "user_id", "session_id", "event_type", "event_ts", "ip", "email", "properties", "price")

_RAW_SCHEMA = T.StructType(
    [T.StructField(name, T.StringType()) for name in KNOWN_FIELDS]
    + [T.StructField("_corrupt_record", T.StringType())]
)
_PROPERTIES = T.MapType(T.StringType(), T.StringType())

_DRIFT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_NEW_COLUMNS = 32  # per run: a flood of new keys is more likely garbage than schema

EVENT_COLUMNS = ["event_id", "user_id", "session_id", "event_type", "event_ts", "ip", "email", "properties", "price"]


def parse_events(lines: DataFrame, table_schema: T.StructType | None = None) -> DataFrame:
    """Typed event columns, the lineage columns, and `reason` (null when the line is a good event).

    Columns the table gained from schema drift are filled from the payload by name.
    """
    raw = F.col("raw")
    parsed = lines.withColumn(
        "raw", F.from_json("payload", _RAW_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt_record"})
    ).select(
        *LINEAGE_COLUMNS,
        "raw",
        F.to_timestamp("raw.event_ts").alias("event_ts"),
        F.col("raw.price").cast(T.DecimalType(12, 2)).alias("price"),
        F.from_json("raw.properties", _PROPERTIES).alias("properties"),
    )
    reason = json_reason(F.col("payload"), raw["_corrupt_record"])
    for name in REQUIRED_FIELDS:
        reason = reason.when(blank(raw[name]), F.lit(f"missing required field {name}"))
    reason = reason.when(
        F.col("event_ts").isNull(), F.concat(F.lit("event_ts is not a timestamp: "), raw["event_ts"])
    )
    reason = reason.when(
        raw["price"].isNotNull() & F.col("price").isNull(),
        F.concat(F.lit("price is not a number: "), raw["price"]),
    )
    reason = reason.when(
        raw["properties"].isNotNull() & F.col("properties").isNull(),
        F.lit("properties is not a JSON object"),
    )
    return parsed.select(
        *(raw[c].alias(c) for c in ("event_id", "user_id", "session_id", "event_type")),
        "event_ts",
        raw["ip"].alias("ip"),
        raw["email"].alias("email"),
        "properties",
        "price",
        *LINEAGE_COLUMNS,
        *(F.get_json_object("payload", f"$.{f.name}").cast(f.dataType).alias(f.name)
          for f in _drifted(table_schema)),
        reason.alias("reason"),
    )


def _drifted(table_schema: T.StructType | None) -> list[T.StructField]:
    taken = set(EVENT_COLUMNS) | set(LINEAGE_COLUMNS) | {"ingested_at", "run_id"}
    return [f for f in (table_schema.fields if table_schema else []) if f.name not in taken]


def new_event_fields(lines: DataFrame, table_schema: T.StructType) -> list[tuple[str, str]]:
    """Top-level keys in the lines that the table has no column for yet (schema drift).

    They become nullable string columns; keys that are not plain lower-case
    identifiers stay in the raw payload only.
    """
    present = {f.name.lower() for f in table_schema.fields} | set(KNOWN_FIELDS)
    keys = lines.select(F.explode(F.json_object_keys("payload")).alias("key")).distinct().collect()
    new = sorted(k.key for k in keys if _DRIFT_NAME.match(k.key) and k.key not in present)
    return [(name, "string") for name in new[:MAX_NEW_COLUMNS]]
