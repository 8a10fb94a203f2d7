"""The local Kafka broker is a real Apache Kafka node: a topic's records come back once each, in offset order, in the
partitions the producer's delivery reports named; a stop and a start keep the cluster, its records and a group's
offsets; an aborted transaction's records are never read by a read_committed consumer; `lakehouse kafka` starts,
reports and stops it as a user runs it; and its JVM runs exactly the jars jars.tsv names, by sha256. No Spark."""

from __future__ import annotations

import hashlib
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from lakehouse_assets.errors import MissingJarError
from lakehouse_assets.runtime import jars
from lakehouse_services.errors import KafkaError as BrokerError
from lakehouse_services.kafka import LocalKafka, kafka_status, stop_kafka
from lakehouse_services.process import alive

from ..shop import SHOP_FILE

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with LocalKafka(tmp_path_factory.mktemp("kafka"), partitions=3) as broker:
        yield broker


def _produce(kafka: LocalKafka, topic: str, records: list[tuple[str, str]], producer: Producer | None = None,
             flush: bool = True) -> list[tuple[int, int, str, str]]:
    """(partition, offset, key, value) of each record, as the broker's acknowledgement reported it."""
    producer = producer or Producer(kafka.client_config(**{"enable.idempotence": True, "linger.ms": 5}))
    delivered, failed = [], []

    def report(error, message) -> None:
        if error is not None:
            failed.append(error)
        else:
            delivered.append((message.partition(), message.offset(), message.key().decode(), message.value().decode()))

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=report)
        producer.poll(0)
    if flush:
        assert producer.flush(30) == 0
    assert not failed, failed
    return delivered


def _read_all(kafka: LocalKafka, topic: str, partitions: int, **config) -> dict[int, list[tuple[int, str, str]]]:
    """Every record a consumer reads of `topic` from the start to the end of each partition (for read_committed, up
    to the last stable offset), per partition, in the order it read them."""
    consumer = Consumer(kafka.client_config(**{"group.id": f"reader-{time.monotonic_ns()}", "enable.auto.commit": False,
                                               "enable.partition.eof": True, **config}))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    read: dict[int, list[tuple[int, str, str]]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"not at the end of {sorted(set(read) - at_end)} within 30 s"
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                continue
            read[message.partition()].append((message.offset(), message.key().decode(), message.value().decode()))
    finally:
        consumer.close()
    return read


def _skewed_records(n: int, hot_share: float = 0.7, cold_keys: int = 30) -> list[tuple[str, str]]:
    """`n` keyed records, `hot_share` of them under the key `hot` and the rest spread over `cold_keys` keys, shuffled;
    each value is `<key>:<its number among that key's records>`."""
    hot = int(n * hot_share)
    keys = ["hot"] * hot + [f"key-{i % cold_keys}" for i in range(n - hot)]
    random.Random(7).shuffle(keys)
    seen: Counter[str] = Counter()
    records = []
    for key in keys:
        records.append((key, f"{key}:{seen[key]}"))
        seen[key] += 1
    return records


def test_keyed_records_come_back_once_each_in_offset_order_where_the_delivery_reports_put_them(kafka):
    kafka.create_topic("orders", partitions=3)
    delivered = _produce(kafka, "orders", _skewed_records(2000))
    assert len(delivered) == 2000
    read = _read_all(kafka, "orders", 3)

    for partition in range(3):
        reported = sorted((offset, key, value) for p, offset, key, value in delivered if p == partition)
        # Every record once, in offset order, no offset skipped: exactly what the acknowledgements said.
        assert read[partition] == reported
        assert [offset for offset, _, _ in read[partition]] == list(range(len(reported)))
    counts = Counter(p for p, *_ in delivered)
    assert {p: len(records) for p, records in read.items()} == {p: counts[p] for p in range(3)}
    assert sorted(counts.values())[-1] >= 1400 and all(counts[p] for p in range(3)), counts  # the hot key's load

    # A key's records sit in one partition, in the order they were sent.
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for partition, records in read.items():
        for _, key, value in records:
            by_key[key].append((partition, int(value.rsplit(":", 1)[1])))
    assert len(by_key) == 31
    for key, places in by_key.items():
        assert len({p for p, _ in places}) == 1, key
        assert [n for _, n in places] == list(range(len(places))), key


def test_a_restart_keeps_the_cluster_its_records_and_a_groups_offsets(kafka):
    kafka.create_topic("ledger", partitions=2)
    _produce(kafka, "ledger", [(f"account-{i % 7}", f"entry-{i}") for i in range(300)])
    before = _read_all(kafka, "ledger", 2)
    group = {"group.id": "ledger-readers", "enable.auto.commit": False}
    committed = [TopicPartition("ledger", p, len(before[p]) // 2) for p in range(2)]
    consumer = Consumer(kafka.client_config(**group))
    consumer.commit(offsets=committed, asynchronous=False)
    consumer.close()
    admin = kafka.admin()
    cluster_id, pid, started = admin.list_topics(timeout=10).cluster_id, kafka.pid, kafka_status(kafka.root)

    kafka.restart()

    assert kafka.pid != pid and not alive(pid)
    state = kafka_status(kafka.root)
    assert (state.bootstrap_servers, state.cluster_id) == (started.bootstrap_servers, started.cluster_id)
    assert kafka.admin().list_topics(timeout=10).cluster_id == cluster_id == kafka.cluster_id
    assert _read_all(kafka, "ledger", 2) == before
    consumer = Consumer(kafka.client_config(**group))
    assert [(tp.partition, tp.offset) for tp in consumer.committed([TopicPartition("ledger", p) for p in range(2)],
                                                                   timeout=10)] == \
        [(tp.partition, tp.offset) for tp in committed]
    consumer.close()
    # The partitions go on where they ended: a new record takes the next offset.
    [(partition, offset, _, _)] = _produce(kafka, "ledger", [("account-0", "after the restart")])
    assert offset == len(before[partition])


def test_a_read_committed_consumer_never_reads_an_aborted_or_open_transaction(kafka):
    kafka.create_topic("payments", partitions=3)
    producer = Producer(kafka.client_config(**{"transactional.id": "payments-writer", "linger.ms": 5}))
    producer.init_transactions(30)

    def transaction(prefix: str, n: int, end: str | None) -> None:
        producer.begin_transaction()
        _produce(kafka, "payments", [(f"p{i % 5}", f"{prefix}-{i}") for i in range(n)], producer=producer)
        if end == "commit":
            producer.commit_transaction(30)
        elif end == "abort":
            producer.abort_transaction(30)

    transaction("first", 50, "commit")
    transaction("aborted", 40, "abort")
    transaction("second", 30, "commit")
    transaction("open", 20, None)  # written, not yet committed

    def values(isolation: str) -> Counter[str]:
        read = _read_all(kafka, "payments", 3, **{"isolation.level": isolation})
        return Counter(value.split("-")[0] for records in read.values() for _, _, value in records)

    # The aborted and the open records are in the partitions (an uncommitted read sees them) ...
    assert values("read_uncommitted") == {"first": 50, "aborted": 40, "second": 30, "open": 20}
    # ... and a committed read has exactly the committed ones, each once.
    committed = _read_all(kafka, "payments", 3, **{"isolation.level": "read_committed"})
    assert sorted(v for records in committed.values() for _, _, v in records) == \
        sorted([f"first-{i}" for i in range(50)] + [f"second-{i}" for i in range(30)])
    producer.commit_transaction(30)
    assert values("read_committed") == {"first": 50, "second": 30, "open": 20}


def test_the_broker_jvm_runs_exactly_the_jars_jars_tsv_names_and_spark_loads_none_of_them(kafka):
    arguments = Path(f"/proc/{kafka.pid}/cmdline").read_bytes().decode().split("\0")
    class_path = arguments[arguments.index("-cp") + 1].split(":")
    named = {str(jar.path()): jar for jar in jars.coordinates() if jar.use == jars.KAFKA_BROKER}
    assert len(named) >= 40 and any(jar.artifact == "kafka_2.13" for jar in named.values())
    assert sorted(class_path) == sorted(named)
    for entry in class_path:
        assert hashlib.sha256(Path(entry).read_bytes()).hexdigest() == named[entry].sha256, entry
    # Spark's jars, with every setting that adds some, hold none of the broker's.
    spark = jars.spark_jars({"sqlite", "postgresql"}, on_s3=True, extra_jars=())
    assert spark and not set(spark) & set(named)


def test_lakehouse_kafka_start_status_and_stop_as_a_user_runs_them(tmp_path):
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path)}

    def lakehouse(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([LAKEHOUSE, *args], env={**env, **extra}, capture_output=True, text=True, timeout=120)

    version = next(jar.version for jar in jars.coordinates() if jar.artifact == "kafka_2.13")
    started = lakehouse("kafka", "start")
    try:
        assert started.returncode == 0, started.stderr
        first, export = started.stdout.splitlines()
        shown = re.fullmatch(rf"Kafka broker \(Apache Kafka {re.escape(version)}, KRaft, cluster (\S+)\) on "
                             r"(127\.0\.0\.1:\d+), data in (.+); to use it:", first)
        assert shown, first
        cluster_id, servers, data = shown.groups()
        assert export == f"export LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS={servers}"
        assert Path(data) == tmp_path / "kafka" / "data" and (Path(data) / "meta.properties").is_file()

        status = lakehouse("kafka", "status")
        pid = int(re.fullmatch(rf"running, pid (\d+), {re.escape(servers)}\n", status.stdout).group(1))
        assert alive(pid, "kafka.Kafka", str(tmp_path / "kafka" / "server.properties"))
        # The address printed serves that cluster, and the setting takes it as printed.
        broker = LocalKafka.attach(tmp_path / "kafka")
        assert broker.bootstrap_servers == servers and broker.admin().list_topics(timeout=10).cluster_id == cluster_id
        settings = lakehouse("settings", "--json", LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS=servers)
        assert f'"kafka_bootstrap_servers": "{servers}"' in settings.stdout, settings.stderr
        again = lakehouse("kafka", "start")
        assert again.returncode == 2 and f"already runs under {tmp_path / 'kafka'} (pid {pid}" in again.stderr
    finally:
        stopped = lakehouse("kafka", "stop")
    assert stopped.stdout == "stopped\n"
    assert not alive(pid)
    assert lakehouse("kafka", "status").stdout == "not running\n"
    assert lakehouse("kafka", "stop").stdout == "no Kafka broker was running\n"
    assert (tmp_path / "kafka" / "data" / "meta.properties").is_file()  # its data stays for the next start


def test_what_keeps_a_broker_from_starting_is_said_before_or_with_its_log(tmp_path, monkeypatch):
    with pytest.raises(BrokerError, match="listeners: set by LocalKafka"):
        LocalKafka(tmp_path / "managed", properties={"listeners": "PLAINTEXT://0.0.0.0:9092"})

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerError, match=rf"ports \[{port}\] .* already in use"):
            LocalKafka(tmp_path / "busy", port=port).start()
    assert not (tmp_path / "busy" / "kafka.json").exists()

    # A setting the storage tool refuses, and one only the broker finds wrong (a class it does not have).
    unformatted = LocalKafka(tmp_path / "unformatted", properties={"log.segment.bytes": "sixteen-megabytes"})
    with pytest.raises(BrokerError, match=r"(?s)formatting the storage .* failed \(exit code 1\).*--- last lines of "
                                          r".*format\.log.*sixteen-megabytes"):
        unformatted.start()
    exits = LocalKafka(tmp_path / "exits", properties={"authorizer.class.name": "org.example.NoSuchAuthorizer"})
    with pytest.raises(BrokerError, match=rf"(?s)the Kafka broker on {exits.bootstrap_servers} exited with code 1 "
                                          r"while starting.*--- last lines of .*kafka\.log.*ClassNotFoundException: "
                                          r"org\.example\.NoSuchAuthorizer"):
        exits.start()
    assert kafka_status(tmp_path / "unformatted") is None and kafka_status(tmp_path / "exits") is None
    assert not (tmp_path / "exits" / "kafka.json").exists()

    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "empty-repository"))
    with pytest.raises(MissingJarError, match=r"not resolved into .*empty-repository: .* and \d+ more \(kafka-broker\); "
                                              r"run make setup"):
        LocalKafka(tmp_path / "unresolved").start()
    assert not (tmp_path / "unresolved" / "kafka.json").exists()


def test_make_devs_broker_starts_only_for_a_declaration_on_topics_and_serves_its_topics(tmp_path):
    declaration = tmp_path / "lakehouse.yaml"
    declaration.write_text("name: clicks\nevents:\n  clicks:\n    kafka: {topic: web.clicks}\n    fields:\n"
                           "      id: string\n      ts: timestamp\n    key: id\n    timestamp: ts\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")},
           "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_PROJECT": str(declaration)}

    def declared(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([LAKEHOUSE, "kafka", "start", "--declared"], env={**env, **extra}, capture_output=True,
                              text=True, timeout=120)

    assert declared(LAKEHOUSE_PROJECT=str(SHOP_FILE)).stdout == ""  # no topic declared: no broker
    assert declared(LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS="kafka-1.internal:9092").stdout == ""  # a team's cluster
    assert kafka_status(tmp_path / "kafka") is None
    started = declared()
    try:
        assert started.returncode == 0, started.stderr
        servers = started.stdout.strip()
        assert re.fullmatch(r"127\.0\.0\.1:\d+", servers) and "created topic web.clicks (3 partitions)" in started.stderr
        topic = LocalKafka.attach(tmp_path / "kafka").admin().list_topics(timeout=10).topics["web.clicks"]
        assert len(topic.partitions) == 3
        again = declared()  # the broker already running, its topic kept
        assert (again.returncode, again.stdout.strip(), again.stderr) == (0, servers, "")
    finally:
        stop_kafka(tmp_path / "kafka")
