"""Sample behavioural events, written as a log shipper lands them.

Files are JSON lines under `events/date=YYYY-MM-DD/` (the event day, as a
time-based sink partitions them), a few files a day. Users browse in sessions:
page views, some add to cart, some buy. Like real logs, a small share of events
is delivered twice (same event id) and a few lines are broken in the ways
producers break them. The output is a pure function of the seed.
"""

from __future__ import annotations

import datetime as dt
import json
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


def events_folder(landing: Path, day: dt.date) -> Path:
    return landing / "events" / f"date={day.isoformat()}"


def _iso(ts: dt.datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def elapsed_seconds(day: dt.date) -> int:
    """How much of the day has happened: a past day whole; today until now (at least a minute)."""
    midnight = dt.datetime.combine(day, dt.time(), dt.timezone.utc)
    return int(min(86_400, max(60, (dt.datetime.now(dt.timezone.utc) - midnight).total_seconds())))


def _session_events(rng: random.Random, day: dt.date, seq: list[int], users: int) -> list[dict]:
    user = rng.randrange(1, users + 1)
    session = f"s{day.strftime('%Y%m%d')}-{seq[0]:06d}"
    seq[0] += 1
    elapsed = elapsed_seconds(day)
    midnight = dt.datetime.combine(day, dt.time(), dt.timezone.utc)
    # Today's sessions run until now, cut there: the newest events are minutes old, none in the future.
    latest = 86_400 - 3_600 if elapsed == 86_400 else max(1, elapsed - 60)
    start, cutoff = midnight + dt.timedelta(seconds=rng.randrange(0, latest)), midnight + dt.timedelta(seconds=elapsed)
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
) -> GeneratedDay:
    """Write one day's files (replacing earlier ones for that day) and return what was written."""
    rng = random.Random(f"{seed}-{day.isoformat()}")
    folder = events_folder(landing, day)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.jsonl"):
        old.unlink()

    seq = [0]
    events: list[dict] = []
    while len(events) < events_per_day:
        events.extend(_session_events(rng, day, seq, users))
    events = sorted(events[:events_per_day], key=lambda e: e["event_ts"])

    result = GeneratedDay(day=day, events=len(events))
    kinds, weights = zip(*MALFORMED_KINDS.items())
    chunk = -(-len(events) // files_per_day)
    for n in range(files_per_day):
        lines: list[str] = []
        for event in events[n * chunk : (n + 1) * chunk]:
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
        path = folder / f"events-{n:02d}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        result.files.append(path)
        result.lines += len(lines)
    return result


def generate(landing: Path, days: list[dt.date], **kwargs) -> list[GeneratedDay]:
    return [generate_day(landing, day, **kwargs) for day in days]
