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

from . import backfill, cdc_capture, compaction, freshness, ingest, merge_modes, one_row_update, pruning, time_travel

RESULTS = Path(__file__).with_name("RESULTS.md")
GROWTH_POINTS = (0.25, 0.5)  # of the scale, besides the full-size runs
# Our ingest runs at a few thousand rows/s on 2 cores (see RESULTS.md): 300k lines would take minutes
# per point, so the default keeps it to 60k lines and the whole run within budget.
INGEST_EVENTS = 60_000


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = ", ".join(f"{p} {version(p)}" for p in ("pyspark", "pyiceberg", "dagster"))
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {platform.python_implementation()} {platform.python_version()}; {versions}"


def growth(spark, settings: Settings, scale: float, ingest_full: dict | None, merge_full: dict | None) -> dict:
    """Ingest (ours) and CDC MERGE at smaller sizes, next to the full-size figures already measured."""
    points = {"ingest": [], "merge": []}
    for share in GROWTH_POINTS:
        tag = f"g{int(share * 100)}"
        if ingest_full:
            r = ingest.run(spark, settings, events=int(INGEST_EVENTS * scale * share), tag=tag, baselines=False)
            points["ingest"].append({"rows": r["params"]["lines"], "seconds": r["ours_s"]})
        if merge_full:
            r = merge_modes.run(spark, settings.catalog_name, "bench", rows=int(200_000 * scale * share),
                                changes=int(20_000 * scale * share), repeats=1)
            points["merge"].append({"rows": r["params"]["changes"], "into": r["params"]["rows"],
                                    "cow_s": r["copy-on-write"]["merge_s"], "mor_s": r["merge-on-read"]["merge_s"]})
    if ingest_full:
        points["ingest"].append({"rows": ingest_full["params"]["lines"], "seconds": ingest_full["ours_s"]})
    if merge_full:
        p = merge_full["params"]
        points["merge"].append({"rows": p["changes"], "into": p["rows"], "cow_s": merge_full["copy-on-write"]["merge_s"],
                                "mor_s": merge_full["merge-on-read"]["merge_s"]})
    return points


def growth_markdown(points: dict) -> str:
    lines = ["### Growth: ingest and CDC MERGE at three sizes", "",
             "| what | rows | seconds | rows/s |", "|---|---|---|---|"]
    for p in points["ingest"]:
        lines.append(f"| ingest (ours, `bronze_events`) | {p['rows']:,} | {p['seconds']:.2f} | "
                     f"{p['rows'] / p['seconds']:,.0f} |")
    for p in points["merge"]:
        for mode in ("mor", "cow"):
            name = "merge-on-read" if mode == "mor" else "copy-on-write"
            lines.append(f"| MERGE {name}, changes into {p['into']:,} rows | {p['rows']:,} | {p[f'{mode}_s']:.2f} | "
                         f"{p['rows'] / p[f'{mode}_s']:,.0f} |")
    trend = []
    for name, key in (("ingest", "seconds"), ("MERGE merge-on-read", "mor_s")):
        pts = points["ingest" if name == "ingest" else "merge"]
        if len(pts) >= 2:
            first, last = pts[0]["rows"] / pts[0][key], pts[-1]["rows"] / pts[-1][key]
            trend.append(f"{name} rows/s {'rises' if last > first else 'falls'} from {first:,.0f} to {last:,.0f} "
                         f"as the size grows {pts[-1]['rows'] / pts[0]['rows']:.0f}x")
    lines += ["", "The smaller points are single runs (the full-size MERGE is a median of 3). "
              + "; ".join(trend) + " (a falling rate means cost grows faster than the data).", ""]
    return "\n".join(lines)


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

    with tempfile.TemporaryDirectory(prefix="lakehouse-bench-") as home:
        settings = Settings.from_env(home=Path(home), catalog_uri="", warehouse="", landing="", namespace="bench")
        catalog_for(settings).create_namespace_if_not_exists("bench")
        spark = get_spark(settings)
        catalog = settings.catalog_name
        outcomes: dict[str, dict | None] = {}

        benchmarks = [
            ("merge", merge_modes, lambda: merge_modes.run(spark, catalog, "bench", rows=int(200_000 * scale),
                                                           changes=int(20_000 * scale))),
            ("ingest", ingest, lambda: ingest.run(spark, settings, events=int(INGEST_EVENTS * scale), days=3)),
            ("one_row_update", one_row_update,
             lambda: one_row_update.run(spark, catalog, "bench", settings.home, rows=int(500_000 * scale))),
            ("pruning", pruning, lambda: pruning.run(spark, settings, "bench", days=30,
                                                     rows_per_day=int(20_000 * scale))),
            ("compaction", compaction, lambda: compaction.run(spark, settings, "bench", commits=100,
                                                              rows_per_commit=max(100, int(1_000 * scale)))),
            ("time_travel", time_travel, lambda: time_travel.run(spark, catalog, "bench", rows=int(500_000 * scale))),
            ("backfill", backfill, lambda: backfill.run(spark, settings, days=10,
                                                        events_per_day=max(200, int(2_000 * scale)))),
            ("cdc_capture", cdc_capture, lambda: cdc_capture.run(spark, settings, changes=max(100_000, int(100_000 * scale)))),
            # Its own stream process: events land at 1,000/s (times the scale) for five minutes.
            ("freshness", freshness, lambda: freshness.run(rate=int(1_000 * max(1.0, scale)), duration=300)),
        ]
        for name, module, action in benchmarks:
            if only and name not in only:
                continue
            started = time.perf_counter()
            try:
                outcomes[name] = action()
                sections.append(module.markdown(outcomes[name]))
                print(json.dumps({name: outcomes[name]}, indent=2, default=str), flush=True)
            except Exception as error:  # one failing benchmark must not hide the others' figures
                traceback.print_exc()
                outcomes[name] = None
                sections.append(f"### {name}\n\nFailed in this run: `{type(error).__name__}: {error}`.\n")
            timings[name] = time.perf_counter() - started
            print(f"--- {name}: {timings[name]:.1f} s", flush=True)

        if not only or "growth" in only:
            started = time.perf_counter()
            try:
                sections.append(growth_markdown(growth(spark, settings, scale, outcomes.get("ingest"),
                                                       outcomes.get("merge"))))
            except Exception as error:
                traceback.print_exc()
                sections.append(f"### growth\n\nFailed in this run: `{type(error).__name__}: {error}`.\n")
            timings["growth"] = time.perf_counter() - started
            print(f"--- growth: {timings['growth']:.1f} s", flush=True)

    total = time.perf_counter() - total_started
    RESULTS.write_text("\n".join([
        "# Benchmark results",
        "",
        f"Run {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, scale {scale:g}, on {machine()}.",
        "Produced by `make bench`; every figure below is measured in that one run, in one Spark session "
        f"(`local[*]`); the whole run took {total / 60:.1f} min "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in timings.items())}).",
        "",
        *sections,
    ]))
    print(f"written: {RESULTS} in {total:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
