"""A lakehouse project declared as data (`lakehouse.yaml`), validated on load."""

from .load import load_project, parse_duration, parse_project
from .model import CdcTable, EventSource, Freshness, Gold, LandingPolicy, Project, SqlTable

__all__ = ["CdcTable", "EventSource", "Freshness", "Gold", "LandingPolicy", "Project", "SqlTable", "load_project",
           "parse_duration", "parse_project"]
