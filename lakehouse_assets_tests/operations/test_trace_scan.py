"""The independent trace scan: every file of the warehouse, landing zone and capture staging searched for a person.

No Spark: the files are written here, with pyarrow, gzip and by hand, as the writers of the lake leave them.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import io
import json
import os
import shutil
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakehouse_assets.operations.trace_scan import (
    LANDING,
    STAGING,
    WAREHOUSE,
    Needle,
    StoredFile,
    TraceReport,
    scan_file,
    search_bytes,
    search_parquet,
    trace_scan,
    unescape_json,
)
from lakehouse_assets.settings import Settings

KEY = "trace-scan-test-key-of-at-least-32-bytes-0123456789"


@dataclass(frozen=True)
class Person:
    subject: str
    email: str
    name: str

    @property
    def hashed(self) -> str:
        return hmac.new(KEY.encode(), self.email.encode(), hashlib.sha256).hexdigest()

    def identifiers(self) -> dict[str, str]:
        return {"subject": self.subject, "e-mail": self.email, "name": self.name, "e-mail keyed hash": self.hashed}


ANA = Person("tenant/ana-17", "ana@example.com", "Zoë Ana")
BOB = Person("tenant/bob-9", "bob@example.org", "Bob Ray")
OTHERS = [f"user{i:04d}@example.net" for i in range(300)]


def parquet(path: Path, table: pa.Table, **options) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, **options)


def text(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)


def _avro_long(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _avro_bytes(b: bytes) -> bytes:
    return _avro_long(len(b)) + b


def avro_manifest(paths_and_bounds: list[tuple[str, bytes]]) -> bytes:
    """An Avro container file as Iceberg writes manifests: deflated blocks of (file_path, lower_bound) records."""
    schema = json.dumps({"type": "record", "name": "manifest_entry", "fields": [
        {"name": "file_path", "type": "string"}, {"name": "lower_bound", "type": "bytes"}]}).encode()
    sync = uuid.uuid4().bytes
    header = (b"Obj\x01" + _avro_long(2) + _avro_bytes(b"avro.schema") + _avro_bytes(schema)
              + _avro_bytes(b"avro.codec") + _avro_bytes(b"deflate") + _avro_long(0) + sync)
    records = b"".join(_avro_bytes(p.encode()) + _avro_bytes(b) for p, b in paths_and_bounds)
    deflater = zlib.compressobj(wbits=-15)
    block = deflater.compress(records) + deflater.flush()
    return header + _avro_long(len(paths_and_bounds)) + _avro_long(len(block)) + block + sync


def build(home: Path, person: Person) -> dict[str, set[tuple[str, str]]]:
    """A lake holding `person` in every place a writer can leave them; {file inside home: {(identifier, how)}}
    each place must be found by."""
    wh, landing, staging = home / "warehouse" / "lake", home / "landing", home / "capture" / "pg" / "staging"
    users = wh / "silver_users"
    emails = OTHERS[:150] + [person.email] + OTHERS[150:]
    parquet(users / "data" / "00000-snappy.parquet",
            pa.table({"email": pa.array(emails * 3).dictionary_encode(), "n": pa.array(range(len(emails) * 3))}),
            compression="snappy")
    nested = pa.table({
        "contact": pa.array([{"email": e, "age": 30} for e in emails]),
        "attributes": pa.array([[("email", e), ("tier", "gold")] for e in emails], pa.map_(pa.string(), pa.string())),
    })
    parquet(users / "data" / "00001-zstd.parquet", nested, compression="zstd")
    # Written by a write that crashed before its commit: no manifest names it.
    parquet(users / "data" / "00009-orphan-of-a-crashed-write.parquet",
            pa.table({"user_key": [person.hashed, "0" * 64]}), compression="zstd")
    # A quarantined raw line, cut off and with the e-mail JSON-escaped.
    cut_line = json.dumps({"user": person.email, "seq": 12345})[:-4].replace("@", "\\u0040")
    parquet(wh / "bronze_events_quarantine" / "data" / "00000-q.parquet",
            pa.table({"raw_line": [cut_line, '{"user":"someone@else.net"}'], "reason": ["not JSON", "ok"]}),
            compression="zstd")
    text(users / "metadata" / "00003-5f1c.metadata.json",
         json.dumps({"snapshots": [{"summary": {"note": f"loaded {person.email.upper()}"}}]}))
    text(users / "metadata" / "5f1c-m0.avro",
         avro_manifest([("data/00000-snappy.parquet", person.email.encode()), ("data/x.parquet", b"a@b.c")]))
    quoted = person.email.replace("@", "%40")
    parquet(wh / "by_email" / "data" / f"email={quoted}" / "00000.parquet", pa.table({"n": [1, 2, 3]}))
    parquet(wh / "by_email" / "data" / "email=others" / "00000.parquet", pa.table({"e": OTHERS}))  # nobody

    day = landing / "events" / "date=2025-01-02"
    escaped = json.dumps({"user": person.email}).replace("@", "\\u0040")
    text(day / "events-1.jsonl.gz", gzip.compress(f'{{"user":"x@y.z"}}\n{escaped}\n'.encode()))
    slashed = person.subject.replace("/", "\\/")  # as some JSON writers spell a slash
    text(day / "events-2.jsonl", f'{{"user": "{slashed}"}}\n' + json.dumps({"name": person.name}) + "\n")
    text(day / "others.jsonl", "".join(json.dumps({"user": e}) + "\n" for e in OTHERS))  # nobody
    # A file cut off while it was copied: the gzip stops mid-stream; what arrived is searched.
    filler = "".join(json.dumps({"user": e, "seq": i}) + "\n" for i, e in enumerate(OTHERS * 20))
    whole = gzip.compress((json.dumps({"user": person.email}) + "\n" + filler).encode())
    text(landing / "events" / "date=2025-01-03" / "cut.jsonl.gz", whole[: len(whole) // 2])
    partly_escaped = "".join(f"\\u{ord(c):04x}" if i % 2 else c for i, c in enumerate(person.email))
    text(staging / ".part-0001.jsonl", json.dumps({"after": {"id": 1}})[:-2] + f', "email": "{partly_escaped}"}}}}\n')
    return {
        "warehouse/lake/silver_users/data/00000-snappy.parquet": {("e-mail", "parquet")},
        "warehouse/lake/silver_users/data/00001-zstd.parquet": {("e-mail", "parquet")},
        "warehouse/lake/silver_users/data/00009-orphan-of-a-crashed-write.parquet": {("e-mail keyed hash", "parquet")},
        "warehouse/lake/bronze_events_quarantine/data/00000-q.parquet": {("e-mail", "parquet")},
        "warehouse/lake/silver_users/metadata/00003-5f1c.metadata.json": {("e-mail", "raw")},
        "warehouse/lake/silver_users/metadata/5f1c-m0.avro": {("e-mail", "avro")},
        f"warehouse/lake/by_email/data/email={quoted}/00000.parquet": {("e-mail", "name")},
        "landing/events/date=2025-01-02/events-1.jsonl.gz": {("e-mail", "gunzip")},
        "landing/events/date=2025-01-02/events-2.jsonl": {("subject", "raw"), ("name", "raw")},
        "landing/events/date=2025-01-03/cut.jsonl.gz": {("e-mail", "gunzip")},
        "capture/pg/staging/.part-0001.jsonl": {("e-mail", "raw")},
    }


def found_by_file(report: TraceReport, home: Path) -> dict[str, set[tuple[str, str]]]:
    found: dict[str, set[tuple[str, str]]] = {}
    for hit in report.hits:
        found.setdefault(str(Path(hit.file).relative_to(home)), set()).add((hit.identifier, hit.how))
    return found


def test_every_place_a_person_can_be_left_is_found_and_named_then_nothing_once_they_are_gone(tmp_path):
    settings = Settings(home=tmp_path)
    expected = build(tmp_path, ANA)
    report = trace_scan(settings, ANA.identifiers())

    found = found_by_file(report, tmp_path)
    assert set(found) == set(expected)  # every place, and nobody else's file
    for file, ways in expected.items():
        assert ways <= found[file], file
    assert report.files_scanned == {WAREHOUSE: 8, LANDING: 4, STAGING: 1}
    assert not report.unreadable and not report.proven
    areas = {str(Path(h.file).relative_to(tmp_path)).split("/")[0]: h.area for h in report.hits}
    assert areas == {"warehouse": WAREHOUSE, "landing": LANDING, "capture": STAGING}
    forms = {(str(Path(h.file).relative_to(tmp_path)), h.form) for h in report.hits}
    assert {("warehouse/lake/silver_users/data/00001-zstd.parquet", "column contact.email"),
            ("warehouse/lake/silver_users/data/00001-zstd.parquet", "column attributes.value"),
            ("warehouse/lake/bronze_events_quarantine/data/00000-q.parquet", "column raw_line"),
            ("landing/events/date=2025-01-02/events-1.jsonl.gz", "decoded text"),
            ("landing/events/date=2025-01-02/events-2.jsonl", "json \\/"),
            ("landing/events/date=2025-01-02/events-2.jsonl", "json \\u escapes"),
            ("capture/pg/staging/.part-0001.jsonl", "decoded text")} <= forms
    assert {h.identifier for h in report.hits} == set(ANA.identifiers())  # the caller's names, never the values

    for area in ("warehouse", "landing", "capture"):
        shutil.rmtree(tmp_path / area)
    build(tmp_path, BOB)  # the same files, holding someone else
    after = trace_scan(settings, ANA.identifiers())
    assert after.proven and after.hits == [] and after.files_scanned == report.files_scanned
    assert found_by_file(trace_scan(settings, BOB.identifiers()), tmp_path).keys() == {
        f.replace(ANA.email.replace("@", "%40"), BOB.email.replace("@", "%40")) for f in expected}


def test_a_compressed_parquet_page_hides_the_value_from_a_byte_search_but_not_from_reading_the_columns(tmp_path):
    emails = OTHERS[:150] + [ANA.email] + OTHERS[150:]
    buffer = io.BytesIO()
    pq.write_table(pa.table({"email": pa.array(emails * 4).dictionary_encode()}), buffer, compression="zstd",
                   write_statistics=False)
    data, needles = buffer.getvalue(), [Needle.of("e-mail", ANA.email)]

    assert ANA.email.encode() not in data and search_bytes(data, needles) == []
    assert [(n.name, form) for n, form in search_parquet(data, needles)] == [("e-mail", "column email")]
    report = TraceReport()
    scan_file(StoredFile("x.parquet", "x.parquet", lambda: data), WAREHOUSE, data, needles, report)
    assert [(h.how, h.form) for h in report.hits] == [("parquet", "column email")]


def test_a_parquet_file_cut_before_its_footer_is_unreadable_and_proves_nothing(tmp_path):
    settings = Settings(home=tmp_path)
    buffer = io.BytesIO()
    pq.write_table(pa.table({"email": [ANA.email] + OTHERS}), buffer, compression="zstd", write_statistics=False)
    text(tmp_path / "warehouse" / "lake" / "t" / "data" / "00000-crashed.parquet", buffer.getvalue()[:200])

    report = trace_scan(settings, {"e-mail": ANA.email})
    assert report.hits == [] and not report.proven
    assert list(report.unreadable) == [str(tmp_path / "warehouse/lake/t/data/00000-crashed.parquet")]


def test_json_escapes_are_decoded_however_deep_and_however_mixed():
    assert unescape_json('ana\\u0040example.com') == "ana@example.com"
    assert unescape_json('{\\"u\\":\\"ana\\\\u0040ex\\/ample\\"}') == '{"u":"ana@ex/ample"}'  # escaped twice
    assert unescape_json("\\ud83d\\ude00 Zo\\u00EB") == "😀 Zoë"  # a surrogate pair is one character
    needles = [Needle.of("name", "Zoë 😀"), Needle.of("id", "42")]
    found = search_bytes(b'{"n":"zo\\u00cb \\ud83d\\ude00","c":142}', needles)
    assert [(n.name, form) for n, form in found] == [("id", "utf-8"), ("name", "decoded text")]
    assert [(n.name, form) for n, form in search_bytes("ZOË 😀".encode(), needles)] == [
        ("name", "decoded text")]  # a non-ASCII letter in another case
    ints = io.BytesIO()
    pq.write_table(pa.table({"c": [142, 7]}), ints)
    assert search_parquet(ints.getvalue(), needles) == []  # a number matches a whole value only


def test_a_real_iceberg_table_its_data_file_and_the_bounds_in_its_deflated_manifest(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    settings = Settings(home=tmp_path)
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=settings.warehouse)
    catalog.create_namespace("lake")
    table = catalog.create_table("lake.users", schema=pa.schema([("email", pa.string()), ("n", pa.int64())]))
    table.append(pa.table({"email": [ANA.email] + OTHERS, "n": list(range(len(OTHERS) + 1))}))

    report = trace_scan(settings, {"e-mail": ANA.email})
    manifests = [h for h in report.hits if h.file.endswith("-m0.avro")]
    assert manifests and all(h.how == "avro" for h in manifests)  # the manifest's bytes are deflated
    assert ANA.email.encode() not in Path(manifests[0].file).read_bytes()
    assert {h.how for h in report.hits if h.file.endswith(".parquet")} >= {"parquet"}
    assert report.files_scanned[WAREHOUSE] == sum(len(f) for _, _, f in os.walk(tmp_path / "warehouse"))


def test_verify_only_prints_the_report_and_fails_while_any_trace_is_left(tmp_path, monkeypatch, capsys):
    from lakehouse_assets.cli import main

    build(tmp_path, ANA)
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    monkeypatch.setenv("LAKEHOUSE_PII_KEY", KEY)
    args = ["forget", "--verify-only", "--subject", ANA.subject, "--also", ANA.email, "--also", ANA.name]
    assert main(args) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["proven"] and report["files_scanned"] == {"warehouse": 8, "landing": 4, "staging": 1}
    orphan = str(tmp_path / "warehouse/lake/silver_users/data/00009-orphan-of-a-crashed-write.parquet")
    found = {"file": orphan, "area": "warehouse", "identifier": "also 1 keyed hash", "form": "column user_key",
             "how": "parquet", "changed": os.stat(orphan).st_ctime}
    assert found in report["hits"]
    assert {h["identifier"] for h in report["hits"]} == {"subject", "also 1", "also 2", "also 1 keyed hash"}

    for area in ("warehouse", "landing", "capture"):
        shutil.rmtree(tmp_path / area)
    build(tmp_path, BOB)
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["hits"] == []


def test_verify_only_without_a_pii_key_searches_the_values_and_creates_no_key(tmp_path, monkeypatch, capsys):
    from lakehouse_assets.cli import main

    build(tmp_path, ANA)
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    monkeypatch.delenv("LAKEHOUSE_PII_KEY", raising=False)
    assert main(["forget", "--verify-only", "--subject", ANA.email]) == 1
    assert {h["identifier"] for h in json.loads(capsys.readouterr().out)["hits"]} == {"subject"}
    assert not (tmp_path / "secrets").exists()
    assert main(["forget", "--subject", ANA.email, "--also", "x@y.z"]) == 2  # --also only goes with --verify-only


def test_landing_and_warehouse_on_s3_are_listed_and_read_object_by_object(tmp_path, s3_server):
    import boto3

    prefix = f"trace-{uuid.uuid4().hex[:8]}"
    settings = Settings.from_env(home=tmp_path, landing=f"s3://raw/{prefix}", warehouse=f"s3://lake/{prefix}")
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint_url, aws_access_key_id=s3_server.access_key,
                      aws_secret_access_key=s3_server.secret_key, region_name="us-east-1")
    escaped = json.dumps({"user": ANA.email}).replace("@", "\\u0040")
    s3.put_object(Bucket="raw", Key=f"{prefix}/events/date=2025-01-02/a.jsonl.gz", Body=gzip.compress(escaped.encode()))
    s3.put_object(Bucket="raw", Key=f"{prefix}/events/date=2025-01-02/b.jsonl", Body=b'{"user":"x@y.z"}\n')
    buffer = io.BytesIO()
    pq.write_table(pa.table({"email": pa.array([ANA.email] + OTHERS).dictionary_encode()}), buffer,
                   compression="zstd", write_statistics=False)
    s3.put_object(Bucket="lake", Key=f"{prefix}/lake/users/data/00000.parquet", Body=buffer.getvalue())

    report = trace_scan(settings, {"e-mail": ANA.email})
    assert report.files_scanned == {WAREHOUSE: 1, LANDING: 2, STAGING: 0}
    assert {(h.file, h.how) for h in report.hits} == {
        (f"s3://raw/{prefix}/events/date=2025-01-02/a.jsonl.gz", "gunzip"),
        (f"s3://lake/{prefix}/lake/users/data/00000.parquet", "parquet")}


def test_an_empty_identifier_is_refused(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        trace_scan(Settings(home=tmp_path), {"subject": ""})


def test_a_string_column_holding_bytes_that_are_not_utf8_is_read_and_searched(tmp_path):
    # A raw line kept as it landed: Parquet's string column holds whatever bytes arrived.
    raw = pa.array([b"\xb6\xff broken line of " + ANA.email.encode(), b"fine"], pa.binary()).view(pa.string())
    path = tmp_path / "raw.parquet"
    parquet(path, pa.table({"payload": raw}))
    report = TraceReport()
    scan_file(StoredFile(str(path), "raw.parquet", path.read_bytes), WAREHOUSE, path.read_bytes(),
              [Needle.of("e-mail", ANA.email)], report)
    assert not report.unreadable, report.unreadable
    assert {(h.identifier, h.how) for h in report.hits} >= {("e-mail", "parquet")}


def test_a_number_is_found_where_an_id_column_or_field_holds_it_never_as_digits_of_other_values(tmp_path):
    """A database's integer key as the person's id: `28` is in `128`, `2028-01-28`, a line number, an order's
    number, an Iceberg field id; none of those is the person, and each place that holds the id is found."""
    settings, ids = Settings(home=tmp_path), ("account_id", "id")
    wh, day = tmp_path / "warehouse" / "lake", tmp_path / "landing" / "cdc" / "accounts" / "date=2025-01-28"
    image = pa.struct([("id", pa.int64()), ("name", pa.string())])

    def bronze(account: int, order: int) -> pa.Table:
        payload = json.dumps({"after": {"id": account, "name": f"User {order}"}, "source": {"txId": order}})
        return pa.table({"key": [json.dumps({"id": account})], "after": pa.array([{"id": account, "name": "x"}], image),
                         "payload": [payload], "source_line": pa.array([order], pa.int32())})

    parquet(wh / "bronze_cdc_accounts" / "data" / "others.parquet", bronze(128, 28))
    parquet(wh / "bronze_cdc_accounts" / "data" / "theirs.parquet", bronze(28, 5))
    parquet(wh / "silver_orders" / "data" / "others.parquet",
            pa.table({"order_id": [28, 2028], "account_id": [128, 7], "note": ["User 28", "2028-01-28"],
                      "amount": pa.array([28, 1], pa.decimal128(12, 2))}))
    parquet(wh / "silver_orders" / "data" / "theirs.parquet",
            pa.table({"order_id": [5], "account_id": pa.array([28], pa.decimal128(20, 0)), "note": ["x"]}))
    parquet(wh / "by_account" / "data" / "account_id=28" / "00000.parquet", pa.table({"n": [1]}))
    parquet(wh / "by_account" / "data" / "account_id=128" / "00000.parquet", pa.table({"n": [1]}))
    text(wh / "silver_orders" / "metadata" / "00001-a.metadata.json", json.dumps({
        "format-version": 2, "table-uuid": str(uuid.uuid4()), "last-column-id": 28,
        "schemas": [{"fields": [{"id": 28, "name": "account_id", "type": "long"}]}],
        "snapshots": [{"sequence-number": 28, "summary": {"added-records": "28"}}]}, indent=2))
    text(wh / "by_account" / "metadata" / "00002-b.metadata.json", json.dumps({
        "format-version": 2, "table-uuid": str(uuid.uuid4()),
        "snapshots": [{"summary": {"partitions.account_id=28": "added-records=1"}}]}))
    text(wh / "silver_orders" / "metadata" / "stats.puffin", b"PFA1\x00\x1c\x00" + b"28" * 8 + b"\x00PFA1")
    text(day / "capture-1.jsonl", json.dumps({"payload": {"after": {"id": 128, "order": 28}}}) + "\n"
         + json.dumps({"payload": {"after": {"id": 7, "name": "User 28", "ts": "2025-01-28T10:28:00Z"}}}) + "\n")
    escaped = json.dumps({"payload": json.dumps({"after": {"id": 28}})})  # JSON kept as a string in JSON
    text(day / "capture-2.jsonl.gz", gzip.compress((escaped + "\n").encode()))

    report = trace_scan(settings, {"subject": "28"}, id_columns=ids)
    found = {(str(Path(h.file).relative_to(tmp_path)), h.form) for h in report.hits}
    assert found == {
        ("warehouse/lake/bronze_cdc_accounts/data/theirs.parquet", "column key"),
        ("warehouse/lake/bronze_cdc_accounts/data/theirs.parquet", "column after.id"),
        ("warehouse/lake/bronze_cdc_accounts/data/theirs.parquet", "column payload"),
        ("warehouse/lake/silver_orders/data/theirs.parquet", "column account_id"),
        ("warehouse/lake/by_account/data/account_id=28/00000.parquet", "file path"),
        ("warehouse/lake/by_account/metadata/00002-b.metadata.json", "partition value"),
        ("landing/cdc/accounts/date=2025-01-28/capture-2.jsonl.gz", "json field or partition value"),
    }, found
    assert report.files_scanned[WAREHOUSE] == 9 and not report.unreadable
    # Without id columns a number is text, as any other value: found in every one of those digits.
    assert len({h.file for h in trace_scan(settings, {"subject": "28"}).hits}) > len({f for f, _ in found})


def test_a_number_in_a_real_manifest_is_read_by_its_columns_type(tmp_path):
    """pyiceberg's manifests: a bound of the id column (a long, an int widened, text that is the number) is found
    where it is the number; the other files' bounds (128, 2028, the digits in their bytes) and the field ids in
    the header's schema are not it."""
    from pyiceberg.catalog.sql import SqlCatalog

    settings = Settings(home=tmp_path)
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=settings.warehouse)
    catalog.create_namespace("lake")
    schema = pa.schema([(f"c{i}", pa.int64()) for i in range(27)] + [("account_id", pa.int64()), ("key", pa.string())])
    table = catalog.create_table("lake.accounts", schema=schema)  # account_id has field id 28

    def append(account: int) -> set[str]:
        row = {**{f"c{i}": 28 for i in range(27)}, "account_id": account,
               "key": json.dumps({"account_id": account}, separators=(",", ":"))}  # cut at 16: `{"account_id":28`
        table.append(pa.Table.from_pylist([row], schema=schema))
        return {m.manifest_path for m in table.current_snapshot().manifests(table.io)}

    before = append(128) | append(2028) | append(int.from_bytes(b"28\x00\x00\x00\x00\x00\x00", "little"))
    report = trace_scan(settings, {"subject": "28"}, id_columns=("account_id",))
    assert report.hits == [] and not report.unreadable and report.files_scanned[WAREHOUSE] > 10

    [theirs] = append(28) - before
    report = trace_scan(settings, {"subject": "28"}, id_columns=("account_id",))
    manifest = {h.form for h in report.hits if h.file == theirs.removeprefix("file://")}
    assert manifest == {"column bound account_id", "column bound key"}
    assert {h.how for h in report.hits} == {"avro", "parquet"}
