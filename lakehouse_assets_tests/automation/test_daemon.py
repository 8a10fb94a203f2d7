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
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyiceberg.expressions import EqualTo

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.settings import Settings

from ..shop import ROOT, SHOP_FILE

pytestmark = pytest.mark.slow

TODAY = dt.datetime.now(dt.timezone.utc).date()
OLD_DAY = TODAY - dt.timedelta(days=5)
DEADLINE_S = 600


def _events(day: dt.date, n: int, prefix: str) -> str:
    start = dt.datetime.combine(day, dt.time(0, 5), dt.timezone.utc)
    if day == TODAY:  # today's events happened already
        start = min(start, dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=30))
    return "\n".join(json.dumps({
        "event_id": f"{prefix}-{i}", "user_id": f"u{i % 5}", "session_id": f"{prefix}-s{i % 3}",
        "event_type": "page_view", "event_ts": (start + dt.timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
        "properties": {"user_agent": "Mozilla/5.0"},
    }) for i in range(n)) + "\n"


def _gold_events(settings: Settings, table: str, column: str, day: dt.date) -> int:
    catalog = catalog_for(settings)
    if not catalog.table_exists((settings.namespace, table)):
        return 0
    rows = catalog.load_table((settings.namespace, table)).scan().to_arrow().to_pylist()
    return sum(r["events"] for r in rows if (r[column].date() if isinstance(r[column], dt.datetime) else r[column]) == day)


def test_files_landing_today_and_late_reach_gold_with_no_run_launched_by_hand(tmp_path):
    home, dagster_home = tmp_path / "lake", tmp_path / "dagster"
    dagster_home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    (dagster_home / "workspace.yaml").write_text(
        "load_from:\n  - python_module:\n      module_name: lakehouse_assets.definitions\n      location_name: lakehouse\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")},
           "DAGSTER_HOME": str(dagster_home), "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PROJECT": str(SHOP_FILE),
           "LAKEHOUSE_DAGSTER_STORAGE": str(dagster_home / "storage"),
           "LAKEHOUSE_DAGSTER_LOGS": str(dagster_home / "logs"), "LAKEHOUSE_SPARK_MASTER": "local[2]",
           "LAKEHOUSE_DRIVER_MEMORY": "1g", "LAKEHOUSE_PII_KEY": "daemon-test-key"}
    settings = Settings.from_env(home=home, project=str(SHOP_FILE), namespace="lake")
    landing = home / "landing" / "events"
    daemon = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
                               str(dagster_home / "workspace.yaml")], env=env, cwd=tmp_path,
                              stdout=open(tmp_path / "daemon.log", "w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        for day, name, n in ((TODAY, "today", 40), (OLD_DAY, "late", 25)):
            folder = landing / f"date={day.isoformat()}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f".{name}.jsonl.part").write_text(_events(day, n, name))
            (folder / f".{name}.jsonl.part").rename(folder / f"{name}.jsonl")  # lands whole, as a producer would
        started = time.monotonic()
        want = {("gold_minute_activity", "minute", TODAY): 40, ("gold_minute_activity", "minute", OLD_DAY): 25,
                ("gold_daily_activity", "activity_date", TODAY): 40,
                ("gold_daily_activity", "activity_date", OLD_DAY): 25}
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
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
