"""Freshness: events land continuously; how long until they are in gold_minute_activity.

A producer writes a landing file for today every INTERVAL seconds (written whole,
then renamed, as an uploader would) at RATE events per second for DURATION
seconds, while `lakehouse stream` runs as its own process (its own JVM, as in
production, not reporting to Dagster). Each micro-batch reports when each of its
files landed (the file's modification time) and when gold_minute_activity's
commit holding it was published; lag = published - landed, per file. Where the
time goes: per micro-batch, the bronze, silver and gold stages, and the wait
before a batch starts (the trigger and the batch before it).

The run counts only if every landed event is in bronze and gold at the end.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SHOP = ROOT / "examples" / "shop" / "lakehouse.yaml"


def _lines(n: int, first: int, now: dt.datetime, rng: random.Random) -> str:
    out = []
    for i in range(first, first + n):
        ts = now - dt.timedelta(seconds=rng.uniform(0, 3))  # a little out of order, as devices deliver
        kind = rng.choices(("page_view", "add_to_cart", "purchase"), (80, 15, 5))[0]
        event = {"event_id": f"ev-{i:09d}", "user_id": f"u{rng.randrange(5_000)}", "session_id": f"s{rng.randrange(20_000)}",
                 "event_type": kind, "event_ts": ts.isoformat().replace("+00:00", "Z"),
                 "properties": {"user_agent": "Mozilla/5.0"}}
        if kind == "purchase":
            event["price"] = f"{rng.uniform(1, 200):.2f}"
        out.append(json.dumps(event))
    return "\n".join(out) + "\n"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(rate: int = 1_000, duration: float = 300, interval: float = 2.0, trigger: float = 2.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="lakehouse-freshness-") as tmp:
        home = Path(tmp)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_HOME"))},
               "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PROJECT": str(SHOP), "LAKEHOUSE_PII_KEY": "bench-key"}
        today = dt.datetime.now(dt.timezone.utc).date()
        folder = home / "landing" / "events" / f"date={today.isoformat()}"
        folder.mkdir(parents=True)
        log = open(home / "stream.log", "w")
        stream = subprocess.Popen(
            [sys.executable, "-m", "lakehouse_assets.cli", "stream", "--no-dagster", "--json",
             "--trigger-seconds", str(trigger), "--until-idle", "30"],
            env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        rng = random.Random(11)
        per_file = int(rate * interval)
        time.sleep(15)  # the stream's JVM starts before the clock does: it is a long-lived service
        started = time.monotonic()
        landed = 0
        n = 0
        while time.monotonic() - started < duration:
            due = started + n * interval
            time.sleep(max(0.0, due - time.monotonic()))
            part = folder / f".f{n:05d}.jsonl.part"
            part.write_text(_lines(per_file, landed, dt.datetime.now(dt.timezone.utc), rng))
            part.rename(folder / f"f{n:05d}.jsonl")
            landed += per_file
            n += 1
        produced_s = time.monotonic() - started
        out, _ = stream.communicate(timeout=duration + 900)
        if stream.returncode != 0:
            raise RuntimeError(f"lakehouse stream exited {stream.returncode}: see {home / 'stream.log'}")
        batches = json.loads(out)

        settings = Settings.from_env(home=home, project=str(SHOP), namespace="lake")
        catalog = catalog_for(settings)
        bronze = catalog.load_table((settings.namespace, "bronze_events")).scan().count()
        gold_events = sum(catalog.load_table((settings.namespace, "gold_minute_activity")).scan(
            selected_fields=("events",)).to_arrow().column("events").to_pylist())
        if bronze != landed or gold_events != landed:
            raise AssertionError(f"landed {landed} events; bronze holds {bronze}, gold counts {gold_events}")

    lags, waits = [], []
    for b in batches:
        visible = dt.datetime.fromisoformat(b["visible_at"]).timestamp()
        lags += [visible - t for t in b["landed_at"]]
        work = b["seconds"]
        waits += [max(0.0, visible - work - t) for t in b["landed_at"]]
    stages = {s: statistics.mean(b["stage_seconds"].get(s, 0.0) for b in batches) for s in ("bronze", "silver", "gold")}
    return {
        "params": {"rate_per_s": rate, "duration_s": duration, "file_every_s": interval, "trigger_s": trigger,
                   "events_per_file": per_file},
        "events": landed, "files": n, "produced_s": round(produced_s, 1), "achieved_rate": round(landed / produced_s),
        "batches": len(batches), "files_per_batch": round(n / max(1, len(batches)), 1),
        "lag_p50_s": round(_pct(lags, 0.5), 1), "lag_p95_s": round(_pct(lags, 0.95), 1),
        "lag_max_s": round(max(lags), 1),
        "wait_p50_s": round(_pct(waits, 0.5), 1),
        "batch_s_mean": round(statistics.mean(b["seconds"] for b in batches), 1),
        "stage_s_mean": {k: round(v, 2) for k, v in stages.items()},
    }


def markdown(r: dict) -> str:
    p = r["params"]
    met = "met" if r["lag_p95_s"] < 60 else "missed"
    return "\n".join([
        "### Freshness (landing-to-gold lag)",
        "",
        f"`lakehouse stream` (its own process, trigger {p['trigger_s']:g} s) while a producer landed a file of "
        f"{p['events_per_file']:,} events every {p['file_every_s']:g} s for {r['produced_s']:g} s: "
        f"{r['events']:,} events in {r['files']} files ({r['achieved_rate']:,} events/s), every one in bronze and "
        f"in gold_minute_activity at the end.",
        "",
        "| lag from landing to gold_minute_activity | seconds |",
        "|---|---|",
        f"| p50 | {r['lag_p50_s']} |",
        f"| p95 | {r['lag_p95_s']} |",
        f"| max | {r['lag_max_s']} |",
        "",
        f"Target p95 under 60 s: {met}. Where the time goes: {r['batches']} micro-batches of "
        f"{r['files_per_batch']} files on average, {r['batch_s_mean']} s each (bronze "
        f"{r['stage_s_mean']['bronze']} s, silver {r['stage_s_mean']['silver']} s, gold "
        f"{r['stage_s_mean']['gold']} s); a file waits {r['wait_p50_s']} s (p50) for its batch to start "
        "(the batch before it and the trigger).",
        "",
    ])


if __name__ == "__main__":
    result = run(rate=int(os.environ.get("RATE", "1000")), duration=float(os.environ.get("DURATION", "300")))
    print(json.dumps(result, indent=2))
    print(markdown(result))
