"""Reconciliation of the landing zone with bronze, without Spark: records in = kept + quarantined.

Per landing source and landing day, the records in the zone's files (lines, as bronze
reads them) are compared with the rows bronze kept and the rows it quarantined, read
from the two tables' `landing_date` column through pyiceberg.
"""

from __future__ import annotations

import gzip
from collections import Counter

import pyarrow.compute as pc

from ..project import Project
from ..runtime.catalog import catalog_for
from ..settings import Settings
from ..sources.zones import escapes, landing_zone, source_root


def landing_records(data: bytes, name: str) -> int:
    """Records in a landing file; a file that cannot be decompressed is one record (bronze quarantines it whole)."""
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, gzip.BadGzipFile):
            return 1
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def reconcile(settings: Settings, project: Project, source: str | None = None) -> list[dict]:
    """Per landing source and day: lines in the landing files vs rows kept in bronze + rows quarantined."""
    if source is None:
        return [row for s in project.landing_sources for row in reconcile(settings, project, s.landing)]
    declared = project.landing_source(source)
    zone = landing_zone(settings)
    lines_in: Counter = Counter()
    root = source_root(settings, source)
    for f in zone.list(source):
        if f.day is not None and not escapes(f.uri, root):  # a refused file is never read, here neither
            lines_in[f.day.isoformat()] += landing_records(zone.read(f.uri), f.uri)
    catalog = catalog_for(settings)

    def per_day(table: str) -> Counter:
        identifier = (settings.namespace, table)
        if not catalog.table_exists(identifier):
            return Counter()
        dates = catalog.load_table(identifier).scan(selected_fields=("landing_date",)).to_arrow()
        counts = pc.value_counts(dates["landing_date"].combine_chunks()).to_pylist()
        return Counter({c["values"].isoformat(): c["counts"] for c in counts})

    kept, quarantined = per_day(declared.bronze), per_day(declared.quarantine)
    rows = []
    for day in sorted(set(lines_in) | set(kept) | set(quarantined)):
        rows.append({
            "source": source,
            "landing_date": day,
            "records_in": lines_in[day],
            "kept": kept[day],
            "quarantined": quarantined[day],
            "balanced": lines_in[day] == kept[day] + quarantined[day],
        })
    return rows
