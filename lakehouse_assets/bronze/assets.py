"""The bronze tables of each declared landing source.

`bronze_<source>` (events) and `bronze_cdc_<table>` (change events): every
record as landed, typed by the declaration, with its lineage; the quarantine
beside each holds what could not be taken, with the reason. Append-only and
exactly once per landing file. One bronze table per CDC source table (not one
table with a table column): each has its own typed images, so a column added
upstream evolves only its own table.
"""

from __future__ import annotations

from functools import partial

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..project import CdcTable, EventSource, LandingPolicy, Project
from ..sources.change_records import (
    READ_HEAD,
    READ_JSON,
    bronze_cdc_schema,
    new_image_keys,
    parse_cdc,
    survey_cdc,
    typed_new_fields,
)
from ..sources.event_records import new_event_keys, parse_events, read_json_schema
from ..tables.registry import TableSpec, col
from .ingest import LandingSource, lineage_columns, quarantine_spec


def event_bronze_spec(source: EventSource) -> TableSpec:
    pii = set(source.pii)
    return TableSpec(
        name=source.bronze,
        layer="bronze",
        description=f"{source.description} As landed: typed fields, raw payload, ingest lineage.",
        schema=T.StructType([
            *(col(name, dtype, name not in source.required,
                  "personal data: pseudonymised in silver" if name in pii else "")
              for name, dtype in source.fields.items()),
            *lineage_columns(source.topic is not None),
        ]),
        partitioned_by=(f"days({source.timestamp})",),
        renamed=dict(source.renamed),
        takes_data_columns=True,
    )


def event_landing_source(source: EventSource, policy: LandingPolicy | None = None) -> LandingSource:
    return LandingSource(
        name=source.landing,
        bronze=event_bronze_spec(source),
        quarantine=quarantine_spec(
            source.quarantine, f"Lines of {source.landing}/ that could not be taken, with the reason.",
            records=source.topic is not None,
        ),
        parse=partial(parse_events, source),
        new_keys=partial(new_event_keys, source),
        event_time=source.timestamp,
        policy=policy or LandingPolicy(),
        read_json=read_json_schema(source),
        topic=source.topic,
    )


def _cdc_survey(formers: tuple[str, ...], lines: DataFrame, table_schema: T.StructType,
                heads: list[str]) -> tuple[list, dict]:
    found = survey_cdc(lines, table_schema, heads, formers)
    return found.new_fields, {"heads": found.heads}


def _cdc_new_columns(formers: tuple[str, ...], lines: DataFrame, table_schema: T.StructType, keys: list[str],
                     heads: tuple[str, ...] | list[str] = ()) -> tuple[list, dict]:
    found = typed_new_fields(lines, table_schema, keys, heads, formers)
    return found.new_fields, {"heads": found.heads}


def cdc_bronze_spec(table: CdcTable) -> TableSpec:
    return TableSpec(
        name=table.bronze,
        layer="bronze",
        description=f"Change events of {table.topic} ({table.connector}) as landed, typed, with lineage.",
        schema=T.StructType(bronze_cdc_schema(table).fields + lineage_columns(table.on_kafka)),
        partitioned_by=("days(source_ts)",),
        renamed={f"{image}.{new}": f"{image}.{old}" for image in ("before", "after")
                 for new, old in table.renamed.items()},
        takes_data_columns=True,
    )


def cdc_landing_source(table: CdcTable, policy: LandingPolicy | None = None) -> LandingSource:
    return LandingSource(
        name=table.landing,
        bronze=cdc_bronze_spec(table),
        quarantine=quarantine_spec(
            table.quarantine, f"Change events of {table.topic} that could not be taken, with the reason.",
            records=table.on_kafka,
        ),
        parse=partial(parse_cdc, table),
        # A renamed column's former name, in records captured before the rename, is that column, not a new one.
        survey=partial(_cdc_survey, tuple(table.renamed.values())),
        new_keys=partial(new_image_keys, formers=tuple(table.renamed.values())),
        new_columns=partial(_cdc_new_columns, tuple(table.renamed.values())),
        event_time="source_ts",
        policy=policy or LandingPolicy(),
        read_json=READ_JSON,
        read_head=READ_HEAD,
        topic=table.topic if table.on_kafka else None,
    )


def landing_sources(project: Project) -> list[LandingSource]:
    return [*(event_landing_source(s, project.landing) for s in project.events.values()),
            *(cdc_landing_source(t, project.landing) for t in project.cdc.values())]
