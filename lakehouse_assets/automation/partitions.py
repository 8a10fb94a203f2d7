"""The time partitioning every daily asset of a project shares."""

from __future__ import annotations

import datetime as dt
import warnings

from dagster import BackfillPolicy, BetaWarning, DailyPartitionsDefinition


def daily_partitions(start: dt.date | str) -> DailyPartitionsDefinition:
    """Days from `start`, today included: the day being filled is a partition while it fills."""
    return DailyPartitionsDefinition(start_date=str(start), timezone="UTC", end_offset=1)


# One Spark job for a whole range: a 10-day backfill is one run, not ten JVM starts.
SINGLE_RUN = BackfillPolicy.single_run()
# Dagster marks backfill_policy as beta on every asset that sets it; nothing to act on.
warnings.filterwarnings("ignore", message=".*backfill_policy.*", category=BetaWarning)
