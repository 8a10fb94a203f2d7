"""Pandera (pyspark) checks that gate a write-audit-publish.

A silver write is staged on a branch; its Pandera models run against what the
branch holds; only when every one passes are the run's tables published, all
together in one catalog transaction. Each model is a
blocking Dagster asset check of the asset, so a failure stops everything
downstream, and its result lists the failed checks with their columns.

pandera.pyspark never raises: errors are collected in `df.pandera.errors`.
"""

from dataclasses import dataclass, field
from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, Failure, MetadataValue
from pyspark.sql import DataFrame

from ..runtime.commit import CommitResult, StagedWrite, publish_all


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
    return pandera_failures(model.validate(check_obj=df).pandera.errors)


def check_spec(asset: str, name: str = "pandera_schema") -> AssetCheckSpec:
    """The check's declaration; its pandera model is built where the check runs (pandera is not imported to load
    the definitions)."""
    return AssetCheckSpec(name=name, asset=asset, blocking=True,
                          description=f"{name} (pandera.pyspark) on the staged write, before publishing")


@dataclass
class Audit:
    """A staged write and the checks it must pass: (asset, check name, model, rows to check)."""

    staged: StagedWrite
    checks: list[tuple[str, str, Any, DataFrame]] = field(default_factory=list)


def audit_and_publish(audits: list[Audit]) -> tuple[list[CommitResult], list[AssetCheckResult]]:
    """Run every check on every staged branch; publish all of them, together, only if all pass.

    On failure, nothing is published, the branches stay for inspection and a
    `Failure` names them (after the caller yields the returned check results:
    use `raise_if_failed`).
    """
    results = []
    for audit in audits:
        head = audit.staged.result().snapshot_id
        assert head is not None  # a staged branch always has a head snapshot
        for asset, name, model, df in audit.checks:
            rows = df.cache()  # each check of the model is a separate pass: read the branch only once
            try:
                failures = validate(model, rows)
            finally:
                rows.unpersist()
            results.append(AssetCheckResult(
                asset_key=asset,
                check_name=name,
                passed=not failures,
                severity=AssetCheckSeverity.ERROR,
                metadata={
                    "table": MetadataValue.text(audit.staged.table_id),
                    "audit_branch": MetadataValue.text(audit.staged.branch),
                    "audited_snapshot_id": MetadataValue.int(head),
                    "failed_checks": MetadataValue.int(len(failures)),
                    "failures": MetadataValue.json(failures) if failures else MetadataValue.text("none"),
                },
                description="; ".join(f"{f['column']}: {f['check']}: {f['error']}" for f in failures)[:2000] or None,
            ))
    if not all(r.passed for r in results):
        return [], results
    return publish_all([audit.staged for audit in audits]), results


def raise_if_failed(results: list[AssetCheckResult]) -> None:
    failed = [r for r in results if not r.passed]
    if failed:
        # Both were recorded as text metadata (see audit_and_publish).
        branches = sorted({str(r.metadata["audit_branch"].value) for r in failed})
        tables = sorted({str(r.metadata["table"].value) for r in failed})
        raise Failure(
            description=(
                f"write-audit-publish: {len(failed)} check(s) failed on {', '.join(tables)}; main is unchanged; "
                f"the rejected write stays readable on branch {', '.join(branches)}"
            ),
            metadata={"failed_checks": MetadataValue.json([
                {"check": r.check_name, "description": r.description} for r in failed
            ])},
        )
