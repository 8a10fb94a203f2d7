"""A field dropped from the declaration while its producer still sends it, and one dropped and declared again with
another type: the next days run, the values are where `lakehouse plan` says, nothing is lost."""

from __future__ import annotations

import json

from dagster import DagsterInstance, materialize

from lakehouse_assets.build import build_definitions, table_specs, tables_taking_data_columns
from lakehouse_assets.project import load_project
from lakehouse_assets.tables.evolution import apply, plan

DECLARATION = """\
name: clicks
start_date: 2025-06-01
landing:
  settle: 0s
events:
  clicks:
    fields:
      id: string
      user: string
      ts: timestamp
      kind: string
      properties: map
      amount: int
    key: id
    timestamp: ts
    user: user
    event_type: kind
"""


def _declared(tmp_path, text):
    (tmp_path / "lakehouse.yaml").write_text(text)
    return load_project(tmp_path / "lakehouse.yaml")


def _land(lakehouse, day, name, records):
    folder = lakehouse.settings.local_path(lakehouse.settings.landing) / "clicks" / f"date={day}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")


def _run(lakehouse, project, day):
    defs = build_definitions(project, lakehouse.settings)
    chosen = [a for a in defs.assets if {k.to_user_string() for k in a.keys} & {"bronze_clicks", "silver_clicks"}]
    result = materialize(chosen, resources={"lakehouse": lakehouse}, partition_key=day,
                         instance=DagsterInstance.ephemeral())
    assert result.success
    bronze = result.asset_materializations_for_node("bronze_clicks")[0].metadata
    # What silver's step read of bronze is recorded with its commit (the automation decides by it).
    [silver] = [m.metadata for m in result.asset_materializations_for_node("silver_clicks")
                if m.asset_key.to_user_string() == "silver_clicks"]
    assert silver["read_snapshots"].value["bronze_clicks"][0] == bronze["snapshot_id"].value
    return bronze


def _click(n, day, **values):
    return {"id": f"c{n}", "user": "ana", "ts": f"{day}T09:00:0{n % 10}Z", "kind": "view", **values}


def _plan(lakehouse, project):
    return plan(table_specs(project), lakehouse.catalog, lakehouse.settings.namespace,
                tables_taking_data_columns(project))


def test_a_dropped_map_field_still_sent_fills_the_column_bronze_keeps_and_a_value_it_cannot_take_is_quarantined(
        lakehouse, tmp_path):
    project = _declared(tmp_path, DECLARATION)
    _land(lakehouse, "2025-06-01", "a.jsonl", [_click(1, "2025-06-01", properties={"ua": "x"}, amount=3)])
    _run(lakehouse, project, "2025-06-01")

    # Both fields leave the declaration; silver drops them, bronze keeps them (the data still brings them).
    project = _declared(tmp_path, DECLARATION.replace("      properties: map\n      amount: int\n", ""))
    planned = _plan(lakehouse, project)
    assert {(c.table, c.kind, c.subject) for c in planned.changes} == {
        ("silver_clicks", "drop column", "properties"), ("silver_clicks", "drop column", "amount")}
    kept = {(c.table, c.subject): c for c in planned.kept}
    assert kept[("bronze_clicks", "properties")].before == "map<string,string>"
    assert "quarantined with the reason" in kept[("bronze_clicks", "properties")].operation
    assert not apply(lakehouse.catalog, lakehouse.settings.namespace, planned, allow_drop=True).left

    records = [_click(2, "2025-06-02", properties={"ua": "y", "n": 7}, amount=4),
               _click(3, "2025-06-02", properties="not an object", amount=5),
               _click(4, "2025-06-02", amount="five"),
               _click(5, "2025-06-02")]
    _land(lakehouse, "2025-06-02", "b.jsonl", records)
    meta = _run(lakehouse, project, "2025-06-02")
    _run(lakehouse, project, "2025-06-03")  # and the days after run too
    assert (meta["records_in"].value, meta["records_kept"].value, meta["records_quarantined"].value) == (4, 2, 2)
    spark = lakehouse.spark
    bronze = {r.id: (r.properties, r.amount) for r in spark.table(lakehouse.table_id("bronze_clicks")).collect()}
    assert bronze == {"c1": ({"ua": "x"}, 3), "c2": ({"ua": "y", "n": "7"}, 4), "c5": (None, None)}
    reasons = {json.loads(r.payload)["id"]: r.reason
               for r in spark.table(lakehouse.table_id("bronze_clicks_quarantine")).collect()}
    assert reasons == {
        "c3": "properties (a column bronze keeps though the declaration no longer names it) is not a JSON object: "
              "not an object",
        "c4": "amount (a column bronze keeps though the declaration no longer names it) is not a int: five"}
    silver = spark.table(lakehouse.table_id("silver_clicks"))
    assert "properties" not in silver.columns and sorted(r.id for r in silver.collect()) == ["c1", "c2", "c5"]


def test_a_field_dropped_then_declared_again_with_another_type_takes_the_new_type_once_applied(lakehouse, tmp_path):
    project = _declared(tmp_path, DECLARATION)
    _land(lakehouse, "2025-06-01", "a.jsonl", [_click(1, "2025-06-01", amount=3)])
    _run(lakehouse, project, "2025-06-01")
    first = lakehouse.iceberg_table("bronze_clicks").current_snapshot().snapshot_id
    project = _declared(tmp_path, DECLARATION.replace("      amount: int\n", ""))
    assert not apply(lakehouse.catalog, lakehouse.settings.namespace, _plan(lakehouse, project), allow_drop=True).left

    # Declared again as text: bronze still holds it as an int, which a run does not change by itself.
    project = _declared(tmp_path, DECLARATION.replace("      amount: int\n", "      amount: string\n"))
    planned = _plan(lakehouse, project)
    assert {(c.table, c.kind, c.subject, c.before, c.after, c.safe) for c in planned.changes} == {
        ("bronze_clicks", "change type", "amount", "int", "string", False),
        ("silver_clicks", "add column", "amount", "", "string", True)}
    assert apply(lakehouse.catalog, lakehouse.settings.namespace, planned).held  # destructive: not without allow_drop
    done = apply(lakehouse.catalog, lakehouse.settings.namespace, planned, allow_drop=True)
    assert not done.left and not _plan(lakehouse, project).changes

    _land(lakehouse, "2025-06-02", "b.jsonl", [_click(2, "2025-06-02", amount="about 5"), _click(3, "2025-06-02", amount=6)])
    meta = _run(lakehouse, project, "2025-06-02")
    assert (meta["records_in"].value, meta["records_kept"].value, meta["records_quarantined"].value) == (2, 2, 0)
    spark = lakehouse.spark
    now = {r.id: r.amount for r in spark.table(lakehouse.table_id("bronze_clicks")).collect()}
    assert now == {"c1": None, "c2": "about 5", "c3": "6"}  # c1's int left the current schema with the old column
    table = lakehouse.iceberg_table("bronze_clicks")
    assert {r["id"]: r["amount"] for r in table.scan(snapshot_id=first).to_arrow().to_pylist()} == {"c1": 3}
    assert {r.id: r.amount for r in spark.table(lakehouse.table_id("silver_clicks")).collect()} == \
        {"c1": None, "c2": "about 5", "c3": "6"}
