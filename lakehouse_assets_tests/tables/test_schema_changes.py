"""Every schema change of a table goes through one function, `evolution.change_table`, whatever its cause: a column
the data brings, a column the declaration adds, a column the declaration renames."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, LongType, NestedField, StringType, StructType, TimestamptzType
from pyspark.sql import types as T

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.settings import Settings
from lakehouse_assets.tables import evolution
from lakehouse_assets.tables.registry import TableSpec, col

SPEC = TableSpec(
    name="changes_probe", layer="bronze", description="schema changes probe",
    schema=T.StructType([
        col("id", T.LongType(), False),
        col("ts", T.TimestampType(), False),
        col("amount", T.DecimalType(12, 2)),
        col("image", T.StructType([T.StructField("a", T.StringType())])),
    ]),
    takes_data_columns=True,  # as bronze and CDC silver: the data may bring columns
)
ADDED = TableSpec(**{**SPEC.__dict__, "schema": T.StructType([*SPEC.schema.fields, col("note", T.StringType())])})
RENAMED = TableSpec(**{**ADDED.__dict__, "schema": T.StructType(
    [col("price", f.dataType) if f.name == "amount" else f for f in ADDED.schema.fields]), "renamed": {"price": "amount"}})


@pytest.fixture
def calls(monkeypatch) -> list[tuple[str, str, str]]:
    """(table, kind, subject) of each change made, recorded as `change_table` is called."""
    made: list[tuple[str, str, str]] = []
    real = evolution.change_table

    def spy(table, changes):
        made.extend((table.name()[-1], c.kind, c.subject) for c in changes)
        return real(table, changes)

    monkeypatch.setattr(evolution, "change_table", spy)
    return made


def ids(schema) -> dict[str, int]:
    return {f.name: f.field_id for f in schema.fields}


def test_data_declaration_and_rename_all_change_the_table_through_change_table(tmp_path, calls):
    catalog = catalog_for(Settings(home=tmp_path))
    catalog.create_namespace("lake")
    identifier = ("lake", SPEC.name)
    table = catalog.create_table(identifier, schema=Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "ts", TimestamptzType(), required=True),
        NestedField(3, "amount", DecimalType(12, 2)), NestedField(4, "image", StructType(NestedField(5, "a", StringType())))),
        properties={**SPEC.table_properties, "comment": SPEC.description})
    table.append(pa.Table.from_pylist([{"id": 1, "ts": dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
                                        "amount": Decimal("1.50"), "image": {"a": "x"}}],
                                      schema=table.schema().as_arrow()))
    before, last = ids(table.schema()), table.metadata.last_column_id

    data = evolution.data_columns(SPEC.name, [("channel", "string"), ("image.b", "decimal(10,2)")])
    assert evolution.evolve(catalog, identifier, lambda t: evolution.missing(data, t)) == data
    assert evolution.evolve(catalog, identifier, lambda t: evolution.missing(data, t)) == []  # held: nothing to do
    assert calls == [(SPEC.name, "add column", "channel"), (SPEC.name, "add column", "image.b")]
    calls.clear()
    assert evolution.bring_to_declaration(catalog, identifier, ADDED)
    assert calls == [(SPEC.name, "add column", "note")]
    calls.clear()
    assert evolution.bring_to_declaration(catalog, identifier, RENAMED)
    assert calls == [(SPEC.name, "rename column", "amount")]

    schema = catalog.load_table(identifier).schema()
    after = ids(schema)
    assert after["price"] == before["amount"] and "amount" not in after  # renamed by field id
    assert {k: after[k] for k in ("id", "ts", "image")} == {k: before[k] for k in ("id", "ts", "image")}
    new = [after["channel"], after["note"], schema.find_field("image.b").field_id]
    assert len(set(new)) == 3 and min(new) > last  # fresh field ids
    assert str(schema.find_field("image.b").field_type) == "decimal(10, 2)"
    [row] = catalog.load_table(identifier).scan().to_arrow().to_pylist()
    assert (row["price"], row["channel"], row["note"], row["image"]) == (Decimal("1.50"), None, None,
                                                                        {"a": "x", "b": None})


def test_a_column_the_data_brings_is_checked_before_anything_changes():
    with pytest.raises(ValueError, match="type 'array<string>'"):
        evolution.data_columns("t", [("ok", "string"), ("tags", "array<string>")])
    with pytest.raises(ValueError, match="invalid new column path"):
        evolution.data_columns("t", [("bad name", "string")])
    [change] = evolution.data_columns("t", [("image.n", "decimal(12,2)")])
    assert (change.kind, change.subject, change.declared.name, change.declared.dataType) == (
        "add column", "image.n", "n", T.DecimalType(12, 2))


def test_through_spark_each_cause_goes_through_change_table_and_the_next_write_sees_it(lakehouse, spark, calls):
    from lakehouse_assets.runtime.commit import publish, stage

    handle = lakehouse.table(SPEC).create()
    table_id = handle.id
    spark.sql(f"INSERT INTO {table_id} VALUES (1, TIMESTAMP'2025-01-01 00:00:00', 1.50, named_struct('a', 'x'))")
    held = lakehouse.iceberg_table(SPEC)
    before, last = ids(held.schema()), held.metadata.last_column_id
    assert calls == []

    # A column the data brings (bronze, CDC silver), then written by the write that follows on a branch.
    handle.add_columns([("channel", "string"), ("image.b", "bigint")])
    assert calls == [(SPEC.name, "add column", "channel"), (SPEC.name, "add column", "image.b")]
    rows = spark.createDataFrame(
        [(2, dt.datetime(2025, 1, 2), Decimal("2.00"), ("y", 7), "web")],
        "id bigint, ts timestamp, amount decimal(12,2), image struct<a:string,b:bigint>, channel string")
    publish(stage(handle, "run-1", SPEC.name, "-", scope="nothing").append(rows))
    # A column only the write has, on a table whose writes may add columns (bronze's): the same function.
    calls.clear()
    more = rows.selectExpr("3 AS id", "ts", "amount", "image", "channel", "'x' AS source")
    publish(stage(handle, "run-2", SPEC.name, "-", evolve=True, scope="nothing").append(more))
    assert calls == [(SPEC.name, "add column", "source")]
    # The declaration adds a column, then renames one: made by the first write of a run, the same function.
    calls.clear()
    assert lakehouse.table(ADDED).create().evolved
    assert calls == [(SPEC.name, "add column", "note")]
    calls.clear()
    assert lakehouse.table(RENAMED).create().evolved
    assert calls == [(SPEC.name, "rename column", "amount")]

    schema = lakehouse.iceberg_table(SPEC).schema()
    after = ids(schema)
    assert after["price"] == before["amount"] and "amount" not in after
    assert {k: after[k] for k in ("id", "ts", "image")} == {k: before[k] for k in ("id", "ts", "image")}
    new = [after["channel"], after["source"], after["note"], schema.find_field("image.b").field_id]
    assert len(set(new)) == 4 and min(new) > last
    got = {r.id: r for r in spark.table(table_id).collect()}
    assert spark.table(table_id).columns == ["id", "ts", "price", "image", "channel", "source", "note"]
    assert (got[1].price, got[1].channel, got[1].image.b) == (Decimal("1.50"), None, None)
    assert (got[2].price, got[2].channel, got[2].image.b, got[2].source) == (Decimal("2.00"), "web", 7, None)
    assert (got[3].source, got[3].note) == ("x", None)


def test_a_snapshot_read_after_fields_were_added_to_a_struct_comes_under_the_current_schema(lakehouse):
    """A CDC image gains a field (the source's ADD COLUMN) between a snapshot and its read: Spark reads the snapshot
    with the struct it was written with and casts no struct to one of more fields, so the read matches the struct
    field by field: the old fields keep their values, the new one is null, and a null image stays null."""
    table = lakehouse.table(SPEC).create()
    ts = dt.datetime(2025, 1, 1)
    table.spark.createDataFrame([(1, ts, Decimal("1.50"), ("x",)), (2, ts, None, None)], SPEC.schema) \
        .writeTo(table.id).append()
    first = table.snapshot_id()
    table.add_columns([("image.b", "decimal(10,2)"), ("channel", "string")])
    assert table.snapshot_id() == first, "a schema change commits no snapshot"

    read = table.read(snapshot_id=first)
    assert read.schema == table.schema()
    rows = {r["id"]: r.asDict(recursive=True) for r in read.collect()}
    assert rows[1]["image"] == {"a": "x", "b": None} and rows[1]["channel"] is None
    assert rows[1]["amount"] == Decimal("1.50")
    assert rows[2]["image"] is None, "a null struct read as null, not as a struct of nulls"
