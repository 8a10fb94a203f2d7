import json
import re

import pytest

from lakehouse_assets.settings import CatalogUri, Settings, validate_identifier


def test_sqlite_uri_speaks_both_dialects():
    uri = CatalogUri.parse("sqlite:////data/lake/catalog.db")
    assert uri.kind == "sqlite"
    assert uri.jdbc_url == "jdbc:sqlite:/data/lake/catalog.db"
    assert uri.sqlalchemy_url == "sqlite:////data/lake/catalog.db"


def test_postgres_uri_keeps_credentials_out_of_the_jdbc_url():
    uri = CatalogUri.parse("postgresql://lake:s%40cret@db.internal:6543/catalog")
    assert (uri.host, uri.port, uri.database, uri.user, uri.password) == (
        "db.internal", 6543, "catalog", "lake", "s@cret"
    )
    assert uri.jdbc_url == "jdbc:postgresql://db.internal:6543/catalog"
    assert uri.sqlalchemy_url == "postgresql+psycopg2://lake:s%40cret@db.internal:6543/catalog"
    assert "s@cret" not in uri.display and "s@cret" not in repr(uri)


def test_a_rest_catalog_uri_carries_its_token_where_no_message_shows_it_and_has_no_database_url():
    uri = CatalogUri.parse("rest+https://analyst:eyJ.abc.sig@catalog.internal/api/catalog/")
    assert (uri.kind, uri.rest_url, uri.user, uri.password) == (
        "rest", "https://catalog.internal:443/api/catalog", "analyst", "eyJ.abc.sig")
    assert "eyJ" not in uri.display and "eyJ" not in repr(uri)
    with pytest.raises(ValueError, match="is a REST catalog: it has no JDBC URL"):
        uri.jdbc_url  # noqa: B018 - the property raises


@pytest.mark.parametrize("bad", ["sqlite:///relative.db", "mysql://x/y", "postgresql://host-only", "rest+ftp://x",
                                 "rest+http://"])
def test_bad_catalog_uris_are_refused_with_the_reason(bad):
    with pytest.raises(ValueError, match="catalog URI|unsupported"):
        CatalogUri.parse(bad)


def test_defaults_live_under_the_lakehouse_home(tmp_path):
    s = Settings.from_env(home=tmp_path)
    assert s.catalog_uri == f"sqlite:///{tmp_path / 'catalog.db'}"
    assert s.warehouse == (tmp_path / "warehouse").as_uri()
    assert s.landing == (tmp_path / "landing").as_uri()
    assert s.local_path(s.landing) == tmp_path / "landing"


def test_environment_decides_local_or_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    monkeypatch.setenv("LAKEHOUSE_CATALOG_URI", "postgresql://u@pg:5432/lake")
    monkeypatch.setenv("LAKEHOUSE_WAREHOUSE", "s3://lake/warehouse")
    monkeypatch.setenv("LAKEHOUSE_SPARK_MASTER", "spark://spark-master:7077")
    s = Settings.from_env()
    assert s.catalog.kind == "postgresql"
    assert s.warehouse == "s3://lake/warehouse"
    assert s.spark_master == "spark://spark-master:7077"


def test_further_spark_settings_reach_the_session_conf_and_bad_ones_are_refused(monkeypatch, tmp_path):
    from lakehouse_assets.runtime.spark import spark_conf

    monkeypatch.setenv("LAKEHOUSE_SPARK_CONF", "spark.executor.memory=3g, spark.sql.shuffle.partitions=16")
    conf = spark_conf(Settings.from_env(home=tmp_path))
    assert conf["spark.executor.memory"] == "3g"
    assert conf["spark.sql.shuffle.partitions"] == "16"  # the user's setting wins over the platform's
    for bad in ("executor.memory=3g", "spark.executor.memory", "spark.executor.memory="):
        monkeypatch.setenv("LAKEHOUSE_SPARK_CONF", bad)
        with pytest.raises(ValueError, match="LAKEHOUSE_SPARK_CONF"):
            Settings.from_env(home=tmp_path)


def test_kafka_bootstrap_servers_are_host_port_pairs_and_anything_else_is_refused(monkeypatch, tmp_path):
    assert Settings.from_env(home=tmp_path).kafka_bootstrap_servers == ""
    monkeypatch.setenv("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", " kafka-1.internal:9092, 10.0.0.7:9093 ,")
    assert Settings.from_env(home=tmp_path).kafka_bootstrap_servers == "kafka-1.internal:9092,10.0.0.7:9093"
    for bad in ("kafka-1.internal", ":9092", "kafka:port", "kafka:70000"):
        monkeypatch.setenv("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", bad)
        with pytest.raises(ValueError, match=rf"LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS: {re.escape(repr(bad))} is not host:port"):
            Settings.from_env(home=tmp_path)


def test_kafka_sign_in_and_tls_come_from_the_environment_and_the_password_is_shown_only_as_set(monkeypatch, tmp_path):
    s = Settings.from_env(home=tmp_path)
    assert (s.kafka_security_protocol, s.kafka_sasl_mechanism, s.kafka_ssl_ca_file) == ("PLAINTEXT", "", "")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", "kafka-1.internal:9093")
    monkeypatch.setenv("LAKEHOUSE_KAFKA_SECURITY_PROTOCOL", "sasl_ssl")
    monkeypatch.setenv("LAKEHOUSE_KAFKA_SASL_MECHANISM", "scram-sha-256")
    monkeypatch.setenv("LAKEHOUSE_KAFKA_SASL_USERNAME", "lake")
    monkeypatch.setenv("LAKEHOUSE_KAFKA_SASL_PASSWORD", " k4fka s3cret ")  # spaces at its ends are part of it
    monkeypatch.setenv("LAKEHOUSE_KAFKA_SSL_CA_FILE", str(ca))
    s = Settings.from_env(home=tmp_path)
    assert (s.kafka_security_protocol, s.kafka_sasl_mechanism, s.kafka_sasl_username, s.kafka_sasl_password,
            s.kafka_ssl_ca_file) == ("SASL_SSL", "SCRAM-SHA-256", "lake", " k4fka s3cret ", str(ca))
    shown = s.describe()
    assert shown["kafka_sasl"] == "SCRAM-SHA-256, user lake, password (set)"
    assert shown["kafka_ssl_ca_file"] == str(ca)
    assert "s3cret" not in repr(s) and "s3cret" not in json.dumps(shown)
    monkeypatch.delenv("LAKEHOUSE_KAFKA_SASL_MECHANISM")
    assert Settings.from_env(home=tmp_path).kafka_sasl_mechanism == "PLAIN"  # SASL's default mechanism


@pytest.mark.parametrize(("env", "message"), [
    ({"SECURITY_PROTOCOL": "TLS"}, r"LAKEHOUSE_KAFKA_SECURITY_PROTOCOL='TLS': expected one of PLAINTEXT, SSL, "
                                   "SASL_PLAINTEXT, SASL_SSL"),
    ({"SECURITY_PROTOCOL": "SASL_SSL", "SASL_MECHANISM": "GSSAPI", "SASL_USERNAME": "u", "SASL_PASSWORD": "p"},
     r"LAKEHOUSE_KAFKA_SASL_MECHANISM='GSSAPI': expected one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"SECURITY_PROTOCOL": "SASL_SSL"}, "set LAKEHOUSE_KAFKA_SASL_USERNAME and LAKEHOUSE_KAFKA_SASL_PASSWORD"),
    ({"SECURITY_PROTOCOL": "SASL_PLAINTEXT", "SASL_USERNAME": "u"}, "set LAKEHOUSE_KAFKA_SASL_PASSWORD$"),
    ({"SASL_USERNAME": "u", "SASL_PASSWORD": "p"}, "LAKEHOUSE_KAFKA_SASL_USERNAME, LAKEHOUSE_KAFKA_SASL_PASSWORD set, "
                                                   "but LAKEHOUSE_KAFKA_SECURITY_PROTOCOL=PLAINTEXT does not sign in"),
    ({"SECURITY_PROTOCOL": "SSL", "SSL_CA_FILE": "/no/such/ca.pem"},
     r"LAKEHOUSE_KAFKA_SSL_CA_FILE='/no/such/ca.pem': no such file"),
    ({"SECURITY_PROTOCOL": "SASL_PLAINTEXT", "SASL_USERNAME": "u", "SASL_PASSWORD": "p", "SSL_CA_FILE": "/etc"},
     "LAKEHOUSE_KAFKA_SSL_CA_FILE set, but LAKEHOUSE_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT does not use TLS"),
])
def test_kafka_security_settings_that_cannot_work_are_refused_at_load_naming_the_variable(monkeypatch, tmp_path, env,
                                                                                          message):
    from lakehouse_assets.errors import ConfigurationError

    for name, value in env.items():
        monkeypatch.setenv(f"LAKEHOUSE_KAFKA_{name}", value)
    with pytest.raises(ConfigurationError, match=message) as refused:
        Settings.from_env(home=tmp_path)
    assert "'p'" not in str(refused.value)


@pytest.mark.parametrize("name", ["bronze events", "x;drop", "1abc", ""])
def test_identifiers_in_sql_are_validated(name):
    with pytest.raises(ValueError, match="invalid"):
        validate_identifier(name)


PROFILES = """
profiles:
  local:
    LAKEHOUSE_SPARK_MASTER: local[2]
  cluster:
    LAKEHOUSE_SPARK_MASTER: ${MASTER_URL:-spark://127.0.0.1:7077}
    LAKEHOUSE_CATALOG_URI: postgresql://lake:${CATALOG_PASSWORD}@db:5432/catalog
    LAKEHOUSE_WAREHOUSE: s3://lake/warehouse
    LAKEHOUSE_S3_SECRET_KEY: ${S3_SECRET}
"""


@pytest.fixture
def profiles(monkeypatch, tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_text(PROFILES)
    for name in ("LAKEHOUSE_SPARK_MASTER", "LAKEHOUSE_CATALOG_URI", "LAKEHOUSE_WAREHOUSE", "LAKEHOUSE_S3_SECRET_KEY",
                 "MASTER_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LAKEHOUSE_PROFILES", str(path))
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CATALOG_PASSWORD", "pg-s3cret")
    monkeypatch.setenv("S3_SECRET", "s3-s3cret")
    return path


def test_one_setting_chooses_the_profile(monkeypatch, tmp_path, profiles):
    local = Settings.from_env()
    assert (local.profile, local.spark_master, local.catalog.kind) == ("local", "local[2]", "sqlite")
    assert local.warehouse == (tmp_path / "home" / "warehouse").as_uri()

    monkeypatch.setenv("LAKEHOUSE_PROFILE", "cluster")
    cluster = Settings.from_env()
    assert (cluster.profile, cluster.spark_master) == ("cluster", "spark://127.0.0.1:7077")
    assert (cluster.catalog.kind, cluster.catalog.password) == ("postgresql", "pg-s3cret")
    assert (cluster.warehouse, cluster.s3_secret_key) == ("s3://lake/warehouse", "s3-s3cret")

    # ${VAR} comes from the environment; a variable set in the environment wins over the profile.
    monkeypatch.setenv("MASTER_URL", "spark://master:7078")
    assert Settings.from_env().spark_master == "spark://master:7078"
    monkeypatch.setenv("LAKEHOUSE_SPARK_MASTER", "local[1]")
    assert Settings.from_env().spark_master == "local[1]"


def test_settings_output_names_the_profile_and_never_shows_a_secret(monkeypatch, capsys, profiles):
    from lakehouse_assets.cli import main

    monkeypatch.setenv("LAKEHOUSE_PROFILE", "cluster")
    monkeypatch.setenv("LAKEHOUSE_PII_KEY", "pii-s3cret")
    assert main(["settings", "--json"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out)
    assert shown["profile"] == "cluster" and shown["catalog"] == "postgresql://lake@db:5432/catalog (password (set))"
    assert shown["s3_secret_key"] == shown["pii_key"] == "(set)"
    assert not any(secret in out for secret in ("pg-s3cret", "s3-s3cret", "pii-s3cret"))


@pytest.mark.parametrize("text, profile, error", [
    (PROFILES, "staging", "'staging' is not a profile of .*known: cluster, local"),
    ("profiles:\n  cluster:\n    LAKEHOUSE_SPARK_MASTR: x\n", "cluster", "unknown setting 'LAKEHOUSE_SPARK_MASTR'"),
    ("profiles:\n  cluster:\n    LAKEHOUSE_WAREHOUSE: s3://${BUCKET}/w\n", "cluster", r"refers to \$\{BUCKET\}"),
    ("profiles: [cluster]\n", "cluster", "expected a mapping"),
    ("profiles:\n  cluster: {LAKEHOUSE_WAREHOUSE: [a, b]}\n", "cluster", "must be a single value"),
    ("profiles: {cluster: {\n", "cluster", "not valid YAML"),
])
def test_a_bad_profile_is_refused_with_the_reason(monkeypatch, profiles, text, profile, error):
    monkeypatch.delenv("BUCKET", raising=False)
    profiles.write_text(text)
    monkeypatch.setenv("LAKEHOUSE_PROFILE", profile)
    with pytest.raises(ValueError, match=error):
        Settings.from_env()


def test_without_a_profiles_file_local_is_the_defaults_and_others_are_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("LAKEHOUSE_PROFILES", str(tmp_path / "none.yaml"))
    monkeypatch.delenv("LAKEHOUSE_SPARK_MASTER", raising=False)
    assert Settings.from_env(home=tmp_path).spark_master == "local[*]"
    monkeypatch.setenv("LAKEHOUSE_PROFILE", "cluster")
    with pytest.raises(ValueError, match="no such file"):
        Settings.from_env(home=tmp_path)


def test_the_shipped_cluster_profile_resolves(monkeypatch, tmp_path):
    from .shop import ROOT

    monkeypatch.setenv("LAKEHOUSE_PROFILES", str(ROOT / "examples/cluster/profiles.yaml"))
    monkeypatch.setenv("LAKEHOUSE_PROFILE", "cluster")
    for name in ("LAKEHOUSE_SPARK_MASTER", "LAKEHOUSE_CATALOG_URI", "LAKEHOUSE_WAREHOUSE", "LAKEHOUSE_LANDING",
                 "LAKEHOUSE_S3_ENDPOINT", "LAKEHOUSE_SPARK_CONF", "SPARK_MASTER_URL", "PGPORT", "PGHOST", "PGUSER",
                 "PGPASSWORD", "SPARK_EXTRA_CONF", "S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("S3_ACCESS_KEY", "lake")
    monkeypatch.setenv("S3_SECRET_KEY", "secret")
    s = Settings.from_env(home=tmp_path)
    assert s.spark_master == "spark://127.0.0.1:7077" and s.catalog.port == 5432 and s.uses_s3
    assert dict(s.spark_conf) == {"spark.executor.memory": "1g"}
    assert (s.warehouse, s.landing, s.s3_endpoint) == ("s3://lake/warehouse", "s3://raw/landing",
                                                       "http://127.0.0.1:8333")


def test_the_home_records_its_declaration_for_a_shell_without_lakehouse_project(monkeypatch, tmp_path):
    """`make home` (which `make demo`, `make dev` and `make stream` run) records the declaration in the home; with
    LAKEHOUSE_PROJECT unset the settings take it from there; a declaration that is not there is an error that says
    where its path came from; LAKEHOUSE_PROJECT still wins."""
    import os
    import subprocess

    from lakehouse_assets.errors import DeclarationError
    from lakehouse_assets.project import load_project

    from .shop import ROOT

    root = tmp_path.resolve()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_"))}
    subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "home"], cwd=root, env=env, check=True)
    monkeypatch.chdir(root)
    for name in ("LAKEHOUSE_PROJECT", "LAKEHOUSE_HOME", "LAKEHOUSE_PROFILES"):
        monkeypatch.delenv(name, raising=False)
    record = root / ".lakehouse" / "project"
    s = Settings.from_env()
    assert (s.home, s.project) == (root / ".lakehouse", str(root / "examples" / "shop" / "lakehouse.yaml"))
    assert s.project_origin == f"recorded in {record}" and s.describe()["project_origin"] == s.project_origin
    with pytest.raises(DeclarationError, match=rf"no such declaration file \(recorded in {re.escape(str(record))}\)"):
        load_project(s.project, s.project_origin)
    (root / "examples").symlink_to(ROOT / "examples")
    assert load_project(s.project, s.project_origin).name == "shop"

    monkeypatch.setenv("LAKEHOUSE_PROJECT", str(root / "mine.yaml"))
    assert (Settings.from_env().project, Settings.from_env().project_origin) == (str(root / "mine.yaml"),
                                                                               "named by LAKEHOUSE_PROJECT")
    monkeypatch.delenv("LAKEHOUSE_PROJECT")
    record.unlink()
    s = Settings.from_env()
    assert s.project == "lakehouse.yaml"
    with pytest.raises(DeclarationError, match=rf"LAKEHOUSE_PROJECT is unset and no declaration is recorded in "
                                               rf"{re.escape(str(record))}\)"):
        load_project(s.project, s.project_origin)
    # Another home records another declaration, relative to the folder that holds the home.
    (root / "other").mkdir()
    (root / "other" / "project").write_text("examples/cdc/lakehouse.yaml\n")
    monkeypatch.setenv("LAKEHOUSE_HOME", str(root / "other"))
    assert Settings.from_env().project == str(root / "examples" / "cdc" / "lakehouse.yaml")
