"""Frames of rows a run holds in Python (its ingest log, the PII pads, the files' sizes) go to the JVM as Arrow:
the rows and types `createDataFrame` gives, in a plan of local rows that no Python worker computes."""

from __future__ import annotations

import ast
import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

from lakehouse_assets.runtime.spark import local_frame

PACKAGE = Path(__file__).resolve().parents[2] / "lakehouse_assets"

SCHEMA = "s string, i int, l long, d date, t timestamp, b binary, m decimal(12,2), n string, f double"
ROWS = [
    ("a", 1, 2**40, dt.date(2025, 1, 1), dt.datetime(2025, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))),
     b"\x00\xff", Decimal("12.34"), None, 0.5),
    (None, None, None, None, None, None, None, "x", None),
]


def _analysed(frame) -> str:
    return frame._jdf.queryExecution().analyzed().getClass().getSimpleName()


@pytest.mark.parametrize("ignored", ["", "1"], ids=["arrow", "arrow ignoring time zones"])
def test_a_local_frame_has_the_rows_and_types_create_data_frame_gives_as_local_rows(spark, monkeypatch, ignored):
    # Importing pyspark.pandas (pandera does, in a run's process) sets PYARROW_IGNORE_TIMEZONE=1.
    monkeypatch.setenv("PYARROW_IGNORE_TIMEZONE", ignored)
    local, pickled = local_frame(spark, ROWS, SCHEMA), spark.createDataFrame(ROWS, SCHEMA)
    assert local.schema == pickled.schema
    assert local.collect() == pickled.collect()
    assert local.collect()[0].t == dt.datetime(2025, 1, 1, 10, 0)  # the instant, in the session's time zone (UTC)
    # PySpark's list path is an RDD of pickled rows, made into Spark's rows by Python workers on the executors.
    assert (_analysed(local), _analysed(pickled)) == ("LocalRelation", "LogicalRDD")
    empty = local_frame(spark, [], SCHEMA)
    assert empty.schema == pickled.schema and empty.count() == 0 and _analysed(empty) == "LocalRelation"


def test_a_timestamp_without_its_time_zone_or_a_row_of_another_width_is_refused(spark):
    with pytest.raises(ValueError, match="t: a timestamp without a time zone"):
        local_frame(spark, [("a", dt.datetime(2025, 1, 1))], "s string, t timestamp")
    with pytest.raises(ValueError, match="a row of 1 values for the 2 columns"):
        local_frame(spark, [("a",)], "s string, t timestamp")


def test_the_platform_makes_its_frames_of_python_rows_through_local_frame_alone():
    """A run that made one frame of Python rows with `createDataFrame` would start Spark's Python worker daemon in
    its process (seconds of a small run's fixed cost)."""
    calls = []
    for source in PACKAGE.rglob("*.py"):
        for function in ast.walk(ast.parse(source.read_text())):
            if isinstance(function, ast.FunctionDef):
                calls += [(str(source.relative_to(PACKAGE)), function.name) for node in ast.walk(function)
                          if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                          and node.func.attr == "createDataFrame"]
    assert calls == [("runtime/spark.py", "local_frame")], calls
