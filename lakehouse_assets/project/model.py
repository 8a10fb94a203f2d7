"""A lakehouse project as the platform uses it: sources, tables and the domain facts gold needs.

Built from a validated declaration (`project.load`); everything downstream
(tables, assets, checks, sensors, the CLI's source list) derives from it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import types as T

from .declaration import RuleDecl, ValueCheck

INGEST_LOG = "bronze_ingest_log"
FORGOTTEN = "bronze_forgotten"  # lines `lakehouse forget` deleted from bronze and quarantines (operations/forget.py)
ROUNDINGS = ("half_up",)  # how a CDC table's decimal column may round a value with more scale than declared
MAX_LATENESS = "max_lateness"  # the rule an event breaks when it lands later than its source allows
# The gold and ML tables built from an event source with a user field.
MINUTE_ACTIVITY = "gold_minute_activity"
SESSIONS = "gold_sessions"
DAILY_FUNNEL = "gold_daily_funnel"
DAILY_ACTIVITY = "gold_daily_activity"
USER_FEATURES = "ml_user_features"
TRAINING_SET = "ml_training_set"


def pseudonym(column: str) -> str:
    """The column silver keeps for a declared personal-data column: its keyed hash (runtime/pii.py)."""
    return f"{column}_hash"


class _Pseudonymised:
    pii: tuple[str, ...]

    renamed: dict[str, str]

    def silver_column(self, column: str) -> str:
        """The name `column` has from silver on: its pseudonym when it is declared personal data."""
        return pseudonym(column) if column in self.pii else column

    @property
    def pseudonyms(self) -> dict[str, str]:
        """Each pseudonym column of silver and the source column it hashes."""
        return {pseudonym(c): c for c in self.pii}

    def silver_renamed(self) -> dict[str, str]:
        """The declared renames (column -> its former name) as silver names them (a pseudonym follows its
        column)."""
        return {self.silver_column(new): pseudonym(old) if new in self.pii else old
                for new, old in self.renamed.items()}


class _TableName:
    """A table name made from the source's own name: `silver = _TableName("silver_{}")`."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def __get__(self, source: Any, owner: type | None = None) -> str:
        return self.pattern if source is None else self.pattern.format(source.name)


@dataclass(frozen=True)
class EventSource(_Pseudonymised):
    """A behavioural event log: JSON lines landed under `<landing zone>/<landing>/date=D/`."""

    name: str
    landing: str
    description: str
    fields: dict[str, T.DataType]
    paths: dict[str, str]  # field -> where it is in the record (dotted)
    required: tuple[str, ...]
    key: str
    timestamp: str
    user: str | None = None
    session: str | None = None
    event_type: str | None = None
    event_types: tuple[str, ...] | None = None  # a closed vocabulary, when declared
    pii: tuple[str, ...] = ()
    rules: tuple[RuleDecl, ...] = ()
    checks: dict[str, ValueCheck] = field(default_factory=dict)
    late_days: int = 2
    max_lateness: dt.timedelta | None = None  # landing day - event time beyond this: rejected (rule max_lateness)
    renamed: dict[str, str] = field(default_factory=dict)  # field -> the name it had (`renamed_from`)
    topic: str | None = None  # a Kafka topic the events are read from, instead of landing files

    bronze = _TableName("bronze_{}")
    quarantine = _TableName("bronze_{}_quarantine")
    silver = _TableName("silver_{}")
    rejected = _TableName("silver_{}_rejected")

    @property
    def table_names(self) -> tuple[str, ...]:
        return (self.bronze, self.quarantine, self.silver, self.rejected)


@dataclass(frozen=True)
class CdcTable(_Pseudonymised):
    """A captured OLTP table: Debezium change events landed under `<landing zone>/cdc/<name>/date=D/`."""

    name: str
    connector: str  # "postgresql" or "mysql"
    server: str  # Debezium's topic prefix (`source.name`)
    database: str
    db_schema: str | None  # PostgreSQL schema; MySQL has none
    primary_key: tuple[str, ...]
    columns: dict[str, str]  # column -> declared type name, in row order
    description: str = ""
    pii: tuple[str, ...] = ()
    checks: dict[str, ValueCheck] = field(default_factory=dict)
    references: dict[str, tuple[str, str]] = field(default_factory=dict)  # column -> (table, column)
    partition: tuple[str, ...] = ()
    write_mode: str = "merge-on-read"
    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive"
    source: str = ""  # the `cdc:` entry (one connector) it is declared under
    subject: str | None = None  # the column naming the person a row is about (`lakehouse forget`)
    # Decimal column -> how a value with more scale than declared is rounded (`half_up`); any other such
    # value is quarantined.
    rounding: dict[str, str] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)  # column -> the name it had (`renamed_from`)
    on_kafka: bool = False  # its change events are in its Kafka topic (`topic`), not landing files

    @property
    def topic(self) -> str:
        return ".".join([self.server, self.db_schema or self.database, self.name])

    landing = _TableName("cdc/{}")  # its folder in the landing zone
    bronze = _TableName("bronze_cdc_{}")
    quarantine = _TableName("bronze_cdc_{}_quarantine")
    silver = _TableName("silver_{}")
    history = _TableName("silver_{}_history")

    @property
    def table_names(self) -> tuple[str, ...]:
        return (self.bronze, self.quarantine, self.silver, self.history)


@dataclass(frozen=True)
class Capture:
    """A declared CDC source that Dagster captures itself (PostgreSQL, with Debezium)."""

    source: str
    until_idle: dt.timedelta
    max_duration: dt.timedelta
    schedule: str | None
    max_retained_wal_bytes: int


@dataclass(frozen=True)
class Freshness:
    fail: dt.timedelta
    warn: dt.timedelta | None = None


@dataclass(frozen=True)
class SqlTable:
    """A gold table declared as a Spark SQL query over other tables, recomputed whole."""

    name: str
    description: str
    reads: tuple[str, ...]
    sql: str
    columns: dict[str, str]
    partitioned_by: tuple[str, ...]
    freshness: Freshness | None


# The event-derived gold tables and their default freshness (fail, warn).
GOLD_EVENT_TABLES = {
    MINUTE_ACTIVITY: Freshness(dt.timedelta(minutes=5), dt.timedelta(minutes=2)),
    SESSIONS: Freshness(dt.timedelta(minutes=30)),
    DAILY_FUNNEL: Freshness(dt.timedelta(minutes=30)),
    DAILY_ACTIVITY: Freshness(dt.timedelta(minutes=30)),
}
ML_TABLES = (USER_FEATURES, TRAINING_SET)


@dataclass(frozen=True)
class Gold:
    """What gold needs to know about the domain; `events` is None when the project has no events."""

    events: EventSource | None = None
    purchase_type: str | None = None
    amount: str | None = None
    funnel: tuple[str, ...] = ()
    session_field: str | None = None
    inactivity: dt.timedelta = dt.timedelta(minutes=30)
    freshness: dict[str, Freshness] = field(default_factory=dict)
    sql_tables: dict[str, SqlTable] = field(default_factory=dict)

    @property
    def event_tables(self) -> tuple[str, ...]:
        """The event gold tables: they need an event source with a user field (and a funnel, for the funnel)."""
        if self.events is None or self.events.user is None:
            return ()
        return tuple(t for t in GOLD_EVENT_TABLES if t != DAILY_FUNNEL or self.funnel)

    @property
    def ml_tables(self) -> tuple[str, ...]:
        return ML_TABLES if self.events and self.events.user else ()

    @property
    def per_user_tables(self) -> tuple[str, ...]:
        """The gold and ML tables with a row per user (`user_id`); the other event gold tables aggregate users."""
        return (SESSIONS, *self.ml_tables) if SESSIONS in self.event_tables else ()

    @property
    def bi_freshness(self) -> dict[str, Freshness | None]:
        """Each BI table (the event gold tables, the declared SQL tables) and its declared freshness."""
        declared = {name: self.freshness.get(name) for name in self.event_tables}
        declared.update({t.name: t.freshness for t in self.sql_tables.values()})
        return declared


@dataclass(frozen=True)
class TablePolicy:
    """One table's health thresholds and maintenance settings (declared, or the defaults)."""

    target_file_size_mb: float = 128.0
    max_small_files: int = 50
    max_delete_ratio: float = 0.10
    max_snapshots: int = 500
    snapshot_retention: dt.timedelta = dt.timedelta(days=7)
    # Past max_snapshots, every commit of the last snapshot_detail is kept, older ones the last of each such span.
    snapshot_detail: dt.timedelta = dt.timedelta(hours=1)
    retain_last: int = 10
    orphan_after: dt.timedelta = dt.timedelta(days=3)
    branch_retention: dt.timedelta = dt.timedelta(days=1)
    sort_by: tuple[str, ...] = ()
    zorder_by: tuple[str, ...] = ()

    @property
    def target_file_bytes(self) -> int:
        return int(self.target_file_size_mb * (1 << 20))

    @property
    def small_file_bytes(self) -> int:
        """Files under this size are small: Iceberg's bin-pack rewrites them (3/4 of the target, its default)."""
        return int(self.target_file_bytes * 0.75)


@dataclass(frozen=True)
class Maintenance:
    """When tables are compacted, expired and cleaned: defaults for all, overrides per table."""

    defaults: TablePolicy = field(default_factory=TablePolicy)
    tables: dict[str, TablePolicy] = field(default_factory=dict)
    nightly: str = "0 3 * * *"
    check_interval: dt.timedelta = dt.timedelta(seconds=60)
    # An ML materialisation's pin tags keep the snapshots it read and wrote this long; then expiry may take them.
    pin_retention: dt.timedelta = dt.timedelta(days=90)

    def policy(self, table: str) -> TablePolicy:
        return self.tables.get(table, self.defaults)


@dataclass(frozen=True)
class LandingPolicy:
    """When a landed file is complete enough to be taken: unchanged for `settle`, its folder marked ready by
    `ready_marker` when one is declared, and a file that ends mid-record unchanged for `incomplete_grace`; removed
    from the zone `retention` after it was taken (None: kept)."""

    settle: dt.timedelta = dt.timedelta(seconds=5)
    ready_marker: str | None = None
    incomplete_grace: dt.timedelta = dt.timedelta(minutes=5)
    retention: dt.timedelta | None = dt.timedelta(days=30)


@dataclass(frozen=True)
class Project:
    name: str
    file: Path
    description: str = ""
    start_date: dt.date = dt.date(2025, 1, 1)
    generator: Path | None = None
    events: dict[str, EventSource] = field(default_factory=dict)
    cdc: dict[str, CdcTable] = field(default_factory=dict)  # by table name
    gold: Gold = field(default_factory=Gold)
    captures: dict[str, Capture] = field(default_factory=dict)  # by `cdc:` entry
    maintenance: Maintenance = field(default_factory=Maintenance)
    landing: LandingPolicy = field(default_factory=LandingPolicy)

    @property
    def landing_sources(self) -> list[EventSource | CdcTable]:
        return [*self.events.values(), *self.cdc.values()]

    def landing_source(self, folder: str) -> EventSource | CdcTable:
        for source in self.landing_sources:
            if source.landing == folder:
                return source
        known = ", ".join(s.landing for s in self.landing_sources) or "none"
        raise KeyError(f"no landing source {folder!r} is declared in {self.file}; declared: {known}")

    @property
    def table_names(self) -> list[str]:
        names = [INGEST_LOG]
        for source in self.landing_sources:
            names += source.table_names
        names += [*self.gold.event_tables, *self.gold.sql_tables, *self.gold.ml_tables]
        return names

    def summary(self) -> dict[str, Any]:
        return {
            "project": self.name,
            "file": str(self.file),
            "event_sources": sorted(self.events),
            "cdc_tables": sorted(self.cdc),
            "tables": self.table_names,
        }
