"""Failed runs and failed asset checks reach a webhook: a real HTTP server on loopback receives the posts.

Runs and checks execute for real on test instances: the SQLite storage this repository's
dagster.yaml configures (events sharded by run) and Dagster's in-memory one.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    asset,
    asset_check,
    build_run_status_sensor_context,
    build_sensor_context,
    instance_for_test,
    materialize,
)

from lakehouse_assets.build import build_definitions
from lakehouse_assets.operations.alerts import (
    CHECK_FAILURE_SENSOR,
    RUN_FAILURE_SENSOR,
    AlertPostError,
    alert_sensors,
    check_failure_alert_sensor,
    post_message,
    run_failure_alert_sensor,
)
from lakehouse_assets.settings import Settings

from ..shop import SHOP

TOKEN = "T000/B000/secret-token"


class Webhook:
    """An HTTP server on a free loopback port that keeps the JSON bodies posted to it.

    `answers` holds the status codes of the next requests (then 200); a refused post is not kept.
    """

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.answers: list[int] = []
        self.delay = 0.0
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                time.sleep(hook.delay)
                status = hook.answers.pop(0) if hook.answers else 200
                if status == 200:
                    assert self.headers.get("Content-Type") == "application/json"
                    hook.bodies.append(json.loads(body))
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else b"no_service")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/{TOKEN}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def texts(self) -> list[str]:
        return [body["text"] for body in self.bodies]


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    hook.thread.start()
    yield hook
    hook.server.shutdown()
    hook.server.server_close()


@pytest.fixture
def closed_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/services/{TOKEN}"


@pytest.fixture(params=["sqlite", "in-memory"])
def instance(request, tmp_path) -> Iterator[DagsterInstance]:
    if request.param == "in-memory":
        with DagsterInstance.ephemeral() as ephemeral:
            yield ephemeral
    else:
        with instance_for_test(temp_dir=str(tmp_path)) as sqlite:
            yield sqlite


# --- posting --------------------------------------------------------------------------------------------


def test_a_message_is_posted_as_slack_json(webhook):
    post_message(webhook.url, "hello *lake*")
    assert webhook.bodies == [{"text": "hello *lake*"}]


def test_a_refused_post_names_the_host_and_the_reason_but_not_the_token(webhook, closed_url):
    webhook.answers = [500]
    with pytest.raises(AlertPostError) as refused:
        post_message(webhook.url, "x")
    message = str(refused.value)
    assert "127.0.0.1" in message and "HTTP 500" in message and "no_service" in message
    assert TOKEN not in message and "secret" not in message

    with pytest.raises(AlertPostError) as closed:
        post_message(closed_url, "x")
    assert "127.0.0.1" in str(closed.value) and "refused" in str(closed.value).lower()
    assert "secret" not in str(closed.value)
    assert closed.value.__cause__ is None and closed.value.__suppress_context__


def test_a_slow_webhook_times_out_with_the_reason(webhook):
    webhook.delay = 1.5
    with pytest.raises(AlertPostError, match="127.0.0.1.*timed out"):
        post_message(webhook.url, "x", timeout=0.3)


# --- failed runs ----------------------------------------------------------------------------------------


@asset
def orders_rollup():
    raise ValueError("boom: the rollup found no orders")


@asset
def orders_daily():
    return 1


def _failed_run(instance: DagsterInstance):
    result = materialize([orders_daily, orders_rollup], instance=instance, raise_on_error=False)
    assert not result.success
    run = instance.get_run_by_id(result.run_id)
    failure = instance.get_records_for_run(result.run_id, of_type=DagsterEventType.RUN_FAILURE).records
    assert run is not None and len(failure) == 1
    return run, failure[0].event_log_entry.dagster_event


def test_a_failed_run_is_posted_once_with_its_id_assets_step_and_error(webhook, instance, monkeypatch):
    monkeypatch.setenv("LAKEHOUSE_UI_URL", "http://dagster.internal:3000/")
    run, failure = _failed_run(instance)
    sensor = run_failure_alert_sensor(webhook.url)
    assert sensor.name == RUN_FAILURE_SENSOR
    context = build_run_status_sensor_context(
        sensor_name=sensor.name, dagster_event=failure, dagster_instance=instance, dagster_run=run)
    sensor(context)

    assert len(webhook.bodies) == 1 and set(webhook.bodies[0]) == {"text"}
    text = webhook.texts[0]
    assert run.run_id in text and run.job_name in text
    assert "Assets: orders_daily, orders_rollup" in text  # what the run was materialising
    assert "Failed step: orders_rollup" in text
    assert "ValueError: boom: the rollup found no orders" in text
    assert "DagsterExecutionStepExecutionError" not in text  # the author's error, not Dagster's wrapper
    assert f"http://dagster.internal:3000/runs/{run.run_id}" in text


def test_a_failed_run_without_a_ui_address_has_no_link_and_a_long_error_is_shortened(webhook, instance, monkeypatch):
    monkeypatch.delenv("LAKEHOUSE_UI_URL", raising=False)

    @asset
    def wordy():
        raise RuntimeError("x" * 5000)

    result = materialize([wordy], instance=instance, raise_on_error=False)
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    context = build_run_status_sensor_context(
        sensor_name=RUN_FAILURE_SENSOR, dagster_event=result.get_run_failure_event(),
        dagster_instance=instance, dagster_run=run)
    run_failure_alert_sensor(webhook.url)(context)
    (text,) = webhook.texts
    assert "/runs/" not in text and "http" not in text
    error = next(line for line in text.splitlines() if line.startswith("Error: "))
    assert error.startswith("Error: RuntimeError: xxx") and 400 < len(error) <= 520


# --- failed checks --------------------------------------------------------------------------------------


@asset
def orders():
    return 3


@asset_check(asset=orders, description="every order has a customer")
def orders_have_customers():
    return AssetCheckResult(passed=False, severity=AssetCheckSeverity.WARN, description="2 orders without a customer",
                            metadata={"orphans": 2, "sample": "o-17, o-42"})


@asset_check(asset=orders)
def orders_not_empty():
    return AssetCheckResult(passed=True, metadata={"rows": 3})


def _materialise_orders(instance: DagsterInstance) -> str:
    result = materialize([orders, orders_have_customers, orders_not_empty], instance=instance)
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"orders_have_customers": False, "orders_not_empty": True}
    return result.run_id


def _evaluate(sensor, instance, cursor):
    """One tick as the daemon evaluates it: the cursor it returns is the one the daemon keeps."""
    result = sensor.evaluate_tick(build_sensor_context(instance=instance, cursor=cursor))
    assert result.cursor is not None
    return result


def test_a_failed_check_is_posted_once_and_history_is_not(webhook, instance):
    sensor = check_failure_alert_sensor(webhook.url)
    assert sensor.name == CHECK_FAILURE_SENSOR and sensor.minimum_interval_seconds == 30
    _materialise_orders(instance)  # history from before the sensor started

    first = _evaluate(sensor, instance, None)
    assert webhook.bodies == []

    run_id = _materialise_orders(instance)
    second = _evaluate(sensor, instance, first.cursor)
    assert len(webhook.bodies) == 1 and set(webhook.bodies[0]) == {"text"}
    text = webhook.texts[0]
    assert "Asset check failed: orders / orders_have_customers (severity WARN)" in text
    assert f"Run: {run_id}" in text
    assert "2 orders without a customer" in text and "orphans=2" in text and "sample=o-17, o-42" in text
    assert "orders_not_empty" not in text

    third = _evaluate(sensor, instance, second.cursor)
    assert len(webhook.bodies) == 1  # not posted twice
    assert int(third.cursor) >= int(second.cursor) > int(first.cursor)


def test_a_check_reported_outside_a_run_is_posted(webhook, instance, monkeypatch):
    monkeypatch.setenv("LAKEHOUSE_UI_URL", "http://dagster.internal:3000")
    sensor = check_failure_alert_sensor(webhook.url)
    start = _evaluate(sensor, instance, None)
    instance.report_runless_asset_event(AssetCheckEvaluation(
        asset_key=AssetKey(["lake", "orders"]), check_name="table_health", passed=False,
        severity=AssetCheckSeverity.WARN, description="412 small files (threshold 100)"))
    _evaluate(sensor, instance, start.cursor)
    (text,) = webhook.texts
    assert "lake/orders / table_health (severity WARN)" in text and "412 small files" in text
    assert "Run: none" in text and "http://dagster.internal:3000/assets/lake/orders" in text


def test_an_unposted_check_keeps_the_cursor_and_arrives_once_the_webhook_answers(webhook, instance):
    sensor = check_failure_alert_sensor(webhook.url)
    start = _evaluate(sensor, instance, None)
    _materialise_orders(instance)

    webhook.answers = [500]
    context = build_sensor_context(instance=instance, cursor=start.cursor)
    with pytest.raises(Exception, match="127.0.0.1.*HTTP 500") as failed:
        sensor(context)
    assert TOKEN not in str(failed.value)
    assert context.cursor == start.cursor  # not advanced past the unposted evaluation
    assert webhook.bodies == []

    retried = _evaluate(sensor, instance, start.cursor)
    assert len(webhook.texts) == 1 and "orders / orders_have_customers" in webhook.texts[0]
    _evaluate(sensor, instance, retried.cursor)
    assert len(webhook.texts) == 1


def test_a_closed_port_fails_the_tick_too(closed_url, instance):
    sensor = check_failure_alert_sensor(closed_url)
    start = _evaluate(sensor, instance, None)
    _materialise_orders(instance)
    context = build_sensor_context(instance=instance, cursor=start.cursor)
    with pytest.raises(AlertPostError, match="127.0.0.1"):
        sensor(context)
    assert context.cursor == start.cursor


def test_a_failure_after_some_posts_keeps_those_and_retries_only_the_rest(webhook, instance):
    sensor = check_failure_alert_sensor(webhook.url)
    start = _evaluate(sensor, instance, None)
    first_run, second_run = _materialise_orders(instance), _materialise_orders(instance)

    webhook.answers = [200, 500]  # the first failed check gets through, the second does not
    partial = _evaluate(sensor, instance, start.cursor)
    assert len(webhook.texts) == 1 and first_run in webhook.texts[0]

    _evaluate(sensor, instance, partial.cursor)
    assert len(webhook.texts) == 2 and second_run in webhook.texts[1]


def test_a_backlog_is_read_in_pages(webhook, instance, monkeypatch):
    import lakehouse_assets.operations.alerts as alerts

    monkeypatch.setattr(alerts, "PAGE", 2)
    sensor = check_failure_alert_sensor(webhook.url)
    start = _evaluate(sensor, instance, None)
    runs = [_materialise_orders(instance) for _ in range(3)]  # six evaluations, three failed
    _evaluate(sensor, instance, start.cursor)
    assert [next(r for r in runs if r in text) for text in webhook.texts] == runs


# --- configuration --------------------------------------------------------------------------------------


def _sensor_names(settings: Settings) -> set[str]:
    return {s.name for s in build_definitions(SHOP, settings).sensors or []}


def test_the_sensors_exist_only_when_a_webhook_is_configured(tmp_path):
    off = Settings.from_env(home=tmp_path)
    assert off.alert_webhook == "" and alert_sensors(off) == []
    assert not _sensor_names(off) & {RUN_FAILURE_SENSOR, CHECK_FAILURE_SENSOR}

    on = Settings.from_env(home=tmp_path, alert_webhook="http://127.0.0.1:9/hook")
    assert {RUN_FAILURE_SENSOR, CHECK_FAILURE_SENSOR} <= _sensor_names(on)
    assert all(s.default_status.value == "RUNNING" for s in alert_sensors(on))


def test_the_webhook_comes_from_the_environment_or_a_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKEHOUSE_ALERT_WEBHOOK", "https://hooks.slack.com/services/T1/B1/abc")
    assert Settings.from_env(home=tmp_path).alert_webhook == "https://hooks.slack.com/services/T1/B1/abc"
    monkeypatch.delenv("LAKEHOUSE_ALERT_WEBHOOK")

    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("profiles:\n  alerting:\n    LAKEHOUSE_ALERT_WEBHOOK: ${HOOK_URL}\n")
    monkeypatch.setenv("LAKEHOUSE_PROFILES", str(profiles))
    monkeypatch.setenv("LAKEHOUSE_PROFILE", "alerting")
    monkeypatch.setenv("HOOK_URL", "https://chat.example.com/hooks/xyz")
    assert Settings.from_env(home=tmp_path).alert_webhook == "https://chat.example.com/hooks/xyz"


@pytest.mark.parametrize("bad", ["hooks.slack.com/services/tok3n", "ftp://chat.example.com/tok3n", "https:///tok3n",
                                 "http://a b/tok3n", "http://[::1/tok3n"])
def test_a_malformed_webhook_is_refused_without_echoing_it(bad, tmp_path):
    with pytest.raises(ValueError, match="LAKEHOUSE_ALERT_WEBHOOK must be an http:// or https:// URL") as refused:
        Settings.from_env(home=tmp_path, alert_webhook=bad)
    assert "tok3n" not in str(refused.value)


def test_the_webhook_url_is_never_shown(tmp_path):
    url = f"https://hooks.slack.com/services/{TOKEN}"
    settings = Settings.from_env(home=tmp_path, alert_webhook=url)
    assert settings.describe()["alert_webhook"] == "(set)"
    assert "secret-token" not in json.dumps(settings.describe()) and "secret-token" not in repr(settings)
    assert all("secret-token" not in (s.description or "") for s in alert_sensors(settings))
    assert Settings.from_env(home=tmp_path).describe()["alert_webhook"] == ""
