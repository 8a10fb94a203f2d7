"""A Kafka topic as a landing zone: its records taken in offset ranges, each named and logged like a landing file.

A range of one partition, `kafka://<topic>/<partition>/<start>-<end>` (offsets start <= o < end, end being the
offset after the range, as Kafka Connect's sinks name their files by topic, partition and start offset), is the
unit bronze takes: its records are the unit's lines (line = offset - start + 1, so every record keeps its
topic, partition and offset), its landing day is the day of each record's timestamp, and the ingest log gets a
row for it in the same commit as its rows. Which offsets are taken is therefore what the ingest log says, in
the same snapshot as bronze: the log is the consumer's committed position, and nothing else is.

A run plans ranges from what the log holds (`plan`): the offsets between a start and an end (by time, for a
day; the end of what is committed, for "everything new") that no logged range covers. Ends come from the
broker with `isolation.level=read_committed` (the last stable offset: no record of an open transaction is
past it), and records are read by Spark's Kafka source between exactly those offsets, read_committed: a
range is the same records however often it is read. An offset the log does not hold that the topic no longer
has (retention deleted it first) is a gap: the plan reports it, never takes it for nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ..errors import ConfigurationError, KafkaUnreachableError
from ..runtime.spark import local_frame
from ..settings import Settings

SCHEME = "kafka://"
_URI = re.compile(r"^kafka://(?P<topic>[^/]+)/(?P<partition>\d+)/(?P<start>\d+)-(?P<end>\d+)$")
# Offsets for a time (KIP-79): no record at or after it (the time is past the partition's last record).
_NONE = -1
TIMEOUT_S = 30.0
# The ingest log's `change` of a range the topic deleted before it was taken: no records, and never planned again.
EXPIRED = "expired"


@dataclass(frozen=True, order=True)
class Range:
    """The offsets start <= o < end of one partition of a topic."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.topic}/{self.partition}/{self.start}-{self.end}"

    @staticmethod
    def of(uri: str) -> Range | None:
        m = _URI.match(uri)
        if m is None:
            return None
        return Range(m["topic"], int(m["partition"]), int(m["start"]), int(m["end"]))


def taken_offsets(uris: Iterable[str], topic: str) -> dict[int, list[tuple[int, int]]]:
    """The offset intervals each partition's logged ranges cover, merged and in order."""
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for uri in uris:
        r = Range.of(uri)
        if r is not None and r.topic == topic and r.end > r.start:
            by_partition.setdefault(r.partition, []).append((r.start, r.end))
    return {p: _merged(spans) for p, spans in by_partition.items()}


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def untaken(start: int, end: int, taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [start, end) that no interval of `taken` (merged, in order) covers."""
    out, at = [], start
    for t_start, t_end in taken:
        if t_end <= at:
            continue
        if t_start >= end:
            break
        if t_start > at:
            out.append((at, t_start))
        at = max(at, t_end)
    if at < end:
        out.append((at, end))
    return out


@dataclass
class Plan:
    """What a run takes of a topic: the ranges to read, and the gaps (offsets never taken that the topic no
    longer holds)."""

    ranges: list[Range] = field(default_factory=list)
    gaps: list[Range] = field(default_factory=list)

    @property
    def offsets(self) -> int:
        return sum(r.end - r.start for r in self.ranges)


def plan(topic: str, bounds: dict[int, tuple[int, int, int]], taken: dict[int, list[tuple[int, int]]]) -> Plan:
    """The ranges to take: for each partition, bounds (earliest offset the topic still holds, start, end), the
    offsets from start to end no logged range covers. Those below the earliest held are gaps."""
    out = Plan()
    for partition, (earliest, start, end) in sorted(bounds.items()):
        for s, e in untaken(start, end, taken.get(partition, [])):
            if s < earliest:
                out.gaps.append(Range(topic, partition, s, min(e, earliest)))
            if e > earliest:
                out.ranges.append(Range(topic, partition, max(s, earliest), e))
    return out


class Broker:
    """What the broker says of a topic's offsets (read_committed), through one short-lived consumer.

    A cluster that refuses the sign-in or the TLS handshake is an error at once (`KafkaUnreachableError`, with
    librdkafka's reason, never the password); one that does not answer, after `TIMEOUT_S`."""

    def __init__(self, settings: Settings):
        if not settings.kafka_bootstrap_servers:
            raise ConfigurationError("a Kafka source needs the broker's address: set LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS "
                                     "(host:port[,host:port...]; `lakehouse kafka start` runs a local one)")
        from confluent_kafka import Consumer

        self._settings = settings
        self._errors: deque[Any] = deque(maxlen=100)
        # librdkafka's own messages (a broker unreachable for a while, reconnecting) go to a logger, not stderr; its
        # errors are kept too, to say why a request failed.
        self._consumer = Consumer({**client_config(settings), "group.id": "lakehouse-offsets",
                                   "enable.auto.commit": False, "isolation.level": "read_committed",
                                   "error_cb": self._errors.append},
                                  logger=logging.getLogger("lakehouse_assets.kafka"))

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *_: Any) -> None:
        self._consumer.close()

    def _metadata(self, topic: str) -> Any:
        """The cluster's metadata of `topic`, asked again until TIMEOUT_S; a refused sign-in or TLS handshake ends
        the wait at once."""
        from confluent_kafka import KafkaError, KafkaException

        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                return self._consumer.list_topics(topic, timeout=max(0.1, min(2.0, deadline - time.monotonic())))
            except KafkaException as exc:
                self._consumer.poll(0)  # serves the error callback
                refused = [e for e in self._errors if e.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL)]
                if refused or time.monotonic() >= deadline:
                    signed_in = not refused or refused[-1].code() != KafkaError._AUTHENTICATION
                    raise KafkaUnreachableError(self._why(refused, signed_in, exc)) from None
                time.sleep(0.2)

    def _why(self, refused: list[Any], signed_in: bool, exc: Exception) -> str:
        s = self._settings
        who = (f" (as user {s.kafka_sasl_username!r}, {s.kafka_sasl_mechanism})" if s.kafka_sasl_mechanism else "")
        where = f"Kafka at {s.kafka_bootstrap_servers} over {s.kafka_security_protocol}{who}"
        if refused:
            error = refused[-1]
            if not signed_in:
                return (f"{where} refused the sign-in: {error.str()}; check LAKEHOUSE_KAFKA_SASL_USERNAME, "
                        "LAKEHOUSE_KAFKA_SASL_PASSWORD and LAKEHOUSE_KAFKA_SASL_MECHANISM")
            return (f"{where}: the TLS handshake failed: {error.str()}; check LAKEHOUSE_KAFKA_SSL_CA_FILE (the CA that "
                    "signed the brokers' certificates) and LAKEHOUSE_KAFKA_SECURITY_PROTOCOL")
        seen = list(dict.fromkeys(e.str() for e in self._errors))[-2:]
        return (f"{where} did not answer within {TIMEOUT_S:g} s: {exc}"
                + (f" ({'; '.join(seen)})" if seen else "")
                + "; is it running, and does LAKEHOUSE_KAFKA_SECURITY_PROTOCOL say how its listener is secured?")

    def partitions(self, topic: str) -> list[int]:
        described = self._metadata(topic).topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            why = described.error if described is not None and described.error is not None else "no partitions"
            raise ConfigurationError(f"Kafka topic {topic!r} cannot be read: {why}")
        return sorted(described.partitions)

    def watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        """Each partition's earliest offset held and its last stable offset (past every committed record)."""
        from confluent_kafka import TopicPartition

        return {p: self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S, cached=False)
                for p in self.partitions(topic)}

    def offsets_at(self, topic: str, at: dt.datetime) -> dict[int, int | None]:
        """Each partition's first offset whose record's time is at or after `at` (None: no such record yet)."""
        from confluent_kafka import TopicPartition

        ms = int(at.timestamp() * 1000)
        found = self._consumer.offsets_for_times([TopicPartition(topic, p, ms) for p in self.partitions(topic)],
                                                 timeout=TIMEOUT_S)
        return {tp.partition: (None if tp.offset == _NONE else tp.offset) for tp in found}


    def time_at(self, topic: str, partition: int, offset: int, wait_s: float = 2.0) -> dt.datetime | None:
        """The time of the first committed record at or after `offset` (None: none within `wait_s`)."""
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(topic, partition, offset)])
        try:
            waited = 0.0
            while waited < wait_s:
                for m in self._consumer.consume(num_messages=1, timeout=0.5):
                    if m.error() is None:
                        _, ms = m.timestamp()
                        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc) if ms >= 0 else None
                waited += 0.5
            return None
        finally:
            self._consumer.unassign()

    def count(self, topic: str, partition: int, ranges: list[Range], idle_s: float = 3.0) -> dict[str, int]:
        """The committed records in each of `ranges` (of one partition), as a read_committed consumer of its own
        receives them: what reconciliation compares bronze with, through another client than Spark's."""
        from confluent_kafka import TopicPartition

        counts = dict.fromkeys((r.uri for r in ranges), 0)
        if not ranges:
            return counts
        ordered = sorted(ranges, key=lambda r: r.start)
        end = max(r.end for r in ordered)
        self._consumer.assign([TopicPartition(topic, partition, ordered[0].start)])
        idle = 0.0
        try:
            while idle < idle_s:
                messages = self._consumer.consume(num_messages=1000, timeout=0.5)
                if not messages:
                    idle += 0.5
                    continue
                idle, last = 0.0, -1
                for m in messages:
                    offset = m.offset()
                    if m.error() is not None or offset is None:
                        continue
                    last = offset
                    for r in ordered:
                        if r.start <= offset < r.end:
                            counts[r.uri] += 1
                            break
                if last >= end - 1:
                    break
        finally:
            self._consumer.unassign()
        return counts


# The Java client's login module of each SASL mechanism.
_LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                  "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                  "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def client_config(settings: Settings) -> dict[str, Any]:
    """The settings' Kafka client properties (librdkafka's names: confluent-kafka's clients): the bootstrap servers,
    and how to connect and sign in when the settings say (`spark_options` is the same for the Java client)."""
    config: dict[str, Any] = {"bootstrap.servers": settings.kafka_bootstrap_servers}
    if settings.kafka_security_protocol != "PLAINTEXT":
        config["security.protocol"] = settings.kafka_security_protocol
    if settings.kafka_sasl_mechanism:
        config.update({"sasl.mechanisms": settings.kafka_sasl_mechanism, "sasl.username": settings.kafka_sasl_username,
                       "sasl.password": settings.kafka_sasl_password})
    if settings.kafka_ssl_ca_file:
        config["ssl.ca.location"] = settings.kafka_ssl_ca_file
    return config


def spark_options(settings: Settings) -> dict[str, str]:
    """The same as `client_config`, as options of Spark's Kafka source (the Java client's properties, `kafka.`
    prefixed). The password is in the JAAS configuration, in the reader's options: Spark keeps those in the
    plan's relation and sends them to the executors (their consumers need it), but it redacts the JAAS
    configuration where it logs a consumer's parameters and its plan strings do not show the options."""
    options = {"kafka.bootstrap.servers": settings.kafka_bootstrap_servers}
    if settings.kafka_security_protocol != "PLAINTEXT":
        options["kafka.security.protocol"] = settings.kafka_security_protocol
    if settings.kafka_sasl_mechanism:
        options["kafka.sasl.mechanism"] = settings.kafka_sasl_mechanism
        options["kafka.sasl.jaas.config"] = jaas_config(settings.kafka_sasl_mechanism, settings.kafka_sasl_username,
                                                        settings.kafka_sasl_password)
    if settings.kafka_ssl_ca_file:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = settings.kafka_ssl_ca_file
    return options


def jaas_config(mechanism: str, username: str, password: str) -> str:
    """The Java client's `sasl.jaas.config` for a user: its mechanism's login module, user name and password quoted
    (a backslash, a double quote or a line break in them escaped, as the JAAS parser reads a quoted value)."""
    return (f"{_LOGIN_MODULES[mechanism]} required username={_jaas_quoted(username)} "
            f"password={_jaas_quoted(password)};")


def _jaas_quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def read_ranges(spark: SparkSession, settings: Settings,
                ranges: list[Range]) -> tuple[DataFrame, dict[str, int], dict[str, int]]:
    """The records of `ranges` as landing lines (source_file: the range's uri, source_line: offset - start + 1,
    landing_date: the day of the record's time, payload: the value as text, source_key: the key as text,
    source_time: the record's time), how many each range holds, and the newest record time of each (epoch
    milliseconds). The records are persisted: `unpersist` them once written."""
    schema = ("source_file string, source_line int, landing_date date, payload string, source_key string, "
              "source_time timestamp")
    if not ranges:
        return local_frame(spark, [], schema), {}, {}
    topics = {r.topic for r in ranges}
    if len(topics) != 1:
        raise ValueError(f"one topic per read, not {sorted(topics)}")
    topic = topics.pop()
    by_partition: dict[int, list[Range]] = {}
    for r in ranges:
        by_partition.setdefault(r.partition, []).append(r)
    frames = []
    # Spark's Kafka source reads one offset span per partition: several ranges of a partition are read apart.
    for n in range(max(len(v) for v in by_partition.values())):
        part = {p: sorted(v)[n] for p, v in by_partition.items() if len(v) > n}
        frames.append(_read(spark, settings, topic, part))
    records = frames[0]
    for more in frames[1:]:
        records = records.unionByName(more)
    # Counted here, then parsed and written: the records are fetched from the brokers once (the caller unpersists).
    records = records.persist(StorageLevel.MEMORY_AND_DISK)
    counts, newest = {r.uri: 0 for r in ranges}, {}
    for row in records.groupBy("source_file").agg(F.count(F.lit(1)).alias("n"),
                                                   F.max(F.unix_millis("source_time")).alias("newest")).collect():
        counts[row["source_file"]], newest[row["source_file"]] = row["n"], row["newest"]
    return records, counts, newest


def _read(spark: SparkSession, settings: Settings, topic: str, part: dict[int, Range]) -> DataFrame:
    start = {topic: {str(p): r.start for p, r in part.items()}}
    end = {topic: {str(p): r.end for p, r in part.items()}}
    reader = (spark.read.format("kafka")
              .options(**spark_options(settings))
              .option("assign", json.dumps({topic: sorted(part)}))
              .option("startingOffsets", json.dumps(start))
              .option("endingOffsets", json.dumps(end))
              .option("kafka.isolation.level", "read_committed")
              # An offset of the plan that is gone is an error, never a range read short.
              .option("failOnDataLoss", "true"))
    frame = reader.load()
    uri, first = _range_of(part)
    return frame.select(
        uri.alias("source_file"),
        (F.col("offset") - first + 1).cast("int").alias("source_line"),
        F.to_date(F.col("timestamp")).alias("landing_date"),
        # A record without a value (a tombstone) is the JSON null, as a capture writes it into a landing file.
        F.coalesce(F.col("value").cast("string"), F.lit("null")).alias("payload"),
        F.col("key").cast("string").alias("source_key"),
        F.col("timestamp").alias("source_time"),
    )


def _range_of(part: dict[int, Range]) -> tuple[Column, Column]:
    """Each record's range uri and first offset, by its partition."""
    uri: Any = F
    first: Any = F
    for p, r in sorted(part.items()):
        cond = F.col("partition") == p
        uri = uri.when(cond, F.lit(r.uri))
        first = first.when(cond, F.lit(r.start))
    return uri, first
