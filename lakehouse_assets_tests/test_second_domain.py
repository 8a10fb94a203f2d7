"""A domain that is not the shop: a streaming app's play log and its billing database, declared in YAML only.

Its events have other names, hex-digest ids, epoch-millisecond and ISO times
mixed, a nested field, no session ids (sessions are cut by inactivity), and an
open vocabulary; its billing database is captured the way Debezium's PostgreSQL
connector sends it (every snapshot row at one position). Nothing in Python
knows any of it. Gold's daily activity is checked against DuckDB reading the
raw landing files directly.
"""

import datetime as dt
import hashlib
import hmac
import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from dagster import AssetKey, DagsterInstance, materialize
from pyspark.sql import functions as F

from lakehouse_assets.bronze.reconcile import reconcile
from lakehouse_assets.build import build_definitions
from lakehouse_assets.operations.trace_scan import trace_scan
from lakehouse_assets.project import load_project
from lakehouse_assets.runtime.pii import pii_key
from lakehouse_assets.runtime.resource import LakehouseResource
from lakehouse_assets.settings import Settings

from .evolving import apply_refused_then_in_place, edited

pytestmark = pytest.mark.slow  # a module-wide pipeline run

DECLARATION = """\
name: streaming
start_date: 2025-03-01
landing:
  settle: 0s    # the test writes each file whole before any run looks
events:
  plays:
    landing: app/plays
    fields:
      id: string
      account: string
      ts: timestamp
      action: string
      value: double
      country: {type: string, path: geo.country}
      ctx: map
      ip: string
    required: [account, action]
    key: id
    timestamp: ts
    user: account
    event_type: action
    pii: [ip]
    rules:
      - name: internal_traffic
        field: ctx.env
        in: [test]
    checks:
      value: {min: 0, max: 1000}
cdc:
  billing:
    connector: postgresql
    database: billing
    schema: public
    tables:
      subscriptions:
        primary_key: [sub_id]
        columns:
          sub_id: long
          account: string
          plan: string
          price: decimal(8,2)
          started_at: timestamp
        pii: [account]
        subject: account
        checks:
          plan: {in: [free, basic, premium]}
gold:
  purchase: {event_type: subscribe, amount: value}
  funnel: [browse, play, subscribe]
  sessions: {inactivity: 20m}
  tables:
    gold_plan_accounts:
      description: Per plan, the accounts on it (a query that carries a person's id through).
      reads: [silver_subscriptions]
      sql: SELECT plan, account_hash AS account FROM silver_subscriptions
      columns:
        plan: string
        account: string
"""

DAYS = [dt.date(2025, 3, 1), dt.date(2025, 3, 2)]
ACTIONS = ["open_app", "browse", "search", "play", "pause", "rate", "subscribe"]


def _digest(n: int) -> str:
    return hashlib.sha1(f"play-{n}".encode()).hexdigest()


def write_plays(landing, seed=11):
    """Two days of plays with what real logs do: duplicates, a late file, bad lines, mixed time formats."""
    rng = random.Random(seed)
    lines = {d: [] for d in DAYS}
    n = 0
    for day in DAYS:
        for account in range(1, 16):
            t = dt.datetime.combine(day, dt.time(8), dt.timezone.utc) + dt.timedelta(minutes=rng.randrange(600))
            for _ in range(rng.randint(3, 9)):
                t += dt.timedelta(minutes=rng.choice([1, 2, 5, 45]))  # 45: a new session after 20m
                if t.date() != day:
                    break
                n += 1
                action = rng.choice(ACTIONS)
                event = {"id": _digest(n), "account": f"acct-{account:03d}", "action": action,
                         "ts": int(t.timestamp() * 1000) if n % 3 else t.isoformat().replace("+00:00", "Z"),
                         "geo": {"country": rng.choice(["SE", "BR", "JP"])},
                         "ctx": {"device": rng.choice(["tv", "phone"]), "env": "test" if n % 17 == 0 else "prod"},
                         "ip": f"203.0.113.{account}"}
                if action == "subscribe":
                    event["value"] = rng.choice([4.99, 9.99])
                lines[day].append(json.dumps(event))
                if n % 11 == 0:
                    lines[day].append(json.dumps(event))  # delivered twice
    lines[DAYS[0]] += ['{"id": "broken', json.dumps({"id": _digest(10_001), "action": "play", "ts": 1}),  # no account
                       '{"id": "cut", "account": "acct\\u002d003", "action": "pl']  # cut off, escaped: forget finds it
    late = lines[DAYS[0]].pop(3)  # an event of day 1 that lands with day 2's files
    lines[DAYS[1]].append(late)
    for day, day_lines in lines.items():
        folder = landing / "app" / "plays" / f"date={day.isoformat()}"
        folder.mkdir(parents=True)
        (folder / "plays-0.jsonl").write_text("\n".join(day_lines) + "\n")
    return lines


def envelope(op, before, after, lsn, ts, snapshot="false", table="subscriptions", server="billing"):
    return json.dumps({
        "before": before, "after": after, "op": op, "ts_ms": ts + 150,
        "source": {"version": "3.6.3.Final", "connector": "postgresql", "name": server, "ts_ms": ts,
                   "snapshot": snapshot, "db": server, "schema": "public", "table": table, "txId": lsn // 1000,
                   "lsn": lsn},
    })


def write_subscriptions(landing):
    """An initial snapshot (one position for every row, as Debezium sends it), then streamed changes."""
    t0 = int(dt.datetime(2025, 3, 1, 6, tzinfo=dt.timezone.utc).timestamp() * 1000)
    rows = {n: {"sub_id": n, "account": f"acct-{n:03d}", "plan": "basic", "price": "4.99",
                "started_at": "2025-02-20T10:00:00Z"} for n in range(1, 6)}
    day1 = [envelope("r", None, row, 24_000_000, t0, "true" if n < 5 else "last") for n, row in rows.items()]
    t1 = t0 + 3_600_000
    upgraded = {**rows[1], "plan": "premium", "price": "9.99"}
    day1 += [envelope("u", rows[1], upgraded, 24_000_512, t1),
             envelope("d", rows[2], None, 24_000_900, t1 + 1000), "null"]
    moved = {**rows[3], "sub_id": 33}  # a primary-key update: delete and create at one position
    t2 = int(dt.datetime(2025, 3, 2, 9, tzinfo=dt.timezone.utc).timestamp() * 1000)
    day2 = [envelope("d", rows[3], None, 24_001_300, t2), "null", envelope("c", None, moved, 24_001_300, t2),
            envelope("c", None, {"sub_id": 6, "account": "acct-006", "plan": "free", "price": "0.00",
                                 "started_at": "2025-03-02T09:30:00Z"}, 24_001_700, t2 + 5000)]
    day2.append(day2[-1])  # delivered twice
    for day, day_lines in zip(DAYS, (day1, day2)):
        folder = landing / "cdc" / "subscriptions" / f"date={day.isoformat()}"
        folder.mkdir(parents=True)
        (folder / "changes-0.jsonl").write_text("\n".join(day_lines) + "\n")
    truth = {1: upgraded, 4: rows[4], 5: rows[5], 33: moved,
             6: {"sub_id": 6, "account": "acct-006", "plan": "free", "price": "0.00",
                 "started_at": "2025-03-02T09:30:00Z"}}
    return truth


def run_all(defs, lakehouse, first, last, raise_on_error=True):
    return materialize(list(defs.assets), resources={"lakehouse": lakehouse}, instance=DagsterInstance.ephemeral(),
                       raise_on_error=raise_on_error,
                       tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last})


@pytest.fixture(scope="module")
def streaming(spark, lake_settings, tmp_path_factory):
    root = tmp_path_factory.mktemp("streaming")
    (root / "lakehouse.yaml").write_text(DECLARATION)
    project = load_project(root / "lakehouse.yaml")
    landing = root / "landing"
    write_plays(landing)
    truth = write_subscriptions(landing)
    lakehouse = LakehouseResource(home=str(lake_settings.home), spark_master=lake_settings.spark_master,
                                  namespace=f"t_streaming_{uuid.uuid4().hex[:6]}", landing=str(landing))
    defs = build_definitions(project, Settings.from_env())
    result = run_all(defs, lakehouse, "2025-03-01", "2025-03-02")
    assert result.success
    return project, defs, lakehouse, landing, truth, result


def table(lakehouse, name):
    return lakehouse.spark.table(lakehouse.table_id(name))


def duckdb_daily_activity(landing):
    """Events, active users and purchases per day, from the raw landing files, by DuckDB alone."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return {
        row[0]: row[1:] for row in con.execute(f"""
            WITH raw AS (
                SELECT * FROM read_json('{landing}/app/plays/*/*.jsonl', format = 'newline_delimited',
                                        ignore_errors = true, filename = true,
                                        columns = {{id: 'VARCHAR', account: 'VARCHAR', action: 'VARCHAR',
                                                   ts: 'VARCHAR', ctx: 'JSON'}})
            ), typed AS (
                SELECT id, account, action, ctx,
                       CASE WHEN regexp_matches(ts, '^[0-9]+$') THEN make_timestamp(CAST(ts AS BIGINT) * 1000)
                            ELSE CAST(CAST(ts AS TIMESTAMPTZ) AS TIMESTAMP) END AS event_at
                FROM raw
                WHERE id IS NOT NULL AND account IS NOT NULL AND action IS NOT NULL AND ts IS NOT NULL
            ), once AS (
                SELECT DISTINCT id, account, action, event_at, ctx FROM typed
            )
            SELECT CAST(event_at AS DATE) AS day, count(*) AS events, count(DISTINCT account) AS active_users,
                   count(*) FILTER (WHERE action = 'subscribe') AS purchases
            FROM once
            WHERE coalesce(json_extract_string(ctx, '$.env'), '') <> 'test'
            GROUP BY 1 ORDER BY 1
        """).fetchall()
    }


def test_gold_daily_activity_equals_duckdb_over_the_raw_landing_files(streaming):
    _, _, lakehouse, landing, _, _ = streaming
    expected = duckdb_daily_activity(landing)
    got = {r.activity_date: (r.events, r.active_users, r.purchases)
           for r in table(lakehouse, "gold_daily_activity").collect()}
    assert set(expected) == set(DAYS)
    assert got == expected
    assert all(events > 0 and purchases > 0 for events, _, purchases in got.values())


def test_the_domain_flows_through_every_layer_with_its_own_names(streaming):
    project, _, lakehouse, _, _, result = streaming
    silver = table(lakehouse, "silver_plays")
    assert set(silver.columns) >= {"id", "account", "ts", "action", "value", "country", "ctx", "ip_hash"}
    assert "ip" not in silver.columns
    rejected = {r.rule: r["count"] for r in table(lakehouse, "silver_plays_rejected").groupBy("rule").count().collect()}
    assert set(rejected) == {"internal_traffic"}, "an open vocabulary rejects no event type"
    assert silver.where("country IS NULL").count() == 0, "a nested path fills its field"
    actions = {r.action for r in silver.select("action").distinct().collect()}
    assert actions == set(ACTIONS)
    # The late event of day 1 that landed with day 2's files is in day 1 of silver (event time).
    quarantine = table(lakehouse, "bronze_plays_quarantine").collect()
    assert sorted(r.reason for r in quarantine) == ["malformed JSON", "malformed JSON", "missing required field account"]
    # Sessions are cut after 20 minutes without events (the data has 45-minute pauses).
    plays = sorted((r.account, r.ts) for r in silver.collect())
    starts = [b for a, b in zip([None, *plays], plays)
              if a is None or a[0] != b[0] or b[1] - a[1] > dt.timedelta(minutes=20)]
    sessions = table(lakehouse, "gold_sessions").collect()
    assert sorted((s.user_id, s.session_start) for s in sessions) == starts
    assert len(starts) > len({a for a, _ in plays}), "some accounts have several sessions"
    funnel = {(f.funnel_date, f.step): f for f in table(lakehouse, "gold_daily_funnel").collect()}
    assert [funnel[(DAYS[0], n)].event_type for n in (1, 2, 3)] == ["browse", "play", "subscribe"]
    checks = [c for c in result.get_asset_check_evaluations() if c.check_name != "event_time_freshness"]  # the clock's
    assert {c.asset_key for c in checks} >= {AssetKey("silver_plays"), AssetKey("silver_subscriptions")}
    assert all(c.passed for c in checks)
    assert {t for t in project.table_names} <= {
        ".".join(i[1:]) for i in lakehouse.catalog.list_tables(lakehouse.settings.namespace)}


def test_silver_subscriptions_equals_the_source_row_for_row_with_a_real_shaped_snapshot(streaming):
    _, _, lakehouse, _, truth, _ = streaming
    key = pii_key(lakehouse.settings)
    got = {r.sub_id: r for r in table(lakehouse, "silver_subscriptions").collect()}
    assert sorted(got) == sorted(truth), "every snapshot row survives although all share one position"
    for sub_id, row in truth.items():
        r = got[sub_id]
        assert r.account_hash == hmac.new(key, row["account"].encode(), hashlib.sha256).hexdigest()
        assert (r.plan, r.price) == (row["plan"], Decimal(row["price"]))
        assert r.started_at == dt.datetime.fromisoformat(row["started_at"].replace("Z", ""))
    history = table(lakehouse, "silver_subscriptions_history")
    assert {r.sub_id for r in history.where("is_current AND op != 'd'").collect()} == set(truth)


def test_a_value_outside_the_declared_range_stops_the_write_before_main(streaming, spark):
    _, defs, lakehouse, landing, _, _ = streaming
    day = "2025-03-03"
    folder = landing / "app" / "plays" / f"date={day}"
    folder.mkdir(parents=True)
    events = [{"id": _digest(50_000 + n), "account": "acct-900", "action": "subscribe", "ts": f"{day}T10:0{n}:00Z",
               "value": value} for n, value in enumerate([9.99, 5000.0])]
    (folder / "plays-0.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    silver = lakehouse.iceberg_table("silver_plays")
    main_before = silver.current_snapshot().snapshot_id

    result = run_all(defs, lakehouse, day, day, raise_on_error=False)
    assert not result.success
    [failed] = [e for e in result.get_asset_check_evaluations() if not e.passed]
    assert failed.asset_key == AssetKey("silver_plays")
    assert [f["column"] for f in failed.metadata["failures"].value] == ["value"]
    assert not [e for e in result.get_asset_materialization_events()  # gold_plan_accounts reads subscriptions only
                if e.materialization.asset_key.to_user_string().startswith("gold_")
                and e.materialization.asset_key.to_user_string() != "gold_plan_accounts"], "downstream did not run"
    assert silver.refresh().current_snapshot().snapshot_id == main_before, "main is unchanged"
    branch = failed.metadata["audit_branch"].value
    staged = spark.read.option("branch", branch).table(lakehouse.table_id("silver_plays")).where(f"ts >= '{day}'")
    assert sorted(r.value for r in staged.collect()) == [9.99, 5000.0]
    rejected = lakehouse.iceberg_table("silver_plays_rejected")
    assert not [n for n, r in rejected.metadata.refs.items() if r.snapshot_ref_type == "branch" and n != "main"]


def test_a_cdc_table_added_to_the_declaration_reaches_silver_without_python(streaming, tmp_path):
    _, _, lakehouse, landing, _, _ = streaming
    text = DECLARATION.replace("gold:\n", textwrap.indent(textwrap.dedent("""\
        catalog:
          connector: postgresql
          database: catalog
          schema: public
          tables:
            titles:
              primary_key: [title_id]
              columns: {title_id: int, name: string, year: int}
              checks: {year: {min: 1900}}
    """), "  ") + "gold:\n")
    (tmp_path / "lakehouse.yaml").write_text(text)
    project = load_project(tmp_path / "lakehouse.yaml")
    assert "titles" in project.cdc
    t = int(dt.datetime(2025, 3, 1, 7, tzinfo=dt.timezone.utc).timestamp() * 1000)
    folder = landing / "cdc" / "titles" / "date=2025-03-01"
    folder.mkdir(parents=True)
    changes = [envelope("r", None, {"title_id": n, "name": f"Title {n}", "year": 1990 + n}, 7_000, t, "true",
                        table="titles", server="catalog") for n in range(1, 4)]
    changes.append(envelope("u", {"title_id": 2, "name": "Title 2", "year": 1992},
                            {"title_id": 2, "name": "Title Two", "year": 1992}, 7_400, t + 10, table="titles",
                            server="catalog"))
    (folder / "c.jsonl").write_text("\n".join(changes) + "\n")
    defs = build_definitions(project, Settings.from_env())
    selected = [a for a in defs.assets if any(k.to_user_string() in ("bronze_cdc_titles", "silver_titles")
                                              for k in a.keys)]
    result = materialize(selected, resources={"lakehouse": lakehouse}, instance=DagsterInstance.ephemeral(),
                         partition_key="2025-03-01")
    assert result.success
    rows = sorted((r.title_id, r.name, r.year) for r in table(lakehouse, "silver_titles").collect())
    assert rows == [(1, "Title 1", 1991), (2, "Title Two", 1992), (3, "Title 3", 1993)]


def subject_rows(table, subject, pseudonym):
    """Rows naming the subject in each data file any kept snapshot references, read with pyarrow alone."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    found: dict[str, int] = {}
    kept = {e.data_file.file_path for s in table.metadata.snapshots for m in s.manifests(table.io)
            for e in m.fetch_manifest_entry(table.io, discard_deleted=True) if m.content.value == 0}
    for path in kept:
        with table.io.new_input(path).open() as f:
            data = pq.read_table(f)
        while any(pa.types.is_struct(c.type) for c in data.columns):
            data = data.flatten()
        hits = None
        for name, column in zip(data.column_names, data.columns):
            if not pa.types.is_string(column.type):
                continue
            mask = pc.is_in(column, pa.array([subject, pseudonym]))
            if name in ("payload", "key"):
                mask = pc.or_(mask, pc.match_substring(column, f'"{subject}"'))
            hits = mask if hits is None else pc.or_(hits, mask)
        count = int(pc.sum(pc.fill_null(hits, False)).as_py() or 0) if hits is not None else 0
        if count:
            found[path] = count
    return found


def _held_gold_run(lakehouse, project, landing, dagster_home, pauses):
    """A gold_sessions run of the first day in a process of its own, on the instance of `dagster_home`, held
    between its read of silver and its publish until `pauses/<point>.go` appears; returns once it is held."""
    s = lakehouse.settings
    env = {**os.environ, "LAKEHOUSE_HOME": str(s.home), "LAKEHOUSE_NAMESPACE": s.namespace,
           "LAKEHOUSE_LANDING": str(landing), "LAKEHOUSE_PROJECT": str(project.file), "DAGSTER_HOME": str(dagster_home),
           "LAKEHOUSE_SPARK_MASTER": "local[1]", "LAKEHOUSE_DRIVER_MEMORY": "1g", "LAKEHOUSE_FAILPOINT_DIR": str(pauses),
           "LAKEHOUSE_FAILPOINTS": ",".join(f"{point}~pause" for point in HELD_AT)}
    log = pauses / "run.log"
    run = subprocess.Popen([str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m",
                            "lakehouse_assets.definitions", "--select", "gold_sessions", "--partition",
                            DAYS[0].isoformat()], env=env, cwd=pauses, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while not list(pauses.glob("*.paused")):
        assert run.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(1)
    return run


HELD_AT = ("gold_sessions:before-publish", "publish:before-swap")  # alone or with other tables


def test_forget_removes_a_person_from_every_table_and_every_kept_file(streaming, monkeypatch, capsys, tmp_path):
    """Runs after the tests that only read: it deletes from the module's tables."""
    import lakehouse_assets.operations.forget as forget_module
    from lakehouse_assets.cli import main

    project, _, lakehouse, landing, _, _ = streaming
    subject = "acct-003"
    pseudonym = hmac.new(pii_key(lakehouse.settings), subject.encode(), hashlib.sha256).hexdigest()
    catalog, ns = lakehouse.catalog, lakehouse.settings.namespace
    names = sorted(i[-1] for i in catalog.list_tables(ns))
    before = {n: subject_rows(catalog.load_table((ns, n)), subject, pseudonym) for n in names}
    holding = {n for n, files in before.items() if files}
    assert {"bronze_plays", "silver_plays", "gold_sessions", "ml_user_features", "ml_training_set",
            "bronze_cdc_subscriptions", "silver_subscriptions", "silver_subscriptions_history",
            "gold_plan_accounts"} <= holding
    # An ML pin keeps an old snapshot of silver; a legal hold keeps one of the history.
    assert [t for t in catalog.load_table((ns, "silver_plays")).metadata.refs if t.startswith("pin_")]
    history = catalog.load_table((ns, "silver_subscriptions_history"))
    history.manage_snapshots().create_tag(history.current_snapshot().snapshot_id, "legal_hold_case_17").commit()
    activity = table(lakehouse, "gold_daily_activity").collect()
    # The quarantined line that spells the account with a JSON escape, cut off before its end, is theirs too.
    assert [r.source_line for r in table(lakehouse, "bronze_plays_quarantine").collect()
            if "acct\\u002d003" in r.payload]
    landed = {str(f) for f in landing.rglob("*.jsonl")}
    naming = {f for f in landed if "acct-003" in Path(f).read_text() or "acct\\u002d003" in Path(f).read_text()}
    assert naming
    # What a write killed before its commit leaves: a data file of the subject's rows that no snapshot references.
    live = next(iter(before["silver_plays"]))
    orphan = Path(live.removeprefix("file:")).with_name("00000-0-crashed-write-00001.parquet")
    orphan.write_bytes(Path(live.removeprefix("file:")).read_bytes())
    monkeypatch.setattr(forget_module, "ORPHAN_MIN_AGE", dt.timedelta(0))  # it is older than the forget, not hours

    # A gold run that read silver before the forget and publishes after its deletes, held in between.
    dagster_home, pauses = tmp_path / "dagster", tmp_path / "pauses"
    dagster_home.mkdir(), pauses.mkdir()
    gold_run = _held_gold_run(lakehouse, project, landing, dagster_home, pauses)
    for var, value in {"LAKEHOUSE_HOME": str(lakehouse.settings.home), "LAKEHOUSE_NAMESPACE": ns,
                       "LAKEHOUSE_LANDING": str(landing), "LAKEHOUSE_PROJECT": str(project.file),
                       "DAGSTER_HOME": str(dagster_home)}.items():
        monkeypatch.setenv(var, value)
    waiting, real_wait = threading.Event(), forget_module._wait_for

    def wait_for(*args, **kwargs):  # forget's deletes are done and it waits for the runs in flight
        waiting.set()
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(forget_module, "_wait_for", wait_for)
    capsys.readouterr()
    code = {}
    forget = threading.Thread(target=lambda: code.update(forget=main(["forget", "--subject", subject, "--json"])))
    forget.start()
    assert waiting.wait(600), "forget never reached its wait for runs in flight"
    for point in HELD_AT:
        (pauses / f"{point}.go").touch()
    assert gold_run.wait(300) == 0, (pauses / "run.log").read_text()[-3000:]
    forget.join(600)
    assert code == {"forget": 0}
    proof = json.loads(capsys.readouterr().out)
    # Forget dropped the held run's write branch (it held the subject's sessions): its publish was refused, and
    # it wrote again from silver without them; forget waited for it to end, then deleted again.
    assert "is gone (`lakehouse forget` drops the branches" in (pauses / "run.log").read_text()
    assert proof["runs_waited"] and not proof["runs_in_flight"]

    assert proof["purged"] and proof["rows_found_after"] == 0 and proof["live_files_scanned"] > 0
    # Its own independent scan found the orphan, removed it, and nothing else but what the legal hold keeps.
    assert proof["orphans_removed"] == [str(orphan)] and not orphan.exists() and proof["traces"] == {}
    assert proof["independent_scan"]["files_scanned"]["warehouse"] > len(names)
    by_table = {t["table"]: t for t in proof["tables"]}
    assert holding <= set(by_table)
    assert all(by_table[n]["rows_deleted"] > 0 for n in holding - {"silver_plays_rejected"})
    assert any(t.startswith("pin_") for t in by_table["silver_plays"]["tags_removed"])
    assert list(by_table["silver_subscriptions_history"]["legal_holds"]) == ["legal_hold_case_17"]
    assert "gold_daily_activity" in proof["left_alone"]
    # The independent reading: no kept file names the subject, but those only the legal hold keeps.
    history = catalog.load_table((ns, "silver_subscriptions_history"))
    held = set(history.inspect.data_files(history.metadata.refs["legal_hold_case_17"].snapshot_id)["file_path"]
               .to_pylist())
    on_main = set(history.inspect.data_files()["file_path"].to_pylist())
    for n in names:
        after = subject_rows(catalog.load_table((ns, n)), subject, pseudonym)
        if n == "silver_subscriptions_history":
            assert after and set(after) <= held - on_main
        else:
            assert not after, n
    assert table(lakehouse, "silver_plays").where(F.col("account") == subject).count() == 0
    assert table(lakehouse, "silver_plays").count() > 0  # everyone else is still there
    assert table(lakehouse, "gold_daily_activity").collect() == activity  # aggregates left alone
    assert not [r for r in table(lakehouse, "bronze_plays_quarantine").collect() if "acct\\u002d003" in r.payload]

    # The landed files that held the subject are gone (bronze keeps the others' lines), the rest are still there;
    # the independent scan finds nothing of them in the landing zone; every line is still accounted for.
    assert sorted(u.removeprefix("file:") for u in proof["landing_removed"]) == sorted(naming)
    assert {str(f) for f in landing.rglob("*.jsonl")} == landed - naming and not proof["landing_pending"]
    # The independent scan of every file: the subject is left only in what the legal hold keeps (its snapshot's data
    # files, manifests and manifest list), nowhere else in the warehouse, landing or staging.
    scan = trace_scan(lakehouse.settings, {"subject": subject, "pseudonym": pseudonym})
    snapshot = history.snapshot_by_id(history.metadata.refs["legal_hold_case_17"].snapshot_id)
    kept_by_hold = held | {snapshot.manifest_list} | {m.manifest_path for m in snapshot.manifests(history.io)}

    def ours(file):  # the session's lake also holds the other tests' namespaces
        return f"/{ns}/" in file or file.startswith(str(landing))

    hits = {h.file for h in scan.hits if ours(h.file)}
    assert hits <= {f.removeprefix("file:") for f in kept_by_hold} | kept_by_hold, hits
    assert not [f for f in scan.unreadable if ours(f)], scan.unreadable
    rows = reconcile(lakehouse.settings, project)
    assert all(r["balanced"] for r in rows), rows
    forgotten: dict[str, int] = {}
    for r in rows:
        forgotten[r["source"]] = forgotten.get(r["source"], 0) + r["forgotten"]
    forgotten = {source: n for source, n in forgotten.items() if n}
    assert set(forgotten) == {"app/plays", "cdc/subscriptions"}, forgotten
    assert sum(forgotten.values()) == sum(by_table[n]["lines_forgotten"] for n in by_table) > 0, forgotten


def _evolved(declaration: str) -> str:
    """The declaration changed the ways a domain's does over time: a field and a column renamed, a field dropped
    and one added, a decimal widened, a CDC table's partitioning and write mode switched."""
    changes = [
        ("      country: {type: string, path: geo.country}\n",
         "      region: {type: string, path: geo.country, renamed_from: country}\n"
         "      device: {type: string, path: ctx.device}\n"),
        ("      ip: string\n", ""), ("    pii: [ip]\n", ""),
        ("          plan: string\n", "          tier: string\n"),
        ("          price: decimal(8,2)\n", "          price: decimal(10,2)\n"),
        ("          plan: {in: [free, basic, premium]}\n",
         "          tier: {in: [free, basic, premium]}\n"
         "        renamed_from: {tier: plan}\n        partition: [\"bucket(4, sub_id)\"]\n"
         "        write_mode: copy-on-write\n"),
        ("      sql: SELECT plan, account_hash AS account", "      sql: SELECT tier AS plan, account_hash AS account"),
    ]
    return edited(declaration, changes)


def test_a_changed_declaration_is_planned_applied_in_place_and_runs_go_on_under_the_new_names(streaming, tmp_path):
    """Runs last: it changes the module's tables."""
    project, _, lakehouse, landing, _, _ = streaming
    catalog, ns = lakehouse.catalog, lakehouse.settings.namespace
    # Gold's old days as the declaration before the change computes them from silver now (forget, above, leaves
    # the aggregates as they were).
    [gold] = [a for a in build_definitions(project, Settings.from_env()).assets
              if AssetKey("gold_daily_activity") in a.keys]
    assert materialize([gold], resources={"lakehouse": lakehouse}, instance=DagsterInstance.ephemeral(),
                       tags={"dagster/asset_partition_range_start": "2025-03-01",
                             "dagster/asset_partition_range_end": "2025-03-02"}).success
    (tmp_path / "lakehouse.yaml").write_text(_evolved(DECLARATION))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")},
           "LAKEHOUSE_HOME": str(lakehouse.settings.home), "LAKEHOUSE_NAMESPACE": ns,
           "LAKEHOUSE_PROJECT": str(tmp_path / "lakehouse.yaml")}
    command = str(Path(sys.executable).with_name("lakehouse"))
    before = {i[-1]: catalog.load_table(i) for i in catalog.list_tables(ns)}
    plays = {r.id: r.country for r in table(lakehouse, "silver_plays").collect()}
    plans = {r.sub_id: (r.plan, r.price) for r in table(lakehouse, "silver_subscriptions").collect()}
    activity = sorted(table(lakehouse, "gold_daily_activity").drop("computed_at").collect())

    planned = subprocess.run([command, "plan", "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert planned.returncode == 1, planned.stderr
    got = {(c["table"], c["kind"], c["subject"], c["safe"]) for c in json.loads(planned.stdout)["changes"]}
    mode = "set property"
    assert got == {
        ("bronze_plays", "rename column", "country", True), ("bronze_plays", "add column", "device", True),
        ("silver_plays", "rename column", "country", True), ("silver_plays", "add column", "device", True),
        ("silver_plays", "drop column", "ip_hash", False),
        *{("bronze_cdc_subscriptions", kind, f"{image}.{column}", True) for image in ("before", "after")
          for kind, column in (("rename column", "plan"), ("widen type", "price"))},
        *{(t, kind, column, True) for t in ("silver_subscriptions", "silver_subscriptions_history")
          for kind, column in (("rename column", "plan"), ("widen type", "price"))},
        ("silver_subscriptions", "add partition field", "bucket[4](sub_id)", True),
        ("silver_subscriptions", "drop partition field", "bucket[8](sub_id)", True),
        *{(t, mode, f"write.{op}.mode", True) for t in ("silver_subscriptions", "silver_subscriptions_history")
          for op in ("delete", "update", "merge")},
    }, got
    # A destructive change is refused without --allow-drop, and nothing changes; with it, metadata only.
    apply_refused_then_in_place(command, env, catalog, ns, before, "silver_plays: drop column ip_hash")

    # Today lands as the sources now send it (the database's column renamed), then the old days are backfilled and
    # today's partition run, with the changed declaration.
    now = dt.datetime.now(dt.timezone.utc)
    day = now.date()
    moment = max(now - dt.timedelta(minutes=5), dt.datetime.combine(day, dt.time(0, 0, 1), dt.timezone.utc))
    t = int(moment.timestamp() * 1000)
    folder = landing / "app" / "plays" / f"date={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plays-evolved.jsonl").write_text(json.dumps({
        "id": "new-1", "account": "acct-001", "action": "play", "ts": t, "geo": {"country": "SE"},
        "ctx": {"device": "tv", "env": "prod"}}) + "\n")
    folder = landing / "cdc" / "subscriptions" / f"date={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    tier1 = {"sub_id": 1, "account": "acct-001", "tier": "premium", "price": "9.99", "started_at": "2025-02-20T10:00:00Z"}
    (folder / "changes-evolved.jsonl").write_text(envelope("u", tier1, {**tier1, "tier": "basic", "price": "12345678.99"},
                                                     24_009_000, t) + "\n")
    defs = build_definitions(load_project(tmp_path / "lakehouse.yaml"), Settings.from_env())
    assert run_all(defs, lakehouse, "2025-03-01", "2025-03-02").success  # the old days again
    assert run_all(defs, lakehouse, day.isoformat(), day.isoformat()).success  # and the new one

    # Gold's old days are what they were; silver holds what it held, under the new names, and today beside it.
    gold = table(lakehouse, "gold_daily_activity").drop("computed_at").collect()
    assert sorted(r for r in gold if r.activity_date < day) == activity and [r for r in gold if r.activity_date == day]
    now = {r.id: r.region for r in table(lakehouse, "silver_plays").collect()}
    assert {k: v for k, v in now.items() if k in plays} == plays and now["new-1"] == "SE"
    assert "ip_hash" not in table(lakehouse, "silver_plays").columns
    assert table(lakehouse, "silver_plays").where("id = 'new-1'").first().device == "tv"
    subs = {r.sub_id: (r.tier, r.price) for r in table(lakehouse, "silver_subscriptions").collect()}
    assert subs[1] == ("basic", Decimal("12345678.99"))  # wider than decimal(8,2) held
    assert {k: v for k, v in subs.items() if k != 1} == {k: v for k, v in plans.items() if k != 1}
    current = catalog.load_table((ns, "silver_subscriptions"))
    assert [str(f.transform) for f in current.spec().fields] == ["bucket[4]"]
    assert current.properties["write.merge.mode"] == "copy-on-write"

    # As of a snapshot before the change, the old names answer: in Spark, and in `lakehouse sql`.
    old = before["silver_plays"].metadata.current_snapshot_id
    spark_old = lakehouse.spark.sql(f"SELECT id, country FROM {lakehouse.table_id('silver_plays')} VERSION AS OF {old}")
    assert {r.id: r.country for r in spark_old.collect()} == plays
    sql = subprocess.run([command, "sql", "SELECT count(country) AS n FROM silver_plays", "--as-of", str(old),
                          "--format", "json"], env=env, capture_output=True, text=True, timeout=300)
    assert sql.returncode == 0, sql.stderr
    assert json.loads(sql.stdout) == [{"n": sum(v is not None for v in plays.values())}]
