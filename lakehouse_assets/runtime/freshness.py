"""Freshness measured on event time: how far the newest event a table holds is behind the present.

Every commit carries two watermarks in its snapshot summary, so the table's
current snapshot answers "how fresh" with no scan and no Spark:

- `lakehouse.newest-event-time`: the newest event time the table holds. Bronze
  and the stream stamp it from the rows they write; a table derived from another
  takes its upstream's watermark, capped at the end of the window it rewrote.
- `lakehouse.newest-landed-at`: when the newest landing file the table reflects
  landed (its modification time), carried down the chain the same way.

Both only move forward: a backfill of an old day never makes a table look staler.
Event lag = now - newest event time; landing-to-visible lag = the commit's time -
newest landed-at.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, MetadataValue
from pyiceberg.table import Table

from ..project import Freshness, Project
from ..settings import Settings
from ..times import UTC, from_ms
from .catalog import catalog_for

NEWEST_EVENT = "lakehouse.newest-event-time"
NEWEST_LANDED = "lakehouse.newest-landed-at"
CHECK = "event_time_freshness"
_ANCESTORS = 50  # how many ancestor snapshots to search when the current one carries no watermarks


def _parse(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value) if value else None


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def head_watermarks(table: Table) -> tuple[dt.datetime | None, dt.datetime | None]:
    """(newest event time, newest landed-at) of the table's current snapshot.

    A commit that brings no new data (compaction, manifest rewrite, the snapshot a
    rollback returns to) may not carry them: then those of the nearest ancestor
    snapshot that carries them are used.
    """
    snapshot = table.current_snapshot()
    for _ in range(_ANCESTORS):
        if snapshot is None:
            break
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if NEWEST_EVENT in props or NEWEST_LANDED in props:
            return _parse(props.get(NEWEST_EVENT)), _parse(props.get(NEWEST_LANDED))
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return None, None


def _newest(*values: dt.datetime | None) -> dt.datetime | None:
    present = [v for v in map(_utc, values) if v is not None]
    return max(present) if present else None


def from_spark(value: dt.datetime | None) -> dt.datetime | None:
    """A timestamp collected from Spark, aware UTC. PySpark hands timestamps to Python as naive datetimes in
    the process's local zone, whatever Spark's session zone: read as UTC they would be off by the host's offset."""
    return None if value is None else value.astimezone(UTC)  # a naive value is taken as local time


def newest_event(column: str) -> Any:
    """The aggregate of the newest `column` value that is not in the future: an event stamped in the future
    (a wrong clock, a year 9999) is not a time the data has reached, and must not pin the watermark."""
    from pyspark.sql import functions as F

    return F.max(F.when(F.col(column) <= F.current_timestamp(), F.col(column)))


def newest_event_time(df: Any, column: str) -> dt.datetime | None:
    """`newest_event` of Spark DataFrame `df`, aware UTC."""
    row = df.agg(newest_event(column)).first()
    return from_spark(row[0] if row is not None else None)


def watermark_properties(table: Table, newest_event: dt.datetime | None,
                         newest_landed: dt.datetime | None) -> dict[str, str]:
    """The summary properties of a commit on top of `table`'s head: each watermark the newer of the two."""
    head_event, head_landed = head_watermarks(table)
    props = {}
    if (event := _newest(head_event, newest_event)) is not None:
        props[NEWEST_EVENT] = event.isoformat()
    if (landed := _newest(head_landed, newest_landed)) is not None:
        props[NEWEST_LANDED] = landed.isoformat()
    return props


def derived_watermarks(upstream: Table, window_end: Any = None) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The watermarks a table computed from `upstream` at this moment may record: upstream's, with the event
    time capped at the end of the window it rewrote (`window_end` is a datetime, or a date: an exclusive end,
    so the last day included is the day before)."""
    event, landed = head_watermarks(upstream)
    if event is not None and window_end is not None:
        end = window_end if isinstance(window_end, dt.datetime) else dt.datetime.combine(window_end, dt.time())
        last = (_utc(end) or end) - dt.timedelta(microseconds=1)
        event = min(_utc(event) or event, last)
    return event, landed


@dataclass(frozen=True)
class FreshnessState:
    table: str
    newest_event_time: dt.datetime | None
    newest_landed_at: dt.datetime | None
    committed_at: dt.datetime | None
    now: dt.datetime
    declared: Freshness | None = None

    @property
    def event_lag(self) -> dt.timedelta | None:
        return self.now - self.newest_event_time if self.newest_event_time else None

    @property
    def landing_lag(self) -> dt.timedelta | None:
        """From the newest file landing to the commit that made it visible here."""
        if self.newest_landed_at is None or self.committed_at is None:
            return None
        return max(self.committed_at - self.newest_landed_at, dt.timedelta(0))

    @property
    def status(self) -> str:
        lag = self.event_lag
        if self.declared is None:
            return "undeclared"
        if lag is None:
            return "no data"
        if lag > self.declared.fail:
            return "fail"
        if self.declared.warn is not None and lag > self.declared.warn:
            return "warn"
        return "ok"

    def as_dict(self) -> dict[str, Any]:
        def seconds(d: dt.timedelta | None) -> float | None:
            return round(d.total_seconds(), 3) if d is not None else None

        return {
            "table": self.table,
            "newest_event_time": self.newest_event_time.isoformat() if self.newest_event_time else None,
            "event_lag_s": seconds(self.event_lag),
            "newest_landed_at": self.newest_landed_at.isoformat() if self.newest_landed_at else None,
            "landing_to_visible_s": seconds(self.landing_lag),
            "fail_after_s": seconds(self.declared.fail) if self.declared else None,
            "status": self.status,
        }

    def metadata(self) -> dict[str, Any]:
        d = self.as_dict()
        out: dict[str, Any] = {}
        if d["newest_event_time"]:
            out["newest_event_time"] = MetadataValue.text(d["newest_event_time"])
            out["event_lag_s"] = MetadataValue.float(d["event_lag_s"])
        if d["landing_to_visible_s"] is not None:
            out["landing_to_visible_s"] = MetadataValue.float(d["landing_to_visible_s"])
        return out


def freshness_state(table: Table, name: str, declared: Freshness | None = None,
                    now: dt.datetime | None = None) -> FreshnessState:
    snapshot = table.current_snapshot()
    event, landed = head_watermarks(table)
    committed = from_ms(snapshot.timestamp_ms) if snapshot else None
    return FreshnessState(name, _utc(event), _utc(landed), committed, now or dt.datetime.now(UTC), declared)


def freshness_rows(settings: Settings, project: Project) -> list[dict]:
    """Each BI table's freshness on event time, from its current snapshot's watermarks."""
    catalog = catalog_for(settings)
    rows = []
    for name, freshness in project.gold.bi_freshness.items():
        identifier = (settings.namespace, name)
        if not catalog.table_exists(identifier):
            rows.append({"table": name, "status": "missing"})
            continue
        rows.append(freshness_state(catalog.load_table(identifier), name, freshness).as_dict())
    return rows


def freshness_check_spec(asset: str, declared: Freshness) -> AssetCheckSpec:
    return AssetCheckSpec(
        name=CHECK, asset=asset, blocking=False,
        description=f"now - newest event time in the table is within {declared.fail} (event time, not run time)",
    )


def freshness_check_result(state: FreshnessState, asset: str) -> AssetCheckResult:
    return AssetCheckResult(
        asset_key=asset, check_name=CHECK, passed=state.status in ("ok", "warn"),
        severity=AssetCheckSeverity.WARN,
        metadata={**state.metadata(), "status": MetadataValue.text(state.status)},
        description=f"event lag {state.event_lag} against {state.declared.fail if state.declared else 'nothing'}",
    )
