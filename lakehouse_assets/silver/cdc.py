"""silver_<table> (current state) and silver_<table>_history (SCD type 2) from CDC.

Changes are applied in the source's commit order (`change_position`), never in
arrival order or by `ts_ms`, and the result does not depend on the order in
which partitions are processed:

1. The run's changes (bronze rows of its days, duplicates dropped) and the
   history already held for the same keys are put in position order per key;
   each version is valid from its commit time until the next version's. The
   history is MERGEd with that, by (key, position): new versions are inserted,
   versions whose successor changed are closed or reopened.
2. The latest version per touched key is MERGEd into the current state: a delete
   removes the row, a newer change replaces it, an older one (a late or
   replayed change) is ignored. Deletes live on in history, so a stale update
   that arrives after a delete cannot bring the row back.
Re-applying the same days changes nothing. A primary-key change arrives as a
delete of the old key and a create of the new one, and is applied as such.

Both writes are staged on branches and published only if their Pandera checks
pass (write-audit-publish). Both tables are merge-on-read: CDC tables take many
small row-level changes, and merge-on-read writes delete files instead of
rewriting data files (figures in benchmarks/RESULTS.md).
"""

import uuid

import pandera.pyspark as pa
from dagster import AssetExecutionContext, AssetsDefinition, AssetSpec, MaterializeResult, MetadataValue, multi_asset
from pyspark.sql import DataFrame
from pyspark.sql import Window as W
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..checks.pandera_check import Audit, audit_and_publish, check_spec, raise_if_failed
from ..partitions import DAILY, SINGLE_RUN
from ..runtime.commit import Window, stage
from ..runtime.pii import keyed_hash, pii_key
from ..runtime.resource import LakehouseResource
from ..runtime.schema import conform
from ..sources.cdc import OPS, POSITION, spark_type
from ..sources.cdc_tables import CDC_TABLES, ORDER_STATUSES, CdcTableInfo
from ..tables.registry import MERGE_ON_READ, TableSpec, col, register

# Personal data in source tables: kept in silver only as a keyed hash.
PSEUDONYMISED = {"customers": ("email",)}

# Value rules per table, beyond types and keys.
VALUE_CHECKS = {
    "orders": {"status": [pa.Check.isin(list(ORDER_STATUSES))], "total": [pa.Check.ge(0)]},
    "order_items": {"quantity": [pa.Check.gt(0)], "unit_price": [pa.Check.ge(0)]},
}


def _silver_name(column: str, table: str) -> str:
    return f"{column}_hash" if column in PSEUDONYMISED.get(table, ()) else column


def _image_fields(info: CdcTableInfo) -> list[T.StructField]:
    return [
        col(_silver_name(c, info.name), T.StringType() if c in PSEUDONYMISED.get(info.name, ()) else spark_type(t),
            c not in info.primary_key, "HMAC-SHA256 of the source value" if c in PSEUDONYMISED.get(info.name, ()) else "")
        for c, t in info.columns.items()
    ]


def current_spec(info: CdcTableInfo) -> TableSpec:
    return register(TableSpec(
        name=f"silver_{info.name}",
        layer="silver",
        description=f"Current state of {info.topic}, kept by MERGE from its change events.",
        schema=T.StructType([
            *_image_fields(info),
            col("change_position", POSITION, False, "position of the change this row comes from"),
            col("last_op", T.StringType(), False),
            col("source_ts", T.TimestampType(), comment="commit time of that change"),
        ]),
        partitioned_by=(f"bucket(8, {info.primary_key[0]})",),
        write_mode=MERGE_ON_READ,
    ))


def history_spec(info: CdcTableInfo) -> TableSpec:
    return register(TableSpec(
        name=f"silver_{info.name}_history",
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
        partitioned_by=("bucket(8, key)",),
        write_mode=MERGE_ON_READ,
    ))


def current_model(info: CdcTableInfo) -> pa.DataFrameSchema:
    columns = {
        _silver_name(c, info.name): pa.Column(
            T.StringType() if c in PSEUDONYMISED.get(info.name, ()) else spark_type(t),
            nullable=c not in info.primary_key,
            checks=VALUE_CHECKS.get(info.name, {}).get(c, []),
        )
        for c, t in info.columns.items()
    }
    columns["last_op"] = pa.Column(T.StringType(), checks=[pa.Check.isin(["c", "u", "r"])])
    keys = list(info.primary_key)
    return pa.DataFrameSchema(
        columns, name=f"silver_{info.name}",
        checks=[pa.Check(lambda df: df.groupBy(*keys).count().where("count > 1").limit(1).count() == 0,
                         name="one_row_per_primary_key")],
    )


def history_model(info: CdcTableInfo) -> pa.DataFrameSchema:
    def one_current(df) -> bool:
        return df.where("is_current").groupBy("key").count().where("count > 1").limit(1).count() == 0

    def ordered(df) -> bool:
        return df.where("valid_to_position IS NOT NULL AND valid_to_position <= change_position").limit(1).count() == 0

    return pa.DataFrameSchema(
        {
            "key": pa.Column(T.StringType()),
            "op": pa.Column(T.StringType(), checks=[pa.Check.isin(list(OPS))]),
            "is_current": pa.Column(T.BooleanType()),
        },
        name=f"silver_{info.name}_history",
        checks=[pa.Check(one_current, name="one_current_version_per_key"),
                pa.Check(ordered, name="versions_in_position_order")],
    )


def changes(lakehouse: LakehouseResource, info: CdcTableInfo, window: Window) -> DataFrame:
    """The window's changes as versions: key, image columns, op, position, valid_from."""
    bronze = lakehouse.spark.table(lakehouse.ensure(f"bronze_cdc_{info.name}"))
    image_columns = [f.name for f in bronze.schema["after"].dataType.fields]
    rows = bronze.where(window.condition & F.col("op").isin(*OPS))
    once = W.partitionBy("change_position").orderBy("ingested_at", "source_file", "source_line")
    rows = rows.withColumn("_n", F.row_number().over(once)).where("_n = 1")
    image = F.when(F.col("op") == "d", F.col("before")).otherwise(F.col("after"))
    key = pii_key(lakehouse.settings)
    return rows.select(
        "key",
        *(keyed_hash(image[c], key).alias(_silver_name(c, info.name)) if c in PSEUDONYMISED.get(info.name, ())
          else image[c].alias(c) for c in image_columns),
        "op",
        "change_position",
        F.col("source_ts").alias("valid_from"),
    )


def _view(df: DataFrame) -> str:
    name = f"cdc_src_{uuid.uuid4().hex[:12]}"
    df.createOrReplaceTempView(name)
    return name


def silver_cdc_asset(info: CdcTableInfo) -> AssetsDefinition:
    current, history = current_spec(info), history_spec(info)
    models = {current.name: current_model(info), history.name: history_model(info)}
    pk_match = " AND ".join(f"t.`{k}` = s.`{k}`" for k in info.primary_key)

    @multi_asset(
        name=current.name,
        specs=[
            AssetSpec(current.name, description=current.description, group_name="silver",
                      kinds={"spark", "iceberg"}, deps=[f"bronze_cdc_{info.name}"]),
            AssetSpec(history.name, description=history.description, group_name="silver",
                      kinds={"spark", "iceberg"}, deps=[f"bronze_cdc_{info.name}"]),
        ],
        check_specs=[check_spec(current.name, models[current.name]), check_spec(history.name, models[history.name])],
        partitions_def=DAILY,
        backfill_policy=SINGLE_RUN,
    )
    def _asset(context: AssetExecutionContext, lakehouse: LakehouseResource):
        spark = lakehouse.spark
        window = Window.of_days("source_ts", *context.partition_time_window)
        history_id, current_id = lakehouse.ensure(history), lakehouse.ensure(current)
        batch = changes(lakehouse, info, window).cache()
        recomputed = None
        try:
            held = spark.table(history_id).join(batch.select("key").distinct(), "key", "left_semi")
            versions = held.select(*(c for c in batch.columns if c in held.columns)).unionByName(
                batch, allowMissingColumns=True)
            versions = versions.dropDuplicates(["key", "change_position"])
            order = W.partitionBy("key").orderBy("change_position")
            recomputed = conform(spark, history_id, versions
                                 .withColumn("valid_to", F.lead("valid_from").over(order))
                                 .withColumn("valid_to_position", F.lead("change_position").over(order))
                                 .withColumn("is_current", F.col("valid_to_position").isNull())).cache()

            staged_history = stage(lakehouse, history.name, context.run_id, history.name, window.label,
                                   prefix="audit").sql(f"""
                MERGE INTO {{target}} t USING {_view(recomputed)} s
                ON t.key = s.key AND t.change_position = s.change_position
                WHEN MATCHED AND NOT (t.valid_to_position <=> s.valid_to_position) THEN UPDATE SET
                    t.valid_to = s.valid_to, t.valid_to_position = s.valid_to_position, t.is_current = s.is_current
                WHEN NOT MATCHED THEN INSERT *""")

            latest = recomputed.where("is_current").select(
                *(F.col(f.name) for f in current.schema.fields if f.name not in ("last_op", "source_ts")),
                F.col("op").alias("last_op"), F.col("valid_from").alias("source_ts"),
            )
            latest = conform(spark, current_id, latest)
            staged_current = stage(lakehouse, current.name, context.run_id, current.name, window.label,
                                   prefix="audit").sql(f"""
                MERGE INTO {{target}} t USING {_view(latest)} s ON {pk_match}
                WHEN MATCHED AND s.last_op = 'd' THEN DELETE
                WHEN MATCHED AND s.change_position > t.change_position THEN UPDATE SET *
                WHEN NOT MATCHED AND s.last_op != 'd' THEN INSERT *""")

            touched_keys = batch.select("key").distinct()
            commits, checks = audit_and_publish([
                Audit(staged_history, [(history.name, "pandera_schema", models[history.name],
                                        staged_history.read().join(touched_keys, "key", "left_semi"))]),
                Audit(staged_current, [(current.name, "pandera_schema", models[current.name],
                                        staged_current.read().join(latest.select("change_position"),
                                                                   "change_position", "left_semi"))]),
            ])
            if not commits:
                yield from checks
                raise_if_failed(checks)
            applied = batch.count()
        finally:
            batch.unpersist()
            if recomputed is not None:
                recomputed.unpersist()
        counts = {"changes_in_window": MetadataValue.int(applied)}
        history_commit, current_commit = commits
        yield MaterializeResult(asset_key=history.name, metadata={**history_commit.metadata(), **counts},
                                check_results=[c for c in checks if c.asset_key.path == [history.name]])
        yield MaterializeResult(asset_key=current.name, metadata={**current_commit.metadata(), **counts},
                                check_results=[c for c in checks if c.asset_key.path == [current.name]])

    return _asset


silver_cdc_assets = [silver_cdc_asset(info) for info in CDC_TABLES.values()]
