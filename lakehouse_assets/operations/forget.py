"""Right to be forgotten, with proof: a person's rows out of every table, and out of every file still kept.

A DELETE only hides rows: older snapshots (and, on merge-on-read tables, the
data files under a delete file) still hold them. `forget` therefore:

1. finds where the subject can be: for each event source with a user field,
   its bronze (typed field and raw payload), quarantine (raw lines parsed as
   JSON, or their strings with JSON's escapes decoded when they do not parse),
   silver (the field or its pseudonym), rejected (the subject's event keys), gold sessions
   and the ML tables; for each CDC table declaring a `subject:` column, its
   bronze (before/after images, key and payload), quarantine, current state and
   history; each declared SQL gold table, in every text column (the subject
   or their pseudonym). Aggregates (per minute, per day) hold no person and are
   left alone: the report names them.
2. deletes the matching rows from each table (upstream first, so a concurrent
   recompute cannot bring them back), then rewrites every data file that a
   delete file points at, without the deleted rows;
3. reads every data file any kept snapshot references, directly with pyarrow
   (no Iceberg reader, no delete files applied), and finds those still holding
   a row of the subject; removes the tags and write branches that keep such
   files alive, except tags named `legal_hold*`, which it keeps and reports;
   expires exactly the snapshots that reference such files, or manifests that
   keep the subject in a column bound (the current snapshot's manifests are
   written again first), and Iceberg removes the files no snapshot references
   any more;
4. proves it: the same direct read over every live data file, the files
   scanned, and the rows of the subject found (zero, outside legal holds);
5. the landing zone: a landed file whose lines it deleted from bronze or a
   quarantine is removed from the zone (bronze holds its other lines); a file
   not taken yet, or grown since, that names the subject is reported as
   pending, and the subject is not purged until it is taken and forget runs
   again. Every line deleted from bronze or a quarantine is recorded in the
   ledger `bronze_forgotten` (file, line and run, nothing of the person), so
   that `lakehouse reconcile` balances: records in = kept + quarantined +
   forgotten;
6. runs in flight: a Dagster run that started before the deletes ended may
   have read the subject's rows and publish them after. With a Dagster
   instance (DAGSTER_HOME), forget waits for those runs to end and deletes
   again; a run still going after `wait_s` leaves the subject not purged.
7. the independent scan (operations/trace_scan.py, which shares no code with
   the matchers) of the namespace's table folders, the landing zone and capture
   staging: files no snapshot references that hold the subject are removed when
   old enough to be a crashed write's; any other file holding them, but those
   a legal hold keeps, leaves the subject not purged and is named.

`lakehouse forget --verify-only` runs that scan alone.

The subject's value never enters SQL text: it is written as a hex literal.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import struct
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import ManifestContent
from pyiceberg.schema import index_by_id
from pyiceberg.table import Table
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
)
from pyspark.sql.types import DataType

from ..errors import MaintenanceError
from ..landing.zones import landing_zone
from ..project import CdcTable, EventSource, Gold, Project
from ..project.model import FORGOTTEN
from ..runtime.catalog import append_retrying
from ..runtime.pii import keyed_hash_of, pii_key
from ..runtime.resource import LakehouseResource
from ..settings import validate_identifier
from ..tables.types import is_numeric, spark_type
from .health import file_paths, files_of
from .landing_retention import newest_takes
from .procedures import retry_on_conflict
from .trace_scan import LANDING, STAGING, WAREHOUSE, trace_scan

LEGAL_HOLD = "legal_hold"
# A file no snapshot references is a crashed write's only when it is older than the longest write still going could
# keep it unreferenced (runs in flight are waited for; a micro-batch of the stream commits within minutes).
ORPHAN_MIN_AGE = dt.timedelta(hours=1)


def sql_text(value: str) -> str:
    """A Spark SQL string literal for any text: hex digits only in the statement."""
    return f"decode(unhex('{value.encode('utf-8').hex()}'), 'UTF-8')"


@dataclass(frozen=True)
class Equals:
    """A (possibly nested) column whose text equals one of `values`."""

    path: tuple[str, ...]
    values: tuple[str, ...]

    def sql(self) -> str:
        column = ".".join(f"`{validate_identifier(p, 'column')}`" for p in self.path)
        return f"CAST({column} AS STRING) IN ({', '.join(sql_text(v) for v in self.values)})"

    def columns(self) -> set[str]:
        return {self.path[0]}

    def mask(self, data: pa.Table) -> pa.Array:
        column = data.column(self.path[0]).combine_chunks()
        for part in self.path[1:]:
            column = pc.struct_field(column, part)
        return pc.fill_null(pc.is_in(pc.cast(column, pa.string()), pa.array(list(self.values), pa.string())), False)


@dataclass(frozen=True)
class Mentions:
    """A raw JSON text column in which a field named `field` holds the subject (quoted or not)."""

    column: str
    field: str
    subject: str

    @property
    def stem(self) -> str:
        return rf'"{re.escape(self.field)}"\s*:\s*"?{re.escape(self.subject)}"?'

    @property
    def pattern(self) -> str:
        return rf'{self.stem}\s*[,}}\]]'

    def sql(self) -> str:
        return f"`{validate_identifier(self.column, 'column')}` RLIKE {sql_text(self.pattern)}"

    def columns(self) -> set[str]:
        return {self.column}

    def mask(self, data: pa.Table) -> pa.Array:
        return pc.fill_null(pc.match_substring_regex(data.column(self.column), self.pattern), False)


_STRING_BODY = re.compile(r'"((?:[^"\\]|\\.)*)')  # a JSON string's body, its closing quote cut off or not


def _texts(value: Any) -> Iterator[str]:
    """Every key and scalar of a parsed JSON value, as text."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)
    elif value is not None:
        yield str(value)


def _cut_texts(line: str) -> Iterator[str]:
    """The strings of a line that does not parse (cut off, broken), each with JSON's escapes decoded where they
    decode; and the line itself."""
    yield line
    for match in _STRING_BODY.finditer(line):
        body = match.group(1)
        try:
            yield json.loads(f'"{body}"')
        except ValueError:
            yield body


@lru_cache(maxsize=16)
def _whole_word(subject: str) -> re.Pattern:
    return re.compile(rf"(?<![\w@.+-]){re.escape(subject)}(?![\w@.+-])", re.IGNORECASE)


@dataclass(frozen=True)
class Names:
    """A raw line (JSON or not) that names the subject: parsed as JSON, any key or value (at any depth, escapes
    decoded) that is the subject or holds it as a whole word; a line that does not parse, any of its strings with
    escapes decoded. Case does not matter (an e-mail's case means nothing). The rows to delete are the lines found:
    `resolve` reads the column's distinct values and keeps those that name the subject."""

    column: str
    subject: str
    lines: tuple[str, ...] = ()

    def holds(self, line: str | None) -> bool:
        if not line:
            return False
        word = _whole_word(self.subject)
        try:
            texts: Iterator[str] = _texts(json.loads(line))
        except ValueError:
            texts = _cut_texts(line)
        return any(word.search(text) for text in texts)

    def resolve(self, values: Iterator[str | None]) -> Names:
        return replace(self, lines=tuple(sorted({v for v in values if v is not None and self.holds(v)})))

    def sql(self) -> str:
        if not self.lines:
            return "false"
        return f"`{validate_identifier(self.column, 'column')}` IN ({', '.join(sql_text(v) for v in self.lines)})"

    def columns(self) -> set[str]:
        return {self.column}

    def mask(self, data: pa.Table) -> pa.Array:
        return pa.array([self.holds(v) for v in data.column(self.column).to_pylist()], pa.bool_())


_CUT = 16  # Iceberg keeps a string column's bounds to their first 16 characters
_WORD_END = re.compile(r"[^\w@.+-]")
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]{0,37})")


def is_number(value: str) -> bool:
    """Whether a subject is an integer as a number column holds it (`28`, not `028` or `28.0`)."""
    return _INTEGER.fullmatch(value) is not None


def _as_type(kind: IcebergType, value: str) -> Any:
    """`value` as a column of `kind` holds it, None when no value of the column is it (text in a number column)."""
    try:
        if isinstance(kind, (IntegerType, LongType)):
            return int(value) if is_number(value) else None
        if isinstance(kind, DecimalType):
            return Decimal(value) if is_number(value) else None
        if isinstance(kind, (FloatType, DoubleType)):
            return float(value) if is_number(value) else None
    except (ValueError, ArithmeticError):
        return None
    return value.lower()


def _bound_texts(bound: str) -> list[str]:
    """A text bound as the start of the value it was cut from: a bound of 16 characters may be cut, and is read
    both as a lower bound (the value's first 16 characters) and as an upper bound (those with the last one raised
    by one: lowered back)."""
    if len(bound) < _CUT:
        return [bound]
    return [bound, bound[:-1] + chr(max(ord(bound[-1]) - 1, 0))]


def _word_in_bound(bound: str, value: str) -> bool:
    """A string bound holds `value` as a whole word (not as letters or digits inside a longer one: `28` is not in
    `128` or `2028-01-01`); or, cut, ends in a start of it (of at least 8 characters, or all of it)."""
    value = value.lower()
    for text in _bound_texts(bound.lower()):
        if _whole_word(value).search(text):
            return True
        if len(text) >= _CUT:
            for k in range(len(value) - 1, min(len(value), 8) - 1, -1):
                if text.endswith(value[:k]) and (len(text) == k or _WORD_END.match(text[-k - 1])):
                    return True
    return False


Check = Callable[[bytes], bool]


def _read_bound(kind: IcebergType, raw: bytes) -> Any:
    """A bound as a value of its column's type. A number is read at any width: a file written before its column
    was widened (int to long, float to double) keeps the narrower bound."""
    if isinstance(kind, (IntegerType, LongType)):
        return int.from_bytes(raw, "little", signed=True)
    if isinstance(kind, (FloatType, DoubleType)):
        return struct.unpack("<f" if len(raw) == 4 else "<d", raw)[0]
    return from_bytes(kind, raw)  # type: ignore[arg-type]


def _typed_check(kind: IcebergType, values: tuple[str, ...]) -> Check | None:
    """Whether a bound of a column of `kind`, read as that type, is one of `values` (a number as a number, text as
    a whole word)."""
    if isinstance(kind, StringType):
        return lambda raw: any(_word_in_bound(raw.decode("utf-8", "replace"), v) for v in values)
    wanted = [w for w in (_as_type(kind, v) for v in values) if w is not None]
    if not wanted or not isinstance(kind, PrimitiveType):
        return None

    def check(raw: bytes) -> bool:
        try:
            bound = _read_bound(kind, raw)
        except (ValueError, TypeError, ArithmeticError, struct.error):
            return False  # not a value of the column's type: it is no one's
        return any((bound == w) if not isinstance(w, str) else str(bound).lower() == w for w in wanted)
    return check


def _mention_check(mention: Mentions) -> Check:
    """Whether a bound of a JSON text column names the subject in its field (cut off at its end, as a bound is)."""
    whole, cut = re.compile(mention.pattern), re.compile(rf"{mention.stem}$")

    def check(raw: bytes) -> bool:
        texts = _bound_texts(raw.decode("utf-8", "replace"))
        return any(whole.search(t) or (len(t) >= _CUT and cut.search(t)) for t in texts)
    return check


@dataclass
class BoundJudge:
    """Whether a data file's column bounds (what a manifest keeps of each column: its smallest and largest value,
    by field id) name the subject. Each bound is read as its column's type. The columns a target's matchers read
    are judged as they judge rows: a number column by the subject as a number, a JSON text by the subject in its
    field, text by the subject as a whole word. Every other text column is judged by the pseudonym as a whole
    word, and by the subject too unless it is a number (a number in free text is no one's id: `28` in `User 128`,
    `2028-01-01` or an order's `28` names no one)."""

    checks: dict[int, list[Check]]

    @classmethod
    def of(cls, table: Table, target: Target, subject: str, hashed: str) -> BoundJudge:
        checks: dict[int, list[Check]] = defaultdict(list)
        schema = table.schema()
        for m in target.matchers:
            try:
                field = schema.find_field(".".join(m.path) if isinstance(m, Equals) else m.column)
            except ValueError:
                continue  # a column the table does not have (yet)
            check = (_mention_check(m) if isinstance(m, Mentions) and isinstance(field.field_type, StringType)
                     else _typed_check(field.field_type, m.values if isinstance(m, Equals) else (subject,)))
            if check is not None:
                checks[field.field_id].append(check)
        anywhere = _typed_check(StringType(), (hashed,) if is_number(subject) else (subject, hashed))
        assert anywhere is not None  # a text column is always judged
        for old in table.schemas().values():
            for field_id, field in index_by_id(old).items():
                if isinstance(field.field_type, StringType):
                    checks[field_id].append(anywhere)
        return cls(dict(checks))

    def names(self, data_file: Any) -> bool:
        for bounds in (data_file.lower_bounds, data_file.upper_bounds):
            for field_id, raw in (bounds or {}).items():
                if any(check(raw) for check in self.checks.get(field_id, ())):
                    return True
        return False


@dataclass
class Target:
    table: str
    matchers: list[Equals | Mentions | Names]
    why: str
    landing: str | None = None  # the landing source whose lines the table holds (bronze, quarantine)
    raw_lines: bool = False  # its matchers judge raw landed lines (a quarantine's): the landed files' too

    def names_line(self, lines: list[str]) -> bool:
        """Whether any of a landed file's lines names the subject, judged as this target's raw lines are."""
        return bool(lines) and self.count(pa.table({"payload": pa.array(lines, pa.string())})) > 0

    def sql(self) -> str:
        return " OR ".join(f"({m.sql()})" for m in self.matchers)

    def columns(self) -> list[str]:
        return sorted(set().union(*(m.columns() for m in self.matchers)))

    def count(self, data: pa.Table) -> int:
        mask = None
        for m in self.matchers:
            mask = m.mask(data) if mask is None else pc.or_(mask, m.mask(data))
        return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0) if mask is not None else 0


@dataclass
class TableProof:
    table: str
    why: str
    rows_deleted: int = 0
    rows_deleted_after_runs: int = 0  # published by runs that were in flight during the first deletes
    files_rewritten: int = 0
    tags_removed: list[str] = field(default_factory=list)
    branches_removed: list[str] = field(default_factory=list)
    snapshots_expired: list[int] = field(default_factory=list)
    legal_holds: dict[str, int] = field(default_factory=dict)  # tag -> files still holding the subject
    lines_forgotten: int = 0  # landed lines recorded in the ledger (bronze and quarantines)
    live_files_scanned: int = 0
    rows_found_after: int = 0
    # Why forget could not finish the table (its step that failed, or rows of the subject found after), None once it
    # did: the same command, run again, takes it up where it stopped.
    not_done: str | None = None

    @property
    def done(self) -> bool:
        return self.not_done is None


@dataclass
class ForgetReport:
    subject: str
    tables: list[TableProof] = field(default_factory=list)
    left_alone: dict[str, str] = field(default_factory=dict)
    landing_removed: list[str] = field(default_factory=list)
    landing_pending: dict[str, str] = field(default_factory=dict)  # landed file -> why it still names the subject
    runs_waited: list[str] = field(default_factory=list)  # runs in flight during the deletes, waited for
    runs_in_flight: list[str] = field(default_factory=list)  # such runs still going when forget stopped waiting
    orphans_removed: list[str] = field(default_factory=list)  # files no snapshot referenced that held the subject
    # The independent scan (trace_scan.py) of the namespace's tables' folders, the landing zone and capture staging,
    # after everything else: its figures, and every file still holding the subject but those legal holds keep.
    independent_scan: dict[str, Any] = field(default_factory=dict)
    traces: dict[str, str] = field(default_factory=dict)  # file -> why it still holds the subject
    seconds: float = 0.0

    @property
    def purged(self) -> bool:
        return (all(t.done and t.rows_found_after == 0 for t in self.tables) and not self.landing_pending
                and not self.runs_in_flight and not self.traces and bool(self.independent_scan))

    @property
    def tables_done(self) -> list[str]:
        return [t.table for t in self.tables if t.done]

    @property
    def tables_not_done(self) -> dict[str, str]:
        return {t.table: t.not_done for t in self.tables if t.not_done is not None}

    def as_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "purged": self.purged,
            "tables_done": self.tables_done,
            "tables_not_done": self.tables_not_done,
            "rows_deleted": sum(t.rows_deleted for t in self.tables),
            "live_files_scanned": sum(t.live_files_scanned for t in self.tables),
            "rows_found_after": sum(t.rows_found_after for t in self.tables),
            "tables": [t.__dict__ for t in self.tables],
            "left_alone": self.left_alone,
            "landing_removed": self.landing_removed,
            "landing_pending": self.landing_pending,
            "runs_waited": self.runs_waited,
            "runs_in_flight": self.runs_in_flight,
            "orphans_removed": self.orphans_removed,
            "independent_scan": self.independent_scan,
            "traces": self.traces,
            "seconds": round(self.seconds, 2),
        }


Found = tuple[list[Target], dict[str, str]]  # the tables to search, and those left alone with why


def subject_targets(project: Project, subject: str, hashed: str,
                    event_keys: Callable[[str, str, str], tuple[str, ...]]) -> Found:
    """Where the subject can be, upstream first; and the tables left alone, with why.

    `hashed` is the subject's pseudonym (runtime/pii.py), what silver keeps of a personal-data column.
    `event_keys(bronze, user column, key column)` gives the keys of the subject's events (read before any delete).
    """
    found = [_event_source_targets(source, subject, hashed, event_keys) for source in project.events.values()]
    found += [_per_user_targets(project.gold, subject, hashed), _sql_table_targets(project.gold, subject, hashed)]
    found += [_cdc_targets(table, subject, hashed) for table in project.cdc.values()]
    targets = [target for some, _ in found for target in some]
    left = {name: why for _, some in found for name, why in some.items()}
    return targets, left


def _as_kept(subject: str, hashed: str, pseudonymised: bool) -> tuple[str, ...]:
    """The value a table keeps of the subject: their pseudonym in a pseudonymised column, else the subject."""
    return (hashed,) if pseudonymised else (subject,)


def _event_source_targets(source: EventSource, subject: str, hashed: str,
                          event_keys: Callable[[str, str, str], tuple[str, ...]]) -> Found:
    """An event source's bronze, quarantine, silver and rejected tables, when its user field can hold the subject."""
    if source.user is None:
        return [], {t: "the event source declares no user field" for t in source.table_names}
    if is_numeric(source.fields[source.user]) and not is_number(subject):
        return [], {t: f"its user field {source.user} is a number and the subject is not" for t in source.table_names}
    user_field = source.paths.get(source.user, source.user).split(".")[-1]
    keys = event_keys(source.bronze, source.user, source.key)
    targets = [
        Target(source.bronze, [Equals((source.user,), (subject,)), Mentions("payload", user_field, subject)],
               "events of the subject, raw payload", source.landing),
        Target(source.quarantine, [_raw_lines(source.fields[source.user], user_field, subject)],
               "raw lines naming the subject", source.landing, raw_lines=True),
        Target(source.silver, [Equals((source.silver_column(source.user),),
                                      _as_kept(subject, hashed, source.user in source.pii))], "the subject's events"),
    ]
    if not keys:
        return targets, {source.rejected: "no event of the subject in bronze"}
    targets.append(Target(source.rejected, [Equals((source.key,), keys)], "the subject's rejected events"))
    return targets, {}


def _per_user_targets(gold: Gold, subject: str, hashed: str) -> Found:
    """Gold's tables of rows per user; its other event tables are aggregates over users."""
    if gold.events is None or gold.events.user is None:
        return [], {}
    user = _as_kept(subject, hashed, gold.events.user in gold.events.pii)
    targets = [Target(name, [Equals(("user_id",), user)], "rows per user") for name in gold.per_user_tables]
    left = {name: "an aggregate over users: holds no person"
            for name in gold.event_tables if name not in gold.per_user_tables}
    return targets, left


def _sql_table_targets(gold: Gold, subject: str, hashed: str) -> Found:
    """The declared SQL tables. A query may carry an id through, so each text column is searched for the subject
    and for their pseudonym."""
    targets, left = [], {}
    for name, sql_table in gold.sql_tables.items():
        text = [c for c, kind in sql_table.columns.items() if kind.strip().lower() in ("string", "varchar")]
        if text:
            targets.append(Target(name, [Equals((c,), (subject, hashed)) for c in text],
                                  "a declared SQL table: rows naming the subject in a text column"))
        else:
            left[name] = "a declared SQL table with no text column: holds no one's id"
    return targets, left


def _cdc_targets(table: CdcTable, subject: str, hashed: str) -> Found:
    """A CDC table's bronze, quarantine, current state and history, when its subject column can hold the subject."""
    if table.subject is None:
        return [], {t: "the CDC table declares no subject column" for t in table.table_names}
    c = table.subject
    kind = spark_type(table.columns[c])
    if is_numeric(kind) and not is_number(subject):
        return [], {t: f"its subject column {c} is a number and the subject is not" for t in table.table_names}
    mentions = [Mentions("payload", c, subject), Mentions("key", c, subject)]
    silver = Equals((table.silver_column(c),), _as_kept(subject, hashed, c in table.pii))
    return [
        Target(table.bronze, [Equals(("after", c), (subject,)), Equals(("before", c), (subject,)), *mentions],
               "changes of the subject's rows", table.landing),
        Target(table.quarantine, [_raw_lines(kind, c, subject)], "raw change events naming the subject",
               table.landing, raw_lines=True),
        Target(table.silver, [silver], "the subject's current rows"),
        Target(table.history, [silver], "every version of the subject's rows"),
    ], {}


def id_columns(project: Project) -> tuple[str, ...]:
    """The columns and JSON fields that hold a person's id: each CDC table's subject column, each event source's
    user field (in its tables and as its records name it), gold's per-user column, and their names in silver. A
    subject that is a number is looked for there by the independent scan (`trace_scan`'s `id_columns`)."""
    names: set[str] = set()
    for table in project.cdc.values():
        if table.subject is not None:
            names |= {table.subject, table.silver_column(table.subject)}
    for source in project.events.values():
        if source.user is not None:
            names |= {source.user, source.silver_column(source.user),
                      source.paths.get(source.user, source.user).split(".")[-1]}
    if project.gold.events is not None and project.gold.events.user is not None:
        names.add("user_id")
    return tuple(sorted(names))


def _raw_lines(kind: DataType, field: str, subject: str) -> Names | Mentions:
    """How a raw line (JSON or not) names the subject: a number only in the field that holds it (`"account_id": 28`;
    any other 28 in a line is another value: an order's number, a count), any other value as a whole word
    anywhere in it."""
    return Mentions("payload", field, subject) if is_numeric(kind) else Names("payload", subject)


def _read_file(table: Table, path: str, columns: list[str]) -> pa.Table:
    """A data file's rows as written (delete files not applied), straight from storage."""
    with table.io.new_input(path).open() as f:
        return pq.read_table(f, columns=columns)


def _files_with_subject(table: Table, target: Target, paths: list[str]) -> dict[str, int]:
    found = {}
    for path in paths:
        rows = target.count(_read_file(table, path, target.columns()))
        if rows:
            found[path] = rows
    return found


def _live_data_files(table: Table) -> list[str]:
    """Every data file any kept snapshot references (what a reader at any retained point could see)."""
    manifests = {m.manifest_path: m for s in table.metadata.snapshots for m in s.manifests(table.io)
                 if m.content == ManifestContent.DATA}
    return sorted({entry.data_file.file_path for m in manifests.values()
                   for entry in m.fetch_manifest_entry(table.io, discard_deleted=True)})


class Forget:
    def __init__(self, lakehouse: LakehouseResource, project: Project, log: Callable[[str], None] = print):
        self.lakehouse, self.project, self.log = lakehouse, project, log

    @property
    def spark(self):
        return self.lakehouse.spark

    def _exists(self, name: str) -> bool:
        return self.lakehouse.catalog.table_exists((self.lakehouse.settings.namespace, name))

    def _event_keys(self, bronze: str, user: str, key: str) -> tuple[str, ...]:
        if not self._exists(bronze):
            return ()
        rows = self.spark.table(self.lakehouse.table_id(bronze)).where(
            Equals((user,), (self._subject,)).sql()).select(key).distinct().collect()
        return tuple(str(r[0]) for r in rows if r[0] is not None)

    def run(self, subject: str, dry_run: bool = False, wait_s: float = 1800.0) -> ForgetReport:
        if not subject or len(subject) > 1000:
            raise ValueError("a subject id is 1 to 1000 characters")
        started = time.monotonic()
        self._subject = subject
        self._hashed = hashed = keyed_hash_of(subject, pii_key(self.lakehouse.settings))
        targets, left = subject_targets(self.project, subject, hashed, self._event_keys)
        report = ForgetReport(subject, left_alone=left)
        landed: dict[str, set[str]] = defaultdict(set)  # landing source -> files whose lines were deleted
        proofs: dict[str, TableProof] = {}
        for target in targets:
            if not self._exists(target.table):
                report.left_alone[target.table] = "not materialised"
                continue
            proofs[target.table] = proof = TableProof(target.table, target.why)
            report.tables.append(proof)
            self._attempt(target, proof, landed, dry_run)
        if not dry_run and (instance := _instance()) is not None:
            # A run that started before the deletes ended may have read the subject and publish after them.
            in_flight = _runs_in_flight(instance, before=time.time())
            report.runs_waited = sorted(in_flight)
            report.runs_in_flight = _wait_for(instance, in_flight, wait_s, self.log)
            if in_flight:
                for target in targets:
                    if target.table in proofs:
                        self._attempt(target, proofs[target.table], landed, dry_run, again=True)
        for target in targets:
            if target.table in proofs:
                self._verify(target, proofs[target.table], dry_run)
        self._landing(subject, targets, landed, report, dry_run)
        if not dry_run:
            self._scan_independently(report, proofs, began_at=time.time() - (time.monotonic() - started))
        report.seconds = time.monotonic() - started
        return report

    def _attempt(self, target: Target, proof: TableProof, landed: dict[str, set[str]], dry_run: bool,
                 again: bool = False) -> None:
        """A table's delete and purge (`again`: after the runs in flight ended). When a step fails, the table is not
        done (the report says why) and forget goes on with the others. Every step can be taken again: the same
        command, run again, finds what is left and finishes it."""
        try:
            self._delete(target, proof, landed, dry_run, again)
        except Exception as exc:  # noqa: BLE001 - reported per table; the tables after it are still forgotten
            first = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else ""
            proof.not_done = f"{type(exc).__name__}: {first}".rstrip(": ")
            self.log(f"forget: {proof.table} NOT done: {proof.not_done}")
            return
        proof.not_done = None

    def _verify(self, target: Target, proof: TableProof, dry_run: bool) -> None:
        """Every data file a kept snapshot references, read as written: the rows of the subject still there (but
        those only legal holds keep); after the deletes, a table that still has any is not done."""
        table = self.lakehouse.iceberg_table(target.table)
        live = _live_data_files(table)
        proof.live_files_scanned = len(live)
        proof.rows_found_after = sum(_files_with_subject(table, target, live).values())
        if proof.legal_holds:
            proof.rows_found_after -= self._held_rows(table, target, proof)
        if proof.rows_found_after and proof.done and not dry_run:
            proof.not_done = f"{proof.rows_found_after} rows of the subject are still in files a kept snapshot references"

    def _scan_independently(self, report: ForgetReport, proofs: dict[str, TableProof], began_at: float) -> None:
        """The proof that does not trust the matchers: every file of the namespace's tables, the landing zone and
        capture staging searched for the subject and their pseudonym (operations/trace_scan.py). A file no snapshot
        references (a crashed write's, a failed commit's metadata) that holds them is removed when it last changed
        at least ORPHAN_MIN_AGE before forget began; a younger one may belong to a write still going, and is
        left and reported. Files a legal hold keeps are left and reported by their tables."""
        catalog, namespace = self.lakehouse.catalog, self.lakehouse.settings.namespace
        tables = [catalog.load_table(identifier) for identifier in catalog.list_tables(namespace)]
        referenced = set().union(*(_referenced_files(t) for t in tables)) if tables else set()
        held = set().union(*(_held_files(self.lakehouse.iceberg_table(name), proof.legal_holds)
                             for name, proof in proofs.items() if proof.legal_holds)) if proofs else set()
        roots = [_as_uri(t.location()) for t in tables]
        scan = trace_scan(self.lakehouse.settings, {"subject": self._subject, "pseudonym": self._hashed},
                          warehouse_roots=roots, id_columns=id_columns(self.project))
        report.independent_scan = {"files_scanned": dict(scan.files_scanned), "seconds": round(scan.seconds, 2)}
        newest_orphan = began_at - ORPHAN_MIN_AGE.total_seconds()
        zone = landing_zone(self.lakehouse.settings.with_(landing=self.lakehouse.settings.warehouse))
        for hit in scan.hits:
            key = _normal(hit.file)
            if hit.file in report.traces or hit.file in report.orphans_removed or key in held:
                continue
            if hit.area != WAREHOUSE or key in referenced:
                report.traces[hit.file] = f"{_STILL_THERE[hit.area if hit.area != WAREHOUSE else 'referenced']} " \
                                          f"(the {hit.identifier}, {hit.form})"
            elif hit.changed < newest_orphan:
                zone.remove(_as_uri(hit.file))
                report.orphans_removed.append(hit.file)
            else:
                report.traces[hit.file] = (f"no snapshot references it and it changed less than {ORPHAN_MIN_AGE} "
                                           "before forget began (a write may still commit it): run forget again "
                                           "later")
        for file, why in scan.unreadable.items():
            if file not in report.orphans_removed and _normal(file) not in held:
                report.traces[file] = f"unreadable, so not proven: {why}"
        if report.orphans_removed:
            self.log(f"forget: removed {len(report.orphans_removed)} files no snapshot referenced that held the "
                     "subject")

    def _delete(self, target: Target, proof: TableProof, landed: dict[str, set[str]], dry_run: bool,
                again: bool) -> None:
        """Deletes the target's rows of the subject (and purges the files that keep them); the proof counts them
        (`again`: as deleted after the runs in flight)."""
        target = self._resolve(target)
        frame = self.spark.table(self.lakehouse.table_id(target.table)).where(target.sql())
        if dry_run or target.landing is None:
            rows = frame.count()
        else:  # landed lines: their lineage read once, recorded before the delete, and counted from it
            lines = frame.select("source_file", "source_line", "run_id", "landing_date").toPandas()
            rows = len(lines)
            if rows:
                self._record_forgotten(target, lines)
                landed[target.landing].update(lines["source_file"])
                proof.lines_forgotten += rows
        if again:
            proof.rows_deleted_after_runs = rows
        else:
            proof.rows_deleted = rows
        if not dry_run:
            self._purge(target, proof, rows)

    def _resolve(self, target: Target) -> Target:
        """A target whose matchers judge raw lines in Python (Names): the lines that name the subject, read from the
        table, become the values its SQL deletes."""
        if not any(isinstance(m, Names) for m in target.matchers):
            return target
        frame = self.spark.table(self.lakehouse.table_id(target.table))
        matchers = [m.resolve(row[0] for row in frame.select(m.column).distinct().toLocalIterator())
                    if isinstance(m, Names) else m for m in target.matchers]
        return replace(target, matchers=matchers)

    def _record_forgotten(self, target: Target, lines: Any) -> None:
        """Writes the landed lines the target's delete is about to take (a pandas frame of their lineage) into the
        ledger, before the delete: a forget interrupted after it and run again records the same lines again, which
        reconcile counts once."""
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        data = pa.table({
            "table_name": pa.array([target.table] * len(lines), pa.string()),
            "source": pa.array([target.landing] * len(lines), pa.string()),
            "source_file": pa.array(lines["source_file"].tolist(), pa.string()),
            "source_line": pa.array(lines["source_line"].tolist(), pa.int32()),
            "run_id": pa.array(lines["run_id"].tolist(), pa.string()),
            "landing_date": pa.array(lines["landing_date"].tolist(), pa.date32()),
            "forgotten_at": pa.array([now] * len(lines), pa.timestamp("us")),
        })
        catalog, identifier = self.lakehouse.catalog, (self.lakehouse.settings.namespace, FORGOTTEN)
        catalog.create_table_if_not_exists(identifier, schema=data.schema)
        append_retrying(catalog, identifier, data, {"lakehouse.operation": "forget"}, log=self.log)

    def _landing(self, subject: str, targets: list[Target], landed: dict[str, set[str]], report: ForgetReport,
                 dry_run: bool) -> None:
        """Removes from the landing zone the files whose lines were deleted, or that name the subject (an earlier
        forget may have deleted their lines and stopped before this step), when the file is as bronze took it.
        A file that names the subject but is not taken yet, or grew since, is reported as pending. Lines are
        judged as the source's quarantine judges them (a number counts only in the subject's field)."""
        zone = landing_zone(self.lakehouse.settings)
        judges = {t.landing: t for t in targets if t.raw_lines and t.landing}
        for source in self.project.landing_sources:
            judge = judges.get(source.landing) or Target("", [Names("payload", subject)], "", raw_lines=True)
            taken = self._taken_sizes(source.landing)
            for f in zone.list(source.landing):
                whole = taken.get(f.uri) == f.size
                if (whole and f.uri in landed[source.landing]) or judge.names_line(_lines(zone.read(f.uri), f.uri)):
                    if not whole:
                        report.landing_pending[f.uri] = (
                            "names the subject and is not taken yet: ingest it, then run forget again"
                            if f.uri not in taken else
                            "names the subject and grew since it was taken: ingest it, then run forget again")
                        continue
                    if not dry_run:
                        zone.remove(f.uri)
                    report.landing_removed.append(f.uri)

    def _taken_sizes(self, source: str) -> dict[str, int]:
        """Each landed file the ingest log lists: its size at its newest take."""
        takes = newest_takes(self.lakehouse.catalog, self.lakehouse.settings.namespace, source)
        return {uri: take["size"] for uri, take in takes.items()}

    def _held_rows(self, table: Table, target: Target, proof: TableProof) -> int:
        """Rows of the subject only in files a legal-hold tag keeps (reported, not counted as a failure)."""
        held: set[str] = set()
        for tag in proof.legal_holds:
            ref = table.metadata.refs.get(tag)
            if ref is not None:
                held.update(file_paths(table, ref.snapshot_id))
        on_main = file_paths(table)
        return sum(_files_with_subject(table, target, sorted(held - on_main)).values())

    def _retry(self, action: Callable[[], Any], what: str) -> Any:
        return retry_on_conflict(action, f"forget: {what}", self.log)[0]

    def _call(self, name: str, procedure: str, arguments: str, what: str) -> list[Any]:
        """Runs an Iceberg Spark procedure on table `name` (retried on a commit conflict): its result rows."""
        settings = self.lakehouse.settings
        catalog = validate_identifier(settings.catalog_name, "catalog name")
        table = f"'{catalog}.{validate_identifier(settings.namespace, 'namespace')}.{name}'"
        return self._retry(lambda: self.spark.sql(
            f"CALL {catalog}.system.{procedure}(table => {table}{arguments})").collect(), what)

    def _purge(self, target: Target, proof: TableProof, rows: int) -> None:
        """Deletes the subject's rows, then removes every file and manifest still holding them: rewrites the data
        files under delete files, drops the tags and branches that keep such files (legal holds excepted) and
        expires the snapshots that reference them."""
        table_id = self.lakehouse.table_id(target.table)
        if rows:
            self._retry(lambda: self.spark.sql(f"DELETE FROM {table_id} WHERE {target.sql()}"),
                        f"DELETE from {table_id}")
        table = self._rewrite_files_with_deletes(target, proof)
        live = _live_data_files(table)
        dirty = _files_with_subject(table, target, live)  # the other live files were read and are clean
        if set(dirty) & file_paths(table):
            raise MaintenanceError(f"forget: {table_id} still holds the subject in files of its current snapshot "
                                   "after the delete; nothing was expired")
        table, naming = self._manifests_naming(table, target, set(live), set(dirty))
        if not dirty and not naming:
            return
        holding = sorted({s.snapshot_id for s in table.metadata.snapshots
                          if set(dirty) & file_paths(table, s.snapshot_id)} | naming)
        self._drop_refs_to(table, table_id, holding, set(dirty), proof)
        expire = self._expire(target, holding, proof)
        self.log(f"forget: {table_id}: {rows} rows deleted, {len(dirty)} files and {len(naming)} snapshots' "
                 "manifests held the subject, "
                 f"{len(expire)} snapshots expired, {len(proof.tags_removed)} tags removed")

    def _rewrite_files_with_deletes(self, target: Target, proof: TableProof) -> Table:
        """Rows hidden by delete files are still in their data files: rewrites those files without them."""
        table = self.lakehouse.iceberg_table(target.table)
        if not files_of(table, data=False):
            return table
        rewritten = self._call(target.table, "rewrite_data_files",
                               ", options => map('delete-file-threshold', '1', 'min-input-files', '1', "
                               "'remove-dangling-deletes', 'true')",
                               f"rewrite of {self.lakehouse.table_id(target.table)}")
        proof.files_rewritten += int(rewritten[0]["rewritten_data_files_count"] or 0) if rewritten else 0
        return self.lakehouse.iceberg_table(target.table)

    def _manifests_naming(self, table: Table, target: Target, live: set[str],
                          dirty: set[str]) -> tuple[Table, set[int]]:
        """The snapshots whose manifests keep the subject in a column bound. When the current snapshot is one, its
        manifests are written again first (refused if they still keep it). Returns the table as it is after."""
        naming = self._snapshots_naming(table, target, live, dirty)
        if table.metadata.current_snapshot_id not in naming:
            return table, naming
        table = self._rewrite_manifests(target.table)
        naming = self._snapshots_naming(table, target, live, dirty)
        if table.metadata.current_snapshot_id in naming:
            raise MaintenanceError(f"forget: {self.lakehouse.table_id(target.table)}: the manifests of its current "
                                   "snapshot still keep the subject in their column bounds after rewriting them; "
                                   "nothing was expired")
        return table, naming

    def _drop_refs_to(self, table: Table, table_id: str, holding: list[int], dirty: set[str],
                      proof: TableProof) -> None:
        """Drops the tags and branches (main aside) on a snapshot that holds the subject. A legal-hold tag is kept:
        the proof counts the files it keeps that hold the subject."""
        for name, ref in list(table.metadata.refs.items()):
            if name == "main" or ref.snapshot_id not in holding:
                continue
            if ref.snapshot_ref_type == "tag" and name.startswith(LEGAL_HOLD):
                proof.legal_holds[name] = len(dirty & file_paths(table, ref.snapshot_id))
                continue
            kind = "TAG" if ref.snapshot_ref_type == "tag" else "BRANCH"
            self.spark.sql(f"ALTER TABLE {table_id} DROP {kind} IF EXISTS `{validate_identifier(name, 'ref name')}`")
            (proof.tags_removed if kind == "TAG" else proof.branches_removed).append(name)

    def _expire(self, target: Target, holding: list[int], proof: TableProof) -> list[int]:
        """Expires the snapshots holding the subject, but those of legal-hold tags: the snapshots expired."""
        refs = self.lakehouse.iceberg_table(target.table).metadata.refs
        expire = sorted(set(holding) - {refs[t].snapshot_id for t in proof.legal_holds})
        if expire:
            ids = ", ".join(str(int(i)) for i in expire)
            self._call(target.table, "expire_snapshots", f", snapshot_ids => array({ids})",
                       f"expiry of {self.lakehouse.table_id(target.table)}")
            proof.snapshots_expired += expire
        return expire

    def _snapshots_naming(self, table: Table, target: Target, live: set[str], held: set[str]) -> set[int]:
        """The snapshots with a manifest that records a file holding the subject.

        A manifest keeps each file's smallest and largest value of each column (so possibly the subject's name or
        e-mail), even for files a delete removed, until the manifest is written again. A file is judged by its
        rows when they can be read: those in `held` hold the subject; the other `live` files were read whole and
        are clean, whatever their bounds look like (`{"account_id":28` may be 280's row cut to 16 characters).
        A file no kept snapshot references is read if it is still stored, else judged by its bounds
        (`BoundJudge`)."""
        judge = BoundJudge.of(table, target, self._subject, self._hashed)
        verdicts: dict[str, bool] = {}

        def holds(data_file: Any) -> bool:
            path = data_file.file_path
            if path in held or path in live:
                return path in held
            if path not in verdicts:
                try:
                    verdicts[path] = bool(_files_with_subject(table, target, [path]))
                except FileNotFoundError:
                    verdicts[path] = judge.names(data_file)
            return verdicts[path]

        naming: dict[str, bool] = {}
        found = set()
        for snapshot in table.metadata.snapshots:
            for manifest in snapshot.manifests(table.io):
                if manifest.manifest_path not in naming:
                    naming[manifest.manifest_path] = manifest.content == ManifestContent.DATA and any(
                        holds(entry.data_file)
                        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False))
                if naming[manifest.manifest_path]:
                    found.add(snapshot.snapshot_id)
        return found

    def _rewrite_manifests(self, name: str) -> Table:
        """Writes the current snapshot's data manifests again, with the live files only. Iceberg skips a table whose
        one manifest would be rewritten into one: for the call, the target manifest size is set below its size."""
        spark, table_id = self.spark, self.lakehouse.table_id(name)
        table = self.lakehouse.iceberg_table(name)
        snapshot = table.current_snapshot()
        data = [m for m in snapshot.manifests(table.io) if m.content == ManifestContent.DATA] if snapshot else []
        size, before = "commit.manifest.target-size-bytes", table.properties.get("commit.manifest.target-size-bytes")
        if len(data) == 1:
            spark.sql(f"ALTER TABLE {table_id} SET TBLPROPERTIES ('{size}' = '{max(1, data[0].manifest_length // 2)}')")
        try:
            self._call(name, "rewrite_manifests", "", f"manifest rewrite of {table_id}")
        finally:
            if len(data) == 1:
                spark.sql(f"ALTER TABLE {table_id} SET TBLPROPERTIES ('{size}' = '{int(before)}')" if before else
                          f"ALTER TABLE {table_id} UNSET TBLPROPERTIES ('{size}')")
        return self.lakehouse.iceberg_table(name)


_STILL_THERE = {
    "referenced": "a file a snapshot references holds the subject",
    LANDING: "a landed file holds the subject and bronze does not have it yet: ingest it, then run forget again",
    STAGING: "a capture's part file holds the subject and has not landed yet: once the capture lands it (as it rolls "
             "the file, or at its next start) and bronze takes it, run forget again",
}


def _normal(path: str) -> str:
    """A file's path as the independent scan and Iceberg's metadata can both be compared by: a local file's path
    without `file:`, an object's `s3://bucket/key` whatever the scheme's spelling."""
    parts = urlsplit(path)
    if parts.scheme in ("", "file"):
        return os.path.normpath(parts.path)
    return f"s3://{parts.netloc}{parts.path}"


def _as_uri(path: str) -> str:
    return path if urlsplit(path).scheme else f"file:{path}"


def _referenced_files(table: Table) -> set[str]:
    """Every file the table's metadata names: its metadata files, and each snapshot's manifest list, manifests and
    their data and delete files (those a snapshot removed too: an older snapshot may still hold them)."""
    paths = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)}
    paths |= {s.statistics_path for s in table.metadata.statistics}
    manifests: set[str] = set()
    for snapshot in table.metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path not in manifests:
                manifests.add(manifest.manifest_path)
                paths |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False)}
    return {_normal(p) for p in paths | manifests}


def _held_files(table: Table, holds: dict[str, int]) -> set[str]:
    """The files the legal-hold tags keep: their snapshots' manifest lists, manifests, data and delete files."""
    paths: set[str] = set()
    for tag in holds:
        ref = table.metadata.refs.get(tag)
        snapshot = table.snapshot_by_id(ref.snapshot_id) if ref is not None else None
        if snapshot is not None:
            paths |= {snapshot.manifest_list, *(m.manifest_path for m in snapshot.manifests(table.io))}
            paths |= {f.file_path for f in files_of(table, snapshot.snapshot_id)}
    return {_normal(p) for p in paths}


def _instance() -> Any:
    """The Dagster instance of DAGSTER_HOME, or None when there is none (no runs to coordinate with)."""
    if not os.environ.get("DAGSTER_HOME"):
        return None
    from dagster import DagsterInstance

    return DagsterInstance.get()


_GOING = ("STARTING", "STARTED", "CANCELING")


def _runs_in_flight(instance: Any, before: float) -> set[str]:
    """Runs going now that started before `before` (epoch seconds)."""
    from dagster import DagsterRunStatus, RunsFilter

    records = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus[s] for s in _GOING]))
    return {r.dagster_run.run_id for r in records if r.start_time is None or r.start_time < before}


def _wait_for(instance: Any, runs: set[str], wait_s: float, log: Callable[[str], None]) -> list[str]:
    """Waits up to `wait_s` for the runs to end: those still going then."""
    from dagster import RunsFilter

    deadline = time.monotonic() + wait_s
    going = set(runs)
    if going:
        log(f"forget: waiting for {len(going)} run(s) that may have read the subject: {', '.join(sorted(going))}")
    while going:
        going = {r.dagster_run.run_id for r in instance.get_run_records(RunsFilter(run_ids=sorted(going)))
                 if r.dagster_run.status.value in _GOING}
        if not going or time.monotonic() > deadline:
            break
        time.sleep(2)
    return sorted(going)


def _lines(data: bytes, uri: str) -> list[str]:
    """A landed file's lines; a gzip file cut off is read as far as it goes."""
    if uri.endswith(".gz"):
        try:
            data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
        except zlib.error:
            return [data.decode("utf-8", errors="replace")]  # not gzip at all: what bronze quarantined whole
    return data.decode("utf-8", errors="replace").splitlines()


def proof_json(report: ForgetReport) -> str:
    return json.dumps(report.as_dict(), indent=2, default=str)
