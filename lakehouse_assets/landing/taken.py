"""What the ingest log says bronze has taken, read without Spark: each file's newest version (landing/versions.py).

Sensors and metrics ask on every tick or scrape; the log changes once per ingest run. An
index answers from its last read while the log's metadata pointer has not moved, so most
look-ups read one row of the catalog's database and nothing else.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from pyiceberg.expressions import And, BooleanExpression, EqualTo, In, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.table import Table

from ..project.model import INGEST_LOG
from ..runtime.catalog import catalog_for, metadata_pointer
from ..settings import Settings
from .versions import Taken, epoch_ms

_IDENTITY = ("source_file", "size", "modified", "etag", "sha256", "lines", "version", "change")


def newest_versions(rows: list[dict]) -> dict[str, Taken]:
    """Each file's newest version among ingest log rows (a row without a version counts as version 0)."""
    newest: dict[str, Taken] = {}
    for row in rows:
        version = row.get("version") or 0
        if row["source_file"] not in newest or version >= newest[row["source_file"]].version:
            newest[row["source_file"]] = Taken(version, row.get("size"), epoch_ms(row.get("modified")),
                                               row.get("sha256"), row.get("lines"), row.get("etag"))
    return newest


def newest_in_log(table: Table, source: str, days: Iterable[dt.date] | None = None,
                  snapshot_id: int | None = None) -> dict[str, Taken]:
    """The newest ingest log row of each file of `source` (of those landing `days`, or all), in `table` (the log)
    as it is now or at `snapshot_id`. The log is partitioned by landing day: a day's look-up reads that day."""
    row_filter: BooleanExpression = EqualTo(term=Reference("source"), value=literal(source))
    if days is not None:
        row_filter = And(row_filter, In("landing_date", {d.isoformat() for d in days}))  # type: ignore[arg-type, call-arg]
    names = {f.name for f in table.schema().fields}
    rows = table.scan(row_filter=row_filter, selected_fields=tuple(c for c in _IDENTITY if c in names),
                      snapshot_id=snapshot_id).to_arrow().to_pylist()
    return newest_versions(rows)


class TakenIndex:
    """The newest ingest log row of each file of a source (of some landing days, or all), cached by the log's
    metadata location."""

    MAX_ENTRIES = 256

    def __init__(self) -> None:
        self._answers: dict[tuple, tuple[str, dict[str, Taken]]] = {}

    def clear(self) -> None:
        self._answers.clear()

    def taken(self, settings: Settings, source: str, days: Iterable[dt.date] | None = None) -> dict[str, Taken]:
        catalog = catalog_for(settings)
        location = metadata_pointer(catalog, settings.namespace, INGEST_LOG)
        if location is None:
            return {}
        key = (settings.catalog.display, settings.namespace, source, None if days is None else frozenset(days))
        cached = self._answers.get(key)
        if cached is not None and cached[0] == location:
            return cached[1]
        table = catalog.load_table((settings.namespace, INGEST_LOG))
        newest = newest_in_log(table, source, days)
        if len(self._answers) > self.MAX_ENTRIES:
            self._answers.clear()
        # Cached under the metadata actually read, which is newer than `location` if a commit came in between.
        self._answers[key] = (table.metadata_location, newest)
        return newest
