"""The landing zone's retention: a landed file is removed once it was taken `landing.retention` ago and has not
changed since (pyiceberg and the zone, no Spark).

Bronze keeps every line exactly as it landed (`payload`), so the zone is not the lake's copy of the raw data: a
file taken whole is only a second copy of personal data. A file is removed when the ingest log's newest take of it
is older than the retention, the file still has the size that take recorded, and it has not changed since (its
inode change time, an object's upload time: no copy tool sets these back). A file that grew, was rewritten or was
never taken stays. Reconcile counts the records of a removed file from the ingest log; a rollback of bronze that
would need a removed file to be taken again is refused (landing_rollback.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from pyiceberg.expressions import EqualTo, Reference
from pyiceberg.expressions.literals import literal

from ..landing.zones import landing_zone
from ..project import Project
from ..project.model import INGEST_LOG
from ..runtime.catalog import catalog_for
from ..settings import Settings
from ..times import UTC


def newest_takes(catalog: Any, namespace: str, source: str) -> dict[str, dict[str, Any]]:
    """Each file the ingest log lists for `source`: its newest take (size, when it was taken)."""
    identifier = (namespace, INGEST_LOG)
    if not catalog.table_exists(identifier):
        return {}
    rows = catalog.load_table(identifier).scan(
        row_filter=EqualTo(term=Reference("source"), value=literal(source)),
        selected_fields=("source_file", "size", "ingested_at", "version")).to_arrow().to_pylist()
    newest: dict[str, dict[str, Any]] = {}
    for row in rows:
        known = newest.get(row["source_file"])
        if known is None or (row["version"] or 0) >= (known["version"] or 0):
            newest[row["source_file"]] = row
    return newest


def remove_taken_files(settings: Settings, project: Project, now: dt.datetime | None = None,
                       log: Callable[[str], None] = print) -> dict[str, Any]:
    """Removes the landed files past the declared retention; returns what it removed and kept."""
    retention = project.landing.retention
    report: dict[str, Any] = {"retention": str(retention) if retention else None, "removed": [], "kept_changed": []}
    if retention is None:
        return report
    cutoff = (now or dt.datetime.now(UTC)) - retention
    catalog, zone = catalog_for(settings), landing_zone(settings)
    for source in project.landing_sources:
        takes = newest_takes(catalog, settings.namespace, source.landing)
        for f in zone.list(source.landing):
            take = takes.get(f.uri)
            if take is None:
                continue  # not taken yet: bronze does not hold it
            taken_at = take["ingested_at"].replace(tzinfo=UTC)
            if taken_at >= cutoff:
                continue
            if take["size"] != f.size or f.changed > taken_at.timestamp():
                report["kept_changed"].append(f.uri)  # changed since its take: the next run takes it again
                continue
            zone.remove(f.uri)
            report["removed"].append(f.uri)
    log(f"landing retention ({retention}): removed {len(report['removed'])} files taken before "
        f"{cutoff.isoformat(timespec='seconds')}")
    return report
