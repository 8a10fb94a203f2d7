"""The Dagster resource every asset uses: Spark, the shared catalog, declared tables."""

from __future__ import annotations

from typing import Optional

from dagster import ConfigurableResource
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from ..settings import Settings
from ..tables.ddl import ensure_table
from ..tables.registry import TableSpec, get_table
from .catalog import catalog_for, ensure_namespace
from .spark import get_spark


class LakehouseResource(ConfigurableResource):
    """Spark session, Iceberg catalog and namespace of one lakehouse.

    Each field left empty comes from the environment (see `Settings.from_env`), so
    `LakehouseResource()` is the local default and a deployment changes it with
    environment variables alone.
    """

    home: Optional[str] = None
    catalog_uri: Optional[str] = None
    warehouse: Optional[str] = None
    landing: Optional[str] = None
    namespace: Optional[str] = None
    spark_master: Optional[str] = None
    driver_memory: Optional[str] = None

    @property
    def settings(self) -> Settings:
        overrides = {k: v for k, v in self.model_dump().items() if v is not None}
        return Settings.from_env(**overrides)

    @property
    def catalog(self) -> SqlCatalog:
        """pyiceberg's view of the catalog; its namespace exists once this returns."""
        settings = self.settings
        catalog = catalog_for(settings)
        ensure_namespace(catalog, settings.namespace)
        return catalog

    @property
    def spark(self) -> SparkSession:
        # The catalog tables must exist before Spark's JdbcCatalog looks at them.
        self.catalog  # noqa: B018
        return get_spark(self.settings)

    def table_id(self, table: TableSpec | str) -> str:
        """The Spark identifier, e.g. `lakehouse.lake.bronze_events`."""
        spec = get_table(table) if isinstance(table, str) else table
        s = self.settings
        return f"{s.catalog_name}.{s.namespace}.{spec.name}"

    def iceberg_table(self, table: TableSpec | str) -> Table:
        spec = get_table(table) if isinstance(table, str) else table
        return self.catalog.load_table((self.settings.namespace, spec.name))

    def ensure(self, spec: TableSpec | str) -> str:
        """Create the declared table when missing; returns its Spark identifier."""
        table_id = self.table_id(spec)
        ensure_table(self.spark, table_id, get_table(spec) if isinstance(spec, str) else spec)
        return table_id
