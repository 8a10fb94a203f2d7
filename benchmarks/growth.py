"""Cost follows the change: one more landing day into a bronze table that holds N rows vs into an empty one.

Two namespaces get the same bronze table of the shop's declaration: one empty, one
pre-filled with N rows over 100 earlier landing days (synthetic rows of bronze's
own schema, written by Spark, as ingest would have left them: one landing day per
data file, lineage columns filled). Then the same generated landing day is taken
by `bronze_events` into each, then a second day into each (in the other order),
and the times compared. Ingest's exactly-once check, its records-in = kept +
quarantined check and the ingest log all look up the run's files; with the
landing day as a bound on those lookups (`sources.landing.of_files`) they read
only that day's data files, so the ingest into the full table should cost what
the ingest into the empty one costs.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from examples.shop.events_generator import generate_day
from lakehouse_assets.bronze.assets import event_bronze_spec
from lakehouse_assets.landing.reader import of_files
from lakehouse_assets.project import load_project
from lakehouse_assets.settings import Settings

from .common import SHOP_FILE, lakehouse, materialize_partition, shop_assets

TARGET = 1.2
PREFILL_DAYS = 100
NEW_DAYS = (dt.date(2025, 6, 1), dt.date(2025, 6, 2))


def _prefill(spark: SparkSession, table_id: str, schema, rows: int) -> None:
    """`rows` rows of bronze's schema over PREFILL_DAYS landing days before the first new day."""
    first = NEW_DAYS[0] - dt.timedelta(days=PREFILL_DAYS)
    per_day = max(1, rows // PREFILL_DAYS)
    day = F.date_add(F.lit(first), (F.col("id") / per_day).cast("int"))
    known = {
        "event_id": F.concat(F.lit("prefill-"), F.col("id").cast("string")),
        "user_id": F.concat(F.lit("u"), (F.col("id") % 50_000).cast("string")),
        "session_id": F.concat(F.lit("s"), (F.col("id") / 20).cast("bigint").cast("string")),
        "event_type": F.lit("page_view"),
        "event_ts": F.to_timestamp(day) + F.make_interval(secs=(F.col("id") % per_day * 86_400 / per_day)
                                                          .cast("decimal(18,6)")),
        "source_file": F.concat(F.lit("file:/prefill/events/date="), day.cast("string"), F.lit("/part-"),
                                (F.col("id") % 4).cast("string"), F.lit(".jsonl")),
        "source_line": (F.col("id") % 1_000_000 + 1).cast("int"),
        "landing_date": day,
        "payload": F.lit('{"prefilled": true}'),
        "ingested_at": F.current_timestamp(),
        "run_id": F.lit("prefill"),
    }
    columns = [(known[f.name] if f.name in known else F.lit(None)).cast(f.dataType).alias(f.name)
               for f in schema.fields]
    spark.range(per_day * PREFILL_DAYS).select(*columns).writeTo(table_id).append()


def run(spark: SparkSession, settings: Settings, rows: int, events_per_day: int) -> dict:
    bronze_events = shop_assets("bronze_events")
    source = next(iter(load_project(SHOP_FILE).events.values()))
    spec = event_bronze_spec(source)
    landing = Path(settings.home) / "growth_landing"
    generated = [generate_day(landing, day, events_per_day=events_per_day, files_per_day=4, users=5_000)
                 for day in NEW_DAYS]
    empty, full = (lakehouse(settings, f"bench_growth_{kind}", landing) for kind in ("empty", "full"))
    for resource in (empty, full):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {settings.catalog_name}.{resource.namespace}")
        resource.table(spec).create()
    started = time.perf_counter()
    _prefill(spark, full.table(spec).id, spec.schema, rows)
    prefill_s = time.perf_counter() - started
    held = full.iceberg_table(spec.name).current_snapshot()
    held_rows = int(held.summary["total-records"]) if held and held.summary else 0
    held_files = int(held.summary["total-data-files"]) if held and held.summary else 0

    warmup = lakehouse(settings, "bench_growth_warmup", landing)  # the first run pays the JVM's warm-up
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {settings.catalog_name}.{warmup.namespace}")
    materialize_partition(bronze_events, warmup, NEW_DAYS[0].isoformat())
    times: dict[str, list[float]] = {"empty": [], "full": []}
    for day, order in zip(NEW_DAYS, (("empty", "full"), ("full", "empty"))):
        for kind in order:
            resource = empty if kind == "empty" else full
            started = time.perf_counter()
            result = materialize_partition(bronze_events, resource, day.isoformat())
            times[kind].append(time.perf_counter() - started)
            if not result.success:
                raise RuntimeError(f"bronze_events into the {kind} table failed for {day}")
    counts = {kind: int(r.iceberg_table(spec.name).current_snapshot().summary["total-records"])
              for kind, r in (("empty", empty), ("full", full))}
    if counts["full"] - counts["empty"] != held_rows:
        raise RuntimeError(f"the two tables took different rows: {counts}, prefilled {held_rows}")
    lookups = _lookups(full.table(spec), NEW_DAYS[-1])
    for resource in (empty, full, warmup):
        for name in (spec.name, source.quarantine, "bronze_ingest_log"):
            spark.sql(f"DROP TABLE IF EXISTS {resource.table_id(name)} PURGE")
    lines = sum(g.events + g.duplicates for g in generated)
    return {
        "params": {"prefilled_rows": held_rows, "prefilled_files": held_files, "prefill_s": prefill_s,
                   "days": len(NEW_DAYS), "lines_per_day": lines // len(NEW_DAYS),
                   "kept_per_table": counts["empty"]},
        "empty_s": times["empty"], "full_s": times["full"],
        "ratio": statistics.mean(times["full"]) / statistics.mean(times["empty"]),
        "lookups": lookups,
    }


def _lookups(table, day: dt.date) -> dict[str, float]:
    """The exactly-once look-up of one day's files in the full table: by file name alone vs within the day."""
    bronze = table.read()
    files = [r.source_file for r in bronze.where(F.col("landing_date") == F.lit(day))
             .select("source_file").distinct().collect()]
    result = {}
    for name, condition in (("by name", F.col("source_file").isin(files)), ("within the day", of_files(files))):
        bronze.where(condition).select("source_file").distinct().collect()  # warm
        started = time.perf_counter()
        bronze.where(condition).select("source_file").distinct().collect()
        result[name] = time.perf_counter() - started
    return result


def markdown(results: dict) -> str:
    p, ratio = results["params"], results["ratio"]
    verdict = (f"**Target reached**: {ratio:.2f}x (target: at most {TARGET}x)." if ratio <= TARGET else
               f"**Target not reached**: {ratio:.2f}x (target: at most {TARGET}x).")
    empty, full = results["empty_s"], results["full_s"]
    return "\n".join([
        f"### Growth: one more landing day into {p['prefilled_rows']:,} rows vs into an empty table",
        "",
        "| bronze_events holds | day 1 (s) | day 2 (s) | mean (s) | lines/s |",
        "|---|---|---|---|---|",
        f"| nothing | {empty[0]:.2f} | {empty[1]:.2f} | {statistics.mean(empty):.2f} | "
        f"{p['lines_per_day'] / statistics.mean(empty):,.0f} |",
        f"| {p['prefilled_rows']:,} rows in {p['prefilled_files']:,} data files | {full[0]:.2f} | {full[1]:.2f} | "
        f"{statistics.mean(full):.2f} | {p['lines_per_day'] / statistics.mean(full):,.0f} |",
        "",
        f"Each day is {p['lines_per_day']:,} JSON lines in 4 files; day 1 went to the empty table first, day 2 to "
        f"the full one first, after a warm-up run into a third table. Pre-filling took {p['prefill_s']:.0f} s. "
        f"Full over empty: {verdict}",
        "",
        f"The look-up that decides which of a day's files the table already holds, in the full table: by file name "
        f"alone (as before: string bounds are truncated, every data file is read) "
        f"{results['lookups']['by name']:.2f} s; within the files' landing days "
        f"{results['lookups']['within the day']:.2f} s. Ingest looks up a run's files in bronze twice (exactly-once "
        "before publishing, records in = kept + quarantined after), and in the quarantine and the ingest log.",
        "",
    ])
