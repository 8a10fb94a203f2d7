"""A class-data archive for the driver's JVM: every lakehouse process starts faster.

Each run, stream and command that uses Spark starts a JVM that loads some 20,000 classes (Spark, Scala,
Iceberg, Parquet) before its first query. Java's class-data sharing (AppCDS) keeps them parsed and verified
in an archive the JVM maps at start: a fresh process then has its Spark session in about two thirds of the
time, and a small run in a fresh process ends about an eighth sooner (benchmarks/RESULTS.md, `cold_start`).

The archive belongs to the installation, not to a lakehouse: it is made once (`make setup` runs
`python -m lakehouse_assets.runtime.jvm_archive build`) by a JVM that runs a small lakehouse workload in a
throwaway home and writes the classes it loaded when it exits. It is named by what it depends on (the Java
binary, pyspark's jars), so a changed Java or Spark simply has no archive until it is built again, and the
JVM itself refuses an archive that does not match (then it starts without it). It is written under a
temporary name and renamed into place whole, and used only while it has the size it was written with; a JVM
that still fails to start with it has it moved aside and starts again without it. `LAKEHOUSE_JVM_ARCHIVE=0` turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

# The JVM's own messages about the archive (e.g. "unable to use shared archive") go to stdout: keep them out
# of commands' output; a mismatched archive is simply not used.
QUIET = "-Xlog:cds*=off"


def _spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def _java() -> Path | None:
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_file() -> Path | None:
    """Where this installation's archive is (whether or not it exists yet); None when no Java is found."""
    java = _java()
    return None if java is None else _folder() / f"driver-{_installation_key(java)}.jsa"


@lru_cache(maxsize=4)
def _installation_key(java: Path) -> str:
    """What an archive depends on, once per process (every Spark session's settings ask): the Java binary and
    pyspark's jars."""
    import pyspark

    spark_home = _spark_home()
    stat = java.stat()
    jars = sorted(p.name for p in (spark_home / "jars").glob("*.jar"))
    return hashlib.sha256(json.dumps(
        [pyspark.__version__, str(spark_home), jars, str(java), stat.st_size, stat.st_mtime_ns]).encode()
    ).hexdigest()[:16]


def _folder() -> Path:
    """Inside the virtual environment when there is one (it goes with it), else the user's cache."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "lakehouse-jvm"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lakehouse" / "jvm"


def java_options(enabled: bool) -> str:
    """The driver's JVM options that use the archive, or '' when it is off or not built."""
    if not enabled:
        return ""
    path = archive_file()
    if path is None or not path.is_file() or not _whole(path):
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def _size_file(path: Path) -> Path:
    return path.with_suffix(".size")


def _whole(path: Path) -> bool:
    """The archive has the size it was written with: a JVM mapping a cut-off archive dies at start (SIGBUS)."""
    try:
        return int(_size_file(path).read_text()) == path.stat().st_size
    except (OSError, ValueError):
        return False


def set_aside(options: str) -> None:
    """The JVM did not start with this archive: move it aside (kept for a look), so the next start does not
    use it."""
    for part in options.split():
        if part.startswith("-XX:SharedArchiveFile="):
            path = Path(part.split("=", 1)[1])
            if path.exists():
                path.replace(path.with_suffix(".unusable"))


def build(force: bool = False) -> Path | None:
    """Make this installation's archive if it is missing: a JVM runs runtime/jvm_workload.py in a throwaway
    home and writes its classes at exit under a temporary name, renamed into place once complete."""
    path = archive_file()
    if path is None:
        print("jvm archive: no java found; nothing built")
        return None
    if path.is_file() and not force:
        print(f"jvm archive: {path} (already built)")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lakehouse-jvm-archive-") as home:
        env = {**os.environ, "LAKEHOUSE_HOME": home, "LAKEHOUSE_JVM_ARCHIVE": "0", "LAKEHOUSE_PROFILE": "local"}
        for variable in ("LAKEHOUSE_CATALOG_URI", "LAKEHOUSE_WAREHOUSE", "LAKEHOUSE_LANDING",
                         "LAKEHOUSE_SPARK_MASTER", "LAKEHOUSE_SPARK_CONF"):
            env.pop(variable, None)
        result = subprocess.run([sys.executable, "-m", "lakehouse_assets.runtime.jvm_workload", str(partial)],
                                env=env, capture_output=True, text=True)
    if result.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        errors = [line for line in result.stderr.splitlines() if "Error" in line or "Exception" in line]
        print(f"jvm archive: not built (the workload exited {result.returncode}: "
              f"{errors[-1] if errors else 'no error printed'}); Spark starts without it", file=sys.stderr)
        return None
    _size_file(path).write_text(str(partial.stat().st_size))
    partial.replace(path)
    for old in [*path.parent.glob("driver-*.jsa"), *path.parent.glob("driver-*.size")]:
        if old.stem != path.stem:
            old.unlink(missing_ok=True)
    print(f"jvm archive: {path} built in {time.monotonic() - started:.0f} s")
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["build"]:
        build(force="--force" in args)
        return 0  # without an archive Spark still starts: setup goes on
    print("usage: python -m lakehouse_assets.runtime.jvm_archive build [--force]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
