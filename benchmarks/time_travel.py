"""Time travel: reading an old snapshot (`VERSION AS OF`) vs the current one after several commits.

A table of M rows takes K commits that each change 10% of the rows
(copy-on-write UPDATE, so every snapshot holds M rows). The same aggregate then
reads the first snapshot and the current one; medians.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from .common import median_time


def run(spark: SparkSession, catalog: str, namespace: str, rows: int, commits: int = 5, repeats: int = 5) -> dict:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
    table_id = f"{catalog}.{namespace}.time_travel"
    spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
    spark.sql(f"""CREATE TABLE {table_id} (id BIGINT, status STRING, amount DOUBLE) USING iceberg
                  TBLPROPERTIES ('format-version'='2', 'write.update.mode'='copy-on-write')""")
    spark.range(rows).select("id", F.lit("v0").alias("status"), (F.col("id") % 997 / 10.0).alias("amount")) \
        .writeTo(table_id).append()
    first = spark.sql(f"SELECT snapshot_id FROM {table_id}.snapshots ORDER BY committed_at LIMIT 1").first()[0]
    for n in range(1, commits + 1):
        spark.sql(f"UPDATE {table_id} SET status = 'v{n}', amount = amount + 1 WHERE id % 10 = {n % 10}")

    def old():
        spark.sql(f"SELECT status, count(*), sum(amount) FROM {table_id} VERSION AS OF {first} GROUP BY status") \
            .collect()

    def current():
        spark.sql(f"SELECT status, count(*), sum(amount) FROM {table_id} GROUP BY status").collect()

    results = {"params": {"rows": rows, "commits": commits, "repeats": repeats},
               "old_s": median_time(old, repeats), "current_s": median_time(current, repeats)}
    results["ratios"] = {"old_over_current": results["old_s"] / results["current_s"]}
    spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
    return results


def markdown(results: dict) -> str:
    p, r = results["params"], results["ratios"]
    return "\n".join([
        f"### Time travel: first snapshot vs current after {p['commits']} commits ({p['rows']:,} rows, "
        f"median of {p['repeats']})",
        "",
        "| read | aggregate s |",
        "|---|---|",
        f"| current snapshot | {results['current_s']:.3f} |",
        f"| `VERSION AS OF` the first snapshot | {results['old_s']:.3f} |",
        "",
        f"Reading the old snapshot takes {r['old_over_current']:.2f}x the time of the current one: it is the "
        f"same kind of scan over that snapshot's own files (no log to replay).",
        "",
    ])
