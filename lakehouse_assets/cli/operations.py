"""Commands that change the tables or their catalog: `rollback`, `tag`, `maintain`, `forget` and `catalog`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..settings import Settings
from .output import print_table, progress
from .tables import maintenance_policies, open_table, table_names

if TYPE_CHECKING:
    from ..operations.forget import ForgetReport
    from ..project import Project


def cmd_rollback(args: argparse.Namespace, settings: Settings) -> int:
    """A table's main back to a snapshot of its past; a landing source's bronze with its quarantine and its rows
    of the ingest log (operations/landing_rollback.py), its landing days then requested again."""
    from ..landing.zones import landing_zone
    from ..operations.landing_rollback import rollback_table
    from ..project import load_project
    from ..runtime.catalog import catalog_for

    project = load_project(settings.project, settings.project_origin)
    result = rollback_table(catalog_for(settings), settings.namespace, project, args.table, args.to,
                            present=landing_zone(settings).has)
    if "source" in result and result["changed"]:
        result["reported_to_dagster"] = _report_rolled_back(settings, project, result)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.table}: main moved from snapshot {result['from']} back to {result['to']}" if result["changed"]
          else f"{args.table}: main is already at snapshot {result['to']}")
    if "source" in result and result["changed"]:
        _print_landing_rollback(project, result)
    return 0


def _print_landing_rollback(project: Project, result: dict) -> None:
    """What went back with bronze, the days concerned and the runs that take and decide them again."""
    from ..project import EventSource

    quarantine, source = result["quarantine"], project.landing_source(result["source"])
    print(f"{quarantine['table']}: main moved from snapshot {quarantine['from']} back to {quarantine['to']} "
          f"(its snapshot as of {result['as_of']})" if quarantine["changed"] else
          f"{quarantine['table']}: main stays at snapshot {quarantine['to']} (its snapshot as of {result['as_of']})")
    print(f"{result['ingest_log']['table']}: {result['ingest_log']['rows_deleted']} rows of {result['source']} "
          f"deleted: files taken after {result['as_of']}, which the next bronze run of their day takes again")
    landing, events = result["landing_days"], result["event_days"]
    print(f"landing days rolled back: {', '.join(landing) or 'none'}")
    print(f"event days rolled back: {', '.join(events) or 'none'}")
    command = "dagster asset materialize -m lakehouse_assets.definitions"
    if landing:
        print(f"take the files again: {command} --select {source.bronze},{source.quarantine} "
              f"--partition-range {landing[0]}...{landing[-1]}")
    # Silver of events is by event day; silver of a CDC table by landing day, bronze's own.
    silver, days = ((source.silver, events) if isinstance(source, EventSource) else
                    (f"{source.silver},{source.history}", landing))
    if days:
        print(f"then decide silver again: {command} --select {silver} --partition-range {days[0]}...{days[-1]} "
              "(gold and ML follow by their automation)")
    if result["reported_to_dagster"]:
        print(f"reported to Dagster: {source.bronze} and {source.quarantine} changed on "
              f"{len(result['reported_to_dagster'])} landing days; the automation requests the silver days that "
              "read them")
    elif landing:
        print("DAGSTER_HOME is not set: nothing reported to Dagster; run the commands above")


def _report_rolled_back(settings: Settings, project: Project, result: dict) -> list[str]:
    """Tell Dagster that bronze and its quarantine changed on the landing days rolled back, with the event days
    (a run-less materialisation, as the stream reports its commits): the automation decides the silver days that
    read them again, the late-events sensor those beyond its reach. The landing days reported; none without
    DAGSTER_HOME."""
    import os

    if not os.environ.get("DAGSTER_HOME") or not result["landing_days"]:
        return []
    from dagster import AssetMaterialization, DagsterInstance, MetadataValue

    from ..automation.partitions import daily_partitions
    from ..bronze.ingest import EVENT_DAYS

    partitions = daily_partitions(settings.start_date or project.start_date)
    days = [d for d in result["landing_days"] if partitions.has_partition_key(d)]
    metadata = {"rolled_back_to_snapshot": MetadataValue.text(str(result["to"])),
                "rolled_back_as_of": MetadataValue.text(result["as_of"]),
                "landing_files_no_longer_taken": MetadataValue.int(len(result["files"])),
                EVENT_DAYS: MetadataValue.json(result["event_days"])}
    instance = DagsterInstance.get()
    for asset in (result["table"], result["quarantine"]["table"]):
        for day in days:
            instance.report_runless_asset_event(AssetMaterialization(asset_key=asset, partition=day, metadata=metadata))
    return days


def cmd_tag(args: argparse.Namespace, settings: Settings) -> int:
    from ..operations.snapshots import create_tag

    result = create_tag(open_table(settings, args.table), args.table, args.name, args.snapshot, args.retain_days)
    kept = f"for {args.retain_days} days" if args.retain_days is not None else "until the tag is removed"
    print(json.dumps(result) if args.json else
          f"{args.table}: tag {args.name} on snapshot {result['snapshot_id']}, kept through expiry {kept}")
    return 0


def cmd_maintain(args: argparse.Namespace, settings: Settings) -> int:
    """Compaction, expiry and orphan removal now, with Spark (what the maintenance jobs run); the landing zone's
    retention without Spark."""
    from ..operations.landing_retention import remove_taken_files
    from ..operations.procedures import TableMaintenance
    from ..project import load_project
    from ..runtime.resource import LakehouseResource

    actions = [a for a in ("compact", "expire", "orphans", "landing") if getattr(args, a)] or \
        ["compact", "expire", "orphans", "landing"]
    table_actions = [a for a in actions if a != "landing"]
    names = (args.table or table_names(settings)) if table_actions else []
    for name in names:
        open_table(settings, name)  # every name exists before any work starts
    log = progress(args.json)
    reports: list[dict] = []
    if "landing" in actions:
        project = load_project(settings.project, settings.project_origin)
        reports.append({"landing_retention": remove_taken_files(settings, project, log=log)})
    if names:
        maintenance, lakehouse = maintenance_policies(settings), LakehouseResource()
        for name in names:
            work = TableMaintenance(lakehouse, name, maintenance.policy(name), log)
            for action in table_actions:
                reports.append({"compact": work.compact, "expire": work.expire,
                                "orphans": work.remove_orphans}[action]().as_dict())
    if args.json:
        print(json.dumps(reports, indent=2, default=str))
    return 0


def cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    """Delete a person from every table that holds them, purge the files, and print the proof."""
    if args.verify_only:
        return _verify_only(args, settings)
    if args.also:
        raise ValueError("lakehouse forget: --also goes with --verify-only")
    from ..operations.forget import Forget, proof_json
    from ..project import load_project
    from ..runtime.resource import LakehouseResource

    project = load_project(settings.project, settings.project_origin)
    report = Forget(LakehouseResource(), project, progress(True)).run(args.subject, dry_run=args.dry_run,
                                                                      wait_s=args.wait)
    if args.json:
        print(proof_json(report))
    else:
        _print_forget_report(report, args.dry_run)
    return 0 if report.purged or args.dry_run else 1


def _print_forget_report(report: ForgetReport, dry_run: bool) -> None:
    """The proof for a person: one line per table, then what was left, removed or is still pending, then the
    verdict."""
    rows = [{"table": t.table, "rows_deleted": t.rows_deleted, "files_rewritten": t.files_rewritten,
             "snapshots_expired": len(t.snapshots_expired), "tags_removed": ", ".join(t.tags_removed),
             "legal_holds": ", ".join(t.legal_holds), "live_files_scanned": t.live_files_scanned,
             "rows_found_after": t.rows_found_after, "done": "yes" if t.done else "NO"} for t in report.tables]
    print_table(rows, list(rows[0]) if rows else ["table"])
    for line in _forget_findings(report):
        print(line)
    if report.tables_not_done and not dry_run:
        print(f"tables done: {', '.join(report.tables_done) or 'none'}")
        for name, why in report.tables_not_done.items():
            print(f"table NOT done: {name}: {why}")
        print("run the same command again to finish: the tables done are left as they are")
    verdict = ("purged: no file of the tables, the landing zone or staging holds the subject" if report.purged
               else "NOT purged: the subject remains (see the tables not done, rows_found_after, pending files, "
                    "runs and files above)")
    print(f"{'dry run, ' if dry_run else ''}{verdict}")


def _forget_findings(report: ForgetReport) -> list[str]:
    """What forget left alone, removed, or found still there, one line each."""
    return [
        *(f"left alone: {name}: {why}" for name, why in sorted(report.left_alone.items())),
        *(f"landing file removed: {uri}" for uri in report.landing_removed),
        *(f"landing file pending: {uri}: {why}" for uri, why in sorted(report.landing_pending.items())),
        *(f"run still in flight: {run}: it may publish the subject; run forget again once it ends"
          for run in report.runs_in_flight),
        *(f"file no snapshot referenced, removed: {file}" for file in report.orphans_removed),
        *(f"still holds the subject: {file}: {why}" for file, why in sorted(report.traces.items())),
    ]


def _verify_only(args: argparse.Namespace, settings: Settings) -> int:
    """Search every file of the warehouse, the landing zone and capture staging for the person (no Spark, nothing
    changed) and print the report as JSON; 1 when any file holds them or cannot be read whole."""
    from ..operations.forget import id_columns
    from ..operations.trace_scan import trace_scan
    from ..project import load_project

    if args.dry_run:
        raise ValueError("lakehouse forget: --verify-only changes nothing already; leave out --dry-run")
    # A subject that is a number is looked for where the declaration's id columns hold it (without a declaration,
    # as text, everywhere: digits any other value has are then reported too).
    columns = id_columns(load_project(settings.project)) if Path(settings.project).is_file() else ()
    report = trace_scan(settings, _identifiers(settings, args.subject, args.also), id_columns=columns)
    print(json.dumps(report.as_dict(), indent=2))
    return 0 if report.proven else 1


def _identifiers(settings: Settings, subject: str, also: list[str]) -> dict[str, str]:
    """The person's values by name, each with its pseudonym when a PII key exists: without one none was ever
    made, and a read-only check must not create the key."""
    from ..runtime.pii import key_file, keyed_hash_of, pii_key

    values = {"subject": subject, **{f"also {i}": value for i, value in enumerate(also, 1)}}
    if not settings.pii_key and not key_file(settings).exists():
        return values
    key = pii_key(settings)
    return {**values, **{f"{name} keyed hash": keyed_hash_of(value, key) for name, value in values.items()}}


def _catalog_backup(args: argparse.Namespace, settings: Settings) -> int:
    from ..operations.catalog_recovery import backup

    if not args.path or args.backup or args.dry_run or args.replace or args.all:
        raise ValueError("usage: lakehouse catalog backup PATH")
    summary = backup(settings, args.path)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        tables, namespaces = summary["tables"], summary["namespaces"]
        print(f"{summary['catalog']} ({summary['catalog_name']}): {tables} table{'s' * (tables != 1)} in "
              f"{namespaces} namespace{'s' * (namespaces != 1)} -> {summary['path']} ({summary['bytes']} bytes, "
              f"{summary['seconds']} s)")
    return 0


def _catalog_migrate(args: argparse.Namespace, settings: Settings) -> int:
    from ..operations.catalog_migrate import CatalogMigrateError, migrate, target_catalog

    if not args.to or args.path or args.backup or args.replace or args.all:
        raise ValueError("usage: lakehouse catalog migrate --to URI [--dry-run] [--json]")
    refusal = None
    try:
        results = migrate(settings, target_catalog(settings, args.to), dry_run=args.dry_run,
                          log=progress(not args.json))
    except CatalogMigrateError as exc:
        refusal, results = exc, exc.results
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print_table([r.as_dict() for r in results], ["table", "status", "snapshots", "refs", "reason"])
    if refusal is not None:
        print(f"lakehouse catalog migrate: {refusal}", file=sys.stderr)
        return 1
    return 0


def cmd_catalog(args: argparse.Namespace, settings: Settings) -> int:
    """The catalog's backup, or the catalog rebuilt from the warehouse's metadata files (no Spark)."""
    from ..operations.catalog_recovery import CatalogRebuildError, rebuild
    from ..project import load_project
    from .services import cmd_catalog_server

    if args.action in ("start", "stop", "status", "token"):
        return cmd_catalog_server(args, settings)
    if args.action == "migrate":
        return _catalog_migrate(args, settings)
    if args.action == "backup":
        return _catalog_backup(args, settings)
    if args.path:
        raise ValueError("usage: lakehouse catalog rebuild [--backup PATH] [--dry-run] [--replace] [--all]")
    refusal = None
    try:
        results = rebuild(settings, load_project(settings.project, settings.project_origin), backup=args.backup,
                          dry_run=args.dry_run, replace=args.replace, all_tables=args.all, log=progress(True))
    except CatalogRebuildError as exc:
        refusal, results = exc, exc.results
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print_table([{**{k: "" if v is None else v for k, v in r.as_dict().items()},
                      "metadata": Path(r.metadata_location or "").name,
                      "note": "; ".join(([r.reason] if r.reason else []) + [f"skipped {s}" for s in r.skipped])}
                     for r in results],
                    ["table", "status", "version", "snapshot_id", "source", "metadata", "note"])
    if refusal is not None:
        print(f"lakehouse catalog rebuild: {refusal}", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rollback", help="move a table's main back to an earlier snapshot (by id or time); a landing "
                                        "source's bronze with its quarantine and its rows of the ingest log")
    p.add_argument("table")
    p.add_argument("--to", required=True, metavar="SNAPSHOT_ID|TIMESTAMP",
                   help="a snapshot id on main, or an ISO time (the last snapshot committed at or before it)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_rollback)

    p = sub.add_parser("tag", help="tag a snapshot so that expiry keeps it")
    p.add_argument("table")
    p.add_argument("name", help="tag name (letters, digits, underscores); legal_hold* tags survive forget")
    p.add_argument("--snapshot", type=int, help="snapshot id (default: the current one)")
    p.add_argument("--retain-days", type=float, help="keep the tag this long (default: until removed)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_tag)

    p = sub.add_parser("maintain", help="compact, expire, remove orphans (Spark) and apply the landing retention "
                                        "now; default: all four")
    p.add_argument("table", nargs="*", help="tables (default: every table)")
    p.add_argument("--compact", action="store_true")
    p.add_argument("--expire", action="store_true")
    p.add_argument("--orphans", action="store_true")
    p.add_argument("--landing", action="store_true",
                   help="remove the landed files taken longer ago than the declared landing retention (no Spark)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_maintain)

    p = sub.add_parser("forget", help="delete a person from every table, purge the files, print the proof (Spark)")
    p.add_argument("--subject", required=True, help="the person's id, as the declared user/subject fields hold it")
    p.add_argument("--dry-run", action="store_true", help="only count the rows that would be deleted")
    p.add_argument("--verify-only", action="store_true",
                   help="only search every file of the warehouse, landing zone and capture staging for the person, "
                        "as bytes and Parquet values (no Spark, nothing changed); prints JSON, exit 1 on any trace")
    p.add_argument("--also", action="append", default=[], metavar="VALUE",
                   help="with --verify-only: another value of the person (an e-mail...), searched for with its "
                        "keyed hash; repeatable")
    p.add_argument("--wait", type=float, default=1800, metavar="SECONDS",
                   help="how long to wait for Dagster runs in flight during the deletes (they may have read the "
                        "person) before deleting again; a run still going then leaves the person not purged")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("catalog", help="back the catalog up, rebuild it from the warehouse's metadata files, or "
                                       "move its tables to another catalog; start, stop or check a local Iceberg "
                                       "REST catalog server, or print a token")
    p.add_argument("action", choices=("backup", "rebuild", "migrate", "start", "stop", "status", "token"))
    p.add_argument("--to", default="", help="migrate: the catalog URI to register every table in (a REST catalog's "
                                            "rest+http://PRINCIPAL:TOKEN@host:port, or sqlite:/postgresql:)")
    p.add_argument("--principal", default="analyst", help="token: whose (pipeline, analyst, ml)")
    p.add_argument("--hours", type=float, default=24.0, help="token: how long it is valid")
    p.add_argument("--port", type=int, default=0, help="start: the port to listen on (default: a free one)")
    p.add_argument("path", nargs="?", help="backup: the SQLite file to write")
    p.add_argument("--backup", metavar="PATH", help="rebuild: a backup whose pointers decide between metadata files")
    p.add_argument("--dry-run", action="store_true", help="rebuild, migrate: only say what would be registered")
    p.add_argument("--replace", action="store_true", help="rebuild: also move rows of tables the catalog has")
    p.add_argument("--all", action="store_true", help="rebuild: also register undeclared table folders")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_catalog)
