"""A declaration is checked when it loads: every mistake names the file, the line and what is wrong."""

import textwrap

import pytest

from lakehouse_assets.errors import DeclarationError
from lakehouse_assets.project import load_project, parse_project

from ..shop import SHOP, SHOP_FILE

BASE = """\
name: clicks
events:
  clicks:
    fields:
      id: string
      who: string
      at: timestamp
      kind: string
      amount: double
      props: map
    key: id
    timestamp: at
    user: who
    event_type: kind
    rules:
      - name: test_traffic
        field: props.env
        in: [staging]
cdc:
  app:
    connector: postgresql
    database: app
    schema: public
    tables:
      accounts:
        primary_key: [account_id]
        columns:
          account_id: long
          plan: string
gold:
  purchase: {event_type: buy, amount: amount}
"""


def load_text(tmp_path, text: str):
    path = tmp_path / "lakehouse.yaml"
    path.write_text(textwrap.dedent(text))
    return load_project(path), path


def fails(tmp_path, text: str, line: int, reason: str) -> DeclarationError:
    path = tmp_path / "lakehouse.yaml"
    path.write_text(text)
    with pytest.raises(DeclarationError) as info:
        load_project(path)
    err = info.value
    assert (err.file, err.line) == (str(path), line), str(err)
    assert reason in err.reason, str(err)
    assert str(err).startswith(f"{path}:{line}: ")
    return err


def test_the_base_declaration_loads_and_derives_every_table(tmp_path):
    project, _ = load_text(tmp_path, BASE)
    assert project.name == "clicks"
    assert project.events["clicks"].required == ("id", "at"), "key and timestamp are structurally required"
    assert project.events["clicks"].event_types is None, "the vocabulary is open unless declared"
    assert [s.landing for s in project.landing_sources] == ["clicks", "cdc/accounts"]
    assert project.table_names == [
        "bronze_ingest_log", "bronze_clicks", "bronze_clicks_quarantine", "silver_clicks", "silver_clicks_rejected",
        "bronze_cdc_accounts", "bronze_cdc_accounts_quarantine", "silver_accounts", "silver_accounts_history",
        "gold_minute_activity", "gold_sessions", "gold_daily_activity", "ml_user_features", "ml_training_set",
    ]
    assert project.cdc["accounts"].partition == ("bucket(8, account_id)",)


def test_the_shop_demo_is_one_declaration():
    assert SHOP.file == SHOP_FILE
    assert sorted(SHOP.events) == ["events"] and sorted(SHOP.cdc) == ["customers", "order_items", "orders"]
    assert SHOP.cdc["order_items"].connector == "mysql" and SHOP.cdc["order_items"].db_schema is None
    assert SHOP.cdc["orders"].references == {"customer_id": ("customers", "customer_id")}
    assert SHOP.gold.funnel == ("page_view", "add_to_cart", "purchase")
    assert "gold_daily_product_revenue" in SHOP.gold.sql_tables


def test_an_unknown_type_is_refused(tmp_path):
    fails(tmp_path, BASE.replace("amount: double", "amount: money"), 9, "unknown type 'money'")


def test_a_cdc_key_not_among_the_columns_is_refused(tmp_path):
    fails(tmp_path, BASE.replace("primary_key: [account_id]", "primary_key: [id]"), 26,
          "primary key column 'id' is not among the columns of table accounts: account_id, plan")


def test_an_event_key_not_among_the_fields_is_refused(tmp_path):
    fails(tmp_path, BASE.replace("    key: id\n", "    key: event_id\n"), 11,
          "key 'event_id' is not among the fields of event source clicks")


def test_a_duplicate_table_is_refused(tmp_path):
    # An event source named like a CDC table: both would write silver_accounts.
    text = BASE.replace("gold:\n", "") .replace("  purchase: {event_type: buy, amount: amount}\n", "")
    text = text.replace("cdc:\n", "  accounts:\n    fields: {id: string, at: timestamp}\n    key: id\n"
                                  "    timestamp: at\ncdc:\n")
    fails(tmp_path, text, 29, "table 'silver_accounts' is declared twice (first on line 19)")


def test_the_same_cdc_table_under_two_connectors_is_refused(tmp_path):
    text = BASE.replace("gold:\n", "  other:\n    connector: mysql\n    database: other\n    tables:\n"
                                   "      accounts:\n        primary_key: [id]\n        columns: {id: long}\ngold:\n")
    fails(tmp_path, text, 34, "CDC table 'accounts' is declared twice (also under app)")


def test_a_rule_on_an_unknown_field_is_refused(tmp_path):
    fails(tmp_path, BASE.replace("field: props.env", "field: country"), 17,
          "rule field 'country' is not among the fields of event source clicks")
    fails(tmp_path, BASE.replace("field: props.env", "field: kind.env"), 17,
          "only a map field can be read by key (kind is string)")


def test_a_rule_or_check_comparing_a_field_with_a_value_of_another_type_is_refused(tmp_path):
    """Spark (ANSI mode) would cast a text field compared with a number to that number, and fail the whole run on
    the first value that is not one: the declaration says so when it loads, naming the rule and the field."""
    rule = "        field: props.env\n        in: [staging]\n"

    def with_rule(text: str) -> str:
        return BASE.replace(rule, text)

    fails(tmp_path, with_rule("        field: who\n        below: 5\n"), 18,
          "rule 'test_traffic': below needs a numeric field; who is string")
    fails(tmp_path, with_rule("        field: at\n        above: 5\n"), 18,
          "rule 'test_traffic': above needs a numeric field; at is timestamp")
    fails(tmp_path, with_rule("        field: kind\n        later_than_ingestion_by: 1h\n"), 18,
          "rule 'test_traffic': later_than_ingestion_by needs a timestamp or date field; kind is string")
    fails(tmp_path, with_rule("        field: amount\n        in: [5, low]\n"), 18,
          "rule 'test_traffic': in value 'low' is not a double, the type it is compared with")
    fails(tmp_path, with_rule("        field: props.env\n        not_in: [prod, 1]\n"), 18,
          "rule 'test_traffic': not_in value 1 is not a string")
    fails(tmp_path, with_rule("        field: amount\n        above: 100\n        when: {kind: 3}\n"), 19,
          "rule 'test_traffic': when kind is 3 is not a string")
    fails(tmp_path, with_rule("        field: amount\n        missing: true\n        when: {at: soon}\n"), 19,
          "rule 'test_traffic': when at is 'soon' is not a timestamp")
    fails(tmp_path, BASE.replace("          plan: string\n", "          plan: string\n        checks: {plan: {in: [free, 2]}}\n"),
          30, "check on plan: in 2 is not a string")
    # Values of the field's type load; a map's value is text, read as a number or a time where the rule needs one.
    for ok in ("        field: props.price\n        above: 100\n",
               "        field: props.sent\n        later_than_ingestion_by: 1h\n",
               "        field: amount\n        in: [1, 2.5]\n",
               "        field: kind\n        missing: true\n        when: {at: 2025-01-01T10:00:00, amount: 3}\n",
               "        field: props.env\n        in: [staging, null]\n"):
        load_text(tmp_path, with_rule(ok))


def test_an_unknown_key_a_missing_key_and_a_key_written_twice_are_refused(tmp_path):
    fails(tmp_path, BASE.replace("    key: id\n", "    key: id\n    dedupe: true\n"), 12,
          "unknown key 'dedupe' at events.clicks")
    fails(tmp_path, BASE.replace("    timestamp: at\n", ""), 3, "events.clicks.timestamp: required, but not given")
    fails(tmp_path, BASE.replace("      amount: double\n", "      amount: double\n      who: long\n"), 10,
          "'who' is written twice in the same mapping (first on line 6)")


def test_other_cross_references_are_checked(tmp_path):
    fails(tmp_path, BASE.replace("at: timestamp", "at: string"), 12, "timestamp field 'at' must have type timestamp")
    fails(tmp_path, BASE.replace("    event_type: kind\n", "    event_type: kind\n    event_types: [view]\n"), 32,
          "purchase event type 'buy' is not among the event_types of clicks: view")
    fails(tmp_path, BASE.replace("amount: amount}", "amount: who}"), 31, "purchase amount 'who' must be numeric")
    fails(tmp_path, BASE + "  tables:\n    gold_x:\n      reads: [silver_nothing]\n      sql: SELECT 1 AS a\n"
                           "      columns: {a: int}\n", 34, "read table 'silver_nothing' is not among the declared tables")
    fails(tmp_path, "name: [1]\n", 1, "name: Input should be a valid string")
    fails(tmp_path, "name: x\nevents: {a: {fields: {id: string}, key: id, timestamp: id\n", 3, "not valid YAML")


def test_a_missing_file_says_how_to_point_at_one(tmp_path):
    with pytest.raises(DeclarationError, match="set LAKEHOUSE_PROJECT to your lakehouse.yaml"):
        load_project(tmp_path / "nope.yaml")


def test_a_declaration_can_be_parsed_from_text():
    project = parse_project(BASE, "inline.yaml")
    assert project.file.name == "inline.yaml" and project.gold.purchase_type == "buy"


def test_a_declared_capture_becomes_an_asset_upstream_of_bronze_with_a_slot_check_and_a_schedule(tmp_path):
    from lakehouse_assets.build import build_definitions
    from lakehouse_assets.settings import Settings

    text = BASE.replace("    schema: public\n", "    schema: public\n    capture: {until_idle: 5s, schedule: '*/5 * * * *',"
                                                 " max_retained_wal_mb: 64}\n")
    project, _ = load_text(tmp_path, text)
    assert project.captures["app"].max_retained_wal_bytes == 64 << 20
    defs = build_definitions(project, Settings.from_env())
    graph = defs.resolve_asset_graph()
    from dagster import AssetKey

    capture = graph.get(AssetKey("capture_app"))
    assert [c.name for c in capture.check_keys] == ["replication_slot_wal"]
    assert AssetKey("capture_app") in graph.get(AssetKey("bronze_cdc_accounts")).parent_keys
    assert sorted(s.name for s in defs.schedules) == ["capture_app_schedule", "lakehouse_landing_retention",
                                                      "lakehouse_nightly_maintenance"]
    fails(tmp_path, BASE.replace("connector: postgresql", "connector: mysql").replace(
        "    schema: public\n", "    capture: {}\n"), 23, "capture runs Debezium's PostgreSQL connector")


def test_rounding_is_declared_per_decimal_column_and_only_half_up(tmp_path):
    text = BASE.replace("          plan: string\n", "          plan: string\n          price: \"decimal(10,2)\"\n"
                                                    "        rounding: {price: half_up}\n")
    project, _ = load_text(tmp_path, text)
    assert project.cdc["accounts"].rounding == {"price": "half_up"}
    assert parse_project(BASE).cdc["accounts"].rounding == {}  # by default a value is never rounded
    fails(tmp_path, text.replace("{price: half_up}", "{price: half_even}"), 31,
          "rounding 'half_even' of price is not known: write half_up")
    fails(tmp_path, text.replace("{price: half_up}", "{plan: half_up}"), 31,
          "only a decimal column is rounded; plan is string")
    fails(tmp_path, text.replace("{price: half_up}", "{cost: half_up}"), 31,
          "rounded column 'cost' is not among the columns of table accounts")


def test_when_a_landed_file_is_complete_is_declared_and_checked(tmp_path):
    import datetime as dt

    default = parse_project(BASE).landing
    assert (default.settle, default.ready_marker, default.incomplete_grace) == (
        dt.timedelta(seconds=5), None, dt.timedelta(minutes=5))
    declared = parse_project(BASE + "landing:\n  settle: 0s\n  ready_marker: _SUCCESS\n  incomplete_grace: 2m\n").landing
    assert (declared.settle, declared.ready_marker, declared.incomplete_grace) == (
        dt.timedelta(0), "_SUCCESS", dt.timedelta(minutes=2))
    line = BASE.count("\n") + 2
    fails(tmp_path, BASE + "landing:\n  settle: soon\n", line, "is not a duration")
    fails(tmp_path, BASE + "landing:\n  ready_marker: done.jsonl\n", line, "must be a plain file name")


def test_the_landing_retention_is_30_days_unless_declared_and_null_keeps_landed_files(tmp_path):
    import datetime as dt

    from lakehouse_assets.build import build_definitions
    from lakehouse_assets.settings import Settings

    project, _ = load_text(tmp_path, BASE)
    assert project.landing.retention == dt.timedelta(days=30)
    assert "lakehouse_landing_retention" in {s.name for s in build_definitions(project, Settings.from_env()).schedules}
    project, _ = load_text(tmp_path, BASE + "landing:\n  retention: 7d\n")
    assert project.landing.retention == dt.timedelta(days=7)
    project, _ = load_text(tmp_path, BASE + "landing:\n  retention: null\n")
    assert project.landing.retention is None
    assert "lakehouse_landing_retention" not in {s.name for s in build_definitions(project, Settings.from_env()).schedules}
    line = BASE.count("\n") + 2
    fails(tmp_path, BASE + "landing:\n  retention: 0s\n", line, "retention must be longer than 0")


def test_an_event_source_on_a_kafka_topic_takes_it_from_there_and_a_bad_topic_name_is_refused(tmp_path):
    project, _ = load_text(tmp_path, BASE.replace("  clicks:\n    fields:", "  clicks:\n    kafka: {topic: web.clicks}\n"
                                                                       "    fields:"))
    assert project.events["clicks"].topic == "web.clicks"
    assert load_text(tmp_path, BASE)[0].events["clicks"].topic is None
    fails(tmp_path, BASE.replace("  clicks:\n    fields:", "  clicks:\n    kafka: {topic: web/clicks}\n    fields:"), 4,
          "'web/clicks' is not a Kafka topic name")


def test_a_cdc_source_on_kafka_reads_each_tables_debezium_topic_upstream_of_its_capture(tmp_path):
    from dagster import AssetKey

    from lakehouse_assets.bronze.assets import landing_sources
    from lakehouse_assets.build import build_definitions
    from lakehouse_assets.settings import Settings

    text = BASE.replace("    schema: public\n", "    schema: public\n    kafka: true\n    capture: {until_idle: 5s}\n")
    project, _ = load_text(tmp_path, text)
    topics = {s.name: s.topic for s in landing_sources(project)}
    assert topics["cdc/accounts"] == "app.public.accounts" and topics["clicks"] is None
    defs = build_definitions(project, Settings.from_env())
    assert AssetKey("capture_app") in defs.resolve_asset_graph().get(AssetKey("bronze_cdc_accounts")).parent_keys
    assert "bronze_cdc_accounts_topic_sensor" in {s.name for s in defs.sensors}
    assert "bronze_cdc_accounts_landing_sensor" not in {s.name for s in defs.sensors}
    assert all(s.topic is None for s in landing_sources(load_text(tmp_path, BASE)[0]))
