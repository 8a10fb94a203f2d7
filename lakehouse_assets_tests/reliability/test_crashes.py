"""A materialisation killed (SIGKILL, no cleanup) at each step of publishing: after its data files are written
on the write branches, after the new metadata files are written but before the catalog's transaction swaps
them in, and right after that transaction but before Dagster records anything. The tables of the run (bronze,
its quarantine and the ingest log; silver and its rejects; a CDC table's current state and its history) are
then all at their old state or all at their new one, and a re-run takes every landed record exactly once
(records in = kept + quarantined, each line once)."""

import datetime as dt
import hashlib
import hmac
import json
import os
from decimal import Decimal
from urllib.parse import urlparse

import pytest

from examples.shop.cdc_generator import CDC_TABLES
from lakehouse_assets.operations.procedures import TableMaintenance
from lakehouse_assets.project.model import TablePolicy
from lakehouse_assets.runtime.pii import pii_key

from ..bronze.test_events_ingest import _crash_run, _event, held, ingest, land
from .figures import age_table_files, record

pytestmark = pytest.mark.slow  # runs killed in processes of their own

# `make test` kills a run on each side of the catalog's swap once (bronze after it, silver's pair before it), and
# bronze before the REST catalog server's commit of its three tables; `make soak` at every point of each.
SOAK = pytest.mark.soak
POINTS = [pytest.param("bronze_events:before-publish", "sql", marks=SOAK),
          pytest.param("publish:before-swap", "sql", marks=SOAK), ("publish:after-swap", "sql"),
          ("publish:before-swap", "rest"), pytest.param("publish:after-swap", "rest", marks=SOAK)]


@pytest.mark.parametrize("failpoint, catalog", POINTS)
def test_a_run_killed_at_any_step_leaves_each_table_whole_and_the_rerun_takes_each_record_once(request, failpoint,
                                                                                              catalog):
    lakehouse = request.getfixturevalue("rest_lakehouse" if catalog == "rest" else "lakehouse")
    good = [json.dumps(_event(n)) for n in range(25)]
    records = land(lakehouse, "a.jsonl", good[:10] + ["{cut", "[]"] + good[10:])

    crashed = _crash_run(lakehouse, failpoint)
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    published = {name: lakehouse.iceberg_table(name).scan().count() if lakehouse.catalog.table_exists(
        (lakehouse.settings.namespace, name)) else 0
        for name in ("bronze_events", "bronze_events_quarantine", "bronze_ingest_log")}
    # All three or none: the crash before the swap left every table old, the one after it every table new.
    assert list(published.values()) == ([25, 2, 1] if failpoint == "publish:after-swap" else [0, 0, 0])
    if failpoint == "bronze_events:before-publish":  # written, not published: on the write's branch only
        bronze = lakehouse.iceberg_table("bronze_events")
        [staged] = [name for name in bronze.metadata.refs if name.startswith("stage_")]
        assert bronze.current_snapshot() is None and bronze.scan().use_ref(staged).count() == 25
        # Maintenance finds what the dead write left: its branch once stale, then the files only it held.
        left = [urlparse(t.file.file_path).path for t in bronze.scan().use_ref(staged).plan_files()]
        assert left and all(os.path.exists(p) for p in left)
        maintenance = TableMaintenance(lakehouse, "bronze_events", TablePolicy(), log=lambda _: None)
        later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30)  # past branch and snapshot retention
        assert maintenance.expire(later).figures["dropped_branches"] == [staged]
        age_table_files(lakehouse.iceberg_table("bronze_events"))  # and past orphan removal's safety window
        maintenance.remove_orphans()
        assert not [p for p in left if os.path.exists(p)]

    meta = ingest(lakehouse)
    assert held(lakehouse) == (25, 2, records)
    taken = lakehouse.spark.table(lakehouse.table_id("bronze_ingest_log")).count()
    assert taken == 1
    again = ingest(lakehouse)
    assert again["records_in"].value == 0 and held(lakehouse) == (25, 2, records)
    record(f"crash at {failpoint}", tables_published_before_rerun=published,
           records_in_at_rerun=meta["records_in"].value)


@pytest.mark.parametrize("failpoint", ["publish:before-swap", pytest.param("publish:after-swap", marks=SOAK)])
def test_a_silver_run_killed_while_publishing_moves_both_its_tables_or_neither(lakehouse, failpoint):
    """silver_events and its rejected table move together: killed once both new metadata files are written but
    before the catalog's transaction, neither moved (and orphan removal finds the files); killed right after
    it, both did. The re-run leaves every bronze key in exactly one of the two."""
    from ..shop import SHOP

    source = SHOP.events["events"]
    land(lakehouse, "a.jsonl", [json.dumps(_event(n)) for n in range(12)]
         + [json.dumps(_event(n, event_type="teleport")) for n in range(12, 15)])
    ingest(lakehouse)
    crashed = _crash_run(lakehouse, failpoint, select="silver_events")
    assert crashed.returncode == -9, crashed.stderr[-2000:]

    def counts():
        return tuple(lakehouse.iceberg_table(name).scan().count() if lakehouse.catalog.table_exists(
            (lakehouse.settings.namespace, name)) else 0 for name in ("silver_events", source.rejected))

    after_crash = counts()
    assert after_crash == ((0, 0) if failpoint == "publish:before-swap" else (12, 3))
    if failpoint == "publish:before-swap":  # the metadata files written for the swap that never happened
        maintenance = TableMaintenance(lakehouse, "silver_events", TablePolicy(), log=lambda _: None)
        age_table_files(lakehouse.iceberg_table("silver_events"))
        removed = maintenance.remove_orphans()
        assert any(f.endswith(".metadata.json") for f in removed.figures["removed_files"]), removed.figures
        assert lakehouse.iceberg_table("silver_events").scan().count() == 0  # still readable, still old

    rerun = _run(lakehouse, "silver_events")
    assert rerun.success and counts() == (12, 3)
    keys = [r.event_id for name in ("silver_events", source.rejected)
            for r in lakehouse.spark.table(lakehouse.table_id(name)).select("event_id").collect()]
    assert sorted(keys) == [f"e-{n:04d}" for n in range(15)]
    record(f"crash at {failpoint} (silver pair)", tables_after_crash=dict(zip(("silver", "rejected"), after_crash)),
           tables_after_rerun=dict(zip(("silver", "rejected"), counts())))


@pytest.mark.parametrize("failpoint", [pytest.param("publish:before-swap", marks=SOAK),
                                       pytest.param("publish:after-swap", marks=SOAK)])
def test_a_cdc_silver_run_killed_while_publishing_moves_current_state_and_history_together(lakehouse, failpoint):
    """The current state and the SCD2 history of a CDC table are one MERGE each and one swap together: killed
    before it, neither moved; right after it, both did. Re-run (twice), current state is exactly the current
    versions of the history, every change applied once."""
    from examples.shop.cdc_generator import generate_cdc

    from ..bronze.test_events_ingest import DAY

    landing = lakehouse.settings.local_path(lakehouse.settings.landing)
    # Every line well formed (redeliveries kept): the oracle below is then a plain replay of the landed lines.
    generated = generate_cdc(landing, [dt.date.fromisoformat(DAY)], changes_per_day=80, customers=30,
                             initial_orders=10, malformed_rate=0.0, duplicate_rate=0.1)
    changes = _landed_customer_changes(landing / "cdc" / "customers" / f"date={DAY}")
    assert _change_lines(landing, DAY) > len(changes), "some changes landed twice"
    assert {op for op, _, _ in changes} == {"r", "c", "u", "d"}
    assert any([op for _, op in ops].count("u") > 1 for ops in _ops_by_key(changes).values()), "a key updated twice"
    expected = _replay(changes)
    assert expected == dict(generated.true_state["customers"])  # the oracle agrees with the simulated source
    result = _run(lakehouse, "bronze_cdc_customers")
    assert result.success
    crashed = _crash_run(lakehouse, failpoint, select="silver_customers,silver_customers_history")
    assert crashed.returncode == -9, crashed.stderr[-2000:]

    def counts():
        return tuple(lakehouse.iceberg_table(name).scan().count() if lakehouse.catalog.table_exists(
            (lakehouse.settings.namespace, name)) else 0 for name in ("silver_customers", "silver_customers_history"))

    after_crash = counts()
    if failpoint == "publish:before-swap":
        assert after_crash == (0, 0)
    else:
        assert after_crash[0] > 0 and after_crash[1] >= after_crash[0]
    assert _run(lakehouse, "silver_customers").success
    settled = counts()
    assert _run(lakehouse, "silver_customers").success and counts() == settled  # applied once: nothing moves
    if failpoint == "publish:after-swap":
        assert settled == after_crash
    spark = lakehouse.spark
    current = sorted(r.customer_id for r in spark.table(lakehouse.table_id("silver_customers")).collect())
    history = spark.table(lakehouse.table_id("silver_customers_history"))
    assert current and current == sorted(r.customer_id for r in history.where("is_current AND op != 'd'").collect())

    # The current state is exactly the source's, row for row and value for value, replayed from the landed lines.
    info = CDC_TABLES["customers"]
    key = pii_key(lakehouse.settings)
    silver = spark.table(lakehouse.table_id("silver_customers")).collect()
    got = {(r.customer_id,): {c: v for c, v in r.asDict().items() if c not in ("change_position", "last_op",
                                                                                   "source_ts")} for r in silver}
    assert len(got) == len(silver)
    assert got == {k: _as_silver(info, row, key) for k, row in expected.items()}
    assert {(r.customer_id,): r.last_op for r in silver} == {k: ops[-1][1] for k, ops in _ops_by_key(changes).items()
                                                             if ops[-1][1] != "d"}
    # Every change once in history, none lost, none twice: per key, its versions are the key's changes in
    # position order (a redelivered change is one version, whatever the crash and the re-runs did).
    versions: dict[tuple, list] = {}
    for r in history.select("key", "op", "change_position").collect():
        versions.setdefault(_key_of(r.key), []).append((r.change_position, r.op))
    assert {k: [op for _, op in sorted(v)] for k, v in versions.items()} == \
        {k: [op for _, op in ops] for k, ops in _ops_by_key(changes).items()}
    assert all(len({p for p, _ in v}) == len(v) for v in versions.values()), "one version per change position"
    record(f"crash at {failpoint} (CDC pair)", tables_after_crash=dict(zip(("current", "history"), after_crash)),
           tables_after_rerun=dict(zip(("current", "history"), settled)))


def _position(source: dict, op: str) -> tuple[int, int]:
    """A PostgreSQL change's commit order, as Debezium gives it: a snapshot row at (lsn, 0); a streamed change at
    (the last commit's LSN from `sequence`, or its own LSN when that is null; its LSN)."""
    if op == "r":
        return source["lsn"], 0
    last_commit = json.loads(source.get("sequence") or "[null]")[0]
    return (int(last_commit) if last_commit is not None else source["lsn"]), source["lsn"]


def _landed_customer_changes(folder) -> dict[tuple, dict]:
    """Every change the landed files of `customers` hold, once: (op, position, key) -> envelope. Tombstones
    (`null`) are no change; a redelivery repeats its change's identity."""
    found: dict[tuple, dict] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            if doc is None:
                continue
            envelope = doc["payload"] if "schema" in doc and "payload" in doc else doc
            op = envelope["op"]
            image = envelope["before"] if op == "d" else envelope["after"]
            found.setdefault((op, _position(envelope["source"], op), (image["customer_id"],)), envelope)
    return found


def _change_lines(landing, day) -> int:
    """The lines of `customers` that are a change (not a tombstone), redeliveries included."""
    lines = [json.loads(line) for path in (landing / "cdc" / "customers" / f"date={day}").glob("*.jsonl")
             for line in path.read_text().splitlines()]
    return sum(1 for doc in lines if doc is not None)


def _ops_by_key(changes: dict[tuple, dict]) -> dict[tuple, list]:
    """Per key, its changes' (position, op) in commit order."""
    ops: dict[tuple, list] = {}
    for op, position, key in changes:
        ops.setdefault(key, []).append((position, op))
    return {k: sorted(v) for k, v in ops.items()}


def _replay(changes: dict[tuple, dict]) -> dict[tuple, dict]:
    """The table after every change, in commit order: a delete removes the key, anything else sets its row."""
    state: dict[tuple, dict] = {}
    for (op, _, key), envelope in sorted(changes.items(), key=lambda item: item[0][1]):
        if op == "d":
            state.pop(key, None)
        else:
            state[key] = envelope["after"]
    return state


def _as_silver(info, row: dict, key: bytes) -> dict:
    """A source row as silver keeps it: personal data as its keyed hash, times as naive UTC, decimals typed."""
    out = {}
    for name, value in row.items():
        kind = str(info.columns.get(name, ""))
        if name in info.pii:
            out[f"{name}_hash"] = hmac.new(key, value.encode(), hashlib.sha256).hexdigest() if value is not None \
                else None
        elif kind == "timestamp" and value is not None:
            out[name] = dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.timezone.utc) \
                .replace(tzinfo=None)
        elif kind.startswith("decimal") and value is not None:
            out[name] = Decimal(value)
        else:
            out[name] = value
    return out


def _key_of(text: str) -> tuple:
    """History's canonical JSON key as the key tuple."""
    value = json.loads(text)
    if isinstance(value, dict):
        return (value["customer_id"],)
    return tuple(value) if isinstance(value, list) else (value,)


def _run(lakehouse, name):
    from dagster import DagsterInstance, materialize

    from ..bronze.test_events_ingest import DAY
    from ..shop import asset

    return materialize([asset(name)], resources={"lakehouse": lakehouse}, partition_key=DAY,
                       instance=DagsterInstance.ephemeral())
