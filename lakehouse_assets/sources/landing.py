"""Landing zones: day folders of JSON-lines files, read line by line with their origin.

Files are read whole so that each line keeps its file and line number; a source's
parser then makes each line either a typed record or a reason to quarantine it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..runtime.files import file_statuses, glob_files
from ..runtime.spark import jvm_class
from .versions import Content, Stat
from .zones import escapes

MAX_RECORD_BYTES = 64 * 1024
LINEAGE_COLUMNS = ["source_file", "source_line", "landing_date", "payload"]


def day_folders(landing: str, source: str, start: dt.date, end: dt.date) -> list[str]:
    """Landing folders of days start..end (end exclusive): `<landing>/<source>/date=YYYY-MM-DD`."""
    days = (start + dt.timedelta(days=n) for n in range((end - start).days))
    return [f"{landing.rstrip('/')}/{source}/date={d.isoformat()}" for d in days]


def list_landing_files(spark: SparkSession, folders: list[str], root: str) -> tuple[list[str], dict[str, str]]:
    """The landing files of the day folders under the source folder `root`, and those refused with the
    reason: a path that leads out of `root` (a symbolic link, a `..` key) is never read."""
    files: list[str] = []
    for folder in folders:
        files += glob_files(spark, f"{folder}/*.jsonl") + glob_files(spark, f"{folder}/*.jsonl.gz")
    refused = {f: why for f in files if (why := escapes(f, root))}
    return [f for f in files if f not in refused], refused


def read_lines(spark: SparkSession, files: list[str]) -> DataFrame:
    """One row per line: source_file, source_line (1-based), landing_date, payload."""
    return _read_lines(spark, files)[0]


def _read_lines(spark: SparkSession, files: list[str]) -> tuple[DataFrame, dict[str, int]]:
    """`read_lines`, and how many lines each file has.

    Files are read line by line, in splits (a large plain file is read by several tasks, and
    no file is ever held whole in memory). A line's number is its index within its split plus
    the lines of the file's earlier splits. That takes two scans of the text: one counts each
    split's lines (a few rows to the driver), the other reads the lines; both assign the same
    ids, since the same files in one session are split and ordered the same way.
    """
    schema = "source_file string, source_line int, landing_date date, payload string"
    if not files:
        return spark.createDataFrame([], schema), {}
    raw = spark.read.option("lineSep", "\n").text(files).select(
        F.col("_metadata.file_path").alias("_path"),
        F.col("_metadata.file_block_start").alias("_split"),
        F.monotonically_increasing_id().alias("_id"),  # ascending through each split, as it is read
        F.col("value").alias("payload"),
    )
    # Spark names a file by its URI (`a%20b.jsonl`), a listing by its path (`a b.jsonl`): a line keeps the
    # name it was listed under, which is the name every look-up of taken files asks for.
    path_of = jvm_class(spark, "org.apache.hadoop.fs.Path")
    listed = {str(path_of(f).toUri().toString()): f for f in files}
    splits = raw.groupBy("_path", "_split").agg(F.min("_id").alias("_first"), F.count(F.lit(1)).alias("_n"))
    before = dict.fromkeys(files, 0)
    starts = []
    for split in sorted(splits.collect(), key=lambda r: (r._path, r._split)):
        name = listed.get(split._path, split._path)
        starts.append((split._path, split._split, split._first, before.get(name, 0), name,
                       landing_date_value(name)))  # per file, not a pattern match per line
        before[name] = before.get(name, 0) + split._n
    if not starts:  # only empty files
        return spark.createDataFrame([], schema), before
    offsets = spark.createDataFrame(
        starts, "_path string, _split long, _first long, _before long, source_file string, landing_date date")
    payload = F.col("payload")
    # (A UTF-8 byte order mark opening a file never reaches here: Hadoop's line reader skips it.)
    lines = raw.join(F.broadcast(offsets), ["_path", "_split"]).select(
        "source_file",
        (F.col("_id") - F.col("_first") + F.col("_before") + 1).cast("int").alias("source_line"),
        "landing_date",
        # A CRLF line's CR (one, as a line reader drops it); a suffix test, not a pattern, on every line.
        F.when(payload.endswith("\r"), F.expr("substring(payload, 1, length(payload) - 1)"))
        .otherwise(payload).alias("payload"),
    )
    return lines, before


def read_contents(spark: SparkSession, files: list[str], prefixes: dict[str, int],
                  statuses: dict[str, tuple[int, int, str | None]]) -> dict[str, Content]:
    """Each file's identity and content hash. `prefixes`: for a file taken before, the size it had then, whose
    bytes are hashed too (were they kept, and lines only appended after them?); `statuses`: the files as
    `file_statuses` listed them just before. A file that is gone is left out.

    Files on this machine's file system are hashed here, streamed through SHA-256 a few at a time, with the
    size and time listed; others (S3) by Spark where they are, a job over the files' bytes. Both are Hadoop's
    size and modification time, which later listings compare with: a file changed since it was listed is found
    changed after it is read, and left for the next run."""
    local = {f: path for f in files if (path := _local_path(f)) is not None}
    found, elsewhere = _hash_here(spark, local, prefixes, statuses)
    return {**found, **_hash_in_spark(spark, [f for f in files if f not in local] + elsewhere, prefixes)}


def _local_path(f: str) -> str | None:
    """The path of a landing file on this machine's file system (file:/..., file:///... or /...), or None."""
    path = f[len("file:"):] if f.startswith("file:") else f
    if path.startswith("///"):
        path = path[2:]
    return path if path.startswith("/") and not path.startswith("//") else None


def _hash_here(spark: SparkSession, files: dict[str, str], prefixes: dict[str, int],
               statuses: dict[str, tuple[int, int, str | None]]) -> tuple[dict[str, Content], list[str]]:
    """The contents of the files that are here; and those Hadoop's file system still finds that this process
    cannot open by their path (left to Spark, which reads them as Hadoop does). A file gone is left out."""
    listed = [f for f in files if f in statuses]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        hashed = dict(zip(listed, pool.map(lambda f: _hash_file(files[f], prefixes.get(f)), listed)))
    unopened = [f for f, found in hashed.items() if found is None]
    return ({f: Content(Stat(statuses[f][0], statuses[f][1]), *found) for f, found in hashed.items() if found},
            list(file_statuses(spark, unopened)) if unopened else [])


def _hash_file(path: str, prefix: int | None) -> tuple[str, str | None, bool, bool] | None:
    """(sha256 of the bytes, sha256 of the first `prefix` bytes, whether byte `prefix` is a newline, whether
    the file ends with one), as `_hash_in_spark` computes them; None when there is no file at the path."""
    whole, head, head_ends_line, last, done = hashlib.sha256(), None, True, b"", 0
    if prefix == 0:
        head = whole.hexdigest()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(8 << 20):
                if head is None and prefix is not None and done + len(chunk) >= prefix:
                    cut = prefix - done
                    whole.update(memoryview(chunk)[:cut])
                    head, head_ends_line = whole.hexdigest(), chunk[cut - 1:cut] == b"\n"
                    whole.update(memoryview(chunk)[cut:])
                else:
                    whole.update(chunk)
                done, last = done + len(chunk), chunk[-1:]
    except FileNotFoundError:
        return None
    if head is None and prefix is not None:  # shorter than the prefix: its bytes are all there is of it
        head, head_ends_line = whole.hexdigest(), False
    return whole.hexdigest(), head, head_ends_line, done == 0 or last == b"\n"


def _hash_in_spark(spark: SparkSession, files: list[str], prefixes: dict[str, int]) -> dict[str, Content]:
    if not files:
        return {}
    path_of = jvm_class(spark, "org.apache.hadoop.fs.Path")
    listed = {str(path_of(f).toUri().toString()): f for f in files}
    sizes = spark.createDataFrame([(uri, prefixes.get(f)) for uri, f in listed.items()],
                                  "_path string, _prefix long")
    rows = (spark.read.format("binaryFile").load(files)
            .select(F.col("_metadata.file_path").alias("_path"), "length", "modificationTime", "content")
            .join(F.broadcast(sizes), "_path", "left")
            .select("_path", "length", F.unix_millis("modificationTime").alias("modified_ms"),
                    F.sha2("content", 256).alias("sha256"),
                    F.expr("CASE WHEN _prefix IS NOT NULL THEN sha2(substring(content, 1, _prefix), 256) END")
                    .alias("prefix_sha256"),
                    F.expr("_prefix IS NULL OR _prefix = 0 OR substring(content, _prefix, 1) = X'0A'")
                    .alias("prefix_ends_line"),
                    F.expr("length = 0 OR substring(content, -1, 1) = X'0A'").alias("ends_line"))
            .collect())
    return {
        listed.get(r._path, r._path): Content(Stat(r.length, r.modified_ms), r.sha256, r.prefix_sha256,
                                              bool(r.prefix_ends_line), bool(r.ends_line))
        for r in rows
    }


def read_landing(spark: SparkSession, files: list[str]) -> tuple[DataFrame, dict[str, str], dict[str, int]]:
    """`read_lines` of the files that can be read, why each other file cannot be (a truncated gzip, say),
    and how many lines each file read has: one bad file must not stop the good files of its day, nor be lost
    without a word. Counting the lines reads every file whole, which is where a bad one fails.

    The lines are not cached: landed files do not change, each later scan reads them again (cheaper than
    holding every line in memory beside the judged rows, which ingest keeps as a local checkpoint).
    """
    try:
        lines, counts = _read_lines(spark, files)
        return lines, {}, counts
    except Exception:  # noqa: BLE001 - which file failed is found below, one by one
        pass
    unreadable = {}
    for f in files:
        try:
            spark.read.text(f).count()
        except Exception as exc:  # noqa: BLE001 - the reason is kept with the file
            unreadable[f] = _first_line(exc)
    lines, counts = _read_lines(spark, [f for f in files if f not in unreadable])
    return lines, unreadable, counts


def _first_line(exc: Exception) -> str:
    """The root cause of a failed read (Java's last `Caused by:`), not the job's wrapper messages."""
    text = str(exc)
    causes = [line.split("Caused by:", 1)[1] for line in text.splitlines() if "Caused by:" in line]
    cause = causes[-1] if causes else (text.splitlines() or [type(exc).__name__])[0]
    return f"unreadable file: {cause.strip()[:300]}"


_LANDING_DATE = r"date=(\d{4}-\d{2}-\d{2})"


def landing_date_of(source_file: Column) -> Column:
    return F.to_date(F.regexp_extract(source_file, _LANDING_DATE, 1))


def landing_date_value(source_file: str) -> dt.date | None:
    """`landing_date_of` in Python: the first `date=YYYY-MM-DD` of the path, None when absent or not a day."""
    m = re.search(_LANDING_DATE, source_file)
    try:
        return dt.date.fromisoformat(m.group(1)) if m else None
    except ValueError:
        return None


def of_files(files: list[str]) -> Column:
    """The rows of `files` in a table with lineage columns, found by file statistics, not by a scan.

    `source_file` alone prunes nothing (Iceberg truncates string bounds, and every path shares its
    prefix); `landing_date` is the same for every row of a file and its bounds are exact, so the
    data files of other landing days are skipped and the cost follows the files, not the table.
    """
    days = {landing_date_value(f) for f in files}
    by_file = F.col("source_file").isin(files)
    if None in days:  # a file outside any day folder: no bound to use
        return by_file
    return F.col("landing_date").isin(sorted(days)) & by_file


def json_reason(payload: Column, corrupt: Column) -> Column:
    """The first thing wrong with a line as JSON (None when it is a JSON object).

    `corrupt` is the `_corrupt_record` field of a `from_json` parse of `payload`.
    Further `.when(...)` clauses can be chained for source-specific rules.
    """
    reason = F.when(F.trim(payload) == "", F.lit("blank line"))
    reason = reason.when(F.octet_length(payload) > MAX_RECORD_BYTES, F.lit(f"record larger than {MAX_RECORD_BYTES} bytes"))
    reason = reason.when(corrupt.isNotNull() & ~F.ltrim(payload).startswith("{"), F.lit("not a JSON object"))
    return reason.when(corrupt.isNotNull(), F.lit("malformed JSON"))


def blank(column: Column) -> Column:
    return column.isNull() | (F.trim(column) == "")


_EPOCH = r"^-?[0-9]{1,19}([.][0-9]+)?$"
_UTC_ISO = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,9})?Z$"
_UTC_ZONES = {"UTC", "Etc/UTC", "GMT", "Z", "+00:00"}


def iso_timestamp(text: Column) -> Column:
    """`F.to_timestamp(text)`: ISO-8601 text with any offset or none (the session's zone).

    Spark reads the zone of each value by compiling two patterns (DateTimeUtils.getZoneId), which costs more
    than reading the rest of the value. With the session in UTC, the form most sources write, `...Z`, is the
    same instant as its text without the `Z`, which is read without a zone.
    """
    if SparkSession.active().conf.get("spark.sql.session.timeZone") not in _UTC_ZONES:
        return F.to_timestamp(text)
    return F.when(text.rlike(_UTC_ISO), F.to_timestamp(text.substr(F.lit(1), F.length(text) - 1))) \
        .otherwise(F.to_timestamp(text))


def to_timestamp(text: Column) -> Column:
    """ISO-8601 text (any offset, s/ms/us fractions) or a number since the epoch in s, ms or us."""
    number = text.cast("decimal(38,6)")
    magnitude = F.abs(number)
    micros = (F.when(magnitude < 1e11, number * 1_000_000).when(magnitude < 1e14, number * 1_000)
              .otherwise(number)).cast("long")
    return F.when(text.rlike(_EPOCH), F.timestamp_micros(micros)).otherwise(iso_timestamp(text))


def typed_value(text: Column, dtype: T.DataType) -> Column:
    """A JSON value's text as `dtype`; null where it does not parse (the caller names the reason)."""
    if isinstance(dtype, T.TimestampType):
        return to_timestamp(text)
    if isinstance(dtype, T.DateType):
        return F.to_date(text)
    if isinstance(dtype, T.MapType):
        # The schema as JSON, which is what from_json makes of any DataType (its annotation leaves MapType out).
        return F.from_json(text, dtype.json())
    if isinstance(dtype, T.BooleanType):
        lowered = F.lower(F.trim(text))
        return F.when(lowered == "true", True).when(lowered == "false", False)
    return text.cast(dtype)
