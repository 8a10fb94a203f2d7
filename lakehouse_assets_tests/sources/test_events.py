"""Every landed line is either a typed event or a quarantine row with its reason."""

import datetime as dt
import json
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from lakehouse_assets.landing.reader import MAX_RECORD_BYTES, day_folders, list_landing_files, read_lines
from lakehouse_assets.runtime.spark import local_frame
from lakehouse_assets.sources.event_records import parse_events

from ..shop import SHOP

SOURCE = SHOP.events["events"]

GOOD = {
    "event_id": "e-1", "user_id": "u1", "session_id": "s1", "event_type": "purchase",
    "event_ts": "2025-01-01T10:00:00.250Z", "ip": "198.51.100.7",
    "properties": {"product_id": "p0001", "quantity": 2}, "price": 19.99,
}


def _line(**changes) -> str:
    event = {**GOOD, **changes}
    return json.dumps({k: v for k, v in event.items() if v is not ...}, ensure_ascii=False)


BAD_LINES = {
    '{"event_id": "e-2", "user_id": ': "malformed JSON",
    '["e-3", "page_view"]': "not a JSON object",
    "   ": "blank line",
    _line(event_id=...): "missing required field event_id",
    _line(user_id=""): "missing required field user_id",
    _line(event_type=None): "missing required field event_type",
    _line(event_ts=...): "missing required field event_ts",
    _line(event_ts="yesterday"): "event_ts is not a timestamp: yesterday",
    _line(price="twelve"): "price is not a decimal(12,2): twelve",
    _line(properties="page=/deals"): "properties is not a JSON object: page=/deals",
    _line(ip="x" * MAX_RECORD_BYTES): f"record larger than {MAX_RECORD_BYTES} bytes",
    # Bytes, not characters: 3 bytes each in UTF-8, a third of the limit in characters.
    _line(ip="\u20ac" * (MAX_RECORD_BYTES // 3 + 1)): f"record larger than {MAX_RECORD_BYTES} bytes",
    # A map field that is not an object makes the first (typed) parse refuse the line; the text parse names it.
    _line(properties=[]): "properties is not a JSON object: []",
    _line(properties=""): "properties is not a JSON object: ",
    _line(properties=7): "properties is not a JSON object: 7",
    # Two things wrong: the first field in declared order is named, whichever parse found it.
    _line(event_ts="soon", properties="x"): "event_ts is not a timestamp: soon",
    _line(price="free", properties={"page": "/"}): "price is not a decimal(12,2): free",
    # A key given twice: its last value is the field's.
    _line(event_ts="soon")[:-1] + ', "event_ts": "later"}': "event_ts is not a timestamp: later",
}


@pytest.fixture
def landed(tmp_path):
    folder = tmp_path / "events" / "date=2025-01-01"
    folder.mkdir(parents=True)
    good2 = _line(event_id="e-9", event_type="page_view", price=None, event_ts="2025-01-01T23:59:59+01:00",
                  properties={"page": "/", "cart": {"items": [1, 2]}, "page ": None})
    good3 = _line(event_id="e-10", event_type="page_view", price=None, properties=None)
    twice = _line(event_id="e-11", event_ts="never")[:-1] + ', "event_ts": "2025-01-01T10:00:00Z"}'
    lines = [_line(), *BAD_LINES, good2, good3, twice]
    (folder / "part-0.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path, lines


def test_each_bad_line_is_quarantined_with_its_reason_and_good_lines_are_typed(spark, landed):
    root, lines = landed
    files, refused = list_landing_files(spark, day_folders(root.as_uri(), "events", dt.date(2025, 1, 1),
                                                           dt.date(2025, 1, 2)), f"{root.as_uri()}/events")
    assert len(files) == 1 and refused == {}
    read = read_lines(spark, files)
    checked = parse_events(SOURCE, read)
    events, rejects = checked.where("reason IS NULL"), checked.where("reason IS NOT NULL")

    rejected = {r.source_line: r for r in rejects.collect()}
    expected = {n: reason for n, (line, reason) in enumerate(BAD_LINES.items(), start=2)}
    assert {n: r.reason for n, r in rejected.items()} == expected
    assert all(rejected[n].payload == lines[n - 1] for n in expected), "raw text kept as landed"
    assert {r.landing_date for r in rejected.values()} == {dt.date(2025, 1, 1)}

    good = sorted(events.collect(), key=lambda r: r.source_line)
    n = len(lines)
    assert [(r.event_id, r.source_line) for r in good] == [("e-1", 1), ("e-9", n - 2), ("e-10", n - 1), ("e-11", n)]
    first, second, third, fourth = good
    assert first.event_ts == dt.datetime(2025, 1, 1, 10, 0, 0, 250_000)  # session time zone is UTC
    assert first.price == Decimal("19.99")
    assert first.properties == {"product_id": "p0001", "quantity": "2"}
    assert second.event_ts == dt.datetime(2025, 1, 1, 22, 59, 59) and second.price is None
    assert second.properties == {"page": "/", "cart": '{"items":[1,2]}', "page ": None}  # nested values as JSON text
    assert third.properties is None
    assert fourth.event_ts == dt.datetime(2025, 1, 1, 10, 0)

    # Records in = records kept + records quarantined.
    assert read.count() == len(lines) == len(good) + len(rejected)


def test_the_session_runs_with_ansi_mode_on(spark):
    """Spark 4's default, which the project keeps: a cast of text that does not parse raises. The tests of bad
    values (here, in test_cdc.py, test_debezium.py) are run under it: each shows a value read without raising."""
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    with pytest.raises(Exception, match="CAST_INVALID_INPUT"):
        spark.sql("SELECT CAST('twelve' AS INT)").collect()


TYPED = """\
name: typed
events:
  readings:
    fields: {id: string, at: timestamp, n: int, big: long, ratio: double, day: date, amount: "decimal(5,2)"}
    key: id
    timestamp: at
"""
TYPED_GOOD = {"id": "r-1", "at": "2025-01-01T10:00:00Z", "n": 7, "big": 2**40, "ratio": 0.5, "day": "2025-01-01",
              "amount": 123.45}
# One value of each type that a plain cast (ANSI mode) would raise on, failing the whole file: each quarantines
# its own line, with its reason.
TYPED_BAD = {
    ("n", "1.5"): "n is not a int: 1.5",  # not truncated to 1
    ("n", 2**31): "n is not a int: 2147483648",
    ("big", "12x"): "big is not a bigint: 12x",
    ("big", 2**63): "big is not a bigint: 9223372036854775808",
    ("ratio", "half"): "ratio is not a double: half",
    ("day", "2025-13-45"): "day is not a date: 2025-13-45",
    ("day", ""): "day is not a date: ",
    ("amount", 1234.5): "amount is not a decimal(5,2): 1234.5",  # more integer digits than declared
    ("amount", "12,50"): "amount is not a decimal(5,2): 12,50",
    ("at", "2025-02-30T10:00:00Z"): "at is not a timestamp: 2025-02-30T10:00:00Z",  # the quick `...Z` reading
    ("at", "2025-01-01 25:00"): "at is not a timestamp: 2025-01-01 25:00",
    ("at", "9999999999999999999"): "at is not a timestamp: 9999999999999999999",  # microseconds past a long
}


def test_one_value_that_does_not_cast_quarantines_its_line_only_under_ansi_mode(spark, tmp_path):
    """Every typed value is read with `try_cast` / `try_to_timestamp`: a value that does not parse or does not
    fit is null, its line quarantined with the reason, the other lines kept. The file lies outside any `date=`
    folder: its landing date is null, not an error either."""
    from lakehouse_assets.project import parse_project

    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    source = parse_project(TYPED).events["readings"]
    folder = tmp_path / "readings"
    folder.mkdir()
    lines = [json.dumps(TYPED_GOOD),
             *(json.dumps({**TYPED_GOOD, "id": f"r-{n}", field: value}) for n, (field, value) in enumerate(TYPED_BAD, 2)),
             json.dumps({**TYPED_GOOD, "id": "r-last", "at": "1735725600123"})]
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n")
    files, _ = list_landing_files(spark, [f"file:{folder}"], f"file:{folder}")
    read = read_lines(spark, files)
    rows = sorted(parse_events(source, read).collect(), key=lambda r: r.source_line)

    assert {r.source_line: r.reason for r in rows if r.reason} == dict(enumerate(TYPED_BAD.values(), 2))
    kept = [r for r in rows if r.reason is None]
    assert [(r.source_line, r.id) for r in kept] == [(1, "r-1"), (len(lines), "r-last")]
    assert (kept[0].n, kept[0].big, kept[0].ratio, kept[0].day, kept[0].amount) == (
        7, 2**40, 0.5, dt.date(2025, 1, 1), Decimal("123.45"))
    assert kept[1].at == dt.datetime(2025, 1, 1, 10, 0, 0, 123_000)
    assert {r.landing_date for r in rows} == {None}
    # Records in = records kept + records quarantined.
    assert read.count() == len(lines) == len(kept) + len(TYPED_BAD)


def test_no_files_gives_empty_frames_not_an_error(spark, tmp_path):
    folders = day_folders(tmp_path.as_uri(), "events", dt.date(2025, 1, 1), dt.date(2025, 1, 3))
    assert list_landing_files(spark, folders, f"{tmp_path.as_uri()}/events") == ([], {})
    assert parse_events(SOURCE, read_lines(spark, [])).count() == 0


def test_a_file_read_in_many_splits_keeps_every_line_with_its_number(spark, tmp_path):
    """Large files are read in splits by several tasks, never whole; line numbers still count from the file's start."""
    folder = tmp_path / "events" / "date=2025-01-01"
    folder.mkdir(parents=True)
    lines = [json.dumps({"n": n, "pad": "x" * (n % 97)}) for n in range(1, 20_001)]
    lines[4_000] = ""  # a blank line is a line
    (folder / "big.jsonl").write_text("\r\n".join(lines) + "\r\n")  # CRLF, as some exporters write
    (folder / "small.jsonl").write_text('{"n": 1}\n{"n": 2}')  # no final newline
    (folder / "empty.jsonl").write_text("")
    files, _ = list_landing_files(spark, [f"file:{folder}"], f"file:{folder.parent}")
    assert len(files) == 3
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(64 * 1024))  # about 20 splits of big.jsonl
    try:
        rows = read_lines(spark, files).collect()
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous)
    big = sorted((r.source_line, r.payload) for r in rows if r.source_file.endswith("big.jsonl"))
    assert big == list(enumerate(lines, start=1))
    small = sorted((r.source_line, r.payload) for r in rows if r.source_file.endswith("small.jsonl"))
    assert small == [(1, '{"n": 1}'), (2, '{"n": 2}')]
    assert len(rows) == len(lines) + 2


def test_timestamps_in_utc_read_as_spark_reads_them_with_their_zone(spark):
    """The quicker reading of `...Z` timestamps gives what Spark's own parse of the text gives (`try_to_timestamp`:
    null where the text is no timestamp), and any other text goes to that parse."""
    from pyspark.sql import functions as F

    from lakehouse_assets.landing.reader import iso_timestamp, to_timestamp

    texts = ["2025-01-01T10:00:00.250Z", "2025-01-01 10:00:00Z", "2025-01-01T10:00Z", "2025-01-01T23:59:59.123456Z",
             "2025-01-01T10:00:00.123456789Z", "2025-01-01T10:00:00+01:00Z", "2025-01-01Z", "2025-01-01T10:00:00z",
             "2025-01-01T10:00:00 Z", "2025-02-30T10:00:00Z", "2025-01-01T25:00:00Z", "Z", "", "2025-01-01T10:00:00",
             "2025-01-01T10:00:00-05:00", "2025-01-01T10:00:00.5+05:30", " 2025-01-01T10:00:00Z", None]
    rows = local_frame(spark, [(t,) for t in texts], "text string").select(
        "text", iso_timestamp(F.col("text")).alias("quick"), F.try_to_timestamp("text").alias("spark")).collect()
    assert [(r.text, r.quick) for r in rows] == [(r.text, r.spark) for r in rows]
    assert sum(r.quick is not None for r in rows) >= 8

    # A field's typing: numbers since the epoch (s, ms, us by magnitude), any other text as above.
    epoch = dt.datetime(1970, 1, 1)
    numbers = {"1735725600": epoch + dt.timedelta(seconds=1735725600),
               "1735725600123": epoch + dt.timedelta(milliseconds=1735725600123),
               "1735725600123456": epoch + dt.timedelta(microseconds=1735725600123456),
               "-5": epoch - dt.timedelta(seconds=5), "1.5": epoch + dt.timedelta(seconds=1.5)}
    typed = local_frame(spark, [(t,) for t in [*texts, *numbers]], "text string").select(
        "text", to_timestamp(F.col("text")).alias("typed"), F.try_to_timestamp("text").alias("spark")).collect()
    assert [(r.text, r.typed) for r in typed] == [(r.text, numbers.get(r.text, r.spark)) for r in typed]


TRICKY_LINES = [
    _line(price=1.50), _line(price=1e2), _line(price=-0.0), _line(price=12345678901234567890), _line(price=True),
    _line(ip={"a": [1, 2.50, None]}), _line(ip=[1, "x"]), _line(ip=False), _line(ip=None), _line(ip="caf\u00e9 \U0001F600"),
    json.dumps({**GOOD, "ip": "a/b \"q\" \\ \t"}), json.dumps(GOOD, ensure_ascii=True).replace("198", "\\u0031\\u0039\\u0038"),
    json.dumps(GOOD, separators=(",", ":")), json.dumps(GOOD, indent=None, separators=(" , ", " : ")),
    "\t" + json.dumps(dict(reversed(list(GOOD.items())))) + "   ",
    # Numbers as other writers write them: text as Spark writes it back (1.5E+2 -> 150.0), not as landed.
    _line(ip=...)[:-1] + ', "ip": 1.50E+2}', _line()[:-1] + ', "email": -0.0e-3}',
    _line(ip=...)[:-1] + ', "ip": {"b" : 1.0 , "a":[ 1E400, 007 ]}}', _line(ip=...)[:-1] + ', "ip": 00.5}',
    _line(properties={}), _line(properties={"a": None, "b": {"c": [1]}, "d": 1.0, "e": "\u00e9"}),
    _line(properties=None), _line(extra_field=1, Extra={"x": 1}, another="y"),
    # The reader leaves these to from_json: a map key twice, single quotes, NaN, text after the object, bad UTF-8.
    _line(properties=...)[:-1] + ', "properties": {"a": "1", "a": "2"}}', _line().replace('"e-1"', "'e-1'"),
    _line()[:-1] + ', "n": NaN}',
    _line() + " x", _line() + "}", _line()[:-1], "null", "5", '"text"', "[]", "", "{}", '{"event_id": "e-1"}',
    _line(event_id="\ud800"),
]


def test_lines_the_reader_parses_judge_as_from_json_judges_them(spark, tmp_path):
    """The line reader's own parse (from the bytes, once) gives every column and reason that Spark's `from_json`
    gives on the same lines, and the same new keys; the lines it cannot take exactly are left to `from_json`."""
    from lakehouse_assets.sources.event_records import new_event_keys, read_json_schema

    folder = tmp_path / "events" / "date=2025-01-01"
    folder.mkdir(parents=True)
    body = "\n".join([_line(), *BAD_LINES, *TRICKY_LINES]).encode("utf-8", "surrogatepass")
    body = body.replace(b"\xed\xa0\x80", b"\xff\xfe")  # bytes that are not UTF-8
    (folder / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + body.replace(b"\n", b"\r\n") + b"\r\n")  # BOM, CRLF
    files, _ = list_landing_files(spark, [f"file:{folder}"], f"file:{folder.parent}")
    table = T.StructType([*(T.StructField(n, t) for n, t in SOURCE.fields.items())])

    def judged(json):
        parsed = parse_events(SOURCE, read_lines(spark, files, json=json))
        rows = parsed.select("*", new_event_keys(SOURCE, table).alias("new")).drop("_top_keys").collect()
        return sorted((r.asDict() for r in rows), key=lambda r: r["source_line"])

    read = read_lines(spark, files, json=read_json_schema(SOURCE))
    assert read.where("_json_ok").count() >= len(BAD_LINES) // 2 + len(TRICKY_LINES) // 2
    assert read.where("NOT _json_ok").count() >= 10
    fast, slow = judged(read_json_schema(SOURCE)), judged(None)
    assert len(fast) == len(slow) == 1 + len(BAD_LINES) + len(TRICKY_LINES)
    for a, b in zip(fast, slow, strict=True):
        assert a == b
    assert [r["new"] for r in fast if r["new"]] == [["extra_field", "another"]]
    assert sum(r["reason"] is None for r in fast) >= 15


@pytest.mark.parametrize("split_bytes", [1, 2, 3, 5, 8, 13, 21, 1 << 20])
def test_the_line_reader_gives_each_line_once_whatever_the_splits(spark, tmp_path, split_bytes):
    """Splits that start anywhere (on a newline, just after one, inside a CRLF, inside a multi-byte character):
    every line is read once, by the split its first byte is in, with its number from the file's start; a
    compressed file is read whole; a file's byte order mark and a line's final CR are not part of the line."""
    import gzip

    folder = tmp_path / "events" / "date=2025-01-01"
    folder.mkdir(parents=True)
    lines = ['{"a": 1}', "", "\u20ac\u20ac", "", "", '{"b": "x y"}', "z", "\r", ""]
    (folder / "plain.jsonl").write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\n")
    (folder / "packed.jsonl.gz").write_bytes(gzip.compress("\n".join(lines[:-1]).encode()))
    (folder / "empty.jsonl").write_bytes(b"")
    files, _ = list_landing_files(spark, [f"file:{folder}"], f"file:{folder.parent}")
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(split_bytes))
    try:
        rows = read_lines(spark, files).collect()
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous)
    read = {name: sorted((r.source_line, r.payload) for r in rows if r.source_file.endswith(name))
            for name in ("plain.jsonl", "packed.jsonl.gz", "empty.jsonl")}
    # "\r" then "\r\n": the line is a lone CR, its CRLF's CR dropped; the file's last line is empty, then "\n".
    expected = [*lines[:-2], "\r", ""]
    assert read["plain.jsonl"] == list(enumerate(expected, start=1))
    assert read["packed.jsonl.gz"] == list(enumerate([*lines[:-2], ""], start=1))  # its last line a lone CR
    assert read["empty.jsonl"] == []
    assert {r.landing_date for r in rows} == {dt.date(2025, 1, 1)}
