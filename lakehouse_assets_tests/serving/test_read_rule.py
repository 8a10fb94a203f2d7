"""The raw-table rule is serving/read_rule.py's alone: the endpoint's Spark settings carry it to the Java check,
which keeps no copy. (test_serve.py changes the rule and sees both doors follow.)"""

import re

from lakehouse_assets.runtime.java_jar import MODULE
from lakehouse_assets.runtime.spark import spark_conf
from lakehouse_assets.serving import read_rule
from lakehouse_assets.serving.endpoint import Endpoint, endpoint_settings
from lakehouse_assets.settings import Settings

JAVA = MODULE / "src" / "main" / "java" / "lakehouse"


def test_the_endpoint_hands_the_rule_to_its_java_check(tmp_path, monkeypatch):
    settings = Settings(home=tmp_path, project=str(tmp_path / "none.yaml"))
    conf = dict(endpoint_settings(settings, Endpoint("127.0.0.1", 10000, "lake")).spark_conf)
    assert {key: conf[key] for key in read_rule.endpoint_rule(settings)} == {
        "spark.lakehouse.serve.raw": "false", "spark.lakehouse.serve.rawPrefixes": "bronze_",
        "spark.lakehouse.serve.rawSuffixes": "_quarantine", "spark.lakehouse.serve.exposed": ""}
    monkeypatch.setattr(read_rule, "RAW_PREFIXES", ("bronze_", "scratch_"))
    monkeypatch.setattr(read_rule, "RAW_SUFFIXES", ())
    conf = dict(endpoint_settings(settings.with_(sql_raw=True), Endpoint("127.0.0.1", 10000, "lake")).spark_conf)
    assert conf["spark.lakehouse.serve.rawPrefixes"] == "bronze_,scratch_"
    assert conf["spark.lakehouse.serve.rawSuffixes"] == "" and conf["spark.lakehouse.serve.raw"] == "true"
    assert read_rule.looks_raw("Scratch_X") and not read_rule.looks_raw("x_quarantine")


def test_through_a_rest_catalog_the_endpoints_spark_signs_in_as_the_serving_principal_not_the_pipelines(tmp_path):
    settings = Settings(home=tmp_path, project=str(tmp_path / "none.yaml"),
                        catalog_uri="rest+http://pipeline:pipeline.token.sig@127.0.0.1:8181",
                        serve_catalog_uri="rest+http://analyst:analyst.token.sig@127.0.0.1:8181")
    served = endpoint_settings(settings, Endpoint("127.0.0.1", 10000, "lake"))
    conf = {key: value for key, value in spark_conf(served).items() if key.startswith("spark.sql.catalog.lakehouse")}
    assert conf["spark.sql.catalog.lakehouse.type"] == "rest"
    assert conf["spark.sql.catalog.lakehouse.uri"] == "http://127.0.0.1:8181"
    assert conf["spark.sql.catalog.lakehouse.token"] == "analyst.token.sig"
    assert "pipeline.token.sig" not in repr(spark_conf(served)) + repr(served.spark_conf)


def test_the_java_check_keeps_no_copy_of_the_rule():
    sources = {path.name: path.read_text() for path in JAVA.glob("*.java")}
    for key in ("RAW_VISIBLE_KEY", "RAW_PREFIXES_KEY", "RAW_SUFFIXES_KEY", "EXPOSED_KEY"):
        assert f'"{getattr(read_rule, key)}"' in sources["ReadOnlySql.java"], key
    for name, text in sources.items():
        code = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.DOTALL)  # comments may name the rule
        for affix in (*read_rule.RAW_PREFIXES, *read_rule.RAW_SUFFIXES):
            assert f'"{affix}' not in code and f'{affix}"' not in code, (name, affix)
