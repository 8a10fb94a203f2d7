"""Maintenance on real tables: health-triggered compaction, expiry with tags, orphans, rollback, a racing writer."""

import datetime as dt
import os
import threading
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, Definitions, RunRequest, build_sensor_context
from pyiceberg.table.snapshots import ancestors_of
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse_assets.ml.pinning import content_hash
from lakehouse_assets.operations.health import table_health
from lakehouse_assets.operations.procedures import TableMaintenance
from lakehouse_assets.operations.schedules import CHECK, maintenance_definitions, maintenance_when_due
from lakehouse_assets.operations.snapshots import create_tag, rollback, snapshot_history
from lakehouse_assets.project.model import Maintenance, Project, TablePolicy
from lakehouse_assets.runtime.commit import NOTHING, publish, stage, with_commit_retries
from lakehouse_assets.tables.registry import MERGE_ON_READ, TableSpec, col

UTC = dt.timezone.utc
SPEC = TableSpec(
    name="measurements", layer="silver", description="a table that many small writes feed",
    schema=T.StructType([col("id", T.LongType(), False), col("ts", T.TimestampType(), False),
                         col("value", T.DoubleType())]),
    partitioned_by=("days(ts)",),
)
DAY = dt.datetime(2025, 1, 1, tzinfo=UTC)


def rows(spark, start, n):
    """n rows with ids from `start`, spread over two days."""
    return spark.range(start, start + n).select(
        F.col("id"), (F.lit(DAY) + F.expr("make_interval(0, 0, 0, 0, CAST(id % 48 AS INT), 0, 0)")).alias("ts"),
        (F.col("id") * 0.5).alias("value"))


def append(lakehouse, spec, df, run_id="test"):
    """One published write, as the assets make it (staged on a branch, fast-forwarded), retried on conflict."""
    table = lakehouse.table(spec)
    return with_commit_retries(lambda: publish(stage(table, run_id, spec.name, "t").append(df)), spec.name)[0]


def many_small_commits(lakehouse, spec=SPEC, commits=12, per_commit=20):
    for n in range(commits):
        append(lakehouse, spec, rows(lakehouse.spark, n * per_commit, per_commit))
    return lakehouse.iceberg_table(spec.name)


def project_with(policy: TablePolicy) -> Project:
    return Project(name="maintained", file=Path("lakehouse.yaml"), maintenance=Maintenance(defaults=policy))


def test_the_health_sensor_requests_compaction_and_it_keeps_data_and_history(lakehouse):
    table = many_small_commits(lakehouse)
    before_hash = content_hash(table.scan().to_arrow())
    old_snapshot = table.metadata.snapshots[3].snapshot_id
    old_hash = content_hash(table.scan(snapshot_id=old_snapshot).to_arrow())
    policy = TablePolicy(max_small_files=4)
    before = table_health(table, SPEC.name, policy)
    assert before.data_files >= 12 and before.compactable_small_files == before.data_files
    assert before.needs_compaction and not before.healthy

    jobs, sensors, _, _ = maintenance_definitions(project_with(policy), [SPEC.name], {SPEC.name})
    compact_job, sensor = jobs[0], sensors[0]
    instance = DagsterInstance.ephemeral()
    result = sensor(build_sensor_context(instance=instance, resources={"lakehouse": lakehouse}))
    requests = [r for r in result.run_requests if isinstance(r, RunRequest)]
    assert [(r.job_name, r.partition_key, r.run_key) for r in requests] == [
        (compact_job.name, SPEC.name, f"compact:{SPEC.name}:{before.snapshot_id}")]
    # As the daemon evaluates a tick: a sensor of two jobs must name each request's (it raised before, every tick).
    daemon_view = Definitions(jobs=jobs, sensors=[sensor], resources={"lakehouse": lakehouse})
    tick = sensor.evaluate_tick(build_sensor_context(instance=instance, definitions=daemon_view,
                                                     resources={"lakehouse": lakehouse}))
    assert [(r.job_name, r.partition_key) for r in tick.run_requests] == [(compact_job.name, SPEC.name)]
    # The sensor also reports the table's health as a (failed, warning) check.
    checks = [e for e in result.asset_events if getattr(e, "check_name", None) == CHECK]
    assert len(checks) == 1 and not checks[0].passed

    run = compact_job.execute_in_process(partition_key=requests[0].partition_key, instance=instance,
                                         resources={"lakehouse": lakehouse})
    assert run.success
    observed = [e.event_specific_data.asset_observation for e in run.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert observed and observed[0].metadata["maintenance/rewritten_data_files"].value == before.data_files

    table = lakehouse.iceberg_table(SPEC.name)
    after = table_health(table, SPEC.name, policy)
    assert after.data_files == 2  # one per day partition
    assert after.healthy and not after.needs_compaction
    assert content_hash(table.scan().to_arrow()) == before_hash
    assert content_hash(table.scan(snapshot_id=old_snapshot).to_arrow()) == old_hash  # time travel still works
    # Healthy now: the next tick requests nothing, so compaction is not a loop.
    again = sensor(build_sensor_context(instance=instance, resources={"lakehouse": lakehouse},
                                        cursor=result.cursor))
    assert not again.run_requests


def test_compaction_rewrites_merge_on_read_deletes_into_data(lakehouse):
    spec = TableSpec(name="mor", layer="silver", description="merge-on-read", schema=SPEC.schema,
                     partitioned_by=SPEC.partitioned_by, write_mode=MERGE_ON_READ)
    many_small_commits(lakehouse, spec, commits=3)
    spark, table_id = lakehouse.spark, lakehouse.table_id("mor")
    spark.sql(f"DELETE FROM {table_id} WHERE id % 5 = 0")
    expected = sorted(r.id for r in spark.table(table_id).collect())
    policy = TablePolicy(max_delete_ratio=0.05)
    before = table_health(lakehouse.iceberg_table("mor"), "mor", policy)
    assert before.delete_files > 0 and before.deleted_ratio == pytest.approx(12 / 60) and before.needs_compaction

    report = TableMaintenance(lakehouse, "mor", policy).compact()
    assert report.after.delete_files == 0 and report.after.deleted_ratio == 0 and report.after.records == 48
    assert sorted(r.id for r in spark.table(table_id).collect()) == expected


def test_expiry_keeps_tagged_snapshots_and_orphan_removal_takes_only_strays(lakehouse):
    table = many_small_commits(lakehouse, commits=5)
    snapshots = [s.snapshot_id for s in table.metadata.snapshots]
    tagged = snapshots[1]
    tagged_hash = content_hash(table.scan(snapshot_id=tagged).to_arrow())
    create_tag(table, SPEC.name, "release_1", tagged)
    spark, table_id = lakehouse.spark, lakehouse.table_id(SPEC.name)
    # A branch a write left behind long ago, and one a write in progress holds now.
    spark.sql(f"ALTER TABLE {table_id} CREATE BRANCH `stage_1000000000_0123456789ab`")
    spark.sql(f"ALTER TABLE {table_id} CREATE BRANCH `stage_{int(time.time())}_0123456789ab`")

    policy = TablePolicy(snapshot_retention=dt.timedelta(days=7), retain_last=1)
    work = TableMaintenance(lakehouse, SPEC.name, policy)
    assert work.drop_stale_branches() == ["stage_1000000000_0123456789ab"]  # the young one is kept
    report = work.expire(now=dt.datetime.now(UTC) + dt.timedelta(days=30))  # every snapshot is past retention
    table = lakehouse.iceberg_table(SPEC.name)
    assert {s.snapshot_id for s in table.metadata.snapshots} == {snapshots[-1], tagged}  # main's head, the tag
    assert report.figures["expired_snapshots"] == len(snapshots) - 2
    assert report.figures["deleted_data_files"] == 0  # appends only: every file is still live at the head
    assert content_hash(table.scan(snapshot_id=tagged).to_arrow()) == tagged_hash

    live = table.inspect.all_data_files().column("file_path").to_pylist()
    data_dir = Path(live[0].removeprefix("file:")).parent
    stray, young = data_dir / "stray-00000.parquet", data_dir / "young-00000.parquet"
    for f in (stray, young):
        f.write_bytes(b"PAR1 not a real file PAR1")
    ten_days_ago = time.time() - 10 * 86400
    os.utime(stray, (ten_days_ago, ten_days_ago))
    removed = work.remove_orphans().figures["removed_files"]
    assert [Path(p.removeprefix("file:")) for p in removed] == [stray]
    assert not stray.exists() and young.exists()  # younger than the safety window: maybe a write in flight
    assert all(Path(p.removeprefix("file:")).exists() for p in live)
    assert lakehouse.spark.table(table_id).count() == 100


def test_rollback_after_a_bad_write_reads_the_good_state(lakehouse):
    table = many_small_commits(lakehouse, commits=3)
    good = table.current_snapshot().snapshot_id
    good_hash = content_hash(table.scan().to_arrow())
    append(lakehouse, SPEC, rows(lakehouse.spark, 10_000, 7).withColumn("value", F.lit(-1.0)), run_id="bad-run")
    table = lakehouse.iceberg_table(SPEC.name)
    history = snapshot_history(table)
    assert history[-1]["run_id"] == "bad-run" and history[-1]["rows_added"] == 7 and history[-1]["current"]

    result = rollback(table, SPEC.name, str(good))
    assert result == {"table": SPEC.name, "from": history[-1]["snapshot_id"], "to": good, "changed": True}
    table = lakehouse.iceberg_table(SPEC.name)
    assert content_hash(table.scan().to_arrow()) == good_hash
    assert lakehouse.spark.table(lakehouse.table_id(SPEC.name)).where("value < 0").count() == 0
    # The next write goes on from the good state.
    append(lakehouse, SPEC, rows(lakehouse.spark, 20_000, 5))
    assert lakehouse.spark.table(lakehouse.table_id(SPEC.name)).count() == 65


def test_compaction_beside_a_writer_loses_no_appended_row(lakehouse):
    many_small_commits(lakehouse, commits=6, per_commit=10)
    errors = []

    def writer():
        try:
            for n in range(8):
                append(lakehouse, SPEC, rows(lakehouse.spark, 1_000 + n * 10, 10), run_id=f"writer-{n}")
        except Exception as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    work = TableMaintenance(lakehouse, SPEC.name, TablePolicy())
    compactions = 0
    while thread.is_alive() or compactions == 0:
        work.compact()
        compactions += 1
    thread.join()
    assert not errors, [str(e)[:2000] for e in errors]
    ids = [r.id for r in lakehouse.spark.table(lakehouse.table_id(SPEC.name)).select("id").collect()]
    assert sorted(ids) == sorted([*range(60), *range(1_000, 1_080)])
    replaces = [s for s in lakehouse.iceberg_table(SPEC.name).metadata.snapshots
                if s.summary and s.summary.operation.value == "replace"]
    assert replaces  # compaction did commit while the writer wrote


def test_past_max_snapshots_expiry_thins_to_one_commit_per_span_and_keeps_tags_and_staged_writes(lakehouse):
    """A table that commits all the time (a stream's) keeps every commit of the last `snapshot_detail`, and
    before that the last commit of each span: its metadata stops growing with its history. A tag and the base
    of a write still staged survive, and that write still publishes on top."""
    spark = lakehouse.spark
    table = many_small_commits(lakehouse, commits=9, per_commit=5)
    staged = stage(lakehouse.table(SPEC), "in-flight", SPEC.name, "t", scope=NOTHING).append(rows(spark, 1000, 5))
    table = many_small_commits(lakehouse, commits=5, per_commit=5)  # ids 0..24 again: rows, not keys, matter
    main = list(ancestors_of(table.current_snapshot(), table.metadata))  # newest first
    base = [s.snapshot_id for s in main].index(staged.base_snapshot_id)
    pinned = len(main) - 3
    assert base == 5 and pinned > base + 2
    create_tag(table, SPEC.name, "pin", main[pinned].snapshot_id)
    head_hash = content_hash(table.scan().to_arrow())
    pinned_hash = content_hash(table.scan(snapshot_id=main[pinned].snapshot_id).to_arrow())

    policy = TablePolicy(max_snapshots=5, retain_last=2, snapshot_detail=dt.timedelta(hours=1))
    later = dt.datetime.now(UTC) + dt.timedelta(hours=2)  # every commit is older than the detail kept
    assert table_health(table, SPEC.name, policy, later).needs_thinning
    report = TableMaintenance(lakehouse, SPEC.name, policy).expire(now=later)

    # Kept: main since the staged write's base (its branch was cut there), the tag, and the newest commit of
    # each hour before them that none of those speaks for.
    expected = {s.snapshot_id for s in main[:base + 1]} | {main[pinned].snapshot_id}
    hours = {main[n].timestamp_ms // 3_600_000 for n in (*range(base + 1), pinned)}
    for s in main[base + 1:]:
        if s.timestamp_ms // 3_600_000 not in hours:
            hours.add(s.timestamp_ms // 3_600_000)
            expected.add(s.snapshot_id)
    table = lakehouse.iceberg_table(SPEC.name)
    branch_head = table.metadata.refs[staged.branch].snapshot_id
    assert {s.snapshot_id for s in table.metadata.snapshots} == expected | {branch_head}
    assert report.figures["thinned"]
    assert report.figures["expired_snapshots"] >= len(main) - len(expected)
    assert content_hash(table.scan().to_arrow()) == head_hash
    assert content_hash(table.scan(snapshot_id=main[pinned].snapshot_id).to_arrow()) == pinned_hash
    assert not table_health(table, SPEC.name, policy, later).needs_thinning  # nothing left to thin

    publish(staged)  # replayed on the new main from its base, which thinning kept
    assert spark.table(lakehouse.table_id(SPEC.name)).count() == 14 * 5 + 5


def test_a_stream_between_its_passes_compacts_and_thins_what_the_health_sensor_would(lakehouse):
    """`maintenance_when_due` (what a CDC stream runs after each pass): nothing while a table is within its
    thresholds; past them, the compaction and the thinning the sensor would request, each observed; the thinning
    at most once per `snapshot_detail`."""
    spark = lakehouse.spark
    many_small_commits(lakehouse, commits=3, per_commit=5)
    lenient = TablePolicy(max_snapshots=100)
    assert maintenance_when_due(lakehouse, Maintenance(defaults=lenient))([SPEC.name, "no_such_table"]) == []
    assert {s.summary.operation.value for s in lakehouse.iceberg_table(SPEC.name).metadata.snapshots} == {"append"}

    many_small_commits(lakehouse, commits=3, per_commit=5)
    policy = TablePolicy(max_small_files=2, max_snapshots=3, retain_last=1, snapshot_detail=dt.timedelta(hours=1))
    later = time.time() + 2 * 3600  # every commit is older than the detail kept
    maintain = maintenance_when_due(lakehouse, Maintenance(defaults=policy), clock=lambda: later)
    before = len(lakehouse.iceberg_table(SPEC.name).metadata.snapshots)
    done = maintain([SPEC.name])
    assert [(o.asset_key.path, o.metadata["maintenance/action"].value) for o in done] == [
        ([SPEC.name], "compact"), ([SPEC.name], "expire")]
    table = lakehouse.iceberg_table(SPEC.name)
    assert table.current_snapshot().summary.operation.value == "replace"
    assert len(table.metadata.snapshots) < before
    assert table_health(table, SPEC.name, policy).compactable_small_files == 0
    assert spark.table(lakehouse.table_id(SPEC.name)).count() == 30
    many_small_commits(lakehouse, commits=2, per_commit=5)
    assert [o.metadata["maintenance/action"].value for o in maintain([SPEC.name])] == ["compact"], \
        "thinned once per snapshot_detail"

    # A compaction that fails is said and left for later: the stream calling it goes on.
    many_small_commits(lakehouse, commits=3, per_commit=5)
    said: list[str] = []
    refused = TablePolicy(max_small_files=2, sort_by=("no_such_column",))  # the compaction's sort order fails
    assert maintenance_when_due(lakehouse, Maintenance(defaults=refused), said.append)([SPEC.name]) == []
    assert said[-1].startswith(f"{SPEC.name}: maintenance left for later: ") and "no_such_column" in said[-1], said


def test_the_health_sensor_requests_thinning_of_a_table_past_max_snapshots(lakehouse):
    spark = lakehouse.spark
    many_small_commits(lakehouse, commits=4, per_commit=5)
    stage(lakehouse.table(SPEC), "died", SPEC.name, "t").append(rows(spark, 1000, 5)).discard()  # unreferenced
    policy = TablePolicy(max_snapshots=3, retain_last=1, snapshot_detail=dt.timedelta(seconds=1))
    time.sleep(1.5)  # the discarded write's snapshot is older than the detail kept
    jobs, sensors, _, _ = maintenance_definitions(project_with(policy), [SPEC.name], {SPEC.name})
    instance = DagsterInstance.ephemeral()
    result = sensors[0](build_sensor_context(instance=instance, resources={"lakehouse": lakehouse}))
    thin = [r for r in result.run_requests if isinstance(r, RunRequest) and r.job_name == "expire_tables"]
    assert [(r.partition_key, r.run_key.split(":")[:2]) for r in thin] == [(SPEC.name, ["thin", SPEC.name])]
    before = len(lakehouse.iceberg_table(SPEC.name).metadata.snapshots)
    run = jobs[1].execute_in_process(partition_key=SPEC.name, instance=instance, resources={"lakehouse": lakehouse})
    assert run.success
    assert len(lakehouse.iceberg_table(SPEC.name).metadata.snapshots) < before
    assert spark.table(lakehouse.table_id(SPEC.name)).count() == 20
