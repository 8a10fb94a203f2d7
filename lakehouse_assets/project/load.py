"""Reading a `lakehouse.yaml`: every mistake is reported with its file, line and reason.

    from lakehouse_assets.project import load_project
    project = load_project("examples/shop/lakehouse.yaml")
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace as dataclass_replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pyspark.sql import types as T

from ..errors import DeclarationError
from ..settings import validate_identifier
from ..tables.registry import transform_column
from ..tables.types import is_numeric, spark_type
from .declaration import (
    CdcSourceDecl,
    CdcTableDecl,
    EventSourceDecl,
    FieldDecl,
    FreshnessDecl,
    GoldDecl,
    LandingDecl,
    MaintenanceDecl,
    ProjectDecl,
    RuleDecl,
    SqlTableDecl,
    TableMaintenanceDecl,
    ValueCheck,
)
from .model import (
    GOLD_EVENT_TABLES,
    INGEST_LOG,
    MAX_LATENESS,
    ROUNDINGS,
    Capture,
    CdcTable,
    EventSource,
    Freshness,
    Gold,
    LandingPolicy,
    Maintenance,
    Project,
    SqlTable,
    TablePolicy,
)
from .yaml_lines import line_of, load_yaml

_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_duration(text: str) -> dt.timedelta:
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a duration: write e.g. 90s, 5m, 1h or 2d")
    return dt.timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})


class _Checker:
    """Cross-reference checks over one document, raising with the line of the offending value."""

    def __init__(self, file: str, document: Any):
        self.file, self.document = file, document

    def fail(self, path: tuple[Any, ...], reason: str) -> None:
        raise DeclarationError(self.file, line_of(self.document, path), reason)

    def identifier(self, path: tuple[Any, ...], name: str, what: str) -> None:
        try:
            validate_identifier(name, what)
        except ValueError as exc:
            self.fail(path, str(exc))

    def type(self, path: tuple[Any, ...], name: str) -> T.DataType:
        try:
            return spark_type(name)
        except ValueError as exc:
            self.fail(path, str(exc))
            raise  # unreachable: fail raises

    def duration(self, path: tuple[Any, ...], text: str) -> dt.timedelta:
        try:
            return parse_duration(text)
        except ValueError as exc:
            self.fail(path, str(exc))
            raise

    def member(self, path: tuple[Any, ...], name: str | None, known: dict | list, what: str, owner: str) -> None:
        if name is not None and name not in known:
            self.fail(path, f"{what} {name!r} is not among the {owner}: {', '.join(known) or 'none'}")

    def regex(self, path: tuple[Any, ...], pattern: str) -> None:
        try:
            re.compile(pattern)
        except re.error as exc:
            self.fail(path, f"{pattern!r} is not a valid regular expression: {exc}")

    def freshness(self, path: tuple[Any, ...], value: str | FreshnessDecl | None) -> Freshness | None:
        if value is None:
            return None
        if isinstance(value, str):
            return Freshness(self.duration(path, value))
        fail = self.duration((*path, "fail"), value.fail)
        warn = self.duration((*path, "warn"), value.warn) if value.warn else None
        if fail < dt.timedelta(minutes=1) or (warn is not None and warn >= fail):
            self.fail(path, "freshness windows must be at least 1m, and warn shorter than fail")
        return Freshness(fail, warn)

    def checks(self, path: tuple[Any, ...], checks: dict[str, ValueCheck], columns: dict[str, T.DataType],
               owner: str) -> None:
        for column, check in checks.items():
            self.member((*path, column), column, columns, "checked column", owner)
            if (check.min is not None or check.max is not None) and not is_numeric(columns[column]):
                self.fail((*path, column), f"min/max need a numeric column; {column} is "
                                           f"{columns[column].simpleString()}")
            if check.matches is not None:
                self.regex((*path, column, "matches"), check.matches)
            for n, value in enumerate(check.in_ or []):
                self.literal((*path, column, "in", n), value, columns[column], f"check on {column}: in")

    def literal(self, path: tuple[Any, ...], value: Any, dtype: T.DataType, what: str) -> None:
        """A value compared with a field is of the field's type. Spark would cast it otherwise, and under ANSI
        mode a text that does not cast (one compared with a number, say) fails the whole run."""
        if not _literal_fits(value, dtype):
            self.fail(path, f"{what} {value!r} is not a {dtype.simpleString()}, the type it is compared with")


# Lineage columns bronze adds to every event row (and to a topic's rows, the record's key and time): a declared
# field cannot take their names.
_LINEAGE_COLUMNS = ("source_file", "source_line", "landing_date", "payload", "ingested_at", "run_id")
_RECORD_COLUMNS = ("source_key", "source_time")


def _event_source(c: _Checker, name: str, decl: EventSourceDecl) -> EventSource:
    path = ("events", name)
    c.identifier(path, name, "event source name")
    fields, paths = _event_fields(c, path, decl)
    renamed = _renames(c, path, "fields", {f: s.renamed_from for f, s in decl.fields.items()
                                           if isinstance(s, FieldDecl) and s.renamed_from}, fields)
    _check_event_roles(c, path, name, decl, fields)
    _check_rules(c, path, name, decl, fields)
    c.checks((*path, "checks"), decl.checks, fields, f"fields of event source {name}")

    # Key and timestamp are always required: without them an event cannot be placed or deduplicated.
    required = tuple(dict.fromkeys([decl.key, decl.timestamp, *decl.required]))
    landing = decl.landing or name
    topic = decl.kafka.topic if decl.kafka is not None else None
    if topic is not None and not _KAFKA_TOPIC.match(topic):
        c.fail((*path, "kafka", "topic"), f"{topic!r} is not a Kafka topic name (letters, digits, '.', '_' and '-', "
                                          "at most 249)")
    return EventSource(
        name=name, landing=landing, description=decl.description or f"Behavioural events of source {name}.",
        fields=fields, paths=paths, required=required, key=decl.key, timestamp=decl.timestamp,
        user=decl.user, session=decl.session, event_type=decl.event_type,
        event_types=tuple(decl.event_types) if decl.event_types is not None else None,
        pii=tuple(decl.pii), rules=tuple(decl.rules), checks=dict(decl.checks), late_days=decl.late_days,
        max_lateness=parse_duration(decl.max_lateness) if decl.max_lateness is not None else None,
        renamed=renamed, topic=topic,
    )


_KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _event_fields(c: _Checker, path: tuple[Any, ...],
                  decl: EventSourceDecl) -> tuple[dict[str, T.DataType], dict[str, str]]:
    """Each field's type, and where in the JSON event it is read from (its own name unless `path` says)."""
    fields: dict[str, T.DataType] = {}
    paths: dict[str, str] = {}
    for field_name, spec in decl.fields.items():
        c.identifier((*path, "fields", field_name), field_name, "field name")
        if field_name in _LINEAGE_COLUMNS or (decl.kafka is not None and field_name in _RECORD_COLUMNS):
            c.fail((*path, "fields", field_name), f"field name {field_name!r} is reserved for lineage columns")
        type_name = spec.type if isinstance(spec, FieldDecl) else spec
        fields[field_name] = c.type((*path, "fields", field_name), type_name)
        paths[field_name] = (spec.path if isinstance(spec, FieldDecl) and spec.path else field_name)
    return fields, paths


def _check_event_roles(c: _Checker, path: tuple[Any, ...], name: str, decl: EventSourceDecl,
                       fields: dict[str, T.DataType]) -> None:
    """The fields named as key, timestamp, user, session, event type, required or pii are declared and fit."""
    owner = f"fields of event source {name}"
    for key in ("key", "timestamp", "user", "session", "event_type"):
        c.member((*path, key), getattr(decl, key), fields, key, owner)
    if not isinstance(fields[decl.timestamp], T.TimestampType):
        c.fail((*path, "timestamp"), f"timestamp field {decl.timestamp!r} must have type timestamp")
    if not isinstance(fields[decl.key], (T.StringType, T.LongType, T.IntegerType)):
        c.fail((*path, "key"), f"key field {decl.key!r} must be a string, int or long")
    for n, f in enumerate(decl.required):
        c.member((*path, "required", n), f, fields, "required field", owner)
    for n, f in enumerate(decl.pii):
        c.member((*path, "pii", n), f, fields, "pii field", owner)
        if f in (decl.key, decl.timestamp):
            c.fail((*path, "pii", n), f"{f!r} is the key or timestamp: it cannot be pseudonymised")
    if decl.event_types is not None and decl.event_type is None:
        c.fail((*path, "event_types"), "event_types (a closed vocabulary) needs event_type: the field holding it")


def _check_rules(c: _Checker, path: tuple[Any, ...], name: str, decl: EventSourceDecl,
                 fields: dict[str, T.DataType]) -> None:
    """Each quarantine rule has a unique name, reads declared fields and tests exactly one thing;
    max_lateness is a duration and no rule takes its name."""
    rule_names: set[str] = set()
    for n, rule in enumerate(decl.rules):
        rpath = (*path, "rules", n)
        c.identifier((*rpath, "name"), rule.name, "rule name")
        if rule.name in rule_names:
            c.fail((*rpath, "name"), f"rule {rule.name!r} is declared twice")
        rule_names.add(rule.name)
        _check_rule_field(c, (*rpath, "field"), rule.field, fields, name)
        for other in rule.when:
            _check_rule_field(c, (*rpath, "when", other), other, fields, name)
        predicates = rule.predicates()
        if len(predicates) != 1:
            c.fail(rpath, f"rule {rule.name!r} needs exactly one of matches, in, not_in, below, above, missing, "
                          f"later_than_ingestion_by (it has {len(predicates)})")
        if rule.matches is not None:
            c.regex((*rpath, "matches"), rule.matches)
        if rule.later_than_ingestion_by is not None:
            c.duration((*rpath, "later_than_ingestion_by"), rule.later_than_ingestion_by)
        _check_rule_types(c, rpath, rule, fields)
    if decl.max_lateness is not None:
        c.duration((*path, "max_lateness"), decl.max_lateness)
        if MAX_LATENESS in rule_names:
            c.fail((*path, "max_lateness"), f"rule name {MAX_LATENESS!r} is taken by max_lateness: rename the rule")


def _renames(c: _Checker, path: tuple[Any, ...], key: str, renames: dict[str, str],
             names: dict[str, Any]) -> dict[str, str]:
    """Declared renames (name -> former name): each of a declared name, from a name no longer declared, once."""
    for new, old in renames.items():
        where = (*path, key, new) if key == "fields" else (*path, "renamed_from", new)
        c.identifier(where, old, "former name")
        if new not in names:
            c.fail(where, f"{new!r} is renamed but not declared")
        elif old in names:
            c.fail(where, f"{new!r} is renamed from {old!r}, which is still declared: drop it from the "
                          "declaration, or rename from a name that is gone")
    formers = list(renames.values())
    for old in {o for o in formers if formers.count(o) > 1}:
        c.fail((*path, key), f"two names are renamed from {old!r}")
    return dict(renames)


def _check_rule_field(c: _Checker, path: tuple[Any, ...], name: str, fields: dict[str, T.DataType],
                      source: str) -> None:
    """A rule reads a declared field, or `<map field>.<key>` inside a map field."""
    base, _, key = name.partition(".")
    if base not in fields:
        c.fail(path, f"rule field {name!r} is not among the fields of event source {source}: {', '.join(fields)}")
    if key and not isinstance(fields[base], T.MapType):
        c.fail(path, f"rule field {name!r}: only a map field can be read by key ({base} is "
                     f"{fields[base].simpleString()})")


def _rule_field_type(fields: dict[str, T.DataType], name: str) -> T.DataType:
    """The type of what a rule reads: a field's, or for `<map field>.<key>` the map's values' (text)."""
    base, _, key = name.partition(".")
    dtype = fields[base]
    return dtype.valueType if key and isinstance(dtype, T.MapType) else dtype


def _check_rule_types(c: _Checker, rpath: tuple[Any, ...], rule: RuleDecl, fields: dict[str, T.DataType]) -> None:
    """A rule compares its field with values of the field's type: `below`/`above` read a number and
    `later_than_ingestion_by` a time (a map's text value is read as one, null where it is not: silver/events.py),
    `in`/`not_in`/`when` list values of the field's type. Under ANSI mode Spark casts text compared with a number
    (or a time) to it, and one value that does not cast would fail the whole run."""
    dtype = _rule_field_type(fields, rule.field)
    map_text = "." in rule.field and isinstance(dtype, T.StringType)
    for bound in ("below", "above"):
        if getattr(rule, bound) is not None and not (is_numeric(dtype) or map_text):
            c.fail((*rpath, bound), f"rule {rule.name!r}: {bound} needs a numeric field; {rule.field} is "
                                    f"{dtype.simpleString()}")
    if rule.later_than_ingestion_by is not None and not (
            isinstance(dtype, (T.TimestampType, T.DateType)) or map_text):
        c.fail((*rpath, "later_than_ingestion_by"), f"rule {rule.name!r}: later_than_ingestion_by needs a timestamp "
                                                    f"or date field; {rule.field} is {dtype.simpleString()}")
    for key, values in (("in", rule.in_), ("not_in", rule.not_in)):
        for n, value in enumerate(values or []):
            c.literal((*rpath, key, n), value, dtype, f"rule {rule.name!r}: {key} value")
    for field, value in rule.when.items():
        c.literal((*rpath, "when", field), value, _rule_field_type(fields, field),
                  f"rule {rule.name!r}: when {field} is")


_ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}([.]\d{1,6})?)?)?$")


def _literal_fits(value: Any, dtype: T.DataType) -> bool:
    """Whether a declared value is of `dtype` as Spark compares it: text for text, a number for a number, true
    or false for a boolean, a day (or its ISO text) for a date, a day or time for a timestamp; null fits any."""
    if value is None:
        return True
    if isinstance(dtype, T.StringType):
        return isinstance(value, str)
    if isinstance(dtype, T.BooleanType):
        return isinstance(value, bool)
    if is_numeric(dtype):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(dtype, (T.DateType, T.TimestampType)):
        day_only = isinstance(dtype, T.DateType)
        if isinstance(value, dt.date):
            return not (day_only and isinstance(value, dt.datetime))
        if not isinstance(value, str) or not (_ISO_DAY if day_only else _ISO_TIME).match(value):
            return False
        try:
            dt.datetime.fromisoformat(value)
        except ValueError:
            return False
        return True
    return False


def _cdc_tables(c: _Checker, source_name: str, decl: CdcSourceDecl) -> list[CdcTable]:
    c.identifier(("cdc", source_name), source_name, "CDC source name")
    # The server names the replication slot and the capture's state; the schema goes into Debezium's table filter.
    if decl.server is not None:
        c.identifier(("cdc", source_name, "server"), decl.server, "CDC server name")
    if decl.schema_ is not None:
        c.identifier(("cdc", source_name, "schema"), decl.schema_, "CDC schema name")
    return [_cdc_table(c, source_name, decl, name, t) for name, t in decl.tables.items()]


def _cdc_table(c: _Checker, source_name: str, decl: CdcSourceDecl, name: str, t: CdcTableDecl) -> CdcTable:
    path = ("cdc", source_name, "tables", name)
    c.identifier(path, name, "CDC table name")
    columns = _columns(c, path, t.columns)
    if not t.primary_key:
        c.fail((*path, "primary_key"), f"table {name}: a primary key is needed to apply changes")
    owner = f"columns of table {name}"
    for n, k in enumerate(t.primary_key):
        c.member((*path, "primary_key", n), k, columns, "primary key column", owner)
    for n, p in enumerate(t.pii):
        c.member((*path, "pii", n), p, columns, "pii column", owner)
        if p in t.primary_key:
            c.fail((*path, "pii", n), f"{p!r} is part of the primary key: it cannot be pseudonymised")
    c.checks((*path, "checks"), t.checks, columns, owner)
    _check_partition(c, path, t.partition or (), columns, owner)
    for column in t.references:
        c.member((*path, "references", column), column, columns, "referencing column", owner)
    renamed = _renames(c, path, "renamed_from", dict(t.renamed_from), columns)
    c.member((*path, "subject"), t.subject, columns, "subject column", owner)
    _check_rounding(c, path, t.rounding, columns, owner)
    return CdcTable(
        name=name, connector=decl.connector, server=decl.server or source_name, database=decl.database,
        db_schema=decl.schema_ if decl.connector == "postgresql" else None,
        primary_key=tuple(t.primary_key), columns=dict(t.columns), description=t.description,
        pii=tuple(t.pii), checks=dict(t.checks),
        references={col: tuple(target.split(".", 1)) for col, target in t.references.items()},  # type: ignore[misc]
        partition=tuple(t.partition) if t.partition else (f"bucket(8, {t.primary_key[0]})",),
        write_mode=t.write_mode, decimal_handling_mode=decl.decimal_handling_mode,
        time_precision_mode=decl.time_precision_mode, source=source_name,
        subject=t.subject, rounding=dict(t.rounding), renamed=renamed, on_kafka=decl.kafka,
    )


def _columns(c: _Checker, path: tuple[Any, ...], declared: dict[str, str]) -> dict[str, T.DataType]:
    """Each declared column's Spark type; names and types checked."""
    columns = {}
    for column, type_name in declared.items():
        c.identifier((*path, "columns", column), column, "column name")
        columns[column] = c.type((*path, "columns", column), type_name)
    return columns


def _check_partition(c: _Checker, path: tuple[Any, ...], transforms: list[str] | tuple[()], columns: dict[str, T.DataType],
                     owner: str) -> None:
    """Each partition transform (e.g. `day(created_at)`) is known and reads a declared column."""
    for n, transform in enumerate(transforms):
        try:
            source_column = transform_column(transform)
        except ValueError as exc:
            c.fail((*path, "partition", n), str(exc))
        c.member((*path, "partition", n), source_column, columns, "partition column", owner)


def _check_rounding(c: _Checker, path: tuple[Any, ...], rounding: dict[str, str], columns: dict[str, T.DataType],
                    owner: str) -> None:
    """Only declared decimal columns are rounded, each by a known rounding."""
    for column, how in rounding.items():
        c.member((*path, "rounding", column), column, columns, "rounded column", owner)
        if not isinstance(columns[column], T.DecimalType):
            c.fail((*path, "rounding", column), f"only a decimal column is rounded; {column} is "
                                                 f"{columns[column].simpleString()}")
        if how not in ROUNDINGS:
            c.fail((*path, "rounding", column), f"rounding {how!r} of {column} is not known: write half_up "
                                                 "(half away from zero), or leave the column out to quarantine "
                                                 "values with more scale than declared")


def _gold(c: _Checker, decl: GoldDecl, events: dict[str, EventSource], known_tables: list[str]) -> Gold:
    source = _gold_source(c, decl, events)
    fields = source.fields if source else {}
    owner = f"fields of event source {source.name}" if source else "fields (no event source)"
    purchase_type, amount = _purchase(c, decl, source, fields, owner)
    _check_funnel(c, decl, source)
    session_field = source.session if source else None
    inactivity = dt.timedelta(minutes=30)
    if decl.sessions is not None:
        c.member(("gold", "sessions", "field"), decl.sessions.field, fields, "session field", owner)
        session_field = decl.sessions.field
        inactivity = c.duration(("gold", "sessions", "inactivity"), decl.sessions.inactivity)

    freshness = dict(GOLD_EVENT_TABLES) if source else {}
    for table, value in decl.freshness.items():
        c.member(("gold", "freshness", table), table, freshness, "freshness of table", "event gold tables")
        freshness[table] = c.freshness(("gold", "freshness", table), value)  # type: ignore[assignment]

    readable = [*known_tables, *decl.tables]
    sql_tables = {name: _sql_table(c, name, t, readable) for name, t in decl.tables.items()}
    return Gold(events=source, purchase_type=purchase_type, amount=amount, funnel=tuple(decl.funnel),
                session_field=session_field, inactivity=inactivity, freshness=freshness, sql_tables=sql_tables)


def _gold_source(c: _Checker, decl: GoldDecl, events: dict[str, EventSource]) -> EventSource | None:
    """The event source gold reads: the one named, else the only one declared, else none."""
    if decl.events is not None:
        c.member(("gold", "events"), decl.events, events, "gold event source", "declared event sources")
        return events[decl.events]
    if len(events) > 1:
        c.fail(("gold",), f"several event sources ({', '.join(events)}): say which one gold reads (gold.events)")
    return next(iter(events.values()), None)


def _purchase(c: _Checker, decl: GoldDecl, source: EventSource | None, fields: dict[str, T.DataType],
              owner: str) -> tuple[str | None, str | None]:
    """The purchase event type and amount field, when declared: a known event type, a numeric field."""
    if decl.purchase is None:
        return None, None
    if source is None or source.event_type is None:
        c.fail(("gold", "purchase"), "purchase needs an event source with an event_type field")
    assert source is not None
    purchase_type, amount = decl.purchase.event_type, decl.purchase.amount
    if source.event_types is not None:
        c.member(("gold", "purchase", "event_type"), purchase_type, list(source.event_types),
                 "purchase event type", f"event_types of {source.name}")
    c.member(("gold", "purchase", "amount"), amount, fields, "purchase amount field", owner)
    if amount is not None and not is_numeric(fields[amount]):
        c.fail(("gold", "purchase", "amount"), f"purchase amount {amount!r} must be numeric")
    return purchase_type, amount


def _check_funnel(c: _Checker, decl: GoldDecl, source: EventSource | None) -> None:
    """A funnel needs an event type field, and its steps are among the declared event types (if declared)."""
    if not decl.funnel:
        return
    if source is None or source.event_type is None:
        c.fail(("gold", "funnel"), "a funnel needs an event source with an event_type field")
    assert source is not None
    if source.event_types is not None:
        for n, step in enumerate(decl.funnel):
            c.member(("gold", "funnel", n), step, list(source.event_types), "funnel step", f"event_types of {source.name}")


def _sql_table(c: _Checker, name: str, t: SqlTableDecl, readable: list[str]) -> SqlTable:
    """A gold table made by SQL: it reads declared tables other than itself, and is partitioned by its columns."""
    path = ("gold", "tables", name)
    c.identifier(path, name, "table name")
    columns = _columns(c, path, t.columns)
    for n, table in enumerate(t.reads):
        c.member((*path, "reads", n), table, readable, "read table", "declared tables")
        if table == name:
            c.fail((*path, "reads", n), f"table {name} cannot read itself")
    for n, column in enumerate(t.partitioned_by):
        c.member((*path, "partitioned_by", n), column, columns, "partition column", f"columns of {name}")
    return SqlTable(
        name=name, description=t.description or f"Gold table {name}, recomputed from {', '.join(t.reads)}.",
        reads=tuple(t.reads), sql=t.sql, columns=dict(t.columns), partitioned_by=tuple(t.partitioned_by),
        freshness=c.freshness((*path, "freshness"), t.freshness),
    )


def _policy(c: _Checker, path: tuple[Any, ...], decl: TableMaintenanceDecl, base: TablePolicy) -> TablePolicy:
    """`base` with what `decl` sets; durations parsed, column names checked as identifiers."""
    values: dict[str, Any] = {}
    for name in ("target_file_size_mb", "max_small_files", "max_delete_ratio", "max_snapshots", "retain_last"):
        if getattr(decl, name) is not None:
            values[name] = getattr(decl, name)
    for name in ("snapshot_retention", "snapshot_detail", "orphan_after", "branch_retention"):
        if getattr(decl, name) is not None:
            values[name] = c.duration((*path, name), getattr(decl, name))
    if values.get("orphan_after", base.orphan_after) < dt.timedelta(hours=1):
        c.fail((*path, "orphan_after"), "orphan_after must be at least 1h: a file younger than that may belong to "
                                        "a write that has not committed yet")
    for name in ("sort_by", "zorder_by"):
        columns = getattr(decl, name)
        if columns is not None:
            for n, column in enumerate(columns):
                c.identifier((*path, name, n), column, f"{name} column")
            values[name] = tuple(columns)
    if decl.sort_by and decl.zorder_by:
        c.fail(path, "declare sort_by or zorder_by, not both")
    return dataclass_replace(base, **values)


def _maintenance(c: _Checker, decl: MaintenanceDecl, tables: list[str]) -> Maintenance:
    defaults = _policy(c, ("maintenance",), decl, TablePolicy())
    if defaults.sort_by or defaults.zorder_by:
        c.fail(("maintenance",), "sort_by and zorder_by name a table's columns: declare them under maintenance.tables")
    per_table = {}
    for name, table_decl in decl.tables.items():
        c.member(("maintenance", "tables", name), name, tables, "table", "declared tables")
        per_table[name] = _policy(c, ("maintenance", "tables", name), table_decl, defaults)
    interval = c.duration(("maintenance", "check_interval"), decl.check_interval)
    from dagster._utils.schedules import is_valid_cron_string  # Dagster's own reading of a cron string

    if not is_valid_cron_string(decl.nightly):
        c.fail(("maintenance", "nightly"), f"{decl.nightly!r} is not a cron expression (e.g. \"0 3 * * *\")")
    pin_retention = c.duration(("maintenance", "pin_retention"), decl.pin_retention)
    return Maintenance(defaults=defaults, tables=per_table, nightly=decl.nightly, check_interval=interval,
                       pin_retention=pin_retention)


def _pydantic_error(file: str, document: Any, exc: ValidationError) -> DeclarationError:
    error = exc.errors()[0]
    loc = tuple(error["loc"])
    where = ".".join(str(p) for p in loc) or "the document"
    kind = error["type"]
    if kind == "extra_forbidden":
        reason = f"unknown key {loc[-1]!r} at {'.'.join(str(p) for p in loc[:-1]) or 'the top level'}"
    elif kind == "missing":
        reason = f"{where}: required, but not given"
    else:
        reason = f"{where}: {error['msg']}"
    if any(str(p).endswith(")") and "(" not in str(p) for p in loc):
        reason += " (a type such as decimal(12,2) inside {...} must be quoted: YAML splits flow mappings at commas)"
    return DeclarationError(file, line_of(document, loc), reason)


def parse_project(text: str, file: str = "<declaration>") -> Project:
    """A project from the text of a declaration; `file` names it in errors."""
    document = load_yaml(text, file)
    if not isinstance(document, dict):
        raise DeclarationError(file, 1, "a declaration is a mapping with at least `name:`")
    try:
        decl = ProjectDecl.model_validate(document)
    except ValidationError as exc:
        raise _pydantic_error(file, document, exc) from None
    c = _Checker(file, document)
    c.identifier(("name",), decl.name, "project name")

    events = {name: _event_source(c, name, e) for name, e in decl.events.items()}
    cdc, cdc_paths, captures = _cdc_sources(c, decl)
    owners = _Owners(c)
    _check_landings(c, [*events.values(), *cdc.values()], cdc_paths, owners)
    _check_references(c, cdc, cdc_paths)
    gold = _gold(c, decl.gold, events, list(owners.paths))
    for name in [*gold.event_tables, *gold.ml_tables]:
        owners.claim(name, ("gold",))
    for name in gold.sql_tables:
        owners.claim(name, ("gold", "tables", name))

    generator = None
    if decl.generator:
        generator = (Path(file).parent / decl.generator).resolve()
        if not generator.is_file():
            c.fail(("generator",), f"generator {decl.generator!r} is not a file next to the declaration")
    return Project(
        name=decl.name, file=Path(file), description=decl.description,
        start_date=decl.start_date or dt.date(2025, 1, 1), generator=generator,
        events=events, cdc=cdc, gold=gold, captures=captures,
        maintenance=_maintenance(c, decl.maintenance, list(owners.paths)), landing=_landing(c, decl.landing),
    )


def _capture(c: _Checker, source_name: str, decl: CdcSourceDecl) -> Capture:
    """How `lakehouse capture` runs Debezium for a PostgreSQL source."""
    assert decl.capture is not None
    path: tuple[Any, ...] = ("cdc", source_name, "capture")
    if decl.connector != "postgresql":
        c.fail(path, "capture runs Debezium's PostgreSQL connector: a mysql source is captured by its own "
                     "Debezium deployment into the landing zone")
    cap = decl.capture
    return Capture(
        source=source_name, until_idle=c.duration((*path, "until_idle"), cap.until_idle),
        max_duration=c.duration((*path, "max_duration"), cap.max_duration), schedule=cap.schedule,
        max_retained_wal_bytes=cap.max_retained_wal_mb << 20,
    )


def _cdc_sources(c: _Checker, decl: ProjectDecl) -> tuple[dict[str, CdcTable], dict[str, tuple[Any, ...]],
                                                         dict[str, Capture]]:
    """The CDC tables of every source by name and where each is declared (a name is used once), and the
    captures declared."""
    cdc: dict[str, CdcTable] = {}
    cdc_paths: dict[str, tuple[Any, ...]] = {}
    captures: dict[str, Capture] = {}
    for source_name, cdc_decl in decl.cdc.items():
        if cdc_decl.capture is not None:
            captures[source_name] = _capture(c, source_name, cdc_decl)
        for cdc_table in _cdc_tables(c, source_name, cdc_decl):
            path = ("cdc", source_name, "tables", cdc_table.name)
            if cdc_table.name in cdc:
                c.fail(path, f"CDC table {cdc_table.name!r} is declared twice (also under {cdc[cdc_table.name].server})")
            cdc[cdc_table.name], cdc_paths[cdc_table.name] = cdc_table, path
    return cdc, cdc_paths, captures


class _Owners:
    """Where each table name is declared: a name is declared once across the whole project."""

    def __init__(self, c: _Checker):
        self.c = c
        self.paths: dict[str, tuple[Any, ...]] = {INGEST_LOG: ("name",)}

    def claim(self, name: str, path: tuple[Any, ...]) -> None:
        if name in self.paths:
            first = line_of(self.c.document, self.paths[name])
            self.c.fail(path, f"table {name!r} is declared twice (first on line {first})")
        self.paths[name] = path


def _check_landings(c: _Checker, sources: list[EventSource | CdcTable], cdc_paths: dict[str, tuple[Any, ...]],
                    owners: _Owners) -> None:
    """Each source has a landing folder of its own, and claims the names of the tables it makes."""
    landings: dict[str, tuple[Any, ...]] = {}
    for source in sources:
        path = ("events", source.name) if isinstance(source, EventSource) else cdc_paths[source.name]
        if source.landing in landings:
            c.fail(path, f"landing folder {source.landing!r} is used twice (first on line "
                         f"{line_of(c.document, landings[source.landing])})")
        landings[source.landing] = path
        for table in source.table_names:
            owners.claim(table, path)


def _check_references(c: _Checker, cdc: dict[str, CdcTable], cdc_paths: dict[str, tuple[Any, ...]]) -> None:
    """Each reference between CDC tables names a declared CDC table and column."""
    for table_name, (column, (target_table, target_column)) in (
        (t.name, ref) for t in cdc.values() for ref in t.references.items()
    ):
        path = (*cdc_paths[table_name], "references", column)
        if target_table not in cdc or target_column not in cdc[target_table].columns:
            c.fail(path, f"reference {target_table}.{target_column} is not a declared CDC table and column")


def _landing(c: _Checker, decl: LandingDecl) -> LandingPolicy:
    marker = decl.ready_marker
    if marker is not None and (not marker or "/" in marker or marker.endswith((".jsonl", ".jsonl.gz"))):
        c.fail(("landing", "ready_marker"), f"ready_marker {marker!r} must be a plain file name that is not a "
                                            "landing file's (e.g. _SUCCESS)")
    retention = None if decl.retention is None else c.duration(("landing", "retention"), decl.retention)
    if retention is not None and retention <= dt.timedelta(0):
        c.fail(("landing", "retention"), "retention must be longer than 0 (null keeps landed files for ever)")
    return LandingPolicy(settle=c.duration(("landing", "settle"), decl.settle), ready_marker=marker,
                         incomplete_grace=c.duration(("landing", "incomplete_grace"), decl.incomplete_grace),
                         retention=retention)


def load_project(path: str | Path, origin: str = "") -> Project:
    """Read and validate a declaration file; DeclarationError names the file, line and reason. `origin` says
    where the path came from (Settings.project_origin), for the error when there is no such file."""
    path = Path(path)
    if not path.is_file():
        raise DeclarationError(
            str(path), None,
            f"no such declaration file{f' ({origin})' if origin else ''}: set LAKEHOUSE_PROJECT to your "
            "lakehouse.yaml (the demo's is examples/shop/lakehouse.yaml; `make demo` records it in its home)",
        )
    return parse_project(path.read_text(), str(path))
