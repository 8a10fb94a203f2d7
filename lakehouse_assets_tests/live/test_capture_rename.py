"""A CDC column renamed in the declaration while the real connector captures: silver equal to the database before
and after, whichever name each record was captured under.

A throwaway PostgreSQL's `accounts` is captured by the real Debezium connector and taken into the lake under the
first declaration. Then, with the capture's records of the old names not yet taken, the database renames two
columns (a text and a decimal, whose Debezium encoding comes from each record's schema) and changes more rows;
one capture takes the changes of both sides of the rename. The declaration renames the columns
(`renamed_from`), and the next run takes both kinds of records into the renamed columns: silver and the current
versions of history are the database's table, and no column of the old names comes back.
"""

import datetime as dt
import json
import uuid
from decimal import Decimal

import psycopg2
import pytest

from lakehouse_services.postgres import ThrowawayPostgres

from .test_capture import TODAY, apply, assert_equal, capture, source_rows

pytestmark = pytest.mark.slow

DECLARATION = f"""\
name: rename_capture
start_date: {TODAY - dt.timedelta(days=1)}
landing:
  settle: 0s
cdc:
  app:
    connector: postgresql
    database: source
    schema: public
    tables:
      accounts:
        primary_key: [id]
        columns: {{id: long, name: string, balance: "decimal(12,2)", seen: timestamp}}
"""
RENAMED = DECLARATION.replace(
    'columns: {id: long, name: string, balance: "decimal(12,2)", seen: timestamp}',
    'columns: {id: long, full_name: string, credit: "decimal(12,2)", seen: timestamp}\n'
    "        renamed_from: {full_name: name, credit: balance}")


def _run(dsn, *statements):
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    for sql in statements:
        cur.execute(sql)
        conn.commit()
    conn.close()


def _silver(lakehouse, table, drop=("change_position", "last_op", "source_ts")):
    frame = lakehouse.spark.table(lakehouse.table_id(table))
    return frame.columns, {r["id"]: r.asDict() for r in frame.drop(*drop).collect()}


def test_a_cdc_column_renamed_while_the_connector_captures_keeps_silver_equal_to_the_database(
        spark, lake_settings, tmp_path):
    root = tmp_path / "capture"
    (root / "default").mkdir(parents=True)
    declaration = root / "default" / "lakehouse.yaml"
    declaration.write_text(DECLARATION)
    namespace = f"t_capture_rename_{uuid.uuid4().hex[:6]}"
    pg = ThrowawayPostgres(root / "pg").start()
    try:
        _run(pg.dsn, "CREATE TABLE accounts (id bigint PRIMARY KEY, name text, balance numeric(12,2), "
                     "seen timestamp DEFAULT '2025-01-01 10:00:00')",
             "ALTER TABLE accounts REPLICA IDENTITY FULL",  # before images, under the names of their time
             *(f"INSERT INTO accounts (id, name, balance) VALUES ({n}, 'User {n}', {n}.25)" for n in range(1, 11)))
        first = capture(root, "default", pg.dsn)
        assert first.returncode == 0, first.stderr[-3000:]
        lakehouse = apply(spark, lake_settings, root, "default", namespace)
        columns, silver = _silver(lakehouse, "silver_accounts")
        assert {"name", "balance"} <= set(columns)
        assert_equal(silver, source_rows(pg.dsn, "accounts"))

        # Changes under the old names, the rename, changes under the new ones: one capture takes them all, before
        # the declaration knows of the rename.
        _run(pg.dsn, "UPDATE accounts SET name = 'Before Rename', balance = 100.50 WHERE id = 1",
             "UPDATE accounts SET balance = 7.77 WHERE id = 2",  # its name unchanged: in the old name only
             "INSERT INTO accounts (id, name, balance) VALUES (11, 'New Before', 11.11)",
             "DELETE FROM accounts WHERE id = 3",
             "ALTER TABLE accounts RENAME COLUMN name TO full_name",
             "ALTER TABLE accounts RENAME COLUMN balance TO credit",
             "UPDATE accounts SET full_name = 'After Rename', credit = 200.75 WHERE id = 4",
             "UPDATE accounts SET credit = credit + 1 WHERE id = 1",  # its name set before the rename
             "INSERT INTO accounts (id, full_name, credit) VALUES (12, 'New After', 12.12)",
             "DELETE FROM accounts WHERE id = 5")
        second = capture(root, "default", pg.dsn)
        assert second.returncode == 0, second.stderr[-3000:]
        records = [json.loads(line)["payload"] for f in (root / "default" / "landing").rglob("*.jsonl")
                   for line in f.read_text().splitlines() if line != "null"]
        images = [r["after"] or r["before"] for r in records if r["op"] != "r"]
        assert {"name", "balance"} <= set(images[0]) and {"full_name", "credit"} <= set(images[-1]), images
        assert sum("full_name" in i for i in images) == 4 and sum("name" in i for i in images) == 4
        database = source_rows(pg.dsn, "accounts")
    finally:
        pg.stop()

    declaration.write_text(RENAMED)
    lakehouse = apply(spark, lake_settings, root, "default", namespace)
    for table in ("silver_accounts", "silver_accounts_history"):
        columns, _ = _silver(lakehouse, table)
        assert {"full_name", "credit"} <= set(columns) and not {"name", "balance"} & set(columns), (table, columns)
    _, silver = _silver(lakehouse, "silver_accounts")
    assert database[1]["full_name"] == "Before Rename" and database[1]["credit"] == Decimal("101.50")
    assert_equal(silver, database)
    history = lakehouse.spark.table(lakehouse.table_id("silver_accounts_history")).where("is_current AND op != 'd'")
    current = {r["id"]: r.asDict() for r in history.select("id", "full_name", "credit", "seen").collect()}
    assert_equal(current, database)
    bronze = lakehouse.spark.table(lakehouse.table_id("bronze_cdc_accounts"))
    # Row 1's two updates: one captured under the old names (both images), one under the new ones.
    updates = {"name" in json.loads(r.payload)["payload"]["after"]: (r.before.full_name, r.before.credit)
               for r in bronze.where("after.full_name = 'Before Rename'").collect()}
    assert updates == {True: ("User 1", Decimal("1.25")), False: ("Before Rename", Decimal("100.50"))}, updates
    assert lakehouse.spark.table(lakehouse.table_id("bronze_cdc_accounts_quarantine")).count() == 0
