"""A run in a fresh process, as a deploy, the daemon's run launcher and `lakehouse stream` start one: with
the JVM's class-data archive (runtime/jvm_archive.py) and without it.

Each repetition is a new lakehouse home and a new process: `dagster asset materialize` of the shop's events
(bronze -> silver -> gold daily activity) for one small landing day, the whole command timed, and beside it
a process that only starts its Spark session and runs one query. The two settings alternate (which goes first
changes every repetition), so the machine's drift falls on both; figures are medians.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from examples.shop.events_generator import generate_day
from lakehouse_assets.runtime import jvm_archive

from .common import SHOP_FILE

DAY = dt.date(2025, 1, 1)
SELECTION = "bronze_events,silver_events,gold_daily_activity"
SESSION_ONLY = ("from lakehouse_assets.runtime.resource import LakehouseResource; "
                "assert LakehouseResource().spark.range(3).count() == 3")


def _env(home: str, archive: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")}
    env.update(LAKEHOUSE_HOME=home, LAKEHOUSE_PROJECT=str(SHOP_FILE), LAKEHOUSE_JVM_ARCHIVE="1" if archive else "0",
               LAKEHOUSE_START_DATE=DAY.isoformat(), DAGSTER_HOME=home)
    return env


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} failed:\n{result.stderr[-3000:]}")
    return seconds


def run(events: int, repeats: int = 3) -> dict:
    if jvm_archive.build() is None:
        raise RuntimeError("no class-data archive could be built on this machine")
    bin_dir = Path(sys.executable).parent
    times: dict[str, dict[str, list[float]]] = {k: {"run": [], "session": []} for k in ("archive", "none")}
    for repeat in range(repeats):
        order = (True, False) if repeat % 2 == 0 else (False, True)
        for archive in order:
            key = "archive" if archive else "none"
            with tempfile.TemporaryDirectory(prefix="lakehouse-cold-") as home:
                env = _env(home, archive)
                times[key]["session"].append(_timed([sys.executable, "-c", SESSION_ONLY], env))
            with tempfile.TemporaryDirectory(prefix="lakehouse-cold-") as home:
                generate_day(Path(home) / "landing", DAY, events_per_day=events, files_per_day=2)
                env = _env(home, archive)
                times[key]["run"].append(_timed(
                    [str(bin_dir / "dagster"), "asset", "materialize", "-m", "lakehouse_assets.definitions",
                     "--select", SELECTION, "--partition", DAY.isoformat()], env))
    medians = {k: {part: statistics.median(v) for part, v in parts.items()} for k, parts in times.items()}
    return {"params": {"events": events, "repeats": repeats, "selection": SELECTION},
            "seconds": medians, "all": times,
            "ratios": {part: medians["archive"][part] / medians["none"][part] for part in ("run", "session")}}


def markdown(results: dict) -> str:
    p, s, r = results["params"], results["seconds"], results["ratios"]
    return "\n".join([
        f"### Cold start: a run in a fresh process, with the JVM's class-data archive and without "
        f"({p['events']:,} events, {p['repeats']} runs each)",
        "",
        "| the process | without the archive, s | with it, s | with / without |",
        "|---|---|---|---|",
        f"| `dagster asset materialize` of {p['selection'].replace(',', ', ')}, one day, fresh lakehouse "
        f"| {s['none']['run']:.1f} | {s['archive']['run']:.1f} | {r['run']:.2f}x |",
        f"| Spark session started and one query | {s['none']['session']:.1f} | {s['archive']['session']:.1f} "
        f"| {r['session']:.2f}x |",
        "",
        "Every run is a new process on a new lakehouse home (tables created, nothing cached), the settings "
        "alternating which goes first; medians. The archive holds the classes a lakehouse JVM loads early "
        "(Spark, Scala, Iceberg, Parquet), parsed and verified once by `make setup`; what it does not save is "
        "the JIT's warm-up and Spark's code generation, which every new JVM still pays: most of a small run's "
        f"time in a fresh process ({s['archive']['run']:.1f} s here, for {p['events']:,} events) is that fixed "
        "cost, not its data.",
        "",
    ])
