"""Writing to Iceberg tables: one atomic commit per write, stamped and reported.

Every commit carries the Dagster run id, asset and partition range in its
snapshot summary, so the table itself says which run wrote what; the commit's
figures come back as Dagster materialisation metadata.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from dagster import MetadataValue
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .failpoints import failpoint
from .resource import LakehouseResource

WRITE_ID = "lakehouse.write-id"
RUN_ID = "dagster.run-id"
ASSET = "dagster.asset"
PARTITIONS = "dagster.partitions"


@dataclass(frozen=True)
class Window:
    """A half-open range [start, end) on a table's time column, plus its label."""

    column: str
    start: Any
    end: Any
    label: str

    @property
    def condition(self) -> Column:
        return (F.col(self.column) >= F.lit(self.start)) & (F.col(self.column) < F.lit(self.end))

    @classmethod
    def of_days(cls, column: str, start: dt.datetime, end: dt.datetime, as_date: bool = False) -> Window:
        """A Dagster daily time window, on a timestamp column or (as_date) a date column."""
        start, end = start.astimezone(dt.timezone.utc), end.astimezone(dt.timezone.utc)
        label = f"{start.date().isoformat()}..{(end - dt.timedelta(days=1)).date().isoformat()}"
        if as_date:
            return cls(column, start.date(), end.date(), label)
        return cls(column, start, end, label)


@dataclass(frozen=True)
class CommitResult:
    table: str
    snapshot_id: int | None
    operation: str
    summary: dict[str, str]

    def _int(self, key: str) -> int:
        return int(self.summary.get(key, 0) or 0)

    @property
    def added_records(self) -> int:
        return self._int("added-records")

    @property
    def deleted_records(self) -> int:
        return self._int("deleted-records")

    @property
    def total_records(self) -> int:
        return self._int("total-records")

    def metadata(self) -> dict[str, Any]:
        return {
            "table": MetadataValue.text(self.table),
            "snapshot_id": MetadataValue.int(self.snapshot_id) if self.snapshot_id else MetadataValue.text("none"),
            "operation": MetadataValue.text(self.operation),
            "partition_range": MetadataValue.text(self.summary.get(PARTITIONS, "")),
            "rows_written": MetadataValue.int(self.added_records),
            "rows_replaced": MetadataValue.int(self.deleted_records),
            "dagster/row_count": MetadataValue.int(self.total_records),
            "data_files_added": MetadataValue.int(self._int("added-data-files")),
            "data_files_removed": MetadataValue.int(self._int("deleted-data-files")),
            "bytes_added": MetadataValue.int(self._int("added-files-size")),
            "table_data_files": MetadataValue.int(self._int("total-data-files")),
        }


def overwrite_window(
    lakehouse: LakehouseResource,
    table: str,
    df: DataFrame,
    window: Window,
    run_id: str,
    asset: str,
) -> CommitResult:
    """Atomically replace the rows of `window` with `df` (one Iceberg snapshot).

    Rows of `df` outside the window are dropped first: Iceberg's overwrite appends
    them without replacing anything, and a re-run would then duplicate them.
    A window must cover whole partitions of the table.
    """
    table_id = lakehouse.ensure(table)
    write_id = uuid.uuid4().hex
    writer = _stamp(df.where(window.condition).writeTo(table_id), write_id, run_id, asset, window.label)
    try:
        writer.overwrite(window.condition)
    except Exception as exc:
        raise RuntimeError(
            f"overwrite of {table_id} for {window.column} in {window.label} failed: {exc}"
        ) from exc
    return find_commit(lakehouse, table, write_id)


class ConcurrentCommitError(RuntimeError):
    """Another writer moved the table's main branch while this write was staged."""


def _stamp(writer, write_id: str, run_id: str, asset: str, label: str):
    for key, value in {WRITE_ID: write_id, RUN_ID: run_id, ASSET: asset, PARTITIONS: label}.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    return writer


def append_staged(
    lakehouse: LakehouseResource,
    table: str,
    df: DataFrame,
    base_snapshot_id: int | None,
    run_id: str,
    asset: str,
    label: str,
) -> CommitResult:
    """Append `df` on a staging branch cut at `base_snapshot_id`, then publish it to main.

    The caller decided what to write by reading main at `base_snapshot_id`. Writing
    lands data files and a snapshot on the branch only; publishing fast-forwards
    main to it in one catalog swap, and fails if main has moved since the base
    (a concurrent writer), so two runs can never both add the same input.
    A crash before publishing leaves main untouched and the branch inspectable.
    """
    table_id = lakehouse.ensure(table)
    spark = lakehouse.spark
    write_id = uuid.uuid4().hex
    branch = f"stage_{write_id[:16]}"
    as_of = f" AS OF VERSION {int(base_snapshot_id)}" if base_snapshot_id is not None else ""
    spark.sql(f"ALTER TABLE {table_id} CREATE BRANCH `{branch}`{as_of}")
    _stamp(df.writeTo(f"{table_id}.branch_{branch}"), write_id, run_id, asset, label).append()
    failpoint(f"{table}:before-publish")
    namespace_table = table_id.split(".", 1)[1]
    catalog = table_id.split(".", 1)[0]
    try:
        spark.sql(f"CALL {catalog}.system.fast_forward('{namespace_table}', 'main', '{branch}')")
    except Exception as exc:
        spark.sql(f"ALTER TABLE {table_id} DROP BRANCH IF EXISTS `{branch}`")
        if "not an ancestor" in str(exc):
            raise ConcurrentCommitError(
                f"{table_id}: main moved while this write was staged (another writer committed); "
                "nothing was published: run again"
            ) from exc
        raise
    spark.sql(f"ALTER TABLE {table_id} DROP BRANCH IF EXISTS `{branch}`")
    return find_commit(lakehouse, table, write_id)


def current_state(lakehouse: LakehouseResource, table: str) -> CommitResult:
    """The table as it stands, reported like a commit that added nothing."""
    lakehouse.ensure(table)
    snapshot = lakehouse.iceberg_table(table).current_snapshot()
    totals = {}
    if snapshot and snapshot.summary:
        totals = {k: v for k, v in snapshot.summary.additional_properties.items() if k.startswith("total-")}
    return CommitResult(lakehouse.table_id(table), snapshot.snapshot_id if snapshot else None, "none", totals)


def find_commit(lakehouse: LakehouseResource, table: str, write_id: str) -> CommitResult:
    """The snapshot a write made, found by the write id it stamped (safe under concurrent writers)."""
    iceberg = lakehouse.iceberg_table(table)
    for snapshot in reversed(iceberg.metadata.snapshots):
        summary = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
        if summary.get(WRITE_ID) == write_id:
            operation = snapshot.summary.operation.value if snapshot.summary.operation else ""
            return CommitResult(lakehouse.table_id(table), snapshot.snapshot_id, operation, summary)
    raise RuntimeError(
        f"the write {write_id} to {lakehouse.table_id(table)} left no snapshot; "
        "the table may have been replaced or expired concurrently"
    )
