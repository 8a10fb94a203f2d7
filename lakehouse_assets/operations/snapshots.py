"""Operators' time travel through pyiceberg (no Spark): history, rollback and tags.

A rollback moves `main` back to a snapshot it passed through; the newer
snapshots stay until expiry, so a rollback can itself be undone with
`rollback --to <the newer id>` only while they are kept (use `tag` first to be sure).
A tag keeps its snapshot through expiry, for ever or for `retain_days`.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from ..errors import SnapshotError
from ..runtime.commit import ASSET, PARTITIONS, RUN_ID
from ..runtime.main_log import main_at
from ..settings import validate_identifier
from ..times import iso_ms, parse_as_of, to_ms


def snapshot_history(table: Table) -> list[dict[str, Any]]:
    """Every snapshot the table keeps, oldest first: operation, who wrote it, rows added and removed, refs."""
    current = table.current_snapshot()
    ancestors: set[int] = set()
    snapshot = current
    while snapshot is not None:
        ancestors.add(snapshot.snapshot_id)
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    refs: dict[int, list[str]] = {}
    for name, ref in table.metadata.refs.items():
        refs.setdefault(ref.snapshot_id, []).append(name if ref.snapshot_ref_type == "branch" else f"tag:{name}")
    rows = []
    for s in sorted(table.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0)):
        props = s.summary.additional_properties if s.summary else {}
        rows.append({
            "snapshot_id": s.snapshot_id,
            "parent_id": s.parent_snapshot_id,
            "committed_at": iso_ms(s.timestamp_ms),
            "operation": s.summary.operation.value if s.summary and s.summary.operation else "",
            "run_id": props.get(RUN_ID, ""),
            "asset": props.get(ASSET, ""),
            "partitions": props.get(PARTITIONS, ""),
            "rows_added": int(props.get("added-records", 0) or 0),
            "rows_removed": int(props.get("deleted-records", 0) or 0) + int(props.get("added-position-deletes", 0) or 0),
            "total_rows": int(props.get("total-records", 0) or 0) - int(props.get("total-position-deletes", 0) or 0),
            "on_main": s.snapshot_id in ancestors,
            "current": current is not None and s.snapshot_id == current.snapshot_id,
            "refs": ", ".join(sorted(refs.get(s.snapshot_id, []))),
        })
    return rows


def resolve_point(table: Table, name: str, to: str) -> int:
    """The snapshot of `main`'s past that `to` means: a snapshot id, or the one main had at a time."""
    try:
        point = parse_as_of(to)
    except ValueError as exc:
        raise SnapshotError(str(exc)) from None
    if isinstance(point, int):
        if table.snapshot_by_id(point) is None:
            raise SnapshotError(f"{name} has no snapshot {point} (expired, or never existed): "
                                f"see `lakehouse snapshots {name}`")
        return point
    # Main's own log: a published write's snapshot was committed on its branch before main had it.
    target, target_id = main_at(table, to_ms(point))
    if target_id is None:
        raise SnapshotError(f"{name} has no snapshot on main at or before {point.isoformat()}")
    if target is None:
        raise SnapshotError(f"{name}: snapshot {target_id}, main's at {point.isoformat()}, has expired")
    return target_id


def rollback(table: Table, name: str, to: str) -> dict[str, Any]:
    """Make `to` (an ancestor of main, by id or time) the current snapshot of `main`."""
    before = table.current_snapshot()
    if before is None:
        raise SnapshotError(f"{name} has no snapshot to roll back from")
    target = resolve_point(table, name, to)
    if target == before.snapshot_id:
        return {"table": name, "from": before.snapshot_id, "to": target, "changed": False}
    try:
        table.manage_snapshots().rollback_to_snapshot(target).commit()
    except ValueError as exc:
        raise SnapshotError(f"{name}: {exc}; a rollback goes back along main (see `lakehouse snapshots {name}`)") from None
    return {"table": name, "from": before.snapshot_id, "to": target, "changed": True}


def create_tag(table: Table, name: str, tag: str, snapshot_id: int | None = None,
               retain_days: float | None = None) -> dict[str, Any]:
    """Tag a snapshot (default: the current one); kept through expiry for ever or for `retain_days`."""
    validate_identifier(tag, "tag name")
    if tag == "main":
        raise SnapshotError("main is the table's branch, not a tag name")
    if snapshot_id is None:
        current = table.current_snapshot()
        if current is None:
            raise SnapshotError(f"{name} has no snapshot to tag")
        snapshot_id = current.snapshot_id
    elif table.snapshot_by_id(snapshot_id) is None:
        raise SnapshotError(f"{name} has no snapshot {snapshot_id}: see `lakehouse snapshots {name}`")
    existing = table.metadata.refs.get(tag)
    if existing is not None and existing.snapshot_ref_type != "tag":
        raise SnapshotError(f"{name} has a branch named {tag}: choose another tag name")
    max_age = int(retain_days * 86_400_000) if retain_days is not None else None
    update = table.manage_snapshots()
    if existing is not None:
        update = update.remove_tag(tag)
    update.create_tag(snapshot_id, tag, max_ref_age_ms=max_age).commit()
    return {"table": name, "tag": tag, "snapshot_id": snapshot_id, "retain_days": retain_days}
