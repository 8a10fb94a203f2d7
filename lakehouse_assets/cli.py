"""The `lakehouse` command: look at the tables and feed the landing zone, without Spark.

A command imports what it uses when it runs: `lakehouse --help` and `lakehouse sql` import
neither Spark nor Dagster, and reading a declaration does not import Dagster.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gzip
import json
import math
import sys
import uuid
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import LakehouseError
from .settings import Settings
from .times import from_ms

if TYPE_CHECKING:
    from .project import Project


def load_project(path: Path | str) -> Project:
    from .project import load_project as load

    return load(path)


def catalog_for(settings: Settings) -> Any:
    from .runtime.catalog import catalog_for as catalog

    return catalog(settings)


def freshness_state(*args: Any, **kwargs: Any) -> Any:
    from .runtime.freshness import freshness_state as state

    return state(*args, **kwargs)


def table_summaries(settings: Settings) -> list[dict]:
    """One row per table in the namespace, read from Iceberg metadata through pyiceberg."""
    catalog = catalog_for(settings)
    if not catalog.namespace_exists(settings.namespace):
        return []
    rows = []
    for identifier in sorted(catalog.list_tables(settings.namespace)):
        table = catalog.load_table(identifier)
        snapshot = table.current_snapshot()
        summary: Mapping[str, str] = snapshot.summary if snapshot and snapshot.summary is not None else {}
        rows.append({
            "table": ".".join(identifier),
            "snapshot_id": snapshot.snapshot_id if snapshot else None,
            "committed_at": (
                from_ms(snapshot.timestamp_ms).isoformat()
                if snapshot else None
            ),
            # count() uses file statistics and applies delete files when there are any.
            "rows": table.scan().count() if snapshot else 0,
            "data_files": int(summary.get("total-data-files", 0) or 0),
            "delete_files": int(summary.get("total-delete-files", 0) or 0),
            "total_bytes": int(summary.get("total-files-size", 0) or 0),
            "snapshots": len(table.metadata.snapshots),
            "partition_spec": str(table.spec()),
            "event_lag_s": freshness_state(table, identifier[-1]).as_dict()["event_lag_s"],
        })
    return rows


def freshness_rows(settings: Settings, project: Project) -> list[dict]:
    """Each BI table's freshness on event time, from its current snapshot's watermarks."""
    catalog = catalog_for(settings)
    rows = []
    for name, freshness in project.gold.bi_freshness.items():
        identifier = (settings.namespace, name)
        if not catalog.table_exists(identifier):
            rows.append({"table": name, "status": "missing"})
            continue
        rows.append(freshness_state(catalog.load_table(identifier), name, freshness).as_dict())
    return rows


def cmd_freshness(args: argparse.Namespace, settings: Settings) -> int:
    rows = freshness_rows(settings, load_project(settings.project))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows, ["table", "status", "event_lag_s", "fail_after_s", "newest_event_time",
                            "landing_to_visible_s"])
    return 1 if args.check and any(r["status"] not in ("ok", "warn") for r in rows) else 0


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
        _print_table(rows, ["table", "snapshot_id", "rows", "data_files", "total_bytes", "committed_at", "event_lag_s"])
    return 0


def _table(settings: Settings, name: str):
    from .settings import validate_identifier

    catalog = catalog_for(settings)
    identifier = (settings.namespace, validate_identifier(name, "table name"))
    if not catalog.table_exists(identifier):
        raise LookupError(f"no table {name} in {settings.catalog_name}.{settings.namespace}: see `lakehouse tables`")
    return catalog.load_table(identifier)


def _maintenance(settings: Settings):
    """The declared maintenance policies (defaults when no declaration can be read)."""
    from .project.model import Maintenance

    try:
        return load_project(settings.project).maintenance
    except LakehouseError:
        return Maintenance()


def cmd_health(args: argparse.Namespace, settings: Settings) -> int:
    from .maintenance.health import table_health

    maintenance = _maintenance(settings)
    catalog = catalog_for(settings)
    names = [args.table] if args.table else (
        sorted(i[-1] for i in catalog.list_tables(settings.namespace)) if catalog.namespace_exists(settings.namespace)
        else [])
    rows = [table_health(_table(settings, n), n, maintenance.policy(n)).as_dict() for n in names]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            r["stale_branches"] = len(r["stale_branches"])
            r["problems"] = "; ".join(r["problems"]) or "ok"
        _print_table(rows, ["table", "data_files", "small_files", "compactable_small_files", "avg_file_bytes",
                            "delete_files", "deleted_ratio", "snapshots", "oldest_snapshot_age_s", "manifests",
                            "stale_branches", "problems"])
    return 1 if args.check and any(not r["healthy"] for r in rows) else 0


def cmd_metrics(args: argparse.Namespace, settings: Settings) -> int:
    """The lakehouse's figures in Prometheus's text format: printed once, or served until stopped."""
    import signal
    import threading

    from prometheus_client import generate_latest, start_http_server

    from .metrics import collector

    registry = collector(settings, load_project(settings.project)).registry()
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
    from .maintenance.snapshots import snapshot_history

    rows = snapshot_history(_table(settings, args.table))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows, ["snapshot_id", "committed_at", "operation", "asset", "partitions", "run_id",
                            "rows_added", "rows_removed", "total_rows", "on_main", "refs"])
    return 0


def cmd_rollback(args: argparse.Namespace, settings: Settings) -> int:
    from .maintenance.snapshots import rollback

    result = rollback(_table(settings, args.table), args.table, args.to)
    print(json.dumps(result) if args.json else (
        f"{args.table}: main moved from snapshot {result['from']} back to {result['to']}" if result["changed"]
        else f"{args.table}: main is already at snapshot {result['to']}"))
    return 0


def cmd_tag(args: argparse.Namespace, settings: Settings) -> int:
    from .maintenance.snapshots import create_tag

    result = create_tag(_table(settings, args.table), args.table, args.name, args.snapshot, args.retain_days)
    kept = f"for {args.retain_days} days" if args.retain_days is not None else "until the tag is removed"
    print(json.dumps(result) if args.json else
          f"{args.table}: tag {args.name} on snapshot {result['snapshot_id']}, kept through expiry {kept}")
    return 0


def cmd_maintain(args: argparse.Namespace, settings: Settings) -> int:
    """Compaction, expiry and orphan removal now, with Spark (what the maintenance jobs run)."""
    from .maintenance.procedures import TableMaintenance
    from .runtime.resource import LakehouseResource

    maintenance = _maintenance(settings)
    catalog = catalog_for(settings)
    names = args.table or sorted(i[-1] for i in catalog.list_tables(settings.namespace))
    for name in names:
        _table(settings, name)  # every name exists before any work starts
    actions = [a for a in ("compact", "expire", "orphans") if getattr(args, a)] or ["compact", "expire", "orphans"]
    lakehouse = LakehouseResource()
    log = (lambda m: print(m, file=sys.stderr)) if args.json else print
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
    from .maintenance.forget import Forget, proof_json
    from .runtime.resource import LakehouseResource

    project = load_project(settings.project)
    log = (lambda m: print(m, file=sys.stderr))
    report = Forget(LakehouseResource(), project, log).run(args.subject, dry_run=args.dry_run)
    if args.json:
        print(proof_json(report))
    else:
        rows = [{"table": t.table, "rows_deleted": t.rows_deleted, "files_rewritten": t.files_rewritten,
                 "snapshots_expired": len(t.snapshots_expired), "tags_removed": ", ".join(t.tags_removed),
                 "legal_holds": ", ".join(t.legal_holds), "live_files_scanned": t.live_files_scanned,
                 "rows_found_after": t.rows_found_after} for t in report.tables]
        _print_table(rows, list(rows[0]) if rows else ["table"])
        for name, why in sorted(report.left_alone.items()):
            print(f"left alone: {name}: {why}")
        verdict = "purged: no live data file of any table holds the subject" if report.purged else \
            "NOT purged: rows of the subject remain (see rows_found_after)"
        print(f"{'dry run, ' if args.dry_run else ''}{verdict}")
    return 0 if report.purged or args.dry_run else 1


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


def cmd_generate(args: argparse.Namespace, settings: Settings) -> int:
    project = load_project(settings.project)
    start = _date(args.start, "--start")
    days = [start + dt.timedelta(days=n) for n in range(args.days)]
    if settings.landing.startswith("file:"):
        landing = settings.local_path(settings.landing)
        _generate(project, landing, days, args)
        print(f"landing zone: {landing}")
        return 0
    # An object store: generated here, then put into the zone file by file, as a producer would.
    import tempfile

    from .sources.zones import landing_day, landing_zone

    zone = landing_zone(settings)
    with tempfile.TemporaryDirectory() as tmp:
        _generate(project, Path(tmp), days, args)
        for path in sorted(p for p in Path(tmp).rglob("*") if p.is_file()):
            day = landing_day(str(path))
            if day is None:
                raise ValueError(f"the generator wrote {path.relative_to(tmp)}, which is not in a day folder")
            zone.put(path, str(path.parent.parent.relative_to(tmp)), day, path.name)
    print(f"landing zone: {settings.landing}")
    return 0


def _generate(project, landing: Path, days: list[dt.date], args: argparse.Namespace) -> None:
    for line in _generator(project).generate(landing, days, events_per_day=args.events_per_day,
                                             changes_per_day=args.changes_per_day, cdc=args.cdc, seed=args.seed):
        print(line)


def _date(text: str, option: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{option} {text!r} is not a day ({exc}): use YYYY-MM-DD") from None


def cmd_drop(args: argparse.Namespace, settings: Settings) -> int:
    """New files into the landing zone (local or S3), as a producer would: the sensors take it from there."""
    import tempfile
    import time

    from .sources.zones import landing_zone

    project = load_project(settings.project)
    day = _date(args.day, "--day")
    zone = landing_zone(settings)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    with tempfile.TemporaryDirectory() as tmp:
        for source, path in _generator(project).drop(Path(tmp), day, args.events, int(time.time())):
            lines = _count_lines(path.read_bytes(), path.name)
            uri = zone.put(path, source, day, f"{source.replace('/', '-')}-drop-{stamp}.jsonl")
            print(f"dropped {lines} lines: {uri}")
    return 0


def _count_lines(data: bytes, name: str) -> int:
    """Records in a landing file; a file that cannot be decompressed is one record (bronze quarantines it whole)."""
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, gzip.BadGzipFile):
            return 1
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def reconcile(settings: Settings, project: Project, source: str | None = None) -> list[dict]:
    """Per landing source and day: lines in the landing files vs rows kept in bronze + rows quarantined."""
    import pyarrow.compute as pc

    from .sources.zones import escapes, landing_zone, source_root

    if source is None:
        return [row for s in project.landing_sources for row in reconcile(settings, project, s.landing)]
    declared = project.landing_source(source)
    zone = landing_zone(settings)
    lines_in: Counter = Counter()
    root = source_root(settings, source)
    for f in zone.list(source):
        if f.day is not None and not escapes(f.uri, root):  # a refused file is never read, here neither
            lines_in[f.day.isoformat()] += _count_lines(zone.read(f.uri), f.uri)
    catalog = catalog_for(settings)

    def per_day(table: str) -> Counter:
        identifier = (settings.namespace, table)
        if not catalog.table_exists(identifier):
            return Counter()
        dates = catalog.load_table(identifier).scan(selected_fields=("landing_date",)).to_arrow()
        counts = pc.value_counts(dates["landing_date"].combine_chunks()).to_pylist()
        return Counter({c["values"].isoformat(): c["counts"] for c in counts})

    kept, quarantined = per_day(declared.bronze), per_day(declared.quarantine)
    rows = []
    for day in sorted(set(lines_in) | set(kept) | set(quarantined)):
        rows.append({
            "source": source,
            "landing_date": day,
            "records_in": lines_in[day],
            "kept": kept[day],
            "quarantined": quarantined[day],
            "balanced": lines_in[day] == kept[day] + quarantined[day],
        })
    return rows


def cmd_reconcile(args: argparse.Namespace, settings: Settings) -> int:
    project = load_project(settings.project)
    sources = args.source or [s.landing for s in project.landing_sources]
    rows = [row for source in sources for row in reconcile(settings, project, source)]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows, ["source", "landing_date", "records_in", "kept", "quarantined", "balanced"])
    unbalanced = [f"{r['source']} {r['landing_date']}" for r in rows if not r["balanced"]]
    if unbalanced:
        print(f"records in != kept + quarantined for: {', '.join(unbalanced)}", file=sys.stderr)
        return 1
    return 0


def cmd_s3(args: argparse.Namespace, settings: Settings) -> int:
    """A local S3-compatible server (SeaweedFS) for trying S3 landing zones and warehouses."""
    from .dev.s3server import DEFAULT_SECRET_KEY, SeaweedS3, server_status, stop_server

    root = settings.home / "s3"
    if args.action == "start":
        root.mkdir(parents=True, exist_ok=True)
        server = SeaweedS3(root, buckets=("raw", "lake")).start(detach=True)
        print(f"S3 server (SeaweedFS) on {server.endpoint_url}, buckets raw and lake; to use it:")
        print(f"export LAKEHOUSE_S3_ENDPOINT={server.endpoint_url} LAKEHOUSE_S3_ACCESS_KEY={server.access_key} "
              f"LAKEHOUSE_S3_SECRET_KEY={DEFAULT_SECRET_KEY} LAKEHOUSE_LANDING=s3://raw/landing")
    elif args.action == "stop":
        print("stopped" if stop_server(root) else "no S3 server was running")
    else:
        state = server_status(root)
        print(f"running, pid {state.pid}, {state.endpoint_url}" if state else "not running")
    return 0


def cmd_cluster(args: argparse.Namespace, settings: Settings) -> int:
    """A Spark standalone cluster (a master and workers, each its own JVM) on this machine."""
    from .dev.spark_cluster import SparkCluster, cluster_status, master_json, stop_cluster

    root = settings.home / "spark-cluster"
    if args.action == "start":
        cluster = SparkCluster(root, workers=args.workers, cores=args.cores, memory=args.memory).start()
        print(f"Spark master {cluster.master_url} (UI {cluster.master_ui}), {args.workers} workers; to use it:")
        print(f"export LAKEHOUSE_SPARK_MASTER={cluster.master_url}")
    elif args.action == "stop":
        print("stopped" if stop_cluster(root) else "no cluster was running")
    else:
        state = cluster_status(root)
        if state is None:
            print("not running")
        else:
            workers = master_json(state.master_ui).get("workers", [])
            alive = sum(w["state"] == "ALIVE" for w in workers)
            print(f"running: {state.master_url} (UI {state.master_ui}), {alive} of {len(workers)} workers alive")
    return 0


def cmd_catalog(args: argparse.Namespace, settings: Settings) -> int:
    """The catalog's backup, or the catalog rebuilt from the warehouse's metadata files (no Spark)."""
    from .maintenance.catalog_recovery import CatalogRebuildError, backup, rebuild

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
                          replace=args.replace, all_tables=args.all, log=lambda line: print(line, file=sys.stderr))
    except CatalogRebuildError as exc:
        refusal, results = exc, exc.results
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        _print_table([{**{k: "" if v is None else v for k, v in r.as_dict().items()},
                       "metadata": Path(r.metadata_location or "").name,
                       "note": "; ".join(([r.reason] if r.reason else []) + [f"skipped {s}" for s in r.skipped])}
                      for r in results],
                     ["table", "status", "version", "snapshot_id", "source", "metadata", "note"])
    if refusal is not None:
        print(f"lakehouse catalog rebuild: {refusal}", file=sys.stderr)
        return 1
    return 0


def _plain(value):
    """A JSON-ready value: dates, timestamps, decimals and the like as strings."""
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (Decimal, dt.timedelta, uuid.UUID)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _cell(value, null: str = "") -> str:
    if value is None:
        return null
    if isinstance(value, bool):
        return "true" if value else "false"
    value = _plain(value)
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)


def _unique_names(names: list[str]) -> list[str]:
    """Result columns as keys: a repeated name (SELECT a.id, b.id) gets a suffix."""
    unique: list[str] = []
    for name in names:
        key, n = name, 1
        while key in unique:
            n += 1
            key = f"{name}_{n}"
        unique.append(key)
    return unique


def cmd_sql(args: argparse.Namespace, settings: Settings) -> int:
    from .sql import fetch

    names, rows, scans = fetch(settings, args.query, as_of=args.as_of, explain=args.explain)
    for scan in scans:
        print(f"scan {scan.describe()}", file=sys.stderr)
    if args.format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([_cell(v) for v in row] for row in rows)
    elif args.format == "json":
        keys = _unique_names(names)
        print(json.dumps([{k: _plain(v) for k, v in zip(keys, row)} for row in rows], indent=2, ensure_ascii=False))
    else:
        keys = _unique_names(names)
        _print_table([{k: _cell(v, "NULL") for k, v in zip(keys, row)} for row in rows], keys)
        print(f"({len(rows)} row{'' if len(rows) == 1 else 's'})", file=sys.stderr)
    return 0


def cmd_pin(args: argparse.Namespace, settings: Settings) -> int:
    """What a materialisation pinned, and what reading those snapshots gives (no Spark)."""
    from dagster import DagsterInstance

    from .pinning import describe, read_pinned

    try:
        instance = DagsterInstance.get()
    except Exception as exc:  # DAGSTER_HOME unset or unreadable
        raise ValueError(f"no Dagster instance to read pins from ({exc}); run through make, or set DAGSTER_HOME") from exc
    info = describe(args.asset, args.run_id, args.partition, instance=instance, settings=settings)
    if args.out:
        import pyarrow.parquet as pq

        pq.write_table(read_pinned(args.asset, info["run_id"], args.partition, instance=instance,
                                   settings=settings), args.out)
        info["written_to"] = args.out
    print(json.dumps(info, indent=2, default=str))
    return 0


def cmd_capture(args: argparse.Namespace, settings: Settings) -> int:
    """Real change data capture: Debezium's PostgreSQL connector into the landing zone (long-running)."""
    from .capture import CaptureSource, report_json, run_capture

    project = load_project(settings.project)
    source = CaptureSource.of(project, args.source, args.dsn)
    if args.drop_slot:
        removed = source.drop_slot(settings.home / "capture" / source.server)
        print(f"removed: {', '.join(removed)}" if removed else f"nothing to remove for {source.slot}")
        return 0
    log = (lambda m: print(m, file=sys.stderr)) if args.json else print
    report = run_capture(settings, source, until_idle=args.until_idle, max_seconds=args.max_seconds,
                         roll_seconds=args.roll_seconds, log=log)
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

    from .runtime.resource import LakehouseResource
    from .streaming import EventStream, dagster_instance

    project = load_project(settings.project)
    if args.source is not None and args.source not in project.events:
        raise LookupError(f"no event source {args.source!r}; the declaration has {sorted(project.events)}")
    log = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else (lambda m: print(m, flush=True))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stream = EventStream(
        project, LakehouseResource(), project.events[args.source] if args.source else None,
        checkpoint=args.checkpoint, trigger_seconds=args.trigger_seconds, max_files_per_batch=args.max_files,
        instance=None if args.no_dagster else dagster_instance(log), log=log,
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


def cmd_project(args: argparse.Namespace, settings: Settings) -> int:
    """The declared project: its sources and every table the platform derives from it."""
    project = load_project(settings.project)
    summary = project.summary()
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"project {project.name} ({project.file})")
    for source in project.landing_sources:
        print(f"  landing {source.landing}/ -> {', '.join(source.table_names)}")
    others = [t for t in summary["tables"] if not any(t in s.table_names for s in project.landing_sources)]
    print(f"  other tables: {', '.join(others)}")
    return 0


def cmd_settings(args: argparse.Namespace, settings: Settings) -> int:
    """The settings in force: the chosen profile under the environment, secrets shown only as set."""
    described = settings.describe()
    if args.json:
        print(json.dumps(described, indent=2))
    else:
        for key, value in described.items():
            print(f"{key:15s} {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakehouse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("project", help="the declared sources and the tables derived from them (LAKEHOUSE_PROJECT)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_project)

    p = sub.add_parser("settings", help="the settings in force (LAKEHOUSE_PROFILE, then the environment)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_settings)

    p = sub.add_parser("tables", help="tables with their current snapshot, rows, files and bytes")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_tables)

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

    p = sub.add_parser("reconcile", help="check records in = kept + quarantined, per source and landing day")
    p.add_argument("--source", action="append", help="one landing source, e.g. events (repeatable); default all")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_reconcile)

    p = sub.add_parser("sql", help="run SQL over the namespace's tables with DuckDB's Iceberg reader (no Spark)")
    p.add_argument("query", help='e.g. "SELECT day, count(*) FROM gold_daily_activity GROUP BY day"')
    p.add_argument("--as-of", metavar="SNAPSHOT_ID|TIMESTAMP",
                   help="read every table as of a snapshot id or an ISO date/timestamp (naive means UTC)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--explain", action="store_true",
                   help="print what was read of each table (snapshot, data files read/total, filters, columns, rows) "
                        "to stderr")
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser("pin", help="the snapshots an ML materialisation pinned, read back exactly (no Spark)")
    p.add_argument("asset", help="e.g. ml_training_set")
    p.add_argument("--run-id", help="that run's materialisation (default: the newest)")
    p.add_argument("--partition", help="one daily partition (YYYY-MM-DD)")
    p.add_argument("--out", help="also write the pinned rows to this Parquet file")
    p.set_defaults(func=cmd_pin)

    p = sub.add_parser("capture", help="capture a declared PostgreSQL CDC source with Debezium into the landing zone")
    p.add_argument("--source", required=True, help="the `cdc:` entry of the declaration")
    p.add_argument("--dsn", help="libpq connection string (default: LAKEHOUSE_CDC_<SOURCE>_DSN)")
    p.add_argument("--until-idle", type=float, metavar="SECONDS", help="stop after this long without a change")
    p.add_argument("--max-seconds", type=float, help="stop after this long in any case")
    p.add_argument("--roll-seconds", type=float, default=30.0, help="publish a landing file at least this often")
    p.add_argument("--drop-slot", action="store_true", help="remove the replication slot, publication and offsets")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_capture)

    p = sub.add_parser("stream", help="stream an event source's new landing files to bronze, silver and minute gold")
    p.add_argument("--source", help="the `events:` entry of the declaration (default: the only one)")
    p.add_argument("--trigger-seconds", type=float, default=5.0, help="how often a micro-batch starts")
    p.add_argument("--max-files", type=int, help="at most this many files per micro-batch")
    p.add_argument("--checkpoint", help="Spark checkpoint location (default: <home>/streams/<source>/checkpoint)")
    p.add_argument("--until-idle", type=float, metavar="SECONDS", help="stop after this long without a new file")
    p.add_argument("--max-seconds", type=float, help="stop after this long in any case")
    p.add_argument("--no-dagster", action="store_true", help="do not report commits to the Dagster instance")
    p.add_argument("--json", action="store_true", help="print the micro-batch reports as JSON")
    p.set_defaults(func=cmd_stream)

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

    p = sub.add_parser("s3", help="start, stop or check a local S3 server (SeaweedFS) under the lakehouse home")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.set_defaults(func=cmd_s3)

    p = sub.add_parser("cluster", help="start, stop or check a local Spark standalone cluster (master and workers)")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cores", type=int, default=1, help="cores per worker")
    p.add_argument("--memory", default="2g", help="memory per worker")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("catalog", help="back the catalog up, or rebuild it from the warehouse's metadata files")
    p.add_argument("action", choices=("backup", "rebuild"))
    p.add_argument("path", nargs="?", help="backup: the SQLite file to write")
    p.add_argument("--backup", metavar="PATH", help="rebuild: a backup whose pointers decide between metadata files")
    p.add_argument("--dry-run", action="store_true", help="rebuild: only say what would be registered")
    p.add_argument("--replace", action="store_true", help="rebuild: also move rows of tables the catalog has")
    p.add_argument("--all", action="store_true", help="rebuild: also register undeclared table folders")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_catalog)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args, Settings.from_env())
    except (LakehouseError, ValueError, OSError, LookupError) as exc:
        print(f"lakehouse {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
