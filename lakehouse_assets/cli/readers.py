"""Commands that read tables: `sql` (DuckDB's Iceberg reader) and `pin` (what an ML run pinned), without Spark;
`serve` (the SQL endpoint for BI tools, Spark's Thrift server)."""

from __future__ import annotations

import argparse
import csv
import getpass
import json
import os
import sys

from ..settings import Settings
from .output import cell, plain, print_table, unique_names


def cmd_sql(args: argparse.Namespace, settings: Settings) -> int:
    from ..serving.duckdb_sql import fetch

    names, rows, scans = fetch(settings, args.query, as_of=args.as_of, explain=args.explain,
                               raw=True if args.raw else None)
    for scan in scans:
        print(f"scan {scan.describe()}", file=sys.stderr)
    if args.format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([cell(v) for v in row] for row in rows)
    elif args.format == "json":
        keys = unique_names(names)
        print(json.dumps([{k: plain(v) for k, v in zip(keys, row)} for row in rows], indent=2, ensure_ascii=False))
    else:
        keys = unique_names(names)
        print_table([{k: cell(v, "NULL") for k, v in zip(keys, row)} for row in rows], keys)
        print(f"({len(rows)} row{'' if len(rows) == 1 else 's'})", file=sys.stderr)
    return 0


def cmd_pin(args: argparse.Namespace, settings: Settings) -> int:
    """What a materialisation pinned, and what reading those snapshots gives (no Spark)."""
    from dagster import DagsterInstance

    from ..ml.pinning import describe, read_pinned

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


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    """The SQL endpoint for BI tools and SQL clients (Spark's Thrift server), whether it answers (--check), or a
    user of it added (--add-user)."""
    from ..serving.endpoint import Endpoint, check, serve
    from ..serving.users import add_user, users_file

    if args.add_user:
        password = getpass.getpass(f"password for {args.add_user}: ") if sys.stdin.isatty() else sys.stdin.readline()
        add_user(users_file(settings), args.add_user, password.rstrip("\n"))
        print(f"{args.add_user} may sign in to the SQL endpoint (users in {users_file(settings)})")
        return 0
    endpoint = Endpoint(args.host or settings.serve_host, args.port or settings.serve_port, settings.namespace)
    if args.check:
        answer = check(endpoint, os.environ.get("LAKEHOUSE_SERVE_USER", ""),
                       os.environ.get("LAKEHOUSE_SERVE_PASSWORD", ""))
        print(f"{endpoint.url}: {answer or 'no SQL endpoint answers'}")
        return 0 if answer.startswith("answers") else 1
    signed = users_file(settings).exists()
    serve(settings, endpoint, started=lambda e: print(
        f"SQL endpoint (read-only) on {e.url}{', sign-in with a password' if signed else ''}\n"
        f"  SQLAlchemy: {e.sqlalchemy_url}{'?auth=CUSTOM' if signed else ''}\n"
        f"  beeline -u {e.url}{' -n USER -p PASSWORD' if signed else ''}", flush=True))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sql", help="run a query over the namespace's tables with DuckDB's Iceberg reader (no Spark)")
    p.add_argument("query", help='a query, e.g. "SELECT day, count(*) FROM gold_daily_activity GROUP BY day"; '
                                 "statements that write, attach or read files are refused")
    p.add_argument("--as-of", metavar="SNAPSHOT_ID|TIMESTAMP",
                   help="read every table as of a snapshot id or an ISO date/timestamp (naive means UTC)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--explain", action="store_true",
                   help="print what was read of each table (snapshot, data files read/total, filters, columns, rows) "
                        "to stderr")
    p.add_argument("--raw", action="store_true",
                   help="engineers: also expose raw data (bronze tables, their quarantine, the ingest log), "
                        "hidden by default; LAKEHOUSE_SQL_RAW=1 does the same")
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser("pin", help="the snapshots an ML materialisation pinned, read back exactly (no Spark)")
    p.add_argument("asset", help="e.g. ml_training_set")
    p.add_argument("--run-id", help="that run's materialisation (default: the newest)")
    p.add_argument("--partition", help="one daily partition (YYYY-MM-DD)")
    p.add_argument("--out", help="also write the pinned rows to this Parquet file")
    p.set_defaults(func=cmd_pin)

    p = sub.add_parser("serve", help="the read-only SQL endpoint BI tools and SQL clients connect to (Spark's "
                                     "Thrift JDBC/ODBC server), until stopped")
    p.add_argument("--host", help="address to listen on (default LAKEHOUSE_SERVE_HOST, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default LAKEHOUSE_SERVE_PORT, 10000)")
    p.add_argument("--check", action="store_true", help="only say whether the endpoint answers a query (signed in "
                                                        "as LAKEHOUSE_SERVE_USER with LAKEHOUSE_SERVE_PASSWORD)")
    p.add_argument("--add-user", metavar="NAME", help="add a user who signs in with a password (read from stdin, "
                                                      "or asked); once there is one, every client signs in")
    p.set_defaults(func=cmd_serve)
