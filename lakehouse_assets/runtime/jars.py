"""Finding the jars Spark needs: Iceberg's runtime and the catalog's JDBC driver.

On machines without Maven access the Iceberg runtime comes from a pinned pip
package and the JDBC drivers from the operating system; machines with internet
can name Maven coordinates instead (`LAKEHOUSE_SPARK_PACKAGES`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SPARK_SCALA = "2.12"  # pyspark 3.5 is built for Scala 2.12
ICEBERG_JAR_PACKAGE = "snowpark_connect_deps_iceberg"
ICEBERG_MAVEN = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0"

JDBC_DRIVERS = {
    "sqlite": ("/usr/share/java/sqlite-jdbc.jar", "libxerial-sqlite-jdbc-java libxerial-sqlite-jdbc-jni"),
    "postgresql": ("/usr/share/java/postgresql.jar", "libpostgresql-jdbc-java"),
}


class MissingJarError(RuntimeError):
    pass


def iceberg_runtime_jar() -> Path:
    spec = importlib.util.find_spec(ICEBERG_JAR_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingJarError(
            f"the Iceberg Spark runtime was not found: pip install "
            f"'snowpark-connect-deps-iceberg==1.0.2', or set LAKEHOUSE_SPARK_PACKAGES={ICEBERG_MAVEN}"
        )
    jar_dir = Path(next(iter(spec.submodule_search_locations))) / "jars"
    found = sorted(jar_dir.glob(f"iceberg-spark-runtime-3.5_{SPARK_SCALA}-*.jar"))
    if not found:
        raise MissingJarError(f"no iceberg-spark-runtime-3.5_{SPARK_SCALA} jar in {jar_dir}")
    return found[-1]


def jdbc_driver_jar(kind: str) -> Path:
    path, packages = JDBC_DRIVERS[kind]
    jar = Path(path)
    if not jar.exists():
        raise MissingJarError(
            f"the {kind} JDBC driver {jar} is missing: apt-get install {packages} "
            "(or add the driver jar to LAKEHOUSE_SPARK_JARS)"
        )
    return jar


def spark_jars(catalog_kinds: set[str], spark_packages: str, extra_jars: tuple[str, ...]) -> list[str]:
    """Local jar paths for `spark.jars`: Iceberg (unless from Maven) and JDBC drivers."""
    jars: list[str] = []
    if not spark_packages:
        jars.append(str(iceberg_runtime_jar()))
    for kind in sorted(catalog_kinds):
        # With Maven packages configured, a driver jar named in extra_jars is enough.
        if spark_packages and not Path(JDBC_DRIVERS[kind][0]).exists():
            continue
        jars.append(str(jdbc_driver_jar(kind)))
    jars.extend(extra_jars)
    return jars
