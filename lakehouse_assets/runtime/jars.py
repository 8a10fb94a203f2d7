"""Finding the jars Spark needs: Iceberg's runtime, the catalog's JDBC driver, S3A.

On machines without Maven access the Iceberg runtime comes from a pinned pip
package and the JDBC drivers from the operating system; machines with internet
can name Maven coordinates instead (`LAKEHOUSE_SPARK_PACKAGES`).

Hadoop's S3A filesystem jars come out of a pinned PyPI wheel that cannot be
installed next to our packages (it pins another pyarrow): `fetch-s3` downloads
it, keeps the four jars and deletes the rest:

    python -m lakehouse_assets.runtime.jars fetch-s3 [--dest DIR] [--wheel FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from lakehouse_assets.errors import MissingJarError

SPARK_SCALA = "2.12"  # pyspark 3.5 is built for Scala 2.12
ICEBERG_JAR_PACKAGE = "snowpark_connect_deps_iceberg"
ICEBERG_MAVEN = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0"

JDBC_DRIVERS = {
    "sqlite": ("/usr/share/java/sqlite-jdbc.jar", "libxerial-sqlite-jdbc-java libxerial-sqlite-jdbc-jni"),
    "postgresql": ("/usr/share/java/postgresql.jar", "libpostgresql-jdbc-java"),
}


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


# -- S3A (s3a:// and s3:// paths through Hadoop) ------------------------------------

S3A_WHEEL_REQUIREMENT = "bodo-iceberg-connector==2026.10"
S3A_WHEEL_NAME = "bodo_iceberg_connector-2026.10-py3-none-any.whl"
# The downloaded wheel must be this exact file: it is unpacked, not installed by pip.
S3A_WHEEL_SHA256 = "947a72aea7d0f0fa49e7609841d8871dd4841335eeaaf9e6abe2ae34075e4c55"
S3A_WHEEL_JAR_DIR = "bodo_iceberg_connector/jars/libs/"
S3A_JARS = (
    "hadoop-aws-3.3.3.jar",
    "aws-java-sdk-core-1.12.382.jar",
    "aws-java-sdk-s3-1.12.382.jar",
    # S3A's initialisation loads DynamoDB classes even when S3Guard is off.
    "aws-java-sdk-dynamodb-1.12.382.jar",
)
JARS_DIR_ENV = "LAKEHOUSE_JARS_DIR"
FETCH_S3_HINT = "python -m lakehouse_assets.runtime.jars fetch-s3 (or make setup)"


def s3_jars_dir() -> Path:
    """Where fetched jars live: $LAKEHOUSE_JARS_DIR, else <venv>/share/lakehouse/jars."""
    override = os.environ.get(JARS_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser().resolve()
    return Path(sys.prefix) / "share" / "lakehouse" / "jars"


def _is_jar(path: Path) -> bool:
    return path.is_file() and zipfile.is_zipfile(path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_wheel(into: Path) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
        S3A_WHEEL_REQUIREMENT, "-d", str(into),
    ]
    result = subprocess.run(command)
    if result.returncode != 0:
        raise MissingJarError(
            f"downloading {S3A_WHEEL_REQUIREMENT} failed (exit code {result.returncode}): "
            f"check access to PyPI, or download {S3A_WHEEL_NAME} elsewhere and pass --wheel FILE"
        )
    wheel = into / S3A_WHEEL_NAME
    if not wheel.is_file():
        found = sorted(p.name for p in into.iterdir())
        raise MissingJarError(f"pip did not leave {S3A_WHEEL_NAME} in {into}: found {found}")
    digest = _sha256(wheel)
    if digest != S3A_WHEEL_SHA256:
        raise MissingJarError(
            f"{S3A_WHEEL_NAME} has sha256 {digest}, expected {S3A_WHEEL_SHA256}: "
            "refusing to use jars from an unexpected file"
        )
    return wheel


def _extract_jars(wheel: Path, dest: Path) -> list[Path]:
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise MissingJarError(f"{wheel} is not a readable wheel: {exc}") from exc
    with archive:
        names = set(archive.namelist())
        missing = [jar for jar in S3A_JARS if S3A_WHEEL_JAR_DIR + jar not in names]
        if missing:
            raise MissingJarError(f"{wheel} has no {', '.join(missing)} under {S3A_WHEEL_JAR_DIR}")
        dest.mkdir(parents=True, exist_ok=True)
        paths = []
        for jar in S3A_JARS:
            target = dest / jar
            # Write beside the target and rename, so an interrupted run never
            # leaves a truncated jar that a later run would take as done.
            partial = target.with_name(target.name + ".part")
            with archive.open(S3A_WHEEL_JAR_DIR + jar) as src, open(partial, "wb") as out:
                while block := src.read(1 << 20):
                    out.write(block)
            partial.replace(target)
            paths.append(target)
    return paths


def fetch_s3_jars(dest: Path | None = None, wheel: Path | None = None) -> list[Path]:
    """Put the S3A jars into `dest` (default `s3_jars_dir()`); nothing to do if all are there.

    Without `wheel`, downloads the pinned wheel (138 MB) to a temporary folder that
    is deleted afterwards; a `wheel` given by the caller is read and left in place.
    """
    dest = Path(dest).expanduser().resolve() if dest else s3_jars_dir()
    present = [dest / jar for jar in S3A_JARS]
    if all(_is_jar(path) for path in present):
        return present
    if wheel is not None:
        return _extract_jars(Path(wheel).expanduser(), dest)
    with tempfile.TemporaryDirectory(prefix="lakehouse-jars-") as tmp:
        return _extract_jars(_download_wheel(Path(tmp)), dest)


def s3a_jars() -> list[Path]:
    """The S3A jars for `spark.jars`, or an error that says how to fetch them."""
    jar_dir = s3_jars_dir()
    paths = [jar_dir / jar for jar in S3A_JARS]
    missing = [path.name for path in paths if not _is_jar(path)]
    if missing:
        raise MissingJarError(f"S3A jars missing from {jar_dir}: {', '.join(missing)}; run {FETCH_S3_HINT}")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lakehouse_assets.runtime.jars")
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser("fetch-s3", help="put the Hadoop S3A jars where s3a_jars() finds them")
    fetch.add_argument("--dest", type=Path, default=None, help=f"target folder (default: {s3_jars_dir()})")
    fetch.add_argument(
        "--wheel", type=Path, default=None, help=f"a local {S3A_WHEEL_NAME} instead of downloading"
    )
    args = parser.parse_args(argv)
    try:
        paths = fetch_s3_jars(args.dest, args.wheel)
    except MissingJarError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
