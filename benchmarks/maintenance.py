"""A merge-on-read table after many rounds of CDC merges, before and after the platform's maintenance.

R rows, then `rounds` MERGEs of C changes each (updates, deletes and inserts,
as a CDC silver table receives them) into a merge-on-read table: each round
adds data files and position-delete files. Measured before and after
`TableMaintenance.compact()` then `.expire()` (what the health sensor and the
nightly schedule run): data files, delete files, snapshots, health's deleted
ratio, pyiceberg planning time, and Spark's full aggregate and point lookup
(medians). The rows read are checked equal before and after.
"""

from __future__ import annotations

import datetime as dt
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse_assets.operations.procedures import TableMaintenance
from lakehouse_assets.project.model import TablePolicy
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.settings import Settings

from .common import median_time

NAME = "maintenance_mor"


def _state(spark: SparkSession, lakehouse: LakehouseResource, work: TableMaintenance, repeats: int) -> dict:
    table_id = lakehouse.table_id(NAME)
    health = work.health()

    def query():
        spark.table(table_id).groupBy("status").agg(F.count("*"), F.sum("amount")).collect()

    def lookup():
        spark.table(table_id).where("id = 4242").collect()

    def plan():
        list(lakehouse.iceberg_table(NAME).scan().plan_files())

    return {"data_files": health.data_files, "delete_files": health.delete_files,
            "deleted_ratio": health.deleted_ratio, "snapshots": health.snapshots, "manifests": health.manifests,
            "plan_s": median_time(plan, repeats), "query_s": median_time(query, repeats),
            "lookup_s": median_time(lookup, repeats)}


def run(spark: SparkSession, settings: Settings, rows: int, changes: int, rounds: int = 50, repeats: int = 5) -> dict:
    lakehouse = LakehouseResource(home=str(settings.home), namespace=settings.namespace)
    table_id = lakehouse.table_id(NAME)
    spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
    spark.sql(f"""CREATE TABLE {table_id} (id BIGINT, status STRING, amount DOUBLE, updated_at TIMESTAMP)
                  USING iceberg PARTITIONED BY (bucket(8, id))
                  TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read',
                                 'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')""")
    spark.range(rows).select("id", F.lit("new").alias("status"), (F.col("id") % 1000 / 10).alias("amount"),
                             F.current_timestamp().alias("updated_at")).writeTo(table_id).append()
    started = time.perf_counter()
    for n in range(rounds):
        # Mostly updates of existing rows, a tenth deletes, a tenth inserts of new ids.
        spark.range(changes).select(
            F.when(F.col("id") % 10 == 9, F.lit(rows) + n * changes + F.col("id"))
             .otherwise(F.pmod(F.col("id") * 7919 + n * 104729, F.lit(rows))).alias("id"),
            F.when(F.col("id") % 10 == 0, "d").otherwise("u").alias("op"),
            F.lit(f"round{n}").alias("status"), (F.col("id") % 997 / 10).alias("amount"),
        ).createOrReplaceTempView("bench_changes")
        spark.sql(f"""MERGE INTO {table_id} t USING bench_changes c ON t.id = c.id
                      WHEN MATCHED AND c.op = 'd' THEN DELETE
                      WHEN MATCHED THEN UPDATE SET status = c.status, amount = c.amount, updated_at = current_timestamp()
                      WHEN NOT MATCHED AND c.op <> 'd' THEN INSERT (id, status, amount, updated_at)
                           VALUES (c.id, c.status, c.amount, current_timestamp())""")
    merges_s = time.perf_counter() - started
    def checksum():  # exact: amounts are tenths, summed as integers (a double sum depends on file order)
        return spark.table(table_id).agg(F.count("*"), F.sum(F.round(F.col("amount") * 10).cast("long")),
                                         F.sum("id"), F.sum(F.xxhash64("id", "status", "amount"))).collect()[0]

    expected = checksum()

    policy = TablePolicy(snapshot_retention=dt.timedelta(days=7), retain_last=1)
    work = TableMaintenance(lakehouse, NAME, policy, log=lambda m: None)
    before = _state(spark, lakehouse, work, repeats)
    compact = work.compact()
    expire = work.expire(now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=8))
    after = _state(spark, lakehouse, work, repeats)
    same = checksum() == expected
    spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
    return {
        "params": {"rows": rows, "changes_per_round": changes, "rounds": rounds, "repeats": repeats},
        "merges_s": merges_s, "before": before, "after": after, "same_rows": same,
        "compact_s": compact.seconds, "expire_s": expire.seconds, "figures": {**compact.figures, **expire.figures},
        "ratios": {k: before[k] / after[k] for k in ("query_s", "lookup_s", "plan_s") if after[k]},
    }


def markdown(r: dict) -> str:
    p, b, a = r["params"], r["before"], r["after"]
    rows = [f"| {label} | {s['data_files']} | {s['delete_files']} | {s['deleted_ratio']:.3f} | {s['snapshots']} | "
            f"{s['manifests']} | {s['plan_s']:.3f} | {s['query_s']:.3f} | {s['lookup_s']:.3f} |"
            for label, s in (("after the merges", b), ("after compact + expire", a))]
    return "\n".join([
        f"### Maintenance: a merge-on-read table after {p['rounds']} rounds of CDC merges "
        f"(median of {p['repeats']})",
        "",
        f"{p['rows']:,} rows, then {p['rounds']} MERGEs of {p['changes_per_round']:,} changes each (updates, a tenth "
        f"deletes, a tenth inserts) in {r['merges_s']:.1f} s. Then the platform's maintenance: `compact` "
        f"({r['compact_s']:.1f} s: {r['figures']['rewritten_data_files']} data files rewritten, "
        f"{r['figures']['removed_delete_files']} delete files removed) and `expire` ({r['expire_s']:.1f} s).",
        "",
        "| state | data files | delete files | deleted ratio | snapshots | manifests | plan_files() s | "
        "full aggregate s | point lookup s |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Full aggregate {r['ratios'].get('query_s', 0):.1f}x faster, point lookup {r['ratios'].get('lookup_s', 0):.1f}x, "
        f"planning {r['ratios'].get('plan_s', 0):.1f}x after maintenance; the rows read are "
        f"{'identical' if r['same_rows'] else 'NOT identical'} (count, sums, a row hash).",
        "",
    ])
