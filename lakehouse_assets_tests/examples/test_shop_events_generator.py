"""The sample generator is reproducible and reports exactly what it wrote."""

import datetime as dt
import json

from examples.shop.events_generator import generate_day


def test_same_seed_same_bytes_and_counts_match_the_files(tmp_path):
    day = dt.date(2025, 3, 1)
    a = generate_day(tmp_path / "a", day, events_per_day=400, malformed_rate=0.05, duplicate_rate=0.05)
    b = generate_day(tmp_path / "b", day, events_per_day=400, malformed_rate=0.05, duplicate_rate=0.05)
    assert [f.read_bytes() for f in a.files] == [f.read_bytes() for f in b.files]

    lines = [line for f in a.files for line in f.read_text().splitlines()]
    assert len(lines) == a.lines == a.events + a.duplicates + sum(a.malformed.values())
    ids = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and "event_id" in event:
            ids.append(event["event_id"])
    assert len(ids) - len(set(ids)) == a.duplicates > 0
    assert a.malformed and all(n > 0 for n in a.malformed.values())


def test_regenerating_a_day_replaces_its_files(tmp_path):
    day = dt.date(2025, 3, 1)
    generate_day(tmp_path, day, events_per_day=100, files_per_day=5)
    again = generate_day(tmp_path, day, events_per_day=100, files_per_day=2)
    assert sorted(p.name for p in again.files[0].parent.iterdir()) == ["events-00.jsonl", "events-01.jsonl"]


def test_today_runs_until_now_and_no_further(tmp_path):
    """The demo's last day is today: its events reach the last minutes, none is in the future."""
    before = dt.datetime.now(dt.timezone.utc)
    generated = generate_day(tmp_path, before.date(), events_per_day=2_000, malformed_rate=0.0)
    after = dt.datetime.now(dt.timezone.utc)
    times = [dt.datetime.fromisoformat(json.loads(line)["event_ts"].replace("Z", "+00:00"))
             for f in generated.files for line in f.read_text().splitlines()]
    assert len(times) == generated.events + generated.duplicates
    assert max(times) <= after
    if before.hour >= 1:  # a day with an hour behind it has sessions in its last minutes
        assert max(times) >= before - dt.timedelta(minutes=5)
