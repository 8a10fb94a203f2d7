"""A run in a fresh process, as a deploy, the daemon's run launcher and `lakehouse stream` start one: with
the JVM's class-data archive (runtime/jvm_archive.py) and without it, and with the JVM's own garbage collector
(G1) instead of the parallel one a run's driver is given (runtime/spark.py).

Each repetition is a new lakehouse home and a new process: `dagster asset materialize` of the shop's events
(bronze -> silver -> gold daily activity) for one small landing day, the whole command timed; the same for a
day of the shop's CDC (bronze and silver of its three tables), as a landing sensor's run takes a CDC backlog;
and beside them a process that only starts its Spark session and runs one query. The settings take turns at
going first, so the machine's drift falls on each; figures are medians.
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

from examples.shop.cdc_generator import generate_cdc
from examples.shop.events_generator import generate_day
from lakehouse_assets.runtime import jvm_archive

from .common import SHOP_FILE

DAY = dt.date(2025, 1, 1)
SELECTION = "bronze_events,silver_events,gold_daily_activity"
CDC_SELECTION = ",".join([*(f"bronze_cdc_{t}" for t in ("customers", "orders", "order_items")),
                          *(f"silver_{t}" for t in ("customers", "orders", "order_items"))])
# Per setting: the class-data archive, and a collector given to every JVM in JDK_JAVA_OPTIONS (taken instead of
# the driver's own).
SETTINGS = {"none": (False, ""), "archive": (True, ""), "g1": (True, "-XX:+UseG1GC")}
SESSION_ONLY = ("from lakehouse_assets.runtime.resource import LakehouseResource; "
                "assert LakehouseResource().spark.range(3).count() == 3")


def _env(home: str, setting: str) -> dict[str, str]:
    archive, java_options = SETTINGS[setting]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_") and k != "JDK_JAVA_OPTIONS"}
    env.update(LAKEHOUSE_HOME=home, LAKEHOUSE_PROJECT=str(SHOP_FILE), LAKEHOUSE_JVM_ARCHIVE="1" if archive else "0",
               LAKEHOUSE_START_DATE=DAY.isoformat(), DAGSTER_HOME=home)
    if java_options:
        env["JDK_JAVA_OPTIONS"] = java_options
    return env


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} failed:\n{result.stderr[-3000:]}")
    return seconds


def _materialize(selection: str, env: dict[str, str]) -> float:
    dagster = Path(sys.executable).parent / "dagster"
    return _timed([str(dagster), "asset", "materialize", "-m", "lakehouse_assets.definitions", "--select", selection,
                   "--partition", DAY.isoformat()], env)


def run(events: int, changes: int = 50_000, repeats: int = 3) -> dict:
    if jvm_archive.build() is None:
        raise RuntimeError("no class-data archive could be built on this machine")
    parts = ("run", "cdc", "session")
    times: dict[str, dict[str, list[float]]] = {k: {part: [] for part in parts} for k in SETTINGS}
    names = list(SETTINGS)
    for repeat in range(repeats):
        for setting in names[repeat % len(names):] + names[:repeat % len(names)]:
            with tempfile.TemporaryDirectory(prefix="lakehouse-cold-") as home:
                times[setting]["session"].append(_timed([sys.executable, "-c", SESSION_ONLY], _env(home, setting)))
            with tempfile.TemporaryDirectory(prefix="lakehouse-cold-") as home:
                generate_day(Path(home) / "landing", DAY, events_per_day=events, files_per_day=2)
                times[setting]["run"].append(_materialize(SELECTION, _env(home, setting)))
            with tempfile.TemporaryDirectory(prefix="lakehouse-cold-") as home:
                generate_cdc(Path(home) / "landing", [DAY], changes_per_day=changes, malformed_rate=0.02,
                             late_share=0.05, duplicate_rate=0.05)
                times[setting]["cdc"].append(_materialize(CDC_SELECTION, _env(home, setting)))
    medians = {k: {part: statistics.median(v) for part, v in by_part.items()} for k, by_part in times.items()}
    return {"params": {"events": events, "changes": changes, "repeats": repeats, "selection": SELECTION},
            "seconds": medians, "all": times,
            "ratios": {part: medians["archive"][part] / medians["none"][part] for part in parts},
            "g1_ratios": {part: medians["archive"][part] / medians["g1"][part] for part in parts}}


def markdown(results: dict) -> str:
    p, s, r, g1 = results["params"], results["seconds"], results["ratios"], results["g1_ratios"]
    rows = {
        "run": f"`dagster asset materialize` of {p['selection'].replace(',', ', ')}, one day, fresh lakehouse",
        "cdc": f"`dagster asset materialize` of the shop's CDC bronze and silver (3 tables), one day of "
               f"{p['changes']:,} changes, fresh lakehouse",
        "session": "Spark session started and one query",
    }
    return "\n".join([
        f"### Cold start: a run in a fresh process, with the JVM's class-data archive and without "
        f"({p['events']:,} events, {p['repeats']} runs each)",
        "",
        "| the process | without the archive, s | with it, s | with / without |",
        "|---|---|---|---|",
        *(f"| {name} | {s['none'][k]:.1f} | {s['archive'][k]:.1f} | {r[k]:.2f}x |" for k, name in rows.items()
          if k != "cdc"),
        "",
        "The driver's garbage collector, both with the archive: the JVM's own choice on these cores (G1, given "
        "here as `JDK_JAVA_OPTIONS=-XX:+UseG1GC`, which the lakehouse leaves the JVM to take) and the parallel "
        "collector a run's driver is given:",
        "",
        "| the process | G1, s | parallel (the lakehouse), s | parallel / G1 |",
        "|---|---|---|---|",
        *(f"| {name} | {s['g1'][k]:.1f} | {s['archive'][k]:.1f} | {g1[k]:.2f}x |" for k, name in rows.items()),
        "",
        "Every run is a new process on a new lakehouse home (tables created, nothing cached), the settings "
        "taking turns at going first; medians. The archive holds the classes a lakehouse JVM loads early "
        "(Spark, Scala, Iceberg, Parquet), parsed and verified once by `make setup`; what it does not save is "
        "the JIT's warm-up and Spark's code generation, which every new JVM still pays: most of a small run's "
        f"time in a fresh process ({s['archive']['run']:.1f} s here, for {p['events']:,} events) is that fixed "
        "cost, not its data. G1 keeps pauses short with work of its own beside the program's, on the same two "
        "cores; the parallel collector stops the program to collect and does nothing meanwhile. The SQL "
        "endpoint, where clients wait on pauses, keeps G1.",
        "",
    ])
