"""A table handle: one declared table's whole story in one object.

The declaration (schema, partitioning, write mode), its identifiers in Spark and
pyiceberg, and reading it (now, at a snapshot, on a branch); writes to it are staged
by runtime/staged.py. A handle lives as long as its engine (the run's resource); the
table is created at most once per handle, on the first write, and reading a table
that does not exist is an error that says which asset to materialise, never an empty
table made on the fly.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Protocol

from pyiceberg.catalog import Catalog
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, ancestors_of
from pyiceberg.transforms import DayTransform
from pyiceberg.types import StructType
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import UpstreamMissingError
from ..settings import Settings
from . import evolution
from .ddl import ensure_table
from .registry import TableSpec

_EPOCH = dt.date(1970, 1, 1)  # Iceberg's day transform counts days from it


def _by_field_id(field: Callable[[str], Column], then: StructType, then_spark: T.StructType, now: StructType,
                 now_spark: T.StructType) -> list[tuple[str, Column]]:
    """The fields of a struct as it is now (`now`, `now_spark`), each the value of the field of the same id in the
    struct as it was (`field(name)` of `then`, `then_spark`), or null when the field is new; a struct within is
    matched field by field the same way (a column added to a struct since: Spark casts no struct to one of
    more fields), a type widened since is cast."""
    old = {f.field_id: f for f in then.fields}
    out = []
    for f in now.fields:
        dtype = now_spark[f.name].dataType
        was = old.get(f.field_id)
        if was is None:
            out.append((f.name, F.lit(None).cast(dtype)))
            continue
        column, had = field(was.name), then_spark[was.name].dataType
        if had == dtype:
            out.append((f.name, column))
        elif isinstance(f.field_type, StructType) and isinstance(was.field_type, StructType) \
                and isinstance(dtype, T.StructType) and isinstance(had, T.StructType):
            inner = _by_field_id(column.getField, was.field_type, had, f.field_type, dtype)
            out.append((f.name, F.when(column.isNull(), F.lit(None).cast(dtype))
                        .otherwise(F.struct(*[c.alias(n) for n, c in inner]))))
        else:
            out.append((f.name, column.cast(dtype)))
    return out


class Engine(Protocol):
    """What a handle needs of the lakehouse it belongs to (runtime/resource.py's LakehouseResource)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def spark(self) -> SparkSession: ...

    @property
    def catalog(self) -> Catalog: ...

    def table_id(self, table: str | TableSpec) -> str: ...


_thread = threading.local()


def _noted() -> dict[str, list[int]]:
    if not hasattr(_thread, "reads"):
        _thread.reads = {}
    return _thread.reads


def reads() -> dict[str, list[int]]:
    """What the upstream reads of this thread's current step read: {table: [snapshot id, read at (ms)]}."""
    return dict(_noted())


def forget_reads() -> None:
    """A step's writes are published: the next step's reads are its own."""
    _noted().clear()


class TableHandle:
    def __init__(self, engine: Engine, spec: TableSpec):
        self.engine = engine
        self.spec = spec
        self.name = spec.name
        self.id = engine.table_id(spec.name)
        self.identifier = (engine.settings.namespace, spec.name)
        self._created = False
        self.evolved: list[str] = []  # the declaration's changes the first write made (plan text)

    def __repr__(self) -> str:
        return f"TableHandle({self.id})"

    @property
    def spark(self):
        return self.engine.spark

    def create(self) -> TableHandle:
        """Create the table from its declaration if missing, then make its safe differences from the declaration
        (renamed and added columns, partitioning, properties), or fail with the plan's text on one a run does not
        make (once per handle)."""
        if not self._created:
            ensure_table(self.spark, self.id, self.spec)
            made = evolution.bring_to_declaration(self.engine.catalog, self.identifier, self.spec)
            self._refresh(made)
            self.evolved = [c.text() for c in made]
            self._created = True
        return self

    def exists(self) -> bool:
        return self._created or self.engine.catalog.table_exists(self.identifier)

    def require(self, reader: str = "") -> TableHandle:
        if not self.exists():
            who = f" (read by {reader})" if reader else ""
            raise UpstreamMissingError(
                f"table {self.id} does not exist yet{who}: materialise {self.name} first"
            )
        return self

    def iceberg(self) -> Table:
        """pyiceberg's view, loaded now (a table's metadata moves with every commit)."""
        return self.engine.catalog.load_table(self.identifier)

    def snapshot_id(self) -> int | None:
        snapshot = self.iceberg().current_snapshot()
        return snapshot.snapshot_id if snapshot else None

    def days_added(self, snapshot_id: int, since: int | None) -> list[dt.date]:
        """The days (of the table's `days(...)` partitioning) that commit `snapshot_id` and its ancestors after
        `since` (None: all of them) added data files to, read from those commits' manifests: metadata only."""
        table = self.iceberg()
        days: set[dt.date] = set()
        snapshot = table.snapshot_by_id(snapshot_id)
        while snapshot is not None:
            days.update(days_added_by(table, snapshot))
            parent = snapshot.parent_snapshot_id
            snapshot = table.snapshot_by_id(parent) if parent is not None and parent != since else None
        return sorted(days)

    def read(self, snapshot_id: int | None = None, branch: str | None = None, reader: str = "") -> DataFrame:
        """The table's rows (main now, at a snapshot, or on a branch); UpstreamMissingError if it does not exist.
        What a `reader` (the asset reading its upstream) reads of main is noted among what this thread read
        (`reads`), its next commits record it: the snapshot asked for, or main's current one, noted just before
        Spark loads the table (a commit in between makes the note older than the read, never newer)."""
        self.require(reader)
        if reader and branch is None:
            noted = self.snapshot_id() if snapshot_id is None else snapshot_id
            if noted is not None:
                _noted().update({self.name: [noted, round(time.time() * 1000)]})
        df = self.spark.read
        if branch is not None:
            df = df.option("branch", branch)
        if snapshot_id is None:
            return df.table(self.id)
        return self._in_current_names(df.option("versionAsOf", snapshot_id).table(self.id), snapshot_id)

    def _in_current_names(self, df: DataFrame, snapshot_id: int) -> DataFrame:
        """Rows read at a snapshot, under the table's current schema: Spark reads a snapshot with the schema it was
        written with, so a column renamed, added or widened since (a declaration applied in place, which commits no
        snapshot) is matched by its field id, as a read of the current table would match it."""
        table = self.iceberg()
        snapshot = table.snapshot_by_id(snapshot_id)
        current = table.schema()
        if snapshot is None or snapshot.schema_id is None or snapshot.schema_id == current.schema_id:
            return df
        now = self.spark.read.table(self.id).schema
        return df.select([c.alias(name) for name, c in _by_field_id(
            lambda name: F.col(f"`{name}`"), table.schemas()[snapshot.schema_id].as_struct(), df.schema,
            current.as_struct(), now)])

    def read_pinned(self, reader: str = "") -> tuple[DataFrame, int]:
        """The rows at the current snapshot, fixed now, and that snapshot's id."""
        self.require(reader)
        snapshot_id = self.snapshot_id()
        if snapshot_id is None:
            raise UpstreamMissingError(f"table {self.id} has no data yet: materialise {self.name} first")
        return self.read(snapshot_id=snapshot_id, reader=reader), snapshot_id

    def read_current(self, reader: str = "") -> DataFrame:
        """The rows at the current snapshot, fixed now, however often the plan is computed (no rows when the
        table has no snapshot yet)."""
        return self.read(snapshot_id=self.require(reader).snapshot_id(), reader=reader)

    def read_appended(self, since: int, reader: str = "") -> DataFrame | None:
        """The rows the commits after snapshot `since` appended, up to the current snapshot (noted as read, as
        `read_current` notes it); None when appends are not all that happened since: `since` is not in the
        current snapshot's history (rolled back past, or expired), or a commit in between did more than add rows
        (a delete or an overwrite, `lakehouse forget` among them). A compaction changes no row and is passed
        over, as Iceberg's incremental scan passes over it."""
        self.require(reader)
        table = self.iceberg()
        current = table.current_snapshot()
        for snapshot in ancestors_of(current, table.metadata):
            if snapshot.snapshot_id == since:
                break
            if snapshot.summary is None or snapshot.summary.operation not in (Operation.APPEND, Operation.REPLACE):
                return None
        else:
            return None
        assert current is not None
        if reader:
            _noted().update({self.name: [current.snapshot_id, round(time.time() * 1000)]})
        if since == current.snapshot_id:
            return self.read(snapshot_id=since).where(F.lit(False))
        return (self.spark.read.option("start-snapshot-id", str(since))
                .option("end-snapshot-id", str(current.snapshot_id)).table(self.id))

    def schema(self):
        return self.spark.table(self.id).schema

    def add_columns(self, columns: list[tuple[str, str]]) -> None:
        """Evolve the table on purpose: nullable columns (`name` or `struct.name`, with their type names) the data
        brought. Those another run added meanwhile are left as they are."""
        wanted = evolution.data_columns(self.create().id, columns)
        self.evolve(lambda table: evolution.missing(wanted, table))

    def evolve(self, changes_of: Callable[[Table], list[evolution.Change]]) -> list[evolution.Change]:
        """Make the changes `changes_of` finds on the table as it stands (tables/evolution.py: `evolve`, through
        `change_table`) and return them."""
        made = evolution.evolve(self.engine.catalog, self.identifier, changes_of)
        self._refresh(made)
        return made

    def _refresh(self, made: list[evolution.Change]) -> None:
        """After a change pyiceberg made, Spark plans what follows (the next write, a read of the schema) on the
        table as it now is, not on any view of it Spark kept."""
        if made:
            self.spark.catalog.refreshTable(self.id)


def days_added_by(table: Table, snapshot: Snapshot) -> set[dt.date]:
    """The days (of the table's `days(...)` partitioning) commit `snapshot` added data files to, read from its
    manifests: metadata only."""
    snapshot_id = snapshot.snapshot_id
    days: set[dt.date] = set()
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot_id or manifest.content != ManifestContent.DATA:
            continue
        fields = table.specs()[manifest.partition_spec_id].fields
        day = next((n for n, f in enumerate(fields) if isinstance(f.transform, DayTransform)), None)
        if day is None:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            value = entry.data_file.partition[day]
            if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot_id and value is not None:
                days.add(_EPOCH + dt.timedelta(days=value))
    return days
