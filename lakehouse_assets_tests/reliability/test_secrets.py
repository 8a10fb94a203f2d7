"""Secrets stay secret: the S3 secret key, a catalog password and the pseudonymisation key never appear in logs,
Dagster's records, snapshot properties, error messages or `lakehouse` output, after a run that used them all;
and `lakehouse sql` reads the lake and nothing else (not the key file beside it)."""

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize

from examples.shop.events_generator import generate_day
from lakehouse_assets.cli import main
from lakehouse_assets.landing.zones import landing_zone
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.serving.duckdb_sql import query
from lakehouse_assets.settings import CatalogUri, Settings

from ..shop import SHOP_FILE, assets

DAY = dt.date(2025, 1, 1)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _leaks(secrets: list[str], texts: dict[str, bytes | str]) -> list[tuple[str, str]]:
    found = []
    for where, text in texts.items():
        data = text.encode() if isinstance(text, str) else text
        found += [(where, s) for s in secrets if s.encode() in data]
    return found


def test_no_secret_reaches_logs_records_snapshots_errors_or_output(spark, lake_settings, s3_server, tmp_path,
                                                                   monkeypatch, capfd):
    pii = f"pii-{uuid.uuid4().hex}"
    password = f"pw-{uuid.uuid4().hex}"
    monkeypatch.setenv("LAKEHOUSE_PII_KEY", pii)
    namespace, landing = f"t_secrets_{uuid.uuid4().hex[:6]}", f"s3://raw/{uuid.uuid4().hex[:8]}/landing"
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace=namespace, landing=landing)
    settings = lakehouse.settings
    assert settings.pii_key == pii and settings.s3_secret_key == s3_server.secret_key
    secrets = [pii, s3_server.secret_key, password]

    local = tmp_path / "generated"
    generate_day(local, DAY, events_per_day=120, files_per_day=2, malformed_rate=0.05)
    zone = landing_zone(settings)
    for path in (local / "events").rglob("*.jsonl*"):
        zone.put(path, "events", DAY, path.name)

    (tmp_path / "dagster").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "dagster"), overrides={"telemetry": {"enabled": False}})
    result = materialize(assets("bronze_events", "silver_events"), resources={"lakehouse": lakehouse},
                         instance=instance, partition_key=DAY.isoformat())
    assert result.success
    silver = spark.table(lakehouse.table_id("silver_events"))
    assert silver.where("ip_hash IS NOT NULL").count() > 0  # the key was used

    texts: dict[str, bytes | str] = dict(_files(tmp_path / "dagster"))  # runs, event logs, compute logs
    for event in instance.all_logs(result.run_id):
        texts[f"event {event.dagster_event_type}"] = json.dumps(event.to_json() if hasattr(event, "to_json") else
                                                                str(event))
    for name in ("bronze_events", "bronze_events_quarantine", "silver_events", "silver_events_rejected",
                 "bronze_ingest_log"):
        table = lakehouse.catalog.load_table((namespace, name))
        texts[f"{name} metadata"] = table.metadata.model_dump_json()
        texts[f"{name} metadata file"] = table.io.new_input(table.metadata_location).open().read()

    # The commands people run, in this process with the run's environment.
    for variable, value in (("LAKEHOUSE_HOME", str(lake_settings.home)), ("LAKEHOUSE_NAMESPACE", namespace),
                            ("LAKEHOUSE_LANDING", landing), ("LAKEHOUSE_S3_SECRET_KEY", s3_server.secret_key),
                            ("LAKEHOUSE_PROJECT", str(SHOP_FILE))):
        monkeypatch.setenv(variable, value)
    run_output = capfd.readouterr()  # what the run printed: Dagster's and Spark's logs
    texts["run output"] = run_output.out + run_output.err
    for command in (["settings"], ["tables", "--json"], ["health", "--json"], ["snapshots", "silver_events"],
                    ["reconcile", "--json"], ["sql", "SELECT count(*) FROM silver_events"]):
        assert main(command) in (0, 1), command
        out = capfd.readouterr()
        texts[f"lakehouse {command[0]}"] = out.out + out.err
    # A catalog that cannot be reached, and one that is malformed: the error names it, not its password.
    monkeypatch.setenv("LAKEHOUSE_CATALOG_URI", f"postgresql://lake:{password}@127.0.0.1:9/lakehouse")
    assert main(["tables"]) == 2
    texts["unreachable catalog"] = capfd.readouterr().err
    assert "127.0.0.1:9" in texts["unreachable catalog"]
    with pytest.raises(ValueError) as malformed:
        CatalogUri.parse(f"postgresql://lake:{password}@db.internal:5432")
    texts["malformed catalog"] = str(malformed.value)
    texts["settings repr"] = repr(Settings(home=tmp_path, catalog_uri=f"postgresql://lake:{password}@db:5432/x",
                                           s3_secret_key=s3_server.secret_key, pii_key=pii))

    assert len(texts) > 10 and "bronze_events" in texts["run output"]
    assert _leaks(secrets, texts) == []


def test_lakehouse_sql_reads_the_lake_and_nothing_else(lake_settings, tmp_path):
    import pyarrow as pa

    namespace = f"t_sqlfence_{uuid.uuid4().hex[:6]}"
    settings = lake_settings.with_(namespace=namespace)
    key = settings.home / "secrets" / "fence-test.key"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text("do-not-read")
    from lakehouse_assets.runtime.catalog import catalog_for

    catalog = catalog_for(settings)
    catalog.create_namespace(namespace)
    catalog.create_table((namespace, "numbers"), schema=pa.schema([("n", pa.int64())])).append(
        pa.table({"n": [1, 2, 3]}))
    assert query(settings, "SELECT sum(n) AS s FROM numbers").to_pylist() == [{"s": 6}]

    for statement in (f"SELECT * FROM read_text('{key}')", f"SELECT * FROM read_csv('{tmp_path}/../x.csv')",
                      f"COPY (SELECT * FROM numbers) TO '{tmp_path}/out.csv'", f"ATTACH '{tmp_path}/x.db'",
                      "SET enable_external_access = true", "INSTALL httpfs"):
        with pytest.raises(ValueError, match="^refused ") as refused:
            query(settings, statement)
        assert "do-not-read" not in str(refused.value), statement
    assert not (tmp_path / "out.csv").exists()
