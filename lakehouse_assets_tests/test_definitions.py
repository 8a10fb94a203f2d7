"""The asset graph as Dagster loads it: a change to it shows up here in review."""

from dagster import AssetKey
from dagster._core.definitions.backfill_policy import BackfillPolicyType

from lakehouse_assets.definitions import defs
from lakehouse_assets.partitions import DAILY

GRAPH = {
    "bronze_events": set(),
    "bronze_events_quarantine": set(),
    **{f"bronze_cdc_{t}{q}": set() for t in ("customers", "orders", "order_items") for q in ("", "_quarantine")},
    "silver_events": {"bronze_events"},
    **{f"silver_{t}{h}": {f"bronze_cdc_{t}"} for t in ("customers", "orders", "order_items") for h in ("", "_history")},
    "gold_daily_activity": {"silver_events"},
    "gold_minute_activity": {"silver_events"},
    "gold_sessions": {"silver_events"},
    "gold_daily_funnel": {"gold_sessions"},
    "gold_daily_product_revenue": {"silver_orders", "silver_order_items"},
    "ml_user_features": {"silver_events"},
    "ml_training_set": {"silver_events", "ml_user_features"},
}


def test_asset_graph_keys_and_dependencies():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == set(GRAPH)
    for asset, parents in GRAPH.items():
        node = graph.get(AssetKey(asset))
        assert {p.to_user_string() for p in node.parent_keys} == parents, asset


def test_every_asset_has_single_run_backfills_and_all_but_whole_table_ones_are_daily():
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.partitions_def == (None if key.to_user_string() == "gold_daily_product_revenue" else DAILY), key
        assert node.backfill_policy.policy_type == BackfillPolicyType.SINGLE_RUN, key


def test_every_silver_table_has_a_blocking_pandera_check_and_spark_runs_in_one_process():
    graph = defs.resolve_asset_graph()
    silver = [k for k in graph.get_all_asset_keys() if k.to_user_string().startswith("silver_")]
    assert len(silver) == 7
    for key in silver:
        [check] = graph.get(key).check_keys
        assert check.name == "pandera_schema"
        assert graph.get_check_spec(check).blocking
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.executor_def.name == "in_process"
    assert set(job.resource_defs) >= {"lakehouse"}


def test_each_landing_source_has_a_running_sensor_for_its_bronze_assets():
    sensors = {s.name: s for s in defs.sensors if s.name.endswith("_landing_sensor")}
    assert set(sensors) == {f"bronze_{n}_landing_sensor" for n in ("events", "cdc_customers", "cdc_orders", "cdc_order_items")}
    graph = defs.resolve_asset_graph()
    for name, sensor in sensors.items():
        bronze = name.removesuffix("_landing_sensor")
        assert sensor.default_status.value == "RUNNING"
        assert sensor.asset_selection.resolve(graph) == {AssetKey(bronze), AssetKey(f"{bronze}_quarantine")}
