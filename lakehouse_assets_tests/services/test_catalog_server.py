"""The local Iceberg REST catalog server (Nessie, `lakehouse catalog start`) decides who may write: the pipeline's
principal commits; an analyst's reads, and each write it tries reaches the server and is refused there (the table
unchanged), whichever engine sends it (pyiceberg, Spark); raw tables are refused to analysts; a request without a
valid token is refused."""

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchTableError, UnauthorizedError
from pyiceberg.types import StringType

from lakehouse_assets.serving.read_rule import catalog_rules
from lakehouse_services.nessie import NessieCatalog, S3Store, mint_token

pytestmark = pytest.mark.slow  # a catalog server in a JVM of its own

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
# What Nessie answers when a principal's rules do not allow an operation (its Iceberg REST API: HTTP 403, or 500
# for some commits, with this text).
REFUSED = "is not allowed for role 'analyst'"


@pytest.fixture(scope="module")
def server(s3_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("catalog-server")
    catalog = NessieCatalog(root, warehouse=f"s3://lake/rest-{uuid.uuid4().hex[:8]}", rules=catalog_rules(),
                            s3=S3Store(s3_server.endpoint_url, s3_server.access_key, s3_server.secret_key))
    with catalog:
        yield catalog


def _s3(s3_server) -> dict[str, str]:
    return {"s3.endpoint": s3_server.endpoint_url, "s3.access-key-id": s3_server.access_key,
            "s3.secret-access-key": s3_server.secret_key, "s3.region": "us-east-1", "s3.path-style-access": "true"}


def _client(server, s3_server, principal: str) -> RestCatalog:
    return RestCatalog(principal, uri=server.uri, token=server.token(principal), warehouse=server.warehouse_name,
                       **_s3(s3_server))


def _state(table) -> tuple:
    """What a refused write must leave as it was: the snapshot, the schema, the rows."""
    table.refresh()
    return table.metadata.current_snapshot_id, table.schema().model_dump_json(), table.scan().to_arrow().to_pylist()


def _refused(write) -> str:
    with pytest.raises(Exception) as refused:  # pyiceberg may call a refused commit one of unknown outcome
        write()
    return str(refused.value)


def test_the_pipeline_writes_and_an_analyst_reads_what_is_not_raw_and_every_write_it_tries_is_refused(
        server, s3_server):
    pipeline, analyst = _client(server, s3_server, "pipeline"), _client(server, s3_server, "analyst")
    ns = f"shop_{uuid.uuid4().hex[:6]}"
    pipeline.create_namespace(ns)
    schema = pa.schema([("day", pa.string()), ("events", pa.int64())])
    gold = pipeline.create_table(f"{ns}.gold_daily", schema=schema)
    gold.append(pa.table({"day": ["2025-01-01", "2025-01-02"], "events": [3, 5]}, schema=schema))
    for raw in ("bronze_events", "bronze_events_quarantine"):
        pipeline.create_table(f"{ns}.{raw}", schema=schema).append(
            pa.table({"day": ["2025-01-01"], "events": [1]}, schema=schema))
    before = _state(gold)

    read = analyst.load_table(f"{ns}.gold_daily")
    assert read.scan().to_arrow().to_pylist() == [{"day": "2025-01-01", "events": 3}, {"day": "2025-01-02", "events": 5}]
    assert {name for _, name in analyst.list_tables(ns)} >= {"gold_daily"}
    for raw in ("bronze_events", "bronze_events_quarantine"):
        message = _refused(lambda raw=raw: analyst.load_table(f"{ns}.{raw}"))
        assert "'READ_ENTITY_VALUE' " + REFUSED in message, message

    writes = {
        "append": lambda: read.append(pa.table({"day": ["2025-01-03"], "events": [7]}, schema=schema)),
        "schema change": lambda: read.update_schema().add_column("note", StringType()).commit(),
        "drop": lambda: analyst.drop_table(f"{ns}.gold_daily"),
        "create": lambda: analyst.create_table(f"{ns}.gold_mine", schema=schema),
        "namespace drop": lambda: analyst.drop_namespace(ns),
    }
    said = {what: _refused(write) for what, write in writes.items()}
    # The server's own refusal of each (the schema change's commit is refused as a whole: Nessie answers 400).
    for what in ("append", "drop", "create"):
        assert REFUSED in said[what], (what, said[what])
    assert "400" in said["schema change"] or REFUSED in said["schema change"], said["schema change"]
    assert _state(pipeline.load_table(f"{ns}.gold_daily")) == before
    with pytest.raises(NoSuchTableError):
        pipeline.load_table(f"{ns}.gold_mine")


def _status(server, token: str | None) -> int:
    request = urllib.request.Request(f"{server.uri}/v1/config?warehouse={server.warehouse_name}",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_only_a_token_signed_by_the_servers_key_current_and_issued_by_it_is_taken(server, tmp_path):
    assert _status(server, server.token("analyst")) == 200
    assert _status(server, None) == 401
    other_key = tmp_path / "other.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-out", str(other_key)], check=True, capture_output=True)
    assert _status(server, mint_token(other_key, "pipeline", 3600)) == 401
    assert _status(server, mint_token(server.private_key, "pipeline", -60)) == 401  # expired
    header, claims, signature = server.token("pipeline").split(".")
    forged = json.loads(base64.urlsafe_b64decode(claims + "=="))
    forged["upn"] = forged["sub"] = "analyst"  # the claims changed after signing
    changed = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    assert _status(server, f"{header}.{changed}.{signature}") == 401
    with pytest.raises(UnauthorizedError):
        RestCatalog("anyone", uri=server.uri, warehouse=server.warehouse_name).list_namespaces()


def test_spark_reads_through_the_catalog_as_an_analyst_and_its_insert_is_refused_there(server, s3_server, spark):
    ns = f"sales_{uuid.uuid4().hex[:6]}"
    for principal in ("pipeline", "analyst"):
        prefix = f"spark.sql.catalog.rest_{principal}"
        spark.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
        for key, value in {"type": "rest", "uri": server.uri, "token": server.token(principal),
                           "warehouse": server.warehouse_name, **_s3(s3_server)}.items():
            spark.conf.set(f"{prefix}.{key}", value)
    spark.sql(f"CREATE NAMESPACE rest_pipeline.{ns}")
    spark.sql(f"CREATE TABLE rest_pipeline.{ns}.gold_sales (day STRING, amount BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO rest_pipeline.{ns}.gold_sales VALUES ('2025-01-01', 10), ('2025-01-02', 20)")
    table = _client(server, s3_server, "pipeline").load_table(f"{ns}.gold_sales")
    before = _state(table)

    assert spark.sql(f"SELECT sum(amount) FROM rest_analyst.{ns}.gold_sales").collect()[0][0] == 30
    for statement in (f"INSERT INTO rest_analyst.{ns}.gold_sales VALUES ('2025-01-03', 1)",
                      f"DELETE FROM rest_analyst.{ns}.gold_sales WHERE amount = 10",
                      f"DROP TABLE rest_analyst.{ns}.gold_sales"):
        with pytest.raises(Exception) as refused:
            spark.sql(statement).collect()
        assert REFUSED in str(refused.value), (statement, str(refused.value)[:2000])
    assert _state(table) == before


def test_the_command_starts_the_server_gives_tokens_of_its_principals_and_stops_it(s3_server, tmp_path):
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"),
           "LAKEHOUSE_S3_ENDPOINT": s3_server.endpoint_url, "LAKEHOUSE_S3_ACCESS_KEY": s3_server.access_key,
           "LAKEHOUSE_S3_SECRET_KEY": s3_server.secret_key}

    def lakehouse(*args):
        return subprocess.run([LAKEHOUSE, "catalog", *args], env=env, capture_output=True, text=True, timeout=240)

    started = lakehouse("start", "--warehouse", f"s3://lake/cli-{uuid.uuid4().hex[:6]}")
    try:
        assert started.returncode == 0, started.stderr
        status = lakehouse("status")
        assert status.stdout.startswith("running, pid ") and "/iceberg" in status.stdout
        uri = status.stdout.split(", ")[2]
        token = lakehouse("token", "--principal", "analyst").stdout.strip()
        request = urllib.request.Request(f"{uri}/v1/config?warehouse=lake", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
        unknown = lakehouse("token", "--principal", "root")
        assert unknown.returncode == 2 and "the catalog's principals are pipeline, analyst" in unknown.stderr
    finally:
        stopped = lakehouse("stop")
    assert stopped.stdout.strip() == "stopped" and lakehouse("status").stdout.strip() == "not running"
