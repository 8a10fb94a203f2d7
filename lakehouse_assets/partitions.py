"""The time partitioning every daily asset shares."""

from __future__ import annotations

from dagster import BackfillPolicy, DailyPartitionsDefinition

from .settings import Settings

DAILY = DailyPartitionsDefinition(start_date=Settings.from_env().start_date, timezone="UTC")

# One Spark job for a whole range: a 10-day backfill is one run, not ten JVM starts.
SINGLE_RUN = BackfillPolicy.single_run()
