"""A write that loses the race to publish is staged again on the new main; both writers' rows survive.

The other writer is made to publish between this write's staging and its publish,
every time, so the race is lost for certain rather than by luck.
"""

import datetime as dt

import pytest
from pyspark.sql import types as T

from lakehouse_assets.errors import ConcurrentCommitError
from lakehouse_assets.runtime.commit import Window, with_commit_retries
from lakehouse_assets.tables.registry import TableSpec, col

SPEC = TableSpec(
    name="retried", layer="silver", description="two writers, one table",
    schema=T.StructType([col("day", T.DateType(), False), col("writer", T.StringType(), False),
                         col("value", T.LongType(), False)]),
    partitioned_by=("day",),
)
D = [dt.date(2025, 3, 1) + dt.timedelta(days=n) for n in range(6)]


def _day(day: dt.date) -> Window:
    return Window("day", day, day + dt.timedelta(days=1), day.isoformat())


def _write(table, writer: str, day: dt.date, value: int):
    rows = table.spark.createDataFrame([(day, writer, value)], SPEC.schema)
    return table.stage(f"run-{writer}", SPEC.name, day.isoformat()).overwrite(rows, _day(day))


def test_a_write_that_lost_the_race_is_restaged_on_the_new_main_and_both_writers_rows_survive(lakehouse):
    table = lakehouse.table(SPEC).create()
    _write(table, "first", D[0], 0).publish()
    attempts, logged = [], []

    def attempt():
        attempts.append(table.snapshot_id())
        staged = _write(table, "mine", D[1], len(attempts))
        if len(attempts) == 1:  # another writer publishes another day while this one is staged
            _write(table, "other", D[2], 20).publish()
        return staged.publish()

    result, retries = with_commit_retries(attempt, SPEC.name, log=logged.append)

    assert retries == 1 and len(attempts) == 2 and attempts[0] != attempts[1]  # the retry started from the new main
    assert "re-staging on the new main" in logged[0]
    rows = sorted((r.day, r.writer, r.value) for r in table.read().collect())
    assert rows == [(D[0], "first", 0), (D[1], "mine", 2), (D[2], "other", 20)]
    # History stays linear: main's head is the retried write, its parent the other writer's commit.
    iceberg = table.iceberg()
    head = iceberg.current_snapshot()
    assert head.snapshot_id == result.snapshot_id
    assert iceberg.snapshot_by_id(head.parent_snapshot_id).summary.additional_properties["dagster.run-id"] == "run-other"
    assert not [r for r in iceberg.refs() if r.startswith("stage_")]  # no branch left behind


def test_a_write_that_keeps_losing_fails_after_its_attempts_with_nothing_of_it_published(lakehouse):
    table = lakehouse.table(SPEC).create()
    attempts = []

    def attempt():
        attempts.append(1)
        staged = _write(table, "loser", D[0], 1)
        _write(table, "winner", D[len(attempts)], 10 + len(attempts)).publish()
        return staged.publish()

    with pytest.raises(ConcurrentCommitError, match="gave up after 3 attempts"):
        with_commit_retries(attempt, SPEC.name, log=lambda _: None, attempts=3)

    assert len(attempts) == 3
    rows = sorted((r.writer, r.value) for r in table.read().collect())
    assert rows == [("winner", 11), ("winner", 12), ("winner", 13)]
    assert not [r for r in table.iceberg().refs() if r.startswith("stage_")]


def test_a_write_already_published_is_never_written_again_when_dropping_its_branch_loses_a_race(lakehouse,
                                                                                              monkeypatch):
    """Under contention the branch drop after a publish can be refused like any commit; the write is on main by
    then, and retrying it would append it twice."""
    table = lakehouse.table(SPEC).create()
    spark, real_sql = table.spark, table.spark.sql
    refused = []

    def sql(statement, *args, **kwargs):
        if "DROP BRANCH" in statement and not refused:
            refused.append(statement)
            raise RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale metadata")
        return real_sql(statement, *args, **kwargs)

    monkeypatch.setattr(spark, "sql", sql)
    attempts = []

    def attempt():
        attempts.append(1)
        rows = spark.createDataFrame([(D[0], "once", 1)], SPEC.schema)
        return table.stage("run-once", SPEC.name, D[0].isoformat()).append(rows).publish()

    result, retries = with_commit_retries(attempt, SPEC.name, log=lambda _: None)
    assert (len(attempts), retries, len(refused)) == (1, 0, 1)
    assert [(r.writer, r.value) for r in table.read().collect()] == [("once", 1)]
    assert result.snapshot_id == table.iceberg().current_snapshot().snapshot_id
