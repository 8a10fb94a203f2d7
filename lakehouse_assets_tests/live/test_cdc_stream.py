"""`lakehouse stream --source <cdc source>`: files landing while it runs reach silver and history, with no run."""

import dataclasses
import datetime as dt
import threading
import time
import uuid

import pytest
from dagster import AssetKey, DagsterInstance
from pyiceberg.table.snapshots import ancestors_of

from examples.shop.cdc_generator import CDC_TABLES, generate_cdc
from lakehouse_assets.live.cdc_stream import CdcStream
from lakehouse_assets.operations.schedules import maintenance_when_due
from lakehouse_assets.project.model import TablePolicy
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.runtime.status import stream_is_running

from ..shop import SHOP
from ..silver.test_cdc_silver import assert_current_state_is_the_source

pytestmark = pytest.mark.slow


def started(stream: CdcStream, stop: threading.Event) -> tuple[threading.Thread, list[Exception]]:
    """The stream running in a thread until `stop` is set; the list holds what ended it otherwise."""
    failed: list[Exception] = []

    def run() -> None:
        try:
            stream.run(stop=stop)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, failed


def operations(lakehouse: LakehouseResource, name: str) -> list[str]:
    """The operations of a table's commits on main, oldest first."""
    table = lakehouse.iceberg_table(name)
    return [s.summary.operation.value for s in ancestors_of(table.current_snapshot(), table.metadata)][::-1]


def compacted_between_commits(lakehouse: LakehouseResource, name: str) -> bool:
    """Whether a compaction of the table (a `replace`) has another commit after it."""
    done = operations(lakehouse, name)
    return "replace" in done and any(op != "replace" for op in done[done.index("replace") + 1:])


def test_changes_landing_while_the_stream_runs_reach_silver_and_history(lake_settings, tmp_path, spark):
    """Three takes of a day's change files (out-of-order and redelivered changes, key changes, deletes among them)
    land one after another in today's folders while the stream runs: silver and history end equal to the source,
    each take read once, later passes reading of bronze only what was appended; the landing sensors stay quiet
    meanwhile, each commit is a materialisation of its asset and landing day in the instance, and a file in a
    future day's folder is reported once and left. Orders' tables are declared to be compacted past one small
    file: the stream compacts them between its passes (bronze's compaction sends no later pass back to the whole
    window) and says so to the instance; customers' keep the default thresholds and are left alone."""
    today = dt.datetime.now(dt.timezone.utc).date()
    generated = generate_cdc(tmp_path / "generated", [dt.date(2025, 1, 1)], changes_per_day=120,
                             malformed_rate=0.0, late_share=0.1, duplicate_rate=0.05)
    tables = [t for t in CDC_TABLES if SHOP.cdc[t].source == "shop"]  # the `cdc:` entry streamed
    files = sorted(f for f in (tmp_path / "generated").rglob("*.jsonl*") if f.parent.parent.name in tables)
    takes = sorted({f.name for f in files})
    landing = tmp_path / "landing"
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace=f"t_cdc_stream_{uuid.uuid4().hex[:6]}", landing=str(landing))
    instance = DagsterInstance.ephemeral()
    future = landing / "cdc" / "orders" / f"date={today + dt.timedelta(days=3)}" / "early.jsonl"
    future.parent.mkdir(parents=True)
    future.write_text("{}\n")  # a day no partition holds yet: refused, reported once, never in the way
    logged: list[str] = []
    tight = TablePolicy(max_small_files=1)
    maintenance = dataclasses.replace(SHOP.maintenance, tables={
        name: tight for name in ("bronze_cdc_orders", "silver_orders", "silver_orders_history")})
    stream = CdcStream(SHOP, lakehouse, "shop", poll_seconds=0.5, instance=instance, log=logged.append,
                       maintain=maintenance_when_due(lakehouse, maintenance, logged.append))
    stop = threading.Event()
    thread, failed = started(stream, stop)
    try:
        for n, take in enumerate(takes):
            for f in files:
                if f.name == take:
                    table = f.parent.parent.name
                    target = landing / "cdc" / table / f"date={today}" / f.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    part = target.with_name("." + f.name)
                    part.write_bytes(f.read_bytes())
                    part.rename(target)  # whole, as the capture lands its files
            deadline = time.monotonic() + 300
            while sum(p.files for p in stream.passes) < len(tables) * (n + 1) and not failed:
                assert time.monotonic() < deadline, stream.passes
                time.sleep(0.5)
            assert not failed, failed
            assert stream_is_running(lake_settings.home, "cdc/orders"), "the landing sensors stay quiet"
    finally:
        stop.set()
        thread.join(timeout=300)
    assert not failed, failed
    assert not stream_is_running(lake_settings.home, "cdc/orders"), "the heartbeat ends with the stream"
    [refused] = [line for line in logged if "not ingested" in line]
    assert refused.startswith("cdc/orders: not ingested: ") and refused.endswith(
        f"/date={today + dt.timedelta(days=3)}/early.jsonl: landing day {today + dt.timedelta(days=3)} is in the future")

    assert len(tables) == 2
    for table in tables:
        assert_current_state_is_the_source(lakehouse, generated, table, drifted=False)
        passes = [p for p in stream.passes if p.table == table]
        assert [p.files for p in passes] == [1] * len(takes), "each take read once"
        assert all(p.changes_applied > 0 for p in passes)
        events = instance.fetch_materializations(AssetKey(f"silver_{table}"), limit=10).records
        assert len(events) == len(takes)
        reads = [e.asset_materialization.metadata["bronze_read"].value for e in events]
        assert sorted(r.startswith("appended since") for r in reads) == [False] + [True] * (len(takes) - 1)
        assert {e.asset_materialization.partition for e in events} == {today.isoformat()}
        assert instance.fetch_materializations(AssetKey(f"bronze_cdc_{table}"), limit=10).records

    for name in ("bronze_cdc_orders", "silver_orders", "silver_orders_history"):
        assert compacted_between_commits(lakehouse, name), (name, operations(lakehouse, name))
        observed = instance.fetch_observations(AssetKey(name), limit=10).records
        assert "compact" in {o.asset_observation.metadata["maintenance/action"].value for o in observed}, name
    for name in ("bronze_cdc_customers", "silver_customers", "silver_customers_history"):
        assert "replace" not in operations(lakehouse, name), name
    assert any(line.startswith("cdc/orders: maintained ") and "(compact)" in line for line in logged), logged
