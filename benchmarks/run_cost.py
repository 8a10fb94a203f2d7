"""A small run's cost in a warm process: one landing day through the shop's CDC (bronze, then silver's MERGE and
history) and events (bronze -> silver -> gold_daily_activity), with PySpark's DataFrame debugging on (PySpark
4's default) and off (the lakehouse's setting).

With it on, every column function PySpark's API is asked for records its Python call site for error messages: a
walk of the Python stack and five JVM round trips. The pipeline builds thousands of column expressions per run
(each CDC field's decoding, each declared column's cast, each check), so on a small day that bookkeeping, not the
data, is much of the run. PySpark reads the setting once per process (into
`pyspark.errors.utils._enable_debugging_cache`); the benchmark sets that value to alternate both settings within
one Spark session, each repetition into namespaces of its own, which goes first changing every repetition.
Beside each time: the JVM round trips the run's Python made (py4j commands sent).
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyspark.errors.utils as pyspark_errors
from py4j.clientserver import ClientServerConnection

from examples.shop.cdc_generator import generate_cdc
from examples.shop.events_generator import generate_day
from lakehouse_assets.settings import Settings

from .common import lakehouse, materialize_partition, shop_assets

DAY = dt.date(2025, 1, 1)
CDC_BRONZE = shop_assets("bronze_cdc_customers", "bronze_cdc_orders", "bronze_cdc_order_items")
CDC_SILVER = shop_assets("silver_customers", "silver_orders", "silver_order_items")
EVENTS = shop_assets("bronze_events", "silver_events", "gold_daily_activity")


@contextmanager
def _round_trips() -> Iterator[list[int]]:
    """Counts the commands this process's Python sends to the JVM while the block runs."""
    sent = [0]
    original = ClientServerConnection.send_command

    def counted(self, command, *args, **kwargs):
        sent[0] += 1
        return original(self, command, *args, **kwargs)

    ClientServerConnection.send_command = counted  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        ClientServerConnection.send_command = original  # type: ignore[method-assign]


def _timed_run(action: Callable[[], bool]) -> tuple[float, int]:
    with _round_trips() as sent:
        started = time.perf_counter()
        if not action():
            raise RuntimeError("a run failed")
        seconds = time.perf_counter() - started
    return seconds, sent[0]


PATHS = {"cdc_bronze": CDC_BRONZE, "cdc_silver": CDC_SILVER, "events": EVENTS}
DEBUGGING = {"on": True, "off": False}  # PySpark's DataFrame debugging, as the results name it


def _measure(settings: Settings, landing, repeats: int) -> tuple[dict, dict]:
    """Per setting and path, each repetition's seconds and JVM round trips."""
    day = DAY.isoformat()
    times: dict[str, dict[str, list[float]]] = {on: {p: [] for p in PATHS} for on in DEBUGGING}
    trips: dict[str, dict[str, list[int]]] = {on: {p: [] for p in PATHS} for on in DEBUGGING}
    # A first run of each path, not counted: the JVM's JIT and Spark's code generation warm up on it.
    warm = lakehouse(settings, "bench_run_cost_warm", landing)
    for assets in PATHS.values():
        materialize_partition(assets, warm, day)
    for repeat in range(repeats):
        for on in (("on", "off") if repeat % 2 == 0 else ("off", "on")):
            pyspark_errors._enable_debugging_cache = DEBUGGING[on]
            resource = lakehouse(settings, f"bench_run_cost_{on}_{repeat}", landing)
            for path, assets in PATHS.items():
                seconds, sent = _timed_run(lambda a=assets, r=resource: materialize_partition(a, r, day).success)
                times[on][path].append(seconds)
                trips[on][path].append(sent)
    return times, trips


def run(spark, settings: Settings, changes: int, events: int, repeats: int = 3) -> dict:
    landing = settings.home / "run_cost_landing"
    generate_cdc(landing, [DAY], changes_per_day=changes, malformed_rate=0.02, late_share=0.05, duplicate_rate=0.05)
    generate_day(landing, DAY, events_per_day=events, files_per_day=2)
    was = pyspark_errors._enable_debugging_cache
    try:
        times, trips = _measure(settings, landing, repeats)
    finally:
        pyspark_errors._enable_debugging_cache = was
    counts = {on: spark.table(f"{settings.catalog_name}.bench_run_cost_{on}_0.silver_orders").count() for on in DEBUGGING}
    if counts["on"] != counts["off"] or not counts["on"]:
        raise RuntimeError(f"the two settings disagree: silver_orders rows {counts}")
    median = {on: {p: statistics.median(v) for p, v in parts.items()} for on, parts in times.items()}
    median_trips = {on: {p: int(statistics.median(v)) for p, v in parts.items()} for on, parts in trips.items()}
    return {"params": {"changes": changes, "events": events, "repeats": repeats},
            "seconds": median, "round_trips": median_trips, "all": times,
            "ratios": {p: median["off"][p] / median["on"][p] for p in PATHS}}


def markdown(results: dict) -> str:
    p, s, t, r = results["params"], results["seconds"], results["round_trips"], results["ratios"]
    names = {
        "cdc_bronze": f"CDC bronze: 3 tables, {p['changes']:,} changes",
        "cdc_silver": "CDC silver: MERGE and history of the 3 tables",
        "events": f"events: bronze -> silver -> gold_daily_activity, {p['events']:,} events",
    }
    rows = [f"| {names[k]} | {s['on'][k]:.1f} ({t['on'][k]:,}) | {s['off'][k]:.1f} ({t['off'][k]:,}) "
            f"| {r[k]:.2f}x |" for k in names]
    return "\n".join([
        f"### Run cost: one small day in a warm process, PySpark's DataFrame debugging on and off "
        f"({p['repeats']} runs each)",
        "",
        "| the run | debugging on (PySpark's default), s (JVM round trips) | off (the lakehouse's setting), s "
        "(round trips) | off / on |",
        "|---|---|---|---|",
        *rows,
        "",
        "One Spark session, warmed by a first run of each path; each repetition writes namespaces of its own, the "
        "settings alternating which goes first; medians. With debugging on, each column function records its "
        "Python call site (a stack walk and five JVM round trips), so a run that builds many column expressions "
        "(CDC's field decoding above all) spends more on that than on its data. The lakehouse turns it off "
        "(`spark.python.sql.dataFrameDebugging.enabled=false`); an error then names the failed expression "
        "without its Python line.",
        "",
    ])
