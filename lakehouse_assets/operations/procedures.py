"""Maintenance of one table with Iceberg's own Spark procedures, in the order that keeps it correct.

1. `compact`: `rewrite_data_files` (bin-pack, or sort / z-order where the table
   declares one) folds small files together and rewrites data files that carry
   delete files (merge-on-read), dropping the deletes that no longer point
   anywhere; then `rewrite_manifests`.
2. `expire`: removes the branches of writes that died (older than the branch
   retention), then `expire_snapshots` older than the retention, keeping the
   last few and every snapshot a tag holds (ML pins included).
3. `remove_orphans`: files under the table's location that no snapshot
   references, older than a safety window (a younger one may belong to a write
   that has not committed yet).

A maintenance commit is an ordinary Iceberg commit on `main`: a writer that
staged before it re-stages on the new `main` (runtime/commit.py), and a
compaction that loses a race with a conflicting write runs again on the new
state. Neither side loses the other's data.

Names in the SQL text are validated identifiers; times are written by Python
from datetime objects; no user text reaches a statement.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import MaintenanceError
from ..project.model import TablePolicy
from ..runtime.conflicts import failure_message, retry_commit
from ..runtime.resource import LakehouseResource
from ..settings import validate_identifier
from ..times import UTC
from .health import TableHealth, table_health, thinnable, write_branch_ages

T = TypeVar("T")
ATTEMPTS = 5
THIN_CHUNK = 10_000  # snapshot ids named in one expiry call


@dataclass
class MaintenanceReport:
    table: str
    action: str
    before: TableHealth | None = None
    after: TableHealth | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    retries: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table, "action": self.action, "figures": self.figures, "retries": self.retries,
            "seconds": round(self.seconds, 2),
            "before": self.before.as_dict() if self.before else None,
            "after": self.after.as_dict() if self.after else None,
        }


def spark_timestamp(value: dt.datetime) -> str:
    """A Spark SQL timestamp literal (the session runs in UTC) from a datetime: no text from outside."""
    if not isinstance(value, dt.datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    utc = value.astimezone(UTC) if value.tzinfo else value
    return f"TIMESTAMP '{utc.strftime('%Y-%m-%d %H:%M:%S.%f')}'"


def retry_on_conflict(action: Callable[[], T], what: str, log: Callable[[str], None] = print) -> tuple[T, int]:
    """Run a maintenance commit until it lands; (its result, the retries). A failure runtime/conflicts.py does
    not retry, or the last of ATTEMPTS, is a MaintenanceError."""
    try:
        return retry_commit(action, what, ATTEMPTS, log, pause_s=(0.2, 1.0))
    except Exception as exc:
        raise MaintenanceError(f"{what} failed: {failure_message(exc)}") from exc


class TableMaintenance:
    """The maintenance actions of one table of a lakehouse."""

    def __init__(self, lakehouse: LakehouseResource, name: str, policy: TablePolicy,
                 log: Callable[[str], None] = print):
        self.lakehouse, self.name, self.policy, self.log = lakehouse, validate_identifier(name, "table name"), policy, log
        settings = lakehouse.settings
        self.catalog = validate_identifier(settings.catalog_name, "catalog name")
        self.namespace = validate_identifier(settings.namespace, "namespace")
        self.table_id = lakehouse.table_id(name)
        # Procedures take the table as a string: `catalog.namespace.table`, validated identifiers (named without its
        # catalog, Iceberg first tries the namespace as a catalog and logs that failure with its stack trace).
        self.procedure_table = f"'{self.catalog}.{self.namespace}.{self.name}'"

    @property
    def spark(self):
        return self.lakehouse.spark

    def health(self) -> TableHealth:
        return table_health(self.lakehouse.iceberg_table(self.name), self.name, self.policy)

    def _call(self, procedure: str, args: str) -> list[dict[str, Any]]:
        rows = self.spark.sql(f"CALL {self.catalog}.system.{procedure}(table => {self.procedure_table}{args})")
        return [r.asDict() for r in rows.collect()]

    def _retrying(self, action: Callable[[], T], what: str) -> tuple[T, int]:
        return retry_on_conflict(action, f"{what} of {self.table_id}", self.log)

    def compact(self) -> MaintenanceReport:
        """Rewrite small files and files with deletes into files of the target size; then the manifests."""
        started = time.monotonic()
        before = self.health()
        report = MaintenanceReport(self.name, "compact", before=before)
        if before.snapshot_id is None:
            report.after = before
            return report
        options = {
            "target-file-size-bytes": str(self.policy.target_file_bytes),
            "min-file-size-bytes": str(self.policy.small_file_bytes),
            "min-input-files": "2",
            # Any data file with a delete file against it is rewritten without the deleted rows...
            "delete-file-threshold": "1",
            # ...and the delete files that then point at no live file are dropped.
            "remove-dangling-deletes": "true",
        }
        args = ", strategy => 'binpack'"
        if self.policy.sort_by or self.policy.zorder_by:
            order = (f"zorder({', '.join(self.policy.zorder_by)})" if self.policy.zorder_by
                     else ", ".join(f"{c} ASC NULLS LAST" for c in self.policy.sort_by))
            args = f", strategy => 'sort', sort_order => '{order}'"
        args += ", options => map(" + ", ".join(f"'{k}', '{v}'" for k, v in options.items()) + ")"
        rows, report.retries = self._retrying(lambda: self._call("rewrite_data_files", args), "compaction")
        figures = rows[0] if rows else {}
        removed_deletes = int(figures.get("removed_delete_files_count") or 0)
        if self.health().delete_files:
            # Position deletes whose data files were just rewritten point nowhere: this drops them.
            deletes, _ = self._retrying(lambda: self._call(
                "rewrite_position_delete_files", ", options => map('rewrite-all', 'true')"), "delete-file rewrite")
            removed_deletes += int((deletes[0] if deletes else {}).get("rewritten_delete_files_count") or 0)
        manifests, _ = self._retrying(lambda: self._call("rewrite_manifests", ""), "manifest rewrite")
        report.figures = {
            "rewritten_data_files": int(figures.get("rewritten_data_files_count") or 0),
            "added_data_files": int(figures.get("added_data_files_count") or 0),
            "rewritten_bytes": int(figures.get("rewritten_bytes_count") or 0),
            "removed_delete_files": removed_deletes,
            "rewritten_manifests": int((manifests[0] if manifests else {}).get("rewritten_manifests_count") or 0),
        }
        report.after = after = self.health()
        report.seconds = time.monotonic() - started
        self.log(f"compacted {self.table_id}: {before.data_files} -> {after.data_files} data files, "
                 f"{before.delete_files} -> {after.delete_files} delete files")
        return report

    def drop_stale_branches(self, now: dt.datetime | None = None) -> list[str]:
        """Remove the `stage_`/`audit_` branches of writes older than the branch retention."""
        now = now or dt.datetime.now(UTC)
        ages = write_branch_ages(self.lakehouse.iceberg_table(self.name), now)
        dropped = [name for name, age in ages.items() if age > self.policy.branch_retention]
        for name in dropped:
            # The name matched the write-branch pattern: letters, digits and underscores only.
            self.spark.sql(f"ALTER TABLE {self.table_id} DROP BRANCH IF EXISTS `{name}`")
        return dropped

    def expire(self, now: dt.datetime | None = None) -> MaintenanceReport:
        """Drop stale write branches, then expire snapshots older than the retention (tags keep theirs); past
        `max_snapshots`, thin the rest to one commit per `snapshot_detail` span (operations/health.py)."""
        now = now or dt.datetime.now(UTC)
        started = time.monotonic()
        before = self.health()
        report = MaintenanceReport(self.name, "expire", before=before)
        branches = self.drop_stale_branches(now)
        older_than = spark_timestamp(now - self.policy.snapshot_retention)
        args = f", older_than => {older_than}, retain_last => {int(self.policy.retain_last)}"
        thinned = False

        def expire() -> list[dict[str, Any]]:
            """One expiry by age, with the thinnable snapshots named when the table is past max_snapshots: each
            call reads every snapshot's manifest list to find the files freed. Chosen at each attempt (a
            collision means main moved)."""
            nonlocal thinned
            table = self.lakehouse.iceberg_table(self.name)
            ids = thinnable(table, self.policy, now) if len(table.metadata.snapshots) > self.policy.max_snapshots else []
            thinned = bool(ids)
            out = []
            for start in range(0, max(len(ids), 1), THIN_CHUNK):
                listed = ", ".join(str(int(i)) for i in ids[start:start + THIN_CHUNK])
                out += self._call("expire_snapshots", f"{args}, snapshot_ids => array({listed})" if listed else args)
            return out

        rows, report.retries = self._retrying(expire, "snapshot expiry")

        def total(key: str) -> int:
            return sum(int(r.get(key) or 0) for r in rows)

        report.figures = {
            "dropped_branches": branches,
            "deleted_data_files": total("deleted_data_files_count"),
            "deleted_delete_files": total("deleted_position_delete_files_count")
            + total("deleted_equality_delete_files_count"),
            "deleted_manifests": total("deleted_manifests_count"),
            "deleted_manifest_lists": total("deleted_manifest_lists_count"),
        }
        report.after = after = self.health()
        report.figures["expired_snapshots"] = before.snapshots - after.snapshots
        report.figures["thinned"] = thinned
        report.seconds = time.monotonic() - started
        self.log(f"expired {self.table_id}: {before.snapshots} -> {after.snapshots} snapshots"
                 f"{' (thinned: past max_snapshots)' if thinned else ''}, {len(branches)} stale branches dropped")
        return report

    def remove_orphans(self, now: dt.datetime | None = None) -> MaintenanceReport:
        """Delete files under the table's location that no snapshot references, older than `orphan_after`."""
        now = now or dt.datetime.now(UTC)
        started = time.monotonic()
        report = MaintenanceReport(self.name, "remove_orphans")
        older_than = spark_timestamp(now - self.policy.orphan_after)
        rows, report.retries = self._retrying(
            lambda: self._call("remove_orphan_files", f", older_than => {older_than}"), "orphan removal")
        report.figures = {"removed_files": sorted(str(r["orphan_file_location"]) for r in rows)}
        report.seconds = time.monotonic() - started
        self.log(f"removed {len(rows)} orphan files of {self.table_id}")
        return report

    def nightly(self, now: dt.datetime | None = None) -> list[MaintenanceReport]:
        """Expiry, then orphan removal: the clock's part of maintenance."""
        return [self.expire(now), self.remove_orphans(now)]
