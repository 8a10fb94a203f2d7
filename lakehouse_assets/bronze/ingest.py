"""Exactly-once ingestion of landing files into a bronze table and its quarantine.

A file is taken once, whatever happens: retried runs, a crash half way, a sensor
firing twice, a copy that kept old timestamps. The ingest log holds a row per file
version taken (its size, time, hash and lines); a run decides each file against the
log's newest row of it (landing/versions.py): new lines are taken, a changed file's
new content is quarantined, a file still being written waits. Bronze, its
quarantine and the log's rows are published together, in one transaction of the
catalog, on top of the snapshots the decisions were read at (runtime/publish.py):
a concurrent run that took the same file first makes this one decide again. Rows of
a file taken for the first time that the table already holds are left out as well.
"""

import datetime as dt
import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
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

from ..automation.partitions import SINGLE_RUN
from ..errors import BalanceError, ConcurrentCommitError
from ..landing.files import exists, file_statuses
from ..landing.reader import (
    day_folders,
    landing_date_of,
    landing_date_value,
    list_landing_files,
    of_files,
    read_contents,
    read_landing,
)
from ..landing.taken import newest_in_log
from ..landing.versions import (
    APPENDED,
    CHANGED,
    CHANGED_REASON,
    NEW,
    TOUCHED,
    WAIT,
    Content,
    Decision,
    Sightings,
    Stat,
    Taken,
    age_ms,
    ahead_of_clock,
    decide,
    needs_a_look,
    settled,
    within_grace,
)
from ..landing.zones import source_root
from ..project import LandingPolicy
from ..project.model import INGEST_LOG as INGEST_LOG_NAME
from ..runtime.commit import (
    CURRENT,
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
from ..runtime.freshness import from_spark, newest_event
from ..runtime.recipe import Recipes
from ..runtime.resource import LakehouseResource
from ..runtime.results import reported
from ..runtime.spark import local_frame
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
        # The file's identity as taken (landing/versions.py): how the next look tells a new or changed file.
        col("size", T.LongType(), True, "bytes of the file as taken"),
        col("modified", T.TimestampType(), True, "the file's modification time as taken"),
        col("etag", T.StringType(), True, "the object's ETag as taken (object stores)"),
        col("sha256", T.StringType(), True, "hash of the file's bytes as taken"),
        col("lines", T.LongType(), True, "the file's lines as taken; null when it could not be read"),
        col("change", T.StringType(), True, "new, appended, touched, changed or retaken (landing/versions.py)"),
        col("version", T.IntegerType(), True, "1 at the file's first take, one more at each take after it"),
    ]),
    # A look-up of some landing days' files (the sensors', each tick) reads only their manifests.
    partitioned_by=("landing_date",),
)


EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_NEW_COLUMNS = 32  # per run: a flood of new keys is more likely garbage than schema
EVENT_DAYS = "event_days"  # bronze materialisation metadata: the event days its commit added rows to
# Each source's parse, built once per table schema and hints in a process, applied to every later take's lines.
PARSES = Recipes()


@dataclass(frozen=True)
class LandingSource:
    """A kind of landing file and where its records go.

    parse(lines, table_schema, **hints): the table's columns (less the stamp columns),
    the lineage columns and `reason` (null for a good record).
    survey(lines, table_schema, heads): a look before parsing, giving (column path, type) pairs the
    table lacks for fields it can tell from the heads the read found (`read_head`; added before parsing)
    and the hints parse takes (what it need not find per record).
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
    policy: LandingPolicy = field(default_factory=LandingPolicy)  # when a landed file is complete enough to take
    read_json: T.StructType | None = None  # what the line reader parses each line into (landing/reader.py)
    read_head: str | None = None  # and the wrapped records' head it passes over
    topic: str | None = None  # a Kafka topic the records come from instead of landing files (bronze/topics.py)


@dataclass
class IngestReport:
    files_listed: int
    files_read: int = 0
    taken: list[str] = field(default_factory=list)  # the files read (the last attempt's)
    records_in: int = 0
    waiting: list[str] = field(default_factory=list)  # files left for a later run: not settled or not ready
    kept: CommitResult | None = None
    quarantined: CommitResult | None = None
    new_columns: list[str] = field(default_factory=list)
    retries: int = 0
    newest_landed_at: dt.datetime | None = None
    ahead_of_clock: int = 0  # files listed whose modification time is ahead of the clock
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
            "landing_files_waiting": MetadataValue.int(len(self.waiting)),
            "landing_files_ahead_of_clock": MetadataValue.int(self.ahead_of_clock),
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


def stage_new_files(table: TableHandle, df: DataFrame | None, fresh: list[str], run_id: str, asset: str, label: str,
                    scope: Window, properties: dict[str, str] | None = None,
                    watermarks: tuple[dt.datetime | None, dt.datetime | None] = (None, None),
                    base: Any = CURRENT) -> StagedWrite:
    """Stage the rows of `df`; when the table's main branch already holds rows of a `fresh` file (one taken for the
    first time), another run took it since the decisions were read, and the attempt is retried (ConcurrentCommitError).
    `scope`: the landing days of the run's files, the only rows its decisions read. `watermarks`: the newest event
    time and landing time of these rows (runtime/freshness.py). `df` None: no rows to add, the branch gets the
    stamped commit only. `base`: the snapshot the decisions were read at."""
    base = table.create().snapshot_id() if base is CURRENT else base
    if df is not None and base is not None and fresh:
        taken = sorted(
            r.source_file for r in table.read(snapshot_id=base)
            .where(of_files(fresh)).select("source_file").distinct().collect()
        )
        if taken:  # another writer took them after this run's decisions were read: decide again
            raise ConcurrentCommitError(
                f"{table.name}: {len(taken)} of the files this run decided to take were written by another run "
                f"since (e.g. {taken[0]}); deciding again on what the tables hold now")
    # Bronze takes new fields as they come (schema drift): its writes may evolve the table.
    staged = stage(table, run_id, asset, label, base, evolve=True, scope=scope).with_watermarks(*watermarks)
    staged.properties.update(properties or {})
    if df is None:
        return staged.stamp_on_top()
    return staged.append(df, fanout=True)


def _conform(df: DataFrame, schema: T.StructType) -> DataFrame:
    """Columns in the table's order and types (Iceberg appends match by position)."""
    return df.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields))


@dataclass
class Take:
    """What one attempt of an ingest run takes: each file's decision (landing/versions.py) and content as read."""

    log_base: int | None  # the ingest log's snapshot the decisions were read at
    history: dict[str, Taken]
    decisions: dict[str, Decision] = field(default_factory=dict)
    contents: dict[str, Content] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)  # not taken this time: being written, or not marked ready
    lines: DataFrame | None = None
    line_counts: dict[str, int] = field(default_factory=dict)
    heads: list[str] = field(default_factory=list)  # the wrapped records' heads the read found (read_landing)
    unreadable: dict[str, str] = field(default_factory=dict)
    ahead_of_clock: int = 0  # files listed whose modification time is ahead of this machine's clock
    seen_ms: dict[str, float] = field(default_factory=dict)  # how long each file was seen as it is (Sightings)
    now: dt.datetime | None = None  # when the decisions were made

    @property
    def files(self) -> list[str]:
        """The files this take decides something of (the log gets a row for each)."""
        return sorted(self.decisions)

    @property
    def to_read(self) -> list[str]:
        return [f for f, d in sorted(self.decisions.items()) if d.change != TOUCHED and self.contents[f].stat.size]

    @property
    def changed(self) -> list[str]:
        return [f for f, d in self.decisions.items() if d.change == CHANGED]

    @property
    def fresh(self) -> list[str]:
        return [f for f, d in self.decisions.items() if d.change == NEW]

    def records(self) -> dict[str, int]:
        """Records in, per file: its lines (those after the taken ones for an append); an unreadable file is one."""
        out = {}
        for f, decision in self.decisions.items():
            if f in self.unreadable:
                out[f] = 1
            elif decision.change == TOUCHED:
                out[f] = 0
            else:
                out[f] = self.line_counts.get(f, 0) - decision.skip_lines
        return out

    def drop(self, files: set[str]) -> None:
        for f in files:
            self.decisions.pop(f, None)
            self.waiting.append(f)


def _history(ingest_log: TableHandle, source: str, files: list[str], base: int | None) -> dict[str, Taken]:
    """The log's newest row of each of `files`, read at snapshot `base`."""
    if base is None or not files:
        return {}
    days: set[dt.date | None] = {landing_date_value(f) for f in files}
    newest = newest_in_log(ingest_log.iceberg(), source, None if None in days else days,  # type: ignore[arg-type]
                           snapshot_id=base)
    return {f: newest[f] for f in files if f in newest}


def look(lakehouse: LakehouseResource, source: LandingSource, ingest_log: TableHandle, files: list[str],
         now: dt.datetime, sightings: Sightings | None = None, wait_until: float | None = None,
         log: Callable[[str], None] = print) -> Take:
    """Decide what to take of each file: those the log holds as they are now are skipped without a read; the
    others, once settled, are hashed and decided against the log's newest row (landing/versions.py). With
    `wait_until` (seconds since the epoch), files not settled yet are watched until they are, or until then."""
    spark, policy = lakehouse.spark, source.policy
    sightings = sightings if sightings is not None else Sightings()
    base = ingest_log.snapshot_id()
    take = Take(base, _history(ingest_log, source.name, files, base))
    statuses = file_statuses(spark, files)
    ready = _ready_folders(spark, statuses, policy.ready_marker)
    candidates: list[str] = []
    settling: list[str] = []
    for f, (size, modified_ms, etag) in statuses.items():
        stat = Stat(size, modified_ms, etag)
        take.ahead_of_clock += ahead_of_clock(stat, now)
        if not needs_a_look(stat, take.history.get(f)):
            continue
        marked = ready.get(f.rsplit("/", 1)[0], True)
        if settled(stat, now, policy, marked, sightings.see(f, stat, now.timestamp())):
            candidates.append(f)
        else:
            (settling if marked else take.waiting).append(f)
    if settling and wait_until is not None:
        candidates += _wait_to_settle(spark, source, settling, statuses, sightings, wait_until, log)
        now = dt.datetime.now(UTC)
        settling = [f for f in settling if f not in candidates]
    take.waiting += settling
    take.now = now
    prefixes = {f: t.size for f in candidates if (t := take.history.get(f)) is not None and t.size is not None}
    # Spark's file scans skip empty files: their content is known without a read.
    contents = {f: Content(Stat(0, statuses[f][1]), EMPTY_SHA256) for f in candidates if statuses[f][0] == 0}
    contents.update(read_contents(spark, [f for f in candidates if f not in contents], prefixes, statuses))
    for f, content in contents.items():
        content = replace(content, stat=replace(content.stat, etag=statuses[f][2]))  # Spark's read has no ETag
        take.seen_ms[f] = sightings.see(f, content.stat, now.timestamp())
        decision = decide(f, content, take.history.get(f), now, policy, take.seen_ms[f])
        if decision.change == WAIT:
            take.waiting.append(f)
        else:
            take.decisions[f], take.contents[f] = decision, content
    return take


def _wait_to_settle(spark: Any, source: LandingSource, files: list[str], statuses: dict[str, Any],
                    sightings: Sightings, wait_until: float, log: Callable[[str], None]) -> list[str]:
    """Watch `files` (not settled yet) until each has been unchanged for the settle time, or until `wait_until`;
    the ones that settled, their `statuses` as they are now."""
    settle_ms = source.policy.settle.total_seconds() * 1000
    log(f"{source.name}: {len(files)} files not settled yet: waiting for them, at most "
        f"{max(0.0, wait_until - time.time()):.0f} s")
    pending, done = list(files), []
    while pending and time.time() < wait_until:
        now = dt.datetime.now(UTC)
        soonest = min(settle_ms - age_ms(Stat(*statuses[f][:2]), now, sightings.see(
            f, Stat(*statuses[f][:2]), now.timestamp())) for f in pending) / 1000
        time.sleep(min(max(soonest, 0.2), max(wait_until - time.time(), 0.0)))
        now = dt.datetime.now(UTC)
        fresh = file_statuses(spark, pending)
        for f in list(pending):
            if f not in fresh:  # gone meanwhile
                pending.remove(f)
                continue
            statuses[f] = fresh[f]
            stat = Stat(*fresh[f][:2])
            if settled(stat, now, source.policy, True, sightings.see(f, stat, now.timestamp())):
                pending.remove(f)
                done.append(f)
    log(f"{source.name}: {len(done)} of them settled" + (f", {len(pending)} still changing: left for a later run"
                                                          if pending else ""))
    return done


def _ready_folders(spark: Any, statuses: dict[str, Any], marker: str | None) -> dict[str, bool]:
    """Whether each folder of the files holds the declared ready marker (every folder is ready without one)."""
    if marker is None:
        return {}
    return {folder: exists(spark, f"{folder}/{marker}") for folder in {f.rsplit("/", 1)[0] for f in statuses}}


def read_take(lakehouse: LakehouseResource, source: LandingSource, take: Take, now: dt.datetime,
              log: Callable[[str], None]) -> None:
    """Read the lines of the files the take decided to take; a file that changed while it was read, or that
    cannot be read yet because it is still being written, is left for the next run."""
    spark, policy = lakehouse.spark, source.policy
    todo = take.to_read
    landed, take.unreadable = read_landing(
        spark, todo, {f: take.contents[f].stat.size for f in todo}, source.read_json, source.read_head)
    lines, take.line_counts, take.heads = landed
    after = file_statuses(spark, todo)
    moved = {f for f in todo if after.get(f, (None, None))[:2] != (take.contents[f].stat.size,
                                                                     take.contents[f].stat.modified_ms)}
    young = {f for f in take.unreadable if within_grace(take.contents[f].stat, now, policy, take.seen_ms.get(f, 0.0))}
    for f in sorted(moved | young):
        log(f"{source.name}: {f}: {'changed while it was read' if f in moved else 'still being written'}: "
            "left for the next run")
    take.drop(moved | young)
    for f in moved | young:
        take.unreadable.pop(f, None)
    for f, decision in list(take.decisions.items()):
        short = decision.change == APPENDED and (f in take.unreadable or take.line_counts.get(f, 0) < decision.skip_lines)
        if short:  # not the taken lines followed by more after all
            take.decisions[f] = Decision(CHANGED)
    for f in take.unreadable:
        log(f"{source.name}: {f}: {take.unreadable[f]}: quarantined whole")
    skips = [(f, d.skip_lines) for f, d in take.decisions.items() if d.skip_lines]
    if skips:  # an append: only the lines after those taken before
        taken = local_frame(spark, skips, "source_file string, _skip int")
        lines = lines.join(F.broadcast(taken), "source_file", "left") \
            .where(F.col("source_line") > F.coalesce(F.col("_skip"), F.lit(0))).drop("_skip")
    kept = set(take.decisions)
    take.lines = lines.where(F.col("source_file").isin(sorted(kept))) if moved | young else lines


def ingest(
    lakehouse: LakehouseResource, source: LandingSource, files: list[str], run_id: str, label: str,
    log: Callable[[str], None] = print, properties: dict[str, str] | None = None, wait: bool = False,
    sightings: Sightings | None = None,
) -> IngestReport:
    """Take what the landing `files` hold that the ingest log does not; `properties` go into the summary of every
    snapshot published. With `wait`, files not settled yet are waited for (at most the settle time and the
    incomplete grace) rather than left for a later run; `sightings` carry what earlier looks saw of them."""
    report = IngestReport(files_listed=len(files))
    ingest_log, bronze, quarantine = (lakehouse.table(s).create()
                                      for s in (INGEST_LOG, source.bronze, source.quarantine))
    sightings = Sightings() if sightings is None else sightings
    policy = source.policy
    wait_until = time.time() + (policy.settle + policy.incomplete_grace).total_seconds() if wait else None

    def attempt() -> list[CommitResult] | None:
        with report.timed("files to take: identities and hashes"):
            take = look(lakehouse, source, ingest_log, files, dt.datetime.now(UTC), sightings, wait_until, log)
        now = take.now or dt.datetime.now(UTC)
        report.ahead_of_clock = take.ahead_of_clock
        log(f"{source.name} {label}: {len(files)} landing files, {len(take.decisions)} to take"
            f"{f', {len(take.waiting)} not settled yet' if take.waiting else ''}")
        if take.decisions:
            with report.timed("read files"):
                read_take(lakehouse, source, take, now, log)
        report.files_read, report.taken, report.waiting = len(take.decisions), sorted(take.decisions), sorted(take.waiting)
        report.records_in = sum(take.records().values())  # this attempt's (0 when it takes nothing), not an earlier's
        if not take.decisions:
            return None
        return _write(lakehouse, source, take, (ingest_log, bronze, quarantine), run_id, label, report, log,
                      properties)

    published, report.retries = with_commit_retries(attempt, source.bronze.name, log)
    if published is None:
        report.kept, report.quarantined = current_state(bronze), current_state(quarantine)
    else:
        report.kept, report.quarantined = published[0], published[1]
    return report


def _write(lakehouse: LakehouseResource, source: LandingSource, take: Take, tables: tuple[TableHandle, ...],
           run_id: str, label: str, report: IngestReport, log: Callable[[str], None],
           properties: dict[str, str] | None) -> list[CommitResult]:
    """Stage bronze, the quarantine and the ingest log's rows of the take, and publish the three together, only
    once records in = kept + quarantined, file by file, on what was staged."""
    spark = lakehouse.spark
    ingest_log, bronze, quarantine = tables
    todo = take.files
    assert take.lines is not None
    lines = take.lines
    # One time for every row of the run, whichever pass writes it.
    stamps = {"ingested_at": F.lit(dt.datetime.now(UTC)), "run_id": F.lit(run_id)}
    records = take.records()
    # An unreadable file is one record, quarantined with the reason (its raw bytes stay in the landing zone).
    unread = local_frame(
        spark, [(f, f"{CHANGED_REASON}; {why}" if take.decisions[f].change == CHANGED else why)
                for f, why in take.unreadable.items()], "source_file string, reason string")
    unread = unread.select("source_file", "reason", F.lit(0).alias("source_line"), F.lit("").alias("payload"),
                           landing_date_of(F.col("source_file")).alias("landing_date")).withColumns(stamps)
    hints: dict[str, Any] = {}
    if source.survey and take.to_read:
        with report.timed("new fields"):
            added, hints = source.survey(lines, bronze.schema(), take.heads)
            if added:
                _add_columns(report, bronze, added, log)
    landed = max(c.stat.modified_ms for f, c in take.contents.items() if f in take.decisions) / 1000
    report.newest_landed_at = dt.datetime.fromtimestamp(landed, UTC)
    # Whether a file was taken is decided on the rows of its landing day: writes of other days never conflict.
    days = [landing_date_value(f) for f in todo]
    scope: Any = EVERYTHING if None in days else Window(
        "landing_date", min(days), max(days) + dt.timedelta(days=1), label)  # type: ignore[type-var,operator]
    judge = _Judge(source, bronze, lines, hints, stamps, take.changed)
    staged: list[StagedWrite] = []
    try:
        with report.timed("parse, judge and write bronze"):
            staged.append(judge.stage_bronze(
                lambda df: stage_new_files(bronze, df, take.fresh, run_id, source.bronze.name, label, scope, properties),
                report, log))
        with report.timed("count kept"):
            kept, newest_event = _held(staged[0], todo, run_id, source.event_time)
        bad = unread if take.unreadable else None  # None: every line was kept, the quarantine adds nothing
        if sum(kept.values()) < sum(n for f, n in records.items() if f not in take.unreadable):
            bad = judge.judged().where(F.col("reason").isNotNull()).unionByName(unread, allowMissingColumns=True)
        with report.timed("write quarantine"):
            staged.append(stage_new_files(
                quarantine, None if bad is None else
                _conform(bad.withColumn("source", F.lit(source.name)), quarantine.schema()),
                take.fresh, run_id, source.quarantine.name, label, scope, properties,
                (None, report.newest_landed_at)))
        with report.timed("records in = kept + quarantined"):
            # Nothing bad: the quarantine's branch took a stamped commit only, no row of this run to count.
            quarantined = {} if bad is None else _held(staged[1], todo, run_id)[0]
            per_file = _verify_balance(source, records, kept, quarantined)
        # The event-time watermark is known once bronze is written: an empty commit on top carries it.
        staged[0].with_watermarks(newest_event, report.newest_landed_at).stamp_on_top()
        staged.append(stage_new_files(ingest_log, _conform(_log_rows(spark, source, take, per_file, run_id)
                                                           .withColumn("ingested_at", stamps["ingested_at"]),
                                                           INGEST_LOG.schema),
                                      take.fresh, run_id, INGEST_LOG.name, label, scope, properties,
                                      base=take.log_base))
    except Exception:
        for write in staged:
            write.discard(quietly=True)
        raise
    with report.timed("publish"):
        return publish_all(staged)


class _Judge:
    """Each line of a take parsed and judged (a reason, or none to keep it), and bronze staged from that."""

    def __init__(self, source: LandingSource, bronze: TableHandle, lines: DataFrame, hints: dict[str, Any],
                 stamps: dict[str, Column], changed: list[str]):
        self.source, self.bronze, self.lines, self.hints = source, bronze, lines, hints
        self.stamps, self.changed = stamps, changed

    def judged(self) -> DataFrame:
        """The parse, built once per table schema and hints in a process (`PARSES`) and replayed after: for
        bronze's write and the quarantine's alike."""
        schema, hints = self.bronze.schema(), self.hints
        parsed = PARSES.apply((self.source.parse, schema.json(), repr(sorted(hints.items()))),
                              lambda lines: self.source.parse(lines, schema, **hints), self.lines)
        parsed = parsed.withColumns(self.stamps)
        if self.changed:  # a file changed after it was taken: its new content is quarantined whole
            parsed = parsed.withColumn("reason", F.when(F.col("source_file").isin(self.changed),
                                                        F.lit(CHANGED_REASON)).otherwise(F.col("reason")))
        # The filters on `reason` stay above the parse: pushed down through its projections, each step would
        # inline the expressions below it into the condition, which then grows with every layer (on CDC images
        # it exhausted the heap) and computes the parse twice. Spark pushes no filter below a non-deterministic
        # column.
        return parsed.withColumn("reason", F.when(F.spark_partition_id() >= 0, F.col("reason")))

    def kept(self) -> DataFrame:
        return _conform(self.judged().where(F.col("reason").isNull()), self.bronze.schema())

    def stage_bronze(self, stage_rows: Callable[[DataFrame], StagedWrite], report: IngestReport,
                     log: Callable[[str], None]) -> StagedWrite:
        """Bronze staged straight from the parse (one pass over clean data); with `new_keys`, the keys the table
        lacks are gathered in that pass, and once they are columns, bronze is written again with them."""
        source, bronze = self.source, self.bronze
        if source.new_keys is None:
            return stage_rows(self.kept())
        keys = Observation("new_keys")
        found = F.array_distinct(F.flatten(F.collect_set(source.new_keys(bronze.schema(), **self.hints))))
        parsed = self.judged().observe(keys, F.concat_ws(",", found).alias("keys"))
        write = stage_rows(_conform(parsed.where(F.col("reason").isNull()), bronze.schema()))
        new = sorted(filter(None, (keys.get["keys"] or "").split(",")))
        if not new:
            return write
        write.discard()
        added, more = ([(name, "string") for name in new[:MAX_NEW_COLUMNS]], {}) if source.new_columns is None else \
            source.new_columns(self.lines, bronze.schema(), new, **self.hints)
        self.hints.update(more)
        _add_columns(report, bronze, added, log)
        return stage_rows(self.kept())


def _log_rows(spark: Any, source: LandingSource, take: Take, per_file: dict[str, tuple[int, int, int]],
              run_id: str) -> DataFrame:
    """One ingest log row per file decided: what it held, where it went, and its identity as taken."""
    rows = []
    for f, decision in sorted(take.decisions.items()):
        n, k, q = per_file.get(f, (0, 0, 0))
        content, before = take.contents[f], take.history.get(f)
        lines = None if f in take.unreadable else (
            take.line_counts.get(f, 0) if content.stat.size else 0) if decision.change != TOUCHED else \
            (before.lines if before is not None else None)
        modified = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=content.stat.modified_ms)
        rows.append((source.name, f, landing_date_value(f), n, k, q, run_id, content.stat.size, modified,
                     content.stat.etag, content.sha256, lines, decision.change,
                     (before.version if before is not None else 0) + 1))
    return local_frame(
        spark, rows, "source string, source_file string, landing_date date, records long, kept long, "
                     "quarantined long, run_id string, size long, modified timestamp, etag string, sha256 string, "
                     "lines long, change string, version int")


def _add_columns(report: IngestReport, bronze: TableHandle, added: list[tuple[str, str]],
                 log: Callable[[str], None]) -> None:
    bronze.add_columns(added)
    report.new_columns += [name for name, _ in added]
    log(f"{bronze.name}: new fields in the data became columns: {[name for name, _ in added]}")


def _held(write: StagedWrite, files: list[str], run_id: str, event_time: str | None = None) -> tuple[dict[str, int], Any]:
    """Rows per file that this run staged on the branch for `files` (one scan of its lineage columns), and the
    newest `event_time` among them that is not in the future (runtime/freshness.py: newest_event)."""
    figures = [F.count(F.lit(1)).alias("n")]
    if event_time:
        figures.append(newest_event(event_time).alias("newest"))
    counts = write.read().where(of_files(files) & (F.col("run_id") == run_id)) \
        .groupBy("source_file").agg(*figures).collect()
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


def quarantine_spec(name: str, description: str, records: bool = False) -> TableSpec:
    """Quarantine tables share one shape: the raw line, where it came from, and why it was refused (with
    `records`, a source on a Kafka topic: each record's key and time too)."""
    return TableSpec(
        name=name,
        layer="bronze",
        description=description,
        schema=T.StructType([
            col("source", T.StringType(), False, "landing source"),
            col("reason", T.StringType(), False, "why the line was not taken"),
            *lineage_columns(records),
        ]),
        partitioned_by=("landing_date",),
    )


def lineage_columns(records: bool = False) -> list[T.StructField]:
    """Where each row came from: its file and line; for a source on a Kafka topic (`records`), the file is the
    offset range `kafka://<topic>/<partition>/<start>-<end>`, the line the offset - start + 1, and the record's
    key and timestamp are kept too."""
    return [
        col("payload", T.StringType(), False, "the line exactly as it landed"),
        col("source_file", T.StringType(), False, "landing file the line was read from"),
        col("source_line", T.IntegerType(), False, "1-based line number in source_file"),
        col("landing_date", T.DateType(), False, "day folder the file landed in"),
        *([col("source_key", T.StringType(), True, "the Kafka record's key, as text (null: none)"),
           col("source_time", T.TimestampType(), True, "the Kafka record's timestamp")] if records else []),
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
        report = ingest(lakehouse, source, files, context.run_id, window.label, log=context.log.info, wait=True)
        metadata = report.metadata(report.kept)
        if report.files_read and report.kept is not None and report.kept.snapshot_id is not None:
            # Which event days this commit holds rows of, however old: the days silver must decide again.
            days = lakehouse.table(source.bronze).days_added(report.kept.snapshot_id, report.kept.since)
            metadata[EVENT_DAYS] = MetadataValue.json([d.isoformat() for d in days])
        yield from reported(context, [MaterializeResult(asset_key=bronze, metadata=metadata),
                                      MaterializeResult(asset_key=quarantine, metadata=report.metadata(report.quarantined))])

    return _asset
