"""The jars Spark loads besides pyspark's own: named by Maven coordinates and sha256 in `jars.tsv`, resolved into
the installation's local repository (Maven's layout) once, by `make setup`, and loaded from there.

    python -m lakehouse_assets.runtime.jars resolve [--from URL|FOLDER]   # what make setup runs
    python -m lakehouse_assets.runtime.jars list                          # the local files, one per line
    python -m lakehouse_assets.runtime.jars pin GROUP:ARTIFACT:VERSION     # the line of a new version
    python -m lakehouse_assets.runtime.jars pin --use USE --with-dependencies G:A:V...   # a group's lines, by Maven

They come from Maven Central unless `LAKEHOUSE_MAVEN_REPOSITORY` (or `--from`) names another: the address of a
mirror in Maven's layout, or a folder on this machine holding the jars (in Maven's layout or side by side). Each
file is checked against its sha256 before it is kept; a run only looks for the files and never resolves anything.

Besides Spark's, the file names the jars of JVMs of their own, which Spark never loads: the local Kafka broker's
(use `kafka-broker`, `lakehouse kafka start`) and a local Kafka Connect worker's with Debezium's PostgreSQL connector
(use `kafka-connect`, `lakehouse_services.kafka_connect`). The local REST catalog server (`lakehouse catalog
start`) runs the project's own Java on Spark's Iceberg, JDBC and S3 jars (java_jar.catalog_server_classpath).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lakehouse_assets.errors import MissingJarError

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
REPOSITORY_ENV = "LAKEHOUSE_MAVEN_REPOSITORY"
JARS_DIR_ENV = "LAKEHOUSE_JARS_DIR"
RESOLVE_HINT = "make setup (python -m lakehouse_assets.runtime.jars resolve)"
# What loads a jar: Spark, as its settings say (SPARK_USES), or a JVM Spark never loads: the local Kafka broker's or
# Kafka Connect's.
SPARK_USES = ("iceberg", "kafka", "sqlite", "postgresql", "s3")
KAFKA_BROKER = "kafka-broker"
KAFKA_CONNECT = "kafka-connect"
USES = (*SPARK_USES, KAFKA_BROKER, KAFKA_CONNECT)
# The Maven plugin that lists a group's jars with everything they need at run time (`pin --with-dependencies`).
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


@dataclass(frozen=True)
class Jar:
    use: str
    group: str
    artifact: str
    version: str
    sha256: str
    classifier: str = ""  # e.g. `runner`: a jar beside the artifact's main one

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}" + (f":{self.classifier}" if self.classifier else "")

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}" + (f"-{self.classifier}" if self.classifier else "") + ".jar"

    @property
    def relative(self) -> str:
        """Its path in a repository of Maven's layout."""
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"

    def path(self, repository: Path | None = None) -> Path:
        return (repository or local_repository()) / self.relative


def _parse_coordinates(text: str) -> tuple[str, str, str, str]:
    """GROUP:ARTIFACT:VERSION[:CLASSIFIER]"""
    parts = text.strip().split(":")
    if len(parts) not in (3, 4) or not all(parts):
        raise MissingJarError(f"{text!r} is not Maven coordinates GROUP:ARTIFACT:VERSION[:CLASSIFIER]")
    return parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else ""


def coordinates() -> list[Jar]:
    """Every jar of jars.tsv, in its order."""
    jars = []
    text = resources.files("lakehouse_assets.runtime").joinpath("jars.tsv").read_text()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3 or fields[0] not in USES or len(fields[2]) != 64:
            raise MissingJarError(f"jars.tsv line {number} is not 'use<TAB>group:artifact:version<TAB>sha256': "
                                  f"{line!r}")
        group, artifact, version, classifier = _parse_coordinates(fields[1])
        jars.append(Jar(fields[0], group, artifact, version, fields[2].lower(), classifier))
    return jars


def local_repository() -> Path:
    """Where the jars are resolved into: $LAKEHOUSE_JARS_DIR, else <venv>/share/lakehouse/m2 (also the Maven
    repository the project's Java is built with)."""
    override = os.environ.get(JARS_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser().resolve()
    return Path(sys.prefix) / "share" / "lakehouse" / "m2"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _copy_checked(jar: Jar, read, origin: str, target: Path) -> None:
    """Write the jar beside its place, check its sha256, rename it into place (an interrupted resolve leaves no
    file a later run would take)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as out:
            while block := read(1 << 20):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != jar.sha256:
            raise MissingJarError(f"{jar.coordinates} from {origin} has sha256 {digest.hexdigest()}, jars.tsv "
                                  f"names {jar.sha256}: refused (a changed or corrupt file)")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _from_folder(jar: Jar, folder: Path, target: Path) -> None:
    for candidate in (folder / jar.relative, folder / jar.file_name):
        if candidate.is_file():
            with open(candidate, "rb") as src:
                _copy_checked(jar, src.read, str(candidate), target)
            return
    raise MissingJarError(f"{jar.coordinates}: neither {folder / jar.relative} nor {folder / jar.file_name} exists")


def _from_url(jar: Jar, base: str, target: Path) -> None:
    url = f"{base.rstrip('/')}/{jar.relative}"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            _copy_checked(jar, response.read, url, target)
    except (urllib.error.URLError, OSError) as exc:
        raise MissingJarError(f"{jar.coordinates} could not be fetched from {url}: {exc}; set {REPOSITORY_ENV} "
                              "to a mirror or a folder of the jars") from exc


def resolve(source: str | None = None, repository: Path | None = None) -> list[Path]:
    """Every jar of jars.tsv in the local repository, fetched from `source` (a URL or a folder; default
    $LAKEHOUSE_MAVEN_REPOSITORY, else Maven Central) when missing or not the named file."""
    source = source or os.environ.get(REPOSITORY_ENV, "").strip() or MAVEN_CENTRAL
    repository = repository or local_repository()
    paths = []
    for jar in coordinates():
        target = jar.path(repository)
        if not (target.is_file() and _sha256(target) == jar.sha256):
            if "://" in source and not source.startswith("file://"):
                _from_url(jar, source, target)
            else:
                _from_folder(jar, Path(source.removeprefix("file://")).expanduser(), target)
        paths.append(target)
    return paths


def jars_for(uses: set[str]) -> list[Path]:
    """The local files of the jars these uses load, or an error naming what is missing and how to resolve it."""
    jars = [jar for jar in coordinates() if jar.use in uses]
    missing = [jar for jar in jars if not jar.path().is_file()]
    if missing:
        named = ", ".join(jar.coordinates for jar in missing[:5]) + (f" and {len(missing) - 5} more" * (len(missing) > 5))
        groups = ", ".join(sorted({jar.use for jar in missing}))
        raise MissingJarError(f"not resolved into {local_repository()}: {named} ({groups}); run {RESOLVE_HINT}")
    return [jar.path() for jar in jars]


def spark_jars(catalog_kinds: set[str], on_s3: bool, extra_jars: tuple[str, ...]) -> list[str]:
    """Local jar paths for `spark.jars`: Iceberg, Spark's Kafka source, the catalogs' JDBC drivers, S3A for a zone on
    S3, and any the settings add (LAKEHOUSE_SPARK_JARS)."""
    uses = {"iceberg", "kafka"} | {kind for kind in catalog_kinds if kind in SPARK_USES} | ({"s3"} if on_s3 else set())
    return [*map(str, jars_for(uses)), *extra_jars]


def iceberg_runtime_jar() -> Path:
    return jars_for({"iceberg"})[0]


def pin(text: str, source: str = MAVEN_CENTRAL) -> str:
    """The jars.tsv line of these coordinates (use left as '?'): the jar fetched, its sha1 checked against the
    repository's own, its sha256 computed."""
    group, artifact, version, classifier = _parse_coordinates(text)
    jar = Jar("?", group, artifact, version, "", classifier)
    url = f"{source.rstrip('/')}/{jar.relative}"
    sha1, sha256 = hashlib.sha1(usedforsecurity=False), hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            while block := response.read(1 << 20):
                sha1.update(block)
                sha256.update(block)
        with urllib.request.urlopen(url + ".sha1", timeout=60) as response:
            published = response.read().decode().split()[0].strip()
    except (urllib.error.URLError, OSError) as exc:
        raise MissingJarError(f"{text} could not be fetched from {url}: {exc}") from exc
    if published != sha1.hexdigest():
        raise MissingJarError(f"{url} has sha1 {sha1.hexdigest()}, the repository publishes {published}")
    return f"?\t{jar.coordinates}\t{sha256.hexdigest()}"


_LISTED = re.compile(r"^\s+([^:\s]+):([^:\s]+):jar:([^:\s]+)(?: -- .*)?$")


def _pom(roots: list[Jar]) -> str:
    dependencies = "".join(f"<dependency><groupId>{jar.group}</groupId><artifactId>{jar.artifact}</artifactId>"
                           f"<version>{jar.version}</version>"
                           + (f"<classifier>{jar.classifier}</classifier>" if jar.classifier else "")
                           + "</dependency>" for jar in roots)
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>lakehouse.pin</groupId><artifactId>pin</artifactId><version>1</version><packaging>pom</packaging>"
            f"<dependencies>{dependencies}</dependencies></project>")


def pin_with_dependencies(use: str, roots: list[str], repository: Path | None = None) -> list[str]:
    """The jars.tsv lines of `roots` and of every jar they need at run time, as Maven resolves them (each file's
    published checksum checked), into the local repository; each line's sha256 is that of the file Maven put there.

    Maven picks one version of each artifact the way it always does (the nearest declaration wins): a root may name
    one the others need too, or one none of them declares (a logging backend)."""
    if use not in (*USES, "?"):
        raise MissingJarError(f"{use!r} is not a use of jars.tsv: one of {', '.join(USES)} (or '?', to fill in)")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MissingJarError("pinning a group with its dependencies runs Maven: apt-get install maven")
    repository = repository or local_repository()
    with tempfile.TemporaryDirectory(prefix="lakehouse-pin-") as work:
        pom, listed = Path(work) / "pom.xml", Path(work) / "dependencies.txt"
        parsed = [_parse_coordinates(root) for root in roots]
        pom.write_text(_pom([Jar(use, group, artifact, version, "", classifier)
                             for group, artifact, version, classifier in parsed]))
        done = subprocess.run([mvn, "-B", "-q", "-C", "-Dstyle.color=never", "-f", str(pom),
                               f"-Dmaven.repo.local={repository}", f"{DEPENDENCY_PLUGIN}:list", "-DincludeScope=runtime",
                               "-Dmdep.outputScope=false", "-Dsort=true", f"-DoutputFile={listed}"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise MissingJarError(f"Maven could not resolve {', '.join(roots)} (exit code {done.returncode}):\n"
                                  f"{(done.stdout + done.stderr).strip()[-4000:]}")
        # Under a heading ("The following files have been resolved:"), one indented line per artifact.
        lines = [line for line in listed.read_text().splitlines() if line.startswith(" ") and line.strip()]
    jars = []
    for line in lines:
        found = _LISTED.match(line)
        if found is None:
            raise MissingJarError(f"Maven listed {line.strip()!r}: not a plain jar (a classifier or another type), "
                                  "which jars.tsv cannot name")
        group, artifact, version = found.groups()
        jar = Jar(use, group, artifact, version, "")
        jars.append(f"{use}\t{jar.coordinates}\t{_sha256(jar.path(repository))}")
    return jars


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lakehouse_assets.runtime.jars")
    commands = parser.add_subparsers(dest="command", required=True)
    resolving = commands.add_parser("resolve", help="put every jar of jars.tsv into the local repository")
    resolving.add_argument("--from", dest="source", default=None,
                           help=f"a Maven repository's address or a folder of jars (default ${REPOSITORY_ENV}, "
                                f"else {MAVEN_CENTRAL})")
    commands.add_parser("list", help="the local files of every jar of jars.tsv")
    pinning = commands.add_parser("pin", help="the jars.tsv line of a jar's coordinates (with --with-dependencies, "
                                              "the lines of the jars and of all they need at run time)")
    pinning.add_argument("coordinates", nargs="+")
    pinning.add_argument("--with-dependencies", action="store_true",
                         help="resolve with Maven into the local repository and print a line for every jar needed")
    pinning.add_argument("--use", default="?", help="the use the lines name (default '?', to fill in)")
    args = parser.parse_args(argv)
    try:
        if args.command == "pin" and args.with_dependencies:
            print("\n".join(pin_with_dependencies(args.use, args.coordinates)))
            return 0
        if args.command == "pin":
            print("\n".join(pin(text).replace("?", args.use, 1) for text in args.coordinates))
            return 0
        paths = resolve(args.source) if args.command == "resolve" else jars_for(set(USES))
    except MissingJarError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
