"""Debezium's values decoded exactly: nanoseconds floored in integers, decimals never rounded unless declared.

A nanosecond count near 1.7e18 has more digits than a double holds: divided as a double it can land on the
next microsecond. A decimal with more fractional digits than its declared column keeps is quarantined with
its reason, unless the declaration says to round that column (`rounding: {column: half_up}`).
"""

import base64
import datetime as dt
import json
from decimal import Decimal

from pyspark.sql import functions as F

from lakehouse_assets.project import parse_project
from lakehouse_assets.runtime.spark import local_frame
from lakehouse_assets.sources.change_records import IMAGE_KEYS, bronze_cdc_schema, parse_cdc, survey_cdc
from lakehouse_assets.sources.debezium_encodings import Modes, decode, encodings_of

DECIMAL = "org.apache.kafka.connect.data.Decimal"


def _encodings(**columns: tuple[str, str | None, dict]):
    """Literal encodings of an after image: column -> (Connect type, semantic name, parameters)."""
    fields = [{"field": name, "type": kind, **({"name": semantic} if semantic else {}),
               **({"parameters": parameters} if parameters else {})}
              for name, (kind, semantic, parameters) in columns.items()]
    encodings = encodings_of(json.dumps({"fields": [{"field": "after", "fields": fields}]}))
    assert encodings is not None
    return encodings


def _decoded(spark, texts: list[str], type_name: str, encoding) -> list:
    df = local_frame(spark, [(t,) for t in texts], "t string")
    return [r[0] for r in df.select(decode(F.col("t"), type_name, encoding, Modes())).collect()]


def test_nano_timestamps_floor_to_the_exact_microsecond_on_both_sides_of_1970(spark):
    encoding = _encodings(ts=("int64", "io.debezium.time.NanoTimestamp", {}))["ts"]
    nanos = {
        "1732512345123456789": "2024-11-25 05:25:45.123456",
        "1732512345123456999": "2024-11-25 05:25:45.123456",  # as a double: ...457024 ns, the next microsecond
        "-1732512345123456001": "1915-02-06 18:34:14.876543",  # floored, not truncated toward 1970
        "-1732512345123457000": "1915-02-06 18:34:14.876543",
        "-1": "1969-12-31 23:59:59.999999",
        "0": "1970-01-01 00:00:00.000000",
    }
    df = local_frame(spark, [(t,) for t in nanos], "t string")
    decoded = df.select("t", F.date_format(decode(F.col("t"), "timestamp", encoding, Modes()),
                                           "yyyy-MM-dd HH:mm:ss.SSSSSS").alias("utc")).collect()
    assert {r.t: r.utc for r in decoded} == nanos  # the session's time zone is UTC


def test_nano_times_floor_to_the_microsecond(spark):
    encoding = _encodings(at=("int64", "io.debezium.time.NanoTime", {}))["at"]
    assert _decoded(spark, ["86399999999999", "999", "1000", "0"], "time", encoding) == [
        "23:59:59.999999", "00:00:00.000000", "00:00:00.000001", "00:00:00.000000"]


DECLARATION = """\
name: exact
cdc:
  shop:
    connector: postgresql
    database: shop
    schema: public
    tables:
      payments:
        primary_key: [id]
        columns: {id: long, amount: "decimal(10,2)", fee: "decimal(10,2)", credit: "decimal(10,2)"}
        rounding: {fee: half_up}
"""


def _unscaled(value: int) -> str:
    return base64.b64encode(value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big", signed=True)).decode()


def _payment(n: int, amount: int, fee: int, credit: int, amount_scale: str = "3") -> str:
    """A wrapped record as Debezium's PostgreSQL connector writes it: numerics as Connect Decimals whose
    scale is the source column's (amount and fee: numeric(10,3) upstream, credit: numeric(10,1))."""
    columns = [{"field": "id", "type": "int64"},
               {"field": "amount", "type": "bytes", "name": DECIMAL, "parameters": {"scale": amount_scale}},
               {"field": "fee", "type": "bytes", "name": DECIMAL, "parameters": {"scale": "3"}},
               {"field": "credit", "type": "bytes", "name": DECIMAL, "parameters": {"scale": "1"}}]
    image = {"type": "struct", "fields": columns, "optional": True}
    schema = {"type": "struct", "fields": [{**image, "field": "before"}, {**image, "field": "after"}]}
    after = {"id": n, "amount": _unscaled(amount), "fee": _unscaled(fee), "credit": _unscaled(credit)}
    payload = {"before": None, "after": after, "op": "c", "ts_ms": 1735725601000,
               "source": {"lsn": 1000 + n, "ts_ms": 1735725600000}}
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":"))


def _parsed(spark, texts: list[str]) -> dict[int, tuple]:
    info = parse_project(DECLARATION).cdc["payments"]
    day = dt.date(2025, 1, 1)
    lines = local_frame(
        spark, [(f"file:/landing/cdc/payments/date={day}/x.jsonl", n, day, text) for n, text in enumerate(texts, 1)],
        "source_file string, source_line int, landing_date date, payload string")
    schema = bronze_cdc_schema(info)
    rows = parse_cdc(info, lines, schema, heads=survey_cdc(lines, schema).heads).collect()
    return {r.source_line: (r.after.amount if r.after else None, r.after.fee if r.after else None,
                            r.after.credit if r.after else None, r.reason) for r in rows}


def test_a_decimal_with_more_scale_than_declared_is_quarantined_with_its_reason(spark):
    got = _parsed(spark, [_payment(1, 12345, 0, 0), _payment(2, -5, 0, 0), _payment(3, 12340, 0, 0),
                          _payment(4, 1234, 0, 0, amount_scale="2"), _payment(5, 0, 0, 1234)])
    assert got[1][3] == ("after.amount: decimal 12.345 has more scale than the declared decimal(10,2) "
                         "(declare rounding: {amount: half_up} to round it)")
    assert got[2][3] == ("after.amount: decimal -0.005 has more scale than the declared decimal(10,2) "
                         "(declare rounding: {amount: half_up} to round it)")
    # No digit lost: a trailing zero beyond the declared scale, a smaller scale, kept exactly.
    assert got[3] == (Decimal("12.34"), Decimal("0.00"), Decimal("0.00"), None)
    assert got[4] == (Decimal("12.34"), Decimal("0.00"), Decimal("0.00"), None)
    assert got[5] == (Decimal("0.00"), Decimal("0.00"), Decimal("123.40"), None)


def test_a_column_declared_rounding_half_up_is_kept_rounded_half_up(spark):
    got = _parsed(spark, [_payment(1, 0, 12345, 0), _payment(2, 0, -12345, 0), _payment(3, 0, 12344, 0),
                          _payment(4, 0, 5, 0), _payment(5, 0, 99999999994, 0)])
    assert [got[n][1] for n in range(1, 6)] == [Decimal("12.35"), Decimal("-12.35"), Decimal("12.34"),
                                                 Decimal("0.01"), Decimal("99999999.99")]
    assert [got[n][3] for n in range(1, 6)] == [None] * 5


def test_a_decimal_as_text_with_more_scale_than_declared_does_not_decode(spark):
    """`decimal.handling.mode` string or double: the value is text, judged the same way."""
    bare = _encodings(id=("int64", None, {}))["amount"]  # a column the record's schema does not describe
    assert _decoded(spark, ["12.345", "12.340", "1.2345E1", "-7", "1E+3"], "decimal(10,2)", bare) == [
        None, Decimal("12.34"), None, Decimal("-7.00"), Decimal("1000.00")]


def test_a_time_too_large_for_microseconds_is_kept_as_its_text(spark):
    """Milliseconds times 1000 past a long: kept as the text that came (a plain product would wrap around, or
    under ANSI mode fail the batch), as is a number past a long."""
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    encoding = _encodings(at=("int32", "io.debezium.time.Time", {}))["at"]
    assert _decoded(spark, ["36000000", "9223372036854776", "9223372036854775807", "99999999999999999999"], "time",
                    encoding) == ["10:00:00.000000", "9223372036854776", "9223372036854775807", "99999999999999999999"]


def test_a_timestamp_too_large_for_microseconds_decodes_to_null_and_fails_nothing(spark):
    """Epoch milliseconds past a long's microseconds: `timestamp_millis` raises in any mode, which would fail the
    batch; the value decodes to null (its record then gets its reason)."""
    encoding = _encodings(at=("int64", "io.debezium.time.Timestamp", {}))["at"]
    df = local_frame(spark, [(t,) for t in ["86400000", "9223372036854776", "-9223372036854776"]], "t string")
    decoded = df.select(F.date_format(decode(F.col("t"), "timestamp", encoding, Modes()), "yyyy-MM-dd HH:mm:ss"))
    assert [r[0] for r in decoded.collect()] == ["1970-01-02 00:00:00", None, None]


MODES = """\
name: modes
cdc:
  shop:
    connector: postgresql
    database: shop
    schema: public
    decimal_handling_mode: string
    time_precision_mode: connect
    tables:
      readings:
        primary_key: [id]
        columns: {id: long, amount: "decimal(10,2)", at: time, day: date, n: int}
"""
# 2025-01-01 is day 20089 since 1970-01-01; 10:00 is 36,000,000 ms since midnight.
READING = {"amount": "12.50", "at": 36000000, "day": 20089, "n": 1}
READINGS = {  # a bare record's after image (changes to READING) -> its reason, None when kept
    (): None,  # a decimal written without an exponent
    (("amount", "-7"),): None,
    (("amount", "1.5E+3"),): None,
    (("amount", "twelve"),): "after.amount is not a decimal(10,2): twelve",
    (("amount", "123456789.5"),): "after.amount is not a decimal(10,2): 123456789.5",  # 9 integer digits of 8
    (("at", 9223372036854776),): None,  # too large for microseconds: kept as its text
    (("day", 3000000000),): "after.day is not a date: 3000000000",  # days past an int
    (("day", "2025-13-45"),): "after.day is not a date: 2025-13-45",
    (("n", 2**31),): "after.n is not a int: 2147483648",
    (("n", "1.5"),): "after.n is not a int: 1.5",
}


def test_values_written_as_text_decode_or_give_their_reason_under_ansi_mode(spark):
    """`decimal.handling.mode: string`: a decimal written without an exponent (`12.50`, what the connector writes)
    decodes; a value that does not cast quarantines its record with the reason instead of failing the batch. The
    last record is wrapped with a schema that describes no image: decoded as the bare ones are."""
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    info = parse_project(MODES).cdc["readings"]
    day = dt.date(2025, 1, 1)

    def record(n: int, after: dict) -> dict:
        return {"before": None, "after": {"id": n, **READING, **after}, "op": "c", "ts_ms": 1735725601000,
                "source": {"lsn": 1000 + n, "ts_ms": 1735725600000}}

    texts = [json.dumps(record(n, dict(changes))) for n, changes in enumerate(READINGS, 1)]
    texts.append(json.dumps({"schema": {"type": "struct", "fields": []}, "payload": record(len(texts) + 1, {})}))
    lines = local_frame(
        spark, [(f"file:/landing/cdc/readings/date={day}/x.jsonl", n, day, text) for n, text in enumerate(texts, 1)],
        "source_file string, source_line int, landing_date date, payload string")
    schema = bronze_cdc_schema(info)
    rows = {r.source_line: r for r in parse_cdc(info, lines, schema).drop(IMAGE_KEYS).collect()}
    heads = survey_cdc(lines, schema).heads
    assert rows == {r.source_line: r for r in parse_cdc(info, lines, schema, heads=heads).drop(IMAGE_KEYS).collect()}
    assert {n: r.reason for n, r in rows.items()} == {**dict(enumerate(READINGS.values(), 1)), len(texts): None}
    assert [rows[n].after.amount for n in (1, 2, 3, len(texts))] == [
        Decimal("12.50"), Decimal("-7.00"), Decimal("1500.00"), Decimal("12.50")]
    assert (rows[1].after.at, rows[1].after.day) == ("10:00:00.000000", day)
    assert rows[6].after.at == "9223372036854776"
