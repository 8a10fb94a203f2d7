"""Pandera (pyspark) checks that gate a write-audit-publish.

A silver write is staged on a branch; its Pandera models run against what the
branch holds; only when every one passes are the run's tables published, all
together in one catalog transaction. Each model is a
blocking Dagster asset check of the asset, so a failure stops everything
downstream, and its result lists the failed checks with their columns.

pandera.pyspark never raises: errors are collected in `df.pandera.errors`. It runs
each rule as a Spark job of its own; the rules it would run so on each column, the
model's rules of rows and its first rule of keys are counted first in one job
(`in_one_pass`), and pandera runs the rest.
"""

from dataclasses import dataclass, field
from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, Failure, MetadataValue
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

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


_NUMERIC = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)
_TIMES = (T.DateType, T.TimestampType)


def _condition(check: Any, column: str, dtype: T.DataType) -> Column | None:
    """What each row must meet for one of pandera.pyspark's built-in column checks, as pandera's own backend writes it
    (it runs `filter(~condition).limit(1).count()`), on the column types pandera takes the check on; None for any
    other check or type (pandera runs those itself)."""
    name, stats, value = check.name, check.statistics, F.col(column)
    if name == "greater_than_or_equal_to" and isinstance(dtype, _NUMERIC + _TIMES):
        return value >= stats["min_value"]
    if name == "less_than_or_equal_to" and isinstance(dtype, _NUMERIC + _TIMES):
        return value <= stats["max_value"]
    if name == "isin" and isinstance(dtype, _NUMERIC + _TIMES + (T.StringType, T.BinaryType)):
        return value.isin(list(stats["allowed_values"]))
    if name == "str_matches" and isinstance(dtype, T.StringType) and isinstance(stats["pattern"], str):
        pattern = stats["pattern"]
        return value.rlike(pattern if pattern.startswith("^") else f"^{pattern}")
    return None


def in_one_pass(model: Any, df: DataFrame) -> Any:
    """The rules of `model` that pandera.pyspark runs as a Spark job each (a non-nullable column's nulls, each
    built-in column check, the model's checks of rows (`row_rule`) and the first of its checks of keys
    (`key_rule`)), counted over `df` in one job: if none fails, the model left for pandera to run (its columns'
    names and types, and the checks this does not know, such as a count compared with another table's or a second
    check of keys); if any fails, `model` whole, so that pandera reports every failure as it always does. Each row
    counts against a rule exactly when pandera's filter would keep it: a null where a check's condition asks for a
    value fails no check."""
    failing, left = _column_rules(model, df)
    counted, keys = [], None
    for check in model.checks:
        statistics = check.statistics or {}
        if "rows_failing" in statistics:
            failing.append(F.expr(statistics["rows_failing"]))
            counted.append(check.name)
        elif "keys" in statistics and keys is None and set(statistics["keys"]) <= set(df.columns):
            keys = statistics
            counted.append(check.name)
    if not failing and keys is None:
        return model
    counts = _counts(df, failing, keys)
    if counts is None or any(counts):
        return model
    left_model = model.update_columns(left)
    left_model.checks = [check for check in left_model.checks if check.name not in counted]
    return left_model


def _column_rules(model: Any, df: DataFrame) -> tuple[list[Column], dict[str, dict[str, Any]]]:
    """What fails each column rule `_condition` knows (and each non-nullable column's nulls), and the columns as
    left for pandera: their other checks."""
    failing: list[Column] = []
    left: dict[str, dict[str, Any]] = {}
    for name, column in model.columns.items():
        if name not in df.columns:
            continue  # pandera reports the missing column
        field = df.schema[name]
        kept = []
        for check in column.checks:
            condition = _condition(check, name, field.dataType)
            if condition is None:
                kept.append(check)
            else:
                failing.append(~condition)
        if not column.nullable and field.nullable:
            failing.append(F.col(name).isNull())
        left[name] = {"checks": kept, "nullable": column.nullable or field.nullable}
    return failing, left


def _counts(df: DataFrame, failing: list[Column], keys: dict[str, Any] | None) -> Any:
    """In one job: the rows each rule fails on, and first (with `keys`, a `key_rule`'s statistics) the keys that
    rule fails on."""
    rules = [F.sum(F.when(rule, 1).otherwise(0)) for rule in failing]
    if keys is None:
        return df.select(*rules).first()
    # The rows' rules summed per key, then over the keys.
    kept_rows = F.expr(keys["where"]) if keys["where"] else F.lit(True)
    per_key = df.groupBy(*keys["keys"]).agg(F.sum(F.when(kept_rows, 1).otherwise(0)).alias("_rows"),
                                            *(rule.alias(f"_rule{n}") for n, rule in enumerate(rules)))
    null_key = F.greatest(F.lit(False), *(F.col(k).isNull() for k in keys["keys"]))
    shared = (F.col("_rows") > 1) | ((null_key & (F.col("_rows") > 0)) if keys["nulls_fail"] else F.lit(False))
    return per_key.select(F.sum(F.when(shared, 1).otherwise(0)),
                          *(F.sum(f"_rule{n}") for n in range(len(rules)))).first()


def validate_in_one_pass(model: Any, df: DataFrame) -> list[dict[str, str]]:
    """`validate`, the rules `in_one_pass` knows counted in one job first; when a rule pandera then runs fails, the
    whole model is run again, so the failures reported are pandera's own for the model whole."""
    left = in_one_pass(model, df)
    failures = validate(left, df)
    return validate(model, df) if failures and left is not model else failures


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
            rows = df.cache()  # each check pandera runs is a pass of its own: read the branch only once
            try:
                failures = validate_in_one_pass(model, rows)
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
