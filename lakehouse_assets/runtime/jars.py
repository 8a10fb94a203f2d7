"""The jars Spark loads besides pyspark's own: named by Maven coordinates and sha256 in `jars.tsv`, resolved into
the installation's local repository (Maven's layout) once, by `make setup`, and loaded from there.

    python -m lakehouse_assets.runtime.jars resolve [--from URL|FOLDER]   # what make setup runs
    python -m lakehouse_assets.runtime.jars list                          # the local files, one per line
    python -m lakehouse_assets.runtime.jars pin GROUP:ARTIFACT:VERSION     # the line of a new version

They come from Maven Central unless `LAKEHOUSE_MAVEN_REPOSITORY` (or `--from`) names another: the address of a
mirror in Maven's layout, or a folder on this machine holding the jars (in Maven's layout or side by side). Each
file is checked against its sha256 before it is kept; a run only looks for the files and never resolves anything.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
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
USES = ("iceberg", "sqlite", "postgresql", "s3")


@dataclass(frozen=True)
class Jar:
    use: str
    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    @property
    def relative(self) -> str:
        """Its path in a repository of Maven's layout."""
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"

    def path(self, repository: Path | None = None) -> Path:
        return (repository or local_repository()) / self.relative


def _parse_coordinates(text: str) -> tuple[str, str, str]:
    parts = text.strip().split(":")
    if len(parts) != 3 or not all(parts):
        raise MissingJarError(f"{text!r} is not Maven coordinates GROUP:ARTIFACT:VERSION")
    return parts[0], parts[1], parts[2]


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
        jars.append(Jar(fields[0], *_parse_coordinates(fields[1]), fields[2].lower()))
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
    missing = [jar.coordinates for jar in jars if not jar.path().is_file()]
    if missing:
        raise MissingJarError(f"not resolved into {local_repository()}: {', '.join(missing)}; run {RESOLVE_HINT}")
    return [jar.path() for jar in jars]


def spark_jars(catalog_kinds: set[str], on_s3: bool, extra_jars: tuple[str, ...]) -> list[str]:
    """Local jar paths for `spark.jars`: Iceberg, the catalogs' JDBC drivers, S3A for a zone on S3, and any the
    settings add (LAKEHOUSE_SPARK_JARS)."""
    uses = {"iceberg"} | {kind for kind in catalog_kinds if kind in USES} | ({"s3"} if on_s3 else set())
    return [*map(str, jars_for(uses)), *extra_jars]


def iceberg_runtime_jar() -> Path:
    return jars_for({"iceberg"})[0]


def pin(text: str, source: str = MAVEN_CENTRAL) -> str:
    """The jars.tsv line of these coordinates (use left as '?'): the jar fetched, its sha1 checked against the
    repository's own, its sha256 computed."""
    group, artifact, version = _parse_coordinates(text)
    jar = Jar("?", group, artifact, version, "")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lakehouse_assets.runtime.jars")
    commands = parser.add_subparsers(dest="command", required=True)
    resolving = commands.add_parser("resolve", help="put every jar of jars.tsv into the local repository")
    resolving.add_argument("--from", dest="source", default=None,
                           help=f"a Maven repository's address or a folder of jars (default ${REPOSITORY_ENV}, "
                                f"else {MAVEN_CENTRAL})")
    commands.add_parser("list", help="the local files of every jar of jars.tsv")
    pinning = commands.add_parser("pin", help="the jars.tsv line of a jar's coordinates")
    pinning.add_argument("coordinates")
    args = parser.parse_args(argv)
    try:
        if args.command == "pin":
            print(pin(args.coordinates))
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
