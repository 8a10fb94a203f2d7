"""Kafka: events published to a topic at stepped rates; per rate, how long until each is in gold_minute_activity,
beside plain Spark Structured Streaming from such a topic to Parquet.

A local broker (LocalKafka, one topic of PARTITIONS partitions for each side) and a producer in this process
(confluent-kafka, idempotent, keys spread unevenly: 7 records in 10 under one key) publishing the shop's events
(stream_capacity's lines, one per record) at each rate of RATES in turn for STEP seconds, after a warm-up at the
first rate that is not counted. Two consumers, one after the other, never at once, each a process of its own:

- ours: `lakehouse stream` on the shop's declaration with its events on the topic. Each batch takes the committed
  offsets the ingest log does not hold into bronze (the ranges and the records in one commit), then silver, then
  gold_minute_activity; its JSON report names the ranges it took and when gold's commit was published
  (`visible_at`). A record's freshness = that time - its Kafka timestamp (the producer's CreateTime, as the
  delivery report gives it with the record's partition and offset).
- the peer: what a user would write instead, a PySpark script that imports nothing of ours:
  `readStream.format("kafka")` (read_committed), `from_json` on the value, Parquet with a checkpoint, a trigger
  every second. A record's freshness = the modification time of the sink's log file of the batch that wrote it
  (`_spark_metadata/<batch>`: the batch is visible to readers of the folder once it is there) - its Kafka
  timestamp. Spark's Kafka source comes from the same jar files our sessions load (jars.tsv, use `kafka`).

Per rate and side: freshness p50/p95, the events made visible per second during the step, and whether the backlog
grew (the step's last records waited longer than its first ones by more than a mean batch). The run counts only if
every published record is in bronze once and counted in gold, and in the peer's Parquet once.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
from confluent_kafka import Producer

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.runtime.jars import jars_for
from lakehouse_assets.settings import Settings
from lakehouse_services.kafka import LocalKafka

from . import stream_capacity
from .stream_capacity import SHOP, TARGET_P95, _lines, _pct

RATES = (1_000, 5_000, 20_000)
PARTITIONS = 3
WARMUP = 0  # the warm-up's step: records published at the first rate before the steps begin
TICK = 0.1  # the producer publishes a tick's records every TICK seconds
IDLE = 30.0  # each consumer stops after this long without a record
SPARK_MASTER, DRIVER_MEMORY = "local[*]", "4g"  # the peer's, as our stream's default settings have them
OUR_BATCH = re.compile(r"^batch \S+: \d+ offset ranges, (\d+) records", re.M)  # the stream's log line
PEER_BATCH = re.compile(r'^\{"batch": \d+, "records": (\d+)', re.M)  # the peer's stdout line

# The peer: plain PySpark, nothing of ours. argv: bootstrap servers, topic, output folder, checkpoint, jars
# (comma-separated), master, driver memory, trigger seconds, idle seconds. stdout: one JSON line per batch that
# took records; stderr: "started" once the query runs.
PEER = textwrap.dedent('''\
    import json
    import sys
    import time

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType, MapType, StringType, StructField, StructType, TimestampType

    bootstrap, topic, out, checkpoint, jars, master, memory, trigger, idle = sys.argv[1:]
    spark = (SparkSession.builder.master(master).appName("kafka-to-parquet")
             .config("spark.driver.memory", memory)
             .config("spark.jars", jars)
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             # every batch's log file kept (not only the compacted ones): each one's time is measured
             .config("spark.sql.streaming.fileSink.log.deletion", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    schema = StructType([
        StructField("event_id", StringType()), StructField("user_id", StringType()),
        StructField("session_id", StringType()), StructField("event_type", StringType()),
        StructField("event_ts", TimestampType()), StructField("ip", StringType()),
        StructField("email", StringType()), StructField("properties", MapType(StringType(), StringType())),
        StructField("price", DecimalType(12, 2)),
    ])
    records = (spark.readStream.format("kafka")
               .option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic)
               .option("startingOffsets", "earliest")
               .option("kafka.isolation.level", "read_committed")
               .load())
    events = records.select(F.from_json(F.col("value").cast("string"), schema).alias("event"),
                            "partition", "offset", "timestamp").select("event.*", "partition", "offset", "timestamp")
    query = (events.writeStream.format("parquet")
             .option("path", out)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime=f"{trigger} seconds")
             .start())
    print("started", file=sys.stderr, flush=True)
    seen, last = set(), time.monotonic()
    while query.isActive and time.monotonic() - last < float(idle):
        time.sleep(0.5)
        for progress in query.recentProgress:
            p = progress if isinstance(progress, dict) else json.loads(progress.json)
            if p["batchId"] in seen or not p["numInputRows"]:
                continue
            seen.add(p["batchId"])
            last = time.monotonic()
            print(json.dumps({"batch": p["batchId"], "records": p["numInputRows"],
                              "seconds": p["durationMs"].get("triggerExecution", 0) / 1000}), flush=True)
    if query.exception() is not None:
        raise SystemExit(f"the query failed: {query.exception()}")
    query.stop()
''')


@dataclass
class _Published:
    """What the producer published, as the broker acknowledged it: each record's partition, offset and Kafka
    timestamp (ms), when each step began (epoch seconds, rate), how late its latest tick was, and when it ended."""

    partition: array[int] = field(default_factory=lambda: array("b"))
    offset: array[int] = field(default_factory=lambda: array("q"))
    timestamp: array[int] = field(default_factory=lambda: array("q"))
    began: list[tuple[float, int]] = field(default_factory=list)
    late: dict[int, float] = field(default_factory=dict)
    ended: float = 0.0
    failed: int = 0

    def __len__(self) -> int:
        return len(self.offset)

    def delivered(self, error, message) -> None:
        if error is not None:
            self.failed += 1
            return
        self.partition.append(message.partition())
        self.offset.append(message.offset())
        self.timestamp.append(message.timestamp()[1])


def run(rates: tuple[int, ...] = RATES, step: float = 50, warmup: float = 30, trigger: float = 1.0) -> dict:
    # The events, made before either side runs (some 35 us each in Python: made as they are published, the
    # producer could not keep 20,000/s beside a busy consumer on two cores) but for their time, stamped as they are
    # published; both sides publish the same ones.
    events = _Events(int(rates[0] * warmup + sum(r * step for r in rates) * 1.01))
    with tempfile.TemporaryDirectory(prefix="lakehouse-kafka-") as tmp:
        root = Path(tmp)
        with LocalKafka(root / "kafka", partitions=PARTITIONS) as kafka:
            ours = _ours(kafka, root / "ours", events, rates, step, warmup, trigger)
            peer = _peer(kafka, root / "peer", events, rates, step, warmup, trigger)
    return {"params": {"rates": list(rates), "step_s": step, "warmup_s": warmup, "trigger_s": trigger,
                       "partitions": PARTITIONS, "idle_s": IDLE},
            "ours": ours, "peer": peer}


# -- the producer ------------------------------------------------------------------------------------------------


class _Events:
    """The shop's events as JSON values (stream_capacity's lines), numbered from 0, made ahead but for their time:
    each value is kept as the text before and after its event_ts, which `take` fills with the time it is published,
    a little out of order (up to 3 s earlier), as stream_capacity's lines are."""

    TS = '"event_ts": "'

    def __init__(self, count: int):
        self.rng = random.Random(11)
        self.parts: list[tuple[str, str]] = []
        self._make(count)

    def _make(self, count: int) -> None:
        for line in _lines(count, len(self.parts), dt.datetime.now(dt.timezone.utc), self.rng).splitlines():
            head, _, rest = line.partition(self.TS)
            self.parts.append((head + self.TS, rest[rest.index('"'):]))

    def take(self, first: int, count: int) -> list[str]:
        if first + count > len(self.parts):  # more ticks than planned: made now
            self._make(first + count - len(self.parts))
        now = dt.datetime.now(dt.timezone.utc)
        times = [(now - dt.timedelta(seconds=k / 10)).isoformat().replace("+00:00", "Z") for k in range(30)]
        return [head + times[(first + i) * 7 % 30] + tail
                for i, (head, tail) in enumerate(self.parts[first:first + count])]


def _produce(kafka: LocalKafka, topic: str, events: _Events, rates: tuple[int, ...], step: float, warmup: float,
             warmed: Callable[[int], None]) -> _Published:
    """The warm-up at the first rate, `warmed` (which waits for the consumer to have taken it), then `step` seconds
    at each rate: every TICK seconds the tick's records, stamped by the producer as it publishes them."""
    producer = Producer(kafka.client_config(**{"enable.idempotence": True, "linger.ms": 5}))
    published = _Published()
    n = 0
    for rate, per_s, seconds in [(WARMUP, rates[0], warmup), *((r, r, step) for r in rates)]:
        published.began.append((time.time(), rate))
        started, k, late, owed = time.monotonic(), 0, 0.0, 0.0
        while k * TICK < seconds:
            due = started + k * TICK
            late = max(late, time.monotonic() - due)
            while (wait := due - time.monotonic()) > 0:
                producer.poll(wait)  # delivery reports while waiting for the tick
            owed += per_s * TICK
            count = int(owed)
            owed -= count
            if count:
                for i, value in enumerate(events.take(n, count)):
                    _send(producer, topic, n + i, value, published)
                n += count
            producer.poll(0)
            k += 1
        published.late[rate] = round(late, 1)
        if rate == WARMUP:
            if producer.flush(60):
                raise RuntimeError("the producer could not deliver the warm-up's records")
            warmed(len(published))
    published.ended = time.time()
    if producer.flush(120) or published.failed or len(published) != n:
        raise RuntimeError(f"published {n} records: {len(published)} acknowledged, {published.failed} failed")
    return published


def _send(producer: Producer, topic: str, n: int, value: str, published: _Published) -> None:
    key = "hot" if n % 10 < 7 else f"k{n}"
    while True:
        try:
            producer.produce(topic, key=key, value=value, on_delivery=published.delivered)
            return
        except BufferError:  # the client's queue is full: let it deliver
            producer.poll(0.05)


def _wait_taken(log: Path, lines: re.Pattern, process: subprocess.Popen, records: int,
                timeout: float = 600) -> None:
    """Until the consumer's log says its batches took `records` records (the warm-up), then two triggers more."""
    deadline = time.monotonic() + timeout
    while sum(int(m) for m in lines.findall(log.read_text())) < records:
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the consumer did not take the warm-up's {records} records: see {log}")
        time.sleep(0.5)
    time.sleep(2)


@contextlib.contextmanager
def _ended(process: subprocess.Popen) -> Iterator[None]:
    """The process killed on the way out if it is still running (a failed wait, a producer's error)."""
    try:
        yield
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _wait_for(log: Path, text: str, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the consumer did not start: see {log}")
        time.sleep(0.5)


# -- ours --------------------------------------------------------------------------------------------------------


def _shop_on(home: Path, topic: str) -> Path:
    """The shop's declaration with its events on `topic`, in home/shop."""
    shop = home / "shop"
    shutil.copytree(SHOP.parent, shop)
    declaration = shop / "lakehouse.yaml"
    text = declaration.read_text()
    anchor = "    description: Behavioural events of the shop's web site.\n"
    if anchor not in text:
        raise RuntimeError(f"{SHOP} changed: cannot put its events on a topic")
    declaration.write_text(text.replace(anchor, f"{anchor}    kafka: {{topic: {topic}}}\n", 1))
    return declaration


def _ours(kafka: LocalKafka, home: Path, events: _Events, rates: tuple[int, ...], step: float, warmup: float,
          trigger: float) -> dict:
    topic = "bench-ours"
    kafka.create_topic(topic, partitions=PARTITIONS)
    home.mkdir(parents=True)
    declaration = _shop_on(home, topic)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_HOME"))},
           "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PROJECT": str(declaration),
           "LAKEHOUSE_PII_KEY": "bench-key-for-pseudonyms-in-benchmarks",
           "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers}
    log = home / "stream.log"
    with open(log, "w") as err:  # the stream writes to its own copy of the file
        stream = subprocess.Popen(
            [sys.executable, "-m", "lakehouse_assets.cli", "stream", "--no-dagster", "--json",
             "--trigger-seconds", str(trigger), "--until-idle", str(IDLE)],
            env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    with _ended(stream):
        _wait_for(log, "streaming Kafka topic", stream)
        published = _produce(kafka, topic, events, rates, step, warmup, lambda n: _wait_taken(log, OUR_BATCH, stream, n))
        out, _ = stream.communicate(timeout=3600)
    if stream.returncode != 0:
        raise RuntimeError(f"lakehouse stream exited {stream.returncode}: {log.read_text()[-3000:]}")
    batches = json.loads(out)
    _check_lake(home, declaration, len(published))
    visible_of = _ours_visible(batches, published)
    steps_began = published.began[1][0]  # the steps' batches: those visible after the warm-up
    stepped = [b for b in batches if dt.datetime.fromisoformat(b["visible_at"]).timestamp() >= steps_began]
    mean_batch = statistics.mean([b["seconds"] for b in stepped] or [0.0])
    stages = {s: round(statistics.mean([b["stage_seconds"].get(s, 0.0) for b in stepped] or [0.0]), 2)
              for s in ("bronze", "silver", "gold")}
    return {**_summary(published, visible_of, rates, step, mean_batch),
            "batches": len(batches), "stage_s_mean": stages}


def _ours_visible(batches: list[dict], published: _Published) -> array[float]:
    """When each published record was visible in gold: the batch whose ranges hold its offset."""
    # Each record's batch, by the ranges each batch took: partition -> sorted (start, end, visible).
    spans: dict[int, list[tuple[int, int, float]]] = {}
    for b in batches:
        if b["visible_at"] is None:
            raise AssertionError(f"batch {b['batch_id']} did not reach gold: {b}")
        visible = dt.datetime.fromisoformat(b["visible_at"]).timestamp()
        for uri in b["ranges"]:
            partition, offsets = uri.rsplit("/", 2)[1:]
            start, end = map(int, offsets.split("-"))
            spans.setdefault(int(partition), []).append((start, end, visible))
    for ranges in spans.values():
        ranges.sort()
        if any(a[1] > b[0] for a, b in zip(ranges, ranges[1:])):
            raise AssertionError(f"two batches took the same offsets: {ranges}")
    starts = {p: [r[0] for r in ranges] for p, ranges in spans.items()}
    visible_of: array[float] = array("d")
    for partition, offset in zip(published.partition, published.offset):
        ranges = spans.get(partition, [])
        at = bisect.bisect_right(starts.get(partition, []), offset) - 1
        if at < 0 or offset >= ranges[at][1]:
            raise AssertionError(f"record {partition}/{offset} is in no batch's ranges")
        visible_of.append(ranges[at][2])
    return visible_of


def _check_lake(home: Path, declaration: Path, published: int) -> None:
    """Every published record in bronze once and counted in gold_minute_activity (a run that lost any, or took one
    twice, does not count)."""
    settings = Settings.from_env(home=home, project=str(declaration), namespace="lake")
    catalog = catalog_for(settings)
    ids = catalog.load_table((settings.namespace, "bronze_events")).scan(
        selected_fields=("event_id",)).to_arrow().column("event_id")
    gold_events = sum(catalog.load_table((settings.namespace, "gold_minute_activity")).scan(
        selected_fields=("events",)).to_arrow().column("events").to_pylist())
    distinct = pc.count_distinct(ids).as_py()
    if len(ids) != published or distinct != published or gold_events != published:
        raise AssertionError(f"published {published} records; bronze holds {len(ids)} rows ({distinct} events), "
                             f"gold counts {gold_events}")


# -- the peer ----------------------------------------------------------------------------------------------------


def _peer(kafka: LocalKafka, home: Path, events: _Events, rates: tuple[int, ...], step: float, warmup: float,
          trigger: float) -> dict:
    topic = "bench-peer"
    kafka.create_topic(topic, partitions=PARTITIONS)
    home.mkdir(parents=True)
    script, out, log = home / "kafka_to_parquet.py", home / "events", home / "peer.log"
    script.write_text(PEER)
    jars = ",".join(str(p) for p in jars_for({"kafka"}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_HOME", "PYTHONPATH"))}
    with open(log, "w") as err, open(home / "batches.jsonl", "w") as progress:
        peer = subprocess.Popen(
            [sys.executable, str(script), kafka.bootstrap_servers, topic, str(out), str(home / "checkpoint"), jars,
             SPARK_MASTER, DRIVER_MEMORY, f"{trigger:g}", str(IDLE)],
            env=env, stdout=progress, stderr=err, text=True, cwd=home)
    with _ended(peer):
        _wait_for(log, "started", peer)
        published = _produce(kafka, topic, events, rates, step, warmup,
                             lambda n: _wait_taken(home / "batches.jsonl", PEER_BATCH, peer, n))
        peer.wait(timeout=3600)
    if peer.returncode != 0:
        raise RuntimeError(f"the peer exited {peer.returncode}: {log.read_text()[-3000:]}")
    progress_lines = [json.loads(line) for line in (home / "batches.jsonl").read_text().splitlines()]
    logs: list[tuple[int, Path]] = sorted((int(p.name.removesuffix(".compact")), p)
                                          for p in (out / "_spark_metadata").iterdir() if not p.name.startswith("."))
    visible_at, files = _peer_visible(logs)
    if len(visible_at) != len(published):
        raise AssertionError(f"published {len(published)} records; the Parquet output holds {len(visible_at)}")
    visible_of: array[float] = array("d")
    for partition, offset in zip(published.partition, published.offset):
        if (partition, offset) not in visible_at:
            raise AssertionError(f"record {partition}/{offset} is not in the Parquet output")
        visible_of.append(visible_at[(partition, offset)])
    shown = {batch: path.stat().st_mtime for batch, path in logs}
    steps_began = published.began[1][0]  # the steps' batches: those visible after the warm-up
    mean_batch = statistics.mean([b["seconds"] for b in progress_lines if shown.get(b["batch"], 0) >= steps_began]
                                 or [0.0])
    return {**_summary(published, visible_of, rates, step, mean_batch), "batches": len(logs),
            "parquet_files": files}


def _peer_visible(logs: list[tuple[int, Path]]) -> tuple[dict[tuple[int, int], float], int]:
    """When each record (partition, offset) of the peer's output was visible (its batch's log file's time), and
    how many Parquet files hold them."""
    # Each batch's files, from the sink's log: a compacted log (N.compact) lists the earlier batches' files too.
    visible_at: dict[tuple[int, int], float] = {}
    seen: set[str] = set()
    for _, path in logs:
        visible = path.stat().st_mtime
        entries = [json.loads(line) for line in path.read_text().splitlines()[1:] if line.strip()]
        for f in (e["path"] for e in entries if e.get("action", "add") == "add"):
            if f in seen:
                continue
            seen.add(f)
            table = pq.read_table(f.removeprefix("file://"), columns=["partition", "offset"])
            for partition, offset in zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()):
                if (partition, offset) in visible_at:
                    raise AssertionError(f"record {partition}/{offset} is in the Parquet output twice")
                visible_at[(partition, offset)] = visible
    return visible_at, len(seen)


# -- figures -----------------------------------------------------------------------------------------------------


def _summary(published: _Published, visible_of: array[float], rates: tuple[int, ...], step: float,
             mean_batch: float) -> dict:
    """Per step: its records' (timestamp, freshness), by the step their timestamp falls in; the warm-up apart."""
    began = published.began
    by_rate: dict[int, list[tuple[float, float, float]]] = {r: [] for _, r in began}
    starts = [at for at, _ in began]
    for ts_ms, visible in zip(published.timestamp, visible_of):
        ts = ts_ms / 1000
        by_rate[began[max(0, bisect.bisect_right(starts, ts) - 1)][1]].append((ts, visible - ts, visible))
    warm = [f for _, f, _ in by_rate.pop(WARMUP)]
    ends = [*starts[2:], published.ended]
    steps = [_step(rate, by_rate[rate], at, end, mean_batch, published.late[rate])
             for (at, rate), end in zip(began[1:], ends)]
    return {"records": len(published), "batch_s_mean": round(mean_batch, 2),
            "warmup": {"records": len(warm), "p50_s": round(_pct(warm, 0.5), 1) if warm else None,
                       "p95_s": round(_pct(warm, 0.95), 1) if warm else None},
            "steps": steps}


def _step(rate: int, records: list[tuple[float, float, float]], began: float, ended: float, mean_batch: float,
          late: float) -> dict:
    """One step's freshness; its backlog grew when the records of its last 10 s waited longer than those of its
    first 10 s by more than a mean batch. Events made visible per second: the step's records over the time from the
    first of them to be visible to the last (below the rate published when the consumer fell behind)."""
    records.sort()
    edge = min(10.0, (ended - began) / 4)
    fresh = [f for _, f, _ in records]
    head = statistics.median([f for t, f, _ in records if t < began + edge] or [0.0])
    tail = statistics.median([f for t, f, _ in records if t >= ended - edge] or [0.0])
    shown = max(v for *_, v in records) - min(v for *_, v in records)
    span = shown if shown > 0 else ended - began
    return {"rate": rate, "records": len(records), "published_per_s": round(len(records) / (ended - began)),
            "visible_per_s": round(len(records) / span), "p50_s": round(_pct(fresh, 0.5), 1),
            "p95_s": round(_pct(fresh, 0.95), 1), "first_10s_s": round(head, 1), "last_10s_s": round(tail, 1),
            "backlog_grew": tail > head + mean_batch, "producer_late_s": late}


def sustained(side: dict) -> int:
    """The highest rate whose backlog did not grow and whose p95 is at most stream_capacity's TARGET_P95, below
    every rate that failed."""
    return stream_capacity.sustained(side, "p95_s")


def markdown(r: dict) -> str:
    p, ours, peer = r["params"], r["ours"], r["peer"]
    rows = []
    for a, b in zip(ours["steps"], peer["steps"]):
        rows.append(f"| {a['rate']:,} | {a['published_per_s']:,} / {b['published_per_s']:,} | {a['p50_s']} | "
                    f"{a['p95_s']} | {a['first_10s_s']} -> {a['last_10s_s']} | {'yes' if a['backlog_grew'] else 'no'} "
                    f"| {a['visible_per_s']:,} | {b['p50_s']} | {b['p95_s']} | {b['first_10s_s']} -> "
                    f"{b['last_10s_s']} | {'yes' if b['backlog_grew'] else 'no'} | {b['visible_per_s']:,} |")
    late = max(s["producer_late_s"] for s in ours["steps"] + peer["steps"])
    return "\n".join([
        "### Kafka: topic -> gold_minute_activity, beside Structured Streaming to Parquet",
        "",
        f"A local broker, a topic of {p['partitions']} partitions for each side, and a producer in the benchmark's "
        f"process on the same two cores (confluent-kafka, idempotent, 7 records in 10 under one key, so one "
        f"partition takes most) publishing the shop's events, one JSON event a record (made before either side "
        f"runs, the same for both), {p['step_s']:g} s at each "
        f"rate in turn, after {p['warmup_s']:g} s at {p['rates'][0]:,}/s that warm the consumer up (not counted; "
        f"the steps begin once it has taken them). Ours first, then the peer on a topic of its own, never both at "
        f"once; each its own process, trigger {p['trigger_s']:g} s. The producer's latest tick was {late} s late.",
        "",
        f"- **Ours**: `lakehouse stream` on the shop's declaration with its events on the topic. Each batch takes "
        "the committed offsets the ingest log does not hold (read_committed) and writes three Iceberg tables: "
        "bronze (the records and the ingest log's offset ranges in one commit: exactly once across restarts), "
        "silver (deduplicated, judged, audited), then gold_minute_activity (the minutes MERGEd). Freshness = when "
        "gold's commit holding the record was published - the record's Kafka timestamp (the producer's "
        f"CreateTime). {ours['records']:,} records, every one in bronze once and counted in gold at the end; "
        f"{ours['batches']} batches, {ours['batch_s_mean']} s each in the steps (bronze "
        f"{ours['stage_s_mean']['bronze']} s, silver {ours['stage_s_mean']['silver']} s, gold "
        f"{ours['stage_s_mean']['gold']} s); the warm-up's p50 {ours['warmup']['p50_s']} s, p95 "
        f"{ours['warmup']['p95_s']} s.",
        "- **Peer**: plain Spark Structured Streaming as a user would write it (a PySpark script importing nothing "
        "of ours): `readStream.format(\"kafka\")` with read_committed, `from_json` on the value, one Parquet folder "
        "with a checkpoint. Freshness = the modification time of the sink's log file of the batch that wrote the "
        "record (`_spark_metadata/<batch>`, when readers of the folder see it) - the record's Kafka timestamp. "
        f"{peer['records']:,} records, every one in the Parquet output once; {peer['batches']} batches, "
        f"{peer['batch_s_mean']} s each; the warm-up's p50 {peer['warmup']['p50_s']} s, p95 "
        f"{peer['warmup']['p95_s']} s.",
        "",
        "| events/s | published/s (ours / peer) | ours p50 (s) | ours p95 (s) | ours first -> last 10 s (s) | "
        "ours backlog grew | ours visible/s | peer p50 (s) | peer p95 (s) | peer first -> last 10 s (s) | "
        "peer backlog grew | peer visible/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Ours is freshness to gold (bronze + silver + gold, three Iceberg commits a batch); the peer's, to one "
        "Parquet write. The backlog grew at a rate when the records of the step's last 10 s waited longer than "
        "those of its first 10 s by more than a mean batch; visible/s is the step's records over the time from the "
        "first of them to be visible to the last: near the rate published for a consumer that kept up (give or take "
        "a batch at each end of the step, and ours' batches are long), below it, what it took per second, for one "
        f"that fell behind. Held (backlog steady, p95 at most {TARGET_P95:g} s, as in stream capacity): ours "
        f"{sustained(ours):,} events/s, the peer {sustained(peer):,} events/s.",
        "",
    ])


if __name__ == "__main__":
    result = run(step=float(os.environ.get("STEP", "50")), warmup=float(os.environ.get("WARMUP", "30")))
    print(json.dumps(result, indent=2))
    print(markdown(result))
