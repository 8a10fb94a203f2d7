"""Upstream selections, for a day, on the shop's declaration.

`*silver_orders` takes bronze_cdc_orders and silver_customers (which orders reference) and their
bronze, but none of the tables written beside them: the quarantines and the histories. Those steps
still write every table they own, in one commit, and the run reports the ones left out as well.
The selection is Dagster's, as `dagster asset materialize --select '*silver_orders'` passes it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from dagster import AssetKey, DagsterInstance, materialize

from examples.shop.cdc_generator import generate_cdc

from ..shop import ALL_ASSETS

DAY = "2025-01-01"


def test_an_upstream_selection_runs_and_reports_the_tables_written_with_it(lakehouse):
    generate_cdc(Path(lakehouse.landing), [dt.date.fromisoformat(DAY)], changes_per_day=80)
    with DagsterInstance.ephemeral() as instance:
        run = materialize(ALL_ASSETS, selection="*silver_orders", partition_key=DAY,
                          resources={"lakehouse": lakehouse}, instance=instance)
        assert run.success

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
        return lakehouse.spark.table(lakehouse.table_id(table)).count()

    assert rows("silver_orders") > 0
    assert rows("silver_orders_history") >= rows("silver_orders")  # every current row has its version
    assert not lakehouse.catalog.table_exists((lakehouse.namespace, "silver_order_items"))
