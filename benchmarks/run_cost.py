"""A small run's cost in a warm process: one landing day through the shop's CDC (bronze, then silver's MERGE and
history) and events (bronze -> silver -> gold_daily_activity), three ways: with PySpark's DataFrame debugging on
(PySpark 4's default) and each source's parse built for every run; debugging off (the lakehouse's setting), the
parse built for every run; and debugging off with the parse replayed (the lakehouse as it runs).

With debugging on, every column function PySpark's API is asked for records its Python call site for error
messages: a walk of the Python stack and five JVM round trips. The pipeline builds thousands of column
expressions per run (each CDC field's decoding, each declared column's cast, each check), so on a small day that
bookkeeping, not the data, is much of the run. PySpark reads the setting once per process (into
`pyspark.errors.utils._enable_debugging_cache`); the benchmark sets that value to alternate the settings within
one Spark session, each repetition into namespaces of its own, which goes first changing every repetition.
A source's parse is otherwise built once per table schema in a process and replayed on each later take's lines
(`runtime/recipe.py`); the benchmark builds it again for every run in the first two settings (once a run: bronze's
write and the quarantine's share it).
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

import lakehouse_assets.bronze.ingest as ingest
import lakehouse_assets.runtime.recipe as recipe
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
# Per setting: PySpark's DataFrame debugging, and how a source's parse is made: built for each run's lines, its
# recipe replayed on them, or its analysed plan put over them (the lakehouse).
SETTINGS = {"on": (True, "built"), "off": (False, "built"), "replayed": (False, "replayed"),
            "planned": (False, "planned")}


_BUILT: dict[tuple, tuple] = {}  # (key, the lines' id) -> (the lines, their parse), while a setting is in force


def _built_every_run(key, build, source):
    """The parse built for each run's lines, once: bronze's write and the quarantine's read the same plan, as a
    run without recipes would keep it (the lines are held beside it, so that their id names them)."""
    found = _BUILT.get((key, id(source)))
    if found is None:
        found = _BUILT[(key, id(source))] = (source, build(source))
    return found[1]


@contextmanager
def _setting(name: str) -> Iterator[None]:
    debugging, parse = SETTINGS[name]
    was, substituted = pyspark_errors._enable_debugging_cache, recipe._substituted
    pyspark_errors._enable_debugging_cache = debugging
    if parse == "built":
        ingest.PARSES.apply = _built_every_run  # type: ignore[method-assign]
    elif parse == "replayed":
        recipe._substituted = lambda *_: None  # type: ignore[assignment]
    try:
        yield
    finally:
        _BUILT.clear()
        pyspark_errors._enable_debugging_cache, recipe._substituted = was, substituted
        vars(ingest.PARSES).pop("apply", None)


def _measure(settings: Settings, landing, repeats: int) -> tuple[dict, dict]:
    """Per setting and path, each repetition's seconds and JVM round trips."""
    day = DAY.isoformat()
    times: dict[str, dict[str, list[float]]] = {on: {p: [] for p in PATHS} for on in SETTINGS}
    trips: dict[str, dict[str, list[int]]] = {on: {p: [] for p in PATHS} for on in SETTINGS}
    # A first run of each path, not counted: the JVM's JIT and Spark's code generation warm up on it.
    warm = lakehouse(settings, "bench_run_cost_warm", landing)
    for assets in PATHS.values():
        materialize_partition(assets, warm, day)
    names = list(SETTINGS)
    for repeat in range(repeats):
        for on in names[repeat % len(names):] + names[:repeat % len(names)]:
            resource = lakehouse(settings, f"bench_run_cost_{on}_{repeat}", landing)
            with _setting(on):
                for path, assets in PATHS.items():
                    seconds, sent = _timed_run(lambda a=assets, r=resource: materialize_partition(a, r, day).success)
                    times[on][path].append(seconds)
                    trips[on][path].append(sent)
    return times, trips


def run(spark, settings: Settings, changes: int, events: int, repeats: int = 3) -> dict:
    landing = settings.home / "run_cost_landing"
    generate_cdc(landing, [DAY], changes_per_day=changes, malformed_rate=0.02, late_share=0.05, duplicate_rate=0.05)
    generate_day(landing, DAY, events_per_day=events, files_per_day=2)
    times, trips = _measure(settings, landing, repeats)
    counts = {on: sorted(spark.table(f"{settings.catalog_name}.bench_run_cost_{on}_0.silver_orders").collect(),
                         key=repr) for on in SETTINGS}
    if len({repr(rows) for rows in counts.values()}) != 1 or not counts["on"]:
        raise RuntimeError(f"the settings disagree on silver_orders ({ {k: len(v) for k, v in counts.items()} } rows)")
    median = {on: {p: statistics.median(v) for p, v in parts.items()} for on, parts in times.items()}
    median_trips = {on: {p: int(statistics.median(v)) for p, v in parts.items()} for on, parts in trips.items()}
    return {"params": {"changes": changes, "events": events, "repeats": repeats},
            "seconds": median, "round_trips": median_trips, "all": times,
            "ratios": {p: median["off"][p] / median["on"][p] for p in PATHS},
            "replayed_ratios": {p: median["replayed"][p] / median["off"][p] for p in PATHS},
            "planned_ratios": {p: median["planned"][p] / median["replayed"][p] for p in PATHS}}


def markdown(results: dict) -> str:
    p, s, t = results["params"], results["seconds"], results["round_trips"]
    r, replayed, planned = results["ratios"], results["replayed_ratios"], results["planned_ratios"]
    names = {
        "cdc_bronze": f"CDC bronze: 3 tables, {p['changes']:,} changes",
        "cdc_silver": "CDC silver: MERGE and history of the 3 tables",
        "events": f"events: bronze -> silver -> gold_daily_activity, {p['events']:,} events",
    }
    rows = [f"| {names[k]} | " + " | ".join(f"{s[on][k]:.1f} ({t[on][k]:,})" for on in SETTINGS)
            + f" | {r[k]:.2f}x | {replayed[k]:.2f}x | {planned[k]:.2f}x |" for k in names]
    return "\n".join([
        f"### Run cost: one small day in a warm process, PySpark's DataFrame debugging on and off, each parse "
        f"built, replayed or its plan kept ({p['repeats']} runs each)",
        "",
        "| the run | debugging on (PySpark's default), parse built, s (JVM round trips) | off, parse built, s "
        "(round trips) | off, parse replayed, s (round trips) | off, parse's plan kept (the lakehouse), s "
        "(round trips) | off / on | replayed / built | plan kept / replayed |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "One Spark session, warmed by a first run of each path; each repetition writes namespaces of its own, the "
        "settings taking turns at going first; medians; silver_orders the same rows in every setting. With "
        "debugging on, each column function records its Python call site (a stack walk and five JVM round "
        "trips), so a run that builds many column expressions (CDC's field decoding above all) spends more on "
        "that than on its data. The lakehouse turns it off (`spark.python.sql.dataFrameDebugging.enabled=false`); "
        "an error then names the failed expression without its Python line. A source's parse (a CDC image's "
        "decoding and reasons, an event declaration's typing) is built once per table schema in a process and "
        "replayed on each later take's lines (`runtime/recipe.py`): the same plan, without the thousands of "
        "round trips that build it. Replayed, each of its steps is still a DataFrame Spark analyses when it is "
        "made; with its plan kept, the first replay's analysed plan is put over the next take's lines in the JVM "
        "(`java/src/main/java/lakehouse/PlanInput.java`) and analysed once as a whole. "
        "Silver reads no parse: its columns differ by this machine's noise between repetitions.",
        "",
    ])
