"""Bronze of an event source declared on a Kafka topic, from a real broker (3 partitions, keys spread unevenly):
a day's run takes the records the broker stamped with that day, each once, with its partition and offset as
lineage; poison values (not JSON, a tombstone, a required field missing) are quarantined with theirs; an aborted
transaction's records are not taken; a run again takes nothing; a process killed before or after its commit
leaves every record once after the next run; a day the topic's retention deleted before it was taken is refused,
and taking everything new records the deleted offsets as a gap."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from confluent_kafka import Producer, TopicPartition
from dagster import DagsterInstance, build_sensor_context, materialize
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lakehouse_assets.bronze.assets import landing_sources
from lakehouse_assets.bronze.reconcile import reconcile
from lakehouse_assets.bronze.topics import everything_new, ingest_topic
from lakehouse_assets.build import build_definitions
from lakehouse_assets.landing.kafka import Range
from lakehouse_assets.operations.metrics import LakehouseCollector
from lakehouse_assets.project import load_project
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_services.kafka import LocalKafka

PARTITIONS = 3
TODAY = dt.datetime.now(dt.timezone.utc).date()
YESTERDAY = TODAY - dt.timedelta(days=1)

DECLARATION = """\
name: clicks
start_date: 2025-06-01
events:
  clicks:
    kafka:
      topic: {topic}
    fields:
      id: string
      user: string
      ts: timestamp
      kind: string
    required: [user]
    key: id
    timestamp: ts
    user: user
    event_type: kind
"""


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with LocalKafka(tmp_path_factory.mktemp("kafka"), partitions=PARTITIONS) as broker:
        yield broker


@pytest.fixture
def topic(kafka, namespace):
    kafka.create_topic(namespace)
    return namespace


@pytest.fixture
def declared(tmp_path, topic):
    path = tmp_path / "lakehouse.yaml"
    path.write_text(DECLARATION.format(topic=topic))
    return path


@pytest.fixture
def on_kafka(lakehouse, kafka) -> LakehouseResource:
    return LakehouseResource(**{**lakehouse.model_dump(), "kafka_bootstrap_servers": kafka.bootstrap_servers})


def _at(day: dt.date, n: int) -> dt.datetime:
    """A time early on `day`: the broker refuses records stamped more than an hour ahead of its clock."""
    return dt.datetime.combine(day, dt.time(), dt.timezone.utc) + dt.timedelta(seconds=n)


def _click(n: int, day: dt.date) -> str:
    return json.dumps({"id": f"{day}-{n}", "user": f"u{n % 7}", "ts": _at(day, n).isoformat(), "kind": "view"})


def _produce(kafka: LocalKafka, topic: str, records: list[tuple[str, str | None, dt.datetime]],
             transactional: str | None = None, commit: bool = True) -> list[tuple[int, int, str | None]]:
    """(partition, offset, value) of each record as the broker acknowledged it, stamped with its time."""
    config = {"enable.idempotence": True, "linger.ms": 5}
    if transactional:
        config["transactional.id"] = transactional
    producer = Producer(kafka.client_config(**config))
    acked: list[tuple[int, int, str | None]] = []

    def report(error, message) -> None:
        assert error is None, error
        value = message.value()
        acked.append((message.partition(), message.offset(), None if value is None else value.decode()))

    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for key, value, at in records:
        producer.produce(topic, key=key, value=value, timestamp=int(at.timestamp() * 1000), on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0
    if transactional:
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
        _markers_written(kafka, topic)
    return acked


def _markers_written(kafka: LocalKafka, topic: str, timeout_s: float = 60.0) -> None:
    """Wait until the transaction's markers are in every partition (the last stable offset is the end of each):
    the broker writes them after the producer's commit or abort returns, so records produced next could come
    before a marker, and a marker's time (the broker's, today) is what ends yesterday's offsets."""
    from confluent_kafka import Consumer

    consumers = {level: Consumer(kafka.client_config(**{"group.id": "test-markers", "isolation.level": level}))
                 for level in ("read_committed", "read_uncommitted")}
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            ends = {level: [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                            for p in range(PARTITIONS)] for level, c in consumers.items()}
            if ends["read_committed"] == ends["read_uncommitted"]:
                return
            assert time.monotonic() < deadline, ends
            time.sleep(0.1)
    finally:
        for consumer in consumers.values():
            consumer.close()


def _day(kafka, topic, day: dt.date, n: int, first: int = 0) -> list[tuple[int, int, str | None]]:
    """`n` good clicks of `day`, most of them under one key (one partition holds most)."""
    return _produce(kafka, topic, [("hot" if k % 10 < 7 else f"k{k}", _click(k, day), _at(day, k))
                                   for k in range(first, first + n)])


def _run(lakehouse, declared, day: dt.date):
    defs = build_definitions(load_project(declared), lakehouse.settings)
    chosen = [a for a in defs.assets if "bronze_clicks" in {k.to_user_string() for k in a.keys}]
    return materialize(chosen, resources={"lakehouse": lakehouse}, partition_key=day.isoformat(),
                       instance=DagsterInstance.ephemeral(), raise_on_error=False)


def _offsets(lakehouse, table: str) -> Counter:
    """(partition, offset) of each row of a bronze table, from its lineage: each should be there once."""
    rows = lakehouse.spark.table(lakehouse.table_id(table)).select("source_file", "source_line").collect()
    out: Counter = Counter()
    for r in rows:
        unit = Range.of(r.source_file)
        assert unit is not None, r.source_file
        out[(unit.partition, unit.start + r.source_line - 1)] += 1
    return out


def test_a_day_from_the_topic_holds_its_records_once_with_offsets_and_poison_quarantined(on_kafka, kafka, topic,
                                                                                         declared):
    good = _day(kafka, topic, YESTERDAY, 60)
    poison = _produce(kafka, topic, [("hot", "not json", _at(YESTERDAY, 100)),
                                     ("k1", None, _at(YESTERDAY, 101)),  # a tombstone
                                     ("k2", json.dumps({"id": "x", "ts": _at(YESTERDAY, 102).isoformat()}),
                                      _at(YESTERDAY, 102))])  # no user
    _produce(kafka, topic, [(f"a{k}", _click(500 + k, YESTERDAY), _at(YESTERDAY, 200)) for k in range(10)],
             transactional="aborted", commit=False)
    committed = _produce(kafka, topic, [(f"c{k}", _click(600 + k, YESTERDAY), _at(YESTERDAY, 300))
                                        for k in range(5)], transactional="committed")
    today = _day(kafka, topic, TODAY, 8)  # stamped today: not yesterday's
    assert Counter(p for p, *_ in good).most_common(1)[0][1] >= 42

    result = _run(on_kafka, declared, YESTERDAY)
    assert result.success
    kept, quarantined = _offsets(on_kafka, "bronze_clicks"), _offsets(on_kafka, "bronze_clicks_quarantine")
    # Transaction markers carry the broker's time (today): yesterday's offsets end at the aborted transaction's
    # marker, and the committed transaction after it, though stamped yesterday, is among today's offsets.
    assert kept == Counter((p, o) for p, o, _ in good)  # each once
    assert quarantined == Counter((p, o) for p, o, _ in poison)
    reasons = {r.source_line: r.reason for r in on_kafka.spark.table(on_kafka.table_id("bronze_clicks_quarantine"))
               .select("source_line", "reason").collect()}
    assert all(reasons.values()) and len(reasons) == 3
    # Each record's key and timestamp are kept beside its offset, kept or quarantined.
    rows = on_kafka.spark.table(on_kafka.table_id("bronze_clicks")).select("id", "source_key", "source_time").collect()
    assert {r.id: (r.source_key, r.source_time.replace(tzinfo=dt.timezone.utc)) for r in rows} == \
        {f"{YESTERDAY}-{k}": ("hot" if k % 10 < 7 else f"k{k}", _at(YESTERDAY, k)) for k in range(60)}
    bad = on_kafka.spark.table(on_kafka.table_id("bronze_clicks_quarantine")).select("source_key", "source_time")
    assert sorted((r.source_key, r.source_time.replace(tzinfo=dt.timezone.utc)) for r in bad.collect()) == \
        [("hot", _at(YESTERDAY, 100)), ("k1", _at(YESTERDAY, 101)), ("k2", _at(YESTERDAY, 102))]
    meta = result.asset_materializations_for_node("bronze_clicks")[0].metadata
    assert (meta["records_in"].value, meta["records_kept"].value, meta["records_quarantined"].value) == (63, 60, 3)
    # The ingest log: a range per partition, records in = kept + quarantined in each.
    log = on_kafka.spark.table(on_kafka.table_id("bronze_ingest_log")).where("source = 'clicks'") \
        .select("source_file", "records", "kept", "quarantined").collect()
    assert sorted(Range.of(r.source_file).partition for r in log) == sorted({p for p, *_ in good + poison})
    assert all(r.records == r.kept + r.quarantined for r in log) and sum(r.records for r in log) == 63

    again = _run(on_kafka, declared, YESTERDAY)
    assert again.asset_materializations_for_node("bronze_clicks")[0].metadata["records_in"].value == 0
    assert _run(on_kafka, declared, TODAY).success
    # Every committed record once, none of the aborted transaction's; each on the day it was stamped with.
    assert _offsets(on_kafka, "bronze_clicks") == Counter((p, o) for p, o, _ in good + committed + today)
    days = Counter(r.landing_date for r in on_kafka.spark.table(on_kafka.table_id("bronze_clicks")).collect())
    assert days == {YESTERDAY: 65, TODAY: 8}
    # Reconciled per partition against what a consumer of its own receives in the logged ranges.
    rows = reconcile(on_kafka.settings, load_project(declared), "clicks")
    assert all(r["balanced"] for r in rows), rows
    assert {r["partition"]: r["records_in"] for r in rows} == Counter(p for p, *_ in good + poison + committed + today)


def _materialize(lakehouse, declared, day: dt.date, failpoint: str, **env: str) -> subprocess.Popen:
    """Materialise bronze_clicks for `day` in a separate process, with `failpoint` armed."""
    s = lakehouse.settings
    env = {**os.environ, "LAKEHOUSE_HOME": str(s.home), "LAKEHOUSE_NAMESPACE": s.namespace,
           "LAKEHOUSE_SPARK_MASTER": "local[1]", "LAKEHOUSE_DRIVER_MEMORY": "1g", "LAKEHOUSE_FAILPOINTS": failpoint,
           "LAKEHOUSE_PROJECT": str(declared), "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": s.kafka_bootstrap_servers, **env}
    env.pop("DAGSTER_HOME", None)
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    return subprocess.Popen([dagster, "asset", "materialize", "-m", "lakehouse_assets.definitions", "--select",
                             "bronze_clicks,bronze_clicks_quarantine", "--partition", day.isoformat()],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=s.home)


def _behind(lakehouse, project, topic: str, metric: str = "lakehouse_source_kafka_offsets_behind") -> Counter:
    """A per-partition figure of the topic (by default the lag), as Prometheus would scrape it."""
    text = generate_latest(LakehouseCollector(lakehouse.settings, project).registry()).decode()
    return Counter({int(s.labels["partition"]): s.value for family in text_string_to_metric_families(text)
                    for s in family.samples if s.name == metric and s.labels["topic"] == topic})


def test_the_topic_sensor_requests_today_while_the_topic_holds_records_not_taken(on_kafka, kafka, topic, declared):
    project = load_project(declared)
    defs = build_definitions(project, on_kafka.settings)
    [sensor] = [s for s in defs.sensors if s.name == "bronze_clicks_topic_sensor"]
    instance = DagsterInstance.ephemeral()

    def tick():
        context = build_sensor_context(instance=instance, definitions=defs, resources={"lakehouse": on_kafka})
        return sensor.evaluate_tick(context)

    assert "nothing new" in tick().skip_message
    published = _day(kafka, topic, TODAY, 10)
    [request] = tick().run_requests
    assert request.partition_key == TODAY.isoformat() and int(request.tags["dagster/priority"]) > 0
    # The lag in the metrics: every record published is behind, per partition, until the run takes it.
    assert _behind(on_kafka, project, topic) == Counter(p for p, *_ in published)
    # And in time: the age of each partition's oldest record not taken (click k is stamped k s after midnight).
    now = dt.datetime.now(dt.timezone.utc)
    ages = _behind(on_kafka, project, topic, "lakehouse_source_kafka_lag_seconds")
    for p in {p for p, *_ in published}:
        first = min(json.loads(v)["ts"] for q, _, v in published if q == p)
        expected = (now - dt.datetime.fromisoformat(first)).total_seconds()
        assert expected - 5 <= ages[p] <= expected + 60, (p, ages[p], expected)
    assert _run(on_kafka, declared, TODAY).success
    assert "nothing new" in tick().skip_message
    assert set(_behind(on_kafka, project, topic).values()) == {0}
    assert set(_behind(on_kafka, project, topic, "lakehouse_source_kafka_lag_seconds").values()) == {0}
    # Stamped yesterday, appended now: after today's start by offset, so today's run takes it.
    _produce(kafka, topic, [("late", _click(99, YESTERDAY), _at(YESTERDAY, 99))])
    assert [r.partition_key for r in tick().run_requests] == [TODAY.isoformat()]


def _crash(lakehouse, declared, day: dt.date, failpoint: str) -> subprocess.CompletedProcess:
    """Materialise bronze_clicks for `day` in a separate process that SIGKILLs itself at `failpoint`."""
    process = _materialize(lakehouse, declared, day, failpoint)
    out, _ = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, out, "")


# Runs in processes of their own, a Spark start each: with the whole deployments (make e2e).
@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_killed_before_or_after_its_commit_leaves_each_record_once(on_kafka, kafka, topic, declared):
    first = _day(kafka, topic, YESTERDAY, 30)
    died = _crash(on_kafka, declared, YESTERDAY, "publish:before-swap")
    assert died.returncode == -signal.SIGKILL, died.stdout[-2000:] + died.stderr[-2000:]
    assert _run(on_kafka, declared, YESTERDAY).success
    assert _offsets(on_kafka, "bronze_clicks") == Counter((p, o) for p, o, _ in first)

    more = _day(kafka, topic, YESTERDAY, 20, first=30)
    died = _crash(on_kafka, declared, YESTERDAY, "publish:after-swap")
    assert died.returncode == -signal.SIGKILL, died.stdout[-2000:] + died.stderr[-2000:]
    assert _run(on_kafka, declared, YESTERDAY).success
    assert _offsets(on_kafka, "bronze_clicks") == Counter((p, o) for p, o, _ in first + more)


# Runs in processes of their own, a Spark start each: with the whole deployments (make e2e).
@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
@pytest.mark.e2e
@pytest.mark.slow
def test_two_runs_planning_the_same_offsets_at_once_take_each_record_once(on_kafka, kafka, topic, declared,
                                                                           tmp_path):
    records = _day(kafka, topic, YESTERDAY, 30)
    # One run holds still just before its commit, having planned and staged every record of the day ...
    held = _materialize(on_kafka, declared, YESTERDAY, "publish:before-swap~pause",
                        LAKEHOUSE_FAILPOINT_DIR=str(tmp_path))
    deadline = time.monotonic() + 240
    while not (tmp_path / "publish:before-swap.paused").exists():
        assert held.poll() is None and time.monotonic() < deadline, held.communicate()[0][-3000:]
        time.sleep(0.5)
    # ... while another takes them and commits; then the first goes on: it must plan again and take nothing.
    assert _run(on_kafka, declared, YESTERDAY).success
    (tmp_path / "publish:before-swap.go").touch()
    out, _ = held.communicate(timeout=300)
    assert held.returncode == 0, out[-3000:]
    assert ": 0 offset ranges of" in out, out[-3000:]  # its commit was refused, and its second plan found nothing
    assert _offsets(on_kafka, "bronze_clicks") == Counter((p, o) for p, o, _ in records)
    log = on_kafka.spark.table(on_kafka.table_id("bronze_ingest_log")).where("source = 'clicks'").collect()
    assert sum(r.records for r in log) == 30


def test_offsets_deleted_before_they_were_taken_refuse_the_day_and_are_recorded_as_a_gap(on_kafka, kafka, topic,
                                                                                        declared):
    old = _day(kafka, topic, YESTERDAY, 40)
    newer = _day(kafka, topic, TODAY, 12)
    # As retention does: the partitions' earliest offsets move past yesterday's first records.
    cut = {p: min(o for q, o, _ in old if q == p) + 3 for p in {p for p, *_ in old}}
    admin = kafka.admin()
    for future in admin.delete_records([TopicPartition(topic, p, o) for p, o in cut.items()]).values():
        future.result(30)

    refused = _run(on_kafka, declared, YESTERDAY)
    assert not refused.success
    failure = str(refused.get_step_failure_events()[0].event_specific_data.error)
    assert "no longer holds" in failure and "retention" in failure, failure
    assert not on_kafka.spark.catalog.tableExists(on_kafka.table_id("bronze_clicks")) \
        or not _offsets(on_kafka, "bronze_clicks")

    source = next(s for s in landing_sources(load_project(declared)) if s.name == "clicks")
    report = ingest_topic(on_kafka, source, topic, everything_new, "run-all", "all")
    gaps = {(g.partition, g.start, g.end) for g in report.gaps}
    assert gaps == {(p, min(o for q, o, _ in old if q == p), o) for p, o in cut.items()}
    kept = Counter((p, o) for p, o, _ in old + newer if o >= cut.get(p, 0))
    assert _offsets(on_kafka, "bronze_clicks") == kept
    changes = Counter(r.change for r in on_kafka.spark.table(on_kafka.table_id("bronze_ingest_log")).collect())
    assert changes["expired"] == len(cut)
    # The gap in the metrics (what the alert LakehouseKafkaOffsetsExpired watches): the offsets deleted untaken.
    expired = _behind(on_kafka, load_project(declared), topic, "lakehouse_source_kafka_offsets_expired_total")
    assert expired == Counter({p: o - min(o2 for q, o2, _ in old if q == p) for p, o in cut.items()})

    again = ingest_topic(on_kafka, source, topic, everything_new, "run-again", "all")
    assert not again.gaps and not again.ranges and _offsets(on_kafka, "bronze_clicks") == kept
    rows = reconcile(on_kafka.settings, load_project(declared), "clicks")
    assert all(r["balanced"] for r in rows) and sum(r["records_in"] for r in rows) == sum(kept.values()), rows
