"""The pandera checks of a staged write, their column rules and the model's rules of rows and keys counted in one
Spark job: the same verdict and the same reported failures as pandera.pyspark running each rule as a job of its own,
in fewer jobs."""

import datetime as dt
import uuid

import pandera.pyspark as pa
import pytest
from pyspark.sql import types as T

from lakehouse_assets.checks.pandera_check import validate, validate_in_one_pass
from lakehouse_assets.checks.rules import HASH_PATTERN, key_rule, row_rule, unique_key
from lakehouse_assets.runtime.spark import local_frame

SCHEMA = T.StructType([T.StructField("id", T.LongType()), T.StructField("kind", T.StringType()),
                       T.StructField("email_hash", T.StringType()), T.StructField("amount", T.DoubleType()),
                       T.StructField("day", T.DateType()), T.StructField("note", T.StringType())])
GOOD = {"id": 1, "kind": "a", "email_hash": "0" * 64, "amount": 2.5, "day": dt.date(2025, 1, 2), "note": "x"}
BROKEN = {  # each case: the good rows, one of them changed so
    "all good": {},
    "a null in a column that may not hold one": {"id": None},
    "below min": {"id": -1},
    "above max": {"id": 101},
    "not in the allowed values": {"kind": "c"},
    "a null where a value is checked, the column nullable": {"kind": None},
    "not matching the pattern": {"email_hash": "0" * 63},
    "a null in a nullable column with a min": {"amount": None},
    "a negative amount": {"amount": -0.5},
    "a day before the first": {"day": dt.date(2024, 12, 31)},
    "a key twice (the model's own check)": {"id": 2},
    "a kind twice among the rows the second key rule counts": {"kind": "a"},
    "past the bound of the rule of rows": {"amount": 5000.0},
    "a string check on a column pandera does not take it on": {"note": "y"},
}


def model():
    return pa.DataFrameSchema({
        "id": pa.Column(T.LongType(), nullable=False, checks=[pa.Check.ge(0), pa.Check.le(100)]),
        "kind": pa.Column(T.StringType(), nullable=True, checks=[pa.Check.isin(["a", "b"])]),
        "email_hash": pa.Column(T.StringType(), nullable=True, checks=[pa.Check.str_matches(HASH_PATTERN)]),
        "amount": pa.Column(T.DoubleType(), nullable=True, checks=[pa.Check.ge(0)]),
        "day": pa.Column(T.DateType(), nullable=False, checks=[pa.Check.ge(dt.date(2025, 1, 1))]),
        "note": pa.Column(T.StringType(), nullable=True, checks=[pa.Check.str_length(1, 1),
                                                                 pa.Check.str_startswith("x")]),
    }, name="t", checks=[unique_key(["id"], "one_row_per_id"),
                         key_rule(["kind"], "one_kind_of_ids_3_and_4", where="id IN (3, 4)"),
                         row_rule("amount > 1000", "amount_at_most_1000")])


def _rows(spark, change):
    rows = [dict(GOOD, id=n, kind="ab"[n % 2]) for n in range(1, 6)]
    rows[2] = {**rows[2], **change}
    return local_frame(spark, [tuple(r[f.name] for f in SCHEMA.fields) for r in rows], SCHEMA).cache()


def _jobs(spark, run):
    group = f"g{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, group)
    try:
        result = run()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return result, len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize("case", list(BROKEN))
def test_the_column_rules_in_one_pass_decide_and_report_as_pandera_does(spark, case):
    df = _rows(spark, BROKEN[case])
    pandera_alone, pandera_jobs = _jobs(spark, lambda: validate(model(), df))
    ours, our_jobs = _jobs(spark, lambda: validate_in_one_pass(model(), df))
    assert ours == pandera_alone
    assert bool(ours) == (case not in ("all good", "a null where a value is checked, the column nullable",
                                       "a null in a nullable column with a min")), ours
    if not ours:  # the 11 rules pandera runs as a job each at least (the nulls of id and day, 6 column checks, the
        # model's rules of keys and rows): one job
        assert pandera_jobs - our_jobs >= 11 - 1, (pandera_jobs, our_jobs)
