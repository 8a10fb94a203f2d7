"""Commands that look at the tables: `tables`, `freshness`, `health`, `metrics` and `snapshots` (no Spark)."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import LakehouseError
from ..settings import Settings
from .output import print_rows, print_table


def open_table(settings: Settings, name: str):
    """Table `name` of the namespace; LookupError when there is none."""
    from ..runtime.catalog import catalog_for
    from ..settings import validate_identifier

    catalog = catalog_for(settings)
    identifier = (settings.namespace, validate_identifier(name, "table name"))
    if not catalog.table_exists(identifier):
        raise LookupError(f"no table {name} in {settings.catalog_name}.{settings.namespace}: see `lakehouse tables`")
    return catalog.load_table(identifier)


def table_names(settings: Settings) -> list[str]:
    """Every table of the namespace, by name."""
    from ..runtime.catalog import catalog_for

    catalog = catalog_for(settings)
    if not catalog.namespace_exists(settings.namespace):
        return []
    return sorted(i[-1] for i in catalog.list_tables(settings.namespace))


def maintenance_policies(settings: Settings):
    """The declared maintenance policies (defaults when no declaration can be read)."""
    from ..project import load_project
    from ..project.model import Maintenance

    try:
        return load_project(settings.project, settings.project_origin).maintenance
    except LakehouseError:
        return Maintenance()


def cmd_tables(args: argparse.Namespace, settings: Settings) -> int:
    from ..operations.health import table_summaries

    rows = table_summaries(settings)
    if not rows and not args.json:
        print(f"no tables in {settings.catalog_name}.{settings.namespace} ({settings.catalog.display})")
    else:
        print_rows(rows, ["table", "snapshot_id", "rows", "data_files", "total_bytes", "committed_at", "event_lag_s"],
                   args.json)
    return 0


def cmd_freshness(args: argparse.Namespace, settings: Settings) -> int:
    from ..project import load_project
    from ..runtime.freshness import freshness_rows

    rows = freshness_rows(settings, load_project(settings.project, settings.project_origin))
    print_rows(rows, ["table", "status", "event_lag_s", "fail_after_s", "newest_event_time", "landing_to_visible_s"],
               args.json)
    return 1 if args.check and any(r["status"] not in ("ok", "warn") for r in rows) else 0


def cmd_health(args: argparse.Namespace, settings: Settings) -> int:
    from ..operations.health import table_health

    maintenance = maintenance_policies(settings)
    names = [args.table] if args.table else table_names(settings)
    rows = [table_health(open_table(settings, n), n, maintenance.policy(n)).as_dict() for n in names]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            r["stale_branches"] = len(r["stale_branches"])
            r["problems"] = "; ".join(r["problems"]) or "ok"
        print_table(rows, ["table", "data_files", "small_files", "compactable_small_files", "avg_file_bytes",
                           "delete_files", "deleted_ratio", "snapshots", "oldest_snapshot_age_s", "manifests",
                           "stale_branches", "problems"])
    return 1 if args.check and any(not r["healthy"] for r in rows) else 0


def cmd_metrics(args: argparse.Namespace, settings: Settings) -> int:
    """The lakehouse's figures in Prometheus's text format: printed once, or served until stopped."""
    import signal
    import threading

    from prometheus_client import generate_latest, start_http_server

    from ..operations.metrics import collector
    from ..project import load_project

    registry = collector(settings, load_project(settings.project, settings.project_origin)).registry()
    if args.action == "print":
        sys.stdout.write(generate_latest(registry).decode())
        return 0
    server, thread = start_http_server(args.port, addr=args.host, registry=registry)
    print(f"serving metrics on http://{args.host}:{server.server_port}/metrics", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    thread.join(timeout=10)
    return 0


def cmd_snapshots(args: argparse.Namespace, settings: Settings) -> int:
    from ..operations.snapshots import snapshot_history

    rows = snapshot_history(open_table(settings, args.table))
    print_rows(rows, ["snapshot_id", "committed_at", "operation", "asset", "partitions", "run_id", "rows_added",
                      "rows_removed", "total_rows", "on_main", "refs"], args.json)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tables", help="tables with their current snapshot, rows, files and bytes")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_tables)

    p = sub.add_parser("freshness", help="each BI table's lag on event time, against its declared freshness")
    p.add_argument("--json", action="store_true")
    p.add_argument("--check", action="store_true", help="exit 1 when a table is past its declared freshness")
    p.set_defaults(func=cmd_freshness)

    p = sub.add_parser("health", help="table health from Iceberg metadata: files, deletes, snapshots, branches")
    p.add_argument("table", nargs="?", help="one table (default: every table)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--check", action="store_true", help="exit 1 when a table crosses a threshold of its policy")
    p.set_defaults(func=cmd_health)

    p = sub.add_parser("metrics", help="the lakehouse's figures for Prometheus: printed once, or `serve` for scraping")
    p.add_argument("action", nargs="?", choices=("print", "serve"), default="print")
    p.add_argument("--port", type=int, default=9464, help="serve: the port of /metrics (default 9464; 0: any free)")
    p.add_argument("--host", default="127.0.0.1", help="serve: the address to listen on (0.0.0.0: every interface)")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("snapshots", help="a table's snapshots: operation, run, rows added and removed, refs")
    p.add_argument("table")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_snapshots)
