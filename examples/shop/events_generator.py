"""Sample behavioural events, written as a log shipper lands them.

Files are JSON lines under `events/date=YYYY-MM-DD/` (the event day, as a
time-based sink partitions them), a few files a day. Users browse in sessions:
page views, some add to cart, some buy. Like real logs, a small share of events
is delivered twice (same event id) and a few lines are broken in the ways
producers break them.

A landed file is never written again: a day with no files gets its files, a pure
function of the seed (today's until now); a day that has files keeps them, and a
later run adds the events after the newest one landed (today's since, or the rest
of a day that was under way) as one new file named after the generation time.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

PRODUCTS = [f"p{n:04d}" for n in range(1, 201)]
PAGES = ("/", "/search", "/category/shoes", "/category/books", "/deals", "/account")
REFERRERS = ("direct", "search", "email", "social", "ads")
BROWSERS = ("Mozilla/5.0 (X11; Linux x86_64) Firefox/131.0", "Mozilla/5.0 (Macintosh) Safari/605.1.15",
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/130.0")
BOTS = ("Googlebot/2.1 (+http://www.google.com/bot.html)", "Mozilla/5.0 (compatible; bingbot/2.0)")
BOT_SHARE = 0.03  # sessions from crawlers: browsing only

# The ways a line can be broken, and how often relative to each other.
MALFORMED_KINDS = {
    "truncated_json": 4,
    "missing_event_id": 2,
    "missing_event_ts": 1,
    "bad_timestamp": 2,
    "price_not_number": 1,
    "properties_not_object": 1,
    "not_an_object": 1,
}


@dataclass
class GeneratedDay:
    day: dt.date
    files: list[Path] = field(default_factory=list)
    lines: int = 0
    events: int = 0  # distinct well-formed events
    duplicates: int = 0  # extra deliveries of an event already written
    malformed: Counter = field(default_factory=Counter)


LANDED_SUFFIXES = (".jsonl", ".jsonl.gz")  # the files a landing folder's readers take
STAMP = "%Y%m%dT%H%M%S"  # the generation time in the name of a file a later run adds


def events_folder(landing: Path, day: dt.date) -> Path:
    return landing / "events" / f"date={day.isoformat()}"


def _iso(ts: dt.datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def elapsed_seconds(day: dt.date, now: dt.datetime | None = None) -> int:
    """How much of the day has happened by `now` (default: the clock's): a past day whole; today until now
    (at least a minute)."""
    midnight = dt.datetime.combine(day, dt.time(), dt.timezone.utc)
    now = now or dt.datetime.now(dt.timezone.utc)
    return int(min(86_400, max(60, (now - midnight).total_seconds())))


def _session_events(rng: random.Random, day: dt.date, seq: list[int], users: int, elapsed: int, after: int = 0,
                    tag: str = "") -> list[dict]:
    """One session's events until `elapsed` seconds past midnight, starting `after` seconds past it or later
    (0: the whole day so far); `tag` keeps the session ids of a later run apart from those already landed."""
    user = rng.randrange(1, users + 1)
    session = f"s{day.strftime('%Y%m%d')}-{tag}{seq[0]:06d}"
    seq[0] += 1
    midnight = dt.datetime.combine(day, dt.time(), dt.timezone.utc)
    # Today's sessions run until now, cut there: the newest events are minutes old, none in the future.
    latest = 86_400 - 3_600 if elapsed == 86_400 else max(1, elapsed - 60)
    start = midnight + dt.timedelta(seconds=after + rng.randrange(0, max(1, latest - after)))
    cutoff = midnight + dt.timedelta(seconds=elapsed)
    ip = f"198.51.{rng.randrange(0, 256)}.{rng.randrange(1, 255)}"
    referrer = rng.choice(REFERRERS)
    bot = rng.random() < BOT_SHARE
    agent = rng.choice(BOTS if bot else BROWSERS)
    ts = start
    events = []
    cart: list[str] = []
    for _ in range(rng.randint(1, 12)):
        ts += dt.timedelta(seconds=rng.randint(2, 180), milliseconds=rng.randint(0, 999))
        if ts > cutoff:
            break
        product = rng.choice(PRODUCTS)
        roll = rng.random()
        if cart and roll < 0.12 and not bot:
            kind = "purchase"
        elif roll < 0.30 and not bot:
            kind = "add_to_cart"
            cart.append(product)
        else:
            kind = "page_view"
        event = {
            "event_id": f"e-{rng.getrandbits(64):016x}",
            "user_id": f"u{user:05d}",
            "session_id": session,
            "event_type": kind,
            "event_ts": _iso(ts),
            "ip": ip,
            "properties": {"page": rng.choice(PAGES) if kind == "page_view" else f"/product/{product}",
                           "product_id": product, "referrer": referrer, "user_agent": agent},
        }
        if kind == "purchase":
            event["properties"]["product_id"] = cart[-1]
            event["properties"]["quantity"] = rng.randint(1, 3)
            event["price"] = round(rng.uniform(4.99, 249.99), 2)
            event["email"] = f"user{user:05d}@example.com"  # checkout knows who pays
            cart.pop()
        events.append(event)
    return events


def _break(rng: random.Random, event: dict, kind: str) -> str:
    bad = json.loads(json.dumps(event))
    if kind == "truncated_json":
        text = json.dumps(bad)
        return text[: rng.randint(10, len(text) - 5)]
    if kind == "missing_event_id":
        bad.pop("event_id")
    elif kind == "missing_event_ts":
        bad.pop("event_ts")
    elif kind == "bad_timestamp":
        bad["event_ts"] = rng.choice(["yesterday", "2025-13-45T99:00:00Z", "not-a-time"])
    elif kind == "price_not_number":
        bad["price"] = "twelve dollars"
    elif kind == "properties_not_object":
        bad["properties"] = "page=/deals"
    elif kind == "not_an_object":
        return json.dumps([bad["event_id"], bad["event_type"]])
    return json.dumps(bad)


def generate_day(
    landing: Path,
    day: dt.date,
    events_per_day: int = 2_000,
    files_per_day: int = 4,
    duplicate_rate: float = 0.02,
    malformed_rate: float = 0.005,
    users: int = 500,
    seed: int = 7,
    now: dt.datetime | None = None,
) -> GeneratedDay:
    """Write the day's new files as of `now` (default: the clock's) and return what was written; files already
    in the day folder stay as they are (see the module's docstring)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    folder = events_folder(landing, day)
    folder.mkdir(parents=True, exist_ok=True)
    landed = sorted(p for p in folder.iterdir() if p.name.endswith(LANDED_SUFFIXES))
    if landed:
        return _generate_after(folder, day, _landed_until(landed, day), events_per_day, duplicate_rate,
                               malformed_rate, users, seed, now)
    rng = random.Random(f"{seed}-{day.isoformat()}")
    elapsed = elapsed_seconds(day, now)
    seq = [0]
    events: list[dict] = []
    while len(events) < events_per_day:
        events.extend(_session_events(rng, day, seq, users, elapsed))
    events = sorted(events[:events_per_day], key=lambda e: e["event_ts"])

    result = GeneratedDay(day=day, events=len(events))
    chunk = -(-len(events) // files_per_day)
    for n in range(files_per_day):
        _write_file(folder / f"events-{n:02d}.jsonl", events[n * chunk : (n + 1) * chunk], rng, result,
                    duplicate_rate, malformed_rate, now)
    return result


def _generate_after(folder: Path, day: dt.date, after: int, events_per_day: int, duplicate_rate: float,
                    malformed_rate: float, users: int, seed: int, now: dt.datetime) -> GeneratedDay:
    """The day's events from `after` seconds past midnight until now (or midnight), at the day's rate, in one
    new file named after `now`; nothing when less than a minute has passed."""
    result = GeneratedDay(day=day)
    elapsed = elapsed_seconds(day, now)
    wanted = round(events_per_day * (elapsed - after) / 86_400)
    if elapsed - after < 60 or wanted == 0:
        return result
    # Seeded by where it starts: another run from the same landed files writes the same events.
    rng = random.Random(f"{seed}-{day.isoformat()}-after-{after}")
    seq: list[int] = [0]
    events: list[dict] = []
    while len(events) < wanted:
        events.extend(_session_events(rng, day, seq, users, elapsed, after=after, tag=f"{after:05d}-"))
    events = sorted(events[:wanted], key=lambda e: e["event_ts"])
    result.events = len(events)
    _write_file(_free_name(folder, f"events-{now.strftime(STAMP)}"), events, rng, result, duplicate_rate,
                malformed_rate, now)
    return result


def _write_file(path: Path, events: list[dict], rng: random.Random, result: GeneratedDay,
                duplicate_rate: float, malformed_rate: float, now: dt.datetime) -> None:
    """Write `events` as lines, a few broken and a few delivered twice, and count them into `result`. The file
    is dated `now`: a later run takes up the day from there."""
    kinds, weights = zip(*MALFORMED_KINDS.items())
    lines: list[str] = []
    for event in events:
        if rng.random() < malformed_rate:
            kind = rng.choices(kinds, weights)[0]
            lines.append(_break(rng, event, kind))
            result.malformed[kind] += 1
            result.events -= 1
            continue
        lines.append(json.dumps(event, separators=(",", ":")))
        if rng.random() < duplicate_rate:  # at-least-once delivery: sent again
            lines.append(json.dumps(event, separators=(",", ":")))
            result.duplicates += 1
    # Written beside its name and renamed: a reader listing the folder never sees half a file.
    part = path.with_name(f".{path.name}.part")
    part.write_text("\n".join(lines) + "\n")
    os.utime(part, (now.timestamp(), now.timestamp()))
    part.rename(path)
    result.files.append(path)
    result.lines += len(lines)


def _free_name(folder: Path, stem: str) -> Path:
    """`<stem>.jsonl` in `folder`, or `<stem>-N.jsonl` when a file has that name: never one that exists."""
    path, n = folder / f"{stem}.jsonl", 1
    while path.exists():
        path, n = folder / f"{stem}-{n}.jsonl", n + 1
    return path


def _landed_until(files: list[Path], day: dt.date) -> int:
    """The second of `day` the landed files reach: when they were written (a run's window ends when it writes),
    and never before their newest event."""
    midnight = dt.datetime.combine(day, dt.time(), dt.timezone.utc)
    until = 0
    for path in files:
        until = max(until, min(86_400, int(path.stat().st_mtime - midnight.timestamp())))
        data = path.read_bytes()
        text = gzip.decompress(data) if path.name.endswith(".gz") else data
        for line in text.decode("utf-8", "replace").splitlines():
            ts = _event_time(line)
            if ts is not None and ts.date() == day:
                until = max(until, int((ts - midnight).total_seconds()) + 1)
    return until


def _event_time(line: str) -> dt.datetime | None:
    """The event time of a landed line; None for a line that has none (broken lines are)."""
    try:
        event = json.loads(line)
        ts = dt.datetime.fromisoformat(event["event_ts"].replace("Z", "+00:00"))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=dt.timezone.utc)


def generate(landing: Path, days: list[dt.date], **kwargs) -> list[GeneratedDay]:
    return [generate_day(landing, day, **kwargs) for day in days]
