"""The promises of docs/guarantees.md about what is quarantined or rejected, and why, each with a case that breaks it.

Every Debezium quarantine reason of a PostgreSQL change stream, and every silver event rule of the shop's
declaration (with the first rule broken deciding), judged on the parsers the assets use.
"""

import datetime as dt
import json

import pytest

from lakehouse_assets.silver.events import first_broken_rule
from lakehouse_assets.sources.change_records import parse_cdc

from ..shop import SHOP

CUSTOMERS = SHOP.cdc["customers"]
SOURCE = {"lsn": 23456, "ts_ms": 1735725600000, "connector": "postgresql", "db": "shop", "schema": "public",
          "table": "customers", "txId": 7, "sequence": '["23400","23456"]', "snapshot": "false"}
ROW = {"customer_id": 41, "email": "a@example.com", "full_name": "A", "country": "NL",
       "created_at": 1735725600000000, "updated_at": 1735725600000000}


def _change(**changes) -> str:
    change = {"op": "u", "before": ROW, "after": {**ROW, "country": "BE"}, "source": SOURCE, "ts_ms": 1735725601000}
    change.update(changes)
    return json.dumps({k: v for k, v in change.items() if v is not ...})


CDC_LINES = {
    _change(): None,
    "null": None,  # a tombstone: kept as op t
    "": "blank line",
    "[1, 2]": "not a JSON object",
    '{"op": "u", ': "malformed JSON",
    json.dumps({"schema": {}, "payload": [1]}): "payload is not a JSON object",
    json.dumps({"schema": {}, "payload": "text"}): "payload is not a JSON object",
    _change(op=...): "missing op",
    _change(op="x"): "unknown op: x",
    _change(source=...): "missing source",
    _change(source={**SOURCE, "lsn": None}): "missing source position (lsn)",
    _change(source={**SOURCE, "lsn": "0/16B3748"}): "lsn is not a number: 0/16B3748",
    _change(source={**SOURCE, "ts_ms": "yesterday"}): "source.ts_ms is not a number",
    _change(source={**SOURCE, "lsn": "9" * 20}): "lsn is not a number: " + "9" * 20,  # past a long
    # The last commit of `sequence` orders the change: one of 20 digits or more gives no decimal(38,0) position.
    _change(source={**SOURCE, "sequence": f'["{"9" * 20}","23456"]'}): f'source position out of range: sequence '
                                                                      f'["{"9" * 20}","23456"]',
    # A sequence without a last commit that is a number: ordered by the lsn. A txId or envelope ts_ms that is not
    # a number is kept as null (no reason).
    _change(source={**SOURCE, "sequence": "[]"}): None,
    _change(source={**SOURCE, "sequence": '["x","23456"]'}): None,
    # Spaced, as other JSON writers than the connector's write it: the same order.
    _change(source={**SOURCE, "sequence": '[ "23400", "23456" ]'}): None,
    _change(source={**SOURCE, "txId": "seven"}, ts_ms="soon"): None,
    _change(op="c", before=None, after=...): "missing after image",
    _change(op="d", before=..., after=None): "missing before image",
    _change(after=[1, 2]): "after is not a JSON object",
    _change(before="customer 41"): "before is not a JSON object",
    _change(after={**ROW, "customer_id": "forty-one"}): "after.customer_id is not a bigint: forty-one",
    _change(before={**ROW, "created_at": "soon"}): "before.created_at is not a timestamp: soon",
    _change(after={k: v for k, v in ROW.items() if k != "customer_id"}): "missing primary key field customer_id",
}


def test_each_debezium_quarantine_reason_is_given_for_its_breakage(spark):
    """Under ANSI mode (Spark 4's default): a value that does not cast gives its reason, never fails the batch."""
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    lines = spark.createDataFrame(
        [("file:/landing/cdc/customers/date=2025-01-01/x.jsonl", n, dt.date(2025, 1, 1), payload)
         for n, payload in enumerate(CDC_LINES, start=1)],
        "source_file string, source_line int, landing_date date, payload string")
    got = {r.source_line: (r.op, r.reason) for r in parse_cdc(CUSTOMERS, lines).collect()}
    assert {n: reason for n, (_, reason) in got.items()} == dict(enumerate(CDC_LINES.values(), start=1))
    assert got[1][0] == "u" and got[2][0] == "t"
    # The kept changes that are not in the usual form are ordered by their lsn, with the fields that are not numbers
    # null.
    positions = {r.source_line: (r.change_position, r.source_tx_id, r.connector_ts)
                 for r in parse_cdc(CUSTOMERS, lines).collect()}
    first = list(CDC_LINES).index(_change(source={**SOURCE, "sequence": "[]"})) + 1
    assert [positions[n] for n in range(first, first + 4)] == [
        (23456 * 10**19 + 23456, 7, dt.datetime(2025, 1, 1, 10, 0, 1))] * 2 + [
        (23400 * 10**19 + 23456, 7, dt.datetime(2025, 1, 1, 10, 0, 1)), (23400 * 10**19 + 23456, None, None)]


INGESTED = dt.datetime(2025, 1, 1, 12, 0)
EVENTS = {  # (event_type, price, event_ts, user agent) -> the first rule broken, None when kept
    ("page_view", None, INGESTED, "Mozilla/5.0"): None,
    ("purchase", "19.99", INGESTED, "Mozilla/5.0"): None,
    ("refund", None, INGESTED, "Mozilla/5.0"): "unknown_event_type",
    (None, None, INGESTED, "Mozilla/5.0"): "unknown_event_type",
    ("page_view", None, INGESTED, "Googlebot/2.1"): "bot_user_agent",
    ("purchase", None, INGESTED, "Mozilla/5.0"): "purchase_without_price",
    ("add_to_cart", "-1.00", INGESTED, "Mozilla/5.0"): "negative_price",
    ("page_view", None, INGESTED + dt.timedelta(minutes=59), "Mozilla/5.0"): None,
    ("page_view", None, INGESTED + dt.timedelta(hours=2), "Mozilla/5.0"): "event_after_ingestion",
    # Two rules broken: the first declared decides.
    ("refund", "-1.00", INGESTED, "crawler"): "unknown_event_type",
    ("purchase", "-5.00", INGESTED + dt.timedelta(days=1), "HeadlessChrome"): "bot_user_agent",
    ("purchase", None, INGESTED + dt.timedelta(days=1), "Mozilla/5.0"): "purchase_without_price",
    # Landed (2025-01-01) more than max_lateness (30 days) after its time; unknown_event_type is declared first.
    ("page_view", None, dt.datetime(2024, 12, 1, 23, 59), "Mozilla/5.0"): "max_lateness",
    ("page_view", None, dt.datetime(2024, 12, 2), "Mozilla/5.0"): None,
    ("refund", None, dt.datetime(2024, 11, 1), "Googlebot/2.1"): "unknown_event_type",
    ("page_view", None, dt.datetime(2024, 11, 1), "Googlebot/2.1"): "max_lateness",
}


def test_each_silver_rule_rejects_what_it_names_and_the_first_broken_rule_decides(spark):
    events = spark.createDataFrame(
        [(n, event_type, price, event_ts, {"user_agent": agent}, INGESTED, INGESTED.date())
         for n, (event_type, price, event_ts, agent) in enumerate(EVENTS)],
        "n int, event_type string, price string, event_ts timestamp, properties map<string,string>, "
        "ingested_at timestamp, landing_date date",
    ).selectExpr("n", "event_type", "cast(price as decimal(12,2)) price", "event_ts", "properties", "ingested_at",
                 "landing_date")
    got = {r.n: r.rule for r in events.select("n", first_broken_rule(SHOP.events["events"]).alias("rule")).collect()}
    assert got == dict(enumerate(EVENTS.values()))


RULES = """\
name: rules
events:
  clicks:
    fields: {id: string, at: timestamp, props: map}
    key: id
    timestamp: at
    rules:
      - name: bulk
        field: props.quantity
        above: 10
      - name: late
        field: props.sent
        later_than_ingestion_by: 1h
"""


def test_a_rule_on_a_map_value_casts_its_text_and_text_that_does_not_cast_breaks_no_rule(spark):
    """A map's values are text: `above`/`below` read one as a number, `later_than_ingestion_by` as a time, null
    (the rule not broken) where it is not one, instead of Spark's cast failing the whole run under ANSI mode."""
    from lakehouse_assets.project import parse_project

    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    source = parse_project(RULES).events["clicks"]
    cases = {("3", None): None, ("12", None): "bulk", (" 12 ", None): "bulk", ("many", None): None, ("", None): None,
             (None, None): None, ("3", "2025-01-01 13:30:00"): "late", ("3", "2025-01-01 12:30:00"): None,
             ("3", "soon"): None}
    events = spark.createDataFrame([(n, {"quantity": q, "sent": sent}, INGESTED) for n, (q, sent) in enumerate(cases)],
                                   "n int, props map<string,string>, ingested_at timestamp")
    got = {r.n: r.rule for r in events.select("n", first_broken_rule(source).alias("rule")).collect()}
    assert got == dict(enumerate(cases.values()))


def test_the_same_landed_files_always_ask_for_the_same_run_key_so_the_daemon_launches_them_once(tmp_path):
    """The landing sensor's run key names the day and the files: a tick that sees the same files again (a lost
    cursor, a sensor reset) asks with the same key, which the daemon launches once; a new file is a new key."""
    from dagster import DagsterInstance

    from lakehouse_assets.runtime.resource import LakehouseResource

    from ..bronze.test_landing_sensors import evaluate

    lakehouse = LakehouseResource(home=str(tmp_path / "lake"), landing=str(tmp_path / "landing"), namespace="keys")
    folder = tmp_path / "landing" / "events" / "date=2025-01-01"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text('{"event_id": "a"}\n')
    instance = DagsterInstance.ephemeral()
    first = evaluate(lakehouse, instance)
    again = evaluate(lakehouse, instance)  # no cursor: as after a reset
    assert [r.run_key for r in first.run_requests] == [r.run_key for r in again.run_requests]
    assert len(first.run_requests) == 1 and first.run_requests[0].run_key.startswith("events:2025-01-01:")
    (folder / "b.jsonl").write_text('{"event_id": "b"}\n')
    third = evaluate(lakehouse, instance)
    assert [r.partition_key for r in third.run_requests] == ["2025-01-01"]
    assert third.run_requests[0].run_key != first.run_requests[0].run_key


def test_records_in_not_equal_to_kept_plus_quarantined_fails_the_run_loudly_with_nothing_published(lakehouse,
                                                                                                    monkeypatch):
    """The balance is checked on the staged branches, before anything is published: a record lost between
    reading and the tables (here a bug that drops line 3 on its way to bronze) fails the run naming the file and
    its counts,
    and none of bronze, quarantine or the ingest log moves, so the re-run takes the files afresh."""
    from dagster import DagsterInstance, materialize

    import lakehouse_assets.bronze.ingest as bronze_ingest
    from lakehouse_assets.errors import BalanceError

    from ..bronze.test_events_ingest import _event, held, land
    from ..shop import asset

    land(lakehouse, "a.jsonl", [json.dumps(_event(n)) for n in range(6)] + ["{cut"])
    real = bronze_ingest._conform

    def losing(df, schema):
        conformed = real(df, schema)
        return conformed.where("source_line != 3") if "event_id" in schema.fieldNames() else conformed

    monkeypatch.setattr(bronze_ingest, "_conform", losing)
    with pytest.raises(BalanceError, match="a.jsonl: 7 records, but bronze would hold 5 rows and the quarantine 1"):
        materialize([asset("bronze_events")], resources={"lakehouse": lakehouse}, partition_key="2025-01-01",
                    instance=DagsterInstance.ephemeral())
    for name in ("bronze_events", "bronze_events_quarantine", "bronze_ingest_log"):
        table = lakehouse.iceberg_table(name)
        assert table.current_snapshot() is None, name  # nothing published
        assert [r for r in table.metadata.refs if r != "main"] == [], name  # no write branch left behind

    monkeypatch.setattr(bronze_ingest, "_conform", real)
    materialize([asset("bronze_events")], resources={"lakehouse": lakehouse}, partition_key="2025-01-01",
                instance=DagsterInstance.ephemeral())
    assert held(lakehouse) == (6, 1, 7)
