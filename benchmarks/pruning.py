"""Pruning a selective query: files Iceberg plans vs files that hold matches; Iceberg vs a Parquet lake.

D days of events, each day written as several files sorted by user (one write,
range-partitioned by day and user, so each file of a day holds a range of
users), land in an Iceberg table partitioned by `days(ts)` and in a plain
Parquet dataset partitioned by `day`. The query asks for one user on one day.

- Planned: the data files pyiceberg's `scan(row_filter=...).plan_files()` returns
  (partition pruning, then column min/max statistics from the manifests).
- Holding matches: of those, the files that really hold a matching row (each
  read with pyarrow).
- Time: the same count in Spark on the Iceberg table and on the Parquet dataset
  (found by listing directories, pruned by the `day=` folder).
"""

from __future__ import annotations

import datetime as dt
import shutil
from urllib.parse import unquote, urlsplit

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.settings import Settings

from .common import median_time

FIRST_EPOCH = 1_735_689_600  # 2025-01-01T00:00:00Z
TARGET = 2.0


def events(spark: SparkSession, days: int, rows_per_day: int, users: int):
    total = days * rows_per_day
    return spark.range(total).select(
        F.col("id"),
        F.format_string("u%05d", F.abs(F.hash("id")) % users).alias("user_id"),
        F.timestamp_seconds(F.lit(FIRST_EPOCH) + F.floor(F.col("id") / rows_per_day) * 86_400
                            + F.abs(F.hash(F.col("id") * 7)) % 86_400).alias("ts"),
        F.when(F.col("id") % 10 == 0, "purchase").otherwise("page_view").alias("event_type"),
        (F.col("id") % 997 / 10.0).alias("amount"),
    ).withColumn("day", F.to_date("ts"))


def _path(uri: str) -> str:
    return unquote(urlsplit(uri).path) if uri.startswith("file:") else uri


def run(spark: SparkSession, settings: Settings, namespace: str, days: int, rows_per_day: int,
        files_per_day: int = 4, users: int = 2_000, repeats: int = 5) -> dict:
    catalog = settings.catalog_name
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
    table_id = f"{catalog}.{namespace}.pruning_events"
    spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
    spark.sql(f"""CREATE TABLE {table_id} (id BIGINT, user_id STRING, ts TIMESTAMP, event_type STRING, amount DOUBLE)
                  USING iceberg PARTITIONED BY (days(ts))
                  TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')""")
    df = events(spark, days, rows_per_day, users).repartitionByRange(days * files_per_day, "day", "user_id") \
        .sortWithinPartitions("day", "user_id").cache()
    df.count()
    df.drop("day").writeTo(table_id).append()
    root = settings.home / "pruning_lake"
    shutil.rmtree(root, ignore_errors=True)
    df.write.partitionBy("day").parquet(str(root))
    df.unpersist()

    day = dt.date(2025, 1, 1) + dt.timedelta(days=days // 2)
    start = dt.datetime.combine(day, dt.time(), dt.timezone.utc)
    end = start + dt.timedelta(days=1)
    user = f"u{users // 3:05d}"

    table = catalog_for(settings).load_table((namespace, "pruning_events"))
    total_files = len(list(table.scan().plan_files()))
    planned = list(table.scan(row_filter=And(GreaterThanOrEqual("ts", start.isoformat()),
                                             LessThan("ts", end.isoformat()),
                                             EqualTo("user_id", user))).plan_files())
    holding, matches = 0, 0
    for task in planned:
        t = pq.read_table(_path(task.file.file_path), columns=["user_id", "ts"])
        mask = pc.and_(pc.equal(t["user_id"], user),
                       pc.and_(pc.greater_equal(t["ts"], start), pc.less(t["ts"], end)))
        n = pc.sum(mask).as_py() or 0
        holding += n > 0
        matches += n
    day_files = sum(1 for _ in (root / f"day={day.isoformat()}").glob("*.parquet"))

    iceberg_q = lambda: spark.table(table_id).where(  # noqa: E731
        (F.col("ts") >= F.lit(start)) & (F.col("ts") < F.lit(end)) & (F.col("user_id") == user)).count()
    lake_q = lambda: spark.read.parquet(str(root)).where(  # noqa: E731
        (F.col("day") == day.isoformat()) & (F.col("user_id") == user)).count()
    assert iceberg_q() == lake_q() == matches, "both engines and pyarrow must agree on the answer"
    results = {
        "params": {"days": days, "rows_per_day": rows_per_day, "files_per_day": files_per_day, "users": users,
                   "repeats": repeats, "day": day.isoformat(), "user": user},
        "table_files": total_files, "planned_files": len(planned), "files_with_matches": holding,
        "matching_rows": matches, "lake_files_in_day_folder": day_files,
        "iceberg_s": median_time(iceberg_q, repeats), "parquet_s": median_time(lake_q, repeats),
    }
    results["ratios"] = {"planned_over_holding": len(planned) / max(1, holding),
                         "iceberg_over_parquet_time": results["iceberg_s"] / results["parquet_s"]}
    spark.sql(f"DROP TABLE IF EXISTS {table_id} PURGE")
    shutil.rmtree(root, ignore_errors=True)
    return results


def markdown(results: dict) -> str:
    p, r = results["params"], results["ratios"]
    ratio = r["planned_over_holding"]
    verdict = (f"**Target reached**: planned files are {ratio:.1f}x the files holding matches (target: at most "
               f"{TARGET:g}x)." if ratio <= TARGET else
               f"**Target not reached**: planned files are {ratio:.1f}x the files holding matches (target: at most "
               f"{TARGET:g}x); the user's rows are spread over files whose user ranges all cover it.")
    return "\n".join([
        f"### Pruning: one user on one day of {p['days']} days ({p['rows_per_day']:,} rows and "
        f"{p['files_per_day']} files per day, sorted by user within the day)",
        "",
        "| | files |",
        "|---|---|",
        f"| data files in the Iceberg table | {results['table_files']} |",
        f"| planned by Iceberg (partition + min/max pruning) | {results['planned_files']} |",
        f"| of those, holding a matching row (checked with pyarrow) | {results['files_with_matches']} |",
        f"| Parquet lake: files in the `day=` folder Spark reads | {results['lake_files_in_day_folder']} |",
        "",
        f"{results['matching_rows']} matching rows. Query time (median of {p['repeats']}, Spark `count()`): Iceberg "
        f"{results['iceberg_s']:.3f} s, Parquet lake {results['parquet_s']:.3f} s "
        f"({r['iceberg_over_parquet_time']:.2f}x; the lake lists directories and reads Parquet footers, Iceberg "
        f"reads its metadata from the catalog and manifests). {verdict}",
        "",
    ])
