"""The `lakehouse` command, run as a user runs it: a subprocess, no Spark."""

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from lakehouse_assets.runtime.catalog import catalog_for

from .shop import SHOP_FILE

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("us", tz="UTC"))])


def lakehouse_cli(*args, home, namespace="lake"):
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_NAMESPACE": namespace,
           "LAKEHOUSE_PROJECT": str(SHOP_FILE)}
    return subprocess.run([LAKEHOUSE, *args], env=env, capture_output=True, text=True, timeout=120)


def test_tables_json_reports_snapshot_rows_files_and_bytes(lake_settings, namespace):
    catalog = catalog_for(lake_settings)
    catalog.create_namespace(namespace)
    table = catalog.create_table((namespace, "cli_probe"), schema=SCHEMA)
    ts = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    table.append(pa.Table.from_pylist([{"id": 1, "ts": ts}, {"id": 2, "ts": ts}], schema=SCHEMA))
    table.append(pa.Table.from_pylist([{"id": 3, "ts": ts}], schema=SCHEMA))
    catalog.create_table((namespace, "cli_empty"), schema=SCHEMA)

    done = lakehouse_cli("tables", "--json", home=lake_settings.home, namespace=namespace)
    assert done.returncode == 0, done.stderr
    rows = {r["table"]: r for r in json.loads(done.stdout)}
    probe = rows[f"{namespace}.cli_probe"]
    table = table.refresh()
    assert probe["snapshot_id"] == table.current_snapshot().snapshot_id
    assert probe["rows"] == 3
    assert probe["data_files"] == 2 and probe["snapshots"] == 2
    assert probe["total_bytes"] == sum(t.file.file_size_in_bytes for t in table.scan().plan_files())
    empty = rows[f"{namespace}.cli_empty"]
    assert (empty["snapshot_id"], empty["rows"], empty["data_files"]) == (None, 0, 0)


def test_generate_writes_the_landing_zone_and_reconcile_flags_unloaded_days(tmp_path):
    done = lakehouse_cli("generate", "--start", "2025-02-01", "--days", "2", "--events-per-day", "40",
                         home=tmp_path)
    assert done.returncode == 0, done.stderr
    files = sorted((tmp_path / "landing" / "events").glob("date=*/*.jsonl"))
    assert {f.parent.name for f in files} == {"date=2025-02-01", "date=2025-02-02"}
    lines = sum(len(f.read_text().splitlines()) for f in files)
    assert lines >= 80

    # Nothing is in bronze yet: every landed record is unaccounted for, and it says so.
    check = lakehouse_cli("reconcile", "--json", home=tmp_path)
    assert check.returncode == 1
    rows = json.loads(check.stdout)
    assert sum(r["records_in"] for r in rows if r["source"] == "events") == lines
    assert {r["source"] for r in rows} == {"events", "cdc/customers", "cdc/orders", "cdc/order_items"}
    assert not any(r["balanced"] for r in rows)
    assert "events 2025-02-01, events 2025-02-02, cdc/customers 2025-02-01" in check.stderr


def test_a_bad_catalog_setting_is_a_clear_error(tmp_path):
    env_home = tmp_path
    done = subprocess.run(
        [LAKEHOUSE, "tables"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "LAKEHOUSE_HOME": str(env_home), "LAKEHOUSE_CATALOG_URI": "mysql://db/lake"},
    )
    assert done.returncode == 2
    assert "unsupported catalog URI 'mysql://db/lake'" in done.stderr


def test_health_snapshots_tag_and_rollback_from_the_command_line(lake_settings, namespace):
    catalog = catalog_for(lake_settings)
    catalog.create_namespace(namespace)
    table = catalog.create_table((namespace, "ops_probe"), schema=SCHEMA)
    ts = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    for n in range(3):
        table.append(pa.Table.from_pylist([{"id": n, "ts": ts}], schema=SCHEMA))
    good = table.current_snapshot().snapshot_id
    table.append(pa.Table.from_pylist([{"id": -1, "ts": ts}], schema=SCHEMA))  # the bad write
    bad = table.current_snapshot().snapshot_id

    def cli(*args):
        done = lakehouse_cli(*args, home=lake_settings.home, namespace=namespace)
        assert done.returncode in (0, 1), done.stderr
        return done

    health = json.loads(cli("health", "ops_probe", "--json").stdout)[0]
    assert (health["data_files"], health["small_files"], health["snapshots"], health["records"]) == (4, 4, 4, 4)
    assert health["compactable_small_files"] == 4 and health["healthy"]  # the shop's threshold is 50
    history = json.loads(cli("snapshots", "ops_probe", "--json").stdout)
    assert [h["rows_added"] for h in history] == [1, 1, 1, 1] and history[-1]["current"]

    assert "tag keep_good on snapshot" in cli("tag", "ops_probe", "keep_good", "--snapshot", str(good)).stdout
    assert json.loads(cli("rollback", "ops_probe", "--to", str(good), "--json").stdout) == {
        "table": "ops_probe", "from": bad, "to": good, "changed": True}
    table = catalog.load_table((namespace, "ops_probe"))
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2]
    assert table.metadata.refs["keep_good"].snapshot_id == good
    assert "tag:keep_good" in json.loads(cli("snapshots", "ops_probe", "--json").stdout)[2]["refs"]

    refused = lakehouse_cli("rollback", "ops_probe", "--to", "123", home=lake_settings.home, namespace=namespace)
    assert refused.returncode == 2 and "has no snapshot 123" in refused.stderr
    refused = lakehouse_cli("tag", "ops_probe", "x'; DROP TABLE t; --", home=lake_settings.home, namespace=namespace)
    assert refused.returncode == 2 and "invalid tag name" in refused.stderr
