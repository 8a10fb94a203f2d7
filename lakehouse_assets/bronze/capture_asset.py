"""capture_<source>: Debezium captures a declared PostgreSQL source into the landing zone, from Dagster.

Declared with `capture:` under a `cdc:` entry. A run captures until the source
has been idle for `until_idle` (or `max_duration` passed), in a process of its
own (the embedded Debezium engine runs on its own JVM), then reports what it
landed and how much WAL the replication slot retains on the server, which a
check compares with the declared limit: a slot nobody reads makes the source
database keep its WAL forever. The landing sensors take the files from there.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetsDefinition,
    MaterializeResult,
    MetadataValue,
    ScheduleDefinition,
    asset,
)

from ..errors import LakehouseError
from ..project import Project
from ..project.model import Capture
from ..runtime.resource import LakehouseResource


def capture_asset(project: Project, capture: Capture) -> AssetsDefinition:
    name = f"capture_{capture.source}"
    tables = sorted(t.name for t in project.cdc.values() if t.source == capture.source)

    @asset(
        name=name,
        group_name="capture",
        kinds={"debezium", "postgres"},
        description=f"Debezium (PostgreSQL, pgoutput) captures {', '.join(tables)} into the landing zone.",
        check_specs=[AssetCheckSpec(
            name="replication_slot_wal", asset=name, blocking=False,
            description=f"the slot retains at most {capture.max_retained_wal_bytes >> 20} MiB of WAL on the source",
        )],
    )
    def _asset(context: AssetExecutionContext, lakehouse: LakehouseResource):
        settings = lakehouse.settings
        command = [str(Path(sys.executable).with_name("lakehouse")), "capture", "--source", capture.source, "--json",
                   "--until-idle", str(capture.until_idle.total_seconds()),
                   "--max-seconds", str(capture.max_duration.total_seconds())]
        env = {**os.environ, "LAKEHOUSE_PROJECT": str(project.file), "LAKEHOUSE_HOME": str(settings.home),
               "LAKEHOUSE_LANDING": settings.landing}
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=capture.max_duration.total_seconds() + 300)
        if done.returncode != 0:
            raise LakehouseError(f"capture of {capture.source} failed: {done.stderr.strip()[-2000:]}")
        report = json.loads(done.stdout)
        context.log.info(f"captured {report['records']} records into {len(report['files'])} files")
        retained = report["retained_wal_bytes"]
        yield MaterializeResult(
            metadata={
                "records": MetadataValue.int(report["records"]),
                "tombstones": MetadataValue.int(report["tombstones"]),
                "files": MetadataValue.json(report["files"]),
                "recovered_part_files": MetadataValue.int(len(report["recovered_part_files"])),
                "retained_wal_bytes": MetadataValue.int(retained if retained is not None else -1),
            },
            check_results=[AssetCheckResult(
                check_name="replication_slot_wal", passed=retained is not None and
                retained <= capture.max_retained_wal_bytes, severity=AssetCheckSeverity.WARN,
                metadata={"retained_wal_bytes": MetadataValue.int(retained if retained is not None else -1),
                          "limit_bytes": MetadataValue.int(capture.max_retained_wal_bytes)},
            )],
        )

    return _asset


def capture_schedule(capture: Capture, target: AssetsDefinition) -> ScheduleDefinition | None:
    if capture.schedule is None:
        return None
    return ScheduleDefinition(name=f"capture_{capture.source}_schedule", cron_schedule=capture.schedule,
                              target=target)
