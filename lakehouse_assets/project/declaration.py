"""The shape of a `lakehouse.yaml`: what a project may declare, checked field by field.

These models only say what is allowed where (unknown keys are errors); the
cross-references between them (a key among the columns, a rule on a known
field, one name per table) are checked in `project.load`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


class _Decl(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class FieldDecl(_Decl):
    type: str
    path: Optional[str] = Field(None, description="where the value is in the record (a.b.c); default: the name")
    description: str = ""
    renamed_from: Optional[str] = Field(None, description="the field's former name: its tables' column is renamed "
                                                          "in place (by field id), its history kept")


class ValueCheck(_Decl):
    """A rule every row of the silver table must satisfy, or the write is not published."""

    min: Optional[float] = None
    max: Optional[float] = None
    in_: Optional[list[Any]] = Field(None, alias="in")
    matches: Optional[str] = None
    not_null: bool = False


class RuleDecl(_Decl):
    """A reason to reject an event from silver (it goes to the rejected table, with the rule's name)."""

    name: str
    field: str
    when: dict[str, Any] = {}
    matches: Optional[str] = None
    in_: Optional[list[Any]] = Field(None, alias="in")
    not_in: Optional[list[Any]] = None
    below: Optional[float] = None
    above: Optional[float] = None
    missing: Optional[bool] = None
    later_than_ingestion_by: Optional[str] = None

    PREDICATES: ClassVar[tuple[str, ...]] = ("matches", "in_", "not_in", "below", "above", "missing", "later_than_ingestion_by")

    def predicates(self) -> list[str]:
        return [p for p in self.PREDICATES if getattr(self, p) is not None]


class KafkaTopicDecl(_Decl):
    topic: str = Field(description="the Kafka topic the events are published to (JSON values)")


class EventSourceDecl(_Decl):
    description: str = ""
    landing: Optional[str] = None
    kafka: Optional[KafkaTopicDecl] = Field(
        None, description="read the events from a Kafka topic (the broker named by the settings), not landing files")
    fields: dict[str, Union[str, FieldDecl]]
    required: list[str] = []
    key: str
    timestamp: str
    user: Optional[str] = None
    session: Optional[str] = None
    event_type: Optional[str] = None
    event_types: Optional[list[str]] = None
    pii: list[str] = []
    rules: list[RuleDecl] = []
    checks: dict[str, ValueCheck] = {}
    late_days: int = Field(2, ge=0, le=30, description="how many days after its event day an event may still land")
    max_lateness: Optional[str] = Field(
        None, description="an event landing this long after its event time is rejected (rule max_lateness)")


class CdcTableDecl(_Decl):
    description: str = ""
    primary_key: list[str]
    columns: dict[str, str]
    pii: list[str] = []
    checks: dict[str, ValueCheck] = {}
    references: dict[str, str] = {}
    partition: Optional[list[str]] = None
    write_mode: Literal["merge-on-read", "copy-on-write"] = "merge-on-read"
    subject: Optional[str] = Field(None, description="the column naming the person a row is about (for forget)")
    rounding: dict[str, str] = Field(
        {}, description="decimal column -> half_up: a value with more scale than declared is rounded (half away "
                        "from zero) rather than quarantined")
    renamed_from: dict[str, str] = Field(
        {}, description="column -> its former name: the tables' column is renamed in place (by field id)")


class CaptureDecl(_Decl):
    """Run Debezium from Dagster: a `capture_<source>` asset that captures until the source is idle."""

    until_idle: str = "10s"
    max_duration: str = "10m"
    schedule: Optional[str] = None  # a cron expression, e.g. "*/5 * * * *"
    max_retained_wal_mb: int = 1024


class CdcSourceDecl(_Decl):
    connector: Literal["postgresql", "mysql"]
    server: Optional[str] = None
    database: str
    schema_: Optional[str] = Field(None, alias="schema")
    # How the connector encodes values (Debezium's settings of the same names): bare records are read this way.
    decimal_handling_mode: Literal["precise", "string", "double"] = "precise"
    time_precision_mode: Literal["adaptive", "adaptive_time_microseconds", "connect"] = "adaptive"
    capture: Optional[CaptureDecl] = None
    kafka: bool = Field(False, description="the change events are in Kafka, one topic per table as Debezium names "
                                           "them (<server>.<schema>.<table>): the capture writes them there and "
                                           "bronze reads them from there, on the broker the settings name")
    tables: dict[str, CdcTableDecl]


class FreshnessDecl(_Decl):
    fail: str
    warn: Optional[str] = None


class PurchaseDecl(_Decl):
    event_type: str
    amount: Optional[str] = None


class SessionDecl(_Decl):
    field: Optional[str] = None
    inactivity: str = "30m"


class SqlTableDecl(_Decl):
    description: str = ""
    reads: list[str]
    sql: str
    columns: dict[str, str]
    partitioned_by: list[str] = []
    freshness: Union[str, FreshnessDecl, None] = "30m"


class GoldDecl(_Decl):
    events: Optional[str] = None
    purchase: Optional[PurchaseDecl] = None
    funnel: list[str] = []
    sessions: Optional[SessionDecl] = None
    freshness: dict[str, Union[str, FreshnessDecl]] = {}
    tables: dict[str, SqlTableDecl] = {}


class TableMaintenanceDecl(_Decl):
    """Health thresholds and maintenance of one table (or, at the top, of every table)."""

    target_file_size_mb: Optional[float] = Field(None, gt=0)
    max_small_files: Optional[int] = Field(None, ge=0, description="compact when more files than this are small")
    max_delete_ratio: Optional[float] = Field(None, ge=0, le=1,
                                              description="compact when this share of rows is deleted by delete files")
    max_snapshots: Optional[int] = Field(None, ge=1)
    snapshot_retention: Optional[str] = None
    snapshot_detail: Optional[str] = Field(None, description="past max_snapshots, time travel to every commit of "
                                                             "this last span, to one commit per span before it")
    retain_last: Optional[int] = Field(None, ge=1)
    orphan_after: Optional[str] = None
    branch_retention: Optional[str] = None
    sort_by: Optional[list[str]] = None
    zorder_by: Optional[list[str]] = None


class MaintenanceDecl(TableMaintenanceDecl):
    nightly: str = "0 3 * * *"
    check_interval: str = "60s"
    pin_retention: str = "90d"  # how long an ML materialisation's pin tags keep its snapshots from expiry
    tables: dict[str, TableMaintenanceDecl] = {}


class LandingDecl(_Decl):
    """When a landed file is complete enough to be taken (landing/versions.py)."""

    settle: str = Field("5s", description="a file is taken once it has not changed for this long")
    ready_marker: Optional[str] = Field(
        None, description="a file that marks a day folder complete (e.g. _SUCCESS): its files wait for it")
    incomplete_grace: str = Field(
        "5m", description="a file ending mid-record (no final newline, a gzip stream without its end) waits this "
                          "long after its last change before it is taken as it is")
    retention: Optional[str] = Field(
        "30d", description="a landed file is removed from the zone this long after it was taken, unchanged since "
                           "(bronze keeps every line as it landed); null keeps landed files for ever")


class ProjectDecl(_Decl):
    name: str
    description: str = ""
    start_date: Optional[dt.date] = None
    generator: Optional[str] = None
    events: dict[str, EventSourceDecl] = {}
    cdc: dict[str, CdcSourceDecl] = {}
    gold: GoldDecl = GoldDecl()
    maintenance: MaintenanceDecl = Field(default_factory=MaintenanceDecl)  # type: ignore[arg-type]
    landing: LandingDecl = Field(default_factory=LandingDecl)  # type: ignore[arg-type]
