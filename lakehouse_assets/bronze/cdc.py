"""bronze_cdc_<table>: every change event of a captured OLTP table, as landed.

One bronze table per source table, not one table with a source-table column:
each has its own typed before/after images (so a new column upstream evolves
only its own table), its own snapshots for silver to read, and its own
quarantine. Append-only and exactly once per landing file, like bronze_events;
partitioned by the day the change was committed in the source.
"""

from functools import partial


from pyspark.sql import types as T

from ..sources.cdc import bronze_cdc_schema, new_image_fields, parse_cdc
from ..sources.cdc_tables import CDC_TABLES, CdcTableInfo
from ..tables.registry import TableSpec, register
from .ingest import LandingSource, landing_asset, lineage_columns, quarantine_spec


def cdc_source(info: CdcTableInfo) -> LandingSource:
    bronze = register(TableSpec(
        name=f"bronze_cdc_{info.name}",
        layer="bronze",
        description=f"Change events of {info.topic} ({info.connector}) as landed, typed, with lineage.",
        schema=T.StructType(bronze_cdc_schema(info).fields + lineage_columns()),
        partitioned_by=("days(source_ts)",),
    ))
    quarantine = quarantine_spec(
        f"bronze_cdc_{info.name}_quarantine",
        f"Change events of {info.topic} that could not be taken, with the reason.",
    )
    return LandingSource(
        name=f"cdc/{info.name}",
        bronze=bronze,
        quarantine=quarantine,
        parse=partial(parse_cdc, info),
        new_fields=new_image_fields,
    )


CDC_SOURCES = {name: cdc_source(info) for name, info in CDC_TABLES.items()}
bronze_cdc_assets = [landing_asset(source) for source in CDC_SOURCES.values()]
