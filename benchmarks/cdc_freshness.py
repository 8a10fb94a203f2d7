"""CDC freshness, live: a row committed in PostgreSQL until it is in silver, with the real connector capturing under a
steady write load and the Dagster daemon running the pipeline; nobody launches a run.

A throwaway PostgreSQL (wal_level=logical) holds a table of ROWS rows. `lakehouse capture` (Debezium's PostgreSQL
connector, a process of its own) runs throughout, publishing a landing file at least every ROLL_S seconds, and
`dagster-daemon run` (this repository's dagster.yaml: one run at a time) evaluates the landing sensor, which
requests the runs of bronze and silver. The initial snapshot goes through first (its time reported). Then, at each
of RATES in turn, four sessions commit updates for SECONDS seconds (single-row up to STATEMENTS_PER_S a second, then
several rows a statement), each raising its row's version `v`;
the time each commit returned is kept, and every change of a step is in silver before the next step begins. A
watcher reads silver with pyiceberg after each of its commits: a change is in silver once the row's `v` there is at
least the change's, at the time that commit was published (the table's metadata written). Freshness = that time -
the change's commit time.

Then the same on a PostgreSQL and capture of their own, applied by plain Spark instead (PEER: a PySpark process
importing nothing of ours, Structured Streaming's file source with a MERGE per micro-batch into an Iceberg table),
its table watched the same way.

A run counts only if every change was applied and the table equals the source's rows at the end.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg2
from pyiceberg.table import StaticTable, Table

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.runtime.jars import jars_for
from lakehouse_assets.settings import Settings
from lakehouse_services.postgres import ThrowawayPostgres

from .stream_capacity import _pct

ROOT = Path(__file__).resolve().parents[1]
RATES, SECONDS, ROWS = (1_000, 5_000, 20_000), 90, 10_000  # changes/s of each step, its length, the table's rows
STATEMENTS_PER_S = 1_000  # above this many changes a second, a statement updates several rows
ROLL_S = 5.0  # the capture publishes a landing file at least this often
SESSIONS = 4
DRAIN_S = 900  # how long after the load the changes may take to reach silver before the run is given up
TARGET_RATE, TARGET_P95_S = 1_000, 60.0
NAMESPACE = "fresh"

DECLARATION = """\
name: bench_fresh
start_date: {start}
landing:
  settle: 0s  # the capture renames each file into place whole: nothing to wait for
cdc:
  fresh:
    connector: postgresql
    database: source
    schema: public
    tables:
      items:
        primary_key: [id]
        columns: {{id: long, v: long, qty: int, note: string}}
"""


class _Watcher(threading.Thread):
    """Reads the applied table (silver, or the peer's) after each of its commits; the changes it finds there, with
    their freshness. `load`: the table as it is now, None before it exists."""

    def __init__(self, load: Callable[[], Table | None]) -> None:
        super().__init__(daemon=True)
        self.load = load
        self.pending: dict[int, list[tuple[int, float]]] = {}  # id -> [(v, committed at)] in v's order
        self.lock = threading.Lock()
        self.latencies: list[tuple[float, float]] = []  # (committed at, seconds until in silver)
        self.rows: dict[int, int] = {}
        self.commits = 0
        self.stopped = threading.Event()

    def committed(self, key: int, version: int, at: float) -> None:
        with self.lock:
            bisect.insort(self.pending.setdefault(key, []), (version, at))  # sessions may report out of order

    def waiting(self) -> int:
        with self.lock:
            return sum(map(len, self.pending.values()))

    def run(self) -> None:
        seen = None
        while not self.stopped.is_set():
            table = self.load()
            if table is not None:
                snapshot = table.current_snapshot()
                if snapshot is not None and snapshot.snapshot_id != seen:
                    seen, published = snapshot.snapshot_id, table.metadata.last_updated_ms / 1000
                    arrow = table.scan(selected_fields=("id", "v")).to_arrow()
                    rows = dict(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist()))
                    self._found(rows, published)
            self.stopped.wait(0.5)

    def _found(self, rows: dict[int, int], published: float) -> None:
        with self.lock:
            self.rows, self.commits = rows, self.commits + 1
            for key in list(self.pending):
                have = rows.get(key, -1)
                changes = self.pending[key]
                while changes and changes[0][0] <= have:
                    _, at = changes.pop(0)
                    self.latencies.append((at, published - at))
                if not changes:
                    del self.pending[key]


def _load(dsn: str, rate: int, seconds: float, rows: int, watcher: _Watcher) -> dict:
    """`rate` row changes a second from SESSIONS sessions, each statement committed alone: single-row updates up to
    STATEMENTS_PER_S a second, above that each statement updates as many distinct rows as keeps the statements at
    that rate. Each change is reported to the watcher with the version it made and when its commit returned."""
    per_statement = max(1, -(-rate // STATEMENTS_PER_S))
    statements = int(rate * seconds) // per_statement
    started = time.monotonic() + 0.5
    late = [0.0] * SESSIONS

    def session(k: int) -> None:
        rng = random.Random(k)
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        cur = conn.cursor()
        for n in range(k, statements, SESSIONS):
            due = started + n * per_statement / rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                late[k] = max(late[k], -wait)
            keys = rng.sample(range(1, rows + 1), per_statement)
            cur.execute("UPDATE items SET v = v + 1, qty = qty + 1 WHERE id = ANY(%s) RETURNING id, v", (keys,))
            made, at = cur.fetchall(), time.time()
            for key, version in made:
                watcher.committed(key, version, at)
        conn.close()

    threads = [threading.Thread(target=session, args=(k,)) for k in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"changes": statements * per_statement, "rows_per_statement": per_statement,
            "seconds": round(time.monotonic() - started, 1), "late_s": round(max(late), 2)}


def _source_rows(dsn: str) -> dict[int, int]:
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM items")
        return dict(cur.fetchall())


def _start(args: list[str], env: dict, cwd: Path, log: str) -> subprocess.Popen:
    return subprocess.Popen(args, env=env, cwd=cwd, stdout=open(cwd / log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def _end_leftovers(root: Path) -> None:
    """Ends what the processes started under `root` left running (the daemon's runs are processes of their own,
    which outlive it): nothing writes into `root` while it is removed."""
    marker = f"DAGSTER_HOME={root / 'dagster'}".encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except OSError:
            pass  # gone meanwhile, or not ours to read


def _runs(env: dict) -> dict[str, dict[str, list[float]]]:
    """The daemon's successful runs by what they materialised (else their job): the seconds each ran, from its start
    to its end, and the seconds each waited in the queue before it started."""
    script = ("import json; from dagster import DagsterInstance, RunsFilter, DagsterRunStatus\n"
              "i = DagsterInstance.get(); out = []\n"
              "for r in i.get_run_records(RunsFilter(statuses=[DagsterRunStatus.SUCCESS])):\n"
              "    keys = sorted(k.to_user_string() for k in (r.dagster_run.asset_selection or []))\n"
              "    out.append([' + '.join(keys) or r.dagster_run.job_name, (r.end_time or 0) - (r.start_time or 0),"
              " r.create_timestamp.timestamp(), r.start_time or 0])\n"
              "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    runs: dict[str, dict[str, list[float]]] = {}
    for what, seconds, created, started in json.loads(done.stdout or "[]"):
        runs.setdefault(what, {"ran": [], "queued": []})
        runs[what]["ran"].append(seconds)
        runs[what]["queued"].append(max(0.0, started - created))
    return runs


# The peer: plain PySpark applying the same changes, as a Spark user would write it, importing nothing of ours.
# Structured Streaming's file source takes the capture's new landing files each trigger; each micro-batch's latest
# change per key (by the change's log position) is MERGEd into an Iceberg table (Iceberg's defaults, a Hadoop
# catalog in a folder). argv: landing folder, warehouse, checkpoint, jars (comma-separated), master, driver memory,
# trigger seconds. stdout: one JSON line per batch that took changes.
PEER = textwrap.dedent('''\
    import json
    import sys
    import time

    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    folder, warehouse, checkpoint, jars, master, memory, trigger = sys.argv[1:]
    spark = (SparkSession.builder.master(master).appName("cdc-merge-per-batch")
             .config("spark.driver.memory", memory)
             .config("spark.jars", jars)
             .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config("spark.sql.catalog.peer", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.peer.type", "hadoop")
             .config("spark.sql.catalog.peer.warehouse", warehouse)
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    spark.sql("CREATE TABLE IF NOT EXISTS peer.db.items (id bigint, v bigint, qty int, note string, lsn bigint) "
              "USING iceberg")
    schema = ("payload struct<op: string, before: struct<id: bigint>, "
              "after: struct<id: bigint, v: bigint, qty: int, note: string>, source: struct<lsn: bigint>>")

    def merge(batch, batch_id):
        started = time.time()
        changes = batch.select(F.coalesce("payload.after.id", "payload.before.id").alias("id"), "payload.op",
                               "payload.after.v", "payload.after.qty", "payload.after.note",
                               F.col("payload.source.lsn").alias("lsn"))
        latest = (changes.withColumn("n", F.row_number().over(Window.partitionBy("id").orderBy(F.desc("lsn"))))
                  .where("n = 1").drop("n"))
        latest.createOrReplaceTempView("latest")
        latest.sparkSession.sql(
            "MERGE INTO peer.db.items t USING latest s ON t.id = s.id "
            "WHEN MATCHED AND s.op = 'd' THEN DELETE "
            "WHEN MATCHED AND s.lsn > t.lsn THEN UPDATE SET v = s.v, qty = s.qty, note = s.note, lsn = s.lsn "
            "WHEN NOT MATCHED AND s.op != 'd' THEN INSERT (id, v, qty, note, lsn) "
            "VALUES (s.id, s.v, s.qty, s.note, s.lsn)")
        print(json.dumps({"batch": batch_id, "seconds": round(time.time() - started, 2)}), flush=True)

    (spark.readStream.schema(schema).json(folder).writeStream.foreachBatch(merge)
     .option("checkpointLocation", checkpoint).trigger(processingTime=f"{trigger} seconds").start()
     .awaitTermination())
    ''')
PEER_TRIGGER_S = 1
STREAM_PASS = re.compile(r"^cdc/items: \d+ files, .* applied in ([\d.]+) s$", re.M)  # a pass that took files


def _hadoop_table(folder: Path) -> Table | None:
    """The peer's table as its Hadoop catalog last committed it (the version its hint names), or None."""
    hint = folder / "metadata" / "version-hint.text"
    try:
        version = int(hint.read_text().strip())
        return StaticTable.from_metadata(str(folder / "metadata" / f"v{version}.metadata.json"))
    except (OSError, ValueError):
        return None


def run(rates: tuple[int, ...] = RATES, seconds: float = SECONDS, rows: int = ROWS) -> dict:
    """Ours with the daemon alone, ours with `lakehouse stream` beside it, then the peer, each on a PostgreSQL of its
    own and at every rate."""
    ours = _measure("ours", rates, seconds, rows)
    stream = _measure("stream", rates, seconds, rows)
    peer = _measure("peer", rates, seconds, rows)
    keep = ("snapshot_to_silver_s", "steps", "batches")
    return {**ours, "stream": {k: stream[k] for k in keep}, "peer": {k: peer[k] for k in keep}}


def _measure(path: str, rates: tuple[int, ...], seconds: float, rows: int) -> dict:
    """One path ("ours": the daemon alone; "stream": `lakehouse stream` beside it; "peer": plain Spark) on a
    PostgreSQL and lake of its own."""
    with tempfile.TemporaryDirectory(prefix="lakehouse-fresh-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        env, settings = _lake(root)
        pg = ThrowawayPostgres(root / "pg").start()
        processes: list[tuple[subprocess.Popen, str]] = []
        if path != "peer":
            catalog, silver = catalog_for(settings), (settings.namespace, "silver_items")
            watcher = _Watcher(lambda: catalog.load_table(silver) if catalog.table_exists(silver) else None)
        else:
            watcher = _Watcher(lambda: _hadoop_table(root / "peer" / "db" / "items"))
        try:
            with psycopg2.connect(pg.dsn) as conn, conn.cursor() as cur:
                cur.execute("CREATE TABLE items (id bigint PRIMARY KEY, v bigint NOT NULL, qty int, note text)")
                cur.execute("INSERT INTO items SELECT g, 0, g %% 7, 'item ' || g FROM generate_series(1, %s) g",
                            (rows,))
            started = time.time()
            processes += _launch(path, root, env, settings, pg.dsn)
            watcher.start()
            _await_snapshot(watcher, processes, root, rows, started)
            snapshot_s = time.time() - started
            steps, left = [], 0
            for rate in rates:  # each step drained before the next: its changes are its own
                commits, found = watcher.commits, len(watcher.latencies)
                load = _load(pg.dsn, rate, seconds, rows, watcher)
                drained = time.monotonic()
                while watcher.waiting() and time.monotonic() - drained < DRAIN_S:
                    time.sleep(1)
                left = watcher.waiting()
                steps.append(_step(rate, load, watcher.latencies[found:], watcher.commits - commits))
                if left:
                    break
            runs = _runs(env) if path != "peer" else {}
            batches = _batches(path, root)
            equal = watcher.rows == _source_rows(pg.dsn)
        finally:
            watcher.stopped.set()
            for p, _ in reversed(processes):
                _stop(p)
            _end_leftovers(root)
            pg.stop()
    if left or not equal:
        raise RuntimeError(f"{path}: {left} changes never applied; the table equal to the source: {equal}")
    runs_s = {k: {"n": len(v["ran"]), "ran_median_s": round(statistics.median(v["ran"]), 1),
                  "queued_median_s": round(statistics.median(v["queued"]), 1)} for k, v in sorted(runs.items())}
    run_s = statistics.median(batches) if batches else max((v["ran_median_s"] for v in runs_s.values()), default=0.0)
    for step in steps:  # the backlog grew when the step's last changes waited longer than its first by a run more
        step["backlog_grew"] = step["last_tenth_s"] > step["first_tenth_s"] + run_s
    return {"params": {"rates": list(rates), "seconds": seconds, "rows": rows, "roll_s": ROLL_S, "sessions": SESSIONS},
            "snapshot_to_silver_s": round(snapshot_s, 1), "steps": steps, "runs": runs_s,
            "batches": {"n": len(batches), "median_s": round(statistics.median(batches), 1) if batches else None}}


def _lake(root: Path) -> tuple[dict, Settings]:
    """A declaration, lake and Dagster instance under `root`: the processes' environment and the settings."""
    today = dt.datetime.now(dt.timezone.utc).date()
    (root / "lakehouse.yaml").write_text(DECLARATION.format(start=today - dt.timedelta(days=1)))
    dagster_home = root / "dagster"
    dagster_home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    (dagster_home / "workspace.yaml").write_text(
        "load_from:\n  - python_module:\n      module_name: lakehouse_assets.definitions\n"
        "      location_name: lakehouse\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_HOME"))},
           "DAGSTER_HOME": str(dagster_home), "LAKEHOUSE_HOME": str(root / "home"),
           "LAKEHOUSE_PROJECT": str(root / "lakehouse.yaml"), "LAKEHOUSE_LANDING": str(root / "landing"),
           "LAKEHOUSE_NAMESPACE": NAMESPACE, "LAKEHOUSE_DAGSTER_STORAGE": str(dagster_home / "storage"),
           "LAKEHOUSE_DAGSTER_LOGS": str(dagster_home / "logs"),
           "LAKEHOUSE_PII_KEY": "bench-key-for-pseudonyms-in-benchmarks"}
    return env, Settings.from_env(home=root / "home", project=str(root / "lakehouse.yaml"), namespace=NAMESPACE)


def _launch(path: str, root: Path, env: dict, settings: Settings, dsn: str) -> list[tuple[subprocess.Popen, str]]:
    """The capture, and the path's processes: the daemon (and the stream), or the peer."""
    bin_dir = Path(sys.executable).parent
    processes = [(_start([str(bin_dir / "lakehouse"), "capture", "--source", "fresh", "--dsn", dsn,
                          "--roll-seconds", str(ROLL_S), "--json"], env, root, "capture.log"), "capture.log")]
    if path != "peer":
        processes.append((_start([str(bin_dir / "dagster-daemon"), "run", "-w", str(root / "dagster" / "workspace.yaml")],
                                 env, root, "daemon.log"), "daemon.log"))
    if path == "stream":
        processes.append((_start([str(bin_dir / "lakehouse"), "stream", "--source", "fresh", "--poll-seconds", "1"],
                                 env, root, "stream.log"), "stream.log"))
    elif path == "peer":
        (root / "landing" / "cdc" / "items").mkdir(parents=True, exist_ok=True)
        processes.append((_start([sys.executable, "-c", PEER, str(root / "landing" / "cdc" / "items"),
                                  str(root / "peer"), str(root / "checkpoint"),
                                  ",".join(map(str, jars_for({"iceberg"}))), settings.spark_master,
                                  settings.driver_memory, str(PEER_TRIGGER_S)],
                                 {k: v for k, v in env.items() if k != "PYTHONPATH"}, root, "peer.log"), "peer.log"))
    return processes


def _await_snapshot(watcher: _Watcher, processes: list[tuple[subprocess.Popen, str]], root: Path, rows: int,
                    started: float) -> None:
    while len(watcher.rows) < rows:  # the snapshot applied
        for p, log in processes:
            if p.poll() is not None:
                raise RuntimeError(f"{log} ended: {(root / log).read_text()[-3000:]}")
        if time.time() - started > DRAIN_S:
            raise RuntimeError(f"the snapshot was not applied after {DRAIN_S} s: "
                               f"{(root / processes[-1][1]).read_text()[-3000:]}")
        time.sleep(1)


def _batches(path: str, root: Path) -> list[float]:
    """The seconds of each of the peer's batches, or of each of the stream's passes that took files."""
    if path == "peer":
        return [json.loads(line)["seconds"] for line in (root / "peer.log").read_text().splitlines()
                if line.startswith('{"batch"')]
    if path == "stream":
        return [float(s) for s in STREAM_PASS.findall((root / "stream.log").read_text())]
    return []


def _step(rate: int, load: dict, found: list[tuple[float, float]], commits: int) -> dict:
    lags = [lag for _, lag in sorted(found)]
    tenth = max(1, len(lags) // 10)
    return {"rate": rate, "done_per_s": round(load["changes"] / load["seconds"]), "late_s": load["late_s"],
            "rows_per_statement": load["rows_per_statement"],
            "changes": len(lags), "silver_commits": commits, "p50_s": round(_pct(lags, 0.5), 1),
            "p95_s": round(_pct(lags, 0.95), 1), "max_s": round(max(lags), 1),
            "first_tenth_s": round(statistics.median(lags[:tenth]), 1),
            "last_tenth_s": round(statistics.median(lags[-tenth:]), 1)}


def held(r: dict) -> int:
    """The highest rate committed (not asked: the sessions may fall behind) at which the backlog did not grow, below
    every step whose backlog grew."""
    best = 0
    for step in r["steps"]:
        if step["backlog_grew"]:
            break
        best = max(best, step["done_per_s"])
    return best


def markdown(r: dict) -> str:
    p = r["params"]
    at_target = next((s for s in r["steps"] if s["rate"] == TARGET_RATE), None)
    ok = at_target is not None and at_target["p95_s"] < TARGET_P95_S
    runs = [f"| {k} | {v['n']} | {v['queued_median_s']} | {v['ran_median_s']} |" for k, v in r["runs"].items()]
    steps = [f"| {s['rate']:,} | {s['rows_per_statement']} | {s['done_per_s']:,} | {s['changes']:,} | {s['p50_s']} | "
             f"{s['p95_s']} | {s['max_s']} | {s['first_tenth_s']} -> {s['last_tenth_s']} | "
             f"{'yes' if s['backlog_grew'] else 'no'} | {s['silver_commits']} |" for s in r["steps"]]
    return "\n".join([
        "### CDC freshness: a row committed in PostgreSQL until it is in silver, with the daemon",
        "",
        f"A throwaway PostgreSQL with a table of {p['rows']:,} rows; `lakehouse capture` (the real connector, a process "
        f"of its own, a landing file at least every {p['roll_s']:g} s) and `dagster-daemon run` (the repository's "
        "dagster.yaml: one run at a time) running throughout, on the same two cores; nobody launches a run. The "
        f"snapshot reached silver {r['snapshot_to_silver_s']} s after both started. Then, at each rate in turn, "
        f"{p['sessions']} sessions committed updates for {p['seconds']:g} s (each statement alone; single-row up to "
        f"{STATEMENTS_PER_S:,} a second, above that several distinct rows a statement: the rows a statement column), "
        "each step's changes all in silver before the next began (then the same for plain Spark, below). "
        "Freshness = when silver's commit holding the "
        "change was published - when the change's commit returned (silver read with pyiceberg after each of its "
        "commits); every change reached silver, and silver equals the source at the end.",
        "",
        "| changes/s asked | rows a statement | done/s | changes | p50 (s) | p95 (s) | max (s) | the step's first -> last tenth "
        "(median, s) | backlog grew | silver commits |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *steps,
        "",
        "The daemon's runs (each a process of its own; medians):",
        "",
        "| run | runs | queued (s) | ran (s) |",
        "|---|---|---|---|",
        *runs,
        "",
        f"A change waits for the next landing file (at most {p['roll_s']:g} s), the landing sensor's next tick (at "
        "most every 10 s), the run queued for its day (one run at a time: the run in progress ends first) and that "
        "run, which takes the new files through bronze, then silver and history (silver reads of bronze what was "
        "appended since its last run): the table's silver reads its bronze alone, so the landing sensor's run "
        "carries it, and it does not wait for the automation. The backlog grew at a rate when the step's last "
        "changes waited longer than its first by more than a run (the peer: a batch).",
        "",
        *_peer_lines(r),
        "",
        f"Held (the backlog steady, at the rate the sessions committed): {held(r):,} changes/s"
        + ("; where done/s is below the rate asked, the four sessions committed no faster on these cores beside the "
           "pipeline" if any(s["done_per_s"] < 0.95 * s["rate"] for s in r["steps"]) else "")
        + f". Target: p95 under {TARGET_P95_S:g} s at "
        f"{TARGET_RATE:,} changes/s: the daemon alone **{'reached' if ok else 'not reached'}** "
        f"({at_target['p95_s'] if at_target else 'not measured'} s)"
        + (f"; with `lakehouse stream` **{'reached' if streamed['p95_s'] < TARGET_P95_S else 'not reached'}** "
           f"({streamed['p95_s']} s)" if (streamed := next((s for s in r.get("stream", {}).get("steps", [])
                                                             if s["rate"] == TARGET_RATE), None)) else "")
        + ".",
    ])


def _peer_lines(r: dict) -> list[str]:
    stream, peer = r.get("stream"), r.get("peer")
    if not stream or not peer:
        return []
    by_rate = {path: {s["rate"]: s for s in steps} for path, steps in
               (("ours", r["steps"]), ("stream", stream["steps"]), ("peer", peer["steps"]))}

    def cells(path: str, rate: int) -> str:
        s = by_rate[path].get(rate)
        return f"{s['done_per_s']:,} | {s['p50_s']} | {s['p95_s']} |" if s else "| | |"

    def ratio(path: str, rate: int) -> str:
        a, b = by_rate[path].get(rate), by_rate["peer"].get(rate)
        return f"{a['p95_s'] / b['p95_s']:.2f}x" if a and b and b["p95_s"] else ""

    rows = [f"| {rate:,} | {cells('ours', rate)} {cells('stream', rate)} {cells('peer', rate)} "
            f"{ratio('ours', rate)} | {ratio('stream', rate)} |" for rate in sorted(by_rate["ours"])]
    return [
        "The same steps on a PostgreSQL and capture of their own, twice more: with `lakehouse stream --source` "
        "running beside the daemon (one long-lived process taking each table's new files through bronze, silver and "
        "history every second, the same code as the assets; the landing sensor quiet meanwhile), and applied by "
        "plain Spark instead of ours (a PySpark process of its own importing nothing of ours: Structured "
        f"Streaming's file source takes the new landing files every {PEER_TRIGGER_S} s and each micro-batch's "
        "latest change per key is MERGEd into an Iceberg table with Iceberg's defaults, in a Hadoop catalog: no "
        "quarantine, no history, no checks, no audit branch).",
        "",
        "| changes/s asked | daemon: done/s | p50 (s) | p95 (s) | stream: done/s | p50 (s) | p95 (s) | plain Spark: "
        "done/s | p50 (s) | p95 (s) | daemon / plain Spark, p95 | stream / plain Spark, p95 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Snapshot applied after: daemon {r['snapshot_to_silver_s']} s, stream {stream['snapshot_to_silver_s']} s, "
        f"plain Spark {peer['snapshot_to_silver_s']} s. The stream's passes that took files: {stream['batches']['n']}, "
        f"median {stream['batches']['median_s']} s; plain Spark's batches: {peer['batches']['n']}, median "
        f"{peer['batches']['median_s']} s. Held: daemon {held(r):,}, stream {held(stream):,}, plain Spark "
        f"{held(peer):,} changes/s.",
    ]


if __name__ == "__main__":
    result = run()
    print(json.dumps(result, indent=2))
    print(markdown(result))
