"""Landing zones: day folders of JSON-lines files, read line by line with their origin.

Files are read line by line from their bytes (the project's line reader), each line
with its file and line number; a source's parser then makes each line either a typed
record or a reason to quarantine it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json as _json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..runtime.java_jar import LINES_FORMAT
from ..runtime.spark import jvm_class, local_frame
from .files import file_statuses, glob_files
from .versions import Content, Stat
from .zones import escapes

MAX_RECORD_BYTES = 64 * 1024
MAX_HEADS = 32  # distinct record heads a read reports (`_read_lines`); the line reader lists up to 64 per split
LINEAGE_COLUMNS = ["source_file", "source_line", "landing_date", "payload"]
# A record read from a Kafka topic also carries its key and its timestamp (landing/kafka.py).
RECORD_COLUMNS = ["source_key", "source_time"]


def lineage_of(lines: DataFrame) -> list[str]:
    """The lineage columns `lines` carry: a file's, and a Kafka record's key and time where it has them."""
    return LINEAGE_COLUMNS + [c for c in RECORD_COLUMNS if c in lines.columns]


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


def read_lines(spark: SparkSession, files: list[str], json: T.StructType | None = None,
               head: str | None = None) -> DataFrame:
    """One row per line: source_file, source_line (1-based), landing_date, payload; with `json` and `head`, see
    `_read_lines`."""
    return _read_lines(spark, files, json=json, head=head).lines


class Landed(NamedTuple):
    """Lines read (`_read_lines`): the lines, how many each file has, and with a head, the wrapped records' heads,
    those of the most lines first."""

    lines: DataFrame
    line_counts: dict[str, int]
    heads: list[str]


_COMPRESSED = (".gz", ".bz2", ".deflate", ".zst", ".lz4", ".snappy")


def _read_lines(spark: SparkSession, files: list[str], sizes: dict[str, int] | None = None,
                json: T.StructType | None = None, head: str | None = None) -> Landed:
    """`read_lines`, how many lines each file has and the heads found (with `head`). `sizes`: the files' sizes as
    listed (else listed now).

    Files are read from their bytes, line by line, by the project's line reader (java/src/main/java/lakehouse/JsonLines.java),
    in splits: a large plain file is read by several tasks, and no file is ever held whole in memory. A line's
    number is its index within its split plus the lines of the file's earlier splits, so the text is scanned twice:
    once to count each split's lines (a newline scan, a few rows to the driver), once to read the lines.

    With `json` (a struct of string, map<string,string> and struct fields of those), each line is also parsed once,
    from its bytes, into `_json` (as `from_json` with that schema would), with `_json_keys`, its other top-level
    keys; `_json_ok` is false where the reader leaves the line to `from_json` (not a strict JSON object, a key given
    twice...), and `_json` and `_json_keys` are then null. With `head` (`"<head>,<body>"`), a wrapped record
    `{"<head>": <object>, "<body>": <object>}` has its body parsed alone (`_json` holds the body only), its head
    passed over (not even read while the split's records begin with the same bytes as one of the last few), and
    `_json_head` is the body's byte offset (null for a line parsed whole); the count pass finds each distinct head
    (how such a record begins, as bytes, through its body's key), up to `MAX_HEADS` of them, those of the most
    lines first.
    """
    schema = "source_file string, source_line int, landing_date date, payload string"
    if not files:  # no `_json` columns: a parser also takes lines the reader did not parse
        return Landed(local_frame(spark, [], schema), {}, [])
    if sizes is None or any(f not in sizes for f in files):
        sizes = {f: size for f, (size, _, _) in file_statuses(spark, files).items()}
    gone = [f for f in files if f not in sizes]
    if gone:
        raise FileNotFoundError(f"landing file gone since it was listed: {gone[0]}")
    parts = _partitions(spark, files, sizes)
    rows = _reader(spark, parts, mode="count", json=json, head=head).collect()
    counted = {r.split: r.lines for r in rows}  # split index -> lines
    heads: dict[str, int] = {}
    for r in rows if head is not None and json is not None else ():
        for text, n in r.heads.items():
            heads[text] = heads.get(text, 0) + n
    by_index = [split for part in parts for split in part]
    before = dict.fromkeys(files, 0)
    for index in sorted(counted, key=lambda i: (by_index[i][0], by_index[i][1])):  # each file's splits in order
        split = by_index[index]
        split[3] = before[split[0]]
        before[split[0]] += counted[index]
    return Landed(_reader(spark, parts, mode="lines", json=json, head=head), before,
                  sorted(heads, key=lambda h: -heads[h])[:MAX_HEADS])


def _partitions(spark: SparkSession, files: list[str], sizes: dict[str, int]) -> list[list[list[Any]]]:
    """The reader's partitions: each a list of splits `[file, start, end, lines before (0 until counted), day]`,
    sized as Spark's file sources size theirs (`spark.sql.files.maxPartitionBytes`, `openCostInBytes`, spread
    over the cores); a compressed file is one split, read to its end."""
    conf = spark._jsparkSession.sessionState().conf()
    open_cost, most = int(conf.filesOpenCostInBytes()), int(conf.filesMaxPartitionBytes())
    total = sum(sizes[f] + open_cost for f in files)
    split_bytes = max(1, min(most, max(open_cost, total // max(1, spark.sparkContext.defaultParallelism))))
    splits: list[list[Any]] = []
    for f in files:
        day = landing_date_value(f)
        days = None if day is None else (day - dt.date(1970, 1, 1)).days
        if f.endswith(_COMPRESSED):
            splits.append([f, 0, -1, 0, days, sizes[f]])
            continue
        splits += [[f, start, min(start + split_bytes, sizes[f]), 0, days, min(split_bytes, sizes[f] - start)]
                   for start in range(0, max(sizes[f], 1), split_bytes)]
    parts: list[list[list[Any]]] = [[]]
    filled = 0
    for split in sorted(splits, key=lambda s: -s[5]):  # as Spark packs files: largest first, next fit
        if parts[-1] and filled + split[5] > split_bytes:
            parts.append([])
            filled = 0
        parts[-1].append(split[:5])
        filled += split[5] + open_cost
    return parts


def _reader(spark: SparkSession, parts: list[list[list[Any]]], mode: str, json: T.StructType | None = None,
            head: str | None = None) -> DataFrame:
    reader = spark.read.format(LINES_FORMAT).option("splits", _json.dumps(parts)).option("mode", mode)
    if json is not None:
        reader = reader.option("json", json.json())
        if head is not None:
            reader = reader.option("head", head)
    return reader.load()


def read_contents(spark: SparkSession, files: list[str], prefixes: dict[str, int],
                  statuses: dict[str, tuple[int, int, str | None]]) -> dict[str, Content]:
    """Each file's identity and content hash. `prefixes`: for a file taken before, the size it had then; the
    hash of those first bytes tells whether they were kept and lines only appended after them. `statuses`:
    the files as `file_statuses` listed them just before. A file that is gone is left out.

    Files on this machine's file system are hashed here, streamed through SHA-256 a few at a time, with the
    size and time listed; others (S3) are hashed by a Spark job over the files' bytes. Either way the size and
    modification time are Hadoop's, which later listings compare with: a file that changes after it was listed
    differs from what was recorded, so the next run looks at it again."""
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
    """The contents of the files on this machine's file system; and the files this process cannot open by
    their path but Hadoop's file system still finds (left to Spark, which reads them as Hadoop does). A file
    that is gone is left out."""
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
    if head is None and prefix is not None:  # the file is shorter than the prefix: all its bytes are the prefix
        head, head_ends_line = whole.hexdigest(), False
    return whole.hexdigest(), head, head_ends_line, done == 0 or last == b"\n"


def _hash_in_spark(spark: SparkSession, files: list[str], prefixes: dict[str, int]) -> dict[str, Content]:
    if not files:
        return {}
    path_of = jvm_class(spark, "org.apache.hadoop.fs.Path")
    listed = {str(path_of(f).toUri().toString()): f for f in files}
    sizes = local_frame(spark, [(uri, prefixes.get(f)) for uri, f in listed.items()], "_path string, _prefix long")
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


def read_landing(spark: SparkSession, files: list[str], sizes: dict[str, int] | None = None,
                 json: T.StructType | None = None, head: str | None = None,
                 ) -> tuple[Landed, dict[str, str]]:
    """`_read_lines` of the files that can be read and why each other file cannot be (a truncated gzip, say)
    (`sizes`, `json` and `head` as `_read_lines` takes them): one bad file must
    not stop the good files of its day, nor be lost without a word. Counting the lines reads every file whole,
    which is where a bad one fails.

    The lines are not cached: landed files do not change, each later scan reads them again (cheaper than
    holding every line in memory beside the judged rows, which ingest keeps as a local checkpoint).
    """
    try:
        return _read_lines(spark, files, sizes, json, head), {}
    except Exception:  # noqa: BLE001 - which file failed is found below, one by one
        pass
    unreadable = {}
    for f in files:
        try:
            _read_lines(spark, [f], sizes)
        except Exception as exc:  # noqa: BLE001 - the reason is kept with the file
            unreadable[f] = _first_line(exc)
    return _read_lines(spark, [f for f in files if f not in unreadable], sizes, json, head), unreadable


def _first_line(exc: Exception) -> str:
    """The root cause of a failed read (Java's last `Caused by:`), not the job's wrapper messages."""
    text = str(exc)
    causes = [line.split("Caused by:", 1)[1] for line in text.splitlines() if "Caused by:" in line]
    cause = causes[-1] if causes else (text.splitlines() or [type(exc).__name__])[0]
    return f"unreadable file: {cause.strip()[:300]}"


_LANDING_DATE = r"date=(\d{4}-\d{2}-\d{2})"


def landing_date_of(source_file: Column) -> Column:
    return F.regexp_extract(source_file, _LANDING_DATE, 1).try_cast("date")


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
    quick = _quick_iso(text)
    return F.try_to_timestamp(text) if quick is None else quick.otherwise(F.try_to_timestamp(text))


def _quick_iso(text: Column) -> Column | None:
    """CASE WHEN the text is `...Z` THEN its instant, read without a zone; None when the session is not in UTC."""
    if SparkSession.active().conf.get("spark.sql.session.timeZone") not in _UTC_ZONES:
        return None
    return F.when(text.rlike(_UTC_ISO), F.try_to_timestamp(text.substr(F.lit(1), F.length(text) - 1)))


def to_timestamp(text: Column) -> Column:
    """ISO-8601 text (any offset, s/ms/us fractions) or a number since the epoch in s, ms or us. The quick ISO
    form is tried first, the most common: no text is both it and a number."""
    number = text.try_cast("decimal(38,6)")
    magnitude = F.abs(number)
    micros = (F.when(magnitude < 1e11, number * 1_000_000).when(magnitude < 1e14, number * 1_000)
              .otherwise(number)).try_cast("long")
    epoch, quick = F.timestamp_micros(micros), _quick_iso(text)
    cases = F.when(text.rlike(_EPOCH), epoch) if quick is None else quick.when(text.rlike(_EPOCH), epoch)
    return cases.otherwise(F.try_to_timestamp(text))


def typed_value(text: Column, dtype: T.DataType) -> Column:
    """A JSON value's text as `dtype`; null where it does not parse (the caller names the reason)."""
    if isinstance(dtype, T.TimestampType):
        return to_timestamp(text)
    if isinstance(dtype, T.DateType):
        return text.try_cast("date")
    if isinstance(dtype, T.MapType):
        # The schema as JSON, which is what from_json makes of any DataType (its annotation leaves MapType out).
        return F.from_json(text, dtype.json())
    if isinstance(dtype, T.BooleanType):
        lowered = F.lower(F.trim(text))
        return F.when(lowered == "true", True).when(lowered == "false", False)
    return text.try_cast(dtype)
