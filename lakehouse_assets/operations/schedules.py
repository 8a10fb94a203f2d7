"""Maintenance as a standing service: driven by measured table health, and by the clock.

- `table_health` asset checks (one per table asset, non-blocking) say whether a
  table crosses the thresholds of its declared policy; run them from the UI, or
  let the health sensor report them.
- `lakehouse_table_health` (sensor, running by default) measures every table
  through pyiceberg each `check_interval`. It reports a health observation and
  check result whenever a table's snapshot changed, and requests
  `compact_tables` for a table whose compactable small files or deleted-row
  ratio crosses its threshold (once per snapshot: the run key), and
  `expire_tables` for a table past `max_snapshots` with snapshots to thin (a
  stream's tables commit every few seconds; once per `snapshot_detail`).
- `lakehouse_nightly_maintenance` (schedule) runs `expire_tables` for every
  table: stale write branches, snapshot expiry, orphan removal; and, when the
  declaration keeps landed files for a `landing.retention`, `landing_retention`
  (the landed files taken longer ago than that, unchanged since, removed).

Both jobs are partitioned by table name, so the UI shows each table's
maintenance history, and run in-process (one JVM), one run at a time (dagster.yaml).
"""

import datetime as dt
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetObservation,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    StaticPartitionsDefinition,
    in_process_executor,
    job,
    multi_asset_check,
    op,
    sensor,
)

from ..project import Project
from ..project.model import Maintenance
from ..runtime.conflicts import failure_message
from ..runtime.resource import LakehouseResource
from ..times import UTC
from .health import TableHealth, compaction_due, table_health, thinnable
from .landing_retention import remove_taken_files
from .procedures import MaintenanceReport, TableMaintenance

CHECK = "table_health"
COMPACT_JOB = "compact_tables"
EXPIRE_JOB = "expire_tables"
LANDING_JOB = "landing_retention"


def _exists(lakehouse: LakehouseResource, name: str) -> bool:
    return lakehouse.catalog.table_exists((lakehouse.settings.namespace, name))


def health_check_evaluation(health: TableHealth) -> AssetCheckEvaluation:
    return AssetCheckEvaluation(
        asset_key=AssetKey(health.table), check_name=CHECK, passed=health.healthy,
        severity=AssetCheckSeverity.WARN, metadata=health.metadata(),
        description="; ".join(health.problems) or "within the declared thresholds",
    )


def _report_metadata(report: MaintenanceReport) -> dict[str, Any]:
    meta: dict[str, Any] = {f"maintenance/{k}": (MetadataValue.int(v) if isinstance(v, int) else MetadataValue.json(v))
            for k, v in report.figures.items()}
    meta["maintenance/action"] = MetadataValue.text(report.action)
    meta["maintenance/seconds"] = MetadataValue.float(round(report.seconds, 2))
    meta["maintenance/retries"] = MetadataValue.int(report.retries)
    return meta


def maintenance_observation(report: MaintenanceReport) -> AssetObservation:
    """What a maintenance action did, and the table's health after it, as an observation of the table's asset."""
    return AssetObservation(asset_key=report.table,
                            metadata={**(report.after.metadata() if report.after else {}), **_report_metadata(report)})


def maintenance_when_due(lakehouse: LakehouseResource, maintenance: Maintenance, log: Callable[[str], None] = print,
                         clock: Callable[[], float] = time.time) -> Callable[[list[str]], list[AssetObservation]]:
    """What the health sensor would request of the daemon, done by the caller's own process (a long-lived stream,
    between two passes, in its warm Spark session): each named table whose files cross its policy's compaction
    thresholds is compacted, and one past `max_snapshots` with snapshots to thin is expired (at most once per
    `snapshot_detail`, as the sensor requests it); an observation of each action is returned. An action that
    fails (a compaction that lost its race with other writers every time) is logged and left for the next call
    or the sensor's run: the caller's own work goes on."""
    thinned: dict[str, int] = {}  # table -> the snapshot_detail span it was last thinned in

    def due(name: str) -> list[AssetObservation]:
        policy, table = maintenance.policy(name), lakehouse.iceberg_table(name)
        work, done = TableMaintenance(lakehouse, name, policy, log), []
        if compaction_due(table, policy):
            done.append(maintenance_observation(work.compact()))
        now = clock()
        span = int(now // max(policy.snapshot_detail.total_seconds(), 1))
        if len(table.metadata.snapshots) > policy.max_snapshots and thinned.get(name) != span \
                and thinnable(table, policy, dt.datetime.fromtimestamp(now, UTC)):
            thinned[name] = span
            done.append(maintenance_observation(work.expire(now=dt.datetime.fromtimestamp(now, UTC))))
        return done

    def maintain(names: list[str]) -> list[AssetObservation]:
        done = []
        for name in names:
            try:
                done += due(name) if _exists(lakehouse, name) else []
            except Exception as exc:  # noqa: BLE001 - maintenance is never the caller's failure
                log(f"{name}: maintenance left for later: {failure_message(exc)}")
        return done

    return maintain


def _maintenance_jobs(maintenance: Maintenance, partitions: StaticPartitionsDefinition,
                      asset_tables: set[str]) -> tuple[JobDefinition, JobDefinition]:
    """The compaction job and the expiry job, a partition per table; what they did is observed on the table's
    asset."""
    def observe(context: OpExecutionContext, report: MaintenanceReport) -> None:
        context.log.info(json.dumps(report.as_dict()["figures"], default=str))
        if report.table in asset_tables:
            context.log_event(maintenance_observation(report))

    def table_of_partition(context: OpExecutionContext, lakehouse: LakehouseResource,
                         doing: str) -> TableMaintenance | None:
        """The maintenance of the run's partition's table, or None (logged) while the table does not exist."""
        name = context.partition_key
        if not _exists(lakehouse, name):
            context.log.info(f"{name} does not exist yet: nothing to {doing}")
            return None
        return TableMaintenance(lakehouse, name, maintenance.policy(name), context.log.info)

    @op(name="compact_table", description="rewrite_data_files (and deletes), then rewrite_manifests, of one table")
    def compact_table(context: OpExecutionContext, lakehouse: LakehouseResource) -> None:
        if (table := table_of_partition(context, lakehouse, "compact")) is not None:
            observe(context, table.compact())

    @op(name="expire_table", description="drop stale write branches, expire snapshots, remove orphan files")
    def expire_table(context: OpExecutionContext, lakehouse: LakehouseResource) -> None:
        if (table := table_of_partition(context, lakehouse, "expire")) is not None:
            for report in table.nightly():
                observe(context, report)

    @job(name=COMPACT_JOB, partitions_def=partitions, executor_def=in_process_executor,
         tags={"lakehouse/maintenance": "compact"}, description="Compact one table (a partition per table).")
    def compact_tables():
        compact_table()

    @job(name=EXPIRE_JOB, partitions_def=partitions, executor_def=in_process_executor,
         tags={"lakehouse/maintenance": "expire"}, description="Expire snapshots and remove orphans of one table.")
    def expire_tables():
        expire_table()

    return compact_tables, expire_tables


def _health_sensor(names: list[str], maintenance: Maintenance, asset_tables: set[str],
                   jobs: list[JobDefinition]) -> SensorDefinition:
    """Measures each table whose snapshot moved; requests compaction and thinning past its thresholds."""
    @sensor(name="lakehouse_table_health", jobs=jobs,
            default_status=DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=int(maintenance.check_interval.total_seconds()),
            description="Measures every table's health (pyiceberg); requests compaction past its thresholds, "
                        "and expiry (thinning) past max_snapshots.")
    def health_sensor(context: SensorEvaluationContext, lakehouse: LakehouseResource) -> SensorResult:
        seen = json.loads(context.cursor) if context.cursor else {}
        requests: list[RunRequest] = []
        events: list[AssetObservation | AssetCheckEvaluation] = []
        for name in names:
            if not _exists(lakehouse, name):
                continue
            table = lakehouse.iceberg_table(name)
            current = table.current_snapshot()
            if name in seen and seen[name] == (current.snapshot_id if current else None):
                continue  # unchanged since the last tick: measured, reported and requested then
            health = table_health(table, name, maintenance.policy(name))
            if name in asset_tables:
                events += [AssetObservation(asset_key=name, metadata=health.metadata()),
                           health_check_evaluation(health)]
            seen[name] = health.snapshot_id
            if health.needs_compaction:
                requests.append(RunRequest(
                    job_name=COMPACT_JOB, partition_key=name, run_key=f"compact:{name}:{health.snapshot_id}",
                    tags={"lakehouse/health": "; ".join(health.problems)[:200]},
                ))
            if health.needs_thinning:  # at most once per snapshot_detail span: a stream commits all the time
                span = int(time.time() // max(maintenance.policy(name).snapshot_detail.total_seconds(), 1))
                requests.append(RunRequest(
                    job_name=EXPIRE_JOB, partition_key=name, run_key=f"thin:{name}:{span}",
                    tags={"lakehouse/health": f"{health.snapshots} snapshots, {health.thinnable_snapshots} "
                                              "thinnable"},
                ))
        return SensorResult(run_requests=requests, asset_events=events, cursor=json.dumps(seen))

    return health_sensor


def _landing_retention(project: Project) -> tuple[JobDefinition, ScheduleDefinition]:
    """The landing zone's retention, each night: no Spark, the ingest log and the zone only."""
    @op(name="remove_taken_landing_files",
        description=f"remove the landed files taken more than {project.landing.retention} ago, unchanged since")
    def remove_taken_landing_files(context: OpExecutionContext, lakehouse: LakehouseResource) -> None:
        report = remove_taken_files(lakehouse.settings, project, log=context.log.info)
        context.log.info(json.dumps(report, default=str))

    @job(name=LANDING_JOB, executor_def=in_process_executor, tags={"lakehouse/maintenance": "landing"},
         description="Remove the landed files past the declared landing retention (bronze keeps their lines).")
    def landing_retention():
        remove_taken_landing_files()

    def nightly(context: ScheduleEvaluationContext):
        return RunRequest(run_key=f"landing:{context.scheduled_execution_time.strftime('%Y-%m-%dT%H:%M')}")

    return landing_retention, ScheduleDefinition(
        name="lakehouse_landing_retention", cron_schedule=project.maintenance.nightly, job=landing_retention,
        execution_fn=nightly, execution_timezone="UTC", default_status=DefaultScheduleStatus.RUNNING,
        description=f"Landed files taken more than {project.landing.retention} ago removed from the zone.")


def _nightly_schedule(names: list[str], maintenance: Maintenance, expire: JobDefinition) -> ScheduleDefinition:
    def nightly(context: ScheduleEvaluationContext):
        day = context.scheduled_execution_time.strftime("%Y-%m-%dT%H:%M")
        return [RunRequest(partition_key=name, run_key=f"nightly:{name}:{day}") for name in names]

    return ScheduleDefinition(name="lakehouse_nightly_maintenance", cron_schedule=maintenance.nightly,
                              job=expire, execution_fn=nightly, execution_timezone="UTC",
                              default_status=DefaultScheduleStatus.RUNNING,
                              description="Expiry of old snapshots and stale branches, then orphan removal.")


def _health_checks(checked: list[str], maintenance: Maintenance):
    """The table-health check of each asset's table (a warning: maintenance mends it)."""
    @multi_asset_check(specs=[AssetCheckSpec(CHECK, asset=name, blocking=False,
                                             description="files, deletes, snapshots and branches within the "
                                                         "table's declared thresholds") for name in checked],
                       can_subset=True, name="table_health_checks")
    def health_checks(context, lakehouse: LakehouseResource):
        for key in context.selected_asset_check_keys:
            name = key.asset_key.to_user_string()
            if not _exists(lakehouse, name):
                yield AssetCheckResult(asset_key=name, check_name=CHECK, passed=False,
                                       severity=AssetCheckSeverity.WARN, description="table not materialised yet")
                continue
            health = table_health(lakehouse.iceberg_table(name), name, maintenance.policy(name))
            yield AssetCheckResult(asset_key=name, check_name=CHECK, passed=health.healthy,
                                   severity=AssetCheckSeverity.WARN, metadata=health.metadata(),
                                   description="; ".join(health.problems) or "within the declared thresholds")

    return health_checks


def maintenance_definitions(project: Project, tables: Iterable[str], asset_tables: set[str]):
    """(jobs, sensors, schedules, checks) that keep the project's tables healthy."""
    names = sorted(tables)
    maintenance = project.maintenance
    compact, expire = _maintenance_jobs(maintenance, StaticPartitionsDefinition(names), asset_tables)
    jobs: list[JobDefinition] = [compact, expire]
    sensors = [_health_sensor(names, maintenance, asset_tables, jobs)]
    schedules = [_nightly_schedule(names, maintenance, expire)]
    if project.landing.retention is not None and project.landing_sources:
        landing_job, landing_schedule = _landing_retention(project)
        jobs.append(landing_job)
        schedules.append(landing_schedule)
    checked = sorted(asset_tables & set(names))
    return jobs, sensors, schedules, ([_health_checks(checked, maintenance)] if checked else [])
