"""Exactly-once ingestion of landing files into a bronze table and its quarantine.

A file is taken once, whatever happens: retried runs, a crash half way, a sensor
firing twice. The record of what was taken lives in the tables themselves: every
row carries its `source_file`, and each write appends only rows of files that
the table's main branch does not hold yet, published atomically on top of the
snapshot that was checked (see `append_staged`). The ingest log, written last,
only spares re-reading files already fully taken; correctness never rests on it.
"""

import datetime as dt
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    PartitionsDefinition,
    multi_asset,
)
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import BalanceError
from ..partitions import SINGLE_RUN
from ..project.model import INGEST_LOG as INGEST_LOG_NAME
from ..runtime.commit import (
    EVERYTHING,
    CommitResult,
    StagedWrite,
    Window,
    current_state,
    publish_all,
    retry_metadata,
    stage,
    with_commit_retries,
)
from ..runtime.files import modification_times
from ..runtime.freshness import from_spark, newest_event
from ..runtime.resource import LakehouseResource
from ..runtime.results import reported
from ..sources.landing import day_folders, landing_date_of, landing_date_value, list_landing_files, of_files, read_landing
from ..sources.zones import source_root
from ..tables.handle import TableHandle
from ..tables.registry import TableSpec, col
from ..times import UTC

INGEST_LOG = TableSpec(
    name=INGEST_LOG_NAME,
    layer="bronze",
    description="One row per landing file taken: how many records it had, kept and quarantined.",
    schema=T.StructType([
        col("source", T.StringType(), False, "landing source, e.g. events or cdc/customers"),
        col("source_file", T.StringType(), False),
        col("landing_date", T.DateType()),
        col("records", T.LongType(), False),
        col("kept", T.LongType(), False),
        col("quarantined", T.LongType(), False),
        col("ingested_at", T.TimestampType(), False),
        col("run_id", T.StringType(), False),
    ]),
    # A look-up of some landing days' files (the sensors', each tick) reads only their manifests.
    partitioned_by=("landing_date",),
)


MAX_NEW_COLUMNS = 32  # per run: a flood of new keys is more likely garbage than schema
EVENT_DAYS = "event_days"  # bronze materialisation metadata: the event days its commit added rows to


@dataclass(frozen=True)
class LandingSource:
    """A kind of landing file and where its records go.

    parse(lines, table_schema, **hints): the table's columns (less the stamp columns),
    the lineage columns and `reason` (null for a good record).
    survey(lines, table_schema, files): a look before parsing, giving (column path, type) pairs the
    table lacks for fields it can tell from the files' first lines (added before parsing) and the
    hints parse takes (what it need not find per record).
    new_keys(table_schema, **hints): a column of each line's keys the table lacks, gathered while
    bronze is written; when any are found, they become columns (`new_columns(lines, table_schema,
    keys, **hints)` gives their paths and types and any new hints; string columns of the keys'
    names by default) and bronze is written again (once per new field, ever).
    """

    name: str  # the landing folder, e.g. events or cdc/customers
    bronze: TableSpec
    quarantine: TableSpec
    parse: Callable[..., DataFrame]
    survey: Callable[[DataFrame, T.StructType, list[str]], tuple[list[tuple[str, str]], dict[str, Any]]] | None = None
    new_keys: Callable[..., Column] | None = None
    new_columns: Callable[..., tuple[list[tuple[str, str]], dict[str, Any]]] | None = None
    event_time: str | None = None  # the bronze column whose newest value is the table's event-time watermark


@dataclass
class IngestReport:
    files_listed: int
    files_read: int = 0
    records_in: int = 0
    kept: CommitResult | None = None
    quarantined: CommitResult | None = None
    new_columns: list[str] = field(default_factory=list)
    retries: int = 0
    newest_landed_at: dt.datetime | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # wall time by stage, where the run spent it

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - started

    def metadata(self, commit: CommitResult | None) -> dict[str, Any]:
        counts: dict[str, Any] = {
            "landing_files_listed": MetadataValue.int(self.files_listed),
            "landing_files_taken": MetadataValue.int(self.files_read),
            "records_in": MetadataValue.int(self.records_in),
            "records_kept": MetadataValue.int(self.kept.added_records if self.kept else 0),
            "records_quarantined": MetadataValue.int(self.quarantined.added_records if self.quarantined else 0),
        }
        counts.update(retry_metadata(self.retries))
        if self.new_columns:
            counts["new_columns"] = MetadataValue.text(", ".join(self.new_columns))
        if self.seconds:
            counts["seconds_by_stage"] = MetadataValue.json({k: round(v, 3) for k, v in self.seconds.items()})
        return {**(commit.metadata() if commit else {}), **counts}


def stage_new_files(table: TableHandle, df: DataFrame | None, files: list[str], run_id: str, asset: str, label: str,
                    scope: Window, properties: dict[str, str] | None = None,
                    watermarks: tuple[dt.datetime | None, dt.datetime | None] = (None, None)) -> StagedWrite:
    """Stage the rows of `df` whose source_file the table's main branch does not hold yet. `scope`: the landing
    days of `files`, the only rows that decision read. `watermarks`: the newest event time and landing time of
    these rows (runtime/freshness.py). `df` None: no rows to add, the branch gets the stamped commit only."""
    base = table.create().snapshot_id()
    # Bronze takes new fields as they come (schema drift): its writes may evolve the table.
    staged = stage(table, run_id, asset, label, base, evolve=True, scope=scope).with_watermarks(*watermarks)
    staged.properties.update(properties or {})
    if df is None:
        staged.stamped = False  # stamped when published (runtime/publish.py: publish_all)
        return staged
    rows = df
    if base is not None:
        taken = [
            r.source_file for r in table.read(snapshot_id=base)
            .where(of_files(files)).select("source_file").distinct().collect()
        ]
        if taken:
            rows = df.where(~F.col("source_file").isin(taken))
    return staged.append(rows, fanout=True)


def _conform(df: DataFrame, schema: T.StructType) -> DataFrame:
    """Columns in the table's order and types (Iceberg appends match by position)."""
    return df.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields))


def ingest(
    lakehouse: LakehouseResource, source: LandingSource, files: list[str], run_id: str, label: str,
    log: Callable[[str], None] = print, properties: dict[str, str] | None = None,
) -> IngestReport:
    """Take the landing `files` not taken yet; `properties` go into the summary of every snapshot published."""
    spark = lakehouse.spark
    report = IngestReport(files_listed=len(files))
    timed = report.timed
    ingest_log, bronze, quarantine = (lakehouse.table(s).create()
                                      for s in (INGEST_LOG, source.bronze, source.quarantine))
    with timed("files already taken"):
        done = {
            r.source_file for r in ingest_log.read()
            .where((F.col("source") == source.name) & of_files(files))
            .select("source_file").distinct().collect()
        } if files else set()
    todo = [f for f in files if f not in done]
    report.files_read = len(todo)
    log(f"{source.name} {label}: {len(files)} landing files, {len(done)} already taken, {len(todo)} to read")
    if not todo:
        report.kept = current_state(bronze)
        report.quarantined = current_state(quarantine)
        return report

    with timed("read files"):
        lines, unreadable, line_counts = read_landing(spark, todo)
    for f, why in unreadable.items():
        log(f"{source.name}: {f}: {why}: quarantined whole")
    # One time for every row of the run, whichever pass writes it.
    stamps = {"ingested_at": F.lit(dt.datetime.now(UTC)), "run_id": F.lit(run_id)}
    # An unreadable file is one record, quarantined with the reason (its raw bytes stay in the landing zone).
    unread = spark.createDataFrame([(f, why) for f, why in unreadable.items()], "source_file string, reason string")
    unread = unread.select("source_file", "reason", F.lit(0).alias("source_line"), F.lit("").alias("payload"),
                           landing_date_of(F.col("source_file")).alias("landing_date")).withColumns(stamps)
    records = {**line_counts, **dict.fromkeys(unreadable, 1)}  # records in, per file
    hints: dict[str, Any] = {}
    if source.survey:
        with timed("new fields"):
            added, hints = source.survey(lines, bronze.schema(), todo)
            if added:
                _add_columns(report, bronze, added, log)

    landed = max(modification_times(spark, todo).values())
    report.newest_landed_at = dt.datetime.fromtimestamp(landed, UTC)
    # Whether a file was taken is decided on the rows of its landing day: writes of other days never conflict.
    days = [landing_date_value(f) for f in todo]
    scope: Any = EVERYTHING if None in days else Window(
        "landing_date", min(days), max(days) + dt.timedelta(days=1), label)  # type: ignore[type-var,operator]

    def judged() -> DataFrame:
        parsed = source.parse(lines, bronze.schema(), **hints).withColumns(stamps)
        # The filters on `reason` stay above the parse: pushed down through its projections, each step would
        # inline the expressions below it into the condition, which then grows with every layer (on CDC images
        # it exhausted the heap) and computes the parse twice. Spark pushes no filter below a non-deterministic
        # column.
        return parsed.withColumn("reason", F.when(F.spark_partition_id() >= 0, F.col("reason")))

    def stage_bronze() -> StagedWrite:
        """Bronze staged straight from the parse (one pass over clean data); with `new_keys`, the keys the table
        lacks are gathered in that pass, and once they are columns, bronze is written again with them."""
        parsed, keys = judged(), None
        if source.new_keys is not None:
            keys = Observation("new_keys")
            found = F.array_distinct(F.flatten(F.collect_set(source.new_keys(bronze.schema(), **hints))))
            parsed = parsed.observe(keys, F.concat_ws(",", found).alias("keys"))
        write = stage_new_files(bronze, _conform(parsed.where(F.col("reason").isNull()), bronze.schema()), todo,
                                run_id, source.bronze.name, label, scope, properties)
        new = sorted(filter(None, (keys.get["keys"] or "").split(","))) if keys is not None else []
        if not new:
            return write
        write.discard()
        added, more = ([(name, "string") for name in new[:MAX_NEW_COLUMNS]], {}) if source.new_columns is None else \
            source.new_columns(lines, bronze.schema(), new, **hints)
        hints.update(more)
        _add_columns(report, bronze, added, log)
        return stage_new_files(bronze, _conform(judged().where(F.col("reason").isNull()), bronze.schema()), todo,
                               run_id, source.bronze.name, label, scope, properties)

    def attempt() -> list[CommitResult]:
        # Each table takes what its main does not hold yet; the three publish together or not at all,
        # and only once records in = kept + quarantined, file by file, on what was staged.
        staged: list[StagedWrite] = []
        try:
            with timed("parse, judge and write bronze"):
                staged.append(stage_bronze())
            with timed("count kept"):
                kept, newest_event = _held(staged[0], todo, source.event_time)
            bad = unread if unreadable else None  # None: every line was kept, the quarantine adds nothing
            if sum(kept.values()) < sum(line_counts.values()):
                bad = judged().where(F.col("reason").isNotNull()).unionByName(unread, allowMissingColumns=True)
            with timed("write quarantine"):
                staged.append(stage_new_files(
                    quarantine, None if bad is None else
                    _conform(bad.withColumn("source", F.lit(source.name)), quarantine.schema()),
                    todo, run_id, source.quarantine.name, label, scope, properties,
                    (None, report.newest_landed_at)))
            with timed("records in = kept + quarantined"):
                quarantined, _ = _held(staged[1], todo)
                per_file = _verify_balance(source, records, kept, quarantined)
            # The event-time watermark is known once bronze is written: an empty commit on top carries it.
            staged[0].with_watermarks(newest_event, report.newest_landed_at)
            staged[0].stamped = False
            # An empty file has no record to decide: it is not logged, and is looked at again next time.
            log_rows = [(source.name, f, landing_date_value(f), n, k, q, run_id)
                        for f, (n, k, q) in per_file.items() if n]
            log_df = spark.createDataFrame(
                log_rows, "source string, source_file string, landing_date date, records long, kept long, "
                          "quarantined long, run_id string").withColumn("ingested_at", stamps["ingested_at"])
            staged.append(stage_new_files(ingest_log, _conform(log_df, INGEST_LOG.schema), todo, run_id,
                                          INGEST_LOG.name, label, scope, properties))
        except Exception:
            for write in staged:
                write.discard(quietly=True)
            raise
        with timed("publish"):
            return publish_all(staged)

    published, report.retries = with_commit_retries(attempt, source.bronze.name, log)
    report.kept, report.quarantined = published[0], published[1]
    report.records_in = sum(records.values())
    return report


def _add_columns(report: IngestReport, bronze: TableHandle, added: list[tuple[str, str]],
                 log: Callable[[str], None]) -> None:
    bronze.add_columns(added)
    report.new_columns += [name for name, _ in added]
    log(f"{bronze.name}: new fields in the data became columns: {[name for name, _ in added]}")


def _held(write: StagedWrite, files: list[str], event_time: str | None = None) -> tuple[dict[str, int], Any]:
    """Rows per file that the staged branch holds for `files` (one scan of its lineage columns), and the
    newest `event_time` among them that is not in the future (runtime/freshness.py: newest_event)."""
    figures = [F.count(F.lit(1)).alias("n")]
    if event_time:
        figures.append(newest_event(event_time).alias("newest"))
    counts = write.read().where(of_files(files)).groupBy("source_file").agg(*figures).collect()
    newest = max((r.newest for r in counts if r.newest is not None), default=None) if event_time else None
    return {r.source_file: r.n for r in counts}, from_spark(newest)


def _verify_balance(source: LandingSource, records: dict[str, int], kept: dict[str, int],
                    quarantined: dict[str, int]) -> dict[str, tuple[int, int, int]]:
    """Records in = rows kept + rows quarantined, file by file, as the staged branches hold them:
    {file: (records, kept, quarantined)}."""
    per_file = {f: (n, kept.get(f, 0), quarantined.get(f, 0)) for f, n in records.items()}
    wrong = {f: c for f, c in per_file.items() if c[0] != c[1] + c[2]}
    stray = sorted((set(kept) | set(quarantined)) - set(records))
    if wrong or stray:
        f, (n, k, q) = next(iter(wrong.items())) if wrong else (stray[0], (0, kept.get(stray[0], 0), 0))
        raise BalanceError(
            f"{source.bronze.name}: {len(wrong) + len(stray)} of the {len(records)} files read would not balance, "
            f"e.g. {f}: {n} records, but bronze would hold {k} rows and the quarantine {q}; records would be "
            "lost or duplicated, so nothing was published"
        )
    return per_file


def quarantine_spec(name: str, description: str) -> TableSpec:
    """Quarantine tables share one shape: the raw line, where it came from, and why it was refused."""
    return TableSpec(
        name=name,
        layer="bronze",
        description=description,
        schema=T.StructType([
            col("source", T.StringType(), False, "landing source"),
            col("reason", T.StringType(), False, "why the line was not taken"),
            *lineage_columns(),
        ]),
        partitioned_by=("landing_date",),
    )


def lineage_columns() -> list[T.StructField]:
    return [
        col("payload", T.StringType(), False, "the line exactly as it landed"),
        col("source_file", T.StringType(), False, "landing file the line was read from"),
        col("source_line", T.IntegerType(), False, "1-based line number in source_file"),
        col("landing_date", T.DateType(), False, "day folder the file landed in"),
        col("ingested_at", T.TimestampType(), False),
        col("run_id", T.StringType(), False, "Dagster run that ingested the line"),
    ]


def landing_asset(source: LandingSource, partitions: PartitionsDefinition,
                  deps: list[AssetKey] | None = None) -> AssetsDefinition:
    """The bronze asset of a landing source: its table and quarantine, partitioned by landing day
    (the `date=` folders whose files a run takes)."""
    bronze, quarantine = source.bronze.name, source.quarantine.name

    @multi_asset(
        name=bronze,
        specs=[
            AssetSpec(bronze, description=source.bronze.description, group_name="bronze",
                      kinds={"spark", "iceberg"}, deps=deps or []),
            AssetSpec(quarantine, description=source.quarantine.description, group_name="bronze",
                      kinds={"spark", "iceberg"}),
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        can_subset=True,  # both tables are written either way (runtime/results.py)
    )
    def _asset(context: AssetExecutionContext, lakehouse: LakehouseResource):
        start, end = context.partition_time_window
        window = Window.of_days("landing_date", start, end, as_date=True)
        files, refused = list_landing_files(
            lakehouse.spark, day_folders(lakehouse.settings.landing, source.name, window.start, window.end),
            source_root(lakehouse.settings, source.name))
        for path, why in refused.items():
            context.log.warning(f"{source.name}: not ingested: {path}: {why}")
        report = ingest(lakehouse, source, files, context.run_id, window.label, log=context.log.info)
        metadata = report.metadata(report.kept)
        if report.files_read and report.kept is not None and report.kept.snapshot_id is not None:
            # Which event days this commit holds rows of, however old: the days silver must decide again.
            days = lakehouse.table(source.bronze).days_added(report.kept.snapshot_id, report.kept.since)
            metadata[EVENT_DAYS] = MetadataValue.json([d.isoformat() for d in days])
        yield from reported(context, [MaterializeResult(asset_key=bronze, metadata=metadata),
                                      MaterializeResult(asset_key=quarantine, metadata=report.metadata(report.quarantined))])

    return _asset
