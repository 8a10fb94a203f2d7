"""silver_<table> (current state) and silver_<table>_history (SCD type 2) from CDC.

Changes are applied in the source's commit order (`change_position`), never in
arrival order or by `ts_ms`, and the result does not depend on the order in
which partitions are processed. A partition is a landing day: a run applies
every change that landed on its days, however long before it was committed (a
capture stopped over a weekend, an archive replayed), so whatever lands reaches
silver:

1. The run's changes (bronze rows of its landing days, duplicates dropped) and
   the history already held for the same keys are put in position order per
   key; each version is valid from its commit time until the next version's. The
   history is MERGEd with that, by (key, position): new versions are inserted,
   versions whose successor changed are closed or reopened. A delete's version
   holds the key only: what a delete's `before` carries besides the key is, on
   a table with PostgreSQL's default replica identity, type defaults, not data.
2. The latest version per touched key is MERGEd into the current state: a delete
   removes the row, a newer change replaces it, an older one (a late or
   replayed change) is ignored. Deletes live on in history, so a stale update
   that arrives after a delete cannot bring the row back.
Re-applying the same days changes nothing, so a run reads of bronze only what
was appended since the last run of its days (the snapshot that run read is in
its commits' summary): a day's later runs cost what landed since, not the day
so far. The whole window is read again when bronze did more than append since
(a forget, a rollback). A primary-key change arrives as a
delete of the old key and a create of the new one at one position, and is
applied as such; an unchanged TOASTed value the create cannot send
(`__debezium_unavailable_value`) is the old key's.

Both writes are staged on branches and published only if their Pandera checks
pass (write-audit-publish): the primary key unique and not null, declared types
and value checks, one current version per key in history. Declared references
(`orders.customer_id -> customers.customer_id`) are checked after publishing,
as warnings: CDC delivers related tables independently. By default both tables
are merge-on-read: CDC tables take many small row-level changes, and
merge-on-read writes delete files instead of rewriting data files (figures in
benchmarks/RESULTS.md). Columns declared PII are kept only as keyed hashes.
A column added upstream (seen in bronze's images) is added to both tables.
"""

import json
import uuid
from typing import TYPE_CHECKING

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    PartitionsDefinition,
    multi_asset,
)
from pyiceberg.table.snapshots import ancestors_of
from pyspark.sql import Column, DataFrame
from pyspark.sql import Window as W
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..automation.conditions import CHAIN_REFRESH
from ..automation.partitions import SINGLE_RUN
from ..checks.pandera_check import Audit, audit_and_publish, check_spec, raise_if_failed
from ..checks.rules import HASH_PATTERN, key_rule, pandera_column, row_rule, unique_key
from ..project import CdcTable
from ..project.model import pseudonym
from ..runtime.commit import Window, retry_metadata, stage, with_commit_retries
from ..runtime.pii import keyed_hash, pii_key, with_pii_pads
from ..runtime.resource import LakehouseResource
from ..runtime.results import reported
from ..runtime.spark import local_frame
from ..runtime.staged import ASSET, PARTITIONS, READ_SNAPSHOTS, StagedWrite
from ..sources.change_records import OPS, POSITION
from ..sources.debezium_encodings import UNAVAILABLE
from ..tables.handle import TableHandle
from ..tables.registry import TableSpec, col
from ..tables.schema import conform
from ..tables.types import spark_type

if TYPE_CHECKING:  # pandera is imported where a check is built (about a second)
    import pandera.pyspark as pa


def _image_fields(info: CdcTable) -> list[T.StructField]:
    return [
        col(pseudonym(c), T.StringType(), True, "HMAC-SHA256 of the source value") if c in info.pii
        else col(c, spark_type(t), c not in info.primary_key)
        for c, t in info.columns.items()
    ]


def current_spec(info: CdcTable) -> TableSpec:
    return TableSpec(
        name=info.silver,
        layer="silver",
        description=info.description or f"Current state of {info.topic}, kept by MERGE from its change events.",
        schema=T.StructType([
            *_image_fields(info),
            col("change_position", POSITION, False, "position of the change this row comes from"),
            col("last_op", T.StringType(), False),
            col("source_ts", T.TimestampType(), comment="commit time of that change"),
        ]),
        partitioned_by=info.partition,
        write_mode=info.write_mode,
        renamed=info.silver_renamed(),
        takes_data_columns=True,
    )


def history_spec(info: CdcTable) -> TableSpec:
    return TableSpec(
        name=info.history,
        layer="silver",
        description=f"Every version of every row of {info.topic} (SCD type 2): valid_from <= t < valid_to.",
        schema=T.StructType([
            col("key", T.StringType(), False, "primary key as canonical JSON"),
            *_image_fields(info),
            col("op", T.StringType(), False, "the change that made this version (d: deleted from here on)"),
            col("change_position", POSITION, False),
            col("valid_from", T.TimestampType(), comment="commit time of this version"),
            col("valid_to", T.TimestampType(), comment="commit time of the next version; null while current"),
            col("valid_to_position", POSITION),
            col("is_current", T.BooleanType(), False),
        ]),
        # Current versions apart from closed ones: a run reads the current ones and only the closed ones that
        # end at or after its earliest change (files of versions closed before are skipped by their bounds).
        partitioned_by=("is_current", "bucket(8, key)"),
        write_mode=info.write_mode,
        renamed=info.silver_renamed(),
        takes_data_columns=True,
    )


def current_model(info: CdcTable) -> "pa.DataFrameSchema":
    import pandera.pyspark as pa  # here, not at the top: a process that runs no check never imports pandera

    columns = {
        info.silver_column(c): pandera_column(T.StringType(), True, None, pa.Check.str_matches(HASH_PATTERN))
        if c in info.pii else pandera_column(spark_type(t), c not in info.primary_key, info.checks.get(c))
        for c, t in info.columns.items()
    }
    columns["last_op"] = pa.Column(T.StringType(), checks=[pa.Check.isin(["c", "u", "r"])])
    return pa.DataFrameSchema(columns, name=info.silver,
                              checks=[unique_key(list(info.primary_key), "one_row_per_primary_key")])


def history_model(info: CdcTable) -> "pa.DataFrameSchema":
    import pandera.pyspark as pa

    return pa.DataFrameSchema(
        {
            "key": pa.Column(T.StringType()),
            "op": pa.Column(T.StringType(), checks=[pa.Check.isin(list(OPS))]),
            "is_current": pa.Column(T.BooleanType()),
        },
        name=info.history,
        checks=[key_rule(["key"], "one_current_version_per_key", where="is_current"),
                row_rule("valid_to_position IS NOT NULL AND valid_to_position <= change_position",
                         "versions_in_position_order")],
    )


def _applied_through(tables: tuple[TableHandle, ...], bronze: str, window: Window) -> int | None:
    """The bronze snapshot through which the window's changes are in silver: the one the newest of this asset's
    commits for the same window read, the same in both tables (history's and the current state's); None when
    there is no such commit or the two tables name different ones."""
    found = {_read_by_last_commit(handle, bronze, window.label) for handle in tables}
    return found.pop() if len(found) == 1 else None


def _read_by_last_commit(handle: TableHandle, upstream: str, label: str) -> int | None:
    """The snapshot of `upstream` that the newest commit of `handle`'s asset for the window `label` read."""
    table = handle.iceberg()
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if summary.get(ASSET) == handle.name and summary.get(PARTITIONS) == label:
            return json.loads(summary.get(READ_SNAPSHOTS, "{}")).get(upstream, [None])[0]
    return None


def changes(lakehouse: LakehouseResource, info: CdcTable, bronze: TableHandle, window: Window,
            applied_through: int | None = None) -> tuple[DataFrame, str]:
    """The changes that landed in the window as versions: key, image columns, op, position, valid_from; and
    what of bronze was read. With `applied_through` (the bronze snapshot through which the window is in silver),
    only what bronze's commits since then appended, when appends are all they made; else the whole window.
    Either gives the same silver: a change applied before is found in history and skipped."""
    rows = bronze.read_appended(applied_through, reader=info.silver) if applied_through is not None else None
    read = f"appended since bronze snapshot {applied_through}" if rows is not None else "the whole window"
    if rows is None:
        rows = bronze.read_current(reader=info.silver)
    after = rows.schema["after"].dataType
    assert isinstance(after, T.StructType)
    image_columns = [f.name for f in after.fields]
    rows = rows.where(window.condition & F.col("op").isin(*OPS))
    # A change is (key, position, op): a redelivery repeats all three; the rows of one snapshot share a position.
    once = W.partitionBy("key", "change_position", "op").orderBy("ingested_at", "source_file", "source_line")
    rows = rows.withColumn("_n", F.row_number().over(once)).where("_n = 1")
    image = F.when(F.col("op") == "d", F.col("before")).otherwise(F.col("after"))
    if info.pii:
        rows = with_pii_pads(rows, pii_key(lakehouse.settings))
    return rows.select(
        "key",
        *(F.when(image[c] == UNAVAILABLE, F.lit(UNAVAILABLE)).otherwise(keyed_hash(image[c]))
          .alias(info.silver_column(c)) if c in info.pii else image[c].alias(c) for c in image_columns),
        "op",
        "change_position",
        F.col("source_ts").alias("valid_from"),
    ), read


HELD, HELD_TO = "_held", "_held_to"  # a version history holds already, and its valid_to_position there
_CHANGE_COLUMNS = ("key", "op", "change_position", "valid_from", HELD, HELD_TO)  # the rest are image columns


def _placeholder(column: str) -> Column:
    return F.col(column).cast("string") == UNAVAILABLE


def _fill_by_row(versions: DataFrame, columns: list[str]) -> DataFrame:
    """A TOASTed value that did not change arrives as a placeholder: each version keeps the one its row had
    before it (the placeholder stays where the row has none yet). A row is its key's versions, continued
    across primary-key changes (column `_row`); a delete holds no values to keep."""
    upto = W.partitionBy("_row").orderBy("change_position").rowsBetween(W.unboundedPreceding, 0)
    deleted = F.col("op") == "d"
    return versions.withColumns({
        c: F.when(deleted, F.col(c)).otherwise(F.coalesce(
            F.last(F.when(_placeholder(c) | deleted, None).otherwise(F.struct(F.col(c).alias("v"))),
                   ignorenulls=True).over(upto),
            F.struct(F.col(c).alias("v")))["v"])
        for c in columns
    })


def _rows(versions: DataFrame, unavailable: Column) -> DataFrame:
    """`_row`: which source row a version belongs to. A primary-key change is a delete of the old key and a
    create of the new key at one position; the new key's versions from there to its next delete continue the
    old key's row, chains of key changes included. Worked out on the driver from the run's key changes whose
    create misses a value (few: key changes are rare, and most carry every value)."""
    creates = versions.where((F.col("op") == "c") & unavailable).select("change_position", F.col("key").alias("_to"))
    deletes = versions.where(F.col("op") == "d").select("change_position", F.col("key").alias("_from"))
    moves = creates.join(deletes, "change_position").where("_from != _to")
    single = moves.groupBy("change_position").count().where("count = 1")  # one delete, one create: unambiguous
    edges = sorted((r.change_position, r._from, r._to)
                   for r in moves.join(single, "change_position", "left_semi").collect())
    if not edges:
        return versions.withColumn("_row", F.col("key"))
    ends: dict[str, list] = {}
    moved_keys = local_frame(versions.sparkSession, [(to,) for _, _, to in edges], "key string")
    for r in deletes.join(moved_keys.withColumnRenamed("key", "_from"), "_from", "left_semi").collect():
        ends.setdefault(r._from, []).append(r.change_position)
    segments: list[tuple] = []  # (key, first position, last position or None, row)
    for position, old, new in edges:
        row = next((seg[3] for seg in segments if seg[0] == old and seg[1] <= position
                    and (seg[2] is None or position <= seg[2])), old)
        end = min((p for p in ends.get(new, []) if p > position), default=None)
        segments.append((new, position, end, row))
    spans = local_frame(
        versions.sparkSession, segments,
        T.StructType([T.StructField("_key", T.StringType()), T.StructField("_first", POSITION),
                      T.StructField("_last", POSITION), T.StructField("_span_row", T.StringType())]))
    within = ((F.col("key") == F.col("_key")) & (F.col("change_position") >= F.col("_first"))
              & (F.col("_last").isNull() | (F.col("change_position") <= F.col("_last"))))
    return (versions.join(F.broadcast(spans), within, "left")
            .withColumn("_row", F.coalesce("_span_row", "key")).drop("_key", "_first", "_last", "_span_row"))


def _resolve_unavailable(versions: DataFrame, history: DataFrame, columns: list[str]) -> DataFrame:
    """Every placeholder replaced by the value it stands for: the row's previous one, across primary-key
    changes (for a key change whose delete an earlier run applied, the old key's version history ended there);
    none left as text."""
    if not columns:
        return versions
    unavailable = F.greatest(*(_placeholder(c) for c in columns), F.lit(False))
    versions = versions.localCheckpoint()  # computed once, read by every step below
    if versions.where(unavailable).isEmpty():
        return versions
    versions = _fill_by_row(_rows(versions, unavailable), columns).localCheckpoint()
    pending = versions.where((F.col("op") == "c") & unavailable).select("change_position").distinct()
    if not pending.isEmpty():
        ended = F.broadcast(pending.select(F.col("change_position").alias("valid_to_position")))
        stored = history.where("op != 'd'").join(ended, "valid_to_position", "left_semi").select(
            F.col("valid_to_position").alias("change_position"), F.col("key").alias("_from"), *columns)
        single = stored.groupBy("change_position").count().where("count = 1")
        stored = stored.join(single, "change_position", "left_semi")
        taken = versions.alias("v").join(stored.alias("m"), "change_position", "left").select(
            *(F.when((F.col("v.op") == "c") & (F.col("m._from") != F.col("v.key")) & _placeholder(f"v.{c}"),
                     F.col(f"m.{c}")).otherwise(F.col(f"v.{c}")).alias(c) if c in columns
              else F.col(f"v.{c}" if c != "change_position" else c).alias(c) for c in versions.columns))
        versions = _fill_by_row(taken, columns)
    return versions.drop("_row").withColumns({c: F.when(_placeholder(c), None).otherwise(F.col(c)) for c in columns})


def _versions(info: CdcTable, batch: DataFrame, history: DataFrame) -> DataFrame:
    """The run's changes with the versions history holds that they can change, one row per (key, position),
    values resolved; a held version is marked (HELD) with where it ends in history (HELD_TO).

    Of a key's held versions, those that end before the key's first change in the run stay as they are: only
    the one the first change follows (whose end it moves) and those after it are taken."""
    first = batch.groupBy("key").agg(F.min("change_position").alias("_first"))
    held = history.join(first, "key").where(
        F.col("valid_to_position").isNull() | (F.col("valid_to_position") >= F.col("_first")))
    # Every column history holds (a held version whose end moves is written again whole).
    held = held.select(*(c for c in history.columns if c not in ("valid_to", "valid_to_position", "is_current")),
                       F.lit(True).alias(HELD), F.col("valid_to_position").alias(HELD_TO))
    new = batch.dropDuplicates(["key", "change_position"]).join(
        held.select("key", "change_position"), ["key", "change_position"], "left_anti")
    versions = held.unionByName(new.withColumn(HELD, F.lit(False)), allowMissingColumns=True)
    keys = {info.silver_column(k) for k in info.primary_key}
    image = [f for f in versions.schema.fields if f.name not in _CHANGE_COLUMNS and f.name not in keys]
    # Beside its key, a delete's image is not data (type defaults under the default replica identity).
    versions = versions.withColumns({f.name: F.when(F.col("op") == "d", F.lit(None).cast(f.dataType))
                                     .otherwise(F.col(f.name)) for f in image})
    return _resolve_unavailable(versions, history, [f.name for f in image if isinstance(
        f.dataType, (T.StringType, T.BinaryType))])


def _add_drifted_columns(batch: DataFrame, *tables: TableHandle) -> None:
    """Columns added upstream (new fields in bronze's images) are added to silver on purpose."""
    for table in tables:
        present = set(table.schema().fieldNames())
        new = [(f.name, f.dataType.simpleString()) for f in batch.schema.fields
               if f.name not in present and f.name not in _CHANGE_COLUMNS]
        if new:
            table.add_columns(new)


def _orphans(current: TableHandle, column: str, target: TableHandle, target_column: str) -> int:
    if not target.exists():
        return current.read().where(F.col(column).isNotNull()).count()
    wanted = current.read().where(F.col(column).isNotNull()).select(F.col(column).alias("_ref"))
    present = target.read().select(F.col(target_column).alias("_ref"))
    return wanted.join(present, "_ref", "left_anti").count()


def _view(df: DataFrame) -> str:
    name = f"cdc_src_{uuid.uuid4().hex[:12]}"
    df.createOrReplaceTempView(name)
    return name


def _reach(since) -> Column:
    """The held versions a run can change: those ending at or after its earliest change, or not at all."""
    return F.col("valid_to_position").isNull() | (F.col("valid_to_position") >= F.lit(since).cast(POSITION))


def _new_versions(info: CdcTable, batch: DataFrame, staged_history: StagedWrite, reach: Column) -> DataFrame:
    """The batch's versions with the held versions they change, each with its end recomputed."""
    versions = _versions(info, batch, staged_history.read().where(reach))
    order = W.partitionBy("key").orderBy("change_position")
    recomputed = (versions
                  .withColumn("valid_to", F.lead("valid_from").over(order))
                  .withColumn("valid_to_position", F.lead("change_position").over(order))
                  .withColumn("is_current", F.col("valid_to_position").isNull())).localCheckpoint()
    return recomputed


def _write_history(staged_history: StagedWrite, recomputed: DataFrame, since) -> None:
    """Held versions whose end moved are deleted and written again with it, beside the new versions: the delete
    reads history's keys and positions only (not whole rows, as an update in place would), and its source is
    small, so it is broadcast and history is not shuffled."""
    moved = F.col(HELD) & ~F.col(HELD_TO).eqNullSafe(F.col("valid_to_position"))
    if not recomputed.where(moved).isEmpty():
        staged_history.sql(f"""
        MERGE INTO {{target}} t USING {_view(recomputed.where(moved).select("key", "change_position"))} s
        ON t.key = s.key AND t.change_position = s.change_position
            AND (t.valid_to_position IS NULL OR t.valid_to_position >= {since})
        WHEN MATCHED THEN DELETE""")
    staged_history.append(conform(staged_history.table, recomputed.where(~F.col(HELD) | moved).drop(HELD, HELD_TO),
                                  evolve=False))


def apply_window(lakehouse: LakehouseResource, info: CdcTable, bronze: TableSpec, run_id: str,
                  window: Window) -> tuple[list, list[AssetCheckResult], int, str]:
    """One attempt at a window's changes: history and the current state staged on branches, audited and
    published together. Returns the two commits (history's, then current's; none when a check failed), the
    check results, the number of changes read and what of bronze was read."""
    current, history = current_spec(info), history_spec(info)
    history_table, current_table = lakehouse.table(history).create(), lakehouse.table(current).create()
    through = _applied_through((history_table, current_table), bronze.name, window)
    batch, read = changes(lakehouse, info, lakehouse.table(bronze), window, through)
    batch = batch.cache()
    try:
        _add_drifted_columns(batch, history_table, current_table)
        # History as the branch the run writes starts from: a run that commits in between is caught when this one
        # publishes (and it is then re-run), never read past.
        staged_history = stage(history_table, run_id, history.name, window.label, prefix="audit").derived_from(
            lakehouse.table(bronze), window_end=window.end)
        since = (batch.agg(F.min("change_position")).first() or [None])[0]
        reach = _reach(since)
        recomputed = _new_versions(info, batch, staged_history, reach)
        _write_history(staged_history, recomputed, since)

        latest = recomputed.where("is_current").select(
            *(F.col(f.name) for f in current_table.schema().fields if f.name not in ("last_op", "source_ts")),
            F.col("op").alias("last_op"), F.col("valid_from").alias("source_ts"),
        )
        latest = conform(current_table, latest, evolve=False)
        pk_match = " AND ".join(f"t.`{k}` = s.`{k}`" for k in info.primary_key)
        staged_current = stage(current_table, run_id, current.name, window.label, prefix="audit").derived_from(
            lakehouse.table(bronze), window_end=window.end).sql(f"""
            MERGE INTO {{target}} t USING {_view(latest)} s ON {pk_match}
            WHEN MATCHED AND s.last_op = 'd' THEN DELETE
            WHEN MATCHED AND s.change_position > t.change_position THEN UPDATE SET *
            WHEN NOT MATCHED AND s.last_op != 'd' THEN INSERT *""")

        touched_keys = batch.select("key").distinct()
        audited_history = (staged_history.read().where(reach)  # the columns the checks read
                           .select("key", "op", "is_current", "change_position", "valid_to_position")
                           .join(touched_keys, "key", "left_semi"))
        commits, checks = audit_and_publish([
            Audit(staged_history, [(history.name, "pandera_schema", history_model(info), audited_history)]),
            Audit(staged_current, [(current.name, "pandera_schema", current_model(info),
                                    staged_current.read().join(latest.select("change_position"),
                                                               "change_position", "left_semi"))]),
        ])
        applied = batch.count() if commits else 0
    finally:
        batch.unpersist()
    return commits, checks, applied, read


def _reference_checks(info: CdcTable) -> dict[str, AssetCheckSpec]:
    current = current_spec(info)
    return {
        column: AssetCheckSpec(
            name=f"references_{column}", asset=current.name, blocking=False,
            description=f"every {column} is a {target_table}.{target_column} in silver_{target_table} (a warning: "
                        "CDC delivers related tables independently)",
        )
        for column, (target_table, target_column) in info.references.items()
    }


def _reference_results(lakehouse: LakehouseResource, info: CdcTable,
                       referenced: dict[str, TableSpec]) -> list[AssetCheckResult]:
    """Rows of the current state whose reference names no row of the referenced table: a warning each."""
    current_table = lakehouse.table(current_spec(info))
    results = []
    for column, spec in _reference_checks(info).items():
        target_table, target_column = info.references[column]
        orphans = _orphans(current_table, column, lakehouse.table(referenced[target_table]), target_column)
        results.append(AssetCheckResult(
            asset_key=spec.asset_key, check_name=spec.name, passed=orphans == 0, severity=AssetCheckSeverity.WARN,
            metadata={"rows_without_referenced_row": MetadataValue.int(orphans)},
        ))
    return results


def silver_cdc_asset(info: CdcTable, bronze: TableSpec, partitions: PartitionsDefinition,
                     referenced: dict[str, TableSpec]) -> AssetsDefinition:
    """History and current state of one CDC table, written together by one run per landing window.
    `referenced`: the current-state specs of the tables `info` declares references to."""
    current, history = current_spec(info), history_spec(info)
    # A partition is a landing day, bronze's own; referenced tables are applied first, so that a run sees their rows.
    from_bronze = AssetDep(bronze.name)
    upstream = [from_bronze, *(AssetDep(name) for name in sorted({s.name for s in referenced.values()} - {current.name}))]

    @multi_asset(
        name=current.name,
        specs=[
            AssetSpec(current.name, description=current.description, group_name="silver",
                      kinds={"spark", "iceberg"}, deps=upstream, automation_condition=CHAIN_REFRESH),
            AssetSpec(history.name, description=history.description, group_name="silver",
                      kinds={"spark", "iceberg"}, deps=[from_bronze], automation_condition=CHAIN_REFRESH),
        ],
        check_specs=[check_spec(current.name), check_spec(history.name),
                     *_reference_checks(info).values()],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        can_subset=True,  # both tables are written either way (runtime/results.py)
    )
    def _asset(context: AssetExecutionContext, lakehouse: LakehouseResource):
        start, end = context.partition_time_window
        window = Window.of_days("landing_date", start, end, as_date=True)
        (commits, checks, applied, read), retries = with_commit_retries(
            lambda: apply_window(lakehouse, info, bronze, context.run_id, window), current.name, context.log.info)
        if not commits:
            yield from reported(context, checks)
            raise_if_failed(checks)
        checks += _reference_results(lakehouse, info, referenced)
        counts = {"changes_read": MetadataValue.int(applied), "bronze_read": MetadataValue.text(read),
                  **retry_metadata(retries)}
        history_commit, current_commit = commits
        yield from reported(context, [
            MaterializeResult(asset_key=history.name, metadata={**history_commit.metadata(), **counts},
                              check_results=[c for c in checks if c.asset_key == AssetKey(history.name)]),
            MaterializeResult(asset_key=current.name, metadata={**current_commit.metadata(), **counts},
                              check_results=[c for c in checks if c.asset_key == AssetKey(current.name)]),
        ])

    return _asset
