"""A landed file whose path leads out of its source's folder is never read: not by the landing sensor, not by
bronze, not by the stream, not by `lakehouse reconcile`. It is refused, with the reason, and reported once."""

import json
import os

from dagster import DagsterInstance, materialize

from lakehouse_assets.bronze.reconcile import reconcile
from lakehouse_assets.landing.zones import escapes

from ..bronze.test_landing_sensors import bronze_events, evaluate
from ..shop import SHOP


def _line(event_id: str) -> str:
    return json.dumps({"event_id": event_id, "user_id": "u1", "session_id": "s1", "event_type": "page_view",
                       "event_ts": "2025-01-01T10:00:00Z", "properties": {}}) + "\n"


def test_the_rule_judges_where_a_file_really_is(tmp_path):
    root = tmp_path / "landing" / "events"
    (root / "date=2025-01-01").mkdir(parents=True)
    outside = tmp_path / "secrets"
    outside.mkdir()
    (outside / "x.jsonl").write_text(_line("outside"))
    (root / "date=2025-01-01" / "good.jsonl").write_text(_line("good"))
    (root / "date=2025-01-01" / "link-out.jsonl").symlink_to(outside / "x.jsonl")
    (root / "date=2025-01-01" / "link-in.jsonl").symlink_to(root / "date=2025-01-01" / "good.jsonl")
    (root / "date=2025-01-02").symlink_to(outside, target_is_directory=True)
    base = root.as_uri()

    assert escapes(f"file:{root}/date=2025-01-01/good.jsonl", base) is None
    assert escapes(f"file:{root}/date=2025-01-01/link-in.jsonl", base) is None  # a link that stays inside
    for path in ("date=2025-01-01/link-out.jsonl", "date=2025-01-02/x.jsonl", "date=2025-01-01/../../../secrets/x.jsonl"):
        why = escapes(f"file:{root}/{path}", base)
        assert why and "leads out of the landing zone" in why and str(outside) in why, path

    # Object keys (SeaweedFS refuses to store such keys; AWS S3 stores them, and readers resolve them).
    s3 = "s3://raw/landing/events"
    assert escapes("s3://raw/landing/events/date=2025-01-01/a.jsonl", s3) is None
    assert escapes("s3a://raw/landing/events/date=2025-01-01/a.jsonl", s3) is None  # Hadoop's scheme, same key
    for key in ("date=2025-01-01/../../../other/a.jsonl", "date=2025-01-01/./a.jsonl", "date=2025-01-01//a.jsonl"):
        assert "'..', '.' or empty" in escapes(f"s3://raw/landing/events/{key}", s3), key
    assert "not under" in escapes("s3://other/landing/events/date=2025-01-01/a.jsonl", s3)


def test_symbolic_links_out_of_the_zone_are_refused_and_never_ingested(lakehouse, tmp_path):
    settings = lakehouse.settings
    root = settings.local_path(settings.landing) / "events"
    (root / "date=2025-01-01").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "stolen.jsonl").write_text(_line("outside-1") + _line("outside-2"))
    (root / "date=2025-01-01" / "good.jsonl").write_text(_line("good-1") + _line("good-2"))
    (root / "date=2025-01-01" / "link.jsonl").symlink_to(outside / "stolen.jsonl")
    (root / "date=2025-01-02").symlink_to(outside, target_is_directory=True)  # a whole day folder elsewhere
    instance = DagsterInstance.ephemeral()

    tick = evaluate(lakehouse, instance)
    [observation] = tick.asset_events
    refused = {r["file"].split("/events/")[1]: r["reason"] for r in observation.metadata["refused_files"].value}
    assert set(refused) == {"date=2025-01-01/link.jsonl", "date=2025-01-02/stolen.jsonl"}
    assert all("leads out of the landing zone" in why for why in refused.values())
    assert [r.partition_key for r in tick.run_requests] == ["2025-01-01"]

    for day in ("2025-01-01", "2025-01-02"):  # a run asked for by hand does not read them either
        assert materialize([bronze_events], resources={"lakehouse": lakehouse}, instance=instance,
                           partition_key=day).success
    events = {r.event_id for r in lakehouse.spark.table(lakehouse.table_id("bronze_events")).collect()}
    assert events == {"good-1", "good-2"}
    taken = lakehouse.spark.table(lakehouse.table_id("bronze_ingest_log")).collect()
    assert [os.path.basename(r.source_file) for r in taken] == ["good.jsonl"]
    rows = reconcile(settings, SHOP, "events")
    assert [(r["landing_date"], r["records_in"], r["balanced"]) for r in rows] == [("2025-01-01", 2, True)]

    again = evaluate(lakehouse, instance, cursor=tick.cursor)  # reported once
    assert not again.asset_events and not again.run_requests

