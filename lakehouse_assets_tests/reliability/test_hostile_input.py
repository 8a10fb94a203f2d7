"""Hostile landing files never crash ingestion and never lose a good record; every bad record is quarantined
with a reason, and records in = kept + quarantined, counted here from the bytes themselves.

One landing day holds good files and every kind of trouble seen in real exports: random bytes, a truncated
gzip, 5,000-deep nesting, a 10 MB line, invalid UTF-8, NaN and Infinity, years 1 and 9999, keys and values
with quotes and SQL, a byte order mark with CRLF lines, no final newline, an empty file, and seeded random
mutations of good lines (LAKEHOUSE_SOAK_SCALE makes more of them).
"""

import gzip
import json
import os
import random
import time
from collections import Counter

from dagster import DagsterInstance, materialize

from lakehouse_assets.bronze.reconcile import reconcile

from ..shop import SHOP, asset
from .figures import SCALE, record

DAY = "2025-01-01"
bronze_events = asset("bronze_events")
INJECTION = "x'; DROP TABLE bronze_events; --"


def _event(event_id: str, **changes) -> dict:
    return {"event_id": event_id, "user_id": f"u-{event_id}", "session_id": "s-1", "event_type": "page_view",
            "event_ts": f"{DAY}T12:00:00Z", "properties": {"page": "/"}, **changes}


def _jsonl(events: list[dict]) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in events).encode()


def records_in(data: bytes, name: str) -> int:
    """Lines in a landing file as a line reader sees them; a file that cannot be decompressed is one record."""
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError):
            return 1
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _mutate(rng: random.Random, line: str) -> str:
    at = rng.randrange(len(line))
    return rng.choice([
        lambda: line[:at],  # cut short
        lambda: line[:at] + rng.choice('{}[]",:\\\x00\u2028') + line[at:],  # a stray character
        lambda: line[:at] + line[at + 1:],  # a character lost
        lambda: line.replace('"page_view"', rng.choice(['null', '1e999', '"page_view', '["page_view"]'])),
    ])()


def test_a_day_of_hostile_files_is_taken_whole_without_a_crash_or_a_lost_record(lakehouse):
    rng = random.Random(20261123 + SCALE)
    good: dict[str, list[dict]] = {
        f"good-{n}.jsonl": [_event(f"g{n}-{i}") for i in range(50 * SCALE)] for n in range(2)}
    files: dict[str, bytes] = {name: _jsonl(events) for name, events in good.items()}
    # A byte order mark and CRLF lines (a spreadsheet's export): the first record is a record like the others.
    good["bom-crlf.jsonl"] = [_event(f"bom-{i}") for i in range(5)]
    files["bom-crlf.jsonl"] = b"\xef\xbb\xbf" + b"".join(json.dumps(e).encode() + b"\r\n" for e in good["bom-crlf.jsonl"])
    good["bom.jsonl.gz"] = [_event(f"bom-gz-{i}") for i in range(3)]
    files["bom.jsonl.gz"] = gzip.compress(b"\xef\xbb\xbf" + _jsonl(good["bom.jsonl.gz"]))
    good["whole.jsonl.gz"] = [_event(f"gz-{i}") for i in range(10)]
    files["whole.jsonl.gz"] = gzip.compress(_jsonl(good["whole.jsonl.gz"]))
    good["no-eol.jsonl"] = [_event("eol-1"), _event("eol-2")]
    files["no-eol.jsonl"] = _jsonl(good["no-eol.jsonl"]).rstrip(b"\n")
    # Quotes and SQL in keys and values are data, kept as they came.
    good["sql.jsonl"] = [_event("e-'quoted\"-1", user_id=INJECTION, properties={INJECTION: "select", "from": '"'})]
    files["sql.jsonl"] = _jsonl(good["sql.jsonl"])
    files["empty.jsonl"] = b""

    bad: dict[str, tuple[bytes, str]] = {}  # name -> (bytes, the reason its records must carry)
    for n in range(2 * SCALE):
        bad[f"random-{n}.jsonl"] = (bytes(rng.randrange(256) for _ in range(3000)), "")
    cut = gzip.compress(_jsonl([_event(f"cut-{i}") for i in range(300)]))
    bad["cut.jsonl.gz"] = (cut[: len(cut) // 2], "unreadable file")
    bad["deep.jsonl"] = (("[" * 5000 + "]" * 5000 + "\n" + json.dumps(_event("deep"))[:-1] + ', "properties": '
                          + '{"a": ' * 5000 + "1" + "}" * 5000 + "}\n").encode(), "")
    bad["huge.jsonl"] = ((json.dumps(_event("huge", properties={"blob": "x" * 10_000_000})) + "\n").encode(),
                         "record larger than")
    bad["numbers.jsonl"] = ("".join(json.dumps(_event(f"num-{v}"))[:-1] + f', "price": {v}}}\n'
                                    for v in ("NaN", "Infinity", "-Infinity")).encode(), "price")
    files.update({name: data for name, (data, _) in bad.items()})
    # Kept or quarantined as the rules decide, but never lost and never a crash.
    files["odd.jsonl"] = b"".join([
        json.dumps(_event("utf8")).replace("page_view", "page\\u00e9").encode().replace(b'"/"', b'"/\xff\xfe"') + b"\n",
        _jsonl([_event("year-1", event_ts="0001-01-01T00:00:00Z"), _event("year-9999", event_ts="9999-12-31T23:59:59Z")]),
    ])
    lines = [json.dumps(_event(f"m-{i}")) for i in range(100 * SCALE)]
    files["mutated.jsonl"] = "".join(_mutate(rng, line) + "\n" for line in lines).encode()

    folder = lakehouse.settings.local_path(lakehouse.settings.landing) / "events" / f"date={DAY}"
    folder.mkdir(parents=True)
    landed = time.time() - 3600  # delivered an hour ago: files ending mid-record are no longer being written
    for name, data in files.items():
        (folder / name).write_bytes(data)
        os.utime(folder / name, (landed, landed))
    expected = sum(records_in(data, name) for name, data in files.items())

    result = materialize([bronze_events], resources={"lakehouse": lakehouse}, partition_key=DAY,
                         instance=DagsterInstance.ephemeral())
    assert result.success
    meta = result.asset_materializations_for_node("bronze_events")[0].metadata
    spark = lakehouse.spark
    kept = spark.table(lakehouse.table_id("bronze_events")).select("event_id", "user_id", "properties",
                                                                   "source_file", "source_line").collect()
    quarantined = spark.table(lakehouse.table_id("bronze_events_quarantine")).select(
        "source_file", "source_line", "reason").collect()

    # Records in = kept + quarantined, each line once.
    assert meta["records_in"].value == expected == len(kept) + len(quarantined)
    assert len({(r.source_file, r.source_line) for r in kept + quarantined}) == expected
    # Every good record kept, as it came.
    ids = {r.event_id for r in kept}
    assert {e["event_id"] for events in good.values() for e in events} <= ids
    [sql] = [r for r in kept if r.event_id == "e-'quoted\"-1"]
    assert sql.user_id == INJECTION and sql.properties == {INJECTION: "select", "from": '"'}
    # Every bad record quarantined with a reason; the known ones with theirs.
    assert all(r.reason and r.reason.strip() for r in quarantined)
    by_file: dict[str, list[str]] = {}
    for r in quarantined:
        by_file.setdefault(r.source_file.rsplit("/", 1)[1], []).append(r.reason)
    for name, (data, reason) in bad.items():
        wanted = records_in(data, name) - (1 if name == "deep.jsonl" else 0)  # its second line may be kept
        assert len(by_file.get(name, [])) >= wanted, (name, by_file.get(name))
        assert all(reason in why for why in by_file[name]), (name, by_file[name])
    assert not {"huge", "num-NaN", "num-Infinity", "num--Infinity"} & ids

    again = materialize([bronze_events], resources={"lakehouse": lakehouse}, partition_key=DAY,
                        instance=DagsterInstance.ephemeral())
    assert again.asset_materializations_for_node("bronze_events")[0].metadata["records_in"].value == 0
    assert all(r["balanced"] for r in reconcile(lakehouse.settings, SHOP, "events"))
    reasons = Counter(why.split(":")[0] for whys in by_file.values() for why in whys)
    record("hostile_input", files=len(files), records_in=expected, kept=len(kept), quarantined=len(quarantined),
           mutated_lines=len(lines), reasons=dict(reasons.most_common()))
