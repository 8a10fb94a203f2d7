"""SQL over the lake's Iceberg tables with DuckDB's own Iceberg reader: no Spark.

Every table a statement names becomes a view over `iceberg_scan(<metadata file>,
snapshot_from_id=<snapshot>)`. DuckDB plans and reads the table itself: it prunes data
files by partition and column statistics with the statement's filters, reads only the
columns used, applies merge-on-read delete files, and streams the files instead of
holding a table in memory. pyiceberg only resolves names, metadata locations and the
snapshot each table is read at (`as_of`); a statement on the current state of a SQLite
catalog's local tables reads the catalog row and the metadata file itself, so that the
command costs what DuckDB's reader costs and no more.

The DuckDB session runs in UTC: naive timestamps and dates compared with TIMESTAMPTZ
columns mean UTC, as they do for `as_of`. DuckDB's extensions (iceberg, avro, httpfs)
come from their PyPI wheels and are loaded from there, never downloaded.
"""

from __future__ import annotations

import importlib
import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlparse

import duckdb

from .settings import Settings
from .times import iso_ms, parse_as_of, to_ms

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

EXTENSIONS = ("avro", "httpfs", "iceberg")  # iceberg needs avro (manifests) and httpfs (S3)


def extensions(settings: Settings) -> tuple[str, ...]:
    """The extensions a session loads: httpfs only for a lake on S3."""
    return EXTENSIONS if settings.uses_s3 else tuple(e for e in EXTENSIONS if e != "httpfs")


# ---------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanInfo:
    """What was read from one table, as DuckDB's profile of the statement reports it."""

    table: str  # namespace.table
    snapshot_id: int | None  # None: the table has no snapshot (empty)
    committed_at: str | None  # the snapshot's commit time, ISO 8601 UTC
    files_read: int  # data files read after partition and statistics pruning
    files_total: int  # data files in the snapshot
    filters: tuple[str, ...]  # the filters DuckDB pushed into the table's scans
    columns: tuple[str, ...]  # the columns read
    rows: int  # rows the scans returned (after the pushed filters and delete files)

    def describe(self) -> str:
        snapshot = (
            f"snapshot {self.snapshot_id} ({self.committed_at})" if self.snapshot_id is not None
            else "no snapshot (empty table)"
        )
        filters = " AND ".join(self.filters) or "none"
        columns = ", ".join(self.columns) or "(none)"
        return (f"{self.table}: {snapshot}, {self.files_read} of {self.files_total} data files read, "
                f"filter {filters}, columns {columns}, {self.rows} rows")


@dataclass(frozen=True)
class SqlResult:
    table: pa.Table
    scans: list[ScanInfo]


def query(settings: Settings, sql: str, as_of: str | None = None, tables: list[str] | None = None) -> pa.Table:
    """Run `sql` with DuckDB over the namespace's Iceberg tables, exposed by name.

    `as_of` reads every table as it was at a snapshot id (the table that has it at that
    snapshot, the others at their snapshot current at its commit time) or at an ISO date
    or timestamp (naive means UTC). `tables` names the tables to expose instead of the
    ones found in the statement.
    """
    con, _, names = _prepare(settings, sql, as_of, tables)
    try:
        return _execute(con, sql, settings.namespace, names)
    finally:
        con.close()


def run(settings: Settings, sql: str, as_of: str | None = None, tables: list[str] | None = None) -> SqlResult:
    """`query`, with what was read from each table (DuckDB's profile of the statement)."""
    con, views, names = _prepare(settings, sql, as_of, tables, profile=True)
    try:
        result = _execute(con, sql, settings.namespace, names)
        profile = json.loads(con.get_profiling_information(format="json") or "{}")
        return SqlResult(result, _scan_infos(settings.namespace, views, list(_iceberg_scans(profile))))
    finally:
        con.close()


def connect(settings: Settings, profile: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB session in UTC with the Iceberg reader loaded (and S3 access when the lake is on S3),
    allowed to read the warehouse only."""
    con = duckdb.connect(":memory:")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    for name in extensions(settings):
        con.execute(f"LOAD '{_sql_string(str(_extension_file(name)))}'")
    con.execute("SET TimeZone = 'UTC'")
    if profile:  # what each scan read, for `run`
        con.execute("PRAGMA enable_profiling = 'no_output'")
    if settings.uses_s3:
        con.execute(_s3_secret(settings))
    # The statement reads the lake and nothing else: no other file (the key that pseudonymises personal data
    # lives beside the warehouse), no COPY out, no ATTACH, no extension installed; and it cannot undo this.
    warehouse = _duckdb_path(settings.warehouse).rstrip("/") + "/"
    con.execute(f"SET allowed_directories = ['{_sql_string(warehouse)}']")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def iceberg_scan(metadata_location: str, snapshot_id: int | None) -> str:
    """The `iceberg_scan(...)` call that reads a table at a snapshot (its current state when None)."""
    at = f", snapshot_from_id => {snapshot_id}" if snapshot_id is not None else ""
    return f"iceberg_scan('{_sql_string(_duckdb_path(metadata_location))}'{at})"


# ---------------------------------------------------------------------------------------
# The session
# ---------------------------------------------------------------------------------------


def _extension_file(name: str) -> Path:
    try:
        module = importlib.import_module(f"duckdb_extension_{name}")
    except ImportError:
        raise RuntimeError(f"DuckDB's {name} extension is not installed: pip install "
                           f"duckdb-extension-{name}=={duckdb.__version__}") from None
    path = Path(str(module.__file__)).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        raise RuntimeError(f"DuckDB's {name} extension has no build for DuckDB {duckdb.__version__} ({path}); "
                           f"install duckdb-extension-{name}=={duckdb.__version__}")
    return path


def _sql_string(text: str) -> str:
    return text.replace("'", "''")


def _duckdb_path(location: str) -> str:
    """A metadata location as DuckDB opens it: local files without their file: scheme, s3a:// as s3://."""
    if location.startswith("file:"):
        return urlparse(location).path
    if location.startswith(("s3a://", "s3n://")):
        return "s3://" + location.split("://", 1)[1]
    return location


def _s3_secret(settings: Settings) -> str:
    parts = [("TYPE", "s3"), ("REGION", f"'{_sql_string(settings.s3_region)}'")]
    if settings.s3_access_key:
        parts += [("KEY_ID", f"'{_sql_string(settings.s3_access_key)}'"),
                  ("SECRET", f"'{_sql_string(settings.s3_secret_key)}'")]
    if settings.s3_endpoint:
        endpoint = urlparse(settings.s3_endpoint if "://" in settings.s3_endpoint else f"http://{settings.s3_endpoint}")
        parts += [("ENDPOINT", f"'{_sql_string(endpoint.netloc)}'"), ("URL_STYLE", "'path'"),
                  ("USE_SSL", "true" if endpoint.scheme == "https" else "false")]
    return "CREATE SECRET lake_s3 (" + ", ".join(f"{k} {v}" for k, v in parts) + ")"


def _namespace_tables(settings: Settings, rows: dict[str, str] | None) -> dict[str, str]:
    """Lower-cased name -> name of the namespace's tables (`rows`: the SQLite catalog's, when read)."""
    if rows is not None:
        return {name.lower(): name for name in rows}
    from .runtime.catalog import catalog_for

    catalog = catalog_for(settings)
    if not catalog.namespace_exists(settings.namespace):
        raise ValueError(_no_namespace(settings))
    return {ident[-1].lower(): ident[-1] for ident in catalog.list_tables(settings.namespace)}


def _no_namespace(settings: Settings) -> str:
    return f"namespace {settings.namespace!r} does not exist in catalog {settings.catalog_name!r}"


def _sqlite_rows(settings: Settings) -> dict[str, str] | None:
    """Name -> metadata location of the namespace's tables, read from a SQLite catalog's own tables (the
    ones pyiceberg and Spark's JDBC catalog share) with the standard library; None for other catalogs."""
    uri = settings.catalog
    if uri.kind != "sqlite" or not Path(uri.path).is_file():
        return None
    with closing(sqlite3.connect(f"file:{quote(str(Path(uri.path).resolve()))}?mode=ro", uri=True)) as con:
        columns = {row[1] for row in con.execute("PRAGMA table_info(iceberg_tables)")}
        if not {"catalog_name", "table_namespace", "table_name", "metadata_location"} <= columns:
            return None
        views_too = "iceberg_type" in columns  # a catalog that holds views marks tables as TABLE (or leaves it null)
        rows = dict(con.execute(
            "SELECT table_name, metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ?"
            + (" AND (iceberg_type IS NULL OR iceberg_type = 'TABLE')" if views_too else ""),
            (settings.catalog_name, settings.namespace)).fetchall())
        if not rows:
            try:
                declared = con.execute("SELECT 1 FROM iceberg_namespace_properties WHERE catalog_name = ? AND "
                                       "namespace = ? LIMIT 1", (settings.catalog_name, settings.namespace)).fetchone()
            except sqlite3.OperationalError:
                declared = None
            if declared is None:
                raise ValueError(_no_namespace(settings))
    return rows


@dataclass(frozen=True)
class _Snapshot:
    snapshot_id: int
    timestamp_ms: int
    summary: Any  # .get(key) of the snapshot's summary; None when it has none


@dataclass(frozen=True)
class _View:
    name: str
    location: str  # the table's location (its files lie under it)
    metadata_location: str
    snapshot: _Snapshot | None  # None: the table has no snapshot (empty)


def _local_path(location: str) -> Path | None:
    if location.startswith("file:"):
        return Path(urlparse(location).path)
    return Path(location) if location.startswith("/") else None


def _current_views(rows: dict[str, str] | None, selected: list[str]) -> list[_View] | None:
    """Each table's view at its current snapshot, from the catalog row and the metadata file (local, plain
    JSON files only); None where that cannot be read this way (pyiceberg reads it then)."""
    if rows is None:
        return None
    views = []
    for name in selected:
        path = _local_path(rows.get(name) or "")
        if path is None or not path.is_file() or not path.name.endswith(".metadata.json") or ".gz." in path.name:
            return None
        try:
            metadata = json.loads(path.read_text())
        except (ValueError, OSError):
            return None
        current = metadata.get("current-snapshot-id")
        snap = next((s for s in metadata.get("snapshots") or [] if s.get("snapshot-id") == current), None)
        if current not in (None, -1) and snap is None:
            return None
        views.append(_View(name, metadata["location"], rows[name], None if snap is None else _Snapshot(
            snap["snapshot-id"], snap["timestamp-ms"], {k: str(v) for k, v in (snap.get("summary") or {}).items()})))
    return views


def _view(name: str, table: Table, snapshot: Any) -> _View:
    return _View(name, table.location(), table.metadata_location, None if snapshot is None else _Snapshot(
        snapshot.snapshot_id, snapshot.timestamp_ms, snapshot.summary))


def _prepare(settings: Settings, sql: str, as_of: str | None, tables: list[str] | None,
             profile: bool = False) -> tuple[duckdb.DuckDBPyConnection, list[_View], dict[str, str]]:
    """A session with a view per table the statement names, each at its snapshot."""
    if not isinstance(sql, str) or not sql.strip():
        raise ValueError("empty SQL statement")
    rows = _sqlite_rows(settings)
    names = _namespace_tables(settings, rows)
    if tables is not None:
        tables = [tables] if isinstance(tables, str) else list(tables)
        missing = [t for t in tables if t.lower() not in names]
        if missing:
            raise ValueError(_unknown_message(missing[0], settings.namespace, names))
        selected = list(dict.fromkeys(names[t.lower()] for t in tables))
    else:
        selected = sorted(_tokenized_tables(sql, names))
    views = None if as_of else _current_views(rows, selected)
    if views is None:
        from .runtime.catalog import catalog_for

        catalog = catalog_for(settings)
        loaded = {name: catalog.load_table((settings.namespace, name)) for name in selected}
        snapshots = (dict(_snapshots_as_of(as_of, loaded, settings, names)) if as_of
                     else {name: table.current_snapshot() for name, table in loaded.items()})
        views = [_view(name, table, snapshots[name]) for name, table in loaded.items()]
    con = connect(settings, profile)
    try:
        qualified = settings.namespace.lower() not in ("main", "temp", "memory", "system", "information_schema",
                                                       "pg_catalog")
        if qualified and views:
            con.execute(f'CREATE SCHEMA "{_identifier(settings.namespace)}"')
        for view in views:
            scan = iceberg_scan(view.metadata_location, view.snapshot.snapshot_id if view.snapshot else None)
            con.execute(f'CREATE VIEW main."{_identifier(view.name)}" AS SELECT * FROM {scan}')
            if qualified:
                con.execute(f'CREATE VIEW "{_identifier(settings.namespace)}"."{_identifier(view.name)}" '
                            f'AS SELECT * FROM main."{_identifier(view.name)}"')
    except BaseException:
        con.close()
        raise
    return con, views, names


def _identifier(name: str) -> str:
    return name.replace('"', '""')


def _execute(con: duckdb.DuckDBPyConnection, sql: str, namespace: str, names: dict[str, str]) -> pa.Table:
    import pyarrow as pa

    try:
        relation = con.sql(sql)
        return relation.to_arrow_table() if relation is not None else pa.table({})
    except duckdb.Error as exc:
        raise _sql_error(exc, namespace, names) from None


def fetch(settings: Settings, sql: str, as_of: str | None = None,
          explain: bool = False) -> tuple[list[str], list[tuple], list[ScanInfo]]:
    """`query` as the column names and rows of Python values (no Arrow: what the command prints), and with
    `explain` what was read from each table."""
    con, views, names = _prepare(settings, sql, as_of, None, profile=explain)
    try:
        try:
            relation = con.sql(sql)
            columns, rows = (list(relation.columns), relation.fetchall()) if relation is not None else ([], [])
        except duckdb.Error as exc:
            raise _sql_error(exc, settings.namespace, names) from None
        scans = []
        if explain:
            profile = json.loads(con.get_profiling_information(format="json") or "{}")
            scans = _scan_infos(settings.namespace, views, list(_iceberg_scans(profile)))
        return columns, rows, scans
    finally:
        con.close()


def _unknown_message(name: str, namespace: str, names: dict[str, str]) -> str:
    available = ", ".join(sorted(names.values())) or "none"
    return f"unknown table {name!r}: namespace {namespace!r} has no such table (tables: {available})"


_MISSING_TABLE = re.compile(r'Table with name "?([^"\s]+)"? does not exist')


def _sql_error(exc: duckdb.Error, namespace: str, names: dict[str, str]) -> ValueError:
    message = str(exc).strip()
    missing = _MISSING_TABLE.search(message)
    if isinstance(exc, duckdb.CatalogException) and missing:
        return ValueError(_unknown_message(missing.group(1), namespace, names))
    return ValueError(message)


# ---------------------------------------------------------------------------------------
# What was read: DuckDB's profile
# ---------------------------------------------------------------------------------------


def _iceberg_scans(node: dict) -> Iterator[dict]:
    """The extra_info and rows of every Iceberg scan in a profile tree."""
    stack = [node]
    while stack:
        current = stack.pop()
        info = current.get("extra_info") or {}
        if info.get("Function") == "ICEBERG_SCAN":
            yield {**info, "rows": int(current.get("operator_cardinality", 0))}
        stack.extend(current.get("children") or [])


def _listed(value: Any, separator: str | None = ",") -> list[str]:
    """A profile entry as a list: DuckDB gives a list or, for a single value, a string."""
    if isinstance(value, list):
        return [str(v) for v in value]
    parts = str(value or "").split(separator) if separator else [str(value or "")]
    return [part.strip() for part in parts if part.strip()]


def _scan_infos(namespace: str, views: list[_View], scans: list[dict]) -> list[ScanInfo]:
    """One ScanInfo per view: its scans are those whose files lie under its table's location.

    A scan that read no file names none: it goes to the one view no other scan matched,
    if there is exactly one (otherwise its filters are not attributed; it read nothing).
    """
    def location(view: _View) -> str:
        return _duckdb_path(view.location).rstrip("/") + "/"

    mine: dict[str, list[dict]] = {view.name: [] for view in views}
    unmatched = []
    for scan in scans:
        files = [_duckdb_path(f) for f in _listed(scan.get("Filename(s)"))]
        owner = next((v.name for v in views if files and files[0].startswith(location(v))), None)
        if owner is None:
            unmatched.append(scan)
        else:
            mine[owner].append(scan)
    idle = [name for name, found in mine.items() if not found]
    if len(idle) == 1:
        mine[idle[0]] = unmatched
    infos = []
    for view in views:
        snapshot, found = view.snapshot, mine[view.name]
        summary = snapshot.summary if snapshot is not None and snapshot.summary else None
        total = summary.get("total-data-files") if summary is not None else None
        infos.append(ScanInfo(
            table=f"{namespace}.{view.name}",
            snapshot_id=snapshot.snapshot_id if snapshot is not None else None,
            committed_at=iso_ms(snapshot.timestamp_ms) if snapshot is not None else None,
            files_read=sum(int(s.get("Total Files Read", 0)) for s in found),
            files_total=int(total) if total is not None else 0,
            filters=tuple(dict.fromkeys(" AND ".join(_listed(s["Filters"], None)) for s in found if s.get("Filters"))),
            columns=tuple(dict.fromkeys(c for s in found for c in _listed(s.get("Projections")))),
            rows=sum(s["rows"] for s in found),
        ))
    return infos


# ---------------------------------------------------------------------------------------
# as_of
# ---------------------------------------------------------------------------------------


def _snapshots_as_of(as_of: str, loaded: dict[str, Table], settings: Settings,
                     names: dict[str, str]) -> dict[str, Any]:
    from .runtime.catalog import catalog_for
    from .runtime.main_log import main_at, on_main_since

    target = parse_as_of(as_of)
    result: dict[str, Any] = {}
    if isinstance(target, int):
        owners = {name: (table, snap) for name, table in loaded.items() if (snap := table.snapshot_by_id(target))}
        if not owners:
            catalog = catalog_for(settings)
            for name in sorted(set(names.values()) - set(loaded)):
                table = catalog.load_table((settings.namespace, name))
                if (snap := table.snapshot_by_id(target)) is not None:
                    owners = {name: (table, snap)}
                    break
        if not owners:
            raise ValueError(f"as of {as_of}: no table in namespace {settings.namespace!r} has snapshot {target}")
        owner_table, snap = next(iter(owners.values()))  # its time on main, not on the branch it was written on
        timestamp_ms = on_main_since(owner_table, target) or snap.timestamp_ms
        result.update({name: snap for name, (_, snap) in owners.items() if name in loaded})
        when = f"snapshot {target} ({iso_ms(timestamp_ms)})"
    else:
        timestamp_ms = to_ms(target)
        when = target.isoformat()
    for name, table in loaded.items():
        if name in result:
            continue
        snapshot, snapshot_id = main_at(table, timestamp_ms)
        if snapshot is None and snapshot_id is not None:
            raise ValueError(f"table {settings.namespace}.{name}: snapshot {snapshot_id}, current as of {when}, "
                             "has expired")
        if snapshot is None:
            first = min((s.timestamp_ms for s in table.metadata.snapshots), default=None)
            if first is None:
                raise ValueError(f"table {settings.namespace}.{name} has no snapshot as of {when}: "
                                 "it has never been written")
            raise ValueError(f"table {settings.namespace}.{name} did not exist yet as of {when}: "
                             f"its first snapshot was committed at {iso_ms(first)}")
        result[name] = snapshot
    return result


# ---------------------------------------------------------------------------------------
# Tables named
# ---------------------------------------------------------------------------------------


_TOKEN = re.compile(
    r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|\"((?:[^\"]|\"\")*)\"|([A-Za-z_][A-Za-z0-9_$]*)",
    re.DOTALL,
)


def _tokenized_tables(sql: str, names: dict[str, str]) -> set[str]:
    """Tables named by an identifier anywhere outside comments and string literals."""
    found = set()
    for match in _TOKEN.finditer(sql):
        quoted, bare = match.group(1), match.group(2)
        word = bare if bare is not None else (quoted.replace('""', '"') if quoted is not None else None)
        if word is not None and word.lower() in names:
            found.add(names[word.lower()])
    return found
