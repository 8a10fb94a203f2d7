"""Debezium's value encodings, decoded in Spark.

A wrapped record (`{"schema": ..., "payload": ...}`) says how each column is
encoded: the field's Kafka Connect type, its semantic `name`
(`io.debezium.time.MicroTimestamp`, `org.apache.kafka.connect.data.Decimal`...)
and `parameters` (a decimal's scale). A bare record does not, so the declared
column type and the connector's declared modes (`decimal_handling_mode`,
`time_precision_mode`, as the connector was configured) decide.

What each declared type understands:
- timestamp: MicroTimestamp (int64 us), Timestamp and Connect Timestamp (int64 ms),
  NanoTimestamp (int64 ns), ZonedTimestamp and any ISO-8601 text;
- date: Date and Connect Date (int32 days since 1970-01-01), ISO text;
- time: MicroTime (us), Time and Connect Time (ms), NanoTime (ns) since midnight,
  ZonedTime and text; kept as `HH:mm:ss.SSSSSS` text;
- decimal(p,s): Connect Decimal (base64 of the big-endian two's-complement
  unscaled value, its scale in the schema), VariableScaleDecimal (`{"scale",
  "value"}`), and text or a number (`decimal.handling.mode` string or double);
- binary: base64 text (bytes); json, uuid, string: text (Json, Uuid, Enum).

A TOASTed column that did not change arrives as `__debezium_unavailable_value`
(`UNAVAILABLE`); silver keeps the stored value instead (silver/cdc.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

UNAVAILABLE = "__debezium_unavailable_value"

DEBEZIUM_TIME = "io.debezium.time."
CONNECT = "org.apache.kafka.connect.data."

_FIELD = T.StructType([
    T.StructField("field", T.StringType()),
    T.StructField("type", T.StringType()),
    T.StructField("name", T.StringType()),
    T.StructField("parameters", T.MapType(T.StringType(), T.StringType())),
])
# The envelope schema: its `before` and `after` fields list the row's columns.
SCHEMA = T.StructType([T.StructField("fields", T.ArrayType(T.StructType([
    T.StructField("field", T.StringType()),
    T.StructField("fields", T.ArrayType(_FIELD)),
])))])

_INTEGER = r"^-?[0-9]+$"


@dataclass(frozen=True)
class Modes:
    """How the connector was told to encode values (Debezium's property names, lower case)."""

    decimal_handling_mode: str = "precise"  # precise | string | double
    time_precision_mode: str = "adaptive"  # adaptive | adaptive_time_microseconds | connect


def column_encodings(schema: Column, side: str = "after") -> Column:
    """map<column, struct<field, type, name, parameters>> of one image, from a parsed envelope SCHEMA."""
    image = F.filter(schema["fields"], lambda f: f["field"] == side)
    columns = F.coalesce(image[0]["fields"], F.array().cast(T.ArrayType(_FIELD)))
    return F.map_from_arrays(F.transform(columns, lambda f: f["field"]), columns)


def _byte(h: Column, i: Column) -> Column:
    """Byte i (0-based) of a hex string, as a number."""
    return F.conv(F.substr(h, i * 2 + 1, F.lit(2)), 16, 10).cast("decimal(38,0)")


def _unscaled_text(b64: Column) -> Column:
    """The signed integer held by base64 big-endian two's-complement bytes, as decimal text."""
    h = F.hex(F.unbase64(b64))
    n = (F.length(h) / 2).cast("int")
    unsigned = F.aggregate(F.sequence(F.lit(0), n - 1), F.lit(0).cast("decimal(38,0)"),
                           lambda acc, i: (acc * F.lit(256) + _byte(h, i)).cast("decimal(38,0)"))
    modulus = F.aggregate(F.sequence(F.lit(1), n), F.lit(1).cast("decimal(38,0)"),
                          lambda acc, _i: (acc * F.lit(256)).cast("decimal(38,0)"))
    negative = _byte(h, F.lit(0)) >= 128
    value = F.when(negative, (unsigned - modulus).cast("decimal(38,0)")).otherwise(unsigned)
    return F.when(n > 0, value.cast("string"))


def _scaled(unscaled: Column, scale: Column) -> Column:
    """Decimal text from an integer's text and a scale, exactly (no floating point)."""
    negative = unscaled.startswith("-")
    digits = F.regexp_replace(unscaled, "^-", "")
    scale = F.coalesce(scale.cast("int"), F.lit(0))
    padded = F.call_function("lpad", digits, F.greatest(F.length(digits), scale + 1), F.lit("0"))
    cut = F.length(padded) - scale
    text = F.when(scale > 0, F.concat(F.substr(padded, F.lit(1), cut), F.lit("."),
                                      F.substr(padded, cut + 1, scale))).otherwise(padded)
    return F.when(unscaled.isNotNull(), F.concat(F.when(negative, F.lit("-")).otherwise(F.lit("")), text))


def decode(text: Column, type_name: str, encoding: Column, modes: Modes) -> Column:
    """A column's value from its JSON text, as the declared type (null where it does not decode).

    `encoding` is the field's struct<field, type, name, parameters> from the record's
    schema, null for a bare record.
    """
    name = encoding["name"]
    bare = encoding.isNull()
    integer = text.rlike(_INTEGER)
    kind = type_name.strip().lower().replace(" ", "")
    if kind == "timestamp":
        number = text.cast("long")
        bare_ms = modes.time_precision_mode == "connect"
        return (
            F.when(name == DEBEZIUM_TIME + "MicroTimestamp", F.timestamp_micros(number))
            .when(name.isin(DEBEZIUM_TIME + "Timestamp", CONNECT + "Timestamp"), F.timestamp_millis(number))
            .when(name == DEBEZIUM_TIME + "NanoTimestamp", F.timestamp_micros(F.floor(number / 1000).cast("long")))
            .when(bare & integer, F.timestamp_millis(number) if bare_ms else F.timestamp_micros(number))
            .otherwise(F.to_timestamp(text))
        )
    if kind == "date":
        return F.when((~bare & name.isin(DEBEZIUM_TIME + "Date", CONNECT + "Date")) | (bare & integer),
                      F.date_add(F.lit("1970-01-01").cast("date"), text.cast("int"))).otherwise(F.to_date(text))
    if kind == "time":
        number = text.cast("long")
        bare_scale = 1000 if modes.time_precision_mode == "connect" else 1
        micros = (F.when(name == DEBEZIUM_TIME + "MicroTime", number)
                  .when(name.isin(DEBEZIUM_TIME + "Time", CONNECT + "Time"), number * 1000)
                  .when(name == DEBEZIUM_TIME + "NanoTime", F.floor(number / 1000).cast("long"))
                  .when(bare & integer, number * bare_scale))
        return F.when(micros.isNotNull(), F.date_format(F.timestamp_micros(micros), "HH:mm:ss.SSSSSS")
                      ).otherwise(text)
    if kind.startswith("decimal"):
        dtype = T._parse_datatype_string(kind)
        scale_param = encoding["parameters"]["scale"]
        variable = F.when(text.startswith("{"), _scaled(_unscaled_text(F.get_json_object(text, "$.value")),
                                                        F.get_json_object(text, "$.scale")))
        precise = _scaled(_unscaled_text(text), scale_param)
        assert isinstance(dtype, T.DecimalType)
        bare_precise = modes.decimal_handling_mode == "precise"
        as_text = (
            F.when(name == CONNECT + "Decimal", precise)
            .when(name == "io.debezium.data.VariableScaleDecimal", variable)
            .when(bare & text.startswith("{"), variable)
            .when(bare & F.lit(bare_precise) & ~text.rlike(r"^-?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$"),
                  _scaled(_unscaled_text(text), F.lit(dtype.scale)))
            .otherwise(text)
        )
        return as_text.cast(dtype)
    if kind == "binary":
        return F.unbase64(text)
    if kind == "boolean":
        lowered = F.lower(F.trim(text))
        return F.when(lowered == "true", True).when(lowered == "false", False)
    if kind in ("string", "json", "uuid"):
        return text
    return text.cast(T._parse_datatype_string(kind if kind != "long" else "bigint"))


def declared_type_of(connect_type: str | None, name: str | None, parameters: dict | None) -> str:
    """The declared type a new upstream column gets, from its Kafka Connect schema."""
    name = name or ""
    parameters = parameters or {}
    if name.endswith(("MicroTimestamp", "NanoTimestamp", "ZonedTimestamp")) or name in (
            DEBEZIUM_TIME + "Timestamp", CONNECT + "Timestamp"):
        return "timestamp"
    if name in (DEBEZIUM_TIME + "Date", CONNECT + "Date"):
        return "date"
    if name.endswith(("MicroTime", "NanoTime", "ZonedTime")) or name in (DEBEZIUM_TIME + "Time", CONNECT + "Time"):
        return "time"
    if name == CONNECT + "Decimal":
        scale = int(parameters.get("scale", 0))
        precision = int(parameters.get("connect.decimal.precision", 38))
        return f"decimal({max(precision, scale, 1)},{scale})"
    if name == "io.debezium.data.VariableScaleDecimal":
        return "decimal(38,10)"
    return {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float32": "double",
            "float64": "double", "boolean": "boolean", "bytes": "binary"}.get(connect_type or "", "string")
