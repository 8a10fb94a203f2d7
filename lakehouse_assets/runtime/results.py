"""What a step that writes several tables together tells Dagster, whatever part of it was selected.

Some tables are written in one commit, never apart: bronze and its quarantine (records in =
kept + quarantined), a CDC table's current rows and its history. Their multi-assets can be
subset, so a selection such as `*gold_daily_activity` (everything upstream of one table)
runs without naming the siblings; the step still writes every table it owns. A table left
out of the selection is reported as a runtime materialization of each partition written,
with its commit's figures, so the catalogue shows every write; its checks run when it is
selected.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dagster import (
    AssetCheckResult,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    MaterializeResult,
)

Result = MaterializeResult | AssetCheckResult


def reported(context: AssetExecutionContext, results: Iterable[Result]) -> Iterator[Result | AssetMaterialization]:
    """`results` reported within the selection: selected assets and checks as they are, unselected assets as
    runtime materializations (see above), unselected checks left out."""
    selected = context.selected_asset_keys
    checks = {(k.asset_key, k.name) for k in context.selected_asset_check_keys}

    def chosen(check: AssetCheckResult) -> bool:
        return check.asset_key is None or (AssetKey.from_coercible(check.asset_key), check.check_name) in checks

    for result in results:
        if isinstance(result, AssetCheckResult):
            if chosen(result):
                yield result
            continue
        key = AssetKey.from_coercible(result.asset_key) if result.asset_key is not None else None
        if key is None or key in selected:
            yield MaterializeResult(asset_key=result.asset_key, metadata=result.metadata,
                                    check_results=[c for c in result.check_results or [] if chosen(c)],
                                    data_version=result.data_version)
            continue
        partitions = context.partition_keys if context.has_partition_key_range or context.has_partition_key else [None]
        for partition in partitions:
            yield AssetMaterialization(asset_key=key, partition=partition, metadata=result.metadata,
                                       description="written with the selected assets of its step")
