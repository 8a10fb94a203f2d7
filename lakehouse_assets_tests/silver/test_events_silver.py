"""silver_events: one row per event key across days, within the source's declared late days; events of any age
decided."""

import dataclasses
import datetime as dt
import json

import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    build_asset_check_context,
    build_sensor_context,
    materialize,
)
from pyspark.sql import functions as F

from lakehouse_assets.errors import DeclarationError
from lakehouse_assets.project import parse_project
from lakehouse_assets.silver import events as silver_module
from lakehouse_assets.silver.events import first_broken_rule, undecided_keys_check

from ..shop import DEFS, SHOP, SHOP_FILE, asset

bronze_events, silver_events = asset("bronze_events"), asset("silver_events")


def _event(event_id, ts):
    return json.dumps({"event_id": event_id, "user_id": "u1", "session_id": "s1", "event_type": "page_view",
                       "event_ts": ts, "properties": {"page": "/"}})


def _land(lakehouse, day, lines):
    folder = lakehouse.settings.local_path(lakehouse.settings.landing) / "events" / f"date={day}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part-0.jsonl").write_text("\n".join(lines) + "\n")


def _run(lakehouse, assets, day):
    result = materialize(assets, resources={"lakehouse": lakehouse}, partition_key=day,
                         instance=DagsterInstance.ephemeral())
    assert result.success
    return result


def test_a_redelivery_on_another_day_within_the_late_days_is_not_taken_twice(lakehouse):
    assert SHOP.events["events"].late_days == 2
    _land(lakehouse, "2025-01-01", [_event("k1", "2025-01-01T10:00:00Z"), _event("k2", "2025-01-01T11:00:00Z")])
    # Resent by a client that stamps events when it sends them: k1 two days later, k2 eight days later.
    _land(lakehouse, "2025-01-03", [_event("k1", "2025-01-03T09:00:00Z"), _event("k3", "2025-01-03T09:30:00Z")])
    _land(lakehouse, "2025-01-09", [_event("k2", "2025-01-09T09:00:00Z")])
    for day in ("2025-01-01", "2025-01-03", "2025-01-09"):
        _run(lakehouse, [bronze_events], day)
    for day in ("2025-01-01", "2025-01-03", "2025-01-09"):
        result = _run(lakehouse, [silver_events], day)
        checks = result.get_asset_check_evaluations()
        assert checks and all(c.passed for c in checks), day  # bronze keys = silver + rejected + held elsewhere

    silver = lakehouse.spark.table(lakehouse.table_id("silver_events"))
    rows = sorted((r.event_id, r.event_ts.date().isoformat()) for r in silver.collect())
    # k1 again within the late days: the first delivery stays, the second is not taken.
    # k2 again beyond them: a new event as far as silver can tell (it looks that far, no further).
    assert rows == [("k1", "2025-01-01"), ("k2", "2025-01-01"), ("k2", "2025-01-09"), ("k3", "2025-01-03")]


def test_events_landing_long_after_their_day_are_decided_by_the_days_their_bronze_commit_holds(lakehouse):
    """A landing day holding events from days its partition mapping does not reach (beyond the late days):
    bronze says which event days its commit added rows to, the late-events sensor requests silver for exactly
    those days until silver has decided them, and every bronze key ends in silver or rejected."""
    instance = DagsterInstance.ephemeral()
    _land(lakehouse, "2025-01-20", [_event("a", "2025-01-02T10:00:00Z"), _event("b", "2025-01-02T23:59:59Z"),
                                    _event("c", "2025-01-11T08:00:00Z"), _event("d", "2025-01-19T10:00:00Z"),
                                    _event("e", "2025-01-20T10:00:00Z")])
    bronze = materialize([bronze_events], resources={"lakehouse": lakehouse}, partition_key="2025-01-20",
                         instance=instance)
    held = bronze.asset_materializations_for_node("bronze_events")[0].metadata["event_days"].value
    assert held == ["2025-01-02", "2025-01-11", "2025-01-19", "2025-01-20"], "read from the commit's manifests"

    sensor = DEFS.get_sensor_def("silver_events_late_events_sensor")
    tick = sensor.evaluate_tick(build_sensor_context(instance=instance, definitions=DEFS))
    # Late days 2: the automation's mapping reaches 01-18..01-20 from landing day 01-20; the sensor the rest.
    assert sorted(r.partition_key for r in tick.run_requests) == ["2025-01-02", "2025-01-11"]
    assert all(r.asset_selection == [AssetKey("silver_events")] for r in tick.run_requests)
    # A run that failed is asked for again (a new run key); one still running is waited for.
    job = DEFS.resolve_implicit_global_asset_job_def()
    failed, running = ({**r.tags, "dagster/partition": r.partition_key} for r in tick.run_requests)
    instance.create_run_for_job(job, asset_selection=frozenset({AssetKey("silver_events")}), tags=failed,
                                status=DagsterRunStatus.FAILURE)
    instance.create_run_for_job(job, asset_selection=frozenset({AssetKey("silver_events")}), tags=running,
                                status=DagsterRunStatus.STARTED)
    again = sensor.evaluate_tick(build_sensor_context(instance=instance, definitions=DEFS, cursor=tick.cursor))
    assert [(r.partition_key, r.run_key) for r in again.run_requests] == [
        ("2025-01-02", tick.run_requests[0].run_key.rsplit(":", 1)[0] + ":1")]

    for day in ("2025-01-02", "2025-01-11", "2025-01-19", "2025-01-20"):
        materialize([silver_events], resources={"lakehouse": lakehouse}, partition_key=day, instance=instance)
    decided = sensor.evaluate_tick(build_sensor_context(instance=instance, definitions=DEFS, cursor=again.cursor))
    assert not decided.run_requests and json.loads(decided.cursor)["pending"] == {}, "silver decided those days"

    keys = lambda t: {r.event_id for r in lakehouse.spark.table(lakehouse.table_id(t)).collect()}  # noqa: E731
    assert keys("silver_events") | keys("silver_events_rejected") == keys("bronze_events") == set("abcde")


def test_max_lateness_rejects_events_that_land_too_long_after_their_time(lakehouse):
    """Measured from the landing day, so a replayed archive is judged as when it landed, not by the clock."""
    source = dataclasses.replace(SHOP.events["events"], max_lateness=dt.timedelta(days=7))
    judged = lakehouse.spark.createDataFrame(
        [("old", dt.datetime(2025, 1, 2, 23, 59, 59), dt.date(2025, 1, 10)),
         ("edge", dt.datetime(2025, 1, 3, 0, 0, 0), dt.date(2025, 1, 10)),
         ("replayed", dt.datetime(2025, 1, 2, 10, 0, 0), dt.date(2025, 1, 2))],
        "event_id string, event_ts timestamp, landing_date date",
    ).withColumn("rule", first_broken_rule(dataclasses.replace(source, rules=(), event_types=None)))
    assert {r.event_id: r.rule for r in judged.collect()} == {"old": "max_lateness", "edge": None, "replayed": None}


def test_max_lateness_is_a_duration_and_its_rule_name_is_its_own():
    text = SHOP_FILE.read_text()
    assert SHOP.events["events"].max_lateness == dt.timedelta(days=30)
    with pytest.raises(DeclarationError, match="not a duration"):
        parse_project(text.replace("max_lateness: 30d", "max_lateness: soon", 1), "x.yaml")
    with pytest.raises(DeclarationError, match="taken by max_lateness"):
        parse_project(text.replace("name: bot_user_agent", "name: max_lateness", 1), "x.yaml")


def test_the_audit_counts_the_bronze_snapshot_the_write_was_decided_on(lakehouse, monkeypatch):
    """Another writer commits to bronze between silver's write and its audit: the blocking reconciliation
    counts the bronze snapshot silver read, so it passes; the new row waits for the next run, which takes it."""
    _land(lakehouse, "2025-01-01", [_event("k1", "2025-01-01T10:00:00Z")])
    _run(lakehouse, [bronze_events], "2025-01-01")
    audit = silver_module.audit_and_publish

    def after_another_bronze_commit(audits):
        bronze = lakehouse.table_id("bronze_events")
        lakehouse.spark.table(bronze).withColumn("event_id", F.lit("k2")).writeTo(bronze).append()
        return audit(audits)

    monkeypatch.setattr(silver_module, "audit_and_publish", after_another_bronze_commit)
    checks = _run(lakehouse, [silver_events], "2025-01-01").get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)
    monkeypatch.undo()
    _run(lakehouse, [silver_events], "2025-01-01")
    assert sorted(r.event_id for r in lakehouse.spark.table(lakehouse.table_id("silver_events")).collect()) == [
        "k1", "k2"]


def test_the_undecided_keys_check_counts_bronze_keys_in_neither_silver_nor_rejected(lakehouse):
    check = undecided_keys_check(SHOP.events["events"])

    def undecided():
        result = check(build_asset_check_context(resources={"lakehouse": lakehouse}))
        return result.passed, result.metadata["undecided_keys"].value, result.metadata["undecided_by_day"].value

    _land(lakehouse, "2025-01-12", [_event("a", "2025-01-02T10:00:00Z"), _event("b", "2025-01-12T10:00:00Z"),
                                    _event("c", "2025-01-12T11:00:00Z")])
    _run(lakehouse, [bronze_events], "2025-01-12")
    _run(lakehouse, [silver_events], "2025-01-12")
    assert undecided() == (False, 1, {"2025-01-02": 1}), "the old day has not run: its key is undecided"
    _run(lakehouse, [silver_events], "2025-01-02")
    assert undecided() == (True, 0, {})
