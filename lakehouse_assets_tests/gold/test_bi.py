"""BI gold tables agree with their sources, computed independently."""

import datetime as dt
import json
import os
import re
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
from lakehouse_assets.build import build_definitions
from lakehouse_assets.project import load_project
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.serving.duckdb_sql import query
from lakehouse_assets.settings import Settings

from ..evolving import apply_refused_then_in_place, edited
from ..shop import BRONZE_CDC, SHOP_FILE, SILVER_CDC, assets

pytestmark = pytest.mark.slow  # a module-wide pipeline run

PAID = ("paid", "shipped", "delivered")  # the declaration's revenue query counts these
BI = assets("gold_minute_activity", "gold_sessions", "gold_daily_funnel", "gold_daily_activity",
            "gold_daily_product_revenue")

DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2)]
# The module's graph: events and CDC through bronze and silver to the BI gold tables.
GRAPH = [*assets("bronze_events", "silver_events"), *BRONZE_CDC, *SILVER_CDC, *BI]
SELECTED = {k.to_user_string() for a in GRAPH for k in a.keys}  # its tables, to pick from a changed declaration


@pytest.fixture(scope="module")
def gold(spark, lake_settings, tmp_path_factory):
    landing = tmp_path_factory.mktemp("gold_landing")
    generate(landing, DAYS, events_per_day=300)
    cdc = generate_cdc(landing, DAYS, changes_per_day=150)
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace=f"t_gold_{uuid.uuid4().hex[:6]}", landing=str(landing))
    result = materialize(
        GRAPH,
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


def _evolved_shop() -> str:
    """The shop's declaration changed the ways a shop's does over time: an event field and an order column renamed
    (the gold query that reads the column follows), an event field dropped and one added, the price widened, the
    orders' partitioning and write mode switched."""
    changes = [
        ("      ip: string\n      email: string\n", "      client_ip: {type: string, renamed_from: ip}\n"),
        ("    pii: [ip, email]\n", "    pii: [client_ip]\n"),
        ("      price: decimal(12,2)\n", "      price: decimal(14,2)\n      referrer: string\n"),
        ("          status: string\n", "          order_status: string\n"),
        ("          status: {in: [pending, paid, shipped, delivered, cancelled]}\n          total: {min: 0}\n",
         "          order_status: {in: [pending, paid, shipped, delivered, cancelled]}\n          total: {min: 0}\n"
         "        renamed_from: {order_status: status}\n"
         "        partition: [\"bucket(8, order_id)\", \"days(order_ts)\"]\n"
         "        write_mode: copy-on-write\n"),
        ("        WHERE o.status IN", "        WHERE o.order_status IN"),
    ]
    return edited(re.sub(r"(?m)^generator: .*\n", "", SHOP_FILE.read_text()), changes)  # the copy lives elsewhere


@pytest.mark.soak  # `make test` shows it on the second domain (test_second_domain.py)
def test_the_shop_declaration_changed_is_planned_applied_in_place_and_its_runs_go_on_under_the_new_names(
        gold, tmp_path):
    """Runs last: it changes the module's tables (issue 40's acceptance on the shop)."""
    lakehouse, cdc = gold
    catalog, ns = lakehouse.catalog, lakehouse.settings.namespace
    evolved = tmp_path / "lakehouse.yaml"
    evolved.write_text(_evolved_shop())
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")},
           "LAKEHOUSE_HOME": str(lakehouse.settings.home), "LAKEHOUSE_NAMESPACE": ns,
           "LAKEHOUSE_PROJECT": str(evolved)}
    command = str(Path(sys.executable).with_name("lakehouse"))
    before = {i[-1]: catalog.load_table(i) for i in catalog.list_tables(ns)}
    ips = {r.event_id: r.ip_hash for r in table(lakehouse, "silver_events").collect()}
    orders = {r.order_id: (r.status, r.total) for r in table(lakehouse, "silver_orders").collect()}
    gold_before = {n: sorted(table(lakehouse, n).drop("computed_at").collect())
                   for n in ("gold_daily_activity", "gold_daily_product_revenue", "gold_daily_funnel")}

    planned = subprocess.run([command, "plan", "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert planned.returncode == 1, planned.stderr
    got = {(c["table"], c["kind"], c["subject"], c["safe"]) for c in json.loads(planned.stdout)["changes"]}
    modes = {(t, "set property", f"write.{op}.mode", True) for t in ("silver_orders", "silver_orders_history")
             for op in ("delete", "update", "merge")}
    assert got == {
        ("bronze_events", "rename column", "ip", True), ("bronze_events", "add column", "referrer", True),
        ("bronze_events", "widen type", "price", True),
        ("silver_events", "rename column", "ip_hash", True), ("silver_events", "document column", "ip_hash", True),
        ("silver_events", "add column", "referrer", True), ("silver_events", "widen type", "price", True),
        ("silver_events", "drop column", "email_hash", False),
        ("bronze_cdc_orders", "rename column", "before.status", True),
        ("bronze_cdc_orders", "rename column", "after.status", True),
        ("silver_orders", "rename column", "status", True), ("silver_orders_history", "rename column", "status", True),
        ("silver_orders", "add partition field", "day(order_ts)", True), *modes,
    }, got
    # A destructive change is refused without --allow-drop, and nothing changes; with it, metadata only.
    apply_refused_then_in_place(command, env, catalog, ns, before, "silver_events: drop column email_hash")

    # Today lands as the sources now send it (the field and the column renamed, the new field set), then the old
    # days are backfilled and today's partition run, with the changed declaration.
    landing = Path(lakehouse.landing)
    now = dt.datetime.now(dt.timezone.utc)
    day = now.date()
    moment = max(now - dt.timedelta(minutes=5), dt.datetime.combine(day, dt.time(0, 0, 1), dt.timezone.utc))
    folder = landing / "events" / f"date={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "events-evolved.jsonl").write_text(json.dumps({
        "event_id": "evolved-1", "user_id": "u-1", "session_id": "s-evolved", "event_type": "purchase",
        "price": "123456789012.50", "event_ts": moment.isoformat().replace("+00:00", "Z"), "client_ip": "198.51.100.7",
        "referrer": "https://example.org/", "properties": {"user_agent": "Mozilla/5.0"}}) + "\n")
    last = max((c for c in cdc.history if c.table == "orders"), key=lambda c: c.position)
    source = {**last.source, "snapshot": "false", "lsn": last.source["lsn"] + 4096, "txId": last.source["txId"] + 1,
              "ts_ms": int(moment.timestamp() * 1000)}
    source["sequence"] = json.dumps([None, str(source["lsn"])])
    order = {"order_id": 990_001, "customer_id": 1, "order_status": "pending", "total": "45.50",
             "order_ts": moment.isoformat().replace("+00:00", "Z"), "updated_at": moment.isoformat().replace("+00:00", "Z")}
    folder = landing / "cdc" / "orders" / f"date={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "changes-evolved.jsonl").write_text(json.dumps({
        "before": None, "after": order, "source": source, "op": "c", "ts_ms": source["ts_ms"] + 200}) + "\n")
    defs = build_definitions(load_project(evolved), Settings.from_env())
    graph = [a for a in defs.assets if any(k.to_user_string() in SELECTED for k in a.keys)]
    for first, last_day in (("2025-01-01", "2025-01-02"), (day.isoformat(), day.isoformat())):  # old days, today
        assert materialize(graph, resources={"lakehouse": lakehouse}, instance=DagsterInstance.ephemeral(),
                           tags={"dagster/asset_partition_range_start": first,
                                 "dagster/asset_partition_range_end": last_day}).success, first

    # Gold's old days are what they were; silver holds what it held, under the new names, and today beside it.
    for name, rows in gold_before.items():
        key = next(f.name for f in catalog.load_table((ns, name)).schema().fields)
        now_rows = sorted(table(lakehouse, name).drop("computed_at").collect())
        assert [r for r in now_rows if r[key] < day] == [r for r in rows if r[key] < day], name
    silver = table(lakehouse, "silver_events")
    assert {"client_ip_hash", "referrer"} <= set(silver.columns) and not {"ip_hash", "email_hash"} & set(silver.columns)
    now_ips = {r.event_id: r.client_ip_hash for r in silver.collect()}
    assert {k: v for k, v in now_ips.items() if k in ips} == ips and now_ips["evolved-1"]
    evolved_event = silver.where("event_id = 'evolved-1'").first()
    assert (evolved_event.referrer, evolved_event.price) == ("https://example.org/", Decimal("123456789012.50"))
    now_orders = {r.order_id: (r.order_status, r.total) for r in table(lakehouse, "silver_orders").collect()}
    assert {k: v for k, v in now_orders.items() if k in orders} == orders
    assert now_orders[990_001] == ("pending", Decimal("45.50"))
    current = catalog.load_table((ns, "silver_orders"))
    assert [str(f.transform) for f in current.spec().fields] == ["bucket[8]", "day"]
    assert current.properties["write.merge.mode"] == "copy-on-write"

    # As of a snapshot before the change, the old names answer: in Spark, and in `lakehouse sql`.
    old = before["silver_orders"].metadata.current_snapshot_id
    spark_old = lakehouse.spark.sql(f"SELECT order_id, status FROM {lakehouse.table_id('silver_orders')} "
                                    f"VERSION AS OF {old}")
    assert {r.order_id: r.status for r in spark_old.collect()} == {k: v[0] for k, v in orders.items()}
    sql = subprocess.run([command, "sql", "SELECT count(status) AS n FROM silver_orders", "--as-of", str(old),
                          "--format", "json"], env=env, capture_output=True, text=True, timeout=300)
    assert sql.returncode == 0, sql.stderr
    assert json.loads(sql.stdout) == [{"n": len(orders)}]
