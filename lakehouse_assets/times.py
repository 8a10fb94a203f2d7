"""Time as the lakehouse keeps it: UTC, and Iceberg's milliseconds since the epoch; and what "as of" means.

Every module takes UTC, the epoch and the conversions from here, so a snapshot's time
reads the same in `lakehouse snapshots`, `lakehouse sql --as-of` and a rollback.
"""

from __future__ import annotations

import datetime as dt

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_MS = dt.timedelta(milliseconds=1)


def from_ms(timestamp_ms: int) -> dt.datetime:
    """An Iceberg timestamp (a snapshot's commit time) as an aware datetime, exactly."""
    return EPOCH + timestamp_ms * _MS


def iso_ms(timestamp_ms: int) -> str:
    return from_ms(timestamp_ms).isoformat(timespec="milliseconds")


def to_ms(moment: dt.datetime) -> int:
    """Milliseconds since the epoch, rounded down (a moment within a commit's millisecond is at or after it);
    naive means UTC."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return (aware - EPOCH) // _MS


def parse_as_of(text: str) -> int | dt.datetime:
    """What an as-of or rollback point names: a snapshot id (digits) or a moment (an ISO date or timestamp,
    `Z` or an offset; naive means UTC). ValueError naming both forms otherwise."""
    value = str(text).strip()
    if value.isdigit():  # Iceberg's snapshot ids are positive
        return int(value)
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"as of {text!r}: expected a snapshot id or an ISO date or timestamp "
                         "(e.g. 2025-01-02 or 2025-01-02T10:00:00+00:00)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
