"""silver_events: one row per event key across days, within the source's declared late days."""

import json

from dagster import DagsterInstance, materialize

from ..shop import SHOP, asset

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
