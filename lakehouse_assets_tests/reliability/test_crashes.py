"""A materialisation killed (SIGKILL, no cleanup) at each step of bronze: after its data files are written and
before the commit, between its tables' publishes, and after the last one but before Dagster records anything.
Each table is then at its old or its new state, and a re-run takes every landed record exactly once (records
in = kept + quarantined, each line once)."""

import json

import pytest

from ..bronze.test_events_ingest import _crash_run, _event, held, ingest, land
from .figures import record

POINTS = ["bronze_events:before-publish", "bronze_events_quarantine:before-publish", "bronze_ingest_log:after-publish"]


@pytest.mark.parametrize("failpoint", POINTS)
def test_a_run_killed_at_any_step_leaves_each_table_whole_and_the_rerun_takes_each_record_once(lakehouse, failpoint):
    good = [json.dumps(_event(n)) for n in range(25)]
    records = land(lakehouse, "a.jsonl", good[:10] + ["{cut", "[]"] + good[10:])

    crashed = _crash_run(lakehouse, failpoint)
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    published = {name: lakehouse.iceberg_table(name).scan().count() if lakehouse.catalog.table_exists(
        (lakehouse.settings.namespace, name)) else 0
        for name in ("bronze_events", "bronze_events_quarantine", "bronze_ingest_log")}
    assert published["bronze_events"] in (0, 25) and published["bronze_events_quarantine"] in (0, 2)
    assert published["bronze_ingest_log"] in (0, 1)
    if failpoint == "bronze_events:before-publish":  # written, not published: on the write's branch only
        bronze = lakehouse.iceberg_table("bronze_events")
        [staged] = [name for name in bronze.metadata.refs if name.startswith("stage_")]
        assert bronze.current_snapshot() is None and bronze.scan().use_ref(staged).count() == 25

    meta = ingest(lakehouse)
    assert held(lakehouse) == (25, 2, records)
    taken = lakehouse.spark.table(lakehouse.table_id("bronze_ingest_log")).count()
    assert taken == 1
    again = ingest(lakehouse)
    assert again["records_in"].value == 0 and held(lakehouse) == (25, 2, records)
    record(f"crash at {failpoint}", tables_published_before_rerun=published,
           records_in_at_rerun=meta["records_in"].value)
