"""Small helpers the benchmarks share: timing, medians, sizes, pipeline runs in-process."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from dagster import DagsterInstance, materialize
from pyspark.sql import SparkSession

from lakehouse_assets.build import build_definitions
from lakehouse_assets.project import load_project
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.settings import Settings

SHOP_FILE = Path(__file__).resolve().parents[1] / "examples" / "shop" / "lakehouse.yaml"


def shop_assets(*tables: str) -> list:
    """The shop demo's assets that write these tables (the benchmarks run on the shop's declaration)."""
    defs = build_definitions(load_project(SHOP_FILE))
    return [a for a in defs.assets if any(k.to_user_string() in tables for k in a.keys)]  # type: ignore[union-attr]


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def median_time(action: Callable[[], object], repeats: int = 3, warmup: bool = True) -> float:
    if warmup:
        action()
    return statistics.median(timed(action) for _ in range(repeats))


def tree_bytes(path: Path, suffix: str = ".parquet") -> int:
    return sum(p.stat().st_size for p in Path(path).rglob(f"*{suffix}") if p.is_file())


def latest_summary(spark: SparkSession, table_id: str) -> dict:
    return spark.sql(f"SELECT summary FROM {table_id}.snapshots ORDER BY committed_at DESC LIMIT 1").first().summary


def lakehouse(settings: Settings, namespace: str, landing: Path | str | None = None) -> LakehouseResource:
    """A resource on the same home and catalog as the benchmark's session (so it reuses that session)."""
    return LakehouseResource(
        home=str(settings.home), catalog_uri=settings.catalog_uri, warehouse=settings.warehouse,
        landing=str(landing) if landing else settings.landing, namespace=namespace,
        spark_master=settings.spark_master, driver_memory=settings.driver_memory,
    )


def materialize_range(assets: list, resource: LakehouseResource, start: str, end: str, instance=None):
    """One single-run materialisation of a partition range, in this process (as a backfill runs it)."""
    return materialize(
        assets, resources={"lakehouse": resource}, instance=instance or DagsterInstance.ephemeral(),
        tags={"dagster/asset_partition_range_start": start, "dagster/asset_partition_range_end": end},
    )


def materialize_partition(assets: list, resource: LakehouseResource, day: str, instance=None):
    return materialize(assets, resources={"lakehouse": resource}, instance=instance or DagsterInstance.ephemeral(),
                       partition_key=day)
