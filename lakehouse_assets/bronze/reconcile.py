"""Reconciliation of the landing zone with bronze, without Spark: records in = kept + quarantined.

Per landing source and landing day, the records in the zone's files (lines, as bronze
reads them) are compared with the rows bronze kept and the rows it quarantined, read
from the two tables' `landing_date` column through pyiceberg. A file changed after it
was taken has landed more records than its current lines: the records the ingest log
holds of its versions before the change count as records in too, and so do those of
a file the log lists that has since been removed from the zone. Lines `lakehouse forget`
deleted from bronze or the quarantine are counted as forgotten (its ledger, `bronze_forgotten`):
records in = kept + quarantined + forgotten.

A source on a Kafka topic is reconciled per partition: the records in are those a read_committed consumer of its
own receives in the offset ranges the ingest log holds (another client than the Spark source bronze read them
with), or, for a range the topic's retention has since deleted, the records the log says it held.
"""

from __future__ import annotations

import gzip
from collections import Counter, defaultdict

import pyarrow.compute as pc
from pyiceberg.expressions import EqualTo, Reference
from pyiceberg.expressions.literals import literal

from ..landing.kafka import Broker, Range
from ..landing.versions import RESTARTS
from ..landing.zones import escapes, landing_day, landing_zone, source_root
from ..project import EventSource, Project
from ..project.model import FORGOTTEN, INGEST_LOG
from ..runtime.catalog import catalog_for
from ..settings import Settings


def landing_records(data: bytes, name: str) -> int:
    """Records in a landing file; a file that cannot be decompressed is one record (bronze quarantines it whole)."""
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, gzip.BadGzipFile):
            return 1
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _earlier_records(catalog, namespace: str, source: str, landed: set[str]) -> dict[str, int]:
    """Records the log holds of file versions no longer in the zone: the versions before a file's last change
    of content (RESTARTS), and every version of a file removed since it was taken."""
    identifier = (namespace, INGEST_LOG)
    if not catalog.table_exists(identifier):
        return {}
    table = catalog.load_table(identifier)
    fields = [f for f in ("source_file", "records", "change", "version") if f in {c.name for c in table.schema().fields}]
    rows = table.scan(row_filter=EqualTo(term=Reference("source"), value=literal(source)),
                      selected_fields=tuple(fields)).to_arrow().to_pylist()
    versions: dict[str, list[tuple[int, int, str | None]]] = defaultdict(list)
    for row in rows:
        versions[row["source_file"]].append((row.get("version") or 0, row["records"], row.get("change")))
    earlier = {}
    for uri, taken in versions.items():
        if uri not in landed:
            earlier[uri] = sum(records for _, records, _ in taken)
            continue
        restart = max((v for v, _, change in taken if change in RESTARTS), default=None)
        if restart is not None:
            earlier[uri] = sum(records for v, records, _ in taken if v < restart)
    return earlier


def forgotten_per_day(catalog, namespace: str, source: str) -> Counter:
    """Lines of the source that forget deleted, per landing day: each (table, file, line, run) counted once,
    even when a forget that was interrupted and run again recorded it twice."""
    identifier = (namespace, FORGOTTEN)
    if not catalog.table_exists(identifier):
        return Counter()
    rows = catalog.load_table(identifier).scan(
        row_filter=EqualTo(term=Reference("source"), value=literal(source)),
        selected_fields=("table_name", "source_file", "source_line", "run_id", "landing_date")).to_arrow().to_pylist()
    lines = {(r["table_name"], r["source_file"], r["source_line"], r["run_id"]): r["landing_date"] for r in rows}
    return Counter(day.isoformat() for day in lines.values())


def reconcile(settings: Settings, project: Project, source: str | None = None) -> list[dict]:
    """Per landing source and day (per partition for a Kafka topic): lines in the landing files vs rows kept in
    bronze + rows quarantined + lines forgotten."""
    if source is None:
        return [row for s in project.landing_sources for row in reconcile(settings, project, s.landing)]
    declared = project.landing_source(source)
    if isinstance(declared, EventSource) and declared.topic is not None:
        return _reconcile_topic(settings, declared, declared.topic)
    zone = landing_zone(settings)
    lines_in: Counter = Counter()
    root = source_root(settings, source)
    landed = set()
    for f in zone.list(source):
        if f.day is not None and not escapes(f.uri, root):  # bronze never reads a refused file: neither does this
            lines_in[f.day.isoformat()] += landing_records(zone.read(f.uri), f.uri)
            landed.add(f.uri)
    catalog = catalog_for(settings)
    for uri, records in _earlier_records(catalog, settings.namespace, source, landed).items():
        day = landing_day(uri)
        if day is not None:
            lines_in[day.isoformat()] += records

    def per_day(table: str) -> Counter:
        identifier = (settings.namespace, table)
        if not catalog.table_exists(identifier):
            return Counter()
        dates = catalog.load_table(identifier).scan(selected_fields=("landing_date",)).to_arrow()
        counts = pc.value_counts(dates["landing_date"].combine_chunks()).to_pylist()
        return Counter({c["values"].isoformat(): c["counts"] for c in counts})

    kept, quarantined = per_day(declared.bronze), per_day(declared.quarantine)
    forgotten = forgotten_per_day(catalog, settings.namespace, source)
    rows = []
    for day in sorted(set(lines_in) | set(kept) | set(quarantined) | set(forgotten)):
        rows.append({
            "source": source,
            "landing_date": day,
            "records_in": lines_in[day],
            "kept": kept[day],
            "quarantined": quarantined[day],
            "forgotten": forgotten[day],
            "balanced": lines_in[day] == kept[day] + quarantined[day] + forgotten[day],
        })
    return rows


def _reconcile_topic(settings: Settings, source: EventSource, topic: str) -> list[dict]:
    catalog = catalog_for(settings)
    log_id = (settings.namespace, INGEST_LOG)
    logged: dict[str, int] = {}
    if catalog.table_exists(log_id):
        for row in catalog.load_table(log_id).scan(row_filter=EqualTo(term=Reference("source"), value=literal(source.landing)),
                                                    selected_fields=("source_file", "records")).to_arrow().to_pylist():
            logged[row["source_file"]] = row["records"]
    ranges = [r for uri in logged if (r := Range.of(uri)) is not None and r.topic == topic]
    records_in: Counter = Counter()
    with Broker(settings) as broker:
        marks = broker.watermarks(topic)
        for partition in sorted({r.partition for r in ranges}):
            mine = [r for r in ranges if r.partition == partition]
            held = [r for r in mine if r.start >= marks.get(partition, (0, 0))[0]]
            counted = broker.count(topic, partition, held)
            for r in mine:  # a range retention has deleted (or recorded as a gap): as the log holds it
                records_in[partition] += counted[r.uri] if r.uri in counted else logged[r.uri]

    def per_partition(table: str) -> Counter:
        identifier = (settings.namespace, table)
        if not catalog.table_exists(identifier):
            return Counter()
        files = catalog.load_table(identifier).scan(selected_fields=("source_file",)).to_arrow()["source_file"]
        counts = pc.value_counts(files.combine_chunks()).to_pylist()
        out: Counter = Counter()
        for c in counts:
            r = Range.of(c["values"])
            if r is not None and r.topic == topic:
                out[r.partition] += c["counts"]
        return out

    kept, quarantined = per_partition(source.bronze), per_partition(source.quarantine)
    forgotten: Counter = Counter()  # forget's ledger counts by landing day, not by partition: none yet on topics
    return [{
        "source": source.landing, "landing_date": None, "topic": topic, "partition": p, "records_in": records_in[p],
        "kept": kept[p], "quarantined": quarantined[p], "forgotten": forgotten[p],
        "balanced": records_in[p] == kept[p] + quarantined[p] + forgotten[p],
    } for p in sorted(set(records_in) | set(kept) | set(quarantined))]
