"""Listing landing files through Hadoop's FileSystem, so local folders and S3 read alike."""

from __future__ import annotations

from pyspark.sql import SparkSession

from ..runtime.spark import jvm_class


def glob_files(spark: SparkSession, pattern: str) -> list[str]:
    """Files (not folders) matching a glob such as `file:/landing/events/date=2025-01-0[1-3]/*.jsonl`."""
    path = jvm_class(spark, "org.apache.hadoop.fs.Path")(pattern)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    statuses = fs.globStatus(path)
    if statuses is None:
        return []
    return sorted(str(s.getPath().toString()) for s in statuses if s.isFile())


def file_statuses(spark: SparkSession, files: list[str]) -> dict[str, tuple[int, int, str | None]]:
    """Each file's (size in bytes, modification time in ms, ETag or None) as its file system reports it now;
    a file that is gone is left out."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path_of = jvm_class(spark, "org.apache.hadoop.fs.Path")
    out = {}
    for f in files:
        path = path_of(f)
        try:
            status = path.getFileSystem(conf).getFileStatus(path)
        except Exception:  # noqa: BLE001, S112 - removed since it was listed: nothing to take
            continue
        out[f] = (int(status.getLen()), int(status.getModificationTime()), _etag(status))
    return out


def _etag(status) -> str | None:
    """An object store's ETag (Hadoop's EtagSource), without quotes; None for a local file."""
    try:
        etag = status.getEtag()
    except Exception:  # noqa: BLE001 - not an EtagSource
        return None
    return str(etag).strip('"') if etag else None


def exists(spark: SparkSession, path: str) -> bool:
    hpath = jvm_class(spark, "org.apache.hadoop.fs.Path")(path)
    return bool(hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(hpath))
