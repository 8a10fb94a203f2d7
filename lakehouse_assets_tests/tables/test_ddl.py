"""Declared tables are created idempotently, with their partitioning and properties, and evolve by declaration."""

import pytest
from pyspark.sql import types as T

from lakehouse_assets.tables.ddl import create_table_sql, ensure_table
from lakehouse_assets.tables.registry import MERGE_ON_READ, TableSpec, col, transform_column

SPEC = TableSpec(
    name="ddl_probe",
    layer="test",
    description="it's a probe",
    schema=T.StructType([
        col("id", T.StringType(), False, "the key"),
        col("ts", T.TimestampType(), False),
        col("amount", T.DecimalType(12, 2)),
        col("tags", T.MapType(T.StringType(), T.StringType())),
    ]),
    partitioned_by=("days(ts)", "bucket(8, id)"),
    write_mode=MERGE_ON_READ,
)


def test_create_is_idempotent_and_sets_partitioning_and_properties(lakehouse, spark):
    table_id = lakehouse.table(SPEC).create().id
    assert ensure_table(spark, table_id, SPEC) == [], "a second ensure changes nothing"

    table = lakehouse.iceberg_table(SPEC)
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("ts_day", "day"), ("id_bucket", "bucket[8]")]
    assert table.metadata.format_version == 2
    assert table.properties["write.merge.mode"] == "merge-on-read"
    assert table.properties["write.delete.mode"] == "merge-on-read"
    assert table.schema().find_field("id").required
    assert table.schema().find_field("id").doc == "the key"
    assert not table.schema().find_field("amount").required
    assert len(table.metadata.snapshots) == 0


def test_a_newly_declared_nullable_column_is_added_and_old_rows_read_null(lakehouse, spark):
    table_id = lakehouse.table(SPEC).create().id
    spark.sql(f"INSERT INTO {table_id} VALUES ('a', TIMESTAMP'2025-01-01 00:00:00', 1.50, map('k', 'v'))")

    evolved = TableSpec(**{**SPEC.__dict__, "schema": T.StructType([*SPEC.schema.fields, col("channel", T.StringType())])})
    assert ensure_table(spark, table_id, evolved) == ["channel"]
    rows = spark.table(table_id).collect()
    assert [(r.id, r.channel) for r in rows] == [("a", None)]

    required = TableSpec(**{**SPEC.__dict__, "schema": T.StructType([*SPEC.schema.fields, col("must", T.LongType(), False)])})
    with pytest.raises(ValueError, match="'must' is NOT NULL"):
        ensure_table(spark, table_id, required)


def test_sql_text_escapes_values_and_rejects_bad_names():
    sql = create_table_sql("c.n.ddl_probe", SPEC)
    assert "COMMENT 'it\\'s a probe'" in sql
    assert "PARTITIONED BY (days(ts), bucket(8, id))" in sql
    with pytest.raises(ValueError, match="invalid partition transform"):
        transform_column("days(ts); DROP TABLE x")
    with pytest.raises(ValueError, match="invalid table name"):
        TableSpec(name="bad name", layer="x", description="", schema=T.StructType([]))
    with pytest.raises(ValueError, match="not in the schema"):
        TableSpec(name="t", layer="x", description="", schema=SPEC.schema, partitioned_by=("days(nope)",))


def test_every_declared_table_is_iceberg_v2_with_a_description():
    from ..shop import SPECS

    assert {"bronze_events", "bronze_events_quarantine", "silver_events", "gold_daily_activity"} <= set(SPECS)
    for spec in SPECS.values():
        assert spec.table_properties["format-version"] == "2"
        assert spec.description
