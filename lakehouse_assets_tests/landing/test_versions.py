"""What a take decides of a file from its content and the log's newest row of it (no Spark)."""

import datetime as dt

from lakehouse_assets.landing.versions import (
    APPENDED,
    CHANGED,
    NEW,
    RETAKEN,
    TOUCHED,
    WAIT,
    Content,
    Sightings,
    Stat,
    Taken,
    decide,
    epoch_ms,
    needs_a_look,
    settled,
)
from lakehouse_assets.project import LandingPolicy

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.timezone.utc)
POLICY = LandingPolicy(settle=dt.timedelta(seconds=5), incomplete_grace=dt.timedelta(minutes=5))
OLD_MS = epoch_ms(NOW - dt.timedelta(days=3))
TAKEN = Taken(version=1, size=100, modified_ms=OLD_MS, sha256="h1", lines=4)


def content(size=120, sha="h2", prefix="h1", prefix_ends_line=True, ends_line=True, age=dt.timedelta(days=3)):
    return Content(Stat(size, epoch_ms(NOW - age)), sha, prefix, prefix_ends_line, ends_line)


def test_decisions():
    assert decide("a.jsonl", content(), None, NOW, POLICY).change == NEW
    assert decide("a.jsonl", content(sha="h1"), TAKEN, NOW, POLICY).change == TOUCHED
    appended = decide("a.jsonl", content(), TAKEN, NOW, POLICY)
    assert (appended.change, appended.skip_lines) == (APPENDED, 4)
    assert decide("a.jsonl", content(prefix="other"), TAKEN, NOW, POLICY).change == CHANGED  # rewritten
    assert decide("a.jsonl", content(size=80, prefix=None), TAKEN, NOW, POLICY).change == CHANGED  # truncated
    # The taken part ended mid-line: what follows changes that line, so it is no append.
    assert decide("a.jsonl", content(prefix_ends_line=False), TAKEN, NOW, POLICY).change == CHANGED
    assert decide("a.jsonl.gz", content(), Taken(1, 100, OLD_MS, "h1", None), NOW, POLICY).change == RETAKEN


def test_a_file_ending_mid_line_waits_only_while_it_is_young():
    young = content(ends_line=False, age=dt.timedelta(seconds=30))
    assert decide("a.jsonl", young, None, NOW, POLICY).change == WAIT
    assert decide("a.jsonl", content(ends_line=False, age=dt.timedelta(minutes=6)), None, NOW, POLICY).change == NEW
    assert decide("a.jsonl.gz", young, None, NOW, POLICY).change == NEW  # a gzip's end is judged by reading it


def test_identity_and_settling():
    same = Stat(100, OLD_MS)
    assert not needs_a_look(same, TAKEN)
    assert needs_a_look(Stat(100, OLD_MS + 1), TAKEN) and needs_a_look(Stat(101, OLD_MS), TAKEN)
    assert needs_a_look(same, None)
    assert not needs_a_look(Stat(5, 1), Taken(0, None, None, None, None))  # taken before identities were kept
    assert needs_a_look(Stat(100, OLD_MS, "e2"), Taken(1, 100, OLD_MS, "h1", 4, "e1"))  # an object replaced
    assert settled(Stat(1, epoch_ms(NOW - dt.timedelta(seconds=5))), NOW, POLICY)
    assert not settled(Stat(1, epoch_ms(NOW - dt.timedelta(seconds=4))), NOW, POLICY)
    assert not settled(Stat(1, epoch_ms(NOW + dt.timedelta(hours=1))), NOW, POLICY)  # a time in the future waits
    assert not settled(Stat(1, OLD_MS), NOW, POLICY, ready=False)  # its folder's ready marker is missing
    assert epoch_ms(dt.datetime(2024, 11, 25, 5, 25, 45, 123000, tzinfo=dt.timezone.utc)) == 1732512345123


def test_a_file_whose_time_is_ahead_of_the_clock_settles_once_seen_unchanged_for_the_settle_time():
    sightings, ahead = Sightings(), Stat(1, epoch_ms(NOW + dt.timedelta(days=1)))
    start = NOW.timestamp()
    assert sightings.see("a", ahead, start) == 0
    assert not settled(ahead, NOW, POLICY, seen_for_ms=sightings.see("a", ahead, start + 4.9))
    later = NOW + dt.timedelta(seconds=5)
    assert settled(ahead, later, POLICY, seen_for_ms=sightings.see("a", ahead, start + 5))
    # A change starts the count again: the grown file is seen for 0 s, and a day ahead counts for nothing.
    grown = Stat(2, ahead.modified_ms)
    assert sightings.see("a", grown, start + 6) == 0 and not settled(grown, later, POLICY)
    assert not settled(ahead, later, POLICY, ready=False, seen_for_ms=60_000)  # the ready marker still rules
    # Ending mid-record: the grace counts from when it was first seen so, not from a time still ahead.
    cut = Content(ahead, "h", ends_line=False)
    assert decide("b.jsonl", cut, None, NOW, POLICY, seen_for_ms=60_000).change == WAIT
    assert decide("b.jsonl", cut, None, NOW, POLICY, seen_for_ms=301_000).change == NEW
    sightings.keep(set())
    assert sightings.seen == {}
