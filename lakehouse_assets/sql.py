"""SQL over the lake's Iceberg tables with DuckDB, read through pyiceberg: no Spark.

The tables a statement names are planned with pyiceberg, with the WHERE clause's simple
predicates pushed into the scan (so partition and file-statistics pruning skip data files)
and only the referenced columns selected. The scans are read into Arrow and registered in
an in-memory DuckDB connection under the tables' own names; DuckDB then runs the whole
statement, WHERE clause included. The push-down is an optimisation only, so it is
conservative: a predicate goes into a scan only when it certainly keeps every row the
statement could need, and otherwise it is left to DuckDB.

Statements are parsed with DuckDB's own parser (`json_serialize_sql`); statements it
cannot serialise (PIVOT, EXPLAIN, DDL, ...) fall back to a tokenizer that only finds the
tables, which are then read whole.

The DuckDB session runs in UTC: naive timestamps and dates compared with TIMESTAMPTZ
columns mean UTC, as they do for `as_of`.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from functools import reduce
from typing import Any

import duckdb
import pyarrow as pa
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    NotEqualTo,
    NotIn,
    NotNull,
    Or,
    Reference,
)
from pyiceberg.expressions.literals import Literal as IcebergLiteral
from pyiceberg.expressions.literals import literal as iceberg_literal
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from .runtime.catalog import catalog_for
from .settings import Settings

UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


# ---------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanInfo:
    """What was (or would be) read from one table."""

    table: str  # namespace.table
    snapshot_id: int | None  # None: the table has no snapshot (empty)
    committed_at: str | None  # the snapshot's commit time, ISO 8601 UTC
    files_planned: int  # data files left after partition and statistics pruning
    files_total: int  # data files in the snapshot
    row_filter: str  # the predicate pushed into the scan, "TRUE" when none
    columns: tuple[str, ...] | None  # the columns read; None when all of them
    rows: int | None = None  # rows read (after the pushed filter); None before reading
    iceberg_filter: BooleanExpression = field(default_factory=AlwaysTrue, repr=False, compare=False)

    def describe(self) -> str:
        snapshot = (
            f"snapshot {self.snapshot_id} ({self.committed_at})" if self.snapshot_id is not None
            else "no snapshot (empty table)"
        )
        columns = "all columns" if self.columns is None else "columns " + (", ".join(self.columns) or "(none)")
        rows = "" if self.rows is None else f", {self.rows} rows read"
        return (f"{self.table}: {snapshot}, {self.files_planned} of {self.files_total} data files, "
                f"filter {self.row_filter}, {columns}{rows}")


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
    return run(settings, sql, as_of=as_of, tables=tables).table


def run(settings: Settings, sql: str, as_of: str | None = None, tables: list[str] | None = None) -> SqlResult:
    """`query`, with what was read from each table."""
    scans, names = _prepare(settings, sql, as_of, tables)
    con = _connect()
    try:
        infos = []
        for scan in scans:
            data = scan.read()
            con.register(scan.name, data)
            infos.append(replace(scan.info, rows=data.num_rows))
        _expose_qualified(con, settings.namespace, [scan.name for scan in scans])
        try:
            relation = con.sql(sql)
            result = relation.to_arrow_table() if relation is not None else pa.table({})
        except duckdb.Error as exc:
            raise _sql_error(exc, settings.namespace, names) from None
        return SqlResult(result, infos)
    finally:
        con.close()


def plan(settings: Settings, sql: str, as_of: str | None = None, tables: list[str] | None = None) -> list[ScanInfo]:
    """The scans `run` would make, planned but not read."""
    return [scan.info for scan in _prepare(settings, sql, as_of, tables)[0]]


@dataclass(frozen=True)
class Pushdown:
    """What can be pushed into one table's scan."""

    predicate: _Expr | None  # None: nothing
    columns: frozenset[str] | None  # lower-cased names referenced; None: all columns

    @property
    def row_filter(self) -> BooleanExpression:
        return self.predicate.to_iceberg() if self.predicate is not None else AlwaysTrue()

    @property
    def text(self) -> str:
        return self.predicate.render() if self.predicate is not None else "TRUE"


def pushdown(sql: str, schemas: dict[str, Schema], namespace: str = "lake",
             pushable_columns: dict[str, set[int]] | None = None) -> dict[str, Pushdown]:
    """Per table of `schemas` that `sql` reads: the row filter and columns a scan can use.

    `pushable_columns` limits predicates, per table, to those field ids (e.g. the fields a
    time-travel snapshot's schema shares with the current one).
    """
    statements = _parse(sql)
    by_lower = {name.lower(): name for name in schemas}
    if statements is None:
        return {name: Pushdown(None, None) for name in _tokenized_tables(sql, by_lower)}
    return _Analyzer(statements, schemas, namespace, pushable_columns or {}).run()


# ---------------------------------------------------------------------------------------
# Planning and reading
# ---------------------------------------------------------------------------------------


@dataclass
class _Scan:
    name: str
    info: ScanInfo
    table: Table
    scan: Any  # pyiceberg DataScan
    tasks: list

    def read(self) -> pa.Table:
        from pyiceberg.io.pyarrow import ArrowScan

        if self.info.snapshot_id is None:
            from pyiceberg.io.pyarrow import schema_to_pyarrow

            return schema_to_pyarrow(self.scan.projection(), include_field_ids=False).empty_table()
        # DataScan.to_arrow's reader, on the tasks planned already (no second planning).
        return ArrowScan(self.scan.table_metadata, self.scan.io, self.scan.projection(), self.scan.row_filter,
                         self.scan.case_sensitive, self.scan.limit).to_table(self.tasks)


def _connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    return con


def _namespace_tables(settings: Settings) -> dict[str, str]:
    """Lower-cased name -> name of the namespace's tables."""
    catalog = catalog_for(settings)
    if not catalog.namespace_exists(settings.namespace):
        raise ValueError(f"namespace {settings.namespace!r} does not exist in catalog {settings.catalog_name!r}")
    return {ident[-1].lower(): ident[-1] for ident in catalog.list_tables(settings.namespace)}


def _prepare(settings: Settings, sql: str, as_of: str | None,
             tables: list[str] | None) -> tuple[list[_Scan], dict[str, str]]:
    if not isinstance(sql, str) or not sql.strip():
        raise ValueError("empty SQL statement")
    namespace = settings.namespace
    names = _namespace_tables(settings)
    statements = _parse(sql)
    refs = _References(statements, names, namespace) if statements is not None else None

    if tables is not None:
        tables = [tables] if isinstance(tables, str) else list(tables)
        missing = [t for t in tables if t.lower() not in names]
        if missing:
            raise ValueError(_unknown_message(missing[0], namespace, names))
        selected = list(dict.fromkeys(names[t.lower()] for t in tables))
    elif refs is not None:
        # Names that are not identifiers ('file.parquet') are DuckDB's to resolve.
        unknown = [n for n in refs.unknown if _PLAIN_NAME.fullmatch(n) and not _duckdb_knows(n)]
        if unknown:
            raise ValueError(_unknown_message(unknown[0], namespace, names))
        selected = sorted(refs.tables)
    else:
        selected = sorted(_tokenized_tables(sql, names))

    catalog = catalog_for(settings)
    loaded = {name: catalog.load_table((namespace, name)) for name in selected}
    snapshots = _snapshots_as_of(as_of, loaded, settings, names) if as_of else {
        name: table.current_snapshot() for name, table in loaded.items()}

    schemas, shared = {}, {}
    for name, table in loaded.items():
        schemas[name] = _schema_at(table, snapshots[name])
        current = {f.field_id: (f.name, f.field_type) for f in table.schema().fields}
        shared[name] = {f.field_id for f in schemas[name].fields
                        if current.get(f.field_id) == (f.name, f.field_type)}
    pushed: dict[str, Pushdown] = {}
    if statements is not None:
        try:
            pushed = _Analyzer(statements, schemas, namespace, shared).run()
        except RecursionError:  # absurdly nested expressions: read the tables whole
            pushed = {}

    scans = []
    for name, table in loaded.items():
        snapshot = snapshots[name]
        push = pushed.get(name, Pushdown(None, None))
        schema = schemas[name]
        if push.columns is None:
            columns = None
            selected_fields: tuple[str, ...] = ("*",)
        else:
            columns = tuple(f.name for f in schema.fields if f.name.lower() in push.columns)
            if not columns:
                # count(*) and the like still need the rows: read one (preferably small) column.
                primitive = [f.name for f in schema.fields if f.field_type.is_primitive]
                columns = ((primitive or [f.name for f in schema.fields])[0],)
            selected_fields = columns
        row_filter = push.row_filter
        scan = table.scan(row_filter=row_filter, selected_fields=selected_fields,
                          snapshot_id=snapshot.snapshot_id if snapshot else None)
        tasks = list(scan.plan_files()) if snapshot else []
        info = ScanInfo(
            table=f"{namespace}.{name}",
            snapshot_id=snapshot.snapshot_id if snapshot else None,
            committed_at=_iso_ms(snapshot.timestamp_ms) if snapshot else None,
            files_planned=len(tasks),
            files_total=_total_data_files(table, snapshot, tasks, push.predicate is None),
            row_filter=push.text,
            columns=columns,
            iceberg_filter=row_filter,
        )
        scans.append(_Scan(name, info, table, scan, tasks))
    return scans, names


def _schema_at(table: Table, snapshot: Snapshot | None) -> Schema:
    if snapshot is not None and snapshot.schema_id is not None:
        for schema in table.metadata.schemas:
            if schema.schema_id == snapshot.schema_id:
                return schema
    return table.schema()


def _total_data_files(table: Table, snapshot: Snapshot | None, tasks: list, unfiltered: bool) -> int:
    if snapshot is None:
        return 0
    total = snapshot.summary.get("total-data-files") if snapshot.summary else None
    if total is not None:
        return int(total)
    if unfiltered:
        return len(tasks)
    return sum(1 for _ in table.scan(snapshot_id=snapshot.snapshot_id).plan_files())


def _expose_qualified(con: duckdb.DuckDBPyConnection, namespace: str, names: list[str]) -> None:
    """Make `namespace.table` resolve too (also inside query('...') strings)."""
    if namespace.lower() in ("main", "temp", "memory", "system", "information_schema", "pg_catalog"):
        return
    con.execute(f'CREATE SCHEMA IF NOT EXISTS "{namespace}"')
    for name in names:
        con.execute(f'CREATE VIEW "{namespace}"."{name}" AS SELECT * FROM temp.main."{name}"')


_PLAIN_NAME = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*")


def _duckdb_knows(name: str) -> bool:
    """DuckDB's own catalog objects (duckdb_tables, information_schema.columns, ...)."""
    con = duckdb.connect(":memory:")
    try:
        con.table(name)
        return True
    except duckdb.Error:
        return False
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
# as_of
# ---------------------------------------------------------------------------------------


def _iso_ms(timestamp_ms: int) -> str:
    return (_EPOCH + dt.timedelta(milliseconds=timestamp_ms)).isoformat(timespec="milliseconds")


def parse_as_of(as_of: str) -> int | dt.datetime:
    """A snapshot id (digits) or an aware datetime (ISO date or timestamp; naive means UTC)."""
    text = str(as_of).strip()
    if text.isdigit():
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"as of {as_of!r}: expected a snapshot id or an ISO date or timestamp "
            "(e.g. 2025-01-02 or 2025-01-02T10:00:00+00:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _snapshot_at(table: Table, timestamp_ms: int) -> tuple[Snapshot | None, int | None]:
    """The snapshot current at `timestamp_ms` (from the snapshot log), and its id (set even when expired)."""
    log = [(e.timestamp_ms, e.snapshot_id) for e in table.metadata.snapshot_log]
    if not log:
        log = sorted((s.timestamp_ms, s.snapshot_id) for s in table.metadata.snapshots)
    for ts, snapshot_id in reversed(log):
        if ts <= timestamp_ms:
            return table.snapshot_by_id(snapshot_id), snapshot_id
    return None, None


def _snapshots_as_of(as_of: str, loaded: dict[str, Table], settings: Settings,
                     names: dict[str, str]) -> dict[str, Snapshot]:
    target = parse_as_of(as_of)
    result: dict[str, Snapshot] = {}
    if isinstance(target, int):
        found = {name: table.snapshot_by_id(target) for name, table in loaded.items()}
        owners = {name: snap for name, snap in found.items() if snap is not None}
        if not owners:
            catalog = catalog_for(settings)
            for name in sorted(set(names.values()) - set(loaded)):
                snap = catalog.load_table((settings.namespace, name)).snapshot_by_id(target)
                if snap is not None:
                    owners = {name: snap}
                    break
        if not owners:
            raise ValueError(f"as of {as_of}: no table in namespace {settings.namespace!r} has snapshot {target}")
        timestamp_ms = next(iter(owners.values())).timestamp_ms
        result.update({name: snap for name, snap in owners.items() if name in loaded})
        when = f"snapshot {target} ({_iso_ms(timestamp_ms)})"
    else:
        timestamp_ms = (target - _EPOCH) // dt.timedelta(milliseconds=1)
        when = target.isoformat()
    for name, table in loaded.items():
        if name in result:
            continue
        snapshot, snapshot_id = _snapshot_at(table, timestamp_ms)
        if snapshot is None and snapshot_id is not None:
            raise ValueError(f"table {settings.namespace}.{name}: snapshot {snapshot_id}, current as of {when}, "
                             "has expired")
        if snapshot is None:
            first = min((s.timestamp_ms for s in table.metadata.snapshots), default=None)
            if first is None:
                raise ValueError(f"table {settings.namespace}.{name} has no snapshot as of {when}: "
                                 "it has never been written")
            raise ValueError(f"table {settings.namespace}.{name} did not exist yet as of {when}: "
                             f"its first snapshot was committed at {_iso_ms(first)}")
        result[name] = snapshot
    return result


# ---------------------------------------------------------------------------------------
# Parsing: tables referenced
# ---------------------------------------------------------------------------------------


def _parse(sql: str) -> list[dict] | None:
    """DuckDB's parse tree of the statements, or None when it cannot serialise them (not SELECT)."""
    con = duckdb.connect(":memory:")
    try:
        row = con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
        assert row is not None  # a SELECT of one expression returns one row
        raw = row[0]
    except duckdb.Error:
        return None
    finally:
        con.close()
    try:
        tree = json.loads(raw)
    except RecursionError:
        return None
    if tree.get("error") and tree.get("error_type") == "parser":
        raise ValueError(f"Parser Error: {tree.get('error_message', 'invalid SQL')}")
    if tree.get("error") or not isinstance(tree.get("statements"), list):
        return None
    return tree["statements"]


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


def _walk(node: Any):
    """Every dict of a parse tree, each before the dicts inside it."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(reversed([v for v in item.values() if isinstance(v, (dict, list))]))
        elif isinstance(item, list):
            stack.extend(reversed([v for v in item if isinstance(v, (dict, list))]))


def _cte_names(statements: list[dict]) -> set[str]:
    names = set()
    for node in _walk(statements):
        cte_map = node.get("cte_map")
        if isinstance(cte_map, dict):
            for entry in cte_map.get("map") or []:
                if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                    names.add(entry["key"].lower())
    return names


def _string_constants(node: Any) -> list[str]:
    found = [_constant(n) for n in _walk(node)]
    return [c[1] for c in found if c and c[0] == "STRING" and isinstance(c[1], str)]


class _References:
    """The namespace's tables a parsed statement reads, and the names it cannot resolve."""

    def __init__(self, statements: list[dict], names: dict[str, str], namespace: str) -> None:
        self.tables: set[str] = set()
        self.unknown: list[str] = []
        ctes = _cte_names(statements)
        for node in _walk(statements):
            if node.get("type") == "BASE_TABLE":
                table = str(node.get("table_name") or "")
                schema = str(node.get("schema_name") or "")
                if node.get("catalog_name"):
                    continue
                if schema and schema.lower() != namespace.lower():
                    continue
                if table.lower() in names:
                    self.tables.add(names[table.lower()])
                elif schema or table.lower() not in ctes:
                    self.unknown.append(f"{schema}.{table}" if schema else table)
            elif node.get("type") == "TABLE_FUNCTION":
                # query('SELECT ... FROM t') and query_table('t') name tables in strings.
                function = node.get("function") or {}
                if str(function.get("function_name", "")).lower() in ("query", "query_table"):
                    for text in _string_constants(function):
                        self.tables |= _tokenized_tables(text, names)


# ---------------------------------------------------------------------------------------
# Parsing: predicates and columns
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pred:
    column: str
    op: str  # = <> < <= > >= in, not in, is null, is not null
    values: tuple = ()

    def to_iceberg(self) -> BooleanExpression:
        # Keyword arguments: pydantic's generated __init__ (what type checkers see) takes no positional ones.
        c, v = Reference(self.column), self.values
        return {
            "=": lambda: EqualTo(term=c, value=_iceberg_literal(v[0])),
            "<>": lambda: NotEqualTo(term=c, value=_iceberg_literal(v[0])),
            "<": lambda: LessThan(term=c, value=_iceberg_literal(v[0])),
            "<=": lambda: LessThanOrEqual(term=c, value=_iceberg_literal(v[0])),
            ">": lambda: GreaterThan(term=c, value=_iceberg_literal(v[0])),
            ">=": lambda: GreaterThanOrEqual(term=c, value=_iceberg_literal(v[0])),
            "in": lambda: In(term=c, values={_iceberg_literal(x) for x in v}),
            "not in": lambda: NotIn(term=c, values={_iceberg_literal(x) for x in v}),
            "is null": lambda: IsNull(term=c),
            "is not null": lambda: NotNull(term=c),
        }[self.op]()

    def render(self) -> str:
        column = '"' + self.column.replace('"', '""') + '"' if not re.fullmatch(r"[a-z_][a-z0-9_]*", self.column) \
            else self.column
        if self.op in ("is null", "is not null"):
            return f"{column} {self.op.upper()}"
        if self.op in ("in", "not in"):
            return f"{column} {self.op.upper()} ({', '.join(_render_value(v) for v in self.values)})"
        return f"{column} {self.op} {_render_value(self.values[0])}"


def _iceberg_literal(value: Any) -> IcebergLiteral[Any]:
    """`value` as an Iceberg literal, converted as pyiceberg's predicates convert a bare value."""
    return value if isinstance(value, IcebergLiteral) else iceberg_literal(value)


@dataclass(frozen=True)
class _Junction:
    op: str  # AND, OR
    parts: tuple

    def to_iceberg(self) -> BooleanExpression:
        return reduce(And if self.op == "AND" else Or, [p.to_iceberg() for p in self.parts])

    def render(self) -> str:
        return f" {self.op} ".join(f"({p.render()})" if isinstance(p, _Junction) else p.render() for p in self.parts)


_Expr = _Pred | _Junction


def _junction(op: str, parts: list) -> _Expr | None:
    unique = list(dict.fromkeys(p for p in parts if p is not None))
    flat: list[_Expr] = []
    for p in unique:
        flat.extend(p.parts if isinstance(p, _Junction) and p.op == op else [p])
    if not flat:
        return None
    return flat[0] if len(flat) == 1 else _Junction(op, tuple(flat))


def _render_value(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")
        return f"TIMESTAMPTZ '{text}'" if value.tzinfo else f"TIMESTAMP '{text}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return str(value)


_COMPARISONS = {
    "COMPARE_EQUAL": "=",
    "COMPARE_NOTEQUAL": "<>",
    "COMPARE_LESSTHAN": "<",
    "COMPARE_LESSTHANOREQUALTO": "<=",
    "COMPARE_GREATERTHAN": ">",
    "COMPARE_GREATERTHANOREQUALTO": ">=",
}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NEGATED = {"=": "<>", "<>": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_TEMPORAL_CASTS = {"DATE": "DATE", "TIMESTAMP": "TIMESTAMP", "DATETIME": "TIMESTAMP",
                   "TIMESTAMPTZ": "TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE": "TIMESTAMPTZ"}
_INT_RANGE = {IntegerType: (-(2**31), 2**31 - 1), LongType: (-(2**63), 2**63 - 1)}


def _constant(node: Any) -> tuple[str, Any] | None:
    """(kind, text) of a literal: kinds INTEGER, NUMERIC, STRING, BOOLEAN, NULL_LITERAL, or
    DATE / TIMESTAMP / TIMESTAMPTZ for a cast of a string literal (DATE '2025-01-02')."""
    if not isinstance(node, dict):
        return None
    if node.get("class") == "CONSTANT":
        literal = node.get("literal")
        if isinstance(literal, dict) and isinstance(literal.get("kind"), str):
            return literal["kind"], literal.get("text")
        value = node.get("value")  # the serialisation of older DuckDB versions
        if isinstance(value, dict):
            if value.get("is_null"):
                return "NULL_LITERAL", None
            type_id = (value.get("type") or {}).get("id")
            raw = value.get("value")
            if type_id in ("INTEGER", "BIGINT", "HUGEINT", "SMALLINT", "TINYINT") and type(raw) is int:
                return "INTEGER", str(raw)
            if type_id == "VARCHAR" and isinstance(raw, str):
                return "STRING", raw
            if type_id == "BOOLEAN" and isinstance(raw, bool):
                return "BOOLEAN", "true" if raw else "false"
        return None
    if node.get("class") == "CAST" and node.get("try_cast") is False:
        type_expr = node.get("type_expr")
        if isinstance(type_expr, dict):
            if type_expr.get("children") or type_expr.get("schema") or type_expr.get("catalog"):
                return None
            type_name = str(type_expr.get("type_name", "")).upper()
        elif isinstance(node.get("cast_type"), dict):
            type_name = str(node["cast_type"].get("id", "")).upper()
        else:
            return None
        target = _TEMPORAL_CASTS.get(type_name)
        child = _constant(node.get("child"))
        if target and child and child[0] == "STRING" and isinstance(child[1], str):
            return target, child[1]
    return None


_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?)?"
)


def _parse_date(text: str) -> dt.date | None:
    match = _DATE.fullmatch(text)
    if not match:
        return None
    try:
        return dt.date(*(int(g) for g in match.groups()))
    except ValueError:
        return None


def _parse_timestamp(text: str) -> tuple[dt.datetime, bool] | None:
    """(naive datetime in its own zone converted to UTC when an offset is given, has_offset)."""
    match = _TIMESTAMP.fullmatch(text)
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    try:
        moment = dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                             int((fraction or "0").ljust(6, "0")))
    except ValueError:
        return None
    if not offset:
        return moment, False
    if offset == "Z":
        return moment.replace(tzinfo=UTC), True
    sign = 1 if offset[0] == "+" else -1
    digits = offset[1:].replace(":", "")
    delta = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
    if delta >= dt.timedelta(hours=16):
        return None
    return moment.replace(tzinfo=dt.timezone(sign * delta)).astimezone(UTC), True


def _value_for(literal: tuple[str, Any] | None, column_type: IcebergType) -> tuple[bool, Any]:
    """(ok, value): the literal as a value of the column's type, exactly as DuckDB compares them."""
    if literal is None:
        return False, None
    kind, text = literal
    if not isinstance(text, str):
        return False, None
    if isinstance(column_type, (IntegerType, LongType)):
        if kind != "INTEGER":
            return False, None
        try:
            value = int(text)
        except ValueError:
            return False, None
        low, high = _INT_RANGE[type(column_type)]
        return (low <= value <= high), value
    if isinstance(column_type, StringType):
        return kind == "STRING", text
    if isinstance(column_type, BooleanType):
        if kind == "BOOLEAN" and text.lower() in ("true", "false"):
            return True, text.lower() == "true"
        return False, None
    if isinstance(column_type, DecimalType):
        if kind not in ("INTEGER", "NUMERIC") or not re.fullmatch(r"-?\d+(\.\d+)?", text):
            return False, None
        try:
            number = Decimal(text)
            exact = number.quantize(Decimal(1).scaleb(-column_type.scale))
        except InvalidOperation:
            return False, None
        if exact != number or len(exact.as_tuple().digits) > column_type.precision:
            return False, None
        return True, exact
    if isinstance(column_type, DateType):
        if kind in ("STRING", "DATE"):
            day = _parse_date(text)
            return day is not None, day
        if kind == "TIMESTAMP":
            parsed = _parse_timestamp(text)
            if parsed and not parsed[1] and parsed[0].time() == dt.time(0):
                return True, parsed[0].date()
        return False, None
    if isinstance(column_type, (TimestampType, TimestamptzType)):
        aware = isinstance(column_type, TimestamptzType)
        if kind == "DATE":
            day = _parse_date(text)
            if day is None:
                return False, None
            moment = dt.datetime.combine(day, dt.time(0))
            return True, moment.replace(tzinfo=UTC) if aware else moment
        if kind in ("STRING", "TIMESTAMP", "TIMESTAMPTZ"):
            parsed = _parse_timestamp(text)
            if parsed is None:
                return False, None
            moment, has_offset = parsed
            if has_offset and not (aware and kind in ("STRING", "TIMESTAMPTZ")):
                return False, None
            if kind == "TIMESTAMPTZ" and not aware:
                return False, None
            if aware and moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return True, moment
        return False, None
    return False, None


@dataclass
class _Relation:
    """One relation of a FROM clause."""

    binding: str | None  # lower-cased name its columns are qualified with
    columns: dict[str, tuple[str, IcebergType, int]] | None  # lower name -> (name, type, field id); None: unknown
    table: str | None = None  # the namespace table it reads
    pushable: bool = False  # WHERE predicates on it may filter its rows before the FROM
    allowed: set[int] | None = None  # field ids predicates may use; None: all
    node: dict | None = None


class _Analyzer:
    def __init__(self, statements: list[dict], schemas: dict[str, Schema], namespace: str,
                 pushable_columns: dict[str, set[int]]) -> None:
        self.statements = statements
        self.schemas = {name.lower(): (name, schema) for name, schema in schemas.items()}
        self.namespace = namespace.lower()
        self.pushable_columns = pushable_columns
        self.ctes = _cte_names(statements)
        self.filters: dict[str, list[_Expr | None]] = {}  # per table: one entry per place it is read
        self.all_columns: set[str] = set()
        self.every_column = False
        self.names_used: set[str] = set()  # every part of every column reference
        self.single_names: set[str] = set()  # one-part column references (t in SELECT t FROM t)
        self.bindings: dict[str, set[str]] = {}  # table -> the names it is known by
        self.handled: set[int] = set()

    def run(self) -> dict[str, Pushdown]:
        for node in _walk(self.statements):
            kind = node.get("type")
            if kind == "SELECT_NODE":
                self._select(node)
            elif kind == "COLUMN_REF":
                parts = [str(n).lower() for n in node.get("column_names") or []]
                self.names_used |= set(parts)
                if len(parts) == 1:
                    self.single_names |= set(parts)
            elif kind in ("STAR", "COLUMNS") and id(node) not in self.handled:
                self.every_column = True  # a star outside any select list: be safe
            elif kind == "POSITIONAL_REFERENCE":  # SELECT #1 FROM t
                self.every_column = True
            elif kind == "JOIN":
                if node.get("ref_type") == "NATURAL":
                    self.every_column = True
                self.names_used |= {str(n).lower() for n in node.get("using_columns") or []}
            elif kind == "TABLE_FUNCTION":
                # query('SELECT ... FROM t') and query_table('t') name tables in strings.
                function = node.get("function") or {}
                if str(function.get("function_name", "")).lower() in ("query", "query_table"):
                    by_lower = {key: name for key, (name, _) in self.schemas.items()}
                    for text in _string_constants(function):
                        for table in _tokenized_tables(text, by_lower):
                            self._read_whole(table)
        for node in _walk(self.statements):
            # A namespace table outside the FROM clauses handled above: read it whole.
            if node.get("type") == "BASE_TABLE" and id(node) not in self.handled:
                looked_up = self._lookup(node)
                if looked_up:
                    self._read_whole(looked_up)
        for table, bindings in self.bindings.items():
            # A whole-row reference (SELECT t FROM t, to_json(t)) needs every column.
            if bindings & self.single_names:
                self.all_columns.add(table)

        result = {}
        for table, refs in self.filters.items():
            predicate = None if any(r is None for r in refs) else _junction("OR", list(refs))
            if self.every_column or table in self.all_columns:
                columns = None
            else:
                _, schema = self.schemas[table.lower()]
                columns = frozenset(f.name.lower() for f in schema.fields if f.name.lower() in self.names_used)
            result[table] = Pushdown(predicate, columns)
        return result

    def _read_whole(self, table: str) -> None:
        self.filters.setdefault(table, []).append(None)
        self.all_columns.add(table)

    def _lookup(self, node: dict) -> str | None:
        """The namespace table a BASE_TABLE names, if any."""
        if node.get("catalog_name"):
            return None
        schema = str(node.get("schema_name") or "").lower()
        table = str(node.get("table_name") or "").lower()
        if (schema and schema != self.namespace) or table not in self.schemas:
            return None
        return self.schemas[table][0]

    def _select(self, node: dict) -> None:
        relations: list[_Relation] = []
        self._flatten(node.get("from_table"), True, relations)
        for star in _own_nodes(node):
            if star.get("type") in ("STAR", "COLUMNS"):
                # A star expands the relations of its own FROM clause: every column of the
                # tables there (of the one named, for t.*). Stars over subqueries and CTEs
                # only expand columns named inside them, which are counted there.
                self.handled.add(id(star))
                qualifier = str(star.get("relation_name") or "").lower()
                for relation in relations:
                    if relation.table and (not qualifier or qualifier == relation.binding):
                        self.all_columns.add(relation.table)
        where = node.get("where_clause")
        conjuncts = _conjuncts(where) if isinstance(where, dict) else []
        for relation in relations:
            if relation.table is None:
                continue
            expr = None
            if relation.pushable and conjuncts:
                expr = _junction("AND", [self._convert(c, relation, relations) for c in conjuncts])
            self.filters.setdefault(relation.table, []).append(expr)

    def _flatten(self, ref: Any, pushable: bool, out: list[_Relation]) -> None:
        if not isinstance(ref, dict):
            return
        kind = ref.get("type")
        alias = str(ref.get("alias") or "").lower() or None
        if kind == "BASE_TABLE":
            binding = alias or str(ref.get("table_name") or "").lower()
            table = self._lookup(ref)
            if table is None:
                out.append(_Relation(binding, None, node=ref))
                return
            self.handled.add(id(ref))
            if ref.get("at_clause"):
                raise ValueError(f"{table}: AT (...) clauses are not supported; use as_of (--as-of) to time travel")
            if not ref.get("schema_name") and table.lower() in self.ctes:
                # The name may mean a CTE of the same name: its columns are unknown here.
                self._read_whole(table)
                out.append(_Relation(binding, None, node=ref))
                return
            renamed = bool(ref.get("column_name_alias"))
            if renamed:
                self.all_columns.add(table)  # FROM t AS x(a, b) renames columns by position
            self.bindings.setdefault(table, set()).add(binding)
            _, schema = self.schemas[table.lower()]
            columns = {f.name.lower(): (f.name, f.field_type, f.field_id) for f in schema.fields}
            out.append(_Relation(binding, columns, table, pushable and not renamed and not ref.get("sample"),
                                 self.pushable_columns.get(table), ref))
        elif kind == "JOIN":
            left_ok, right_ok = _join_sides(ref)
            self._flatten(ref.get("left"), pushable and left_ok, out)
            self._flatten(ref.get("right"), pushable and right_ok, out)
        else:
            name = alias
            if name is None and kind == "TABLE_FUNCTION":
                name = str((ref.get("function") or {}).get("function_name") or "").lower() or None
            out.append(_Relation(name, None, node=ref))

    # -- predicates ---------------------------------------------------------------------

    def _column(self, node: Any, relation: _Relation, relations: list[_Relation]) -> tuple[str, IcebergType] | None:
        """The relation's column a COLUMN_REF certainly means, if it is a plain top-level one."""
        if not isinstance(node, dict) or node.get("class") != "COLUMN_REF":
            return None
        names = [str(n).lower() for n in node.get("column_names") or []]
        assert relation.columns is not None
        if len(names) == 1:
            (name,) = names
            if name not in relation.columns:
                return None
            for other in relations:
                if other is not relation and (other.columns is None or name in other.columns):
                    return None
        elif len(names) == 2:
            qualifier, name = names
            if qualifier != relation.binding or name not in relation.columns:
                return None
            if sum(1 for r in relations if r.binding == qualifier) != 1:
                return None
        else:
            return None
        column, column_type, field_id = relation.columns[name]
        if relation.allowed is not None and field_id not in relation.allowed:
            return None
        return column, column_type

    def _operand(self, node: Any, relation: _Relation, relations: list[_Relation]):
        """('col', name, type) for a column, ('day', name, type) for CAST(timestamp AS DATE)."""
        column = self._column(node, relation, relations)
        if column:
            return ("col", *column)
        if (isinstance(node, dict) and node.get("class") == "CAST" and node.get("try_cast") is False
                and str((node.get("type_expr") or {}).get("type_name", "")).upper() == "DATE"
                and not (node.get("type_expr") or {}).get("children")):
            column = self._column(node.get("child"), relation, relations)
            if column and isinstance(column[1], (TimestampType, TimestamptzType)):
                return ("day", *column)
        return None

    def _convert(self, node: Any, relation: _Relation, relations: list[_Relation]) -> _Expr | None:
        if not isinstance(node, dict):
            return None
        kind = node.get("type")
        if kind == "CONJUNCTION_AND":
            # Any subset of the conjuncts is implied by them all.
            return _junction("AND", [self._convert(c, relation, relations) for c in node.get("children") or []])
        if kind == "CONJUNCTION_OR":
            parts = [self._convert(c, relation, relations) for c in node.get("children") or []]
            return None if not parts or any(p is None for p in parts) else _junction("OR", parts)
        if kind in _COMPARISONS:
            return self._comparison(node.get("left"), _COMPARISONS[kind], node.get("right"), relation, relations)
        if kind == "COMPARE_BETWEEN":
            low = self._comparison(node.get("input"), ">=", node.get("lower"), relation, relations)
            high = self._comparison(node.get("input"), "<=", node.get("upper"), relation, relations)
            return _junction("AND", [low, high])
        if kind == "COMPARE_IN":
            return self._in(node.get("children") or [], False, relation, relations)
        if kind in ("OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"):
            children = node.get("children") or []
            column = self._column(children[0], relation, relations) if len(children) == 1 else None
            if column is None:
                return None
            return _Pred(column[0], "is null" if kind == "OPERATOR_IS_NULL" else "is not null")
        if kind == "OPERATOR_NOT":
            children = node.get("children") or []
            if len(children) != 1 or not isinstance(children[0], dict):
                return None
            inner = children[0]
            inner_kind = inner.get("type")
            if inner_kind == "COMPARE_IN":
                return self._in(inner.get("children") or [], True, relation, relations)
            if inner_kind in _COMPARISONS:
                return self._comparison(inner.get("left"), _NEGATED[_COMPARISONS[inner_kind]], inner.get("right"),
                                        relation, relations)
            if inner_kind == "COMPARE_BETWEEN":
                low = self._comparison(inner.get("input"), "<", inner.get("lower"), relation, relations)
                high = self._comparison(inner.get("input"), ">", inner.get("upper"), relation, relations)
                return None if low is None or high is None else _junction("OR", [low, high])
            return None
        if kind == "COLUMN_REF":
            column = self._column(node, relation, relations)
            if column and isinstance(column[1], BooleanType):
                return _Pred(column[0], "=", (True,))
        return None

    def _comparison(self, left: Any, op: str, right: Any, relation: _Relation,
                    relations: list[_Relation]) -> _Expr | None:
        operand = self._operand(left, relation, relations)
        literal = right
        if operand is None:
            operand, literal, op = self._operand(right, relation, relations), left, _FLIPPED[op]
        if operand is None:
            return None
        form, column, column_type = operand
        if form == "day":
            ok, day = _value_for(_constant(literal), DateType())
            return _day_range(column, column_type, op, day) if ok else None
        if isinstance(column_type, BooleanType) and op not in ("=", "<>"):
            return None
        ok, value = _value_for(_constant(literal), column_type)
        return _Pred(column, op, (value,)) if ok else None

    def _in(self, children: list, negated: bool, relation: _Relation, relations: list[_Relation]) -> _Expr | None:
        if len(children) < 2:
            return None
        operand = self._operand(children[0], relation, relations)
        if operand is None:
            return None
        form, column, column_type = operand
        values = []
        for child in children[1:]:
            ok, value = _value_for(_constant(child), DateType() if form == "day" else column_type)
            if not ok:
                return None
            values.append(value)
        if form == "day":
            ranges = [_day_range(column, column_type, "<>" if negated else "=", v) for v in values]
            return _junction("AND" if negated else "OR", ranges)
        return _Pred(column, "not in" if negated else "in", tuple(dict.fromkeys(values)))


def _day_range(column: str, column_type: IcebergType, op: str, day: dt.date) -> _Expr | None:
    """CAST(ts AS DATE) <op> day, as a range of ts (the session's time zone is UTC)."""
    start = dt.datetime.combine(day, dt.time(0))
    try:
        end = start + dt.timedelta(days=1)
    except OverflowError:
        return None
    if isinstance(column_type, TimestamptzType):
        start, end = start.replace(tzinfo=UTC), end.replace(tzinfo=UTC)
    if op == "=":
        return _Junction("AND", (_Pred(column, ">=", (start,)), _Pred(column, "<", (end,))))
    if op == "<>":
        return _Junction("OR", (_Pred(column, "<", (start,)), _Pred(column, ">=", (end,))))
    return {
        "<": _Pred(column, "<", (start,)),
        "<=": _Pred(column, "<", (end,)),
        ">": _Pred(column, ">=", (end,)),
        ">=": _Pred(column, ">=", (start,)),
    }[op]


def _own_nodes(select: dict):
    """The nodes of a SELECT_NODE that are not part of a nested SELECT_NODE."""
    stack = [v for v in select.values() if isinstance(v, (dict, list))]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))
        elif isinstance(item, dict) and item.get("type") != "SELECT_NODE":
            yield item
            stack.extend(v for v in item.values() if isinstance(v, (dict, list)))


def _conjuncts(node: dict) -> list[dict]:
    if node.get("type") == "CONJUNCTION_AND":
        return [c for child in node.get("children") or [] if isinstance(child, dict) for c in _conjuncts(child)]
    return [node]


def _join_sides(join: dict) -> tuple[bool, bool]:
    """Which sides of a join WHERE predicates may filter before the join.

    Never the side an outer join pads with NULLs (WHERE b.x IS NULL would change), and
    never through ASOF or POSITIONAL joins, where the rows a row meets depend on the others.
    """
    if join.get("ref_type") not in ("REGULAR", "CROSS", "NATURAL"):
        return False, False
    return {
        "INNER": (True, True),
        "LEFT": (True, False),
        "RIGHT": (False, True),
        "SEMI": (True, False),
        "ANTI": (True, False),
    }.get(str(join.get("join_type")), (False, False))
