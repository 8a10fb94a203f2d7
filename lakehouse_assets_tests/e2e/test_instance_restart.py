"""The cluster profile's Dagster instance on PostgreSQL: what the daemon and the webserver recorded survives
their restart.

A real PostgreSQL holds the instance (`examples/cluster/dagster.yaml`, dagster-postgres). The daemon takes
a landed file through the landing sensor into a run; a person stops the automation sensor in the UI's API.
Then the daemon and the webserver are stopped and started again, and the new webserver must show the same
runs, the same event logs, the landing sensor's cursor and its ticks, and the automation sensor still
stopped; a file landed after the restart is taken from where the cursor left off.
"""

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg2
import pytest

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_services.postgres import ThrowawayPostgres
from lakehouse_services.process import free_port

from ..shop import ROOT, temporary_instance

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BIN = Path(sys.executable).parent
DAY = dt.date(2025, 1, 2)
LANDING_SENSOR = "bronze_events_landing_sensor"
SENSOR = """query($name: String!) { sensorOrError(sensorSelector: {repositoryLocationName: "lakehouse",
  repositoryName: "__repository__", sensorName: $name}) { ... on Sensor { id sensorState { status
  ticks(limit: 1000) { tickId status } typeSpecificData { ... on SensorData { lastCursor lastRunKey } } } } } }"""
RUNS = """{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }"""
LOGS = """query($run: ID!) { logsForRun(runId: $run) { ... on EventConnection { events { __typename } hasMore } } }"""


def _graphql(base: str, query: str, **variables) -> dict:
    request = urllib.request.Request(f"{base}/graphql", data=json.dumps({"query": query, "variables": variables})
                                     .encode(), headers={"Content-Type": "application/json"})
    try:
        answer = json.loads(urllib.request.urlopen(request, timeout=60).read())
    except urllib.error.HTTPError as error:  # a query the schema refuses: its reasons are in the body
        raise AssertionError(error.read().decode()) from None
    assert "errors" not in answer, answer["errors"]
    return answer["data"]


def _start(tmp_path: Path, env: dict, dagster_home: Path, port: int, generation: int) -> list[subprocess.Popen]:
    workspace = str(dagster_home / "workspace.yaml")
    started = []
    for name, args in (("daemon", [str(BIN / "dagster-daemon"), "run", "-w", workspace]),
                       ("webserver", [str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port),
                                      "-w", workspace])):
        started.append(subprocess.Popen(args, env=env, cwd=tmp_path, start_new_session=True,
                                        stdout=open(tmp_path / f"{name}-{generation}.log", "w"),
                                        stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2).read()
            return started
        except OSError:
            assert all(p.poll() is None for p in started) and time.monotonic() < deadline, _logs(tmp_path)
            time.sleep(1)


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {f.name}\n{f.read_text()[-2500:]}" for f in sorted(tmp_path.glob("*.log")))


def _land(landing: Path, name: str, n: int) -> None:
    folder = landing / f"date={DAY.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    start = dt.datetime.combine(DAY, dt.time(9), dt.timezone.utc)
    lines = [json.dumps({"event_id": f"{name}-{i}", "user_id": f"u{i % 4}", "session_id": f"{name}-s",
                         "event_type": "page_view", "properties": {},
                         "event_ts": (start + dt.timedelta(seconds=i)).isoformat().replace("+00:00", "Z")})
             for i in range(n)]
    (folder / f".{name}.part").write_text("\n".join(lines) + "\n")
    (folder / f".{name}.part").rename(folder / f"{name}.jsonl")


def _stop_sensor(base: str, tmp_path: Path, name: str) -> None:
    """Stops the sensor as the UI does, and returns once the stop has held through more than one of the daemon's
    ticks. The daemon reads a sensor's state when a tick starts and writes it back with the tick's timestamps, so a
    stop that falls between the two is overwritten (Dagster's own race, at the daemon's start as at any tick); the
    stop is then sent again, as a person would. What this test is about is that the held stop survives a restart."""
    held = 60  # longer than a tick of the automation sensor (every 30 s) takes here, run or no run
    deadline = time.monotonic() + 300
    held_since = None
    while held_since is None or time.monotonic() - held_since < held:
        assert time.monotonic() < deadline, f"{name} never stayed stopped\n{_logs(tmp_path)}"
        state = _graphql(base, SENSOR, name=name)["sensorOrError"]
        if state["sensorState"]["status"] != "STOPPED":
            stopped = _graphql(base, "mutation($id: String) { stopSensor(id: $id) { __typename } }", id=state["id"])
            assert stopped["stopSensor"]["__typename"] == "StopSensorMutationResult", stopped
            held_since = time.monotonic()
        time.sleep(2)


def _bronze_runs(base: str) -> dict[str, str]:
    """The landing sensor's runs: run id -> status."""
    runs = _graphql(base, RUNS)["runsOrError"]["results"]
    return {r["runId"]: r["status"] for r in runs
            if {"key": "dagster/sensor_name", "value": LANDING_SENSOR} in r["tags"]}


def _wait_for_runs(base: str, tmp_path: Path, processes: list[subprocess.Popen], count: int) -> dict[str, str]:
    deadline = time.monotonic() + 600
    while True:
        runs = _bronze_runs(base)
        if len(runs) >= count and all(s in ("SUCCESS", "FAILURE", "CANCELED") for s in runs.values()):
            assert set(runs.values()) == {"SUCCESS"}, f"{runs}\n{_logs(tmp_path)}"
            return runs
        assert all(p.poll() is None for p in processes) and time.monotonic() < deadline, \
            f"{runs}\n{_logs(tmp_path)}"
        time.sleep(5)


def _recorded(base: str, runs: dict[str, str]) -> dict:
    """What the webserver shows of the runs, their event logs and the two sensors."""
    landing = _graphql(base, SENSOR, name=LANDING_SENSOR)["sensorOrError"]["sensorState"]
    automation = _graphql(base, SENSOR, name="lakehouse_automation")["sensorOrError"]["sensorState"]
    events = {}
    for run in runs:
        log = _graphql(base, LOGS, run=run)["logsForRun"]
        assert log["hasMore"] is False
        events[run] = sorted(e["__typename"] for e in log["events"])
    return {"runs": {r: s for r, s in _bronze_runs(base).items() if r in runs}, "events": events,
            "cursor": landing["typeSpecificData"]["lastCursor"], "run_key": landing["typeSpecificData"]["lastRunKey"],
            "ticks": {t["tickId"] for t in landing["ticks"]}, "automation": automation["status"]}


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_runs_event_logs_and_sensor_state_on_postgresql_survive_a_restart(tmp_path):
    env, settings, dagster_home = temporary_instance(tmp_path, "restart-test-key-for-pseudonyms-in-tests")
    shutil.copy(ROOT / "examples" / "cluster" / "dagster.yaml", dagster_home / "dagster.yaml")
    landing = settings.local_path(settings.landing) / "events"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with ThrowawayPostgres(tmp_path / "pg", database="dagster") as pg:
        env["LAKEHOUSE_DAGSTER_PG_URL"] = f"postgresql+psycopg2://postgres@127.0.0.1:{pg.port}/dagster"
        processes = _start(tmp_path, env, dagster_home, port, 1)
        try:
            _land(landing, "first", 30)
            _stop_sensor(base, tmp_path, "lakehouse_automation")
            first = _wait_for_runs(base, tmp_path, processes, 1)
            before = _recorded(base, first)
        finally:
            _stop(processes)

        assert len(first) == 1 and before["automation"] == "STOPPED"
        assert "RunSuccessEvent" in before["events"][next(iter(first))] and before["cursor"] and before["run_key"]
        # The records are in PostgreSQL, and no SQLite instance storage was made beside dagster.yaml.
        with psycopg2.connect(f"host=127.0.0.1 port={pg.port} user=postgres dbname=dagster") as conn, \
                conn.cursor() as cur:
            cur.execute("SELECT run_id FROM runs")
            assert set(first) <= {r for (r,) in cur.fetchall()}
            cur.execute("SELECT count(*) FROM event_logs WHERE run_id = %s", (next(iter(first)),))
            assert cur.fetchone()[0] >= len(before["events"][next(iter(first))])
        assert not list(dagster_home.rglob("*.db")), list(dagster_home.rglob("*.db"))

        processes = _start(tmp_path, env, dagster_home, port, 2)
        try:
            after = _recorded(base, first)
            assert after["runs"] == before["runs"] and after["events"] == before["events"]
            assert (after["cursor"], after["run_key"]) == (before["cursor"], before["run_key"])
            assert before["ticks"] <= after["ticks"] and after["automation"] == "STOPPED"

            _land(landing, "second", 20)
            both = _wait_for_runs(base, tmp_path, processes, 2)
        finally:
            _stop(processes)

    assert len(both) == 2 and set(first) < set(both)  # one new run, for the new file only
    log = catalog_for(settings).load_table((settings.namespace, "bronze_ingest_log")).scan().to_arrow()
    assert sorted(Path(f).name for f in log.column("source_file").to_pylist()) == ["first.jsonl", "second.jsonl"]
    rows = catalog_for(settings).load_table((settings.namespace, "bronze_events")).scan().to_arrow().num_rows
    assert rows == 50
