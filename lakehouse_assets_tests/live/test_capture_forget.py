"""Forget on a real capture: a person whose id is a database's integer key, out of every table, file and landed
line that a real PostgreSQL and the real Debezium connector brought into the lake.

A throwaway PostgreSQL holds accounts (integer ids; 128, 2028 and an order numbered 28 belong to others, and
another account is renamed `Renamed 28`) and their orders, both declaring `subject:`. The connector takes the
snapshot, then the person's e-mail and name are updated (their TOASTed bio unchanged, so Debezium sends a
placeholder for it), one of their orders is paid and gets a new primary key, and one arrives with an amount
bronze quarantines. `lakehouse forget --subject 28` stops on one table (a step made to fail once), says which
tables are done and which are not, and exits 1; run again, it finishes. Then an independent scan of the
namespace's table folders, the landing zone and the capture's staging finds nothing of the person (their id as
a number where ids are held, their e-mails, names, bio and pseudonyms), everyone else's rows are still equal to the
database, and reconcile balances.
"""

import datetime as dt
import hashlib
import hmac
import json
import random
import uuid
from decimal import Decimal
from urllib.parse import urlsplit

import psycopg2
import pytest

import lakehouse_assets.operations.forget as forget_module
from lakehouse_assets.bronze.reconcile import reconcile
from lakehouse_assets.errors import MaintenanceError
from lakehouse_assets.operations.forget import id_columns
from lakehouse_assets.operations.trace_scan import LANDING, WAREHOUSE, trace_scan
from lakehouse_assets.project import load_project
from lakehouse_assets.runtime.pii import pii_key
from lakehouse_services.postgres import ThrowawayPostgres

from .test_capture import TODAY, _body, apply, capture, source_rows

pytestmark = pytest.mark.slow

SUBJECT = 28
DECLARATION = f"""\
name: forget_capture
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
        columns: {{id: long, email: string, name: string, bio: string}}
        pii: [email]
        subject: id
      orders:
        primary_key: [order_id]
        columns: {{order_id: long, account_id: long, status: string, amount: "decimal(12,2)"}}
        subject: account_id
"""
SCHEMA_SQL = """
CREATE TABLE accounts (id bigint PRIMARY KEY, email text, name text, bio text);  -- default identity: TOAST
CREATE TABLE orders (order_id bigint PRIMARY KEY, account_id bigint, status text, amount numeric);
ALTER TABLE orders REPLICA IDENTITY FULL;  -- a key change's delete carries the whole row, account_id too
"""
ACCOUNTS = [*range(1, 41), 128, 2028]


def _owner(order: int) -> int:
    """The account of each first order: the subject's are 5 and 9; order 28 is account 7's."""
    others = [a for a in ACCOUNTS if a != SUBJECT]
    return {5: SUBJECT, 9: SUBJECT, 28: 7}.get(order, others[order % len(others)])


def _fill(dsn, rng):
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    cur.execute(SCHEMA_SQL)
    for n in ACCOUNTS:
        bio = _body(rng) if n in (SUBJECT, 7) else f"bio of {n}"  # the subject's is TOASTed
        cur.execute("INSERT INTO accounts VALUES (%s, %s, %s, %s)", (n, f"user{n}@example.com", f"User {n}", bio))
    for order in range(1, 31):
        cur.execute("INSERT INTO orders VALUES (%s, %s, 'new', %s)", (order, _owner(order), Decimal(order) + Decimal('0.5')))
    conn.commit()
    conn.close()


def _changes(dsn):
    """Streamed after the snapshot: the subject's rows updated, a key change, a quarantined amount; others too."""
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    for sql, values in [
        ("UPDATE accounts SET email = 'new28@example.org', name = 'Renamed Person' WHERE id = %s", (SUBJECT,)),
        ("UPDATE accounts SET name = 'Second Name' WHERE id = %s", (SUBJECT,)),  # the bio stays TOASTed
        ("UPDATE orders SET status = 'paid' WHERE order_id = 5", ()),
        ("UPDATE orders SET order_id = 5005 WHERE order_id = 5", ()),  # a primary key change of the subject's row
        ("INSERT INTO orders VALUES (41, %s, 'new', 9.999)", (SUBJECT,)),  # more scale than declared: quarantined
        ("INSERT INTO orders VALUES (42, 7, 'new', 1.005)", ()),  # someone else's, quarantined too
        ("UPDATE accounts SET name = 'Renamed 28' WHERE id = 7", ()),  # 28 in another person's text
        ("UPDATE orders SET status = 'shipped' WHERE order_id = 28", ()),  # order 28 is account 7's
        ("DELETE FROM orders WHERE order_id = 3", ()),
        ("INSERT INTO accounts VALUES (41, 'user41@example.com', 'User 41', 'new')", ()),
    ]:
        cur.execute(sql, values)
        conn.commit()
    conn.close()


def _identifiers(key: bytes, bio: str) -> dict[str, str]:
    """The person as the lake could hold them: their id, every e-mail and name they had, their TOASTed bio, and the
    pseudonyms (silver's keyed hashes of the id and of each e-mail)."""
    def keyed(value: str) -> str:
        return hmac.new(key, value.encode(), hashlib.sha256).hexdigest()

    values = {"subject": str(SUBJECT), "e-mail": "user28@example.com", "new e-mail": "new28@example.org",
              "name": "User 28", "new name": "Renamed Person", "last name": "Second Name", "bio": bio[:40]}
    return {**values, "pseudonym": keyed(str(SUBJECT)), "e-mail hash": keyed(values["e-mail"]),
            "new e-mail hash": keyed(values["new e-mail"])}


def _rows(lakehouse, table, key):
    drop = ("change_position", "last_op", "source_ts")
    return {r[key]: r.asDict() for r in lakehouse.spark.table(lakehouse.table_id(table)).drop(*drop).collect()}


def _forget(monkeypatch, capsys, lakehouse, project_file) -> tuple[int, dict]:
    """`lakehouse forget --subject 28 --json` as a user runs it, on this lakehouse: its exit code and its proof."""
    from lakehouse_assets.cli import main

    s = lakehouse.settings
    for var, value in {"LAKEHOUSE_HOME": str(s.home), "LAKEHOUSE_CATALOG_URI": s.catalog_uri,
                       "LAKEHOUSE_WAREHOUSE": s.warehouse, "LAKEHOUSE_NAMESPACE": s.namespace,
                       "LAKEHOUSE_LANDING": s.landing, "LAKEHOUSE_PROJECT": str(project_file),
                       "LAKEHOUSE_SPARK_MASTER": s.spark_master}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # no runs to wait for
    capsys.readouterr()
    code = main(["forget", "--subject", str(SUBJECT), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_forget_of_an_integer_subject_on_a_real_capture_leaves_nothing_and_finishes_when_run_again(
        spark, lake_settings, tmp_path, monkeypatch, capsys):
    root = tmp_path / "capture"
    (root / "default").mkdir(parents=True)
    project_file = root / "default" / "lakehouse.yaml"
    project_file.write_text(DECLARATION)
    home = root / "default" / "home"
    pg = ThrowawayPostgres(root / "pg").start()
    try:
        rng = random.Random(59)
        _fill(pg.dsn, rng)
        first = capture(root, "default", pg.dsn)
        assert first.returncode == 0, first.stderr[-3000:]
        _changes(pg.dsn)
        second = capture(root, "default", pg.dsn)
        assert second.returncode == 0, second.stderr[-3000:]
        accounts, orders = source_rows(pg.dsn, "accounts"), source_rows(pg.dsn, "orders")
    finally:
        pg.stop()
    namespace = f"t_capture_forget_{uuid.uuid4().hex[:6]}"
    lakehouse = apply(spark, lake_settings, root, "default", namespace, home=home)
    project, key = load_project(project_file), pii_key(lakehouse.settings)
    bio = accounts[SUBJECT]["bio"]
    assert len(bio) > 2000  # stored out of line (TOAST): the updates sent a placeholder for it

    # Before: the lake is the database (the quarantined orders aside), the subject in every layer and file kind.
    silver = _rows(lakehouse, "silver_accounts", "id")
    assert silver[SUBJECT]["name"] == "Second Name" and silver[SUBJECT]["bio"] == bio
    assert silver[7]["name"] == "Renamed 28"
    assert set(_rows(lakehouse, "silver_orders", "order_id")) == set(orders) - {41, 42}
    assert 5005 in orders and orders[5005]["account_id"] == SUBJECT
    quarantined = [r.payload for r in lakehouse.spark.table(lakehouse.table_id("bronze_cdc_orders_quarantine"))
                   .collect()]
    assert len(quarantined) == 2 and sum('"account_id":28,' in p for p in quarantined) == 1
    landed = [f"file:{f}" for f in (root / "default" / "landing").rglob("*.jsonl")]
    tables = [lakehouse.catalog.load_table(i) for i in lakehouse.catalog.list_tables(namespace)]
    roots = [t.location() for t in tables]
    identifiers = _identifiers(key, bio)
    before = trace_scan(lakehouse.settings, identifiers, warehouse_roots=roots, id_columns=id_columns(project))
    held = {(h.identifier, h.area) for h in before.hits}
    assert {("subject", WAREHOUSE), ("subject", LANDING), ("bio", WAREHOUSE),
            ("new e-mail", LANDING), ("new e-mail hash", WAREHOUSE), ("bio", LANDING)} <= held, held
    hit_tables = {t.name()[-1] for t in tables for h in before.hits if h.file.startswith(urlsplit(t.location()).path)}
    assert {"bronze_cdc_accounts", "bronze_cdc_orders", "bronze_cdc_orders_quarantine", "silver_accounts",
            "silver_accounts_history", "silver_orders", "silver_orders_history"} <= hit_tables

    # A step of silver_accounts' purge fails once (after its delete): the others are forgotten all the same, the
    # proof names the tables done and the one not done, and the command exits 1.
    real, failed = forget_module.Forget._snapshots_naming, []

    def fails_once(self, table, target, *args):
        if target.table == "silver_accounts" and not failed:
            failed.append(target.table)
            raise MaintenanceError("forget: the expiry of silver_accounts was interrupted")
        return real(self, table, target, *args)

    monkeypatch.setattr(forget_module.Forget, "_snapshots_naming", fails_once)
    code, proof = _forget(monkeypatch, capsys, lakehouse, project_file)
    assert code == 1 and not proof["purged"]
    assert proof["tables_not_done"] == {"silver_accounts": "MaintenanceError: forget: the expiry of silver_accounts "
                                                           "was interrupted"}
    assert set(proof["tables_done"]) == {"bronze_cdc_accounts", "bronze_cdc_accounts_quarantine",
                                         "silver_accounts_history", "bronze_cdc_orders",
                                         "bronze_cdc_orders_quarantine", "silver_orders", "silver_orders_history"}
    first_run, first_landing = {t["table"]: t for t in proof["tables"]}, proof["landing_removed"]
    assert first_run["silver_accounts"]["rows_deleted"] == 1 and first_run["silver_accounts"]["snapshots_expired"] == []
    # Orders 5 and 9 as the snapshot read them, 5's update, and its key change (a delete and a create).
    assert first_run["bronze_cdc_orders"]["rows_deleted"] == 5
    assert first_run["bronze_cdc_accounts"]["rows_deleted"] == 3  # the snapshot's row and two updates
    assert first_run["bronze_cdc_orders_quarantine"]["rows_deleted"] == 1  # theirs, not account 7's
    assert any(why.startswith("a file a snapshot references") for why in proof["traces"].values())

    # Run again: it finishes what was left (silver_accounts' old snapshots), and finds nothing left to delete.
    code, proof = _forget(monkeypatch, capsys, lakehouse, project_file)
    assert code == 0 and proof["purged"], json.dumps({k: proof[k] for k in ("tables_not_done", "traces")})
    assert proof["tables_not_done"] == {} and proof["traces"] == {} and proof["rows_deleted"] == 0
    again = {t["table"]: t for t in proof["tables"]}
    assert again["silver_accounts"]["snapshots_expired"] and proof["rows_found_after"] == 0

    # The independent scan: nothing of the person in any file of the namespace's tables, the landing zone or the
    # capture's staging; their id is still where the scan looks (ids of 128, 2028 and order 28 are not theirs).
    roots = [lakehouse.catalog.load_table(i).location() for i in lakehouse.catalog.list_tables(namespace)]
    assert len(roots) == len(tables) + 1  # the ledger of forgotten lines
    after = trace_scan(lakehouse.settings, identifiers, warehouse_roots=roots, id_columns=id_columns(project))
    assert after.hits == [] and not after.unreadable, after.hits[:5]
    assert after.files_scanned[WAREHOUSE] > 20
    # Each landed file (a table's records of one capture) held a line of theirs: all were removed, bronze keeps
    # everyone else's lines (below).
    assert sorted(first_landing) == sorted(landed) and len(landed) == 4 and after.files_scanned[LANDING] == 0

    # Everyone else is as the database has them; the subject's rows, current and past, are gone.
    assert _rows(lakehouse, "silver_accounts", "id") == {k: v for k, v in silver.items() if k != SUBJECT}
    left = _rows(lakehouse, "silver_orders", "order_id")
    assert set(left) == {o for o, row in orders.items() if row["account_id"] != SUBJECT} - {42}
    assert left[28]["status"] == "shipped" and left[28]["account_id"] == 7
    history = lakehouse.spark.table(lakehouse.table_id("silver_accounts_history"))
    assert history.where(f"id = {SUBJECT}").count() == 0 and history.where("id = 7").count() == 2
    quarantine = [r.payload for r in lakehouse.spark.table(lakehouse.table_id("bronze_cdc_orders_quarantine"))
                  .collect()]
    assert len(quarantine) == 1 and '"account_id":7,' in quarantine[0]
    rows = reconcile(lakehouse.settings, project)
    assert rows and all(r["balanced"] for r in rows), rows
    assert sum(r["forgotten"] for r in rows) == sum(t["lines_forgotten"] for t in first_run.values()) > 0
