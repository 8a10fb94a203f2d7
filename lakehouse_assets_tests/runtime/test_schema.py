"""Schema enforcement on write: narrowing and missing required columns refused, safe changes evolve the table."""

import re
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from lakehouse_assets.errors import UpstreamMissingError
from lakehouse_assets.runtime.commit import publish, stage
from lakehouse_assets.tables.registry import TableSpec, col
from lakehouse_assets.tables.schema import SchemaMismatchError, casts_up
from lakehouse_assets.tables.types import promotes

SPEC = TableSpec(
    name="schema_probe", layer="test", description="schema enforcement probe",
    schema=T.StructType([
        col("id", T.LongType(), False),
        col("qty", T.IntegerType()),
        col("amount", T.DecimalType(12, 2)),
        col("note", T.StringType()),
    ]),
)


def write(lakehouse, spark, rows, schema, evolve=True):
    table = lakehouse.table(SPEC)
    return publish(stage(table, "run-1", "probe", "-", evolve=evolve).append(spark.createDataFrame(rows, schema)))


@pytest.mark.parametrize("column, bad_type, value", [
    ("amount", "decimal(14,4)", Decimal("1.2345")),  # scale change: digits would be lost
    ("qty", "double", 1.5),                          # fraction into an int column
    ("id", "string", "abc"),                          # text into a number
])
def test_a_narrowing_or_incompatible_write_is_refused_naming_table_and_column(lakehouse, spark, column, bad_type, value):
    write(lakehouse, spark, [(1, 2, Decimal("3.00"), "x")], "id bigint, qty int, amount decimal(12,2), note string")
    before = lakehouse.iceberg_table(SPEC).current_snapshot().snapshot_id
    columns = {"id": "bigint", "qty": "int", "amount": "decimal(12,2)", "note": "string"}
    columns[column] = bad_type
    row = {"id": 2, "qty": 3, "amount": Decimal("4.00"), "note": "y", column: value}
    expected = rf"table \S+\.schema_probe, column {column}: the write has {re.escape(bad_type)}"
    with pytest.raises(SchemaMismatchError, match=expected):
        write(lakehouse, spark, [tuple(row[c] for c in columns)], ", ".join(f"{c} {t}" for c, t in columns.items()))
    table = lakehouse.iceberg_table(SPEC)
    assert table.current_snapshot().snapshot_id == before, "nothing was written"
    assert [r for r in table.metadata.refs if r != "main"] == [], "no staging branch is left for a refused write"


def test_a_missing_required_column_is_refused(lakehouse, spark):
    with pytest.raises(SchemaMismatchError, match="column id: required"):
        write(lakehouse, spark, [(1, "x")], "qty int, note string")


def test_a_new_nullable_column_and_a_widening_evolve_the_table(lakehouse, spark):
    write(lakehouse, spark, [(1, 2, Decimal("3.00"), "x")], "id bigint, qty int, amount decimal(12,2), note string")
    write(lakehouse, spark, [(2, 3_000_000_000, Decimal("12345678901.25"), "wide", "web")],
          "id bigint, qty bigint, amount decimal(14,2), note string, channel string")
    schema = lakehouse.iceberg_table(SPEC).schema()
    assert str(schema.find_field("qty").field_type) == "long"
    assert str(schema.find_field("amount").field_type) == "decimal(14, 2)"
    assert not schema.find_field("channel").required
    rows = {r.id: r for r in spark.table(lakehouse.table_id(SPEC)).collect()}
    assert rows[1].channel is None and rows[2].channel == "web" and rows[2].qty == 3_000_000_000
    # A narrower write than the table now holds casts up without loss.
    write(lakehouse, spark, [(3, 1)], "id int, qty int")
    assert spark.table(lakehouse.table_id(SPEC)).where("id = 3").first().amount is None


def test_outside_bronze_a_column_the_declaration_does_not_have_is_refused(lakehouse, spark):
    write(lakehouse, spark, [(1, 2, Decimal("3.00"), "x")], "id bigint, qty int, amount decimal(12,2), note string")
    before = lakehouse.iceberg_table(SPEC).current_snapshot().snapshot_id
    with pytest.raises(SchemaMismatchError, match=r"schema_probe, column channel: the write has a column the table's "
                                                  r"declaration does not"):
        write(lakehouse, spark, [(2, 3, Decimal("1.00"), "y", "web")],
              "id bigint, qty int, amount decimal(12,2), note string, channel string", evolve=False)
    table = lakehouse.iceberg_table(SPEC)
    assert table.current_snapshot().snapshot_id == before
    assert "channel" not in [f.name for f in table.schema().fields]


def test_reading_a_table_that_was_never_materialised_names_the_asset_to_run(lakehouse):
    handle = lakehouse.table(TableSpec(name="never_written", layer="silver", description="-",
                                       schema=T.StructType([col("id", T.LongType())])))
    with pytest.raises(UpstreamMissingError, match=r"never_written does not exist yet \(read by gold_x\): "
                                                   r"materialise never_written first"):
        handle.read(reader="gold_x")
    assert not lakehouse.catalog.table_exists((lakehouse.settings.namespace, "never_written")), "nothing was created"


def test_type_rules():
    assert casts_up(T.IntegerType(), T.LongType()) and not casts_up(T.LongType(), T.IntegerType())
    assert casts_up(T.DecimalType(10, 2), T.DecimalType(12, 2)) and not casts_up(T.DecimalType(12, 4), T.DecimalType(14, 2))
    assert casts_up(T.FloatType(), T.DoubleType()) and not casts_up(T.DoubleType(), T.FloatType())
    assert promotes(T.IntegerType(), T.LongType()) and promotes(T.DecimalType(12, 2), T.DecimalType(18, 2))
    assert promotes(T.FloatType(), T.DoubleType()) and promotes("decimal(10, 2)", "decimal(12,2)")  # Iceberg's spelling
    assert not promotes(T.LongType(), T.IntegerType()) and not promotes(T.DecimalType(12, 2), T.DecimalType(18, 3))
    assert not promotes(T.DecimalType(12, 2), T.DecimalType(12, 2)) and not promotes("int", "double")
