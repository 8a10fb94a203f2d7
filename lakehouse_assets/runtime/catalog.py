"""pyiceberg's side of the shared catalog: the same database, the same name."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from ..settings import CatalogUri, Settings


def open_catalog(name: str, uri: CatalogUri, warehouse: str) -> SqlCatalog:
    """Open (and on first use create) the SQL catalog tables shared with Spark.

    The catalog name is part of every row in `iceberg_tables`: Spark's catalog must
    carry the same name to see the same tables.
    """
    if uri.kind == "sqlite":
        Path(uri.path).parent.mkdir(parents=True, exist_ok=True)
    return SqlCatalog(name, uri=uri.sqlalchemy_url, warehouse=warehouse)


@lru_cache(maxsize=8)
def catalog_for(settings: Settings) -> SqlCatalog:
    return open_catalog(settings.catalog_name, settings.catalog, settings.warehouse)


def ensure_namespace(catalog: SqlCatalog, namespace: str) -> None:
    catalog.create_namespace_if_not_exists(namespace)
