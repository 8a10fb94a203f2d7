"""`lakehouse stream` of an event source on a Kafka topic (the shop's events, from a real broker with 3 partitions
and keys spread unevenly): records published while it runs reach bronze, silver and minute gold, each once, across
a broker restart; a stream killed after bronze's commit, and killed again completing that batch before gold's
commit, leaves every record once in every table after the next start; a Dagster backfill of a past day from the
topic writes that day exactly as the stream did.

The oracle is computed in Python from the records produced, never from the tables.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Producer
from dagster import DagsterInstance, materialize

from lakehouse_assets.build import build_definitions
from lakehouse_assets.landing.kafka import Range
from lakehouse_assets.live.stream import EventStream
from lakehouse_assets.project import load_project
from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.settings import Settings
from lakehouse_services.kafka import LocalKafka

from ..shop import ROOT
from .test_stream import _event, _stream_cli, batch_of, minute_oracle, now, run_until_taken

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PARTITIONS = 3


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with LocalKafka(tmp_path_factory.mktemp("kafka"), partitions=PARTITIONS) as broker:
        yield broker


def _shop_on(tmp_path, topic: str):
    """The shop's declaration with its events on `topic`."""
    shop = tmp_path / "shop"
    shutil.copytree(ROOT / "examples" / "shop", shop)
    declaration = shop / "lakehouse.yaml"
    text = declaration.read_text()
    declaration.write_text(text.replace("    description: Behavioural events of the shop's web site.\n",
                                        "    description: Behavioural events of the shop's web site.\n"
                                        f"    kafka: {{topic: {topic}}}\n", 1))
    assert load_project(declaration).events["events"].topic == topic
    return declaration


def _publish(kafka: LocalKafka, topic: str, values: list[str],
             stamps: list[dt.datetime] | None = None) -> list[tuple[int, int]]:
    """(partition, offset) of each value as acknowledged; most under one key; stamped with `stamps` (else now)."""
    producer = Producer(kafka.client_config(**{"enable.idempotence": True, "linger.ms": 5}))
    acked: list[tuple[int, int]] = []

    def report(error, message) -> None:
        assert error is None, error
        acked.append((message.partition(), message.offset()))

    for n, value in enumerate(values):
        at = {} if stamps is None else {"timestamp": int(stamps[n].timestamp() * 1000)}
        producer.produce(topic, key="hot" if n % 10 < 7 else f"k{n}", value=value, on_delivery=report, **at)
        producer.poll(0)
    assert producer.flush(30) == 0
    return acked


def _rows(settings: Settings, table: str) -> list[dict]:
    catalog = catalog_for(settings)
    if not catalog.table_exists((settings.namespace, table)):
        return []
    return catalog.load_table((settings.namespace, table)).scan().to_arrow().to_pylist()


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_records_published_while_the_stream_runs_reach_gold_once_across_a_broker_restart(spark, lake_settings,
                                                                                         kafka, tmp_path):
    topic = "shop-events-live"
    kafka.create_topic(topic)
    project = load_project(_shop_on(tmp_path, topic))
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace="t_topic_stream_live", landing=str(tmp_path / "landing"),
                                  kafka_bootstrap_servers=kafka.bootstrap_servers)
    first = batch_of("t1", 40, now() - dt.timedelta(minutes=20))
    second = batch_of("t2", 25, now() - dt.timedelta(minutes=5)) + [first[3]]  # delivered twice
    poison = ["{not json", json.dumps({"event_id": "no-user", "event_type": "page_view"})]
    published = _publish(kafka, topic, first)
    stream = EventStream(project, lakehouse, trigger_seconds=1, sweep_seconds=3, log=print)

    def feed():
        while sum(r.records_in for r in stream.reports) < len(first):
            time.sleep(0.5)
        kafka.restart()  # the stream's polls wait for the broker to be back, then go on
        published.extend(_publish(kafka, topic, second + poison))

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    run_until_taken(stream, len(first) + len(second) + len(poison), feeder, max_seconds=300)

    settings = lakehouse.settings
    bronze, quarantine = _rows(settings, "bronze_events"), _rows(settings, "bronze_events_quarantine")
    lineage = Counter((r["source_file"], r["source_line"]) for r in bronze + quarantine)
    assert len(lineage) == len(published) and max(lineage.values()) == 1  # every record once, kept or quarantined
    assert len(bronze) == len(first) + len(second) and len(quarantine) == len(poison)
    assert all(r["source_file"].startswith(f"kafka://{topic}/") for r in bronze + quarantine)
    # The batches' reports name the offset ranges they took: together, every record published, once.
    ranges = [Range.of(uri) for report in stream.reports for uri in report.ranges]
    assert sorted((r.partition, o) for r in ranges if r is not None for o in range(r.start, r.end)) == sorted(published)
    silver = _rows(settings, "silver_events")
    assert len(silver) == len({r["event_id"] for r in silver}) == len(first) + len(second) - 1
    gold = Counter({r["minute"].replace(tzinfo=None): r["events"] for r in _rows(settings, "gold_minute_activity")})
    assert gold == minute_oracle(first + second)


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_a_stream_of_a_topic_killed_in_a_batch_restarts_and_holds_each_record_once(kafka, tmp_path):
    topic = "shop-events-killed"
    kafka.create_topic(topic)
    home = tmp_path / "lake"
    declaration = _shop_on(tmp_path, topic)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")},
           "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PROJECT": str(declaration), "LAKEHOUSE_SPARK_MASTER": "local[2]",
           "LAKEHOUSE_DRIVER_MEMORY": "1g", "LAKEHOUSE_PII_KEY": "stream-test-key-for-pseudonyms-in-tests",
           "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers}
    lines = batch_of("k1", 40, now() - dt.timedelta(minutes=30)) + \
        [_event("k1-0", now() - dt.timedelta(minutes=2), 1)]  # a second delivery of k1-0
    published = _publish(kafka, topic, lines)
    settings = Settings.from_env(home=home, project=str(declaration), namespace="lake")

    for point in ("stream:after-bronze", "gold_minute_activity:before-publish"):
        killed = _stream_cli({**env, "LAKEHOUSE_FAILPOINTS": point}, "--until-idle", "20")
        assert killed.returncode == -signal.SIGKILL, (point, killed.stdout[-3000:] + killed.stderr[-3000:])
    # The second start completed the batch as far as gold: silver holds it, gold nothing of it yet.
    assert len(_rows(settings, "silver_events")) == 40 and _rows(settings, "gold_minute_activity") == []
    restarted = _stream_cli(env, "--until-idle", "5", "--json")
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    bronze = _rows(settings, "bronze_events")
    assert len(bronze) == len(published)
    assert Counter((r["source_file"], r["source_line"]) for r in bronze).most_common(1)[0][1] == 1
    silver = _rows(settings, "silver_events")
    assert len(silver) == len({r["event_id"] for r in silver}) == 40
    gold = Counter({r["minute"].replace(tzinfo=None): r["events"] for r in _rows(settings, "gold_minute_activity")})
    assert gold == minute_oracle(lines)


def _of_day(settings: Settings, table: str, day: dt.date, column: str) -> list[dict]:
    """The rows of `table` whose `column` falls on `day`, each with its record's (partition, offset) in place of
    the range and line it was read in (the stream and a backfill take different ranges of the same offsets), and
    without the run and the time it was written in."""
    out = []
    for row in _rows(settings, table):
        value = row[column]
        if (value.date() if isinstance(value, dt.datetime) else value) != day:
            continue
        row = {k: v for k, v in row.items() if k not in ("ingested_at", "updated_at", "run_id")}
        if "source_file" in row:
            unit = Range.of(row.pop("source_file"))
            assert unit is not None
            row["offset"] = (unit.partition, unit.start + row.pop("source_line") - 1)
        out.append(row)
    return sorted(out, key=repr)


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_a_backfill_of_a_past_day_from_the_topic_equals_the_streams_result_for_that_day(spark, lake_settings, kafka,
                                                                                        tmp_path):
    topic = "shop-events-backfill"
    kafka.create_topic(topic)
    project = load_project(_shop_on(tmp_path, topic))
    today = now().date()
    day = today - dt.timedelta(days=2)

    def at(d: dt.date, hour: int) -> dt.datetime:
        return dt.datetime.combine(d, dt.time(hour), dt.timezone.utc)

    # Records stamped as their events happened, appended in the order the days came: the day before, the day
    # (with a second delivery and poison), the day after, today. A day's offsets are found by these stamps.
    days = [(day - dt.timedelta(days=1), batch_of("before", 15, at(day - dt.timedelta(days=1), 22))),
            (day, batch_of("day", 45, at(day, 9)) + ["{not json"]),
            # The day's last records, and a second delivery of one of its events among them.
            (day, batch_of("day-late", 10, at(day, 23) + dt.timedelta(minutes=50)) + [batch_of("day", 5, at(day, 9))[4]]),
            (day + dt.timedelta(days=1), batch_of("after", 12, at(day + dt.timedelta(days=1), 0))),
            (today, batch_of("today", 8, now() - dt.timedelta(minutes=30)))]
    values, stamps = [], []
    for _, lines in days:
        for line in lines:
            values.append(line)
            stamps.append(at(day, 12) if line == "{not json" else
                          dt.datetime.fromisoformat(json.loads(line)["event_ts"].replace("Z", "+00:00")))
    published = _publish(kafka, topic, values, stamps)

    def lake(namespace: str) -> LakehouseResource:
        return LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                 namespace=namespace, landing=str(tmp_path / "landing"),
                                 kafka_bootstrap_servers=kafka.bootstrap_servers)

    streamed = lake("t_topic_streamed")
    stream = EventStream(project, streamed, trigger_seconds=1, sweep_seconds=3, log=print)
    run_until_taken(stream, len(published), max_seconds=300)

    backfilled = lake("t_topic_backfilled")
    defs = build_definitions(project, backfilled.settings)
    wanted = {"bronze_events", "silver_events", "gold_minute_activity"}
    chosen = [a for a in defs.assets if wanted & {k.to_user_string() for k in a.keys}]  # type: ignore[union-attr]
    result = materialize(chosen, selection=sorted(wanted | {"bronze_events_quarantine"}),
                         resources={"lakehouse": backfilled}, partition_key=day.isoformat(),
                         instance=DagsterInstance.ephemeral())
    assert result.success

    expected = sum(len(lines) for d, lines in days if d == day)
    for table, column in (("bronze_events", "landing_date"), ("bronze_events_quarantine", "landing_date"),
                          ("silver_events", "event_ts"), ("gold_minute_activity", "minute")):
        from_stream = _of_day(streamed.settings, table, day, column)
        from_backfill = _of_day(backfilled.settings, table, day, column)
        assert from_backfill == from_stream, table
        assert from_stream, table
    bronze_day = _of_day(backfilled.settings, "bronze_events", day, "landing_date")
    quarantined = _of_day(backfilled.settings, "bronze_events_quarantine", day, "landing_date")
    assert len(bronze_day) + len(quarantined) == expected and len(quarantined) == 1
    # The backfill took the day's offsets and no other day's records.
    assert len(_rows(backfilled.settings, "bronze_events")) == len(bronze_day)
    gold = Counter({r["minute"].replace(tzinfo=None): r["events"]
                    for r in _rows(backfilled.settings, "gold_minute_activity")})
    assert gold == minute_oracle([line for d, lines in days if d == day for line in lines])
