"""Stream capacity: events land at stepped rates; per rate, how long until they are in gold_minute_activity.

A producer writes a landing file for today every INTERVAL seconds (written whole,
then renamed, as an uploader would), at each rate of RATES in turn for STEP
seconds, while `lakehouse stream` runs as its own process (its own JVM, as in
production, not reporting to Dagster). Each micro-batch reports when each of its
files landed (the file's modification time) and when gold_minute_activity's
commit holding it was published; lag = published - landed, per file. Per rate:
the lag's p50/p95, and whether the backlog grew (the step's last files waited
longer than its first ones by more than a batch). The producer shares the two
cores with the stream.

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
from dataclasses import dataclass, field
from pathlib import Path

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SHOP = ROOT / "examples" / "shop" / "lakehouse.yaml"
RATES = (1_000, 5_000, 10_000, 20_000, 50_000)
TARGET_RATE, TARGET_P95, TARGET_P95_SLOW = 20_000, 30.0, 10.0
WARMUP = 0  # the step of the warm-up's files, landed at the first rate before the steps begin


def _lines(n: int, first: int, now: dt.datetime, rng: random.Random) -> str:
    out = []
    for i in range(first, first + n):
        ts = now - dt.timedelta(seconds=rng.uniform(0, 3))  # a little out of order, as devices deliver
        kind = rng.choices(("page_view", "add_to_cart", "purchase"), (80, 15, 5))[0]
        event = {"event_id": f"ev-{i:09d}", "user_id": f"u{rng.randrange(5_000)}",
                 "session_id": f"s{rng.randrange(20_000)}", "event_type": kind,
                 "event_ts": ts.isoformat().replace("+00:00", "Z"), "properties": {"user_agent": "Mozilla/5.0"}}
        if kind == "purchase":
            event["price"] = f"{rng.uniform(1, 200):.2f}"
        out.append(json.dumps(event))
    return "\n".join(out) + "\n"


def land_file(folder: Path, n: int, events: int, first: int, rng: random.Random) -> None:
    """Land file number `n` today: `events` events numbered from `first`, written whole, then renamed, as an
    uploader would."""
    part = folder / f".f{n:05d}.jsonl.part"
    part.write_text(_lines(events, first, dt.datetime.now(dt.timezone.utc), rng))
    part.rename(folder / f"f{n:05d}.jsonl")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def stream_batches(stream: subprocess.Popen, home: Path, landed: int, timeout: float) -> list[dict]:
    """The batches `lakehouse stream --json` reported once it ended, after checking that every one of the `landed`
    events is in bronze and counted in gold_minute_activity (a run that lost any does not count)."""
    out, _ = stream.communicate(timeout=timeout)
    if stream.returncode != 0:
        raise RuntimeError(f"lakehouse stream exited {stream.returncode}: see {home / 'stream.log'}")
    settings = Settings.from_env(home=home, project=str(SHOP), namespace="lake")
    catalog = catalog_for(settings)
    bronze = catalog.load_table((settings.namespace, "bronze_events")).scan().count()
    gold_events = sum(catalog.load_table((settings.namespace, "gold_minute_activity")).scan(
        selected_fields=("events",)).to_arrow().column("events").to_pylist())
    if bronze != landed or gold_events != landed:
        raise AssertionError(f"landed {landed} events; bronze holds {bronze}, gold counts {gold_events}")
    return json.loads(out)


@dataclass
class _Produced:
    """What the producer landed: events and files in all, when each step began (epoch seconds, rate), and how late
    its latest file of each step was (seconds)."""

    events: int = 0
    files: int = 0
    began: list[tuple[float, int]] = field(default_factory=list)
    late: dict[int, float] = field(default_factory=dict)


def run(rates: tuple[int, ...] = RATES, step: float = 60, interval: float = 2.0, trigger: float = 1.0,
        warmup: float = 30) -> dict:
    with tempfile.TemporaryDirectory(prefix="lakehouse-capacity-") as tmp:
        home = Path(tmp)
        today = dt.datetime.now(dt.timezone.utc).date()
        folder = home / "landing" / "events" / f"date={today.isoformat()}"
        folder.mkdir(parents=True)
        stream = _start_stream(home, trigger)
        time.sleep(15)  # the stream's JVM starts before the clock does: it is a long-lived service
        produced = _produce(folder, rates, step, interval, warmup)
        batches = stream_batches(stream, home, produced.events, timeout=3600)

    by_rate = _lags_by_rate(batches, produced.began, rates)
    warm = [lag for _, lag in by_rate.pop(WARMUP)]
    batches = [b for b in batches if min(b["landed_at"]) >= produced.began[-len(rates)][0]]  # the steps' batches
    mean_batch = statistics.mean(b["seconds"] for b in batches)
    steps = [_step(rate, by_rate[rate], mean_batch, produced.late[rate]) for rate in rates]
    stages = {s: round(statistics.mean(b["stage_seconds"].get(s, 0.0) for b in batches), 2)
              for s in ("bronze", "silver", "gold")}
    return {
        "params": {"rates": list(rates), "step_s": step, "file_every_s": interval, "trigger_s": trigger,
                   "warmup_s": warmup},
        "warmup": {"files": len(warm), "lag_p50_s": round(_pct(warm, 0.5), 1) if warm else None,
                   "lag_p95_s": round(_pct(warm, 0.95), 1) if warm else None},
        "events": produced.events, "files": produced.files, "batches": len(batches),
        "batch_s_mean": round(mean_batch, 1),
        "files_per_batch": round(sum(len(b["landed_at"]) for b in batches) / max(1, len(batches)), 1),
        "stage_s_mean": stages, "steps": steps,
    }


def _start_stream(home: Path, trigger: float) -> subprocess.Popen:
    """`lakehouse stream` over the shop project in `home`, as a process of its own; its log in home/stream.log."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_HOME"))},
           "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PROJECT": str(SHOP),
           "LAKEHOUSE_PII_KEY": "bench-key-for-pseudonyms-in-benchmarks"}
    with open(home / "stream.log", "w") as log:  # the stream writes to its own copy of the file
        return subprocess.Popen(
            [sys.executable, "-m", "lakehouse_assets.cli", "stream", "--no-dagster", "--json",
             "--trigger-seconds", str(trigger), "--until-idle", "30"],
            env=env, stdout=subprocess.PIPE, stderr=log, text=True)


def _produce(folder: Path, rates: tuple[int, ...], step: float, interval: float, warmup: float) -> _Produced:
    """Land a file every `interval` seconds: first the warm-up at the first rate (the stream creates its tables and
    its JVM compiles the batch's code), then `step` seconds at each rate."""
    rng = random.Random(11)
    produced = _Produced()
    for rate, events_per_s, seconds in [(WARMUP, rates[0], warmup), *((r, r, step) for r in rates)]:
        produced.began.append((time.time(), rate))
        late = _land_step(folder, produced, int(events_per_s * interval), seconds, interval, rng)
        produced.late[rate] = round(late, 1)
        if rate == WARMUP and seconds:
            time.sleep(interval * 5)  # the warm-up's last batches end before the first step begins
    return produced


def _land_step(folder: Path, produced: _Produced, per_file: int, seconds: float, interval: float,
               rng: random.Random) -> float:
    """Land a file of `per_file` events every `interval` seconds for `seconds`, counting them in `produced`;
    how late the latest file was."""
    started = time.monotonic()
    k, late = 0, 0.0
    while k * interval < seconds:
        due = started + k * interval
        late = max(late, time.monotonic() - due)
        time.sleep(max(0.0, due - time.monotonic()))
        land_file(folder, produced.files, per_file, produced.events, rng)
        produced.events += per_file
        produced.files, k = produced.files + 1, k + 1
    return late


def _lags_by_rate(batches: list[dict], began: list[tuple[float, int]],
                  rates: tuple[int, ...]) -> dict[int, list[tuple[float, float]]]:
    """(landed, lag) of each file, by the rate of the step it landed in (its modification time says which)."""
    by_rate: dict[int, list[tuple[float, float]]] = {r: [] for r in (WARMUP, *rates)}
    for b in batches:
        visible = dt.datetime.fromisoformat(b["visible_at"]).timestamp()
        for t in b["landed_at"]:
            rate = next((r for at, r in reversed(began) if at <= t), began[0][1])
            by_rate[rate].append((t, visible - t))
    return by_rate


def _step(rate: int, files: list[tuple[float, float]], mean_batch: float, producer_late: float) -> dict:
    """One step's lags; its backlog grew when its last files waited longer than its first by more than a batch."""
    lags = [lag for _, lag in sorted(files)]
    head, tail = statistics.median(lags[:5]), statistics.median(lags[-5:])
    return {"rate": rate, "files": len(files), "lag_p50_s": round(_pct(lags, 0.5), 1),
            "lag_p95_s": round(_pct(lags, 0.95), 1), "first_files_lag_s": round(head, 1),
            "last_files_lag_s": round(tail, 1), "backlog_grew": tail > head + mean_batch,
            "producer_late_s": producer_late}


def sustained(r: dict, p95: str = "lag_p95_s") -> int:
    """The highest rate whose backlog did not grow and whose p95 (the steps' figure `p95`) met the target, below
    every rate that failed."""
    best = 0
    for s in r["steps"]:
        if s["backlog_grew"] or s[p95] > TARGET_P95:
            break
        best = s["rate"]
    return best


def markdown(r: dict) -> str:
    p = r["params"]
    rows = [f"| {s['rate']:,} | {s['files']} | {s['lag_p50_s']} | {s['lag_p95_s']} | {s['first_files_lag_s']} -> "
            f"{s['last_files_lag_s']} | {'yes' if s['backlog_grew'] else 'no'} |" for s in r["steps"]]
    best = sustained(r)
    slow = r["steps"][0]
    return "\n".join([
        "### Stream capacity: landing -> gold_minute_activity at stepped rates",
        "",
        f"`lakehouse stream` (its own process, trigger {p['trigger_s']:g} s) while a producer on the same two cores "
        f"landed a file every {p['file_every_s']:g} s, {p['step_s']:g} s at each rate in turn: {r['events']:,} events "
        f"in {r['files']} files, every one in bronze and in gold_minute_activity at the end. {_pace(r['steps'])} Before the "
        f"steps, {p['warmup_s']:g} s of files at {p['rates'][0]:,} events/s warm the stream up, as a long-lived "
        f"service is warm: its first batches create its tables and its JVM compiles the batch's code (their lag: "
        f"p50 {r['warmup']['lag_p50_s']} s, p95 {r['warmup']['lag_p95_s']} s; not counted in the steps).",
        "",
        "| events/s | files | lag p50 (s) | lag p95 (s) | lag of the step's first -> last files (s) | backlog grew |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"{r['batches']} micro-batches of {r['files_per_batch']} files on average, {r['batch_s_mean']} s each "
        f"(bronze {r['stage_s_mean']['bronze']} s, silver {r['stage_s_mean']['silver']} s, gold "
        f"{r['stage_s_mean']['gold']} s). The backlog grew at a rate when the step's last files waited longer than "
        "its first by more than a mean batch; once it grows, the next steps start behind.",
        "",
        f"Sustained (backlog steady, p95 at most {TARGET_P95:g} s): {best:,} events/s. Targets: at least "
        f"{TARGET_RATE:,} events/s sustained: **{'reached' if best >= TARGET_RATE else 'not reached'}**; p95 at most "
        f"{TARGET_P95_SLOW:g} s at {slow['rate']:,} events/s: "
        f"**{'reached' if slow['lag_p95_s'] <= TARGET_P95_SLOW else 'not reached'}** ({slow['lag_p95_s']} s).",
        "" if best >= TARGET_RATE and slow["lag_p95_s"] <= TARGET_P95_SLOW else
        "\nA file's lag is at least the batch it lands behind plus its own: the stages above are a floor the trigger "
        "cannot lower. Profiled (Spark's SQL timings and the driver's stacks, 2026-11-24, not by this benchmark): a "
        "batch is some 30 Spark queries and 6 commits; with large files, silver's write (deduplication and judging), "
        "its audit (a Spark job per check, on rows read once) and gold's MERGE take most of it. Next: the batch's "
        "three publishes in one catalog transaction, and the audit's checks in fewer passes.\n",
    ])


if __name__ == "__main__":
    result = run(step=float(os.environ.get("STEP", "60")))
    print(json.dumps(result, indent=2))
    print(markdown(result))


def _pace(steps: list[dict]) -> str:
    """What the producer's lateness says: the rates are what was landed only where it kept its pace."""
    late = {s["rate"]: s["producer_late_s"] for s in steps}
    behind = [f"{rate:,}/s ({seconds} s)" for rate, seconds in late.items() if seconds > 1.0]
    if not behind:
        return f"The producer kept its pace at every rate (a file at most {max(late.values())} s late)."
    return (f"The producer fell behind at {', '.join(behind)} (its latest file that late): at those rates fewer "
            "events landed than the step names.")
