"""Reading behavioural event logs: every line accounted for, as a record or with a reason.

Lines are read whole per file so that each keeps its file and line number; each
line is then either a typed event or a quarantine row naming what is wrong with it.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..runtime.files import glob_files

EVENT_TYPES = ("page_view", "add_to_cart", "purchase")
MAX_RECORD_BYTES = 64 * 1024
REQUIRED_FIELDS = ("event_id", "user_id", "event_type", "event_ts")

# Every field is read as text first, so a wrong type becomes a precise reason
# below instead of Spark nulling the whole record.
_RAW_SCHEMA = T.StructType(
    [T.StructField(name, T.StringType()) for name in
     ("event_id", "user_id", "session_id", "event_type", "event_ts", "ip", "properties", "price")]
    + [T.StructField("_corrupt_record", T.StringType())]
)
_PROPERTIES = T.MapType(T.StringType(), T.StringType())


def day_folders(landing: str, source: str, start: dt.date, end: dt.date) -> list[str]:
    """Landing folders of days start..end (end exclusive): `<landing>/<source>/date=YYYY-MM-DD`."""
    days = (start + dt.timedelta(days=n) for n in range((end - start).days))
    return [f"{landing.rstrip('/')}/{source}/date={d.isoformat()}" for d in days]


def list_landing_files(spark: SparkSession, folders: list[str]) -> list[str]:
    files: list[str] = []
    for folder in folders:
        files += glob_files(spark, f"{folder}/*.jsonl") + glob_files(spark, f"{folder}/*.jsonl.gz")
    return files


def read_lines(spark: SparkSession, files: list[str]) -> DataFrame:
    """One row per line: source_file, source_line (1-based), landing_date, payload."""
    if not files:
        schema = "source_file string, source_line int, landing_date date, payload string"
        return spark.createDataFrame([], schema)
    whole = spark.read.text(files, wholetext=True).select(
        F.col("_metadata.file_path").alias("source_file"), F.col("value")
    )
    lines = whole.select(
        "source_file",
        F.posexplode(F.split(F.col("value"), "\n")).alias("pos", "payload"),
        F.size(F.split(F.col("value"), "\n")).alias("n_parts"),
    )
    return (
        lines
        # A final newline leaves one empty piece: it is not a record.
        .where(~((F.col("pos") == F.col("n_parts") - 1) & (F.col("payload") == "")))
        .select(
            "source_file",
            (F.col("pos") + 1).cast("int").alias("source_line"),
            F.to_date(F.regexp_extract("source_file", r"date=(\d{4}-\d{2}-\d{2})", 1)).alias("landing_date"),
            F.regexp_replace("payload", "\r$", "").alias("payload"),
        )
    )


def _missing(name: str) -> Column:
    return F.col(f"raw.{name}").isNull() | (F.trim(F.col(f"raw.{name}")) == "")


def parse_events(lines: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Split lines into (events, rejects). Each line lands in exactly one of them.

    events: typed columns plus source_file, source_line, landing_date, payload.
    rejects: source_file, source_line, landing_date, payload, reason.
    """
    parsed = lines.withColumn(
        "raw", F.from_json("payload", _RAW_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt_record"})
    ).select(
        "*",
        F.to_timestamp("raw.event_ts").alias("event_ts"),
        F.col("raw.price").cast(T.DecimalType(12, 2)).alias("price"),
        F.from_json("raw.properties", _PROPERTIES).alias("properties"),
    )
    reason = F.when(F.trim("payload") == "", F.lit("blank line"))
    reason = reason.when(
        F.length("payload") > MAX_RECORD_BYTES, F.lit(f"record larger than {MAX_RECORD_BYTES} bytes")
    )
    reason = reason.when(
        F.col("raw._corrupt_record").isNotNull() & ~F.ltrim("payload").startswith("{"),
        F.lit("not a JSON object"),
    )
    reason = reason.when(F.col("raw._corrupt_record").isNotNull(), F.lit("malformed JSON"))
    for name in REQUIRED_FIELDS:
        reason = reason.when(_missing(name), F.lit(f"missing required field {name}"))
    reason = reason.when(
        F.col("event_ts").isNull(), F.concat(F.lit("event_ts is not a timestamp: "), F.col("raw.event_ts"))
    )
    reason = reason.when(
        F.col("raw.price").isNotNull() & F.col("price").isNull(),
        F.concat(F.lit("price is not a number: "), F.col("raw.price")),
    )
    reason = reason.when(
        F.col("raw.properties").isNotNull() & F.col("properties").isNull(),
        F.lit("properties is not a JSON object"),
    )
    checked = parsed.withColumn("reason", reason)

    source = ["source_file", "source_line", "landing_date", "payload"]
    events = checked.where(F.col("reason").isNull()).select(
        F.col("raw.event_id").alias("event_id"),
        F.col("raw.user_id").alias("user_id"),
        F.col("raw.session_id").alias("session_id"),
        F.col("raw.event_type").alias("event_type"),
        "event_ts",
        F.col("raw.ip").alias("ip"),
        "properties",
        "price",
        *source,
    )
    rejects = checked.where(F.col("reason").isNotNull()).select(*source, "reason")
    return events, rejects
