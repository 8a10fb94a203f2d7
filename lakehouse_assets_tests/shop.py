"""The shop demo's declaration and graph, as the tests use them."""

from __future__ import annotations

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
