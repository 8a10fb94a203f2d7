"""Ingest overhead: landing JSON lines -> bronze through our asset vs plain Spark Parquet vs pyarrow.

The same JSON-lines files (written by the sample generator, D days, no malformed
lines so that every engine can read them) are taken three ways:

- ours: `bronze_events` materialised in-process by Dagster over the days' range,
  on the benchmark's Spark session: parse line by line with reasons, typed
  columns and lineage, staged on a branch, exactly-once check against the
  table, quarantine, ingest log, records-in = kept + quarantined check;
- plain Spark: `spark.read.json` with the event schema, written as Parquet with
  `partitionBy(day)` (the data-lake way: no table, no checks, no lineage);
- pyarrow: `pyarrow.json.read_json` + `pyarrow.parquet.write_table`, one process,
  no Spark at all (the floor).

Then ours and plain Spark as whole commands, each a process of its own on a
fresh lakehouse home, on the same lines and on a fifth of them, and on one
line: what a run pays before its data, reported apart.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from examples.shop.events_generator import generate_day
from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.settings import Settings

from .common import SHOP_FILE, lakehouse, materialize_range, shop_assets

bronze_events = shop_assets("bronze_events")[0]

FIRST_DAY = dt.date(2025, 1, 1)
TARGET = 1.3

EVENT_SCHEMA = T.StructType([
    T.StructField("event_id", T.StringType()), T.StructField("user_id", T.StringType()),
    T.StructField("session_id", T.StringType()), T.StructField("event_type", T.StringType()),
    T.StructField("event_ts", T.TimestampType()), T.StructField("ip", T.StringType()),
    T.StructField("email", T.StringType()), T.StructField("properties", T.MapType(T.StringType(), T.StringType())),
    T.StructField("price", T.DecimalType(12, 2)),
])

ARROW_SCHEMA = pa.schema([
    ("event_id", pa.string()), ("user_id", pa.string()), ("session_id", pa.string()), ("event_type", pa.string()),
    ("event_ts", pa.timestamp("ms", tz="UTC")), ("ip", pa.string()), ("email", pa.string()),
    ("properties", pa.struct([("page", pa.string()), ("product_id", pa.string()), ("referrer", pa.string()),
                              ("user_agent", pa.string()), ("quantity", pa.int64())])),
    ("price", pa.float64()),
])


def land(landing: Path, events: int, days: int, files_per_day: int = 4) -> tuple[list[Path], int]:
    """Write the landing files; returns them and the number of lines (records in)."""
    files, lines = [], 0
    for n in range(days):
        generated = generate_day(landing, FIRST_DAY + dt.timedelta(days=n), events_per_day=events // days,
                                 files_per_day=files_per_day, malformed_rate=0.0, users=5_000)
        files += sorted((landing / "events" / f"date={generated.day.isoformat()}").glob("*.jsonl"))
        lines += generated.events + generated.duplicates
    return files, lines


def ours(settings: Settings, namespace: str, landing: Path, days: int) -> tuple[float, dict[str, float]]:
    """The run's wall time, and the time by stage the asset reports (`seconds_by_stage`)."""
    resource = lakehouse(settings, namespace, landing)
    last = (FIRST_DAY + dt.timedelta(days=days - 1)).isoformat()
    started = time.perf_counter()
    result = materialize_range([bronze_events], resource, FIRST_DAY.isoformat(), last)
    elapsed = time.perf_counter() - started
    if not result.success:
        raise RuntimeError("bronze_events materialisation failed")
    # One ingest for the whole range: every partition's materialisation (bronze and quarantine) carries its report.
    entries = [m.metadata["seconds_by_stage"].value for m in result.asset_materializations_for_node("bronze_events")
               if "seconds_by_stage" in m.metadata]
    return elapsed, dict(entries[0]) if entries else {}


# The peer as a command of its own, as a user would write it: a PySpark script with the same master and driver
# memory and the schema written out in it (EVENT_SCHEMA's, as DDL text), importing nothing of the project's.
PLAIN_COMMAND = f"""
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.master(sys.argv[1]).config("spark.driver.memory", sys.argv[2]).getOrCreate()
schema = {", ".join(f"{f.name} {f.dataType.simpleString()}" for f in EVENT_SCHEMA.fields)!r}
(spark.read.schema(schema).json(sys.argv[3] + "/events/date=*/*.jsonl").withColumn("day", F.to_date("event_ts"))
 .write.mode("overwrite").partitionBy("day").parquet(sys.argv[4]))
"""

def _command(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} failed:\n{done.stderr[-3000:]}")
    return seconds


def commands(settings: Settings, landing: Path, days: int, lines: int) -> dict[str, float]:
    """The whole commands, each a process of its own on a fresh lakehouse home, as a user runs them: `dagster asset
    materialize` of bronze_events over the days (which must keep all `lines`), and plain Spark's conversion of the
    same files."""
    last = (FIRST_DAY + dt.timedelta(days=days - 1)).isoformat()
    with tempfile.TemporaryDirectory(prefix="lakehouse-ingest-") as home:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_HOME"))},
               "LAKEHOUSE_HOME": home, "LAKEHOUSE_PROJECT": str(SHOP_FILE), "LAKEHOUSE_LANDING": str(landing),
               "LAKEHOUSE_START_DATE": FIRST_DAY.isoformat(), "DAGSTER_HOME": home,
               "LAKEHOUSE_SPARK_MASTER": settings.spark_master, "LAKEHOUSE_DRIVER_MEMORY": settings.driver_memory}
        ours_s = _command([str(Path(sys.executable).with_name("dagster")), "asset", "materialize", "-m",
                           "lakehouse_assets.definitions", "--select", "bronze_events",
                           "--partition-range", f"{FIRST_DAY.isoformat()}...{last}"], env)
        made = Settings.from_env(home=Path(home), project=str(SHOP_FILE))  # the command's own settings
        kept = catalog_for(made).load_table((made.namespace, "bronze_events")).scan().count()
        if kept != lines:
            raise RuntimeError(f"the command's bronze_events kept {kept} rows of {lines} lines")
        plain_s = _command([sys.executable, "-c", PLAIN_COMMAND, settings.spark_master, settings.driver_memory,
                            str(landing), str(Path(home) / "parquet")], env)
    return {"ours_s": ours_s, "plain_spark_s": plain_s}


def command_runs(settings: Settings, work: Path, landings: dict[str, tuple[Path, int]], days: int) -> dict:
    """Per landing size, the two whole commands; and each on one line (`fixed`): what a run pays before its data."""
    one = work / "landing_one"
    made = generate_day(one, FIRST_DAY, events_per_day=1, files_per_day=1, malformed_rate=0.0, users=1)
    landings = {"fixed": (one, made.events + made.duplicates), **landings}
    return {size: {**commands(settings, landing, 1 if size == "fixed" else days, lines), "lines": lines}
            for size, (landing, lines) in landings.items()}


def plain_spark(spark: SparkSession, files: list[Path], out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    (spark.read.schema(EVENT_SCHEMA).json([str(f) for f in files])
     .withColumn("day", F.to_date("event_ts"))
     .write.mode("overwrite").partitionBy("day").parquet(str(out)))
    return time.perf_counter() - started


def pyarrow_floor(files: list[Path], out: Path) -> float:
    out.mkdir(parents=True, exist_ok=True)
    parse = pj.ParseOptions(explicit_schema=ARROW_SCHEMA, unexpected_field_behavior="ignore")
    started = time.perf_counter()
    table = pa.concat_tables(pj.read_json(f, parse_options=parse) for f in files)
    pq.write_table(table, out / "events.parquet")
    return time.perf_counter() - started


def run(spark: SparkSession, settings: Settings, events: int, days: int = 3, tag: str = "main",
        baselines: bool = True) -> dict:
    work = settings.home / f"ingest_{tag}"
    files, lines = land(work / "landing", events, days)
    results = {"params": {"events": events, "lines": lines, "days": days, "files": len(files)}}
    if baselines:
        results["plain_spark_s"] = plain_spark(spark, files, work / "parquet")
    results["ours_s"], results["stages_s"] = ours(settings, f"bench_ingest_{tag}", work / "landing", days)
    kept = spark.table(f"{settings.catalog_name}.bench_ingest_{tag}.bronze_events").count()
    results["params"]["kept"] = kept
    if baselines:
        results["pyarrow_s"] = pyarrow_floor(files, work / "arrow")
        results["ratios"] = {
            "ours_over_plain_spark": results["ours_s"] / results["plain_spark_s"],
            "ours_over_pyarrow": results["ours_s"] / results["pyarrow_s"],
            "plain_spark_over_pyarrow": results["plain_spark_s"] / results["pyarrow_s"],
        }
    shutil.rmtree(work / "parquet", ignore_errors=True)
    shutil.rmtree(work / "arrow", ignore_errors=True)
    if baselines:
        small_lines = land(work / "landing_small", events // 5, days)[1]
        results["commands"] = command_runs(settings, work, {"small": (work / "landing_small", small_lines),
                                                            "large": (work / "landing", lines)}, days)
    return results


def markdown(results: dict) -> str:
    p, r = results["params"], results["ratios"]
    rows = p["lines"]
    ratio = r["ours_over_plain_spark"]
    verdict = (f"**Target {'reached' if ratio <= TARGET else 'not reached'}**: ours takes {ratio:.2f}x plain Spark "
               f"Parquet (target: at most {TARGET}x). Plain Spark converts JSON to Parquet in one pass. Ours, per line: "
               "keeps the raw line and its file and line number, read from the files' bytes by the project's line "
               "reader (`java/src/main/java/lakehouse/JsonLines.java`; each split's lines are counted first, a newline scan), "
               "which also parses each line once, from its bytes, into the declared top-level fields as text and "
               "the keys beyond them (schema drift), leaving to Spark's `from_json` only the lines it cannot read "
               "exactly as `from_json` would; types each field from its text, so that a bad value becomes a reason "
               "rather than a null; and writes the good lines straight from that parse into bronze (raw payload "
               "included, so bronze holds about twice the bytes; each task writes its rows to their days' files, no "
               "shuffle). The quarantine parses again only when bronze's counts show bad lines. Records in = kept + "
               "quarantined is checked file by file on the staged tables (one scan of their lineage columns, which "
               "also gives the event-time watermark), and bronze, the quarantine and the ingest log publish "
               "together. The breakdown below is measured by the asset itself.\n\n"
               "Profiled before the line reader (the JDK's flight recorder on the executor threads): Spark's "
               "`from_json` (the fields) and `json_object_keys` (the drift) each built a Jackson parser per line "
               "through a character reader, and allocating that reader's buffer was the largest single cost; the "
               "line reader parses the bytes once instead, as Spark's JSON data source does (in this benchmark, "
               "2.28x plain Spark before it). What is left beyond plain Spark is mostly the Parquet writer on the "
               "raw payload beside the typed columns, the typing and the reasons, and reading back what was "
               "staged (`count kept`). Profiled again on Spark 4.1 (the same recorder): a fifth of the run's CPU "
               "was Parquet's dictionary encoding probing dictionaries of up to 2 MiB a column (Iceberg's default) "
               "for columns of many distinct values (ids, addresses, the raw lines); bronze's dictionaries are kept "
               "to 128 KiB a column (`write.parquet.dict-size-bytes`), and the same 1.7M bronze rows are written "
               "in 5.1 s instead of 6.7 s by Iceberg alone, into files 2% larger.")
    return "\n".join([
        f"### Ingest: {rows:,} JSON lines ({p['days']} days, {p['files']} files) to Parquet",
        "",
        "| path | seconds | rows/s | vs plain Spark |",
        "|---|---|---|---|",
        f"| ours: `bronze_events` materialised (Iceberg, checks, quarantine, log) | {results['ours_s']:.2f} | "
        f"{rows / results['ours_s']:,.0f} | {ratio:.2f}x |",
        f"| plain Spark: `read.json` -> Parquet `partitionBy(day)` | {results['plain_spark_s']:.2f} | "
        f"{rows / results['plain_spark_s']:,.0f} | 1.00x |",
        f"| pyarrow: `read_json` -> `write_table` (floor, no Spark) | {results['pyarrow_s']:.2f} | "
        f"{rows / results['pyarrow_s']:,.0f} | {results['pyarrow_s'] / results['plain_spark_s']:.2f}x |",
        "",
        f"One run each (a repeat would find every file already taken). Bronze kept {p['kept']:,} rows "
        f"(every line: duplicates are bronze's to keep, silver removes them). {verdict}",
        "",
        *_breakdown(results),
        *_commands(results),
    ])


def _commands(results: dict) -> list[str]:
    """The whole commands (results from before they were measured have none)."""
    runs = results.get("commands")
    if not runs:
        return []
    fixed = runs["fixed"]
    lines = ["The whole commands, each a process of its own on a fresh lakehouse home (`dagster asset materialize` "
             "of bronze_events over the days; plain Spark's conversion as a PySpark script with the same master and "
             "driver memory, its schema written out, importing nothing of the project's); `fixed` is each command "
             "on a single line, what a run pays before its data (the JVM, Dagster's run, the tables created, the "
             "listing):", "",
             "| lines | ours, s | plain Spark, s | ours / plain | less each one's fixed cost: ours / plain |",
             "|---|---|---|---|---|",
             f"| {fixed['lines']:,} (fixed) | {fixed['ours_s']:.1f} | {fixed['plain_spark_s']:.1f} | "
             f"{fixed['ours_s'] / fixed['plain_spark_s']:.2f}x | |"]
    for size in ("small", "large"):
        r = runs[size]
        net = (r["ours_s"] - fixed["ours_s"]) / max(0.001, r["plain_spark_s"] - fixed["plain_spark_s"])
        lines.append(f"| {r['lines']:,} | {r['ours_s']:.1f} | {r['plain_spark_s']:.1f} | "
                     f"{r['ours_s'] / r['plain_spark_s']:.2f}x | {net:.2f}x |")
    worst = max(runs[s]["ours_s"] / runs[s]["plain_spark_s"] for s in ("small", "large"))
    verdict = "reached" if worst <= TARGET else "not reached"
    return [*lines, "", f"Whole commands at both sizes at most {TARGET}x plain Spark's: **{verdict}** "
            f"(the larger ratio {worst:.2f}x).", ""]


def _breakdown(results: dict) -> list[str]:
    """Where our run's time went, as the asset measured it, next to plain Spark's whole conversion."""
    stages = results.get("stages_s") or {}
    if not stages:
        return []
    measured = sum(stages.values())
    lines = ["Where the time of ours goes (the asset's own `seconds_by_stage`; the rest of the run is Dagster's "
             "run and step bookkeeping and listing the landing folders):", "",
             "| stage | seconds | share of the run | vs plain Spark's whole conversion |", "|---|---|---|---|"]
    for stage, seconds in sorted(stages.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {stage} | {seconds:.2f} | {seconds / results['ours_s']:.0%} | "
                     f"{seconds / results['plain_spark_s']:.2f}x |")
    rest = results["ours_s"] - measured
    lines += [f"| outside the stages | {rest:.2f} | {rest / results['ours_s']:.0%} | "
              f"{rest / results['plain_spark_s']:.2f}x |", ""]
    return lines
