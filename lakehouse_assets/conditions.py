"""Automation that keeps every table after bronze fresh without a person.

The landing sensors run bronze. Silver, gold and ML follow by automation
conditions: a partition is requested when an upstream partition it reads was
updated since it was last handled (late data for an old day included: silver's
event day E reads the bronze landing days E..E+late_days, so a late file
re-runs the event days it can hold), and a BI table's latest partition when its
freshness window has just failed. Nothing is requested while upstream is
running or the asset already runs, so a short freshness window does not become a
loop; BI day partitions also wait while an upstream partition is missing.
"""

import warnings

from dagster import (
    AutomationCondition,
    AutomationConditionSensorDefinition,
    BetaWarning,
    DefaultSensorStatus,
    TimeWindowPartitionMapping,
)

UPSTREAM_UPDATED = AutomationCondition.any_deps_updated().since_last_handled().with_label("upstream updated")
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
    """Day D reads the upstream days D-before..D+after (those not yet in the partitions included): an update of
    any of them refreshes D."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)  # allow_nonexistent_upstream_partitions: nothing to act on
        return TimeWindowPartitionMapping(start_offset=-before, end_offset=after,
                                          allow_nonexistent_upstream_partitions=True)


def landing_days_of(late_days: int) -> TimeWindowPartitionMapping:
    """An event day E is held by the landing days E..E+late_days (those to come too)."""
    return reads_days(0, late_days)


def automation_sensor(assets) -> AutomationConditionSensorDefinition:
    return AutomationConditionSensorDefinition(
        "lakehouse_automation",
        target=assets,
        default_status=DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
        description="Evaluates the automation conditions of silver, gold and ML (upstream updated, freshness failed).",
    )

# A whole-table asset over partitioned parents: most parent partitions are
# "missing" (days with no data), so it waits only for parents in progress.
BI_REFRESH_WHOLE = (
    (UPSTREAM_UPDATED | AutomationCondition.freshness_failed().newly_true().with_label("freshness failed"))
    & ~AutomationCondition.any_deps_in_progress()
    & ~AutomationCondition.in_progress()
).with_label("bi_refresh")
