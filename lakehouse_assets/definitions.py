"""Everything Dagster loads: assets, checks, resources, the in-process executor."""

from __future__ import annotations

from dagster import Definitions, in_process_executor

from .automation.bi import bi_automation_sensor
from .automation.landing_sensors import landing_sensor
from .bronze.cdc import CDC_SOURCES, bronze_cdc_assets
from .bronze.events import EVENTS, bronze_events
from .gold.bi import bi_assets
from .gold.daily_activity import gold_daily_activity
from .ml.features import ml_training_set, ml_user_features
from .runtime.resource import LakehouseResource
from .silver.cdc import silver_cdc_assets
from .silver.events import silver_events

defs = Definitions(
    assets=[bronze_events, *bronze_cdc_assets, silver_events, *silver_cdc_assets, gold_daily_activity, *bi_assets,
            ml_user_features, ml_training_set],
    sensors=[
        *(landing_sensor(source) for source in (EVENTS, *CDC_SOURCES.values())),
        bi_automation_sensor([*bi_assets, gold_daily_activity]),
    ],
    resources={"lakehouse": LakehouseResource()},
    # One JVM for the whole run: a process per step would start Spark each time.
    executor=in_process_executor,
)
