"""Debezium change events, one Kafka record value per line, into typed bronze rows.

A line is an envelope `{"before", "after", "source", "op", "ts_ms"}`, bare or
wrapped as `{"schema": ..., "payload": <envelope>}`; the literal `null` (or a
null payload) is a tombstone, kept as op `t`. Images are typed from the declared
source table, decoding Debezium's encodings (sources/debezium_encodings.py: from a wrapped
record's schema, or from the declared types and connector modes for a bare one);
a field the declaration does not know becomes a new nested column, typed from
the record's schema when it has one.

`change_position` makes the source's commit order one sortable number, the way
the connector defines it. PostgreSQL: the rows of a snapshot all carry the
snapshot's LSN and sort before every change streamed after it; a streamed change
sorts by `source.sequence` ([LSN of the last commit before its transaction, its
own LSN]), so transactions are in commit order even when their WAL records
interleave: position = a * 10^19 + b, where (a, b) = (lsn, 0) for a snapshot row,
and otherwise a = the last commit's LSN (its own LSN for the first change after a
connector start, which has none) and b = its own LSN.
MySQL: binlog index * 10^16 + pos * 10^5 + row. A change is identified by
(key, position, op): a primary-key update's delete and create share an LSN.
Order changes by position, never by `ts_ms` (when the connector saw the change).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..landing.reader import MAX_HEADS, MAX_RECORD_BYTES, blank, json_reason, lineage_of
from ..project import CdcTable
from ..tables.registry import col
from ..tables.types import spark_type, type_name
from .debezium_encodings import (
    SCHEMA,
    Modes,
    column_encodings,
    declared_type_of,
    decode,
    encodings_of,
    millis_timestamp,
    more_scale,
)

OPS = ("c", "u", "d", "r")
TOMBSTONE = "t"
POSITION = T.DecimalType(38, 0)
IMAGE_KEYS = "_image_keys"

_DRIFT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_SEQUENCE = r'^\[\s*(?:null|"([0-9]{1,38})")\s*,\s*(?:null|"[0-9]{1,38}")\s*\]$'

_LINE = T.StructType([T.StructField(n, T.StringType()) for n in ("schema", "payload", "_corrupt_record")])
_SOURCE = T.StructType([
    T.StructField(n, T.StringType())
    for n in ("connector", "db", "table", "ts_ms", "snapshot", "lsn", "txId", "sequence", "file", "pos", "row")
])
_ENVELOPE = T.StructType(
    [T.StructField(n, T.StringType()) for n in ("before", "after", "op", "ts_ms")]
    + [T.StructField("source", _SOURCE), T.StructField("_corrupt_record", T.StringType())]
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
    return millis_timestamp(c.try_cast("long"))


def _modes(info: CdcTable) -> Modes:
    return Modes(info.decimal_handling_mode, info.time_precision_mode)


def _declared(info: CdcTable, f: T.StructField) -> str:
    """The declared type of an image field; a field added upstream has the type bronze gave it."""
    return info.columns.get(f.name) or type_name(f.dataType)


def _formers(info: CdcTable, image: T.StructType) -> dict[str, str]:
    """The declared renames (column -> its former name) to look for in records captured before the rename,
    which carry the former name: those whose column is in the image and whose former name is not."""
    names = set(image.fieldNames())
    return {new: old for new, old in info.renamed.items() if new in names and old not in names}


def _read_as(image: T.StructType, formers: dict[str, str]) -> T.StructType:
    """The image a record is read into: the table's columns and the former names of those renamed."""
    return T.StructType([*image.fields, *(T.StructField(old, T.StringType()) for old in formers.values())])


def _value(row: Column, name: str, formers: dict[str, str]) -> Column:
    """A column's value in a record: under its name, or, in a record captured before its rename, under its
    former name (a record that has both is read by the new name)."""
    return F.coalesce(row[name], row[formers[name]]) if name in formers else row[name]


def _decoded(info: CdcTable, as_text: Column, image: T.StructType, encodings: Column,
             formers: dict[str, str]) -> Column:
    """The typed struct of an image's values as JSON text (a field is null where its value does not decode)."""
    return F.struct(*(
        decode(_value(as_text, f.name, formers), _declared(info, f), _value(encodings, f.name, formers), _modes(info),
               info.rounding.get(f.name))
        .alias(f.name)
        for f in image.fields
    ))


def _bad_value(info: CdcTable, as_text: Column, typed: Column, image: T.StructType, encodings: Column,
               formers: dict[str, str]) -> Column:
    """The first field whose text did not decode, as a reason (null when every one did)."""
    reason = F.lit(None).cast("string")
    for f in reversed(image.fields):
        text, encoding = _value(as_text, f.name, formers), _value(encodings, f.name, formers)
        bad = text.isNotNull() & typed[f.name].isNull()
        why = F.concat(F.lit(f"{f.name} is not a {f.dataType.simpleString()}: "), text)
        # Only for a value that did not decode: a decimal with more scale than declared gets a reason of its own.
        digits = more_scale(text, _declared(info, f), encoding, _modes(info))
        if digits is not None and f.name not in info.rounding:
            why = F.coalesce(F.concat(
                F.lit(f"{f.name}: decimal "), digits,
                F.lit(f" has more scale than the declared {f.dataType.simpleString()} "
                      f"(declare rounding: {{{f.name}: half_up}} to round it)")), why)
        reason = F.when(bad, why).otherwise(reason)
    return reason


def _text_type(image: T.StructType) -> T.StructType:
    """An image with every value as its JSON text."""
    return T.StructType([T.StructField(f.name, T.StringType()) for f in image.fields])


_HEAD_OPEN = re.compile(r'\{[ \t]*"schema"[ \t]*:[ \t]*')
_HEAD_PAYLOAD = re.compile(r'[ \t]*,[ \t]*"payload"[ \t]*:[ \t]*')
_BODY_OPEN = re.compile(r'\{[ \t]*"payload"[ \t]*:[ \t]*')
_BODY_SCHEMA = re.compile(r'[ \t]*,[ \t]*"schema"[ \t]*:[ \t]*')


def landed_head(line: str) -> str | None:
    """The "head" of a wrapped record (`{"schema": <schema>, "payload": ...}`): its text exactly as it landed,
    from its start up to its payload's value. Compact as Debezium's JSON converter writes it, or spaced as JSON
    written by other tools is (`", "` and `": "`). For a record written payload first (`{"payload": ...,
    "schema": <schema>}`), the head it would begin with if written schema first: `{"schema":`, the schema's
    text as written, `,"payload":` (as the line reader's count pass reports it). None for any other line."""
    decoder = json.JSONDecoder()
    opened = _HEAD_OPEN.match(line)
    try:
        if opened is None:
            body = _BODY_OPEN.match(line)
            if body is None or not line.startswith("{", body.end()):
                return None
            _, end = decoder.raw_decode(line, body.end())
            schema = _BODY_SCHEMA.match(line, end)
            if schema is None or not line.startswith("{", schema.end()):
                return None
            _, stop = decoder.raw_decode(line, schema.end())
            return '{"schema":' + line[schema.end():stop] + ',"payload":'
        _, end = decoder.raw_decode(line, opened.end())
    except ValueError:
        return None
    payload = _HEAD_PAYLOAD.match(line, end)
    return line[:payload.end()] if payload is not None else None


def head_schema(head: str) -> str:
    """The record schema's text inside a head (`landed_head`)."""
    start = _HEAD_OPEN.match(head)
    assert start is not None, "a head begins with its schema"
    _, end = json.JSONDecoder().raw_decode(head, start.end())
    return head[start.end():end]


def _normalised(schema_text: str) -> str:
    """A record schema's text without its whitespace and with its keys in order: the same text for one schema
    however it was written."""
    try:
        return json.dumps(json.loads(schema_text), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return schema_text


@dataclass(frozen=True)
class _Known:
    """The heads whose record schema's encodings are worked out once for all their records (`heads`: (index,
    head)), and those encodings per distinct schema (`encodings`: the indexes of its heads, the encodings as a
    literal column)."""

    heads: list[tuple[int, str]]
    encodings: list[tuple[list[int], Column]]

    def index(self, lines: DataFrame) -> Column:
        """Per line, the index of its head among the known ones (null for none): as the line reader identified
        its head (`_json_schema`, also for a record written payload first), else by the bytes the line begins
        with."""
        if "_json_schema" not in lines.columns:
            return _head_index(self.heads)
        index = F.lit(None).cast("int")
        for n, head in reversed(self.heads):
            index = F.when(F.col("_json_schema") == F.lit(_schema_id(head_schema(head))), F.lit(n)).otherwise(index)
        return index


def _schema_id(text: str) -> int:
    """The line reader's id of a head's object (java/src/main/java/lakehouse/JsonLines.java: `Heads.id`): a 64-bit FNV-1a hash
    of its UTF-8 bytes, as a signed long."""
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h - (1 << 64) if h >= 1 << 63 else h


def _known(heads: Iterable[str]) -> _Known:
    """`heads` grouped by distinct schema: heads whose schemas differ only in whitespace or key order share one
    literal of encodings. A head whose schema `encodings_of` cannot read, or past MAX_SCHEMAS schemas, is left
    out."""
    by_schema: dict[str, list[tuple[int, str]]] = {}
    for n, head in enumerate(dict.fromkeys(heads)):
        by_schema.setdefault(_normalised(head_schema(head)), []).append((n, head))
    known: list[tuple[int, str]] = []
    encodings: list[tuple[list[int], Column]] = []
    for group in by_schema.values():
        literal = encodings_of(head_schema(group[0][1])) if len(encodings) < MAX_SCHEMAS else None
        if literal is not None:
            known += group
            encodings.append(([n for n, _ in group], literal))
    known.sort()
    return _Known(known, encodings)


def _head_index(heads: list[tuple[int, str]]) -> Column:
    """Per line, the index of the head it begins with (null for none)."""
    index = F.lit(None).cast("int")
    for n, head in reversed(heads):
        index = F.when(F.col("payload").startswith(head), F.lit(n)).otherwise(index)
    return index


_IMAGE_MAP = T.MapType(T.StringType(), T.StringType())
_READ_ENVELOPE = T.StructType([T.StructField("before", _IMAGE_MAP), T.StructField("after", _IMAGE_MAP),
                               T.StructField("op", T.StringType()), T.StructField("ts_ms", T.StringType()),
                               T.StructField("source", _SOURCE)])
# What the line reader parses a Debezium line into (landing/reader.py: `read_lines`): a wrapped record's schema as
# text and its payload, or a bare record's envelope; images as maps of their values' texts. READ_HEAD: a wrapped
# record, schema first or payload first, has its payload alone parsed and its schema identified (`_json_schema`).
READ_JSON = T.StructType([T.StructField("schema", T.StringType()), T.StructField("payload", _READ_ENVELOPE),
                          *_READ_ENVELOPE.fields, T.StructField("_corrupt_record", T.StringType())])
READ_HEAD = "schema,payload"
_SCHEMA_ONLY = T.StructType([T.StructField("schema", SCHEMA)])


def _no_keys() -> Column:
    return F.array().cast(T.ArrayType(T.StringType()))


def _map_keys(before: Column, after: Column) -> Column:
    """The keys of an envelope's before and after maps (empty where there are none)."""
    return F.array_distinct(F.concat(F.coalesce(F.map_keys(after), _no_keys()),
                                     F.coalesce(F.map_keys(before), _no_keys())))


@dataclass(frozen=True)
class _Fast:
    """What the first parse gives: which lines it read completely (`clean`), their envelope (images as text
    structs), a wrapped record's encodings from its own schema (for records with no known head), and the keys
    of their images."""

    clean: Column
    envelope: Column
    encodings: Column
    image_keys: Column


def _images_from_maps(envelope: Column, image: T.StructType) -> Column:
    """An envelope whose images are maps of texts, with its images as text structs of `image`'s fields."""
    def text(side: str) -> Column:
        m = envelope[side]
        return F.when(m.isNotNull(), F.struct(*(m[f.name].alias(f.name) for f in image.fields)))
    return F.struct(text("before").alias("before"), text("after").alias("after"), envelope["op"].alias("op"),
                    envelope["ts_ms"].alias("ts_ms"), envelope["source"].alias("source"))


def _read_by_reader(image: T.StructType, small: Column) -> _Fast:
    """The lines the line reader parsed (`READ_JSON`, `READ_HEAD`), as `_read_by_spark` reads them."""
    j, head = F.col("_json"), F.col("_json_head")
    wrapped = head.isNotNull() | (j["schema"].isNotNull() & j["payload"].isNotNull())
    bare = head.isNull() & j["schema"].isNull() & j["payload"].isNull() & ~F.col("payload").contains('"payload"')
    # A wrapped record whose schema is none of the known heads' decodes by its own schema, parsed from the line
    # (when the reader skipped over its head) or from the schema text the reader kept.
    own = F.when(head.isNotNull(), F.from_json("payload", _SCHEMA_ONLY)["schema"]).otherwise(F.from_json(j["schema"], SCHEMA))
    envelope = F.when(j["payload"].isNotNull(), j["payload"]).otherwise(
        F.struct(*(j[n].alias(n) for n in _READ_ENVELOPE.fieldNames())))
    return _Fast(
        clean=F.col("_json_ok") & small & (wrapped | bare),
        envelope=_images_from_maps(envelope, image),
        encodings=F.when(wrapped, column_encodings(own)),
        image_keys=F.when(F.col("_json_ok"), _map_keys(envelope["before"], envelope["after"])
                          ).otherwise(_image_keys_parsed()),
    )


def _image_keys_parsed() -> Column:
    """A line's image keys, parsed as maps from its text (the schema skipped, not copied). A record whose images
    are not objects gives none: it is quarantined."""
    images = T.StructType([T.StructField("before", _IMAGE_MAP), T.StructField("after", _IMAGE_MAP)])
    s = F.from_json("payload", T.StructType([T.StructField("payload", images), *images.fields]))
    wrapped = s["payload"].isNotNull()
    return _map_keys(*(F.when(wrapped, s["payload"][side]).otherwise(s[side]) for side in ("before", "after")))


def _read_by_spark(staged: DataFrame, k: Column, known: list[tuple[int, str]], image: T.StructType,
                   small: Column) -> tuple[DataFrame, _Fast]:
    """The lines parsed here: a wrapped record that begins with one of the known heads has only its payload
    parsed (the schema, most of its bytes, is compared, not read); any other, once whole."""
    text = _text_type(image)
    envelope = T.StructType([T.StructField("before", text), T.StructField("after", text),
                             T.StructField("op", T.StringType()), T.StructField("ts_ms", T.StringType()),
                             T.StructField("source", _SOURCE)])
    corrupt = T.StructField("_corrupt_record", T.StringType())
    options = {"columnNameOfCorruptRecord": "_corrupt_record"}
    one_pass = T.StructType([T.StructField("schema", T.StringType()), T.StructField("payload", envelope),
                             *envelope.fields, corrupt])
    # The line from the first byte after its head: the payload object (parsing stops at the end of that object,
    # so the record's closing brace after it does not matter). Cut as bytes: a substring of a string counts
    # characters, which would walk through the whole schema on every line.
    after_prefix = F.lit(None).cast("string")
    for n, head in known:
        start = len(head.encode()) + 1
        after_prefix = F.when(k == n, F.expr(f"cast(substring(cast(payload as binary), {start}) as string)")
                              ).otherwise(after_prefix)
    staged = staged.withColumns({
        "g": F.when(k.isNotNull(), F.from_json(after_prefix, T.StructType([*envelope.fields, corrupt]), options)),
        "f": F.when(k.isNull(), F.from_json("payload", one_pass, options)),
    })
    f, g = F.col("f"), F.col("g")
    wrapped = f["schema"].isNotNull() & f["payload"].isNotNull()
    # A bare record with no payload key (one whose payload is null is a wrapped tombstone: the slow path sees it).
    bare = f["schema"].isNull() & f["payload"].isNull() & ~F.col("payload").contains('"payload"')
    clean = F.when(k.isNotNull(), g.isNotNull() & g["_corrupt_record"].isNull() & F.col("payload").endswith("}")
                   & small).otherwise(f.isNotNull() & f["_corrupt_record"].isNull() & small & (wrapped | bare))
    fast_env = F.when(k.isNotNull(), F.struct(*(g[n].alias(n) for n in envelope.fieldNames()))).when(
        f["schema"].isNotNull(), f["payload"]).otherwise(F.struct(*(f[n].alias(n) for n in envelope.fieldNames())))
    return staged, _Fast(clean=clean, envelope=fast_env,
                         encodings=F.when(wrapped, column_encodings(F.from_json(f["schema"], SCHEMA))),
                         image_keys=_image_keys_parsed())


def _envelopes(lines: DataFrame, image: T.StructType, heads: Iterable[str]) -> DataFrame:
    """The lineage columns, `clean` (read by the first parse), one struct `u` per line: its envelope, as text,
    however it was written, and `image_keys`, the keys of its images where it begins with none of `heads` (else
    empty).

    A wrapped record that begins with one of `heads` (how these lines' wrapped records begin, up to their
    payload, as landed: `landed_head`) takes its schema's encodings as a literal, worked out once for each
    distinct schema (heads that differ in whitespace or key order share one).
    Lines the line reader parsed (`READ_JSON`) take its parse; the others are parsed here, a wrapped record of a
    known head from its payload on. Any other record Debezium wrote (an object, bare or wrapped as
    `{"schema", "payload"}`, whose images are objects) is parsed once, images included, and decodes a wrapped
    record's own schema. Every other line takes the path that names what is wrong with it: the line, then the
    envelope, then each image, parsed as text one by one (a literal `null`, a tombstone, is not parsed).
    """
    text = _text_type(image)
    known = _known(heads)
    staged = lines.withColumn("k", known.index(lines))
    k = F.col("k")
    # Bytes bound characters: a line under the limit in bytes is under it in characters.
    small = F.octet_length("payload") <= MAX_RECORD_BYTES
    if "_json_ok" in lines.columns:
        read = _read_by_reader(image, small)
    else:
        staged, read = _read_by_spark(staged, k, known.heads, image, small)
    staged = staged.withColumn("clean", F.coalesce(read.clean, F.lit(False)))
    literal = F.lit(None)
    for ids, encodings in reversed(known.encodings):
        literal = F.when(k.isin(*ids), encodings).otherwise(literal)
    fast_encodings = F.when(k.isNotNull(), literal).otherwise(read.encodings)
    fast_env = read.envelope

    # The other lines, one layer at a time (null for the lines read above).
    null_line = F.trim("payload") == "null"
    slow = ~F.col("clean") & ~null_line
    # Columns of their own, each under `when(slow, ...)`: computed once, for the slow lines only (an expression
    # used twice in one projection is computed twice).
    staged = staged.withColumns({
        "line": F.when(slow, F.from_json("payload", _LINE, {"columnNameOfCorruptRecord": "_corrupt_record"})),
        "line_keys": F.when(slow, F.json_object_keys("payload")),
    })
    keys = F.col("line_keys")
    staged = staged.withColumn("wrapped", slow & F.coalesce(
        F.array_contains(keys, "schema") & F.array_contains(keys, "payload"), F.lit(False)))
    staged = staged.withColumn("envelope_text", F.when(slow, F.when(F.col("wrapped"), F.col("line.payload"))
                                                       .otherwise(F.col("payload"))))
    # Read as text, a JSON string holding an object looks like an object: a second
    # parse with map-typed images tells them apart (null where the value is no object).
    staged = staged.withColumns({
        "env": F.when(slow, F.from_json("envelope_text", _ENVELOPE, {"columnNameOfCorruptRecord": "_corrupt_record"})),
        "shape": F.when(slow, F.from_json("envelope_text", _SHAPES)),
    })
    e = F.col("env")
    slow_env = F.struct(
        (null_line | (F.col("wrapped") & F.col("envelope_text").isNull())).alias("tombstone"),
        json_reason(F.col("payload"), F.col("line._corrupt_record")).alias("line_reason"),
        e["_corrupt_record"].isNotNull().alias("not_object"),
        e["op"].alias("op"), e["ts_ms"].alias("ts_ms"), e["source"].alias("source"),
        F.from_json(e["before"], text).alias("before"), F.from_json(e["after"], text).alias("after"),
        _present(e["before"]).alias("before_present"), _present(e["after"]).alias("after_present"),
        F.col("shape.before").isNotNull().alias("before_object"), F.col("shape.after").isNotNull().alias("after_object"),
        F.when(F.col("wrapped"), column_encodings(F.from_json("line.schema", SCHEMA))).alias("encodings"),
    )
    fast = F.struct(
        F.lit(False).alias("tombstone"), F.lit(None).cast("string").alias("line_reason"),
        F.lit(False).alias("not_object"),
        fast_env["op"].alias("op"), fast_env["ts_ms"].alias("ts_ms"), fast_env["source"].alias("source"),
        fast_env["before"].alias("before"), fast_env["after"].alias("after"),
        fast_env["before"].isNotNull().alias("before_present"), fast_env["after"].isNotNull().alias("after_present"),
        fast_env["before"].isNotNull().alias("before_object"), fast_env["after"].isNotNull().alias("after_object"),
        fast_encodings.alias("encodings"),
    )
    return staged.select(*lineage_of(lines), "clean", F.when(F.col("clean"), fast).otherwise(slow_env).alias("u"),
                         F.when(k.isNull() & ~null_line, read.image_keys).otherwise(_no_keys()).alias("image_keys"))


def _pg_position(op: Column, lsn: Column, sequence: Column) -> Column:
    """PostgreSQL commit order: a snapshot row at (its lsn, 0), a streamed change at (last commit or lsn, lsn)."""
    # `["<last commit>","<lsn>"]` as Debezium writes it (or spaced, as other JSON writers do), read by a pattern;
    # any other text parsed as JSON.
    written = F.regexp_extract(sequence, _SEQUENCE, 1)
    last_commit = F.when(sequence.rlike(_SEQUENCE), F.when(written != "", written).cast(POSITION)).otherwise(
        F.get(F.from_json(sequence, T.ArrayType(T.StringType())), 0).try_cast(POSITION))
    a = F.when(op == "r", lsn.try_cast(POSITION)).otherwise(F.coalesce(last_commit, lsn.try_cast(POSITION)))
    b = F.when(op == "r", F.lit(0).cast(POSITION)).otherwise(lsn.try_cast(POSITION))
    # Null when it does not fit decimal(38,0) (a last commit of 20 digits or more): `parse_cdc` gives it a reason.
    return F.try_add(F.try_multiply(a, F.lit(str(10**19)).cast(POSITION)), b).cast(POSITION)


def _present(text: Column) -> Column:
    return text.isNotNull() & (F.trim(text) != "null")


def parse_cdc(info: CdcTable, lines: DataFrame, table_schema: T.StructType | None = None,
              heads: Iterable[str] = ()) -> DataFrame:
    """Bronze CDC columns for `info`, the lineage columns, `reason` (null for a good record) and `IMAGE_KEYS`.

    `heads`: how the wrapped records in `lines` begin, up to their payload (`survey_cdc`), each schema decoded once.
    """
    image = table_schema["after"].dataType if table_schema else image_type(info)
    assert isinstance(image, T.StructType)  # the before/after images are structs
    e = F.col("u")
    formers = _formers(info, image)
    lineage = lineage_of(lines)
    # Each image decoded once, in a projection of its own: its values and its reason both read it.
    parsed = _envelopes(lines, _read_as(image, formers), heads).withColumns({
        "before_v": _decoded(info, e["before"], image, e["encodings"], formers),
        "after_v": _decoded(info, e["after"], image, e["encodings"], formers),
    })
    src = e["source"]
    before, after = F.col("before_v"), F.col("after_v")
    before_bad = _bad_value(info, e["before"], before, image, e["encodings"], formers)
    after_bad = _bad_value(info, e["after"], after, image, e["encodings"], formers)
    key_image = F.when(e["op"] == "d", F.col("before")).otherwise(F.col("after"))
    mysql = info.connector == "mysql"
    binlog_index = F.regexp_extract(src["file"], r"\.(\d+)$", 1).try_cast("long")
    # The file's index, pos and row read as the long, long and int bronze keeps (null when the text is not one):
    # the sum then fits decimal(38,0).
    position = (
        (binlog_index.cast(POSITION) * F.lit(10**16) + src["pos"].try_cast("long").cast(POSITION) * F.lit(10**5)
         + F.coalesce(src["row"].try_cast("int").cast(POSITION), F.lit(0)))
        if mysql else _pg_position(e["op"], src["lsn"], src["sequence"])
    ).cast(POSITION)

    # The literal null, or a wrapped record whose payload is null: a Kafka tombstone.
    tombstone = e["tombstone"]
    reason = F.when(tombstone, F.lit(None).cast("string"))
    reason = reason.when(e["line_reason"].isNotNull(), e["line_reason"])
    reason = reason.when(e["not_object"], F.lit("payload is not a JSON object"))
    reason = reason.when(blank(e["op"]), F.lit("missing op"))
    reason = reason.when(~e["op"].isin(*OPS), F.concat(F.lit("unknown op: "), e["op"]))
    reason = reason.when(src.isNull(), F.lit("missing source"))
    if mysql:
        reason = reason.when(blank(src["file"]) | blank(src["pos"]),
                             F.lit("missing source position (file, pos)"))
        reason = reason.when(binlog_index.isNull() | src["pos"].try_cast("long").isNull(),
                             F.lit("source position is not a binlog file and number"))
    else:
        reason = reason.when(blank(src["lsn"]), F.lit("missing source position (lsn)"))
        reason = reason.when(src["lsn"].try_cast("long").isNull(), F.concat(F.lit("lsn is not a number: "), src["lsn"]))
    reason = reason.when(
        src["ts_ms"].isNotNull() & src["ts_ms"].try_cast("long").isNull(), F.lit("source.ts_ms is not a number")
    )
    reason = reason.when(e["op"].isin("c", "u", "r") & ~e["after_present"], F.lit("missing after image"))
    reason = reason.when((e["op"] == "d") & ~e["before_present"], F.lit("missing before image"))
    reason = reason.when(e["after_present"] & ~e["after_object"], F.lit("after is not a JSON object"))
    reason = reason.when(e["before_present"] & ~e["before_object"], F.lit("before is not a JSON object"))
    reason = reason.when(after_bad.isNotNull(), F.concat(F.lit("after."), after_bad))
    reason = reason.when(before_bad.isNotNull(), F.concat(F.lit("before."), before_bad))

    typed = parsed.select(
        *lineage, "u", "image_keys", tombstone.alias("tombstone"),
        F.when(e["before_present"], before).alias("before"),
        F.when(e["after_present"], after).alias("after"),
        position.alias("change_position"),
        reason.alias("reason"),
    )
    for k in info.primary_key:
        typed = typed.withColumn(
            "reason",
            F.when(F.col("reason").isNull() & ~F.col("tombstone") & key_image[k].isNull(),
                   F.lit(f"missing primary key field {k}")).otherwise(F.col("reason")),
        )
    if not mysql:  # a last commit of 20 digits or more: the position does not fit decimal(38,0) (`_pg_position`)
        out_of_range = F.concat(F.lit("source position out of range: sequence "), F.substring(src["sequence"], 1, 200))
        typed = typed.withColumn("reason", F.when(
            F.col("reason").isNull() & ~F.col("tombstone") & F.col("change_position").isNull(), out_of_range,
        ).otherwise(F.col("reason")))
    return typed.select(
        F.when(F.col("tombstone"), F.lit(TOMBSTONE)).otherwise(e["op"]).alias("op"),
        F.when(F.col("tombstone"), F.lit(None)).otherwise(
            F.to_json(F.struct(*(key_image[k].alias(k) for k in info.primary_key)))
        ).alias("key"),
        "before",
        "after",
        "change_position",
        src["lsn"].try_cast("long").alias("source_lsn"),
        src["txId"].try_cast("long").alias("source_tx_id"),
        src["file"].alias("binlog_file"),
        src["pos"].try_cast("long").alias("binlog_pos"),
        src["row"].try_cast("int").alias("binlog_row"),
        _millis(src["ts_ms"]).alias("source_ts"),
        _millis(e["ts_ms"]).alias("connector_ts"),
        (F.coalesce(src["snapshot"], F.lit("false")) != "false").alias("snapshot"),
        *lineage,
        "reason",
        F.col("image_keys").alias(IMAGE_KEYS),  # Spark computes it only where a later step uses it (new_image_keys)
    )


@dataclass(frozen=True)
class CdcSurvey:
    """What `survey_cdc` finds in a run's lines before they are parsed."""

    new_fields: list[tuple[str, str]]  # (column path, type) of image fields the table lacks
    heads: list[str]  # wrapped records' beginnings up to their payload, as landed (`landed_head`)


# Distinct schemas whose encodings are worked out once per run (as literals); records of any other schema are
# decoded by their own schema, record by record.
MAX_SCHEMAS = 16


def survey_cdc(lines: DataFrame, table_schema: T.StructType, heads: Iterable[str] | None = None,
               formers: Iterable[str] = ()) -> CdcSurvey:
    """The heads the lines' wrapped records begin with (as the line reader's count finds them, those of the
    most lines first: `landing/reader.py`; else those of the files' first lines, read from `lines`), and the
    fields of their record schemas that the table's image struct lacks (a column added upstream).

    The fields of records that begin with a head found are those of the head's schema. Fields of other records
    (bare ones, records of a head past the reader's limit) are found while bronze is written (`new_image_keys`),
    and typed afterwards (`typed_new_fields`).
    """
    if heads is None:
        first = lines.where(F.col("source_line") == 1).select("payload").collect()
        heads = [h for r in first if (h := landed_head(r.payload)) is not None]
    heads = list(dict.fromkeys(heads))[:MAX_HEADS]
    return typed_new_fields(lines, table_schema, [name for h in heads for name, *_ in _schema_columns(head_schema(h))],
                            heads, formers)


def new_image_keys(table_schema: T.StructType, heads: Iterable[str] = (), formers: Iterable[str] = ()) -> Column:
    """Per parsed line (`parse_cdc`): the keys of its before/after images that the table's image struct lacks,
    for the records that begin with none of the heads the parse was given (the fields of the others are their
    head schema's; `heads` is not used here, the parse already left those records' keys out). An array, empty
    for most lines; a column computed while bronze is written."""
    after = table_schema["after"].dataType
    assert isinstance(after, T.StructType)  # the before/after images are structs
    known = sorted({f.name for f in after.fields} | set(formers))
    return F.filter(F.col(IMAGE_KEYS), lambda k: ~k.isin(*known) & k.rlike(_DRIFT_NAME.pattern))


def typed_new_fields(lines: DataFrame, table_schema: T.StructType, keys: Iterable[str],
                     heads: Iterable[str], formers: Iterable[str] = ()) -> CdcSurvey:
    """`keys` (image fields found in `lines`) that the table lacks, as new nullable fields of both `before` and
    `after`, typed from the record schemas that have them (a string otherwise), and the heads known. `formers`: the
    former names of renamed columns, which records captured before the rename still carry (no new column)."""
    after = table_schema["after"].dataType
    assert isinstance(after, T.StructType)  # the before/after images are structs
    known = {f.name for f in after.fields} | set(formers)
    heads = list(heads)
    new = sorted({k for k in keys if _DRIFT_NAME.match(k) and k not in known})[:32]
    have = {name for h in heads for name, *_ in _schema_columns(head_schema(h))}
    # Some new columns appear only in records with no head found (bare, or past the limit): add the heads of such
    # records, whose schemas give the columns' types.
    if set(new) - have:
        index = _head_index(list(enumerate(heads)))
        named = F.lit(False)
        for name in sorted(set(new) - have):
            named = named | F.col("payload").contains(json.dumps(name))
        later = lines.where(named & index.isNull()).groupBy(F.get_json_object("payload", "$.schema")).agg(
            F.min_by("payload", "source_line").alias("payload")).limit(MAX_SCHEMAS).collect()
        heads = list(dict.fromkeys([*heads, *(h for r in later if (h := landed_head(r.payload)))]))[:MAX_HEADS + MAX_SCHEMAS]
    types: dict[str, str] = {}
    for h in heads:
        for name, connect_type, semantic, parameters in _schema_columns(head_schema(h)):
            types.setdefault(name, declared_type_of(connect_type, semantic, parameters))
    return CdcSurvey(
        new_fields=[(f"{side}.{name}", spark_type(types.get(name, "string")).simpleString())
                    for name in new for side in ("before", "after")],
        heads=heads,
    )


def _schema_columns(text: str) -> list[tuple[str, str | None, str | None, dict | None]]:
    """(column, Connect type, semantic name, parameters) of a record schema's after image, then its before."""
    try:
        schema = json.loads(text)
        sides = {f.get("field"): f.get("fields") for f in schema.get("fields") or [] if isinstance(f, dict)}
    except (ValueError, AttributeError):
        return []
    return [(c["field"], c.get("type"), c.get("name"),
             c.get("parameters") if isinstance(c.get("parameters"), dict) else None)
            for side in ("after", "before") for c in sides.get(side) or []
            if isinstance(c, dict) and isinstance(c.get("field"), str)]
