"""silver_<source>: clean behavioural events, one row per event key, personal data pseudonymised.

A day of silver holds the events whose event time falls on that day, whichever
landing day brought them. Duplicate deliveries keep the first one landed, across
days too: a key that silver already holds on another day within the source's
late days is not taken again (those days of silver are read, not all of it).
Events that break a declared rule (or, when the source declares a closed
vocabulary, have an unknown event type) go to silver_<source>_rejected with the
rule's name, so bronze (deduplicated) = silver + rejected, always; by default
nothing beyond structural validity (bronze's quarantine) is rejected.
Declared PII fields become keyed hashes (`<field>_hash`, HMAC-SHA256).

The write is audited before anyone sees it: staged on a branch, checked by the
Pandera model derived from the declaration (types, required fields, the key
unique and not null, declared value checks, hashes well formed, and the rows
reconciled with bronze), published to main only when it passes.
"""


import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetDep,
    AssetExecutionContext,
    AssetsDefinition,
    MaterializeResult,
    MetadataValue,
    PartitionsDefinition,
    asset,
    asset_check,
)
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import Window as W
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..automation.conditions import CHAIN_REFRESH, landing_days_of
from ..automation.partitions import SINGLE_RUN
from ..bronze.assets import event_bronze_spec
from ..checks.pandera_check import Audit, audit_and_publish, check_spec, raise_if_failed
from ..checks.rules import HASH_PATTERN, col_ref, count_matches, pandera_column, unique_key
from ..project import EventSource, parse_duration
from ..project.declaration import RuleDecl
from ..project.model import MAX_LATENESS, pseudonym
from ..runtime.commit import CommitResult, Window, retry_metadata, stage, with_commit_retries
from ..runtime.freshness import derived_watermarks, newest_event, newest_event_time
from ..runtime.pii import keyed_hash, pii_key, with_pii_pads
from ..runtime.resource import LakehouseResource
from ..tables.registry import COPY_ON_WRITE, TableSpec, col
from ..times import EPOCH, UTC

if TYPE_CHECKING:  # pandera is imported where a check is built (about a second)
    import pandera.pyspark as pa

UNKNOWN_EVENT_TYPE = "unknown_event_type"


def silver_spec(source: EventSource) -> TableSpec:
    # Read far more than written (dashboards, features): copy-on-write keeps reads free of delete files.
    return TableSpec(
        name=source.silver,
        layer="silver",
        description=f"{source.description} Clean: one row per {source.key}, personal data pseudonymised.",
        schema=T.StructType([
            *(col(pseudonym(name), T.StringType(), comment=f"HMAC-SHA256 of {name}") if name in source.pii
              else col(name, dtype, name not in source.required) for name, dtype in source.fields.items()),
            col("source_file", T.StringType(), False, "landing file of the delivery kept"),
            col("source_line", T.IntegerType(), False),
            col("ingested_at", T.TimestampType(), False),
        ]),
        partitioned_by=(f"days({source.timestamp})",),
        write_mode=COPY_ON_WRITE,
        renamed=source.silver_renamed(),
    )


def rejected_spec(source: EventSource) -> TableSpec:
    fields = source.fields
    return TableSpec(
        name=source.rejected,
        layer="silver",
        description=f"Events of {source.bronze} that {source.silver} does not take, with the rule they break.",
        schema=T.StructType([
            col(source.key, fields[source.key], False),
            col(source.timestamp, T.TimestampType(), False),
            col("rule", T.StringType(), False, "name of the first rule the event breaks"),
            *([col(source.event_type, fields[source.event_type])] if source.event_type else []),
            col("source_file", T.StringType(), False),
            col("source_line", T.IntegerType(), False),
        ]),
        partitioned_by=(f"days({source.timestamp})",),
        renamed={new: old for new, old in source.renamed.items() if new in (source.key, source.timestamp,
                                                                            source.event_type)},
    )


def _broken(rule: RuleDecl) -> Column:
    value = col_ref(rule.field)
    # A map's value is text: read as a number for `below`/`above` and as a timestamp for `later_than_ingestion_by`,
    # null where it is not one (a comparison would cast it, and under ANSI mode fail the run on the first text that
    # does not cast). The declaration's other comparisons are with values of the field's own type (project/load.py).
    in_map = "." in rule.field
    number = value.try_cast("double") if in_map else value
    if rule.matches is not None:
        broken = value.rlike(rule.matches)
    elif rule.in_ is not None:
        broken = value.isin(*rule.in_)
    elif rule.not_in is not None:
        broken = value.isNotNull() & ~value.isin(*rule.not_in)
    elif rule.below is not None:
        broken = number < F.lit(rule.below)
    elif rule.above is not None:
        broken = number > F.lit(rule.above)
    elif rule.missing is not None:
        broken = value.isNull() if rule.missing else value.isNotNull()
    else:
        seconds = int(parse_duration(rule.later_than_ingestion_by or "0s").total_seconds())
        time = value.try_cast("timestamp") if in_map else value
        broken = time > F.col("ingested_at") + F.expr(f"INTERVAL {seconds} SECONDS")
    for field, expected in rule.when.items():
        broken = broken & (col_ref(field) == F.lit(expected))
    return F.coalesce(broken, F.lit(False))


def rules(source: EventSource) -> dict[str, Column]:
    """The rules an event is judged by, in order: the first one it breaks rejects it."""
    judged: dict[str, Column] = {}
    if source.event_types is not None and source.event_type is not None:
        judged[UNKNOWN_EVENT_TYPE] = F.coalesce(~F.col(source.event_type).isin(*source.event_types), F.lit(True))
    if source.max_lateness is not None:
        # Measured from the landing day, not the clock: a replayed archive is judged as when it landed.
        seconds = int(source.max_lateness.total_seconds())
        judged[MAX_LATENESS] = F.coalesce(F.col(source.timestamp) < F.col("landing_date").cast("timestamp")
                                          - F.expr(f"INTERVAL {seconds} SECONDS"), F.lit(False))
    for rule in source.rules:
        judged[rule.name] = _broken(rule)
    return judged


def first_broken_rule(source: EventSource) -> Column:
    rule = F.lit(None).cast("string")
    for name, broken in reversed(rules(source).items()):
        rule = F.when(broken, F.lit(name)).otherwise(rule)
    return rule


def silver_model(source: EventSource, spec: TableSpec, reconciled: Any = None) -> "pa.DataFrameSchema":
    """What every silver row must satisfy, from the declaration; `reconciled` adds the layer count check."""
    import pandera.pyspark as pa

    columns = {}
    for f in spec.schema.fields:
        if f.name in source.pseudonyms:
            columns[f.name] = pandera_column(f.dataType, True, None, pa.Check.str_matches(HASH_PATTERN))
        elif f.name in source.fields:
            columns[f.name] = pandera_column(f.dataType, f.nullable, source.checks.get(f.name))
    checks = [unique_key([source.key])]
    if reconciled is not None:
        checks.append(reconciled)
    return pa.DataFrameSchema(columns, name=spec.name, checks=checks)


def near_window(source: EventSource, start: dt.datetime, end: dt.datetime) -> Window:
    """Event times within the source's `late_days` of [start, end): where another delivery of a key is looked for.

    Redeliveries repeat their event time or land within the late days the source declares, so
    deduplication reads these days of silver (partition-pruned), not the whole table; a write decided
    on them conflicts only with writes to these days (its publish scope).
    """
    slack = dt.timedelta(days=source.late_days)
    return Window(source.timestamp, start - slack, end + slack, "")


def near(source: EventSource, start: dt.datetime, end: dt.datetime) -> Column:
    return near_window(source, start, end).condition


def first_delivery(delivered: DataFrame, key: str) -> DataFrame:
    """One row per key: the delivery landed first."""
    first_landed = W.partitionBy(key).orderBy("ingested_at", "source_file", "source_line")
    return delivered.withColumn("_n", F.row_number().over(first_landed)).where("_n = 1").drop("_n")


def split(lakehouse: LakehouseResource, source: EventSource, judged: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(silver rows, rejected rows) of events judged by `first_broken_rule` (column `rule`)."""
    hashes = source.pseudonyms
    clean = judged.where(F.col("rule").isNull())
    if hashes:
        clean = with_pii_pads(clean, pii_key(lakehouse.settings))
    clean = clean.select(*(
        keyed_hash(F.col(hashes[f.name])).alias(f.name) if f.name in hashes else F.col(f.name)
        for f in silver_spec(source).schema.fields
    ))
    return clean, judged.where(F.col("rule").isNotNull()).select(*rejected_spec(source).column_names)


@dataclass
class StreamedEvents:
    """What one micro-batch added to silver and its rejected table."""

    silver: CommitResult | None
    rejected: CommitResult | None
    checks: list[AssetCheckResult]
    retries: int = 0

    @property
    def published(self) -> bool:
        return self.silver is not None


def take_new_events(lakehouse: LakehouseResource, source: EventSource, delivered: DataFrame, run_id: str,
                    label: str, properties: dict[str, str], log: Callable[[str], None] = print) -> StreamedEvents:
    """The stream's incremental silver: append the events of `delivered` (bronze rows) whose key neither silver
    nor its rejected table holds yet, judged by the same rules and audited by the same model as the daily
    asset, both tables published together; nothing is published when a check fails."""
    spec = silver_spec(source)
    key = source.key
    silver, rejected = lakehouse.table(spec).create(), lakehouse.table(rejected_spec(source)).create()
    bronze = lakehouse.table(event_bronze_spec(source))

    # Where silver and rejected may hold these keys already: the batch's event days, widened by the late days.
    bounds = delivered.agg(F.min(F.to_date(source.timestamp)), F.max(F.to_date(source.timestamp))).first()
    first_day, last_day = (bounds[0], bounds[1]) if bounds is not None else (None, None)
    scope = None if first_day is None or last_day is None else near_window(
        source, dt.datetime.combine(first_day, dt.time(), UTC),
        dt.datetime.combine(last_day + dt.timedelta(days=1), dt.time(), UTC))
    # Every read of the tables below keeps to these days (partition-pruned): a batch's cost does not grow with the
    # tables.
    days = F.lit(False) if scope is None else scope.condition

    def attempt() -> StreamedEvents:
        # The batch's keys that silver or rejected already hold. The batch's keys are broadcast to every task that
        # reads those days, so the tables' keys are filtered where they are read instead of shuffled for a join.
        batch_keys = delivered.select(key).distinct().cache()  # also what the reconciliation counts
        held = (silver.read().where(days).select(key).unionByName(rejected.read().where(days).select(key))
                .join(F.broadcast(batch_keys), key, "left_semi"))
        judged = first_delivery(delivered, key).join(held, key, "left_anti").withColumn(
            "rule", first_broken_rule(source)).cache()
        try:
            clean, rejects = split(lakehouse, source, judged)
            staged = stage(silver, run_id, spec.name, label, prefix="audit", scope=scope)
            staged.properties.update(properties)
            seen = Observation("newest_event")  # computed while the rows are written, not by a separate pass
            staged.append(clean.observe(seen, F.unix_micros(newest_event(source.timestamp)).alias("newest")))
            observed = seen.get  # microseconds since the epoch (an observation hands back Java values)
            # Empty when Spark skipped the write (no rows); then the newest event time is computed from the rows.
            newest = (newest_event_time(clean, source.timestamp) if observed.get("newest") is None else
                      EPOCH + dt.timedelta(microseconds=observed["newest"]))
            # The watermarks go on an empty commit on top of the branch, made when it is published.
            staged.with_watermarks(newest, derived_watermarks(bronze.iceberg())[1]).stamp_on_top()
            staged_rejects = stage(rejected, run_id, spec.name, label, scope=scope)
            staged_rejects.properties.update(properties)
            # Most batches reject nothing: no append (a Spark job and a commit), only the empty commit when published.
            if rejects.isEmpty():
                staged_rejects.stamp_on_top()
            else:
                staged_rejects.append(rejects)

            def delivered_keys() -> int:
                return batch_keys.count()

            def accounted() -> int:  # rows for these keys in both tables once published: one per key
                return (staged.read().where(days).select(key)
                        .unionAll(staged_rejects.read().where(days | F.col(source.timestamp).isNull()).select(key))
                        .join(F.broadcast(batch_keys), key, "left_semi").count())

            model = silver_model(source, spec, count_matches("bronze_keys_equal_silver_plus_rejected",
                                                             delivered_keys, accounted))
            # The model checks only the rows this append wrote; that no key is held twice within the days is checked
            # by the count of `accounted`.
            commits, checks = audit_and_publish([
                Audit(staged, [(spec.name, "pandera_schema", model, staged.added())]),
                Audit(staged_rejects),
            ])
            if not commits:
                staged_rejects.discard()
                return StreamedEvents(None, None, checks)
            return StreamedEvents(commits[0], commits[1], checks)
        finally:
            judged.unpersist()
            batch_keys.unpersist()

    result, retries = with_commit_retries(attempt, spec.name, log)
    result.retries = retries
    return result


def silver_events_asset(source: EventSource, bronze: TableSpec, partitions: PartitionsDefinition) -> AssetsDefinition:
    spec, rejected_table = silver_spec(source), rejected_spec(source)
    key, ts = source.key, source.timestamp

    @asset(
        name=spec.name,
        description=spec.description,
        group_name="silver",
        kinds={"spark", "iceberg"},
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        deps=[AssetDep(bronze.name, partition_mapping=landing_days_of(source.late_days))],
        automation_condition=CHAIN_REFRESH,
        check_specs=[check_spec(spec.name)],
    )
    def _asset(context: AssetExecutionContext, lakehouse: LakehouseResource):
        def attempt():
            silver, rejected_handle = lakehouse.table(spec).create(), lakehouse.table(rejected_table)
            window = Window.of_days(ts, *context.partition_time_window)
            bronze_table = lakehouse.table(bronze)
            # Read at one snapshot: the audit's reconciliation must count what the write was decided on,
            # not what another writer committed to bronze meanwhile.
            bronze_window = bronze_table.read_current(reader=spec.name).where(window.condition)
            deduped = first_delivery(bronze_window, key)
            # A key silver holds on another day (within the late days) came first: it is not taken twice.
            elsewhere = silver.read().where(near(source, window.start, window.end) & ~window.condition).select(key)
            fresh = deduped.join(elsewhere, key, "left_anti")
            judged = fresh.withColumn("rule", first_broken_rule(source)).cache()
            try:
                clean, rejects = split(lakehouse, source, judged)

                scope = near_window(source, window.start, window.end)  # what deduplication read
                staged = (stage(silver, context.run_id, spec.name, window.label, prefix="audit", scope=scope)
                          .derived_from(bronze_table, window_end=window.end).overwrite(clean, window))
                staged_rejects = stage(rejected_handle, context.run_id, spec.name, window.label,
                                                       scope=scope).overwrite(rejects, window)

                def bronze_keys() -> int:
                    return bronze_window.select(key).distinct().count()

                def accounted() -> int:
                    held_elsewhere = bronze_window.select(key).distinct().join(
                        elsewhere.distinct(), key, "left_semi").count()
                    return (staged.read().where(window.condition).count()
                            + staged_rejects.read().where(window.condition).count() + held_elsewhere)

                model = silver_model(source, spec, count_matches("bronze_keys_equal_silver_plus_rejected",
                                                                 bronze_keys, accounted))
                commits, checks = audit_and_publish([
                    Audit(staged, [(spec.name, "pandera_schema", model, staged.read().where(window.condition))]),
                    Audit(staged_rejects),
                ])
                if not commits:
                    staged_rejects.discard()
                    return commits, checks, {}, 0
                by_rule = {r.rule: r["count"] for r in rejects.groupBy("rule").count().collect()}
                duplicates = bronze_window.count() - deduped.count()
            finally:
                judged.unpersist()
            return commits, checks, by_rule, duplicates

        (commits, checks, by_rule, duplicates), retries = with_commit_retries(attempt, spec.name, context.log.info)
        if not commits:
            yield from checks
            raise_if_failed(checks)
        yield MaterializeResult(
            metadata={
                **commits[0].metadata(),
                "duplicates_dropped": MetadataValue.int(duplicates),
                "rejected": MetadataValue.int(commits[1].added_records),
                "rejected_by_rule": MetadataValue.json(by_rule),
                **retry_metadata(retries),
            },
            check_results=checks,
        )

    return _asset


UNDECIDED = "undecided_bronze_keys"


def undecided_keys_check(source: EventSource) -> AssetChecksDefinition:
    """Every key that landed must end up decided: in silver, or rejected with a rule. A warning counts the
    bronze keys in neither, per event day (read with DuckDB from the tables' current snapshots, no Spark):
    they belong to days still to run, or to days no silver partition covers (before the first partition, in
    the future)."""
    key, ts = source.key, source.timestamp

    @asset_check(asset=source.silver, name=UNDECIDED, blocking=False,
                 description=f"keys of {source.bronze} in neither {source.silver} nor {source.rejected}")
    def _check(lakehouse: LakehouseResource) -> AssetCheckResult:
        from ..serving.duckdb_sql import query

        catalog, namespace = lakehouse.catalog, lakehouse.settings.namespace
        decided = [f"NOT EXISTS (SELECT 1 FROM {t} d WHERE d.{key} = b.{key})"
                   for t in (source.silver, source.rejected) if catalog.table_exists((namespace, t))]
        rows = [] if not catalog.table_exists((namespace, source.bronze)) else query(lakehouse.settings, (
            f"SELECT CAST(b.{ts} AS DATE) AS day, count(DISTINCT b.{key}) AS keys FROM {source.bronze} b "
            f"{'WHERE ' + ' AND '.join(decided) if decided else ''} GROUP BY 1 ORDER BY 1"),
            raw=True).to_pylist()  # the platform's own check reads bronze, which analysts' SQL does not show
        undecided = sum(r["keys"] for r in rows)
        return AssetCheckResult(
            passed=undecided == 0, severity=AssetCheckSeverity.WARN,
            metadata={"undecided_keys": MetadataValue.int(undecided),
                      "undecided_by_day": MetadataValue.json({str(r["day"]): r["keys"] for r in rows[:31]})},
        )

    return _check
