"""Cost follows the change: one stream batch on tables with 5,000 commits of history vs with 10.

`lakehouse stream` commits every table of its chain (bronze, its quarantine, the ingest log,
silver, its rejects, gold_minute_activity) on every micro-batch: at a batch every few seconds,
thousands of commits a day. Every commit writes the table's metadata file again, with every
snapshot the table keeps in it. The stream runs in this process (its own query and checkpoint,
trigger 1 s); each measured batch is one landed file of today's events.

Three cases, the same stream, the same tables:
- after 10 commits: the tables as the first batches leave them;
- after 5,000 more commits: each table's history grown by 5,000 commits, made the way a stream
  makes them (appends carrying a stream commit's summary), in Iceberg transactions of 250 commits
  so that building them takes seconds, not hours;
- after thinning: the health sensor's expiry (past `max_snapshots`) as it runs once those commits
  are older than `snapshot_detail`.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import threading
import time
from pathlib import Path

from pyspark.sql import SparkSession

from examples.shop.events_generator import generate_day
from lakehouse_assets.live.stream import EventStream
from lakehouse_assets.operations.procedures import TableMaintenance
from lakehouse_assets.project import load_project
from lakehouse_assets.settings import Settings

from .common import SHOP_FILE, lakehouse

TARGET = 1.3
NAMESPACE = "bench_stream_history"
CHUNK = 250  # commits per transaction (a transaction holds every intermediate metadata until it commits)


def _land(landing: Path, n: int, events: int) -> None:
    """One file of today's events, landed whole (written aside, then renamed)."""
    today = dt.datetime.now(dt.timezone.utc).date()
    out = landing / "_gen" / str(n)
    generated = generate_day(out, today, events_per_day=events, files_per_day=1, malformed_rate=0.0, users=500, seed=n)
    source = next((out / "events" / f"date={generated.day.isoformat()}").glob("*.jsonl"))
    folder = landing / "events" / f"date={today.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    source.rename(folder / f"drop-{n:04d}.jsonl")


def _grow(spark: SparkSession, table_id: str, commits: int) -> float:
    """`commits` appends on main, each with the head's own summary properties (a stream commit's)."""
    jvm = spark.sparkContext._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table_id)
    head = table.currentSnapshot()
    summary = {k: v for k, v in dict(head.summary()).items() if k.startswith("lakehouse.")} if head else {}
    started = time.perf_counter()
    for first in range(0, commits, CHUNK):
        transaction = table.newTransaction()
        for _ in range(min(CHUNK, commits - first)):
            append = transaction.newFastAppend()
            for key, value in summary.items():
                append.set(key, value)
            append.commit()
        transaction.commitTransaction()
    return time.perf_counter() - started


def run(spark: SparkSession, settings: Settings, history: int = 5_000, events: int = 2_000, rounds: int = 3) -> dict:
    project = load_project(SHOP_FILE)
    landing = settings.home / "stream_history" / "landing"
    resource = lakehouse(settings, NAMESPACE, landing)
    stream = EventStream(project, resource, checkpoint=str(settings.home / "stream_history" / "checkpoint"),
                         trigger_seconds=1, log=lambda _: None)
    stop = threading.Event()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            stream.run(stop=stop)
        except BaseException as exc:  # noqa: BLE001 - raised in the benchmark's thread below
            errors.append(exc)

    runner = threading.Thread(target=serve, daemon=True)
    runner.start()
    dropped = 0

    def batches() -> list[float]:
        nonlocal dropped
        seconds = []
        for _ in range(rounds):
            seen = len(stream.reports)
            _land(landing, dropped, events)
            dropped += 1
            deadline = time.monotonic() + 180
            while len(stream.reports) == seen and not errors and time.monotonic() < deadline:
                time.sleep(0.2)
            if errors or len(stream.reports) == seen:
                raise RuntimeError(f"the stream took no batch: {errors[0] if errors else 'timed out'}")
            seconds.append(stream.reports[-1].seconds)
        return seconds

    def state() -> dict:
        tables = {}
        for name in sorted(t for _, t in resource.catalog.list_tables(NAMESPACE)):
            table = resource.iceberg_table(name)
            tables[name] = {"snapshots": len(table.metadata.snapshots),
                            "metadata_bytes": len(table.io.new_input(table.metadata_location))}
        return tables

    batches()  # the first batch creates the tables; the JVM warms up
    cases: dict[str, dict] = {}
    cases["small"] = {"state": state(), "batch_s": batches()}
    grow_s = {name: _grow(spark, resource.table_id(name), history) for name in cases["small"]["state"]}
    cases["large"] = {"state": state(), "batch_s": batches()}
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)
    started = time.perf_counter()
    for name in cases["large"]["state"]:
        TableMaintenance(resource, name, project.maintenance.policy(name), log=lambda _: None).expire(now=later)
    thin_s = time.perf_counter() - started
    cases["thinned"] = {"state": state(), "batch_s": batches()}
    stop.set()
    runner.join()
    for case in cases.values():
        case["median_s"] = statistics.median(case["batch_s"])
    small = cases["small"]["median_s"]
    return {
        "params": {"history": history, "events_per_batch": events, "rounds": rounds,
                   "policy": {"max_snapshots": project.maintenance.defaults.max_snapshots,
                              "snapshot_detail_s": project.maintenance.defaults.snapshot_detail.total_seconds()}},
        "cases": cases, "grow_s": grow_s, "thin_s": thin_s,
        "ratios": {"large_over_small": cases["large"]["median_s"] / small,
                   "thinned_over_small": cases["thinned"]["median_s"] / small},
    }


def markdown(results: dict) -> str:
    p, cases, r = results["params"], results["cases"], results["ratios"]
    bronze = "bronze_events"
    rows = []
    labels = {"small": "after the first batches", "large": f"after {p['history']:,} more commits of each table",
              "thinned": "after the expiry that thins past max_snapshots"}
    for key, label in labels.items():
        case = cases[key]
        tables = case["state"]
        snaps = sum(t["snapshots"] for t in tables.values())
        rows.append(f"| {label} | {tables[bronze]['snapshots']:,} | {tables[bronze]['metadata_bytes'] / 1e6:.2f} | "
                    f"{snaps:,} | {case['median_s']:.2f} | {case['median_s'] / cases['small']['median_s']:.2f}x |")
    ratio = r["thinned_over_small"]
    verdict = ("**Target reached**" if ratio <= TARGET else "**Target not reached**") + (
        f": a batch after thinning takes {ratio:.2f}x the batch on young tables (target: at most {TARGET}x); "
        f"without it, {r['large_over_small']:.2f}x.")
    return "\n".join([
        f"### Growth: one stream batch after {p['history']:,} commits of each stream table vs after 10",
        "",
        f"`lakehouse stream` running in this process (trigger 1 s), one file of {p['events_per_batch']:,} of today's events "
        f"per batch, the median of {p['rounds']} batches per case.",
        "",
        "| tables | bronze_events snapshots | its metadata file (MB) | snapshots of all its tables | batch s | "
        "vs the first |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"Every commit writes the table's metadata file again, with every snapshot it keeps. The {p['history']:,} "
        f"commits were added to each of the stream's {len(cases['small']['state'])} tables as a stream makes them "
        f"(appends carrying a stream commit's summary) in Iceberg transactions of {CHUNK} commits "
        f"({sum(results['grow_s'].values()):.0f} s in all). The thinning is the expiry that the health sensor "
        f"requests for a table past max_snapshots ({p['policy']['max_snapshots']}), run as it runs once those "
        f"commits are older than snapshot_detail ({p['policy']['snapshot_detail_s'] / 3600:g} h): every commit "
        f"of the last span is kept, and the last of each span before it ({results['thin_s']:.1f} s for all the "
        f"tables). {verdict}",
        "",
        "Batches (s): " + json.dumps({k: [round(s, 2) for s in c["batch_s"]] for k, c in cases.items()}),
    ])
