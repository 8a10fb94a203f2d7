"""`lakehouse serve`: the lakehouse's SQL endpoint for BI tools and SQL clients, Spark's Thrift JDBC/ODBC server
(HiveServer2's protocol) on the same catalog and settings as the assets.

It only reads, by construction: every statement passes the session extension ReadOnlySql (serving/java) after
analysis and before it runs, which allows what reading is made of by name (java/src/main/resources/lakehouse/read-policy.tsv:
plan nodes, commands, functions, settings) and refuses everything else before a file is written; what a session
sends when it opens passes the same list (GuardedSessions); variable substitution and SQL on raw files are off;
the catalog is opened read-only where the catalog database allows it (SQLite) and the tables' files are read with
the read-only S3 identity analysts' SQL uses (LAKEHOUSE_SQL_S3_ACCESS_KEY) when one is set; the server's JVM starts
with an environment of its own, without the pipeline's keys. Raw tables (bronze, quarantines, the ingest log) are
refused unless LAKEHOUSE_SQL_RAW=1, by the rule `lakehouse sql` applies (read_rule.py), which the check receives in
the server's Spark settings. Clients sign in with the users file (users.py). Every query reads each table's current
snapshot (the catalog keeps no cached metadata), so a commit by a run or the stream shows in the next query.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import LakehouseError
from ..runtime import jvm_archive
from ..runtime.java_jar import EXTENSION_CLASS, FATAL_ERROR_PLUGIN, PASSWORD_CLASS
from ..runtime.spark import ICEBERG_EXTENSIONS, spark_conf
from ..settings import Settings
from .read_rule import endpoint_rule, read_only_settings
from .users import read_users, users_file

# What of its environment the endpoint's JVM is started with: what a JVM and Spark need to start, nothing else
# (no key, password or credential of the pipeline's: the endpoint's settings reach Spark as its configuration).
KEPT_ENVIRONMENT = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
                    "JAVA_HOME", "SPARK_HOME", "SPARK_LOCAL_IP", "XDG_CACHE_HOME", "LAKEHOUSE_JVM_ARCHIVE")


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    namespace: str  # the database clients connect to: the lakehouse's namespace

    @property
    def url(self) -> str:
        return f"jdbc:hive2://{self.host}:{self.port}/{self.namespace}"

    @property
    def sqlalchemy_url(self) -> str:
        return f"hive://{self.host}:{self.port}/{self.namespace}"


def endpoint_settings(settings: Settings, endpoint: Endpoint) -> Settings:
    """The lakehouse's settings as the endpoint's Spark needs them: the read-only extension and identity, raw
    tables hidden, SQL on files off, the Thrift server's address, each query's own snapshot."""
    settings = read_only_settings(settings)
    if settings.serve_catalog_uri:  # the catalog database read as a role that may only read
        settings = settings.with_(catalog_uri=settings.serve_catalog_uri)
    catalog = f"spark.sql.catalog.{settings.catalog_name}"
    conf = {
        "spark.sql.extensions": f"{ICEBERG_EXTENSIONS},{EXTENSION_CLASS}",
        **endpoint_rule(settings),  # which tables are raw, for ReadOnlySql's check
        "spark.lakehouse.serve.catalog": settings.catalog_name,
        "spark.sql.runSQLOnFiles": "false",
        "spark.sql.variable.substitute": "false",  # no ${env:...}, ${system:...} or ${spark...} in a statement
        # Every connection signs in through the users file (PasswordFile): a user added while it runs counts.
        "spark.hadoop.hive.server2.authentication": "CUSTOM",
        f"{catalog}.default-namespace": settings.namespace,
        "spark.hadoop.hive.server2.thrift.bind.host": endpoint.host,
        "spark.hadoop.hive.server2.thrift.port": str(endpoint.port),
        "spark.scheduler.mode": "FAIR",
        "spark.sql.thriftServer.incrementalCollect": "true",
        # What Spark sets in the session when it formats its first result for a client (HiveResult): set from the
        # start, the first query's settings are those of every later one, and so is its result cache key.
        "spark.sql.binaryOutputStyle": "UTF-8",
        "spark.ui.enabled": "false",
    }
    if settings.catalog.kind == "sqlite":
        conf[f"{catalog}.jdbc.open_mode"] = "1"  # SQLITE_OPEN_READONLY: the catalog database cannot change
    master = own_executors(settings.spark_master, settings.serve_executor_memory)
    if master != settings.spark_master:
        settings = settings.with_(spark_master=master)
        conf["spark.executor.memory"] = settings.serve_executor_memory
        # Its executors are JVMs of this installation on the same class path: they map the archive too (the
        # first answer after the endpoint starts, or after an executor ended, waits for one to start).
        conf["spark.executor.extraJavaOptions"] = " ".join(filter(None, [
            spark_conf(settings)["spark.executor.extraJavaOptions"], jvm_archive.java_options(settings.jvm_archive)]))
        # A task that ignores its cancellation (a regular expression backtracking over a table's values) has its
        # executor ended after this long, and a new one started: the core it held is free again.
        conf["spark.task.reaper.enabled"] = "true"
        conf["spark.task.reaper.killTimeout"] = "30s"
        # An executor a task's fatal error ends (out of memory) tells the driver before the failure is reported
        # (lakehouse.FatalErrorNotice), so nothing more is sent to it: the tasks of other queries lost with it are
        # tried again on the executor started in its place, without counting as their failures. A task's own
        # failure is not tried again (a query's error is its answer; an out-of-memory query fails at once, with the
        # reason, rather than end a second executor).
        conf["spark.plugins"] = FATAL_ERROR_PLUGIN
        conf["spark.task.maxFailures"] = "1"
    conf["spark.driver.maxResultSize"] = "512m"  # a partition's rows read back at once: fails alone past it
    # Clients wait on its pauses: the JVM's collector of short pauses, not a run's collector of throughput.
    return settings.with_(spark_conf=tuple({**dict(settings.spark_conf), **conf}.items()), jvm_gc="g1")


def own_executors(master: str, memory: str) -> str:
    """In local mode (`local[N]`), Spark's master and worker in the endpoint's JVM and its executor in a JVM of its
    own (`local-cluster[1,N,MB]`): a query that runs its executor out of memory fails alone, the executor is
    started again, and the endpoint and the other clients' sessions go on. A cluster's master is kept."""
    found = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master.strip())
    if not found:
        return master
    given = found.group(1)
    cores = 1 if given is None else (os.cpu_count() or 1) if given == "*" else int(given)
    return f"local-cluster[1,{cores},{_megabytes(memory)}]"


def _megabytes(memory: str) -> int:
    found = re.fullmatch(r"(\d+)\s*([kmgt]?)b?", memory.strip().lower())
    if not found:
        raise ValueError(f"LAKEHOUSE_SERVE_EXECUTOR_MEMORY: {memory!r} is not a size like 2g or 1536m")
    scale = {"k": 1 / 1024, "": 1 / 1024 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}[found.group(2)]
    return max(1, int(int(found.group(1)) * scale))


def serve(settings: Settings, endpoint: Endpoint, started: Callable[[Endpoint], None] = print) -> None:
    """Start the endpoint in this process's JVM and serve until the process is stopped."""
    from ..runtime.spark import get_spark

    users = users_file(settings)
    read_users(users)  # a malformed file is said now, not at each sign-in
    if not users.exists() and not _loopback(endpoint.host):
        raise LakehouseError(f"the SQL endpoint listens beyond this machine ({endpoint.host}) only with sign-in: "
                             f"add a user first (lakehouse serve --add-user NAME writes {users})")
    if answers(endpoint, timeout_s=0.5):
        raise LakehouseError(f"something already answers on {endpoint.host}:{endpoint.port}")
    endpoint_conf = endpoint_settings(settings, endpoint)
    kept = {name: value for name, value in os.environ.items() if name in KEPT_ENVIRONMENT}
    os.environ.clear()  # the JVM started next inherits only what it needs
    os.environ.update(kept)
    # The jars on the driver's own class path too: a client's session, when it closes, closes the class loader
    # Spark adds jars with (Hive's session state does), and Iceberg's classes not loaded yet would be lost. They go
    # after Spark's own (Spark's launcher appends SPARK_DIST_CLASSPATH; spark.driver.extraClassPath would put them
    # first), so that the class path the installation's class-data archive was made with stays its beginning and
    # the JVM maps the archive (runtime/jvm_archive.py): the endpoint's Spark session starts in about 7 s, not 11.
    os.environ["SPARK_DIST_CLASSPATH"] = spark_conf(endpoint_conf)["spark.jars"].replace(",", os.pathsep)
    logs = settings.home / "serve"
    logs.mkdir(parents=True, exist_ok=True)
    if endpoint_conf.spark_master.startswith("local-cluster"):
        os.environ["SPARK_HOME"] = str(_spark_home_of_its_own(logs))
    if settings.serve_os_user:
        become(settings.serve_os_user, logs, users)
    spark = get_spark(endpoint_conf)
    jvm = spark._jvm
    assert jvm is not None  # a session started in this process
    system = jvm.java.lang.System
    system.setProperty("derby.stream.error.file", str(logs / "derby.log"))  # the server's scratch
    # Hive's sign-in reads a HiveConf of its own, which takes system properties; no client can set one.
    system.setProperty("hive.server2.authentication", "CUSTOM")
    system.setProperty("hive.server2.custom.authentication.class", PASSWORD_CLASS)
    jvm.lakehouse.PasswordFile.configure(str(users), _loopback(endpoint.host))
    if settings.serve_query_timeout:
        jvm.lakehouse.QueryTimeout.install(spark.sparkContext._jsc.sc(), settings.serve_query_timeout)
    server = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        spark._jsparkSession.sqlContext())
    # JDBC's table tree from the lakehouse's catalog, the cache of query results (computed again at a commit for the
    # queries asked again) and the limit on a result's rows;
    # then what a session sends when it opens passes the read-only list
    jvm.lakehouse.CatalogMetadata.install(server, settings.serve_result_cache_rows,
                                          settings.serve_result_cache_mb * 1024 * 1024, settings.serve_max_rows,
                                          settings.serve_refresh_every, settings.serve_refresh_idle,
                                          settings.serve_hold_rows)
    jvm.lakehouse.GuardedSessions.install(server)
    deadline = time.monotonic() + 120
    while not answers(endpoint, timeout_s=1):
        if time.monotonic() > deadline:
            raise LakehouseError(f"the SQL endpoint did not open {endpoint.host}:{endpoint.port}")
        time.sleep(0.2)
    jvm.lakehouse.PasswordFile.watchAddresses(server)  # failed sign-ins are limited per address too
    jvm.lakehouse.PasswordFile.ready()  # the guards are in place: no session was opened without them
    started(endpoint)
    while True:
        time.sleep(3600)


def _spark_home_of_its_own(logs: Path) -> Path:
    """Spark's worker in the endpoint's JVM starts executors from its Spark home (`bin`, `jars`) and gives each a
    folder under the home's `work`: a home of the endpoint's own, whose `bin` and `jars` are pyspark's, keeps
    those folders (and their copies of the jars) in the endpoint's folder, not in the installation."""
    from ..runtime.jvm_archive import _spark_home

    home = logs / "spark-home"
    home.mkdir(exist_ok=True)
    for part in ("bin", "jars"):
        if not (home / part).is_symlink():
            (home / part).symlink_to(_spark_home() / part)
    return home


def become(name: str, logs: Path, users: Path) -> None:
    """Go on (and start the endpoint's JVM) as this operating-system user, who may write the endpoint's own folder
    and read the users file, and nothing of the lakehouse's more than any other user: not the warehouse, the
    landing zone or the rest of the secrets folder, whose files are the pipeline's user's alone."""
    import pwd

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise LakehouseError(f"LAKEHOUSE_SERVE_OS_USER: no operating-system user {name!r}") from None
    if os.geteuid() == entry.pw_uid:
        return
    if os.geteuid() != 0:
        raise LakehouseError(f"LAKEHOUSE_SERVE_OS_USER={name}: only root can start the endpoint as another user")
    for path in [logs, *logs.rglob("*")]:  # its own links (to pyspark's bin and jars) as links: not their targets
        os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    if users.exists():  # the users file readable by the endpoint's group, the folder only passable
        os.chown(users.parent, 0, entry.pw_gid)
        users.parent.chmod(0o710)
        os.chown(users, 0, entry.pw_gid)
        users.chmod(0o640)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    os.environ.update(HOME=str(logs), USER=name, LOGNAME=name)


def check(endpoint: Endpoint, user: str = "", password: str = "") -> str:
    """What the endpoint says to a query (its Spark version), that it wants a sign-in, or '' when nothing
    answers there."""
    if not answers(endpoint):
        return ""
    from pyhive import hive
    from thrift.transport.TTransport import TTransportException

    auth = {"auth": "CUSTOM", "username": user, "password": password} if user else {}
    try:
        with hive.connect(host=endpoint.host, port=endpoint.port, database=endpoint.namespace, **auth) as con:
            cursor = con.cursor()
            cursor.execute("SELECT version()")
            (version,) = cursor.fetchone()
    except TTransportException:  # the sign-in refused: the server closes the connection
        return "listening; sign-in refused" + (f" for {user}" if user else " (LAKEHOUSE_SERVE_USER, _PASSWORD)")
    except Exception:  # noqa: BLE001 - something listens there but does not answer as the endpoint
        return ""
    return f"answers (Spark {version.split()[0]})"


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def answers(endpoint: Endpoint, timeout_s: float = 2.0) -> bool:
    """Whether something accepts connections on the endpoint's address."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s):
            return True
    except OSError:
        return False
