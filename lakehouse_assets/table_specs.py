"""Every table a project declares, as specs: bronze, quarantine, silver, gold, ML and the ingest log."""

from __future__ import annotations

from .bronze.ingest import INGEST_LOG
from .bronze.sources import cdc_landing_source, event_landing_source
from .gold.events import gold_specs
from .gold.sql_tables import sql_table_spec
from .ml.features import ML_TRAINING_SET, ML_USER_FEATURES
from .project import Project
from .silver.cdc import current_spec, history_spec
from .silver.events import rejected_spec, silver_spec
from .tables.registry import TableSpec


def table_specs(project: Project) -> dict[str, TableSpec]:
    """Every table of the project by name: bronze, quarantine, silver, gold, ML, the ingest log."""
    specs = [INGEST_LOG]
    for source in project.events.values():
        landing = event_landing_source(source)
        specs += [landing.bronze, landing.quarantine, silver_spec(source), rejected_spec(source)]
    for table in project.cdc.values():
        landing = cdc_landing_source(table)
        specs += [landing.bronze, landing.quarantine, current_spec(table), history_spec(table)]
    specs += [spec for name, spec in gold_specs(project.gold).items() if name in project.gold.event_tables]
    specs += [sql_table_spec(t) for t in project.gold.sql_tables.values()]
    if project.gold.ml_tables:
        specs += [ML_USER_FEATURES, ML_TRAINING_SET]
    return {spec.name: spec for spec in specs}


def tables_taking_data_columns(project: Project) -> frozenset[str]:
    """Tables that add the columns their data brings (schema drift): bronze, and CDC's current state and history."""
    return frozenset(name for name, spec in table_specs(project).items() if spec.takes_data_columns)
