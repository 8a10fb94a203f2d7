"""The workload whose classes make the driver's class-data archive (runtime/jvm_archive.py): what a lakehouse
JVM does early in its life. Run by `jvm_archive.build` in a throwaway home:

    python -m lakehouse_assets.runtime.jvm_workload ARCHIVE_PATH
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from dagster_pyspark.resources import spark_session_from_config

from ..settings import Settings
from .catalog import catalog_for, ensure_namespace
from .jvm_archive import QUIET
from .spark import spark_conf


def run(partial: str) -> None:
    """What a lakehouse JVM does early in its life: the catalog, JSON lines parsed, an Iceberg table
    partitioned by day written on a branch and published, a MERGE, a micro-batch stream, reads and
    aggregates. Its classes are the archive's."""
    settings = Settings.from_env()
    ensure_namespace(catalog_for(settings), settings.namespace)
    conf = spark_conf(settings)
    conf["spark.driver.extraJavaOptions"] += f" -XX:ArchiveClassesAtExit={partial} {QUIET}"
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = spark_session_from_config(conf)
    table = f"{settings.catalog_name}.{settings.namespace}.archive_workload"
    lines = Path(settings.home) / "lines"
    lines.mkdir()
    (lines / "a.jsonl").write_text("".join(
        json.dumps({"id": n, "name": f"n{n}", "ts": f"2026-01-0{1 + n % 3}T10:00:00Z", "amount": n / 4}) + "\n"
        for n in range(200)))
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING, ts TIMESTAMP, amount DOUBLE, source_file STRING) "
              "USING iceberg PARTITIONED BY (days(ts)) "
              "TBLPROPERTIES ('format-version'='2', 'write.wap.enabled'='true')")
    fields = "from_json(value, 'id BIGINT, name STRING, ts TIMESTAMP, amount DOUBLE') AS r"
    parsed = (spark.read.text(str(lines))
              .selectExpr(fields, "json_object_keys(value) AS keys", "input_file_name() AS source_file")
              .selectExpr("r.*", "source_file"))
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit")
    parsed.writeTo(f"{table}.branch_audit").append()
    spark.sql(f"CALL {settings.catalog_name}.system.fast_forward('{table}', 'main', 'audit')")
    spark.read.text(str(lines)).selectExpr(fields).selectExpr(
        "r.id", "upper(r.name) AS name", "r.ts", "r.amount * 2 AS amount", "'changes' AS source_file") \
        .createOrReplaceTempView("changes")
    spark.sql(f"MERGE INTO {table} t USING changes c ON t.id = c.id "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    spark.sql(f"DELETE FROM {table} WHERE id < 10")
    spark.sql(f"SELECT date_trunc('MINUTE', ts) AS minute, count(*), sum(amount) FROM {table} GROUP BY 1").collect()
    spark.read.json(str(lines)).groupBy("name").count().collect()
    spark.sql(f"SELECT * FROM {table}.snapshots").collect()
    stream = (spark.readStream.text(str(lines))
              .writeStream.trigger(availableNow=True)
              .option("checkpointLocation", str(Path(settings.home) / "checkpoint"))
              .foreachBatch(lambda batch, _: batch.selectExpr("count(*)").collect())
              .start())
    stream.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m lakehouse_assets.runtime.jvm_workload ARCHIVE_PATH")
    run(sys.argv[1])
