"""Column expressions are built with one round trip to the JVM per function: PySpark's classes are found in
Python, not looked up in the JVM (and in every jar) on each call."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JError
from pyspark.sql import functions as F


def _commands_sent(spark, build) -> list[str]:
    """The py4j commands `build()` sends, by their first line."""
    client = spark.sparkContext._gateway._gateway_client
    original, sent = client.send_command, []

    def counting(command, *args, **kwargs):
        sent.append(command.split("\n", 1)[0])
        return original(command, *args, **kwargs)

    client.send_command = counting
    try:
        build()
    finally:
        del client.send_command
    return sent


def test_functions_and_their_helpers_are_called_without_a_look_up(spark):
    F.col("warm")  # each method's handle is kept from its first use on
    F.when(F.col("warm").isNull(), F.lit(1))
    F.struct(F.col("warm"), F.col("warm"))
    built = {}

    def build() -> None:
        built["when"] = F.when(F.col("a") == F.lit(2), F.lit("two"))
        built["struct"] = F.struct(F.col("a"), F.col("b"))  # a list: PythonUtils.toSeq

    sent = _commands_sent(spark, build)
    assert sent and "r" not in sent, sent  # calls (c) and a new list (i): no class or method looked up (r)
    frame = spark.sql("SELECT * FROM VALUES (2, 'x'), (3, 'y') AS t(a, b)").select(
        built["when"].alias("w"), built["struct"].alias("s"))
    assert [tuple(r) for r in frame.collect()] == [("two", (2, "x")), (None, (3, "y"))]


def test_an_unknown_name_still_fails_and_is_not_kept(spark):
    functions = spark.sparkContext._jvm.functions
    with pytest.raises(Py4JError, match="does not exist"):
        _ = functions.no_such_function_here
    assert "no_such_function_here" not in vars(functions)
