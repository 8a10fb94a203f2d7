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


def test_regenerating_a_past_day_leaves_its_files_as_they_landed(tmp_path):
    day = dt.date(2025, 3, 1)
    first = generate_day(tmp_path, day, events_per_day=100, files_per_day=5)
    landed = {f.name: f.read_bytes() for f in first.files}
    again = generate_day(tmp_path, day, events_per_day=100, files_per_day=2)
    assert {f.name: f.read_bytes() for f in first.files[0].parent.iterdir()} == landed
    assert (again.files, again.lines) == ([], 0)


def _events(path) -> list[dict]:
    """The well-formed events of a landed file."""
    found = []
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("event_id"), str) and "T" in str(event.get("event_ts")):
            found.append(event)
    return found


def test_later_runs_keep_the_landed_files_and_add_the_events_since_in_a_new_file(tmp_path):
    """Today at 10:00, again at 15:00, again at 15:00, and the next morning: every landed file stays byte for
    byte; each later run adds one file of events after the landed ones (none for the run at the same time),
    with event ids and sessions of their own; a day that was over when it was written gets nothing more."""
    today, yesterday = dt.date(2025, 3, 3), dt.date(2025, 3, 2)
    utc = dt.timezone.utc
    at = [dt.datetime.combine(today, dt.time(10), utc), dt.datetime.combine(today, dt.time(15), utc),
          dt.datetime.combine(today, dt.time(15), utc), dt.datetime.combine(today + dt.timedelta(days=1), dt.time(9), utc)]
    landed: dict = {}
    for n, now in enumerate(at):
        days = [generate_day(tmp_path, day, events_per_day=2_400, now=now) for day in (yesterday, today)]
        files = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*.jsonl"))}
        assert {p: files[p] for p in landed} == landed, "a landed file was written again"
        new = [p for p in files if p not in landed]
        assert sorted(f for d in days for f in d.files) == new
        landed, previous = files, landed
        if n == 0:
            assert len(new) == 8
            continue
        assert not days[0].files, "yesterday was over when its files were written"
        assert [p.name for p in new] == ([] if n == 2 else [f"events-{now:%Y%m%dT%H%M%S}.jsonl"])
        for path in new:
            added, before = _events(path), [e for p in previous if p.parent == path.parent for e in _events(p)]
            assert min(e["event_ts"] for e in added) > max(e["event_ts"] for e in before)
            assert max(e["event_ts"] for e in added) <= now.strftime("%Y-%m-%dT%H:%M:%S.999Z")
            assert {e["event_ts"][:10] for e in added} == {today.isoformat()}
            assert not {e["event_id"] for e in added} & {e["event_id"] for e in before}
            assert not {e["session_id"] for e in added} & {e["session_id"] for e in before}
            # The day's rate: 2,400 a day is 100 an hour (5 hours, then the 9 hours to midnight).
            assert abs(len(added) - 100 * (5 if n == 1 else 9)) <= 0.1 * len(added)
            lines = path.read_text().splitlines()
            assert len(lines) == days[1].lines == days[1].events + days[1].duplicates + sum(days[1].malformed.values())


def test_today_runs_until_now_and_no_further(tmp_path):
    """The demo's last day is today: its events reach the last minutes, none is in the future."""
    before = dt.datetime.now(dt.timezone.utc)
    # At 50,000 a day some five sessions start a minute, and each runs minutes: that none is in the last five
    # minutes is a chance too small to draw. At 2,000 a day (a session every five minutes) it was drawn.
    generated = generate_day(tmp_path, before.date(), events_per_day=50_000, malformed_rate=0.0)
    after = dt.datetime.now(dt.timezone.utc)
    times = [dt.datetime.fromisoformat(json.loads(line)["event_ts"].replace("Z", "+00:00"))
             for f in generated.files for line in f.read_text().splitlines()]
    assert len(times) == generated.events + generated.duplicates
    assert max(times) <= after
    if before.hour >= 1:  # a day with an hour behind it has sessions in its last minutes
        assert max(times) >= before - dt.timedelta(minutes=5)
