"""Listing landing files through Hadoop's FileSystem, so local folders and S3 read alike."""

from __future__ import annotations

from pyspark.sql import SparkSession


def glob_files(spark: SparkSession, pattern: str) -> list[str]:
    """Files (not folders) matching a glob such as `file:/landing/events/date=2025-01-0[1-3]/*.jsonl`."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # set while the SparkContext is running
    path = jvm.org.apache.hadoop.fs.Path(pattern)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    statuses = fs.globStatus(path)
    if statuses is None:
        return []
    return sorted(str(s.getPath().toString()) for s in statuses if s.isFile())


def modification_times(spark: SparkSession, files: list[str]) -> dict[str, float]:
    """Each file's modification time (seconds since the epoch), as its file system reports it."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    out = {}
    for f in files:
        path = jvm.org.apache.hadoop.fs.Path(f)
        out[f] = path.getFileSystem(conf).getFileStatus(path).getModificationTime() / 1000
    return out
