"""The repository's dagster.yaml opens with DAGSTER_HOME alone: the instance's records and step output go to
`dagster/` and `dagster/logs/` in the lake's home, where the Makefile's LAKEHOUSE_DAGSTER_STORAGE and _LOGS put
them; those variables still move them."""

from __future__ import annotations

import shutil

from dagster import DagsterInstance, asset, materialize

from lakehouse_assets.automation.instance import ArtifactStorage, ComputeLogs, SqliteStorage

from ..shop import ROOT


@asset
def counted() -> int:
    print("counted once")
    return 1


def _instance_home(tmp_path):
    dagster_home = tmp_path / "root"
    dagster_home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    return dagster_home


def test_without_its_variables_the_instance_lives_in_the_lakes_home(tmp_path, monkeypatch):
    dagster_home = _instance_home(tmp_path)
    for name in ("LAKEHOUSE_DAGSTER_STORAGE", "LAKEHOUSE_DAGSTER_LOGS", "LAKEHOUSE_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "lake"))
    with DagsterInstance.get() as instance:
        assert isinstance(instance.compute_log_manager, ComputeLogs)
        assert isinstance(instance.get_ref().storage, SqliteStorage)
        assert isinstance(instance.get_ref().local_artifact_storage, ArtifactStorage)
        result = materialize([counted], instance=instance)
        assert result.success
        run_id = result.run_id
    storage, logs = tmp_path / "lake" / "dagster", tmp_path / "lake" / "dagster" / "logs"
    assert (storage / "history" / "runs.db").is_file() and (storage / "history" / "runs" / f"{run_id}.db").is_file()
    assert any("counted once" in f.read_text() for f in logs.rglob("*.out")), sorted(logs.rglob("*"))
    assert not [p for p in dagster_home.iterdir() if p.name != "dagster.yaml"]  # nothing beside dagster.yaml

    # The same instance, opened again in a new process's way: the run is there.
    with DagsterInstance.get() as instance:
        assert instance.get_run_by_id(run_id) is not None


def test_its_variables_move_the_instance(tmp_path, monkeypatch):
    dagster_home = _instance_home(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "lake"))
    monkeypatch.setenv("LAKEHOUSE_DAGSTER_STORAGE", str(tmp_path / "records"))
    monkeypatch.setenv("LAKEHOUSE_DAGSTER_LOGS", str(tmp_path / "output"))
    with DagsterInstance.get() as instance:
        assert materialize([counted], instance=instance).success
    assert (tmp_path / "records" / "history" / "runs.db").is_file()
    assert any("counted once" in f.read_text() for f in (tmp_path / "output").rglob("*.out"))
    assert not (tmp_path / "lake").exists()
