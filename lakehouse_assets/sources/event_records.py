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

from ..landing.reader import LINEAGE_COLUMNS, RECORD_COLUMNS, blank, json_reason, lineage_of, typed_value
from ..project import EventSource

_DRIFT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
STAMP_COLUMNS = ("ingested_at", "run_id")
TOP_KEYS = "_top_keys"
_CORRUPT = T.StructField("_corrupt_record", T.StringType())


def parse_events(source: EventSource, lines: DataFrame, table_schema: T.StructType | None = None) -> DataFrame:
    """Typed event columns, the lineage columns, `reason` (null when the line is a good event), and the line's
    top-level keys (`TOP_KEYS`, for `new_event_keys`).

    Each line is parsed once with its map fields typed and every other top-level field as text (typed after,
    so that a wrong type becomes a precise reason instead of Spark nulling the whole record). Only the lines
    that parse refuses (not JSON, a map field that is not an object) are parsed again, all as text, which tells
    which field is wrong. Columns the table gained from schema drift are filled from the payload by name. Lines
    the line reader already parsed (`_json_ok`, see `landing.reader.read_lines`) use its parse instead of the
    first one here.
    """
    top_level = sorted({p for p in source.paths.values() if "." not in p})
    maps = {name for name, path in source.paths.items()
            if "." not in path and isinstance(source.fields[name], T.MapType)}
    options = {"columnNameOfCorruptRecord": "_corrupt_record"}
    first_schema = read_json_schema(source)
    text_schema = T.StructType([T.StructField(p, T.StringType()) for p in top_level] + [_CORRUPT])
    first, keys = F.from_json("payload", first_schema, options), F.json_object_keys("payload")
    if "_json_ok" in lines.columns:  # parsed by the line reader, where it could
        first = F.when(F.col("_json_ok"), F.col("_json")).otherwise(first)
        keys = F.when(F.col("_json_ok"), F.col("_json_keys")).otherwise(keys)
    parsed = lines.withColumn("first", first).withColumn(TOP_KEYS, keys).withColumn(
        "text", F.when(F.col("first._corrupt_record").isNotNull(), F.from_json("payload", text_schema, options)))
    at_first = F.col("text").isNull()
    lineage = lineage_of(lines)

    def text(name: str) -> Column:
        path = source.paths[name]
        if "." in path:
            return F.get_json_object(F.col("payload"), f"$.{path}")
        if name in maps:  # typed by the first parse; its text only where the line was parsed again
            return F.when(~at_first, F.col("text")[path])
        return F.when(at_first, F.col("first")[path]).otherwise(F.col("text")[path])

    # Three projections: the texts, the typed values, then the reasons over both, so that each value is computed
    # once (in a single projection, a typed value used both as a column and inside the reason's CASE is computed
    # twice).
    # A column the table keeps that the declaration does not name (added by schema drift, or declared earlier and
    # since removed): filled from the record's key of its name, typed as the column is, never cast from another type.
    kept = {f.name: f.dataType for f in drifted_columns(source, table_schema)}
    texts = parsed.select(*lineage, TOP_KEYS, F.col("text._corrupt_record").alias("__corrupt"), at_first.alias("__first"),
                          *(text(name).alias(f"__text_{name}") for name in source.fields),
                          *(F.get_json_object("payload", f"$.{name}").alias(f"__text_{name}") for name in kept),
                          *(F.col("first")[source.paths[name]].alias(f"__map_{name}") for name in maps))

    def typed(name: str, dtype: T.DataType) -> Column:
        value = typed_value(F.col(f"__text_{name}"), dtype)
        return F.when(F.col("__first"), F.col(f"__map_{name}")).otherwise(value) if name in maps else value

    typed_columns = texts.select("*", *(typed(name, dtype).alias(name) for name, dtype in source.fields.items()),
                                 *(typed_value(F.col(f"__text_{name}"), dtype).alias(name) for name, dtype in kept.items()))

    reason = json_reason(F.col("payload"), F.col("__corrupt"))
    for name in source.required:
        missing = blank(F.col(f"__text_{name}"))
        if name in maps:  # missing: null from the first parse, or blank text where the line was parsed again
            missing = F.when(F.col("__first"), F.col(name).isNull()).otherwise(missing)
        reason = reason.when(missing, F.lit(f"missing required field {name}"))
    for name, dtype in [*source.fields.items(), *kept.items()]:
        what = "a JSON object" if isinstance(dtype, T.MapType) else f"a {dtype.simpleString()}"
        raw_text = F.col(f"__text_{name}")
        held = "" if name in source.fields else " (a column bronze keeps though the declaration no longer names it)"
        reason = reason.when(
            raw_text.isNotNull() & F.col(name).isNull(),
            F.concat(F.lit(f"{name}{held} is not {what}: "), F.substring(raw_text, 1, 200)),
        )
    return typed_columns.select(
        *source.fields,
        *lineage,
        *kept,
        reason.alias("reason"),
        TOP_KEYS,  # Spark computes it only where a later step uses it (new_event_keys)
    )


def read_json_schema(source: EventSource) -> T.StructType:
    """What each line is parsed into first: the declared top-level fields as text, map fields as maps."""
    top_level = sorted({p for p in source.paths.values() if "." not in p})
    first_types = {path: source.fields[name] for name, path in source.paths.items()
                   if "." not in path and isinstance(source.fields[name], T.MapType)}
    return T.StructType([T.StructField(p, first_types.get(p, T.StringType())) for p in top_level] + [_CORRUPT])


def drifted_columns(source: EventSource, table_schema: T.StructType | None) -> list[T.StructField]:
    """Columns the bronze table gained from the data, beyond the declaration."""
    taken = set(source.fields) | set(LINEAGE_COLUMNS) | set(RECORD_COLUMNS) | set(STAMP_COLUMNS)
    return [f for f in (table_schema.fields if table_schema else []) if f.name not in taken]


def new_event_keys(source: EventSource, table_schema: T.StructType) -> Column:
    """Per line: the top-level keys the table has no column for yet (schema drift), an array, empty for most
    lines. Keys that are not plain lower-case identifiers stay in the raw payload only.

    A column, not a separate pass over the data: ingest collects it while bronze is written, and the keys found
    become nullable string columns.
    """
    present = sorted({f.name.lower() for f in table_schema.fields} | {p.split(".")[0] for p in source.paths.values()})
    return F.filter(F.col(TOP_KEYS), lambda k: ~k.isin(*present) & k.rlike(_DRIFT_NAME.pattern))
