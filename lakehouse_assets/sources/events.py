"""Behavioural event logs: one JSON object per line, typed by the source's declaration.

Every declared field is read as text first (from its declared path in the
record), then typed, so a wrong type becomes a precise reason instead of Spark
nulling the whole record. Fields the declaration does not know are found, so
that the bronze table can grow a column for them (schema drift).
"""

from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..project import EventSource
from .landing import LINEAGE_COLUMNS, blank, json_reason, typed_value

_DRIFT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
STAMP_COLUMNS = ("ingested_at", "run_id")


def _raw_fields(source: EventSource, payload: Column, raw: Column) -> dict[str, Column]:
    """Each declared field's text: top-level ones from one JSON parse, nested paths one by one."""
    return {
        name: raw[path] if "." not in path else F.get_json_object(payload, f"$.{path}")
        for name, path in source.paths.items()
    }


def parse_events(source: EventSource, lines: DataFrame, table_schema: T.StructType | None = None) -> DataFrame:
    """Typed event columns, the lineage columns, and `reason` (null when the line is a good event).

    Columns the table gained from schema drift are filled from the payload by name.
    """
    top_level = sorted({p for p in source.paths.values() if "." not in p})
    raw_schema = T.StructType([T.StructField(p, T.StringType()) for p in top_level]
                              + [T.StructField("_corrupt_record", T.StringType())])
    parsed = lines.withColumn(
        "raw", F.from_json("payload", raw_schema, {"columnNameOfCorruptRecord": "_corrupt_record"})
    )
    # Three projections: the texts, the typed values, then the reasons over both. A value is computed once;
    # in a single projection, a typed value used both as a column and inside the reason's CASE was computed twice.
    text = _raw_fields(source, F.col("payload"), F.col("raw"))
    texts = parsed.select(*LINEAGE_COLUMNS, F.col("raw._corrupt_record").alias("__corrupt"),
                          *(text[name].alias(f"__text_{name}") for name in source.fields))
    typed = texts.select("*", *(typed_value(F.col(f"__text_{name}"), dtype).alias(name)
                               for name, dtype in source.fields.items()))

    reason = json_reason(F.col("payload"), F.col("__corrupt"))
    for name in source.required:
        reason = reason.when(blank(F.col(f"__text_{name}")), F.lit(f"missing required field {name}"))
    for name, dtype in source.fields.items():
        what = "a JSON object" if isinstance(dtype, T.MapType) else f"a {dtype.simpleString()}"
        raw_text = F.col(f"__text_{name}")
        reason = reason.when(
            raw_text.isNotNull() & F.col(name).isNull(),
            F.concat(F.lit(f"{name} is not {what}: "), F.substring(raw_text, 1, 200)),
        )
    return typed.select(
        *source.fields,
        *LINEAGE_COLUMNS,
        *(F.get_json_object("payload", f"$.{f.name}").cast(f.dataType).alias(f.name)
          for f in drifted_columns(source, table_schema)),
        reason.alias("reason"),
    )


def drifted_columns(source: EventSource, table_schema: T.StructType | None) -> list[T.StructField]:
    """Columns the bronze table gained from the data, beyond the declaration."""
    taken = set(source.fields) | set(LINEAGE_COLUMNS) | set(STAMP_COLUMNS)
    return [f for f in (table_schema.fields if table_schema else []) if f.name not in taken]


def new_event_keys(source: EventSource, table_schema: T.StructType) -> Column:
    """Per line: the top-level keys the table has no column for yet (schema drift), an array, empty for most
    lines. Keys that are not plain lower-case identifiers stay in the raw payload only.

    A column, not a pass of its own: ingest gathers it while bronze is written, and the keys found become
    nullable string columns.
    """
    present = sorted({f.name.lower() for f in table_schema.fields} | {p.split(".")[0] for p in source.paths.values()})
    return F.filter(F.json_object_keys("payload"), lambda k: ~k.isin(*present) & k.rlike(_DRIFT_NAME.pattern))
