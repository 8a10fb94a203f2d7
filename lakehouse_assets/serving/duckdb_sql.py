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

Analysts read, and read only what they are meant to, in two layers. DuckDB's parser
decides: every statement must be a query (SELECT, WITH, EXPLAIN, DESCRIBE, SHOW,
SUMMARIZE), and its parse tree may name the exposed tables, its own CTEs and table
functions that read no file (`range`, `unnest`...), nothing else: no COPY, ATTACH,
INSTALL, SET or CREATE, no `read_parquet`, `read_text` or `FROM 'file.csv'`. DuckDB's
settings then fence the session: it may open only the exposed tables' own directories,
and it cannot change that. Raw data (bronze, its quarantine, the ingest log: read_rule.py
says which tables) is exposed only when an engineer asks (`raw`, `LAKEHOUSE_SQL_RAW`).
"""

from __future__ import annotations

import importlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from itertools import takewhile
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlparse

import duckdb

from ..settings import Settings
from ..times import iso_ms, parse_as_of, to_ms
from .read_rule import raw_tables, read_only_settings

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


def query(settings: Settings, sql: str, as_of: str | None = None, tables: list[str] | None = None,
          raw: bool | None = None) -> pa.Table:
    """Run the query `sql` with DuckDB over the namespace's Iceberg tables, exposed by name.

    `as_of` reads every table as it was at a snapshot id (the table that has it at that
    snapshot, the others at their snapshot current at its commit time) or at an ISO date
    or timestamp (naive means UTC). `tables` names the tables to expose instead of the
    ones found in the statement. `raw` also exposes bronze, quarantine and ingest log
    tables (default: the settings' `sql_raw`). Anything but a query over the exposed
    tables is refused with a ValueError before it runs.
    """
    session = _prepare(settings, sql, as_of, tables, raw)
    try:
        return _execute(session, _arrow)
    finally:
        session.con.close()


def run(settings: Settings, sql: str, as_of: str | None = None, tables: list[str] | None = None,
        raw: bool | None = None) -> SqlResult:
    """`query`, with what was read from each table (DuckDB's profile of the statement)."""
    session = _prepare(settings, sql, as_of, tables, raw, profile=True)
    try:
        result = _execute(session, _arrow)
        return SqlResult(result, _read(session, settings.namespace))
    finally:
        session.con.close()


def connect(settings: Settings, profile: bool = False, readable: Iterable[str] = ()) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB session in UTC with the Iceberg reader loaded (and S3 access when the lake is on S3),
    allowed to open files under the `readable` directories only (DuckDB paths, ending in /)."""
    con = _open(settings, profile)
    _fence(con, readable)
    return con


def _open(settings: Settings, profile: bool) -> duckdb.DuckDBPyConnection:
    """The session before its fence: DuckDB's parser judges the statement with it while the views are found."""
    con = duckdb.connect(":memory:")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET python_enable_replacements = false")  # a name is a table, never a Python variable in scope
    for name in extensions(settings):
        con.execute(f"LOAD '{_sql_string(str(_extension_file(name)))}'")
    con.execute("SET TimeZone = 'UTC'")
    if profile:  # what each scan read, for `run`
        con.execute("PRAGMA enable_profiling = 'no_output'")
    if settings.uses_s3:
        con.execute(_s3_secret(settings))
    return con


def _fence(con: duckdb.DuckDBPyConnection, readable: Iterable[str]) -> None:
    # The session opens the exposed tables' files and nothing else: not the catalog, not the key that
    # pseudonymises personal data, not another table's files (raw ones included); and it cannot undo this.
    directories = ", ".join(f"'{_sql_string(d)}'" for d in readable)
    con.execute(f"SET allowed_directories = [{directories}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


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
    settings = read_only_settings(settings)
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
    from ..runtime.catalog import catalog_for

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


@dataclass(frozen=True)
class _Session:
    con: duckdb.DuckDBPyConnection
    views: list[_View]
    statements: list[duckdb.Statement]  # the statement's queries, each judged, in order
    unknown: Callable[[str], str]  # the error for a name that is not an exposed table


def _prepare(settings: Settings, sql: str, as_of: str | None, tables: list[str] | None, raw: bool | None,
             profile: bool = False) -> _Session:
    """A session with a view per exposed table the statement names, each at its snapshot, and the statement's
    queries, judged against those views."""
    if not isinstance(sql, str) or not sql.strip():
        raise ValueError("empty SQL statement")
    settings = read_only_settings(settings)
    rows = _sqlite_rows(settings)
    names = _namespace_tables(settings, rows)
    raw = settings.sql_raw if raw is None else raw

    def unknown(name: str) -> str:  # lists the exposed tables only, worked out when needed
        hidden = set() if raw else raw_tables(settings, names.values())
        return _unknown_message(name, settings.namespace, {k: v for k, v in names.items() if v not in hidden})

    selected, hidden = _selected(settings, sql, names, tables, raw, unknown)
    con = _open(settings, profile)
    try:
        statements = _judged(con, sql, settings.namespace, selected, hidden, unknown)
        views = _views(settings, rows, names, selected, as_of)
        _fence(con, _readable(views))
        _create_views(con, settings.namespace, views)
    except BaseException:
        con.close()
        raise
    return _Session(con, views, statements, unknown)


def _selected(settings: Settings, sql: str, names: dict[str, str], tables: list[str] | None, raw: bool,
              unknown: Callable[[str], str]) -> tuple[list[str], set[str]]:
    """The tables to expose (`tables`, else those the statement names) and those of them hidden as raw."""
    if tables is not None:
        tables = [tables] if isinstance(tables, str) else list(tables)
        missing = [t for t in tables if t.lower() not in names]
        if missing:
            raise ValueError(unknown(missing[0]))
        selected = list(dict.fromkeys(names[t.lower()] for t in tables))
    else:
        selected = sorted(_tokenized_tables(sql, names))
    hidden = set() if raw else raw_tables(settings, selected)
    if tables is not None and hidden:
        raise ValueError(_raw_message(sorted(hidden)[0]))
    return [name for name in selected if name not in hidden], hidden


def _create_views(con: duckdb.DuckDBPyConnection, namespace: str, views: list[_View]) -> None:
    """A view per table over its `iceberg_scan`, by its name alone and, unless the namespace's name is one of
    DuckDB's own schemas, by namespace.name too."""
    qualified = namespace.lower() not in ("main", "temp", "memory", "system", "information_schema", "pg_catalog")
    if qualified and views:
        con.execute(f'CREATE SCHEMA "{_identifier(namespace)}"')
    for view in views:
        scan = iceberg_scan(view.metadata_location, view.snapshot.snapshot_id if view.snapshot else None)
        con.execute(f'CREATE VIEW main."{_identifier(view.name)}" AS SELECT * FROM {scan}')
        if qualified:
            con.execute(f'CREATE VIEW "{_identifier(namespace)}"."{_identifier(view.name)}" '
                        f'AS SELECT * FROM main."{_identifier(view.name)}"')


def _views(settings: Settings, rows: dict[str, str] | None, names: dict[str, str], selected: list[str],
           as_of: str | None) -> list[_View]:
    """The `selected` tables' views, each at its snapshot: now, or `as_of`."""
    views = None if as_of else _current_views(rows, selected)
    if views is not None:
        return views
    from ..runtime.catalog import catalog_for

    catalog = catalog_for(settings)
    loaded = {name: catalog.load_table((settings.namespace, name)) for name in selected}
    snapshots = (dict(_snapshots_as_of(as_of, loaded, settings, names)) if as_of
                 else {name: table.current_snapshot() for name, table in loaded.items()})
    return [_view(name, table, snapshots[name]) for name, table in loaded.items()]


def _readable(views: list[_View]) -> list[str]:
    """The directories a session may open: each exposed table's own (its data files and, as this platform
    writes tables, its metadata lie under it) and its metadata file's, should that lie elsewhere."""
    directories = {_duckdb_path(view.location).rstrip("/") + "/" for view in views}
    directories |= {_duckdb_path(view.metadata_location).rsplit("/", 1)[0] + "/" for view in views}
    return sorted(directories)


def _identifier(name: str) -> str:
    return name.replace('"', '""')


_T = TypeVar("_T")


def _execute(session: _Session, take: Callable[[duckdb.DuckDBPyRelation | None], _T]) -> _T:
    """Run the judged queries in order and `take` the last one's result; DuckDB's errors as ValueErrors."""
    try:
        for statement in session.statements[:-1]:
            session.con.execute(statement)
        return take(session.con.sql(session.statements[-1]))
    except duckdb.Error as exc:
        raise _sql_error(exc, session.unknown) from None


def _arrow(relation: duckdb.DuckDBPyRelation | None) -> pa.Table:
    import pyarrow as pa

    return relation.to_arrow_table() if relation is not None else pa.table({})


def _rows(relation: duckdb.DuckDBPyRelation | None) -> tuple[list[str], list[tuple]]:
    return (list(relation.columns), relation.fetchall()) if relation is not None else ([], [])


def _read(session: _Session, namespace: str) -> list[ScanInfo]:
    profile = json.loads(session.con.get_profiling_information(format="json") or "{}")
    return _scan_infos(namespace, session.views, list(_iceberg_scans(profile)))


def fetch(settings: Settings, sql: str, as_of: str | None = None, explain: bool = False,
          raw: bool | None = None) -> tuple[list[str], list[tuple], list[ScanInfo]]:
    """`query` as the column names and rows of Python values (no Arrow: what the command prints), and with
    `explain` what was read from each table."""
    session = _prepare(settings, sql, as_of, None, raw, profile=explain)
    try:
        columns, rows = _execute(session, _rows)
        return columns, rows, _read(session, settings.namespace) if explain else []
    finally:
        session.con.close()


def _unknown_message(name: str, namespace: str, names: dict[str, str]) -> str:
    available = ", ".join(sorted(names.values())) or "none"
    return f"unknown table {name!r}: namespace {namespace!r} has no such table (tables: {available})"


_MISSING_TABLE = re.compile(r'Table with name "?([^"\s]+)"? does not exist')


def _sql_error(exc: duckdb.Error, unknown: Callable[[str], str]) -> ValueError:
    message = str(exc).strip()
    missing = _MISSING_TABLE.search(message)
    if isinstance(exc, duckdb.CatalogException) and missing:
        return ValueError(unknown(missing.group(1)))
    return ValueError(message)


# ---------------------------------------------------------------------------------------
# Who sees what: raw data for engineers only (the rule: read_rule.py)
# ---------------------------------------------------------------------------------------


def _raw_message(name: str) -> str:
    return (f"table {name!r} is raw data (bronze, quarantine or ingest log: landed payloads, personal data in "
            "clear), hidden from analysts' SQL; an engineer opens it with `lakehouse sql --raw` or "
            "LAKEHOUSE_SQL_RAW=1")


# ---------------------------------------------------------------------------------------
# What may run: queries over the exposed tables, as DuckDB's parser reads them
# ---------------------------------------------------------------------------------------


# Table functions that read no file, no URL and no other database: all a query may call.
_TABLE_FUNCTIONS = frozenset({"generate_series", "json_each", "json_tree", "range", "unnest"})
_QUERIES_ONLY = "lakehouse sql runs queries only (SELECT, WITH ... SELECT, EXPLAIN, DESCRIBE, SHOW, SUMMARIZE)"
_TABLES_ONLY = "lakehouse sql reads the lake's tables by their names, never files, URLs or other databases"


def _judged(parser: duckdb.DuckDBPyConnection, sql: str, namespace: str, exposed: list[str], hidden: set[str],
            unknown: Callable[[str], str]) -> list[duckdb.Statement]:
    """The statements of `sql`, each a query that reads nothing but the `exposed` tables; else a ValueError.
    `parser` only parses (json_serialize_sql runs nothing of the statement)."""
    try:
        statements = parser.extract_statements(sql)
        if not statements:
            raise ValueError("empty SQL statement")
        for statement in statements:
            tree = _query_tree(parser, statement.query, statement.type)
            _check_reads(tree, namespace, {n.lower() for n in exposed}, {n.lower(): n for n in hidden}, unknown)
        return statements
    except duckdb.Error as exc:
        raise ValueError(" ".join(str(exc).split())) from None


def _excerpt(text: str) -> str:
    words = " ".join(text.split())
    return repr(words if len(words) <= 60 else words[:57] + "...")


def _query_tree(parser: duckdb.DuckDBPyConnection, text: str, kind: duckdb.StatementType) -> dict:
    """The parse tree of one statement (DuckDB's json_serialize_sql); any statement but a query is refused."""
    if kind == duckdb.StatementType.EXPLAIN:
        inner = _explained(parser, text)
        return _query_tree(parser, inner.query, inner.type)
    if kind != duckdb.StatementType.SELECT:
        raise ValueError(f"refused {kind.name} statement {_excerpt(text)}: {_QUERIES_ONLY}")
    # The text inlined, not a parameter: binding one imports pyarrow, which the command does without.
    (serialized,) = parser.execute(f"SELECT json_serialize_sql('{_sql_string(text)}')").fetchall()[0]
    tree = json.loads(serialized)
    if tree.get("error") or len(tree.get("statements") or []) != 1:  # a PRAGMA reads as SELECT, but is none
        raise ValueError(f"refused statement {_excerpt(text)}: {_QUERIES_ONLY}")
    return tree["statements"][0]


def _explained(parser: duckdb.DuckDBPyConnection, text: str) -> duckdb.Statement:
    """The statement an `EXPLAIN [ANALYZE] <statement>` explains (ANALYZE runs it), found with DuckDB's tokenizer."""
    starts = [offset for offset, _ in duckdb.tokenize(text)]
    # A token's text runs from its start to the next one's; a keyword is its leading letters (a comment may follow).
    words = ["".join(takewhile(str.isalpha, text[a:b])).upper() for a, b in zip(starts, [*starts[1:], len(text)])]
    skip = 2 if len(words) > 1 and words[1] in ("ANALYZE", "ANALYSE") else 1
    try:
        inner = parser.extract_statements(text[starts[skip]:]) if words[:1] == ["EXPLAIN"] and len(words) > skip else []
    except duckdb.Error:  # what follows is no statement: EXPLAIN's options, e.g. (FORMAT json)
        inner = []
    if len(inner) != 1:
        raise ValueError(f"refused statement {_excerpt(text)}: {_QUERIES_ONLY}, EXPLAIN without options")
    return inner[0]


def _references(tree: dict) -> tuple[list[dict], list[dict], set[str]]:
    """The table functions, the tables and the CTE names anywhere in a parse tree (subqueries included)."""
    functions, tables, ctes = [], [], set()
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("type") == "TABLE_FUNCTION":
                functions.append(node)
            elif node.get("type") == "BASE_TABLE":
                tables.append(node)
            ctes |= {str(entry.get("key", "")).lower() for entry in (node.get("cte_map") or {}).get("map") or []}
            stack.extend(node.values())
    return functions, tables, ctes


def _check_reads(tree: dict, namespace: str, exposed: set[str], hidden: dict[str, str],
                 unknown: Callable[[str], str]) -> None:
    functions, tables, ctes = _references(tree)
    for node in functions:
        function = node.get("function") or {}
        name = str(function.get("function_name") or "?").lower()
        if function.get("class") != "FUNCTION" or name not in _TABLE_FUNCTIONS:
            raise ValueError(f"refused {name}(...): {_TABLES_ONLY}")
    for node in tables:
        name, schema, catalog = (str(node.get(k) or "") for k in ("table_name", "schema_name", "catalog_name"))
        ours = catalog.lower() in ("", "memory") and schema.lower() in ("", "main", namespace.lower())
        if (ours and name.lower() in exposed) or (not schema and not catalog and name.lower() in ctes):
            continue
        if name.lower() in hidden:
            raise ValueError(_raw_message(hidden[name.lower()]))
        if "." in name or "/" in name:  # DuckDB would read a file or URL named so (a replacement scan)
            raise ValueError(f"refused {name!r}: {_TABLES_ONLY}")
        raise ValueError(unknown(".".join(part for part in (catalog, schema, name) if part)))


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
    """One ScanInfo per view, from the scans that read its table (_scans_by_view)."""
    mine = _scans_by_view(views, scans)
    return [_scan_info(namespace, view, mine[view.name]) for view in views]


def _scans_by_view(views: list[_View], scans: list[dict]) -> dict[str, list[dict]]:
    """Each view's scans: those whose files lie under its table's location.

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
    return mine


def _scan_info(namespace: str, view: _View, found: list[dict]) -> ScanInfo:
    """What the scans `found` read of one view's table."""
    snapshot = view.snapshot
    summary = snapshot.summary if snapshot is not None and snapshot.summary else None
    total = summary.get("total-data-files") if summary is not None else None
    return ScanInfo(
        table=f"{namespace}.{view.name}",
        snapshot_id=snapshot.snapshot_id if snapshot is not None else None,
        committed_at=iso_ms(snapshot.timestamp_ms) if snapshot is not None else None,
        files_read=sum(int(s.get("Total Files Read", 0)) for s in found),
        files_total=int(total) if total is not None else 0,
        filters=tuple(dict.fromkeys(" AND ".join(_listed(s["Filters"], None)) for s in found if s.get("Filters"))),
        columns=tuple(dict.fromkeys(c for s in found for c in _listed(s.get("Projections")))),
        rows=sum(s["rows"] for s in found),
    )


# ---------------------------------------------------------------------------------------
# as_of
# ---------------------------------------------------------------------------------------


def _snapshots_as_of(as_of: str, loaded: dict[str, Table], settings: Settings,
                     names: dict[str, str]) -> dict[str, Any]:
    from ..runtime.catalog import catalog_for
    from ..runtime.main_log import main_at, on_main_since

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
