"""Debezium change events, one Kafka record value per line, into typed bronze rows.

A line is an envelope `{"before", "after", "source", "op", "ts_ms"}`, bare or
wrapped as `{"schema": ..., "payload": <envelope>}`; the literal `null` (or a
null payload) is a tombstone, kept as op `t`. Images are typed from the declared
source table, decoding Debezium's encodings (sources/debezium.py: from a wrapped
record's schema, or from the declared types and connector modes for a bare one);
a field the declaration does not know becomes a new nested column, typed from
the record's schema when it has one.

`change_position` makes the source's commit order one sortable number, the way
the connector defines it. PostgreSQL: the rows of a snapshot all carry the
snapshot's LSN and sort before every change streamed after it; a streamed change
sorts by `source.sequence` ([LSN of the last commit before its transaction, its
own LSN]), so transactions are in commit order even when their WAL records
interleave: position = a * 10^19 + b with (a, b) = (lsn, 0) for a snapshot row and
(last commit LSN or, first after a connector start, its own LSN; lsn) otherwise.
MySQL: binlog index * 10^16 + pos * 10^5 + row. A change is identified by
(key, position, op): a primary-key update's delete and create share an LSN.
Order changes by position, never by `ts_ms` (when the connector saw the change).
"""

from __future__ import annotations

import json
import re

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..project import CdcTable
from ..tables.registry import col
from ..tables.types import spark_type, type_name
from .debezium import SCHEMA, Modes, column_encodings, declared_type_of, decode
from .landing import LINEAGE_COLUMNS, blank, json_reason

OPS = ("c", "u", "d", "r")
TOMBSTONE = "t"
POSITION = T.DecimalType(38, 0)

_DRIFT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

_LINE = T.StructType([T.StructField(n, T.StringType()) for n in ("schema", "payload", "_corrupt_record")])
_ENVELOPE = T.StructType(
    [T.StructField(n, T.StringType()) for n in ("before", "after", "op", "ts_ms")]
    + [T.StructField("source", T.StructType([
        T.StructField(n, T.StringType())
        for n in ("connector", "db", "table", "ts_ms", "snapshot", "lsn", "txId", "sequence", "file", "pos", "row")
    ])), T.StructField("_corrupt_record", T.StringType())]
)

_SHAPES = T.StructType([T.StructField(n, T.MapType(T.StringType(), T.StringType())) for n in ("before", "after")])


def image_type(info: CdcTable) -> T.StructType:
    return T.StructType([T.StructField(c, spark_type(t)) for c, t in info.columns.items()])


def bronze_cdc_schema(info: CdcTable) -> T.StructType:
    return T.StructType([
        col("op", T.StringType(), False, "c create, u update, d delete, r snapshot read, t tombstone"),
        col("key", T.StringType(), comment="primary key as canonical JSON"),
        col("before", image_type(info)),
        col("after", image_type(info)),
        col("change_position", POSITION, comment="commit order in the source: sort by this"),
        col("source_lsn", T.LongType()),
        col("source_tx_id", T.LongType()),
        col("binlog_file", T.StringType()),
        col("binlog_pos", T.LongType()),
        col("binlog_row", T.IntegerType()),
        col("source_ts", T.TimestampType(), comment="commit time in the source"),
        col("connector_ts", T.TimestampType(), comment="when the connector processed the change"),
        col("snapshot", T.BooleanType()),
    ])


def _millis(c: Column) -> Column:
    return F.timestamp_millis(c.cast("long"))


def _image(info: CdcTable, text: Column, image: T.StructType, encodings: Column) -> tuple[Column, Column]:
    """(typed struct, reason for a bad value or None) of an image's JSON text."""
    as_text = F.from_json(text, T.StructType([T.StructField(f.name, T.StringType()) for f in image.fields]))
    modes = Modes(info.decimal_handling_mode, info.time_precision_mode)
    values = {
        f.name: decode(as_text[f.name], info.columns.get(f.name) or type_name(f.dataType), encodings[f.name], modes)
        for f in image.fields
    }
    typed = F.struct(*(values[f.name].alias(f.name) for f in image.fields))
    reason = F.lit(None).cast("string")
    for f in reversed(image.fields):
        bad = as_text[f.name].isNotNull() & values[f.name].isNull()
        reason = F.when(bad, F.concat(F.lit(f"{f.name} is not a {f.dataType.simpleString()}: "),
                                      as_text[f.name])).otherwise(reason)
    return typed, reason


def _pg_position(op: Column, lsn: Column, sequence: Column) -> Column:
    """PostgreSQL commit order: a snapshot row at (its lsn, 0), a streamed change at (last commit or lsn, lsn)."""
    last_commit = F.from_json(sequence, T.ArrayType(T.StringType()))[0].cast(POSITION)
    a = F.when(op == "r", lsn.cast(POSITION)).otherwise(F.coalesce(last_commit, lsn.cast(POSITION)))
    b = F.when(op == "r", F.lit(0).cast(POSITION)).otherwise(lsn.cast(POSITION))
    return (a * F.lit(str(10**19)).cast(POSITION) + b).cast(POSITION)


def _present(text: Column) -> Column:
    return text.isNotNull() & (F.trim(text) != "null")


def parse_cdc(info: CdcTable, lines: DataFrame, table_schema: T.StructType | None = None) -> DataFrame:
    """Bronze CDC columns for `info`, the lineage columns and `reason` (null for a good record)."""
    image = table_schema["after"].dataType if table_schema else image_type(info)
    assert isinstance(image, T.StructType)  # the before/after images are structs
    line = F.from_json("payload", _LINE, {"columnNameOfCorruptRecord": "_corrupt_record"})
    keys = F.json_object_keys("payload")
    wrapped = F.array_contains(keys, "schema") & F.array_contains(keys, "payload")
    staged = lines.withColumn("line", line).withColumn("wrapped", F.coalesce(wrapped, F.lit(False))).select(
        *LINEAGE_COLUMNS, "line", "wrapped",
        F.when(F.col("wrapped"), F.col("line.payload")).otherwise(F.col("payload")).alias("envelope_text"),
    )
    envelope = F.from_json("envelope_text", _ENVELOPE, {"columnNameOfCorruptRecord": "_corrupt_record"})
    # Read as text, a JSON string holding an object looks like an object: a second
    # parse with map-typed images tells them apart (null where the value is no object).
    parsed = (staged.withColumn("env", envelope).withColumn("shape", F.from_json("envelope_text", _SHAPES))
              .withColumn("encodings", F.when(F.col("wrapped"), column_encodings(F.from_json("line.schema", SCHEMA)))))
    e, src = F.col("env"), F.col("env.source")

    before, before_bad = _image(info, e["before"], image, F.col("encodings"))
    after, after_bad = _image(info, e["after"], image, F.col("encodings"))
    before_obj, after_obj = F.col("shape.before").isNotNull(), F.col("shape.after").isNotNull()
    key_image = F.when(e["op"] == "d", F.col("before")).otherwise(F.col("after"))
    mysql = info.connector == "mysql"
    binlog_index = F.regexp_extract(src["file"], r"\.(\d+)$", 1).cast("long")
    position = (
        (binlog_index.cast(POSITION) * F.lit(10**16) + src["pos"].cast(POSITION) * F.lit(10**5)
         + F.coalesce(src["row"].cast(POSITION), F.lit(0)))
        if mysql else _pg_position(e["op"], src["lsn"], src["sequence"])
    ).cast(POSITION)

    # The literal null, or a wrapped record whose payload is null: a Kafka tombstone.
    tombstone = (F.trim("payload") == "null") | (F.col("wrapped") & F.col("envelope_text").isNull())
    line_reason = json_reason(F.col("payload"), F.col("line._corrupt_record"))
    reason = F.when(tombstone, F.lit(None).cast("string"))
    reason = reason.when(line_reason.isNotNull(), line_reason)
    reason = reason.when(e["_corrupt_record"].isNotNull(), F.lit("payload is not a JSON object"))
    reason = reason.when(blank(e["op"]), F.lit("missing op"))
    reason = reason.when(~e["op"].isin(*OPS), F.concat(F.lit("unknown op: "), e["op"]))
    reason = reason.when(src.isNull(), F.lit("missing source"))
    if mysql:
        reason = reason.when(blank(src["file"]) | blank(src["pos"]),
                             F.lit("missing source position (file, pos)"))
        reason = reason.when(binlog_index.isNull() | src["pos"].cast("long").isNull(),
                             F.lit("source position is not a binlog file and number"))
    else:
        reason = reason.when(blank(src["lsn"]), F.lit("missing source position (lsn)"))
        reason = reason.when(src["lsn"].cast("long").isNull(), F.concat(F.lit("lsn is not a number: "), src["lsn"]))
    reason = reason.when(
        src["ts_ms"].isNotNull() & src["ts_ms"].cast("long").isNull(), F.lit("source.ts_ms is not a number")
    )
    reason = reason.when(e["op"].isin("c", "u", "r") & ~_present(e["after"]), F.lit("missing after image"))
    reason = reason.when((e["op"] == "d") & ~_present(e["before"]), F.lit("missing before image"))
    reason = reason.when(_present(e["after"]) & ~after_obj, F.lit("after is not a JSON object"))
    reason = reason.when(_present(e["before"]) & ~before_obj, F.lit("before is not a JSON object"))
    reason = reason.when(after_bad.isNotNull(), F.concat(F.lit("after."), after_bad))
    reason = reason.when(before_bad.isNotNull(), F.concat(F.lit("before."), before_bad))

    typed = parsed.select(
        *LINEAGE_COLUMNS, "env", tombstone.alias("tombstone"),
        F.when(_present(e["before"]), before).alias("before"),
        F.when(_present(e["after"]), after).alias("after"),
        position.alias("change_position"),
        reason.alias("reason"),
    )
    for k in info.primary_key:
        typed = typed.withColumn(
            "reason",
            F.when(F.col("reason").isNull() & ~F.col("tombstone") & key_image[k].isNull(),
                   F.lit(f"missing primary key field {k}")).otherwise(F.col("reason")),
        )
    return typed.select(
        F.when(F.col("tombstone"), F.lit(TOMBSTONE)).otherwise(e["op"]).alias("op"),
        F.when(F.col("tombstone"), F.lit(None)).otherwise(
            F.to_json(F.struct(*(key_image[k].alias(k) for k in info.primary_key)))
        ).alias("key"),
        "before",
        "after",
        "change_position",
        src["lsn"].cast("long").alias("source_lsn"),
        src["txId"].cast("long").alias("source_tx_id"),
        src["file"].alias("binlog_file"),
        src["pos"].cast("long").alias("binlog_pos"),
        src["row"].cast("int").alias("binlog_row"),
        _millis(src["ts_ms"]).alias("source_ts"),
        _millis(e["ts_ms"]).alias("connector_ts"),
        (F.coalesce(src["snapshot"], F.lit("false")) != "false").alias("snapshot"),
        *LINEAGE_COLUMNS,
        "reason",
    )


def new_image_fields(lines: DataFrame, table_schema: T.StructType) -> list[tuple[str, str]]:
    """Fields in before/after images that the table's image struct lacks (a column added upstream).

    They become nullable fields of both `before` and `after`, typed from the
    records' schema where they have one (a string otherwise).
    """
    after = table_schema["after"].dataType
    assert isinstance(after, T.StructType)  # the before/after images are structs
    known = {f.name for f in after.fields}
    envelope_text = F.when(F.get_json_object("payload", "$.payload").isNotNull(),
                           F.get_json_object("payload", "$.payload")).otherwise(F.col("payload"))
    images = lines.select(envelope_text.alias("env")).select(
        F.explode(F.array(F.get_json_object("env", "$.after"), F.get_json_object("env", "$.before"))).alias("img")
    ).where(F.col("img").startswith("{"))
    keys = images.select(F.explode(F.json_object_keys("img")).alias("key")).distinct().collect()
    new = sorted(k.key for k in keys if _DRIFT_NAME.match(k.key) and k.key not in known)[:32]
    if not new:
        return []
    schemas = lines.select(F.from_json(F.get_json_object("payload", "$.schema"), SCHEMA).alias("s")).where("s IS NOT NULL")
    declared = schemas.select(F.explode(column_encodings(F.col("s"))).alias("name", "enc")).where(
        F.col("name").isin(*new)).select("name", "enc.type", "enc.name", F.to_json("enc.parameters")).distinct().collect()
    types = {r[0]: declared_type_of(r[1], r[2], json.loads(r[3]) if r[3] else None) for r in declared}
    return [(f"{side}.{name}", spark_type(types.get(name, "string")).simpleString())
            for name in new for side in ("before", "after")]
