"""Opening the lakehouse's Iceberg catalog from Python (pyiceberg), with the same database (or REST server) and
catalog name as Spark, so that both see the same tables."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table import Table, Transaction
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from ..errors import CatalogUnreachableError
from ..settings import CatalogUri, Settings
from .conflicts import retry_commit


def open_catalog(name: str, uri: CatalogUri, warehouse: str, **properties: str) -> Catalog:
    """Open (and on first use create) the SQL catalog tables shared with Spark; or the REST catalog at `uri`, with
    its bearer token (the server keeps the catalog, the client reads and writes the tables' files itself).

    The catalog name is part of every row in `iceberg_tables`: Spark's catalog must
    carry the same name to see the same tables.
    """
    if uri.kind == "rest":
        return RestCatalog(name, uri=uri.rest_url, **({"token": uri.password} if uri.password else {}), **properties)
    if uri.kind == "sqlite":
        Path(uri.path).parent.mkdir(parents=True, exist_ok=True)
    try:
        return SqlCatalog(name, uri=uri.sqlalchemy_url, warehouse=warehouse, **properties)
    except DBAPIError as exc:  # report the driver's own message, not SQLAlchemy's wrapper text with its URL
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        raise CatalogUnreachableError(f"catalog {uri.display}: {reason}") from None


def s3_properties(settings: Settings) -> dict[str, str]:
    """pyiceberg's FileIO settings for tables on S3 (same endpoint and keys as Spark's S3A)."""
    if not settings.uses_s3:
        return {}
    # No instance-metadata lookups: they stall for seconds off EC2.
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    props = {"s3.region": settings.s3_region}
    if settings.s3_endpoint:
        props["s3.endpoint"] = settings.s3_endpoint
    if settings.s3_access_key:
        props["s3.access-key-id"] = settings.s3_access_key
        props["s3.secret-access-key"] = settings.s3_secret_key
    return props


@lru_cache(maxsize=8)
def catalog_for(settings: Settings) -> Catalog:
    return open_catalog(settings.catalog_name, settings.catalog, settings.warehouse, **s3_properties(settings))


def ensure_namespace(catalog: Catalog, namespace: str) -> None:
    catalog.create_namespace_if_not_exists(namespace)


def append_retrying(catalog: Catalog, identifier: tuple[str, str], data: Any, properties: dict[str, str] | None = None,
                    attempts: int = 50, log: Callable[[str], None] = print) -> tuple[Table, int]:
    """Append `data` with pyiceberg while the platform's own writers commit to the same table; returns the
    table after the append and the number of retries it took.

    A refused commit (another writer moved main) is retried on the reloaded table (runtime/conflicts.py). So
    is pyiceberg's ValueError "Cannot add snapshot with sequence number N older than last sequence number N"
    when the table changed after it was loaded: a commit to another branch (a staged write) used that
    sequence number, and pyiceberg's commit does not send this as a requirement the catalog checks (for REST
    catalogs, apache/iceberg#15001 added it).
    """
    def append() -> Table:
        table = catalog.load_table(identifier)  # reloaded on each attempt, to append to the current table
        try:
            table.append(data, snapshot_properties=properties or {})
        except ValueError as exc:
            if catalog.load_table(identifier).metadata_location != table.metadata_location:
                raise CommitFailedException(f"{'.'.join(identifier)}: the table moved while appending") from exc
            raise
        return table

    return retry_commit(append, f"append to {'.'.join(identifier)}", attempts, log, pause_s=(0.025, 0.075))


class _Moved(Exception):
    def __init__(self, table: str):
        super().__init__(table)
        self.table = table


# Iceberg's SQL catalog keeps each table's pointer in one row of `iceberg_tables` (the layout pyiceberg's SqlCatalog
# and Java's JdbcCatalog share): reading one pointer costs one row, and several pointers can be moved in one
# database transaction.
_POINTER = text("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = :catalog "
                "AND table_namespace = :namespace AND table_name = :name")
_SWAP = text("UPDATE iceberg_tables SET metadata_location = :new, previous_metadata_location = :old "
             "WHERE catalog_name = :catalog AND table_namespace = :namespace AND table_name = :name "
             "AND metadata_location = :old")


def metadata_pointer(catalog: Catalog, namespace: str, table: str) -> str | None:
    """A table's current metadata location, read from the catalog's own row (no metadata file is read); a REST
    catalog says it with the table's metadata."""
    if not isinstance(catalog, SqlCatalog):
        try:
            return catalog.load_table((namespace, table)).metadata_location
        except NoSuchTableError:
            return None
    with catalog.engine.connect() as connection:
        return connection.execute(_POINTER, {"catalog": catalog.name, "namespace": namespace, "name": table}).scalar()


def swap_pointers(catalog: Catalog, namespace: str, pointers: list[tuple[str, str, str]]) -> str | None:
    """Move each (table, old metadata file, new metadata file) pointer in one transaction of the catalog's
    database, each only if it still is the old file (Iceberg's compare-and-swap): None when every pointer
    moved; else the first table that had moved meanwhile, and none moved. A refusal of the database itself
    (busy, locked) raises, with nothing moved either. A REST catalog moves pointers by its own protocol only
    (runtime/publish.py commits through it)."""
    if not isinstance(catalog, SqlCatalog):
        raise TypeError(f"{catalog.name}: a REST catalog's tables are committed through its server, not by pointer")
    try:
        with catalog.engine.begin() as connection:
            for name, old, new in pointers:
                moved = connection.execute(_SWAP, {"new": new, "old": old, "catalog": catalog.name,
                                                   "namespace": namespace, "name": name}).rowcount
                if moved != 1:
                    raise _Moved(name)  # leaving the block rolls every update back
    except _Moved as lost:
        return lost.table
    return None


def commit_through_server(catalog: RestCatalog, changes: list[tuple[Table, Transaction]]) -> str | None:
    """Several tables' pyiceberg transactions (staged, not committed) in one request of the REST protocol's
    multi-table commit (`POST /v1/transactions/commit`): every table moves, each only if its requirements still
    hold, or none does. None when they moved; else (the server's 409: one of them moved meanwhile) the commit's
    tables, none moved. Any other refusal raises, with the server's answer."""
    from pyiceberg.table import CommitTableRequest, Namespace
    from pyiceberg.table import TableIdentifier as RestIdentifier

    requests = [CommitTableRequest(identifier=RestIdentifier(namespace=Namespace(list(table.name()[:-1])),
                                                             name=table.name()[-1]),
                                   requirements=tx._requirements, updates=tx._updates) for table, tx in changes]
    body = '{"table-changes": [' + ", ".join(r.model_dump_json() for r in requests) + "]}"
    response = catalog._session.post(catalog.url("transactions/commit"), data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    if response.status_code == 409:
        return ", ".join(table.name()[-1] for table, _ in changes)
    if response.status_code >= 300:
        raise CommitFailedException(f"{catalog.name}: the catalog server refused the commit of "
                                    f"{', '.join(t.name()[-1] for t, _ in changes)} ({response.status_code}): "
                                    f"{response.text[:500]}")
    return None
