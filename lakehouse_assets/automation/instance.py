"""The local Dagster instance's folders (the repository's dagster.yaml names these classes).

Runs, events and schedules (SQLite) and run artifacts go to `LAKEHOUSE_DAGSTER_STORAGE`, the steps' captured
output to `LAKEHOUSE_DAGSTER_LOGS`; unset, to `dagster/` and `dagster/logs/` in the lake's home (`LAKEHOUSE_HOME`,
as `lakehouse settings` shows it), where the Makefile puts them. Dagster's own `{env: VAR}` in a dagster.yaml
cannot have a default, so these classes provide it: setting `DAGSTER_HOME` alone opens the instance the demo
ran in.
"""

from __future__ import annotations

import os
from typing import Any

from dagster import Field
from dagster._core.storage.local_compute_log_manager import LocalComputeLogManager
from dagster._core.storage.root import LocalArtifactStorage
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage
from dagster._serdes import ConfigurableClassData

from ..settings import Settings

STORAGE_VARIABLE = "LAKEHOUSE_DAGSTER_STORAGE"
LOGS_VARIABLE = "LAKEHOUSE_DAGSTER_LOGS"


def instance_folder(variable: str) -> str:
    """The folder a variable names, else its default under the lake's home."""
    named = os.environ.get(variable, "").strip()
    if named:
        return os.path.abspath(os.path.expanduser(named))
    folder = Settings.from_env().home / "dagster"
    return str(folder / "logs" if variable == LOGS_VARIABLE else folder)


class SqliteStorage(DagsterSqliteStorage):
    """Dagster's SQLite storage in `LAKEHOUSE_DAGSTER_STORAGE` (default: the home's `dagster/`)."""

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Any) -> SqliteStorage:
        return cls.from_local(base_dir=instance_folder(STORAGE_VARIABLE), inst_data=inst_data)


class ArtifactStorage(LocalArtifactStorage):
    """Run artifacts in `LAKEHOUSE_DAGSTER_STORAGE`, beside the SQLite storage."""

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: Any) -> ArtifactStorage:
        return cls(base_dir=instance_folder(STORAGE_VARIABLE), inst_data=inst_data)


class ComputeLogs(LocalComputeLogManager):
    """The steps' captured stdout and stderr in `LAKEHOUSE_DAGSTER_LOGS` (default: the home's `dagster/logs/`)."""

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {"polling_timeout": Field(float, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: Any) -> ComputeLogs:
        return cls(base_dir=instance_folder(LOGS_VARIABLE), inst_data=inst_data, **config_value)
