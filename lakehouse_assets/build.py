"""A project's whole Dagster graph, derived from its declaration.

`table_specs(project)` declares every table; `build_definitions(project)` makes
the assets that write them, their checks, freshness policies, automation and
sensors. Nothing here knows a domain: a new source or table is a change to the
declaration, not to this package.
"""

from __future__ import annotations

from dagster import (
    AssetsDefinition,
    AssetSpec,
    DailyPartitionsDefinition,
    Definitions,
    SensorDefinition,
    TableColumn,
    TableColumnConstraints,
    TableSchema,
    in_process_executor,
)

from .automation.conditions import automation_sensor
from .automation.partitions import daily_partitions
from .bronze.assets import cdc_landing_source, event_landing_source, landing_sources
from .bronze.capture_asset import capture_asset, capture_schedule
from .bronze.ingest import INGEST_LOG, LandingSource, landing_asset
from .bronze.late_events import late_events_sensor
from .bronze.sensors import landing_sensor
from .bronze.topics import topic_asset, topic_sensor
from .gold.bi import gold_event_assets, gold_specs
from .gold.sql_tables import sql_table_asset, sql_table_spec
from .ml.features import ML_TRAINING_SET, ML_USER_FEATURES, ml_assets
from .operations.alerts import alert_sensors
from .operations.schedules import maintenance_definitions
from .project import Project
from .runtime.resource import LakehouseResource
from .settings import Settings
from .silver.cdc import current_spec, history_spec, silver_cdc_asset
from .silver.events import rejected_spec, silver_events_asset, silver_spec, undecided_keys_check
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


def with_column_schema(asset: AssetSpec, specs: dict[str, TableSpec]) -> AssetSpec:
    """The table's columns (name, Spark type, nullability, comment) on its asset, shown on its page in the UI."""
    table = specs.get(asset.key.to_user_string())
    if table is None:
        return asset
    columns = [TableColumn(f.name, f.dataType.simpleString(), f.metadata.get("comment", ""),
                           constraints=TableColumnConstraints(nullable=f.nullable))
               for f in table.schema.fields]
    return asset.merge_attributes(metadata={"dagster/column_schema": TableSchema(columns=columns)})


def build_definitions(project: Project, settings: Settings | None = None) -> Definitions:
    settings = settings or Settings.from_env()
    partitions = daily_partitions(settings.start_date or project.start_date)
    specs = table_specs(project)
    sources = landing_sources(project)

    captures = {name: capture_asset(project, capture) for name, capture in project.captures.items()}
    assets = [
        *captures.values(),
        *_bronze_assets(project, sources, partitions, captures),
        *_silver_assets(project, specs, partitions),
        *_gold_and_ml_assets(project, specs, partitions),
    ]
    sensors = _layer_sensors(project, sources, partitions, specs, assets)
    schedules = [s for name, c in project.captures.items() if (s := capture_schedule(c, captures[name]))]
    assets = [a.map_asset_specs(lambda spec: with_column_schema(spec, specs)) for a in assets]
    asset_tables = {key.to_user_string() for a in assets for key in a.keys} & set(specs)
    jobs, maintenance_sensors, maintenance_schedules, checks = maintenance_definitions(project, specs, asset_tables)
    checks = [*checks, *(undecided_keys_check(events) for events in project.events.values())]
    return Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        sensors=[*sensors, *maintenance_sensors, *alert_sensors(settings)],
        schedules=[*schedules, *maintenance_schedules],
        resources={"lakehouse": LakehouseResource()},
        # One JVM for the whole run: a process per step would start Spark each time.
        executor=in_process_executor,
    )


def _bronze_assets(project: Project, sources: list[LandingSource], partitions: DailyPartitionsDefinition,
                   captures: dict[str, AssetsDefinition]) -> list[AssetsDefinition]:
    """One bronze asset per landing source; a captured CDC table's bronze depends on its capture."""
    assets = []
    for landing in sources:
        table = next((t for t in project.cdc.values() if t.landing == landing.name), None)
        captured_by = captures.get(table.source) if table is not None else None
        deps = [captured_by.key] if captured_by else []
        if landing.topic is not None:
            assets.append(topic_asset(landing, partitions, deps=deps))
        else:
            assets.append(landing_asset(landing, partitions, deps=deps))
    return assets


def _silver_assets(project: Project, specs: dict[str, TableSpec],
                   partitions: DailyPartitionsDefinition) -> list[AssetsDefinition]:
    """Silver of each event source, then of each CDC table (with the tables its references point to)."""
    assets = [silver_events_asset(events, specs[events.bronze], partitions) for events in project.events.values()]
    for table in project.cdc.values():
        referenced = {target: specs[project.cdc[target].silver] for target, _ in table.references.values()}
        assets.append(silver_cdc_asset(table, specs[table.bronze], partitions, referenced))
    return assets


def _gold_and_ml_assets(project: Project, specs: dict[str, TableSpec],
                        partitions: DailyPartitionsDefinition) -> list[AssetsDefinition]:
    """The ML assets and gold event tables (when gold reads an event source), then the SQL gold tables."""
    gold = project.gold
    assets = []
    if gold.events is not None:
        silver = specs[gold.events.silver]
        assets += ml_assets(gold, silver, partitions, project.maintenance.pin_retention)
        assets += gold_event_assets(gold, silver, partitions)
    return assets + [sql_table_asset(t, specs) for t in gold.sql_tables.values()]


def _layer_sensors(project: Project, sources: list[LandingSource], partitions: DailyPartitionsDefinition,
                   specs: dict[str, TableSpec], assets: list[AssetsDefinition]) -> list[SensorDefinition]:
    """A landing sensor per source (a CDC table's runs take its silver and history too, after bronze, when they
    read that bronze alone), a late-events sensor per event source, and one automation sensor for everything after
    bronze (capture and bronze run by their own schedules and sensors)."""
    # A CDC table's silver reads its bronze alone unless it references other tables (applied before it, by the
    # automation): the others' runs take silver and history with bronze.
    follow = {t.landing: (t.silver, t.history) for t in project.cdc.values() if not t.references}
    sensors = [topic_sensor(source, partitions) if source.topic is not None
               else landing_sensor(source, partitions, follow=follow.get(source.name, ())) for source in sources]
    sensors += [late_events_sensor(events, partitions) for events in project.events.values()]
    layers = {name: spec.layer for name, spec in specs.items()}
    automated = [a for a in assets if any(layers.get(k.to_user_string()) in ("silver", "gold", "ml") for k in a.keys)]
    if automated:
        sensors.append(automation_sensor(automated))
    return sensors
