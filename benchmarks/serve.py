"""The SQL endpoint under a dashboard's load: `lakehouse serve` with 8 clients at once, beside `lakehouse sql`.

A minute-activity table as gold keeps it (30 days x 1,440 minutes x 3 event types, partitioned by day) and a
large events table. `lakehouse serve` runs in a process of its own on the bench lakehouse (local[*], as
deployed on one machine). Eight PyHive clients, each its own connection, run the dashboard's queries in turn
for the duration: with the endpoint's result cache off; with it on, alone; and with it on while `lakehouse
stream` takes events landing today on the same two cores and the dashboards' table takes a commit every few
seconds (each leaves every cached answer stale); every query's latency is kept, p50 and p95 per query, and the
endpoint's log says which answers came from the cache. Beside them, the same queries through
`lakehouse sql` (DuckDB's reader, one process, one after the other), and a full scan of the events table
through the endpoint against the benchmark's own Spark session (plain Spark on the same table).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.serving.duckdb_sql import query as duckdb_query
from lakehouse_assets.settings import Settings
from lakehouse_services.process import free_port

from .stream_capacity import SHOP, land_file

MINUTES = "bench_minute_activity"
EVENTS = "bench_serve_events"
QUERIES = {
    "last hour by minute": f"SELECT minute, sum(events) AS events FROM {MINUTES} WHERE minute >= "
                           f"(SELECT max(minute) FROM {MINUTES}) - INTERVAL 60 MINUTES GROUP BY minute ORDER BY minute",
    "today by event type": f"SELECT event_type, sum(events) AS events, max(users) AS peak_users FROM {MINUTES} "
                           f"WHERE minute >= date_trunc('day', (SELECT max(minute) FROM {MINUTES})) "
                           "GROUP BY event_type ORDER BY event_type",
    "30 days by day": f"SELECT CAST(minute AS DATE) AS day, sum(events) AS events FROM {MINUTES} "
                      "GROUP BY CAST(minute AS DATE) ORDER BY day",
}
STREAM_RATE = 1_000  # events/s the stream takes while the dashboards run
COMMIT_EVERY = 5.0  # s between two commits to the dashboards' table while the stream runs
CACHE_ROWS = 10_000  # the endpoint's result cache (its default)
SCAN = f"SELECT count(*) AS n, sum(value) AS total, count(DISTINCT user_id) AS users FROM {EVENTS}"


def _prepare(spark: SparkSession, catalog: str, namespace: str, events: int) -> None:
    minutes = f"{catalog}.{namespace}.{MINUTES}"
    spark.sql(f"DROP TABLE IF EXISTS {minutes}")
    spark.sql(f"CREATE TABLE {minutes} (minute TIMESTAMP, event_type STRING, events BIGINT, users BIGINT) "
              "USING iceberg PARTITIONED BY (days(minute))")
    (spark.range(30 * 1440 * 3)
     .select((F.lit("2025-01-01 00:00:00").cast("timestamp") + F.make_interval(
         mins=(F.col("id") / 3).cast("int"))).alias("minute"),
             F.element_at(F.array(F.lit("page_view"), F.lit("add_to_cart"), F.lit("purchase")),
                          (F.col("id") % 3 + 1).cast("int")).alias("event_type"),
             (F.col("id") % 97 + 1).alias("events"), (F.col("id") % 41 + 1).alias("users"))
     .writeTo(minutes).append())
    table = f"{catalog}.{namespace}.{EVENTS}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    (spark.range(events).select(F.col("id").alias("event_id"), (F.col("id") % 50_000).alias("user_id"),
                                (F.col("id") % 1000 / 10).alias("value"))
     .writeTo(table).using("iceberg").create())


def _start(settings: Settings, port: int, log: Path, cache_rows: int) -> subprocess.Popen:
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_NAMESPACE": settings.namespace,
           "LAKEHOUSE_SERVE_PORT": str(port), "LAKEHOUSE_SPARK_MASTER": settings.spark_master,
           "LAKEHOUSE_DRIVER_MEMORY": "2g", "LAKEHOUSE_SERVE_RESULT_CACHE_ROWS": str(cache_rows)}
    out = open(log, "w")
    server = subprocess.Popen([str(Path(sys.executable).with_name("lakehouse")), "serve"], env=env, stdout=out,
                              stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while "SQL endpoint (read-only) on" not in log.read_text():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the endpoint did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    return server


def _cache_said(log: Path) -> dict[str, list[int]]:
    """The endpoint's time on each statement its result cache answered (hit, shared: waited for another client's
    computation) and computed (miss) so far, in ms, as its log says."""
    said = re.findall(r"result cache (\w+) \((\d+) ms\): ", log.read_text())
    return {how: [int(ms) for kind, ms in said if kind == how] for how in ("hit", "shared", "miss")}


def _since(before: dict[str, list[int]], now: dict[str, list[int]]) -> dict[str, list[int]]:
    return {how: now[how][len(before[how]):] for how in now}


@contextlib.contextmanager
def _commits(settings: Settings, every: float = COMMIT_EVERY):
    """Gold's commits as the stream makes them: the minute after the table's last one appended every `every` s
    (a snapshot of its own each time), while the block runs; yields the list of commit times."""
    table = catalog_for(settings).load_table((settings.namespace, MINUTES))
    last = max(table.scan(selected_fields=("minute",)).to_arrow()["minute"].to_pylist())
    stop, done = threading.Event(), []

    def commit() -> None:
        minute = last
        while not stop.wait(every):
            minute += dt.timedelta(minutes=1)
            rows = [{"minute": minute, "event_type": kind, "events": 7, "users": 3}
                    for kind in ("page_view", "add_to_cart", "purchase")]
            table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
            done.append(time.monotonic())

    thread = threading.Thread(target=commit)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join()


def _client_loop(port: int, namespace: str, until: float, latencies: dict[str, list[float]],
                 lock: threading.Lock, errors: list[str]) -> None:
    from pyhive import hive

    cursor = hive.connect(host="127.0.0.1", port=port, database=namespace).cursor()
    names = list(QUERIES)
    n = 0
    while time.monotonic() < until:
        name = names[n % len(names)]
        n += 1
        started = time.perf_counter()
        try:
            cursor.execute(QUERIES[name])
            cursor.fetchall()
        except Exception as error:  # noqa: BLE001 - counted and reported
            errors.append(f"{name}: {str(error)[:200]}")
            continue
        with lock:
            latencies[name].append(time.perf_counter() - started)


def _plain(rows: list[tuple]) -> list[tuple]:
    """Rows as text both readers agree on: times without their zone and separator, numbers as numbers."""
    def one(v):
        if isinstance(v, (dt.datetime, dt.date)):
            v = v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v
            return v.isoformat(sep=" ") if isinstance(v, dt.datetime) else v.isoformat()
        if isinstance(v, (int, float, Decimal)):
            return float(v)
        return str(v).replace("T", " ")
    return [tuple(one(v) for v in row) for row in rows]


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _dashboards(port: int, namespace: str, clients: int, seconds: float) -> tuple[dict[str, list[float]], list[str]]:
    """`clients` dashboard clients at once for `seconds`: each query's latencies, and the errors."""
    latencies: dict[str, list[float]] = {name: [] for name in QUERIES}
    lock, errors = threading.Lock(), []
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=_client_loop, args=(port, namespace, until, latencies, lock, errors))
               for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors


@contextlib.contextmanager
def _stream_beside(home: Path, rate: int = STREAM_RATE, interval: float = 2.0, warm: float = 30.0):
    """`lakehouse stream` on a lake of its own while a producer lands a file today every `interval` s at `rate`
    events/s, as the shop's stream runs beside its dashboards; yields once it has run for `warm` s."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_HOME"))},
           "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PROJECT": str(SHOP),
           "LAKEHOUSE_PII_KEY": "bench-key-for-pseudonyms-in-benchmarks"}
    folder = home / "landing" / "events" / f"date={dt.datetime.now(dt.timezone.utc).date().isoformat()}"
    folder.mkdir(parents=True)
    stop = threading.Event()

    def produce() -> None:
        rng, n, landed = random.Random(17), 0, 0
        while not stop.wait(interval):
            land_file(folder, n, int(rate * interval), landed, rng)
            n, landed = n + 1, landed + int(rate * interval)

    with open(home / "stream.log", "w") as log:
        stream = subprocess.Popen([sys.executable, "-m", "lakehouse_assets.cli", "stream", "--no-dagster",
                                   "--trigger-seconds", "1"], env=env, stdout=log, stderr=subprocess.STDOUT)
    producer = threading.Thread(target=produce)
    producer.start()
    try:
        time.sleep(warm)
        if stream.poll() is not None:
            raise RuntimeError(f"lakehouse stream exited: see {home / 'stream.log'}")
        yield
    finally:
        stop.set()
        producer.join()
        stream.terminate()
        stream.wait(timeout=120)


def _phase(latencies: dict[str, list[float]], seconds: float, said: dict[str, list[int]]) -> dict:
    return {"queries": {name: {"n": len(v), "p50": _p(v, 0.5), "p95": _p(v, 0.95)} for name, v in latencies.items()},
            "per_s": sum(len(v) for v in latencies.values()) / seconds,
            "cache": {how: {"n": len(ms), "p50_ms": _p(ms, 0.5), "p95_ms": _p(ms, 0.95)} for how, ms in said.items()}}


def _compare(cursor, settings: Settings) -> None:
    """Each query once, its answer compared with lakehouse sql's (the endpoint's warm-up)."""
    for name, sql in QUERIES.items():
        cursor.execute(sql)
        answer = [tuple(r) for r in cursor.fetchall()]
        expected = [tuple(r.values()) for r in duckdb_query(settings, sql).to_pylist()]
        if _plain(answer) != _plain(expected):
            raise AssertionError(f"{name}: the endpoint and lakehouse sql differ: {answer[:2]} vs {expected[:2]}")


def run(spark: SparkSession, settings: Settings, events: int, clients: int = 8, seconds: int = 90) -> dict:
    from pyhive import hive

    _prepare(spark, settings.catalog_name, settings.namespace, events)
    phases, errors = {}, []
    # The endpoint without its result cache: every query computed, the dashboards alone.
    port, log = free_port(), settings.home / "bench-serve-uncached.log"
    server = _start(settings, port, log, cache_rows=0)
    try:
        cursor = hive.connect(host="127.0.0.1", port=port, database=settings.namespace).cursor()
        _compare(cursor, settings)
        latencies, failed = _dashboards(port, settings.namespace, clients, seconds)
        phases["uncached"], errors = _phase(latencies, seconds, _cache_said(log)), errors + failed
        scan_endpoint = []  # the full scan computed each time, as an analyst's ad-hoc query is
        for _ in range(3):
            started = time.perf_counter()
            cursor.execute(SCAN)
            cursor.fetchall()
            scan_endpoint.append(time.perf_counter() - started)
    finally:
        server.terminate()
        server.wait(timeout=60)
    # As deployed: the cache on; the dashboards alone, then while the stream runs and the table takes commits.
    port, log = free_port(), settings.home / "bench-serve.log"
    server = _start(settings, port, log, cache_rows=CACHE_ROWS)
    try:
        cursor = hive.connect(host="127.0.0.1", port=port, database=settings.namespace).cursor()
        _compare(cursor, settings)
        before = _cache_said(log)
        latencies, failed = _dashboards(port, settings.namespace, clients, seconds)
        said = _cache_said(log)
        phases["alone"] = _phase(latencies, seconds, _since(before, said))
        errors += failed
        with tempfile.TemporaryDirectory(prefix="lakehouse-serve-stream-") as stream_home, \
                _stream_beside(Path(stream_home)), _commits(settings) as commits:
            before = _cache_said(log)
            latencies, failed = _dashboards(port, settings.namespace, clients, seconds)
            said = _cache_said(log)
        phases["with_stream"] = _phase(latencies, seconds, _since(before, said))
        phases["with_stream"]["commits"] = len(commits)
        errors += failed
        _compare(cursor, settings)  # after the commits: still the answers lakehouse sql gives
        duck: dict[str, list[float]] = {name: [] for name in QUERIES}
        for _ in range(5):
            for name, sql in QUERIES.items():
                started = time.perf_counter()
                duckdb_query(settings, sql)
                duck[name].append(time.perf_counter() - started)
        scan_spark = []
        for _ in range(3):
            started = time.perf_counter()
            spark.sql(SCAN.replace(EVENTS, f"{settings.catalog_name}.{settings.namespace}.{EVENTS}")).collect()
            scan_spark.append(time.perf_counter() - started)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return {
        "params": {"clients": clients, "seconds": seconds, "events": events, "minute_rows": 30 * 1440 * 3,
                   "commit_every": COMMIT_EVERY, "cache_rows": CACHE_ROWS},
        **phases,
        "stream_rate": STREAM_RATE,
        "lakehouse_sql": {name: {"p50": _p(v, 0.5), "p95": _p(v, 0.95)} for name, v in duck.items()},
        "errors": errors[:5], "error_count": len(errors),
        "scan": {"endpoint_s": statistics.median(scan_endpoint), "spark_s": statistics.median(scan_spark),
                 "rows_per_s_endpoint": events / statistics.median(scan_endpoint),
                 "rows_per_s_spark": events / statistics.median(scan_spark)},
    }


def markdown(results: dict) -> str:
    p, d, s = results["params"], results["lakehouse_sql"], results["scan"]
    u, a, w = results["uncached"]["queries"], results["alone"]["queries"], results["with_stream"]["queries"]

    def cells(phase: dict, name: str) -> str:
        return f"{phase[name]['n']:,} | {phase[name]['p50'] * 1000:.0f} | {phase[name]['p95'] * 1000:.0f}"

    def cached(phase: dict) -> str:
        c = phase["cache"]
        hit, shared, miss = c["hit"], c["shared"], c["miss"]
        text = (f"{hit['n'] + shared['n']:,} of {hit['n'] + shared['n'] + miss['n']:,} answered from the cache, "
                f"{miss['n']:,} computed")
        if miss["n"]:
            text += ("; in the endpoint (from the statement's arrival, its analysis included), a computed answer "
                     f"took p50 {miss['p50_ms']:.0f} ms, p95 {miss['p95_ms']:.0f} ms, one from the cache p50 "
                     f"{hit['p50_ms']:.0f} ms, p95 {hit['p95_ms']:.0f} ms")
        if shared["n"]:
            text += (f", and {shared['n']:,} clients asking while another computed the same answer waited for it "
                     f"(p50 {shared['p50_ms']:.0f} ms, p95 {shared['p95_ms']:.0f} ms)")
        return text

    rows = [f"| {name} | {cells(results['uncached']['queries'], name)} | {cells(a, name)} | {cells(w, name)} "
            f"| {d[name]['p50'] * 1000:.0f} | {d[name]['p95'] * 1000:.0f} |" for name in u]
    ws = results["with_stream"]
    return "\n".join([
        f"### SQL endpoint: {p['clients']} dashboard clients at once for {p['seconds']} s (`lakehouse serve`), "
        "without and with its result cache, alone and with the stream running",
        "",
        f"A minute-activity table of {p['minute_rows']:,} rows (30 days, partitioned by day); each client its own "
        f"connection, the dashboard's queries in turn without pause, {p['seconds']} s each: the endpoint with its "
        "result cache off; then with it on (as deployed, results up to "
        f"{p['cache_rows']:,} rows), alone; then while `lakehouse stream` (its own process, on a lake of its own) "
        f"takes {results['stream_rate']:,} events/s landing today, warm for 30 s first, and the dashboards' table "
        f"takes a commit every {p['commit_every']:.0f} s (the next minute's rows, a new snapshot, as gold's "
        f"commits by the stream: {ws['commits']} in the run), so every cached result goes stale and is computed "
        "again. Beside them the same queries through `lakehouse sql` (DuckDB, one at a time, 5 each).",
        "",
        "| query | cache off, alone: queries | p50, ms | p95, ms | cache on, alone: queries | p50, ms | p95, ms "
        "| cache on, with the stream and commits: queries | p50, ms | p95, ms "
        "| lakehouse sql p50, ms | lakehouse sql p95, ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Queries answered per second: {results['uncached']['per_s']:.1f} with the cache off, "
        f"{results['alone']['per_s']:.1f} with it on ({cached(results['alone'])}); {ws['per_s']:.1f} with the "
        f"stream and commits ({cached(ws)}). {results['error_count']} errors. Every answer the endpoint gave "
        "before and after the commits equals `lakehouse sql`'s. A full scan "
        f"of {p['events']:,} events (count, sum, distinct users): {s['endpoint_s']:.2f} s through the endpoint "
        "(its cache off) "
        f"({s['rows_per_s_endpoint']:,.0f} rows/s), {s['spark_s']:.2f} s in plain Spark on the same table "
        f"({s['rows_per_s_spark']:,.0f} rows/s), {s['endpoint_s'] / s['spark_s']:.2f}x.",
        "",
        f"Goal: the dashboard's queries at p95 under 1 s while the stream runs: "
        f"**{'reached' if all(w[n]['p95'] < 1 for n in w) else 'not reached'}**. "
        "Without the cache the latency is the queue: at the rate above, each query waits for the others' "
        "(8 / rate); profiled (the JDK's flight recorder on the endpoint, 2026-11-27, not by this benchmark), about "
        "two thirds of its CPU goes to the executors reading the table's 30 day files (the first two queries "
        "compare against `(SELECT max(minute) ...)`, which Spark cannot use to prune partitions) and a quarter to "
        "the driver's planning and scheduling. With the cache a repeated query is analysed (the tables' current "
        "metadata read from the catalog) and answered without a Spark job; after a commit the first client to ask "
        "computes the new answer and those asking meanwhile wait for it.",
        "",
    ])
