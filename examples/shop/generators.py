"""The shop demo's sample data, as the `lakehouse` command asks for it.

`generate` fills the landing zone with a few days of clickstream and CDC files;
`drop` makes one new events file for a day, for the landing sensors to find.
The platform loads this file because the declaration names it (`generator:`).
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.shop.cdc_generator import generate_cdc  # noqa: E402
from examples.shop.events_generator import generate as generate_events  # noqa: E402
from examples.shop.events_generator import generate_day


def generate(landing: Path, days: list[dt.date], events_per_day: int = 2_000, changes_per_day: int = 300,
             cdc: bool = True, seed: int = 7) -> list[str]:
    """Write the days' new files (landed files stay as they are); returns one line of summary per source and day."""
    lines = []
    for day in generate_events(landing, days, events_per_day=events_per_day, seed=seed):
        lines.append(f"events {day.day}: {len(day.files)} new files, {day.lines} lines ({day.events} events, "
                     f"{day.duplicates} duplicate deliveries, {sum(day.malformed.values())} malformed)")
    if cdc:
        for d in generate_cdc(landing, days, changes_per_day=changes_per_day, seed=seed).days:
            lines.append(f"cdc/{d.table} {d.day}: {len(d.files)} new files, {d.lines} lines ({d.changes} changes, "
                         f"{d.tombstones} tombstones, {d.duplicates} duplicates, {sum(d.malformed.values())} malformed)")
    return lines


def drop(folder: Path, day: dt.date, events: int, seed: int) -> list[tuple[str, Path]]:
    """New files for one day, written under `folder`: (landing source, file) pairs."""
    generated = generate_day(folder, day, events_per_day=events, files_per_day=1, seed=seed)
    return [("events", path) for path in generated.files]
