"""Commands that change the tables or their catalog: `rollback`, `tag`, `maintain`, `forget` and `catalog`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..settings import Settings
from .output import print_table, progress
from .tables import maintenance_policies, open_table, table_names


def cmd_rollback(args: argparse.Namespace, settings: Settings) -> int:
    from ..maintenance.snapshots import rollback

    result = rollback(open_table(settings, args.table), args.table, args.to)
    print(json.dumps(result) if args.json else (
        f"{args.table}: main moved from snapshot {result['from']} back to {result['to']}" if result["changed"]
        else f"{args.table}: main is already at snapshot {result['to']}"))
    return 0


def cmd_tag(args: argparse.Namespace, settings: Settings) -> int:
    from ..maintenance.snapshots import create_tag

    result = create_tag(open_table(settings, args.table), args.table, args.name, args.snapshot, args.retain_days)
    kept = f"for {args.retain_days} days" if args.retain_days is not None else "until the tag is removed"
    print(json.dumps(result) if args.json else
          f"{args.table}: tag {args.name} on snapshot {result['snapshot_id']}, kept through expiry {kept}")
    return 0


def cmd_maintain(args: argparse.Namespace, settings: Settings) -> int:
    """Compaction, expiry and orphan removal now, with Spark (what the maintenance jobs run)."""
    from ..maintenance.procedures import TableMaintenance
    from ..runtime.resource import LakehouseResource

    maintenance = maintenance_policies(settings)
    names = args.table or table_names(settings)
    for name in names:
        open_table(settings, name)  # every name exists before any work starts
    actions = [a for a in ("compact", "expire", "orphans") if getattr(args, a)] or ["compact", "expire", "orphans"]
    lakehouse = LakehouseResource()
    log = progress(args.json)
    reports = []
    for name in names:
        work = TableMaintenance(lakehouse, name, maintenance.policy(name), log)
        for action in actions:
            reports.append({"compact": work.compact, "expire": work.expire, "orphans": work.remove_orphans}[action]())
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2, default=str))
    return 0


def cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    """Delete a person from every table that holds them, purge the files, and print the proof."""
    from ..maintenance.forget import Forget, proof_json
    from ..project import load_project
    from ..runtime.resource import LakehouseResource

    project = load_project(settings.project)
    report = Forget(LakehouseResource(), project, progress(True)).run(args.subject, dry_run=args.dry_run)
    if args.json:
        print(proof_json(report))
    else:
        rows = [{"table": t.table, "rows_deleted": t.rows_deleted, "files_rewritten": t.files_rewritten,
                 "snapshots_expired": len(t.snapshots_expired), "tags_removed": ", ".join(t.tags_removed),
                 "legal_holds": ", ".join(t.legal_holds), "live_files_scanned": t.live_files_scanned,
                 "rows_found_after": t.rows_found_after} for t in report.tables]
        print_table(rows, list(rows[0]) if rows else ["table"])
        for name, why in sorted(report.left_alone.items()):
            print(f"left alone: {name}: {why}")
        verdict = "purged: no live data file of any table holds the subject" if report.purged else \
            "NOT purged: rows of the subject remain (see rows_found_after)"
        print(f"{'dry run, ' if args.dry_run else ''}{verdict}")
    return 0 if report.purged or args.dry_run else 1


def cmd_catalog(args: argparse.Namespace, settings: Settings) -> int:
    """The catalog's backup, or the catalog rebuilt from the warehouse's metadata files (no Spark)."""
    from ..maintenance.catalog_recovery import CatalogRebuildError, backup, rebuild
    from ..project import load_project

    if args.action == "backup":
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
    if args.path:
        raise ValueError("usage: lakehouse catalog rebuild [--backup PATH] [--dry-run] [--replace] [--all]")
    refusal = None
    try:
        results = rebuild(settings, load_project(settings.project), backup=args.backup, dry_run=args.dry_run,
                          replace=args.replace, all_tables=args.all, log=progress(True))
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
    p = sub.add_parser("rollback", help="move a table's main back to an earlier snapshot (by id or time)")
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

    p = sub.add_parser("maintain", help="compact, expire and remove orphans now (Spark); default: all three")
    p.add_argument("table", nargs="*", help="tables (default: every table)")
    p.add_argument("--compact", action="store_true")
    p.add_argument("--expire", action="store_true")
    p.add_argument("--orphans", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_maintain)

    p = sub.add_parser("forget", help="delete a person from every table, purge the files, print the proof (Spark)")
    p.add_argument("--subject", required=True, help="the person's id, as the declared user/subject fields hold it")
    p.add_argument("--dry-run", action="store_true", help="only count the rows that would be deleted")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("catalog", help="back the catalog up, or rebuild it from the warehouse's metadata files")
    p.add_argument("action", choices=("backup", "rebuild"))
    p.add_argument("path", nargs="?", help="backup: the SQLite file to write")
    p.add_argument("--backup", metavar="PATH", help="rebuild: a backup whose pointers decide between metadata files")
    p.add_argument("--dry-run", action="store_true", help="rebuild: only say what would be registered")
    p.add_argument("--replace", action="store_true", help="rebuild: also move rows of tables the catalog has")
    p.add_argument("--all", action="store_true", help="rebuild: also register undeclared table folders")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_catalog)
