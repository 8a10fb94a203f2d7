"""A parse built once per process and replayed on later inputs gives what building it again gives."""

import datetime as dt

from examples.shop.cdc_generator import generate_cdc
from lakehouse_assets.landing.reader import read_lines
from lakehouse_assets.runtime.recipe import Recipes
from lakehouse_assets.sources import change_records as cdc
from lakehouse_assets.sources.change_records import bronze_cdc_schema, parse_cdc, survey_cdc

from ..shop import SHOP

DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2)]


def _rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.drop(cdc.IMAGE_KEYS).collect()), key=repr)


def test_a_cdc_parse_replayed_on_another_days_lines_gives_the_rows_a_new_build_gives(spark, tmp_path):
    """The second day's lines (other records, other broken lines) through the recipe the first day's build left:
    the same rows and reasons as parse_cdc built on them, without the build running again; lines of other
    columns (the line reader's parse beside them) get a recipe of their own."""
    generate_cdc(tmp_path, DAYS, changes_per_day=150, malformed_rate=0.05)
    info = SHOP.cdc["orders"]
    schema = bronze_cdc_schema(info)
    days = [read_lines(spark, sorted(f"file:{p}" for p in (tmp_path / "cdc" / "orders" / f"date={d}").glob("*.jsonl")))
            for d in DAYS]
    heads = survey_cdc(days[0], schema).heads
    built = []

    def build(lines):
        built.append(lines)
        return parse_cdc(info, lines, schema, heads=heads)

    recipes = Recipes()
    first = recipes.apply("orders", build, days[0])
    second = recipes.apply("orders", build, days[1])
    assert len(built) == 1, "the second day's parse is the first day's recipe, not a new build"
    assert _rows(first) == _rows(parse_cdc(info, days[0], schema, heads=heads))
    expected = _rows(parse_cdc(info, days[1], schema, heads=heads))
    assert _rows(second) == expected
    assert {r[-1] for r in expected} - {None}, "broken lines among them, each with its reason"
    assert second.schema == parse_cdc(info, days[1], schema, heads=heads).schema

    read = read_lines(spark, sorted(f"file:{p}" for p in (tmp_path / "cdc" / "orders").rglob("*.jsonl")),
                      json=cdc.READ_JSON, head=cdc.READ_HEAD)
    assert _rows(recipes.apply("orders", build, read)) == _rows(parse_cdc(info, read, schema, heads=heads))
    assert len(built) == 2


def test_a_build_that_reads_its_input_runs_on_every_input(spark):
    """A build that reads more of its input than its column names (here its rows) is not recorded: it runs on
    each input, and each gets its own answer."""
    built = []

    def build(lines):
        built.append(lines)
        return lines.withColumn("n", lines.count() + lines["id"])

    recipes = Recipes()
    assert [r.n for r in recipes.apply("counted", build, spark.range(3)).collect()] == [3, 4, 5]
    assert [r.n for r in recipes.apply("counted", build, spark.range(2)).collect()] == [2, 3]
    assert len(built) == 3  # the recording stopped at the count; then each input's own build


def test_the_next_input_goes_under_the_kept_plan_and_another_type_is_replayed(spark, monkeypatch):
    """After the first replay, an input of the same columns and types is put under that replay's analysed plan (no
    step replayed), the input read twice in it (a union of two filters) included; one whose column has another
    type is replayed, analysed for that type. Each gives what its own build gives."""
    from pyspark.sql import functions as F

    from lakehouse_assets.runtime import recipe

    put_under = []  # per input given a kept plan: whether it went under it
    real = recipe._substituted
    monkeypatch.setattr(recipe, "_substituted", lambda *args: put_under.append(real(*args)) or put_under[-1])

    def build(df):
        return df.where("id % 2 = 0").unionByName(df.where("id > 5")).withColumn("twice", F.col("id") * 2)

    def rows(df):
        return sorted(tuple(r) for r in df.collect())

    recipes = Recipes()
    first, second = spark.range(8), spark.range(3, 20)
    assert rows(recipes.apply("t", build, first)) == rows(build(first))
    assert put_under == [], "the first input is replayed: there is no kept plan yet"
    got = recipes.apply("t", build, second)
    assert [f is not None for f in put_under] == [True], "the second input went under the kept plan"
    assert rows(got) == rows(build(second)) and got.schema == build(second).schema
    assert rows(got) != rows(build(first))

    narrower = spark.range(12).selectExpr("cast(id as int) as id")
    got = recipes.apply("t", build, narrower)
    assert [f is not None for f in put_under] == [True, False], "an int column, not a bigint: replayed for it"
    assert rows(got) == rows(build(narrower)) and got.schema == build(narrower).schema
