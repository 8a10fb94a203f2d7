"""Landing zones as sensors and tools see them: list and put files, no Spark.

A zone is a local folder (`file://` or a path) or an S3 prefix (`s3://bucket/prefix`),
chosen by `LAKEHOUSE_LANDING`; S3 goes through dagster-aws's `S3Resource`, so a
custom endpoint (SeaweedFS, MinIO) works the same as AWS.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from dagster_aws.s3 import S3Resource

from ..settings import Settings

_DAY = re.compile(r"/date=(\d{4}-\d{2}-\d{2})/[^/]+$")  # directly in its day folder, as bronze lists them
LANDING_SUFFIXES = (".jsonl", ".jsonl.gz")


@dataclass(frozen=True)
class LandedFile:
    uri: str
    size: int
    modified: float  # seconds since the epoch

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


def escapes(uri: str, root: str) -> str | None:
    """Why a landed file is not safely inside its source's folder `root` (None when it is).

    A local file is judged by where it really is: a symbolic link (of the file or of a day folder)
    that leads out of the folder is refused, whatever it points at. An object key is a name, not a
    path, but readers resolve `..` and `.` in it as a path: a key with such a segment, or an empty
    one, is refused, so no file is read from outside the folder it was listed in.
    """
    file, folder = urlsplit(uri), urlsplit(root)
    path, base = unquote(file.path), unquote(folder.path).rstrip("/")
    if file.scheme in ("", "file"):
        real, real_base = os.path.realpath(path), os.path.realpath(base)
        if os.path.commonpath([real, real_base]) != real_base or real == real_base:
            return f"refused: the path leads out of the landing zone (to {real})"
        return None
    if file.netloc != folder.netloc or not path.startswith(base + "/"):
        return f"refused: not under the source's folder {root}"
    if any(part in ("", ".", "..") for part in path[len(base) + 1:].split("/")):
        return "refused: the key has a '..', '.' or empty path segment, which readers resolve out of its folder"
    return None


def source_root(settings: Settings, source: str) -> str:
    """The folder (or prefix) of one source in the landing zone."""
    return f"{settings.landing.rstrip('/')}/{source}"


class LocalZone:
    def __init__(self, root: Path):
        self.root = root

    def list(self, source: str) -> list[LandedFile]:
        base = self.root / source
        if not base.exists():
            return []
        return sorted(
            (LandedFile(f"file:{p}", (st := p.stat()).st_size, st.st_mtime)
             for p in base.glob("*/*") if p.is_file() and p.name.endswith(LANDING_SUFFIXES)),
            key=lambda f: f.uri,
        )

    def read(self, uri: str) -> bytes:
        return Path(uri.removeprefix("file:")).read_bytes()

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

    def list(self, source: str) -> list[LandedFile]:
        client = self.s3.get_client()
        files = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(source) + "/"):
            for obj in page.get("Contents", []):
                if obj["Key"].endswith(LANDING_SUFFIXES):
                    files.append(LandedFile(f"{self.scheme}://{self.bucket}/{obj['Key']}", obj["Size"],
                                            obj["LastModified"].timestamp()))
        return sorted(files, key=lambda f: f.uri)

    def read(self, uri: str) -> bytes:
        key = uri.split(f"://{self.bucket}/", 1)[1]
        return self.s3.get_client().get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def put(self, local: Path, source: str, day: dt.date, name: str) -> str:
        key = self._key(source, f"date={day.isoformat()}", name)
        self.s3.get_client().upload_file(str(local), self.bucket, key)  # visible only once complete
        return f"{self.scheme}://{self.bucket}/{key}"


def s3_resource(settings: Settings) -> S3Resource:
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
