"""Publishing on a main another writer moved: replayed when the writes do not conflict, refused when they do,
and several tables published all together or not at all.

Each test makes the other writer commit between this write's staging and its publish, so the race is
there for certain rather than by luck.
"""

import datetime as dt
import re

import pytest
from pyspark.sql import types as T

from lakehouse_assets.errors import ConcurrentCommitError
from lakehouse_assets.runtime.commit import NOTHING, Window, publish, publish_all, stage
from lakehouse_assets.tables.handle import TableHandle
from lakehouse_assets.tables.registry import MERGE_ON_READ, TableSpec, col

SCHEMA = T.StructType([col("day", T.DateType(), False), col("id", T.StringType(), False),
                       col("value", T.LongType(), False)])
SPEC = TableSpec(name="published", layer="silver", description="several writers", schema=SCHEMA,
                 partitioned_by=("day",), write_mode=MERGE_ON_READ)
OTHER = TableSpec(name="published_beside", layer="silver", description="moves with `published`", schema=SCHEMA,
                  partitioned_by=("day",))
D = [dt.date(2025, 3, 1) + dt.timedelta(days=n) for n in range(4)]


def _day(day: dt.date) -> Window:
    return Window("day", day, day + dt.timedelta(days=1), day.isoformat())


def _rows(table, day, *pairs):
    return table.spark.createDataFrame([(day, i, v) for i, v in pairs], SCHEMA)


def _overwrite(table, run, day, *pairs, scope=None):
    staged = stage(table, run, table.name, day.isoformat(), scope=scope or _day(day))
    return staged.overwrite(_rows(table, day, *pairs), _day(day))


def _contents(table):
    return sorted((r.day, r.id, r.value) for r in table.read().collect())


def _linear(table) -> list[str]:
    """The run ids along main's history, newest first (the table's creation carries none)."""
    iceberg = table.iceberg()
    runs, snapshot = [], iceberg.current_snapshot()
    while snapshot is not None:
        runs.append(snapshot.summary.additional_properties.get("dagster.run-id"))
        snapshot = iceberg.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return [r for r in runs if r]


def _branches(table) -> list[str]:
    return [r for r in table.iceberg().refs() if r != "main"]


def test_writes_of_different_partitions_are_replayed_on_the_moved_main_and_both_publish(lakehouse):
    table = lakehouse.table(SPEC).create()
    publish(_overwrite(table, "seed", D[0], ("a", 1)))
    mine = _overwrite(table, "mine", D[1], ("b", 2))
    publish(_overwrite(table, "other", D[2], ("c", 3)))  # main moves while `mine` is staged

    result = publish(mine)

    assert result.replays == 1
    assert _contents(table) == [(D[0], "a", 1), (D[1], "b", 2), (D[2], "c", 3)]
    assert _linear(table) == ["mine", "other", "seed"]
    assert result.snapshot_id == table.snapshot_id() and result.added_records == 1
    assert _branches(table) == []


@pytest.mark.parametrize("scope", ["window", "nothing"])
def test_a_write_decided_against_the_empty_table_never_takes_a_commit_made_before_its_branch_for_its_own(
        lakehouse, scope):
    """Deciding against the empty table and cutting the branch are two steps: a commit of another writer between
    them is in the branch, and is published once, as the other writer's (a first run racing another writer)."""
    table = lakehouse.table(SPEC).create()
    publish(_overwrite(table, "other", D[2], ("c", 3)))  # after `mine` saw the table empty, before its branch
    mine = stage(table, "mine", SPEC.name, D[1].isoformat(), base_snapshot_id=None,
                 scope=_day(D[1]) if scope == "window" else NOTHING).append(_rows(table, D[1], ("b", 2)))

    result = publish(mine)

    assert _contents(table) == [(D[1], "b", 2), (D[2], "c", 3)]
    assert _linear(table) == ["mine", "other"]
    assert result.added_records == 1 and result.replays == 1  # validated from the empty table it was decided on


class _BranchByARetriedEmptyCommit:
    """Spark, whose CREATE BRANCH leaves what Iceberg's branch on a table without a snapshot leaves when another
    writer commits first: its empty commit to the branch, retried on main's new head (a snapshot above it)."""

    def __init__(self, spark, table_id):
        self._spark, self._table_id = spark, table_id

    def sql(self, text):
        made = re.search(r"CREATE BRANCH `([^`]+)`$", text)
        if made is None:
            return self._spark.sql(text)
        # Iceberg's own step (SnapshotManager.createBranch without a snapshot): an empty fast append to the branch,
        # whose parent is main's head when the branch does not exist yet.
        iceberg = self._spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self._spark._jsparkSession, self._table_id)
        iceberg.newFastAppend().toBranch(made.group(1)).commit()
        return None

    def __getattr__(self, name):
        return getattr(self._spark, name)


def test_a_branch_made_by_an_empty_commit_above_another_writers_commit_publishes_that_commit_once(
        lakehouse, monkeypatch):
    table = lakehouse.table(SPEC).create()
    publish(stage(table, "other", SPEC.name, D[2].isoformat(), scope=_day(D[2])).append(_rows(table, D[2], ("c", 3))))
    head = table.snapshot_id()
    monkeypatch.setattr(TableHandle, "spark", property(lambda t: _BranchByARetriedEmptyCommit(t.engine.spark, t.id)))
    mine = stage(table, "mine", SPEC.name, D[1].isoformat(), base_snapshot_id=None, scope=_day(D[1]))
    branch_start = table.iceberg().snapshot_by_name(mine.branch)
    assert branch_start.snapshot_id != head and branch_start.parent_snapshot_id == head  # as the race leaves it
    assert mine.on == head and mine.cut_late
    mine.append(_rows(table, D[1], ("b", 2)))
    monkeypatch.undo()

    result = publish(mine)

    assert _contents(table) == [(D[1], "b", 2), (D[2], "c", 3)]  # the other writer's row once
    assert _linear(table) == ["mine", "other"] and result.added_records == 1


def test_a_write_decided_against_the_empty_table_conflicts_with_a_commit_in_its_window_before_its_branch(lakehouse):
    table = lakehouse.table(SPEC).create()
    publish(_overwrite(table, "other", D[1], ("c", 3)))
    mine = stage(table, "mine", SPEC.name, D[1].isoformat(), base_snapshot_id=None, scope=_day(D[1]))
    mine.overwrite(_rows(table, D[1], ("b", 2)), _day(D[1]))

    with pytest.raises(ConcurrentCommitError, match="changed what this write was decided against"):
        publish(mine)
    assert _contents(table) == [(D[1], "c", 3)] and _branches(table) == []


def test_a_write_whose_window_another_writer_changed_is_refused_with_nothing_published(lakehouse):
    table = lakehouse.table(SPEC).create()
    publish(_overwrite(table, "seed", D[0], ("a", 1)))
    mine = _overwrite(table, "mine", D[0], ("a", 2))
    publish(_overwrite(table, "other", D[0], ("a", 3)))

    with pytest.raises(ConcurrentCommitError, match="changed what this write was decided against"):
        publish(mine)

    assert _contents(table) == [(D[0], "a", 3)]
    assert _linear(table) == ["other", "seed"]
    assert _branches(table) == []


def test_a_write_decided_against_the_whole_table_is_refused_beside_any_other_write(lakehouse):
    table = lakehouse.table(SPEC).create()
    mine = stage(table, "mine", SPEC.name, "all").append(_rows(table, D[0], ("a", 1)))  # scope: everything
    publish(_overwrite(table, "other", D[3], ("z", 9)))

    with pytest.raises(ConcurrentCommitError):
        publish(mine)
    assert _contents(table) == [(D[3], "z", 9)]


def test_a_merge_replayed_over_another_days_write_keeps_its_updates_and_deletes(lakehouse):
    table = lakehouse.table(SPEC).create()
    publish(_overwrite(table, "seed", D[0], ("a", 1), ("b", 1), ("c", 1)))
    _rows(table, D[0], ("a", 10), ("d", 10)).createOrReplaceTempView("changes")
    mine = stage(table, "mine", SPEC.name, D[0].isoformat(), scope=_day(D[0])).sql(
        "MERGE INTO {target} t USING changes s ON t.id = s.id AND t.day = s.day "
        "WHEN MATCHED AND s.id = 'a' THEN UPDATE SET value = s.value "
        "WHEN NOT MATCHED THEN INSERT *")
    table.spark.sql(f"DELETE FROM {table.id}.branch_{mine.branch} WHERE id = 'b'")
    assert table.iceberg().snapshot_by_name(mine.branch).summary["added-position-delete-files"]  # row-level
    publish(_overwrite(table, "other", D[1], ("x", 5)))

    result = publish(mine)

    assert result.replays == 1
    assert _contents(table) == [(D[0], "a", 10), (D[0], "c", 1), (D[0], "d", 10), (D[1], "x", 5)]
    assert _linear(table)[:2] == ["mine", "other"]


@pytest.mark.parametrize("granularity", ["file", "partition"])
def test_deletes_whose_data_file_compaction_rewrote_meanwhile_are_refused_not_lost(lakehouse, granularity):
    """File-scoped delete files name their data file; partition-scoped ones do not, and then every file the
    branch reads must still be there."""
    table = lakehouse.table(SPEC).create()
    table.spark.sql(f"ALTER TABLE {table.id} SET TBLPROPERTIES ('write.delete.granularity' = '{granularity}')")
    for n in range(3):  # three small files of one day, for compaction to rewrite into one
        rows = _rows(table, D[0], (f"k{n}", n), (f"j{n}", n)).coalesce(1)
        publish(stage(table, f"seed{n}", SPEC.name, "seed", scope=NOTHING).append(rows))
    mine = stage(table, "mine", SPEC.name, D[0].isoformat(), scope=NOTHING)
    table.spark.sql(f"DELETE FROM {table.id}.branch_{mine.branch} WHERE id = 'k1'")
    assert table.iceberg().snapshot_by_name(mine.branch).summary["added-position-deletes"] == "1"
    mine.stamped = False
    catalog, name = table.id.split(".", 1)
    table.spark.sql(f"CALL {catalog}.system.rewrite_data_files(table => '{name}', "
                    "options => map('min-input-files', '2'))")

    with pytest.raises(ConcurrentCommitError, match="missing data files"):
        publish(mine)
    assert sorted(r.id for r in table.read().collect()) == ["j0", "j1", "j2", "k0", "k1", "k2"]


def test_two_tables_publish_together_or_not_at_all(lakehouse):
    first, second = lakehouse.table(SPEC).create(), lakehouse.table(OTHER).create()
    publish(_overwrite(second, "seed", D[0], ("s", 0)))
    staged_first = _overwrite(first, "pair", D[0], ("p", 1))
    staged_second = _overwrite(second, "pair", D[0], ("p", 1))
    publish(_overwrite(second, "other", D[0], ("o", 2)))  # a true conflict on the second table only
    before = first.snapshot_id()

    with pytest.raises(ConcurrentCommitError):
        publish_all([staged_first, staged_second])

    assert first.snapshot_id() == before and _contents(first) == []
    assert _contents(second) == [(D[0], "o", 2)]
    assert _branches(first) == [] and _branches(second) == []

    # Without the conflict both move, in one transaction of the catalog.
    results = publish_all([_overwrite(first, "pair2", D[1], ("p", 1)), _overwrite(second, "pair2", D[1], ("p", 1))])
    assert [r.snapshot_id for r in results] == [first.snapshot_id(), second.snapshot_id()]
    assert _linear(first) == ["pair2"] and _linear(second)[:2] == ["pair2", "other"]


TIMED = TableSpec(name="published_timed", layer="silver", description="a time-partitioned table",
                  schema=T.StructType([col("ts", T.TimestampType(), False), col("id", T.StringType(), False)]),
                  partitioned_by=("days(ts)",))


@pytest.mark.parametrize("other_hour, conflicts", [(30, False), (5, True)])
def test_a_time_window_scope_conflicts_only_with_writes_inside_it(lakehouse, other_hour, conflicts):
    """Silver's windows are on event time (aware datetimes, here of 1 March 00:00 to 2 March 00:00 UTC)."""
    table = lakehouse.table(TIMED).create()
    start = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)
    window = Window("ts", start, start + dt.timedelta(days=1), "2025-03-01")

    def write(run, hour, scope=None):
        rows = table.spark.createDataFrame([(start + dt.timedelta(hours=hour), run)], TIMED.schema)
        return stage(table, run, TIMED.name, "w", scope=scope).append(rows)

    mine = write("mine", 1, scope=window)
    publish(write("other", other_hour, scope=NOTHING))
    if conflicts:
        with pytest.raises(ConcurrentCommitError):
            publish(mine)
        assert sorted(r.id for r in table.read().collect()) == ["other"]
    else:
        assert publish(mine).replays == 1
        assert sorted(r.id for r in table.read().collect()) == ["mine", "other"]


def test_a_merge_published_on_an_unmoved_main_is_topped_by_an_empty_commit_that_says_which_run_wrote_it(lakehouse):
    """Spark's MERGE cannot carry snapshot properties: publishing adds an empty commit that does, so main's
    head always names its run, asset and partitions."""
    table = lakehouse.table(SPEC).create()
    publish(_overwrite(table, "seed", D[0], ("a", 1)))
    _rows(table, D[0], ("a", 2)).createOrReplaceTempView("changes")
    result = publish(stage(table, "run-merge", "my_asset", D[0].isoformat(), scope=_day(D[0])).sql(
        "MERGE INTO {target} t USING changes s ON t.id = s.id WHEN MATCHED THEN UPDATE SET value = s.value"
    ))

    iceberg = table.iceberg()
    head = iceberg.current_snapshot()
    merge = iceberg.snapshot_by_id(head.parent_snapshot_id)
    props = head.summary.additional_properties
    assert (props["dagster.run-id"], props["dagster.asset"], props["dagster.partitions"]) == (
        "run-merge", "my_asset", D[0].isoformat())
    assert head.summary.additional_properties.get("added-records", "0") == "0"
    assert merge.summary.operation.value == "overwrite"
    assert "dagster.run-id" not in merge.summary.additional_properties
    assert result.replays == 0 and result.snapshot_id == head.snapshot_id
    assert result.added_records == 1 and _contents(table) == [(D[0], "a", 2)]
