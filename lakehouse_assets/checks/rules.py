"""Checks derived from a declaration, as Pandera (pyspark) parts.

Value checks (`min`, `max`, `in`, `matches`, `not_null`) become column checks;
keys become a uniqueness check. They run on the staged write before it is
published, so each can fail on real data: none of them repeats a rule the
asset already applied to the same rows.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..project.declaration import ValueCheck

HASH_PATTERN = r"^[0-9a-f]{64}$"


def value_checks(check: ValueCheck | None) -> list[Any]:
    import pandera.pyspark as pa  # here, not at the top: a process that runs no check never imports pandera

    if check is None:
        return []
    checks = []
    if check.min is not None:
        checks.append(pa.Check.ge(check.min))
    if check.max is not None:
        checks.append(pa.Check.le(check.max))
    if check.in_ is not None:
        checks.append(pa.Check.isin(list(check.in_)))
    if check.matches is not None:
        checks.append(pa.Check.str_matches(check.matches))
    return checks


def unique_key(keys: list[str], name: str = "key_unique") -> Any:
    """No two rows share the key, and no key part is null."""
    return key_rule(keys, name, nulls_fail=True)


def key_rule(keys: list[str], name: str, where: str | None = None, nulls_fail: bool = False) -> Any:
    """No two rows (of those `where` holds for) share the key; with `nulls_fail`, no row has a null key part.
    One Spark job when pandera runs it; counted beside the model's other rules when the checks run them in one pass
    (checks/pandera_check.py: the statistics say what it counts)."""
    import pandera.pyspark as pa

    def check(df: DataFrame) -> bool:  # one Spark job: rows with a null key part group together
        rows = df.where(where) if where else df
        failing = " OR ".join(["count > 1", *(f"`{k}` IS NULL" for k in keys if nulls_fail)])
        return rows.groupBy(*keys).count().where(failing).limit(1).count() == 0

    return pa.Check(check, name=name, statistics={"keys": list(keys), "where": where, "nulls_fail": nulls_fail})


def row_rule(failing: str, name: str) -> Any:
    """No row for which the SQL condition `failing` holds. One Spark job when pandera runs it; counted with the
    model's other rules in one pass when the checks run them so (checks/pandera_check.py)."""
    import pandera.pyspark as pa

    return pa.Check(lambda df: df.where(failing).limit(1).count() == 0, name=name,
                    statistics={"rows_failing": failing})


def pandera_column(dtype: Any, nullable: bool, check: ValueCheck | None = None, *extra: Any) -> Any:
    import pandera.pyspark as pa

    return pa.Column(dtype, nullable=nullable and not (check and check.not_null),
                     checks=[*value_checks(check), *extra])


def count_matches(name: str, expected: Any, actual: Any) -> Any:
    """A check that two counts, each computed on call from tables, agree (e.g. rows reconciled between layers)."""
    import pandera.pyspark as pa

    return pa.Check(lambda _df: expected() == actual(), name=name)


def col_ref(name: str) -> Any:
    """A column, or `<map column>.<key>` read from a map column."""
    base, _, key = name.partition(".")
    return F.col(base)[key] if key else F.col(base)
