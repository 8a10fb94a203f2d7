"""The Dagster UI in a real browser: headless Chromium renders the pages a person opens after a run.

The demo lakehouse (one day of the shop through the whole graph, on a temporary instance) is served
by `dagster-webserver` and Chromium (Debian's package, installed by `make e2e`)
renders the asset catalogue, an asset's page and its checks. The test reads the rendered
DOM, not the GraphQL answers behind it. Screenshots are kept under `test-artefacts/`.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from lakehouse_assets.runtime.catalog import catalog_for

from ..shop import ROOT
from .conftest import BIN, DemoLake

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ARTEFACTS = ROOT / "test-artefacts"


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "Chromium is missing: `make e2e` installs Debian's chromium package"
    return found


def _render(url: str, profile: Path, screenshot: Path | None = None) -> str:
    """The page's DOM after its scripts ran (and a screenshot of it)."""
    args = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
            "--window-size=1600,1100", "--virtual-time-budget=20000"]
    if screenshot is not None:
        subprocess.run([*args, f"--screenshot={screenshot}", url], capture_output=True, timeout=120, check=True)
    return subprocess.run([*args, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_ui_shows_assets_checks_freshness_snapshots_and_columns(demo_lake: DemoLake, tmp_path):
    env, settings, dagster_home = demo_lake.env, demo_lake.settings, demo_lake.dagster_home
    snapshot_id = catalog_for(settings).load_table(("lake", "silver_events")).current_snapshot().snapshot_id

    port = _free_port()
    server = subprocess.Popen([str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port), "-w",
                               str(dagster_home / "workspace.yaml")], env=env, cwd=demo_lake.root,
                              stdout=open(tmp_path / "webserver.log", "w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        while True:
            try:
                urllib.request.urlopen(f"{base}/server_info", timeout=2).read()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() - started < 120, \
                    (tmp_path / "webserver.log").read_text()[-3000:]
                time.sleep(1)
        ARTEFACTS.mkdir(exist_ok=True)
        profile = tmp_path / "chromium"

        catalogue = _render(f"{base}/assets", profile, ARTEFACTS / "ui-assets.png")
        for name in ("bronze_events", "silver_events", "gold_daily_activity"):
            assert name in catalogue, f"{name} not in the asset catalogue"

        page = _render(f"{base}/assets/silver_events", profile, ARTEFACTS / "ui-silver-events.png")
        assert "snapshot_id" in page and (str(snapshot_id) in page or f"{snapshot_id:,}" in page), \
            "the materialisation's snapshot id is not shown"
        for column in ("event_id", "event_ts", "event_type"):  # the column schema, from the table's declaration
            assert column in page, f"column {column} not on the asset page"

        checks = _render(f"{base}/assets/silver_events?view=checks", profile, ARTEFACTS / "ui-silver-checks.png")
        assert "pandera_schema" in checks and "table_health" in checks
        assert "Passed" in checks, "the pandera check's result is not shown"

        gold = _render(f"{base}/assets/gold_daily_activity", profile, ARTEFACTS / "ui-gold-daily-activity.png")
        # The declared freshness (30 minutes for the daily tables) as the policy panel states it.
        assert "Freshness policy" in gold and "more than 30 minutes since last materialization" in gold
        assert "activity_date" in gold and "events_by_type" in gold
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
