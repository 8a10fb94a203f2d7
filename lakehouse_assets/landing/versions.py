"""A landed file's versions: what the ingest log knows of a file, and what a take decides of it.

A file's identity is its path with its size and modification time (and, on an
object store, its ETag), plus a hash of its content, all recorded by the ingest
log each time the file is taken. Comparing a listing with the log finds new and
changed files whatever their timestamps say (a copy that kept an old time is as
new as any). A "take" is one ingest of a file. For a file that differs from what
was taken, the hash decides: the same bytes mean it was only touched; the old
bytes followed by more mean lines were appended (taken from the first new line
on); anything else means the file was changed after it was taken, and its new
content is quarantined whole. No file is taken before it has settled (stopped
changing).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from ..project import LandingPolicy

# What a take did with a file: each is the `change` of its ingest log row.
NEW = "new"  # first taken (an empty file too: 0 records)
APPENDED = "appended"  # the taken bytes unchanged, lines added after them: the new lines taken
TOUCHED = "touched"  # a new modification time, the same bytes: nothing to take, the identity recorded
CHANGED = "changed"  # rewritten, truncated or replaced after it was taken: its new content quarantined whole
RETAKEN = "retaken"  # unreadable when taken (a broken gzip), readable now: taken whole
# Not taken this time: the file is being written, or its folder is not marked ready.
WAIT = "wait"
# Changes after which the file's content starts anew: lines counted for earlier versions belong to content that is
# no longer in the landing zone.
RESTARTS = (CHANGED, RETAKEN)
CHANGED_REASON = "changed after it was taken"


@dataclass(frozen=True)
class Stat:
    """A file as a listing sees it: size in bytes, modification time in milliseconds since the epoch."""

    size: int
    modified_ms: int
    etag: str | None = None

    def same_as(self, taken: Taken) -> bool:
        return (self.size, self.modified_ms) == (taken.size, taken.modified_ms) and (
            self.etag is None or taken.etag is None or self.etag == taken.etag)


@dataclass(frozen=True)
class Taken:
    """The ingest log's newest row of a file. `sha256` None: the row records no content identity (an older
    row; the file counts as taken whatever it is now); `lines` None: the content could not be read
    (quarantined whole)."""

    version: int
    size: int | None
    modified_ms: int | None
    sha256: str | None
    lines: int | None
    etag: str | None = None

    @property
    def legacy(self) -> bool:
        return self.sha256 is None or self.size is None


@dataclass(frozen=True)
class Content:
    """What a read of the file's bytes found: its hash, the hash of its first `Taken.size` bytes and whether
    the byte before them ends a line, and whether the file itself ends with a newline."""

    stat: Stat
    sha256: str
    prefix_sha256: str | None = None
    prefix_ends_line: bool = True
    ends_line: bool = True


@dataclass(frozen=True)
class Decision:
    change: str
    skip_lines: int = 0  # lines of the file already taken (APPENDED)


def epoch_ms(value: dt.datetime | None) -> int | None:
    """A time as whole milliseconds since the epoch (naive: UTC), exactly: no float in between."""
    if value is None:
        return None
    aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
    return (aware - _EPOCH) // dt.timedelta(milliseconds=1)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def compressed(uri: str) -> bool:
    return uri.endswith(".gz")


def needs_a_look(stat: Stat, taken: Taken | None) -> bool:
    """Whether a listed file may hold something the log has not taken (no hash needed to know it has not)."""
    return taken is None or (not taken.legacy and not stat.same_as(taken))


def age_ms(stat: Stat, now: dt.datetime, seen_for_ms: float = 0.0) -> float:
    """How long the file has been as it is: since its modification time by the clock, or, as long as it was
    seen unchanged (`seen_for_ms`, by a sensor's ticks or a run's looks), whichever is longer. A modification
    time ahead of the clock (a writer whose clock runs ahead) counts for nothing: only observation settles it."""
    return max(now.timestamp() * 1000 - stat.modified_ms, seen_for_ms, 0.0)


def ahead_of_clock(stat: Stat, now: dt.datetime) -> bool:
    return stat.modified_ms > now.timestamp() * 1000


def settled(stat: Stat, now: dt.datetime, policy: LandingPolicy, ready: bool = True, seen_for_ms: float = 0.0) -> bool:
    """Unchanged for the declared settle time (`age_ms`), and its folder marked ready when the declaration names
    a marker."""
    return ready and age_ms(stat, now, seen_for_ms) >= policy.settle.total_seconds() * 1000


def within_grace(stat: Stat, now: dt.datetime, policy: LandingPolicy, seen_for_ms: float = 0.0) -> bool:
    """Changed so recently that a file ending mid-record is taken for one still being written."""
    return age_ms(stat, now, seen_for_ms) < policy.incomplete_grace.total_seconds() * 1000


class Sightings:
    """When each file was first seen as it is now (size and modification time): how long it has been seen
    unchanged, whatever its modification time says. A change starts its count again."""

    def __init__(self, seen: dict[str, tuple[int, int, float]] | None = None):
        self.seen = dict(seen or {})  # uri -> (size, modified_ms, when first seen so, in seconds since the epoch)

    def see(self, uri: str, stat: Stat, at: float) -> float:
        """Record a look at `uri` at `at`; how long (ms) it has been seen as it is now."""
        size, modified_ms, first = self.seen.get(uri, (-1, -1, at))
        if (size, modified_ms) != (stat.size, stat.modified_ms):
            first = at
        self.seen[uri] = (stat.size, stat.modified_ms, first)
        return (at - first) * 1000

    def keep(self, uris: set[str]) -> None:
        self.seen = {u: v for u, v in self.seen.items() if u in uris}


def decide(uri: str, content: Content, taken: Taken | None, now: dt.datetime, policy: LandingPolicy,
           seen_for_ms: float = 0.0) -> Decision:
    """What to take of a settled file whose identity the log does not hold yet."""
    if content.stat.size and not compressed(uri) and not content.ends_line and \
            within_grace(content.stat, now, policy, seen_for_ms):
        return Decision(WAIT)  # its last line is still being written
    if taken is None:
        return Decision(NEW)
    if content.sha256 == taken.sha256:
        return Decision(TOUCHED)
    if taken.lines is None:
        return Decision(RETAKEN)
    grown = taken.size is not None and content.stat.size > taken.size
    # Appending to a file whose last taken line had no newline would change that line: not an append.
    if grown and content.prefix_sha256 == taken.sha256 and (content.prefix_ends_line or compressed(uri)):
        return Decision(APPENDED, skip_lines=taken.lines)
    return Decision(CHANGED)


def newest(rows: list[Taken]) -> Taken | None:
    return max(rows, key=lambda t: t.version, default=None)
