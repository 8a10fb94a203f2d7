"""Automation that keeps every table after bronze fresh without anyone starting runs.

The landing sensors run bronze. Silver, gold and ML follow by automation
conditions:

- a partition is requested when an upstream partition it reads was updated
  since the partition last handled its parents' updates. Late data for an old
  day counts too: silver's event day E reads the bronze landing days
  E..E+late_days, so a late file re-runs the event days it can hold;
- an update of a partition handles a parent's commit only if it read that
  commit (ReadItsParentsNewest), so a parent commit made while its child runs
  requests the child again;
- a BI table's latest partition is also requested when its freshness window has
  just failed.

Nothing is requested while upstream is running or the asset already runs, so a
short freshness window does not become a loop; BI day partitions also wait
while an upstream partition is missing.
"""

import warnings
from typing import Any

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    AutomationContext,
    AutomationResult,
    BetaWarning,
    DagsterInstance,
    DefaultSensorStatus,
    TimeWindowPartitionMapping,
)


class ReadItsParentsNewest(AutomationCondition):
    """True for a partition whose newest materialization read every parent table's newest commit.

    A materialization records the parent snapshots its step read (`read_snapshots`: {table: [snapshot id, read
    at ms]}). When a parent was materialized after that read, with another snapshot than the one read, the child
    has not seen that commit: the child's update does not count as handling it, in whatever order the daemon's
    ticks saw the two events.
    A materialization that recorded nothing is taken as having read everything (as Dagster's own rule does).
    """

    @property
    def name(self) -> str:
        return "read_its_parents_newest"

    @property
    def description(self) -> str:
        return "its newest materialization read each parent's newest commit"

    def evaluate(self, context: AutomationContext) -> AutomationResult:  # type: ignore[override]
        if context.candidate_subset.is_empty:
            return AutomationResult(context, context.get_empty_subset())
        instance = context.asset_graph_view.instance
        key = context.key
        parents = context.asset_graph.get(key).parent_keys
        newest_of: dict[AssetKey, tuple[int, float] | None] = {}
        kept = set()
        for part in context.candidate_subset.expensively_compute_asset_partitions():
            if _read_the_newest(instance, key, part.partition_key, parents, newest_of):
                kept.add(part)
        return AutomationResult(context, context.asset_graph_view.get_asset_subset_from_asset_partitions(key, kept))


def _newest_commit(instance: DagsterInstance, parent: AssetKey) -> tuple[int, float] | None:
    """The snapshot id and time of a parent's newest materialization (any partition: a child reads the parent
    table's current snapshot), or None when it recorded no snapshot."""
    found = instance.fetch_materializations(AssetRecordsFilter(asset_key=parent), limit=1).records
    materialization = found[0].asset_materialization if found else None
    snapshot = materialization.metadata.get("snapshot_id") if materialization else None
    if snapshot is None or not isinstance(snapshot.value, int):
        return None
    return snapshot.value, found[0].timestamp


def _read_the_newest(instance: DagsterInstance, key: AssetKey, partition: str | None, parents: Any,
                     newest_of: dict[AssetKey, tuple[int, float] | None]) -> bool:
    found = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1).records
    materialization = found[0].asset_materialization if found else None
    read = materialization.metadata.get("read_snapshots") if materialization else None
    if read is None or not isinstance(read.value, dict):
        return True
    for parent in parents:
        table = parent.path[-1]  # a table asset is named as its table
        if table not in read.value:
            continue
        if parent not in newest_of:
            newest_of[parent] = _newest_commit(instance, parent)
        newest = newest_of[parent]
        if newest is None:
            continue
        snapshot, at = newest
        read_snapshot, read_at_ms = read.value[table]
        if snapshot != read_snapshot and at * 1000 > read_at_ms:
            return False  # the parent committed after the child read it
    return True


# A partition has handled its parents' updates when it was updated after reading their newest commits, or when
# it was requested on the previous tick and no parent was updated since. Dagster's boolean conditions carry no
# times: without that last part, a request and a parent update seen on the same tick would count as handled.
HANDLED = (
    AutomationCondition.initial_evaluation()
    | (AutomationCondition.newly_requested() & ~AutomationCondition.any_deps_updated())
    | (AutomationCondition.newly_updated() & ReadItsParentsNewest())
).with_label("handled")
UPSTREAM_UPDATED = AutomationCondition.any_deps_updated().since(HANDLED).with_label("upstream updated")
FRESHNESS_FAILED = (
    AutomationCondition.in_latest_time_window() & AutomationCondition.freshness_failed().newly_true()
).with_label("freshness failed")

BI_REFRESH = (
    (UPSTREAM_UPDATED | FRESHNESS_FAILED)
    & ~AutomationCondition.any_deps_missing()
    & ~AutomationCondition.any_deps_in_progress()
    & ~AutomationCondition.in_progress()
).with_label("bi_refresh")

# A BI day that reads its neighbours (sessions cross midnight) does not wait for a neighbour day with no data.
BI_REFRESH_ACROSS_DAYS = (
    (UPSTREAM_UPDATED | FRESHNESS_FAILED)
    & ~AutomationCondition.any_deps_in_progress()
    & ~AutomationCondition.in_progress()
).with_label("bi_refresh")


# Silver and ML: follow upstream; a bronze landing day with no files is no reason to wait.
CHAIN_REFRESH = (
    UPSTREAM_UPDATED & ~AutomationCondition.any_deps_in_progress() & ~AutomationCondition.in_progress()
).with_label("chain_refresh")


def reads_days(before: int, after: int) -> TimeWindowPartitionMapping:
    """Day D reads the upstream days D-before..D+after (also those not yet in the partitions): an update of
    any of them refreshes D."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)  # allow_nonexistent_upstream_partitions is beta: nothing to do
        return TimeWindowPartitionMapping(start_offset=-before, end_offset=after,
                                          allow_nonexistent_upstream_partitions=True)


def landing_days_of(late_days: int) -> TimeWindowPartitionMapping:
    """The events of day E land on the landing days E..E+late_days (also those still to come), which silver's
    day E therefore reads."""
    return reads_days(0, late_days)


def automation_sensor(assets) -> AutomationConditionSensorDefinition:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)  # use_user_code_server: needed by a condition of our own
        return AutomationConditionSensorDefinition(
            "lakehouse_automation",
            target=assets,
            default_status=DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=30,
            description="Evaluates the automation conditions of silver, gold and ML (upstream updated, freshness "
                        "failed).",
            use_user_code_server=True,  # a condition of this project's own (ReadItsParentsNewest) is evaluated here
        )

# A whole-table asset over partitioned parents: most parent partitions are
# "missing" (days with no data), so it waits only for parents in progress.
BI_REFRESH_WHOLE = (
    (UPSTREAM_UPDATED | AutomationCondition.freshness_failed().newly_true().with_label("freshness failed"))
    & ~AutomationCondition.any_deps_in_progress()
    & ~AutomationCondition.in_progress()
).with_label("bi_refresh")
