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

import json
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .landing import iso_timestamp

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


def encodings_of(schema_text: str, side: str = "after") -> Column | None:
    """`column_encodings` of one record schema's text, worked out once on the driver as a literal map.

    None where the text is not a schema `column_encodings` reads the same way (the record's own schema is
    then decoded per record, as before).
    """
    try:
        schema = json.loads(schema_text)
        images = [f for f in schema.get("fields") or [] if isinstance(f, dict) and f.get("field") == side]
        columns = (images[0].get("fields") if images else None) or []
        if not isinstance(columns, list) or not all(isinstance(c, dict) for c in columns):
            return None
        names = [c.get("field") for c in columns]
        if None in names or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
            return None
        entries = []
        for c in columns:
            parameters = c.get("parameters")
            if parameters is not None and not isinstance(parameters, dict):
                return None
            for key in ("type", "name"):
                if c.get(key) is not None and not isinstance(c.get(key), str):
                    return None
            params = None if parameters is None else F.create_map(*(
                x for k, v in parameters.items()
                for x in (F.lit(k), F.lit(None if v is None else v if isinstance(v, str)
                                           else json.dumps(v, separators=(",", ":"))))))
            entries += [F.lit(c["field"]), F.struct(
                F.lit(c["field"]).alias("field"), F.lit(c.get("type")).cast("string").alias("type"),
                F.lit(c.get("name")).cast("string").alias("name"),
                (params if params is not None else F.lit(None)).cast(_FIELD["parameters"].dataType).alias("parameters"))]
        if not entries:
            return F.create_map().cast(T.MapType(T.StringType(), _FIELD))
        return F.create_map(*entries)
    except (ValueError, AttributeError, TypeError):
        return None


def _signed64(hex_digits: Column) -> Column:
    """Up to 16 hex digits of two's complement, as signed decimal text (sign-extended to 64 bits)."""
    negative = F.substr(hex_digits, F.lit(1), F.lit(1)) >= "8"
    return F.conv(F.when(negative, F.call_function("lpad", hex_digits, F.lit(16), F.lit("F"))).otherwise(hex_digits),
                  16, -10)


def _unscaled_text(b64: Column) -> Column:
    """The signed integer held by base64 big-endian two's-complement bytes, as decimal text.

    Up to 8 bytes in one base conversion; up to 16 (every value of 38 digits) as the high part's
    signed value times 2^64 plus the low 8 bytes unsigned. Longer holds no decimal(38): null.
    """
    h = F.hex(F.unbase64(b64))
    digits = F.length(h)
    wide = "decimal(38,0)"
    high = _signed64(F.substr(h, F.lit(1), digits - 16)).cast(wide)
    low = F.conv(F.substr(h, digits - 15, F.lit(16)), 16, 10).cast(wide)
    step = F.lit(str(2**64)).cast(wide)
    # A negative value as (high + 1) * 2^64 + (low - 2^64): no partial sum beyond the value (38 digits hold it).
    wide_value = F.when(high < 0, (high + 1) * step + (low - step)).otherwise(high * step + low)
    return (F.when(digits > 32, F.lit(None).cast("string"))
            .when(digits > 16, wide_value.cast("string"))
            .when(digits > 0, _signed64(h)))


def _scaled(unscaled: Column, scale: Column) -> Column:
    """Decimal text of an integer's text and a scale, exact: `<unscaled>E<-scale>` (a decimal cast reads it)."""
    return F.concat(unscaled, F.lit("E"), (-F.coalesce(scale.cast("int"), F.lit(0))).cast("string"))


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
            .otherwise(iso_timestamp(text))
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
