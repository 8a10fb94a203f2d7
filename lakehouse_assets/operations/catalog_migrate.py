"""`lakehouse catalog migrate --to URI`: the lakehouse's tables moved to another catalog (a REST catalog, another
SQL database) with everything they hold, or back.

An Iceberg table is its current metadata file: its schema history, its snapshots (time travel), its branches and
its tags (pinned ML training sets) are all in it. Moving a table is registering that file in the other catalog; no
data file is read or copied, and nothing is written to the catalog moved from. Each namespace of the source is
created in the target with its properties. A table the target already has is left alone when it points at the same
metadata file (a migration run again goes on where it stopped) and refused when it points at another one: two
catalogs committing to one table would each lose the other's commits. Writers should be stopped while it runs (a
commit made meanwhile is not in the metadata file registered); `--dry-run` says what would be done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from ..errors import LakehouseError
from ..runtime.catalog import catalog_for, open_catalog, s3_properties
from ..settings import CatalogUri, Settings

REGISTERED = "registered"
ALREADY = "already there"
CONFLICT = "refused"


class CatalogMigrateError(LakehouseError):
    """Some tables could not be moved (each named in `results`); the others were."""

    def __init__(self, message: str, results: list[MigratedTable]):
        super().__init__(message)
        self.results = results


@dataclass(frozen=True)
class MigratedTable:
    table: str  # namespace.name
    status: str
    metadata_location: str
    snapshots: int
    refs: str  # branches and tags, comma-separated
    reason: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def target_catalog(settings: Settings, uri: str) -> Catalog:
    """The catalog at `uri`, opened with the lakehouse's catalog name (a SQL catalog's rows carry it) and S3 keys."""
    return open_catalog(settings.catalog_name, CatalogUri.parse(uri), settings.warehouse, **s3_properties(settings))


# A SQL catalog's record that a namespace exists (pyiceberg's and Iceberg's JdbcCatalog's), not a property of it:
# each catalog writes its own, and the server's JdbcCatalog refuses a namespace given it twice.
SQL_MARKER = "exists"


def migrate(settings: Settings, target: Catalog, dry_run: bool = False,
            log: Callable[[str], None] = print) -> list[MigratedTable]:
    """Register every table of the settings' catalog in `target` at its current metadata file."""
    source = catalog_for(settings)
    results = []
    for (namespace,) in sorted(source.list_namespaces()):
        if not dry_run:
            properties = {k: v for k, v in source.load_namespace_properties(namespace).items() if k != SQL_MARKER}
            target.create_namespace_if_not_exists(namespace, properties)
        for identifier in sorted(source.list_tables(namespace)):
            results.append(_move(source, target, tuple(identifier), dry_run))
            log(f"{results[-1].table}: {results[-1].status}")
    refused = [r for r in results if r.status == CONFLICT]
    if refused:
        raise CatalogMigrateError(f"{len(refused)} of {len(results)} tables were not moved: "
                                  + "; ".join(f"{r.table}: {r.reason}" for r in refused), results)
    return results


def _move(source: Catalog, target: Catalog, identifier: tuple[str, ...], dry_run: bool) -> MigratedTable:
    table = source.load_table(identifier)
    location = table.metadata_location
    name = ".".join(identifier)
    moved = MigratedTable(name, REGISTERED, location, len(table.metadata.snapshots),
                          ",".join(sorted(table.metadata.refs)))
    try:
        there = target.load_table(identifier).metadata_location
    except NoSuchTableError:
        if not dry_run:
            target.register_table(identifier, location)
        return moved
    if there == location:
        return replace(moved, status=ALREADY)
    return replace(moved, status=CONFLICT, reason=f"the target has this table at another metadata file ({there})")
