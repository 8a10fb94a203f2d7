"""The Dagster resource every asset uses: Spark, the shared catalog, and table handles."""

from __future__ import annotations

from typing import Optional

from dagster import ConfigurableResource, DagsterLogManager, InitResourceContext
from pydantic import PrivateAttr
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from ..settings import Settings
from ..tables.handle import TableHandle
from ..tables.registry import TableSpec
from .catalog import catalog_for, ensure_namespace
from .spark import get_spark, jvm_option

# The landing sensor's tag on the runs it requests: the bytes of the new files it found for the run's day.
NEW_BYTES_TAG = "lakehouse/new_bytes"
# A run whose new files are at most this large compiles with C1 alone (jvm_jit `auto`). Measured on two cores, a
# run in a fresh process with C1 alone against the tiered JIT: one line of events 11.9 s against 15.0 s, 188 MB of
# CDC changes through bronze 48.6 s against 54.5 s, 303 MB of events 25.9 s against 23.9 s.
QUICK_JIT_MAX_BYTES = 128 * 1024 * 1024


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
    _jit: Optional[str] = PrivateAttr(default=None)  # `auto` resolved for this run
    _log: Optional[DagsterLogManager] = PrivateAttr(default=None)
    _jit_said: bool = PrivateAttr(default=False)
    _handles: dict[str, TableHandle] = PrivateAttr(default_factory=dict)
    _namespace_made: bool = PrivateAttr(default=False)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        """`jvm_jit` auto: C1 alone for a run the landing sensor requested for little new data, whose JVM lives
        for seconds; the full tiered JIT for any other (a backfill, a run by hand, a large landing)."""
        self._log = context.log
        new_bytes = (context.dagster_run.tags.get(NEW_BYTES_TAG) if context.dagster_run else None) or ""
        if new_bytes.isdigit():
            self._jit = "quick" if int(new_bytes) <= QUICK_JIT_MAX_BYTES else "full"
            self._settings = None  # read again with it

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            overrides = {k: v for k, v in self.model_dump().items() if v is not None}
            settings = Settings.from_env(**overrides)
            if settings.jvm_jit == "auto" and self._jit:
                settings = settings.with_(jvm_jit=self._jit)
            self._settings = settings
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
        spark = get_spark(self.settings)
        if self._log is not None and not self._jit_said:  # once a run
            self._jit_said = True
            quick = jvm_option(spark, "TieredStopAtLevel") == "1"
            self._log.info(f"Spark's JVM compiles with {'C1 alone' if quick else 'C1 then C2'} "
                           f"(jvm_jit {self.settings.jvm_jit})")
        return spark

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
