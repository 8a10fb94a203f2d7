"""The metrics and alert rules, without Spark: real Iceberg tables written with pyiceberg, a real landing
zone, a real Dagster instance, Prometheus's own parser, and promtool (Debian's prometheus package) on the
rules users load. `e2e/test_operations.py` scrapes a real lakehouse with a real Prometheus."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from dagster import AssetMaterialization, DagsterInstance, MetadataValue
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lakehouse_assets.operations.metrics import LakehouseCollector
from lakehouse_assets.runtime.catalog import append_retrying, open_catalog
from lakehouse_assets.runtime.freshness import NEWEST_EVENT, NEWEST_LANDED
from lakehouse_assets.runtime.status import add_to_status, capture_status_file, stream_status_file
from lakehouse_assets.settings import Settings

from ..shop import ROOT, SHOP, SHOP_FILE

UTC = dt.timezone.utc
EXAMPLES = ROOT / "examples"


def _promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: `make setup` installs Debian's prometheus package (scripts/system-deps.sh)"
    return found


def scrape(collector: LakehouseCollector) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} as Prometheus would read the exposition."""
    text = generate_latest(collector.registry()).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _land(landing: Path, relative: str, lines: int) -> str:
    path = landing / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'{{"n": {i}}}\n' for i in range(lines)))
    return f"file:{path}"  # as Spark names a file, and the zone lists it


@pytest.fixture
def lake(tmp_path) -> Settings:
    settings = Settings(home=tmp_path / "lake", project=str(SHOP_FILE), namespace="lake")
    catalog = open_catalog(settings.catalog_name, settings.catalog, settings.warehouse)
    catalog.create_namespace("lake")
    newest = dt.datetime(2025, 1, 1, 23, 59, tzinfo=UTC)
    gold = catalog.create_table(("lake", "gold_daily_activity"), pa.schema([("activity_date", pa.date32()),
                                                                             ("active_users", pa.int64())]))
    append_retrying(catalog, ("lake", "gold_daily_activity"),
                    pa.table({"activity_date": [dt.date(2025, 1, 1)] * 3, "active_users": [5, 6, 7]}),
                    {NEWEST_EVENT: newest.isoformat(), NEWEST_LANDED: "2025-01-02T00:00:10+00:00"})
    assert gold.name()
    landing = settings.local_path(settings.landing)
    taken = [_land(landing, "events/date=2025-01-01/a.jsonl", 10), _land(landing, "cdc/customers/date=2025-01-01/c.jsonl", 4)]
    _land(landing, "events/date=2025-01-01/b.jsonl", 3)  # landed, not ingested yet
    _land(landing, "events/incoming/stray.jsonl", 1)  # not in a day folder: never ingested
    _land(landing, "events/date=2099-01-01/future.jsonl", 1)  # a day in the future
    log = pa.table({"source": ["events", "cdc/customers"], "source_file": taken, "records": [10, 4], "kept": [9, 4],
                    "quarantined": [1, 0]})
    catalog.create_table(("lake", "bronze_ingest_log"), log.schema)
    append_retrying(catalog, ("lake", "bronze_ingest_log"), log)
    return settings


def test_metrics_read_tables_sources_streams_captures_and_commits_from_what_is_on_disk(lake):
    instance = DagsterInstance.ephemeral()
    collector = LakehouseCollector(lake, SHOP, instance, log=print)
    m = scrape(collector)
    t = (("table", "gold_daily_activity"),)
    assert m[("lakehouse_table_rows", t)] == 3
    assert m[("lakehouse_table_data_files", t)] == 1
    assert m[("lakehouse_table_newest_event_timestamp_seconds", t)] == dt.datetime(2025, 1, 1, 23, 59, tzinfo=UTC).timestamp()
    lag = m[("lakehouse_table_event_lag_seconds", t)]
    expected_lag = (dt.datetime.now(UTC) - dt.datetime(2025, 1, 1, 23, 59, tzinfo=UTC)).total_seconds()
    assert abs(lag - expected_lag) < 60
    declared = SHOP.gold.freshness["gold_daily_activity"].fail.total_seconds()
    assert m[("lakehouse_table_freshness_fail_after_seconds", t)] == declared
    committed = m[("lakehouse_table_last_commit_timestamp_seconds", t)]
    assert m[("lakehouse_table_landing_to_visible_seconds", t)] == pytest.approx(
        committed - dt.datetime(2025, 1, 2, 0, 0, 10, tzinfo=UTC).timestamp(), abs=0.01)

    events, customers = (("source", "events"),), (("source", "cdc/customers"),)
    assert (m[("lakehouse_source_records_in_total", events)], m[("lakehouse_source_records_kept_total", events)],
            m[("lakehouse_source_records_quarantined_total", events)]) == (10, 9, 1)
    assert m[("lakehouse_source_records_in_total", customers)] == 4
    assert m[("lakehouse_source_landing_files_waiting", events)] == 1  # b.jsonl
    assert m[("lakehouse_source_landing_files_refused", events)] == 2  # stray and future
    assert m[("lakehouse_source_landing_files_waiting", customers)] == 0
    assert not any(name.startswith(("lakehouse_stream", "lakehouse_capture")) for name, _ in m), "nothing ran yet"
    assert all(v == 0 for (name, _), v in m.items() if name == "lakehouse_metrics_errors")

    # A stream's two batches and a capture's two runs, as they leave them on disk.
    for seconds, files, records in ((2.5, 3, 30), (1.5, 1, 12)):
        add_to_status(stream_status_file(lake.home, "events"), {"batches": 1, "batch_seconds": seconds, "files": files,
                                                                 "records_in": records}, last_batch_seconds=seconds)
    add_to_status(capture_status_file(lake.home, "shop"), {"records": 40, "tombstones": 1})
    add_to_status(capture_status_file(lake.home, "shop"), {"records": 2, "tombstones": 0}, retained_wal_bytes=4096,
                  retained_wal_read_at=1_800_000_000.0)
    # Commits as Dagster recorded them: one commit materialised for two partitions counts once.
    for partition in ("2025-01-01", "2025-01-02"):
        instance.report_runless_asset_event(AssetMaterialization("bronze_events", partition=partition, metadata={
            "snapshot_id": MetadataValue.int(11), "commit_retries": MetadataValue.int(2),
            "commit_replays": MetadataValue.int(1)}))
    instance.report_runless_asset_event(AssetMaterialization("bronze_events", metadata={
        "snapshot_id": MetadataValue.int(12), "commit_retries": MetadataValue.int(1), "commit_replays": MetadataValue.int(0)}))

    m = scrape(collector)
    assert m[("lakehouse_stream_batch_seconds_count", events)] == 2
    assert m[("lakehouse_stream_batch_seconds_sum", events)] == 4.0
    assert m[("lakehouse_stream_last_batch_seconds", events)] == 1.5
    assert (m[("lakehouse_stream_files_total", events)], m[("lakehouse_stream_records_total", events)]) == (4, 42)
    assert m[("lakehouse_stream_up", events)] == 0  # no heartbeat
    assert m[("lakehouse_stream_backlog_files", events)] == 1
    shop = (("capture", "shop"),)
    assert m[("lakehouse_capture_records_total", shop)] == 42
    assert m[("lakehouse_capture_retained_wal_bytes", shop)] == 4096
    bronze = (("table", "bronze_events"),)
    assert (m[("lakehouse_table_commit_retries_total", bronze)], m[("lakehouse_table_commit_replays_total", bronze)]) == (3, 1)

    # A later collection (another process: the counts are kept on disk) reads only what is new.
    instance.report_runless_asset_event(AssetMaterialization("bronze_events", metadata={
        "snapshot_id": MetadataValue.int(13), "commit_retries": MetadataValue.int(0), "commit_replays": MetadataValue.int(2)}))
    m = scrape(LakehouseCollector(lake, SHOP, instance, log=print))
    assert (m[("lakehouse_table_commit_retries_total", bronze)], m[("lakehouse_table_commit_replays_total", bronze)]) == (3, 3)


def test_a_table_that_cannot_be_read_is_counted_as_an_error_and_the_others_are_still_measured(lake, capsys):
    metadata = open_catalog(lake.catalog_name, lake.catalog, lake.warehouse).load_table(
        ("lake", "gold_daily_activity")).metadata_location
    Path(metadata.removeprefix("file://")).unlink()
    m = scrape(LakehouseCollector(lake, SHOP, None, log=print))
    assert m[("lakehouse_metrics_errors", (("section", "tables"),))] == 1
    assert "table gold_daily_activity" in capsys.readouterr().out
    assert m[("lakehouse_table_rows", (("table", "bronze_ingest_log"),))] == 2
    assert m[("lakehouse_source_records_in_total", (("source", "events"),))] == 10


def test_the_alert_rules_load_and_their_unit_tests_fire_on_a_stale_table():
    checked = subprocess.run([_promtool(), "check", "rules", "alerts.yml"], cwd=EXAMPLES, capture_output=True, text=True)
    assert checked.returncode == 0 and "SUCCESS: 9 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = subprocess.run([_promtool(), "test", "rules", "alerts_test.yml"], cwd=EXAMPLES, capture_output=True,
                            text=True)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_the_unit_tests_catch_a_stale_table_rule_that_does_not_fire(tmp_path):
    rules = (EXAMPLES / "alerts.yml").read_text()
    broken = rules.replace("expr: lakehouse_table_event_lag_seconds > lakehouse_table_freshness_fail_after_seconds",
                           "expr: lakehouse_table_event_lag_seconds > 2 * lakehouse_table_freshness_fail_after_seconds")
    assert broken != rules
    (tmp_path / "alerts.yml").write_text(broken)
    shutil.copy(EXAMPLES / "alerts_test.yml", tmp_path)
    tested = subprocess.run([_promtool(), "test", "rules", "alerts_test.yml"], cwd=tmp_path, capture_output=True,
                            text=True)
    assert tested.returncode != 0 and "LakehouseTableStale" in tested.stdout + tested.stderr


def test_files_are_waiting_until_taken_as_they_are_now_and_changed_files_are_counted(tmp_path):
    settings = Settings(home=tmp_path / "lake", project=str(SHOP_FILE), namespace="lake")
    catalog = open_catalog(settings.catalog_name, settings.catalog, settings.warehouse)
    catalog.create_namespace("lake")
    landing = settings.local_path(settings.landing)
    same, grown = _land(landing, "events/date=2025-01-01/a.jsonl", 3), _land(landing, "events/date=2025-01-01/b.jsonl", 2)
    stats = {uri: os.stat(uri.removeprefix("file:")) for uri in (same, grown)}

    def taken(uri: str, version: int, change: str, size: int) -> dict:
        modified = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=stats[uri].st_mtime_ns // 1_000_000)
        return {"source": "events", "source_file": uri, "records": 2, "kept": 0, "quarantined": 2, "size": size,
                "modified": modified, "sha256": "0" * 64, "version": version, "change": change}

    log = pa.Table.from_pylist([taken(same, 1, "new", 1), taken(same, 2, "changed", stats[same].st_size),
                                taken(grown, 1, "new", stats[grown].st_size - 1)])  # b.jsonl grew since
    catalog.create_table(("lake", "bronze_ingest_log"), log.schema)
    append_retrying(catalog, ("lake", "bronze_ingest_log"), log)
    m = scrape(LakehouseCollector(settings, SHOP, DagsterInstance.ephemeral(), log=print))
    events = (("source", "events"),)
    assert m[("lakehouse_source_landing_files_waiting", events)] == 1  # b.jsonl as it is now; a.jsonl is taken
    assert m[("lakehouse_source_files_changed_after_taken_total", events)] == 1
