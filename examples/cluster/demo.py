"""`make cluster-demo`: the same assets on a cluster, chosen by settings alone, and the same answer as locally.

Every piece is a real process on this machine, on 127.0.0.1:
- a Spark standalone master and two workers (`lakehouse cluster`), each its own JVM;
- SeaweedFS for S3: the landing zone (`s3://raw/landing`) and the warehouse (`s3://lake/warehouse`);
- PostgreSQL: the Iceberg catalog (database `lakehouse`) and the Dagster instance (database
  `dagster`, through dagster-postgres: `examples/cluster/dagster.yaml`);
- with `--catalog rest` (the default), the Iceberg REST catalog server (`lakehouse catalog start`) in front of
  that catalog: the pipeline's driver commits through it as the `pipeline` principal and the SQL endpoint reads
  through it as `analyst`, whose writes the server refuses (`--catalog postgresql`: both open the database).

The demo days are generated into the S3 landing zone and the whole pipeline is materialised
there by `dagster asset materialize`. Then the same days (same seed) run through the local
profile (local Spark, SQLite catalog, local warehouse) and the row counts of every table are
compared side by side. On the cluster, `lakehouse serve` (the SQL endpoint) then answers a
dashboard's query with the cluster's executors, reading the catalog as the `analyst` principal
(or, without the REST catalog, as a PostgreSQL role that may only read). Everything started is
stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from lakehouse_services.postgres import ThrowawayPostgres
from lakehouse_services.process import free_port
from lakehouse_services.rest_catalog import catalog_status
from lakehouse_services.s3server import DEFAULT_SECRET_KEY, SeaweedS3
from lakehouse_services.spark_cluster import SparkCluster, master_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BIN = Path(sys.executable).parent


def run(command: list[str], env: dict[str, str]) -> str:
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stdout[-3000:]}{done.stderr[-5000:]}")
    return done.stdout


def pipeline(env: dict[str, str], start: dt.date, days: int, events_per_day: int) -> tuple[dict, dict]:
    """Generate the days into the profile's landing zone, materialise every asset; rows per table, and the
    settings the profile gave."""
    end = start + dt.timedelta(days=days - 1)
    settings = json.loads(run([str(BIN / "lakehouse"), "settings", "--json"], env))
    print("\n".join(f"  {k:15s} {v}" for k, v in settings.items()), flush=True)
    run([str(BIN / "lakehouse"), "generate", "--start", start.isoformat(), "--days", str(days),
         "--events-per-day", str(events_per_day), "--seed", "7"], env)
    run([str(BIN / "dagster"), "asset", "materialize", "-m", "lakehouse_assets.definitions", "--select", "*",
         "--partition-range", f"{start}...{end}"], env)
    run([str(BIN / "lakehouse"), "reconcile"], env)
    tables = json.loads(run([str(BIN / "lakehouse"), "tables", "--json"], env))
    return {t["table"]: t["rows"] for t in tables}, settings


def base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_"))}
    dagster = home / "dagster"
    (dagster / "storage").mkdir(parents=True, exist_ok=True)
    return {**env, "LAKEHOUSE_HOME": str(home / "lake"), "LAKEHOUSE_PROFILES": str(HERE / "profiles.yaml"),
            "LAKEHOUSE_PROJECT": os.environ.get("LAKEHOUSE_PROJECT", str(ROOT / "examples/shop/lakehouse.yaml")),
            "LAKEHOUSE_PII_KEY": os.environ.get("LAKEHOUSE_PII_KEY", "cluster-demo-key-for-pseudonyms-in-the-demo"),
            "DAGSTER_HOME": str(dagster), "LAKEHOUSE_DAGSTER_STORAGE": str(dagster / "storage"),
            "LAKEHOUSE_DAGSTER_LOGS": str(dagster / "logs")}


def tasks_by_worker(event_logs: list[Path], master: dict) -> dict[str, int]:
    """Tasks finished per worker, from the applications' Spark event logs: each executor's log URL is served by
    the worker that launched it. A task run by the driver would count under "driver"."""
    workers = {w["webuiaddress"].rstrip("/"): w["id"] for w in master.get("workers", [])}
    tasks: dict[str, int] = {}
    for log in sorted(event_logs):
        executor_worker = {"driver": "driver"}
        for line in log.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:  # the last line of a log whose application was still closing it
                continue
            if event["Event"] == "SparkListenerExecutorAdded":
                url = event["Executor Info"]["Log Urls"].get("stdout", "")
                executor_worker[event["Executor ID"]] = next(
                    (worker for ui, worker in workers.items() if url.startswith(ui + "/")), f"unknown ({url})")
            elif event["Event"] == "SparkListenerTaskEnd":
                worker = executor_worker.get(event["Task Info"]["Executor ID"], "unknown")
                tasks[worker] = tasks.get(worker, 0) + 1
    return tasks


DASHBOARD_QUERY = "SELECT event_type, count(*) AS events FROM silver_events GROUP BY event_type ORDER BY event_type"


def endpoint_run(env: dict[str, str], pg: ThrowawayPostgres, event_logs: Path, master_ui: str,
                 reader_uri: str | None) -> dict:
    """`lakehouse serve` on the cluster profile, reading the catalog as a principal (`reader_uri`, through the REST
    catalog) or a PostgreSQL role that may only read: a dashboard query's answer through PyHive, and the tasks the
    endpoint's application ran on each worker."""
    import psycopg2
    from pyhive import hive

    if reader_uri is None:
        with psycopg2.connect(pg.dsn) as db, db.cursor() as cur:
            cur.execute("CREATE ROLE lakehouse_reader LOGIN")  # the role docs/sql-endpoint.md gives the endpoint
            cur.execute("GRANT SELECT ON iceberg_tables, iceberg_namespace_properties TO lakehouse_reader")
        reader_uri = f"postgresql://lakehouse_reader@127.0.0.1:{pg.port}/lakehouse"
    port = free_port()
    before = set(event_logs.iterdir())
    log = event_logs.parent / "serve.log"
    serve_env = {**env, "LAKEHOUSE_SERVE_PORT": str(port),
                 "LAKEHOUSE_SERVE_CATALOG_URI": reader_uri}
    print(f"$ lakehouse serve (port {port})", flush=True)
    with open(log, "w") as out:
        server = subprocess.Popen([str(BIN / "lakehouse"), "serve"], env=serve_env, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while "SQL endpoint (read-only) on" not in log.read_text():
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the SQL endpoint did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        cursor = hive.connect(host="127.0.0.1", port=port, database="lake").cursor()
        cursor.execute(DASHBOARD_QUERY)
        answer = {kind: n for kind, n in cursor.fetchall()}
        cursor.close()
        # Its tasks are in its event log once their stage completed (Spark flushes the log then).
        tasks = tasks_by_worker([p for p in event_logs.iterdir() if p not in before], master_json(master_ui))
    finally:
        server.terminate()
        server.wait(timeout=120)
    return {"query": DASHBOARD_QUERY, "answer": answer, "tasks_by_worker": tasks}


@contextlib.contextmanager
def rest_catalog(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """`lakehouse catalog start` over the profile's catalog (PostgreSQL, the warehouse on S3): the catalog URI of
    each principal the demo uses through it, and the server's log (`log`); the server stopped at the end."""
    run([str(BIN / "lakehouse"), "catalog", "start"], env)
    try:
        state = catalog_status(Path(env["LAKEHOUSE_HOME"]) / "catalog-server")
        if state is None:
            raise SystemExit("the catalog server stopped right after it started: see catalog-server/ under the home")
        uris = {"log": state.log_file}
        for principal in ("pipeline", "analyst"):
            token = run([str(BIN / "lakehouse"), "catalog", "token", "--principal", principal], env).strip()
            uris[principal] = f"rest+http://{principal}:{token}@127.0.0.1:{state.port}"
        yield uris
    finally:
        run([str(BIN / "lakehouse"), "catalog", "stop"], env)


def requests_by_principal(log: Path) -> dict[str, dict[str, int]]:
    """From the catalog server's access log (`TIME PRINCIPAL METHOD PATH STATUS TOOKms`): per principal, the
    tables loaded, the commits taken (one table's, or several tables' at once; a table's creation among them),
    the scan reports its engine sent (`.../metrics`), and the requests refused."""
    counts: dict[str, dict[str, int]] = {}
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) != 6 or not parts[5].endswith("ms") or not parts[3].startswith("/v1/"):
            continue  # the server's other lines
        _, principal, method, path, status, _ = parts
        table = "/tables/" in path
        kind = ("refused" if status in ("401", "403") else
                "scan reports" if path.endswith("/metrics") else
                "loads" if method == "GET" and table else
                "commits" if method == "POST" and (table or path.endswith("/transactions/commit")) else "other")
        mine = counts.setdefault(principal, {"loads": 0, "commits": 0, "scan reports": 0, "refused": 0, "other": 0})
        mine[kind] += 1
    return counts


def cluster_run(home: Path, start: dt.date, days: int, events_per_day: int, workers: int,
                catalog: str) -> tuple[dict, dict, dict, dict]:
    """The pipeline on the cluster profile: its row counts, its settings, the tasks each worker ran, and the
    SQL endpoint's answer on the cluster (with the REST catalog, what each principal asked of the catalog)."""
    with contextlib.ExitStack() as started:
        s3 = started.enter_context(SeaweedS3.with_free_ports(home / "s3", buckets=("raw", "lake")))
        pg = started.enter_context(ThrowawayPostgres(home / "pg", database="lakehouse"))
        cluster = started.enter_context(SparkCluster(home / "spark", workers=workers, cores=1, memory="2g"))
        pg.create_database("dagster")
        env = base_env(home)
        shutil.copy(HERE / "dagster.yaml", Path(env["DAGSTER_HOME"]) / "dagster.yaml")
        event_logs = home / "spark" / "events"
        event_logs.mkdir(parents=True)
        # One setting chooses the profile (examples/cluster/profiles.yaml); the servers' free ports
        # and keys reach it through the variables it refers to.
        env.update({
            "LAKEHOUSE_PROFILE": "cluster", "SPARK_MASTER_URL": cluster.master_url,
            # One plain file per application (Spark 4 writes rolling, compressed logs by default).
            "SPARK_EXTRA_CONF": f",spark.eventLog.enabled=true,spark.eventLog.dir={event_logs.as_uri()}"
                                ",spark.eventLog.rolling.enabled=false,spark.eventLog.compress=false",
            "PGHOST": "127.0.0.1", "PGPORT": str(pg.port), "PGUSER": "postgres",
            "S3_ENDPOINT": s3.endpoint_url, "S3_ACCESS_KEY": s3.access_key, "S3_SECRET_KEY": DEFAULT_SECRET_KEY,
            "LAKEHOUSE_DAGSTER_PG_URL": f"postgresql+psycopg2://postgres@127.0.0.1:{pg.port}/dagster",
        })
        reader_uri = None
        if catalog == "rest":  # a variable set wins over the profile's value: the pipeline's catalog, the server
            uris = started.enter_context(rest_catalog(env))
            env["LAKEHOUSE_CATALOG_URI"], reader_uri = uris["pipeline"], uris["analyst"]
        print(f"Spark {cluster.master_url} ({workers} workers), S3 {s3.endpoint_url}, PostgreSQL port {pg.port}"
              f"{', the REST catalog in front of it' if catalog == 'rest' else ''}", flush=True)
        rows, settings = pipeline(env, start, days, events_per_day)
        tasks = tasks_by_worker(list(event_logs.iterdir()), master_json(cluster.master_ui))
        served = endpoint_run(env, pg, event_logs, cluster.master_ui, reader_uri)
        if catalog == "rest":
            served["catalog_requests"] = requests_by_principal(Path(uris["log"]))
        return rows, settings, tasks, served


def local_run(home: Path, start: dt.date, days: int, events_per_day: int) -> tuple[dict, dict]:
    """The same days through the local profile (the repository's dagster.yaml: SQLite)."""
    env = base_env(home)
    shutil.copy(ROOT / "dagster.yaml", Path(env["DAGSTER_HOME"]) / "dagster.yaml")
    env["LAKEHOUSE_PROFILE"] = "local"
    return pipeline(env, start, days, events_per_day)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="examples.cluster.demo")
    parser.add_argument("--start", default="2025-01-01")
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--events-per-day", type=int, default=2_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--catalog", choices=("rest", "postgresql"), default="rest",
                        help="the cluster's catalog: the REST catalog server in front of PostgreSQL, or PostgreSQL")
    parser.add_argument("--home", default=str(Path(os.environ.get("LAKEHOUSE_HOME", ".lakehouse")) / "cluster-demo"))
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = parser.parse_args(argv)
    home = Path(args.home).resolve()
    shutil.rmtree(home, ignore_errors=True)  # a demo of its own: fresh servers, catalog and lake each time
    start = dt.date.fromisoformat(args.start)
    on_cluster, cluster_settings, tasks, served = cluster_run(home / "cluster", start, args.days,
                                                              args.events_per_day, args.workers, args.catalog)
    local, local_settings = local_run(home / "local", start, args.days, args.events_per_day)
    tables = sorted(set(on_cluster) | set(local))
    same = all(on_cluster.get(t) == local.get(t) for t in tables)
    if args.json:
        print(json.dumps({"cluster": on_cluster, "local": local, "same": same, "tasks_by_worker": tasks,
                          "endpoint": served, "settings": {"cluster": cluster_settings, "local": local_settings}}))
    else:
        print(f"\n{'table':40s} {'cluster':>10s} {'local':>10s}")
        for t in tables:
            mark = "" if on_cluster.get(t) == local.get(t) else "  <- differs"
            print(f"{t:40s} {on_cluster.get(t, '-')!s:>10s} {local.get(t, '-')!s:>10s}{mark}")
        print("\ntasks run on the cluster: " + ", ".join(f"{w}: {n}" for w, n in sorted(tasks.items())))
        print(f"the SQL endpoint on the cluster: {served['query']}\n  " + ", ".join(
            f"{k}: {v}" for k, v in served["answer"].items()) + "\n  its tasks: " + ", ".join(
            f"{w}: {n}" for w, n in sorted(served["tasks_by_worker"].items())))
        for principal, asked in served.get("catalog_requests", {}).items():
            print(f"the REST catalog, asked by {principal}: " + ", ".join(f"{k} {n}" for k, n in asked.items()))
        print("same rows in every table" if same else "THE PROFILES DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
