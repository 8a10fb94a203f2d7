"""Debezium change streams into bronze_cdc_<table>: typed, complete, every bad record with its reason."""

import datetime as dt
import json
from collections import Counter
from decimal import Decimal

import pytest
from dagster import DagsterInstance, materialize

from examples.shop.cdc_generator import CDC_TABLES, generate_cdc

from ..shop import BRONZE_CDC as bronze_cdc_assets

pytestmark = pytest.mark.slow  # a module-wide pipeline run

DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2)]
# What a consumer calls each kind of breakage the generator makes.
REASONS = {
    "truncated_json": "malformed JSON",
    "unknown_op": "unknown op: ",
    "missing_op": "missing op",
    "missing_position": "missing source position",
    "after_not_object": "after is not a JSON object",
    "bad_key_type": "is not a bigint: ",
    "oversized": "record larger than 65536 bytes",
}


@pytest.fixture(scope="module")
def cdc(spark, lake_settings, tmp_path_factory):
    from lakehouse_assets.runtime.resource import LakehouseResource

    landing = tmp_path_factory.mktemp("cdc_landing")
    generated = generate_cdc(landing, DAYS, changes_per_day=150, malformed_rate=0.06, drift_day=DAYS[1],
                             binlog_events_per_file=40)
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace="t_cdc_ingest", landing=str(landing))
    result = materialize(bronze_cdc_assets, resources={"lakehouse": lakehouse}, instance=DagsterInstance.ephemeral(),
                         tags={"dagster/asset_partition_range_start": "2025-01-01",
                               "dagster/asset_partition_range_end": "2025-01-02"})
    assert result.success
    return lakehouse, generated


def _rows(lakehouse, table):
    return lakehouse.spark.table(lakehouse.table_id(table)).collect()


@pytest.mark.parametrize("table", list(CDC_TABLES))
def test_every_line_is_kept_or_quarantined_with_the_reason_of_its_breakage(cdc, table):
    lakehouse, generated = cdc
    days = [generated.day(table, d) for d in DAYS]
    bronze = _rows(lakehouse, f"bronze_cdc_{table}")
    quarantine = _rows(lakehouse, f"bronze_cdc_{table}_quarantine")

    assert len(bronze) + len(quarantine) == sum(d.lines for d in days)
    assert Counter(r.op for r in bronze)["t"] == sum(d.tombstones for d in days)
    assert len([r for r in bronze if r.op != "t"]) == sum(d.changes + d.duplicates for d in days)

    expected = sum((d.malformed for d in days), Counter())
    found = Counter()
    for row in quarantine:
        kinds = [k for k, reason in REASONS.items() if reason in row.reason]
        assert len(kinds) == 1, row.reason
        found[kinds[0]] += 1
    assert found == expected and sum(found.values()) > 0
    # The good records of files that had bad ones are in bronze all the same.
    assert {r.source_file for r in quarantine} <= {r.source_file for r in bronze}


@pytest.mark.parametrize("table", list(CDC_TABLES))
def test_bronze_holds_enough_to_rebuild_the_source_table_exactly(cdc, table):
    """Replaying bronze by change_position (not arrival, not ts_ms) gives the source's true final state."""
    lakehouse, generated = cdc
    info = CDC_TABLES[table]
    # A change is (key, position, op): a snapshot shares one position, a key change's delete and create too.
    changes = {(r.key, r.change_position, r.op): r for r in _rows(lakehouse, f"bronze_cdc_{table}") if r.op != "t"}
    state = {}
    for identity in sorted(changes, key=lambda i: (i[1], i[2] != "d")):
        change = changes[identity]
        image = change.before if change.op == "d" else change.after
        key = tuple(image[k] for k in info.primary_key)
        assert json.loads(change.key) == dict(zip(info.primary_key, key))
        if change.op == "d":
            state.pop(key, None)
        else:
            state[key] = change.after.asDict()

    def as_emitted(row):  # typed values back to Debezium's text forms
        out = {}
        for name, value in row.items():
            if isinstance(value, dt.datetime):
                value = value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            elif isinstance(value, Decimal):
                value = str(value)
            out[name] = value
        return out

    truth = generated.true_state[table]
    assert {k: {c: v for c, v in as_emitted(r).items() if v is not None or c in truth.get(k, {})}
            for k, r in state.items()} == truth


def test_a_new_field_in_after_images_becomes_a_nested_column(cdc):
    lakehouse, _ = cdc
    table = lakehouse.iceberg_table("bronze_cdc_customers")
    assert table.schema().find_field("after.loyalty_tier") and table.schema().find_field("before.loyalty_tier")
    rows = _rows(lakehouse, "bronze_cdc_customers")
    by_day = {d: {r.after.loyalty_tier for r in rows if r.after is not None and r.landing_date == d} for d in DAYS}
    assert by_day[DAYS[0]] == {None}
    assert by_day[DAYS[1]] - {None}, "changes landed on the drift day carry the new field"


def test_postgres_and_mysql_positions_and_both_envelope_forms(cdc):
    lakehouse, _ = cdc
    orders = _rows(lakehouse, "bronze_cdc_orders")
    for r in orders:
        if r.op == "t":
            continue
        doc = json.loads(r.payload)
        source = (doc.get("payload") or doc)["source"]
        last_commit = json.loads(source["sequence"])[0]
        # Commit order: a snapshot row at (lsn, 0), a streamed change at (last commit LSN or its own, lsn).
        expected = (r.source_lsn, 0) if r.op == "r" else (int(last_commit or r.source_lsn), r.source_lsn)
        assert r.change_position == expected[0] * 10**19 + expected[1], r
    assert len({r.change_position for r in orders if r.op == "r"}) == 1, "a snapshot shares one position"
    items = [r for r in _rows(lakehouse, "bronze_cdc_order_items") if r.op != "t"]
    assert all(r.binlog_file.startswith("mysql-bin.") and r.binlog_pos is not None for r in items)
    assert len({r.binlog_file for r in items}) > 1, "the binlog rolled over"
    wrapped = {json.loads(r.payload).get("schema") is not None for r in orders if r.op != "t"}
    assert wrapped == {True, False}
    snapshots = [r for r in orders if r.op == "r"]
    assert snapshots and all(r.snapshot for r in snapshots)
