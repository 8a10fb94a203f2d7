"""Run the benchmarks side by side in one Spark session and write benchmarks/RESULTS.md.

    python -m benchmarks.run [--scale N]

SCALE multiplies every data size (1 = the small default that runs in minutes on
two cores). The figures are ratios or pairs measured in the same run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import tempfile
from importlib.metadata import version
from pathlib import Path

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.runtime.spark import get_spark
from lakehouse_assets.settings import Settings

from . import merge_modes

RESULTS = Path(__file__).with_name("RESULTS.md")


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = ", ".join(f"{p} {version(p)}" for p in ("pyspark", "pyiceberg", "dagster"))
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {platform.python_implementation()} {platform.python_version()}; {versions}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.run")
    parser.add_argument("--scale", type=float, default=float(os.environ.get("SCALE", "1")))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="lakehouse-bench-") as home:
        settings = Settings.from_env(home=Path(home), catalog_uri="", warehouse="", landing="", namespace="bench")
        catalog_for(settings).create_namespace_if_not_exists("bench")
        spark = get_spark(settings)
        merge = merge_modes.run(spark, settings.catalog_name, "bench",
                                rows=int(200_000 * args.scale), changes=int(20_000 * args.scale))
        print(json.dumps(merge, indent=2))

    RESULTS.write_text("\n".join([
        "# Benchmark results",
        "",
        f"Run {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, scale {args.scale:g}, on {machine()}.",
        "Produced by `make bench`; every figure below is measured in that one run.",
        "",
        merge_modes.markdown(merge),
    ]))
    print(f"written: {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
