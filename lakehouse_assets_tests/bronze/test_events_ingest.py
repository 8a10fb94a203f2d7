"""bronze_events takes each landing file exactly once: re-runs, new files, crashes, drift."""

import gzip
import json
import os
import subprocess
import sys
import time

from dagster import DagsterInstance, materialize

from lakehouse_assets.runtime.freshness import NEWEST_EVENT
from lakehouse_assets.runtime.spark import local_frame

from ..shop import SHOP_FILE, asset

bronze_events = asset("bronze_events")

DAY = "2025-01-01"


def _event(n, **extra):
    return {"event_id": f"e-{n:04d}", "user_id": f"u{n % 7}", "session_id": f"s{n % 3}",
            "event_type": "page_view", "event_ts": f"{DAY}T{n % 24:02d}:00:00Z", "properties": {}, **extra}


def land(lakehouse, name, lines, day=DAY):
    folder = lakehouse.settings.local_path(lakehouse.settings.landing) / "events" / f"date={day}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(lines) + "\n")
    return len(lines)


def ingest(lakehouse, day=DAY):
    result = materialize([bronze_events], resources={"lakehouse": lakehouse}, partition_key=day,
                         instance=DagsterInstance.ephemeral())
    assert result.success
    return result.asset_materializations_for_node("bronze_events")[0].metadata


def held(lakehouse):
    """(bronze rows, quarantine rows, distinct (file, line) pairs across both)."""
    spark = lakehouse.spark
    bronze = spark.table(lakehouse.table_id("bronze_events")).select("source_file", "source_line")
    quarantine = spark.table(lakehouse.table_id("bronze_events_quarantine")).select("source_file", "source_line")
    return bronze.count(), quarantine.count(), bronze.union(quarantine).distinct().count()


def test_the_same_files_twice_and_then_a_new_file_take_each_record_once(lakehouse):
    records = land(lakehouse, "a.jsonl", [json.dumps(_event(n)) for n in range(20)] + ["{broken"])
    first = ingest(lakehouse)
    assert (first["records_in"].value, first["records_kept"].value, first["records_quarantined"].value) == (21, 20, 1)

    again = ingest(lakehouse)
    assert again["landing_files_taken"].value == 0 and again["records_in"].value == 0
    assert again["snapshot_id"].value == first["snapshot_id"].value
    assert held(lakehouse) == (20, 1, 21)

    records += land(lakehouse, "b.jsonl", [json.dumps(_event(n)) for n in range(20, 25)])
    third = ingest(lakehouse)
    assert third["landing_files_listed"].value == 2 and third["landing_files_taken"].value == 1
    assert third["records_kept"].value == 5
    assert held(lakehouse) == (25, 1, records)
    log = lakehouse.spark.table(lakehouse.table_id("bronze_ingest_log")).collect()
    assert sorted((r.source_file.rsplit("/", 1)[1], r.records, r.kept, r.quarantined) for r in log) == [
        ("a.jsonl", 21, 20, 1), ("b.jsonl", 5, 5, 0)
    ]


def test_gzipped_files_are_read_line_by_line(lakehouse):
    folder = lakehouse.settings.local_path(lakehouse.settings.landing) / "events" / f"date={DAY}"
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "part.jsonl.gz", "wt") as f:
        f.write("\n".join([json.dumps(_event(n)) for n in range(4)] + ["{oops"]) + "\n")
    meta = ingest(lakehouse)
    assert (meta["records_kept"].value, meta["records_quarantined"].value) == (4, 1)
    bad = lakehouse.spark.table(lakehouse.table_id("bronze_events_quarantine")).first()
    assert (bad.source_line, bad.payload, bad.reason) == (5, "{oops", "malformed JSON")


def test_a_new_field_becomes_a_column_and_older_rows_read_null(lakehouse):
    land(lakehouse, "old.jsonl", [json.dumps(_event(n)) for n in range(3)])
    ingest(lakehouse)
    land(lakehouse, "new.jsonl", [json.dumps(_event(n, channel="mobile", **{"Bad-Key": 1})) for n in range(3, 6)])
    meta = ingest(lakehouse)
    assert meta["new_columns"].value == "channel"

    table = lakehouse.iceberg_table("bronze_events")
    assert table.schema().find_field("channel").field_type.__class__.__name__ == "StringType"
    rows = {r.event_id: r.channel for r in lakehouse.spark.table(lakehouse.table_id("bronze_events")).collect()}
    assert rows == {"e-0000": None, "e-0001": None, "e-0002": None,
                    "e-0003": "mobile", "e-0004": "mobile", "e-0005": "mobile"}
    # The key that is not an identifier is not a column but is kept in the raw payload.
    payloads = lakehouse.spark.table(lakehouse.table_id("bronze_events")).where("event_id = 'e-0003'").first()
    assert json.loads(payloads.payload)["Bad-Key"] == 1
    # Older snapshots still read with the schema they were written with.
    first = table.metadata.snapshots[0].snapshot_id
    assert "channel" not in table.scan(snapshot_id=first).to_arrow().column_names or \
        set(table.scan(snapshot_id=first).to_arrow().column("channel").to_pylist()) == {None}


def _crash_run(lakehouse, failpoint, select="bronze_events,bronze_events_quarantine"):
    """Materialise `select` (bronze_events) for DAY in a separate process that SIGKILLs itself at `failpoint`."""
    s = lakehouse.settings
    env = {**os.environ, "LAKEHOUSE_HOME": str(s.home), "LAKEHOUSE_NAMESPACE": s.namespace,
           "LAKEHOUSE_CATALOG_URI": s.catalog_uri, "LAKEHOUSE_CATALOG_NAME": s.catalog_name,
           "LAKEHOUSE_LANDING": s.landing, "LAKEHOUSE_SPARK_MASTER": "local[1]",
           "LAKEHOUSE_DRIVER_MEMORY": "1g", "LAKEHOUSE_FAILPOINTS": failpoint,
           "LAKEHOUSE_PROJECT": str(SHOP_FILE)}
    env.pop("DAGSTER_HOME", None)
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    return subprocess.run(
        [dagster, "asset", "materialize", "-m", "lakehouse_assets.definitions",
         "--select", select, "--partition", DAY],
        env=env, capture_output=True, text=True, timeout=300,
        cwd=s.home,  # away from the project's dagster.yaml: an ephemeral instance
    )


def test_a_truncated_gzip_is_quarantined_whole_and_the_good_files_of_its_day_are_taken(lakehouse):
    from lakehouse_assets.bronze.reconcile import reconcile
    from lakehouse_assets.project import load_project

    good = land(lakehouse, "good.jsonl", [json.dumps(_event(n)) for n in range(12)])
    folder = lakehouse.settings.local_path(lakehouse.settings.landing) / "events" / f"date={DAY}"
    whole = gzip.compress(("\n".join(json.dumps(_event(n)) for n in range(100, 400)) + "\n").encode())
    cut = folder / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])  # an upload that stopped half way

    # Changed a moment ago, it may still be being written: left for a later run, the good file taken.
    meta = ingest(lakehouse)
    assert (meta["records_in"].value, meta["records_kept"].value, meta["records_quarantined"].value) == (good, good, 0)
    assert meta["landing_files_waiting"].value == 1
    # Unchanged for longer than the declared grace (5 minutes by default): taken as it is, one unreadable record.
    stale = time.time() - 600
    os.utime(cut, (stale, stale))
    meta = ingest(lakehouse)
    assert (meta["records_in"].value, meta["records_kept"].value, meta["records_quarantined"].value) == (1, 0, 1)
    [row] = lakehouse.spark.table(lakehouse.table_id("bronze_events_quarantine")).collect()
    assert row.source_file.endswith("cut.jsonl.gz") and row.reason.startswith("unreadable file: ")
    assert "end of" in row.reason.lower() or "eof" in row.reason.lower(), row.reason

    again = ingest(lakehouse)  # the bad file is recorded as taken: it does not fail or repeat every run
    assert again["landing_files_taken"].value == 0
    settings = lakehouse.settings
    rows = reconcile(settings, load_project(SHOP_FILE), "events")
    assert rows and all(r["balanced"] for r in rows), rows


def _data_files_read(df) -> int:
    """Rows of `df` collected; the data files its Iceberg scans read after pruning (Iceberg's scan metric)."""
    df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    if "Adaptive" in plan.getClass().getSimpleName():
        plan = plan.executedPlan()
    leaves, total = plan.collectLeaves(), 0
    for i in range(leaves.size()):
        metric = leaves.apply(i).metrics().get("resultDataFiles")
        total += metric.get().value() if metric.isDefined() else 0
    return total


def test_the_files_of_a_run_are_looked_up_in_their_landing_days_only(lakehouse):
    """Exactly-once and balance look-ups read the run's landing days, not the whole table."""
    from pyspark.sql import functions as F

    from lakehouse_assets.landing.reader import landing_date_of, landing_date_value, of_files

    days = ["2025-01-01", "2025-01-02", "2025-01-03"]
    for n, day in enumerate(days):
        land(lakehouse, f"{day}.jsonl", [json.dumps(_event(100 * n + i, event_ts=f"{day}T0{i}:00:00Z"))
                                         for i in range(5)], day=day)
        ingest(lakehouse, day)
    bronze = lakehouse.spark.table(lakehouse.table_id("bronze_events"))
    last_day_files = [r.source_file for r in bronze.where(F.col("landing_date") == days[-1])
                      .select("source_file").distinct().collect()]
    assert _data_files_read(bronze) == 3
    assert _data_files_read(bronze.where(F.col("source_file").isin(last_day_files))) == 3  # names prune nothing
    assert _data_files_read(bronze.where(of_files(last_day_files))) == 1
    assert bronze.where(of_files(last_day_files)).count() == 5

    # The bound is the same day Spark stores for each file, or no bound at all.
    paths = ["file:/l/events/date=2025-01-02/a.jsonl", "s3a://b/events/date=2025-02-30/x.jsonl",
             "file:/l/events/a.jsonl", "file:/l/date=2025-03-01/events/date=2025-03-02/b.jsonl.gz"]
    stored = local_frame(lakehouse.spark, [(p,) for p in paths], "p string").select(
        "p", landing_date_of(F.col("p")).alias("d")).collect()
    assert {r.p: r.d for r in stored} == {p: landing_date_value(p) for p in paths}
    assert landing_date_value(paths[3]).isoformat() == "2025-03-01"


def test_an_event_stamped_in_the_future_does_not_pin_the_event_time_watermark(lakehouse):
    land(lakehouse, "part-0.jsonl", [json.dumps(_event(n)) for n in range(5)]
         + [json.dumps(_event(99, event_ts="9999-12-31T23:00:00Z"))])
    ingest(lakehouse)
    assert held(lakehouse)[0] == 6, "the event is kept in bronze, as landed"
    snapshot = lakehouse.iceberg_table("bronze_events").current_snapshot()
    assert snapshot.summary.additional_properties[NEWEST_EVENT] == f"{DAY}T04:00:00+00:00"


def test_a_file_whose_name_needs_escaping_in_a_uri_is_taken_once_under_its_own_name(lakehouse):
    """Spark names a file read by its URI (`a%20b%25.jsonl`), a listing by its path (`a b%.jsonl`): the
    rows, the ingest log and every look-up of taken files use the listed name, so the file balances and a
    re-run finds it taken."""
    land(lakehouse, "a b%.jsonl", [json.dumps(_event(n)) for n in range(3)] + ["{cut"])
    first = ingest(lakehouse)
    assert (first["records_in"].value, first["records_kept"].value, first["records_quarantined"].value) == (4, 3, 1)
    assert ingest(lakehouse)["landing_files_taken"].value == 0
    assert held(lakehouse) == (3, 1, 4)
    spark = lakehouse.spark
    names = {r.source_file.rsplit("/", 1)[1] for t in ("bronze_events", "bronze_events_quarantine", "bronze_ingest_log")
             for r in spark.table(lakehouse.table_id(t)).select("source_file").collect()}
    assert names == {"a b%.jsonl"}
    bad = spark.table(lakehouse.table_id("bronze_events_quarantine")).first()
    assert (bad.source_line, bad.payload, bad.reason) == (4, "{cut", "malformed JSON")


def _content(lakehouse, table):
    """A table's rows as (file name, line, payload) triples, sorted: what it holds of the landing zone."""
    rows = lakehouse.spark.table(lakehouse.table_id(table)).select("source_file", "source_line", "payload").collect()
    return sorted((r.source_file.rsplit("/", 1)[1], r.source_line, r.payload) for r in rows)


def _log(lakehouse):
    return sorted((r.source, r.source_file.rsplit("/", 1)[1]) for r in
                  lakehouse.spark.table(lakehouse.table_id("bronze_ingest_log")).collect())


def _pointers(lakehouse):
    return [lakehouse.iceberg_table(t).metadata_location
            for t in ("bronze_events", "bronze_events_quarantine", "bronze_ingest_log")]


def test_a_rollback_of_bronze_takes_its_quarantine_and_its_ingest_log_rows_back_and_the_files_are_taken_again(
        lakehouse, rest_catalog_uri):
    """A bad write rolled back by time: bronze, its quarantine and the events' rows of the shared ingest log go
    back to that instant together (another source's later take stays); silver's day, decided again, equals its
    state before the bad write; the next run of the landing day takes the file again, records in = kept +
    quarantined, bronze holds its lines once, and silver decided again equals silver after the first take.
    Through the REST catalog server (its multi-table commit), the same rollback again undoes that second take."""
    import datetime as dt
    import time

    from examples.shop.cdc_generator import generate_cdc
    from lakehouse_assets.bronze.reconcile import reconcile
    from lakehouse_assets.operations.landing_rollback import rollback_landing
    from lakehouse_assets.project import load_project
    from lakehouse_assets.runtime.catalog import catalog_for

    from ..shop import asset

    project = load_project(SHOP_FILE)
    land(lakehouse, "a.jsonl", [json.dumps(_event(n)) for n in range(10)] + ["{broken"])
    ingest(lakehouse)
    good = (_content(lakehouse, "bronze_events"), _content(lakehouse, "bronze_events_quarantine"))
    silver_good = _silver(lakehouse)
    assert len(silver_good) == 10
    time.sleep(0.05)
    before_bad_write = dt.datetime.now(dt.timezone.utc).isoformat()
    time.sleep(0.05)
    land(lakehouse, "b.jsonl", [json.dumps(_event(n)) for n in range(10, 15)] + ["{cut"])  # 5 good lines, 1 bad
    assert ingest(lakehouse)["landing_files_taken"].value == 1
    silver_bad = _silver(lakehouse)
    assert len(silver_bad) == 15
    # Another source takes a file after that instant: its row of the shared log must stay.
    generate_cdc(lakehouse.settings.local_path(lakehouse.settings.landing), [dt.date.fromisoformat(DAY)],
                 changes_per_day=20, customers=5, initial_orders=2)
    assert materialize([asset("bronze_cdc_customers")], resources={"lakehouse": lakehouse}, partition_key=DAY,
                       instance=DagsterInstance.ephemeral()).success
    cdc_log = [row for row in _log(lakehouse) if row[0] == "cdc/customers"]
    assert cdc_log

    report = rollback_landing(lakehouse.catalog, lakehouse.settings.namespace, project.landing_source("events"),
                              before_bad_write)
    assert report.changed and [f.rsplit("/", 1)[1] for f in report.files] == ["b.jsonl"]
    assert report.landing_days == report.event_days == [dt.date.fromisoformat(DAY)]
    assert (_content(lakehouse, "bronze_events"), _content(lakehouse, "bronze_events_quarantine")) == good
    assert _log(lakehouse) == sorted([("events", "a.jsonl"), *cdc_log])
    assert _silver(lakehouse) == silver_good

    again = ingest(lakehouse)
    assert (again["landing_files_taken"].value, again["records_in"].value) == (1, 6)
    rows = reconcile(lakehouse.settings, project, "events")
    assert [(r["records_in"], r["kept"], r["quarantined"]) for r in rows] == [(11 + 6, 10 + 5, 1 + 1)]
    bronze = _content(lakehouse, "bronze_events")
    assert bronze == sorted(good[0] + [("b.jsonl", n + 1, json.dumps(_event(10 + n))) for n in range(5)])
    assert _content(lakehouse, "bronze_events_quarantine") == sorted(good[1] + [("b.jsonl", 6, "{cut")])
    assert _log(lakehouse) == sorted([("events", "a.jsonl"), ("events", "b.jsonl"), *cdc_log])
    assert _silver(lakehouse) == silver_bad

    through_server = catalog_for(lakehouse.settings.with_(catalog_uri=rest_catalog_uri))
    report = rollback_landing(through_server, lakehouse.settings.namespace, project.landing_source("events"),
                              before_bad_write)
    assert report.changed and [f.rsplit("/", 1)[1] for f in report.files] == ["b.jsonl"]
    assert (_content(lakehouse, "bronze_events"), _content(lakehouse, "bronze_events_quarantine")) == good
    assert _log(lakehouse) == sorted([("events", "a.jsonl"), *cdc_log])


def test_the_landing_retention_removes_files_taken_long_ago_and_unchanged_and_bronze_keeps_their_lines(lakehouse):
    """Past the declared retention (30 days by default), a landed file taken whole and unchanged since is removed
    from the zone; a file that grew since its take, or was never taken, stays. Bronze keeps every line, reconcile
    still balances, and a rollback that would have to take a removed file again is refused, changing nothing."""
    import datetime as dt

    import pytest

    from lakehouse_assets.bronze.reconcile import reconcile
    from lakehouse_assets.errors import SnapshotError
    from lakehouse_assets.landing.zones import landing_zone
    from lakehouse_assets.operations.landing_retention import remove_taken_files
    from lakehouse_assets.operations.landing_rollback import rollback_landing
    from lakehouse_assets.project import load_project

    project, settings = load_project(SHOP_FILE), lakehouse.settings
    assert project.landing.retention == dt.timedelta(days=30)
    folder = settings.local_path(settings.landing) / "events" / f"date={DAY}"
    land(lakehouse, "a.jsonl", [json.dumps(_event(n)) for n in range(5)])
    land(lakehouse, "grown.jsonl", [json.dumps(_event(n)) for n in range(5, 8)])
    ingest(lakehouse)
    time.sleep(0.05)
    before_b = dt.datetime.now(dt.timezone.utc).isoformat()
    time.sleep(0.05)
    land(lakehouse, "b.jsonl", [json.dumps(_event(n)) for n in range(8, 10)] + ["{cut"])
    ingest(lakehouse)
    with (folder / "grown.jsonl").open("a") as f:  # a producer appends after the take
        f.write(json.dumps(_event(10)) + "\n")
    land(lakehouse, "late.jsonl", [json.dumps(_event(11))])  # landed, not taken yet
    bronze_before = _content(lakehouse, "bronze_events")

    now = dt.datetime.now(dt.timezone.utc)
    assert remove_taken_files(settings, project, now=now, log=lambda _: None)["removed"] == []  # taken today
    report = remove_taken_files(settings, project, now=now + dt.timedelta(days=31), log=lambda _: None)
    assert sorted(f.rsplit("/", 1)[1] for f in report["removed"]) == ["a.jsonl", "b.jsonl"]
    assert [f.rsplit("/", 1)[1] for f in report["kept_changed"]] == ["grown.jsonl"]
    assert sorted(p.name for p in folder.iterdir()) == ["grown.jsonl", "late.jsonl"]
    assert _content(lakehouse, "bronze_events") == bronze_before  # bronze keeps every line as it landed

    again = ingest(lakehouse)  # the appended line and the late file
    assert again["records_in"].value == 2
    [row] = reconcile(settings, project, "events")
    assert (row["records_in"], row["kept"], row["quarantined"], row["balanced"]) == (13, 12, 1, True)

    pointers = _pointers(lakehouse)
    with pytest.raises(SnapshotError, match="1 of them are no longer in the landing zone"):
        rollback_landing(lakehouse.catalog, settings.namespace, project.landing_source("events"), before_b,
                         present=landing_zone(settings).has)
    assert _pointers(lakehouse) == pointers


def _silver(lakehouse):
    """silver_events decided again for the day (its run overwrites the day from bronze), as sorted rows; the
    time a row was taken into bronze aside."""
    from ..shop import asset

    assert materialize([asset("silver_events")], resources={"lakehouse": lakehouse}, partition_key=DAY,
                       instance=DagsterInstance.ephemeral()).success
    return sorted(tuple(r) for r in lakehouse.spark.table(lakehouse.table_id("silver_events"))
                  .drop("ingested_at").collect())


def test_a_rollback_that_cannot_keep_bronze_and_its_quarantine_together_changes_nothing(lakehouse):
    """The quarantine's snapshot of the target instant has expired: the rollback is refused, and bronze, its
    quarantine and the ingest log stay exactly as they were; so are rollbacks of the quarantine or the log alone."""
    import pytest

    from lakehouse_assets.errors import SnapshotError
    from lakehouse_assets.operations.landing_rollback import rollback_table
    from lakehouse_assets.project import load_project

    project = load_project(SHOP_FILE)
    land(lakehouse, "a.jsonl", [json.dumps(_event(n)) for n in range(4)] + ["{broken"])
    ingest(lakehouse)
    target = lakehouse.iceberg_table("bronze_events").current_snapshot().snapshot_id
    land(lakehouse, "b.jsonl", [json.dumps(_event(n)) for n in range(4, 8)] + ["{cut"])
    ingest(lakehouse)
    s = lakehouse.settings
    lakehouse.spark.sql(f"CALL {s.catalog_name}.system.expire_snapshots(table => '{s.namespace}.bronze_events_quarantine', "
                        "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)")
    pointers = _pointers(lakehouse)
    held_before = (_content(lakehouse, "bronze_events"), _content(lakehouse, "bronze_events_quarantine"), _log(lakehouse))

    for table, refusal in (("bronze_events", "bronze_events_quarantine"),
                           ("bronze_events_quarantine", "goes back with bronze_events"),
                           ("bronze_ingest_log", "roll back a source's bronze table")):
        with pytest.raises(SnapshotError, match=refusal):
            rollback_table(lakehouse.catalog, s.namespace, project, table, str(target))
    assert _pointers(lakehouse) == pointers
    assert (_content(lakehouse, "bronze_events"), _content(lakehouse, "bronze_events_quarantine"),
            _log(lakehouse)) == held_before
