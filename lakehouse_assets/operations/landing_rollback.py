"""Rolling back a landing source's bronze table keeps its landing whole (pyiceberg, no Spark).

A landing file is taken once: its lines go to bronze (kept) and to the quarantine
(refused), a row for it to the ingest log, and the three commits are published
together (runtime/publish.py). A run skips every file the log lists, and takes only
rows of files the tables do not hold. Moving bronze's main back alone would leave
the log and the quarantine listing files whose rows are gone: no run would take
them again, and their lines would be lost. So a rollback of a source's bronze moves
all three back to one point, in one transaction of the catalog's database
(runtime/catalog.py: swap_pointers) or, through a REST catalog, in one multi-table
commit of the server (commit_through_server), or nothing moves:

- bronze's main goes back to the target, a snapshot of its main's past (by id or time);
- the quarantine's main goes back to the snapshot main had at the same instant: the
  last millisecond bronze's main held the target. A publish stamps its tables in
  order, bronze first, within milliseconds of each other; that instant falls after
  the target's publish and before the next, for all three tables;
- the ingest log is shared by every landing source: moving its main back would undo
  other sources' later takes too (and those files would be taken twice). Instead
  this source's rows of files the log did not list at that instant are deleted, in a
  new snapshot of the log, and every other row stays.

Each staged commit carries its run's id, and so does each log row: before anything
moves, the three are checked to undo the same ingest runs (a run whose bronze commit
is undone loses its quarantine commit and its log rows, and no other run does). A
rollback that cannot keep them together (a snapshot expired, histories that do not
match, a table that keeps moving under it) is refused with the reason, and changes
nothing. Afterwards, the next bronze run of the landing days concerned takes their
files again; the report names those days and the event days the undone commits held,
for the downstream days to be decided again.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import And, BooleanExpression, EqualTo, In, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.table.update.snapshot import ManageSnapshots

from ..errors import SnapshotError
from ..project import CdcTable, EventSource, Project
from ..project.model import INGEST_LOG
from ..runtime.catalog import commit_through_server, swap_pointers
from ..runtime.commit import ASSET, RUN_ID
from ..runtime.conflicts import CATALOG_BUSY, commit_failure
from ..runtime.main_log import main_at, main_log
from ..settings import validate_identifier
from ..tables.handle import days_added_by
from ..times import iso_ms, parse_as_of, to_ms
from .snapshots import resolve_point, rollback

ROLLED_BACK = "lakehouse.rolled-back"  # on the log's delete: the bronze rollback it belongs to
ATTEMPTS = 5  # tries when another writer moves one of the three tables between reading and swapping


@dataclass
class LandingRollback:
    """What a rollback of a landing source's bronze did (or, unchanged, found already done)."""

    source: str  # the landing folder, e.g. events
    bronze: str
    quarantine: str
    bronze_from: int
    bronze_to: int
    quarantine_from: int | None = None
    quarantine_to: int | None = None
    instant_ms: int | None = None  # the point in time the three went back to
    files: list[str] = field(default_factory=list)  # taken after it: the ingest log no longer lists them
    landing_days: list[dt.date] = field(default_factory=list)
    event_days: list[dt.date] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.bronze_from != self.bronze_to

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.bronze, "from": self.bronze_from, "to": self.bronze_to, "changed": self.changed,
            "source": self.source,
            "as_of": iso_ms(self.instant_ms) if self.instant_ms is not None else None,
            "quarantine": {"table": self.quarantine, "from": self.quarantine_from, "to": self.quarantine_to,
                           "changed": self.quarantine_from != self.quarantine_to},
            "ingest_log": {"table": INGEST_LOG, "rows_deleted": len(self.files)},
            "files": self.files,
            "landing_days": [d.isoformat() for d in self.landing_days],
            "event_days": [d.isoformat() for d in self.event_days],
        }


def rollback_table(catalog: Catalog, namespace: str, project: Project, name: str, to: str,
                   present: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """`lakehouse rollback`: a landing source's bronze goes back with its quarantine and the ingest log
    (rollback_landing); those two alone are refused, since they would no longer agree with bronze; any other
    table goes back alone (operations/snapshots.py: rollback)."""
    if name == INGEST_LOG:
        raise SnapshotError(f"{INGEST_LOG} lists the files every landing source took: roll back a source's bronze "
                            "table instead, and its rows of the log follow")
    for source in project.landing_sources:
        if name == source.quarantine:
            raise SnapshotError(f"{name} goes back with {source.bronze}: run `lakehouse rollback {source.bronze} "
                                f"--to ...`, so that bronze, its quarantine and {INGEST_LOG} keep agreeing on which "
                                "files were taken")
        if name == source.bronze:
            return rollback_landing(catalog, namespace, source, to, present).as_dict()
    return rollback(_load(catalog, namespace, name), name, to)


def rollback_landing(catalog: Catalog, namespace: str, source: EventSource | CdcTable, to: str,
                     present: Callable[[str], bool] | None = None) -> LandingRollback:
    """Move `source`'s bronze, its quarantine and its rows of the ingest log back to `to` together, or refuse
    (SnapshotError) and change nothing. `present(uri)` says whether a landed file is still in the zone: a rollback
    whose files would be taken again is refused when one is gone (the landing retention removed it)."""
    lost = ""
    for attempt in range(ATTEMPTS):
        bronze, quarantine, log = (_load(catalog, namespace, n) for n in (source.bronze, source.quarantine, INGEST_LOG))
        plan = _Plan.decide(bronze, quarantine, log, source, to)
        if not plan.report.changed:
            return plan.report
        missing = [f for f in plan.report.files if present is not None and not present(f)]
        if missing:
            raise SnapshotError(
                f"{source.bronze}: going back to {to} undoes the takes of {len(plan.report.files)} landed files, and "
                f"{len(missing)} of them are no longer in the landing zone (the landing retention or a person "
                f"removed them), e.g. {missing[0]}: their lines would be lost from bronze. Nothing was changed; "
                "go back less far, or put the files back first")
        lost = _commit(catalog, namespace, plan.transactions())
        if not lost:
            return plan.report
        time.sleep(0.05 * (attempt + 1))
    raise SnapshotError(f"{source.bronze}: {lost} kept moving during the rollback ({ATTEMPTS} tries); nothing was "
                        "changed: run it again when no run writes the source")


@dataclass
class _Plan:
    """One attempt's decision, on the three tables as they were read."""

    bronze: Table
    quarantine: Table
    log: Table
    report: LandingRollback
    log_filter: Any = None  # the rows of the log to delete, None for none

    @classmethod
    def decide(cls, bronze: Table, quarantine: Table, log: Table, source: EventSource | CdcTable,
               to: str) -> _Plan:
        name = source.bronze
        current = bronze.current_snapshot()
        if current is None:
            raise SnapshotError(f"{name} has no snapshot to roll back from")
        target = resolve_point(bronze, name, to)
        report = LandingRollback(source.landing, name, source.quarantine, current.snapshot_id, target)
        if target == current.snapshot_id:
            return cls(bronze, quarantine, log, report)
        undone = _undone(bronze, name, target)
        instant = _held_until(bronze, name, target, to)
        q_target = _snapshot_at(quarantine, source.quarantine, instant, name)
        q_undone = _undone(quarantine, source.quarantine, q_target)
        gone, kept = _log_rows_split(log, source.landing, instant, name)
        q_kept = ancestors_of(quarantine.snapshot_by_id(q_target), quarantine.metadata)
        _check_runs(source, _runs(undone, name), _runs(q_undone, source.quarantine), _runs(q_kept, source.quarantine),
                    {r["run_id"] for r in gone}, {r["run_id"] for r in kept})

        q_now = quarantine.current_snapshot()
        report.quarantine_from = q_now.snapshot_id if q_now else None
        report.quarantine_to, report.instant_ms = q_target, instant
        _report_days(report, bronze, undone, gone)
        # The undone runs' rows of this source (a run's rows are all undone or all kept: _check_runs).
        gone_runs = {r["run_id"] for r in gone}
        log_filter = And(_of_source(source.landing), In("run_id", gone_runs)) if gone else None  # type: ignore[arg-type, call-arg]
        return cls(bronze, quarantine, log, report, log_filter)

    def transactions(self) -> list[tuple[Table, Transaction]]:
        """Each table's change, staged and not committed: bronze and the quarantine back, the log's rows deleted."""
        changes = []
        for table, target in ((self.bronze, self.report.bronze_to), (self.quarantine, self.report.quarantine_to)):
            now = table.current_snapshot()
            if target is not None and (now is None or now.snapshot_id != target):
                tx = table.transaction()
                ManageSnapshots(tx).rollback_to_snapshot(target).commit()
                changes.append((table, tx))
        if self.log_filter is not None:
            tx = self.log.transaction()
            tx.delete(self.log_filter, snapshot_properties={
                ROLLED_BACK: f"{self.report.bronze} back to snapshot {self.report.bronze_to}"})
            changes.append((self.log, tx))
        return changes


def _load(catalog: Catalog, namespace: str, name: str) -> Table:
    identifier = (namespace, validate_identifier(name, "table name"))
    if not catalog.table_exists(identifier):
        raise LookupError(f"no table {name} in {catalog.name}.{namespace}: see `lakehouse tables`")
    return catalog.load_table(identifier)


def _props(snapshot: Snapshot) -> dict[str, str]:
    return snapshot.summary.additional_properties if snapshot.summary else {}


def _undone(table: Table, name: str, target: int) -> list[Snapshot]:
    """The snapshots on main's line after `target`, newest first; SnapshotError when `target` is not on it."""
    line: list[Snapshot] = []
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        if snapshot.snapshot_id == target:
            return line
        line.append(snapshot)
    raise SnapshotError(f"{name}: snapshot {target} is not in main's past (or its line has expired); a rollback "
                        f"goes back along main (see `lakehouse snapshots {name}`)")


def _held_until(bronze: Table, name: str, target: int, to: str) -> int:
    """The last millisecond main held `target`: in the stretch that covers `to` (a time), or its latest one."""
    point = parse_as_of(to)
    log = main_log(bronze)
    held = [n for n, (ts, sid) in enumerate(log)
            if (ts <= to_ms(point) if isinstance(point, dt.datetime) else sid == target)]
    if not held or held[-1] + 1 >= len(log) or log[held[-1]][1] != target:
        raise SnapshotError(f"{name}: main's log does not show when main moved on from snapshot {target}, so the "
                            f"point its quarantine and {INGEST_LOG} go back to is not known: roll back by time "
                            f"(see `lakehouse snapshots {name}`)")
    return log[held[-1] + 1][0] - 1


def _snapshot_at(table: Table, name: str, instant: int, bronze: str) -> int:
    snapshot, snapshot_id = main_at(table, instant)
    if snapshot_id is None:
        raise SnapshotError(f"{name} had no snapshot at {iso_ms(instant)}, when {bronze} was at the target: they do "
                            f"not share a history; {bronze} is not rolled back")
    if snapshot is None:
        raise SnapshotError(f"{name}: snapshot {snapshot_id}, main's at {iso_ms(instant)}, has expired; {bronze} "
                            "cannot go back that far without it")
    return snapshot_id


def _log_rows(log: Table, source: str, snapshot: Snapshot | None) -> list[dict[str, Any]]:
    """This source's rows of the log (now, or at `snapshot`): the file, its version, its landing day and the run
    that took it."""
    names = {f.name for f in log.schema().fields}
    fields = tuple(f for f in ("source_file", "version", "landing_date", "run_id") if f in names)
    scan = log.scan(row_filter=_of_source(source), selected_fields=fields,
                    snapshot_id=snapshot.snapshot_id if snapshot else None)
    return scan.to_arrow().to_pylist()


def _log_rows_split(log: Table, source: str, instant: int,
                    bronze: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """This source's rows of the ingest log: (those logged after `instant`, to undo; those listed then, to keep).

    A file is logged once per version taken (lines appended, content changed): a version logged after the
    instant is undone, the file's earlier versions stay.
    """
    then, then_id = main_at(log, instant)
    if then is None and then_id is not None:
        raise SnapshotError(f"{INGEST_LOG}: its snapshot of {iso_ms(instant)} has expired, so which files it "
                            f"listed then is not known; {bronze} cannot go back that far")
    rows = _log_rows(log, source, None)
    listed_then = {_version(r) for r in _log_rows(log, source, then)} if then else set()
    return [r for r in rows if _version(r) not in listed_then], [r for r in rows if _version(r) in listed_then]


def _report_days(report: LandingRollback, bronze: Table, undone: list[Snapshot], gone: list[dict[str, Any]]) -> None:
    """The files whose takes are undone, their landing days, and the event days the undone bronze commits added."""
    report.files = sorted({r["source_file"] for r in gone})
    report.landing_days = sorted({r["landing_date"] for r in gone if r["landing_date"] is not None})
    report.event_days = sorted({d for s in undone if _props(s).get(ASSET) == report.bronze
                                for d in days_added_by(bronze, s)})


def _version(row: dict[str, Any]) -> tuple[str, int]:
    """A file version the log lists (a row logged before versions were recorded is the file's version 0)."""
    return row["source_file"], row.get("version") or 0


def _of_source(source: str) -> BooleanExpression:
    return EqualTo(term=Reference("source"), value=literal(source))


def _runs(snapshots: Any, asset: str) -> set[str]:
    """The runs whose staged writes of `asset` made these snapshots (other commits carry no asset)."""
    return {_props(s)[RUN_ID] for s in snapshots if _props(s).get(ASSET) == asset and RUN_ID in _props(s)}


def _check_runs(source: EventSource | CdcTable, bronze: set[str], quarantine: set[str], quarantine_kept: set[str],
                log: set[str], log_kept: set[str]) -> None:
    """The runs undone on bronze are exactly those undone on the quarantine and in the log, as far as each has
    them; else refuse, naming the first run that would be split."""
    split = [
        (quarantine - bronze, f"{source.quarantine} would lose commits whose {source.bronze} commits stay"),
        (bronze & quarantine_kept, f"{source.quarantine} would keep commits whose {source.bronze} commits go"),
        (log - bronze, f"{INGEST_LOG} would lose rows whose {source.bronze} commits stay"),
        (bronze & log_kept, f"{INGEST_LOG} would keep rows whose {source.bronze} commits go"),
    ]
    for runs, why in split:
        if runs:
            raise SnapshotError(f"{source.bronze}: cannot roll back together with its quarantine and {INGEST_LOG}: "
                                f"{why} (runs {', '.join(sorted(runs)[:3])}); nothing was changed: choose another "
                                f"point (see `lakehouse snapshots {source.bronze}`)")


def _commit(catalog: Catalog, namespace: str, changes: list[tuple[Table, Transaction]]) -> str:
    """The three tables' changes in one commit: one transaction of the SQL catalog's database, or the REST
    catalog's multi-table commit. Empty when they moved; else what had moved meanwhile, and nothing moved (the
    log's rewritten data files then go with orphan removal)."""
    if isinstance(catalog, RestCatalog):
        return commit_through_server(catalog, changes) or ""
    assert isinstance(catalog, SqlCatalog), catalog
    pointers = [_stage(catalog, table, tx) for table, tx in changes]
    try:
        lost = swap_pointers(catalog, namespace, pointers) or ""
    except Exception as exc:
        _drop(catalog, pointers)
        if commit_failure(exc) != CATALOG_BUSY:
            raise
        return "the catalog's database (busy)"
    if lost:
        _drop(catalog, pointers)  # nothing points at them
    return lost


def _stage(catalog: SqlCatalog, table: Table, tx: Transaction) -> tuple[str, str, str]:
    """Write the table's new metadata file: (table, old file, new file). SqlCatalog.commit_table's own steps up
    to its pointer update; the pointer moves with the other tables' in swap_pointers."""
    staged = catalog._update_and_stage_table(table, table.name(), tx._requirements, tx._updates)
    catalog._write_metadata(staged.metadata, staged.io, staged.metadata_location)
    return table.name()[-1], table.metadata_location, staged.metadata_location


def _drop(catalog: SqlCatalog, pointers: list[tuple[str, str, str]]) -> None:
    for _, _, new in pointers:
        try:
            catalog._load_file_io(location=new).delete(new)
        except Exception:  # noqa: S110 - an unreferenced metadata file is also found by orphan removal
            pass
