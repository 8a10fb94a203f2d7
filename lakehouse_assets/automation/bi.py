"""Automation that keeps the BI tables fresh without a person.

A BI partition is requested when an upstream partition it reads was updated
since it was last handled (late data for an old day included), and the latest
partition when the asset's freshness window has just failed. Nothing is
requested while upstream is missing or running, or while the asset is already
running: a short freshness window must not turn into a loop of runs.
"""

from dagster import AutomationCondition, AutomationConditionSensorDefinition, DefaultSensorStatus

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


def bi_automation_sensor(assets) -> AutomationConditionSensorDefinition:
    return AutomationConditionSensorDefinition(
        "bi_automation",
        target=assets,
        default_status=DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
        description="Evaluates the BI tables' automation conditions (upstream updated, freshness failed).",
    )

# A whole-table asset over partitioned parents: most parent partitions are
# "missing" (days with no data), so it waits only for parents in progress.
BI_REFRESH_WHOLE = (
    (UPSTREAM_UPDATED | AutomationCondition.freshness_failed().newly_true().with_label("freshness failed"))
    & ~AutomationCondition.any_deps_in_progress()
    & ~AutomationCondition.in_progress()
).with_label("bi_refresh")
