"""What Dagster loads: the graph of the project declared in LAKEHOUSE_PROJECT (else the one the home records)."""

from __future__ import annotations

from .build import build_definitions
from .project import load_project
from .settings import Settings

_settings = Settings.from_env()
defs = build_definitions(load_project(_settings.project, _settings.project_origin), _settings)
