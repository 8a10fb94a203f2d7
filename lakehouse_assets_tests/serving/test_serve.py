"""`lakehouse serve`: the SQL endpoint BI tools and SQL clients connect to (Spark's Thrift server), with real
clients (PyHive, SQLAlchemy's hive://, beeline): the answers `lakehouse sql` gives, time travel, every write and
every raw table refused with the lake's files and catalog unchanged, a commit seen by the next query, and a query
longer than the endpoint's limit cancelled."""

import concurrent.futures
import contextlib
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg2
import pyarrow as pa
import pytest
import sqlalchemy
from pyhive import hive
from thrift.transport.TTransport import TTransportException

from lakehouse_assets.runtime import jvm_archive
from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.serving import read_rule
from lakehouse_assets.serving.duckdb_sql import query
from lakehouse_assets_tests.conftest import dsn_of
from lakehouse_services.process import free_port

from .test_sql import DAYS, RAW_ROW, _create, _events_of, _hashes, fill_lake

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
BEELINE = Path(sys.executable).parents[1] / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
    "site-packages" / "pyspark" / "bin" / "beeline"

pytestmark = pytest.mark.slow  # an endpoint in a JVM of its own

QUERY_TIMEOUT = 30  # the module's endpoint's limit on a query (s): a small query on a loaded machine is well within
CANARY = f"canary-{uuid.uuid4().hex}"  # a secret in the environment `lakehouse serve` is started with
CACHE_ROWS = 5  # the largest result the module's endpoint keeps: the events table has more rows
MAX_ROWS = 50  # the most rows a client may fetch of a result from the module's endpoint


@pytest.fixture(scope="module")
def served(lake_settings, tmp_path_factory):
    """A namespace with events (one snapshot a day), users and raw tables, and `lakehouse serve` on it."""
    tmp = tmp_path_factory.mktemp("serve")
    namespace = f"t_serve_{uuid.uuid4().hex[:6]}"
    settings = lake_settings.with_(namespace=namespace, project=str(tmp / "no-declaration.yaml"))
    catalog = catalog_for(settings)
    per_day, snapshots = fill_lake(catalog, namespace)
    _create(catalog, namespace, "bronze_events", [RAW_ROW])
    _create(catalog, namespace, "bronze_events_quarantine", [{"reason": "not json", "line": "x@y.z"}])
    port = free_port()
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_NAMESPACE": namespace,
           "LAKEHOUSE_PROJECT": settings.project, "LAKEHOUSE_SERVE_PORT": str(port),
           "LAKEHOUSE_SPARK_MASTER": "local[1]", "LAKEHOUSE_DRIVER_MEMORY": "1g", "LAKEHOUSE_SHUFFLE_PARTITIONS": "1",
           "LAKEHOUSE_SERVE_QUERY_TIMEOUT": str(QUERY_TIMEOUT), "LAKEHOUSE_SERVE_RESULT_CACHE_ROWS": str(CACHE_ROWS),
           "LAKEHOUSE_SERVE_MAX_ROWS": str(MAX_ROWS), "LAKEHOUSE_SERVE_RESULT_CACHE_MB": "1",
           "LAKEHOUSE_SERVE_EXECUTOR_MEMORY": "512m",
           "LAKEHOUSE_FUZZ_CANARY": CANARY, "LAKEHOUSE_PII_KEY": CANARY,
           # A value the endpoint holds in its Spark configuration under a name Spark does not redact (as an S3
           # access key id, `s3.access-key-id`, is)
           "LAKEHOUSE_SPARK_CONF": f"spark.lakehouse.fuzz.held={CANARY}"}
    with endpoint(env, tmp / "serve.log"):
        yield {"settings": settings, "port": port, "env": env, "per_day": per_day, "snapshots": snapshots,
               "catalog": catalog, "log": tmp / "serve.log"}


@contextlib.contextmanager
def endpoint(env: dict, log: Path, command: list[str] | None = None):
    """`lakehouse serve` (or `command`) with these settings, from the moment it says it listens until it is
    stopped."""
    with open(log, "w") as out:  # with SIGTERM's default action, as from a shell (a test before may ignore it)
        server = subprocess.Popen(command or [LAKEHOUSE, "serve"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                  preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while "SQL endpoint (read-only) on" not in log.read_text():
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        yield log.read_text()
    finally:
        server.terminate()
        server.wait(timeout=60)


def _cursor(served, **configuration):
    return hive.connect(host="127.0.0.1", port=served["port"], database=served["settings"].namespace,
                        configuration=configuration or None).cursor()


def _each_refused(cursor, statements: dict[str, str]) -> None:
    """Each statement refused by the endpoint's check, its refusal naming what it says."""
    for statement, named in statements.items():
        with pytest.raises(hive.OperationalError) as refused:
            cursor.execute(statement)
        message = _refusal(refused.value)
        assert "SecurityException: refused: " in message and named in message, (statement, message[:500])


def _refusal(error: BaseException) -> str:
    """What the endpoint said when it refused (a statement's or a session's status)."""
    status = getattr(error.args[0], "status", None) if error.args else None
    return status.errorMessage if status is not None else str(error)


def _rows(served, sql: str) -> list[tuple]:
    cursor = _cursor(served)
    cursor.execute(sql)
    return [tuple(row) for row in cursor.fetchall()]


QUERIES = [
    "SELECT kind, count(*) AS n, sum(event_id) AS ids FROM events GROUP BY kind ORDER BY kind",
    "SELECT u.name, count(*) AS n FROM events e JOIN users u ON e.user_id = u.user_id GROUP BY u.name "
    "ORDER BY u.name",
    "SELECT count(*) AS n FROM events WHERE ts >= '2025-01-02'",
]


def test_pyhive_sqlalchemy_and_beeline_get_the_answers_lakehouse_sql_gives(served, tmp_path):
    settings = served["settings"]
    engine = sqlalchemy.create_engine(f"hive://127.0.0.1:{served['port']}/{settings.namespace}")
    expected = {sql: [tuple(r.values()) for r in query(settings, sql).to_pylist()] for sql in QUERIES}
    for sql in QUERIES:
        assert expected[sql] and _rows(served, sql) == expected[sql], sql
        with engine.connect() as con:
            assert [tuple(r) for r in con.exec_driver_sql(sql)] == expected[sql], sql
    # beeline (one JVM for the three queries: its answers one after the other)
    done = subprocess.run([str(BEELINE), "-u", f"jdbc:hive2://127.0.0.1:{served['port']}/{settings.namespace}",
                           "--silent=true", "--showHeader=false", "--outputformat=csv2", "-e", ";".join(QUERIES)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [re.sub(r"^\d+: jdbc:hive2://\S+> ", "", line) for line in done.stdout.splitlines() if line.strip()]
    assert lines == [",".join(str(v) for v in row) for sql in QUERIES for row in expected[sql]], done.stdout
    # A client's table list (Superset's, SQLAlchemy's inspector) is SHOW TABLES, answered as HiveServer2 does (the
    # names alone): the tables a reader may read, no raw one.
    inspector = sqlalchemy.inspect(engine)
    assert sorted(inspector.get_table_names()) == ["events", "users"]
    assert sorted(_rows(served, "SHOW TABLES")) == [("events",), ("users",)]
    # A table's columns (a BI tool's dataset) are DESCRIBE, answered as HiveServer2 does: events is partitioned by
    # days(ts), which HiveServer2's clients read as the partition column ts (Spark's own rows stop PyHive).
    assert [(c["name"], str(c["type"])) for c in inspector.get_columns("events")] == [
        ("event_id", "BIGINT"), ("ts", "TIMESTAMP"), ("user_id", "BIGINT"), ("kind", "VARCHAR"), ("amount", "DECIMAL")]
    assert inspector.get_indexes("events") == [{"name": "partition", "column_names": ["ts"], "unique": False}]
    assert _rows(served, "DESCRIBE events")[-3:] == [
        ("# Partition Information", "", ""), ("# col_name", "data_type", "comment"), ("ts", "timestamp", "days(ts)")]
    # A JDBC driver's own metadata calls (DBeaver's and Tableau's table tree, beeline's !tables and !columns) list
    # the lakehouse's catalog too, without the raw tables (Spark's Thrift server lists only its session catalog).
    script = tmp_path / "metadata.beeline"
    script.write_text("!tables\n!columns events\n")
    done = subprocess.run([str(BEELINE), "-u", f"jdbc:hive2://127.0.0.1:{served['port']}/{settings.namespace}",
                           "--silent=true", "--showHeader=false", "--outputformat=tsv2", "-f", str(script)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    # (In silent mode beeline writes "null" for each command, without a line break.)
    rows = [re.sub(r"^(null)+", "", line).split("\t") for line in done.stdout.splitlines()]
    rows = [r for r in rows if len(r) > 3 and r[1] == settings.namespace]  # the catalog holds other tests' too
    assert sorted((r[1], r[2], r[3]) for r in rows if len(r) == 10) == [
        (settings.namespace, "events", "TABLE"), (settings.namespace, "users", "TABLE")], done.stdout
    assert [(r[3], r[5], r[16]) for r in rows if len(r) == 23] == [
        ("event_id", "BIGINT", "1"), ("ts", "TIMESTAMP", "2"), ("user_id", "BIGINT", "3"), ("kind", "STRING", "4"),
        ("amount", "DECIMAL(10,2)", "5")], done.stdout


def test_time_travel_by_snapshot_id_and_by_time(served):
    first, second = served["snapshots"][0], served["snapshots"][1]
    on_first = len(served["per_day"][DAYS[0]])
    assert _rows(served, f"SELECT count(*) FROM events VERSION AS OF {first.snapshot_id}") == [(on_first,)]
    at = dt.datetime.fromtimestamp(second.timestamp_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    expected = on_first + len(served["per_day"][DAYS[1]])
    assert _rows(served, f"SELECT count(*) FROM events TIMESTAMP AS OF '{at}'") == [(expected,)]
    # The snapshot ids as asset metadata gives them, read from the table's own history.
    ids = [row[0] for row in _rows(served, f"SELECT snapshot_id FROM {served['settings'].namespace}.events.snapshots "
                                           "ORDER BY committed_at")]
    assert ids == [s.snapshot_id for s in served["snapshots"]]


def test_every_write_and_change_is_refused_and_the_lake_is_left_as_it_was(served, tmp_path):
    settings = served["settings"]
    warehouse = settings.local_path(settings.warehouse)
    before = _hashes(warehouse, Path(settings.catalog.path))
    out = tmp_path / "out"
    first = served["snapshots"][0].snapshot_id
    statements = {
        "INSERT INTO events SELECT * FROM events": "AppendData",
        "INSERT OVERWRITE events SELECT * FROM events": "OverwriteByExpression",
        "MERGE INTO events t USING users s ON t.user_id = s.user_id WHEN MATCHED THEN DELETE": "ReplaceData",
        "UPDATE events SET kind = 'x'": "ReplaceData",
        "DELETE FROM events WHERE event_id = 100": "ReplaceData",
        "DELETE FROM events": "DeleteFromTable",
        "CREATE TABLE made (a INT)": "CreateTable",
        "CREATE TABLE copied AS SELECT * FROM events": "CreateTableAsSelect",
        "DROP TABLE users": "DropTable",
        "ALTER TABLE events ADD COLUMN extra STRING": "AddColumns",
        "ALTER TABLE events SET TBLPROPERTIES ('k' = 'v')": "SetTableProperties",
        f"CALL {settings.catalog_name}.system.rollback_to_snapshot('{settings.namespace}.events', {first})": "Call",
        f"EXPLAIN CALL {settings.catalog_name}.system.rollback_to_snapshot('{settings.namespace}.events', {first})": "Call",
        f"EXECUTE IMMEDIATE \"CALL {settings.catalog_name}.system.rollback_to_snapshot('{settings.namespace}.events', "
        f"{first})\"": "UnresolvedExecuteImmediate",
        "EXECUTE IMMEDIATE 'DROP TABLE users'": "UnresolvedExecuteImmediate",
        "BEGIN DROP TABLE users; END": "CompoundBody: SQL scripting",
        f"INSERT OVERWRITE DIRECTORY '{out}' USING parquet SELECT * FROM events": "InsertIntoDataSourceDir",
        "CACHE TABLE events": "CacheTable",
        "ADD JAR /tmp/nothing.jar": "AddJarsCommand",
        "CREATE TEMPORARY VIEW v AS SELECT * FROM bronze_events": "CreateViewCommand",
        f"SET spark.sql.catalog.{settings.catalog_name}.uri=jdbc:sqlite:/tmp/other.db": "setting spark.sql.catalog",
        "SET spark.sql.runSQLOnFiles=true": "setting spark.sql.runSQLOnFiles",
        "SET spark.sql.thriftServer.incrementalCollect=false": "setting spark.sql.thriftServer.incrementalCollect",
        "SET spark.sql.thriftServer.queryTimeout=0": "setting spark.sql.thriftServer.queryTimeout",
        "SELECT reflect('java.lang.System', 'exit', 0)": "reflect calls a Java method",
    }
    cursor = _cursor(served)
    _each_refused(cursor, statements)
    assert _hashes(warehouse, Path(settings.catalog.path)) == before
    assert not out.exists()
    # Reading a file by its path is no table: SQL on files is off.
    data_file = next((warehouse / settings.namespace / "events" / "data").rglob("*.parquet"))
    with pytest.raises(hive.OperationalError, match="TABLE_OR_VIEW_NOT_FOUND"):
        cursor.execute(f"SELECT * FROM parquet.`{data_file}`")
    # What an endpoint may be asked: settings read, harmless ones set, SHOW and DESCRIBE answered.
    cursor.execute("SET spark.sql.shuffle.partitions=3")
    assert _rows(served, "SHOW TABLES")
    cursor.execute("DESCRIBE events")
    assert [r[0] for r in cursor.fetchall()][:5] == ["event_id", "ts", "user_id", "kind", "amount"]
    assert _rows(served, "SELECT count(*) FROM events") == [(sum(map(len, served["per_day"].values())),)]


def _jvm_file(served, name: str, main_class: str = "org.apache.spark.deploy.SparkSubmit") -> str:
    """A file of /proc of the endpoint's JVM: the process started with its Thrift port in its settings, and not its
    executor's (given the port too, among the driver's settings; after a restart its pid can be the lower one), or
    with `main_class` its executor's."""
    wanted = f"hive.server2.thrift.port={served['port']}"
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().decode(errors="replace") if proc.name.isdigit() else ""
            if wanted in command and main_class in command.split("\0"):
                return (proc / name).read_bytes().decode(errors="replace")
        except OSError:
            continue
    raise AssertionError(f"no JVM with {wanted}")


def _jvm_environment(served) -> str:
    return _jvm_file(served, "environ")


def _jvm_status(served) -> str:
    return _jvm_file(served, "status")


def test_what_reading_is_not_made_of_is_refused_by_name_before_it_runs(served, tmp_path):
    """The analyst's ways out of a query that a list of writes missed: a script, a file relation, a raw table's
    description, a function that reaches out of the JVM, the server's settings read or bounds passed."""
    settings = served["settings"]
    warehouse = settings.local_path(settings.warehouse)
    before = _hashes(warehouse, Path(settings.catalog.path))
    probe = tmp_path / "probe"
    statements = {
        f"SELECT TRANSFORM(1) USING 'touch {probe}' AS (line STRING)": "ScriptTransformation: runs a process",
        f"SELECT TRANSFORM(event_id) USING 'touch {probe}' FROM events": "ScriptTransformation",
        "DESCRIBE TABLE EXTENDED bronze_events": "bronze_events holds raw data",
        "DESCRIBE bronze_events_quarantine": "bronze_events_quarantine holds raw data",
        "SHOW CREATE TABLE bronze_events": "bronze_events holds raw data",
        "SHOW TBLPROPERTIES bronze_events": "bronze_events holds raw data",
        "SHOW COLUMNS IN bronze_events": "bronze_events holds raw data",
        "LIST JARS": "ListJarsCommand",
        "SELECT java_method('java.lang.System', 'getenv', 'LAKEHOUSE_FUZZ_CANARY')": "function java_method or reflect calls",
        "SELECT xpath_string('<a>x</a>', 'a')": "function xpath_string parses XML",
        "SELECT try_reflect('java.lang.System', 'getenv', 'LAKEHOUSE_FUZZ_CANARY')": "function try_reflect calls",
        # A subquery in a time travel is evaluated while the statement is analysed, before the check sees it.
        "SELECT * FROM events TIMESTAMP AS OF (SELECT CAST(reflect('java.lang.System', 'exit', 0) AS TIMESTAMP))":
            "a subquery in TIMESTAMP AS OF",
        "SELECT * FROM events TIMESTAMP AS OF (SELECT CAST(max(email) AS TIMESTAMP) FROM bronze_events)":
            "a subquery in TIMESTAMP AS OF",
        "SET": "SET lists every setting",
        "SET -v": "may not be read",
        f"SET spark.sql.catalog.{settings.catalog_name}.uri": "may not be read",
        "SET spark.lakehouse.serve.raw=true": "may not be changed",
        "SET spark.lakehouse.serve.rawPrefixes=nothing_": "may not be changed",
        "SET spark.sql.variable.substitute=true": "may not be changed",
        "SET spark.sql.shuffle.partitions=100000": "takes a whole number from 1 64",
    }
    cursor = _cursor(served)
    _each_refused(cursor, statements)
    assert not probe.exists() and _hashes(warehouse, Path(settings.catalog.path)) == before
    # Variables are not substituted: the text is the text, no environment variable's value.
    assert _rows(served, "SELECT '${env:LAKEHOUSE_FUZZ_CANARY}', '${system:user.dir}'") == [
        ("${env:LAKEHOUSE_FUZZ_CANARY}", "${system:user.dir}")]
    # The endpoint's JVM holds none of the pipeline's keys: started with an environment of its own.
    environment = _jvm_environment(served)
    assert CANARY not in environment and "LAKEHOUSE_PII_KEY" not in environment and "PATH=" in environment
    # Reading goes on: a setting on the list within its bounds, a query over functions the list allows.
    cursor.execute("SET spark.sql.shuffle.partitions=3")
    assert _rows(served, "SELECT kind, count(*), max(upper(kind)), sum(amount) FROM events GROUP BY kind "
                         "ORDER BY kind LIMIT 1")


def test_a_session_cannot_reconfigure_the_server_when_it_opens(served):
    """HiveServer2 applies a session's opening settings itself, past SET: each passes the same list here."""
    namespace = served["settings"].namespace
    openings = {
        "set:hiveconf:spark.sql.runSQLOnFiles": ("true", "setting spark.sql.runSQLOnFiles may not be changed"),
        "set:hiveconf:spark.lakehouse.serve.raw": ("true", "setting spark.lakehouse.serve.raw may not"),
        "set:hivevar:spark.lakehouse.serve.exposed": ("bronze_events", "setting spark.lakehouse.serve.exposed"),
        "set:hiveconf:spark.lakehouse.serve.rawSuffixes": ("_none", "setting spark.lakehouse.serve.rawSuffixes"),
        "set:system:hive.server2.custom.authentication.class": (
            "org.apache.hive.service.auth.AnonymousAuthenticationProviderImpl", "may not open with set:system:"),
        "set:env:PATH": ("/tmp", "may not open with set:env:PATH"),
        "hive.server2.proxy.user": ("root", "may not open with hive.server2.proxy.user"),
        "use:database": (f"{namespace}; DROP TABLE events", "a session's database is a namespace's name"),
        "set:hiveconf:spark.sql.shuffle.partitions": ("100000", "takes a whole number from 1 64"),
    }
    for key, (value, said) in openings.items():
        with pytest.raises(hive.OperationalError) as refused:
            _cursor(served, **{key: value})
        assert "refused: " in _refusal(refused.value) and said in _refusal(refused.value), (key, _refusal(
            refused.value))
    # A JDBC URL's settings are sent the same way (beeline, DBeaver): refused as well.
    done = subprocess.run([str(BEELINE), "-u", f"jdbc:hive2://127.0.0.1:{served['port']}/{namespace}"
                           "?spark.sql.runSQLOnFiles=true", "-e", "SELECT * FROM text.`/etc/passwd`"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode != 0 and "root:" not in done.stdout
    assert "setting spark.sql.runSQLOnFiles may not be changed" in done.stdout + done.stderr
    # What the list allows opens, and shows; raw tables stay refused in every session.
    cursor = _cursor(served, **{"set:hiveconf:spark.sql.shuffle.partitions": "3"})
    cursor.execute("SET spark.sql.shuffle.partitions")
    assert cursor.fetchall() == [("spark.sql.shuffle.partitions", "3")]
    with pytest.raises(hive.OperationalError, match="holds raw data"):
        cursor.execute("SELECT count(*) FROM bronze_events")


def test_the_endpoints_jvm_collects_for_short_pauses_while_clients_wait(served):
    """G1, not the parallel collector of a run's JVM (runtime/test_jvm_archive.py): the endpoint answers clients."""
    options = _jvm_file(served, "cmdline").split("\0")
    assert "-XX:+UseG1GC" in options and "-XX:+UseParallelGC" not in options


def test_the_endpoints_jvm_maps_the_installations_class_data_archive(served):
    """The endpoint's jars are on its driver's class path after Spark's own, so the class path the archive was made
    with (a run's) is its beginning and the JVM maps the archive, not only the JDK's own (a driver whose class path
    began with the jars started in 11 s where it now starts in 7); its executor's JVM maps it too."""
    archive = jvm_archive.archive_file()
    assert archive is not None and archive.is_file(), "make setup builds the archive"
    assert str(archive) in _jvm_file(served, "maps")
    assert str(archive) in _jvm_file(served, "maps", "org.apache.spark.executor.CoarseGrainedExecutorBackend")
    arguments = _jvm_file(served, "cmdline").split("\0")
    class_path = arguments[arguments.index("-cp") + 1].split(os.pathsep)
    spark_jars = next(i for i, entry in enumerate(class_path) if entry.endswith(f"jars{os.sep}*"))
    ours = next(i for i, entry in enumerate(class_path) if Path(entry).name.startswith("lakehouse-java-"))
    assert spark_jars < ours, class_path


def test_queries_longer_than_the_limit_are_cancelled_with_the_reason_on_the_driver_and_in_tasks(served):
    """Two queries at once, each past the endpoint's limit: a regular expression the optimiser folds on the driver
    (it backtracks for hours and never looks at an interrupt: the statement's thread is stopped), and a result that
    streams (incremental collect: the job that computes it runs while the client fetches). Each is cut at the
    limit with the reason, not hours later, and the endpoint answers the next query."""
    def timed(sql: str) -> tuple[float, BaseException | None]:
        started = time.monotonic()
        try:
            cursor = _cursor(served)
            cursor.execute(sql)
            cursor.fetchall()
        except Exception as error:  # noqa: BLE001 - what the client got is asserted below
            return time.monotonic() - started, error
        return time.monotonic() - started, None

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        on_driver = pool.submit(timed, f"SELECT '{'a' * 60}!' rlike '(.*a){{20}}$'")  # C(60, 20) ways to fail
        in_tasks = pool.submit(timed, "SELECT max(hash(id)) FROM range(0, 1000000000000)")  # hours on one core
        for future, slack in ((on_driver, 60), (in_tasks, 30)):
            took, error = future.result()
            said = _refusal(error) if isinstance(error, hive.OperationalError) else str(error)
            assert f"longer than the SQL endpoint's limit of {QUERY_TIMEOUT} s" in said, said[:2000]
            assert QUERY_TIMEOUT <= took < QUERY_TIMEOUT + slack, (took, said[:500])
    assert _rows(served, "SELECT count(*) FROM events WHERE kind IS NOT NULL AND event_id > 1")[0][0] > 0


def test_a_query_that_runs_out_of_memory_fails_alone_and_the_endpoint_goes_on(served):
    """Its tasks run in the endpoint's own executor (512 MiB here), not in the endpoint's JVM: the executor runs out
    of memory and is started again, the query fails at once with the reason (not with a retry refused by the
    executor shutting down), and another client's session goes on."""
    other = _cursor(served)
    other.execute("SELECT count(*) FROM events WHERE event_id > 3")
    before = other.fetchall()
    with pytest.raises(hive.OperationalError) as failed:
        _rows(served, "SELECT max(length(repeat(kind, 300000000))) FROM events WHERE event_id > 0")
    assert "OutOfMemoryError" in _refusal(failed.value) or "exited with code 52" in _refusal(failed.value), \
        _refusal(failed.value)[:2000]
    # The other session goes on. Its next query waits for the executor to be started again; on a slow machine that
    # can take longer than the endpoint's query time limit, and then the session is refused that query alone.
    deadline = time.monotonic() + 120
    while True:
        try:
            other.execute("SELECT count(*) FROM events WHERE event_id > 3")
            break
        except hive.OperationalError as late:
            if "ran longer than the SQL endpoint's limit" not in _refusal(late) or time.monotonic() > deadline:
                raise
    assert other.fetchall() == before and _rows(served, "SELECT count(*) FROM users") == [(3,)]


def test_the_result_cache_is_bounded_in_bytes_as_well_as_rows(served):
    """The module's endpoint keeps 1 MiB in all, a result of an eighth of it at most: one wide row is not kept."""
    wide = "SELECT repeat(kind, 100000) AS wide FROM events WHERE event_id = 100"
    assert _rows(served, wide) == _rows(served, wide)
    assert _cache_said(served, wide) == ["miss", "miss"]
    narrow = "SELECT repeat(kind, 10) AS narrow FROM events WHERE event_id = 100"
    assert _rows(served, narrow) == _rows(served, narrow) and _cache_said(served, narrow) == ["miss", "hit"]


def test_raw_tables_are_refused_however_they_are_named(served):
    namespace = served["settings"].namespace
    cursor = _cursor(served)
    for sql in ["SELECT * FROM bronze_events", "SELECT count(*) FROM bronze_events_quarantine",
                f"SELECT * FROM {namespace}.bronze_events.files",
                "SELECT count(*) FROM events WHERE event_id IN (SELECT event_id FROM bronze_events)",
                "WITH raw AS (SELECT * FROM bronze_events) SELECT count(*) FROM raw",
                f"SELECT e.kind FROM events e JOIN {served['settings'].catalog_name}.{namespace}.bronze_events b "
                "ON e.event_id = b.event_id"]:
        with pytest.raises(hive.OperationalError) as refused:
            cursor.execute(sql)
        assert "holds raw data and is not exposed" in refused.value.args[0].status.errorMessage, sql


def test_a_commit_shows_in_the_next_query_and_check_says_it_answers(served):
    events = served["catalog"].load_table((served["settings"].namespace, "events"))
    before = _rows(served, "SELECT count(*) FROM events")[0][0]
    day = dt.date(2025, 1, 9)
    events.append(pa.Table.from_pylist(_events_of(day, start_id=900, count=5), schema=events.schema().as_arrow()))
    assert _rows(served, "SELECT count(*) FROM events") == [(before + 5,)]

    done = subprocess.run([LAKEHOUSE, "serve", "--check"], env=served["env"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "answers (Spark 4.1" in done.stdout, (done.stdout, done.stderr)
    nobody = subprocess.run([LAKEHOUSE, "serve", "--check", "--port", str(free_port())], env=served["env"],
                            capture_output=True, text=True, timeout=120)
    assert nobody.returncode == 1 and "no SQL endpoint answers" in nobody.stdout


def _cache_said(served, sql: str) -> list[str]:
    """What the endpoint's result cache said of each run of this statement, in order (hit, shared, miss), and of
    each time it computed the statement's new answer on its own (refresh)."""
    said = re.findall(r"result cache (\w+) \(\d+ ms\): (.*)", served["log"].read_text())
    return [how for how, statement in said if statement == sql]


def _watched(served, sql: str) -> str:
    """How the endpoint watches this statement once asked again (how a client's ask makes its key), waited for."""
    deadline = time.monotonic() + 60
    while True:
        said = dict((statement, how) for how, statement in re.findall(r"result cache: watched \((.*?)\): (.*)",
                                                                      served["log"].read_text()))
        if sql in said:
            return said[sql]
        assert time.monotonic() < deadline, served["log"].read_text()[-3000:]
        time.sleep(0.2)


def test_a_repeated_query_is_answered_from_the_cache_until_a_table_it_reads_changes(served):
    namespace = served["settings"].namespace
    sql = "SELECT kind, count(*) AS n, sum(amount) AS amount FROM events WHERE event_id > 0 GROUP BY kind ORDER BY kind"
    first = _rows(served, sql)
    assert _rows(served, sql) == first and _cache_said(served, sql) == ["miss", "hit"]
    # Time travel is kept under the snapshot it reads: the same answer, a hit.
    old = f"SELECT count(*) FROM events VERSION AS OF {served['snapshots'][0].snapshot_id} WHERE event_id > 0"
    assert _rows(served, old) == _rows(served, old) == [(len(served["per_day"][DAYS[0]]),)]
    assert _cache_said(served, old) == ["miss", "hit"]
    # Both asked again, so watched: the query of the current snapshot is answered by its table's look-up alone,
    # the one travelling to an older snapshot is analysed at each ask.
    assert _watched(served, sql) == "asked again, its key made by its tables' look-ups"
    assert _watched(served, old) == "asked again, analysed"
    assert _rows(served, sql) == first and _rows(served, old) == [(len(served["per_day"][DAYS[0]]),)]
    assert _cache_said(served, sql) == ["miss", "hit", "watched"] and _cache_said(served, old) == ["miss", "hit", "hit"]

    # A commit to the table (as a run's, the stream's or a forget's): the next query computes the new answer.
    events = served["catalog"].load_table((namespace, "events"))
    events.append(pa.Table.from_pylist(_events_of(dt.date(2025, 1, 10), start_id=950, count=2),
                                       schema=events.schema().as_arrow()))
    after = _rows(served, sql)
    assert sum(n for _, n, _ in after) == sum(n for _, n, _ in first) + 2
    assert after == [tuple(r.values()) for r in query(served["settings"], sql).to_pylist()]
    # Computed again by this ask, or (the query being asked again) by the endpoint when the commit landed
    said = _cache_said(served, sql)
    assert said[:3] == ["miss", "hit", "watched"] and [how for how in said[3:] if how != "refresh"] in (
        ["miss"], ["shared"], ["hit"], ["watched"])

    # Never kept: a result larger than the limit (every row still answered), and what depends on the moment.
    every = "SELECT event_id FROM events WHERE event_id > 0 ORDER BY event_id"
    ids = _rows(served, every)
    assert len(ids) > CACHE_ROWS and _rows(served, every) == ids and _cache_said(served, every) == ["miss", "miss"]
    now = "SELECT count(*), max(current_timestamp()) FROM events WHERE event_id > 0"
    assert _rows(served, now)[0][1] != _rows(served, now)[0][1] and _cache_said(served, now) == []


def test_a_query_asked_again_has_its_new_answer_computed_when_a_commit_lands_before_anyone_asks(served):
    """A dashboard's query (asked again) is watched: when a table it reads takes a commit, the endpoint computes
    the new answer on its own, and the next client is answered from the cache with it, the answer lakehouse sql
    reads after the commit. A query asked once is not computed again."""
    sql = "SELECT kind, count(*) AS n, max(event_id) AS last FROM events WHERE event_id > 1 GROUP BY kind ORDER BY kind"
    once = "SELECT kind, count(*) AS n FROM events WHERE event_id > 2 GROUP BY kind ORDER BY kind"
    first = _rows(served, sql)
    assert _rows(served, sql) == first and _rows(served, once) and _cache_said(served, sql) == ["miss", "hit"]
    _watched(served, sql)

    events = served["catalog"].load_table((served["settings"].namespace, "events"))
    events.append(pa.Table.from_pylist(_events_of(dt.date(2025, 1, 11), start_id=970, count=3),
                                       schema=events.schema().as_arrow()))
    deadline = time.monotonic() + 120
    while sql not in re.findall(r"result cache refresh \(\d+ ms\): (.*)", served["log"].read_text()):
        assert time.monotonic() < deadline, served["log"].read_text()[-3000:]
        time.sleep(0.5)
    after = _rows(served, sql)
    assert after != first and after == [tuple(r.values()) for r in query(served["settings"], sql).to_pylist()]
    assert max(last for _, _, last in after) == 972
    assert _cache_said(served, sql) == ["miss", "hit", "refresh", "watched"]
    # The table it reads is held in memory, and was brought to the commit (its appended file put over it) before
    # the new answer was computed from it.
    held = re.findall(r"result cache: \S+\.events held in memory at snapshot (\d+) \((\d+) rows",
                      served["log"].read_text())
    assert held and held[-1] == (str(events.current_snapshot().snapshot_id),
                                 str(query(served["settings"], "SELECT count(*) AS n FROM events")["n"][0].as_py()))
    assert once not in re.findall(r"result cache refresh \(\d+ ms\): (.*)", served["log"].read_text())


def test_a_result_larger_than_the_row_limit_is_an_error_not_a_cut(served):
    """Whether the endpoint answers the query itself (a query it may keep) or Spark's operation does (rand())."""
    assert len(_rows(served, f"SELECT id FROM range(0, {MAX_ROWS})")) == MAX_ROWS
    for sql in [f"SELECT id FROM range(0, {MAX_ROWS + 1})", f"SELECT id, rand() FROM range(0, {MAX_ROWS * 3})"]:
        with pytest.raises(hive.OperationalError) as refused:
            _rows(served, sql)
        assert f"more than {MAX_ROWS} rows, the SQL endpoint's limit" in refused.value.args[0].status.errorMessage
    assert _rows(served, "SELECT count(*) FROM range(0, 1000)") == [(1000,)]  # the endpoint goes on


def test_both_doors_follow_the_raw_table_rule_changed_in_read_rule_alone_and_once_users_are_added_clients_sign_in(
        lake_settings, tmp_path, monkeypatch):
    """Two guarantees on one endpoint (each a JVM of its own to start). The rule changed in serving/read_rule.py and
    nowhere else (a prefix added, the suffix dropped): `lakehouse sql` and an endpoint started with it both refuse
    the table that is now raw and both read the one no longer raw. Then users added while that endpoint runs: from
    the next connection on, every client signs in with its password."""
    home = tmp_path / "home"
    namespace = f"t_rule_{uuid.uuid4().hex[:6]}"
    settings = lake_settings.with_(home=home, catalog_uri="", warehouse="", namespace=namespace,
                                   project=str(tmp_path / "none.yaml"))
    catalog = catalog_for(settings)
    catalog.create_namespace(namespace)
    _create(catalog, namespace, "scratch_events", [{"note": "raw by the changed rule"}])
    _create(catalog, namespace, "events_quarantine", [{"note": "raw by today's rule"}])
    _create(catalog, namespace, "bronze_events", [RAW_ROW])
    with pytest.raises(ValueError, match="table 'events_quarantine' is raw data"):
        query(settings, "SELECT * FROM events_quarantine")
    assert query(settings, "SELECT note FROM scratch_events").to_pylist() == [{"note": "raw by the changed rule"}]

    changed = {"RAW_PREFIXES": ("bronze_", "scratch_"), "RAW_SUFFIXES": ()}
    for name, value in changed.items():
        monkeypatch.setattr(read_rule, name, value)
    for table in ("scratch_events", "bronze_events"):
        with pytest.raises(ValueError, match=f"table '{table}' is raw data"):
            query(settings, f"SELECT * FROM {table}")
    assert query(settings, "SELECT note FROM events_quarantine").to_pylist() == [{"note": "raw by today's rule"}]

    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_NAMESPACE": namespace,
           "LAKEHOUSE_PROJECT": settings.project, "LAKEHOUSE_SPARK_MASTER": "local[1]",
           "LAKEHOUSE_DRIVER_MEMORY": "1g", "LAKEHOUSE_SHUFFLE_PARTITIONS": "1",
           "LAKEHOUSE_SERVE_EXECUTOR_MEMORY": "512m"}
    # Beyond this machine only with sign-in: refused before any JVM starts.
    wide = subprocess.run([LAKEHOUSE, "serve", "--host", "0.0.0.0"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert wide.returncode == 2 and "only with sign-in" in wide.stderr, wide.stderr

    port = free_port()
    env["LAKEHOUSE_SERVE_PORT"] = str(port)
    users = home / "secrets" / "sql-endpoint-users"
    # The endpoint's process changes the same names before `lakehouse serve` runs.
    script = "\n".join(["import sys", "from lakehouse_assets.serving import read_rule",
                        *(f"read_rule.{name} = {value!r}" for name, value in changed.items()),
                        "from lakehouse_assets.cli import main", "sys.exit(main(['serve']))"])
    with endpoint(env, tmp_path / "serve.log", [sys.executable, "-c", script]) as said:
        assert "sign-in" not in said  # no user yet: on this machine alone, any client
        anyone = hive.connect(host="127.0.0.1", port=port, database=namespace).cursor()
        for table in ("scratch_events", "bronze_events"):
            with pytest.raises(hive.OperationalError, match="holds raw data and is not exposed"):
                anyone.execute(f"SELECT * FROM {table}")
        anyone.execute("SELECT note FROM events_quarantine")
        assert anyone.fetchall() == [("raw by today's rule",)]
        anyone.execute("SHOW TABLES")
        assert anyone.fetchall() == [("events_quarantine",)]

        anyone.execute("SELECT 1 + 1")
        assert anyone.fetchall() == [(2,)]
        anyone.execute("SELECT 1 + 1")  # the endpoint's first query asked again: its settings and key are the same
        assert anyone.fetchall() == [(2,)]
        said = re.findall(r"result cache (\w+) \(\d+ ms\): SELECT 1 \+ 1$", (tmp_path / "serve.log").read_text(), re.M)
        assert said == ["miss", "hit"]

        # Users added while the endpoint runs: from the next connection on, every client signs in.
        for name, password in [("ann", "correct horse"), ("cat", "battery staple")]:
            added = subprocess.run([LAKEHOUSE, "serve", "--add-user", name], input=password + "\n", env=env,
                                   capture_output=True, text=True, timeout=120)
            assert added.returncode == 0, added.stderr
        assert users.stat().st_mode & 0o777 == 0o600
        assert "correct horse" not in users.read_text() and users.read_text().startswith("ann:pbkdf2_sha256$600000$")
        with pytest.raises(TTransportException):
            hive.connect(host="127.0.0.1", port=port, database=settings.namespace)  # no password at all

        signed = hive.connect(host="127.0.0.1", port=port, database=settings.namespace, auth="CUSTOM",
                              username="ann", password="correct horse").cursor()
        signed.execute("SELECT 1 + 1")
        assert signed.fetchall() == [(2,)]
        # A session that asks to switch sign-in off is refused, and sign-in stays on for everyone.
        with pytest.raises(hive.OperationalError, match="may not open with set:system:"):
            hive.connect(host="127.0.0.1", port=port, database=settings.namespace, auth="CUSTOM", username="ann",
                         password="correct horse", configuration={
                             "set:system:hive.server2.custom.authentication.class":
                             "org.apache.hive.service.auth.AnonymousAuthenticationProviderImpl"})
        for user, password in [("ann", "wrong horse"), ("bob", "correct horse"), ("nobody", "x" * 12)]:
            with pytest.raises(TTransportException):  # the server closes the connection: no session
                hive.connect(host="127.0.0.1", port=port, database=settings.namespace, auth="CUSTOM",
                             username=user, password=password)

        # Failed sign-ins are limited per user: past five a minute, even the right password waits; others not.
        for _ in range(5):
            with pytest.raises(TTransportException):
                hive.connect(host="127.0.0.1", port=port, database=settings.namespace, auth="CUSTOM",
                             username="cat", password="wrong staple")
        with pytest.raises(TTransportException):
            hive.connect(host="127.0.0.1", port=port, database=settings.namespace, auth="CUSTOM",
                         username="cat", password="battery staple")
        signed.execute("SELECT 2 + 2")  # another user's sessions go on
        assert signed.fetchall() == [(4,)]

        check = subprocess.run([LAKEHOUSE, "serve", "--check"], capture_output=True, text=True, timeout=120,
                               env={**env, "LAKEHOUSE_SERVE_USER": "ann", "LAKEHOUSE_SERVE_PASSWORD": "correct horse"})
        assert check.returncode == 0 and "answers" in check.stdout, (check.stdout, check.stderr)
        refused = subprocess.run([LAKEHOUSE, "serve", "--check"], env=env, capture_output=True, text=True,
                                 timeout=120)
        assert refused.returncode == 1 and "sign-in refused" in refused.stdout, refused.stdout

        # And per address: names guessed from one address, twenty failures a minute, then no sign-in from it.
        for n in range(20):
            with pytest.raises(TTransportException):
                hive.connect(host="127.0.0.1", port=port, database=settings.namespace, auth="CUSTOM",
                             username=f"guess{n}", password="x" * 12)
        with pytest.raises(TTransportException):
            hive.connect(host="127.0.0.1", port=port, database=settings.namespace, auth="CUSTOM",
                         username="ann", password="correct horse")
        signed.execute("SELECT 3 + 3")  # a session opened before goes on
        assert signed.fetchall() == [(6,)]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root starts the endpoint as another user (CI runs as root)")
def test_started_by_root_the_endpoint_runs_as_its_own_user_who_can_write_nothing_of_the_lake(lake_settings):
    """LAKEHOUSE_SERVE_OS_USER=nobody: the JVM answering queries is nobody's, reads the users file through its group,
    and that user can neither write the warehouse or the catalog nor read the pipeline's PII key."""
    home = Path(tempfile.mkdtemp(dir="/tmp", prefix="lakehouse-serve-user-"))
    try:
        home.chmod(0o755)  # passable, as a lakehouse home's parents are; its files as the pipeline writes them
        settings = lake_settings.with_(home=home, catalog_uri="", warehouse="")
        per_day, _ = fill_lake(catalog_for(settings), settings.namespace)
        key = home / "secrets" / "pii.key"
        key.parent.mkdir(mode=0o700)
        key.write_text(CANARY)
        key.chmod(0o600)
        env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_NAMESPACE": settings.namespace,
               "LAKEHOUSE_PROJECT": str(home / "none.yaml"), "LAKEHOUSE_SPARK_MASTER": "local[1]",
               "LAKEHOUSE_DRIVER_MEMORY": "1g", "LAKEHOUSE_SERVE_EXECUTOR_MEMORY": "512m",
               "LAKEHOUSE_SERVE_PORT": str(free_port()), "LAKEHOUSE_SERVE_OS_USER": "nobody"}
        added = subprocess.run([LAKEHOUSE, "serve", "--add-user", "ann"], input="correct horse\n", env=env,
                               capture_output=True, text=True, timeout=120)
        assert added.returncode == 0, added.stderr
        warehouse = settings.local_path(settings.warehouse)
        before = _hashes(warehouse, Path(settings.catalog.path))
        installation = [BEELINE.parent, BEELINE.parents[1] / "jars"]  # pyspark's, which its own Spark home links to
        owners = [(p.stat().st_uid, p.stat().st_gid) for p in installation]
        with endpoint(env, home / "serve.log"):
            port = int(env["LAKEHOUSE_SERVE_PORT"])
            cursor = hive.connect(host="127.0.0.1", port=port, database=settings.namespace, auth="CUSTOM",
                                  username="ann", password="correct horse").cursor()
            cursor.execute("SELECT count(*) FROM events")
            assert cursor.fetchall() == [(sum(map(len, per_day.values())),)]
            status = _jvm_status({"port": port})
            assert re.search(r"^Uid:\s+65534\s", status, re.M), status
        for command in [["touch", str(warehouse / "probe")], ["touch", str(Path(settings.catalog.path))],
                        ["cat", str(key)], ["touch", str(home / "secrets" / "probe")]]:
            done = subprocess.run(["runuser", "-u", "nobody", "--", *command], capture_output=True, text=True)
            assert done.returncode != 0 and CANARY not in done.stdout, command
        assert _hashes(warehouse, Path(settings.catalog.path)) == before
        assert [(p.stat().st_uid, p.stat().st_gid) for p in installation] == owners  # the installation stays root's
        users = home / "secrets" / "sql-endpoint-users"
        assert users.stat().st_mode & 0o777 == 0o640 and key.stat().st_mode & 0o777 == 0o600
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_on_a_postgresql_catalog_the_endpoint_reads_as_a_role_that_may_only_read(lake_settings, tmp_path,
                                                                                   pg_catalog_uri, pg_admin_dsn):
    namespace = f"t_serve_pg_{uuid.uuid4().hex[:6]}"
    admin_uri = pg_catalog_uri.sqlalchemy_url.replace("+psycopg2", "")
    settings = lake_settings.with_(home=tmp_path / "home", catalog_uri=admin_uri, warehouse="", namespace=namespace)
    catalog = catalog_for(settings)
    catalog.create_namespace(namespace)
    _create(catalog, namespace, "gold_totals", [{"day": "2025-01-01", "events": 7}, {"day": "2025-01-02", "events": 9}])
    reader = f"reader_{uuid.uuid4().hex[:6]}"
    # The role the docs give the endpoint: it may read the catalog's tables and nothing else.
    db = psycopg2.connect(dsn_of(pg_admin_dsn, pg_catalog_uri.database))
    db.autocommit = True
    with db.cursor() as cur:
        cur.execute(f"CREATE ROLE {reader} LOGIN")
        cur.execute(f"GRANT SELECT ON iceberg_tables, iceberg_namespace_properties TO {reader}")
    reader_uri = (f"postgresql://{reader}@{pg_catalog_uri.host}:{pg_catalog_uri.port}/{pg_catalog_uri.database}")
    port = free_port()
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_NAMESPACE": namespace,
           "LAKEHOUSE_CATALOG_URI": admin_uri, "LAKEHOUSE_SERVE_CATALOG_URI": reader_uri,
           "LAKEHOUSE_PROJECT": str(tmp_path / "none.yaml"), "LAKEHOUSE_SERVE_PORT": str(port),
           "LAKEHOUSE_SPARK_MASTER": "local[1]", "LAKEHOUSE_DRIVER_MEMORY": "1g"}
    with endpoint(env, tmp_path / "serve.log"):
        cursor = hive.connect(host="127.0.0.1", port=port, database=namespace).cursor()
        cursor.execute("SELECT sum(events) FROM gold_totals")
        assert cursor.fetchall() == [(16,)]
        with db.cursor() as cur:  # the endpoint's sessions are the reader's
            cur.execute("SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = %s AND usename = %s",
                        (pg_catalog_uri.database, reader))
            assert cur.fetchall() == [(reader,)]
    parts = {**dict(kv.split("=", 1) for kv in dsn_of(pg_admin_dsn, pg_catalog_uri.database).split()), "user": reader}
    as_reader = psycopg2.connect(" ".join(f"{k}={v}" for k, v in parts.items() if k != "password"))
    with as_reader.cursor() as cur, pytest.raises(psycopg2.errors.InsufficientPrivilege):
        cur.execute("UPDATE iceberg_tables SET metadata_location = metadata_location")
    as_reader.close()
    db.close()


FUZZ_VARIANTS = os.environ.get("LAKEHOUSE_FUZZ_VARIANTS") == "1"  # `make soak`: every case, with its variants


def fuzz_slice() -> tuple[int, int]:
    """The slice of the fuzzer's cases a run tries, as (k, n): every n-th case from the k-th. `make soak` tries
    them all (0, 1); `make test` a quarter, a different one each day, so four days of runs try every case.
    LAKEHOUSE_FUZZ_SLICE=k/n (or `all`) chooses, to repeat a day's run."""
    chosen = os.environ.get("LAKEHOUSE_FUZZ_SLICE") or ("all" if FUZZ_VARIANTS else "")
    if chosen == "all":
        return 0, 1
    if chosen:
        k, n = (int(part) for part in chosen.split("/"))
        if not 0 <= k < n:
            raise ValueError(f"LAKEHOUSE_FUZZ_SLICE={chosen}: k/n with 0 <= k < n")
        return k, n
    return dt.date.today().toordinal() % 4, 4


def test_no_statement_or_session_the_fuzzer_makes_writes_runs_a_process_leaks_or_stops_the_endpoint(
        served, tmp_path, record_property):
    """Statements and session settings from Spark's grammar, functions and settings (serve_fuzz.py), against the
    module's endpoint: nothing written (the lake's files and catalog byte-identical, no probe file), no canary
    from its environment nor a raw table's row in any answer or error, the endpoint answering throughout; and
    no documented example of a function the list allows refused (the list misses nothing reading needs)."""
    from .serve_fuzz import corpus, function_examples, spark_settings

    settings = served["settings"]
    warehouse = settings.local_path(settings.warehouse)
    before = _hashes(warehouse, Path(settings.catalog.path))
    probe = tmp_path / "fuzz-probe"
    cases = corpus(namespace=settings.namespace, catalog=settings.catalog_name, raw_tables=["bronze_events",
                   "bronze_events_quarantine"], tables=["events", f"{settings.namespace}.users"], probe=probe,
                   examples=function_examples(), settings=spark_settings(), variants=FUZZ_VARIANTS)
    assert len(cases) > 3000
    first, step = fuzz_slice()
    cases = cases[first::step]
    print(f"fuzzer: slice {first}/{step} (LAKEHOUSE_FUZZ_SLICE={first}/{step} tries it again)")
    policy = Path(__file__).parents[2] / "java" / "src" / "main" / "resources" / "lakehouse" / "read-policy.tsv"
    refused_functions = {line.split("\t")[1] for line in policy.read_text().splitlines()
                         if line.startswith("function\t") and "\trefuse\t" in line}
    said, wrongly_refused, not_refused, outcomes = [], [], [], {"answered": 0, "refused": 0, "failed": 0}
    cursor = _cursor(served)
    for n, case in enumerate(cases):
        try:
            current = _cursor(served, **case.session) if case.session else cursor
            current.execute(case.statement)
            said.append(repr(current.fetchall()) if current.description else "")
            outcomes["answered"] += 1
        except hive.OperationalError as error:
            message = _refusal(error)
            said.append(message)
            outcomes["refused" if "refused: " in message else "failed"] += 1
            if (case.function and case.function not in refused_functions and "refused: " in message
                    and case.statement.upper().startswith("SELECT")):
                wrongly_refused.append((case.statement, message[:300]))
        except (TTransportException, TypeError, AssertionError) as error:  # PyHive on an odd result; a new session
            said.append(str(error))
            outcomes["failed"] += 1
            try:
                cursor = _cursor(served)
            except TTransportException:
                pytest.fail(f"the endpoint stopped taking sessions after {case}")
        else:
            if case.function in refused_functions:
                not_refused.append(case.statement)
        if n % 250 == 0:
            assert _rows(served, "SELECT count(*) FROM events WHERE event_id > 0")[0][0] > 0, case
    record_property("fuzz", f"slice {first}/{step}, {len(cases)} cases: {outcomes}")
    print(f"fuzzer: {len(cases)} cases tried: {outcomes}")
    assert sum(outcomes.values()) == len(cases) and outcomes["answered"] > len(cases) // 6
    assert wrongly_refused == [] and not_refused == [], (wrongly_refused, not_refused)
    answers = "\n".join(said)
    assert CANARY not in answers and RAW_ROW["email"] not in answers and RAW_ROW["ip"] not in answers
    assert not probe.exists() and _hashes(warehouse, Path(settings.catalog.path)) == before
    assert CANARY not in _jvm_environment(served)
    assert _rows(served, "SELECT count(*) FROM events WHERE event_id > 0")[0][0] > 0
