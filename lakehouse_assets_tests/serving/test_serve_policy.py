"""The SQL endpoint's list of what reading is made of (java/src/main/resources/lakehouse/read-policy.tsv): every plan node,
command and built-in function the Spark and Iceberg on this installation have is decided on it, so that an
upgrade that adds one fails here before the endpoint meets it (the endpoint refuses what the list lacks)."""


from lakehouse_assets.runtime.jars import iceberg_runtime_jar
from lakehouse_assets.runtime.java_jar import MODULE

from .serve_fuzz import SPARK_JARS, _java

POLICY = MODULE / "src" / "main" / "resources" / "lakehouse" / "read-policy.tsv"


def _decided() -> dict[tuple[str, str], str]:
    rows = [line.split("\t") for line in POLICY.read_text().splitlines() if line and not line.startswith("#")]
    return {(kind, name): decision for kind, name, decision, *_ in rows}


def test_every_plan_node_command_and_function_spark_has_is_decided_and_none_is_listed_that_it_lacks():
    jars = [str(j) for j in sorted(SPARK_JARS.glob("spark-*.jar"))] + [str(iceberg_runtime_jar())]
    universe = {tuple(line.split("\t")) for line in _java("universe", *jars).splitlines() if line}
    assert len(universe) > 700  # plans, commands and functions of Spark and Iceberg's extensions
    decided = {key for key in _decided() if key[0] in ("plan", "command", "function")}
    assert sorted(universe - decided) == [], "Spark has these, the endpoint's list has not decided them"
    assert sorted(decided - universe) == [], "the endpoint's list decides these, which Spark does not have"


def test_the_list_allows_reading_and_refuses_what_reaches_out_of_a_query():
    decided = _decided()
    for kind, name in [("plan", "Project"), ("plan", "Aggregate"), ("plan", "DataSourceV2Relation"),
                       ("command", "DescribeRelation"), ("command", "ShowTables"), ("command", "ShowNamespacesCommand"),
                       ("function", "sum"), ("function", "regexp_extract"), ("expression", "AttributeReference")]:
        assert decided[(kind, name)] == "allow", (kind, name)
    for kind, name in [("plan", "ScriptTransformation"), ("plan", "LogicalRelation"), ("plan", "HiveTableRelation"),
                       ("plan", "InsertIntoDir"), ("command", "AppendData"), ("command", "AddJarsCommand"),
                       ("command", "CreateTempViewUsing"), ("command", "ShowTablesExtended"), ("plan", "Call"),
                       ("plan", "UnresolvedProcedure"), ("plan", "UnresolvedExecuteImmediate"),
                       ("command", "CompoundBody"), ("plan", "WhileStatement"), ("command", "SetVariable"),
                       ("function", "reflect"), ("function", "java_method"), ("function", "try_reflect"),
                       ("function", "xpath_string"), ("function", "python_worker_logs"), ("function", "from_protobuf")]:
        assert decided[(kind, name)] == "refuse", (kind, name)
    settable = sorted(name for (kind, name), decision in decided.items() if kind == "setting")
    assert "spark.sql.shuffle.partitions" in settable and not any(
        key.startswith(("spark.lakehouse.", "spark.sql.catalog", "hive.server2.auth", "spark.sql.variable"))
        for key in settable)
