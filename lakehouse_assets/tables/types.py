"""Column type names as declarations write them, and the Spark types they mean."""

from __future__ import annotations

import re

from pyspark.sql import types as T

_TYPES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "bigint": T.LongType(),
    "double": T.DoubleType(),
    "float": T.FloatType(),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
    "date": T.DateType(),
    # A JSON object of text values (e.g. free-form event properties).
    "map": T.MapType(T.StringType(), T.StringType()),
    "map<string,string>": T.MapType(T.StringType(), T.StringType()),
    "binary": T.BinaryType(),
    # Kept as text: time of day (HH:mm:ss.SSSSSS), JSON documents, UUIDs.
    "time": T.StringType(),
    "json": T.StringType(),
    "uuid": T.StringType(),
}
# A decimal type's name: `decimal(12,2)` (precision, scale), spaces allowed as Iceberg writes it (`decimal(12, 2)`).
DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
# Iceberg's type promotions besides decimals: a column of the first type can become the second in metadata alone.
_PROMOTIONS = {("int", "bigint"), ("float", "double")}
NUMERIC = (T.IntegerType, T.LongType, T.DoubleType, T.FloatType, T.DecimalType)
TYPE_NAMES = sorted({"string", "int", "long", "double", "float", "boolean", "timestamp", "date", "map", "binary", "time",
                     "json", "uuid"}) + ["decimal(p,s)"]


def spark_type(name: str) -> T.DataType:
    """`long`, `decimal(12,2)`, `timestamp`... as a Spark type; ValueError names the allowed ones."""
    text = str(name).strip().lower().replace(" ", "")
    m = DECIMAL.match(text)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise ValueError(f"decimal({precision},{scale}): precision must be 1..38 and scale <= precision")
        return T.DecimalType(precision, scale)
    try:
        return _TYPES[text]
    except KeyError:
        raise ValueError(f"unknown type {name!r}; use one of {', '.join(TYPE_NAMES)}") from None


def type_name(dtype: T.DataType) -> str:
    """The declared name of a Spark type (the inverse of spark_type for the types it makes)."""
    if isinstance(dtype, T.DecimalType):
        return f"decimal({dtype.precision},{dtype.scale})"
    if isinstance(dtype, T.MapType):
        return "map"
    return {"bigint": "long", "integer": "int"}.get(dtype.simpleString(), dtype.simpleString())


def is_numeric(dtype: T.DataType) -> bool:
    return isinstance(dtype, NUMERIC)


def promotes(held: T.DataType | str, wider: T.DataType | str) -> bool:
    """True when Iceberg can widen a column of type `held` to `wider` in metadata alone: int to bigint, float to
    double, a decimal to more precision at the same scale. Types are Spark's, or their names as Spark writes
    them (`simpleString`)."""
    old, new = (t if isinstance(t, str) else t.simpleString() for t in (held, wider))
    if (old, new) in _PROMOTIONS:
        return True
    a, b = DECIMAL.match(old), DECIMAL.match(new)
    return bool(a and b and a.group(2) == b.group(2) and int(b.group(1)) > int(a.group(1)))
