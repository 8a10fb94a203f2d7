"""Failed runs and failed asset checks, posted to a chat webhook.

Off unless configured: set `LAKEHOUSE_ALERT_WEBHOOK` (or the profile's value of it) to an
incoming-webhook URL and two sensors, running by default, post a message there:

- `alert_webhook_run_failure`, once per failed run of any job of this code location: the run
  id, the job, the assets the run was materialising (and its partition), the first failed
  step with its error, and a link to the run.
- `alert_webhook_check_failure`, once per failed asset check evaluation (`passed=False`, any
  severity, whether a run or a sensor reported it): the asset, the check, its severity, the
  run id, its description and a summary of its metadata. It reads the instance's event log
  after its cursor; when first started it begins at the newest event rather than reporting
  the history.

The message is `{"text": "..."}` as JSON, Slack's incoming-webhook format, which Mattermost,
Rocket.Chat and Discord (its `/slack` endpoint) accept too. Set `LAKEHOUSE_UI_URL` to the
Dagster UI's address (e.g. `http://dagster.internal:3000`) to add a link to each run.

When the webhook cannot be reached, the sensor's tick fails with the webhook's host and the
reason (never the URL: it holds the token). A failed check's message is then tried again on the
next ticks until it gets through: the check sensor's cursor never passes an unposted evaluation.
A failed run's is not: Dagster moves a run-status sensor's cursor on even when it raised, so as
not to repeat side effects; the failed tick in the UI is the trace of it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.client import HTTPException
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from dagster import (
    DagsterEventType,
    DagsterRun,
    DefaultSensorStatus,
    EventLogEntry,
    RunFailureSensorContext,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_failure_sensor,
    sensor,
)

if TYPE_CHECKING:
    from dagster._utils.error import SerializableErrorInfo

    from ..settings import Settings

RUN_FAILURE_SENSOR = "alert_webhook_run_failure"
CHECK_FAILURE_SENSOR = "alert_webhook_check_failure"
UI_URL_VARIABLE = "LAKEHOUSE_UI_URL"
ERROR_CHARS = 500  # of an error message in a post
PAGE = 100  # check evaluations read from the event log at a time
PAGES_PER_TICK = 10  # a backlog beyond that is read on the next ticks
POSTS_PER_TICK = 20  # failed checks posted in one tick; the rest on the next ticks


class AlertPostError(RuntimeError):
    """A message could not be posted to the webhook."""


def _host(url: str) -> str:
    """The webhook's host (and port): enough to say where, without the path that holds the token."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port else host


def post_message(url: str, text: str, timeout: float = 10) -> None:
    """POST `{"text": text}` as JSON to the webhook; raises AlertPostError naming the host and the reason."""
    request = urllib.request.Request(
        url, data=json.dumps({"text": text}).encode(), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "lakehouse-alerts"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
        return
    except urllib.error.HTTPError as exc:
        body = ""
        try:
            body = exc.read(200).decode(errors="replace").strip()
        except (OSError, HTTPException):
            pass
        reason = f"HTTP {exc.code} {exc.reason}" + (f": {body}" if body else "")
    except urllib.error.URLError as exc:
        reason = str(exc.reason)
    except (OSError, HTTPException) as exc:  # a timeout while reading, a dropped connection
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    # `from None`: the original exception may carry the full URL.
    raise AlertPostError(f"posting an alert to the webhook at {_host(url)} failed: {reason}") from None


def _shorten(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _ui_url() -> str:
    return os.environ.get(UI_URL_VARIABLE, "").strip().rstrip("/")


def _run_link(run_id: str) -> str | None:
    base = _ui_url()
    return f"{base}/runs/{run_id}" if base and run_id else None


def _user_error(error: SerializableErrorInfo) -> str:
    """The error as its author wrote it: Dagster wraps a step's exception in its own, the cause is the one to read."""
    found = error
    while found.cause is not None and found.cls_name and found.cls_name.startswith("Dagster"):
        found = found.cause
    return found.message


def _run_assets(context: RunFailureSensorContext) -> list[str]:
    """The assets the run was materialising: its selection, else those it planned, else its failed steps."""
    run: DagsterRun = context.dagster_run
    if run.asset_selection:
        return sorted(key.to_user_string() for key in run.asset_selection)
    planned = context.instance.get_records_for_run(
        run_id=run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION_PLANNED).records
    keys = {record.asset_key.to_user_string() for record in planned if record.asset_key is not None}
    if keys:
        return sorted(keys)
    return sorted({event.step_key for event in context.get_step_failure_events() if event.step_key})


def run_failure_text(context: RunFailureSensorContext) -> str:
    run = context.dagster_run
    lines = [f"Run failed: {run.run_id} (job {run.job_name})"]
    assets = _run_assets(context)
    if assets:
        shown = ", ".join(assets[:20]) + (f" and {len(assets) - 20} more" if len(assets) > 20 else "")
        lines.append(f"Assets: {shown}")
    partition = run.tags.get("dagster/partition")
    if partition:
        lines.append(f"Partition: {partition}")
    steps = context.get_step_failure_events()
    if steps:
        first = steps[0]
        error = first.step_failure_data.error
        lines.append(f"Failed step: {first.step_key}" + (f" (and {len(steps) - 1} more)" if len(steps) > 1 else ""))
        lines.append(f"Error: {_shorten(_user_error(error), ERROR_CHARS) if error else first.message or '?'}")
    else:  # failed outside a step: at launch, or the run worker died
        failure = context.failure_event
        error = getattr(failure.event_specific_data, "error", None)
        message = _user_error(error) if error else failure.message or "the run failed"
        lines.append(f"Error: {_shorten(message, ERROR_CHARS)}")
    link = _run_link(run.run_id)
    if link:
        lines.append(link)
    return "\n".join(lines)


def run_failure_alert_sensor(url: str) -> SensorDefinition:
    """Posts one message per failed run of the code location's jobs (Dagster's cursor: each run once)."""

    @run_failure_sensor(name=RUN_FAILURE_SENSOR, default_status=DefaultSensorStatus.RUNNING,
                        description=f"Posts each failed run to the alert webhook at {_host(url)}")
    def alert_run_failure(context: RunFailureSensorContext) -> None:
        post_message(url, run_failure_text(context))
        context.log.info(f"posted the failure of run {context.dagster_run.run_id} to {_host(url)}")

    return alert_run_failure


def _metadata_summary(metadata: Mapping[str, object], entries: int = 6, chars: int = 80) -> str:
    parts = []
    for key, value in list(metadata.items())[:entries]:
        shown = getattr(value, "value", value)
        if not isinstance(shown, str):
            shown = json.dumps(shown, default=str) if isinstance(shown, (dict, list)) else str(shown)
        parts.append(f"{key}={_shorten(shown, chars)}")
    more = len(metadata) - entries
    return ", ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def check_failure_text(entry: EventLogEntry) -> str | None:
    """The message for a failed check evaluation; None for one that passed."""
    event = entry.dagster_event
    if event is None:
        return None
    evaluation = event.asset_check_evaluation_data
    if evaluation.passed:
        return None
    asset = evaluation.asset_key.to_user_string()
    lines = [f"Asset check failed: {asset} / {evaluation.check_name} (severity {evaluation.severity.value})"]
    if evaluation.partition:
        lines.append(f"Partition: {evaluation.partition}")
    lines.append(f"Run: {entry.run_id}" if entry.run_id else "Run: none (reported outside a run, e.g. by a sensor)")
    if evaluation.description:
        lines.append(f"Description: {_shorten(evaluation.description, ERROR_CHARS)}")
    if evaluation.metadata:
        lines.append(f"Metadata: {_shorten(_metadata_summary(evaluation.metadata), ERROR_CHARS)}")
    link = _run_link(entry.run_id)
    if link is None and _ui_url():
        link = f"{_ui_url()}/assets/{'/'.join(quote(part, safe='') for part in evaluation.asset_key.path)}"
    if link:
        lines.append(link)
    return "\n".join(lines)


def check_failure_alert_sensor(url: str, minimum_interval_seconds: int = 30) -> SensorDefinition:
    """Posts one message per failed asset check evaluation after its cursor (the last storage id read).

    The event log's storage ids of check evaluations are global (SQLite keeps them in its index
    shard, PostgreSQL in its one table), so `get_logs_for_all_runs_by_log_id` pages through them
    in order. The cursor moves past an evaluation only once its message is posted (or it passed).
    """

    @sensor(name=CHECK_FAILURE_SENSOR, minimum_interval_seconds=minimum_interval_seconds,
            default_status=DefaultSensorStatus.RUNNING,
            description=f"Posts each failed asset check to the alert webhook at {_host(url)}")
    def alert_check_failure(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        storage = context.instance.event_log_storage
        if not (context.cursor or "").strip().isdigit():
            newest = storage.get_maximum_record_id() or 0
            return SensorResult(cursor=str(newest),
                                skip_reason=f"starting at event {newest}: earlier check results are not posted")
        cursor = int(context.cursor)  # type: ignore[arg-type]
        posted = 0
        for _ in range(PAGES_PER_TICK):
            page = storage.get_logs_for_all_runs_by_log_id(
                after_cursor=cursor, dagster_event_type=DagsterEventType.ASSET_CHECK_EVALUATION, limit=PAGE)
            for storage_id in sorted(page):
                text = check_failure_text(page[storage_id])
                if text is not None:
                    if posted >= POSTS_PER_TICK:
                        return SensorResult(cursor=str(cursor), skip_reason=f"posted {posted}; more next tick")
                    try:
                        post_message(url, text)
                    except AlertPostError as exc:
                        if not posted:
                            raise  # the tick fails, the cursor stays: the same evaluation is tried next tick
                        # Keep what was posted (so it is not posted twice); this one leads the next tick.
                        context.log.error(f"{exc}; trying again next tick")
                        return SensorResult(cursor=str(cursor), skip_reason=f"posted {posted}, then: {exc}")
                    posted += 1
                cursor = storage_id
            if len(page) < PAGE:
                break
        return SensorResult(cursor=str(cursor),
                            skip_reason=None if posted else "no failed asset check since the last tick")

    return alert_check_failure


def alert_sensors(settings: Settings) -> list[SensorDefinition]:
    """Both alert sensors when `LAKEHOUSE_ALERT_WEBHOOK` is set; none otherwise."""
    if not settings.alert_webhook:
        return []
    return [run_failure_alert_sensor(settings.alert_webhook), check_failure_alert_sensor(settings.alert_webhook)]
