"""The catalog's backup, and the catalog rebuilt from the warehouse when it is lost.

The Iceberg SQL catalog (a SQLite file or a PostgreSQL database) is the platform's one
piece that is not a file in the warehouse: per table, one row pointing at the table's
current metadata file. Everything else (data, manifests, snapshots, schemas, refs) is in
the warehouse, under `<warehouse>/<namespace>/<table>/`.

`backup(settings, path)` writes a consistent copy of the catalog as a SQLite file with the
same two tables (`iceberg_tables`, `iceberg_namespace_properties`) and columns. A SQLite
catalog is copied with SQLite's online backup API, consistent while writers commit; a
PostgreSQL catalog's rows for this catalog name are read in one read-only repeatable-read
transaction. The copy is written beside `path` under a temporary name and renamed into
place: a backup is never half written. Restoring one as it is means copying it over the
SQLite catalog (or loading its rows into PostgreSQL); `rebuild` uses it as a guide instead.

`rebuild(settings, project, backup=...)` registers the declared tables of the namespace
again, each at its newest metadata file `metadata/NNNNN-<uuid>[.gz].metadata.json`
(NNNNN is the table's version), after creating the namespace (with its properties from the
backup, if one is given). Run it with the writers stopped. Per table:

- no metadata file under the table's folder: the table was never created; skipped.
- one file with the highest version: taken. Two or more (a writer that wrote its metadata
  file and stopped before moving the catalog row, beside the committed one) are ambiguous:
  a backup decides if it can, else the table is refused and the candidates are named.
- with a backup, the chosen file must be the backup row's file or descend from it (the row's
  file is in its `metadata-log`); a file that does not (a fork: no catalog row ever led to
  it) is skipped and the versions below are tried, down to the backup's own file. When a
  table was committed more often since the backup than its metadata log keeps
  (`write.metadata.previous-versions-max`), the log no longer reaches back: the file is
  taken as unverified and said so.
- a table the catalog already has is left alone, unless `replace=True` moves its row to the
  chosen file.
- a refused table does not stop the others: all others are registered, then
  `CatalogRebuildError` names the refused ones.

What a rebuild restores: every commit whose metadata file was written, that is the data,
every snapshot, branch and tag (pin tags included), and the schema and partition history,
all of which the metadata file holds. What it cannot: a commit in flight at the loss
(metadata file written, catalog row not yet moved) looks like a committed one unless a
backup newer than it says otherwise, so it may be taken; its files are complete (data and
manifests are written before the metadata file) but its writer was told it failed. A table
dropped and created again at the same folder leaves the dropped table's metadata files
beside the new ones: only a backup tells them apart. Tables that are not declared are
reported and left out, unless `all_tables=True` also registers every other table folder of
the namespace that holds metadata files (and every table the backup lists). Namespace
properties come only from a backup; other namespaces are not rebuilt.
"""

from __future__ import annotations

import os
import posixpath
import re
import sqlite3
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from pyarrow.fs import FileSelector, FileType
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata

from ..errors import CatalogUnreachableError, MaintenanceError
from ..project import Project
from ..runtime.catalog import open_catalog, s3_properties
from ..runtime.durable import fsync_path
from ..settings import Settings

TABLES = "iceberg_tables"
NAMESPACE_PROPERTIES = "iceberg_namespace_properties"
_METADATA_FILE = re.compile(r"^(\d+)-[^/]+?(\.gz)?\.metadata\.json$")


class CatalogRebuildError(MaintenanceError):
    """A rebuild refused one or more tables (all others were registered); `results` holds every table's outcome."""

    def __init__(self, message: str, results: list[TableResult]):
        super().__init__(message)
        self.results = results


# ---------------------------------------------------------------------------------------------------------------------
# Backup


def backup(settings: Settings, path: str | Path) -> dict[str, Any]:
    """A consistent copy of the catalog as a SQLite file at `path`: what it holds, where, and how long it took."""
    target = Path(path).expanduser().resolve()
    uri = settings.catalog
    if uri.kind == "sqlite" and Path(uri.path).resolve() == target:
        raise MaintenanceError(f"{target} is the catalog itself: write the backup elsewhere")
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        if uri.kind == "sqlite":
            _backup_sqlite(Path(uri.path), temporary)
        else:
            _backup_postgresql(settings, temporary)
        fsync_path(temporary)
        os.replace(temporary, target)
        fsync_path(target.parent)
    finally:
        temporary.unlink(missing_ok=True)
    tables, namespaces = _counts(target, settings.catalog_name)
    return {
        "path": str(target), "catalog": uri.display, "catalog_name": settings.catalog_name,
        "tables": tables, "namespaces": namespaces, "bytes": target.stat().st_size,
        "seconds": round(time.monotonic() - started, 3),
    }


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)


def _backup_sqlite(source: Path, temporary: Path) -> None:
    if not source.is_file():
        raise MaintenanceError(f"no catalog at {source}: nothing to back up")
    with closing(_read_only(source)) as src, closing(sqlite3.connect(temporary)) as dst:
        src.backup(dst)  # every page in one step under one read lock: one committed state, never a torn one
    _check_catalog_file(temporary, f"{source}")


def _backup_postgresql(settings: Settings, temporary: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalogBaseTable
    from sqlalchemy import create_engine, insert, text
    from sqlalchemy.exc import DBAPIError

    uri = settings.catalog
    engine = create_engine(uri.sqlalchemy_url)
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        # One read-only snapshot of both tables: rows committed after it started are in neither.
        with engine.connect().execution_options(isolation_level="REPEATABLE READ",
                                                postgresql_readonly=True) as conn, conn.begin():
            for name in (TABLES, NAMESPACE_PROPERTIES):
                result = conn.execute(text(f"SELECT * FROM {name} WHERE catalog_name = :name"),
                                      {"name": settings.catalog_name})
                rows[name] = [dict(r) for r in result.mappings()]
    except DBAPIError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        raise CatalogUnreachableError(f"catalog {uri.display}: {reason}") from None
    finally:
        engine.dispose()
    target = create_engine(f"sqlite:///{temporary}")
    try:
        SqlCatalogBaseTable.metadata.create_all(target)  # the very table definitions pyiceberg and Spark use
        with target.begin() as conn:
            for table in SqlCatalogBaseTable.metadata.sorted_tables:
                columns = set(table.columns.keys())
                values = [{k: v for k, v in row.items() if k in columns} for row in rows.get(table.name, [])]
                if values:
                    conn.execute(insert(table), values)
    finally:
        target.dispose()


def _check_catalog_file(path: Path, what: str) -> None:
    with closing(_read_only(path)) as con:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if TABLES not in names:
        raise MaintenanceError(f"{what} has no {TABLES} table: not an Iceberg SQL catalog")



def _counts(path: Path, catalog_name: str) -> tuple[int, int]:
    """(tables, namespaces) of one catalog name in a backup file."""
    with closing(_read_only(path)) as con:
        tables = con.execute(f"SELECT count(*) FROM {TABLES} WHERE catalog_name = ?", (catalog_name,)).fetchone()[0]
        namespaces = {r[0] for r in con.execute(
            f"SELECT table_namespace FROM {TABLES} WHERE catalog_name = ? UNION "
            f"SELECT namespace FROM {NAMESPACE_PROPERTIES} WHERE catalog_name = ?", (catalog_name, catalog_name))}
    return int(tables), len(namespaces)


@dataclass(frozen=True)
class BackupContents:
    """A backup's rows for one catalog name and namespace."""

    path: Path
    pointers: dict[str, str]  # table name -> metadata_location
    namespace_properties: dict[str, str]


def read_backup(path: str | Path, catalog_name: str, namespace: str) -> BackupContents:
    source = Path(path).expanduser().resolve()
    if not source.is_file():
        raise MaintenanceError(f"no backup at {source}")
    _check_catalog_file(source, f"backup {source}")
    with closing(_read_only(source)) as con:
        pointers = dict(con.execute(
            f"SELECT table_name, metadata_location FROM {TABLES} WHERE catalog_name = ? AND table_namespace = ? "
            "AND metadata_location IS NOT NULL", (catalog_name, namespace)).fetchall())
        try:
            properties = dict(con.execute(
                f"SELECT property_key, property_value FROM {NAMESPACE_PROPERTIES} "
                "WHERE catalog_name = ? AND namespace = ?", (catalog_name, namespace)).fetchall())
        except sqlite3.OperationalError:  # a catalog made before namespace properties had their table
            properties = {}
    return BackupContents(source, pointers, properties)


# ---------------------------------------------------------------------------------------------------------------------
# Rebuild


@dataclass
class TableResult:
    table: str
    status: str  # registered, replaced, would register, would replace, exists, never created, undeclared, refused
    metadata_location: str | None = None
    version: int | None = None
    snapshot_id: int | None = None
    source: str = ""  # how the file was chosen
    skipped: list[str] = field(default_factory=list)  # candidate files refused on the way, with why
    reason: str = ""

    @property
    def refused(self) -> bool:
        return self.status == "refused"

    def as_dict(self) -> dict[str, Any]:
        return {"table": self.table, "status": self.status, "version": self.version, "snapshot_id": self.snapshot_id,
                "source": self.source, "metadata_location": self.metadata_location, "skipped": self.skipped,
                "reason": self.reason}


@dataclass(frozen=True)
class _Candidate:
    location: str
    version: int


class _Refused(Exception):
    pass


def location_key(location: str) -> str:
    """One spelling per file: `file:/p`, `file:///p` and `/p` alike, `s3a://` and `s3n://` as `s3://`."""
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        return "file://" + posixpath.normpath(unquote(parts.path))
    if scheme in ("s3a", "s3n"):
        scheme = "s3"
    return f"{scheme}://{parts.netloc}{posixpath.normpath(unquote(parts.path))}"


def metadata_version(location: str) -> int | None:
    match = _METADATA_FILE.match(posixpath.basename(urlsplit(location).path or location))
    return int(match.group(1)) if match else None


class _Warehouse:
    """The warehouse's files through pyiceberg's pyarrow FileIO: file:// and s3:// alike."""

    def __init__(self, settings: Settings):
        self.io = PyArrowFileIO(properties=s3_properties(settings))
        self._metadata: dict[str, TableMetadata] = {}

    def _fs_path(self, uri: str) -> tuple[Any, str]:
        scheme, netloc, path = self.io.parse_location(uri, self.io.properties)
        return self.io.fs_by_scheme(scheme, netloc), path

    def names(self, directory: str, kind: FileType) -> list[str]:
        fs, path = self._fs_path(directory)
        infos = fs.get_file_info(FileSelector(path.rstrip("/"), allow_not_found=True, recursive=False))
        return sorted(info.base_name for info in infos if info.type == kind)

    def metadata_files(self, table_dir: str) -> list[_Candidate]:
        directory = f"{table_dir.rstrip('/')}/metadata"
        found = []
        for name in self.names(directory, FileType.File):
            version = metadata_version(name)
            if version is not None:
                found.append(_Candidate(f"{directory}/{name}", version))
        return found

    def read(self, location: str) -> TableMetadata:
        key = location_key(location)
        if key not in self._metadata:
            self._metadata[key] = FromInputFile.table_metadata(self.io.new_input(location))
        return self._metadata[key]

    def exists(self, location: str) -> bool:
        fs, path = self._fs_path(location)
        return bool(fs.get_file_info(path).type == FileType.File)


def _table_dir(metadata_location: str) -> str:
    """`<table>/metadata/x.metadata.json` -> `<table>`."""
    return metadata_location.rsplit("/", 2)[0]


def _descent(warehouse: _Warehouse, location: str, pointer: str, depth: int = 0) -> str:
    """Whether the file at `location` is the backup's `pointer`, descends from it, forks off, or cannot be told."""
    pointer_key = location_key(pointer)
    if location_key(location) == pointer_key:
        return "pointer"
    version, pointer_version = metadata_version(location), metadata_version(pointer)
    if version is not None and pointer_version is not None and version <= pointer_version:
        return "fork"  # not the pointer, and not newer than it
    log = warehouse.read(location).metadata_log
    if any(location_key(entry.metadata_file) == pointer_key for entry in log):
        return "descends"
    versions = [metadata_version(entry.metadata_file) for entry in log]
    complete = not log or versions[0] == 0
    reaches_back = pointer_version is not None and any(v is not None and v <= pointer_version for v in versions)
    if complete or reaches_back:
        return "fork"
    # The log was cut to its newest entries: follow its oldest entry, if its file is still there.
    oldest = log[0].metadata_file
    if depth < 100 and warehouse.exists(oldest):
        try:
            return _descent(warehouse, oldest, pointer, depth + 1)
        except Exception:  # an unreadable ancestor: cannot be told
            return "unknown"
    return "unknown"


_SOURCES = {
    "pointer": "backup's pointer",
    "descends": "descends from backup's pointer",
    "unknown": "newer than backup (unverified: its metadata log no longer reaches the backup's pointer)",
}


def choose(warehouse: _Warehouse, candidates: list[_Candidate], pointer: str | None) -> tuple[_Candidate, str, list[str]]:
    """(the file to register, how it was chosen, the candidates refused on the way); `_Refused` if none can be."""
    if pointer is None:
        return _newest_without_backup(warehouse, candidates)
    return _newest_from_backup(warehouse, candidates, pointer)


def _by_version(candidates: list[_Candidate]) -> list[tuple[int, list[_Candidate]]]:
    """The candidates grouped by version, the newest version first, each group sorted by location."""
    return [(version, sorted((c for c in candidates if c.version == version), key=lambda c: c.location))
            for version in sorted({c.version for c in candidates}, reverse=True)]


def _check_readable(warehouse: _Warehouse, level: list[_Candidate], version: int) -> None:
    """Refuse the table if any file at this version cannot be read: which one was committed is then unknown."""
    for candidate in level:
        try:
            warehouse.read(candidate.location)
        except Exception as exc:
            raise _Refused(f"unreadable metadata file {candidate.location} at version {version} "
                           f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                           "move it aside to take the version below") from None


def _newest_without_backup(warehouse: _Warehouse, candidates: list[_Candidate]) -> tuple[_Candidate, str, list[str]]:
    """Without a backup: the only file at the highest version. Two there cannot be told apart."""
    for version, level in _by_version(candidates)[:1]:
        _check_readable(warehouse, level, version)
        if len(level) == 1:
            return level[0], "newest metadata file", []
        raise _Refused(f"{len(level)} metadata files at version {version}, only one was committed: "
                       f"{', '.join(c.location for c in level)}; give a backup (--backup) to choose, "
                       "or move aside the one no catalog row pointed to")
    raise _Refused(_nothing_descends(None, None, []))


def _newest_from_backup(warehouse: _Warehouse, candidates: list[_Candidate],
                        pointer: str) -> tuple[_Candidate, str, list[str]]:
    """With a backup: the newest file that is the backup's pointer or descends from it.

    Versions are tried from the newest down to the pointer's own; files that fork off are skipped.
    """
    skipped: list[str] = []
    pointer_version = metadata_version(pointer) if pointer else None
    for version, level in _by_version(candidates):
        if pointer_version is not None and version < pointer_version:
            break
        _check_readable(warehouse, level, version)
        chosen, source, forks = _descendant_at(warehouse, level, version, pointer)
        skipped += forks
        if chosen is not None:
            return chosen, source, skipped
    raise _Refused(_nothing_descends(pointer, pointer_version, skipped))


def _descendant_at(warehouse: _Warehouse, level: list[_Candidate], version: int,
                   pointer: str) -> tuple[_Candidate | None, str, list[str]]:
    """Of the files at one version, the one that is the backup's pointer or descends from it (None: no such file),
    how it relates to the pointer, and the files that fork off."""
    kinds = {c.location: _descent(warehouse, c.location, pointer) for c in level}
    kept = [c for c in level if kinds[c.location] != "fork"]
    forks = [f"{c.location} (version {version}: does not descend from the backup's pointer)"
             for c in level if kinds[c.location] == "fork"]
    if len(kept) > 1:
        raise _Refused(f"{len(kept)} metadata files at version {version} all descend from the backup's pointer "
                       f"{pointer}: {', '.join(c.location for c in kept)}; move aside the one no catalog row "
                       "pointed to")
    if not kept:
        return None, "", forks
    kind = kinds[kept[0].location]
    if kind == "pointer":  # registered with the location spelt as in the backup's row
        return _Candidate(pointer, version), _SOURCES[kind], forks
    return kept[0], _SOURCES[kind], forks


def _nothing_descends(pointer: str | None, pointer_version: int | None, skipped: list[str]) -> str:
    where = "" if pointer_version is None else f" (version {pointer_version})"
    refused = f"; refused: {'; '.join(skipped)}" if skipped else ""
    return f"no metadata file is the backup's pointer {pointer}{where} or descends from it{refused}"


def _catalog_rows(engine: Any, catalog_name: str, namespace: str) -> dict[str, str | None]:
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError, ProgrammingError

    try:
        with engine.connect() as conn:
            result = conn.execute(text(f"SELECT table_name, metadata_location FROM {TABLES} "
                                       "WHERE catalog_name = :c AND table_namespace = :n"),
                                  {"c": catalog_name, "n": namespace})
            return {r[0]: r[1] for r in result}
    except (OperationalError, ProgrammingError):  # no catalog tables yet
        return {}


def _point_row(engine: Any, catalog_name: str, namespace: str, table: str, old: str | None, new: str) -> bool:
    """Move one catalog row from `old` to `new`, only if it still points at `old`."""
    from sqlalchemy import text

    still = "metadata_location = :old" if old is not None else "metadata_location IS NULL"
    with engine.begin() as conn:
        done = conn.execute(text(f"UPDATE {TABLES} SET metadata_location = :new, previous_metadata_location = :old "
                                 f"WHERE catalog_name = :c AND table_namespace = :n AND table_name = :t AND {still}"),
                            {"new": new, "old": old, "c": catalog_name, "n": namespace, "t": table})
        return bool(done.rowcount == 1)


def rebuild(settings: Settings, project: Project, backup: str | Path | None = None, dry_run: bool = False,
            replace: bool = False, all_tables: bool = False,
            log: Callable[[str], None] = print) -> list[TableResult]:
    """Register the namespace's tables again from the warehouse's metadata files (see the module's docstring).

    Returns one result per table; raises `CatalogRebuildError` (with every result) after registering all
    others when any table was refused.
    """
    namespace, catalog_name = settings.namespace, settings.catalog_name
    contents = read_backup(backup, catalog_name, namespace) if backup else None
    pointers = contents.pointers if contents else {}
    warehouse = _Warehouse(settings)
    declared, others = _declared_and_others(settings, project, warehouse, pointers)

    catalog: Any = None
    if dry_run:
        existing = _catalog_rows_read_only(settings)
    else:
        catalog = _catalog_with_namespace(settings, contents, log)
        existing = _catalog_rows(catalog.engine, catalog_name, namespace)

    rebuild = _Rebuild(settings, warehouse, catalog, existing, dry_run, replace, has_backup=contents is not None)
    try:
        results = [_left_out(f"{namespace}.{name}", name in existing)
                   if name in others and not all_tables else rebuild.table(name, pointers.get(name))
                   for name in declared + others]
    finally:
        if catalog is not None:
            catalog.engine.dispose()
    _raise_if_refused(results, dry_run)
    return results


def _declared_and_others(settings: Settings, project: Project, warehouse: _Warehouse,
                         pointers: dict[str, str]) -> tuple[list[str], list[str]]:
    """The declared tables, and the other tables found: folders holding metadata files, and the backup's rows."""
    namespace_dir = f"{settings.warehouse.rstrip('/')}/{settings.namespace}"
    declared = list(dict.fromkeys(project.table_names))
    folders = [name for name in warehouse.names(namespace_dir, FileType.Directory)
               if warehouse.metadata_files(f"{namespace_dir}/{name}")]
    return declared, sorted((set(folders) | set(pointers)) - set(declared))


def _catalog_rows_read_only(settings: Settings) -> dict[str, str | None]:
    """The catalog's rows for the namespace, read without creating anything (none if the catalog does not exist)."""
    if settings.catalog.kind != "postgresql" and not Path(settings.catalog.path).is_file():
        return {}
    from sqlalchemy import create_engine

    engine = create_engine(settings.catalog.sqlalchemy_url)
    try:
        return _catalog_rows(engine, settings.catalog_name, settings.namespace)
    finally:
        engine.dispose()


def _catalog_with_namespace(settings: Settings, contents: BackupContents | None, log: Callable[[str], None]) -> Any:
    """The catalog, with the namespace created if missing (its properties from the backup, if any)."""
    namespace, catalog_name = settings.namespace, settings.catalog_name
    catalog = open_catalog(catalog_name, settings.catalog, settings.warehouse, **s3_properties(settings))
    if not catalog.namespace_exists(namespace):
        properties = contents.namespace_properties if contents else {}
        catalog.create_namespace(namespace, properties)
        log(f"namespace {catalog_name}.{namespace} created"
            + (f" with {len(properties)} properties from the backup" if properties else ""))
    return catalog


def _left_out(table: str, in_catalog: bool) -> TableResult:
    """The result for a table that is not declared and not asked for (`all_tables` off)."""
    held = "the catalog has it" if in_catalog else "--all registers it"
    return TableResult(table, "undeclared", reason=f"not in the declaration; left out ({held})")


def _raise_if_refused(results: list[TableResult], dry_run: bool) -> None:
    refused = [r for r in results if r.refused]
    if refused:
        raise CatalogRebuildError(
            f"{len(refused)} table{'s' if len(refused) != 1 else ''} refused, the others "
            f"{'checked' if dry_run else 'registered'}: " + "; ".join(f"{r.table}: {r.reason}" for r in refused),
            results)


@dataclass
class _Rebuild:
    """One rebuild of the catalog: where it reads (the warehouse), what the catalog holds now (`existing`: table
    -> metadata location) and how far it may go."""
    settings: Settings
    warehouse: _Warehouse
    catalog: Any
    existing: dict[str, str | None]
    dry_run: bool
    replace: bool
    has_backup: bool

    def table(self, name: str, pointer: str | None) -> TableResult:
        """Point the catalog at the table's newest metadata file that can be trusted (`pointer`: the backup's)."""
        namespace = self.settings.namespace
        current = self.existing.get(name)
        # Where the table's files are: the backup's row says, else the catalog's, else the usual folder.
        default_dir = f"{self.settings.warehouse.rstrip('/')}/{namespace}/{name}"
        table_dir = _table_dir(pointer) if pointer else _table_dir(current) if current else default_dir
        result = TableResult(f"{namespace}.{name}", "")
        candidates = self.warehouse.metadata_files(table_dir)
        if not candidates:
            return _without_metadata(result, name in self.existing, current, pointer, table_dir)
        try:
            chosen, source, skipped = choose(self.warehouse, candidates, pointer)
        except _Refused as refusal:
            return _refused(result, refusal, name in self.existing and not self.replace, current)
        result.metadata_location, result.version, result.skipped = chosen.location, chosen.version, skipped
        result.snapshot_id = self.warehouse.read(chosen.location).current_snapshot_id
        result.source = source + (" (not in the backup)" if self.has_backup and pointer is None else "")
        if name in self.existing:
            return self._move_row(result, name, current, chosen, source)
        return self._register(result, name, chosen)

    def _move_row(self, result: TableResult, name: str, current: str | None, chosen: _Candidate,
                  source: str) -> TableResult:
        """A table the catalog has: left alone, or (with `replace`) its row moved to the chosen file."""
        if current is not None and location_key(current) == location_key(chosen.location):
            result.status, result.reason = "exists", "the catalog already points at this file"
        elif not self.replace:
            _left_alone(result, self.warehouse, current, chosen, source)
        elif self.dry_run:
            result.status, result.reason = "would replace", f"from {current}"
        elif _point_row(self.catalog.engine, self.settings.catalog_name, self.settings.namespace, name, current,
                        chosen.location):
            result.status, result.reason = "replaced", f"was {current}"
        else:
            result.status, result.reason = "refused", "its catalog row changed meanwhile: run again"
        return result

    def _register(self, result: TableResult, name: str, chosen: _Candidate) -> TableResult:
        """A table the catalog lacks: registered at the chosen file."""
        if self.dry_run:
            result.status = "would register"
            return result
        from pyiceberg.exceptions import TableAlreadyExistsError

        try:
            self.catalog.register_table((self.settings.namespace, name), chosen.location)
        except TableAlreadyExistsError:
            result.status, result.reason = "refused", "registered by someone else meanwhile: run again with the writers stopped"
            return result
        result.status = "registered"
        return result


def _without_metadata(result: TableResult, in_catalog: bool, current: str | None, pointer: str | None,
                      table_dir: str) -> TableResult:
    """No metadata file under the table's folder: left alone if the catalog has it, refused if the backup
    points there, else never created."""
    if in_catalog:
        result.status, result.metadata_location = "exists", current
        result.reason = f"left alone; no metadata file under {table_dir}/metadata"
    elif pointer:
        result.status = "refused"
        result.reason = f"the backup points at {pointer}, but no metadata file is under {table_dir}/metadata"
    else:
        result.status, result.reason = "never created", f"no metadata file under {table_dir}/metadata"
    return result


def _refused(result: TableResult, refusal: _Refused, keep_row: bool, current: str | None) -> TableResult:
    """No file could be chosen: the table is refused, unless the catalog has it and may keep it (`keep_row`)."""
    if keep_row:
        result.status, result.metadata_location = "exists", current
        result.reason = f"left alone; {refusal}"
    else:
        result.status, result.reason = "refused", str(refusal)
    return result


def _left_alone(result: TableResult, warehouse: _Warehouse, current: str | None, chosen: _Candidate,
                source: str) -> None:
    """Describe a table the catalog has, without `replace`: as the catalog has it, with the file a replace
    would take in the reason."""
    result.status, result.metadata_location, result.source = "exists", current, "catalog row"
    result.version = metadata_version(current) if current else None
    result.reason = f"left alone; --replace points it at {chosen.location} (version {chosen.version}, {source})"
    try:
        result.snapshot_id = warehouse.read(current).current_snapshot_id if current else None
    except Exception as exc:  # still described, with why its snapshot is unknown
        result.snapshot_id = None
        result.reason += f"; its own metadata file cannot be read ({type(exc).__name__}: {exc})"
