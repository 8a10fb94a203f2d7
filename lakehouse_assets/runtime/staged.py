"""A write staged on a private branch of one table: the types every writer and the publisher share.

`stage` cuts a branch `<prefix>_<epoch seconds>_<id>` from `main` (or any snapshot);
the write appends, overwrites a window or runs SQL there, stamped with its run, asset
and partition range; it can be read and audited on the branch (`StagedWrite.read`)
and is dropped whole when it fails (`discard`). Publishing it is runtime/publish.py;
retrying a write that lost a race is runtime/commit.py.

A write's `scope` is what it was decided against: `EVERYTHING` (the whole table),
`NOTHING` (a blind append) or a `Window` of its partition column.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dagster import MetadataValue
from pyiceberg.table.snapshots import Snapshot
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..tables.handle import TableHandle, reads
from ..tables.schema import conform
from ..times import UTC
from .freshness import derived_watermarks, watermark_properties

CURRENT: Any = object()  # stage from main's current snapshot
EVERYTHING = "everything"  # the write depends on the whole table: any concurrent row change conflicts
NOTHING = "nothing"  # a blind append: only the files it touches can conflict
WRITE_ID = "lakehouse.write-id"
RUN_ID = "dagster.run-id"
ASSET = "dagster.asset"
PARTITIONS = "dagster.partitions"
# The upstream tables' snapshots the writing step read, {table: [snapshot id, read at (ms)]}: automation tells
# from it whether a parent's commit came after what its child read (automation/conditions.py).
READ_SNAPSHOTS = "lakehouse.read-snapshots"


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
        start, end = start.astimezone(UTC), end.astimezone(UTC)
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
    replays: int = 0  # times the write was replayed on a main another writer had moved
    since: int | None = None  # the snapshot of main it was published on top of (its commits are those after it)
    evolved: tuple[str, ...] = ()  # the declaration's changes made to the table before this write (plan text)

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
        """Rows visible: merge-on-read tables subtract their position deletes."""
        return self._int("total-records") - self._int("total-position-deletes") - self._int("total-equality-deletes")

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
            "commit_replays": MetadataValue.int(self.replays),
            **({"read_snapshots": MetadataValue.json(json.loads(self.summary[READ_SNAPSHOTS]))}
               if self.summary.get(READ_SNAPSHOTS) else {}),
            **({"declaration_applied": MetadataValue.md("\n".join(f"- {c}" for c in self.evolved))}
               if self.evolved else {}),
        }


_SUMMED = ("added-records", "deleted-records", "added-data-files", "deleted-data-files", "added-files-size",
           "added-delete-files", "added-position-deletes", "added-equality-deletes")


@dataclass
class StagedWrite:
    """Writes on a private branch of one table, not yet visible on main."""

    table: TableHandle
    branch: str
    base_snapshot_id: int | None
    run_id: str
    asset: str
    label: str
    write_id: str
    evolve: bool = False
    stamped: bool = True
    properties: dict[str, str] = field(default_factory=dict)  # more snapshot summary properties
    scope: Any = EVERYTHING  # what the write was decided against (runtime/publish.py): EVERYTHING, NOTHING, a Window
    on: int | None = None  # the snapshot of main the branch builds on (the base, until replayed on a newer main)
    cut_late: bool = False  # the branch was cut at a newer main than the base: published by a replay, validated
    spent: list[str] = field(default_factory=list)  # branches replaced by a replay, dropped when published
    changes: Any = None  # the branch's net file changes, once a replay needed them
    replays: int = 0  # times the write was replayed on a main that another writer moved
    head: int | None = None  # the snapshot published
    published: bool = False

    def __post_init__(self) -> None:
        self.on = self.base_snapshot_id

    @property
    def table_id(self) -> str:
        return self.table.id

    @property
    def spark(self):
        return self.table.spark

    @property
    def target(self) -> str:
        """The identifier that writes to the branch (`... .branch_<name>`)."""
        return f"{self.table_id}.branch_{self.branch}"

    def read(self) -> DataFrame:
        return self.spark.read.option("branch", self.branch).table(self.table_id)

    def added(self) -> DataFrame:
        """The rows this write appended on its branch: an incremental read from the snapshot it builds on, so an
        audit of an append reads what the append wrote, not the table it appended to."""
        head = self.table.iceberg().snapshot_by_name(self.branch)
        assert head is not None  # a staged branch always has a head snapshot
        if head.snapshot_id == self.on:
            return self.read().limit(0)
        reader = self.spark.read.format("iceberg")
        if self.on is None:
            reader = reader.option("versionAsOf", head.snapshot_id)
        else:
            reader = reader.option("start-snapshot-id", self.on).option("end-snapshot-id", head.snapshot_id)
        return reader.load(self.table_id)

    def with_watermarks(self, newest_event: dt.datetime | None, newest_landed: dt.datetime | None) -> StagedWrite:
        """Stamp the event-time and landing watermarks of what this write adds (runtime/freshness.py)."""
        self.properties.update(watermark_properties(self.table.iceberg(), newest_event, newest_landed))
        return self

    def stamp_on_top(self) -> StagedWrite:
        """Carry this write's properties on an empty commit on top of its branch, made when it is published: for
        properties known only after the data was written (watermarks), or a branch with no commit of its own."""
        self.stamped = False
        return self

    def derived_from(self, *upstream: TableHandle, window_end: Any = None) -> StagedWrite:
        """Stamp the watermarks of data computed from `upstream` as it stands now, capped at `window_end`."""
        marks = [derived_watermarks(u.iceberg(), window_end) for u in upstream if u.exists()]
        events = [m[0] for m in marks if m[0] is not None]
        landed = [m[1] for m in marks if m[1] is not None]
        return self.with_watermarks(max(events, default=None), max(landed, default=None))

    def stamp(self) -> dict[str, str]:
        """The snapshot summary properties of this write's commits, with the upstream snapshots its step read."""
        read = reads()
        return {WRITE_ID: self.write_id, RUN_ID: self.run_id, ASSET: self.asset, PARTITIONS: self.label,
                **({READ_SNAPSHOTS: json.dumps(read, sort_keys=True)} if read else {}), **self.properties}

    def _writer(self, df: DataFrame, fanout: bool = False):
        writer = conform(self.table, df, evolve=self.evolve).writeTo(self.target)
        for key, value in self.stamp().items():
            writer = writer.option(f"snapshot-property.{key}", value)
        if fanout:  # each task writes its rows to their partitions' files as they come: no shuffle, no sort
            writer = writer.option("distribution-mode", "none").option("fanout-enabled", "true")
        self.stamped = True
        return writer

    def _write(self, action: Callable[[], None]) -> StagedWrite:
        try:
            action()
        except Exception:
            self.discard()  # a write that failed leaves nothing behind
            raise
        return self

    def append(self, df: DataFrame, fanout: bool = False) -> StagedWrite:
        """Append `df`. `fanout`: write each task's rows where they stand instead of shuffling them by partition
        first (for rows that span few partitions per task, such as landed files: a few more files, one pass)."""
        return self._write(lambda: self._writer(df, fanout).append())

    def overwrite(self, df: DataFrame, window: Window) -> StagedWrite:
        """Replace exactly the rows of `window` (rows of df outside it are dropped: Iceberg
        would append them without replacing anything, and a re-run would duplicate them)."""
        if self.scope == NOTHING:
            self.scope = window  # what it replaces it decided against: a write into the window conflicts
        return self._write(lambda: self._writer(df.where(window.condition)).overwrite(window.condition))

    def replace_all(self, df: DataFrame) -> StagedWrite:
        """Replace every row of the table with `df` (a table recomputed whole)."""
        self.scope = EVERYTHING
        return self._write(lambda: self._writer(df).overwrite(F.lit(True)))

    def sql(self, statement: str) -> StagedWrite:
        """Run a statement (MERGE, DELETE, UPDATE) against `{target}`, the branch."""
        self._write(lambda: self.spark.sql(statement.format(target=self.target)))
        self.stamped = False  # SQL commits cannot carry snapshot properties
        return self

    def discard(self, quietly: bool = False) -> None:
        """Drop the write's branches. `quietly`: a branch that cannot be dropped now (another writer moved the
        table meanwhile) is left for maintenance, which drops stale write branches."""
        for branch in [self.branch, *self.spent]:
            try:
                self.spark.sql(f"ALTER TABLE {self.table_id} DROP BRANCH IF EXISTS `{branch}`")
            except Exception:
                if not quietly:
                    raise

    def result(self) -> CommitResult:
        """Figures of everything this write committed on top of main (head totals, summed changes)."""
        table = self.table.iceberg()
        head = table.snapshot_by_id(self.head) if self.head is not None else table.snapshot_by_name(self.branch)
        assert head is not None and head.summary is not None  # the branch holds at least the stamped commit
        summary = dict(head.summary.additional_properties)
        totals = {k: 0 for k in _SUMMED}
        snapshot: Snapshot | None = head
        while snapshot is not None and snapshot.snapshot_id != self.on:
            assert snapshot.summary is not None  # Iceberg's writers (Spark's too) always record one
            props = snapshot.summary.additional_properties
            for key in _SUMMED:
                totals[key] += int(props.get(key, 0) or 0)
            snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
        summary.update({k: str(v) for k, v in totals.items()})
        operation = head.summary.operation.value if head.summary.operation else ""
        return CommitResult(self.table_id, head.snapshot_id, operation, summary, self.replays, self.on,
                            tuple(self.table.evolved))


def stage(
    table: TableHandle, run_id: str, asset: str, label: str,
    base_snapshot_id: Any = CURRENT, prefix: str = "stage", evolve: bool = False, scope: Any = EVERYTHING,
) -> StagedWrite:
    """A branch `<prefix>_<epoch seconds>_<id>` of `table` cut at `base_snapshot_id` (main's current snapshot by
    default; None: the empty table).

    `evolve` lets the write add columns the table lacks (bronze's schema drift); anywhere else a column
    the declaration does not have is an error. `scope` is what the write was decided against
    (runtime/publish.py): the whole table unless it says less.
    """
    table.create()
    if base_snapshot_id is CURRENT:
        base_snapshot_id = table.snapshot_id()
    write_id = uuid.uuid4().hex
    # The creation time in the name: maintenance removes branches of writes that died, after a retention.
    branch = f"{prefix}_{int(time.time())}_{write_id[:12]}"
    as_of = f" AS OF VERSION {int(base_snapshot_id)}" if base_snapshot_id is not None else ""
    table.spark.sql(f"ALTER TABLE {table.id} CREATE BRANCH `{branch}`{as_of}")
    write = StagedWrite(table, branch, base_snapshot_id, run_id, asset, label, write_id, evolve, scope=scope)
    if base_snapshot_id is None:
        # Without a snapshot to cut at, the branch is cut at main as it is now: when another writer committed
        # since the write saw the table empty, those commits are in the branch but not the write's own.
        write.on = _cut_on_main(table, branch)
        write.cut_late = write.on is not None
    return write


def _cut_on_main(table: TableHandle, branch: str) -> int | None:
    """The snapshot of main's history a new branch was cut at; None when it was cut at the empty table.

    On a table with no snapshot, Iceberg makes a branch by an empty commit to it; when another writer commits
    to main first, that commit is retried on main's new head, so the branch starts with an empty snapshot above
    a snapshot of main: the cut is the first snapshot of main found down the branch."""
    iceberg = table.iceberg()
    on_main, snapshot = set(), iceberg.current_snapshot()
    while snapshot is not None:
        on_main.add(snapshot.snapshot_id)
        snapshot = iceberg.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    cut = iceberg.snapshot_by_name(branch)
    while cut is not None:
        if cut.snapshot_id in on_main:
            return cut.snapshot_id
        cut = iceberg.snapshot_by_id(cut.parent_snapshot_id) if cut.parent_snapshot_id else None
    return None


def current_state(table: TableHandle) -> CommitResult:
    """The table as it stands, reported like a commit that added nothing."""
    snapshot = table.create().iceberg().current_snapshot()
    totals = {}
    if snapshot and snapshot.summary:
        totals = {k: v for k, v in snapshot.summary.additional_properties.items() if k.startswith("total-")}
    return CommitResult(table.id, snapshot.snapshot_id if snapshot else None, "none", totals)


