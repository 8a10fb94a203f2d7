"""Publishing staged writes: every table of a run at once, on whatever `main` has become.

A staged write (runtime/staged.py) is a branch of its table. Publishing moves each
table's `main` to its branch's head, and does it for all the tables of one run in
one transaction of the catalog's database: the new metadata files are written
first, then one transaction swaps every table's metadata pointer, each only if it
still is what this publish read. Either every table moves or none does, also when
the process dies halfway (a crash leaves metadata files nobody points at, which
orphan removal deletes).

When another writer moved `main` after the branch was cut, the write is replayed
on top of the new `main` (a row delta on a fresh branch with the same data and
delete files) under Iceberg's own conflict validation from the snapshot the write
was decided against: within the write's `scope` (the rows it read, e.g. its
partition window) no concurrent commit may have added or deleted rows; files it
removes or deletes rows from must still be there. Writers of different partitions
therefore all publish; a true conflict raises `ConcurrentCommitError`, nothing
published, and the caller decides again on the new `main`.
"""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import ConcurrentCommitError, PublishedError
from ..tables.handle import forget_reads
from ..times import EPOCH, UTC
from .catalog import swap_pointers
from .conflicts import CATALOG_BUSY, CONFLICT, LOST_RACE, commit_failure, failure_message
from .failpoints import failpoint
from .freshness import NEWEST_EVENT, NEWEST_LANDED
from .spark import jvm_class
from .staged import EVERYTHING, NOTHING, CommitResult, StagedWrite

SWAP_ATTEMPTS = 20
_VERSION = re.compile(r"(\d+)-[^/]*\.metadata\.json(?:\.gz)?$")


class _LostSwap(Exception):
    """Some table's metadata moved between reading it and swapping: read, replay and try again."""


def _java(iterable: Any) -> Iterator[Any]:
    iterator = iterable.iterator()
    while iterator.hasNext():
        yield iterator.next()


def _literal(value: Any) -> Any:
    """A Python value in the form Iceberg's expressions take: microseconds since the epoch for a datetime
    (naive ones are taken as UTC), days since the epoch for a date."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return (aware - EPOCH) // dt.timedelta(microseconds=1)
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    return value


def conflict_filter(jvm: Any, scope: Any) -> Any:
    """The Iceberg expression of a write's scope: EVERYTHING, or a Window's [start, end) on its column."""
    expressions = jvm.org.apache.iceberg.expressions.Expressions
    if scope == EVERYTHING:
        return expressions.alwaysTrue()
    low = expressions.greaterThanOrEqual(scope.column, _literal(scope.start))
    high = expressions.lessThan(scope.column, _literal(scope.end))
    return getattr(expressions, "and")(low, high)


class _Changes:
    """The net data and delete files a branch added and removed since the snapshot of main it was cut at."""

    def __init__(self, jtable: Any, head: int, base: int | None):
        io = jtable.io()
        chain = []
        snapshot = jtable.snapshot(head)
        while snapshot is not None and snapshot.snapshotId() != base:
            chain.append(snapshot)
            parent = snapshot.parentId()
            snapshot = jtable.snapshot(parent) if parent is not None else None
        self.added_data: dict[str, Any] = {}
        self.removed_data: dict[str, Any] = {}
        self.added_deletes: dict[str, Any] = {}
        self.removed_deletes: dict[str, Any] = {}
        for snapshot in reversed(chain):  # oldest first: a file added then removed on the branch nets out
            self._net(self.added_data, self.removed_data,
                      _java(snapshot.addedDataFiles(io)), _java(snapshot.removedDataFiles(io)))
            self._net(self.added_deletes, self.removed_deletes,
                      _java(snapshot.addedDeleteFiles(io)), _java(snapshot.removedDeleteFiles(io)))

    @staticmethod
    def _net(added: dict[str, Any], removed: dict[str, Any], adds: Iterable[Any], removes: Iterable[Any]) -> None:
        for f in adds:
            added[f.location()] = f
        for f in removes:
            if added.pop(f.location(), None) is None:
                removed[f.location()] = f


def _replay(write: StagedWrite, jtable: Any, main_now: int | None) -> None:
    """Replay the write's changes on a fresh branch cut at `main_now`, validated against every commit made
    after the snapshot the write was decided against (`base_snapshot_id`)."""
    jvm = write.spark._jvm
    if write.changes is None:
        write.changes = _Changes(jtable, jtable.refs().get(write.branch).snapshotId(), write.on)
    changes: _Changes = write.changes
    prefix = write.branch.split("_", 1)[0]
    branch = f"{prefix}_{int(time.time())}_{uuid.uuid4().hex[:12]}"
    manage = jtable.manageSnapshots()
    if main_now is None:  # main has no snapshot (it was emptied by a rollback): nothing to replay on
        raise ConcurrentCommitError(f"{write.table_id}: main lost its history while this write was staged")
    manage.createBranch(branch, main_now).commit()
    write.spent.append(write.branch)
    write.branch, write.on = branch, main_now

    delta = jtable.newRowDelta().toBranch(branch)
    for f in changes.added_data.values():
        delta.addRows(f)
    for f in changes.added_deletes.values():
        delta.addDeletes(f)
    for f in changes.removed_data.values():
        delta.removeRows(f)
    for f in changes.removed_deletes.values():
        delta.removeDeletes(f)
    if write.base_snapshot_id is not None:
        delta.validateFromSnapshot(write.base_snapshot_id)
    delta.validateDeletedFiles()
    util = jvm.org.apache.iceberg.util.ContentFileUtil
    referenced = [util.referencedDataFileLocation(f) for f in changes.added_deletes.values()]
    if None in referenced:  # a delete file covering several data files names none: require all files to exist
        referenced = [task.file().location() for task in _java(jtable.newScan().useRef(branch).planFiles())]
    if referenced:
        delta.validateDataFilesExist(jvm.java.util.ArrayList(referenced))
    if write.scope != NOTHING:
        delta.conflictDetectionFilter(conflict_filter(jvm, write.scope))
        delta.validateNoConflictingDataFiles()
        delta.validateNoConflictingDeleteFiles()
    for key, value in _stamp(write, jtable.snapshot(main_now)).items():
        delta.set(key, value)
    try:
        delta.commit()
    except Exception as exc:
        if commit_failure(exc) == CONFLICT:
            raise ConcurrentCommitError(
                f"{write.table_id}: a concurrent commit changed what this write was decided against "
                f"({failure_message(exc)}); nothing was published") from exc
        raise
    write.replays += 1
    write.cut_late = False


def _stamp(write: StagedWrite, main_head: Any) -> dict[str, str]:
    """The write's snapshot properties; its watermarks no older than those `main` already carries."""
    props = {**write.stamp()}
    summary = main_head.summary() if main_head is not None else None
    for key in (NEWEST_EVENT, NEWEST_LANDED):
        theirs = summary.get(key) if summary is not None else None
        if theirs and (key not in props or dt.datetime.fromisoformat(theirs) > dt.datetime.fromisoformat(props[key])):
            props[key] = theirs
    return props


def stamp_branch(write: StagedWrite) -> None:
    """Commit an empty append carrying the write's snapshot properties on top of its branch (SQL commits such as
    MERGE cannot carry them)."""
    append = _load(write).newFastAppend().toBranch(write.branch)
    for key, value in write.stamp().items():
        append.set(key, value)
    append.commit()
    write.stamped = True


def _load(write: StagedWrite) -> Any:
    return jvm_class(write.spark, "org.apache.iceberg.spark.Spark3Util").loadIcebergTable(
        write.spark._jsparkSession, write.table_id)


def _main(jtable: Any) -> int | None:
    ref = jtable.refs().get("main")
    return ref.snapshotId() if ref is not None else None


def _published(write: StagedWrite, jtable: Any) -> tuple[Any, Any]:
    """(the table's metadata now, the metadata with `main` at the write's head and its branches gone)."""
    base = jtable.operations().current()
    head = base.ref(write.branch).snapshotId()
    builder = jvm_class(write.spark, "org.apache.iceberg.TableMetadata").buildFrom(base).setBranchSnapshot(head, "main")
    for branch in [write.branch, *write.spent]:
        if base.ref(branch) is not None:
            builder = builder.removeRef(branch)
    write.head = int(head)
    return base, builder.build()


def _new_metadata(write: StagedWrite, jtable: Any) -> tuple[str, str, str]:
    """Write the published metadata as the table's next metadata file: (table, old file, new file)."""
    base, updated = _published(write, jtable)
    old = base.metadataFileLocation()
    found = _VERSION.search(old)
    version = int(found.group(1)) + 1 if found else 1
    ops = jtable.operations()
    new = ops.metadataFileLocation(f"{version:05d}-{uuid.uuid4()}.metadata.json")
    jvm_class(write.spark, "org.apache.iceberg.TableMetadataParser").write(updated, ops.io().newOutputFile(new))
    return write.table.name, old, new


def _swap(writes: list[StagedWrite], pointers: list[tuple[str, str, str]]) -> None:
    """One transaction of the catalog's database: every table's pointer moves, or (_LostSwap) none does."""
    engine = writes[0].table.engine
    lost = swap_pointers(engine.catalog, engine.settings.namespace, pointers)
    if lost is not None:
        raise _LostSwap(lost)


def _commit_through_server(writes: list[StagedWrite], tables: list[Any]) -> None:
    """A REST catalog's multi-table commit: each table's `main` moves to its write's head and its branches go, each
    only if it is still the same table with `main` at the snapshot this publish read (the requirements Iceberg's
    TableCommit derives, checked by the server); every table moves, or (_LostSwap) none does."""
    spark = writes[0].spark
    settings = writes[0].table.engine.settings
    catalog = spark._jsparkSession.sessionState().catalogManager().catalog(settings.catalog_name).icebergCatalog()
    identifier, commit = (jvm_class(spark, f"org.apache.iceberg.catalog.{c}") for c in ("TableIdentifier", "TableCommit"))
    commits = []
    for write, jtable in zip(writes, tables):
        base, updated = _published(write, jtable)
        commits.append(commit.create(identifier.parse(f"{settings.namespace}.{write.table.name}"), base, updated))
    try:
        catalog.commitTransaction(spark._jvm.java.util.ArrayList(commits))
    except Exception as exc:
        if commit_failure(exc) == LOST_RACE:  # the server's 409: a table moved, or a requirement no longer held
            raise _LostSwap(", ".join(w.table.name for w in writes)) from exc
        raise


def _drop_files(write: StagedWrite, locations: list[str]) -> None:
    io = _load(write).io()
    for location in locations:
        try:
            io.deleteFile(location)
        except Exception:  # noqa: S110 - an unreferenced metadata file is also found by orphan removal
            pass


def publish_together(writes: list[StagedWrite]) -> None:
    """Move `main` of every write's table to what it staged, all in one catalog transaction.

    ConcurrentCommitError (nothing published) when a concurrent commit conflicts with a write, or the
    tables keep moving for SWAP_ATTEMPTS tries. Afterwards each write's `head` is its published snapshot.
    """
    for n in range(SWAP_ATTEMPTS):
        tables = [_load(w) for w in writes]
        for write, jtable in zip(writes, tables):
            if jtable.refs().get(write.branch) is None:
                # Retried like a conflict: the write is staged again from the tables as they are now.
                raise ConcurrentCommitError(
                    f"{write.table_id}: its write branch {write.branch} is gone (`lakehouse forget` drops the "
                    "branches that hold a forgotten person's rows; or it was dropped by hand); nothing was published")
            main_now = _main(jtable)
            if main_now != write.on or write.cut_late:
                _replay(write, jtable, main_now)
        tables = [_load(w) for w in writes]
        if any(_main(t) != w.on for w, t in zip(writes, tables)):
            continue  # moved again while replaying: replay once more
        if writes[0].table.engine.settings.catalog.kind == "rest":
            failpoint("publish:before-swap")
            try:
                _commit_through_server(writes, tables)
            except _LostSwap:
                time.sleep(0.05 * (n + 1))
                continue
        else:
            pointers = [_new_metadata(w, t) for w, t in zip(writes, tables)]
            failpoint("publish:before-swap")
            try:
                _swap(writes, pointers)
            except Exception as exc:
                if not isinstance(exc, _LostSwap) and commit_failure(exc) != CATALOG_BUSY:
                    raise  # the transaction rolled back: nothing moved, the new metadata files are orphans
                _drop_files(writes[0], [new for _, _, new in pointers])
                time.sleep(0.05 * (n + 1))
                continue
        for write in writes:
            write.published = True
        failpoint("publish:after-swap")
        return
    raise ConcurrentCommitError(
        f"{', '.join(w.table_id for w in writes)}: the tables kept moving; gave up after {SWAP_ATTEMPTS} "
        "replays on the newest main; nothing was published")


def publish_all(writes: list[StagedWrite]) -> list[CommitResult]:
    """Publish staged writes of several tables all together, or none of them (their branches dropped)."""
    for write in writes:
        if not write.stamped:
            # An empty commit on top carrying the run's properties (Iceberg's API, no Spark job), so that the
            # published head records which run wrote it.
            stamp_branch(write)
    for write in writes:
        failpoint(f"{write.table.name}:before-publish")
    try:
        publish_together(writes)
    except Exception:
        for write in writes:
            write.discard(quietly=True)  # nothing was published; what the branches held is gone with them
        raise
    # Published: nothing from here on may send the caller to write again (it would write twice).
    forget_reads()
    for write in writes:
        failpoint(f"{write.table.name}:after-publish")
    try:
        return [write.result() for write in writes]
    except Exception as exc:
        raise PublishedError(f"{', '.join(w.table_id for w in writes)}: published, but the figures could not "
                             f"be read: {exc}") from exc


def publish(write: StagedWrite) -> CommitResult:
    """Move main to what one write staged (replayed on a newer main if another writer moved it)."""
    return publish_all([write])[0]
