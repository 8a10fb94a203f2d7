"""Declared tables are created idempotently, with their partitioning and properties, and evolve by declaration."""

import datetime as dt
import threading
import time
import uuid
from decimal import Decimal

import psycopg2
import pytest
from pyspark.sql import types as T

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.runtime.spark import catalog_spark_conf
from lakehouse_assets.settings import Settings
from lakehouse_assets.tables.ddl import create_table_sql, ensure_table
from lakehouse_assets.tables.handle import TableHandle
from lakehouse_assets.tables.registry import COPY_ON_WRITE, MERGE_ON_READ, TableSpec, col, transform_column
from lakehouse_assets_tests.conftest import dsn_of

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
    created = lakehouse.iceberg_table(SPEC).metadata_location
    assert TableHandle(lakehouse, SPEC).create().evolved == [], "a second create changes nothing"
    ensure_table(spark, table_id, SPEC)
    assert lakehouse.iceberg_table(SPEC).metadata_location == created, "nor does a second CREATE IF NOT EXISTS"

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

    from lakehouse_assets.errors import DeclarationDriftError

    evolved = TableSpec(**{**SPEC.__dict__, "schema": T.StructType([*SPEC.schema.fields, col("channel", T.StringType())])})
    assert [line.split(" [")[0] for line in lakehouse.table(evolved).create().evolved] == [
        "ddl_probe: add column channel: (none) -> string"]
    rows = spark.table(table_id).collect()
    assert [(r.id, r.channel) for r in rows] == [("a", None)]

    required = TableSpec(**{**SPEC.__dict__, "schema": T.StructType([*SPEC.schema.fields, col("must", T.LongType(), False)])})
    with pytest.raises(DeclarationDriftError, match="must"):
        lakehouse.table(required).create()
    assert "must" not in [f.name for f in lakehouse.iceberg_table(SPEC).schema().fields]


def test_a_declared_rename_is_made_by_the_run_in_place_and_time_travel_keeps_the_old_name(lakehouse, spark):
    table_id = lakehouse.table(SPEC).create().id
    spark.sql(f"INSERT INTO {table_id} VALUES ('a', TIMESTAMP'2025-01-01 00:00:00', 1.50, map('k', 'v'))")
    before = lakehouse.iceberg_table(SPEC).current_snapshot().snapshot_id
    fields = [col("key", T.StringType(), False, "the key") if f.name == "id" else
              col("price", f.dataType) if f.name == "amount" else f for f in SPEC.schema.fields]
    renamed = TableSpec(**{**SPEC.__dict__, "schema": T.StructType(fields), "partitioned_by": ("days(ts)", "bucket(8, key)"),
                           "renamed": {"key": "id", "price": "amount"}})
    assert sorted(line.split(" [")[0] for line in lakehouse.table(renamed).create().evolved) == [
        "ddl_probe: rename column amount: amount -> price", "ddl_probe: rename column id: id -> key"]  # nothing added
    assert TableHandle(lakehouse, renamed).create().evolved == []  # and only once
    table = lakehouse.iceberg_table(SPEC)
    assert [f.name for f in table.schema().fields] == ["key", "ts", "price", "tags"]
    assert table.current_snapshot().snapshot_id == before  # metadata only
    assert [(r.key, str(r.price)) for r in spark.table(table_id).collect()] == [("a", "1.50")]
    old = spark.sql(f"SELECT * FROM {table_id} VERSION AS OF {before}")
    assert old.columns == ["id", "ts", "amount", "tags"] and old.first().id == "a"


def test_a_run_makes_the_declarations_safe_changes_first_and_fails_with_the_plan_on_the_others(lakehouse, spark):
    from lakehouse_assets.errors import DeclarationDriftError
    from lakehouse_assets.operations.procedures import TableMaintenance
    from lakehouse_assets.project.model import TablePolicy
    from lakehouse_assets.runtime.commit import Window, publish, stage

    table_id = lakehouse.table(SPEC).create().id
    spark.sql(f"INSERT INTO {table_id} VALUES ('a', TIMESTAMP'2025-01-01 10:00:00', 1.50, map('k', 'v'))")
    [old_file] = list(lakehouse.iceberg_table(SPEC).scan().plan_files())
    # The declaration changed: hours instead of days and no bucket, copy-on-write, another description.
    changed = TableSpec(**{**SPEC.__dict__, "partitioned_by": ("hours(ts)",), "write_mode": COPY_ON_WRITE,
                           "description": "it's a probe, by the hour"})
    handle = lakehouse.table(changed).create()
    assert sorted(line.split(" [")[0] for line in handle.evolved) == sorted([
        "ddl_probe: add partition field hour(ts)", "ddl_probe: drop partition field day(ts)",
        "ddl_probe: drop partition field bucket[8](id)",
        "ddl_probe: set property write.delete.mode: merge-on-read -> copy-on-write",
        "ddl_probe: set property write.merge.mode: merge-on-read -> copy-on-write",
        "ddl_probe: set property write.update.mode: merge-on-read -> copy-on-write",
        "ddl_probe: document table: it's a probe -> it's a probe, by the hour"])
    rows = spark.createDataFrame([("b", dt.datetime(2025, 1, 2, 11, 30), Decimal("2.00"), {})], changed.schema)
    result = publish(stage(handle, "run-1", changed.name, "t", scope="nothing").append(rows))
    assert "add partition field hour(ts)" in result.metadata()["declaration_applied"].value
    table = lakehouse.iceberg_table(SPEC)
    assert [str(f.transform) for f in table.spec().fields] == ["hour"]
    assert table.properties["write.merge.mode"] == "copy-on-write"
    files = {task.file.file_path: task.file.spec_id for task in table.scan().plan_files()}
    assert files[old_file.file.file_path] == old_file.file.spec_id  # the file written before keeps its spec
    assert {spec_id for path, spec_id in files.items() if path != old_file.file.file_path} == {table.spec().spec_id}
    assert sorted(r.id for r in spark.table(table_id).where("ts >= '2025-01-02'").collect()) == ["b"]
    assert sorted(r.id for r in spark.table(table_id).collect()) == ["a", "b"]
    # Compaction and a row-level delete over files of both specs: every row kept but the deleted one, and pyiceberg
    # (as `lakehouse sql` and the ML pins read) agrees with Spark.
    for n in (2, 3):  # two small files of one hour, under the new spec
        spark.sql(f"INSERT INTO {table_id} VALUES ('a{n}', TIMESTAMP'2025-01-01 15:0{n}:00', 2.50, map())")
    compacted = TableMaintenance(lakehouse, SPEC.name, TablePolicy(), log=lambda _: None).compact()
    assert compacted.figures["rewritten_data_files"] == 2, compacted.figures
    files = {task.file.file_path: task.file.spec_id for task in lakehouse.iceberg_table(SPEC).scan().plan_files()}
    assert files[old_file.file.file_path] == old_file.file.spec_id  # compaction leaves the old spec's file be
    spark.sql(f"DELETE FROM {table_id} WHERE id IN ('a2', 'a3')")
    assert sorted(r.id for r in spark.table(table_id).collect()) == ["a", "b"]
    assert sorted(lakehouse.iceberg_table(SPEC).scan().to_arrow()["id"].to_pylist()) == ["a", "b"]
    assert sorted(r.id for r in spark.table(table_id).where("ts < '2025-01-02'").collect()) == ["a"]
    # A run replacing the first day replaces the file written under the old spec.
    day = Window.of_days("ts", dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
                         dt.datetime(2025, 1, 2, tzinfo=dt.timezone.utc))
    again = spark.createDataFrame([("c", dt.datetime(2025, 1, 1, 12, 0), Decimal("3.00"), {})], changed.schema)
    publish(stage(handle, "run-2", changed.name, "t").overwrite(again, day))
    assert sorted(r.id for r in spark.table(table_id).collect()) == ["b", "c"]
    assert old_file.file.file_path not in {t.file.file_path for t in lakehouse.iceberg_table(SPEC).scan().plan_files()}
    # Safe changes made once: a later handle finds nothing to do.
    assert lakehouse.table(TableSpec(**{**changed.__dict__, "properties": {"x": "1"}})).create().evolved == [
        "ddl_probe: set property x: (none) -> 1 [safe] (Transaction.set_properties(x=1))"]

    dropped = TableSpec(**{**changed.__dict__, "properties": {"x": "1"},
                           "schema": T.StructType([f for f in SPEC.schema.fields if f.name != "tags"])})
    with pytest.raises(DeclarationDriftError, match=r"(?s)differs from its declaration.*drop column tags.*"
                                                    r"lakehouse apply --allow-drop"):
        lakehouse.table(dropped).create()
    assert "tags" in [f.name for f in lakehouse.iceberg_table(SPEC).schema().fields]


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



def test_runs_racing_to_create_one_table_on_a_postgres_catalog_all_go_on(spark, tmp_path, pg_catalog_uri,
                                                                        pg_admin_dsn):
    """Iceberg's JDBC catalog checks that a table is missing, then inserts its row. Here another creator's row
    is inserted after the check and committed while this run's insert waits on it: PostgreSQL refuses the
    second insert (a unique key), which Iceberg does not read as "already exists". The run goes on with the
    table the other made."""
    namespace = f"t_race_{uuid.uuid4().hex[:6]}"
    catalog_for(Settings(home=tmp_path, catalog_uri=pg_catalog_uri.sqlalchemy_url.replace("+psycopg2", ""),
                         namespace=namespace)).create_namespace(namespace)
    for key, value in catalog_spark_conf("pg_race", pg_catalog_uri, f"file://{tmp_path}/warehouse").items():
        spark.conf.set(key, value)
    # The other creator's table: made, its row taken out again (its metadata file stays) to be put back below.
    table_id = f"pg_race.{namespace}.raced"
    ensure_table(spark, table_id, SPEC)
    db = psycopg2.connect(dsn_of(pg_admin_dsn, pg_catalog_uri.database))
    with db.cursor() as cur:
        cur.execute("DELETE FROM iceberg_tables WHERE table_namespace = %s RETURNING *", (namespace,))
        (row,), columns = cur.fetchall(), [c.name for c in cur.description]
    db.commit()
    with db.cursor() as cur:  # the other creator's insert, not committed yet
        cur.execute(f"INSERT INTO iceberg_tables ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(row))})",
                    row)
    failures: list[str] = []

    def create() -> None:
        try:
            ensure_table(spark, table_id, SPEC)
        except Exception as exc:  # noqa: BLE001 - asserted on below
            failures.append(str(exc).split("\n\tat ")[0])

    racer = threading.Thread(target=create)
    racer.start()
    watcher = psycopg2.connect(dsn_of(pg_admin_dsn, pg_catalog_uri.database))
    deadline = time.monotonic() + 60
    with watcher.cursor() as cur:  # until this run's insert waits on the other's row (its text shows late)
        while True:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
                        (pg_catalog_uri.database,))
            if cur.fetchone()[0] or not racer.is_alive():
                break
            assert time.monotonic() < deadline, "the run never reached its insert"
            time.sleep(0.05)
    watcher.close()
    db.commit()
    db.close()
    racer.join()
    assert failures == [], failures
    assert spark.table(table_id).schema.fieldNames() == SPEC.schema.fieldNames()
    with psycopg2.connect(dsn_of(pg_admin_dsn, pg_catalog_uri.database)) as db, db.cursor() as cur:
        cur.execute("SELECT metadata_location FROM iceberg_tables WHERE table_namespace = %s", (namespace,))
        assert cur.fetchall() == [(row[columns.index("metadata_location")],)]  # the other's table, still
