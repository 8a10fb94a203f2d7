"""A parent's commit made while its child runs is not lost: the child's update handles only the commits it read.

Ticks of the automation sensor are evaluated as the daemon evaluates them, on a real (ephemeral) instance; the
materializations carry what runs record: a table's commit (`table`, `snapshot_id`) and the parent snapshots a
step read (`read_snapshots`).
"""

from __future__ import annotations

import time

from dagster import AssetKey, AssetMaterialization, AssetSelection, DagsterInstance, evaluate_automation_conditions

from ..shop import DEFS as defs

SILVER = AssetSelection.assets("silver_events")
DAY = "2025-01-02"


def _bronze(instance, snapshot):
    instance.report_runless_asset_event(AssetMaterialization(
        "bronze_events", partition=DAY, metadata={"table": "lakehouse.lake.bronze_events", "snapshot_id": snapshot}))


def _silver(instance, read_snapshot, read_at_ms):
    instance.report_runless_asset_event(AssetMaterialization(
        "silver_events", partition=DAY, metadata={"table": "lakehouse.lake.silver_events", "snapshot_id": 100 + read_snapshot,
                                                  "read_snapshots": {"bronze_events": [read_snapshot, read_at_ms]}}))


def _requested(result):
    return set(result.get_requested_partitions(AssetKey("silver_events")) or ()) \
        if result.get_num_requested(AssetKey("silver_events")) else set()


def _now_ms():
    time.sleep(0.01)  # events and reads a little apart, as they are in a run
    return round(time.time() * 1000)


def test_a_bronze_commit_while_silver_runs_requests_silver_again_and_one_it_read_does_not():
    instance = DagsterInstance.ephemeral()
    tick = evaluate_automation_conditions(defs, instance, SILVER)
    _bronze(instance, 1)
    tick = evaluate_automation_conditions(defs, instance, SILVER, cursor=tick.cursor)
    assert DAY in _requested(tick)

    # Silver's run reads bronze at snapshot 1; bronze commits snapshot 2 before silver publishes; the daemon
    # sees both in one tick, silver's materialization the later: silver did not read 2, so it is requested.
    read_at = _now_ms()
    _now_ms()
    _bronze(instance, 2)
    _now_ms()
    _silver(instance, 1, read_at)
    tick = evaluate_automation_conditions(defs, instance, SILVER, cursor=tick.cursor)
    assert DAY in _requested(tick)
    # The run it requested reads snapshot 2: handled, nothing more to do.
    _silver(instance, 2, _now_ms())
    tick = evaluate_automation_conditions(defs, instance, SILVER, cursor=tick.cursor)
    assert DAY not in _requested(tick)

    # The same order of events, with silver's step reading bronze after its commit (as the stream does): handled.
    _bronze(instance, 3)
    _silver(instance, 3, _now_ms())
    tick = evaluate_automation_conditions(defs, instance, SILVER, cursor=tick.cursor)
    assert DAY not in _requested(tick)

