"""The Dagster resource every asset uses: Spark, the shared catalog, and table handles."""

from __future__ import annotations

from typing import Optional

from dagster import ConfigurableResource
from pydantic import PrivateAttr
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from ..settings import Settings
from ..tables.handle import TableHandle
from ..tables.registry import TableSpec
from .catalog import catalog_for, ensure_namespace
from .spark import get_spark


class LakehouseResource(ConfigurableResource):
    """Spark session, Iceberg catalog and namespace of one lakehouse.

    Each field left empty comes from the environment (see `Settings.from_env`), so
    `LakehouseResource()` is the local default and a deployment changes it with
    environment variables alone. `table(spec)` gives the one handle of a declared
    table for the life of this resource (a run).
    """

    home: Optional[str] = None
    catalog_uri: Optional[str] = None
    catalog_name: Optional[str] = None
    warehouse: Optional[str] = None
    landing: Optional[str] = None
    namespace: Optional[str] = None
    spark_master: Optional[str] = None
    driver_memory: Optional[str] = None
    # How Kafka's clients connect and sign in comes from the environment only (LAKEHOUSE_KAFKA_SECURITY_PROTOCOL,
    # ..._SASL_*, ..._SSL_CA_FILE): a resource's fields are run configuration, shown and stored with each run.
    kafka_bootstrap_servers: Optional[str] = None

    _settings: Optional[Settings] = PrivateAttr(default=None)
    _handles: dict[str, TableHandle] = PrivateAttr(default_factory=dict)
    _namespace_made: bool = PrivateAttr(default=False)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            overrides = {k: v for k, v in self.model_dump().items() if v is not None}
            self._settings = Settings.from_env(**overrides)
        return self._settings

    @property
    def catalog(self) -> Catalog:
        """pyiceberg's view of the catalog; its namespace exists once this returns (made or found once per
        resource, that is per run: a REST catalog answers each try with a round trip)."""
        catalog = catalog_for(self.settings)
        if not self._namespace_made:
            ensure_namespace(catalog, self.settings.namespace)
            self._namespace_made = True
        return catalog

    @property
    def spark(self) -> SparkSession:
        # The catalog tables must exist before Spark's JdbcCatalog looks at them.
        self.catalog  # noqa: B018
        return get_spark(self.settings)

    def table(self, spec: TableSpec) -> TableHandle:
        """The handle of a declared table: built once, created (if missing) at most once."""
        handle = self._handles.get(spec.name)
        if handle is None or handle.spec != spec:
            handle = self._handles[spec.name] = TableHandle(self, spec)
        return handle

    def table_id(self, table: str | TableSpec) -> str:
        """The Spark identifier of a table of this lakehouse, e.g. `lakehouse.lake.bronze_events`."""
        s = self.settings
        return f"{s.catalog_name}.{s.namespace}.{getattr(table, 'name', table)}"

    def iceberg_table(self, table: str | TableSpec):
        """pyiceberg's Table, freshly loaded (for reading metadata; writes go through handles)."""
        name = table if isinstance(table, str) else table.name
        return self.catalog.load_table((self.settings.namespace, name))
