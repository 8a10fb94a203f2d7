"""`lakehouse s3|cluster|postgres|kafka|catalog start|stop|status`: the local servers of the `lakehouse_services` package,
started detached under the lakehouse home, checked and stopped from any shell."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import LakehouseError
from ..settings import Settings

Command = Callable[[argparse.Namespace, Settings], int]


def _service(command: Command) -> Command:
    """A command that needs the `lakehouse_services` package: a clear error when it is not installed, and the
    services' errors as the platform's own (one line on stderr, exit 2)."""

    @functools.wraps(command)
    def run(args: argparse.Namespace, settings: Settings) -> int:
        try:
            from lakehouse_services.errors import ServiceError
        except ModuleNotFoundError as exc:
            if exc.name != "lakehouse_services":
                raise
            raise LakehouseError("the local services are not installed: pip install -e services/ "
                                 "(make setup does)") from None
        try:
            return command(args, settings)
        except ServiceError as exc:
            raise LakehouseError(str(exc)) from exc

    return run


def _stop_or_status(action: str, root: Path, service: str, stop: Callable[[Path], bool],
                    status: Callable[[Path], Any], running: Callable[[Any], str]) -> int:
    """`stop`, or the `status` of what runs under `root`, said in one line."""
    if action == "stop":
        print("stopped" if stop(root) else f"no {service} was running")
    else:
        state = status(root)
        print(running(state) if state is not None else "not running")
    return 0


@_service
def cmd_s3(args: argparse.Namespace, settings: Settings) -> int:
    """A local S3-compatible server (SeaweedFS) for trying S3 landing zones and warehouses."""
    from lakehouse_services.s3server import DEFAULT_SECRET_KEY, SeaweedS3, server_status, stop_server

    root = settings.home / "s3"
    if args.action != "start":
        return _stop_or_status(args.action, root, "S3 server", stop_server, server_status,
                               lambda state: f"running, pid {state.pid}, {state.endpoint_url}")
    root.mkdir(parents=True, exist_ok=True)
    server = SeaweedS3(root, buckets=("raw", "lake")).start(detach=True)
    print(f"S3 server (SeaweedFS) on {server.endpoint_url}, buckets raw and lake; to use it:")
    print(f"export LAKEHOUSE_S3_ENDPOINT={server.endpoint_url} LAKEHOUSE_S3_ACCESS_KEY={server.access_key} "
          f"LAKEHOUSE_S3_SECRET_KEY={DEFAULT_SECRET_KEY} LAKEHOUSE_LANDING=s3://raw/landing")
    return 0


@_service
def cmd_cluster(args: argparse.Namespace, settings: Settings) -> int:
    """A Spark standalone cluster (a master and workers, each its own JVM) on this machine."""
    from lakehouse_services.spark_cluster import SparkCluster, cluster_status, master_json, stop_cluster

    def running(state) -> str:
        workers = master_json(state.master_ui).get("workers", [])
        alive = sum(w["state"] == "ALIVE" for w in workers)
        return f"running: {state.master_url} (UI {state.master_ui}), {alive} of {len(workers)} workers alive"

    root = settings.home / "spark-cluster"
    if args.action != "start":
        return _stop_or_status(args.action, root, "cluster", stop_cluster, cluster_status, running)
    cluster = SparkCluster(root, workers=args.workers, cores=args.cores, memory=args.memory).start()
    print(f"Spark master {cluster.master_url} (UI {cluster.master_ui}), {args.workers} workers; to use it:")
    print(f"export LAKEHOUSE_SPARK_MASTER={cluster.master_url}")
    return 0


@_service
def cmd_postgres(args: argparse.Namespace, settings: Settings) -> int:
    """A throwaway PostgreSQL with logical decoding (wal_level=logical), for CDC sources and the catalog."""
    from lakehouse_services.postgres import ThrowawayPostgres, postgres_status, stop_postgres

    root = settings.home / "postgres"
    if args.action != "start":
        return _stop_or_status(args.action, root, "PostgreSQL server", stop_postgres, postgres_status,
                               lambda state: f"running, pid {state.pid}, {state.dsn}")
    databases = args.database or ["source"]
    server = ThrowawayPostgres(root, port=args.port, database=databases[0]).start()
    for name in databases[1:]:
        server.create_database(name)
    print(f"PostgreSQL (wal_level=logical) on 127.0.0.1:{server.port}, database{'s' * (len(databases) > 1)} "
          f"{', '.join(databases)}; to use it:")
    print(f"export PGHOST=127.0.0.1 PGPORT={server.port} PGUSER=postgres")
    print(f"a CDC source's DSN (--dsn, or LAKEHOUSE_CDC_<SOURCE>_DSN): '{server.dsn}'")
    return 0


@_service
def cmd_kafka(args: argparse.Namespace, settings: Settings) -> int:
    """A local Apache Kafka broker (KRaft, one node): its data under the home, kept across a stop and a start."""
    from lakehouse_services.kafka import LocalKafka, kafka_status, stop_kafka

    root = settings.home / "kafka"
    if args.action != "start":
        return _stop_or_status(args.action, root, "Kafka broker", stop_kafka, kafka_status,
                               lambda state: f"running, pid {state.pid}, {state.bootstrap_servers}")
    if args.declared:
        return _declared_kafka(args, settings, root)
    broker = LocalKafka(root, port=args.port, heap=args.heap).start(detach=True)
    print(f"Kafka broker (Apache Kafka {broker.version}, KRaft, cluster {broker.cluster_id}) on "
          f"{broker.bootstrap_servers}, data in {broker.data_dir}; to use it:")
    print(f"export LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap_servers}")
    return 0


@_service
def cmd_catalog_server(args: argparse.Namespace, settings: Settings) -> int:
    """The local Iceberg REST catalog server over the lakehouse's own catalog (its database, its warehouse), its
    keys and log under the home; `token` prints a bearer token for a principal of its rules
    (serving/read_rule.py's catalog_rules)."""
    from lakehouse_services.rest_catalog import RestCatalogServer, catalog_status, key_file, mint_token, stop_catalog

    from ..runtime.spark import s3_file_io_properties
    from ..serving.read_rule import catalog_rules, declared_ml_tables, reader_io

    root = settings.home / "catalog-server"
    if args.action == "token":
        rules = catalog_rules()
        if args.principal not in rules:
            raise LakehouseError(f"no principal {args.principal!r}: the catalog's principals are {', '.join(rules)}")
        RestCatalogServer.attach(root)
        print(mint_token(key_file(root), args.principal, int(args.hours * 3600)))
        return 0
    if args.action != "start":
        return _stop_or_status(args.action, root, "catalog server", stop_catalog, catalog_status,
                               lambda state: f"running, pid {state.pid}, {state.uri}, warehouse {state.warehouse}")
    catalog = settings.catalog
    rules = catalog_rules(declared_ml_tables(settings), reader_io(settings))
    on_s3 = settings.warehouse.startswith(("s3://", "s3a://"))
    server = RestCatalogServer(root, catalog_uri=catalog.jdbc_url, warehouse=settings.warehouse, rules=rules,
                               catalog_name=settings.catalog_name, jdbc_user=catalog.user,
                               jdbc_password=catalog.password, port=args.port or None,
                               io=s3_file_io_properties(settings) if on_s3 else {}).start(detach=True)
    print(f"Iceberg REST catalog on {server.uri}, serving {catalog.display} (warehouse {settings.warehouse}); "
          f"a principal's token: lakehouse catalog token --principal {'|'.join(rules)}")
    return 0


def _declared_kafka(args: argparse.Namespace, settings: Settings, root: Path) -> int:
    """`make dev`'s broker: only for a declaration with sources on Kafka topics and no cluster named by the
    settings; the one already running under the home, else a new start; each declared topic created if missing.
    Prints the bootstrap servers alone (nothing when no broker is wanted)."""
    from lakehouse_services.kafka import LocalKafka, kafka_status

    from ..project import load_project

    project = load_project(settings.project, settings.project_origin)
    topics = sorted({s.topic for s in project.events.values() if s.topic is not None})
    if not topics or settings.kafka_bootstrap_servers:
        return 0
    running = kafka_status(root) is not None
    broker = LocalKafka.attach(root) if running else LocalKafka(root, port=args.port, heap=args.heap).start(detach=True)
    have = set(broker.admin().list_topics(timeout=30).topics)
    for topic in topics:
        if topic not in have:
            broker.create_topic(topic, args.partitions)
            print(f"created topic {topic} ({args.partitions} partitions)", file=sys.stderr)
    print(broker.bootstrap_servers)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("s3", help="start, stop or check a local S3 server (SeaweedFS) under the lakehouse home")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.set_defaults(func=cmd_s3)

    p = sub.add_parser("cluster", help="start, stop or check a local Spark standalone cluster (master and workers)")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cores", type=int, default=1, help="cores per worker")
    p.add_argument("--memory", default="2g", help="memory per worker")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("postgres", help="start, stop or check a throwaway PostgreSQL (wal_level=logical) under the "
                                        "lakehouse home")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--database", action="append", metavar="NAME",
                   help="start: a database to create (repeatable; default: source)")
    p.add_argument("--port", type=int, default=0, help="start: the port to listen on (default: a free one)")
    p.set_defaults(func=cmd_postgres)

    p = sub.add_parser("kafka", help="start, stop or check a local Kafka broker (KRaft) under the lakehouse home")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--port", type=int, default=0,
                   help="start: the clients' port (default: the one it used last, else a free one)")
    p.add_argument("--heap", default="512m", help="start: the broker JVM's maximum heap (default 512m)")
    p.add_argument("--declared", action="store_true",
                   help="start: only when the declaration reads Kafka topics and the settings name no cluster; reuse "
                        "the broker already running, create the declared topics, print its address alone (make dev)")
    p.add_argument("--partitions", type=int, default=3, help="start --declared: partitions of a topic it creates")
    p.set_defaults(func=cmd_kafka)
