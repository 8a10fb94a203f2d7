"""The `lakehouse` command: look at the tables and feed the landing zone, without Spark."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc

from .runtime.catalog import catalog_for
from .settings import Settings


def table_summaries(settings: Settings) -> list[dict]:
    """One row per table in the namespace, read from Iceberg metadata through pyiceberg."""
    catalog = catalog_for(settings)
    if not catalog.namespace_exists(settings.namespace):
        return []
    rows = []
    for identifier in sorted(catalog.list_tables(settings.namespace)):
        table = catalog.load_table(identifier)
        snapshot = table.current_snapshot()
        summary = snapshot.summary if snapshot else {}
        rows.append({
            "table": ".".join(identifier),
            "snapshot_id": snapshot.snapshot_id if snapshot else None,
            "committed_at": (
                dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, dt.timezone.utc).isoformat()
                if snapshot else None
            ),
            # count() uses file statistics and applies delete files when there are any.
            "rows": table.scan().count() if snapshot else 0,
            "data_files": int(summary.get("total-data-files", 0) or 0),
            "delete_files": int(summary.get("total-delete-files", 0) or 0),
            "total_bytes": int(summary.get("total-files-size", 0) or 0),
            "snapshots": len(table.metadata.snapshots),
            "partition_spec": str(table.spec()),
        })
    return rows


def _print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))


def cmd_tables(args: argparse.Namespace, settings: Settings) -> int:
    rows = table_summaries(settings)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"no tables in {settings.catalog_name}.{settings.namespace} ({settings.catalog.display})")
    else:
        _print_table(rows, ["table", "snapshot_id", "rows", "data_files", "total_bytes", "committed_at"])
    return 0


def cmd_generate(args: argparse.Namespace, settings: Settings) -> int:
    from .sources.generator import generate

    start = dt.date.fromisoformat(args.start)
    days = [start + dt.timedelta(days=n) for n in range(args.days)]
    landing = settings.local_path(settings.landing)
    for day in generate(landing, days, events_per_day=args.events_per_day, seed=args.seed):
        print(f"{day.day}: {len(day.files)} files, {day.lines} lines ({day.events} events, "
              f"{day.duplicates} duplicate deliveries, {sum(day.malformed.values())} malformed)")
    print(f"landing zone: {landing / 'events'}")
    return 0


def reconcile(settings: Settings, source: str = "events") -> list[dict]:
    """Per landing day: lines in the landing files vs rows kept in bronze + rows quarantined."""
    landing = settings.local_path(settings.landing) / source
    lines_in: Counter = Counter()
    for path in sorted(landing.glob("date=*/*.jsonl")):
        day = path.parent.name.split("=", 1)[1]
        with path.open("rb") as f:
            lines_in[day] += sum(1 for _ in f)
    catalog = catalog_for(settings)

    def per_day(table: str) -> Counter:
        identifier = (settings.namespace, table)
        if not catalog.table_exists(identifier):
            return Counter()
        dates = catalog.load_table(identifier).scan(selected_fields=("landing_date",)).to_arrow()
        counts = pc.value_counts(dates["landing_date"].combine_chunks()).to_pylist()
        return Counter({c["values"].isoformat(): c["counts"] for c in counts})

    kept, quarantined = per_day(f"bronze_{source}"), per_day(f"bronze_{source}_quarantine")
    rows = []
    for day in sorted(set(lines_in) | set(kept) | set(quarantined)):
        rows.append({
            "landing_date": day,
            "records_in": lines_in[day],
            "kept": kept[day],
            "quarantined": quarantined[day],
            "balanced": lines_in[day] == kept[day] + quarantined[day],
        })
    return rows


def cmd_reconcile(args: argparse.Namespace, settings: Settings) -> int:
    rows = reconcile(settings, args.source)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows, ["landing_date", "records_in", "kept", "quarantined", "balanced"])
    unbalanced = [r["landing_date"] for r in rows if not r["balanced"]]
    if unbalanced:
        print(f"records in != kept + quarantined for: {', '.join(unbalanced)}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakehouse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tables", help="tables with their current snapshot, rows, files and bytes")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_tables)

    p = sub.add_parser("generate", help="write sample behavioural event logs into the landing zone")
    p.add_argument("--start", default="2025-01-01", help="first day (YYYY-MM-DD)")
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--events-per-day", type=int, default=2_000)
    p.add_argument("--seed", type=int, default=7)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("reconcile", help="check records in = kept + quarantined, per landing day")
    p.add_argument("--source", default="events")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_reconcile)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args, Settings.from_env())
    except (ValueError, OSError) as exc:
        print(f"lakehouse {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
