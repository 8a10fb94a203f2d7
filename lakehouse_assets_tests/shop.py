"""The shop demo's declaration and graph, as the tests use them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dagster import AssetsDefinition

from lakehouse_assets.build import build_definitions, table_specs
from lakehouse_assets.project import load_project
from lakehouse_assets.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SHOP_FILE = ROOT / "examples" / "shop" / "lakehouse.yaml"
SHOP = load_project(SHOP_FILE)
DEFS = build_definitions(SHOP, Settings.from_env())
SPECS = table_specs(SHOP)
ALL_ASSETS: list[AssetsDefinition] = list(DEFS.assets)  # type: ignore[arg-type]


def asset(name: str) -> AssetsDefinition:
    """The assets definition that writes table `name` (a multi-asset writes several)."""
    for a in ALL_ASSETS:
        if any(k.to_user_string() == name for k in a.keys):
            return a
    raise KeyError(name)


def assets(*names: str) -> list[AssetsDefinition]:
    out: list[AssetsDefinition] = []
    for name in names:
        a = asset(name)
        if a not in out:
            out.append(a)
    return out


BRONZE_CDC = assets(*(t.bronze for t in SHOP.cdc.values()))
SILVER_CDC = assets(*(t.silver for t in SHOP.cdc.values()))


def temporary_instance(tmp_path: Path, pii_key: str) -> tuple[dict, Settings, Path]:
    """A temporary Dagster instance (this repository's dagster.yaml) and lake for the shop, for processes the test
    starts (daemon, webserver, CLI): their environment, the lake's settings, and DAGSTER_HOME."""
    home, dagster_home = tmp_path / "lake", tmp_path / "dagster"
    dagster_home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    (dagster_home / "workspace.yaml").write_text(
        "load_from:\n  - python_module:\n      module_name: lakehouse_assets.definitions\n      location_name: lakehouse\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")},
           "DAGSTER_HOME": str(dagster_home), "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PROJECT": str(SHOP_FILE),
           "LAKEHOUSE_DAGSTER_STORAGE": str(dagster_home / "storage"),
           "LAKEHOUSE_DAGSTER_LOGS": str(dagster_home / "logs"), "LAKEHOUSE_SPARK_MASTER": "local[2]",
           "LAKEHOUSE_DRIVER_MEMORY": "1g", "LAKEHOUSE_PII_KEY": pii_key}
    return env, Settings.from_env(home=home, project=str(SHOP_FILE), namespace="lake"), dagster_home
