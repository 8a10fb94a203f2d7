"""One reading of time for every command: as-of points, and Iceberg's milliseconds."""

import datetime as dt

import pytest

from lakehouse_assets.times import UTC, from_ms, iso_ms, parse_as_of, to_ms


@pytest.mark.parametrize("text", ["2025-01-02T10:00:00Z", "2025-01-02T10:00:00z", "2025-01-02T10:00:00+00:00",
                                  "2025-01-02T11:00:00+01:00", "2025-01-02T10:00:00", " 2025-01-02 10:00 "])
def test_every_spelling_of_one_moment_is_that_moment(text):
    assert parse_as_of(text) == dt.datetime(2025, 1, 2, 10, tzinfo=UTC)


def test_digits_are_a_snapshot_id_and_a_date_is_its_midnight_in_utc():
    assert parse_as_of("8112233445566778899") == 8112233445566778899
    assert parse_as_of("2025-01-02") == dt.datetime(2025, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize("text", ["-5", "yesterday", "", "2025-13-01"])
def test_anything_else_is_refused_naming_both_forms(text):
    with pytest.raises(ValueError, match="expected a snapshot id or an ISO date or timestamp"):
        parse_as_of(text)


def test_milliseconds_round_down_and_read_back_exactly():
    commit_ms = 1_735_812_000_123  # 2025-01-02T10:00:00.123Z
    assert from_ms(commit_ms) == dt.datetime(2025, 1, 2, 10, 0, 0, 123000, tzinfo=UTC)
    assert iso_ms(commit_ms) == "2025-01-02T10:00:00.123+00:00"
    assert to_ms(from_ms(commit_ms)) == commit_ms
    # within the commit's millisecond is at or after it, never before
    assert to_ms(from_ms(commit_ms) + dt.timedelta(microseconds=999)) == commit_ms
    assert to_ms(dt.datetime(1969, 12, 31, 23, 59, 59, 999500, tzinfo=UTC)) == -1
    assert to_ms(dt.datetime(2025, 1, 2, 10)) == to_ms(dt.datetime(2025, 1, 2, 10, tzinfo=UTC))  # naive is UTC
