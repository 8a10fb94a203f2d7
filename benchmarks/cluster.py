"""The same CDC MERGE on local Spark and on a two-worker standalone cluster, side by side.

Two child processes, one after the other, each its own Spark application on the
same two cores: `local[2]` (driver and tasks in one JVM) and a standalone master
with two workers of one core each (`lakehouse cluster`'s processes; the driver
schedules, executors in the workers' JVMs run the tasks). Both load M rows into a
merge-on-read table declared like silver CDC, MERGE K changes into it and read it
back, on the same local warehouse and SQLite catalog, so what differs is where the
tasks run and what crosses between JVMs (shuffle blocks, task results).

    python -m benchmarks.cluster --rows N --changes K      # both, printed as JSON
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from lakehouse_services.spark_cluster import SparkCluster, master_json

MEMORY = "2g"  # each worker's executor; the local driver has 4g: the same 4 GB for the tasks either way


def _child(master: str, home: Path, rows: int, changes: int) -> dict:
    """Run in a process of its own: one Spark application on `master`."""
    from lakehouse_assets.runtime.catalog import catalog_for
    from lakehouse_assets.runtime.spark import get_spark
    from lakehouse_assets.settings import Settings
    from lakehouse_assets.tables.registry import MERGE_ON_READ

    from .merge_modes import merge_once

    on_cluster = master.startswith("spark://")
    settings = Settings(home=home, spark_master=master, namespace="bench",
                        driver_memory="1g" if on_cluster else "4g",
                        spark_conf=(("spark.executor.memory", MEMORY),) if on_cluster else ())
    catalog_for(settings).create_namespace_if_not_exists("bench")  # the catalog's tables, made as the platform does
    spark = get_spark(settings)
    result = merge_once(spark, f"{settings.catalog_name}.bench.merge_{'cluster' if on_cluster else 'local'}",
                        MERGE_ON_READ, rows, changes)
    # Block managers the driver knows: the driver's own, and one per executor on the cluster.
    result["executors"] = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - (1 if on_cluster else 0)
    spark.stop()
    return result


def _run_child(master: str, home: Path, rows: int, changes: int) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.cluster", "--child", "--master", master,
                           "--home", str(home), "--rows", str(rows), "--changes", str(changes)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{master}: exit {done.returncode}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(rows: int, changes: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="lakehouse-bench-cluster-") as tmp:
        root = Path(tmp)
        local = _run_child("local[2]", root / "local", rows, changes)
        with SparkCluster(root / "spark", workers=2, cores=1, memory=MEMORY) as cluster:
            on_cluster = _run_child(cluster.master_url, root / "cluster", rows, changes)
            workers = len(master_json(cluster.master_ui).get("workers", []))
    return {"local": local, "cluster": {**on_cluster, "workers": workers},
            "params": {"rows": rows, "changes": changes, "memory": MEMORY}}


def markdown(results: dict) -> str:
    p, local, cluster = results["params"], results["local"], results["cluster"]
    rows = [("load M rows, s", "load_s"), ("MERGE K changes, s", "merge_s"), ("count(*) after, s", "count_s"),
            ("scan + aggregate after, s", "scan_s")]
    lines = [
        f"### Local vs cluster: CDC MERGE on `local[2]` and on a two-worker standalone cluster "
        f"({p['changes']:,} changes into {p['rows']:,} rows, merge-on-read)",
        "",
        f"The same two cores either way: one JVM with two task threads (a 4g heap), or a standalone master and "
        f"{cluster['workers']} workers of one core each, an executor of {p['memory']} in each, the driver in a JVM "
        "of its own. Same local warehouse and SQLite catalog.",
        "",
        "| step | local[2] | cluster | cluster / local |",
        "|---|---|---|---|",
    ]
    for label, key in rows:
        lines.append(f"| {label} | {local[key]:.2f} | {cluster[key]:.2f} | {cluster[key] / local[key]:.2f}x |")
    lines += [
        f"| MERGE changes/s | {p['changes'] / local['merge_s']:,.0f} | {p['changes'] / cluster['merge_s']:,.0f} | |",
        "",
        f"Executors seen by the driver: {cluster['executors']} on the cluster. On one machine the cluster can only "
        "add costs (tasks and shuffle blocks cross JVMs over loopback, two heaps instead of one); the ratio is "
        "that cost, and what the same settings buy on machines that add cores.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.cluster")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--master", default="local[2]", help=argparse.SUPPRESS)
    parser.add_argument("--home", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.master, Path(args.home), args.rows, args.changes)))
    else:
        results = run(args.rows, args.changes)
        print(json.dumps(results, indent=2))
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
