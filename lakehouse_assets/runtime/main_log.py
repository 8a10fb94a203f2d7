"""Time travel by time on `main`'s own history: which snapshot main had at an instant.

A write is staged on a branch and published later (write-audit-publish), so a
snapshot's own `timestamp_ms` is when it was committed on its branch, which can
be before main had it. Main's snapshot log records when main's current
snapshot changed; an instant resolves against that, never against a branch's
commit time. pyiceberg only: no Spark.
"""

from __future__ import annotations

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot


def main_log(table: Table) -> list[tuple[int, int]]:
    """(when main moved to the snapshot, snapshot id) pairs, oldest first. When the table's metadata keeps no
    snapshot log, the snapshots on main's ancestry with their own commit times are used instead."""
    log = [(e.timestamp_ms, e.snapshot_id) for e in table.metadata.snapshot_log]
    if log:
        return log
    line, snapshot = [], table.current_snapshot()
    while snapshot is not None:
        line.append((snapshot.timestamp_ms, snapshot.snapshot_id))
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return sorted(line)


def main_at(table: Table, timestamp_ms: int) -> tuple[Snapshot | None, int | None]:
    """The snapshot main had at `timestamp_ms`, and its id (set even when the snapshot has expired);
    (None, None) before main had any."""
    for ts, snapshot_id in reversed(main_log(table)):
        if ts <= timestamp_ms:
            return table.snapshot_by_id(snapshot_id), snapshot_id
    return None, None


def on_main_since(table: Table, snapshot_id: int) -> int | None:
    """When main first had `snapshot_id` (None if it never did)."""
    return next((ts for ts, sid in main_log(table) if sid == snapshot_id), None)
