"""Table health, read from Iceberg metadata through pyiceberg: no Spark, no scan of the data.

What degrades a table that nobody maintains: many small files (each a request
and a footer to read), delete files piling up on merge-on-read tables (every
read applies them), snapshots and manifests accumulating (planning reads them),
and the private branches writes leave behind when they fail (they keep old
files alive). `table_health` measures each and says which threshold of the
table's declared policy it crosses.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from dagster import MetadataValue
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table import Table

from ..project.model import TablePolicy
from ..runtime.catalog import catalog_for
from ..runtime.freshness import freshness_state
from ..settings import Settings
from ..times import UTC, from_ms

# Branches that writes cut (runtime/commit.py): `stage_` and `audit_`, then the creation time in epoch seconds.
_WRITE_BRANCH = re.compile(r"^(?:stage|audit)_(?:(?P<epoch>\d{10})_)?[0-9a-f]+$")


@dataclass(frozen=True)
class TableHealth:
    table: str
    snapshot_id: int | None
    data_files: int = 0
    small_files: int = 0
    compactable_small_files: int = 0  # small files that share a partition with another small file
    data_bytes: int = 0
    avg_file_bytes: int = 0
    median_file_bytes: int = 0
    records: int = 0  # rows in data files, before deletes
    delete_files: int = 0
    deleted_rows: int = 0  # rows removed by delete files
    deleted_ratio: float = 0.0
    snapshots: int = 0
    thinnable_snapshots: int = 0  # of them, those a thinning would expire (`thinnable`)
    oldest_snapshot_age_s: float | None = None
    manifests: int = 0
    manifest_bytes: int = 0
    metadata_file_bytes: int = 0
    tags: tuple[str, ...] = ()
    write_branches: tuple[str, ...] = ()
    stale_branches: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    thresholds: dict[str, Any] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not self.problems

    @property
    def needs_thinning(self) -> bool:
        return self.snapshots > self.thresholds.get("max_snapshots", self.snapshots) and self.thinnable_snapshots > 0

    @property
    def needs_compaction(self) -> bool:
        return any(p.startswith(("compactable_small_files", "deleted_ratio")) for p in self.problems)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(tags=list(self.tags), write_branches=list(self.write_branches),
                    stale_branches=list(self.stale_branches), problems=list(self.problems), healthy=self.healthy)
        return data

    def metadata(self) -> dict[str, Any]:
        """Dagster metadata: every measure, the problems and the thresholds."""
        meta: dict[str, Any] = {}
        for key, value in self.as_dict().items():
            if key in ("table", "thresholds"):
                continue
            if isinstance(value, bool):
                meta[f"health/{key}"] = MetadataValue.bool(value)
            elif isinstance(value, int):
                meta[f"health/{key}"] = MetadataValue.int(value)
            elif isinstance(value, float):
                meta[f"health/{key}"] = MetadataValue.float(value)
            elif isinstance(value, list):
                meta[f"health/{key}"] = MetadataValue.text(", ".join(map(str, value)) or "none")
        meta["health/thresholds"] = MetadataValue.json(self.thresholds)
        return meta


def files_of(table: Table, snapshot_id: int | None = None, data: bool | None = None) -> list[DataFile]:
    """The live files of a snapshot (default: the current one): data files, delete files, or both (None).

    Read from the manifests directly: pyiceberg's `inspect` fails on a snapshot without manifests
    (what a write of no rows to an empty table commits, to record its properties).
    """
    snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else table.current_snapshot()
    if snapshot is None:
        return []
    wanted = {None: (ManifestContent.DATA, ManifestContent.DELETES), True: (ManifestContent.DATA,),
              False: (ManifestContent.DELETES,)}[data]
    return [entry.data_file for m in snapshot.manifests(table.io) if m.content in wanted
            for entry in m.fetch_manifest_entry(table.io, discard_deleted=True)]


def file_paths(table: Table, snapshot_id: int | None = None) -> set[str]:
    """The data file paths of a snapshot (default: the current one)."""
    return {f.file_path for f in files_of(table, snapshot_id, data=True)}


def branch_age(name: str, head_timestamp_ms: int, now: dt.datetime) -> dt.timedelta | None:
    """How old a write's branch is (from the time in its name, else its head's commit time); None: not a write's."""
    m = _WRITE_BRANCH.match(name)
    if not m:
        return None
    created = int(m.group("epoch")) if m.group("epoch") else head_timestamp_ms / 1000
    return now - dt.datetime.fromtimestamp(created, UTC)


def write_branch_ages(table: Table, now: dt.datetime) -> dict[str, dt.timedelta]:
    """The branches writes cut (`stage_*`, `audit_*`) and how old each is."""
    ages = {}
    for name, ref in sorted(table.metadata.refs.items()):
        if ref.snapshot_ref_type == "branch" and name != "main":
            head = table.snapshot_by_id(ref.snapshot_id)
            age = branch_age(name, head.timestamp_ms if head else 0, now)
            if age is not None:
                ages[name] = age
    return ages


def policy_thresholds(policy: TablePolicy) -> dict[str, Any]:
    """The policy's thresholds, as reported beside the measures."""
    return {
        "small_file_bytes": policy.small_file_bytes, "max_small_files": policy.max_small_files,
        "max_delete_ratio": policy.max_delete_ratio, "max_snapshots": policy.max_snapshots,
        "snapshot_retention_s": policy.snapshot_retention.total_seconds(),
        "snapshot_detail_s": policy.snapshot_detail.total_seconds(),
        "branch_retention_s": policy.branch_retention.total_seconds(),
    }


@dataclass(frozen=True)
class FileMeasures:
    """What the current snapshot's files weigh: their sizes, the small ones, rows written and rows deleted."""

    data_files: int
    small_files: int
    compactable_small_files: int
    data_bytes: int
    avg_file_bytes: int
    median_file_bytes: int
    records: int
    delete_files: int
    deleted_rows: int

    @property
    def deleted_ratio(self) -> float:
        return self.deleted_rows / self.records if self.records else 0.0

    def fields(self) -> dict[str, Any]:
        """The measures as `TableHealth` fields."""
        return {**asdict(self), "deleted_ratio": round(self.deleted_ratio, 4)}


def measure_files(files: list[DataFile], policy: TablePolicy) -> FileMeasures:
    """Sizes and row counts of a snapshot's data files and delete files.

    A small file counts as compactable when another small file shares its partition.
    """
    data = [f for f in files if f.content == DataFileContent.DATA]
    deletes = [f for f in files if f.content != DataFileContent.DATA]
    sizes = [f.file_size_in_bytes for f in data]
    small = [f for f in data if f.file_size_in_bytes < policy.small_file_bytes]
    per_partition = Counter((f.spec_id, repr(f.partition)) for f in small)
    return FileMeasures(
        data_files=len(data), small_files=len(small),
        compactable_small_files=sum(n for n in per_partition.values() if n > 1),
        data_bytes=sum(sizes), avg_file_bytes=int(sum(sizes) / len(sizes)) if sizes else 0,
        median_file_bytes=int(statistics.median(sizes)) if sizes else 0,
        records=sum(f.record_count for f in data),
        delete_files=len(deletes), deleted_rows=sum(f.record_count for f in deletes),
    )


def compaction_due(table: Table, policy: TablePolicy) -> bool:
    """Whether the current snapshot's files cross the policy's compaction thresholds: the health sensor's test
    (`health_problems`), on the files alone."""
    return bool(_compaction_problems(policy, measure_files(files_of(table), policy)))


def _compaction_problems(policy: TablePolicy, files: FileMeasures) -> list[str]:
    problems = []
    if files.compactable_small_files > policy.max_small_files:
        problems.append(f"compactable_small_files {files.compactable_small_files} > {policy.max_small_files}")
    if files.deleted_ratio > policy.max_delete_ratio:
        problems.append(f"deleted_ratio {files.deleted_ratio:.3f} > {policy.max_delete_ratio}")
    return problems


def health_problems(policy: TablePolicy, files: FileMeasures, snapshots: int, oldest_age_s: float,
                    stale_branches: tuple[str, ...]) -> tuple[str, ...]:
    """Which thresholds of the policy the table crosses, one line each."""
    problems = _compaction_problems(policy, files)
    if snapshots > policy.max_snapshots:
        problems.append(f"snapshots {snapshots} > {policy.max_snapshots}")
    if snapshots > policy.retain_last and oldest_age_s > 2 * policy.snapshot_retention.total_seconds():
        problems.append(f"oldest_snapshot_age_s {oldest_age_s:.0f} > twice the retention: expiry is not running")
    if stale_branches:
        problems.append(f"stale_branches {len(stale_branches)}: {', '.join(stale_branches[:5])}")
    return tuple(problems)


def table_health(table: Table, name: str, policy: TablePolicy, now: dt.datetime | None = None) -> TableHealth:
    """Measure a table (files, deletes, snapshots, branches) and list the policy thresholds it crosses."""
    now = now or dt.datetime.now(UTC)
    write_branches = write_branch_ages(table, now)
    stale = tuple(n for n, age in write_branches.items() if age > policy.branch_retention)
    refs_and_metadata: dict[str, Any] = dict(
        table=name, tags=tuple(sorted(n for n, r in table.metadata.refs.items() if r.snapshot_ref_type == "tag")),
        write_branches=tuple(write_branches), stale_branches=stale,
        metadata_file_bytes=len(table.io.new_input(table.metadata_location)), thresholds=policy_thresholds(policy),
    )
    snapshot = table.current_snapshot()
    if snapshot is None:
        return TableHealth(snapshot_id=None, **refs_and_metadata)

    files = measure_files(files_of(table), policy)
    snapshots = len(table.metadata.snapshots)
    oldest_age = (now - from_ms(min(s.timestamp_ms for s in table.metadata.snapshots))).total_seconds()
    # Counting what a thinning would expire walks every snapshot: only done when there are too many.
    thinned = len(thinnable(table, policy, now)) if snapshots > policy.max_snapshots else 0
    manifests = snapshot.manifests(table.io)
    return TableHealth(
        snapshot_id=snapshot.snapshot_id, **files.fields(),
        snapshots=snapshots, thinnable_snapshots=thinned, oldest_snapshot_age_s=round(oldest_age, 1),
        manifests=len(manifests), manifest_bytes=sum(m.manifest_length for m in manifests),
        problems=health_problems(policy, files, snapshots, oldest_age, stale), **refs_and_metadata,
    )


def ancestry(snapshots: Mapping[int, Any], snapshot_id: int | None) -> list[Any]:
    """A snapshot and its ancestors, newest first, as far back as they are still in the table."""
    out, s = [], snapshots.get(snapshot_id) if snapshot_id is not None else None
    while s is not None:
        out.append(s)
        s = snapshots.get(s.parent_snapshot_id) if s.parent_snapshot_id is not None else None
    return out


def protected_since_ms(now: dt.datetime, detail_ms: int, branch_lines: list[list[Any]], on_main: set[int]) -> int:
    """From when main's commits are all kept: the last `snapshot_detail`, or earlier, where the oldest
    live branch left main (its write is replayed from that base)."""
    since = int(now.timestamp() * 1000) - detail_ms
    for branch in branch_lines:
        fork = next((s for s in branch if s.snapshot_id in on_main), None)
        if fork is not None:
            since = min(since, fork.timestamp_ms)
    return since


def thinned_from_main(main: list[Any], since_ms: int, kept: set[int], detail_ms: int) -> list[int]:
    """Main's commits older than `since_ms` that are not the last of their `snapshot_detail` span
    and that nothing keeps."""
    spans: set[int] = set()
    out = []
    for s in main:  # newest first: the first commit seen of a span is its last
        span = s.timestamp_ms // detail_ms
        if s.timestamp_ms >= since_ms or s.snapshot_id in kept or span not in spans:
            spans.add(span)
            continue
        out.append(s.snapshot_id)
    return out


def thinnable(table: Table, policy: TablePolicy, now: dt.datetime) -> list[int]:
    """The snapshots a thinning expires: a table that commits every few seconds (a stream) would otherwise
    hold thousands a day, every one written again into each commit's metadata file.

    Time travel stays possible to every commit of the last `snapshot_detail`, and before that to the last
    commit of each `snapshot_detail` span (on main's line); older commits no ref needs go too. Always kept:
    main's last `retain_last`, the snapshot of every ref (tags, ML pins included), and main's commits since
    the oldest live write branch was cut (a staged write is replayed from its base: runtime/publish.py).
    Expiry by age (`snapshot_retention`) then removes the spans' survivors.
    """
    snapshots = {s.snapshot_id: s for s in table.metadata.snapshots}
    refs = table.metadata.refs
    main = ancestry(snapshots, refs["main"].snapshot_id) if "main" in refs else []
    on_main = {s.snapshot_id for s in main}
    kept = {ref.snapshot_id for ref in refs.values()} | {s.snapshot_id for s in main[:policy.retain_last]}
    detail_ms = max(int(policy.snapshot_detail.total_seconds() * 1000), 1)
    branch_lines = [ancestry(snapshots, ref.snapshot_id) for name, ref in refs.items()
                    if ref.snapshot_ref_type == "branch" and name != "main"]
    since = protected_since_ms(now, detail_ms, branch_lines, on_main)
    needed = on_main | {s.snapshot_id for line in branch_lines for s in line}  # on some branch's line
    out = thinned_from_main(main, since, kept, detail_ms)
    out += [sid for sid, s in snapshots.items() if sid not in needed and sid not in kept and s.timestamp_ms < since]
    return out


def table_summaries(settings: Settings) -> list[dict]:
    """One row per table in the namespace, read from Iceberg metadata through pyiceberg."""
    catalog = catalog_for(settings)
    if not catalog.namespace_exists(settings.namespace):
        return []
    rows = []
    for identifier in sorted(catalog.list_tables(settings.namespace)):
        table = catalog.load_table(identifier)
        snapshot = table.current_snapshot()
        summary: Mapping[str, str] = snapshot.summary if snapshot and snapshot.summary is not None else {}
        rows.append({
            "table": ".".join(identifier),
            "snapshot_id": snapshot.snapshot_id if snapshot else None,
            "committed_at": (
                from_ms(snapshot.timestamp_ms).isoformat()
                if snapshot else None
            ),
            # count() uses file statistics and applies delete files when there are any.
            "rows": table.scan().count() if snapshot else 0,
            "data_files": int(summary.get("total-data-files", 0) or 0),
            "delete_files": int(summary.get("total-delete-files", 0) or 0),
            "total_bytes": int(summary.get("total-files-size", 0) or 0),
            "snapshots": len(table.metadata.snapshots),
            "partition_spec": str(table.spec()),
            "event_lag_s": freshness_state(table, identifier[-1]).as_dict()["event_lag_s"],
        })
    return rows
