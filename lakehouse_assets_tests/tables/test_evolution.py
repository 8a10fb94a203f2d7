"""`lakehouse plan`: every difference between the declaration and the catalog's tables, each marked safe or
destructive with the Iceberg operation that applies it; columns the data brought are not differences."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import DecimalType, IntegerType, LongType, NestedField, StringType, StructType, TimestamptzType
from pyspark.sql import types as T

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.settings import Settings
from lakehouse_assets.tables.evolution import apply, plan
from lakehouse_assets.tables.registry import MERGE_ON_READ, TableSpec, col

from ..shop import SHOP_FILE

HELD = Schema(
    NestedField(1, "id", LongType(), required=True, doc="the order"),
    NestedField(2, "ts", TimestamptzType(), required=True),
    NestedField(3, "amount", DecimalType(10, 2)),
    NestedField(4, "quantity", IntegerType()),
    NestedField(5, "status", StringType(), doc="its state"),
    NestedField(6, "image", StructType(NestedField(7, "a", StringType()), NestedField(8, "from_data", StringType()))),
)


def spec(**changes) -> TableSpec:
    fields = {
        "id": col("id", T.LongType(), False, "the order"),
        "ts": col("ts", T.TimestampType(), False),
        "amount": col("amount", T.DecimalType(10, 2)),
        "quantity": col("quantity", T.IntegerType()),
        "status": col("status", T.StringType(), comment="its state"),
        "image": col("image", T.StructType([T.StructField("a", T.StringType())])),
    }
    fields.update(changes.pop("fields", {}))
    return TableSpec(name="orders", layer="silver", description="Orders.",
                     schema=T.StructType([f for f in fields.values() if f is not None]),
                     partitioned_by=changes.pop("partitioned_by", ("days(ts)",)), **changes)


def held_table(tmp_path, with_a_row: bool = False):
    settings = Settings(home=tmp_path)
    catalog = catalog_for(settings)
    catalog.create_namespace("lake")
    table = catalog.create_table(("lake", "orders"), schema=HELD,
                                 partition_spec=PartitionSpec(PartitionField(2, 1000, DayTransform(), "ts_day")),
                                 properties={**spec().table_properties, "comment": "Orders."})
    if with_a_row:
        table.append(pa.Table.from_pylist(
            [{"id": 1, "ts": dt.datetime(2025, 1, 1, 10, tzinfo=dt.timezone.utc), "amount": Decimal("9.50"),
              "quantity": 3, "status": "paid", "image": {"a": "x", "from_data": "y"}}],
            schema=table.schema().as_arrow()))
    return catalog


def kinds(result, safe=None):
    return [(c.kind, c.subject, c.before, c.after) for c in result.changes if safe is None or c.safe is safe]


def test_a_table_as_declared_has_no_difference_and_a_nested_field_the_data_brought_is_kept(tmp_path):
    catalog = held_table(tmp_path)
    # `image.from_data` came with the data: the declaration's fields are held as declared.
    assert plan({"orders": spec()}, catalog, "lake", frozenset({"orders"})).changes == []
    # A table that does not take columns from the data: the declaration dropped that nested field.
    assert kinds(plan({"orders": spec()}, catalog, "lake")) == [("drop column", "image.from_data", "string", "")]


def test_each_kind_of_change_is_planned_with_whether_it_is_safe_and_its_operation(tmp_path):
    catalog = held_table(tmp_path)
    changed = spec(
        fields={"amount": col("amount", T.DecimalType(12, 2)),  # wider: safe
                "quantity": col("quantity", T.LongType()),  # int -> bigint: safe
                "status": None,  # dropped: destructive
                "note": col("note", T.StringType(), comment="added"),  # a new nullable column: safe
                "code": col("code", T.StringType(), False),  # a new required column: refused
                "id": col("id", T.LongType(), False, "the order's id"),  # re-documented: safe
                "ts": col("ts", T.StringType(), False),  # timestamp -> string: not in place
                "image": col("image", T.StructType([T.StructField("a", T.StringType()),  # a field inside it widened
                                                    T.StructField("from_data", T.StringType()),
                                                    T.StructField("n", T.LongType())]))},
        partitioned_by=("bucket(8, id)",), write_mode=MERGE_ON_READ)
    result = plan({"orders": changed}, catalog, "lake")
    assert sorted(kinds(result, safe=True)) == sorted([
        ("document column", "id", "the order", "the order's id"),
        ("widen type", "amount", "decimal(10,2)", "decimal(12,2)"),
        ("widen type", "quantity", "int", "bigint"),
        ("add column", "note", "", "string"),
        ("add column", "image.n", "", "bigint"),
        ("add partition field", "bucket[8](id)", "", ""),
        ("drop partition field", "day(ts)", "", ""),
        ("set property", "write.delete.mode", "copy-on-write", "merge-on-read"),
        ("set property", "write.merge.mode", "copy-on-write", "merge-on-read"),
        ("set property", "write.update.mode", "copy-on-write", "merge-on-read"),
    ])
    assert sorted(kinds(result, safe=False)) == sorted([
        ("add column", "code", "", "string NOT NULL"),
        ("change type", "ts", "timestamp", "string"),
        ("drop column", "status", "string", ""),
    ])
    text = "\n".join(c.text() for c in result.changes)
    assert "orders: widen type amount: decimal(10,2) -> decimal(12,2) [safe] (UpdateSchema.update_column" in text
    assert "orders: drop column status: string -> (none) [DESTRUCTIVE] (UpdateSchema.delete_column(status)" in text
    # Planning changes nothing.
    assert catalog.load_table(("lake", "orders")).schema() == HELD


def test_plan_command_exits_0_when_the_tables_match_and_1_with_each_difference(tmp_path):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")},
           "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_PROJECT": str(SHOP_FILE)}
    lakehouse = str(Path(sys.executable).with_name("lakehouse"))

    def run(*args):
        return subprocess.run([lakehouse, "plan", *args], env=env, capture_output=True, text=True, timeout=120)

    fresh = run()
    assert fresh.returncode == 0, fresh.stderr
    assert "match the declaration" in fresh.stdout and "not created yet" in fresh.stdout
    catalog = catalog_for(Settings(home=tmp_path))
    catalog.create_namespace("lake")
    # gold_daily_funnel as an older declaration had it: without `conversion`, and with a column since dropped.
    catalog.create_table(("lake", "gold_daily_funnel"), schema=Schema(
        NestedField(1, "funnel_date", StringType()), NestedField(2, "step", IntegerType()),
        NestedField(3, "event_type", StringType()), NestedField(4, "sessions", LongType()),
        NestedField(5, "legacy", StringType())))
    differs = run("--json")
    assert differs.returncode == 1, differs.stderr
    planned = json.loads(differs.stdout)
    mine = {(c["kind"], c["subject"], c["safe"]) for c in planned["changes"] if c["table"] == "gold_daily_funnel"}
    assert {("add column", "conversion", True), ("drop column", "legacy", False),
            ("change type", "funnel_date", False)} <= mine
    assert {c["table"] for c in planned["changes"]} == {"gold_daily_funnel"}
    assert "gold_daily_activity" in planned["not_created"]


def test_apply_makes_the_safe_differences_in_one_metadata_commit_and_the_rows_written_before_read_under_them(tmp_path):

    catalog = held_table(tmp_path, with_a_row=True)
    table = catalog.load_table(("lake", "orders"))
    snapshot, files = table.current_snapshot().snapshot_id, {t.file.file_path for t in table.scan().plan_files()}
    fields = {"amount": col("amount", T.DecimalType(12, 2)), "quantity": col("quantity", T.LongType()),
              "status": None, "note": col("note", T.StringType(), comment="added"),
              "id": col("id", T.LongType(), True, "the order's id")}
    changed = spec(fields={**fields, "ts": col("ts", T.StringType(), False)},  # not in place
                   partitioned_by=("days(ts)", "bucket(8, id)"), write_mode=MERGE_ON_READ)

    # All or nothing: a difference that cannot be made in place holds every other.
    held = apply(catalog, "lake", plan({"orders": changed}, catalog, "lake", frozenset({"orders"})))
    assert [(c.kind, c.subject) for c in held.held] == [("change type", "ts")] and not held.applied
    assert len(held.left) > 1 and catalog.load_table(("lake", "orders")).metadata == table.metadata
    changed = spec(fields=fields, partitioned_by=("days(ts)", "bucket(8, id)"), write_mode=MERGE_ON_READ)
    done = apply(catalog, "lake", plan({"orders": changed}, catalog, "lake", frozenset({"orders"})))
    assert not done.left and done.applied
    table = catalog.load_table(("lake", "orders"))
    fields = {f.name: f for f in table.schema().fields}
    assert str(fields["amount"].field_type) == "decimal(12, 2)" and str(fields["quantity"].field_type) == "long"
    assert fields["note"].doc == "added" and not fields["note"].required
    assert fields["id"].doc == "the order's id" and not fields["id"].required
    assert "status" in fields  # a table that takes columns from the data keeps what the declaration does not name
    assert [str(f.transform) for f in table.spec().fields] == ["day", "bucket[8]"]
    assert table.properties["write.merge.mode"] == "merge-on-read"
    # Metadata only: the same snapshot and data files; the row written before reads under the new schema.
    assert table.current_snapshot().snapshot_id == snapshot
    assert {t.file.file_path for t in table.scan().plan_files()} == files
    [row] = table.scan().to_arrow().to_pylist()
    assert (row["amount"], row["quantity"], row["note"]) == (Decimal("9.50"), 3, None)
    assert not plan({"orders": changed}, catalog, "lake", frozenset({"orders"})).changes

    # A table whose columns are the declaration's: the dropped column goes only with allow_drop.
    kept = apply(catalog, "lake", plan({"orders": changed}, catalog, "lake"))
    assert {(c.kind, c.subject) for c in kept.held} == {("drop column", "status"), ("drop column", "image.from_data")}
    assert "status" in {f.name for f in catalog.load_table(("lake", "orders")).schema().fields}
    dropped = apply(catalog, "lake", plan({"orders": changed}, catalog, "lake"), allow_drop=True)
    assert sorted((c.kind, c.subject) for c in dropped.applied) == [
        ("drop column", "image.from_data"), ("drop column", "status")]
    table = catalog.load_table(("lake", "orders"))
    assert "status" not in {f.name for f in table.schema().fields}
    assert str(table.schema().find_field("image").field_type) == "struct<7: a: optional string>"
    assert table.scan(snapshot_id=snapshot).to_arrow().num_rows == 1


def test_a_declared_rename_renames_by_field_id_and_old_snapshots_keep_the_old_name(tmp_path):

    catalog = held_table(tmp_path, with_a_row=True)
    before = catalog.load_table(("lake", "orders"))
    snapshot, files = before.current_snapshot().snapshot_id, {t.file.file_path for t in before.scan().plan_files()}
    ids = {f.name: f.field_id for f in before.schema().fields}
    renamed = spec(fields={"quantity": None, "units": col("units", T.LongType()),  # renamed and widened
                           "status": None, "state": col("state", T.StringType(), comment="its state"),
                           "image": col("image", T.StructType([T.StructField("b", T.StringType()),
                                                               T.StructField("from_data", T.StringType())]))},
                   renamed={"units": "quantity", "state": "status", "image.b": "image.a"})
    result = plan({"orders": renamed}, catalog, "lake")
    assert sorted(kinds(result)) == sorted([
        ("rename column", "quantity", "quantity", "units"), ("widen type", "quantity", "int", "bigint"),
        ("rename column", "status", "status", "state"), ("rename column", "image.a", "a", "b")])
    assert all(c.safe for c in result.changes)  # nothing dropped, nothing added

    done = apply(catalog, "lake", result)
    assert not done.left
    table = catalog.load_table(("lake", "orders"))
    after = {f.name: f for f in table.schema().fields}
    assert (after["units"].field_id, after["state"].field_id) == (ids["quantity"], ids["status"])  # same columns
    assert "quantity" not in after and "status" not in after and str(after["units"].field_type) == "long"
    assert table.schema().find_field("image.b").field_id == 7
    # Metadata only; the row written before reads under the new names, and as of the old snapshot under the old.
    assert table.current_snapshot().snapshot_id == snapshot
    assert {t.file.file_path for t in table.scan().plan_files()} == files
    [row] = table.scan().to_arrow().to_pylist()
    assert (row["units"], row["state"], row["image"]) == (3, "paid", {"b": "x", "from_data": "y"})
    old_schema = table.schemas()[table.snapshot_by_id(snapshot).schema_id]
    assert {"quantity", "status"} <= {f.name for f in old_schema.fields}
    assert plan({"orders": renamed}, catalog, "lake").changes == []  # applied: nothing differs


def test_renames_are_declared_on_event_fields_and_cdc_columns_and_checked():
    import pytest

    from lakehouse_assets.build import table_specs
    from lakehouse_assets.errors import DeclarationError
    from lakehouse_assets.project import parse_project

    text = SHOP_FILE.read_text()
    for line in ("      ip: string\n", "    pii: [ip, email]\n", "          email: string\n", "        pii: [email]\n"):
        assert text.count(line) == 1, line
    renamed = (text.replace("      ip: string\n", "      client_ip: {type: string, renamed_from: ip}\n")
                   .replace("    pii: [ip, email]\n", "    pii: [client_ip, email]\n")
                   .replace("          email: string\n", "          mail: string\n")
                   .replace("        pii: [email]\n", "        pii: [mail]\n        renamed_from: {mail: email}\n"))
    project = parse_project(renamed, str(SHOP_FILE))
    specs = table_specs(project)
    events = project.events["events"]
    assert events.renamed == {"client_ip": "ip"}
    assert specs[events.bronze].renamed == {"client_ip": "ip"}
    assert specs[events.silver].renamed == {"client_ip_hash": "ip_hash"}  # the pseudonym follows its field
    customers = next(t for t in project.cdc.values() if t.renamed)
    assert customers.renamed == {"mail": "email"}
    assert specs[customers.silver].renamed == {"mail_hash": "email_hash"}  # the pseudonym follows its column
    assert specs[customers.bronze].renamed == {"before.mail": "before.email", "after.mail": "after.email"}

    with pytest.raises(DeclarationError, match="still declared"):
        parse_project(text.replace("      ip: string\n", "      ip: string\n      ip2: {type: string, renamed_from: ip}\n"),
                      str(SHOP_FILE))
