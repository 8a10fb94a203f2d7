"""Debezium records into typed bronze rows: the same rows however a record is read.

A clean record is parsed in one pass, its schema's encodings decoded once per run; any
other line takes the layer-by-layer path that names what is wrong with it. Both paths,
and both ways of decoding a schema, must give the same row for the same line.
"""

import base64
import datetime as dt
import json
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from examples.shop.cdc_generator import CDC_TABLES, generate_cdc
from lakehouse_assets.landing.reader import _read_lines, read_lines
from lakehouse_assets.runtime.spark import local_frame
from lakehouse_assets.sources import change_records as cdc
from lakehouse_assets.sources.change_records import bronze_cdc_schema, new_image_keys, parse_cdc, survey_cdc, typed_new_fields
from lakehouse_assets.sources.debezium_encodings import Modes, decode, encodings_of

from ..shop import SHOP

ORDERS = SHOP.cdc["orders"]
DAY = dt.date(2025, 1, 1)


def _two_complement(value: int) -> str:
    width = max(1, (value.bit_length() + 8) // 8)
    return base64.b64encode(value.to_bytes(width, "big", signed=True)).decode()


def _field(name: str, kind: str, semantic: str | None = None, **parameters: str) -> dict:
    field = {"type": kind, "optional": name != "order_id", "field": name}
    if semantic:
        field["name"] = semantic
    if parameters:
        field["parameters"] = parameters
    return field


def _schema(*extra: dict) -> dict:
    columns = [
        _field("order_id", "int64"), _field("customer_id", "int64"), _field("status", "string"),
        _field("total", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2",
               **{"connect.decimal.precision": "12"}),
        _field("order_ts", "int64", "io.debezium.time.MicroTimestamp"),
        _field("updated_at", "int64", "io.debezium.time.MicroTimestamp"), *extra,
    ]
    image = {"type": "struct", "fields": columns, "optional": True, "name": "shop.public.orders.Value"}
    return {"type": "struct", "name": "shop.public.orders.Envelope", "optional": False, "fields": [
        {**image, "field": "before"}, {**image, "field": "after"},
        {"type": "struct", "field": "source", "optional": False, "fields": [_field("lsn", "int64")]},
        _field("op", "string"), _field("ts_ms", "int64"),
    ]}


def _wrapped(n: int, total_cents: int, schema: dict | None = None, separators=(",", ":"), **extra) -> str:
    micros = 1735725600000000 + n
    after = {"order_id": n, "customer_id": 7, "status": "paid", "total": _two_complement(total_cents),
             "order_ts": micros, "updated_at": micros, **extra}
    envelope = {"before": None, "after": after, "op": "c", "ts_ms": 1735725601000,
                "source": {"lsn": 1000 + n, "ts_ms": 1735725600000, "sequence": f'["{900 + n}","{1000 + n}"]'}}
    return json.dumps({"schema": schema or _schema(), "payload": envelope}, separators=separators)


def _lines(spark, texts: list[str]):
    return local_frame(
        spark, [(f"file:/landing/cdc/orders/date={DAY}/x.jsonl", n, DAY, text) for n, text in enumerate(texts, start=1)],
        "source_file string, source_line int, landing_date date, payload string")


WIDTHS = [0, 1, -1, 127, 128, -128, -129, 2**31, -(2**31), 2**63 - 1, -(2**63), 2**63, -(2**63) - 1,
          2**64, -(2**64), 10**37, -(10**37), 10**38 - 1, -(10**38 - 1)]


def test_connect_decimals_decode_exactly_at_every_width(spark):
    """Two's-complement bytes of 1 to 16 bytes, each side of the 8-byte boundary, as decimal(38,0) and (38,10)."""
    schema = {"fields": [{"field": "after", "fields": [
        _field("v", "bytes", "org.apache.kafka.connect.data.Decimal", scale="0"),
        _field("w", "bytes", "org.apache.kafka.connect.data.Decimal", scale="10")]}]}
    encodings = encodings_of(json.dumps(schema))
    assert encodings is not None
    rows = local_frame(spark, [(str(v), _two_complement(v)) for v in WIDTHS], "v string, b string").select(
        "v", decode(F.col("b"), "decimal(38,0)", encodings["v"], Modes()).alias("as_integer"),
        decode(F.col("b"), "decimal(38,10)", encodings["w"], Modes()).alias("scaled")).collect()
    assert [r.as_integer for r in rows] == [Decimal(v) for v in WIDTHS]
    assert [r.scaled for r in rows] == [Decimal(f"{v}E-10") for v in WIDTHS]
    # More bytes than 16, or 16 holding more than 38 digits: no decimal(38) holds them.
    too_wide = local_frame(spark, [(_two_complement(v),) for v in (2**130, 10**38, -(10**38), 2**127 - 1)], "b string")
    assert [r[0] for r in too_wide.select(decode(F.col("b"), "decimal(38,0)", encodings["v"], Modes())).collect()] == [
        None] * 4


@pytest.fixture(scope="module")
def landed(spark, tmp_path_factory):
    """The shop generator's change files (bare and wrapped, 6% broken, a column added on the second day)."""
    landing = tmp_path_factory.mktemp("cdc_parse")
    days = [DAY, DAY + dt.timedelta(days=1)]
    generate_cdc(landing, days, changes_per_day=120, malformed_rate=0.06, drift_day=days[1],
                 binlog_events_per_file=40)
    return landing


def _rows(df) -> list[tuple]:
    """The rows by file and line, without the image keys (computed only for records of no known head)."""
    return [tuple(r) for r in sorted(df.drop(cdc.IMAGE_KEYS).collect(), key=lambda r: (r.source_file, r.source_line))]


def _image_keys(df, schema, heads) -> list[tuple]:
    """Each line's new image keys as bronze gathers them (`new_image_keys`), by file and line."""
    rows = df.select("source_file", "source_line", new_image_keys(schema, heads).alias("k")).collect()
    return sorted((r.source_file, r.source_line, sorted(r.k)) for r in rows)


# `make test` compares the paths on customers (its schema drifts half way); `make soak` on every table.
@pytest.mark.parametrize("table", [t if t == "customers" else pytest.param(t, marks=pytest.mark.soak)
                                   for t in CDC_TABLES])
def test_every_line_parses_the_same_on_the_one_pass_and_the_layer_by_layer_path(spark, landed, table, monkeypatch):
    info = SHOP.cdc[table]
    files = sorted(f"file:{p}" for p in (landed / "cdc" / table).rglob("*.jsonl"))
    lines = read_lines(spark, files)
    schema = bronze_cdc_schema(info)
    survey = survey_cdc(lines, schema)
    assert survey.heads, "the generator's wrapped files carry a schema on their first line"
    one_pass = _rows(parse_cdc(info, lines, schema, heads=survey.heads))
    per_record = _rows(parse_cdc(info, lines, schema))
    # A wrapped record of a schema already seen is read at once (its payload alone) exactly where the whole
    # record would be: the shortcut refuses no line the one-pass parse takes.
    at_once = cdc._envelopes(lines, cdc.image_type(info), survey.heads).where("clean")
    assert at_once.count() == cdc._envelopes(lines, cdc.image_type(info), []).where("clean").count() > 0
    # The line reader's parse of the same files (a wrapped record's schema passed over), as bronze reads them.
    read = read_lines(spark, files, json=cdc.READ_JSON, head=cdc.READ_HEAD)
    assert read.where("_json_head IS NOT NULL").count() > 0 and read.where("NOT _json_ok").count() > 0
    by_reader = parse_cdc(info, read, schema, heads=survey.heads)
    assert _rows(by_reader) == one_pass
    assert _image_keys(by_reader, schema, survey.heads) == _image_keys(
        parse_cdc(info, lines, schema, heads=survey.heads), schema, survey.heads)
    monkeypatch.setattr(cdc, "MAX_RECORD_BYTES", -1)  # no line is read in one pass
    layered = _rows(parse_cdc(info, lines, schema, heads=survey.heads))
    assert one_pass == layered == per_record == _rows(parse_cdc(info, read, schema, heads=survey.heads))
    assert sum(r[-1] is not None for r in one_pass) > 0  # the broken lines are among them


def test_connect_decimals_and_micro_timestamps_parse_the_same_either_way(spark, monkeypatch):
    texts = [_wrapped(n, cents) for n, cents in enumerate([0, 1999, -1, 12_345_678_901, 10**12, -(2**63)], 1)]
    lines = _lines(spark, texts)
    schema = bronze_cdc_schema(ORDERS)
    survey = survey_cdc(lines, schema)
    assert survey.heads == ['{"schema":' + json.dumps(_schema(), separators=(",", ":")) + ',"payload":']
    rows = parse_cdc(ORDERS, lines, schema, heads=survey.heads)
    got = {r.source_line: (r.after.total if r.after else None, r.reason) for r in rows.collect()}
    assert got[2] == (Decimal("19.99"), None) and got[3] == (Decimal("-0.01"), None)
    assert got[4] == (Decimal("123456789.01"), None)
    assert got[5][1] == f"after.total is not a decimal(12,2): {_two_complement(10**12)}"  # 13 digits
    assert rows.first().after.order_ts == dt.datetime(2025, 1, 1, 10, 0, 0, 1)  # host zone: UTC in tests
    monkeypatch.setattr(cdc, "MAX_RECORD_BYTES", -1)
    assert _rows(parse_cdc(ORDERS, lines, schema, heads=survey.heads)) == _rows(rows)
    assert _rows(parse_cdc(ORDERS, lines, schema)) == _rows(rows)


def test_records_written_with_spaces_take_the_same_fast_path_and_give_the_same_rows(spark):
    """JSON as a relay written in Python passes it on (`", "` and `": "`, or indented by a space): the head of each
    file's records is taken as it landed, so they are read as fast as the converter's compact form."""
    cents = [0, 1999, -1, 12_345_678_901, 10**12]
    schema = bronze_cdc_schema(ORDERS)
    compact = _lines(spark, [_wrapped(n, c) for n, c in enumerate(cents, 1)])
    want = _rows(parse_cdc(ORDERS, compact, schema, heads=survey_cdc(compact, schema).heads).drop("payload"))
    for separators in ((", ", ": "), (" , ", " : ")):
        lines = _lines(spark, [_wrapped(n, c, separators=separators) for n, c in enumerate(cents, 1)])
        survey = survey_cdc(lines, schema)
        assert [cdc.head_schema(h) for h in survey.heads] == [json.dumps(_schema(), separators=separators)]
        at_once = cdc._envelopes(lines, cdc.image_type(ORDERS), survey.heads)
        assert at_once.where("clean AND u.encodings IS NOT NULL").count() == len(cents)  # the schema's, read once
        assert _rows(parse_cdc(ORDERS, lines, schema, heads=survey.heads).drop("payload")) == want
        assert _rows(parse_cdc(ORDERS, lines, schema).drop("payload")) == want


def test_a_column_added_after_a_files_first_line_is_typed_from_the_schema_that_has_it(spark):
    credit = _field("credit", "bytes", "org.apache.kafka.connect.data.Decimal", scale="3",
                    **{"connect.decimal.precision": "9"})
    texts = [_wrapped(1, 100), _wrapped(2, 200), _wrapped(3, 300, _schema(credit), credit=_two_complement(1500))]
    lines = _lines(spark, texts)
    schema = bronze_cdc_schema(ORDERS)
    survey = survey_cdc(lines, schema)
    assert survey.new_fields == [] and len(survey.heads) == 1  # the first line's schema has no new field
    # Gathered as bronze is written: only the record whose schema is not the first line's is read for keys.
    parsed = parse_cdc(ORDERS, lines, schema, heads=survey.heads)
    keys = parsed.select(F.flatten(F.collect_set(new_image_keys(schema, survey.heads))).alias("k")).first().k
    assert keys == ["credit"]
    typed = typed_new_fields(lines, schema, keys, survey.heads)
    assert typed.new_fields == [("before.credit", "decimal(9,3)"), ("after.credit", "decimal(9,3)")]
    assert len(typed.heads) == 2  # the new schema is decoded once too
    # A file that begins with the new schema: its columns are known before any line is parsed.
    assert survey_cdc(lines, schema, [cdc.landed_head(texts[2])]).new_fields == typed.new_fields


def test_records_of_one_schema_written_differently_mid_file_are_decided_once_for_that_schema(spark, tmp_path):
    """Whitespace and key order that differ from the file's first line, mid-file (a relay that re-serialises,
    sorting keys or not; two writers into one folder): the reader's count finds every head, those of the most
    lines first (a record written payload first under the head it would begin with); the heads of one schema
    share one literal of encodings; every record is read at once with it, and its row is the compact form's."""
    reordered = json.loads(json.dumps(_schema()), object_pairs_hook=lambda pairs: dict(reversed(pairs)))
    cents = [0, 1999, -1, 12_345_678_901, 10**12, 7, 250, 3, 41, -42, 5, 6]
    forms = [{}, {}, {"schema": reordered}, {"schema": reordered}, {"schema": reordered},
             {"separators": (", ", ": ")}, {"schema": reordered, "separators": (", ", ": ")}, {}, {}, {},
             {"schema": reordered}, {}]
    texts = [_wrapped(n, c, **form) for n, (c, form) in enumerate(zip(cents, forms, strict=True), 1)]
    texts[7] = texts[7].replace(',"payload":', ' , "payload" : ')
    texts[8] = json.dumps(json.loads(texts[8]), sort_keys=True)  # payload first, as `jq -S` or sort_keys write it
    texts[9] = json.dumps(json.loads(texts[9]), sort_keys=True, separators=(",", ":"))
    sorted_heads = {'{"schema":' + json.dumps(_schema(), sort_keys=True, separators=separators) + ',"payload":'
                    for separators in ((", ", ": "), (",", ":"))}
    folder = tmp_path / "cdc" / "orders" / f"date={DAY}"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text("\n".join(texts) + "\n")
    landed = _read_lines(spark, [f"file:{folder / 'a.jsonl'}"], json=cdc.READ_JSON, head=cdc.READ_HEAD)
    assert landed.line_counts == {f"file:{folder / 'a.jsonl'}": len(texts)}
    assert sorted(landed.heads) == sorted({cdc.landed_head(t) for t in texts[:8]} | sorted_heads)
    # Counted by head, those of the most lines first, however the heads alternate: 4 reordered, 3 compact.
    assert landed.heads[:2] == [cdc.landed_head(texts[2]), cdc.landed_head(texts[0])]
    assert {cdc.landed_head(t) for t in texts} == set(landed.heads)  # found here as the reader finds them
    assert len(landed.heads) == 7
    assert landed.lines.where("_json_head IS NULL").count() == 0  # all read from their payload
    known = cdc._known(landed.heads)
    assert len(known.heads) == 7 and [len(ids) for ids, _ in known.encodings] == [7]  # one schema, one literal
    assert landed.lines.where(known.index(landed.lines).isNull()).count() == 0
    image = cdc.image_type(ORDERS)
    assert cdc._envelopes(landed.lines, image, landed.heads).where("clean").count() == len(texts)
    schema = bronze_cdc_schema(ORDERS)
    compact = _lines(spark, [_wrapped(n, c) for n, c in enumerate(cents, 1)])
    want = _rows(parse_cdc(ORDERS, compact, schema, heads=survey_cdc(compact, schema).heads).drop("payload"))
    survey = survey_cdc(landed.lines, schema, landed.heads)
    assert survey.new_fields == [] and survey.heads == landed.heads
    as_compact = F.lit(compact.first().source_file)
    for lines in (landed.lines.withColumn("source_file", as_compact), _lines(spark, texts)):  # the reader's, Spark's
        assert _rows(parse_cdc(ORDERS, lines, schema, heads=survey.heads).drop("payload")) == want


def _tricky_lines() -> list[str]:
    """Debezium records as other writers and mishaps leave them, around records the reader takes at once."""
    good = [_wrapped(n, 100 * n) for n in range(1, 4)]  # one head three times: passed over from the second on
    payload, schema = json.loads(good[0])["payload"], _schema()
    credit = _field("credit", "bytes", "org.apache.kafka.connect.data.Decimal", scale="3")
    first = good[0]
    return [
        *good, _wrapped(4, 400, separators=(", ", ": ")), first[:-1] + " }", first + " ", first + "}", first + " x",
        first[:-1] + ',"extra":1}', first[: len(first) // 2 + 40],
        json.dumps({"payload": payload, "schema": schema}), json.dumps({"schema": None, "payload": payload}),
        json.dumps({"schema": schema, "payload": None}), json.dumps({"schema": "text", "payload": payload}),
        json.dumps(payload), json.dumps(payload, separators=(",", ":")), json.dumps({**payload, "extra": [1]}),
        "null", " null ", "", "5", "[]", "{}", '{"payload": 1}',
        first.replace('"op":"c"', '"op":"c","op":"u"'), first.replace('"after":{', '"after":{"status":"x",'),
        first.replace('"source":{', '"source":{"lsn":5,'), first.replace('"op":"c"', '"op":null'),
        first.replace('"customer_id":7', '"customer_id":{"a":[1, 2.50]}'),
        first.replace('"customer_id":7', '"customer_id":7.0e0'), first.replace('"customer_id":7', '"customer_id":-0'),
        first.replace('"status":"paid"', '"status":"p\\u00e4id \\"q\\" \\ud83d\\ude00"'),
        first.replace('"before":null', '"before":"{}"'), first.replace('"before":null', '"before":[1]'),
        first.replace('"before":null', '"before":{}'), first.replace(',"payload":', ' , "payload" : '),
        first.replace('"status":"paid"', '"status":"\ud800"'),
        _wrapped(9, 900, _schema(credit), credit=_two_complement(1500)), _wrapped(10, 1000, _schema(credit)),
        *(body_first := [json.dumps(json.loads(line), sort_keys=True, separators=(",", ":")) for line in good]),
        body_first[0] + " x", body_first[0][:-1] + ',"extra":1}', body_first[0][:-1] + " }  ",
        '{"payload":' + json.dumps(payload) + ',"schema":"text"}', '{"payload":' + json.dumps(payload) + "}",
        '{"payload":' + json.dumps(payload) + ',"payload":' + json.dumps(payload) + "}",
        '{"payload":null,"schema":' + json.dumps(schema) + "}", body_first[1].replace('"op":"c"', '"op":"c","op":"d"'),
        *good,
    ]


def test_lines_the_reader_parses_give_the_rows_and_keys_spark_gives(spark, tmp_path):
    """The line reader's parse of Debezium lines (a wrapped record's schema passed over once its head is known,
    images as maps) gives every row, reason and new image key that Spark's own parse gives on the same lines,
    with the heads known and without; the lines it cannot take exactly are left to Spark."""
    folder = tmp_path / "cdc" / "orders" / f"date={DAY}"
    folder.mkdir(parents=True)
    body = "\n".join(_tricky_lines()).encode("utf-8", "surrogatepass").replace(b"\xed\xa0\x80", b"\xff")
    (folder / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + body + b"\n")
    (folder / "b.jsonl").write_bytes(b"\r\n".join(line.encode() for line in _tricky_lines()[12:18]))
    files = sorted(f"file:{p}" for p in folder.iterdir())
    schema = bronze_cdc_schema(ORDERS)
    plain = read_lines(spark, files)
    read = read_lines(spark, files, json=cdc.READ_JSON, head=cdc.READ_HEAD)
    assert read.where("_json_head IS NOT NULL").count() >= 8
    assert read.where("_json_head IS NOT NULL AND startswith(payload, '{\"payload\"')").count() == 5  # body first
    assert read.where("NOT _json_ok").count() >= 12
    counted = _read_lines(spark, files, json=cdc.READ_JSON, head=cdc.READ_HEAD).heads
    assert len(counted) > 2  # (the file's first line, the spaced ones, those of the added column...)
    for heads in (survey_cdc(plain, schema).heads, counted, []):
        want, got = parse_cdc(ORDERS, plain, schema, heads=heads), parse_cdc(ORDERS, read, schema, heads=heads)
        assert _rows(got) == _rows(want)
        assert _image_keys(got, schema, heads) == _image_keys(want, schema, heads)
    rows = _rows(want)
    assert sum(r[-1] is None for r in rows) >= 25 and sum(r[-1] is not None for r in rows) >= 8
    assert ["credit"] in [k for *_, k in _image_keys(want, schema, [])]


ORDER_ITEMS = SHOP.cdc["order_items"]  # MySQL: ordered by binlog file, pos and row
BINLOG = {"connector": "mysql", "file": "mysql-bin.000003", "pos": 154, "row": 0, "ts_ms": 1735725600000}
BINLOG_LINES = {  # changes to the source -> the record's reason, None when kept
    (): None,
    (("file", "mysql-bin"),): "source position is not a binlog file and number",  # no numeric suffix
    (("pos", "end"),): "source position is not a binlog file and number",
    (("pos", "9" * 30),): "source position is not a binlog file and number",  # past a long
    (("row", "9" * 12),): None,  # past an int: binlog_row null, the row counted as 0
    (("ts_ms", "yesterday"),): "source.ts_ms is not a number",
}


def test_a_binlog_position_that_is_not_a_number_quarantines_its_record_under_ansi_mode(spark):
    """Each part of a MySQL position is read with try_cast: one that is not a number (or not the long bronze keeps)
    gives its record a reason instead of failing the batch, and the position of the others fits decimal(38,0)."""
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    after = {"order_id": 1, "line_no": 1, "product_id": "p1", "quantity": 2, "unit_price": _two_complement(1999)}
    texts = [json.dumps({"before": None, "after": {**after, "line_no": n}, "op": "c", "ts_ms": 1735725601000,
                         "source": {**BINLOG, **dict(changes)}}) for n, changes in enumerate(BINLOG_LINES, 1)]
    rows = {r.source_line: r for r in parse_cdc(ORDER_ITEMS, _lines(spark, texts), bronze_cdc_schema(ORDER_ITEMS)).collect()}
    assert {n: r.reason for n, r in rows.items()} == dict(enumerate(BINLOG_LINES.values(), 1))
    assert (rows[1].change_position, rows[1].binlog_pos, rows[1].after.unit_price) == (
        3 * 10**16 + 154 * 10**5, 154, Decimal("19.99"))
    assert (rows[5].change_position, rows[5].binlog_row) == (3 * 10**16 + 154 * 10**5, None)
