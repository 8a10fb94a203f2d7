"""Gold tables declared as Spark SQL over other tables, recomputed whole on every run.

A declaration names the tables the query reads (`reads:`), its columns and
partitioning; the query sees each read table under its own name (a temporary
view of its current snapshot), and its result replaces the table in one commit.
Suited to aggregates over current state, where any row may change (an order's
status changes days after it was placed).
"""


from dagster import AssetExecutionContext, AssetsDefinition, MaterializeResult, asset
from pyspark.sql import types as T

from ..automation.conditions import BI_REFRESH_WHOLE
from ..automation.partitions import SINGLE_RUN
from ..project import SqlTable
from ..runtime.commit import materialize_with_retries, publish, stage
from ..runtime.resource import LakehouseResource
from ..tables.registry import TableSpec, col
from ..tables.types import spark_type
from .bi import freshness_policy


def sql_table_spec(table: SqlTable) -> TableSpec:
    return TableSpec(
        name=table.name, layer="gold", description=table.description,
        schema=T.StructType([col(c, spark_type(t)) for c, t in table.columns.items()]),
        partitioned_by=table.partitioned_by,
    )


def sql_table_asset(table: SqlTable, tables: dict[str, TableSpec]) -> AssetsDefinition:
    spec = sql_table_spec(table)

    @asset(
        name=table.name, description=table.description, group_name="gold", kinds={"spark", "iceberg"},
        deps=list(table.reads), automation_condition=BI_REFRESH_WHOLE,
        backfill_policy=SINGLE_RUN,  # so that it can run inside a single-run range backfill of its parents
        freshness_policy=freshness_policy(table.freshness) if table.freshness else None,
    )
    def _asset(context: AssetExecutionContext, lakehouse: LakehouseResource) -> MaterializeResult:
        def attempt() -> MaterializeResult:
            for name in table.reads:
                lakehouse.table(tables[name]).read(reader=table.name).createOrReplaceTempView(name)
            try:
                result_df = lakehouse.spark.sql(table.sql)
                staged = stage(lakehouse.table(spec), context.run_id, table.name, "all")
                staged.derived_from(*(lakehouse.table(tables[name]) for name in table.reads))
                result = publish(staged.replace_all(result_df))
            finally:
                for name in table.reads:
                    lakehouse.spark.catalog.dropTempView(name)
            return MaterializeResult(metadata=result.metadata())

        return materialize_with_retries(attempt, table.name, context.log.info)

    return _asset
