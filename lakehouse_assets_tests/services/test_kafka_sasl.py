"""A team's own cluster that signs its clients in (SASL) and serves them over TLS, named by the settings alone.

One real broker for the module (LocalKafka with a SASL_PLAINTEXT listener, PLAIN users defined in its JAAS
configuration, and a SASL_SSL listener whose certificate a CA of its own signed): with the right user and password
the platform's clients (`Broker`, the captures' `KafkaWriter`, Spark's Kafka source through `read_ranges`) read and
write it, over either listener; a wrong password, no sign-in at all, or a CA that did not sign the broker's
certificate is refused with the reason, and the password is in no message, log record or Spark plan string."""

from __future__ import annotations

import json
import logging
import time

import pytest
from confluent_kafka import Producer

from lakehouse_assets.errors import ConfigurationError, KafkaUnreachableError
from lakehouse_assets.landing import kafka as landing_kafka
from lakehouse_assets.landing.kafka import Broker, Range, client_config, read_ranges, spark_options
from lakehouse_assets.live.capture import KafkaWriter
from lakehouse_assets.settings import Settings
from lakehouse_services.kafka import LocalKafka

TOPIC = "orders"
PARTITIONS = 2
USER = "alice"
# A space, a double quote, a backslash and a letter outside ASCII: quoted right in the Java client's JAAS
# configuration (and in the broker's own), or no sign-in.
PASSWORD = 'pa ss"w\\örd-7Q'
# The password, as the JAAS configuration quotes it, and its end (in whatever a text renders the rest as).
SECRET_PARTS = (PASSWORD, PASSWORD.replace("\\", "\\\\").replace('"', '\\"'), "örd-7Q")


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with LocalKafka(tmp_path_factory.mktemp("kafka-sasl"), partitions=PARTITIONS, sasl_users={USER: PASSWORD},
                    tls=True) as broker:
        yield broker


def _settings(monkeypatch, home, **env: str) -> Settings:
    for name, value in env.items():
        monkeypatch.setenv(f"LAKEHOUSE_KAFKA_{name.upper()}", value)
    return Settings.from_env(home=home)


@pytest.fixture(scope="module")
def produced(kafka):
    """(partition, offset, value) of each record produced to TOPIC, as the broker acknowledged them: signed in as
    USER, through the settings' own librdkafka properties."""
    kafka.create_topic(TOPIC)
    settings = Settings(home=kafka.root / "home", kafka_bootstrap_servers=kafka.bootstrap_servers,
                        kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_username=USER,
                        kafka_sasl_password=PASSWORD)
    producer = Producer({**client_config(settings), "enable.idempotence": True})
    delivered: list[tuple[int, int, str]] = []

    def report(error, message) -> None:
        assert error is None, error
        delivered.append((message.partition(), message.offset(), message.value().decode()))

    for n in range(12):
        producer.produce(TOPIC, key=f"k{n % 5}", value=json.dumps({"id": n, "kind": "order"}), on_delivery=report)
    assert producer.flush(30) == 0
    assert {p for p, _, _ in delivered} == set(range(PARTITIONS)), delivered  # both partitions hold some
    return sorted(delivered)


def _no_secret(text: str) -> None:
    for part in SECRET_PARTS:
        assert part not in text


def _read_everything(spark, settings: Settings, produced) -> tuple[list[tuple[str, int, str]], str]:
    """The records `read_ranges` reads of every offset the Broker reports, and the plan strings of the frame."""
    with Broker(settings) as broker:
        marks = broker.watermarks(TOPIC)
    ends = {p: max(o for q, o, _ in produced if q == p) + 1 for p in range(PARTITIONS)}
    assert marks == {p: (0, ends[p]) for p in range(PARTITIONS)}
    ranges = [Range(TOPIC, p, low, high) for p, (low, high) in sorted(marks.items())]
    frame, counts, _ = read_ranges(spark, settings, ranges)
    assert counts == {r.uri: r.end - r.start for r in ranges}
    rows = sorted((r.source_file, r.source_line, r.payload) for r in frame.collect())
    plans = frame._jdf.queryExecution().toString()
    return rows, plans


def _expected(produced) -> list[tuple[str, int, str]]:
    """Each record as bronze names it: its range's uri, its line (offset + 1: the ranges start at 0), its value."""
    ends = {p: max(o for q, o, _ in produced if q == p) + 1 for p in range(PARTITIONS)}
    return sorted((f"kafka://{TOPIC}/{p}/0-{ends[p]}", offset + 1, value) for p, offset, value in produced)


def test_signed_in_the_broker_reads_watermarks_and_spark_reads_the_records(spark, kafka, produced, monkeypatch,
                                                                            tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="lakehouse_assets")
    settings = _settings(monkeypatch, tmp_path, bootstrap_servers=kafka.bootstrap_servers,
                         security_protocol="SASL_PLAINTEXT", sasl_username=USER, sasl_password=PASSWORD)
    assert settings.kafka_sasl_mechanism == "PLAIN"  # the default mechanism
    rows, plans = _read_everything(spark, settings, produced)
    assert rows == _expected(produced)
    assert [json.loads(value)["id"] for _, _, value in rows] and len(rows) == 12
    # Spark holds the password in the reader's options (its consumers need it), but its plan strings do not show it.
    assert "KafkaRelation(strategy=Assign" in plans, plans
    _no_secret(plans)
    _no_secret(caplog.text)
    _no_secret(repr(settings))
    _no_secret(json.dumps(settings.describe()))


def test_over_tls_with_the_clusters_ca_the_same_records_are_read(spark, kafka, produced, monkeypatch, tmp_path):
    settings = _settings(monkeypatch, tmp_path, bootstrap_servers=kafka.tls_bootstrap_servers,
                         security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username=USER,
                         sasl_password=PASSWORD, ssl_ca_file=str(kafka.ca_file))
    assert spark_options(settings)["kafka.ssl.truststore.location"] == str(kafka.ca_file)
    rows, plans = _read_everything(spark, settings, produced)
    assert rows == _expected(produced)
    _no_secret(plans)


def test_the_captures_writer_creates_its_topic_and_produces_signed_in(kafka, monkeypatch, tmp_path):
    settings = _settings(monkeypatch, tmp_path, bootstrap_servers=kafka.tls_bootstrap_servers,
                         security_protocol="SASL_SSL", sasl_username=USER, sasl_password=PASSWORD,
                         ssl_ca_file=str(kafka.ca_file))
    topic = "shop.public.customers"
    writer = KafkaWriter(settings, {"customers": topic}, partitions=1)
    writer.write("customers", ['{"id": 1}', '{"id": 2}', "null"], keys=['{"id": 1}', '{"id": 2}', '{"id": 2}'])
    writer.sync()
    writer.close_all()
    with Broker(settings) as broker:
        assert broker.watermarks(topic) == {0: (0, 3)}
        assert broker.count(topic, 0, [Range(topic, 0, 0, 3)]) == {f"kafka://{topic}/0/0-3": 3}


def test_a_wrong_password_is_refused_at_once_and_the_error_does_not_hold_it(kafka, produced, monkeypatch, tmp_path,
                                                                            caplog):
    caplog.set_level(logging.DEBUG)
    wrong = 'Wr0ng"pass\\word'
    settings = _settings(monkeypatch, tmp_path, bootstrap_servers=kafka.bootstrap_servers,
                         security_protocol="SASL_PLAINTEXT", sasl_username=USER, sasl_password=wrong)
    started = time.monotonic()
    with pytest.raises(KafkaUnreachableError, match=rf"(?s)Kafka at {kafka.bootstrap_servers} over SASL_PLAINTEXT "
                       rf"\(as user 'alice', PLAIN\) refused the sign-in: .*Invalid username or password.*"
                       "LAKEHOUSE_KAFKA_SASL_PASSWORD") as refused:
        with Broker(settings) as broker:
            broker.watermarks(TOPIC)
    assert time.monotonic() - started < landing_kafka.TIMEOUT_S / 2  # not a timeout: the refusal ends the wait
    for text in (str(refused.value), caplog.text):
        assert wrong not in text and PASSWORD not in text and "pass\\word" not in text


def test_a_client_that_does_not_sign_in_is_refused(kafka, produced, monkeypatch, tmp_path):
    monkeypatch.setattr(landing_kafka, "TIMEOUT_S", 3.0)
    settings = _settings(monkeypatch, tmp_path, bootstrap_servers=kafka.bootstrap_servers)
    assert client_config(settings) == {"bootstrap.servers": kafka.bootstrap_servers}
    with pytest.raises(KafkaUnreachableError, match=rf"Kafka at {kafka.bootstrap_servers} over PLAINTEXT did not "
                       r"answer within 3 s: .*LAKEHOUSE_KAFKA_SECURITY_PROTOCOL"):
        with Broker(settings) as broker:
            broker.watermarks(TOPIC)


def test_a_ca_that_did_not_sign_the_brokers_certificate_fails_the_handshake(kafka, produced, monkeypatch, tmp_path):
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_text((kafka.root / "tls" / "broker.crt").read_text())  # a certificate, not the CA that signed it
    settings = _settings(monkeypatch, tmp_path, bootstrap_servers=kafka.tls_bootstrap_servers,
                         security_protocol="SASL_SSL", sasl_username=USER, sasl_password=PASSWORD,
                         ssl_ca_file=str(other_ca))
    with pytest.raises(KafkaUnreachableError, match=r"the TLS handshake failed: .*certificate verify failed.*"
                       "LAKEHOUSE_KAFKA_SSL_CA_FILE") as refused:
        with Broker(settings) as broker:
            broker.watermarks(TOPIC)
    _no_secret(str(refused.value))


# -- the properties each client gets (no broker) --------------------------------------------------------------


def test_each_client_gets_the_same_connection_and_sign_in(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = Settings(home=tmp_path, kafka_bootstrap_servers="k1:9093,k2:9093", kafka_security_protocol="sasl_ssl",
                        kafka_sasl_mechanism="scram-sha-512", kafka_sasl_username="lake",
                        kafka_sasl_password='a"b\\c d', kafka_ssl_ca_file=str(ca))
    assert client_config(settings) == {
        "bootstrap.servers": "k1:9093,k2:9093", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "lake", "sasl.password": 'a"b\\c d', "ssl.ca.location": str(ca)}
    assert spark_options(settings) == {
        "kafka.bootstrap.servers": "k1:9093,k2:9093", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="lake" password="a\\"b\\\\c d";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(ca)}

    plain = settings.with_(kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_mechanism="PLAIN",
                           kafka_ssl_ca_file="", kafka_sasl_password="p\nw")
    assert spark_options(plain)["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="lake" password="p\\nw";')
    assert "ssl.ca.location" not in client_config(plain) and "kafka.ssl.truststore.location" not in spark_options(plain)

    tls_only = Settings(home=tmp_path, kafka_bootstrap_servers="k1:9093", kafka_security_protocol="SSL")
    assert client_config(tls_only) == {"bootstrap.servers": "k1:9093", "security.protocol": "SSL"}
    assert spark_options(tls_only) == {"kafka.bootstrap.servers": "k1:9093", "kafka.security.protocol": "SSL"}
    with pytest.raises(ConfigurationError, match="LAKEHOUSE_KAFKA_SASL_PASSWORD"):
        settings.with_(kafka_sasl_password="")
