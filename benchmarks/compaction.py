"""Small files: a table after C small appends vs the same compacted vs the same written in one go.

The same rows reach three states of an Iceberg table: C small appends (as a
frequent ingest leaves it), that table after
`CALL system.rewrite_data_files(..., options => map('min-input-files','2'))`, and a
table written once with all rows. For each: data files, planning time
(pyiceberg `scan().plan_files()`), and a full aggregate in Spark; medians.
"""

from __future__ import annotations

import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.settings import Settings

from .common import median_time

TARGET = 1.3


def batch(spark: SparkSession, n: int, rows: int):
    return spark.range(n * rows, (n + 1) * rows, numPartitions=1).select(
        F.col("id"), F.format_string("u%05d", F.col("id") % 5000).alias("user_id"),
        F.when(F.col("id") % 10 == 0, "purchase").otherwise("page_view").alias("event_type"),
        (F.col("id") % 997 / 10.0).alias("amount"),
    )


def measure(spark: SparkSession, settings: Settings, namespace: str, name: str, repeats: int) -> dict:
    table_id = f"{settings.catalog_name}.{namespace}.{name}"
    table = catalog_for(settings).load_table((namespace, name))
    files = len(list(table.scan().plan_files()))

    def plan():
        catalog_for(settings).load_table((namespace, name)).scan().plan_files()

    def query():
        spark.table(table_id).groupBy("event_type").agg(F.count("*"), F.sum("amount"), F.countDistinct("user_id")) \
            .collect()

    return {"data_files": files, "plan_s": median_time(plan, repeats), "query_s": median_time(query, repeats)}


def run(spark: SparkSession, settings: Settings, namespace: str, commits: int, rows_per_commit: int,
        repeats: int = 5) -> dict:
    catalog = settings.catalog_name
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
    small, fresh = f"{catalog}.{namespace}.compaction_small", f"{catalog}.{namespace}.compaction_fresh"
    for table_id in (small, fresh):
        spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
        spark.sql(f"""CREATE TABLE {table_id} (id BIGINT, user_id STRING, event_type STRING, amount DOUBLE)
                      USING iceberg TBLPROPERTIES ('format-version'='2')""")
    started = time.perf_counter()
    for n in range(commits):
        batch(spark, n, rows_per_commit).writeTo(small).append()
    append_s = time.perf_counter() - started
    spark.table(small).writeTo(fresh).append()

    results = {"params": {"commits": commits, "rows_per_commit": rows_per_commit, "repeats": repeats},
               "appends_s": append_s}
    results["small"] = measure(spark, settings, namespace, "compaction_small", repeats)
    results["fresh"] = measure(spark, settings, namespace, "compaction_fresh", repeats)
    started = time.perf_counter()
    spark.sql(f"CALL {catalog}.system.rewrite_data_files(table => '{namespace}.compaction_small', "
              f"options => map('min-input-files','2'))").collect()
    results["rewrite_s"] = time.perf_counter() - started
    results["compacted"] = measure(spark, settings, namespace, "compaction_small", repeats)
    results["ratios"] = {
        f"{state}_{what}_over_fresh": results[state][f"{what}_s"] / results["fresh"][f"{what}_s"]
        for state in ("small", "compacted") for what in ("query", "plan")
    }
    for table_id in (small, fresh):
        spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
    return results


def markdown(results: dict) -> str:
    p, r = results["params"], results["ratios"]
    ratio = r["compacted_query_over_fresh"]
    verdict = (f"**Target reached**: compacted queries in {ratio:.2f}x the time of fresh (target: at most "
               f"{TARGET}x)." if ratio <= TARGET else
               f"**Target not reached**: compacted queries in {ratio:.2f}x the time of fresh (target: at most "
               f"{TARGET}x).")
    rows = [f"| {label} | {results[k]['data_files']} | {results[k]['plan_s']:.3f} | {results[k]['query_s']:.3f} | "
            f"{results[k]['query_s'] / results['fresh']['query_s']:.2f}x |"
            for k, label in (("small", f"after {p['commits']} small appends"),
                             ("compacted", "after `rewrite_data_files`"), ("fresh", "written in one go"))]
    return "\n".join([
        f"### Compaction: {p['commits']} appends of {p['rows_per_commit']:,} rows vs compacted vs fresh "
        f"(median of {p['repeats']})",
        "",
        "| table state | data files | plan_files() s | full aggregate s | query vs fresh |",
        "|---|---|---|---|---|",
        *rows,
        "",
        f"The {p['commits']} appends took {results['appends_s']:.1f} s; `rewrite_data_files` took "
        f"{results['rewrite_s']:.1f} s. Planning: small files {r['small_plan_over_fresh']:.2f}x, compacted "
        f"{r['compacted_plan_over_fresh']:.2f}x the fresh table (compaction leaves the old snapshots' manifests "
        f"until snapshots expire, but the current snapshot plans only the new files). {verdict}",
        "",
    ])
