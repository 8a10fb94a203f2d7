"""Snapshot pinning: read an ML asset's data exactly as a materialisation produced it.

An ML materialisation records `pinned_snapshots` in its Dagster metadata: for
every Iceberg table it read and wrote, the snapshot id and a tag. The tag keeps
snapshot expiry from removing that snapshot for as long as the tag exists: the
declared `maintenance.pin_retention` (90 days by default) after the snapshot's
commit, when expiry drops the tag and may then reclaim the snapshot's files.

    from lakehouse_assets.ml.pinning import read_pinned
    training = read_pinned("ml_training_set")                      # newest materialisation, Arrow
    training = read_pinned("ml_training_set", run_id=..., partition="2025-01-02", as_="pandas")
    training = read_pinned("ml_training_set", as_="spark", spark=spark)

Without Spark, pyiceberg reads the pinned snapshot; with Spark, the same snapshot
through `versionAsOf`. Later writes, updates and deletes upstream change nothing.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.types import DateType

from ..runtime.catalog import catalog_for
from ..runtime.resource import LakehouseResource
from ..settings import Settings, validate_identifier

PINNED = "pinned_snapshots"


def pin_snapshots(lakehouse: LakehouseResource, run_id: str, asset: str, snapshots: dict[str, int],
                  retain: dt.timedelta | None = None) -> dict:
    """Tag each snapshot `pin_<asset>_<run>`; returns what to record. `retain`: the tag's retention (Iceberg's
    max reference age, counted from the snapshot's commit): snapshot expiry drops it after that, and the
    snapshot with it once the table's own retention allows. None: kept until the tag is dropped."""
    tag = validate_identifier(f"pin_{asset}_{run_id.replace('-', '')[:12]}", "pin tag")
    retention = f" RETAIN {max(1, int(retain.total_seconds() // 60))} MINUTES" if retain is not None else ""
    for table_id, snapshot_id in snapshots.items():
        lakehouse.spark.sql(f"ALTER TABLE {table_id} CREATE OR REPLACE TAG `{tag}` AS OF VERSION {int(snapshot_id)}"
                            f"{retention}")
    return {table_id: {"snapshot_id": snapshot_id, "tag": tag} for table_id, snapshot_id in snapshots.items()}


def pinned(asset: str, run_id: str | None = None, partition: str | None = None,
           instance: DagsterInstance | None = None) -> dict[str, Any]:
    """The pins of the newest materialisation of `asset` (of that run, of that partition)."""
    instance = instance or DagsterInstance.get()
    records_filter = AssetRecordsFilter(asset_key=AssetKey(asset),
                                        asset_partitions=[partition] if partition else None)
    cursor = None
    while True:
        result = instance.fetch_materializations(records_filter, limit=100, cursor=cursor)
        for record in result.records:
            if run_id is None or record.run_id == run_id:
                materialization = record.asset_materialization
                assert materialization is not None  # fetch_materializations returns materialisations
                if PINNED not in materialization.metadata:
                    raise ValueError(f"the materialisation of {asset} in run {record.run_id} pinned nothing")
                return {
                    "run_id": record.run_id,
                    "partition": materialization.partition,
                    "snapshots": materialization.metadata[PINNED].value,
                    "table": materialization.metadata["table"].value,
                }
        if not result.has_more:
            break
        cursor = result.cursor
    scope = " ".join(x for x in (f"run {run_id}" if run_id else "", f"partition {partition}" if partition else "") if x)
    raise LookupError(f"no materialisation of {asset} {scope} found in this Dagster instance".replace("  ", " "))


def _day_window(table: Any, partition: str) -> tuple[str, Any, Any]:
    """(column, start, end) of one daily partition, on the column the table is partitioned by."""
    field = table.spec().fields[0]
    column = table.schema().find_field(field.source_id)
    start = dt.date.fromisoformat(partition)
    end = start + dt.timedelta(days=1)
    if isinstance(column.field_type, DateType):
        return column.name, start.isoformat(), end.isoformat()
    return column.name, f"{start.isoformat()}T00:00:00+00:00", f"{end.isoformat()}T00:00:00+00:00"


def read_pinned(
    asset: str, run_id: str | None = None, partition: str | None = None, *,
    as_: str = "arrow", instance: DagsterInstance | None = None,
    settings: Settings | None = None, spark: Any = None,
):
    """The asset's table exactly at the pinned snapshot: Arrow, pandas (no Spark needed) or Spark."""
    pins = pinned(asset, run_id, partition, instance)
    table_id = pins["table"]
    snapshot_id = pins["snapshots"][table_id]["snapshot_id"]
    table = None
    if as_ != "spark" or partition:
        table = catalog_for(settings or Settings.from_env()).load_table(tuple(table_id.split(".")[1:]))
    window = _day_window(table, partition) if partition else None
    if as_ == "spark":
        if spark is None:
            raise ValueError("as_='spark' needs a SparkSession (spark=...)")
        df = spark.read.option("versionAsOf", snapshot_id).table(table_id)
        if window:
            column, start, end = window
            df = df.where((df[column] >= start) & (df[column] < end))
        return df
    row_filter = And(
        GreaterThanOrEqual(term=Reference(window[0]), value=literal(window[1])),
        LessThan(term=Reference(window[0]), value=literal(window[2])),
    ) if window else None
    assert table is not None
    scan = table.scan(snapshot_id=snapshot_id, row_filter=row_filter) if row_filter else table.scan(snapshot_id=snapshot_id)
    data = scan.to_arrow()
    if as_ == "pandas":
        return data.to_pandas()
    if as_ != "arrow":
        raise ValueError(f"as_ must be 'arrow', 'pandas' or 'spark', not {as_!r}")
    return data


def content_hash(data) -> str:
    """Order-independent SHA-256 of an Arrow table's rows: equal hashes, identical data."""
    import hashlib

    rows = sorted(repr(sorted(r.items())) for r in data.to_pylist())
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def describe(asset: str, run_id: str | None = None, partition: str | None = None,
             instance: DagsterInstance | None = None, settings: Settings | None = None) -> dict[str, Any]:
    """The pins of a materialisation and what reading them gives (rows, content hash)."""
    pins = pinned(asset, run_id, partition, instance)
    data = read_pinned(asset, pins["run_id"], partition, instance=instance, settings=settings)
    return {**pins, "rows": data.num_rows, "content_sha256": content_hash(data)}
