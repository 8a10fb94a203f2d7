"""Upstream selections from the `dagster` command line, for a day, on the shop's declaration.

`*silver_orders` takes bronze_cdc_orders and silver_customers (which orders reference) and their
bronze, but none of the tables written beside them: the quarantines and the histories. Those steps
still write every table they own, in one commit, and the run reports the ones left out as well.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance

ROOT = Path(__file__).resolve().parents[2]
DAY = "2025-01-01"


@pytest.mark.slow
def test_an_upstream_selection_runs_and_reports_the_tables_written_with_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_"))}
    env.update(LAKEHOUSE_PROJECT=str(ROOT / "examples/shop/lakehouse.yaml"), LAKEHOUSE_HOME=str(tmp_path / "lake"),
               DAGSTER_HOME=str(tmp_path / "dagster"), LAKEHOUSE_DRIVER_MEMORY="1g")
    (tmp_path / "dagster").mkdir()
    bin_dir = Path(sys.executable).parent
    subprocess.run([str(bin_dir / "lakehouse"), "generate", "--start", DAY, "--days", "1", "--events-per-day", "100",
                    "--changes-per-day", "80"], env=env, check=True, capture_output=True)
    run = subprocess.run([str(bin_dir / "dagster"), "asset", "materialize", "-m", "lakehouse_assets.definitions",
                          "--select", "*silver_orders", "--partition", DAY],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-5000:]

    with DagsterInstance.from_config(str(tmp_path / "dagster")) as instance:
        def materialized(name: str) -> set[str]:
            records = instance.fetch_materializations(AssetKey(name), limit=10).records
            return {r.partition_key for r in records}

        for name in ("bronze_cdc_orders", "bronze_cdc_customers", "silver_customers", "silver_orders"):
            assert materialized(name) == {DAY}, name  # selected
        for name in ("bronze_cdc_orders_quarantine", "bronze_cdc_customers_quarantine",
                     "silver_orders_history", "silver_customers_history"):
            assert materialized(name) == {DAY}, name  # written with them, reported too
        for name in ("bronze_events", "silver_order_items", "gold_daily_activity"):
            assert materialized(name) == set(), name  # not upstream of silver_orders

    def rows(table: str) -> int:
        out = subprocess.run([str(bin_dir / "lakehouse"), "sql", f"SELECT count(*) AS n FROM {table}",
                              "--format", "csv"], env=env, capture_output=True, text=True, check=True).stdout
        return int(out.splitlines()[1])

    assert rows("silver_orders") > 0
    assert rows("silver_orders_history") >= rows("silver_orders")  # every current row has its version
