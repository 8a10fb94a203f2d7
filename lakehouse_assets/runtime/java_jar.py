"""The project's Java parts, a Maven module (`java/`): the landing files' line reader, the decimal digits of change
events, and the SQL endpoint's read-only session extension, password sign-in, query time limit, JDBC metadata,
result cache and row limit, compiled against pyspark's own jars into a jar once per installation.

    python -m lakehouse_assets.runtime.java_jar resolve   # make setup: Maven's plugins and JUnit, the tests run
    python -m lakehouse_assets.runtime.java_jar build     # the jar, offline (a Spark session builds it if missing)
    python -m lakehouse_assets.runtime.java_jar test      # make test: the module's JUnit tests, offline

Maven works in the installation's local repository (runtime/jars.py `local_repository`), offline but for `resolve`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import MissingJarError
from .jars import jars_for, local_repository
from .jvm_archive import _folder, _spark_home

EXTENSION_CLASS = "lakehouse.ReadOnlySql"
PASSWORD_CLASS = "lakehouse.PasswordFile"
LINES_FORMAT = "lakehouse.JsonLines"
UNSCALED_CLASS = "lakehouse.UnscaledDigits"
FATAL_ERROR_PLUGIN = "lakehouse.FatalErrorNotice"
CATALOG_SERVER_CLASS = "lakehouse.catalog.RestCatalogServer"

MODULE = Path(__file__).resolve().parents[2] / "java"


def _module_files() -> list[Path]:
    if not (MODULE / "pom.xml").is_file():
        raise MissingJarError(f"the project's Java module is not at {MODULE} (pom.xml): an installation from the "
                              "repository's checkout builds it (make setup)")
    return sorted([MODULE / "pom.xml", *(MODULE / "src" / "main").rglob("*")], key=str)


@functools.cache  # every Spark session's settings ask for it; the sources do not change while a process runs
def jar_file() -> Path:
    """Where this installation's jar is: named by its sources and the pyspark it is compiled against."""
    import pyspark

    digest = hashlib.sha256(pyspark.__version__.encode())
    for path in _module_files():
        if path.is_file():
            digest.update(path.relative_to(MODULE).as_posix().encode() + path.read_bytes())
    return _folder() / f"lakehouse-java-{digest.hexdigest()[:16]}.jar"


def _maven(goals: list[str], build_dir: Path, offline: bool = True) -> subprocess.CompletedProcess:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MissingJarError("the project's Java is built with Maven: apt-get install maven (make setup does "
                              "where apt is)")
    command = [mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(MODULE / "pom.xml"),
               f"-Dmaven.repo.local={local_repository()}", f"-Dspark.jars.dir={_spark_home() / 'jars'}",
               f"-Dbuild.dir={build_dir}", *(["-o"] if offline else []), *goals]
    return subprocess.run(command, capture_output=True, text=True)


def _failed(what: str, done: subprocess.CompletedProcess) -> MissingJarError:
    output = (done.stdout + done.stderr).strip()
    hint = ("; Maven's plugins are resolved by make setup (python -m lakehouse_assets.runtime.java_jar resolve)"
            if "offline mode" in output else "")
    return MissingJarError(f"{what} failed (mvn exit code {done.returncode}){hint}:\n{output[-6000:]}")


def resolve() -> None:
    """Maven's plugins and the tests' JUnit into the local repository: the module built and tested once online, and
    the jar it built kept as the installation's (a later `build` has nothing to do)."""
    with tempfile.TemporaryDirectory(prefix="lakehouse-java-") as work:
        done = _maven(["package"], Path(work), offline=False)
        if done.returncode != 0:
            raise _failed("resolving and building the project's Java module", done)
        _keep(Path(work), jar_file())


def build() -> Path:
    """The jar, built now (offline, without its tests) if this installation has none; renamed into place."""
    target = jar_file()
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(prefix="lakehouse-java-") as work:
        done = _maven(["-DskipTests", "package"], Path(work))
        if done.returncode != 0:
            raise _failed("building the project's Java parts", done)
        _keep(Path(work), target)
    return target


def _keep(work: Path, target: Path) -> None:
    """The jar Maven built in `work` renamed into place whole."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.partial")
    shutil.copyfile(work / "lakehouse-java.jar", partial)
    os.replace(partial, target)


def catalog_server_classpath() -> list[str]:
    """The class path of the local REST catalog server (CATALOG_SERVER_CLASS, `lakehouse catalog start`): the
    project's jar on the Iceberg runtime, JDBC drivers and S3 client Spark loads, and pyspark's own jars (Hadoop's
    configuration, logging)."""
    return [str(build()), *map(str, jars_for({"iceberg", "sqlite", "postgresql", "s3"})), str(_spark_home() / "jars" / "*")]


def test() -> str:
    """The module's JUnit tests, offline: their summary, or an error with Maven's report."""
    with tempfile.TemporaryDirectory(prefix="lakehouse-java-") as work:
        done = _maven(["test"], Path(work))
        if done.returncode != 0:
            raise _failed("the Java module's tests", done)
        reports = sorted((Path(work) / "surefire-reports").glob("*.txt"))
        return "\n".join(line for report in reports for line in report.read_text().splitlines()
                         if line.startswith("Tests run"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["resolve"], ["build"], ["test"]):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        if args == ["resolve"]:
            resolve()
        elif args == ["build"]:
            print(f"Java parts: {build()}")
        else:
            print(test())
    except MissingJarError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
