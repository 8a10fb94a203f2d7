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


@pytest.mark.parametrize("bad", ["sqlite:///relative.db", "mysql://x/y", "postgresql://host-only"])
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


@pytest.mark.parametrize("name", ["bronze events", "x;drop", "1abc", ""])
def test_identifiers_in_sql_are_validated(name):
    with pytest.raises(ValueError, match="invalid"):
        validate_identifier(name)
