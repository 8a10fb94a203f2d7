"""The local Iceberg REST catalog server (`lakehouse catalog start`) serves the lakehouse's own SQL catalog and decides
who may write: the pipeline's principal commits, branches, tags and commits several tables at once, all or nothing;
an analyst's reads, and each write it tries reaches the server and is refused there (the table unchanged), whichever
engine sends it (pyiceberg, Spark); raw tables are refused to analysts and everything but the ML tables to ML users;
a request without a valid token is refused."""

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
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import ForbiddenError, NoSuchTableError, UnauthorizedError
from pyiceberg.types import StringType

from lakehouse_assets.serving.read_rule import catalog_rules
from lakehouse_services.rest_catalog import RestCatalogServer, mint_token

pytestmark = pytest.mark.slow  # a catalog server in a JVM of its own

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
REFUSED = "principal 'analyst' may not"
SCHEMA = pa.schema([("day", pa.string()), ("events", pa.int64())])


def _s3(s3_server) -> dict[str, str]:
    return {"s3.endpoint": s3_server.endpoint_url, "s3.access-key-id": s3_server.access_key,
            "s3.secret-access-key": s3_server.secret_key, "s3.region": "us-east-1", "s3.path-style-access": "true"}


@pytest.fixture(scope="module")
def sql_catalog(s3_server, tmp_path_factory):
    """A lakehouse's SQL catalog (pyiceberg's, as the pipeline opens it) with its tables on S3."""
    db = tmp_path_factory.mktemp("catalog") / "catalog.db"
    warehouse = f"s3://lake/rest-{uuid.uuid4().hex[:8]}"
    return SqlCatalog("lakehouse", uri=f"sqlite:///{db}", warehouse=warehouse, **_s3(s3_server)), db, warehouse


@pytest.fixture(scope="module")
def server(sql_catalog, s3_server, tmp_path_factory):
    _, db, warehouse = sql_catalog
    io = {"io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "client.region": "us-east-1", **_s3(s3_server)}
    io.pop("s3.region")
    with RestCatalogServer(tmp_path_factory.mktemp("catalog-server"), catalog_uri=f"jdbc:sqlite:{db}",
                           warehouse=warehouse, rules=catalog_rules(["ml_user_features"]), io=io) as running:
        yield running


def _client(server, s3_server, principal: str) -> RestCatalog:
    return RestCatalog(principal, uri=server.uri, token=server.token(principal), **_s3(s3_server))


def _state(table) -> tuple:
    """What a refused write must leave as it was: the snapshot, the schema, the rows."""
    table.refresh()
    return table.metadata.current_snapshot_id, table.schema().model_dump_json(), table.scan().to_arrow().to_pylist()


def _refused(write) -> str:
    with pytest.raises(Exception) as refused:
        write()
    return str(refused.value)


def _namespace(pipeline: RestCatalog) -> str:
    ns = f"shop_{uuid.uuid4().hex[:6]}"
    pipeline.create_namespace(ns)
    return ns


def test_the_pipeline_writes_and_an_analyst_reads_what_is_not_raw_and_every_write_it_tries_is_refused(
        server, s3_server):
    pipeline, analyst = _client(server, s3_server, "pipeline"), _client(server, s3_server, "analyst")
    ns = _namespace(pipeline)
    gold = pipeline.create_table(f"{ns}.gold_daily", schema=SCHEMA)
    gold.append(pa.table({"day": ["2025-01-01", "2025-01-02"], "events": [3, 5]}, schema=SCHEMA))
    for raw in ("bronze_events", "bronze_events_quarantine"):
        pipeline.create_table(f"{ns}.{raw}", schema=SCHEMA).append(
            pa.table({"day": ["2025-01-01"], "events": [1]}, schema=SCHEMA))
    before = _state(gold)

    read = analyst.load_table(f"{ns}.gold_daily")
    assert read.scan().to_arrow().to_pylist() == [{"day": "2025-01-01", "events": 3}, {"day": "2025-01-02", "events": 5}]
    assert {name for _, name in analyst.list_tables(ns)} == {"gold_daily"}  # the raw tables are not even listed
    for raw in ("bronze_events", "bronze_events_quarantine"):
        with pytest.raises(ForbiddenError, match=f"principal 'analyst' may not read {ns}.{raw}"):
            analyst.load_table(f"{ns}.{raw}")

    writes = {
        "append": lambda: read.append(pa.table({"day": ["2025-01-03"], "events": [7]}, schema=SCHEMA)),
        "schema change": lambda: read.update_schema().add_column("note", StringType()).commit(),
        "drop": lambda: analyst.drop_table(f"{ns}.gold_daily"),
        "create": lambda: analyst.create_table(f"{ns}.gold_mine", schema=SCHEMA),
        "namespace drop": lambda: analyst.drop_namespace(ns),
    }
    said = {what: _refused(write) for what, write in writes.items()}
    for what, message in said.items():  # the server's own refusal of each, with what was refused
        assert REFUSED in message and "the catalog allows it reads only" in message, (what, message)
    assert f"may not commit to {ns}.gold_daily" in said["append"]
    assert _state(pipeline.load_table(f"{ns}.gold_daily")) == before
    with pytest.raises(NoSuchTableError):
        pipeline.load_table(f"{ns}.gold_mine")
    # The server's access log: who asked what, and the answer.
    log = server.log_file.read_text()
    assert f" analyst POST /v1/namespaces/{ns}/tables/gold_daily 403 " in log
    assert f" analyst GET /v1/namespaces/{ns}/tables/bronze_events 403 " in log
    assert f" pipeline POST /v1/namespaces/{ns}/tables/gold_daily 200 " in log


def test_the_server_serves_the_tables_the_pipelines_sql_catalog_holds_and_ml_users_read_only_ml_tables(
        server, sql_catalog, s3_server):
    direct, _, _ = sql_catalog
    ns = f"direct_{uuid.uuid4().hex[:6]}"
    direct.create_namespace(ns)
    for name in ("ml_user_features", "gold_daily"):
        direct.create_table(f"{ns}.{name}", schema=SCHEMA).append(
            pa.table({"day": ["2025-02-01"], "events": [len(name)]}, schema=SCHEMA))
    ml = _client(server, s3_server, "ml")
    assert ml.load_table(f"{ns}.ml_user_features").scan().to_arrow().to_pylist() == [{"day": "2025-02-01", "events": 16}]
    assert {name for _, name in ml.list_tables(ns)} == {"ml_user_features"}
    with pytest.raises(ForbiddenError, match="principal 'ml' may not read"):
        ml.load_table(f"{ns}.gold_daily")
    # A commit through the server is the SQL catalog's: the pipeline's own pyiceberg sees it at once.
    _client(server, s3_server, "pipeline").load_table(f"{ns}.gold_daily").append(
        pa.table({"day": ["2025-02-02"], "events": [1]}, schema=SCHEMA))
    assert len(direct.load_table(f"{ns}.gold_daily").scan().to_arrow()) == 2


def test_an_analysts_sql_reads_through_the_server_with_the_analysts_token(server, sql_catalog, s3_server, tmp_path):
    """`lakehouse sql` (DuckDB) with the catalog URI of the analyst's principal: what the server lets it see, and no
    raw table, which the server neither lists nor loads for it."""
    from lakehouse_assets.serving.duckdb_sql import query
    from lakehouse_assets.settings import Settings

    direct, _, warehouse = sql_catalog
    ns = f"bi_{uuid.uuid4().hex[:6]}"
    direct.create_namespace(ns)
    direct.create_table(f"{ns}.gold_daily", schema=SCHEMA).append(
        pa.table({"day": ["2025-04-01", "2025-04-02"], "events": [4, 6]}, schema=SCHEMA))
    direct.create_table(f"{ns}.bronze_events", schema=SCHEMA)
    analyst = Settings.from_env(home=tmp_path, catalog_uri=server.settings_uri("analyst"), namespace=ns,
                                warehouse=warehouse)
    assert query(analyst, "SELECT sum(events) AS n FROM gold_daily").to_pylist() == [{"n": 10}]
    for raw in (False, True):  # an engineer's --raw does not make the server hand a raw table to an analyst
        with pytest.raises(ValueError, match="bronze_events"):
            query(analyst, "SELECT count(*) FROM bronze_events", raw=raw)


def _post(server, principal: str, path: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(f"{server.uri}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {server.token(principal)}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _publish(ns: str, name: str, main: int | None, head: int, branch: str) -> dict:
    """One table's part of a multi-table commit, as the pipeline's publish makes it: `main` moves to the staged
    branch's head only if it still is the snapshot the write was decided on; the branch goes."""
    return {"identifier": {"namespace": [ns], "name": name},
            "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": main}],
            "updates": [{"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": head},
                        {"action": "remove-snapshot-ref", "ref-name": branch}]}


def test_branches_tags_and_a_commit_of_several_tables_all_or_nothing(server, s3_server):
    _all_or_nothing(server, _client(server, s3_server, "pipeline"))


def test_over_a_postgresql_catalog_a_commit_of_several_tables_is_all_or_nothing_too(pg_catalog_uri, tmp_path):
    """The same, the server fronting a PostgreSQL catalog (its driver, its transaction for the pointers)."""
    (tmp_path / "warehouse").mkdir()
    with RestCatalogServer(tmp_path / "server", catalog_uri=pg_catalog_uri.jdbc_url, catalog_name="rest_pg",
                           jdbc_user=pg_catalog_uri.user, jdbc_password=pg_catalog_uri.password,
                           warehouse=f"file://{tmp_path}/warehouse", rules=catalog_rules()) as server:
        _all_or_nothing(server, RestCatalog("p", uri=server.uri, token=server.token("pipeline")))


def _all_or_nothing(server, pipeline: RestCatalog) -> None:
    ns = _namespace(pipeline)
    tables = {}
    for name in ("silver_orders", "silver_orders_history"):
        table = pipeline.create_table(f"{ns}.{name}", schema=SCHEMA)
        table.append(pa.table({"day": ["2025-03-01"], "events": [1]}, schema=SCHEMA))
        main = table.metadata.current_snapshot_id
        table.manage_snapshots().create_branch(main, "audit").create_tag(main, "before").commit()
        table.append(pa.table({"day": ["2025-03-02"], "events": [2]}, schema=SCHEMA), branch="audit")
        table = pipeline.load_table(f"{ns}.{name}")
        assert {"main", "audit", "before"} <= set(table.metadata.refs)  # Iceberg's own branches and tags
        tables[name] = (main, table.metadata.refs["audit"].snapshot_id)

    (orders, (o_main, o_head)), (history, (h_main, h_head)) = tables.items()
    # One table's requirement no longer holds (its main is not where the write was decided): nothing moves.
    stale = [_publish(ns, orders, o_main, o_head, "audit"), _publish(ns, history, o_head, h_head, "audit")]
    status, said = _post(server, "pipeline", "/v1/transactions/commit", {"table-changes": stale})
    assert status == 409 and "main" in said, said
    status, said = _post(server, "analyst", "/v1/transactions/commit",
                         {"table-changes": [_publish(ns, orders, o_main, o_head, "audit")]})
    assert status == 403 and f"may not commit to {ns}.{orders}" in said, said
    for name, (main, _) in tables.items():
        table = pipeline.load_table(f"{ns}.{name}")
        assert table.metadata.current_snapshot_id == main and "audit" in table.metadata.refs

    both = [_publish(ns, orders, o_main, o_head, "audit"), _publish(ns, history, h_main, h_head, "audit")]
    assert _post(server, "pipeline", "/v1/transactions/commit", {"table-changes": both})[0] == 204
    for name, (main, head) in tables.items():
        table = pipeline.load_table(f"{ns}.{name}")
        assert table.metadata.current_snapshot_id == head and "audit" not in table.metadata.refs
        assert table.metadata.refs["before"].snapshot_id == main
        assert sorted(r["events"] for r in table.scan().to_arrow().to_pylist()) == [1, 2]
        assert sorted(r["events"] for r in table.scan(snapshot_id=main).to_arrow().to_pylist()) == [1]


def test_a_snapshot_written_against_an_older_table_is_sent_back_to_be_written_again(server, s3_server, caplog):
    """The first snapshot of a new branch (it has no parent) decided on a table that has taken a commit since: the
    server answers 409 and its writer (pyiceberg here, Spark's Iceberg too) refreshes and writes it again, rather
    than the server giving it the sequence number of a snapshot already there (or, further behind, a 400 that ends
    the write)."""
    pipeline = _client(server, s3_server, "pipeline")
    name = f"{_namespace(pipeline)}.events"
    pipeline.create_table(name, schema=SCHEMA).append(_day(1))
    stale = pipeline.load_table(name)  # at sequence number 1: what it writes next takes number 2
    pipeline.load_table(name).append(_day(2))
    stale.append(_day(3), branch="audit")
    assert "Commit failed due to a concurrent update, retrying" in caplog.text  # the server's 409

    table = pipeline.load_table(name)
    assert sorted(s.sequence_number for s in table.metadata.snapshots) == [1, 2, 3]
    assert sorted(r["events"] for r in table.scan().to_arrow().to_pylist()) == [1, 2]
    branch = table.metadata.refs["audit"].snapshot_id
    assert [r["events"] for r in table.scan(snapshot_id=branch).to_arrow().to_pylist()] == [3]


def _day(n: int) -> pa.Table:
    return pa.table({"day": [f"2025-03-0{n}"], "events": [n]}, schema=SCHEMA)


def _status(server, token: str | None) -> int:
    request = urllib.request.Request(f"{server.uri}/v1/config",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_only_a_token_signed_by_the_servers_key_current_and_issued_by_it_is_taken(server, tmp_path):
    assert _status(server, server.token("analyst")) == 200
    assert _status(server, None) == 401
    assert _status(server, server.token("root")) == 403  # a principal the rules do not name
    other_key = tmp_path / "other.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-out", str(other_key)], check=True, capture_output=True)
    assert _status(server, mint_token(other_key, "pipeline", 3600)) == 401
    assert _status(server, mint_token(server.private_key, "pipeline", -60)) == 401  # expired
    header, claims, signature = server.token("analyst").split(".")
    forged = json.loads(base64.urlsafe_b64decode(claims + "=="))
    forged["upn"] = forged["sub"] = "pipeline"  # the claims changed after signing
    changed = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    assert _status(server, f"{header}.{changed}.{signature}") == 401
    with pytest.raises(UnauthorizedError):
        RestCatalog("anyone", uri=server.uri).list_namespaces()


def test_spark_reads_through_the_catalog_as_an_analyst_and_its_insert_is_refused_there(server, s3_server, spark):
    ns = f"sales_{uuid.uuid4().hex[:6]}"
    for principal in ("pipeline", "analyst"):
        prefix = f"spark.sql.catalog.rest_{principal}"
        spark.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
        for key, value in {"type": "rest", "uri": server.uri, "token": server.token(principal),
                           "client.region": "us-east-1", **_s3(s3_server)}.items():
            spark.conf.set(f"{prefix}.{key}", value)
    spark.sql(f"CREATE NAMESPACE rest_pipeline.{ns}")
    spark.sql(f"CREATE TABLE rest_pipeline.{ns}.gold_sales (day STRING, amount BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO rest_pipeline.{ns}.gold_sales VALUES ('2025-01-01', 10), ('2025-01-02', 20)")
    spark.sql(f"ALTER TABLE rest_pipeline.{ns}.gold_sales CREATE TAG month_end")
    table = _client(server, s3_server, "pipeline").load_table(f"{ns}.gold_sales")
    before = _state(table)

    assert spark.sql(f"SELECT sum(amount) FROM rest_analyst.{ns}.gold_sales VERSION AS OF 'month_end'"
                     ).collect()[0][0] == 30
    for statement in (f"INSERT INTO rest_analyst.{ns}.gold_sales VALUES ('2025-01-03', 1)",
                      f"DELETE FROM rest_analyst.{ns}.gold_sales WHERE amount = 10",
                      f"ALTER TABLE rest_analyst.{ns}.gold_sales CREATE BRANCH mine",
                      f"DROP TABLE rest_analyst.{ns}.gold_sales"):
        with pytest.raises(Exception) as refused:
            spark.sql(statement).collect()
        assert REFUSED in str(refused.value), (statement, str(refused.value)[:2000])
    assert _state(table) == before


def test_the_command_serves_the_lakehouses_catalog_gives_tokens_of_its_principals_and_stops(tmp_path):
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home")}
    for key in [k for k in env if k.startswith("LAKEHOUSE_") and k != "LAKEHOUSE_HOME"]:
        del env[key]

    def lakehouse(*args):
        return subprocess.run([LAKEHOUSE, "catalog", *args], env=env, capture_output=True, text=True, timeout=240)

    started = lakehouse("start")
    try:
        assert started.returncode == 0, started.stderr
        status = lakehouse("status")
        assert status.stdout.startswith("running, pid "), status.stdout
        uri = status.stdout.split(", ")[2]
        token = lakehouse("token", "--principal", "pipeline").stdout.strip()
        lake = RestCatalog("lake", uri=uri, token=token)
        lake.create_namespace("cli")
        lake.create_table("cli.gold_daily", schema=SCHEMA)
        # The table is the lakehouse's own: its SQL catalog under the home has it.
        sql = SqlCatalog("lakehouse", uri=f"sqlite:///{tmp_path / 'home' / 'catalog.db'}",
                         warehouse=str(tmp_path / "home" / "warehouse"))
        assert sql.load_table("cli.gold_daily").schema().find_field("events")
        unknown = lakehouse("token", "--principal", "root")
        assert unknown.returncode == 2 and "the catalog's principals are pipeline, analyst, ml" in unknown.stderr
    finally:
        stopped = lakehouse("stop")
    assert stopped.stdout.strip() == "stopped" and lakehouse("status").stdout.strip() == "not running"


def _tables(catalog, namespace: str) -> dict:
    """What moving a table must keep: its metadata file, snapshots, branches and tags, rows at each snapshot."""
    held = {}
    for identifier in catalog.list_tables(namespace):
        table = catalog.load_table(identifier)
        held[identifier[-1]] = (
            table.metadata_location, [s.snapshot_id for s in table.metadata.snapshots],
            {name: (ref.snapshot_id, ref.snapshot_ref_type) for name, ref in table.metadata.refs.items()},
            [sorted(map(str, table.scan(snapshot_id=s.snapshot_id).to_arrow().to_pylist()))
             for s in table.metadata.snapshots])
    return held


def test_a_lakehouse_moves_to_the_rest_catalog_and_back_with_its_snapshots_branches_and_tags(tmp_path):
    home = tmp_path / "home"
    (home / "warehouse").mkdir(parents=True)
    source = SqlCatalog("lakehouse", uri=f"sqlite:///{home}/catalog.db", warehouse=f"file://{home}/warehouse")
    source.create_namespace("lake", {"owner": "data-eng"})
    daily = source.create_table("lake.gold_daily", schema=SCHEMA)
    for day in ("2025-05-01", "2025-05-02"):
        daily.append(pa.table({"day": [day], "events": [int(day[-1])]}, schema=SCHEMA))
    first = daily.metadata.snapshots[0].snapshot_id
    daily.manage_snapshots().create_tag(first, "train_v1").create_branch(first, "audit").commit()
    source.create_table("lake.ml_user_features", schema=SCHEMA).append(
        pa.table({"day": ["2025-05-01"], "events": [9]}, schema=SCHEMA))
    before = _tables(source, "lake")

    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")} | {"LAKEHOUSE_HOME": str(home)}

    def migrate(to: str, catalog_uri: str = "", *extra: str):
        run_env = env | ({"LAKEHOUSE_CATALOG_URI": catalog_uri} if catalog_uri else {})
        return subprocess.run([LAKEHOUSE, "catalog", "migrate", "--to", to, *extra], env=run_env,
                              capture_output=True, text=True, timeout=240)

    rest_db = tmp_path / "rest.db"
    with RestCatalogServer(tmp_path / "rest-server", catalog_uri=f"jdbc:sqlite:{rest_db}",
                           warehouse=f"file://{tmp_path}/rest-warehouse", rules=catalog_rules()) as target:
        dry = migrate(target.settings_uri("pipeline"), "", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert not _client_tables(target)  # a dry run registers nothing
        moved = migrate(target.settings_uri("pipeline"))
        assert moved.returncode == 0, moved.stderr
        through = RestCatalog("lake", uri=target.uri, token=target.token("pipeline"))
        assert _tables(through, "lake") == before
        assert through.load_namespace_properties("lake")["owner"] == "data-eng"
        assert "already there" in migrate(target.settings_uri("pipeline")).stdout  # run again: nothing to do
        analyst = migrate(target.settings_uri("analyst"))  # the server decides: an analyst registers nothing
        assert analyst.returncode != 0 and "principal 'analyst' may not" in analyst.stderr + analyst.stdout

        # A commit through the REST catalog after the move, then back to a SQL catalog of its own.
        through.load_table("lake.gold_daily").append(pa.table({"day": ["2025-05-03"], "events": [3]}, schema=SCHEMA))
        after = _tables(through, "lake")
        back = migrate(f"sqlite:///{tmp_path / 'back.db'}", target.settings_uri("pipeline"))
        assert back.returncode == 0, back.stderr
    returned = SqlCatalog("lakehouse", uri=f"sqlite:///{tmp_path / 'back.db'}", warehouse=f"file://{home}/warehouse")
    assert _tables(returned, "lake") == after and after["gold_daily"][1][:2] == before["gold_daily"][1]

    # The source still points at its own older metadata: moving to it again is refused, naming the table.
    refused = migrate(f"sqlite:///{home}/catalog.db", f"sqlite:///{tmp_path / 'back.db'}")
    assert refused.returncode == 1 and "lake.gold_daily: the target has this table at another metadata file" in \
        refused.stderr, refused.stderr


def _client_tables(server) -> list:
    catalog = RestCatalog("lake", uri=server.uri, token=server.token("pipeline"))
    return [t for (ns,) in catalog.list_namespaces() for t in catalog.list_tables(ns)]


def test_readers_are_handed_the_read_only_keys_with_each_table_and_need_none_of_their_own(tmp_path):
    """A SeaweedFS with the platform's identity and a read-only one: the server hands analysts the read-only keys
    with every table they load, so an analyst's engine given no key at all reads the table, and what it was
    handed cannot write to the store."""
    import boto3
    from botocore.config import Config as BotoConfig
    from botocore.exceptions import ClientError

    from lakehouse_assets.serving.read_rule import reader_io
    from lakehouse_assets.settings import Settings
    from lakehouse_services.s3server import SeaweedS3

    config = tmp_path / "s3.json"
    config.write_text(json.dumps({"identities": [
        {"name": "platform", "credentials": [{"accessKey": "admin", "secretKey": "adminsecret"}],
         "actions": ["Admin", "Read", "List", "Write", "Tagging"]},
        {"name": "analysts", "credentials": [{"accessKey": "analysts", "secretKey": "reader-secret"}],
         "actions": ["Read:lake/warehouse/*", "List:lake"]},
    ]}))

    class WithIdentities(SeaweedS3):
        def command(self) -> list[str]:
            return [*super().command(), f"-s3.config={config}"]

    with WithIdentities.with_free_ports(tmp_path / "s3", buckets=("lake",)) as store:
        settings = Settings(home=tmp_path / "home", warehouse="s3://lake/warehouse", s3_endpoint=store.endpoint_url,
                            s3_access_key="admin", s3_secret_key="adminsecret", sql_s3_access_key="analysts",
                            sql_s3_secret_key="reader-secret", project=str(tmp_path / "none.yaml"))
        platform_io = {"io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "client.region": store.region,
                       "s3.endpoint": store.endpoint_url, "s3.access-key-id": "admin",
                       "s3.secret-access-key": "adminsecret", "s3.path-style-access": "true"}
        with RestCatalogServer(tmp_path / "server", catalog_uri=f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
                               warehouse="s3://lake/warehouse", io=platform_io,
                               rules=catalog_rules(readers_io=reader_io(settings))) as server:
            pipeline = RestCatalog("p", uri=server.uri, token=server.token("pipeline"),
                                   **{"s3.endpoint": store.endpoint_url, "s3.access-key-id": "admin",
                                      "s3.secret-access-key": "adminsecret", "s3.region": store.region})
            pipeline.create_namespace("lake")
            pipeline.create_table("lake.gold_daily", schema=SCHEMA).append(
                pa.table({"day": ["2025-06-01"], "events": [6]}, schema=SCHEMA))

            analyst = RestCatalog("a", uri=server.uri, token=server.token("analyst"))  # no storage settings at all
            table = analyst.load_table("lake.gold_daily")
            assert table.scan().to_arrow().to_pylist() == [{"day": "2025-06-01", "events": 6}]
            handed = table.io.properties
            assert handed["s3.access-key-id"] == "analysts" and "adminsecret" not in map(str, handed.values())
            s3 = boto3.client("s3", endpoint_url=store.endpoint_url, aws_access_key_id=handed["s3.access-key-id"],
                              aws_secret_access_key=handed["s3.secret-access-key"], region_name=store.region,
                              config=BotoConfig(signature_version="s3v4", s3={"addressing_style": "path"}))
            with pytest.raises(ClientError, match="AccessDenied"):
                s3.put_object(Bucket="lake", Key="warehouse/lake/gold_daily/data/mine.parquet", Body=b"x")
