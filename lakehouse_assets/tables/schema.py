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
Table columns the write lacks that are nullable read null. The table is changed
by tables/evolution.py's `change_table` (pyiceberg, by field id), as every change
to a table is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import SchemaMismatchError
from ..settings import validate_identifier
from .evolution import Change, missing
from .types import promotes

if TYPE_CHECKING:
    from .handle import TableHandle

__all__ = ["SchemaMismatchError", "casts_up", "conform"]


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
    if isinstance(src, T.NullType):
        return True
    if isinstance(src, T.StructType) and isinstance(dst, T.StructType):
        dst_fields = {f.name: f.dataType for f in dst.fields}
        return all(f.name in dst_fields and casts_up(f.dataType, dst_fields[f.name]) for f in src.fields)
    if isinstance(src, T.MapType) and isinstance(dst, T.MapType):
        return casts_up(src.keyType, dst.keyType) and casts_up(src.valueType, dst.valueType)
    if isinstance(src, T.ArrayType) and isinstance(dst, T.ArrayType):
        return casts_up(src.elementType, dst.elementType)
    return promotes(src, dst)  # float into double, a decimal into more precision


def _nullable(dtype: T.DataType) -> T.DataType:
    """`dtype` as a column added for a write holds it: every nested field, element and map value may be null."""
    if isinstance(dtype, T.StructType):
        return T.StructType([T.StructField(f.name, _nullable(f.dataType)) for f in dtype.fields])
    if isinstance(dtype, T.ArrayType):
        return T.ArrayType(_nullable(dtype.elementType))
    if isinstance(dtype, T.MapType):
        return T.MapType(_nullable(dtype.keyType), _nullable(dtype.valueType))
    return dtype


def _write_changes(table: TableHandle, held: T.StructType, df: DataFrame, evolve: bool) -> list[Change]:
    """The changes the table needs to hold `df` (its columns added, widened), or SchemaMismatchError for a
    column it cannot take."""
    columns = {f.name: f for f in held.fields}
    changes = []
    for f in df.schema.fields:
        current = columns.get(f.name)
        write_type = f.dataType.simpleString()
        if current is None and not evolve:
            raise SchemaMismatchError(
                f"table {table.id}, column {f.name}: the write has a column the table's declaration does not; "
                "declare it, or drop it from the write"
            )
        if current is None:
            validate_identifier(f.name, f"new column of {table.id}")
            changes.append(Change(table.name, "add column", f.name, "", write_type, True,
                                  f"UpdateSchema.add_column({f.name}): from the write",
                                  declared=T.StructField(f.name, _nullable(f.dataType))))
        elif casts_up(f.dataType, current.dataType):
            continue
        elif promotes(current.dataType, f.dataType):
            changes.append(Change(table.name, "widen type", f.name, current.dataType.simpleString(), write_type,
                                  True, f"UpdateSchema.update_column({f.name}, {write_type}): for the write",
                                  declared=T.StructField(f.name, f.dataType)))
        else:
            raise SchemaMismatchError(
                f"table {table.id}, column {f.name}: the write has {write_type} but the table has "
                f"{current.dataType.simpleString()}; that would narrow or change the column, which is refused "
                "(cast the data, or evolve the table on purpose)"
            )
    return changes


def conform(table: TableHandle, df: DataFrame, evolve: bool = True) -> DataFrame:
    """`df` in the table's column order and types, after evolving the table where that is safe.

    With `evolve=False` a column the table does not have is refused (SchemaMismatchError).
    """
    held = table.schema()
    changes = _write_changes(table, held, df, evolve)
    present = {f.name for f in df.schema.fields}
    for f in held.fields:
        if f.name not in present and not f.nullable:
            raise SchemaMismatchError(
                f"table {table.id}, column {f.name}: required (NOT NULL) but missing from the write"
            )
    if changes:  # those another run made meanwhile are left out, on the table as it stands when they are made
        table.evolve(lambda held_now: missing(changes, held_now))
        held = table.schema()
    return df.select(*(
        (F.col(f.name) if f.name in present else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in held.fields
    ))
