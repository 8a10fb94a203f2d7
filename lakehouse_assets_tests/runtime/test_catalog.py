"""Spark and pyiceberg share one catalog (SQLite, PostgreSQL, a warehouse on S3, the REST catalog server): each
sees the other's tables and commits."""

import datetime as dt

import pyarrow as pa
import pytest

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.runtime.spark import SparkConfigConflict, get_spark

from ..conftest import PG_CATALOG, REST_CATALOG, S3_CATALOG, rest_settings

UTC = dt.timezone.utc
ARROW_SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
])


@pytest.fixture(params=["sqlite", "postgresql", "sqlite-s3-warehouse", "rest"])
def shared(request, spark, lake_settings, pg_catalog, s3_catalog, namespace):
    """(Spark catalog name, pyiceberg catalog) for the same catalog: its database, or the REST catalog server in
    front of the run's SQLite catalog (both engines through the server)."""
    if request.param == "sqlite":
        name, catalog = lake_settings.catalog_name, catalog_for(lake_settings)
    elif request.param == "postgresql":
        name, catalog = PG_CATALOG, pg_catalog
    elif request.param == "rest":
        name, catalog = REST_CATALOG, catalog_for(rest_settings(spark, lake_settings,
                                                                request.getfixturevalue("rest_catalog_uri")))
    else:
        name, catalog = S3_CATALOG, s3_catalog
    catalog.create_namespace(namespace)
    return name, catalog


def test_spark_reads_a_commit_pyiceberg_made(spark, shared, namespace):
    name, catalog = shared
    table = catalog.create_table((namespace, "made_by_pyiceberg"), schema=ARROW_SCHEMA)
    table.append(pa.Table.from_pylist(
        [{"id": 1, "name": "a", "ts": dt.datetime(2025, 1, 1, 9, tzinfo=UTC)},
         {"id": 2, "name": "b", "ts": dt.datetime(2025, 1, 2, 9, tzinfo=UTC)}],
        schema=ARROW_SCHEMA,
    ))
    table.append(pa.Table.from_pylist(
        [{"id": 3, "name": "c", "ts": dt.datetime(2025, 1, 3, 9, tzinfo=UTC)}], schema=ARROW_SCHEMA
    ))
    pyiceberg_snapshot = table.refresh().current_snapshot().snapshot_id

    rows = spark.sql(f"SELECT id, name FROM {name}.{namespace}.made_by_pyiceberg ORDER BY id").collect()
    assert [(r.id, r.name) for r in rows] == [(1, "a"), (2, "b"), (3, "c")]
    spark_snapshot = spark.sql(
        f"SELECT snapshot_id FROM {name}.{namespace}.made_by_pyiceberg.snapshots "
        "ORDER BY committed_at DESC LIMIT 1"
    ).first().snapshot_id
    assert spark_snapshot == pyiceberg_snapshot


def test_pyiceberg_reads_a_commit_spark_made(spark, shared, namespace):
    name, catalog = shared
    table_id = f"{name}.{namespace}.made_by_spark"
    spark.sql(f"CREATE TABLE {table_id} (id BIGINT, ts TIMESTAMP) USING iceberg PARTITIONED BY (days(ts))")
    spark.sql(f"INSERT INTO {table_id} VALUES (1, TIMESTAMP'2025-01-01 10:00:00'), "
              "(2, TIMESTAMP'2025-01-02 10:00:00')")
    spark.sql(f"DELETE FROM {table_id} WHERE id = 1")

    table = catalog.load_table((namespace, "made_by_spark"))
    assert table.scan().to_arrow().column("id").to_pylist() == [2]
    assert len(table.metadata.snapshots) == 2
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("ts_day", "day")]
    # Time travel through pyiceberg to the snapshot before Spark's delete.
    first = table.metadata.snapshots[0].snapshot_id
    assert sorted(table.scan(snapshot_id=first).to_arrow().column("id").to_pylist()) == [1, 2]


def test_a_second_catalog_location_in_one_process_is_refused(spark, lake_settings, tmp_path):
    elsewhere = lake_settings.with_(catalog_uri=f"sqlite:///{tmp_path / 'other.db'}")
    with pytest.raises(SparkConfigConflict, match="one catalog per process"):
        get_spark(elsewhere)


def test_a_warehouse_on_s3_keeps_data_and_metadata_in_the_bucket(spark, s3_catalog, s3_server, namespace):
    s3_catalog.create_namespace(namespace)
    spark.sql(f"CREATE TABLE {S3_CATALOG}.{namespace}.on_s3 (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {S3_CATALOG}.{namespace}.on_s3 VALUES (1), (2)")
    table = s3_catalog.load_table((namespace, "on_s3"))
    assert table.metadata_location.startswith("s3://lake/warehouse/")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2]
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket="lake", Prefix="warehouse/")["Contents"]]
    assert any(k.endswith(".parquet") and f"/{namespace}/on_s3/data/" in k for k in keys)
    assert any(k.endswith(".metadata.json") and f"/{namespace}/on_s3/metadata/" in k for k in keys)
    # Written by Iceberg's own S3 client (the AWS SDK v2), not Hadoop's S3A.
    written = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, f"{S3_CATALOG}.{namespace}.on_s3")
    assert written.io().getClass().getName() == "org.apache.iceberg.aws.s3.S3FileIO"
