"""Copy-on-write vs merge-on-read for CDC MERGE: MERGE time, bytes written, read time after.

Both tables are declared like silver CDC tables (TableSpec, bucket-partitioned by
key), loaded with the same M rows, then take the same K changes (updates,
deletes, inserts) in one MERGE of the same shape silver uses. Each repetition
starts from freshly loaded tables; figures are medians.
"""

from __future__ import annotations

import statistics
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse_assets.tables.ddl import ensure_table
from lakehouse_assets.tables.registry import COPY_ON_WRITE, MERGE_ON_READ, TableSpec, col


def spec(name: str, mode: str) -> TableSpec:
    return TableSpec(
        name=name, layer="bench", description=f"MERGE benchmark table ({mode})",
        schema=T.StructType([
            col("id", T.LongType(), False), col("status", T.StringType()), col("amount", T.DecimalType(12, 2)),
            col("change_position", T.DecimalType(38, 0), False),
        ]),
        partitioned_by=("bucket(8, id)",), write_mode=mode,
    )


def _load(spark: SparkSession, table_id: str, rows: int) -> None:
    spark.range(rows).select(
        F.col("id"), F.lit("pending").alias("status"), (F.col("id") % 1000 / 10).cast("decimal(12,2)").alias("amount"),
        F.lit(1).cast("decimal(38,0)").alias("change_position"),
    ).writeTo(table_id).append()


def _changes(spark: SparkSession, rows: int, changes: int):
    """K changes: 70% updates, 15% deletes of existing ids, 15% inserts of new ids."""
    step = max(1, rows // changes)
    return spark.range(changes).select(
        F.when(F.col("id") % 100 < 85, F.col("id") * step).otherwise(rows + F.col("id")).alias("id"),
        F.when(F.col("id") % 100 < 70, F.lit("u")).when(F.col("id") % 100 < 85, F.lit("d"))
        .otherwise(F.lit("c")).alias("op"),
        F.lit("paid").alias("status"), F.lit(9.99).cast("decimal(12,2)").alias("amount"),
        F.lit(2).cast("decimal(38,0)").alias("change_position"),
    )


def _latest_summary(spark: SparkSession, table_id: str) -> dict:
    return spark.sql(f"SELECT summary FROM {table_id}.snapshots ORDER BY committed_at DESC LIMIT 1").first().summary


def merge_once(spark: SparkSession, table_id: str, mode: str, rows: int, changes: int) -> dict:
    """Load M rows into a fresh table, apply K changes in one MERGE, read back; seconds and bytes written."""
    spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
    ensure_table(spark, table_id, spec(table_id.rsplit(".", 1)[1], mode))
    started = time.perf_counter()
    _load(spark, table_id, rows)
    load_s = time.perf_counter() - started
    _changes(spark, rows, changes).createOrReplaceTempView("bench_changes")
    started = time.perf_counter()
    spark.sql(f"""
        MERGE INTO {table_id} t USING bench_changes s ON t.id = s.id
        WHEN MATCHED AND s.op = 'd' THEN DELETE
        WHEN MATCHED AND s.change_position > t.change_position THEN
            UPDATE SET status = s.status, amount = s.amount, change_position = s.change_position
        WHEN NOT MATCHED AND s.op != 'd' THEN
            INSERT (id, status, amount, change_position) VALUES (s.id, s.status, s.amount, s.change_position)""")
    merge_s = time.perf_counter() - started
    written = int(_latest_summary(spark, table_id).get("added-files-size", 0))
    started = time.perf_counter()
    spark.table(table_id).count()
    count_s = time.perf_counter() - started
    started = time.perf_counter()
    spark.table(table_id).groupBy("status").agg(F.sum("amount")).collect()
    scan_s = time.perf_counter() - started
    spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
    return {"load_s": load_s, "merge_s": merge_s, "count_s": count_s, "scan_s": scan_s, "bytes_written": written}


def run(spark: SparkSession, catalog: str, namespace: str, rows: int, changes: int, repeats: int = 3) -> dict:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
    results = {}
    for mode in (COPY_ON_WRITE, MERGE_ON_READ):
        merge_s, read_s, count_s, written = [], [], [], []
        for rep in range(repeats):
            one = merge_once(spark, f"{catalog}.{namespace}.merge_{mode.replace('-', '_')}_{rep}", mode, rows, changes)
            merge_s.append(one["merge_s"])
            written.append(one["bytes_written"])
            count_s.append(one["count_s"])
            read_s.append(one["scan_s"])
        results[mode] = {
            "merge_s": statistics.median(merge_s), "count_s": statistics.median(count_s),
            "scan_s": statistics.median(read_s), "bytes_written": int(statistics.median(written)),
        }
    cow, mor = results[COPY_ON_WRITE], results[MERGE_ON_READ]
    results["ratios"] = {
        "merge_time_cow_over_mor": cow["merge_s"] / mor["merge_s"],
        "bytes_written_cow_over_mor": cow["bytes_written"] / max(1, mor["bytes_written"]),
        "scan_time_mor_over_cow": mor["scan_s"] / cow["scan_s"],
    }
    results["params"] = {"rows": rows, "changes": changes, "repeats": repeats}
    return results


TARGET_CHANGES_PER_S = 50_000  # merge-on-read


def markdown(results: dict) -> str:
    p, cow, mor, r = results["params"], results[COPY_ON_WRITE], results[MERGE_ON_READ], results["ratios"]
    rate = p["changes"] / mor["merge_s"]
    verdict = (f"**Target reached**: merge-on-read applies {rate:,.0f} changes/s (target: at least "
               f"{TARGET_CHANGES_PER_S:,})." if rate >= TARGET_CHANGES_PER_S else
               f"**Target not reached**: merge-on-read applies {rate:,.0f} changes/s (target: at least "
               f"{TARGET_CHANGES_PER_S:,}).")
    runs = "one run each" if p["repeats"] == 1 else f"median of {p['repeats']}"
    return "\n".join([
        f"### CDC MERGE: copy-on-write vs merge-on-read ({p['changes']:,} changes into {p['rows']:,} rows, {runs})",
        "",
        "| mode | MERGE s | changes/s | bytes written | count(*) after, s | scan + aggregate after, s |",
        "|---|---|---|---|---|---|",
        f"| copy-on-write | {cow['merge_s']:.2f} | {p['changes'] / cow['merge_s']:,.0f} | {cow['bytes_written']:,} | "
        f"{cow['count_s']:.2f} | {cow['scan_s']:.2f} |",
        f"| merge-on-read | {mor['merge_s']:.2f} | {p['changes'] / mor['merge_s']:,.0f} | {mor['bytes_written']:,} | "
        f"{mor['count_s']:.2f} | {mor['scan_s']:.2f} |",
        "",
        f"Copy-on-write takes {r['merge_time_cow_over_mor']:.2f}x the MERGE time and writes "
        f"{r['bytes_written_cow_over_mor']:.1f}x the bytes; merge-on-read reads back in "
        f"{r['scan_time_mor_over_cow']:.2f}x the time of copy-on-write (delete files applied on read). {verdict}",
        "",
    ])
