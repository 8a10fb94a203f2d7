"""A write that loses the race to publish is staged again on the new main; both writers' rows survive.

The other writer is made to publish between this write's staging and its publish,
every time, so the race is lost for certain rather than by luck.
"""

import datetime as dt

import pytest
from pyspark.sql import types as T

from lakehouse_assets.errors import ConcurrentCommitError
from lakehouse_assets.runtime.commit import Window, publish, stage, with_commit_retries
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
    return stage(table, f"run-{writer}", SPEC.name, day.isoformat()).overwrite(rows, _day(day))


def test_a_write_that_lost_the_race_is_restaged_on_the_new_main_and_both_writers_rows_survive(lakehouse):
    table = lakehouse.table(SPEC).create()
    publish(_write(table, "first", D[0], 0))
    attempts, logged = [], []

    def attempt():
        attempts.append(table.snapshot_id())
        staged = _write(table, "mine", D[1], len(attempts))
        if len(attempts) == 1:  # another writer publishes another day while this one is staged
            publish(_write(table, "other", D[2], 20))
        return publish(staged)

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
        publish(_write(table, "winner", D[len(attempts)], 10 + len(attempts)))
        return publish(staged)

    with pytest.raises(ConcurrentCommitError, match="gave up after 3 attempts"):
        with_commit_retries(attempt, SPEC.name, log=lambda _: None, attempts=3)

    assert len(attempts) == 3
    rows = sorted((r.writer, r.value) for r in table.read().collect())
    assert rows == [("winner", 11), ("winner", 12), ("winner", 13)]
    assert not [r for r in table.iceberg().refs() if r.startswith("stage_")]


def test_a_write_already_published_is_never_written_again_when_reading_its_figures_fails(lakehouse, monkeypatch):
    """Once the catalog swapped main, the write is published: a failure after that (here: reading its figures)
    is a PublishedError, which is never retried, since retrying would append the rows twice."""
    from lakehouse_assets.errors import PublishedError
    from lakehouse_assets.runtime.commit import StagedWrite

    table = lakehouse.table(SPEC).create()
    real_result, failed = StagedWrite.result, []

    def result(self):
        if self.published and not failed:
            failed.append(1)
            raise RuntimeError("the catalog went away")
        return real_result(self)

    monkeypatch.setattr(StagedWrite, "result", result)
    attempts = []

    def attempt():
        attempts.append(1)
        rows = table.spark.createDataFrame([(D[0], "once", 1)], SPEC.schema)
        return publish(stage(table, "run-once", SPEC.name, D[0].isoformat()).append(rows))

    with pytest.raises(PublishedError, match="published, but the figures could not be read"):
        with_commit_retries(attempt, SPEC.name, log=lambda _: None)
    assert len(attempts) == 1
    assert [(r.writer, r.value) for r in table.read().collect()] == [("once", 1)]
    assert not [r for r in table.iceberg().refs() if r.startswith("stage_")]
