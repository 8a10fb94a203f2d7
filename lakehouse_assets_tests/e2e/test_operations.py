"""A real Prometheus (Debian's package) scrapes `lakehouse metrics serve` on the demo lakehouse and evaluates
the alert rules users load: what it stores equals what `lakehouse freshness` and `lakehouse reconcile` say."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from ..shop import ROOT
from .conftest import BIN, DemoLake

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(command: list[str], log: Path, env: dict | None = None, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def _query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    answer = json.loads(urllib.request.urlopen(url, timeout=5).read())
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _wait_for(base: str, promql: str, logs: list[Path], timeout: float = 90) -> list[dict]:
    started = time.monotonic()
    while True:
        try:
            result = _query(base, promql)
            if result:
                return result
        except OSError:
            pass
        if time.monotonic() - started > timeout:
            raise AssertionError(f"Prometheus has no {promql} after {timeout} s\n" +
                                 "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in logs))
        time.sleep(1)


def test_prometheus_scrapes_the_figures_lakehouse_freshness_and_reconcile_give(demo_lake: DemoLake, tmp_path):
    prometheus = shutil.which("prometheus")
    assert prometheus, "Prometheus is missing: `make setup` installs Debian's prometheus package"
    metrics_port, prometheus_port = _free_port(), _free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{ROOT / 'examples' / 'alerts.yml'}]\n"
        "scrape_configs:\n"
        f"  - {{job_name: lakehouse, static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]}}\n")
    logs = [tmp_path / "metrics.log", tmp_path / "prometheus.log"]
    server = _start([str(BIN / "lakehouse"), "metrics", "serve", "--port", str(metrics_port)], logs[0],
                    env=demo_lake.env, cwd=demo_lake.root)
    scraper = _start([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                      f"--web.listen-address=127.0.0.1:{prometheus_port}"], logs[1])
    base = f"http://127.0.0.1:{prometheus_port}"
    try:
        newest = _wait_for(base, 'lakehouse_table_newest_event_timestamp_seconds{table="gold_daily_activity"}', logs)
        lag = _query(base, 'lakehouse_table_event_lag_seconds{table="gold_daily_activity"}')
        quarantined = _wait_for(base, 'lakehouse_source_records_quarantined_total{source="events"}', logs)
        assert _query(base, 'up{job="lakehouse"}')[0]["value"][1] == "1"

        freshness = {r["table"]: r for r in json.loads(demo_lake.run("lakehouse", "freshness", "--json").stdout)}
        gold = freshness["gold_daily_activity"]
        assert float(newest[0]["value"][1]) == dt.datetime.fromisoformat(gold["newest_event_time"]).timestamp()
        # The lag grows by the second: Prometheus's is from its last scrape, freshness's from just now.
        assert 0 <= gold["event_lag_s"] - float(lag[0]["value"][1]) < 30
        reconciled = json.loads(demo_lake.run("lakehouse", "reconcile", "--source", "events", "--json").stdout)
        assert sum(r["quarantined"] for r in reconciled) > 0, "the demo's events have malformed lines"
        assert float(quarantined[0]["value"][1]) == sum(r["quarantined"] for r in reconciled)

        # The demo's data is from 2025: the stale-table rule matches at once (pending for its 5 minutes).
        alert = _wait_for(base, 'ALERTS{alertname="LakehouseTableStale", table="gold_daily_activity"}', logs)
        assert alert[0]["metric"]["alertstate"] == "pending"
    finally:
        _stop(scraper)
        _stop(server)
