"""Spark reads a real broker's topic with its own Kafka source (the jars jars.tsv names under `kafka`, in every
session): a batch between two sets of offsets holds every record of that range once, with its topic, partition,
offset and key; read_committed leaves out an aborted transaction's records; and a second read from the offsets where
the first ended holds exactly the records produced since: the ground an exactly-once Kafka source stands on."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from lakehouse_services.kafka import LocalKafka

TOPIC = "events"
PARTITIONS = 3


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with LocalKafka(tmp_path_factory.mktemp("kafka"), partitions=PARTITIONS) as broker:
        broker.create_topic(TOPIC)
        yield broker


def _produce(kafka: LocalKafka, records: list[tuple[str, str]], transactional: str | None = None,
             commit: bool = True) -> list[tuple[int, int, str, str]]:
    """(partition, offset, key, value) of each record as the broker acknowledged it; in a transaction of its own
    (committed or aborted) when `transactional` names one."""
    config = {"enable.idempotence": True, "linger.ms": 5}
    if transactional:
        config["transactional.id"] = transactional
    producer = Producer(kafka.client_config(**config))
    delivered: list[tuple[int, int, str, str]] = []

    def report(error, message) -> None:
        assert error is None, error
        delivered.append((message.partition(), message.offset(), message.key().decode(), message.value().decode()))

    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for key, value in records:
        producer.produce(TOPIC, key=key, value=value, on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0
    if transactional:
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    return delivered


def _end_offsets(kafka: LocalKafka) -> dict[int, int]:
    """Each partition's next offset (the high watermark: past every record and transaction marker written)."""
    consumer = Consumer(kafka.client_config(**{"group.id": "offsets", "isolation.level": "read_uncommitted"}))
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def _read(spark, kafka: LocalKafka, start: dict[int, int], end: dict[int, int]) -> list:
    frame = (spark.read.format("kafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("subscribe", TOPIC)
             .option("startingOffsets", json.dumps({TOPIC: {str(p): o for p, o in start.items()}}))
             .option("endingOffsets", json.dumps({TOPIC: {str(p): o for p, o in end.items()}}))
             .option("kafka.isolation.level", "read_committed")
             .load())
    return [(r.topic, r.partition, r.offset, r.key.decode(), r.value.decode())
            for r in frame.select("topic", "partition", "offset", "key", "value").collect()]


def test_a_batch_between_offsets_holds_each_committed_record_once_and_the_next_batch_only_what_came_after(
        spark, kafka):
    # Keys spread unevenly: most records under one key, so one partition holds most of them.
    first = _produce(kafka, [("hot" if n % 10 < 7 else f"k{n}", f"a{n}") for n in range(300)])
    aborted = _produce(kafka, [(f"x{n}", f"aborted{n}") for n in range(40)], transactional="t1", commit=False)
    committed = _produce(kafka, [(f"c{n}", f"committed{n}") for n in range(30)], transactional="t2")
    assert len(aborted) == 40 and Counter(p for p, *_ in first).most_common(1)[0][1] >= 210
    start = {p: 0 for p in range(PARTITIONS)}
    end = _end_offsets(kafka)

    read = _read(spark, kafka, start, end)
    expected = sorted((TOPIC, p, o, k, v) for p, o, k, v in first + committed)
    assert sorted(read) == expected  # every committed record once, none of the aborted transaction's
    assert not [r for r in read if r[4].startswith("aborted")]
    per_partition = Counter(r[1] for r in read)
    assert per_partition == Counter(p for p, *_ in first + committed)

    later = _produce(kafka, [(f"l{n}", f"later{n}") for n in range(25)])
    again = _read(spark, kafka, end, _end_offsets(kafka))
    assert sorted(again) == sorted((TOPIC, p, o, k, v) for p, o, k, v in later)
