"""A CDC stream over time: its passes as the tables it writes take pass after pass, with its own maintenance and
without.

`lakehouse stream --source <cdc entry>` runs for days. Every pass appends to bronze and writes silver and its
history by MERGE (merge-on-read: new data files and delete files), and every later pass reads what the earlier
ones left. The same takes of the shop's generated changes (customers and orders, one file of each per take) land
one after the other in today's folders; after each, one pass of the stream over both tables, in this process:

- maintained: as `lakehouse stream` runs it, each table it wrote to compacted, or thinned, after a pass once it
  crosses the declaration's maintenance thresholds (operations/schedules.py `maintenance_when_due`);
- left to the daemon: `--no-maintenance`, with no daemon running, so nothing compacts it.

Each on a namespace of its own; the first pass of each (tables created, the JVM warming) is left out.
"""

from __future__ import annotations

import datetime as dt
import shutil
import statistics
import time
from pathlib import Path

from dagster import AssetObservation, DagsterInstance
from pyspark.sql import SparkSession

from examples.shop.cdc_generator import generate_cdc
from lakehouse_assets.live.cdc_stream import CdcStream
from lakehouse_assets.operations.schedules import maintenance_when_due
from lakehouse_assets.project import load_project
from lakehouse_assets.settings import Settings

from .common import SHOP_FILE, lakehouse

TARGET = 1.3  # the last passes over the first ones, maintained
TABLES = ("customers", "orders")
EDGE = 5  # passes averaged at each end


def _land(generated: Path, landing: Path, take: str) -> None:
    today = dt.datetime.now(dt.timezone.utc).date()
    for table in TABLES:
        for source in (generated / "cdc" / table).rglob(take):
            target = landing / "cdc" / table / f"date={today.isoformat()}" / take
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target.with_name("." + take))
            target.with_name("." + take).rename(target)  # whole, as the capture lands its files


def _variant(settings: Settings, generated: Path, takes: list[str], maintained: bool) -> dict:
    project = load_project(SHOP_FILE)
    name = "maintained" if maintained else "left"
    landing = settings.home / "cdc_stream_growth" / name
    resource = lakehouse(settings, f"bench_cdc_growth_{name}", landing)
    done: list[AssetObservation] = []
    due = maintenance_when_due(resource, project.maintenance, log=lambda _: None)

    def maintain(tables: list[str]) -> list[AssetObservation]:
        observed = due(tables)
        done.extend(observed)
        return observed

    stream = CdcStream(project, resource, "shop", instance=DagsterInstance.ephemeral(), log=lambda _: None,
                       maintain=maintain if maintained else None)
    passes = []
    for take in takes:
        _land(generated, landing, take)
        started = time.perf_counter()
        for table in stream.tables:
            stream._pass(table)
        passes.append(time.perf_counter() - started)
    files = {t: len(resource.iceberg_table(t).inspect.files()) for t in
             ("silver_orders", "silver_orders_history", "silver_customers", "silver_customers_history")}
    state = {t: sorted(map(repr, resource.spark.table(resource.table_id(f"silver_{t}")).collect())) for t in TABLES}
    seconds = [float(o.metadata["maintenance/seconds"].value) for o in done]
    return {"passes_s": [round(s, 2) for s in passes], "first_s": statistics.mean(passes[1:1 + EDGE]),
            "last_s": statistics.mean(passes[-EDGE:]), "total_s": sum(passes[1:]), "files": files,
            "actions": [(o.asset_key.to_user_string(), o.metadata["maintenance/action"].value) for o in done],
            "maintenance_s": sum(seconds), "state": state}


def run(spark: SparkSession, settings: Settings, takes: int = 20, changes_per_take: int = 500) -> dict:
    del spark  # the streams use the benchmark's session through their resource
    generated = settings.home / "cdc_stream_growth" / "generated"
    generate_cdc(generated, [dt.date(2025, 1, 1)], changes_per_day=takes * changes_per_take, files_per_day=takes,
                 malformed_rate=0.0)
    names = sorted({f.name for t in TABLES for f in (generated / "cdc" / t).rglob("*.jsonl*")})
    variants = {"maintained": _variant(settings, generated, names, maintained=True),
                "left": _variant(settings, generated, names, maintained=False)}
    same = variants["maintained"].pop("state") == variants["left"].pop("state")
    for v in variants.values():
        v["growth"] = v["last_s"] / v["first_s"]
    return {"params": {"takes": len(names), "changes_per_take": changes_per_take, "edge": EDGE},
            "variants": variants, "same_silver": same,
            "last_left_over_maintained": variants["left"]["last_s"] / variants["maintained"]["last_s"]}


def markdown(results: dict) -> str:
    p, v = results["params"], results["variants"]
    m, left = v["maintained"], v["left"]
    compactions = sum(1 for _, action in m["actions"] if action == "compact")
    thinnings = sum(1 for _, action in m["actions"] if action == "expire")
    reached = m["growth"] <= TARGET
    rows = [
        ("mean pass, passes 2-{}".format(1 + p["edge"]), f"{m['first_s']:.1f}", f"{left['first_s']:.1f}"),
        (f"mean pass, the last {p['edge']}", f"{m['last_s']:.1f}", f"{left['last_s']:.1f}"),
        ("last / first", f"{m['growth']:.2f}x", f"{left['growth']:.2f}x"),
        ("all passes but the first (s)", f"{m['total_s']:.0f}", f"{left['total_s']:.0f}"),
        ("data and delete files of silver and history at the end",
         str(sum(m["files"].values())), str(sum(left["files"].values()))),
    ]
    return "\n".join([
        f"### A CDC stream over time: {p['takes']} passes, maintained by the stream and not",
        "",
        f"`lakehouse stream --source shop` in this process (one pass over customers and orders after each take "
        f"lands, about {p['changes_per_take']:,} changes a take, generated): maintained as `lakehouse stream` runs "
        "it (each table it wrote to compacted or thinned after a pass once it crosses the declaration's "
        "maintenance thresholds), and with `--no-maintenance` and no daemon. Each on a namespace of its own; the "
        "first pass of each left out.",
        "",
        "| | maintained by the stream | `--no-maintenance` |",
        "|---|---|---|",
        *(f"| {a} | {b} | {c} |" for a, b, c in rows),
        "",
        f"Maintained: {compactions} compactions and {thinnings} thinnings in {m['maintenance_s']:.1f} s, inside "
        f"the passes above. Silver equal in both at the end: {'yes' if results['same_silver'] else '**no**'}. "
        f"The last passes left alone take {results['last_left_over_maintained']:.2f}x the maintained ones. "
        f"Target: the maintained stream's last passes at most {TARGET}x its first: "
        f"**{'reached' if reached else 'not reached'}** ({m['growth']:.2f}x).",
        "",
        f"Passes (s): maintained {m['passes_s']}; left {left['passes_s']}.",
        "",
    ])
