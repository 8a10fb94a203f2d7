"""CDC applied by MERGE: current state equal to the source's true state, and an SCD2 history to ask about the past."""

import datetime as dt
import hashlib
import hmac
import json
import shutil
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize
from pyspark.sql import functions as F

from examples.shop.cdc_generator import CDC_TABLES, DRIFT_COLUMNS, generate_cdc
from lakehouse_assets.runtime.pii import pii_key
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.silver.cdc import _resolve_unavailable
from lakehouse_assets.sources.change_records import OPS, POSITION
from lakehouse_assets.sources.debezium_encodings import UNAVAILABLE

from ..shop import BRONZE_CDC as bronze_cdc_assets
from ..shop import SILVER_CDC as silver_cdc_assets

pytestmark = pytest.mark.slow  # a module-wide pipeline run

DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2), dt.date(2025, 1, 3)]


def run(lakehouse, assets, first, last=None):
    result = materialize(assets, resources={"lakehouse": lakehouse}, instance=DagsterInstance.ephemeral(),
                         tags={"dagster/asset_partition_range_start": first,
                               "dagster/asset_partition_range_end": last or first})
    assert result.success
    return result


@pytest.fixture(scope="module")
def cdc(spark, lake_settings, tmp_path_factory):
    landing = tmp_path_factory.mktemp("cdc_silver_landing")
    generated = generate_cdc(landing, DAYS, changes_per_day=200, malformed_rate=0.02, late_share=0.08,
                             duplicate_rate=0.05, drift_day=DAYS[2])
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace="t_cdc_silver", landing=str(landing))
    run(lakehouse, bronze_cdc_assets, "2025-01-01", "2025-01-03")
    # Silver days out of order: the last day first, so every change of earlier days
    # arrives "late", after newer changes (and deletes) of the same keys were applied.
    for day in ("2025-01-03", "2025-01-01", "2025-01-02"):
        run(lakehouse, silver_cdc_assets, day)
    return lakehouse, generated


def _typed(kind, value):
    if value is None:
        return None
    if kind == "timestamp":
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.timezone.utc).replace(tzinfo=None)
    if kind.startswith("decimal"):
        return Decimal(value)
    return value


def declared_columns(info, drifted):
    """Source column -> declared type: the declaration's, then the columns the source added (schema drift)."""
    return {**info.columns, **(DRIFT_COLUMNS.get(info.name, {}) if drifted else {})}


def position_number(change):
    """The change's source position as the one number silver stores (sources/change_records.py's documented encoding)."""
    if len(change.position) == 3:  # MySQL: binlog index, pos, row
        index, pos, row = change.position
        return Decimal(index * 10**16 + pos * 10**5 + row)
    a, b = change.position  # PostgreSQL: (last commit LSN or lsn, lsn), a snapshot row (lsn, 0)
    return Decimal(a * 10**19 + b)


def expected_row(info, row, key, last, drifted):
    """The true source row as silver stores it, from the generator's true state and the declaration alone: every
    declared column (personal data hashed, the others typed; a drift column null where the source had none), and
    the change it comes from (position, op, commit time)."""
    out = {}
    for name, kind in declared_columns(info, drifted).items():
        value = row[name] if name in info.columns else row.get(name)
        if name in info.pii:
            out[f"{name}_hash"] = None if value is None else hmac.new(key, value.encode(), hashlib.sha256).hexdigest()
        else:
            out[name] = _typed(kind, value)
    out["change_position"] = position_number(last)
    out["last_op"] = last.op
    out["source_ts"] = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=last.source["ts_ms"])
    return out


def last_changes(generated, table):
    """Key -> the newest change of it, in source (commit) order."""
    last = {}
    for change in sorted((c for c in generated.history if c.table == table), key=lambda c: c.position):
        last[change.key] = change
    return last


def assert_current_state_is_the_source(lakehouse, generated, table, drifted):
    info = CDC_TABLES[table]
    key = pii_key(lakehouse.settings)
    silver = lakehouse.spark.table(lakehouse.table_id(f"silver_{table}"))
    expected_columns = {f"{c}_hash" if c in info.pii else c for c in declared_columns(info, drifted)}
    assert set(silver.columns) == expected_columns | {"change_position", "last_op", "source_ts"}
    rows = silver.collect()
    got = {tuple(r[k] for k in info.primary_key): r.asDict() for r in rows}
    last = last_changes(generated, table)
    truth = {k: expected_row(info, row, key, last[k], drifted) for k, row in generated.true_state[table].items()}
    assert len(rows) == len(got) == len(truth)
    assert got == truth


@pytest.mark.parametrize("table", list(CDC_TABLES))
def test_current_state_equals_the_source_row_for_row(cdc, table):
    assert_current_state_is_the_source(*cdc, table, drifted=True)  # the fixture's last day drifts


def test_changes_that_land_days_after_their_commit_reach_silver(spark, lake_settings, tmp_path):
    """A capture down for a week, or an archive replayed: three days of changes land in one later day's
    folders. Silver's days are landing days, so that day's run applies them all, whatever their commit time."""
    generated = generate_cdc(tmp_path / "generated", DAYS, changes_per_day=80, malformed_rate=0.0,
                             late_share=0.1, duplicate_rate=0.05)
    landing, today = tmp_path / "landing", "2025-01-09"
    for n, f in enumerate(sorted((tmp_path / "generated").rglob("*.jsonl*"))):
        target = landing / "cdc" / f.parent.parent.name / f"date={today}" / f"{n:03d}-{f.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        f.rename(target)
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace=f"t_cdc_late_{uuid.uuid4().hex[:6]}", landing=str(landing))
    run(lakehouse, bronze_cdc_assets, today)
    bronze = lakehouse.spark.table(lakehouse.table_id("bronze_cdc_orders"))
    assert bronze.where("source_ts IS NOT NULL").count() > 0
    assert bronze.where(f"source_ts >= DATE'{today}' - INTERVAL 5 DAYS").count() == 0, "all committed days before"
    run(lakehouse, silver_cdc_assets, today)
    for table in CDC_TABLES:
        assert_current_state_is_the_source(lakehouse, generated, table, drifted=False)


def test_a_day_taken_file_by_file_reads_only_what_bronze_appended_and_equals_the_day_at_once(
        spark, lake_settings, tmp_path):
    """Files land through the day and silver runs after each bronze run: a later run of the day reads of bronze
    only what was appended since the day's last run, and silver ends equal to one run over the whole day, row
    for row, history included (out-of-order and redelivered changes among the files). A bronze commit that did
    more than append (a delete, as a forget makes) sends the next run back to the whole window."""
    generated = generate_cdc(tmp_path / "generated", DAYS[:1], changes_per_day=150, malformed_rate=0.0,
                             late_share=0.1, duplicate_rate=0.05)
    day, files = "2025-01-01", sorted((tmp_path / "generated").rglob("*.jsonl*"))
    takes = sorted({f.name for f in files})
    assert len(takes) >= 3

    def lake(name: str, landing: Path) -> LakehouseResource:
        return LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                 namespace=f"t_cdc_{name}_{uuid.uuid4().hex[:6]}", landing=str(landing))

    def land(landing: Path, names: set[str]) -> None:
        for f in files:
            if f.name in names:
                target = landing / f.relative_to(tmp_path / "generated")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, target)

    def silver_reads(result) -> dict[str, tuple[str, int]]:
        return {e.asset_key.path[-1]: (e.materialization.metadata["bronze_read"].value,
                                       e.materialization.metadata["changes_read"].value)
                for e in result.get_asset_materialization_events() if "bronze_read" in e.materialization.metadata}

    # Bronze and silver in one run, as a CDC table's landing sensor runs them.
    by_file, whole = lake("by_file", tmp_path / "by_file"), lake("whole", tmp_path / "whole")
    reads = []
    for take in takes:
        land(tmp_path / "by_file", {take})
        reads.append(silver_reads(run(by_file, bronze_cdc_assets + silver_cdc_assets, day)))
    land(tmp_path / "whole", set(takes))
    at_once = silver_reads(run(whole, bronze_cdc_assets + silver_cdc_assets, day))
    assert {f"silver_{t}" for t in CDC_TABLES} <= set(at_once)

    for table in CDC_TABLES:
        for name in (f"silver_{table}", f"silver_{table}_history"):
            rows = [sorted(map(repr, lake_.spark.table(lake_.table_id(name)).collect())) for lake_ in (by_file, whole)]
            assert rows[0] == rows[1], name
        assert_current_state_is_the_source(by_file, generated, table, drifted=False)
        name = f"silver_{table}"
        assert reads[0][name][0] == at_once[name][0] == "the whole window"
        assert all(r[name][0].startswith("appended since bronze snapshot ") for r in reads[1:]), reads
        # Each run read its own take's changes (a change redelivered in a later file is read there again, and
        # found in history), where the day at once read each change once.
        landed = by_file.spark.table(by_file.table_id(f"bronze_cdc_{table}")).where(F.col("op").isin(*OPS))
        per_take = [landed.where(F.col("source_file").endswith(f"/{take}")).select("key", "change_position", "op")
                    .distinct().count() for take in takes]
        assert [r[name][1] for r in reads] == per_take, table
        assert sum(per_take) >= at_once[name][1] > max(per_take)

    bronze = by_file.table_id("bronze_cdc_orders")
    key = by_file.spark.table(bronze).where("op = 'u'").first().key
    by_file.spark.sql(f"DELETE FROM {bronze} WHERE key = '{key}'")
    again = silver_reads(run(by_file, silver_cdc_assets, day))
    assert again["silver_orders"][0] == "the whole window"
    assert again["silver_customers"][0].startswith("appended since"), "customers' bronze only appended"
    assert again["silver_customers"][1] == 0


def test_deletes_and_key_changes_are_applied(cdc):
    lakehouse, generated = cdc
    bronze = lakehouse.spark.table(lakehouse.table_id("bronze_cdc_customers"))
    deleted = {json.loads(r.key)["customer_id"] for r in bronze.where("op = 'd'").collect()}
    current = {r.customer_id for r in lakehouse.spark.table(lakehouse.table_id("silver_customers")).collect()}
    assert deleted and not deleted & current, "deleted keys (old keys of key changes) are not current"
    # Each key change: the old key closed by a delete in history, the new key created in the same transaction.
    history = lakehouse.spark.table(lakehouse.table_id("silver_customers_history"))
    moves = [c for c in generated.history if c.table == "customers" and c.op == "d"]
    assert moves
    for move in moves:
        old = history.where(f"customer_id = {move.key[0]} AND is_current").collect()
        assert [r.op for r in old] == ["d"]


def test_reapplying_the_same_days_changes_nothing(cdc):
    lakehouse, _ = cdc
    tables = [f"silver_{t}" for t in CDC_TABLES] + [f"silver_{t}_history" for t in CDC_TABLES]
    before = {t: sorted(map(tuple, lakehouse.spark.table(lakehouse.table_id(t)).collect()), key=repr) for t in tables}
    run(lakehouse, silver_cdc_assets, "2025-01-01", "2025-01-03")
    after = {t: sorted(map(tuple, lakehouse.spark.table(lakehouse.table_id(t)).collect()), key=repr) for t in tables}
    assert after == before


def test_history_is_one_chain_per_key_in_commit_order(cdc):
    """Days applied out of order put changes between versions history held: every key's versions still run
    one into the next (each ends where the next begins, by position and time), and only the last is current."""
    lakehouse, _ = cdc
    for table in CDC_TABLES:
        rows = lakehouse.spark.table(lakehouse.table_id(f"silver_{table}_history")).select(
            "key", "change_position", "valid_from", "valid_to", "valid_to_position", "is_current").collect()
        by_key: dict[str, list] = {}
        for r in rows:
            by_key.setdefault(r.key, []).append(r)
        assert len(by_key) > 10
        for key, versions in by_key.items():
            versions.sort(key=lambda r: r.change_position)
            ends = [(r.valid_to_position, r.valid_to, r.is_current) for r in versions]
            assert ends == [(n.change_position, n.valid_from, False) for n in versions[1:]] + [(None, None, True)], key


def test_history_answers_what_a_row_looked_like_at_a_time(cdc):
    lakehouse, generated = cdc
    spark = lakehouse.spark
    history = lakehouse.table_id("silver_orders_history")
    # An order with several versions: check it at the instant of each, and just before each.
    changes = [c for c in generated.history if c.table == "orders"]
    by_key = {}
    for c in changes:
        by_key.setdefault(c.key, []).append(c)
    key, versions = max(by_key.items(), key=lambda kv: len(kv[1]))
    assert len(versions) >= 3
    versions.sort(key=lambda c: c.position)
    for n, version in enumerate(versions):
        at = dt.datetime.fromtimestamp(version.source["ts_ms"] / 1000, dt.timezone.utc).replace(tzinfo=None)
        rows = spark.sql(  # docs/guarantees.md's query
            f"SELECT status, total, op FROM {history} WHERE order_id = {key[0]} AND op <> 'd' "
            "AND valid_from <= CAST(:at AS TIMESTAMP) AND (valid_to IS NULL OR valid_to > CAST(:at AS TIMESTAMP))",
            args={"at": at.isoformat(sep=" ")},
        ).collect()
        if version.op == "d":
            assert rows == [], "deleted at that time"
        else:
            assert [(r.status, str(r.total)) for r in rows] == [(version.after["status"], version.after["total"])], n
    assert spark.sql(f"SELECT count(*) c FROM {history} WHERE order_id = {key[0]} AND is_current").first().c == 1
    deletes = spark.table(history).where("op = 'd'")
    assert deletes.count() > 0
    assert deletes.where("status IS NOT NULL OR total IS NOT NULL").count() == 0, "a delete's version is its key only"


def test_merge_on_read_tables_and_passed_checks(cdc):
    lakehouse, _ = cdc
    for t in ("silver_orders", "silver_orders_history"):
        table = lakehouse.iceberg_table(t)
        assert table.properties["write.merge.mode"] == "merge-on-read"
        branches = [name for name, ref in table.metadata.refs.items() if ref.snapshot_ref_type == "branch"]
        assert branches == ["main"], "audit branches are dropped once published"


def test_unavailable_values_follow_the_row_across_chains_of_key_changes(spark):
    """Debezium's placeholder for an unchanged TOASTed value, in the create of a primary-key change, stands
    for the old key's value: followed along chains of key changes in one run, across a key re-created as a
    new row, and into history for a key change whose delete an earlier run applied."""
    u = UNAVAILABLE
    changes = [  # key, op, position, title, body
        ("A", "c", 1, "t", "BODY"), ("A", "d", 5, None, None), ("B", "c", 5, "t", u), ("B", "u", 6, "t", "B6"),
        ("B", "d", 9, None, None), ("C", "c", 9, "t", u), ("C", "u", 12, "t2", u), ("C", "d", 13, None, None),
        ("D", "c", 13, "t2", u),
        ("A", "c", 14, "a2", "A2"), ("A", "u", 15, "a3", u),  # A again: a new row, not B's
        ("Z", "c", 20, "z", u),  # W's delete at 20 was applied by an earlier run
        ("Q", "c", 21, "q", u),  # nothing known
    ]
    versions = spark.createDataFrame(changes, "key string, op string, p int, title string, body string").select(
        "key", "op", F.col("p").cast(POSITION).alias("change_position"), "title", "body")

    history = spark.createDataFrame([("W", "u", 3, 20, "w", "WB")], "key string, op string, p int, v int, "
                                    "title string, body string").select(
        "key", "op", F.col("p").cast(POSITION).alias("change_position"),
        F.col("v").cast(POSITION).alias("valid_to_position"), "title", "body")
    got = {(r.key, int(r.change_position)): r.body
           for r in _resolve_unavailable(versions, history, ["title", "body"]).collect()}
    assert got == {("A", 1): "BODY", ("A", 5): None, ("B", 5): "BODY", ("B", 6): "B6", ("B", 9): None,
                   ("C", 9): "B6", ("C", 12): "B6", ("C", 13): None, ("D", 13): "B6", ("A", 14): "A2",
                   ("A", 15): "A2", ("Z", 20): "WB", ("Q", 21): None}
