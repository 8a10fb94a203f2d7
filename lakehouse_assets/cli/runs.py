"""Long-running commands: `capture` (Debezium into the landing zone) and `stream` (Structured Streaming)."""

from __future__ import annotations

import argparse
import json

from ..settings import Settings
from .output import progress


def cmd_capture(args: argparse.Namespace, settings: Settings) -> int:
    """Real change data capture: Debezium's PostgreSQL connector into the landing zone (long-running)."""
    from ..live.capture import CaptureSource, report_json, run_capture
    from ..project import load_project

    project = load_project(settings.project, settings.project_origin)
    source = CaptureSource.of(project, args.source, args.dsn)
    if args.drop_slot:
        removed = source.drop_slot(settings.home / "capture" / source.server)
        print(f"removed: {', '.join(removed)}" if removed else f"nothing to remove for {source.slot}")
        return 0
    report = run_capture(settings, source, until_idle=args.until_idle, max_seconds=args.max_seconds,
                         roll_seconds=args.roll_seconds, log=progress(args.json))
    if args.json:
        print(report_json(report))
    else:
        print(f"{report.records} records ({report.tombstones} tombstones) in {len(report.files)} files, "
              f"{report.seconds:.1f} s; slot {source.slot} retains {report.retained_wal_bytes} bytes of WAL")
    return 0


def cmd_stream(args: argparse.Namespace, settings: Settings) -> int:
    """Structured Streaming from an event source's landing folders to bronze, silver and gold (long-running)."""
    import signal
    import threading

    from ..live.stream import EventStream, dagster_instance
    from ..operations.schedules import maintenance_when_due
    from ..project import load_project
    from ..runtime.resource import LakehouseResource

    project = load_project(settings.project, settings.project_origin)
    cdc_sources = {t.source for t in project.cdc.values()}
    if args.source is not None and args.source not in project.events and args.source not in cdc_sources:
        raise LookupError(f"no event or CDC source {args.source!r}; the declaration has events "
                          f"{sorted(project.events)} and CDC sources {sorted(cdc_sources)}")
    log = progress(args.json, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lakehouse = LakehouseResource()
    # The stream's tables compacted and thinned past their thresholds, between its batches (docs/stream.md).
    maintain = None if args.no_maintenance else maintenance_when_due(lakehouse, project.maintenance, log)
    if args.source in cdc_sources:
        from dataclasses import asdict

        from ..live.cdc_stream import CdcStream

        cdc = CdcStream(project, lakehouse, args.source, poll_seconds=args.poll_seconds,
                        instance=None if args.no_dagster else dagster_instance(log), log=log, maintain=maintain)
        try:
            passes = cdc.run(until_idle=args.until_idle, max_seconds=args.max_seconds, stop=stop)
        except KeyboardInterrupt:
            passes = cdc.passes
        if args.json:
            print(json.dumps([asdict(p) for p in passes], indent=2))
        else:
            print(f"{len(passes)} passes, {sum(p.files for p in passes)} files, "
                  f"{sum(p.changes_applied for p in passes)} changes applied")
        return 0
    stream = EventStream(
        project, lakehouse, project.events[args.source] if args.source else None,
        checkpoint=args.checkpoint, trigger_seconds=args.trigger_seconds, max_files_per_batch=args.max_files,
        sweep_seconds=args.sweep_seconds,
        instance=None if args.no_dagster else dagster_instance(log), log=log, maintain=maintain,
    )
    try:
        reports = stream.run(until_idle=args.until_idle, max_seconds=args.max_seconds, stop=stop)
    except KeyboardInterrupt:
        reports = stream.reports
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
    else:
        print(f"{len(reports)} micro-batches, {sum(r.files for r in reports)} files, "
              f"{sum(r.records_in for r in reports)} records")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("capture", help="capture a declared PostgreSQL CDC source with Debezium into the landing zone")
    p.add_argument("--source", required=True, help="the `cdc:` entry of the declaration")
    p.add_argument("--dsn", help="libpq connection string (default: LAKEHOUSE_CDC_<SOURCE>_DSN)")
    p.add_argument("--until-idle", type=float, metavar="SECONDS", help="stop after this long without a change")
    p.add_argument("--max-seconds", type=float, help="stop after this long in any case")
    p.add_argument("--roll-seconds", type=float, default=30.0, help="publish a landing file at least this often")
    p.add_argument("--drop-slot", action="store_true", help="remove the replication slot, publication and offsets")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_capture)

    p = sub.add_parser("stream", help="stream an event source's new landing files to bronze, silver and minute gold, "
                       "or a CDC source's to bronze, silver and history")
    p.add_argument("--source", help="the `events:` or `cdc:` entry of the declaration (default: the only event source)")
    p.add_argument("--trigger-seconds", type=float, default=5.0, help="how often a micro-batch starts")
    p.add_argument("--poll-seconds", type=float, default=1.0, help="a CDC source: how often its landing folders are "
                   "looked at")
    p.add_argument("--max-files", type=int, help="at most this many files per micro-batch")
    p.add_argument("--sweep-seconds", type=float, help="how often, between batches, the recent day folders are "
                   "looked at again for files changed after they were taken (default 10)")
    p.add_argument("--checkpoint", help="Spark checkpoint location (default: <home>/streams/<source>/checkpoint)")
    p.add_argument("--until-idle", type=float, metavar="SECONDS", help="stop after this long without a new file")
    p.add_argument("--max-seconds", type=float, help="stop after this long in any case")
    p.add_argument("--no-dagster", action="store_true", help="do not report commits to the Dagster instance")
    p.add_argument("--no-maintenance", action="store_true", help="leave the stream's tables' compaction and "
                   "thinning to the health sensor's runs (by default the stream does them for a table it wrote to "
                   "once the table crosses its maintenance thresholds)")
    p.add_argument("--json", action="store_true", help="print the micro-batch reports as JSON")
    p.set_defaults(func=cmd_stream)
