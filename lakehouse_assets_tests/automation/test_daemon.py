"""The live path, live: the real Dagster daemon takes files landing today and late, all the way to gold.

A temporary Dagster instance (this repository's dagster.yaml: SQLite storage, one
run at a time) and the shop declaration on a temporary lake; `dagster-daemon run`
evaluates the landing sensors and the automation sensor as in production. Two
files land, one for today and one late for an old day, and nobody launches a run:
both must reach gold_minute_activity and gold_daily_activity.
"""

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance
from pyiceberg.expressions import EqualTo

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.settings import Settings
from lakehouse_assets.streaming import heartbeat_file

from ..shop import temporary_instance

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # whole processes: the daemon, the stream

DEADLINE_S = 600


def _events(day: dt.date, n: int, prefix: str) -> list[dict]:
    """n events a second apart; today's end a minute ago, so just after midnight some fall on yesterday, as a
    file landing then would hold."""
    start = dt.datetime.combine(day, dt.time(0, 5), dt.timezone.utc)
    if day == dt.datetime.now(dt.timezone.utc).date():
        start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1, seconds=n)
    return [{
        "event_id": f"{prefix}-{i}", "user_id": f"u{i % 5}", "session_id": f"{prefix}-s{i % 3}",
        "event_type": "page_view", "event_ts": (start + dt.timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
        "properties": {"user_agent": "Mozilla/5.0"},
    } for i in range(n)]


def _gold_events(settings: Settings, table: str, column: str) -> Counter:
    """Events per day in a gold table."""
    catalog = catalog_for(settings)
    if not catalog.table_exists((settings.namespace, table)):
        return Counter()
    got: Counter = Counter()
    for r in catalog.load_table((settings.namespace, table)).scan().to_arrow().to_pylist():
        got[r[column].date() if isinstance(r[column], dt.datetime) else r[column]] += r["events"]
    return got


def _start(args: list[str], env: dict, tmp_path: Path, log: str) -> subprocess.Popen:
    return subprocess.Popen(args, env=env, cwd=tmp_path, stdout=open(tmp_path / log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


def _land(landing: Path, day: dt.date, name: str, n: int) -> Counter:
    """Land a file whole, as a producer would; its events per day."""
    events = _events(day, n, name)
    folder = landing / f"date={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{name}.jsonl.part").write_text("".join(json.dumps(e) + "\n" for e in events))
    (folder / f".{name}.jsonl.part").rename(folder / f"{name}.jsonl")
    return Counter(dt.date.fromisoformat(e["event_ts"][:10]) for e in events)


def _daemon(env: dict, dagster_home: Path, tmp_path: Path) -> subprocess.Popen:
    return _start([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
                   str(dagster_home / "workspace.yaml")], env, tmp_path, "daemon.log")


def test_files_landing_today_and_late_reach_gold_with_no_run_launched_by_hand(tmp_path):
    env, settings, dagster_home = temporary_instance(tmp_path, "daemon-test-key")
    landing = settings.local_path(settings.landing) / "events"
    daemon = _daemon(env, dagster_home, tmp_path)
    try:
        today = dt.datetime.now(dt.timezone.utc).date()
        days = _land(landing, today, "today", 40) + _land(landing, today - dt.timedelta(days=5), "late", 25)
        started = time.monotonic()
        want = {("gold_minute_activity", "minute"): days, ("gold_daily_activity", "activity_date"): days}
        got: dict = {}
        while time.monotonic() - started < DEADLINE_S:
            got = {k: _gold_events(settings, *k) for k in want}
            if got == want:
                break
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
            time.sleep(10)
        assert got == want, f"after {time.monotonic() - started:.0f} s: {got}\n" + \
            (tmp_path / "daemon.log").read_text()[-3000:]
        log = catalog_for(settings).load_table((settings.namespace, "bronze_ingest_log"))
        taken = log.scan(row_filter=EqualTo("source", "events")).to_arrow().column("source_file").to_pylist()
        assert sorted(Path(f).name for f in taken) == ["late.jsonl", "today.jsonl"]
    finally:
        _stop(daemon)


def test_with_the_stream_running_minute_gold_follows_in_seconds_and_daily_gold_by_the_daemon(tmp_path, monkeypatch):
    """`make dev`'s arrangement: the daemon and `lakehouse stream` on one instance. The stream takes the file
    (the landing sensor stands aside) and reports its commits; the daemon's automation carries the daily tables."""
    env, settings, dagster_home = temporary_instance(tmp_path, "daemon-test-key")
    landing = settings.local_path(settings.landing) / "events"
    daemon = _daemon(env, dagster_home, tmp_path)
    stream = _start([sys.executable, "-m", "lakehouse_assets.cli", "stream", "--trigger-seconds", "2"], env, tmp_path,
                    "stream.log")
    logs = lambda: "\n".join((tmp_path / f).read_text()[-2000:] for f in ("stream.log", "daemon.log"))  # noqa: E731
    try:
        beat = heartbeat_file(settings.home, "events")
        started = time.monotonic()
        while not beat.exists():
            assert time.monotonic() - started < 120 and stream.poll() is None, logs()
            time.sleep(1)
        days = _land(landing, dt.datetime.now(dt.timezone.utc).date(), "today", 40)
        landed = time.monotonic()
        minute_at = None
        while time.monotonic() - landed < DEADLINE_S:
            if minute_at is None and _gold_events(settings, "gold_minute_activity", "minute") == days:
                minute_at = time.monotonic() - landed
            if minute_at is not None and _gold_events(settings, "gold_daily_activity", "activity_date") == days:
                break
            assert daemon.poll() is None and stream.poll() is None, logs()
            time.sleep(3)
        assert minute_at is not None and minute_at < 60, f"minute gold after {minute_at} s\n{logs()}"
        assert _gold_events(settings, "gold_daily_activity", "activity_date") == days, logs()
    finally:
        _stop(stream)
        _stop(daemon)

    catalog = catalog_for(settings)
    log = catalog.load_table((settings.namespace, "bronze_ingest_log")).scan().to_arrow().to_pylist()
    assert [r["run_id"].startswith("stream-") for r in log] == [True]  # the stream took it, no sensor-launched run
    daily = catalog.load_table((settings.namespace, "gold_daily_activity")).current_snapshot()
    assert not daily.summary.additional_properties["dagster.run-id"].startswith("stream-")  # a daemon-launched run
    for name, value in (("LAKEHOUSE_DAGSTER_STORAGE", env["LAKEHOUSE_DAGSTER_STORAGE"]),
                        ("LAKEHOUSE_DAGSTER_LOGS", env["LAKEHOUSE_DAGSTER_LOGS"])):
        monkeypatch.setenv(name, value)
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        event = instance.get_latest_materialization_event(AssetKey("gold_minute_activity"))
        assert event is not None and event.asset_materialization is not None
        assert "stream_batch_id" in event.asset_materialization.metadata
        assert not [r for r in instance.get_runs() if AssetKey("bronze_events") in (r.asset_selection or ())]
