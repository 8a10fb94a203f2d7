"""One classifier of commit failures (runtime/conflicts.py), by exception class, on failures the real systems
raise: Iceberg's in the JVM, pyiceberg's, and the catalog databases' lock refusals (SQLite busy, PostgreSQL lock
timeout), which the one retry policy runs again."""

import datetime as dt
import sqlite3
import threading
import time

import psycopg2
import pytest
import sqlalchemy
from py4j.protocol import Py4JJavaError
from pyspark.sql import types as T

from lakehouse_assets.errors import ConcurrentCommitError, PublishedError
from lakehouse_assets.runtime.commit import Window, publish, stage, with_commit_retries
from lakehouse_assets.runtime.conflicts import (
    CATALOG_BUSY,
    CONFLICT,
    LOST_RACE,
    commit_failure,
    failure_message,
    retry_commit,
)
from lakehouse_assets.tables.registry import TableSpec, col
from lakehouse_assets_tests.conftest import dsn_of

SPEC = TableSpec(
    name="classified", layer="silver", description="commit failures",
    schema=T.StructType([col("day", T.DateType(), False), col("value", T.LongType(), False)]),
    partitioned_by=("day",),
)
DAY = dt.date(2025, 3, 1)


def _raised(action) -> BaseException:
    with pytest.raises(Exception) as info:
        action()
    return info.value


def _append(table, value: int):
    rows = table.spark.createDataFrame([(DAY, value)], SPEC.schema)
    return publish(stage(table, f"run-{value}", SPEC.name, "t", scope="nothing").append(rows))


def test_iceberg_refusing_stale_metadata_is_a_lost_race(lakehouse):
    """Iceberg's CommitFailedException, raised by the JDBC catalog when the metadata moved since it was read."""
    table = lakehouse.table(SPEC).create()
    _append(table, 1)
    jvm = table.spark._jvm
    ops = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(table.spark._jsparkSession, table.id).operations()
    stale = ops.current()
    _append(table, 2)  # another writer moves the table
    ops.refresh()
    exc = _raised(lambda: ops.commit(stale, stale.replaceProperties(jvm.java.util.HashMap())))
    assert isinstance(exc, Py4JJavaError)
    assert commit_failure(exc) == LOST_RACE
    assert "stale table metadata" in failure_message(exc)


def test_a_validation_failure_nested_in_a_runtime_exception_is_a_conflict(spark):
    """How rewrite_data_files reports one: a RuntimeException whose cause is Iceberg's ValidationException."""
    jvm = spark._jvm
    cause = jvm.org.apache.iceberg.exceptions.ValidationException("Found conflicting files", jvm.java.util.ArrayList().toArray())
    wrapper = jvm.java.lang.RuntimeException("Cannot commit rewrite", cause)
    exc = Py4JJavaError("An error occurred while calling o1.sql", wrapper)
    assert commit_failure(exc) == CONFLICT
    assert failure_message(exc) == "Found conflicting files"
    unknown = jvm.org.apache.iceberg.exceptions.CommitStateUnknownException(jvm.java.lang.RuntimeException("lost"))
    assert commit_failure(Py4JJavaError("o2.sql", jvm.java.lang.RuntimeException("x", unknown))) is None


def test_python_side_failures_by_their_types():
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    assert commit_failure(CommitFailedException("moved")) == LOST_RACE
    assert commit_failure(ConcurrentCommitError("decided against")) == CONFLICT
    assert commit_failure(CommitStateUnknownException("maybe")) is None
    published = PublishedError("on main")
    published.__cause__ = CommitFailedException("moved")
    assert commit_failure(published) is None  # on main already: never again
    assert commit_failure(ValueError("CommitFailedException")) is None  # the words alone decide nothing


def _locked_sqlite(path):
    """A second connection holding the database's write lock until released."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_busy_sqlite_catalog_is_retried_until_the_lock_goes(tmp_path):
    path = tmp_path / "catalog.db"
    engine = sqlalchemy.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.1})
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("CREATE TABLE pointers (name TEXT, location TEXT)"))
    holder = _locked_sqlite(path)

    def write():
        with engine.begin() as connection:
            connection.execute(sqlalchemy.text("INSERT INTO pointers VALUES ('t', 'v1')"))
        return "written"

    busy = _raised(write)
    assert commit_failure(busy) == CATALOG_BUSY
    assert commit_failure(_raised(lambda: engine.connect().execute(sqlalchemy.text("SELECT * FROM missing")))) is None
    threading.Timer(0.5, holder.rollback).start()
    logged: list[str] = []
    assert retry_commit(write, "pointer swap", attempts=20, log=logged.append, pause_s=(0.05, 0.1))[0] == "written"
    assert logged and all("catalog busy" in line for line in logged)


@pytest.mark.usefixtures("pg_catalog_uri")
def test_a_postgres_lock_timeout_is_catalog_busy(pg_catalog_uri, pg_admin_dsn):
    dsn = dsn_of(pg_admin_dsn, pg_catalog_uri.database)
    holder, waiter = psycopg2.connect(dsn), psycopg2.connect(dsn)
    try:
        with holder.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS lock_probe (id int)")
        holder.commit()
        with holder.cursor() as cur:
            cur.execute("LOCK TABLE lock_probe IN ACCESS EXCLUSIVE MODE")
        with waiter.cursor() as cur:
            cur.execute("SET lock_timeout = '100ms'")
            exc = _raised(lambda: cur.execute("INSERT INTO lock_probe VALUES (1)"))
        assert exc.pgcode == "55P03"
        assert commit_failure(exc) == CATALOG_BUSY
    finally:
        holder.close()
        waiter.close()


def test_a_write_meeting_a_locked_catalog_in_the_jvm_is_staged_again_and_publishes(lakehouse):
    """Spark's Iceberg catalog (JDBC on SQLite) meets the catalog file locked by another process's transaction:
    the write fails as CATALOG_BUSY, is run again, and publishes once the lock is gone."""
    table = lakehouse.table(SPEC).create()
    _append(table, 1)
    holder = _locked_sqlite(lakehouse.settings.catalog.path)
    seen: list[str] = []
    threading.Timer(4.0, holder.rollback).start()  # longer than the JDBC driver's own busy wait
    started = time.monotonic()

    def attempt():
        rows = table.spark.createDataFrame([(DAY, 7)], SPEC.schema)
        return publish(stage(table, "run-locked", SPEC.name, "t", scope=Window("day", DAY, DAY, "t")).append(rows))

    try:
        result, retries = with_commit_retries(attempt, SPEC.name, log=seen.append)
    finally:
        holder.rollback()
    assert retries >= 1 and any("catalog busy" in line and "SQLITE_BUSY" in line for line in seen), seen
    assert time.monotonic() - started >= 4.0
    assert sorted(r.value for r in table.read(snapshot_id=result.snapshot_id).collect()) == [1, 7]
