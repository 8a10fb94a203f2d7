"""The project's Java parts, each beside the Python that uses it (`<package>/java/lakehouse/`): the landing files'
line reader (landing/), the decimal digits of change events (sources/), and the SQL endpoint's read-only session
extension, password sign-in, query time limit, JDBC metadata, result cache and row limit (serving/), compiled
against pyspark's own jars into a jar once per installation: `make setup` builds it, a Spark session builds it
when it is missing.

    python -m lakehouse_assets.runtime.java_jar build
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

from ..errors import MissingJarError
from .jvm_archive import _folder, _spark_home

EXTENSION_CLASS = "lakehouse.ReadOnlySql"
PASSWORD_CLASS = "lakehouse.PasswordFile"
LINES_FORMAT = "lakehouse.JsonLines"
UNSCALED_CLASS = "lakehouse.UnscaledDigits"


JAVA_PACKAGES = ("landing", "sources", "serving")  # the packages with Java sources, in `<package>/java/`


def _roots() -> list[Path]:
    return [Path(str(resources.files(f"lakehouse_assets.{package}").joinpath("java"))) for package in JAVA_PACKAGES]


def _sources() -> list[Path]:
    return sorted(path for root in _roots() for path in root.rglob("*.java"))


def _resources() -> list[tuple[Path, str]]:
    """Files the classes read from the jar (the SQL endpoint's read-only list), with their names in it."""
    return sorted((path, path.relative_to(root).as_posix()) for root in _roots() for path in root.rglob("*.tsv"))


@functools.cache  # every Spark session's settings ask for it; the sources do not change while a process runs
def jar_file() -> Path:
    """Where this installation's jar is: named by its sources and the pyspark it is compiled against."""
    import pyspark

    digest = hashlib.sha256(pyspark.__version__.encode())
    for source in [*_sources(), *(path for path, _ in _resources())]:
        digest.update(source.name.encode() + source.read_bytes())
    return _folder() / f"lakehouse-java-{digest.hexdigest()[:16]}.jar"


def _javac() -> str:
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "javac") if java_home else shutil.which("javac")
    if not found or not Path(found).exists():
        raise MissingJarError("the project's Java parts are compiled with javac (a JDK 17): apt-get install "
                              "openjdk-17-jdk-headless (make setup does where apt is)")
    return found


def build() -> Path:
    """The jar, compiled now if this installation has none; written under a temporary name, renamed into place."""
    target = jar_file()
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lakehouse-java-") as work:
        classes = Path(work) / "classes"
        done = subprocess.run(
            [_javac(), "-nowarn", "--release", "17", "-d", str(classes), "-cp", str(_spark_home() / "jars" / "*"),
             *map(str, _sources())], capture_output=True, text=True)
        if done.returncode != 0:
            raise MissingJarError(f"compiling the project's Java parts failed:\n{done.stderr.strip()}")
        partial = target.with_suffix(f".{os.getpid()}.partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
            for path, name in _resources():
                jar.write(path, name)
        os.replace(partial, target)
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["build"]:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print(f"Java parts: {build()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
