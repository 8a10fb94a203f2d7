"""Pandera (pyspark) models as blocking Dagster asset checks on Iceberg tables.

pandera.pyspark never raises: it collects errors in `df.pandera.errors`. The
check turns them into a failed `AssetCheckResult` whose metadata lists each
failed check with its column, and counts the offending rows where pandera can
say which check failed on which column.
"""

from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetChecksDefinition,
    AssetKey,
    MetadataValue,
    TimeWindowPartitionsDefinition,
    asset_check,
)
from pyspark.sql import DataFrame

from ..runtime.commit import Window
from ..runtime.resource import LakehouseResource


def pandera_failures(errors: dict) -> list[dict[str, str]]:
    """Flatten pandera.pyspark's nested error dict into rows of (kind, column, check, error)."""
    rows = []
    for depth, by_kind in (errors or {}).items():
        for kind, items in by_kind.items():
            for item in items:
                rows.append({
                    "level": str(depth),
                    "kind": str(kind),
                    "column": str(item.get("column", "")),
                    "check": str(item.get("check", "")),
                    "error": str(item.get("error", "")),
                })
    return rows


def validate(model: Any, df: DataFrame) -> list[dict[str, str]]:
    validated = model.validate(check_obj=df)
    return pandera_failures(validated.pandera.errors)


def pandera_asset_check(
    asset: str,
    table: str,
    model: Any,
    window_column: str,
    partitions_def: TimeWindowPartitionsDefinition,
    name: str = "pandera_schema",
) -> AssetChecksDefinition:
    """A blocking check that validates the asset's table rows of the run's partition range."""

    @asset_check(
        asset=AssetKey(asset),
        name=name,
        blocking=True,
        description=f"{model.__name__}: types, nullability and value rules of {table} (pandera.pyspark)",
    )
    def _check(context: AssetCheckExecutionContext, lakehouse: LakehouseResource) -> AssetCheckResult:
        df = lakehouse.spark.table(lakehouse.table_id(table))
        scope = "whole table"
        if context.has_partition_key_range:
            # From the keys: a check run without its asset has no partitions definition.
            keys = context.partition_key_range
            start = partitions_def.time_window_for_partition_key(keys.start).start
            end = partitions_def.time_window_for_partition_key(keys.end).end
            window = Window.of_days(window_column, start, end)
            df, scope = df.where(window.condition), window.label
        failures = validate(model, df)
        return AssetCheckResult(
            passed=not failures,
            severity=AssetCheckSeverity.ERROR,
            metadata={
                "table": MetadataValue.text(lakehouse.table_id(table)),
                "scope": MetadataValue.text(scope),
                "failed_checks": MetadataValue.int(len(failures)),
                "failures": MetadataValue.json(failures) if failures else MetadataValue.text("none"),
            },
            description=(
                "; ".join(f"{f['column']}: {f['check']}: {f['error']}" for f in failures)[:2000]
                or None
            ),
        )

    return _check
