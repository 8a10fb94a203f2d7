"""`lakehouse sql`: DuckDB's Iceberg reader over the lake's tables, no Spark."""

import csv
import datetime as dt
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlparse

import boto3
import duckdb
import pyarrow as pa
import pytest
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError
from py4j.protocol import Py4JJavaError
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
from lakehouse_assets.runtime.spark import s3_file_io_properties
from lakehouse_assets.serving import duckdb_sql as sql
from lakehouse_assets.serving import read_rule
from lakehouse_assets.serving.duckdb_sql import query, run
from lakehouse_assets.settings import Settings
from lakehouse_services.s3server import SeaweedS3

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


def fill_lake(catalog, namespace: str) -> tuple[dict, list]:
    """Events partitioned by day(ts), one append (snapshot, data file) per day, and a users table: the rows of
    each day and the events' snapshots, oldest first."""
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
    return per_day, sorted(events.refresh().metadata.snapshots, key=lambda s: s.timestamp_ms)


@pytest.fixture
def lake(lake_settings, namespace):
    """`fill_lake`'s tables in this test's namespace."""
    per_day, snapshots = fill_lake(catalog_for(lake_settings), namespace)
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


def _cli(*args, settings, env=None):
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_NAMESPACE": settings.namespace,
           "LAKEHOUSE_PROJECT": settings.project, **(env or {})}
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


# ---------------------------------------------------------------------------------------
# What analysts may run, and see
# ---------------------------------------------------------------------------------------


RAW_ROW = {"event_id": 1, "email": "ann@example.com", "ip": "10.1.2.3"}
DECLARATION = """\
name: medals
start_date: 2025-01-01
events:
  clicks:
    fields: {id: string, user: string, ts: timestamp, kind: string}
    key: id
    timestamp: ts
    user: user
    event_type: kind
gold:
  tables:
    bronze_medals:                 # a gold table whose name only looks raw
      reads: [silver_clicks]
      sql: SELECT user, count(*) AS medals FROM silver_clicks GROUP BY user
      columns: {user: string, medals: long}
"""


def _create(catalog, namespace: str, name: str, rows: list[dict]) -> None:
    data = pa.Table.from_pylist(rows)
    catalog.create_table((namespace, name), schema=data.schema).append(data)


@pytest.fixture
def raw_lake(lake, tmp_path):
    """`lake` with raw tables beside it: a bronze table with personal data in clear, its quarantine, the ingest
    log; and no declaration (names decide)."""
    settings = lake["settings"].with_(project=str(tmp_path / "no-declaration.yaml"))
    catalog = catalog_for(settings)
    _create(catalog, settings.namespace, "bronze_events", [RAW_ROW])
    _create(catalog, settings.namespace, "bronze_events_quarantine", [{"reason": "not json", "line": "x@y.z"}])
    _create(catalog, settings.namespace, "bronze_ingest_log", [{"source_file": "a.jsonl", "records": 3}])
    events = catalog.load_table((settings.namespace, "events"))
    warehouse = settings.local_path(settings.warehouse)
    data_file = next(Path(urlparse(events.location()).path, "data").rglob("*.parquet"))
    return {**lake, "settings": settings, "warehouse": warehouse, "events_dir": Path(urlparse(events.location()).path),
            "data_file": data_file, "catalog_file": Path(settings.catalog.path)}


def _hashes(*roots: Path) -> dict[str, str]:
    """Every file under the roots (or the file itself), by path, with the SHA-256 of its bytes."""
    files = [f for root in roots for f in ([root] if root.is_file() else root.rglob("*")) if f.is_file()]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _refused_statements(raw_lake, tmp_path) -> list[tuple[str, str]]:
    """(statement, what its refusal says) for each way out of a query: writing, attaching, installing, setting,
    reading files. The command is run with the first eleven."""
    settings, events_dir = raw_lake["settings"], raw_lake["events_dir"]
    data_file, catalog_file = raw_lake["data_file"], raw_lake["catalog_file"]
    into_lake = raw_lake["warehouse"] / settings.namespace / "new.csv"
    queries_only = r"lakehouse sql runs queries only \(SELECT"
    files_never = "lakehouse sql reads the lake's tables by their names, never files"
    return [
        (f"COPY (SELECT 42 AS x) TO '{into_lake}'", "refused COPY statement .*" + queries_only),
        (f"COPY (SELECT * FROM events LIMIT 0) TO '{data_file}' (FORMAT parquet, USE_TMP_FILE false)",
         "refused COPY statement"),
        (f"ATTACH '{catalog_file}' AS catalog (TYPE sqlite)", "refused ATTACH statement"),
        ("INSTALL httpfs", "refused LOAD statement 'INSTALL httpfs'"),
        ("SELECT * FROM read_text('/etc/passwd')", r"refused read_text\(...\): " + files_never),
        (f"SELECT * FROM read_blob('{catalog_file}')", "refused read_blob"),
        (f"SELECT count(*) FROM read_parquet('{events_dir}/data/**')", "refused read_parquet"),
        (f"FROM '{data_file}'", f"refused '{data_file}': " + files_never),
        ("CREATE TABLE copied AS SELECT * FROM events", "refused CREATE statement"),
        ("INSERT INTO events (event_id) VALUES (1)", "refused INSERT statement"),
        ("SET enable_external_access = true", "refused SET statement"),
        (f"COPY (SELECT 1 AS x) TO '{tmp_path}/out.csv'", "refused COPY statement"),
        (f"EXPLAIN ANALYZE COPY (SELECT 42 AS x) TO '{into_lake}'", "refused COPY statement"),
        (f"SELECT 1; COPY (SELECT 42 AS x) TO '{into_lake}'", "refused COPY statement"),
        ("LOAD httpfs", "refused LOAD statement"),
        ("DELETE FROM events", "refused DELETE statement"),
        ("SET threads = 1", "refused SET statement"),
        ("PRAGMA enable_profiling", "refused PRAGMA statement"),
        ("PRAGMA version", r"refused pragma_version\("),  # DuckDB reads it as a call of pragma_version()
        ("CALL pragma_version()", "refused CALL statement"),
        (f"SELECT * FROM events WHERE event_id IN (SELECT event_id FROM parquet_scan('{data_file}'))",
         "refused parquet_scan"),
        (f"SELECT * FROM glob('{events_dir}/**')", "refused glob"),
        (f"SELECT * FROM iceberg_scan('{events_dir}')", "refused iceberg_scan"),
        (f"SELECT * FROM iceberg_snapshots('{events_dir}')", "refused iceberg_snapshots"),
        ("SELECT * FROM query('SELECT 1')", "refused query"),
        (f"DESCRIBE '{data_file}'", "refused '"),
        (f"SELECT * FROM events, read_csv('{tmp_path}/x.csv')", "refused read_csv"),
    ]


def test_anything_but_a_query_over_the_tables_is_refused_and_the_lake_is_left_as_it_was(raw_lake, tmp_path):
    settings = raw_lake["settings"]
    before = _hashes(raw_lake["warehouse"], raw_lake["catalog_file"])
    for statement, refusal in _refused_statements(raw_lake, tmp_path):
        with pytest.raises(ValueError, match=refusal) as refused:
            run(settings, statement)
        assert "\n" not in str(refused.value), statement
        assert "root:" not in str(refused.value)
    assert _hashes(raw_lake["warehouse"], raw_lake["catalog_file"]) == before
    assert not (tmp_path / "out.csv").exists()
    assert query(settings, "SELECT count(*) AS n FROM events").to_pylist() == [{"n": len(_all(raw_lake))}]


def test_the_command_refuses_them_in_one_line_with_exit_code_2(raw_lake, tmp_path):
    settings = raw_lake["settings"]
    before = _hashes(raw_lake["warehouse"], raw_lake["catalog_file"])
    for statement, refusal in _refused_statements(raw_lake, tmp_path)[:11]:
        done = _cli(statement, settings=settings)
        assert done.returncode == 2, (statement, done.stdout, done.stderr)
        assert re.match("lakehouse sql: " + refusal, done.stderr), (statement, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stdout == "", statement
    assert _hashes(raw_lake["warehouse"], raw_lake["catalog_file"]) == before


def test_duckdb_itself_opens_only_the_exposed_tables_directories(raw_lake):
    """The second fence, below the parser's: the session DuckDB runs a query in."""
    settings, events_dir = raw_lake["settings"], raw_lake["events_dir"]
    bronze_data = next((events_dir.parent / "bronze_events" / "data").rglob("*.parquet"))
    con = sql.connect(settings, readable=[f"{events_dir}/"])
    try:
        assert con.sql(f"SELECT count(*) FROM read_parquet('{raw_lake['data_file']}')").fetchall()[0][0] > 0
        for path in (bronze_data, raw_lake["catalog_file"], Path("/etc/passwd")):
            with pytest.raises(duckdb.PermissionException, match="disabled by configuration"):
                con.sql(f"SELECT * FROM read_blob('{path}')").fetchall()
        with pytest.raises(duckdb.Error, match="configuration has been locked"):
            con.execute("SET enable_external_access = true")
    finally:
        con.close()


def test_queries_run_as_before(raw_lake):
    settings = raw_lake["settings"]
    rows = _all(raw_lake)
    assert query(settings, "WITH k AS (SELECT kind, count(*) AS n FROM events GROUP BY kind) "
                           "SELECT sum(n) AS n FROM k").to_pylist() == [{"n": len(rows)}]
    assert query(settings, f"SELECT count(*) AS n FROM {settings.namespace}.events e "
                           "WHERE e.user_id IN (SELECT user_id FROM users WHERE name = 'ann')"
                 ).to_pylist() == [{"n": sum(r["user_id"] == 1 for r in rows)}]
    assert query(settings, "SELECT 1 AS a; SELECT max(event_id) AS m FROM events").to_pylist() == [
        {"m": max(r["event_id"] for r in rows)}]
    assert query(settings, "SELECT x FROM range(3) t(x), unnest([10]) u(y) ORDER BY x").column("x").to_pylist() == [
        0, 1, 2]
    described = query(settings, "DESCRIBE events").to_pylist()
    assert [(c["column_name"], c["column_type"]) for c in described] == [
        ("event_id", "BIGINT"), ("ts", "TIMESTAMP WITH TIME ZONE"), ("user_id", "BIGINT"), ("kind", "VARCHAR"),
        ("amount", "DECIMAL(10,2)")]
    assert [c["column_name"] for c in query(settings, "SHOW users").to_pylist()] == ["user_id", "name"]
    summary = {c["column_name"]: c for c in query(settings, "SUMMARIZE events").to_pylist()}
    assert summary["event_id"]["count"] == len(rows) and summary["event_id"]["min"] == str(rows[0]["event_id"])
    for explain in ("EXPLAIN", "EXPLAIN ANALYZE", "explain /* plan */ analyze"):
        plan = query(settings, f"{explain} SELECT count(*) FROM events WHERE kind = 'buy'").to_pylist()
        assert "ICEBERG_SCAN" in "".join(map(str, plan[0].values())).upper(), explain
    first = raw_lake["snapshots"][0]
    assert query(settings, "SELECT count(*) AS n FROM events", as_of=str(first.snapshot_id)).to_pylist() == [
        {"n": len(raw_lake["per_day"][DAYS[0]])}]


def test_the_docs_queries_are_queries_and_name_raw_tables_with_the_raw_flag():
    """Every `lakehouse sql "..."` of the Makefile, README, docs and alert rules is a query the command takes, and
    one that reads a raw table says `--raw`."""
    root = Path(__file__).resolve().parents[2]
    texts = [root / "Makefile", root / "README.md", root / "examples" / "alerts.yml", *(root / "docs").glob("*.md")]
    found = [(m.group(1), m.group(2)) for t in texts
             for m in re.finditer(r'lakehouse sql (--raw )?"((?:[^"\n]|\n\s*)+)"', t.read_text())]
    assert len(found) >= 5 and sum(bool(flag) for flag, _ in found) >= 3
    for flag, text in [f for f in found if f[1] != "SELECT ..."]:  # a synopsis, not a query
        statement = " ".join(text.split()).replace("<source's quarantine table>", "bronze_events_quarantine")
        named = re.findall(r"\w+", statement)  # any word may be a table here: what matters is the statement's kind
        statements = sql._judged(duckdb.connect(), statement, "lake", named, set(), lambda name: f"unknown {name}")
        assert [s.type for s in statements] == [duckdb.StatementType.SELECT], statement
        assert bool(flag) == any(read_rule.looks_raw(word) for word in named), statement


def test_raw_tables_are_hidden_unless_an_engineer_asks(raw_lake):
    settings = raw_lake["settings"]
    raw_message = (r"table 'bronze_events' is raw data \(bronze, quarantine or ingest log: .*personal data in "
                   r"clear\), hidden from analysts' SQL; an engineer opens it with `lakehouse sql --raw` or "
                   r"LAKEHOUSE_SQL_RAW=1")
    for statement in ("SELECT email FROM bronze_events",
                      "SELECT e.kind FROM events e JOIN bronze_events b USING (event_id)",
                      f"SELECT * FROM {settings.namespace}.bronze_events",
                      "SELECT * FROM events WHERE event_id IN (SELECT event_id FROM BRONZE_EVENTS)"):
        with pytest.raises(ValueError, match=raw_message):
            query(settings, statement)
    with pytest.raises(ValueError, match="table 'bronze_ingest_log' is raw data"):
        query(settings, "SELECT * FROM bronze_ingest_log")
    with pytest.raises(ValueError, match="table 'bronze_events_quarantine' is raw data"):
        query(settings, "SELECT 1", tables=["bronze_events_quarantine"])
    with pytest.raises(ValueError, match=r"unknown table 'nope': .* \(tables: events, users\)$"):
        query(settings, "SELECT * FROM nope")
    # A name that only mentions a raw table (a column, an alias) reads nothing of it.
    assert query(settings, "SELECT 1 AS bronze_events").to_pylist() == [{"bronze_events": 1}]

    assert query(settings, "SELECT * FROM bronze_events", raw=True).to_pylist() == [RAW_ROW]
    assert query(settings.with_(sql_raw=True), "SELECT count(*) AS n FROM bronze_ingest_log").to_pylist() == [
        {"n": 1}]
    assert query(settings.with_(sql_raw=True), "SELECT 1 AS n", raw=False, tables=["events"]).to_pylist() == [
        {"n": 1}]

    hidden = _cli("SELECT email, ip FROM bronze_events", "--format", "json", settings=settings)
    assert hidden.returncode == 2 and hidden.stdout == ""
    assert re.fullmatch("lakehouse sql: " + raw_message + "\n", hidden.stderr)
    opened = _cli("SELECT email, ip FROM bronze_events", "--format", "json", "--raw", settings=settings)
    assert opened.returncode == 0, opened.stderr
    assert json.loads(opened.stdout) == [{"email": RAW_ROW["email"], "ip": RAW_ROW["ip"]}]
    by_setting = _cli("SELECT source_file FROM bronze_ingest_log", "--format", "csv", settings=settings,
                      env={"LAKEHOUSE_SQL_RAW": "1"})
    assert by_setting.returncode == 0 and by_setting.stdout == "source_file\na.jsonl\n", by_setting.stderr
    wrong = _cli("SELECT 1", settings=settings, env={"LAKEHOUSE_SQL_RAW": "maybe"})
    assert (wrong.returncode, wrong.stderr) == (2, "lakehouse sql: LAKEHOUSE_SQL_RAW='maybe': expected 1 or 0 "
                                                    "(true/false, yes/no)\n")


def test_the_declared_layer_decides_over_the_name(raw_lake, tmp_path):
    declaration = tmp_path / "lakehouse.yaml"
    declaration.write_text(DECLARATION)
    settings = raw_lake["settings"].with_(project=str(declaration))
    catalog = catalog_for(settings)
    for name in ("bronze_clicks", "bronze_medals", "silver_clicks"):
        _create(catalog, settings.namespace, name, [{"user": "ann", "medals": 2}])
    assert query(settings, "SELECT medals FROM bronze_medals").to_pylist() == [{"medals": 2}]  # declared gold
    assert query(settings, "SELECT medals FROM silver_clicks").to_pylist() == [{"medals": 2}]
    for name in ("bronze_clicks", "bronze_events"):  # declared bronze; not declared, named raw
        with pytest.raises(ValueError, match=f"table '{name}' is raw data"):
            query(settings, f"SELECT * FROM {name}")
    with pytest.raises(ValueError, match=r"\(tables: bronze_medals, events, silver_clicks, users\)$"):
        query(settings, "SELECT * FROM nope")


@pytest.mark.parametrize("example", ["shop", "cdc"])
def test_the_raw_tables_are_the_bronze_layer_the_build_declares(example):
    """`lakehouse sql` tells raw tables without importing the build (Dagster, Spark): its rule must agree."""
    from lakehouse_assets.build import table_specs
    from lakehouse_assets.project import load_project

    path = Path(__file__).resolve().parents[2] / "examples" / example / "lakehouse.yaml"
    specs = table_specs(load_project(path))
    declared = read_rule.declared_raw(Settings(home=Path("/nonexistent"), project=str(path)))
    assert declared == {name: spec.layer == "bronze" for name, spec in specs.items()}
    assert {n for n, raw in declared.items() if raw} == {n for n in specs if read_rule.looks_raw(n)}
    assert "bronze_ingest_log" in specs and declared["bronze_ingest_log"]


def test_the_raw_setting_and_the_read_only_credential_are_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("LAKEHOUSE_SQL_S3_ACCESS_KEY", "analysts")
    monkeypatch.setenv("LAKEHOUSE_SQL_S3_SECRET_KEY", "reader-secret")
    monkeypatch.setenv("LAKEHOUSE_SQL_RAW", "yes")
    settings = Settings.from_env(home=tmp_path, s3_access_key="lake", s3_secret_key="lake-secret")
    assert (settings.sql_s3_access_key, settings.sql_s3_secret_key, settings.sql_raw) == (
        "analysts", "reader-secret", True)
    shown = settings.describe()
    assert (shown["sql_s3_access_key"], shown["sql_s3_secret_key"], shown["sql_raw"]) == ("analysts", "(set)", "yes")
    assert "reader-secret" not in repr(settings) and "reader-secret" not in json.dumps(shown)
    secret = sql._s3_secret(settings)
    assert "KEY_ID 'analysts'" in secret and "SECRET 'reader-secret'" in secret and "lake-secret" not in secret
    assert "KEY_ID 'lake'" in sql._s3_secret(settings.with_(sql_s3_access_key="", sql_s3_secret_key=""))
    monkeypatch.delenv("LAKEHOUSE_SQL_S3_SECRET_KEY")
    with pytest.raises(ValueError, match="^LAKEHOUSE_SQL_S3_ACCESS_KEY and LAKEHOUSE_SQL_S3_SECRET_KEY go together"):
        Settings.from_env(home=tmp_path)
    monkeypatch.delenv("LAKEHOUSE_SQL_S3_ACCESS_KEY")
    monkeypatch.setenv("LAKEHOUSE_SQL_RAW", "0")
    assert Settings.from_env(home=tmp_path).sql_raw is False


def test_on_s3_the_command_reads_with_a_read_only_identity_alone(spark, namespace, tmp_path):
    """A SeaweedFS identity that may only read and list: `lakehouse sql` reads the lake with it, even with the
    platform's own key wrong, and the identity cannot write, through boto3 or through the S3FileIO Spark's
    catalogs (the endpoint's among them) use with the read-only settings."""
    config = tmp_path / "s3.json"
    config.write_text(json.dumps({"identities": [
        {"name": "platform", "credentials": [{"accessKey": "admin", "secretKey": "adminsecret"}],
         "actions": ["Admin", "Read", "List", "Write", "Tagging"]},
        {"name": "analysts", "credentials": [{"accessKey": "analysts", "secretKey": "reader-secret"}],
         "actions": ["Read:lake/warehouse/*", "List:lake"]},  # as docs/sql.md configures it
    ]}))

    class WithIdentities(SeaweedS3):
        def command(self) -> list[str]:
            return [*super().command(), f"-s3.config={config}"]

    with WithIdentities.with_free_ports(tmp_path / "s3", buckets=("lake",)) as server:
        platform = Settings(home=tmp_path / "home", warehouse="s3://lake/warehouse", namespace=namespace,
                            s3_endpoint=server.endpoint_url, s3_access_key="admin", s3_secret_key="adminsecret",
                            project=str(tmp_path / "none.yaml"))
        catalog = catalog_for(platform)
        catalog.create_namespace(namespace)
        _create(catalog, namespace, "silver_orders", [{"order_id": 1, "total": 5}, {"order_id": 2, "total": 7}])
        _create(catalog, namespace, "bronze_orders", [{"order_id": 1, "email": "ann@example.com"}])
        analysts = platform.with_(s3_access_key="admin", s3_secret_key="wrong",
                                  sql_s3_access_key="analysts", sql_s3_secret_key="reader-secret")
        assert query(analysts, "SELECT sum(total) AS t FROM silver_orders").to_pylist() == [{"t": 12}]
        with pytest.raises(ValueError, match="table 'bronze_orders' is raw data"):
            query(analysts, "SELECT * FROM bronze_orders")
        assert query(analysts, "SELECT email FROM bronze_orders", raw=True).to_pylist() == [
            {"email": "ann@example.com"}]
        with pytest.raises(ValueError, match="refused read_parquet"):
            query(analysts, "SELECT * FROM read_parquet('s3://lake/warehouse/**/*.parquet')")
        with pytest.raises(OSError, match="ACCESS_DENIED"):
            query(platform.with_(sql_s3_access_key="analysts", sql_s3_secret_key="wrong"),
                  "SELECT * FROM silver_orders")
        reader = boto3.client("s3", endpoint_url=server.endpoint_url, aws_access_key_id="analysts",
                              aws_secret_access_key="reader-secret", region_name=server.region,
                              config=BotoConfig(signature_version="s3v4", s3={"addressing_style": "path"}))
        with pytest.raises(ClientError, match="AccessDenied"):
            reader.put_object(Bucket="lake", Key="warehouse/new.csv", Body=b"42")
        file_io = spark._jvm.org.apache.iceberg.aws.s3.S3FileIO()
        file_io.initialize(s3_file_io_properties(read_rule.read_only_settings(analysts)))
        metadata = catalog.load_table((namespace, "silver_orders")).metadata_location
        assert file_io.newInputFile(metadata).getLength() > 0  # it reads
        with pytest.raises(Py4JJavaError, match="Access Denied|AccessDenied|403"):
            written = file_io.newOutputFile("s3://lake/warehouse/by-analysts.bin").createOrOverwrite()
            written.write(42)
            written.close()
        file_io.close()
