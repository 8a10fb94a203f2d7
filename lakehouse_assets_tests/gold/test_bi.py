"""BI gold tables agree with their sources, computed independently."""

import datetime as dt
import json
import os
import subprocess
import sys
import uuid
from collections import defaultdict
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize

from examples.shop.cdc_generator import generate_cdc
from examples.shop.events_generator import generate
from lakehouse_assets.duckdb_sql import query
from lakehouse_assets.runtime.resource import LakehouseResource

from ..shop import BRONZE_CDC, SHOP_FILE, SILVER_CDC, assets

pytestmark = pytest.mark.slow  # a module-wide pipeline run

PAID = ("paid", "shipped", "delivered")  # the declaration's revenue query counts these
BI = assets("gold_minute_activity", "gold_sessions", "gold_daily_funnel", "gold_daily_activity",
            "gold_daily_product_revenue")

DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2)]


@pytest.fixture(scope="module")
def gold(spark, lake_settings, tmp_path_factory):
    landing = tmp_path_factory.mktemp("gold_landing")
    generate(landing, DAYS, events_per_day=300)
    cdc = generate_cdc(landing, DAYS, changes_per_day=150)
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace=f"t_gold_{uuid.uuid4().hex[:6]}", landing=str(landing))
    result = materialize(
        [*assets("bronze_events", "silver_events"), *BRONZE_CDC, *SILVER_CDC, *BI],
        resources={"lakehouse": lakehouse}, instance=DagsterInstance.ephemeral(),
        tags={"dagster/asset_partition_range_start": "2025-01-01", "dagster/asset_partition_range_end": "2025-01-02"},
    )
    assert result.success
    return lakehouse, cdc


def table(lakehouse, name):
    return lakehouse.spark.table(lakehouse.table_id(name))


@contextmanager
def rolled_back(lakehouse, name):
    """The table at the snapshot it has now once the block ends, whatever the block wrote: the module's tests
    share one pipeline run, and each reads it as that run left it, in any order."""
    before = lakehouse.iceberg_table(name).current_snapshot().snapshot_id
    try:
        yield before
    finally:
        lakehouse.spark.sql(f"CALL {lakehouse.settings.catalog_name}.system.rollback_to_snapshot("
                            f"'{lakehouse.settings.namespace}.{name}', {before})")


def test_minute_activity_adds_up_to_silver(gold):
    lakehouse, _ = gold
    minutes = table(lakehouse, "gold_minute_activity").collect()
    silver = table(lakehouse, "silver_events").collect()
    assert sum(m.events for m in minutes) == len(silver)
    assert sum(m.purchases for m in minutes) == sum(1 for e in silver if e.event_type == "purchase") > 0
    assert sum(m.revenue for m in minutes) == sum(e.price for e in silver if e.event_type == "purchase")
    busiest = max(minutes, key=lambda m: m.events)
    in_minute = [e for e in silver if e.event_ts.replace(second=0, microsecond=0) == busiest.minute]
    assert busiest.active_users == len({e.user_id for e in in_minute})


def test_sessions_and_funnel(gold):
    lakehouse, _ = gold
    silver = table(lakehouse, "silver_events").collect()
    by_session = defaultdict(list)
    for e in silver:
        by_session[e.session_id].append(e)
    sessions = {s.session_id: s for s in table(lakehouse, "gold_sessions").collect()}
    assert set(sessions) == set(by_session)
    for sid, events in list(by_session.items())[:50]:
        s = sessions[sid]
        start, end = min(e.event_ts for e in events), max(e.event_ts for e in events)
        kinds = {e.event_type for e in events}
        # The funnel is page_view -> add_to_cart -> purchase: a step counts with every step before it.
        step = 0
        for n, kind in enumerate(("page_view", "add_to_cart", "purchase"), start=1):
            if kind not in kinds:
                break
            step = n
        outcome = ("none", "page_view", "add_to_cart", "purchase")[step]
        assert (s.session_start, s.session_end, s.events, s.funnel_step, s.outcome) == \
            (start, end, len(events), step, outcome)
        assert s.purchases == sum(1 for e in events if e.event_type == "purchase")
        assert s.duration_s == int((end - start).total_seconds())
    funnel = defaultdict(dict)
    for f in table(lakehouse, "gold_daily_funnel").collect():
        funnel[f.funnel_date][f.step] = f
    for day in DAYS:
        todays = [s for s in sessions.values() if s.session_start.date() == day]
        steps = funnel[day]
        assert [steps[n].event_type for n in (1, 2, 3)] == ["page_view", "add_to_cart", "purchase"]
        for n in (1, 2, 3):
            assert steps[n].sessions == sum(1 for s in todays if s.funnel_step >= n)
        assert steps[1].conversion == steps[1].sessions / len(todays)
        assert steps[3].conversion == steps[3].sessions / steps[2].sessions
        assert steps[1].sessions >= steps[2].sessions >= steps[3].sessions > 0


def test_product_revenue_matches_the_source_databases_true_state(gold):
    lakehouse, cdc = gold
    orders = cdc.true_state["orders"]
    expected = defaultdict(lambda: [set(), 0, Decimal("0")])
    for (order_id, _line), item in cdc.true_state["order_items"].items():
        order = orders.get((order_id,))
        if order is None or order["status"] not in PAID:
            continue
        day = dt.date.fromisoformat(order["order_ts"][:10])
        row = expected[(day, item["product_id"])]
        row[0].add(order_id)
        row[1] += item["quantity"]
        row[2] += item["quantity"] * Decimal(item["unit_price"])
    got = {(r.order_date, r.product_id): (r.orders, r.units, r.revenue)
           for r in table(lakehouse, "gold_daily_product_revenue").collect()}
    assert got == {k: (len(v[0]), v[1], v[2]) for k, v in expected.items()}
    assert got


def test_sql_without_spark_answers_like_spark_now_and_as_of_an_older_snapshot(gold):
    """A gold row deleted makes a newer snapshot to read beside the older one."""
    lakehouse, _ = gold
    with rolled_back(lakehouse, "gold_daily_funnel") as older:
        _sql_now_and_as_of(lakehouse, older)


def _sql_now_and_as_of(lakehouse, older):
    spark, settings = lakehouse.spark, lakehouse.settings
    table_id = lakehouse.table_id("gold_daily_funnel")
    sql = ("SELECT funnel_date, step, sessions FROM {t} WHERE funnel_date >= DATE'2025-01-01' "
           "ORDER BY funnel_date, step")
    spark.sql(f"DELETE FROM {table_id} WHERE funnel_date = DATE'2025-01-01'")

    now = query(settings, sql.format(t="gold_daily_funnel")).to_pylist()
    assert now == [r.asDict() for r in spark.sql(sql.format(t=table_id)).collect()]
    assert {r["funnel_date"] for r in now} == {DAYS[1]}

    before = query(settings, sql.format(t="gold_daily_funnel"), as_of=str(older)).to_pylist()
    assert before == [r.asDict() for r in spark.sql(sql.format(t=f"{table_id} VERSION AS OF {older}")).collect()]
    assert sorted({r["funnel_date"] for r in before}) == DAYS

    # The CLI, as an analyst runs it.
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lakehouse")), "sql", sql.format(t="gold_daily_funnel"),
         "--as-of", str(older), "--format", "json"],
        env={**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_NAMESPACE": settings.namespace,
             "LAKEHOUSE_PROJECT": str(SHOP_FILE)},
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [(r["funnel_date"], r["sessions"]) for r in json.loads(done.stdout)] == \
        [(str(r["funnel_date"]), r["sessions"]) for r in before]


def _plain(value):
    """Spark's and DuckDB's Python values on common ground: rows and maps as sorted pairs, UTC instants naive."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        value = dict(value)  # Arrow's map: (key, value) pairs in stored order; Spark's: a dict
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def _rows(records):
    return sorted((tuple(_plain(v) for v in record) for record in records), key=repr)


def test_sql_answers_like_spark_on_every_table_now_and_at_an_older_snapshot(gold):
    """Every table of the pipeline, merge-on-read ones with delete files included."""
    lakehouse, _ = gold
    with rolled_back(lakehouse, "silver_orders"):
        # A row-level delete on a merge-on-read table: position delete files the reader must apply.
        lakehouse.spark.sql(f"DELETE FROM {lakehouse.table_id('silver_orders')} WHERE order_id % 3 = 0")
        _sql_like_spark_on_every_table(lakehouse)


def _sql_like_spark_on_every_table(lakehouse):
    spark, settings = lakehouse.spark, lakehouse.settings
    catalog = lakehouse.iceberg_table("silver_events").catalog
    names = sorted(ident[-1] for ident in catalog.list_tables(settings.namespace))
    with_deletes, older_read = [], []
    for name in names:
        iceberg = lakehouse.iceberg_table(name)
        current = iceberg.current_snapshot()
        if current is None:
            continue
        if int(current.summary.get("total-delete-files", 0) if current.summary else 0):
            with_deletes.append(name)
        columns = ", ".join(f"`{f.name}`" for f in iceberg.schema().fields)
        ours = query(settings, f"SELECT * FROM {name}", raw=True)  # bronze too
        assert ours.column_names == [f.name for f in iceberg.schema().fields], name
        theirs = spark.sql(f"SELECT {columns} FROM {lakehouse.table_id(name)}").collect()
        assert _rows(zip(*(c.to_pylist() for c in ours.columns))) == _rows(theirs), name
        parent = iceberg.snapshot_by_id(current.parent_snapshot_id) if current.parent_snapshot_id else None
        if parent is None:
            continue
        old_fields = next(s for s in iceberg.metadata.schemas if s.schema_id == parent.schema_id).fields
        ours = query(settings, f"SELECT * FROM {name}", as_of=str(parent.snapshot_id), raw=True)
        theirs = spark.sql(f"SELECT * FROM {lakehouse.table_id(name)} VERSION AS OF {parent.snapshot_id}").collect()
        assert ours.column_names == [f.name for f in old_fields], name
        assert _rows(zip(*(c.to_pylist() for c in ours.columns))) == _rows(theirs), name
        older_read.append(name)
    assert "silver_orders" in with_deletes, with_deletes
    assert len(older_read) >= len(names) // 2, older_read
