"""Landing zones as sensors and tools see them: list and put files, no Spark.

A zone is a local folder (`file://` or a path) or an S3 prefix (`s3://bucket/prefix`),
chosen by `LAKEHOUSE_LANDING`; S3 goes through dagster-aws's `S3Resource`, so a
custom endpoint (SeaweedFS, MinIO) works the same as AWS.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from dagster import DailyPartitionsDefinition

from ..settings import Settings
from .versions import Stat

if TYPE_CHECKING:  # dagster-aws is imported by the processes that read S3 only (about a second)
    from dagster_aws.s3 import S3Resource

_DAY = re.compile(r"/date=(\d{4}-\d{2}-\d{2})/[^/]+$")  # directly in its day folder, as bronze lists them
LANDING_SUFFIXES = (".jsonl", ".jsonl.gz")


@dataclass(frozen=True)
class LandedFile:
    uri: str
    size: int
    modified: float  # seconds since the epoch, as the file system (or the object store) gives it
    # When the file last changed here, whatever modification time a copy gave it: a local file's inode change
    # time (which every write, rename and time change sets, and no tool can set back), an object's upload time.
    changed: float = 0.0
    etag: str | None = None

    @property
    def stat(self) -> Stat:
        """The file's identity as the ingest log records it (milliseconds, as Hadoop's file systems give them)."""
        return Stat(self.size, round(self.modified * 1000), self.etag)

    @property
    def day(self) -> dt.date | None:
        return landing_day(self.uri)


def landing_day(uri: str) -> dt.date | None:
    """The landing day of a file in a `date=YYYY-MM-DD` folder; None for any other place."""
    m = _DAY.search(uri)
    try:
        return dt.date.fromisoformat(m.group(1)) if m else None
    except ValueError:  # date=2025-13-45: not a day
        return None


def escapes(uri: str, root: str, resolved: dict[str, str] | None = None) -> str | None:
    """Why a landed file is not safely inside its source's folder `root` (None when it is).

    A local file is judged by where it really is: a symbolic link (of the file or of a day folder)
    that leads out of the folder is refused, whatever it points at. An object key is a name, not a
    path, but readers resolve `..` and `.` in it as a path: a key with such a segment, or an empty
    one, is refused, so no file is read from outside the folder it was listed in.

    `resolved`: a cache of folders' real paths for judging many files of the same folders (a folder's
    real path is resolved once; a file that is itself a link is resolved whole).
    """
    file, folder = urlsplit(uri), urlsplit(root)
    path, base = unquote(file.path), unquote(folder.path).rstrip("/")
    if file.scheme in ("", "file"):
        cache: dict[str, str] = {} if resolved is None else resolved
        real_base = cache.get(base) or cache.setdefault(base, os.path.realpath(base))
        parent, name = os.path.split(path)
        if name in ("", ".", "..") or os.path.islink(path):
            real = os.path.realpath(path)
        else:
            real = os.path.join(cache.get(parent) or cache.setdefault(parent, os.path.realpath(parent)), name)
        if os.path.commonpath([real, real_base]) != real_base or real == real_base:
            return f"refused: the path leads out of the landing zone (to {real})"
        return None
    if file.netloc != folder.netloc or not path.startswith(base + "/"):
        return f"refused: not under the source's folder {root}"
    if any(part in ("", ".", "..") for part in path[len(base) + 1:].split("/")):
        return "refused: the key has a '..', '.' or empty path segment, which readers resolve out of its folder"
    return None


def refused_files(uris: Iterable[str], root: str, first: dt.date, last: dt.date) -> dict[str, str]:
    """{uri: why} for the files of the source folder `root` that are not taken: a path leading out of the
    folder, or no landing day in [first, last] (the daily partitions' range)."""
    resolved: dict[str, str] = {}
    refused = {}
    for uri in uris:
        why = escapes(uri, root, resolved)
        if why is None:
            day = landing_day(uri)
            if day is None:
                why = "not in a date=YYYY-MM-DD folder"
            elif day < first:
                why = f"landing day {day} is before the first partition ({first})"
            elif day > last:
                why = f"landing day {day} is in the future"
        if why is not None:
            refused[uri] = why
    return refused


def source_root(settings: Settings, source: str) -> str:
    """The folder (or prefix) of one source in the landing zone."""
    return f"{settings.landing.rstrip('/')}/{source}"


class LocalZone:
    def __init__(self, root: Path):
        self.root = root

    def list(self, source: str, since: dt.date | None = None, changed_after: float | None = None) -> list[LandedFile]:
        """The source's files, one folder deep; with `since` or `changed_after` (epoch seconds), only those of day
        folders from day `since` on (where files are still being written and appended to) and of folders that
        changed after `changed_after`, whatever their day: a file landing in a folder (created, renamed, copied
        with its old times kept) changes the folder's inode change time, which no copying tool can set back."""
        base = self.root / source
        if not base.exists():
            return []
        if since is None and changed_after is None:
            paths = base.glob("*/*")
        else:
            first = f"date={since.isoformat()}" if since is not None else None
            # Only folders older than `since` cost a stat (their change time); scandir knows folders without one.
            folders = [folder.path for folder in os.scandir(base) if folder.is_dir() and (
                (first is not None and folder.name.startswith("date=") and folder.name >= first)
                or (changed_after is not None and folder.stat().st_ctime > changed_after))]
            paths = (Path(folder) / name for folder in folders for name in os.listdir(folder))
        return sorted(
            (LandedFile(f"file:{p}", (st := p.stat()).st_size, st.st_mtime_ns // 1_000_000 / 1000, st.st_ctime)
             for p in paths if p.is_file() and p.name.endswith(LANDING_SUFFIXES)),
            key=lambda f: f.uri,
        )

    def has(self, uri: str) -> bool:
        return Path(uri.removeprefix("file:")).is_file()

    def read(self, uri: str) -> bytes:
        return Path(uri.removeprefix("file:")).read_bytes()

    def remove(self, uri: str) -> None:
        Path(uri.removeprefix("file:")).unlink(missing_ok=True)

    def put(self, local: Path, source: str, day: dt.date, name: str) -> str:
        target = self.root / source / f"date={day.isoformat()}" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{name}.part")  # readers never see half a file
        tmp.write_bytes(local.read_bytes())
        tmp.rename(target)
        return f"file:{target}"


class S3Zone:
    def __init__(self, bucket: str, prefix: str, s3: S3Resource, scheme: str = "s3"):
        self.bucket, self.prefix, self.s3, self.scheme = bucket, prefix.strip("/"), s3, scheme

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def list(self, source: str, since: dt.date | None = None, changed_after: float | None = None) -> list[LandedFile]:
        """The source's objects. `since`: only those from that day's folder on (keys are listed in order, so
        the listing starts at that day's folder and never reads the keys of older days). `changed_after` is not
        used: an object store has no folder times to tell which old folders changed."""
        client = self.s3.get_client()
        files = []
        start = {"StartAfter": self._key(source, f"date={since.isoformat()}")} if since is not None else {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(source) + "/",
                                                                     **start):
            for obj in page.get("Contents", []):
                if since is not None and not obj["Key"][len(self._key(source)) + 1:].startswith("date="):
                    continue  # past the day folders: files elsewhere are found by a full listing (no `since`)
                if obj["Key"].endswith(LANDING_SUFFIXES):
                    modified = obj["LastModified"].timestamp()
                    files.append(LandedFile(f"{self.scheme}://{self.bucket}/{obj['Key']}", obj["Size"], modified,
                                            modified, str(obj.get("ETag", "")).strip('"') or None))
        return sorted(files, key=lambda f: f.uri)

    def has(self, uri: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.s3.get_client().head_object(Bucket=self.bucket, Key=uri.split(f"://{self.bucket}/", 1)[1])
        except ClientError:
            return False
        return True

    def read(self, uri: str) -> bytes:
        key = uri.split(f"://{self.bucket}/", 1)[1]
        return self.s3.get_client().get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def remove(self, uri: str) -> None:
        self.s3.get_client().delete_object(Bucket=self.bucket, Key=uri.split(f"://{self.bucket}/", 1)[1])

    def put(self, local: Path, source: str, day: dt.date, name: str) -> str:
        key = self._key(source, f"date={day.isoformat()}", name)
        self.s3.get_client().upload_file(str(local), self.bucket, key)  # visible only once complete
        return f"{self.scheme}://{self.bucket}/{key}"


def s3_resource(settings: Settings) -> S3Resource:
    from dagster_aws.s3 import S3Resource

    return S3Resource(
        endpoint_url=settings.s3_endpoint or None,
        aws_access_key_id=settings.s3_access_key or None,
        aws_secret_access_key=settings.s3_secret_key or None,
        region_name=settings.s3_region,
        use_ssl=not settings.s3_endpoint.startswith("http://"),
    )


def landing_zone(settings: Settings) -> LocalZone | S3Zone:
    parts = urlsplit(settings.landing)
    if parts.scheme == "file":
        return LocalZone(settings.local_path(settings.landing))
    if parts.scheme in ("s3", "s3a"):
        return S3Zone(parts.netloc, parts.path, s3_resource(settings), parts.scheme)
    raise ValueError(f"landing zone {settings.landing!r}: use a local path, file://, s3:// or s3a://")


def refusals(uris: Iterable[str], root: str, partitions: DailyPartitionsDefinition) -> dict[str, str]:
    """{uri: why} for the landed files of the source folder `root` that are not taken: their path leads out
    of the folder, or they cannot be placed in a bronze partition (the partitions' bounds are read once)."""
    first = partitions.start.date()
    last_key = partitions.get_last_partition_key()
    return refused_files(uris, root, first, dt.date.fromisoformat(last_key) if last_key else first - dt.timedelta(days=1))
