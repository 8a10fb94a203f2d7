"""Debezium's value encodings, decoded in Spark.

A wrapped record (`{"schema": ..., "payload": ...}`) says how each column is
encoded: the field's Kafka Connect type, its semantic `name`
(`io.debezium.time.MicroTimestamp`, `org.apache.kafka.connect.data.Decimal`...)
and `parameters` (a decimal's scale). A bare record does not, so the declared
column type and the connector's declared modes (`decimal_handling_mode`,
`time_precision_mode`, as the connector was configured) decide.

What each declared type understands:
- timestamp: MicroTimestamp (int64 us), Timestamp and Connect Timestamp (int64 ms),
  NanoTimestamp (int64 ns, floored to the microsecond in integers: a double has too
  few digits for 1.7e18), ZonedTimestamp and any ISO-8601 text;
- date: Date and Connect Date (int32 days since 1970-01-01), ISO text;
- time: MicroTime (us), Time and Connect Time (ms), NanoTime (ns) since midnight,
  ZonedTime and text; kept as `HH:mm:ss.SSSSSS` text;
- decimal(p,s): Connect Decimal (base64 of the big-endian two's-complement
  unscaled value, its scale in the schema), VariableScaleDecimal (`{"scale",
  "value"}`), and text or a number (`decimal.handling.mode` string or double).
  A value with non-zero digits beyond the declared scale does not decode (its
  record is quarantined, `more_scale` says why) unless the column is declared
  `rounding: half_up`;
- binary: base64 text (bytes); json, uuid, string: text (Json, Uuid, Enum).

A TOASTed column that did not change arrives as `__debezium_unavailable_value`
(`UNAVAILABLE`); silver keeps the stored value instead (silver/cdc.py).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..landing.reader import iso_timestamp
from ..project.model import ROUNDINGS
from ..runtime.java_jar import UNSCALED_CLASS

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
_UNSCALED = "lakehouse_unscaled_digits"
_REGISTERED: weakref.WeakSet[SparkSession] = weakref.WeakSet()  # the sessions that have it
# A decimal's text: sign, integer digits, fraction digits, exponent (an int: a longer one does not cast).
_DECIMAL = r"^\s*([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]{1,9}))?\s*$"


@dataclass(frozen=True)
class Modes:
    """How the connector was told to encode values (Debezium's property names, lower case)."""

    decimal_handling_mode: str = "precise"  # precise | string | double
    time_precision_mode: str = "adaptive"  # adaptive | adaptive_time_microseconds | connect


def column_encodings(schema: Column, side: str = "after") -> Column:
    """map<column, struct<field, type, name, parameters>> of one image, from a parsed envelope SCHEMA."""
    image = F.filter(schema["fields"], lambda f: f["field"] == side)
    columns = F.coalesce(F.get(image, 0)["fields"], F.array().cast(T.ArrayType(_FIELD)))
    return F.map_from_arrays(F.transform(columns, lambda f: f["field"]), columns)


def encodings_of(schema_text: str, side: str = "after") -> Column | None:
    """`column_encodings` of one record schema's text, worked out once on the driver as a literal map.

    None when the text is not a schema read exactly as `column_encodings` would read it: each record's own
    schema is then decoded in Spark instead.
    """
    try:
        columns = _image_columns(json.loads(schema_text), side)
        if columns is None:
            return None
        entries = []
        for column in columns:
            entry = _encoding_entry(column)
            if entry is None:
                return None
            entries += entry
        if not entries:
            return F.create_map().cast(T.MapType(T.StringType(), _FIELD))
        return F.create_map(*entries)
    except (ValueError, AttributeError, TypeError):
        return None


def _image_columns(schema: Any, side: str) -> list[dict] | None:
    """The column fields of one image (`before` or `after`) of a parsed schema; None unless each is an
    object and their names are distinct text."""
    images = [f for f in schema.get("fields") or [] if isinstance(f, dict) and f.get("field") == side]
    columns = (images[0].get("fields") if images else None) or []
    if not isinstance(columns, list) or not all(isinstance(c, dict) for c in columns):
        return None
    names = [c.get("field") for c in columns]
    if None in names or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
        return None
    return columns


def _encoding_entry(column: dict) -> list[Column] | None:
    """One column's map entry as literals: its name, then struct<field, type, name, parameters>. None when its
    type or name is not text, or its parameters not an object."""
    parameters = column.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        return None
    if any(column.get(key) is not None and not isinstance(column.get(key), str) for key in ("type", "name")):
        return None
    params = F.lit(None) if parameters is None else _parameters_map(parameters)
    return [F.lit(column["field"]), F.struct(
        F.lit(column["field"]).alias("field"), F.lit(column.get("type")).cast("string").alias("type"),
        F.lit(column.get("name")).cast("string").alias("name"),
        params.cast(_FIELD["parameters"].dataType).alias("parameters"))]


def _parameters_map(parameters: dict) -> Column:
    """A field's parameters as a literal map of text: a value that is not text is kept as compact JSON."""
    def text(value: Any) -> str | None:
        return None if value is None else value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

    return F.create_map(*(x for k, v in parameters.items() for x in (F.lit(k), F.lit(text(v)))))


def _unscaled_text(b64: Column) -> Column:
    """The signed integer held by base64 big-endian two's-complement bytes, as decimal text: null for no bytes,
    or more than a decimal(38) holds (the project's `UnscaledDigits`, one call a value, registered in the session
    on first use)."""
    spark = SparkSession.active()
    if spark not in _REGISTERED:  # (a catalog look-up: once a session, not once a column)
        if not spark.catalog.functionExists(_UNSCALED):
            spark.udf.registerJavaFunction(_UNSCALED, UNSCALED_CLASS, T.StringType())
        _REGISTERED.add(spark)
    return F.call_function(_UNSCALED, F.unbase64(b64))


def millis_timestamp(number: Column) -> Column:
    """A timestamp of epoch milliseconds, null past the microseconds a long holds (`timestamp_millis` raises there,
    whatever the mode: one such value would fail its whole batch)."""
    return F.timestamp_micros(F.try_multiply(number, F.lit(1000)))


def _floor_div(number: Column, divisor: int) -> Column:
    """`number // divisor` on longs, exact: `div` truncates toward zero, so a negative remainder steps down one."""
    quotient = F.call_function("div", number, F.lit(divisor))
    return F.when(number % divisor < 0, quotient - 1).otherwise(quotient)


def _decimal_kind(type_name: str) -> T.DecimalType | None:
    kind = type_name.strip().lower().replace(" ", "")
    if not kind.startswith("decimal"):
        return None
    dtype = T._parse_datatype_string(kind)
    assert isinstance(dtype, T.DecimalType)
    return dtype


def _decimal_parts(text: Column, dtype: T.DecimalType, encoding: Column, modes: Modes) -> tuple[Column, Column]:
    """The exact value of a decimal column's JSON text as (unscaled integer as text, scale): the value is
    unscaled * 10^-scale. Text that is no decimal stays as it came, at scale 0 (it does not cast)."""
    name = encoding["name"]
    bare = encoding.isNull()
    connect = name == CONNECT + "Decimal"
    variable = (name == "io.debezium.data.VariableScaleDecimal") | (bare & text.startswith("{"))
    bare_precise = modes.decimal_handling_mode == "precise"
    bare_bytes = bare & F.lit(bare_precise) & ~text.rlike(r"^-?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$")
    written = text.rlike(_DECIMAL)  # decimal.handling.mode string or double: sign, digits, fraction, exponent
    part = [F.regexp_extract(text, _DECIMAL, n) for n in (1, 2, 3, 4)]
    unscaled = (
        F.when(connect, _unscaled_text(text))
        .when(variable, F.when(text.startswith("{"), _unscaled_text(F.get_json_object(text, "$.value"))))
        .when(bare_bytes, _unscaled_text(text))
        .when(written, F.concat(F.when(part[0] == "-", "-").otherwise(""), part[1], part[2]))
        .otherwise(text)
    )
    scale = (
        F.when(connect, encoding["parameters"]["scale"].try_cast("int"))
        .when(variable, F.get_json_object(text, "$.scale").try_cast("int"))
        .when(bare_bytes, F.lit(dtype.scale))
        .when(written, F.length(part[2]) - F.when(part[3] != "", part[3].try_cast("int")).otherwise(0))
    )
    return unscaled, F.coalesce(scale, F.lit(0))


def _exact(unscaled: Column, scale: Column) -> Column:
    """Decimal text of an integer's text and a scale, exact: `<unscaled>E<-scale>` (a decimal cast reads it)."""
    return F.concat(unscaled, F.lit("E"), (-scale).cast("string"))


def _beyond(unscaled: Column, scale: Column, declared: int) -> Column:
    """Whether the value has a non-zero digit past the `declared` scale (a cast would round it away): its
    unscaled integer does not end in `scale - declared` zeros. Only the scale is read when it is not past."""
    zeros = F.concat(F.lit("[1-9]0{0,"), (scale - declared - 1).cast("string"), F.lit("}$"))
    return (scale > declared) & F.call_function("rlike", unscaled, zeros)


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
    """`body(value)` with `value` computed once (Spark 3.5 has no `let`: an expression naming a column n times
    computes it n times); evaluated without code generation, so kept to rows that are already bad."""
    return F.transform(F.array(value), body)[0]


def _plain(parts: Column) -> Column:
    """Plain digits (`-0.005`) of a struct<unscaled, scale> whose scale is above 0, trailing zeros dropped;
    a value thousands of places from its point is shown in its exponent form instead of written out."""
    unscaled, scale = parts["unscaled"], parts["scale"]
    magnitude = F.regexp_replace(unscaled, "^[+-]", "")
    padded = F.call_function("lpad", magnitude, F.greatest(F.length(magnitude), scale + 1), F.lit("0"))
    whole = F.regexp_replace(F.substr(padded, F.lit(1), F.length(padded) - scale), "^0+(?=[0-9])", "")
    fraction = F.regexp_replace(F.substr(padded, F.length(padded) - scale + 1, scale), "0+$", "")
    plain = F.concat(F.when(unscaled.startswith("-"), "-").otherwise(""), whole, F.lit("."), fraction)
    return F.when(scale <= 1000, plain).otherwise(_exact(unscaled, scale))


def more_scale(text: Column, type_name: str, encoding: Column, modes: Modes) -> Column | None:
    """For a decimal column: its value as plain digits when they go beyond the declared scale (why `decode`
    gave null unless the column rounds), else null; None for a column of another type. Meant for the
    records that did not decode."""
    dtype = _decimal_kind(type_name)
    if dtype is None:
        return None
    unscaled, scale = _decimal_parts(text, dtype, encoding, modes)
    return _let(F.struct(unscaled.alias("unscaled"), scale.alias("scale")),
                lambda v: F.when(_beyond(v["unscaled"], v["scale"], dtype.scale), _plain(v)))


def decode(text: Column, type_name: str, encoding: Column, modes: Modes, rounding: str | None = None) -> Column:
    """A column's value from its JSON text, as the declared type (null where it does not decode).

    `encoding` is the field's struct<field, type, name, parameters> from the record's
    schema, null for a bare record. `rounding` (a decimal column's declared `half_up`): a value with
    more scale is rounded half up (away from zero) instead of not decoding.
    """
    if rounding not in (None, *ROUNDINGS):
        raise ValueError(f"rounding {rounding!r} is not known: declare one of {', '.join(ROUNDINGS)}, or none")
    name = encoding["name"]
    bare = encoding.isNull()
    integer = text.rlike(_INTEGER)
    kind = type_name.strip().lower().replace(" ", "")
    if kind == "timestamp":
        number = text.try_cast("long")
        bare_ms = modes.time_precision_mode == "connect"
        return (
            F.when(name == DEBEZIUM_TIME + "MicroTimestamp", F.timestamp_micros(number))
            .when(name.isin(DEBEZIUM_TIME + "Timestamp", CONNECT + "Timestamp"), millis_timestamp(number))
            .when(name == DEBEZIUM_TIME + "NanoTimestamp", F.timestamp_micros(_floor_div(number, 1000)))
            .when(bare & integer, millis_timestamp(number) if bare_ms else F.timestamp_micros(number))
            .otherwise(iso_timestamp(text))
        )
    if kind == "date":
        days = text.try_cast("int")
        return F.when((~bare & name.isin(DEBEZIUM_TIME + "Date", CONNECT + "Date")) | (bare & integer),
                      F.date_add(F.lit("1970-01-01").cast("date"), days)).otherwise(text.try_cast("date"))
    if kind == "time":
        number = text.try_cast("long")
        bare_scale = 1000 if modes.time_precision_mode == "connect" else 1
        micros = (F.when(name == DEBEZIUM_TIME + "MicroTime", number)
                  .when(name.isin(DEBEZIUM_TIME + "Time", CONNECT + "Time"), F.try_multiply(number, F.lit(1000)))
                  .when(name == DEBEZIUM_TIME + "NanoTime", _floor_div(number, 1000))
                  .when(bare & integer, F.try_multiply(number, F.lit(bare_scale))))
        # A value whose microseconds do not fit a long (null) is kept as it came, as text.
        return F.when(micros.isNotNull(), F.date_format(F.timestamp_micros(micros), "HH:mm:ss.SSSSSS")
                      ).otherwise(text)
    dtype = _decimal_kind(kind)
    if dtype is not None:
        unscaled, scale = _decimal_parts(text, dtype, encoding, modes)
        value = _exact(unscaled, scale).try_cast(dtype)
        if rounding == "half_up":
            return value  # Spark's decimal cast rounds half up
        return F.when(~_beyond(unscaled, scale, dtype.scale), value)
    if kind == "binary":
        return F.unbase64(text)
    if kind == "boolean":
        lowered = F.lower(F.trim(text))
        return F.when(lowered == "true", True).when(lowered == "false", False)
    if kind in ("string", "json", "uuid"):
        return text
    return text.try_cast(T._parse_datatype_string(kind if kind != "long" else "bigint"))


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
