"""Real change data capture: a real PostgreSQL, the real Debezium connector, and silver equal to the source.

A throwaway PostgreSQL (wal_level=logical) holds two tables with rows in place;
`lakehouse capture` (Debezium 3.6's PostgreSQL connector, embedded) takes the
initial snapshot, then 2,000 transactions from four concurrent sessions (multi-row
inserts, updates, deletes, primary-key updates, delete-then-reinsert, updates that
leave a TOASTed column unchanged, primary-key updates of rows whose TOASTed text
and jsonb stay unchanged on a table with the default replica identity, and an ADD
COLUMN half way) are captured too. Bronze and silver then hold, for each table,
exactly `SELECT *` of the source, value for value, with Debezium's default
encodings and with its string ones, and history no version made of a delete's
default values; again after the capture was SIGKILLed between writing a file and
flushing offsets, and after it was stopped by SIGTERM.
"""

import dataclasses
import datetime as dt
import hashlib
import hmac
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path

import psycopg2
import pytest
from dagster import DagsterInstance, materialize
from pyspark.sql import functions as F

from lakehouse_assets.build import build_definitions
from lakehouse_assets.landing.reader import _read_lines
from lakehouse_assets.live.cdc_stream import CdcStream
from lakehouse_assets.operations.schedules import maintenance_when_due
from lakehouse_assets.project import load_project
from lakehouse_assets.project.model import TablePolicy
from lakehouse_assets.runtime.pii import pii_key
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.settings import Settings
from lakehouse_assets.sources import change_records as cdc
from lakehouse_assets.sources.change_records import READ_HEAD, READ_JSON, bronze_cdc_schema, parse_cdc, survey_cdc
from lakehouse_services.kafka import LocalKafka
from lakehouse_services.kafka_connect import LocalKafkaConnect, connect_jars
from lakehouse_services.postgres import ThrowawayPostgres

from .test_cdc_stream import compacted_between_commits, operations, started

# The capture as a user runs it, in processes of its own for minutes: with the whole deployments (make e2e).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TODAY = dt.datetime.now(dt.timezone.utc).date()
LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))

DECLARATION = """\
name: app_{mode}
start_date: {start}
landing:
  settle: 0s    # the capture lands each file whole, renamed into place
cdc:
  app{suffix}:
    connector: postgresql
    database: source
    schema: public
    decimal_handling_mode: {decimal}
    time_precision_mode: {time}
{kafka}    tables:
      accounts:
        primary_key: [id]
        columns:
          id: long
          email: string
          name: string
          balance: "decimal(12,2)"
          rate: "decimal(38,10)"
          created: timestamp
          seen: timestamp
          birthday: date
          active: boolean
          prefs: json
          token: uuid
        pii: [email]
      docs:
        primary_key: [id]
        columns: {{id: int, title: string, body: string, meta: json}}
"""
MODES = {
    "default": {"suffix": "", "decimal": "precise", "time": "adaptive", "kafka": ""},
    "string": {"suffix": "_s", "decimal": "string", "time": "adaptive_time_microseconds", "kafka": ""},
}
# Debezium writing the tables' change topics to a Kafka broker (as in Kafka Connect), bronze reading them there:
# written by `lakehouse capture`, or by Debezium's connector in a Kafka Connect worker, as a team deploys it.
ON_KAFKA = {"kafka": {"suffix": "_k", "decimal": "precise", "time": "adaptive", "kafka": "    kafka: true\n"},
            "connect": {"suffix": "_c", "decimal": "precise", "time": "adaptive", "kafka": "    kafka: true\n"}}


def _mode(mode: str) -> dict:
    return MODES.get(mode) or ON_KAFKA[mode]

SCHEMA_SQL = """
CREATE TABLE accounts (id bigint PRIMARY KEY, email text, name text, balance numeric(12,2), rate numeric,
  created timestamp, seen timestamptz, birthday date, active boolean, prefs jsonb, token uuid);
ALTER TABLE accounts REPLICA IDENTITY FULL;
CREATE TABLE docs (id int PRIMARY KEY, title text, body text, meta jsonb);  -- default identity: unchanged TOAST
                                                                           -- is not sent, a delete sends the key
"""


def _account(rng, n):
    return (n, f"user{n}@example.com", f"User {n}", Decimal(rng.randrange(-10_000, 1_000_000)) / 100,
            Decimal(rng.randrange(1, 10**9)) / 10**rng.randrange(0, 8),
            dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rng.randrange(10**13)),
            dt.datetime(2024, 6, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=rng.randrange(10**13)),
            dt.date(1950, 1, 1) + dt.timedelta(days=rng.randrange(20_000)), rng.random() < 0.5,
            json.dumps({"theme": rng.choice(["dark", "light"]), "n": n}), str(uuid.UUID(int=rng.getrandbits(128))))


INSERT = "INSERT INTO accounts VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"


def _body(rng, n=6000):
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(n))  # TOASTed, incompressible


def _doc(rng, n):
    return (n, f"doc {n}", _body(rng), json.dumps({"notes": _body(rng, 4000), "n": n}))


INSERT_DOC = "INSERT INTO docs VALUES (%s, %s, %s, %s)"


def workload(dsn, transactions, seed, add_column_after=None):
    """`transactions` transactions from four concurrent sessions; ADD COLUMN once, half way, if asked."""
    done = {"n": 0, "failed": 0}
    lock = threading.Lock()

    def session(worker):
        rng = random.Random(f"{seed}-{worker}")
        conn = psycopg2.connect(dsn)
        cur = conn.cursor()
        while True:
            with lock:
                if done["n"] >= transactions:
                    break
                done["n"] += 1
                n = done["n"]
            try:
                if add_column_after is not None and n == add_column_after:
                    cur.execute("ALTER TABLE accounts ADD COLUMN tier text")
                kind = rng.random()
                cur.execute("SELECT id FROM accounts ORDER BY random() LIMIT 3")
                ids = [r[0] for r in cur.fetchall()]
                if kind < 0.25 or not ids:
                    for _ in range(rng.randint(1, 3)):  # multi-row
                        cur.execute(INSERT, _account(rng, rng.randrange(10**6, 10**9)))
                elif kind < 0.55:
                    cur.execute("UPDATE accounts SET balance = balance + %s, name = %s, seen = now() WHERE id = %s",
                                (Decimal(rng.randrange(-500, 500)) / 100, f"Renamed {n}", ids[0]))
                elif kind < 0.62:
                    cur.execute("DELETE FROM accounts WHERE id = %s", (ids[0],))
                elif kind < 0.68:
                    cur.execute("UPDATE accounts SET id = %s WHERE id = %s", (rng.randrange(10**9, 2 * 10**9), ids[0]))
                elif kind < 0.74:  # delete then reinsert the same key, one transaction
                    cur.execute("DELETE FROM accounts WHERE id = %s", (ids[0],))
                    cur.execute(INSERT, _account(rng, ids[0]))
                elif kind < 0.80:
                    cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'accounts' "
                                "AND column_name = 'tier'")
                    if cur.fetchone():
                        cur.execute("UPDATE accounts SET tier = %s WHERE id = %s", (rng.choice(["gold", "silver"]),
                                                                                       ids[0]))
                    else:
                        cur.execute("UPDATE accounts SET active = NOT active WHERE id = %s", (ids[0],))
                elif kind < 0.90:
                    cur.execute("SELECT id FROM docs ORDER BY random() LIMIT 1")
                    doc = cur.fetchone()[0]
                    if kind < 0.85:  # the TOASTed body and meta are not touched: Debezium sends placeholders
                        cur.execute("UPDATE docs SET title = %s WHERE id = %s", (f"title {n}", doc))
                    elif kind < 0.88:  # a new key for the row; the create of the new key has no body or meta to send
                        cur.execute("UPDATE docs SET id = %s WHERE id = %s", (rng.randrange(10**6, 10**9), doc))
                    else:  # a delete sends the key and type defaults; a new document takes its place
                        cur.execute("DELETE FROM docs WHERE id = %s", (doc,))
                        cur.execute(INSERT_DOC, _doc(rng, rng.randrange(10**6, 10**9)))
                else:
                    cur.execute("UPDATE docs SET body = %s WHERE id = (SELECT id FROM docs ORDER BY random() LIMIT 1)",
                                (_body(rng),))
                conn.commit()
            except psycopg2.Error:
                conn.rollback()  # a unique or deadlock conflict between sessions: a real workload has them
                with lock:
                    done["failed"] += 1
        conn.close()

    threads = [threading.Thread(target=session, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


def _env(root, mode):
    return {**os.environ, "LAKEHOUSE_PROJECT": str(root / mode / "lakehouse.yaml"),
            "LAKEHOUSE_HOME": str(root / mode / "home"), "LAKEHOUSE_LANDING": str(root / mode / "landing")}


def _capture_command(mode, dsn):
    return [LAKEHOUSE, "capture", "--source", "app" + _mode(mode)["suffix"], "--dsn", dsn, "--until-idle", "4",
            "--max-seconds", "240", "--json"]


def capture(root, mode, dsn, failpoint=None):
    env = _env(root, mode)
    if failpoint:
        env["LAKEHOUSE_FAILPOINTS"] = failpoint
    return subprocess.run(_capture_command(mode, dsn), env=env, capture_output=True, text=True, timeout=400)


def capture_each(root, modes, dsn) -> dict[str, subprocess.CompletedProcess]:
    """A capture of each mode, all at once (each its own slot and publication on the one database), as
    connectors of one source run side by side; each finished as `capture` finishes one."""
    running = {mode: subprocess.Popen(_capture_command(mode, dsn), env=_env(root, mode), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for mode in modes}
    done = {}
    for mode, process in running.items():
        out, err = process.communicate(timeout=400)
        done[mode] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    return done


def source_rows(dsn, table):
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    cur.execute(f"SELECT * FROM {table}")
    names = [d[0] for d in cur.description]
    rows = {r[0]: dict(zip(names, r)) for r in cur.fetchall()}
    conn.close()
    return rows


def as_silver(row, key):
    """A source row as silver stores it: UTC naive times, the email as its keyed hash, JSON as text."""
    out = dict(row)
    out["email_hash"] = hmac.new(key, out.pop("email").encode(), hashlib.sha256).hexdigest() if "email" in row else None
    if out.get("seen") is not None:
        out["seen"] = out["seen"].astimezone(dt.timezone.utc).replace(tzinfo=None)
    return out


def silver_rows(lakehouse, table):
    rows = lakehouse.spark.table(lakehouse.table_id(table)).drop("change_position", "last_op", "source_ts").collect()
    return {r["id"]: r.asDict() for r in rows}


def assert_equal(got, want):
    assert sorted(got) == sorted(want), f"keys: {len(got)} in silver, {len(want)} in the source"
    for k, row in want.items():
        for column, value in row.items():
            have = got[k].get(column)
            if isinstance(value, dict):  # jsonb: the same document, whatever its spacing
                have = json.loads(have)
            assert have == value, (k, column, have, value)


def slots(dsn) -> list[str]:
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    cur.execute("SELECT slot_name FROM pg_replication_slots ORDER BY slot_name")
    names = [r[0] for r in cur.fetchall()]
    conn.close()
    return names


@pytest.fixture
def source(tmp_path):
    """`source(*modes)`: a PostgreSQL of the test's own with the tables' first rows, and each mode's capture (its
    home, offsets, replication slot) after its initial snapshot. Nothing another test changed is seen: a test
    runs alone or in any order."""
    servers = []

    def start(*modes):
        root = tmp_path / "capture"
        pg = ThrowawayPostgres(root / "pg").start()
        servers.append(pg)
        conn = psycopg2.connect(pg.dsn)
        cur = conn.cursor()
        cur.execute(SCHEMA_SQL)
        rng = random.Random(5)
        for n in range(1, 201):
            cur.execute(INSERT, _account(rng, n))
        for n in range(1, 21):
            cur.execute(INSERT_DOC, _doc(rng, n))
        conn.commit()
        conn.close()
        for mode in modes:
            (root / mode).mkdir()
            (root / mode / "lakehouse.yaml").write_text(DECLARATION.format(
                mode=mode, start=TODAY - dt.timedelta(days=1), **_mode(mode)))
        # The initial snapshot before any change: the test's changes are then all streamed.
        for mode, first in capture_each(root, modes, pg.dsn).items():
            assert first.returncode == 0, (mode, first.stderr[-3000:])
            assert json.loads(first.stdout)["records"] == 220, "the initial snapshot: every row once"
        return root, pg

    yield start
    for pg in servers:
        pg.stop()


def lakehouse_of(lake_settings, root, mode, namespace, home=None) -> LakehouseResource:
    """The lakehouse of a mode's capture, on the session's catalog and warehouse; with `home`, the capture's home
    is the lakehouse's too (its staging and PII key), as when both run on one machine."""
    return LakehouseResource(home=str(home or lake_settings.home), catalog_uri=lake_settings.catalog_uri,
                             warehouse=lake_settings.warehouse, spark_master=lake_settings.spark_master,
                             namespace=namespace, landing=str(root / mode / "landing"))


def apply(spark, lake_settings, root, mode, namespace, home=None):
    project = load_project(root / mode / "lakehouse.yaml")
    defs = build_definitions(project, Settings.from_env())
    lakehouse = lakehouse_of(lake_settings, root, mode, namespace, home)
    today = dt.datetime.now(dt.timezone.utc).date()  # past midnight, the captures' files are in two days' folders
    result = materialize(list(defs.assets), resources={"lakehouse": lakehouse}, instance=DagsterInstance.ephemeral(),
                         tags={"dagster/asset_partition_range_start": TODAY.isoformat(),
                               "dagster/asset_partition_range_end": today.isoformat()})
    assert result.success
    return lakehouse


def test_silver_equals_the_source_after_snapshot_and_2000_concurrent_transactions(spark, lake_settings, source):
    """Debezium's default encodings and its string ones, each a capture with a slot of its own on one database;
    then one of them drops its slot and publication, and the other's stay."""
    root, pg = source(*MODES)
    assert slots(pg.dsn) == ["lakehouse_app", "lakehouse_app_s"]
    stats = workload(pg.dsn, 2000, seed=1, add_column_after=1000)
    assert stats["n"] == 2000
    for mode, second in capture_each(root, MODES, pg.dsn).items():
        assert second.returncode == 0, (mode, second.stderr[-3000:])
        assert json.loads(second.stdout)["records"] > 2000, mode
    for mode in MODES:
        silver_is_the_source(spark, lake_settings, root, pg, mode)
    read_the_same_however_written(spark, root)

    env = {**os.environ, "LAKEHOUSE_PROJECT": str(root / "string" / "lakehouse.yaml"),
           "LAKEHOUSE_HOME": str(root / "string" / "home")}
    done = subprocess.run([LAKEHOUSE, "capture", "--source", "app_s", "--dsn", pg.dsn, "--drop-slot"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "replication slot lakehouse_app_s" in done.stdout and "publication lakehouse_app_s" in done.stdout
    assert slots(pg.dsn) == ["lakehouse_app"]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with LocalKafka(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_silver_equals_the_source_through_kafka_topics(spark, lake_settings, source, kafka, monkeypatch):
    """The capture writes each table's change topic (3 partitions, keyed by the row's key, as Kafka Connect's JSON
    converter with schemas writes key and value), nothing into the landing zone; bronze takes the topics by
    offset ranges; silver is the source after the snapshot and 600 concurrent transactions with an ADD COLUMN
    half way and primary-key updates."""
    monkeypatch.setenv("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", kafka.bootstrap_servers)
    root, pg = source("kafka")
    stats = workload(pg.dsn, 600, seed=3, add_column_after=300)
    assert stats["n"] == 600
    second = capture(root, "kafka", pg.dsn)
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads(second.stdout)["records"] > 600
    topics = kafka.admin().list_topics(timeout=10).topics
    assert len(topics["app_k.public.accounts"].partitions) == 3 and "app_k.public.docs" in topics
    assert not (root / "kafka" / "landing").exists()
    lakehouse = silver_is_the_source(spark, lake_settings, root, pg, "kafka")
    files = {r.source_file.rsplit("/", 1)[0] for r in lakehouse.spark.table(lakehouse.table_id("bronze_cdc_accounts"))
             .select("source_file").distinct().collect()}
    assert files == {f"kafka://app_k.public.accounts/{p}" for p in range(3)}  # keys spread over the partitions


def debezium_in_connect(dsn: str, prefix: str) -> dict[str, str]:
    """Debezium's PostgreSQL connector as a team configures it for Kafka Connect: the database, the tables, the
    topic prefix, pgoutput, and the topics created by the worker with 3 partitions; every encoding Debezium's
    default."""
    parts = dict(item.split("=", 1) for item in dsn.split())
    return {"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": parts["host"], "database.port": parts["port"], "database.user": parts["user"],
            "database.password": parts.get("password", ""), "database.dbname": parts["dbname"],
            "topic.prefix": prefix, "plugin.name": "pgoutput", "slot.name": f"debezium_{prefix}",
            "publication.name": f"debezium_{prefix}", "publication.autocreate.mode": "filtered",
            "table.include.list": "public.accounts,public.docs",
            "topic.creation.default.partitions": "3", "topic.creation.default.replication.factor": "1"}


def _end_offsets(kafka, topics: list[str]) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka.client_config(**{"group.id": "end-offsets", "enable.auto.commit": False}))
    try:
        offsets = {}
        for topic in topics:
            found = consumer.list_topics(topic, timeout=10).topics[topic]
            for partition in found.partitions if found.error is None else ():
                offsets[(topic, partition)] = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                                             timeout=10)[1]
        return offsets
    finally:
        consumer.close()


def sent_everything(kafka, topics: list[str], quiet: float = 8.0, timeout: float = 300.0) -> dict:
    """The topics' end offsets once they have not moved for `quiet` seconds: the connector sent what it had."""
    started = time.monotonic()
    last, since = _end_offsets(kafka, topics), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() - started < timeout, f"the topics still grow after {timeout} s: {last}"
        time.sleep(1)
        now = _end_offsets(kafka, topics)
        if now != last:
            last, since = now, time.monotonic()
    return last


@pytest.mark.parametrize("schemas", [True, pytest.param(False, marks=pytest.mark.soak)], ids=["schemas", "bare"])
def test_silver_equals_the_source_through_debezium_running_in_kafka_connect(spark, lake_settings, source, monkeypatch,
                                                                             tmp_path, request, schemas):
    """Debezium's PostgreSQL connector in a Kafka Connect worker (Connect's JSON converter for key and value, with
    their schemas or bare; the topics created by the worker), no capture of ours: the snapshot, 300 concurrent
    transactions, the worker SIGKILLed while they stream and started again on its offsets file (the snapshot is not
    taken again; changes after its last flush may come twice), 300 more with an ADD COLUMN half way and primary-key
    updates. Bronze takes every record of the topics as Connect wrote them, and silver and its history are the
    database's rows."""
    kafka = LocalKafka(tmp_path / "kafka").start()  # a broker of its own: the topics' names are the same in each case
    request.addfinalizer(kafka.stop)
    monkeypatch.setenv("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", kafka.bootstrap_servers)
    root, pg = source()
    (root / "connect").mkdir()
    (root / "connect" / "lakehouse.yaml").write_text(DECLARATION.format(
        mode="connect", start=TODAY - dt.timedelta(days=1), **_mode("connect")))
    topics = ["app_c.public.accounts", "app_c.public.docs"]
    connectors = {"app-c": debezium_in_connect(pg.dsn, "app_c")}
    with LocalKafkaConnect(tmp_path / "connect", kafka.bootstrap_servers, connectors, schemas=schemas) as worker:
        class_path = Path(f"/proc/{worker.pid}/cmdline").read_bytes().split(b"\0")
        assert class_path[class_path.index(b"-cp") + 1].decode().split(":") == [str(p) for p in connect_jars()]
        assert sum(sent_everything(kafka, topics).values()) == 220, "the snapshot: every row once"
        load = threading.Thread(target=workload, args=(pg.dsn, 300), kwargs={"seed": 6})
        load.start()
        while sum(_end_offsets(kafka, topics).values()) < 300 and load.is_alive():  # streaming has begun
            time.sleep(0.2)
        os.kill(worker.pid, signal.SIGKILL)
        worker.stop()  # (a process killed from outside: only waited for)
        load.join()
    with LocalKafkaConnect(tmp_path / "connect", kafka.bootstrap_servers, connectors, schemas=schemas) as again:
        assert again.status("app-c")["tasks"][0]["state"] == "RUNNING"
        assert workload(pg.dsn, 300, seed=7, add_column_after=150)["n"] == 300
        sent = sent_everything(kafka, topics)
    assert {partition for _, partition in sent} == {0, 1, 2}
    assert not (root / "connect" / "landing").exists()
    lakehouse = silver_is_the_source(spark, lake_settings, root, pg, "connect")
    bronze = lakehouse.spark.table(lakehouse.table_id("bronze_cdc_accounts"))
    assert bronze.count() == sum(n for (topic, _), n in sent.items() if topic == topics[0]), \
        "every record of the topic in bronze, the ones sent again included"
    key = json.loads(bronze.where("op = 'r'").select("source_key").first()[0])
    assert set(key["payload"] if schemas else key) == {"id"} and ("schema" in key) == schemas, key  # Connect's key
    files = {r.source_file.rsplit("/", 1)[0] for r in bronze.select("source_file").distinct().collect()}
    assert files == {f"kafka://{topics[0]}/{p}" for p in range(3)}


def _rewritten(line: str, n: int) -> str:
    """A record as one of three writers of a shared folder passes it on: as captured, spaced with its schema's keys
    reversed, or with every key sorted (the payload first, as `jq -S -c` writes it)."""
    record = json.loads(line)
    if n % 3 == 0 or not isinstance(record, dict) or not isinstance(record.get("schema"), dict):
        return line
    if n % 3 == 2:
        return json.dumps(record, sort_keys=True, separators=(",", ":"))

    def reverse(value):
        if isinstance(value, dict):
            return {k: reverse(v) for k, v in reversed(value.items())}
        return [reverse(v) for v in value] if isinstance(value, list) else value
    return json.dumps({"schema": reverse(record["schema"]), "payload": record["payload"]})


def read_the_same_however_written(spark, root):
    """The captured records of `accounts` (decimals, timestamps, text; a column added half way), rewritten line by
    line as other writers pass them on: the line reader's count finds every way each schema is written, each
    schema's encodings are decided once for all its ways, every record is read at once, and each gives the row
    it gives as captured."""
    info = load_project(root / "default" / "lakehouse.yaml").cdc["accounts"]
    schema = bronze_cdc_schema(info)
    captured = sorted((root / "default" / "landing" / "cdc" / "accounts").rglob("*.jsonl"))
    mixed = root / "mixed"
    for path in captured:
        target = mixed / path.relative_to(root / "default" / "landing")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(_rewritten(line, k) + "\n" for k, line in enumerate(path.read_text().splitlines())))
    rows = {}
    for name, files in (("captured", captured), ("mixed", sorted(mixed.rglob("*.jsonl")))):
        landed = _read_lines(spark, [f"file:{f}" for f in files], json=READ_JSON, head=READ_HEAD)
        known = cdc._known(landed.heads)
        if name == "mixed":  # two schemas (before and after the added column), each written three ways
            assert len(landed.heads) == 6 and len(known.encodings) == 2 and len(known.heads) == 6
            records = landed.lines.where("payload != 'null'")  # (a delete's tombstone: the literal null)
            assert records.where(known.index(landed.lines).isNull() | F.col("_json_head").isNull()).count() == 0
        parsed = parse_cdc(info, landed.lines, schema, heads=survey_cdc(landed.lines, schema, landed.heads).heads)
        rows[name] = sorted(tuple(r) for r in parsed.drop("source_file", "payload", cdc.IMAGE_KEYS).collect())
    assert rows["mixed"] == rows["captured"] and len(rows["captured"]) > 2000
    assert all(r[-1] is None for r in rows["captured"])  # (reason: none quarantined)


def silver_is_the_source(spark, lake_settings, root, pg, mode):
    lakehouse = apply(spark, lake_settings, root, mode, f"t_capture_{mode}_{uuid.uuid4().hex[:6]}")
    assert_silver_is_the_source(lakehouse, pg, mode)
    return lakehouse


def assert_silver_is_the_source(lakehouse, pg, mode):
    """Silver and history of both tables hold the source's rows, bronze the snapshot at one position and the
    unchanged TOASTed values of key changes, the quarantine nothing."""
    key = pii_key(lakehouse.settings)
    accounts = {k: as_silver(r, key) for k, r in source_rows(pg.dsn, "accounts").items()}
    assert any(r.get("tier") for r in accounts.values()), "the column added half way has values"
    assert_equal(silver_rows(lakehouse, "silver_accounts"), accounts)
    assert_equal(silver_rows(lakehouse, "silver_docs"), source_rows(pg.dsn, "docs"))
    history = lakehouse.spark.table(lakehouse.table_id("silver_accounts_history")).where("is_current AND op != 'd'")
    current = {r["id"]: r.asDict() for r in history.drop("key", "op", "change_position", "valid_from", "valid_to",
                                                          "valid_to_position", "is_current").collect()}
    assert_equal(current, accounts)
    docs = source_rows(pg.dsn, "docs")
    # docs/guarantees.md's point-in-time query, asked for now, is the source's table: no deleted row, no placeholder.
    now = lakehouse.spark.sql(
        f"SELECT * FROM {lakehouse.table_id('silver_docs_history')} WHERE valid_from <= current_timestamp() "
        "AND (valid_to IS NULL OR valid_to > current_timestamp()) AND op <> 'd'").collect()
    assert_equal({r["id"]: r.asDict() for r in now}, docs)
    history = lakehouse.spark.table(lakehouse.table_id("silver_docs_history"))
    deletes = history.where("op = 'd'")
    assert deletes.count() > 0 and deletes.where("title IS NOT NULL OR body IS NOT NULL OR meta IS NOT NULL").count() \
        == 0, "a delete's version holds the key only, not the type defaults Debezium sends beside it"
    bronze_docs = lakehouse.spark.table(lakehouse.table_id("bronze_cdc_docs"))
    if mode == "default":
        moved = bronze_docs.where("op = 'c' AND after.body = '__debezium_unavailable_value' "
                                  "AND after.meta = '__debezium_unavailable_value'").count()
        assert moved > 0, "key changes of rows whose TOASTed text and jsonb were untouched were captured"
    bronze = lakehouse.spark.table(lakehouse.table_id("bronze_cdc_accounts"))
    snapshot = bronze.where("op = 'r'").select("change_position").distinct().collect()
    assert bronze.where("op = 'r'").count() == 200 and len(snapshot) == 1, "one position for the whole snapshot"
    assert lakehouse.spark.table(lakehouse.table_id("bronze_cdc_accounts_quarantine")).count() == 0


def test_the_stream_applies_a_running_capture_as_it_lands_and_silver_equals_the_source(spark, lake_settings, source):
    """`lakehouse stream` beside a running capture, as deployed for minute freshness: while four sessions commit
    1,000 transactions (key changes of rows whose TOASTed values are unchanged, deletes and reinserts, an ADD
    COLUMN half way), Debezium lands its files and the stream applies them pass after pass, each file read once;
    once the capture is idle and the stream has taken its last file, silver and history equal the source. Every
    table is declared to be compacted past one small file, so the stream compacts them between its passes, across
    the ADD COLUMN too."""
    root, pg = source("default")
    lakehouse = lakehouse_of(lake_settings, root, "default", f"t_capture_stream_{uuid.uuid4().hex[:6]}")
    project = load_project(root / "default" / "lakehouse.yaml")
    tight = dataclasses.replace(project.maintenance, defaults=TablePolicy(max_small_files=1))
    stream = CdcStream(project, lakehouse, "app", poll_seconds=0.5, instance=DagsterInstance.ephemeral(),
                       log=lambda _: None, maintain=maintenance_when_due(lakehouse, tight, log=lambda _: None))
    landed = root / "default" / "landing" / "cdc"
    snapshot_files = len(list(landed.glob("*/date=*/capture-*.jsonl")))  # the fixture's initial snapshot
    stop, capturing = threading.Event(), None
    thread, failed = started(stream, stop)
    try:
        deadline = time.monotonic() + 300
        while sum(p.files for p in stream.passes) < snapshot_files and not failed:  # the tables made, warm
            assert time.monotonic() < deadline, stream.passes
            time.sleep(0.5)
        capturing = subprocess.Popen(
            [LAKEHOUSE, "capture", "--source", "app", "--dsn", pg.dsn, "--roll-seconds", "2", "--until-idle", "6",
             "--max-seconds", "300", "--json"],
            env=_env(root, "default"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for part in range(5):  # spread over ~20 s, so that the capture lands files while the stream applies
            workload(pg.dsn, 200, seed=6 + part, add_column_after=100 if part == 2 else None)
            time.sleep(4)
        out, err = capturing.communicate(timeout=400)
        assert capturing.returncode == 0, err[-3000:]
        taken_while_capturing = sum(p.files for p in stream.passes)
        files = list(landed.glob("*/date=*/capture-*.jsonl"))
        assert json.loads(out)["records"] > 1000 and len(files) > 4
        deadline = time.monotonic() + 300
        while sum(p.files for p in stream.passes) < len(files) and not failed:
            assert time.monotonic() < deadline, (len(files), stream.passes)
            time.sleep(0.5)
    finally:
        if capturing is not None and capturing.poll() is None:
            capturing.kill()
        stop.set()
        thread.join(timeout=300)
    assert not failed, failed
    assert sum(p.files for p in stream.passes) == len(files), "each landed file read once"
    assert taken_while_capturing > snapshot_files, "changes applied while the capture was still landing them"
    assert len([p for p in stream.passes if p.table == "accounts" and p.files]) >= 3
    assert compacted_between_commits(lakehouse, "silver_accounts"), operations(lakehouse, "silver_accounts")
    assert compacted_between_commits(lakehouse, "silver_accounts_history")
    assert_silver_is_the_source(lakehouse, pg, "default")


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_a_capture_killed_between_writing_and_flushing_offsets_loses_nothing(spark, lake_settings, source):
    root, pg = source("default")
    workload(pg.dsn, 300, seed=2)
    killed = capture(root, "default", pg.dsn, failpoint="capture:after-write")
    assert killed.returncode == -9, killed.stderr[-2000:]
    staging = list((root / "default" / "home" / "capture" / "app" / "staging").rglob("*.jsonl.part"))
    assert staging, "the killed capture left its fsynced part file behind"
    workload(pg.dsn, 100, seed=3)
    again = capture(root, "default", pg.dsn)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["recovered_part_files"], "published at the next start"
    lakehouse = apply(spark, lake_settings, root, "default", f"t_capture_kill_{uuid.uuid4().hex[:6]}")
    key = pii_key(lakehouse.settings)
    assert_equal(silver_rows(lakehouse, "silver_accounts"),
                 {k: as_silver(r, key) for k, r in source_rows(pg.dsn, "accounts").items()})
    assert_equal(silver_rows(lakehouse, "silver_docs"), source_rows(pg.dsn, "docs"))


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_a_capture_stopped_by_sigterm_publishes_everything_and_exits_0(spark, lake_settings, source):
    """What a supervisor (systemd, Kubernetes) does to stop it: SIGTERM, while part files are open."""
    root, pg = source("default")
    workload(pg.dsn, 200, seed=4)
    staging = root / "default" / "home" / "capture" / "app" / "staging"
    running = subprocess.Popen([LAKEHOUSE, "capture", "--source", "app", "--dsn", pg.dsn, "--roll-seconds", "3600",
                                "--max-seconds", "300", "--json"], env=_env(root, "default"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, steady_since, started = -1, time.monotonic(), time.monotonic()
    while time.monotonic() - steady_since < 5:  # the workload captured: the part files stop growing
        assert running.poll() is None and time.monotonic() - started < 200, running.communicate()[1][-3000:]
        now = sum(f.read_bytes().count(b"\n") for f in staging.rglob("*.jsonl.part"))
        if now != lines or now == 0:
            lines, steady_since = now, time.monotonic()
        time.sleep(0.5)
    running.send_signal(signal.SIGTERM)
    out, err = running.communicate(timeout=120)
    assert running.returncode == 0, err[-3000:]
    report = json.loads(out)
    assert report["records"] == lines > 0 and not list(staging.rglob("*.part")), "every part file published"
    landed = sum(Path(f.removeprefix("file:")).read_bytes().count(b"\n") for f in report["files"])
    assert landed == report["records"], "each record once in the landing zone"
    again = capture(root, "default", pg.dsn)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["records"] == 0, "offsets were flushed: nothing is captured twice"
    lakehouse = apply(spark, lake_settings, root, "default", f"t_capture_term_{uuid.uuid4().hex[:6]}")
    key = pii_key(lakehouse.settings)
    assert_equal(silver_rows(lakehouse, "silver_accounts"),
                 {k: as_silver(r, key) for k, r in source_rows(pg.dsn, "accounts").items()})
    assert_equal(silver_rows(lakehouse, "silver_docs"), source_rows(pg.dsn, "docs"))


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_a_capture_stopped_while_debezium_finishes_a_batch_exits_0_and_the_batch_comes_again(
        spark, lake_settings, source, tmp_path):
    """A stop (SIGTERM, or --until-idle's end) that reaches the engine between the handler's write and Debezium's
    commit of the batch's offsets: the engine is interrupted there. The capture still stops cleanly, and the
    batch, landed but not committed, is delivered again by the next capture (at least once, never lost)."""
    root, pg = source("default")
    workload(pg.dsn, 200, seed=5)
    env = {**_env(root, "default"), "LAKEHOUSE_FAILPOINTS": "capture:batch-handled~pause",
           "LAKEHOUSE_FAILPOINT_DIR": str(tmp_path)}
    running = subprocess.Popen([LAKEHOUSE, "capture", "--source", "app", "--dsn", pg.dsn, "--max-seconds", "300",
                                "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    while not (tmp_path / "capture:batch-handled.paused").exists():
        assert running.poll() is None and time.monotonic() - started < 200, running.communicate()[1][-3000:]
        time.sleep(0.2)
    running.send_signal(signal.SIGTERM)
    time.sleep(3)  # the stop reaches the engine while the batch is still in the handler
    (tmp_path / "capture:batch-handled.go").touch()
    out, err = running.communicate(timeout=180)
    assert running.returncode == 0, err[-3000:]
    first = json.loads(out)
    assert first["records"] > 0
    again = capture(root, "default", pg.dsn)
    assert again.returncode == 0, again.stderr[-3000:]
    lakehouse = apply(spark, lake_settings, root, "default", f"t_capture_mid_{uuid.uuid4().hex[:6]}")
    key = pii_key(lakehouse.settings)
    assert_equal(silver_rows(lakehouse, "silver_accounts"),
                 {k: as_silver(r, key) for k, r in source_rows(pg.dsn, "accounts").items()})
    assert_equal(silver_rows(lakehouse, "silver_docs"), source_rows(pg.dsn, "docs"))
