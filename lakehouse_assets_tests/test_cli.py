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


def lakehouse_cli(*args, home, namespace="lake", **env_vars):
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_NAMESPACE": namespace,
           "LAKEHOUSE_PROJECT": str(SHOP_FILE), **env_vars}
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


def _take(catalog, namespace, run, files, ts):
    """What one ingest run publishes, as pyiceberg appends in publish order (bronze, quarantine, log), each
    stamped with the run, as the staged writes stamp theirs: one kept line and one quarantined per file."""
    from lakehouse_assets.runtime.commit import ASSET, RUN_ID

    day = ts.date()
    tables = {
        "bronze_events": [{"event_id": f"{run}-{f}", "event_ts": ts, "source_file": f} for f in files],
        "bronze_events_quarantine": [{"reason": "malformed JSON", "source_file": f} for f in files],
        "bronze_ingest_log": [{"source": "events", "source_file": f, "landing_date": day, "run_id": run}
                              for f in files],
    }
    for name, rows in tables.items():
        table = catalog.load_table((namespace, name))
        table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()),
                     snapshot_properties={RUN_ID: run, ASSET: name})


def test_rollback_of_a_bronze_table_names_what_went_back_and_tells_dagster(lake_settings, namespace, tmp_path):
    """`lakehouse rollback bronze_events` moves its quarantine and its ingest log rows too, prints the days and
    the runs that take them again, and reports bronze's landing days to Dagster for the automation."""
    import time

    from dagster import AssetKey, AssetRecordsFilter, DagsterInstance
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform
    from pyiceberg.types import DateType, NestedField, StringType, TimestamptzType

    catalog = catalog_for(lake_settings)
    catalog.create_namespace(namespace)
    bronze = Schema(NestedField(1, "event_id", StringType()), NestedField(2, "event_ts", TimestamptzType()),
                    NestedField(3, "source_file", StringType()))
    catalog.create_table((namespace, "bronze_events"), schema=bronze,
                         partition_spec=PartitionSpec(PartitionField(2, 1000, DayTransform(), "event_ts_day")))
    catalog.create_table((namespace, "bronze_events_quarantine"), schema=Schema(
        NestedField(1, "reason", StringType()), NestedField(2, "source_file", StringType())))
    catalog.create_table((namespace, "bronze_ingest_log"), schema=Schema(
        NestedField(1, "source", StringType()), NestedField(2, "source_file", StringType()),
        NestedField(3, "landing_date", DateType()), NestedField(4, "run_id", StringType())))
    landing = tmp_path / "landing"
    landed = f"file:{landing}/events/date=2025-01-02/"
    (landing / "events" / "date=2025-01-02").mkdir(parents=True)
    for name in ("a.jsonl", "b.jsonl"):  # still in the zone: the rollback's files can be taken again
        (landing / "events" / "date=2025-01-02" / name).write_text("{}\n")
    _take(catalog, namespace, "run-a", [landed + "a.jsonl"], dt.datetime(2025, 1, 2, 5, tzinfo=dt.timezone.utc))
    time.sleep(0.01)
    good = dt.datetime.now(dt.timezone.utc).isoformat()
    time.sleep(0.01)
    _take(catalog, namespace, "run-b", [landed + "b.jsonl"], dt.datetime(2025, 1, 2, 6, tzinfo=dt.timezone.utc))
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()

    done = lakehouse_cli("rollback", "bronze_events", "--to", good, home=lake_settings.home, namespace=namespace,
                         DAGSTER_HOME=str(dagster_home), LAKEHOUSE_START_DATE="2025-01-01",
                         LAKEHOUSE_LANDING=str(landing))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("bronze_events: main moved from snapshot ")
    assert lines[1].startswith("bronze_events_quarantine: main moved from snapshot ")
    assert lines[2].startswith("bronze_ingest_log: 1 rows of events deleted")
    assert lines[3:7] == [
        "landing days rolled back: 2025-01-02", "event days rolled back: 2025-01-02",
        "take the files again: dagster asset materialize -m lakehouse_assets.definitions --select "
        "bronze_events,bronze_events_quarantine --partition-range 2025-01-02...2025-01-02",
        "then decide silver again: dagster asset materialize -m lakehouse_assets.definitions --select "
        "silver_events --partition-range 2025-01-02...2025-01-02 (gold and ML follow by their automation)"]
    assert [r["source_file"] for r in catalog.load_table((namespace, "bronze_ingest_log")).scan().to_arrow()
            .to_pylist()] == [landed + "a.jsonl"]
    assert [r["source_file"] for r in catalog.load_table((namespace, "bronze_events_quarantine")).scan().to_arrow()
            .to_pylist()] == [landed + "a.jsonl"]

    with DagsterInstance.from_config(str(dagster_home)) as instance:
        for asset in ("bronze_events", "bronze_events_quarantine"):
            [record] = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(asset)), limit=5).records
            assert record.partition_key == "2025-01-02"
            assert record.asset_materialization.metadata["event_days"].value == ["2025-01-02"]
    again = json.loads(lakehouse_cli("rollback", "bronze_events", "--to", good, "--json", home=lake_settings.home,
                                     namespace=namespace, LAKEHOUSE_LANDING=str(landing)).stdout)
    assert again["changed"] is False and again["table"] == "bronze_events"


def test_drop_writes_a_new_file_each_time_and_refuses_a_bad_day(tmp_path):
    landing = tmp_path / "landing"
    env_home = dict(home=tmp_path)
    first = lakehouse_cli("drop", "--day", "2025-02-03", "--events", "40", **env_home)
    assert first.returncode == 0, first.stderr
    folder = landing / "events" / "date=2025-02-03"
    [dropped] = list(folder.iterdir())
    lines = dropped.read_text().splitlines()
    assert first.stdout.startswith(f"dropped {len(lines)} lines: ") and dropped.name in first.stdout
    # The generator's stream as a client sends it: 40 events, some delivered twice, some lines malformed.
    events = [json.loads(line) for line in lines if line.startswith("{") and line.endswith("}")]
    ids = {e["event_id"] for e in events if "event_id" in e}
    assert 36 <= len(ids) <= 40 and len(lines) >= 40
    again = lakehouse_cli("drop", "--day", "2025-02-03", "--events", "5", **env_home)
    assert again.returncode == 0 and len(list(folder.iterdir())) == 2  # a new file, the first one untouched
    assert dropped.read_text().splitlines() == lines

    bad = lakehouse_cli("drop", "--day", "2025-02-30", **env_home)
    assert bad.returncode != 0 and "2025-02-30" in bad.stderr and "Traceback" not in bad.stderr


def test_s3_start_status_a_drop_into_it_and_stop(tmp_path):
    import boto3
    from botocore.config import Config

    from lakehouse_services.s3server import DEFAULT_SECRET_KEY

    started = lakehouse_cli("s3", "start", home=tmp_path)
    try:
        assert started.returncode == 0, started.stderr
        status = lakehouse_cli("s3", "status", home=tmp_path)
        assert status.stdout.startswith("running, pid "), status.stdout
        endpoint = status.stdout.split(", ")[-1].strip()
        exports = dict(pair.split("=", 1) for pair in started.stdout.split("export ", 1)[1].split())
        assert exports["LAKEHOUSE_S3_ENDPOINT"] == endpoint and exports["LAKEHOUSE_S3_SECRET_KEY"] == DEFAULT_SECRET_KEY

        env = {**os.environ, **exports, "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_PROJECT": str(SHOP_FILE)}
        drop = subprocess.run([LAKEHOUSE, "drop", "--day", "2025-02-03", "--events", "25"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert drop.returncode == 0, drop.stderr
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=exports["LAKEHOUSE_S3_ACCESS_KEY"],
                              aws_secret_access_key=DEFAULT_SECRET_KEY, region_name="us-east-1",
                              config=Config(s3={"addressing_style": "path"}))
        [obj] = client.list_objects_v2(Bucket="raw", Prefix="landing/events/date=2025-02-03/")["Contents"]
        body = client.get_object(Bucket="raw", Key=obj["Key"])["Body"].read().decode()
        assert drop.stdout.startswith(f"dropped {len(body.splitlines())} lines: ")
        assert f"s3://raw/{obj['Key']}" in drop.stdout
    finally:
        stopped = lakehouse_cli("s3", "stop", home=tmp_path)
    assert stopped.stdout.strip() == "stopped"
    assert lakehouse_cli("s3", "status", home=tmp_path).stdout.strip() == "not running"
    assert lakehouse_cli("s3", "stop", home=tmp_path).stdout.strip() == "no S3 server was running"


def test_service_commands_with_nothing_running_and_without_the_services_package(tmp_path):
    for service, nothing in (("s3", "no S3 server was running"), ("cluster", "no cluster was running"),
                             ("postgres", "no PostgreSQL server was running"), ("kafka", "no Kafka broker was running")):
        status = lakehouse_cli(service, "status", home=tmp_path)
        assert (status.returncode, status.stdout) == (0, "not running\n"), status.stderr
        assert lakehouse_cli(service, "stop", home=tmp_path).stdout == f"{nothing}\n"
    # Without lakehouse_services (services/, installed by make setup) they say how to install it.
    script = (
        "import importlib.abc, sys\n"
        "class Absent(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'lakehouse_services':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Absent())\n"
        "from lakehouse_assets.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path)}
    for service in ("s3", "cluster", "postgres", "kafka"):
        done = subprocess.run([sys.executable, "-c", script, service, "start"], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr == (f"lakehouse {service}: the local services are not installed: pip install -e services/ "
                               "(make setup does)\n")
    assert not (tmp_path / "postgres").exists()


def test_pin_reads_back_exactly_what_a_materialisation_pinned_after_the_table_moved_on(tmp_path):
    """`lakehouse pin` finds the newest materialisation's pins in the Dagster instance and reads that snapshot
    with pyiceberg (no Spark): later appends change nothing it prints or writes."""
    import pyarrow.parquet as pq
    from dagster import AssetMaterialization, DagsterInstance, MetadataValue

    from lakehouse_assets.settings import Settings

    namespace = "pinned"
    catalog = catalog_for(Settings(home=tmp_path, namespace=namespace))
    catalog.create_namespace(namespace)
    table = catalog.create_table((namespace, "ml_training_set"), schema=SCHEMA)
    ts = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    table.append(pa.Table.from_pylist([{"id": n, "ts": ts} for n in range(5)], schema=SCHEMA))
    snapshot_id = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(snapshot_id, "pin_ml_training_set_run1").commit()
    table.append(pa.Table.from_pylist([{"id": 99, "ts": ts}], schema=SCHEMA))  # after the pin

    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    table_id = f"lakehouse.{namespace}.ml_training_set"
    with DagsterInstance.from_config(str(home)) as instance:
        instance.report_runless_asset_event(AssetMaterialization("ml_training_set", metadata={
            "table": MetadataValue.text(table_id),
            "pinned_snapshots": MetadataValue.json(
                {table_id: {"snapshot_id": snapshot_id, "tag": "pin_ml_training_set_run1"}})}))
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_NAMESPACE": namespace,
           "LAKEHOUSE_PROJECT": str(SHOP_FILE), "DAGSTER_HOME": str(home)}
    out = tmp_path / "pinned.parquet"
    done = subprocess.run([LAKEHOUSE, "pin", "ml_training_set", "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["rows"] == 5 and info["snapshots"][table_id]["snapshot_id"] == snapshot_id
    assert sorted(r["id"] for r in pq.read_table(out).to_pylist()) == [0, 1, 2, 3, 4]

    missing = subprocess.run([LAKEHOUSE, "pin", "ml_user_features"], env=env, capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode != 0 and "no materialisation of ml_user_features" in missing.stderr
    assert "Traceback" not in missing.stderr
