"""What differs between the declaration and the tables in the catalog: the plan of a declaration's change.

`plan(specs, catalog, namespace)` compares every declared table (its columns, their types, nullability and
comments, its partition fields, its write mode and properties, its comment) with the table the catalog holds,
read with pyiceberg (no Spark). Each difference is a `Change`: what it is, whether it is safe (Iceberg changes
metadata only: old data files stay as they are and read under the new schema or spec) or destructive (it takes
data out of the current schema), and the Iceberg operation that applies it.

Some tables also take columns from the data (schema drift: bronze, CDC silver): a column such a table has and the
declaration does not name is one the data brought, kept, and not a difference. Elsewhere it is a column the
declaration dropped.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pyiceberg import types as IT
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.transforms import parse_transform
from pyspark.sql import types as T

from ..settings import validate_identifier
from .registry import TableSpec
from .types import DECIMAL, promotes, spark_type

# Table properties the plan compares; the rest (snapshot and commit bookkeeping) belong to the table.
_ENGINE_PROPERTIES = ("format-version",)


@dataclass(frozen=True)
class Change:
    table: str
    # "add column", "rename column", "drop column", "widen type", "change type", "document column",
    # "make optional", "make required", "add partition field", "drop partition field", "set property",
    # "document table"
    kind: str
    subject: str  # the column, partition field or property
    before: str
    after: str
    safe: bool
    operation: str  # how Iceberg applies it
    # What `apply` needs beyond the text: the declared Spark type, a partition field's name, a property's value.
    declared: Any = dataclasses.field(default=None, compare=False, repr=False)

    def text(self) -> str:
        marker = "safe" if self.safe else "DESTRUCTIVE"
        what = f"{self.kind} {self.subject}" if self.subject else self.kind
        change = f": {self.before or '(none)'} -> {self.after or '(none)'}" if self.before or self.after else ""
        return f"{self.table}: {what}{change} [{marker}] ({self.operation})"

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "declared"}


def iceberg_type_string(t: IT.IcebergType) -> str:
    """An Iceberg type as Spark spells it (`simpleString`), so declared and held types compare as text."""
    simple = {IT.BooleanType: "boolean", IT.IntegerType: "int", IT.LongType: "bigint", IT.FloatType: "float",
              IT.DoubleType: "double", IT.DateType: "date", IT.TimestampType: "timestamp_ntz",
              IT.TimestamptzType: "timestamp", IT.StringType: "string", IT.BinaryType: "binary",
              IT.UUIDType: "string", IT.TimeType: "bigint"}
    for kind, name in simple.items():
        if isinstance(t, kind):
            return name
    if isinstance(t, IT.DecimalType):
        return f"decimal({t.precision},{t.scale})"
    if isinstance(t, IT.FixedType):
        return "binary"
    if isinstance(t, IT.StructType):
        return "struct<" + ",".join(f"{f.name}:{iceberg_type_string(f.field_type)}" for f in t.fields) + ">"
    if isinstance(t, IT.ListType):
        return f"array<{iceberg_type_string(t.element_type)}>"
    if isinstance(t, IT.MapType):
        return f"map<{iceberg_type_string(t.key_type)},{iceberg_type_string(t.value_type)}>"
    raise ValueError(f"an Iceberg type the plan does not know: {t}")


def _transform_text(transform: str) -> tuple[str, str]:
    """A declared partition transform (`days(ts)`, `bucket(16, id)`, `ts`) as (column, Iceberg's transform)."""
    m = re.match(r"^\s*(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?(\w+)\s*\)\s*$", transform)
    if not m:
        return transform.strip(), "identity"
    name, width, column = m.groups()
    singular = {"years": "year", "months": "month", "days": "day", "hours": "hour"}
    return column, f"{name}[{width}]" if width else singular.get(name, name)


def plan_table(spec: TableSpec, table: Any, takes_data_columns: bool = False) -> list[Change]:
    """The differences between a declared table and the pyiceberg `table` the catalog holds."""
    changes = _field_changes(spec.name, "", table.schema().fields, spec.schema.fields, takes_data_columns,
                             spec.renamed)
    changes += _partition_changes(spec, table)
    changes += _property_changes(spec, table)
    return changes


def _field_changes(name: str, prefix: str, held_fields: Any, declared_fields: list[T.StructField],
                   takes_data_columns: bool, renamed: dict[str, str], declared_prefix: str = "") -> list[Change]:
    """The differences between the fields a table (or a struct of it) holds and those declared; a struct's own
    fields are compared one by one (`before.total`). A declared rename whose former name the table still holds
    is a rename (by field id), and the column's other differences are named by the name it holds."""
    changes: list[Change] = []
    held = {f.name: f for f in held_fields}
    declared = {f.name: f for f in declared_fields}
    formers = {new[len(declared_prefix):]: old.rsplit(".", 1)[-1] for new, old in renamed.items()
               if new.startswith(declared_prefix) and "." not in new[len(declared_prefix):]}
    renamed_here = set()
    for column, field in declared.items():
        former = formers.get(column, "")
        if column not in held and former in held and former not in declared:
            renamed_here.add(former)
            changes.append(Change(name, "rename column", prefix + former, former, column, True,
                                  f"UpdateSchema.rename_column({prefix + former}, {column}): by field id, data "
                                  "files unchanged, older snapshots read under the name they had",
                                  declared=column))
            changes += _column_changes(name, prefix + former, held[former], field, takes_data_columns, renamed,
                                       f"{declared_prefix}{column}.")
        elif column not in held:
            changes.append(_added_column(name, prefix + column, field))
        else:
            changes += _column_changes(name, prefix + column, held[column], field, takes_data_columns, renamed,
                                       f"{declared_prefix}{column}.")
    if not takes_data_columns:
        changes += _dropped_columns(name, prefix, held, set(declared) | renamed_here)
    return changes


def _added_column(name: str, path: str, field: T.StructField) -> Change:
    """A declared column the table lacks: added when nullable, refused when required."""
    want = field.dataType.simpleString()
    if field.nullable:
        return Change(name, "add column", path, "", want, True, f"UpdateSchema.add_column({path})", declared=field)
    return Change(name, "add column", path, "", f"{want} NOT NULL", False,
                  "refused: a required column cannot be added to rows already written; declare it nullable")


def _column_changes(name: str, path: str, have: Any, field: T.StructField, takes_data_columns: bool,
                    renamed: dict[str, str], declared_prefix: str) -> list[Change]:
    """The differences between one column the table holds (at `path`) and its declaration: its type (a struct's
    fields one by one), whether it may be null, its comment."""
    if isinstance(have.field_type, IT.StructType) and isinstance(field.dataType, T.StructType):
        changes = _field_changes(name, f"{path}.", have.field_type.fields, field.dataType.fields,
                                 takes_data_columns, renamed, declared_prefix)
    else:
        changes = _type_changes(name, path, have, field)
    if have.required and field.nullable:
        changes.append(Change(name, "make optional", path, "required", "optional", True,
                              f"UpdateSchema.make_column_optional({path})"))
    elif not have.required and not field.nullable:
        changes.append(Change(name, "make required", path, "optional", "required", False,
                              "refused: rows already written may hold nulls"))
    comment = field.metadata.get("comment", "")
    if (have.doc or "") != comment:
        changes.append(Change(name, "document column", path, have.doc or "", comment, True,
                              f"UpdateSchema.update_column({path}, doc=...)"))
    return changes


def _type_changes(name: str, path: str, have: Any, field: T.StructField) -> list[Change]:
    have_type, want = iceberg_type_string(have.field_type), field.dataType.simpleString()
    if have_type == want:
        return []
    if promotes(have_type, want):
        return [Change(name, "widen type", path, have_type, want, True,
                       f"UpdateSchema.update_column({path}, {want})", declared=field)]
    return [Change(name, "change type", path, have_type, want, False,
                   f"with --allow-drop: UpdateSchema.delete_column({path}) then add_column({path}, {want}): a new "
                   "field id; the values held leave the current schema (older snapshots still read them) and rows "
                   "written before read null", declared=field)]


def _dropped_columns(name: str, prefix: str, held: dict[str, Any], kept: set[str]) -> list[Change]:
    """The columns a table holds that its declaration neither names nor renames."""
    return [Change(name, "drop column", prefix + column, iceberg_type_string(have.field_type), "", False,
                   f"UpdateSchema.delete_column({prefix + column}): its values leave the current schema (older "
                   "snapshots still read them)")
            for column, have in held.items() if column not in kept]


def _partition_changes(spec: TableSpec, table: Any) -> list[Change]:
    """Partition fields compared by their source column's declared name: a column the plan renames keeps its
    partition fields (they follow its field id); one added on it names the column as the table holds it, since
    `apply` renames last."""
    schema = table.schema()
    held_columns = {f.name for f in schema.fields}
    pending = {new: old for new, old in spec.renamed.items() if old in held_columns and new not in held_columns}
    declared_name = {old: new for new, old in pending.items()}
    names = {}
    for part in table.spec().fields:
        column = schema.find_field(part.source_id).name
        names[(declared_name.get(column, column), str(part.transform))] = part.name
    held = set(names)
    declared = {_transform_text(t) for t in spec.partitioned_by}
    changes = []
    for column, transform in sorted(declared - held):
        changes.append(Change(spec.name, "add partition field", f"{transform}({column})", "", "", True,
                              "UpdateSpec.add_field: new writes use the new spec, files written before keep theirs",
                              declared=(pending.get(column, column), transform)))
    for column, transform in sorted(held - declared):
        changes.append(Change(spec.name, "drop partition field", f"{transform}({column})", "", "", True,
                              "UpdateSpec.remove_field: new writes use the new spec, files written before keep "
                              "theirs", declared=names[(column, transform)]))
    return changes


def _property_changes(spec: TableSpec, table: Any) -> list[Change]:
    properties = table.properties
    changes = []
    for key, value in sorted(spec.table_properties.items()):
        have = str(table.format_version) if key == "format-version" else properties.get(key)
        if have != value:
            safe = key not in _ENGINE_PROPERTIES
            changes.append(Change(spec.name, "set property", key, have or "", value, safe,
                                  f"Transaction.set_properties({key}={value})" if safe else
                                  "refused here: upgrade the format version with Iceberg's own procedure"))
    if properties.get("comment", "") != spec.description:
        changes.append(Change(spec.name, "document table", "", properties.get("comment", ""), spec.description, True,
                              "Transaction.set_properties(comment=...)"))
    return changes


@dataclass(frozen=True)
class Plan:
    changes: list[Change]
    not_created: list[str]  # declared tables their first run creates as declared: not a difference
    # Columns a table that takes its data's columns holds though the declaration does not name them (the data
    # brought them, or a former declaration did): kept, not a difference ("keep column").
    kept: list[Change] = dataclasses.field(default_factory=list)

    @property
    def destructive(self) -> list[Change]:
        return [c for c in self.changes if not c.safe]


def plan(specs: dict[str, TableSpec], catalog: Any, namespace: str,
         takes_data_columns: frozenset[str] = frozenset()) -> Plan:
    """Every difference between the declared tables and the catalog's."""
    changes: list[Change] = []
    kept: list[Change] = []
    missing = []
    for name, spec in sorted(specs.items()):
        identifier = (namespace, name)
        if not catalog.table_exists(identifier):
            missing.append(name)
            continue
        table = catalog.load_table(identifier)
        changes += plan_table(spec, table, name in takes_data_columns)
        if name in takes_data_columns:
            kept += kept_columns(spec, table)
    return Plan(changes, missing, kept)


def kept_columns(spec: TableSpec, table: Any) -> list[Change]:
    """The top-level columns `table` holds that `spec` does not declare (nor renames), and what becomes of the
    values records still carry under their names: they fill the column as its type reads them."""
    declared = set(spec.schema.fieldNames()) | set(spec.renamed.values())
    kept = []
    for field in table.schema().fields:
        if field.name in declared:
            continue
        held = iceberg_type_string(field.field_type)
        what = (f"a record that still carries {field.name} fills it as {held}; a value that is not one is "
                "quarantined with the reason (the raw record keeps it)") if spec.layer == "bronze" else \
            f"bronze's values of {field.name} still fill it"
        kept.append(Change(spec.name, "keep column", field.name, held, held, True, f"not declared, kept: {what}"))
    return kept


def iceberg_type(dtype: T.DataType) -> IT.IcebergType:
    """A declared Spark type as Iceberg's (nested ids are placeholders: adding a column assigns fresh ones)."""
    simple: dict[type, IT.IcebergType] = {
        T.BooleanType: IT.BooleanType(), T.ByteType: IT.IntegerType(), T.ShortType: IT.IntegerType(),
        T.IntegerType: IT.IntegerType(), T.LongType: IT.LongType(), T.FloatType: IT.FloatType(),
        T.DoubleType: IT.DoubleType(), T.DateType: IT.DateType(), T.TimestampType: IT.TimestamptzType(),
        T.TimestampNTZType: IT.TimestampType(), T.StringType: IT.StringType(), T.BinaryType: IT.BinaryType()}
    if type(dtype) in simple:
        return simple[type(dtype)]
    if isinstance(dtype, T.DecimalType):
        return IT.DecimalType(dtype.precision, dtype.scale)
    if isinstance(dtype, T.StructType):
        return IT.StructType(*(IT.NestedField(n, f.name, iceberg_type(f.dataType), required=not f.nullable,
                                              doc=f.metadata.get("comment") or None)
                               for n, f in enumerate(dtype.fields, start=1)))
    if isinstance(dtype, T.ArrayType):
        return IT.ListType(1, iceberg_type(dtype.elementType), element_required=not dtype.containsNull)
    if isinstance(dtype, T.MapType):
        return IT.MapType(1, iceberg_type(dtype.keyType), 2, iceberg_type(dtype.valueType),
                          value_required=not dtype.valueContainsNull)
    raise ValueError(f"a declared type the plan cannot apply: {dtype.simpleString()}")


# Differences `apply` never makes: Iceberg cannot make them in place (the plan says what to do instead).
REFUSED = {"make required"}
# Destructive differences `apply` makes only when told to (--allow-drop): values leave the current schema.
DROPPING = {"drop column", "change type"}


@dataclass(frozen=True)
class Applied:
    applied: list[Change]
    left: list[Change]  # every change not made: all of them while any is held
    held: list[Change] = dataclasses.field(default_factory=list)  # what kept the plan from being applied


def _applicable(change: Change, allow_drop: bool) -> bool:
    if change.kind in REFUSED or (change.kind == "add column" and change.declared is None):
        return False
    if change.kind == "set property" and not change.safe:
        return False
    return change.safe or (allow_drop and change.kind in DROPPING)


def declared_changes(spec: TableSpec, table: Any) -> list[Change]:
    """The differences a run makes before its first write to a table: all of them when it may make each by
    itself, else a DeclarationDriftError with the plan's text."""
    from ..errors import DeclarationDriftError

    changes = plan_table(spec, table, spec.takes_data_columns)
    held = [c for c in changes if not _applicable(c, allow_drop=False)]
    if held:
        lines = "\n".join(f"  {c.text()}" for c in held)
        raise DeclarationDriftError(
            f"table {'.'.join(table.name())} differs from its declaration in ways a run does not change by "
            f"itself:\n{lines}\n`lakehouse plan` shows every difference; `lakehouse apply --allow-drop` makes "
            "dropped columns, or declare the table as it is")
    return changes


def bring_to_declaration(catalog: Any, identifier: tuple[str, str], spec: TableSpec) -> list[Change]:
    """What a run does before its first write to a table: the table's safe differences from the declaration
    made (returned, for the run's metadata), or, when any difference is one a run does not make by itself, a
    DeclarationDriftError with the plan's text. A concurrent run making the same changes first is no failure."""
    from ..errors import DeclarationDriftError

    try:
        return evolve(catalog, identifier, lambda table: declared_changes(spec, table))
    except CommitFailedException:
        raise DeclarationDriftError(
            f"table {'.'.join(identifier)}: its declared changes kept meeting other commits") from None


# Types a column the data brings may get, and decimals (anything richer is declared by hand).
DRIFT_TYPES = {"string", "bigint", "int", "double", "boolean", "timestamp", "date", "binary"}


def data_columns(table: str, columns: list[tuple[str, str]]) -> list[Change]:
    """Nullable columns the data brought (`name` or `struct.name`, with a type of DRIFT_TYPES or a decimal) as the
    changes that add them; ValueError names a column path or type such a column may not have."""
    for path, dtype in columns:
        for part in path.split("."):
            validate_identifier(part, f"new column path {path!r} of {table}")
        if dtype not in DRIFT_TYPES and not DECIMAL.match(dtype):
            raise ValueError(f"{table}: new column {path} has type {dtype!r}; allowed: {sorted(DRIFT_TYPES)}")
    return [Change(table, "add column", path, "", dtype, True, f"UpdateSchema.add_column({path}): from the data",
                   declared=T.StructField(path.rsplit(".", 1)[-1], spark_type(dtype)))
            for path, dtype in columns]


def missing(changes: list[Change], table: Any) -> list[Change]:
    """The columns `changes` add or widen that `table` does not hold so yet (another run may have made them)."""
    schema = table.schema()

    def made(change: Change) -> bool:
        try:
            field = schema.find_field(change.subject)
        except ValueError:
            return False
        return change.kind == "add column" or iceberg_type_string(field.field_type) == change.after

    return [c for c in changes if not made(c)]


def evolve(catalog: Any, identifier: tuple[str, str], changes_of: Callable[[Any], list[Change]],
           attempts: int = 5) -> list[Change]:
    """Make the changes `changes_of` finds on the table as it stands now (`change_table`) and return them. When
    another commit changed the table first, they are found again on the table as it then stands; after
    `attempts` such losses, the last CommitFailedException."""
    for attempt in range(attempts):
        table = catalog.load_table(identifier)
        changes = changes_of(table)
        if not changes:
            return []
        try:
            change_table(table, changes)
            return changes
        except CommitFailedException:
            if attempt == attempts - 1:
                raise
    return []


def apply(catalog: Any, namespace: str, planned: Plan, allow_drop: bool = False) -> Applied:
    """Make the plan's differences, one Iceberg transaction (one metadata commit) per table: schema changes by
    field id, partition fields, properties. No data file is written or rewritten. All or nothing: while any
    difference is held (destructive without allow_drop, or not possible in place), none is made."""
    held = [c for c in planned.changes if not _applicable(c, allow_drop)]
    if held:
        return Applied([], list(planned.changes), held)
    applied: list[Change] = []
    by_table: dict[str, list[Change]] = {}
    for change in planned.changes:
        by_table.setdefault(change.table, []).append(change)
    for name, changes in sorted(by_table.items()):
        change_table(catalog.load_table((namespace, name)), changes)
        applied += changes
    return Applied(applied, [])


_COLUMN_KINDS = ("add column", "widen type", "make optional", "document column", "drop column")
_PARTITION_KINDS = ("add partition field", "drop partition field")
_PROPERTY_KINDS = ("set property", "document table")


def change_table(table: Any, changes: list[Change]) -> None:
    """Every change to a table's schema, partitioning or properties is made here, whatever its cause: a column
    the data brought, a column the declaration adds, renames or retypes. One Iceberg transaction (one metadata
    commit) on the pyiceberg `table` as loaded, by field id; no data file is written. CommitFailedException when
    another commit changed the table's schema since it was loaded."""
    with table.transaction() as tx:
        _update_columns(tx, [c for c in changes if c.kind in _COLUMN_KINDS])
        _update_partitioning(tx, [c for c in changes if c.kind in _PARTITION_KINDS])
        properties = {c.subject or "comment": c.after for c in changes if c.kind in _PROPERTY_KINDS}
        if properties:
            tx.set_properties(properties)
        _retype_columns(tx, [c for c in changes if c.kind == "change type"])
        _rename_columns(tx, [c for c in changes if c.kind == "rename column"])


def _path(change: Change) -> tuple[str, ...]:
    return tuple(change.subject.split("."))


def _update_columns(tx: Any, changes: list[Change]) -> None:
    if not changes:
        return
    with tx.update_schema() as update:
        for c in changes:
            if c.kind == "add column":
                update.add_column(_path(c), iceberg_type(c.declared.dataType),
                                  doc=c.declared.metadata.get("comment") or None)
            elif c.kind == "widen type":
                update.update_column(_path(c), field_type=iceberg_type(c.declared.dataType))
            elif c.kind == "make optional":
                update.make_column_optional(_path(c))
            elif c.kind == "document column":
                update.update_column(_path(c), doc=c.after)
            else:
                update.delete_column(_path(c))


def _update_partitioning(tx: Any, changes: list[Change]) -> None:
    if not changes:
        return
    with tx.update_spec() as spec:
        for c in changes:
            if c.kind == "add partition field":
                column, transform = c.declared
                spec.add_field(column, parse_transform(transform))
            else:
                spec.remove_field(c.declared)


def _retype_columns(tx: Any, changes: list[Change]) -> None:
    """The held column goes, then one of the declared type takes its name (a new field id)."""
    if not changes:
        return
    with tx.update_schema() as update:
        for c in changes:
            update.delete_column(_path(c))
    with tx.update_schema() as update:
        for c in changes:
            update.add_column(_path(c), iceberg_type(c.declared.dataType),
                              doc=c.declared.metadata.get("comment") or None)


def _rename_columns(tx: Any, changes: list[Change]) -> None:
    """Last: the changes before name the columns as the table held them."""
    if not changes:
        return
    with tx.update_schema() as update:
        for c in changes:
            update.rename_column(_path(c), c.after)
