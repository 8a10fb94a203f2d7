"""The BI tables refresh themselves: new upstream data and a failed freshness window each request a run."""

import datetime as dt

from dagster import AssetKey, AssetMaterialization, AssetSelection, DagsterInstance, evaluate_automation_conditions
from dagster._core.definitions.freshness import FreshnessState, FreshnessStateChange

from ..shop import DEFS as defs

BI = ["gold_minute_activity", "gold_sessions", "gold_daily_funnel", "gold_daily_activity", "gold_daily_product_revenue"]
SELECTION = AssetSelection.assets(*BI)


def requested(result) -> dict[str, set]:
    out = {}
    for key in map(AssetKey, BI):
        if result.get_num_requested(key):
            out[key.to_user_string()] = set(result.get_requested_partitions(key) or ())
    return out


def materialized(instance, asset, partition=None):
    instance.report_runless_asset_event(AssetMaterialization(asset, partition=partition))


def test_new_upstream_data_requests_exactly_the_dependent_bi_partitions():
    instance = DagsterInstance.ephemeral()
    first = evaluate_automation_conditions(defs, instance, SELECTION)
    assert first.total_requested == 0, "nothing happened upstream: nothing to do"

    materialized(instance, "silver_events", "2025-01-02")  # late data for an old day
    second = evaluate_automation_conditions(defs, instance, SELECTION, cursor=first.cursor)
    got = requested(second)
    assert got["gold_minute_activity"] == {"2025-01-02"}
    # A day's sessions read a day past each edge (a session crosses midnight): both neighbours are refreshed.
    assert got["gold_sessions"] == got["gold_daily_funnel"] == {"2025-01-01", "2025-01-02", "2025-01-03"}
    assert got["gold_daily_activity"] == {"2025-01-02"}
    assert "gold_daily_product_revenue" not in got, "it does not read silver_events"

    # Handled: the same update does not request again.
    third = evaluate_automation_conditions(defs, instance, SELECTION, cursor=second.cursor)
    assert "gold_minute_activity" not in requested(third)

    materialized(instance, "silver_orders", "2025-01-02")
    materialized(instance, "silver_order_items", "2025-01-02")
    fourth = evaluate_automation_conditions(defs, instance, SELECTION, cursor=third.cursor)
    assert "gold_daily_product_revenue" in requested(fourth)
    assert "gold_minute_activity" not in requested(fourth)


def test_a_failed_freshness_window_requests_the_latest_partition():
    instance = DagsterInstance.ephemeral()
    now = dt.datetime.now(dt.timezone.utc)
    latest = defs.resolve_asset_graph().get(AssetKey("gold_minute_activity")).partitions_def.get_last_partition_key()
    materialized(instance, "silver_events", latest)
    materialized(instance, "gold_minute_activity", latest)
    first = evaluate_automation_conditions(defs, instance, AssetSelection.assets("gold_minute_activity"))
    quiet = evaluate_automation_conditions(defs, instance, AssetSelection.assets("gold_minute_activity"),
                                           cursor=first.cursor)
    assert quiet.total_requested == 0, "fresh and up to date"

    # The freshness daemon finds no materialisation within the 5-minute window.
    instance.report_runless_asset_event(FreshnessStateChange(
        key=AssetKey("gold_minute_activity"), new_state=FreshnessState.FAIL,
        previous_state=FreshnessState.PASS, state_change_timestamp=now.timestamp()))
    stale = evaluate_automation_conditions(defs, instance, AssetSelection.assets("gold_minute_activity"),
                                           cursor=quiet.cursor)
    assert requested(stale) == {"gold_minute_activity": {latest}}
    # Still failing on the next tick: no second request while the first one is handled.
    again = evaluate_automation_conditions(defs, instance, AssetSelection.assets("gold_minute_activity"),
                                           cursor=stale.cursor)
    assert again.total_requested == 0


def test_bi_assets_carry_freshness_policies_and_a_running_automation_sensor():
    graph = defs.resolve_asset_graph()
    windows = {k: graph.get(AssetKey(k)).freshness_policy.fail_window.to_timedelta() for k in BI}
    assert windows["gold_minute_activity"] == dt.timedelta(minutes=5)
    assert all(w <= dt.timedelta(minutes=30) for w in windows.values())
    [sensor] = [s for s in defs.sensors if s.name == "lakehouse_automation"]
    assert sensor.default_status.value == "RUNNING"
    targets = {k.to_user_string() for k in sensor.asset_selection.resolve(graph)}
    assert targets >= set(BI) | {"silver_events", "silver_orders", "silver_orders_history", "ml_user_features",
                                 "ml_training_set"}
    assert not {t for t in targets if t.startswith(("bronze_", "capture_"))}, "bronze follows the landing sensors"


CHAIN = AssetSelection.assets("silver_events", "silver_orders", "silver_orders_history", "gold_daily_activity",
                              "ml_user_features", "ml_training_set")


def chain_requested(result) -> dict[str, set]:
    return {k.to_user_string(): set(result.get_requested_partitions(k) or ())
            for k in CHAIN.resolve(defs.resolve_asset_graph()) if result.get_num_requested(k)}


def test_the_chain_refreshes_itself_and_a_late_file_reruns_the_event_days_it_can_hold():
    instance = DagsterInstance.ephemeral()
    first = evaluate_automation_conditions(defs, instance, CHAIN)
    assert first.total_requested == 0

    # A landing day's bronze run: the event days that landing day can hold (late_days 2) are requested, and
    # in the same tick everything downstream of them, so one run carries the whole chain: the features of
    # every day whose 30-day look-back holds them, and the training days whose sessions or features they are.
    days = {"2025-01-03", "2025-01-04", "2025-01-05"}
    materialized(instance, "bronze_events", "2025-01-05")
    second = evaluate_automation_conditions(defs, instance, CHAIN, cursor=first.cursor)
    span = lambda first, last: {(dt.date(2025, 1, 1) + dt.timedelta(days=n)).isoformat()  # noqa: E731
                                for n in range(first - 1, last)}  # days of 2025, 1-based
    expected = {"silver_events": days, "gold_daily_activity": days, "ml_user_features": span(3, 5 + 29),
                "ml_training_set": span(2, 5 + 29 + 1)}
    assert chain_requested(second) == expected

    # Done: nothing is requested again (no loop). CDC bronze brings both CDC silver tables along, for its own
    # landing day: a CDC silver day applies the changes that landed on it, whatever their commit time.
    for name, requested_days in expected.items():
        for day in requested_days:
            materialized(instance, name, day)
    materialized(instance, "bronze_cdc_orders", "2025-01-05")
    third = evaluate_automation_conditions(defs, instance, CHAIN, cursor=second.cursor)
    assert chain_requested(third) == {"silver_orders": {"2025-01-05"}, "silver_orders_history": {"2025-01-05"}}


def test_nothing_is_requested_while_a_day_it_reads_is_being_written_or_it_runs_itself_and_nothing_is_lost():
    """A run in progress holds back every partition that reads what it writes, and an asset already running
    is not requested again; once they end, what was held back is requested (the update is not forgotten)."""
    from dagster._core.storage.dagster_run import DagsterRunStatus

    instance = DagsterInstance.ephemeral()
    job = defs.resolve_implicit_global_asset_job_def()

    def running(day, *assets):
        return instance.create_run_for_job(job, asset_selection=frozenset(map(AssetKey, assets)),
                                           tags={"dagster/partition": day}, status=DagsterRunStatus.STARTED)

    first = evaluate_automation_conditions(defs, instance, CHAIN)
    bronze_run = running("2025-01-06", "bronze_events", "bronze_events_quarantine")
    silver_run = running("2025-01-03", "silver_events")
    materialized(instance, "bronze_events", "2025-01-05")
    second = evaluate_automation_conditions(defs, instance, CHAIN, cursor=first.cursor)
    held = chain_requested(second).get("silver_events", set())
    # Landing day 05 feeds event days 03..05; 04 and 05 also read landing day 06, being written; 03 runs already.
    assert held == set(), chain_requested(second)

    instance.report_run_failed(silver_run)
    third = evaluate_automation_conditions(defs, instance, CHAIN, cursor=second.cursor)
    assert chain_requested(third).get("silver_events") == {"2025-01-03"}  # its own run over: now it may

    materialized(instance, "bronze_events", "2025-01-06")
    instance.report_run_failed(bronze_run)  # over (how it ended is bronze's business): nothing is in progress
    fourth = evaluate_automation_conditions(defs, instance, CHAIN, cursor=third.cursor)
    assert chain_requested(fourth)["silver_events"] == {"2025-01-04", "2025-01-05", "2025-01-06"}


def test_a_bi_day_waits_while_the_upstream_day_it_reads_is_missing():
    """A failed freshness window asks for the latest day, but not while silver has nothing for it."""
    instance = DagsterInstance.ephemeral()
    selection = AssetSelection.assets("gold_minute_activity")
    latest = defs.resolve_asset_graph().get(AssetKey("gold_minute_activity")).partitions_def.get_last_partition_key()
    first = evaluate_automation_conditions(defs, instance, selection)
    instance.report_runless_asset_event(FreshnessStateChange(
        key=AssetKey("gold_minute_activity"), new_state=FreshnessState.FAIL, previous_state=FreshnessState.PASS,
        state_change_timestamp=dt.datetime.now(dt.timezone.utc).timestamp()))
    stale = evaluate_automation_conditions(defs, instance, selection, cursor=first.cursor)
    assert stale.total_requested == 0, "silver_events has no such day yet"
    materialized(instance, "silver_events", latest)
    arrived = evaluate_automation_conditions(defs, instance, selection, cursor=stale.cursor)
    assert requested(arrived) == {"gold_minute_activity": {latest}}
