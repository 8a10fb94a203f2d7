"""`lakehouse sql`: DuckDB's Iceberg reader over the lake's tables, no Spark."""

import csv
import datetime as dt
import io
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    DecimalType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.sql import query, run

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
UTC = dt.timezone.utc

EVENTS = Schema(
    NestedField(1, "event_id", LongType(), required=True),
    NestedField(2, "ts", TimestamptzType(), required=False),
    NestedField(3, "user_id", LongType(), required=False),
    NestedField(4, "kind", StringType(), required=False),
    NestedField(5, "amount", DecimalType(10, 2), required=False),
)
USERS = Schema(
    NestedField(1, "user_id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
)
DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2), dt.date(2025, 1, 3)]


def _events_of(day: dt.date, start_id: int, count: int) -> list[dict]:
    rows = []
    for n in range(count):
        event_id = start_id + n
        rows.append({
            "event_id": event_id,
            "ts": dt.datetime.combine(day, dt.time(hour=(3 * n) % 24, minute=7 * n % 60), UTC),
            "user_id": 1 + event_id % 3,
            "kind": ("view", "click", "buy")[event_id % 3 if event_id % 4 else 1],
            "amount": Decimal(event_id * 125).scaleb(-2),
        })
    return rows


@pytest.fixture
def lake(lake_settings, namespace):
    """Events partitioned by day(ts), one append (snapshot, data file) per day, and a users table."""
    catalog = catalog_for(lake_settings)
    catalog.create_namespace(namespace)
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day"))
    events = catalog.create_table((namespace, "events"), schema=EVENTS, partition_spec=spec)
    per_day = {}
    for i, day in enumerate(DAYS):
        rows = _events_of(day, start_id=100 * (i + 1), count=4 + i)
        per_day[day] = rows
        events.append(pa.Table.from_pylist(rows, schema=events.schema().as_arrow()))
        time.sleep(0.02)  # distinct commit times, with room for a moment between two commits
    users = catalog.create_table((namespace, "users"), schema=USERS)
    users.append(pa.Table.from_pylist(
        [{"user_id": 1, "name": "ann"}, {"user_id": 2, "name": "bob"}, {"user_id": 3, "name": "cy"}],
        schema=users.schema().as_arrow(),
    ))
    snapshots = sorted(events.refresh().metadata.snapshots, key=lambda s: s.timestamp_ms)
    return {"settings": lake_settings.with_(namespace=namespace), "per_day": per_day, "snapshots": snapshots,
            "names": {1: "ann", 2: "bob", 3: "cy"}}


def _all(lake, days=DAYS):
    return [row for day in days for row in lake["per_day"][day]]


def test_an_aggregate_equals_the_same_computation_in_python(lake):
    result = query(lake["settings"],
                   "SELECT kind, count(*) AS n, sum(amount) AS total FROM events GROUP BY kind ORDER BY kind")
    expected_n, expected_total = Counter(), defaultdict(Decimal)
    for row in _all(lake):
        expected_n[row["kind"]] += 1
        expected_total[row["kind"]] += row["amount"]
    assert result.column_names == ["kind", "n", "total"]
    assert result.to_pylist() == [
        {"kind": kind, "n": expected_n[kind], "total": expected_total[kind]} for kind in sorted(expected_n)
    ]


def test_a_one_day_filter_reads_fewer_files_and_returns_that_day(lake):
    settings = lake["settings"]
    day_two = sorted(r["event_id"] for r in lake["per_day"][DAYS[1]])
    for where in ("ts >= '2025-01-02' AND ts < '2025-01-03'",
                  "ts BETWEEN TIMESTAMP '2025-01-02 00:00:00' AND '2025-01-02 23:59:59.999999'"):
        result = run(settings, f"SELECT event_id FROM events WHERE {where} ORDER BY event_id")
        assert result.table.column("event_id").to_pylist() == day_two, where
        (scan,) = result.scans
        assert (scan.files_read, scan.files_total) == (1, 3), where
        assert scan.columns == ("event_id",)
        assert scan.rows == len(day_two)
        assert scan.snapshot_id == lake["snapshots"][-1].snapshot_id
        assert scan.filters and scan.filters[0].startswith("ts>=")

    # A filter the reader cannot prune with reads every file (and the answer is still right).
    result = run(settings, "SELECT count(*) AS n FROM events WHERE strftime(ts, '%d') = '02'")
    assert result.table.column("n").to_pylist() == [len(day_two)]
    assert (result.scans[0].files_read, result.scans[0].filters) == (3, ("(strftime(ts, '%d') = '02')",))

    # A day's filter and a set of values both go into the scan.
    result = run(settings, "SELECT * FROM events WHERE ts >= '2025-01-03' AND kind IN ('buy', 'view')")
    assert sorted(r["event_id"] for r in result.table.to_pylist()) == sorted(
        r["event_id"] for r in lake["per_day"][DAYS[2]] if r["kind"] in ("buy", "view"))
    (scan,) = result.scans
    assert (scan.files_read, scan.files_total) == (1, 3)
    assert scan.columns == ("event_id", "ts", "user_id", "kind", "amount")
    assert "kind IN ('buy', 'view')" in scan.filters[0]


def test_as_of_a_snapshot_id_or_a_timestamp_reads_the_older_data(lake):
    settings = lake["settings"]
    first, second, _ = lake["snapshots"]
    assert second.timestamp_ms - first.timestamp_ms >= 2
    day_one = sorted(r["event_id"] for r in lake["per_day"][DAYS[0]])
    sql = "SELECT event_id FROM events ORDER BY event_id"

    by_id = run(settings, sql, as_of=str(first.snapshot_id))
    assert by_id.table.column("event_id").to_pylist() == day_one
    assert by_id.scans[0].snapshot_id == first.snapshot_id
    assert (by_id.scans[0].files_total, by_id.scans[0].files_read) == (1, 1)

    # A moment between the first two commits, naive, so UTC.
    between = dt.datetime.fromtimestamp((first.timestamp_ms + second.timestamp_ms) / 2000, UTC)
    by_time = query(settings, sql, as_of=between.replace(tzinfo=None).isoformat(timespec="milliseconds"))
    assert by_time.column("event_id").to_pylist() == day_one

    two_days = sorted(r["event_id"] for r in _all(lake, DAYS[:2]))
    at_second = dt.datetime.fromtimestamp(second.timestamp_ms / 1000, UTC).isoformat(timespec="milliseconds")
    assert query(settings, sql, as_of=at_second).column("event_id").to_pylist() == two_days

    # users did not exist at the first events snapshot: a clear error, naming it.
    with pytest.raises(ValueError, match=r"table \S+\.users did not exist yet as of snapshot"):
        query(settings, "SELECT * FROM events JOIN users USING (user_id)", as_of=str(first.snapshot_id))
    with pytest.raises(ValueError, match=r"table \S+\.events did not exist yet as of 2001-01-01"):
        query(settings, sql, as_of="2001-01-01")
    with pytest.raises(ValueError, match="no table in namespace .* has snapshot 42"):
        query(settings, sql, as_of="42")
    # A snapshot id of users: events is read as of users' commit, i.e. whole.
    users_snapshot = catalog_for(settings).load_table((settings.namespace, "users")).current_snapshot()
    assert query(settings, "SELECT count(*) AS n FROM events",
                 as_of=str(users_snapshot.snapshot_id)).to_pylist() == [{"n": len(_all(lake))}]


def test_a_join_of_two_tables(lake):
    result = run(lake["settings"], """
        SELECT u.name, count(*) AS events, sum(e.amount) AS total
        FROM events e JOIN users u ON u.user_id = e.user_id
        WHERE e.kind <> 'view' AND u.name IN ('ann', 'bob')
        GROUP BY u.name ORDER BY u.name
    """)
    expected = defaultdict(lambda: [0, Decimal(0)])
    for row in _all(lake):
        name = lake["names"][row["user_id"]]
        if row["kind"] != "view" and name in ("ann", "bob"):
            expected[name][0] += 1
            expected[name][1] += row["amount"]
    assert result.table.to_pylist() == [
        {"name": name, "events": n, "total": total} for name, (n, total) in sorted(expected.items())
    ]
    scans = {s.table.split(".")[-1]: s for s in result.scans}
    assert "kind!='view'" in scans["events"].filters[0]
    assert scans["users"].columns == ("user_id", "name")
    assert "name IN ('ann', 'bob')" in scans["users"].filters[0]
    assert scans["events"].files_read == 3


def test_unknown_tables_and_bad_sql_are_clear_errors(lake):
    settings = lake["settings"]
    with pytest.raises(ValueError, match=r"unknown table 'nope': namespace '\w+' has no such table "
                                         r"\(tables: events, users\)"):
        query(settings, "SELECT * FROM events JOIN nope USING (user_id)")
    with pytest.raises(ValueError, match="Parser Error: syntax error"):
        query(settings, "SELECT * FROM events WHERE")
    with pytest.raises(ValueError, match="Binder Error.*no_such_column"):
        query(settings, "SELECT no_such_column FROM events")
    with pytest.raises(ValueError, match="unknown table 'nope'"):
        query(settings, "SELECT 1", tables=["nope"])
    # DuckDB's own catalog and CTEs are not lake tables.
    assert query(settings, "WITH nope AS (SELECT 1 AS x) SELECT x FROM nope").to_pylist() == [{"x": 1}]


def _cli(*args, settings):
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_NAMESPACE": settings.namespace}
    return subprocess.run([LAKEHOUSE, "sql", *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_cli_answers_the_same_in_json_and_csv(lake):
    settings = lake["settings"]
    sql = ("SELECT CAST(ts AS DATE) AS day, count(*) AS n, sum(amount) AS total, max(ts) AS last "
           "FROM events WHERE ts >= '2025-01-02' GROUP BY ALL ORDER BY day")
    expected = []
    for day in DAYS[1:]:
        rows = lake["per_day"][day]
        expected.append({"day": day.isoformat(), "n": len(rows), "total": str(sum(r["amount"] for r in rows)),
                         "last": max(r["ts"] for r in rows).isoformat()})

    as_json = _cli(sql, "--format", "json", "--explain", settings=settings)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == expected
    assert "2 of 3 data files read" in as_json.stderr and "filter ts>='2025-01-02 00:00:00+00'" in as_json.stderr

    as_csv = _cli(sql, "--format", "csv", settings=settings)
    assert as_csv.returncode == 0, as_csv.stderr
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [{**r, "n": int(r["n"])} for r in rows] == expected

    failed = _cli("SELECT * FROM nope", settings=settings)
    assert failed.returncode == 2
    assert failed.stderr.startswith("lakehouse sql: unknown table 'nope'")


def test_the_cli_table_format_and_as_of(lake):
    first = lake["snapshots"][0]
    done = _cli("SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind",
                "--as-of", str(first.snapshot_id), settings=lake["settings"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    counts = Counter(r["kind"] for r in lake["per_day"][DAYS[0]])
    assert lines[0].split() == ["kind", "n"]
    assert [line.split() for line in lines[1:]] == [[k, str(n)] for k, n in sorted(counts.items())]


def test_the_command_reads_the_catalog_row_itself_and_imports_neither_spark_dagster_pyiceberg_nor_arrow(lake):
    """`lakehouse sql` on a SQLite catalog reads the catalog row and the metadata file with the standard
    library: the current snapshot's rows, and no Spark, Dagster, pyiceberg or Arrow imported; nor by `--help`."""
    settings = lake["settings"]
    assert settings.catalog.kind == "sqlite"
    sql = "SELECT count(*) AS n, sum(amount) AS total FROM events"
    script = (
        "import json, sys\n"
        "from lakehouse_assets.cli import main\n"
        "try:\n"
        "    code = main(sys.argv[1:])\n"
        "except SystemExit as stop:\n"
        "    code = stop.code\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'dagster', 'pyiceberg', 'sqlalchemy', 'pyarrow'})\n"
        "print(json.dumps(heavy), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_NAMESPACE": settings.namespace}
    done = subprocess.run([sys.executable, "-c", script, "sql", sql, "--format", "json", "--explain"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.splitlines()[-1]) == []
    rows = _all(lake)
    assert json.loads(done.stdout) == [{"n": len(rows), "total": str(sum(r["amount"] for r in rows))}]
    current = lake["snapshots"][-1].snapshot_id
    assert f"snapshot {current} " in done.stderr
    helped = subprocess.run([sys.executable, "-c", script, "--help"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and "sql" in helped.stdout
    assert json.loads(helped.stderr.splitlines()[-1]) == []
