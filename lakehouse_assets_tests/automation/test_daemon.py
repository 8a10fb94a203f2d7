"""The live path, live: the real Dagster daemon takes files landing today and late, all the way to gold.

A temporary Dagster instance (this repository's dagster.yaml: SQLite storage, one
run at a time) and the shop declaration on a temporary lake; `dagster-daemon run`
evaluates the landing sensors and the automation sensor as in production. Two
files land, one for today and one late for an old day, and nobody launches a run:
both must reach gold_minute_activity and gold_daily_activity.
"""

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance
from pyiceberg.expressions import EqualTo

from examples.shop.cdc_generator import CDC_TABLES, generate_cdc
from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.runtime.resource import NEW_BYTES_TAG
from lakehouse_assets.runtime.status import heartbeat_file
from lakehouse_assets.settings import Settings

from ..shop import temporary_instance
from ..silver.test_cdc_silver import expected_row, last_changes

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


def _land(landing: Path, day: dt.date, name: str, n: int, landing_day: dt.date | None = None) -> Counter:
    """Land a file whole, as a producer would (in `day`'s folder, or `landing_day`'s); its events per day."""
    events = _events(day, n, name)
    folder = landing / f"date={(landing_day or day).isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{name}.jsonl.part").write_text("".join(json.dumps(e) + "\n" for e in events))
    (folder / f".{name}.jsonl.part").rename(folder / f"{name}.jsonl")
    return Counter(dt.date.fromisoformat(e["event_ts"][:10]) for e in events)


def _daemon(env: dict, dagster_home: Path, tmp_path: Path) -> subprocess.Popen:
    return _start([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
                   str(dagster_home / "workspace.yaml")], env, tmp_path, "daemon.log")


def test_files_landing_today_and_late_reach_gold_with_no_run_launched_by_hand(tmp_path):
    env, settings, dagster_home = temporary_instance(tmp_path, "daemon-test-key-for-pseudonyms-in-tests")
    env.pop("SPARK_SUBMIT_OPTS", None)  # the runs' JVMs as deployed (not the tests' C1 alone: conftest.py)
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
        # The landing sensor's runs (a few KB new) compiled with C1 alone; the automation's with C1 then C2.
        assert _jit_said(dagster_home, env) == {"landing sensor": {"Spark's JVM compiles with C1 alone (jvm_jit quick)"},
                                                "other": {"Spark's JVM compiles with C1 then C2 (jvm_jit auto)"}}
    finally:
        _stop(daemon)


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_with_the_stream_running_minute_gold_follows_in_seconds_and_daily_gold_by_the_daemon(tmp_path, monkeypatch):
    """`make dev`'s arrangement: the daemon and `lakehouse stream` on one instance. The stream takes the file
    (the landing sensor stands aside) and reports its commits; the daemon's automation carries the daily tables."""
    env, settings, dagster_home = temporary_instance(tmp_path, "daemon-test-key-for-pseudonyms-in-tests")
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


def _table(settings: Settings, table: str) -> list[dict]:
    catalog = catalog_for(settings)
    if not catalog.table_exists((settings.namespace, table)):
        return []
    return catalog.load_table((settings.namespace, table)).scan().to_arrow().to_pylist()


def _cdc_truth(generated, key: bytes) -> dict[str, dict]:
    """The generator's source tables as silver stores them, keyed by primary key."""
    truth = {}
    for table, rows in generated.true_state.items():
        last = last_changes(generated, table)
        truth[table] = {k: {c: v.replace(tzinfo=dt.timezone.utc) if isinstance(v, dt.datetime) else v
                            for c, v in expected_row(CDC_TABLES[table], row, key, last[k], drifted=False).items()}
                        for k, row in rows.items()}
    return truth


def _silver_cdc(settings: Settings, table: str, truth: dict) -> dict:
    """Silver's current state in the truth's shape (the columns the source rows have)."""
    info, any_row = CDC_TABLES[table], next(iter(truth.values()))
    rows = {tuple(r[k] for k in info.primary_key): r for r in _table(settings, f"silver_{table}")}
    return {k: {c: r.get(c) for c in truth.get(k, any_row)} for k, r in rows.items()}


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_data_committed_days_before_it_lands_reaches_silver_and_gold_with_no_run_launched_by_hand(tmp_path):
    """A capture down for a week and a replayed day of events: changes committed 8 to 10 days ago and events
    of 8 days ago land in today's folders. With nobody launching a run, silver equals the source's truth, every
    bronze event key is in silver or rejected, and daily gold counts the old day's events."""
    env, settings, dagster_home = temporary_instance(tmp_path, "daemon-test-key-for-pseudonyms-in-tests")
    landing = settings.local_path(settings.landing)
    today = dt.datetime.now(dt.timezone.utc).date()
    archive = tmp_path / "archive"
    generated = generate_cdc(archive, [today - dt.timedelta(days=d) for d in (10, 9, 8)], changes_per_day=40,
                             malformed_rate=0.0, late_share=0.0, duplicate_rate=0.02)
    truth = _cdc_truth(generated, b"daemon-test-key-for-pseudonyms-in-tests")
    daemon = _daemon(env, dagster_home, tmp_path)
    try:
        for n, f in enumerate(sorted(archive.rglob("*.jsonl*"))):
            target = landing / "cdc" / f.parent.parent.name / f"date={today}" / f"replayed-{n:03d}-{f.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, target.with_name("." + target.name))
            target.with_name("." + target.name).rename(target)
        days = _land(landing / "events", today - dt.timedelta(days=8), "replayed", 30, landing_day=today)
        assert set(days) == {today - dt.timedelta(days=8)}
        started = time.monotonic()
        done = False
        while time.monotonic() - started < DEADLINE_S and not done:
            silver = {t: _silver_cdc(settings, t, rows) for t, rows in truth.items()}
            bronze = {r["event_id"] for r in _table(settings, "bronze_events")}
            decided = {r["event_id"] for t in ("silver_events", "silver_events_rejected") for r in _table(settings, t)}
            gold = _gold_events(settings, "gold_daily_activity", "activity_date")
            done = silver == truth and bronze and bronze <= decided and gold == days
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
            time.sleep(10)
        assert done, (f"after {time.monotonic() - started:.0f} s: silver rows "
                      f"{ {t: len(v) for t, v in silver.items()} } of { {t: len(v) for t, v in truth.items()} }, "
                      f"undecided event keys {sorted(bronze - decided)[:5]}, gold {gold}\n"
                      + (tmp_path / "daemon.log").read_text()[-3000:])
    finally:
        _stop(daemon)


def _until(what, check, deadline_s: float, log: Path):
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        found = check()
        if found:
            return found
        time.sleep(2)
    raise AssertionError(f"{what}: not within {deadline_s:.0f} s\n" + log.read_text()[-3000:])


@contextlib.contextmanager
def _instance(dagster_home: Path, env: dict):
    """The daemon's Dagster instance, read from this process."""
    os.environ["DAGSTER_HOME"], saved = str(dagster_home), os.environ.get("DAGSTER_HOME")
    storage = {k: env[k] for k in ("LAKEHOUSE_DAGSTER_STORAGE", "LAKEHOUSE_DAGSTER_LOGS")}
    previous = {k: os.environ.get(k) for k in storage}
    os.environ.update(storage)
    try:
        with DagsterInstance.get() as instance:
            yield instance
    finally:
        for k, v in [("DAGSTER_HOME", saved), *previous.items()]:
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _runs(dagster_home: Path, env: dict, job: str | None = None, partition: str | None = None):
    """The instance's runs, oldest first: (job, asset selection, partition, status, created, ended)."""
    with _instance(dagster_home, env) as instance:
        records = instance.get_run_records()
    runs = [(r.dagster_run.job_name, {k.to_user_string() for k in r.dagster_run.asset_selection or ()},
             r.dagster_run.tags.get("dagster/partition"), r.dagster_run.status.value, r.create_timestamp.timestamp(),
             r.end_time) for r in records]
    return sorted((r for r in runs if (job is None or r[0] == job) and (partition is None or r[2] == partition)),
                  key=lambda r: r[4])


def _jit_said(dagster_home: Path, env: dict) -> dict[str, set[str]]:
    """What each run's resource said of its JVM's JIT, by whether the landing sensor requested the run."""
    said: dict[str, set[str]] = {}
    with _instance(dagster_home, env) as instance:
        for run in instance.get_runs():
            requester = "landing sensor" if NEW_BYTES_TAG in run.tags else "other"
            said.setdefault(requester, set()).update(
                e.user_message for e in instance.all_logs(run.run_id) if "Spark's JVM compiles" in e.user_message)
    return said


def test_a_bronze_commit_while_silver_runs_reaches_silver_and_the_health_sensor_compacts_bronze(tmp_path):
    """Silver's run is held between reading bronze and publishing (a failpoint); meanwhile bronze commits a
    second file (a run launched beside the daemon's). Silver's run then publishes what it read; the automation
    requests silver again within two ticks, and silver holds both files' events. Bronze, past its declared
    small-file threshold, is compacted by the run the health sensor requests."""
    env, settings, dagster_home = temporary_instance(tmp_path, "daemon-test-key-for-pseudonyms-in-tests")
    shop = tmp_path / "shop"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "shop", shop)
    declaration = shop / "lakehouse.yaml"
    declaration.write_text(declaration.read_text() + "\nmaintenance:\n  check_interval: 10s\n  tables:\n"
                           "    bronze_events:\n      max_small_files: 1\n")
    pauses = tmp_path / "failpoints"
    pauses.mkdir()
    env.update(LAKEHOUSE_PROJECT=str(declaration), LAKEHOUSE_FAILPOINTS="silver_events:before-publish~pause",
               LAKEHOUSE_FAILPOINT_DIR=str(pauses))
    landing = settings.local_path(settings.landing) / "events"
    today = dt.datetime.now(dt.timezone.utc).date()
    log = tmp_path / "daemon.log"
    dagster = str(Path(sys.executable).with_name("dagster"))
    daemon = _daemon(env, dagster_home, tmp_path)
    try:
        days = _land(landing, today, "first", 30)
        _until("silver's first run reaches its publish", (pauses / "silver_events:before-publish.paused").exists,
               DEADLINE_S, log)
        stopped = subprocess.run([dagster, "sensor", "stop", "bronze_events_landing_sensor", "-w",
                                  str(dagster_home / "workspace.yaml")], env=env, cwd=tmp_path, capture_output=True,
                                 text=True, timeout=300)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        days += _land(landing, today, "second", 20)
        beside = subprocess.run([dagster, "asset", "materialize", "-m", "lakehouse_assets.definitions", "--select",
                                 "bronze_events", "--partition", today.isoformat()], env=env, cwd=tmp_path,
                                capture_output=True, text=True, timeout=600)
        assert beside.returncode == 0, beside.stdout[-3000:] + beside.stderr[-3000:]
        assert len(_table(settings, "bronze_events")) == 50  # both files in bronze; silver has read the first only
        (pauses / "silver_events:before-publish.go").touch()

        def silver_has_both():
            got = Counter(r["event_ts"].date() for r in _table(settings, "silver_events"))
            return got == days

        _until("silver holds both files' events", silver_has_both, DEADLINE_S, log)
        silver_runs = [r for r in _runs(dagster_home, env) if "silver_events" in r[1]]
        assert len(silver_runs) >= 2 and silver_runs[0][3] == "SUCCESS", silver_runs
        # Requested again within two automation ticks (30 s each) of the first run's end.
        assert silver_runs[1][4] - silver_runs[0][5] <= 2 * 30 + 15, silver_runs

        def compacted():
            done = [r for r in _runs(dagster_home, env, job="compact_tables", partition="bronze_events")
                    if r[3] == "SUCCESS"]
            return done and catalog_for(settings).load_table((settings.namespace, "bronze_events")) \
                .current_snapshot().summary.operation.value == "replace"

        _until("the health sensor's compaction of bronze_events", compacted, DEADLINE_S, log)
        table = catalog_for(settings).load_table((settings.namespace, "bronze_events"))
        assert len(table.scan().to_arrow()) == 50  # compaction rewrote the files, not the rows
    finally:
        _stop(daemon)
