"""Run the benchmarks side by side in one Spark session and write benchmarks/RESULTS.md.

    python -m benchmarks.run [--scale N] [--only NAME,...]

SCALE multiplies every data size (1 = the small default that runs in minutes on
two cores). The figures are ratios or pairs measured in the same run. A
benchmark that fails is reported as failed in RESULTS.md; the others still run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import tempfile
import time
import traceback
from importlib.metadata import version
from pathlib import Path

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.runtime.spark import get_spark
from lakehouse_assets.settings import Settings

from . import (
    backfill,
    beside,
    cdc_capture,
    cdc_freshness,
    cdc_stream_growth,
    cluster,
    cold_start,
    compaction,
    growth,
    growth_cdc,
    growth_layers,
    ingest,
    kafka,
    maintenance,
    merge_modes,
    one_row_update,
    pruning,
    run_cost,
    sensor_tick,
    serve,
    sql_reader,
    stream_capacity,
    stream_cold,
    stream_history,
    time_travel,
)

RESULTS = Path(__file__).with_name("RESULTS.md")
MARK = "<!-- bench:{} -->"  # starts each benchmark's section, so a partial run can replace its own
# Sizes at scale 1: large enough that throughput, not fixed costs, is measured.
INGEST_EVENTS = 5_000_000  # JSON lines through bronze_events, plain Spark and pyarrow
GROWTH_ROWS, GROWTH_DAY = 50_000_000, 500_000  # a bronze table this large, one more day this large
MERGE_ROWS, MERGE_CHANGES = 10_000_000, 1_000_000
SQL_ROWS = 10_000_000
CDC_KEYS, CDC_VERSIONS, CDC_DAY = 1_000_000, 20, 100_000  # CDC silver: 20M versions held, a day's changes
SENSOR_FILES = 100_000  # landed files in the zone a sensor's tick must not pay for


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = ", ".join(f"{p} {version(p)}" for p in beside.PACKAGES)
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {platform.python_implementation()} {platform.python_version()}; {versions}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.run")
    parser.add_argument("--scale", type=float, default=float(os.environ.get("SCALE", "1")))
    parser.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    args = parser.parse_args(argv)
    scale = args.scale
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    sections: list[str] = []
    timings: dict[str, float] = {}
    total_started = time.perf_counter()

    # A process of a benchmark may still be leaving files as the home is removed: the figures are kept regardless.
    with tempfile.TemporaryDirectory(prefix="lakehouse-bench-", ignore_cleanup_errors=True) as home:
        settings = Settings.from_env(home=Path(home), catalog_uri="", warehouse="", landing="", namespace="bench")
        catalog_for(settings).create_namespace_if_not_exists("bench")
        spark = get_spark(settings)
        catalog = settings.catalog_name
        outcomes: dict[str, dict | None] = {}

        benchmarks = [
            ("merge", merge_modes, lambda: merge_modes.run(spark, catalog, "bench", rows=int(MERGE_ROWS * scale),
                                                           changes=int(MERGE_CHANGES * scale), repeats=1)),
            ("ingest", ingest, lambda: ingest.run(spark, settings, events=int(INGEST_EVENTS * scale), days=3)),
            ("growth", growth, lambda: growth.run(spark, settings, rows=int(GROWTH_ROWS * scale),
                                                  events_per_day=int(GROWTH_DAY * scale))),
            ("sensor", sensor_tick, lambda: sensor_tick.run(settings, files=int(SENSOR_FILES * scale))),
            ("growth_layers", growth_layers, lambda: growth_layers.run(
                spark, settings, events_per_day=int(200_000 * scale), prefill_per_day=int(20_000 * scale))),
            ("growth_cdc", growth_cdc, lambda: growth_cdc.run(spark, settings, keys=int(CDC_KEYS * scale),
                                                              versions=CDC_VERSIONS, changes=int(CDC_DAY * scale))),
            ("stream_history", stream_history, lambda: stream_history.run(spark, settings,
                                                                          history=int(5_000 * scale))),
            # A CDC stream's passes, pass after pass, with its own maintenance and without.
            ("cdc_stream_growth", cdc_stream_growth, lambda: cdc_stream_growth.run(
                spark, settings, changes_per_take=max(100, int(500 * scale)))),
            ("sql", sql_reader, lambda: sql_reader.run(spark, settings, "bench_sql", rows=int(SQL_ROWS * scale))),
            # Its own endpoint process: 8 dashboard clients at once for 2 minutes.
            ("serve", serve, lambda: serve.run(spark, settings, events=int(5_000_000 * scale))),
            ("one_row_update", one_row_update,
             lambda: one_row_update.run(spark, catalog, "bench", settings.home, rows=int(500_000 * scale))),
            ("pruning", pruning, lambda: pruning.run(spark, settings, "bench", days=30,
                                                     rows_per_day=int(20_000 * scale))),
            ("compaction", compaction, lambda: compaction.run(spark, settings, "bench", commits=100,
                                                              rows_per_commit=max(100, int(1_000 * scale)))),
            ("maintenance", maintenance, lambda: maintenance.run(spark, settings, rows=int(200_000 * scale),
                                                                  changes=int(2_000 * scale), rounds=50)),
            ("time_travel", time_travel, lambda: time_travel.run(spark, catalog, "bench", rows=int(500_000 * scale))),
            ("backfill", backfill, lambda: backfill.run(spark, settings, days=10,
                                                        events_per_day=max(200, int(2_000 * scale)))),
            ("cdc_capture", cdc_capture, lambda: cdc_capture.run(spark, settings, changes=max(100_000, int(1_000_000 * scale)))),
            # Processes of its own: a PostgreSQL under a steady write load, the capture and the Dagster daemon.
            ("cdc_freshness", cdc_freshness,
             lambda: cdc_freshness.run(rates=tuple(int(r * max(1.0, scale)) for r in cdc_freshness.RATES))),
            # One small day in this session, PySpark's DataFrame debugging on and off.
            ("run_cost", run_cost, lambda: run_cost.run(spark, settings, changes=max(200, int(2_000 * scale)),
                                                        events=max(500, int(2_000 * scale)))),
            # Runs in fresh processes, with the JVM's class-data archive and without, and with G1.
            ("cold_start", cold_start, lambda: cold_start.run(events=max(500, int(2_000 * scale)),
                                                              changes=max(5_000, int(50_000 * scale)))),
            # Child processes of their own: local[2], then a two-worker standalone cluster.
            ("cluster", cluster, lambda: cluster.run(rows=int(MERGE_ROWS * scale), changes=int(MERGE_CHANGES * scale))),
            # Its own stream process: events land at 1,000 to 50,000/s (times the scale), a minute at each rate.
            ("stream_capacity", stream_capacity,
             lambda: stream_capacity.run(rates=tuple(int(r * max(1.0, scale)) for r in stream_capacity.RATES))),
            # A local broker: its own stream process at 1,000 to 20,000 events/s (times the scale), then plain Structured
            # Streaming to Parquet, a process of its own, on another topic at the same rates.
            ("kafka", kafka, lambda: kafka.run(rates=tuple(int(r * max(1.0, scale)) for r in kafka.RATES))),
            # Its own stream process, started on a fresh lakehouse as files begin to land.
            ("stream_cold", stream_cold, lambda: stream_cold.run(rate=int(stream_cold.RATE * max(1.0, scale)))),
        ]
        unknown = only - {name for name, _, _ in benchmarks}
        if unknown:
            parser.error(f"no benchmark named {', '.join(sorted(unknown))}; "
                         f"the benchmarks: {', '.join(name for name, _, _ in benchmarks)}")
        for name, module, action in benchmarks:
            if only and name not in only:
                continue
            started = time.perf_counter()
            try:
                outcomes[name] = action()
                sections.append(f"{MARK.format(name)}\n{module.markdown(outcomes[name])}")
                print(json.dumps({name: outcomes[name]}, indent=2, default=str), flush=True)
            except Exception as error:  # one failing benchmark must not hide the others' figures
                traceback.print_exc()
                outcomes[name] = None
                sections.append(f"{MARK.format(name)}\n### {name}\n\nFailed in this run: "
                                f"`{type(error).__name__}: {error}`.\n")
            timings[name] = time.perf_counter() - started
            print(f"--- {name}: {timings[name]:.1f} s", flush=True)

    total = time.perf_counter() - total_started
    stamp = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, scale {scale:g}, on {machine()}"
    if only and RESULTS.exists():
        # Some benchmarks only: their sections replace (or join) those of the last full run, each beside its
        # figures from before when those were measured on other versions (benchmarks/beside.py).
        text = RESULTS.read_text()
        for section in sections:
            text = beside.replace(text, section, f"{stamp}, {total:.0f} s")
        RESULTS.write_text(provenance(text))
        print(f"updated: {RESULTS} in {total:.0f} s")
        return 0
    RESULTS.write_text("\n".join([
        "# Benchmark results",
        "",
        f"Run {stamp}.",
        "Produced by `make bench`; the figures below are measured in that one run, in one Spark session "
        f"(`local[*]`), but for the sections named on the next line; the whole run took {total / 60:.1f} min "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in timings.items())}).",
        f"{REMEASURED} none.",
        "",
        *sections,
    ]))
    print(f"written: {RESULTS} in {total:.0f} s")
    return 0


REMEASURED = "Sections re-measured alone since that run (`make bench ONLY=...`), each from the run named at its end:"


def provenance(text: str) -> str:
    """The header's line naming the sections whose figures come from a later run of their own, not the full run."""
    alone = []
    for section in text.split("<!-- bench:")[1:]:
        name, _, body = section.partition(" -->")
        when = body.rpartition("(Re-measured alone: ")[2].split(",", 1)[0] if "(Re-measured alone: " in body else None
        if when:
            alone.append(f"{name} ({when})")
    line = f"{REMEASURED} {', '.join(alone) if alone else 'none'}."
    lines = text.split("\n")
    at = next((i for i, ln in enumerate(lines) if ln.startswith(REMEASURED)), None)
    if at is None:
        at = next(i for i, ln in enumerate(lines) if ln.startswith("Produced by `make bench`")) + 1
        lines.insert(at, line)
    else:
        lines[at] = line
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
