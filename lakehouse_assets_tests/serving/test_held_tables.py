"""The SQL endpoint's small tables held in memory (HeldTables): a query computed over a held table reads the held
rows and only the files the appends since added, and gives the rows the table's files give, at every snapshot;
what is not an append, a time travel or a changed column reads the files as before."""

import uuid
from pathlib import Path

import pytest
from pyspark.sql import DataFrame

pytestmark = pytest.mark.slow  # Spark


def _rows(df: DataFrame) -> list[tuple]:
    return [tuple(r) for r in df.collect()]


def _reads(df: DataFrame) -> tuple[bool, bool]:
    """Whether the query's plan (its subqueries' included) reads the held memory, and whether it reads a table's
    files (a held copy's own plan, how it was made, is printed under it as a physical plan)."""
    plan = df._jdf.queryExecution().analyzed().toString()
    return "InMemoryRelation" in plan, "RelationV2" in plan


@pytest.fixture
def table(spark, lake_settings):
    namespace = f"t_held_{uuid.uuid4().hex[:6]}"
    name = f"{lake_settings.catalog_name}.{namespace}.minutes"
    spark.sql(f"CREATE NAMESPACE {lake_settings.catalog_name}.{namespace}")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, day DATE, kind STRING) USING iceberg PARTITIONED BY (day)")
    spark.sql(f"INSERT INTO {name} VALUES (1, DATE'2025-01-01', 'a'), (2, DATE'2025-01-01', 'b')")
    spark.sql(f"INSERT INTO {name} VALUES (3, DATE'2025-01-02', 'a')")
    yield name
    spark.sql(f"DROP TABLE {name} PURGE")


def test_a_held_table_is_read_from_memory_and_the_appended_files_at_every_snapshot(spark, table, tmp_path):
    # Read twice (a subquery of it): both reads are the held rows.
    sql = (f"SELECT day, count(*) AS n, sum(id) AS ids, max(kind) AS kind FROM {table} "
           f"WHERE id >= (SELECT min(id) FROM {table}) GROUP BY day ORDER BY day")
    held = spark._jvm.lakehouse.HeldTables(1000)
    settings = _settings(spark)  # what a client's result is kept under names them
    query = spark.sql(sql)
    held.hold(spark._jsparkSession, query._jdf)
    name = next(iter(held.snapshots().keySet()))
    first = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
    assert dict(held.snapshots()) == {name: first}

    def over(statement=sql):
        fresh = spark.sql(statement)
        return fresh, DataFrame(held.over(fresh._jdf), spark)

    # At the held snapshot: memory alone.
    plain, computed = over()
    assert _reads(computed) == (True, False) and _reads(plain) == (False, True)
    assert _rows(computed) == _rows(plain) == [(d, n, i, k) for d, n, i, k in _rows(plain)] and len(_rows(plain)) == 2

    # Two appends later (not yet brought to them): the held rows and the two appends' files.
    spark.sql(f"INSERT INTO {table} VALUES (4, DATE'2025-01-02', 'c')")
    spark.sql(f"INSERT INTO {table} VALUES (5, DATE'2025-01-03', 'a'), (0, DATE'2025-01-03', 'z')")
    plain, computed = over()
    assert _reads(computed) == (True, True)
    assert _rows(computed) == _rows(plain) and _rows(plain)[-1][1:] == (2, 5, "z") and _rows(plain)[0][1] == 2
    # The files the held snapshot read are not read at all: gone from the disk, the answer is the same.
    files = [Path(f.replace("file:", "")) for (f,) in spark.sql(
        f"SELECT file_path FROM {table}.files WHERE partition.day <= DATE'2025-01-02'").collect()]
    before = _rows(plain)
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in files:
        if f.exists() and _reads_held_file(spark, table, f, first):
            f.rename(moved / f.name)
    assert any(moved.iterdir())
    assert _rows(over()[1]) == before
    for f in moved.iterdir():  # back where they were
        next(p for p in files if p.name == f.name).parent.mkdir(parents=True, exist_ok=True)
        f.rename(next(p for p in files if p.name == f.name))

    # Reading the held rows and the appends changed no setting of the session (the key of a client's results).
    assert _settings(spark) == settings

    # Brought to the current snapshot: memory alone again.
    held.advance(spark._jsparkSession, name)
    assert _reads(over()[1]) == (True, False) and _rows(over()[1]) == before

    # A row-level delete is not an append: the files are read, the held copy read again whole at the next advance.
    spark.sql(f"DELETE FROM {table} WHERE id = 0")
    plain, computed = over()
    assert _reads(computed) == (False, True) and _rows(computed) == _rows(plain) != before
    held.advance(spark._jsparkSession, name)
    plain, computed = over()
    assert _reads(computed) == (True, False) and _rows(computed) == _rows(plain)

    # Time travel to the first snapshot reads its files, as before.
    travel = f"SELECT count(*) FROM {table} VERSION AS OF {first}"
    assert _reads(over(travel)[1]) == (False, True) and _rows(over(travel)[1]) == [(3,)]

    # A column added: the held rows are not the table's columns, the files are read; after an append (a new
    # snapshot of the new columns) the held copy is read again whole, with them.
    spark.sql(f"ALTER TABLE {table} ADD COLUMN note STRING")
    assert _reads(over()[1]) == (False, True)
    spark.sql(f"INSERT INTO {table} VALUES (6, DATE'2025-01-03', 'a', 'x')")
    held.advance(spark._jsparkSession, name)
    plain, computed = over()
    assert _reads(computed) == (True, False) and _rows(computed) == _rows(plain) and _rows(plain)[-1][1] == 2

    # Let go once no watched query reads it.
    held.keepOnly(spark._jvm.java.util.HashSet())
    assert dict(held.snapshots()) == {} and _reads(over()[1]) == (False, True)


def _settings(spark) -> dict[str, str]:
    return dict(spark._jvm.scala.collection.JavaConverters.mapAsJavaMap(
        spark._jsparkSession.sessionState().conf().getAllConfs()))


def _reads_held_file(spark, table: str, path: Path, snapshot: int) -> bool:
    return spark.sql(f"SELECT count(*) FROM {table}.files VERSION AS OF {snapshot} "
                     f"WHERE file_path LIKE '%{path.name}'").first()[0] > 0


def test_a_table_over_the_bound_is_not_held(spark, table):
    held = spark._jvm.lakehouse.HeldTables(2)  # the table has 3 rows
    held.hold(spark._jsparkSession, spark.sql(f"SELECT count(*) FROM {table}")._jdf)
    assert dict(held.snapshots()) == {}
