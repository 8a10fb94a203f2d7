"""Schema enforcement on write: evolve the table for safe changes, refuse unsafe ones.

For each column of a write, against the table:
- same type, or a type that casts up without loss (int into bigint, float into
  double, decimal(p,s) into decimal(p',s) with p <= p'): cast;
- a wider type that Iceberg can promote the column to (int -> bigint,
  float -> double, a decimal's precision up): the table column is widened;
- a column the table lacks: added as a nullable column when the write may evolve
  the table (bronze, whose sources drift), refused everywhere else: a table
  holds what its declaration says;
- anything else (a narrower type, a scale change, string into a number...) and a
  required table column missing from the write: `SchemaMismatchError` naming the
  table and the column.
Table columns the write lacks that are nullable read null.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import SchemaMismatchError
from ..settings import validate_identifier

__all__ = ["SchemaMismatchError", "casts_up", "conform", "promotable"]


_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


def _rank(dtype: T.DataType) -> int | None:
    for n, kind in enumerate(_INTEGRAL):
        if isinstance(dtype, kind):
            return n
    return None


def casts_up(src: T.DataType, dst: T.DataType) -> bool:
    """True when every `src` value fits in `dst` unchanged."""
    if src == dst:
        return True
    src_rank, dst_rank = _rank(src), _rank(dst)
    if src_rank is not None and dst_rank is not None:
        return src_rank <= dst_rank
    if isinstance(src, T.FloatType) and isinstance(dst, T.DoubleType):
        return True
    if isinstance(src, T.DecimalType) and isinstance(dst, T.DecimalType):
        return src.scale == dst.scale and src.precision <= dst.precision
    if isinstance(src, T.NullType):
        return True
    if isinstance(src, T.StructType) and isinstance(dst, T.StructType):
        dst_fields = {f.name: f.dataType for f in dst.fields}
        return all(f.name in dst_fields and casts_up(f.dataType, dst_fields[f.name]) for f in src.fields)
    if isinstance(src, T.MapType) and isinstance(dst, T.MapType):
        return casts_up(src.keyType, dst.keyType) and casts_up(src.valueType, dst.valueType)
    if isinstance(src, T.ArrayType) and isinstance(dst, T.ArrayType):
        return casts_up(src.elementType, dst.elementType)
    return False


def promotable(table_type: T.DataType, write_type: T.DataType) -> bool:
    """True when Iceberg can widen the table's column to hold `write_type`."""
    if isinstance(table_type, T.IntegerType) and isinstance(write_type, T.LongType):
        return True
    if isinstance(table_type, T.FloatType) and isinstance(write_type, T.DoubleType):
        return True
    return (
        isinstance(table_type, T.DecimalType) and isinstance(write_type, T.DecimalType)
        and table_type.scale == write_type.scale and table_type.precision < write_type.precision
    )


def conform(spark: SparkSession, table_id: str, df: DataFrame, evolve: bool = True) -> DataFrame:
    """`df` in the table's column order and types, after evolving the table where that is safe.

    With `evolve=False` a column the table does not have is refused (SchemaMismatchError).
    """
    table = spark.table(table_id).schema
    columns = {f.name: f for f in table.fields}
    changes = []
    for f in df.schema.fields:
        current = columns.get(f.name)
        if current is None and not evolve:
            raise SchemaMismatchError(
                f"table {table_id}, column {f.name}: the write has a column the table's declaration does not; "
                "declare it, or drop it from the write"
            )
        if current is None:
            validate_identifier(f.name, f"new column of {table_id}")
            changes.append(f"ALTER TABLE {table_id} ADD COLUMN `{f.name}` {f.dataType.simpleString()}")
        elif casts_up(f.dataType, current.dataType):
            continue
        elif promotable(current.dataType, f.dataType):
            changes.append(f"ALTER TABLE {table_id} ALTER COLUMN `{f.name}` TYPE {f.dataType.simpleString()}")
        else:
            raise SchemaMismatchError(
                f"table {table_id}, column {f.name}: the write has {f.dataType.simpleString()} but the table has "
                f"{current.dataType.simpleString()}; that would narrow or change the column, which is refused "
                "(cast the data, or evolve the table on purpose)"
            )
    present = {f.name for f in df.schema.fields}
    for f in table.fields:
        if f.name not in present and not f.nullable:
            raise SchemaMismatchError(
                f"table {table_id}, column {f.name}: required (NOT NULL) but missing from the write"
            )
    for statement in changes:
        spark.sql(statement)
    if changes:
        table = spark.table(table_id).schema
    return df.select(*(
        (F.col(f.name) if f.name in present else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in table.fields
    ))
