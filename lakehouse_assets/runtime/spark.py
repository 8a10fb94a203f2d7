"""The one SparkSession: Iceberg extensions, the shared catalog, the jars.

Spark reads `spark.jars` and catalog settings only when its JVM starts, so a
process gets exactly one session; asking for a different catalog later is an
error that says so instead of silently using the first one.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterable
from importlib import resources

import pyarrow as pa
from dagster_pyspark.resources import spark_session_from_config
from py4j.java_gateway import JavaClass, JavaMember
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType, TimestampType

from ..errors import SparkConfigConflict
from ..settings import JIT_MODES, CatalogUri, Settings
from . import java_jar, jvm_archive
from .catalog import s3_properties
from .jars import spark_jars

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def catalog_spark_conf(name: str, catalog: CatalogUri, warehouse: str,
                       settings: Settings | None = None) -> dict[str, str]:
    """Spark settings for an Iceberg JdbcCatalog on the same tables pyiceberg's SqlCatalog uses; tables on S3 go
    through Iceberg's own S3 client (S3FileIO) with the settings' endpoint and keys."""
    prefix = f"spark.sql.catalog.{name}"
    if catalog.kind == "rest":
        return _rest_catalog_conf(prefix, catalog, warehouse, settings)
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": catalog.jdbc_url,
        f"{prefix}.warehouse": warehouse,
        # pyiceberg's SqlCatalog writes the V1 schema (with iceberg_type) and creates
        # the tables itself; Java creating them too would race with it on SQLite (SQLITE_BUSY).
        f"{prefix}.jdbc.schema-version": "V1",
        f"{prefix}.jdbc.init-catalog-tables": "false",
        # Other engines commit to the same tables: never serve stale metadata.
        f"{prefix}.cache-enabled": "false",
    }
    if catalog.user:
        conf[f"{prefix}.jdbc.user"] = catalog.user
    if catalog.password:
        conf[f"{prefix}.jdbc.password"] = catalog.password
    if settings is not None and warehouse.startswith(("s3://", "s3a://")):
        conf.update({f"{prefix}.{key}": value for key, value in s3_file_io_properties(settings).items()})
    return conf


def _rest_catalog_conf(prefix: str, catalog: CatalogUri, warehouse: str, settings: Settings | None) -> dict[str, str]:
    """An Iceberg REST catalog: the server keeps the catalog and checks the bearer token; Spark reads and writes the
    tables' files itself (with the settings' S3 endpoint and keys for those on S3)."""
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": catalog.rest_url,
        f"{prefix}.warehouse": warehouse,
        # Other engines commit to the same tables: never serve stale metadata.
        f"{prefix}.cache-enabled": "false",
    }
    if catalog.password:
        conf[f"{prefix}.token"] = catalog.password
    if settings is not None and settings.uses_s3:
        # No io-impl: the REST catalog's FileIO resolves each location's own (S3FileIO for s3://, these keys).
        conf.update({f"{prefix}.{key}": value for key, value in s3_file_io_properties(settings).items()
                     if key != "io-impl"})
    return conf


def s3_file_io_properties(settings: Settings) -> dict[str, str]:
    """A catalog's properties for its tables on S3 through Iceberg's S3FileIO (the AWS SDK v2 of
    iceberg-aws-bundle), not Hadoop's S3A: pyiceberg's endpoint and keys, Java's name for the region."""
    props = {key: value for key, value in s3_properties(settings).items() if key != "s3.region"}
    props.update({"io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "client.region": settings.s3_region})
    if settings.s3_endpoint:
        props["s3.path-style-access"] = "true"
    return props


ExtraCatalogs = dict[str, tuple[CatalogUri, str]]  # name -> (catalog database, warehouse)


def spark_conf(settings: Settings, extra_catalogs: ExtraCatalogs | None = None) -> dict[str, str]:
    """Every Spark setting the lakehouse needs, as a flat dict (PySparkResource's shape)."""
    extra_catalogs = extra_catalogs or {}
    kinds = {settings.catalog.kind} | {uri.kind for uri, _ in extra_catalogs.values()}
    log4j = resources.files("lakehouse_assets.runtime").joinpath("log4j2.properties")
    conf = {
        "spark.master": settings.spark_master,
        "spark.app.name": "lakehouse",
        "spark.driver.memory": settings.driver_memory,
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.defaultCatalog": settings.catalog_name,
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Compiled code per query shape, kept for the process (Spark's default keeps 100): the same assets'
        # plans recur in every partition, micro-batch and run a process makes, and each compile costs more CPU
        # than a small run's data.
        "spark.sql.codegen.cache.maxEntries": "2000",
        # PySpark's DataFrame debugging records the Python call site of every column function (a stack walk and
        # five JVM round trips each): the pipeline builds thousands of column expressions per run (each CDC
        # field's decoding, each declared column's cast), and with it on they took longer to build than the
        # run's Spark jobs to execute. Error messages then name the failed expression without its Python line;
        # LAKEHOUSE_SPARK_CONF=spark.python.sql.dataFrameDebugging.enabled=true turns it back on.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        "spark.driver.extraJavaOptions": " ".join(filter(None, [
            f"-Dlog4j2.configurationFile=file:{log4j}", _collector(settings.jvm_gc), COMPILE_HUGE_METHODS,
            jit_option(settings.jvm_jit), jvm_archive.java_options(settings.jvm_archive)])),
        "spark.executor.extraJavaOptions": " ".join(filter(None, [COMPILE_HUGE_METHODS,
                                                                  jit_option(settings.jvm_jit)])),
    }
    if on_loopback(settings.spark_master):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    # The project's Java parts (the landing files' line reader, the SQL endpoint's extension), built when missing.
    conf["spark.jars"] = ",".join([*spark_jars(kinds, settings.uses_s3, settings.extra_jars), str(java_jar.build())])
    if settings.uses_s3:
        conf.update(s3a_conf(settings))
    conf.update(catalog_spark_conf(settings.catalog_name, settings.catalog, settings.warehouse, settings))
    for name, (uri, warehouse) in extra_catalogs.items():
        conf.update(catalog_spark_conf(name, uri, warehouse, settings))
    conf.update(dict(settings.spark_conf))
    return conf


# HotSpot leaves a method of more than 8,000 bytes of bytecode to its interpreter. Spark's whole-stage code
# generation gives a stage one method (processNext) of up to 64 KiB: a source's parse, typing and reasons are one
# stage of hundreds of expressions, so its rows ran interpreted (the largest single cost of a CDC bronze run's
# tasks, profiled on Spark 4.1). The JIT compiles them with this option.
COMPILE_HUGE_METHODS = "-XX:-DontCompileHugeMethods"

_COLLECTORS = {"parallel": "-XX:+UseParallelGC", "g1": "-XX:+UseG1GC"}

# C1 alone: each method compiled once, quickly and without profiling, never again by C2. A JVM that lives for a
# small run spends much of it warming up (interpreting, profiling, C2 compiling Spark's generated code on the same
# cores); one that lives for hours (the stream, the SQL endpoint, a large run) gains from C2's code. C1 alone gets
# the JVM's code cache for one compiler (48 MB), which Spark's generated code fills within a minute (the JIT then
# stops compiling): it keeps the tiered default's 240 MB.
QUICK_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def jit_option(mode: str) -> str:
    """The JVM option of a `jvm_jit` mode: C1 only for `quick`; none (tiered, C1 then C2) for `full` and `auto`
    (which the run's resource resolves before its session starts)."""
    if mode not in JIT_MODES:
        raise ValueError(f"jvm_jit: {mode!r} is not one of {', '.join(JIT_MODES)}")
    return QUICK_JIT if mode == "quick" else ""


def _collector(name: str) -> str:
    """The JVM option that picks the driver's garbage collector; none when JDK_JAVA_OPTIONS picks one (the JVM
    refuses two)."""
    if name not in _COLLECTORS:
        raise ValueError(f"jvm_gc: {name!r} is not one of {', '.join(_COLLECTORS)}")
    return "" if re.search(r"-XX:\+Use\w+GC\b", os.environ.get("JDK_JAVA_OPTIONS", "")) else _COLLECTORS[name]


def on_loopback(master: str) -> bool:
    """Spark in this process, or a cluster on this machine (`lakehouse cluster start`): the driver binds to
    127.0.0.1, where the executors reach it."""
    return master.startswith("local") or master.startswith(("spark://127.0.0.1:", "spark://localhost:"))


def s3a_conf(settings: Settings) -> dict[str, str]:
    """Hadoop's S3A filesystem for s3:// and s3a:// paths (landing files, warehouse on S3)."""
    h = "spark.hadoop.fs.s3a"
    conf = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        f"{h}.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        f"{h}.endpoint.region": settings.s3_region,
    }
    if settings.s3_endpoint:
        conf[f"{h}.endpoint"] = settings.s3_endpoint
        conf[f"{h}.path.style.access"] = "true"
        conf[f"{h}.connection.ssl.enabled"] = str(settings.s3_endpoint.startswith("https")).lower()
    if settings.s3_access_key:
        conf[f"{h}.access.key"] = settings.s3_access_key
        conf[f"{h}.secret.key"] = settings.s3_secret_key
        conf[f"{h}.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    return conf


def get_spark(settings: Settings, extra_catalogs: ExtraCatalogs | None = None) -> SparkSession:
    """The process's SparkSession, built with dagster-pyspark's builder on first use."""
    active = SparkSession.getActiveSession()
    if active is not None:  # asked for at every use of a resource's session: only its catalog is compared
        key = f"spark.sql.catalog.{settings.catalog_name}.uri"
        wanted = catalog_spark_conf(settings.catalog_name, settings.catalog, settings.warehouse)[key]
        current = active.conf.get(key, None)
        if current != wanted:
            raise SparkConfigConflict(
                f"this process already runs a SparkSession whose catalog "
                f"{settings.catalog_name!r} points at {current!r}, not {wanted!r}; "
                "catalog settings apply only when the JVM starts: use one catalog per process"
            )
        return active
    conf = spark_conf(settings, extra_catalogs)
    if on_loopback(settings.spark_master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        spark = spark_session_from_config(conf)
    except PySparkRuntimeError:
        options = conf["spark.driver.extraJavaOptions"]
        if "-XX:SharedArchiveFile=" not in options:
            raise
        # A JVM that cannot map the archive dies at start: start without it, and set it aside only when that
        # start succeeds (a start that fails for another reason, a bad setting, fails again and keeps it).
        conf["spark.driver.extraJavaOptions"] = options.split(" -XX:SharedArchiveFile=")[0]
        spark = spark_session_from_config(conf)
        jvm_archive.set_aside(options)
    spark.sparkContext.setLogLevel("WARN")
    _import_hot_classes(spark)
    # A local lake's files through the project's local file system: Hadoop's, with each file's permissions set by
    # Java instead of a `chmod` process per file and per checksum file (java/.../LocalFiles.java).
    jvm_class(spark, "lakehouse.LocalFiles").install(spark.sparkContext._jsc.hadoopConfiguration())
    return spark


# The JVM classes PySpark names on every call, by their short name or their full one (each `F.col`, `F.when`,
# `F.struct` looks up `functions`; lists and structs `PythonUtils`; each active-session look-up `SparkSession`).
_HOT_CLASSES = (
    "org.apache.spark.sql.functions",
    "org.apache.spark.sql.SparkSession",
    "org.apache.spark.sql.SparkSession$",
    "org.apache.spark.sql.classic.SparkSession",
    "org.apache.spark.sql.classic.SparkSession$",
    "org.apache.spark.api.python.PythonUtils",
    "org.apache.spark.sql.api.python.PythonSQLUtils",
    "org.apache.spark.api.python.PythonRDD",
    "org.apache.spark.api.python.SerDeUtil",
)


class _StaticClass(JavaClass):
    """A JVM class whose static methods are each looked up once. py4j asks the JVM what a name is on every
    access (`functions.col`: the JVM copies the class's hundreds of methods to find it), before the call itself
    asks again; a method's handle holds nothing but its class's and its own name, so it is kept. A field is
    still read each time (its value may change), and so is an inner class."""

    def __getattr__(self, name: str):
        member = super().__getattr__(name)
        if isinstance(member, JavaMember):
            self.__dict__[name] = member
        return member


def _import_hot_classes(spark: SparkSession) -> None:
    """Name PySpark's hot classes in the gateway's view, by their short and full names, as classes the view
    holds. py4j resolves a short name by looking for it first as a class of no package, in every jar on the
    class path (hundreds), then by each package the view imports with `*` in turn; a full name by a round trip
    to the JVM. A name the view holds is found in Python, with no round trip."""
    view, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    assert gateway is not None  # set while the SparkContext is running
    client = gateway._gateway_client
    for name in _HOT_CLASSES:
        cls, short = _StaticClass(name, client), name.rsplit(".", 1)[1]
        setattr(view, name, cls)
        if short not in vars(view):  # a short name is the first class of that name
            setattr(view, short, cls)


def jvm_option(spark: SparkSession, name: str) -> str:
    """A HotSpot option's value in the session's JVM (`TieredStopAtLevel`), as the JVM took it."""
    management = jvm_class(spark, "java.lang.management.ManagementFactory")
    bean = management.getPlatformMXBean(
        jvm_class(spark, "java.lang.Class").forName("com.sun.management.HotSpotDiagnosticMXBean"))
    return str(bean.getVMOption(name).getValue())


def jvm_class(spark: SparkSession, name: str) -> JavaClass:
    """A JVM class by its full name (`org.apache.hadoop.fs.Path`), for its constructors and static methods. Not
    `spark._jvm.org.apache...`: py4j looks each package on the way up as a class first, in every jar."""
    gateway = spark.sparkContext._gateway
    assert gateway is not None  # set while the SparkContext is running
    return JavaClass(name, gateway._gateway_client)


def local_frame(spark: SparkSession, rows: Iterable[tuple], schema: str | StructType) -> DataFrame:
    """A small frame of rows this process holds (`schema` as DDL, "name string, n long", or a StructType), sent to
    the JVM as Arrow.

    Not `spark.createDataFrame(rows)`: for a list, PySpark parallelises pickled rows and turns them into Spark's
    rows in Python workers on the executors, so a run's first such frame starts Spark's Python worker daemon
    (seconds, in every run's process), and each one after it is a job through them. Timestamps must carry their
    time zone: a naive one would be read as local time by one path and as UTC by the other. They are given to
    Arrow in UTC: importing `pyspark.pandas` (pandera does) sets PYARROW_IGNORE_TIMEZONE, with which Arrow takes
    an aware datetime's wall time as UTC."""
    struct = StructType.fromDDL(schema) if isinstance(schema, str) else schema
    assert isinstance(struct, StructType), schema
    moments = [i for i, field in enumerate(struct.fields) if isinstance(field.dataType, TimestampType)]
    records = []
    for row in rows:
        if len(row) != len(struct.fields):
            raise ValueError(f"a row of {len(row)} values for the {len(struct.fields)} columns {schema!r}: {row!r}")
        values = list(row)
        for i in moments:
            if isinstance(values[i], dt.datetime):
                if values[i].tzinfo is None:
                    raise ValueError(f"{struct.fields[i].name}: a timestamp without a time zone: {values[i]!r}")
                values[i] = values[i].astimezone(dt.timezone.utc)
        records.append(dict(zip(struct.names, values)))
    return spark.createDataFrame(pa.Table.from_pylist(records, schema=to_arrow_schema(struct)))
