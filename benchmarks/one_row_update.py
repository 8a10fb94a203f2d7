"""Changing one row of a day: bytes written and time, Iceberg (merge-on-read, copy-on-write) vs a Parquet lake.

One day of M rows is written the same way three times: two Iceberg tables
partitioned by `days(ts)` (one merge-on-read, one copy-on-write) and a plain
Parquet dataset partitioned by `day`. One row is then changed:

- Iceberg: `UPDATE ... SET status = ... WHERE id = x`; bytes written are the
  snapshot summary's `added-files-size` (data files plus delete files);
- Parquet lake (zstd, like Iceberg's default): the day's partition is read, the row changed, and the whole
  partition written again and swapped in (the only way without a table format);
  bytes written are the size of the rewritten partition's files.

Each repetition changes a different row; figures are medians.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse_assets.tables.ddl import ensure_table
from lakehouse_assets.tables.registry import COPY_ON_WRITE, MERGE_ON_READ, TableSpec, col

from .common import latest_summary, tree_bytes

DAY = "2025-01-01"
DAY_EPOCH = 1_735_689_600  # 2025-01-01T00:00:00Z
TARGET = 0.01


def spec(name: str, mode: str) -> TableSpec:
    return TableSpec(
        name=name, layer="bench", description=f"one-row update benchmark table ({mode})",
        schema=T.StructType([
            col("id", T.LongType(), False), col("user_id", T.StringType()), col("ts", T.TimestampType(), False),
            col("status", T.StringType()), col("amount", T.DoubleType()),
        ]),
        partitioned_by=("days(ts)",), write_mode=mode,
    )


def day_rows(spark: SparkSession, rows: int):
    return spark.range(rows).select(
        F.col("id"), F.format_string("u%05d", F.col("id") % 5000).alias("user_id"),
        F.timestamp_seconds(F.lit(DAY_EPOCH) + F.floor(F.col("id") * 86_399 / rows)).alias("ts"),
        F.lit("pending").alias("status"), (F.col("id") % 997 / 10.0).alias("amount"),
    )


def run(spark: SparkSession, catalog: str, namespace: str, work: Path, rows: int, repeats: int = 3) -> dict:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
    targets = [rows // 3 + n * 7919 for n in range(repeats)]
    results = {"params": {"rows": rows, "repeats": repeats}}
    for mode in (MERGE_ON_READ, COPY_ON_WRITE):
        table_id = f"{catalog}.{namespace}.one_row_{mode.replace('-', '_')}"
        spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
        ensure_table(spark, table_id, spec(table_id.rsplit(".", 1)[1], mode))
        day_rows(spark, rows).writeTo(table_id).append()
        day_files = spark.sql(f"SELECT count(*) AS n, sum(file_size_in_bytes) AS b FROM {table_id}.data_files").first()
        seconds, written = [], []
        for target in targets:
            started = time.perf_counter()
            spark.sql(f"UPDATE {table_id} SET status = 'paid' WHERE id = {target}")
            seconds.append(time.perf_counter() - started)
            s = latest_summary(spark, table_id)
            written.append(int(s.get("added-files-size", 0)))
        results[mode] = {"seconds": statistics.median(seconds), "bytes": int(statistics.median(written)),
                         "day_files": day_files.n, "day_bytes": int(day_files.b)}
        spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")

    root = work / "one_row_lake"
    shutil.rmtree(root, ignore_errors=True)
    day_rows(spark, rows).withColumn("day", F.to_date("ts")).write.option("compression", "zstd") \
        .partitionBy("day").parquet(str(root))
    partition = root / f"day={DAY}"
    seconds, written = [], []
    for target in targets:
        started = time.perf_counter()
        staging = root / f"_staging_day={DAY}"
        (spark.read.parquet(str(partition))
         .withColumn("status", F.when(F.col("id") == target, F.lit("paid")).otherwise(F.col("status")))
         .write.mode("overwrite").option("compression", "zstd").parquet(str(staging)))
        old = root / f"_old_day={DAY}"
        partition.rename(old)
        staging.rename(partition)
        shutil.rmtree(old)
        seconds.append(time.perf_counter() - started)
        written.append(tree_bytes(partition))
    results["parquet_partition_overwrite"] = {"seconds": statistics.median(seconds),
                                              "bytes": int(statistics.median(written))}
    shutil.rmtree(root, ignore_errors=True)
    lake = results["parquet_partition_overwrite"]["bytes"]
    results["ratios"] = {
        "mor_bytes_over_overwrite": results[MERGE_ON_READ]["bytes"] / lake,
        "cow_bytes_over_overwrite": results[COPY_ON_WRITE]["bytes"] / lake,
        "mor_time_over_overwrite": results[MERGE_ON_READ]["seconds"] / results["parquet_partition_overwrite"]["seconds"],
        "cow_time_over_overwrite": results[COPY_ON_WRITE]["seconds"] / results["parquet_partition_overwrite"]["seconds"],
    }
    return results


def markdown(results: dict) -> str:
    p, r = results["params"], results["ratios"]
    mor, cow, lake = results[MERGE_ON_READ], results[COPY_ON_WRITE], results["parquet_partition_overwrite"]

    def verdict(name: str, share: float) -> str:
        if share < TARGET:
            return f"{name}: {share:.3%} of the partition overwrite, **target reached** (under {TARGET:.0%})."
        return (f"{name}: {share:.1%} of the partition overwrite, **target not reached** (under {TARGET:.0%}): "
                f"copy-on-write rewrites every data file holding a changed row, and the day is "
                f"{cow['day_files']} file(s), so it rewrites about as much as the partition overwrite. "
                f"That is why the row-level tables (CDC silver) are merge-on-read.")

    return "\n".join([
        f"### Changing one row in a day of {p['rows']:,} rows (median of {p['repeats']})",
        "",
        "| way | seconds | bytes written | vs partition overwrite (bytes) |",
        "|---|---|---|---|",
        f"| Iceberg merge-on-read `UPDATE ... WHERE id = x` | {mor['seconds']:.2f} | {mor['bytes']:,} | "
        f"{r['mor_bytes_over_overwrite']:.3%} |",
        f"| Iceberg copy-on-write `UPDATE ... WHERE id = x` | {cow['seconds']:.2f} | {cow['bytes']:,} | "
        f"{r['cow_bytes_over_overwrite']:.1%} |",
        f"| Parquet lake: rewrite the day partition | {lake['seconds']:.2f} | {lake['bytes']:,} | 100% |",
        "",
        f"The day was written as {mor['day_files']} data file(s) ({mor['day_bytes']:,} bytes) in the Iceberg "
        f"tables. Time: merge-on-read {r['mor_time_over_overwrite']:.2f}x, copy-on-write "
        f"{r['cow_time_over_overwrite']:.2f}x the partition overwrite.",
        "",
        "- " + verdict("Merge-on-read", r["mor_bytes_over_overwrite"]),
        "- " + verdict("Copy-on-write", r["cow_bytes_over_overwrite"]),
        "",
    ])
