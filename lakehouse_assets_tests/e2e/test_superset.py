"""A real BI tool on the SQL endpoint: Apache Superset (in a venv of its own, made by `make e2e`) connected to
`lakehouse serve` by its Hive engine (PyHive), a table chart on gold_minute_activity, while `lakehouse stream`
runs on files landing today.

The chart's query (Superset's chart-data API, as a dashboard refresh asks it, cache bypassed) answers what gold
holds; a file landed after the chart was made shows in it within the stream's lag; a headless Chromium signed
in to Superset renders the chart page, with the new file's newest minute in it, and its screenshot is kept under
`test-artefacts/`.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import requests
from websockets.sync.client import connect

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_services.process import free_port

from ..live.test_stream import TODAY, batch_of, land, minute_oracle, now
from ..serving.test_serve import endpoint
from ..shop import ROOT, temporary_instance
from .conftest import BIN
from .test_ui import ARTEFACTS, _chromium

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SUPERSET = ROOT / ".venv-superset" / "bin" / "superset"
ADMIN = ("admin", "superset-admin-in-a-test")
COLUMNS = ["minute", "events", "active_users", "purchases", "revenue"]
LAG_LIMIT_S = 90  # a file landed while the stream runs is in the chart's query within this


@contextlib.contextmanager
def _running(command: list[str], env: dict, log: Path, ready, what: str, timeout: float = 240):
    """A process from the moment `ready()` holds until it is stopped."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert process.poll() is None, f"{what} exited: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{what} not ready in {timeout} s: {log.read_text()[-3000:]}"
            time.sleep(1)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def _superset(tmp: Path):
    """Superset with its own metadata database and an admin, serving on a free port: (base URL, signed-in session)."""
    assert SUPERSET.exists(), f"Superset's venv is missing ({SUPERSET}): `make e2e` makes it"
    config = tmp / "superset_config.py"
    config.write_text(
        f"SECRET_KEY = 'a-superset-of-a-test-{os.getpid()}-0123456789abcdef'\n"
        f"SQLALCHEMY_DATABASE_URI = 'sqlite:///{tmp / 'superset.db'}'\n"
        "WTF_CSRF_ENABLED = False  # the test's API calls carry the session cookie only\n"
        "TALISMAN_ENABLED = False\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "VIRTUAL_ENV"))},
           "SUPERSET_CONFIG_PATH": str(config), "SUPERSET_HOME": str(tmp)}
    for step in (["db", "upgrade"], ["fab", "create-admin", "--username", ADMIN[0], "--password", ADMIN[1],
                                     "--firstname", "Dash", "--lastname", "Board", "--email", "bi@example.com"],
                 ["init"]):
        done = subprocess.run([str(SUPERSET), *step], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"superset {' '.join(step)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with _running([str(SUPERSET), "run", "-h", "127.0.0.1", "-p", str(port), "--with-threads"], env,
                  tmp / "superset.log", lambda: _answers(f"{base}/health"), "Superset"):
        session = requests.Session()
        signed_in = session.post(f"{base}/login/", data={"username": ADMIN[0], "password": ADMIN[1]},
                                 allow_redirects=False)
        assert signed_in.status_code == 302 and "session" in session.cookies, signed_in.text[:500]
        yield base, session


def _api(session: requests.Session, method: str, url: str, **body) -> dict:
    response = session.request(method, url, json=body or None, timeout=300)
    assert response.status_code in (200, 201), f"{method} {url}: {response.status_code} {response.text[:2000]}"
    return response.json()


def _chart_rows(base: str, session: requests.Session, chart: int) -> Counter:
    """The chart's query as a dashboard asks it, the cache bypassed: events per minute."""
    context = json.loads(_api(session, "GET", f"{base}/api/v1/chart/{chart}")["result"]["query_context"])
    result = _api(session, "POST", f"{base}/api/v1/chart/data", **{**context, "force": True})["result"][0]
    assert result["status"] == "success" and result["colnames"] == COLUMNS, result
    return Counter({dt.datetime.fromtimestamp(r["minute"] / 1000, dt.timezone.utc).replace(tzinfo=None): r["events"]
                    for r in result["data"]})


def _gold(settings) -> Counter:
    catalog = catalog_for(settings)
    if not catalog.table_exists((settings.namespace, "gold_minute_activity")):
        return Counter()
    rows = catalog.load_table((settings.namespace, "gold_minute_activity")).scan().to_arrow().to_pylist()
    return Counter({r["minute"].replace(tzinfo=None): r["events"] for r in rows})


def _cdp(socket, method: str, **params) -> dict:
    """One call of Chromium's DevTools protocol; the events around its answer are passed over."""
    _cdp.calls = getattr(_cdp, "calls", 0) + 1
    socket.send(json.dumps({"id": _cdp.calls, "method": method, "params": params}))
    while True:
        message = json.loads(socket.recv(timeout=120))
        if message.get("id") == _cdp.calls:
            assert "error" not in message, (method, message["error"])
            return message.get("result", {})


def _render_signed_in(base: str, session: requests.Session, path: str, shows: str, profile: Path,
                      screenshot: Path, timeout: float = 120) -> str:
    """The page at `path` in a headless Chromium carrying the session's cookie, once its text shows `shows`: that
    text; the screenshot is taken then."""
    port = free_port()
    browser = subprocess.Popen([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                f"--user-data-dir={profile}", "--window-size=1400,900",
                                f"--remote-debugging-port={port}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                    pages = [t for t in json.load(response) if t["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Chromium's DevTools did not answer"
            time.sleep(0.5)
        with connect(pages[0]["webSocketDebuggerUrl"], max_size=None) as socket:
            for name, value in session.cookies.items():
                _cdp(socket, "Network.setCookie", name=name, value=value, url=base)
            _cdp(socket, "Page.navigate", url=f"{base}{path}")
            deadline, text = time.monotonic() + timeout, ""
            while shows not in text:
                assert time.monotonic() < deadline, f"the page never showed {shows!r}: {text[-2000:]}"
                time.sleep(2)
                text = _cdp(socket, "Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                            returnByValue=True)["result"].get("value", "")
            time.sleep(2)  # the chart's last paint
            shot = _cdp(socket, "Page.captureScreenshot", format="png")["data"]
            screenshot.write_bytes(base64.b64decode(shot))
            return text
    finally:
        browser.terminate()
        browser.wait(timeout=30)


def test_superset_charts_gold_minute_activity_through_the_endpoint_and_a_file_landed_today_shows_within_the_lag(
        tmp_path):
    env, settings, _ = temporary_instance(tmp_path, "superset-e2e-key-for-pseudonyms-in-tests")
    landing = settings.home / "landing"
    first = batch_of("bi1", 60, now() - dt.timedelta(minutes=20))
    land(landing, TODAY, "first.jsonl", first)

    with _running([str(BIN / "lakehouse"), "stream", "--trigger-seconds", "1"], env, tmp_path / "stream.log",
                  lambda: _gold(settings) == minute_oracle(first), "lakehouse stream", timeout=300), \
            endpoint({**env, "LAKEHOUSE_SERVE_PORT": str(port := free_port())}, tmp_path / "serve.log"), \
            _superset(tmp_path) as (base, session):
        database = _api(session, "POST", f"{base}/api/v1/database/", database_name="lakehouse",
                        sqlalchemy_uri=f"hive://127.0.0.1:{port}/{settings.namespace}")["id"]
        dataset = _api(session, "POST", f"{base}/api/v1/dataset/", database=database, schema=settings.namespace,
                       table_name="gold_minute_activity")["id"]
        described = _api(session, "GET", f"{base}/api/v1/dataset/{dataset}")["result"]
        assert [c["column_name"] for c in described["columns"]] == COLUMNS  # reflected through the endpoint
        form = {"datasource": f"{dataset}__table", "viz_type": "table", "query_mode": "raw", "all_columns": COLUMNS,
                "order_by_cols": [json.dumps(["minute", False])], "row_limit": 1000}
        query = {"columns": COLUMNS, "orderby": [["minute", False]], "row_limit": 1000}
        context = {"datasource": {"id": dataset, "type": "table"}, "queries": [query], "form_data": form,
                   "result_format": "json", "result_type": "full"}
        chart = _api(session, "POST", f"{base}/api/v1/chart/", slice_name="Activity per minute", viz_type="table",
                     datasource_id=dataset, datasource_type="table", params=json.dumps(form),
                     query_context=json.dumps(context))["id"]
        assert _chart_rows(base, session, chart) == minute_oracle(first) == _gold(settings)

        # A file lands while the stream runs: a dashboard refreshing its chart sees it within the stream's lag.
        second = batch_of("bi2", 30, now() - dt.timedelta(minutes=4))
        landed = time.monotonic()
        land(landing, TODAY, "second.jsonl", second)
        expected = minute_oracle(first + second)
        while (seen := _chart_rows(base, session, chart)) != expected:
            assert time.monotonic() - landed < LAG_LIMIT_S, (seen, expected)
            time.sleep(1)
        lag = time.monotonic() - landed
        print(f"a file landed today was in the chart's query after {lag:.1f} s")

        newest = max(expected).strftime("%Y-%m-%d %H:%M:%S")  # as the table chart writes a minute
        ARTEFACTS.mkdir(exist_ok=True)
        shot = ARTEFACTS / "superset-minute-activity.png"
        text = _render_signed_in(base, session, f"/explore/?slice_id={chart}&standalone=1", newest,
                                 tmp_path / "chromium", shot)
        assert all(column in text for column in COLUMNS), text[:2000]
        assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
