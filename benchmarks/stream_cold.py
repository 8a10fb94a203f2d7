"""The stream from a cold start: `lakehouse stream` started on a fresh lakehouse (a service after a deploy) while
files already land at a steady rate.

The stream's process is started and the producer starts at once: a landing file for today every INTERVAL seconds
at RATE events/s for SECONDS (written whole, then renamed, as an uploader would). Nothing is warmed: the JVM,
the tables and the batch's code paths are all new when the first file lands. Per file: lag = the time
gold_minute_activity's commit holding it was published - the time the file landed. Reported: the first file's
lag, the lag of the files in order (first tenth, last tenth, and by windows of landing time), the steady lag (the
last third of the files), and how long after the stream's start it settled (the window from which on every
window's mean lag is within the steady p95).

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

from .stream_capacity import SHOP, _pct, land_file, stream_batches

RATE, INTERVAL, SECONDS = 5_000, 2.0, 150
WINDOW = 10  # seconds of landing time per window of the lag's course
TARGET_FIRST_S, TARGET_SETTLED_S = 30.0, 60.0


def run(rate: int = RATE, seconds: float = SECONDS, interval: float = INTERVAL, trigger: float = 1.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="lakehouse-cold-") as tmp:
        home = Path(tmp)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_HOME"))},
               "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PROJECT": str(SHOP),
               "LAKEHOUSE_PII_KEY": "bench-key-for-pseudonyms-in-benchmarks"}
        folder = home / "landing" / "events" / f"date={dt.datetime.now(dt.timezone.utc).date().isoformat()}"
        folder.mkdir(parents=True)
        log = open(home / "stream.log", "w")
        started = time.time()
        stream = subprocess.Popen(
            [sys.executable, "-m", "lakehouse_assets.cli", "stream", "--no-dagster", "--json",
             "--trigger-seconds", str(trigger), "--until-idle", "20"],
            env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        rng = random.Random(13)
        per_file = int(rate * interval)
        landed, n, late = 0, 0, 0.0
        clock = time.monotonic()
        while n * interval < seconds:
            due = clock + n * interval
            late = max(late, time.monotonic() - due)
            time.sleep(max(0.0, due - time.monotonic()))
            land_file(folder, n, per_file, landed, rng)
            landed, n = landed + per_file, n + 1
        batches = stream_batches(stream, home, landed, timeout=1800)

    files = sorted((t, dt.datetime.fromisoformat(b["visible_at"]).timestamp() - t)
                   for b in batches for t in b["landed_at"])
    lags = [lag for _, lag in files]
    steady = lags[len(lags) * 2 // 3:]
    steady_p95 = _pct(steady, 0.95)
    # The lag by when the file landed, in windows of WINDOW seconds after the start (mean of the window's files);
    # settled: the start of the first window from which on every window's mean is within the steady p95.
    windows: dict[int, list[float]] = {}
    for t, lag in files:
        windows.setdefault(int((t - started) // WINDOW), []).append(lag)
    means = {w * WINDOW: round(statistics.mean(v), 1) for w, v in sorted(windows.items())}
    settled_at = max((at for at, mean in means.items() if mean > steady_p95), default=-WINDOW) + WINDOW
    tenth = max(1, len(lags) // 10)
    first_batches = sorted(batches, key=lambda b: b["visible_at"])[:3]
    return {
        "params": {"rate": rate, "seconds": seconds, "file_every_s": interval, "trigger_s": trigger},
        "events": landed, "files": n, "batches": len(batches), "producer_late_s": round(late, 1),
        "first_file_lag_s": round(lags[0], 1),
        "first_file_landed_after_start_s": round(files[0][0] - started, 1),
        "first_tenth_lag_mean_s": round(statistics.mean(lags[:tenth]), 1),
        "last_tenth_lag_mean_s": round(statistics.mean(lags[-tenth:]), 1),
        "steady_lag_p50_s": round(_pct(steady, 0.5), 1), "steady_lag_p95_s": round(steady_p95, 1),
        "settled_after_start_s": settled_at, "lag_by_window_s": means,
        "first_batches": [{"files": len(b["landed_at"]), "seconds": round(b["seconds"], 1),
                           "stages": {k: round(v, 1) for k, v in b["stage_seconds"].items()}} for b in first_batches],
    }


def markdown(r: dict) -> str:
    p = r["params"]
    first_ok = r["first_file_lag_s"] <= TARGET_FIRST_S
    settled_ok = r["settled_after_start_s"] <= TARGET_SETTLED_S
    batches = "; ".join(f"{b['files']} files in {b['seconds']} s ({', '.join(f'{k} {v}' for k, v in b['stages'].items())})"
                        for b in r["first_batches"])
    return "\n".join([
        "### Stream from a cold start: a fresh lakehouse, files landing from the moment `lakehouse stream` starts",
        "",
        f"`lakehouse stream` (its own process, trigger {p['trigger_s']:g} s) started on a fresh lakehouse while a "
        f"producer on the same two cores landed a file every {p['file_every_s']:g} s at {p['rate']:,} events/s for "
        f"{p['seconds']:g} s, beginning with the stream's start (its first file {r['first_file_landed_after_start_s']} s "
        f"after it): {r['events']:,} events in {r['files']} files and {r['batches']} micro-batches, every one in bronze "
        f"and gold_minute_activity at the end (the producer at most {r['producer_late_s']} s late). Nothing was warm: "
        "the JVM, the tables and the batch's code are new when the first file lands.",
        "",
        "| | seconds |",
        "|---|---|",
        f"| the first file landed -> in gold | {r['first_file_lag_s']} |",
        f"| mean lag of the first tenth of the files | {r['first_tenth_lag_mean_s']} |",
        f"| mean lag of the last tenth | {r['last_tenth_lag_mean_s']} |",
        f"| steady lag (the last third of the files), p50 / p95 | {r['steady_lag_p50_s']} / {r['steady_lag_p95_s']} |",
        f"| the stream's start -> the lag settled (every later {WINDOW} s of files within the steady p95 on "
        f"average) | {r['settled_after_start_s']} |",
        "",
        f"The mean lag of the files landed in each {WINDOW} s after the start: "
        + ", ".join(f"{at}: {lag}" for at, lag in r["lag_by_window_s"].items()) + ".",
        "",
        f"The first micro-batches: {batches}.",
        "",
        f"Targets: the first file in gold within {TARGET_FIRST_S:g} s: **{'reached' if first_ok else 'not reached'}** "
        f"({r['first_file_lag_s']} s); at the steady lag within {TARGET_SETTLED_S:g} s of the start: "
        f"**{'reached' if settled_ok else 'not reached'}** ({r['settled_after_start_s']} s).",
    ])


if __name__ == "__main__":
    result = run()
    print(json.dumps(result, indent=2))
    print(markdown(result))
