"""The time partitioning every daily asset shares."""

from __future__ import annotations

import warnings

from dagster import BackfillPolicy, BetaWarning, DailyPartitionsDefinition

from .settings import Settings

DAILY = DailyPartitionsDefinition(start_date=Settings.from_env().start_date, timezone="UTC")

# One Spark job for a whole range: a 10-day backfill is one run, not ten JVM starts.
SINGLE_RUN = BackfillPolicy.single_run()
# Dagster marks backfill_policy as beta on every asset that sets it; nothing to act on.
warnings.filterwarnings("ignore", message=".*backfill_policy.*", category=BetaWarning)
