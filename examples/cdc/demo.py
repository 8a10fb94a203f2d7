"""`make demo-cdc`: a real PostgreSQL, real Debezium, and the lakehouse kept equal to it.

Starts a throwaway PostgreSQL with logical decoding (or uses LAKEHOUSE_CDC_STORE_DSN),
fills it, captures the initial snapshot with `lakehouse capture`, runs a workload
of orders being placed, paid, shipped, cancelled and deleted, captures again,
materialises bronze -> silver -> gold for today, and shows that silver equals the
source.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import psycopg2

from lakehouse_services.postgres import ThrowawayPostgres

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def run(*command: str) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def fill(dsn: str, rng: random.Random) -> None:
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    cur.execute("""CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, email text, name text,
                     country text, created_at timestamp DEFAULT now());
                   CREATE TABLE IF NOT EXISTS orders (order_id bigint PRIMARY KEY, customer_id bigint REFERENCES
                     customers, status text, amount numeric(12,2), placed_at timestamp DEFAULT now());
                   TRUNCATE orders, customers""")
    for n in range(1, 101):
        cur.execute("INSERT INTO customers (customer_id, email, name, country) VALUES (%s, %s, %s, %s)",
                    (n, f"customer{n}@example.com", f"Customer {n}", rng.choice(["SE", "DE", "BR", "JP"])))
    for n in range(1, 301):
        cur.execute("INSERT INTO orders (order_id, customer_id, status, amount) VALUES (%s, %s, 'new', %s)",
                    (n, rng.randint(1, 100), Decimal(rng.randint(500, 50_000)) / 100))
    conn.commit()
    conn.close()


def workload(dsn: str, rng: random.Random, transactions: int = 1000) -> None:
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    next_order = 10_000
    for _ in range(transactions):
        roll = rng.random()
        if roll < 0.3:
            next_order += 1
            cur.execute("INSERT INTO orders (order_id, customer_id, status, amount) VALUES (%s, %s, 'new', %s)",
                        (next_order, rng.randint(1, 100), Decimal(rng.randint(500, 50_000)) / 100))
        elif roll < 0.8:
            cur.execute("UPDATE orders SET status = %s WHERE order_id = (SELECT order_id FROM orders ORDER BY random() "
                        "LIMIT 1)", (rng.choice(["paid", "shipped", "cancelled"]),))
        elif roll < 0.9:
            cur.execute("DELETE FROM orders WHERE order_id = (SELECT order_id FROM orders ORDER BY random() LIMIT 1)")
        else:
            cur.execute("UPDATE customers SET country = %s WHERE customer_id = %s",
                        (rng.choice(["SE", "DE", "BR", "JP", "US"]), rng.randint(1, 100)))
        conn.commit()
    conn.close()


def fresh_start() -> None:
    """The demo refills its source each time: its tables start empty too (the demo namespace only)."""
    from lakehouse_assets.runtime.catalog import catalog_for
    from lakehouse_assets.settings import Settings

    settings = Settings.from_env()
    catalog = catalog_for(settings)
    if catalog.namespace_exists(settings.namespace):
        for identifier in catalog.list_tables(settings.namespace):
            catalog.drop_table(identifier)


def main() -> int:
    home = Path(os.environ.get("LAKEHOUSE_HOME", ".lakehouse")).resolve()
    os.environ["LAKEHOUSE_PROJECT"] = str(HERE / "lakehouse.yaml")
    os.environ["LAKEHOUSE_NAMESPACE"] = os.environ.get("LAKEHOUSE_NAMESPACE_CDC", "store")
    pg = None
    dsn = os.environ.get("LAKEHOUSE_CDC_STORE_DSN")
    if not dsn:
        pg = ThrowawayPostgres(home / "cdc-demo" / "pg", database="store").start()
        dsn = pg.dsn
        os.environ["LAKEHOUSE_CDC_STORE_DSN"] = dsn
        print(f"PostgreSQL with logical decoding on port {pg.port} ({dsn})")
    try:
        rng = random.Random(11)
        fresh_start()
        fill(dsn, rng)
        run(str(BIN / "lakehouse"), "capture", "--source", "store", "--drop-slot")
        run(str(BIN / "lakehouse"), "capture", "--source", "store", "--until-idle", "5")
        workload(dsn, rng)
        run(str(BIN / "lakehouse"), "capture", "--source", "store", "--until-idle", "5")
        today = dt.datetime.now(dt.timezone.utc).date().isoformat()
        run(str(BIN / "dagster"), "asset", "materialize", "-m", "lakehouse_assets.definitions",
            "--select", ",".join(f"{layer}{t}{part}" for t in ("customers", "orders") for layer, part in (
                ("bronze_cdc_", ""), ("bronze_cdc_", "_quarantine"), ("silver_", ""), ("silver_", "_history"))),
            "--partition", today)
        run(str(BIN / "dagster"), "asset", "materialize", "-m", "lakehouse_assets.definitions",
            "--select", "gold_orders_by_status")
        run(str(BIN / "lakehouse"), "tables")
        conn = psycopg2.connect(dsn)
        cur = conn.cursor()
        cur.execute("SELECT count(*), sum(amount) FROM orders")
        rows, amount = cur.fetchone()
        conn.close()
        print(f"source: {rows} orders, {amount} in total")
        run(str(BIN / "lakehouse"), "sql", "SELECT count(*) AS orders, sum(amount) AS amount FROM silver_orders")
        run(str(BIN / "lakehouse"), "sql", "SELECT * FROM gold_orders_by_status ORDER BY status, country")
    finally:
        if pg is not None:
            pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
