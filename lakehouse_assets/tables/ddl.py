"""Creating declared tables idempotently (every later change to a table is tables/evolution.py's `change_table`).

Names in the SQL text come from the validated registry; property values and
comments are quoted and escaped.
"""

from __future__ import annotations

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from .registry import TableSpec


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _column_ddl(f: T.StructField) -> str:
    ddl = f"`{f.name}` {f.dataType.simpleString()}"
    if not f.nullable:
        ddl += " NOT NULL"
    if f.metadata.get("comment"):
        ddl += f" COMMENT {_quote(f.metadata['comment'])}"
    return ddl


def create_table_sql(table_id: str, spec: TableSpec) -> str:
    columns = ",\n  ".join(_column_ddl(f) for f in spec.schema.fields)
    sql = f"CREATE TABLE IF NOT EXISTS {table_id} (\n  {columns}\n) USING iceberg"
    if spec.partitioned_by:
        sql += f"\nPARTITIONED BY ({', '.join(spec.partitioned_by)})"
    sql += f"\nCOMMENT {_quote(spec.description)}"
    props = ", ".join(f"{_quote(k)} = {_quote(v)}" for k, v in spec.table_properties.items())
    return sql + f"\nTBLPROPERTIES ({props})"


def ensure_table(spark: SparkSession, table_id: str, spec: TableSpec) -> None:
    """Create the table from its declaration if it is missing (the differences of one that exists are the plan's:
    tables/evolution.py)."""
    try:
        spark.sql(create_table_sql(table_id, spec))
    except Py4JJavaError:
        # Iceberg's JDBC catalog checks that the table is missing, then inserts its row: two creators can both
        # pass the check, and PostgreSQL's refusal of the second insert (a unique key violated) is not read as
        # "already exists" (SQLite's is). The table another run made is the declared one: go on with it.
        if not _exists(spark, table_id):
            raise


def _exists(spark: SparkSession, table_id: str) -> bool:
    try:
        spark.table(table_id)
    except AnalysisException:
        return False
    return True

