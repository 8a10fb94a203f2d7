"""Commands that feed the landing zone and check it against bronze: `generate`, `drop` and `reconcile`."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import LakehouseError
from ..settings import Settings
from .output import print_rows

if TYPE_CHECKING:
    from ..landing.zones import LocalZone, S3Zone
    from ..project import Project


def _generator(project: Project):
    """The demo-data module the declaration names (`generator:`), loaded from its file."""
    import importlib.util

    if project.generator is None:
        raise LakehouseError(f"{project.file} names no generator: this project's data comes from its own producers")
    spec = importlib.util.spec_from_file_location(f"lakehouse_generator_{project.name}", project.generator)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _date(text: str, option: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{option} {text!r} is not a day ({exc}): use YYYY-MM-DD") from None


def _generate(project: Project, landing: Path, days: list[dt.date], args: argparse.Namespace) -> None:
    for line in _generator(project).generate(landing, days, events_per_day=args.events_per_day,
                                             changes_per_day=args.changes_per_day, cdc=args.cdc, seed=args.seed):
        print(line)


def cmd_generate(args: argparse.Namespace, settings: Settings) -> int:
    from ..project import load_project

    project = load_project(settings.project, settings.project_origin)
    start = _date(args.start, "--start")
    days = [start + dt.timedelta(days=n) for n in range(args.days)]
    if settings.landing.startswith("file:"):
        landing = settings.local_path(settings.landing)
        _generate(project, landing, days, args)
        print(f"landing zone: {landing}")
        return 0
    # An object store: generated here, then put into the zone file by file, as a producer would.
    import tempfile

    from ..landing.zones import landing_day, landing_zone

    zone = landing_zone(settings)
    with tempfile.TemporaryDirectory() as tmp:
        landed = _mirror(project, zone, Path(tmp))
        _generate(project, Path(tmp), days, args)
        for path in sorted(p for p in Path(tmp).rglob("*") if p.is_file() and p not in landed):
            day = landing_day(str(path))
            if day is None:
                raise ValueError(f"the generator wrote {path.relative_to(tmp)}, which is not in a day folder")
            zone.put(path, str(path.parent.parent.relative_to(tmp)), day, path.name)
    print(f"landing zone: {settings.landing}")
    return 0


def _mirror(project: Project, zone: LocalZone | S3Zone, folder: Path) -> set[Path]:
    """Copy the zone's landed files of every landing source into `folder`, with their times, so that the
    generator sees what landed before: it does not write a landed file again, and continues from it."""
    import os

    from ..landing.zones import landing_day

    copies = set()
    for source in project.landing_sources:
        for f in zone.list(source.landing):
            day = landing_day(f.uri)
            if day is None:
                continue
            copy = folder / source.landing / f"date={day.isoformat()}" / f.uri.rsplit("/", 1)[1]
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(zone.read(f.uri))
            os.utime(copy, (f.modified, f.modified))
            copies.add(copy)
    return copies


def cmd_drop(args: argparse.Namespace, settings: Settings) -> int:
    """New files into the landing zone (local or S3), as a producer would: the sensors take it from there."""
    import tempfile
    import time

    from ..bronze.reconcile import landing_records
    from ..landing.zones import landing_zone
    from ..project import load_project

    project = load_project(settings.project, settings.project_origin)
    day = _date(args.day, "--day")
    zone = landing_zone(settings)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    with tempfile.TemporaryDirectory() as tmp:
        for source, path in _generator(project).drop(Path(tmp), day, args.events, int(time.time())):
            lines = landing_records(path.read_bytes(), path.name)
            uri = zone.put(path, source, day, f"{source.replace('/', '-')}-drop-{stamp}.jsonl")
            print(f"dropped {lines} lines: {uri}")
    return 0


def cmd_reconcile(args: argparse.Namespace, settings: Settings) -> int:
    from ..bronze.reconcile import reconcile
    from ..project import load_project

    project = load_project(settings.project, settings.project_origin)
    sources = args.source or [s.landing for s in project.landing_sources]
    rows = [row for source in sources for row in reconcile(settings, project, source)]
    where = ["landing_date", "partition"] if any("partition" in r for r in rows) else ["landing_date"]
    print_rows(rows, ["source", *where, "records_in", "kept", "quarantined", "forgotten", "balanced"], args.json)
    unbalanced = [f"{r['source']} " + (f"partition {r['partition']}" if "partition" in r else str(r["landing_date"]))
                  for r in rows if not r["balanced"]]
    if unbalanced:
        print(f"records in != kept + quarantined + forgotten for: {', '.join(unbalanced)}", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="write the project's sample data (its declared generator) into the landing zone")
    p.add_argument("--start", default="2025-01-01", help="first day (YYYY-MM-DD)")
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--events-per-day", type=int, default=2_000)
    p.add_argument("--changes-per-day", type=int, default=300, help="CDC changes per day, all tables")
    p.add_argument("--no-cdc", dest="cdc", action="store_false", help="events only")
    p.add_argument("--seed", type=int, default=7)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("drop", help="drop a new events file into the landing zone (local or S3)")
    p.add_argument("--day", required=True, help="landing day (YYYY-MM-DD)")
    p.add_argument("--events", type=int, default=200)
    p.set_defaults(func=cmd_drop)

    p = sub.add_parser("reconcile", help="check records in = kept + quarantined, per source and landing day (per "
                                           "partition for a Kafka topic)")
    p.add_argument("--source", action="append", help="one landing source, e.g. events (repeatable); default all")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_reconcile)
