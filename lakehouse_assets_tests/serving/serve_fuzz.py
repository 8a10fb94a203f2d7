"""Statements and session settings an analyst could send the SQL endpoint, made from Spark's own grammar: every
kind of statement Spark 4.1's parser takes (its `statement` rule's forms, SQL scripts, EXECUTE IMMEDIATE, pipe
syntax, Iceberg's extensions, queries over files and scripts), every built-in function's documented examples,
every setting Spark defines (SET, and each of HiveServer2's session-open prefixes), combined with the endpoint's
tables, raw and not, and a probe path that nothing may write. `make test` runs a quarter of the cases, another
each day (LAKEHOUSE_FUZZ_SLICE=k/n chooses), `make soak` every case with its variants (LAKEHOUSE_FUZZ_VARIANTS=1)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lakehouse_assets.runtime.jars import iceberg_runtime_jar
from lakehouse_assets.runtime.java_jar import build

SPARK_JARS = Path(sys.executable).parents[1] / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
    "site-packages" / "pyspark" / "jars"

# The forms of Spark's `statement` rule (SqlBaseParser.g4, 4.1: a SQL script's compound statements, its
# `executeImmediate` and `setResetStatement` too) and Iceberg's SQL extensions, with {t} a table, {ns} the namespace,
# {cat} the catalog, {p} the probe path (nothing may appear there), {q} a query over {t}.
STATEMENTS = [
    "{q}", "EXPLAIN {q}", "EXPLAIN EXTENDED {q}", "EXPLAIN CODEGEN {q}", "EXPLAIN COST {q}", "EXPLAIN FORMATTED {q}",
    "EXPLAIN INSERT INTO {t} SELECT * FROM {t}", "TABLE {t}", "VALUES (1, 'a'), (2, 'b')", "USE {ns}",
    "USE NAMESPACE {ns}", "SET CATALOG {cat}", "CREATE NAMESPACE fuzz_ns", "CREATE DATABASE IF NOT EXISTS fuzz_ns",
    "ALTER NAMESPACE {ns} SET PROPERTIES ('k' = 'v')", "ALTER DATABASE {ns} SET LOCATION '{p}'",
    "DROP NAMESPACE IF EXISTS {ns} CASCADE", "SHOW NAMESPACES", "SHOW DATABASES LIKE '*'",
    "CREATE TABLE fuzz_t (a INT)", "CREATE TABLE fuzz_t USING parquet LOCATION '{p}' AS SELECT 1 AS a",
    "CREATE TABLE fuzz_t AS SELECT * FROM {t}", "CREATE TABLE fuzz_t LIKE {t}", "REPLACE TABLE {t} (a INT)",
    "CREATE OR REPLACE TABLE {t} AS SELECT 1 AS a", "CREATE EXTERNAL TABLE fuzz_t (a INT) LOCATION '{p}'",
    "ANALYZE TABLE {t} COMPUTE STATISTICS", "ANALYZE TABLES IN {ns} COMPUTE STATISTICS",
    "ALTER TABLE {t} ADD COLUMN fuzz STRING", "ALTER TABLE {t} ADD COLUMNS (fuzz STRING)",
    "ALTER TABLE {t} RENAME COLUMN event_id TO fuzz", "ALTER TABLE {t} DROP COLUMN event_id",
    "ALTER TABLE {t} RENAME TO fuzz_t", "ALTER TABLE {t} SET TBLPROPERTIES ('k' = 'v')",
    "ALTER TABLE {t} UNSET TBLPROPERTIES ('k')", "ALTER TABLE {t} ALTER COLUMN event_id COMMENT 'x'",
    "ALTER TABLE {t} CHANGE COLUMN event_id event_id BIGINT", "ALTER TABLE {t} REPLACE COLUMNS (a INT)",
    "ALTER TABLE {t} SET SERDE 'x'", "ALTER TABLE {t} ADD PARTITION (a = 1)", "ALTER TABLE {t} DROP PARTITION (a = 1)",
    "ALTER TABLE {t} SET LOCATION '{p}'", "ALTER TABLE {t} RECOVER PARTITIONS", "DROP TABLE {t}",
    "DROP TABLE IF EXISTS {t} PURGE", "DROP VIEW IF EXISTS fuzz_v", "CREATE VIEW fuzz_v AS SELECT * FROM {t}",
    "CREATE TEMPORARY VIEW fuzz_v AS SELECT * FROM {t}", "CREATE GLOBAL TEMPORARY VIEW fuzz_v AS SELECT * FROM {t}",
    "CREATE TEMPORARY VIEW fuzz_v USING parquet OPTIONS (path '{p}')",
    "CREATE TEMPORARY VIEW fuzz_v USING text OPTIONS (path '/etc/passwd')", "ALTER VIEW fuzz_v AS SELECT 1",
    "CREATE FUNCTION fuzz_f AS 'java.lang.System'", "CREATE TEMPORARY FUNCTION fuzz_f AS 'java.lang.Runtime'",
    "DROP FUNCTION IF EXISTS fuzz_f", "SHOW TABLES", "SHOW TABLES IN {ns}", "SHOW TABLE EXTENDED LIKE '*'",
    "SHOW TBLPROPERTIES {t}", "SHOW COLUMNS IN {t}", "SHOW VIEWS", "SHOW PARTITIONS {t}", "SHOW FUNCTIONS",
    "SHOW USER FUNCTIONS", "SHOW CREATE TABLE {t}", "SHOW CREATE TABLE {t} AS SERDE", "SHOW CURRENT NAMESPACE",
    "SHOW CATALOGS", "DESCRIBE FUNCTION abs", "DESCRIBE FUNCTION EXTENDED reflect", "DESCRIBE NAMESPACE {ns}",
    "DESCRIBE NAMESPACE EXTENDED {ns}", "DESCRIBE {t}", "DESCRIBE TABLE EXTENDED {t}", "DESCRIBE {t} event_id",
    "DESCRIBE QUERY {q}", "COMMENT ON TABLE {t} IS 'x'", "COMMENT ON NAMESPACE {ns} IS 'x'", "REFRESH TABLE {t}",
    "REFRESH FUNCTION abs", "REFRESH '{p}'", "CACHE TABLE {t}", "CACHE LAZY TABLE fuzz_c AS SELECT * FROM {t}",
    "UNCACHE TABLE IF EXISTS {t}", "CLEAR CACHE", "LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE {t}",
    "TRUNCATE TABLE {t}", "MSCK REPAIR TABLE {t}", "REPAIR TABLE {t}", "ADD JAR {p}", "ADD FILE /etc/passwd",
    "ADD ARCHIVE {p}", "LIST JARS", "LIST FILES", "LIST ARCHIVES", "SET TIME ZONE LOCAL", "SET TIME ZONE '+01:00'",
    "RESET", "RESET spark.sql.shuffle.partitions", "CREATE INDEX fuzz_i ON {t} (event_id)", "DROP INDEX fuzz_i ON {t}",
    "INSERT INTO {t} SELECT * FROM {t}", "INSERT OVERWRITE {t} SELECT * FROM {t}",
    "INSERT OVERWRITE DIRECTORY '{p}' USING parquet SELECT * FROM {t}",
    "INSERT OVERWRITE LOCAL DIRECTORY '{p}' SELECT * FROM {t}", "DELETE FROM {t} WHERE true", "UPDATE {t} SET event_id = 0",
    "MERGE INTO {t} a USING {t} b ON a.event_id = b.event_id WHEN MATCHED THEN DELETE",
    "FROM {t} INSERT INTO {t} SELECT *", "CALL {cat}.system.expire_snapshots('{ns}.events')",
    "CALL {cat}.system.remove_orphan_files(table => '{ns}.events', location => '{p}')",
    "CALL {cat}.system.rollback_to_snapshot('{ns}.events', 1)", "ALTER TABLE {t} ADD PARTITION FIELD bucket(4, event_id)",
    "ALTER TABLE {t} WRITE ORDERED BY event_id", "ALTER TABLE {t} CREATE BRANCH fuzz", "ALTER TABLE {t} CREATE TAG fuzz",
    "ALTER TABLE {t} DROP BRANCH IF EXISTS fuzz", "ALTER TABLE {t} SET IDENTIFIER FIELDS event_id",
    "SELECT TRANSFORM(1) USING 'touch {p}' AS (line STRING)",
    "SELECT TRANSFORM(*) USING 'sh -c \"env > {p}\"' FROM {t}", "FROM {t} SELECT TRANSFORM(event_id) USING 'cat'",
    "SELECT * FROM parquet.`{p}`", "SELECT * FROM text.`/etc/passwd`", "SELECT * FROM json.`/proc/self/environ`",
    "SELECT * FROM {t} TABLESAMPLE (50 PERCENT)", "SELECT /*+ REPARTITION(3) */ * FROM {t}",
    "SELECT * FROM {t} LATERAL VIEW explode(array(1, 2)) x AS y", "SELECT * FROM {t}.snapshots",
    "SELECT * FROM {t}.files", "SELECT * FROM {t} VERSION AS OF 1", "SELECT * FROM IDENTIFIER('{t}')",
    "SELECT '${{env:LAKEHOUSE_FUZZ_CANARY}}'", "SELECT '${{system:user.dir}}'", "SELECT '${{hiveconf:user.name}}'",
    "SELECT '${{spark:spark.lakehouse.fuzz.held}}'", "SELECT '${{sparkconf:spark.lakehouse.fuzz.held}}'",
    "SELECT '${{spark.lakehouse.fuzz.held}}'", "SET spark.lakehouse.fuzz.held", "SET", "SET -v",
    "SELECT reflect('java.lang.System', 'getenv', 'LAKEHOUSE_FUZZ_CANARY')",
    "SELECT java_method('java.lang.Runtime', 'getRuntime')", "SELECT xpath('<a>1</a>', 'a')",
    "SELECT input_file_name() FROM {t}", "SELECT * FROM range(3)", "SELECT * FROM sql_keywords()",
    "WITH x AS (SELECT * FROM {t}) SELECT count(*) FROM x", "SELECT * FROM {t} PIVOT (count(*) FOR kind IN ('a'))",
    # Spark 4.1's: SQL scripts (BEGIN ... END, their compound statements: each would run its statements itself)
    "BEGIN {q}; END", "BEGIN DECLARE x INT DEFAULT 0; WHILE x < 3 DO SET x = x + 1; END WHILE; SELECT x; END",
    "BEGIN IF (SELECT count(*) FROM {t}) > 0 THEN INSERT INTO {t} SELECT * FROM {t}; END IF; END",
    "BEGIN REPEAT DELETE FROM {t} WHERE true; UNTIL true END REPEAT; END",
    "BEGIN FOR r AS SELECT * FROM {t} DO SELECT r.*; END FOR; END", "BEGIN l: LOOP LEAVE l; END LOOP l; END",
    "BEGIN l: WHILE true DO LEAVE l; ITERATE l; END WHILE l; END", "BEGIN CASE WHEN true THEN DROP TABLE {t}; END CASE; END",
    "BEGIN CASE 1 WHEN 1 THEN TRUNCATE TABLE {t}; END CASE; END",
    "BEGIN DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN SELECT * FROM {t}; END; SELECT 1 / 0; END",
    "BEGIN DECLARE c CONDITION FOR SQLSTATE '22012'; DECLARE EXIT HANDLER FOR c SELECT 1; SELECT 1 / 0; END",
    "BEGIN CALL {cat}.system.expire_snapshots('{ns}.events'); END", "BEGIN BEGIN CREATE TABLE fuzz_t (a INT); END; END",
    # EXECUTE IMMEDIATE (its statement run while it is analysed)
    "EXECUTE IMMEDIATE '{q}'", "EXECUTE IMMEDIATE 'DROP TABLE {t}'", "EXECUTE IMMEDIATE 'SELECT ?' USING 1",
    "EXECUTE IMMEDIATE 'SELECT * FROM {t} WHERE event_id = :id' USING 1 AS id",
    "EXECUTE IMMEDIATE \"CALL {cat}.system.rollback_to_snapshot('{ns}.events', 1)\"",
    "EXECUTE IMMEDIATE 'SELECT count(*) FROM {t}' INTO fuzz_v", "EXPLAIN EXECUTE IMMEDIATE 'INSERT INTO {t} SELECT * FROM {t}'",
    # session variables
    "DECLARE fuzz_v INT DEFAULT 1", "DECLARE OR REPLACE VARIABLE fuzz_v BIGINT DEFAULT (SELECT count(*) FROM {t})",
    "SET VARIABLE fuzz_v = (SELECT count(*) FROM {t})", "SET VAR fuzz_v = 1", "SET VAR (fuzz_v) = (SELECT 1)",
    "DROP TEMPORARY VARIABLE IF EXISTS fuzz_v", "SELECT session.fuzz_v",
    # SQL functions, constraints, clustering, collations, schema binding, several columns altered
    "CREATE TEMPORARY FUNCTION fuzz_f(x INT) RETURNS INT RETURN x + 1",
    "CREATE FUNCTION fuzz_f(x INT) RETURNS BIGINT RETURN (SELECT count(*) FROM {t})",
    "CREATE OR REPLACE TEMPORARY FUNCTION fuzz_tf() RETURNS TABLE (n BIGINT) RETURN SELECT count(*) FROM {t}",
    "SELECT fuzz_f(1)", "SELECT * FROM fuzz_tf()", "ALTER TABLE {t} ADD CONSTRAINT fuzz_c CHECK (event_id > 0)",
    "ALTER TABLE {t} ADD CONSTRAINT fuzz_pk PRIMARY KEY (event_id)", "ALTER TABLE {t} DROP CONSTRAINT IF EXISTS fuzz_c",
    "CREATE TABLE fuzz_t (a INT, CONSTRAINT fuzz_c CHECK (a > 0))", "ALTER TABLE {t} CLUSTER BY (event_id)",
    "ALTER TABLE {t} CLUSTER BY NONE", "ALTER TABLE {t} DEFAULT COLLATION UTF8_LCASE",
    "ALTER NAMESPACE {ns} DEFAULT COLLATION UNICODE", "ALTER NAMESPACE {ns} UNSET PROPERTIES ('k')",
    "ALTER VIEW fuzz_v WITH SCHEMA EVOLUTION", "CREATE VIEW fuzz_v WITH SCHEMA EVOLUTION AS SELECT * FROM {t}",
    "ALTER TABLE {t} ALTER COLUMN event_id COMMENT 'x', ts COMMENT 'y'",
    # pipelines' datasets and flows, streams
    "CREATE MATERIALIZED VIEW fuzz_mv AS SELECT * FROM {t}", "CREATE STREAMING TABLE fuzz_st",
    "CREATE STREAMING TABLE fuzz_st AS SELECT * FROM STREAM {t}",
    "CREATE FLOW fuzz_fl AS INSERT INTO {t} BY NAME SELECT * FROM STREAM {t}", "SELECT * FROM STREAM {t}",
    "SELECT * FROM {t} WATERMARK ts DELAY OF INTERVAL 1 MINUTE",
    # procedures in Spark's own syntax (CALL), and their listing
    "CALL {cat}.system.rollback_to_snapshot(table => '{ns}.events', snapshot_id => 1)",
    "CALL IDENTIFIER('{cat}.system.expire_snapshots')('{ns}.events')",
    "EXPLAIN CALL {cat}.system.expire_snapshots('{ns}.events')", "SHOW PROCEDURES", "SHOW PROCEDURES IN {cat}.system",
    "DESCRIBE PROCEDURE {cat}.system.rollback_to_snapshot",
    # pipe syntax, recursive CTEs, LIMIT ALL, JSON descriptions, writes by name, the :: cast
    "FROM {t} |> WHERE event_id > 0 |> SELECT *", "FROM {t} |> AGGREGATE count(*) GROUP BY event_id",
    "TABLE {t} |> EXTEND 1 AS fuzz |> DROP fuzz |> SET event_id = 0 |> LIMIT 3",
    "FROM {t} |> AS x |> JOIN {t} AS y ON true |> LIMIT 1", "FROM {t} |> UNION ALL (TABLE {t})",
    "FROM {t} |> TABLESAMPLE (50 PERCENT)", "FROM {t} |> SELECT reflect('java.lang.System', 'getenv', 'HOME')",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT count(*) FROM {t} UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT * FROM r",
    "SELECT * FROM {t} LIMIT ALL", "DESCRIBE TABLE EXTENDED {t} AS JSON",
    "SHOW TABLE EXTENDED LIKE '*' PARTITION (event_id = 1)", "INSERT INTO {t} BY NAME SELECT * FROM {t}",
    "INSERT INTO {t} REPLACE WHERE true SELECT * FROM {t}", "SELECT event_id::STRING FROM {t}",
    "MERGE WITH SCHEMA EVOLUTION INTO {t} a USING {t} b ON a.event_id = b.event_id WHEN MATCHED THEN UPDATE SET *",
    # a time travel's subquery (evaluated while the statement is analysed), functions that reach out
    "SELECT * FROM events TIMESTAMP AS OF (SELECT CAST(max(to_json(struct(*))) AS TIMESTAMP) FROM {t})",
    "SELECT * FROM {t} TIMESTAMP AS OF (SELECT CAST(reflect('java.lang.System', 'exit', 0) AS TIMESTAMP))",
    "SELECT * FROM {t} TIMESTAMP AS OF (SELECT max(ts) FROM {t})", "SELECT * FROM python_worker_logs()",
    "SELECT try_reflect('java.lang.System', 'getenv', 'LAKEHOUSE_FUZZ_CANARY')",
    "SELECT from_xml('<a>1</a>', 'a INT', map('rowValidationXSDPath', '/etc/passwd'))",
    "SELECT from_protobuf(CAST('' AS BINARY), 'M', '/etc/passwd')", "SELECT * FROM collations()",
]
QUERIES = ["SELECT * FROM {t}", "SELECT count(*) FROM {t}", "SELECT * FROM {t} WHERE event_id IN (SELECT 1)"]
PREFIXES = ["set:hiveconf:", "set:hivevar:", "set:system:", "set:env:", "set:metaconf:", "set:", ""]
EXTRA_SETTINGS = ["spark.lakehouse.serve.raw", "spark.lakehouse.serve.exposed", "spark.lakehouse.serve.catalog",
                  "spark.lakehouse.serve.rawPrefixes", "spark.lakehouse.serve.rawSuffixes",
                  "spark.sql.catalog.{cat}.uri", "spark.sql.catalog.{cat}.warehouse", "spark.sql.catalog.{cat}",
                  "spark.sql.extensions", "spark.sql.runSQLOnFiles", "spark.sql.variable.substitute",
                  "spark.sql.thriftServer.queryTimeout", "spark.sql.thriftServer.incrementalCollect",
                  "hive.server2.authentication", "hive.server2.custom.authentication.class", "hive.exec.scratchdir",
                  "lakehouse.serve.password.file", "java.class.path", "user.dir", "spark.jars",
                  "spark.driver.extraClassPath", "spark.sql.shuffle.partitions", "spark.sql.session.timeZone"]
VALUES = ["true", "{p}", "100000", "org.apache.hive.service.auth.AnonymousAuthenticationProviderImpl", "bronze_events"]


@dataclass(frozen=True)
class Case:
    statement: str
    session: dict = field(default_factory=dict)  # what the session is opened with
    function: str = ""  # the built-in function whose documented example this is
    raw: bool = False  # whether it names a raw table


def _java(*args: str) -> str:
    classpath = f"{SPARK_JARS}/*:{iceberg_runtime_jar()}:{build()}"
    return subprocess.run(["java", "-cp", classpath, "lakehouse.ReadPolicy", *args], capture_output=True, text=True,
                          check=True, timeout=300).stdout


def function_examples() -> dict[str, list[str]]:
    """Each built-in function's documented examples (`> SELECT ...;`), as Spark's registry gives them."""
    examples: dict[str, list[str]] = {}
    for line in _java("examples").splitlines():
        name, _, text = line.partition("\t")
        text = text.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")
        found = [s.strip().rstrip(";") for s in text.split("\n") if s.strip().startswith("> ")]
        examples[name] = [s[2:].strip() for s in found if s[2:].strip()]
    return examples


def spark_settings() -> list[str]:
    return [line for line in _java("settings").splitlines() if line]


def corpus(*, namespace: str, catalog: str, tables: list[str], raw_tables: list[str], probe: Path,
           examples: dict[str, list[str]], settings: list[str], variants: bool = False) -> list[Case]:
    """Every case: each statement form over each table, each function example (and over a raw table), each
    setting set by SET and opened with each prefix. Variants (soak): each value tried, and statements in other
    cases and spacing."""
    cases: list[Case] = []
    fill = {"ns": namespace, "cat": catalog, "p": str(probe)}
    for table in tables + raw_tables:
        for form in STATEMENTS:
            for query in QUERIES if "{q}" in form else [""]:
                statement = form.format(t=table, q=query.format(t=table), **fill)
                cases.append(Case(statement, raw=table in raw_tables))
    for name, found in examples.items():
        for example in found:
            cases.append(Case(example, function=name))
        column = "CAST(event_id AS STRING)"
        cases.append(Case(f"SELECT {name}({column}) FROM {raw_tables[0]}", raw=True))
    keys = [k.format(cat=catalog) for k in EXTRA_SETTINGS] + settings
    values = VALUES if variants else VALUES[:1]
    for key in keys:
        for value in values:
            value = value.format(p=probe)
            cases.append(Case(f"SET {key}={value}"))
            cases.append(Case(f"SET {key}"))
            for prefix in PREFIXES:
                cases.append(Case(f"SELECT * FROM {raw_tables[0]}", session={prefix + key: value}, raw=True))
    cases.append(Case("SELECT 1", session={"use:database": f"{namespace}; DROP TABLE events"}))
    cases.append(Case("SELECT 1", session={"hive.server2.proxy.user": "root"}))
    if variants:
        cases += [Case(c.statement.lower(), c.session, c.function, c.raw) for c in cases if not c.function]
        cases += [Case("/* x */ " + c.statement.replace(" ", "\n  "), c.session, c.function, c.raw)
                  for c in cases if not c.function and not c.session]
    return cases
