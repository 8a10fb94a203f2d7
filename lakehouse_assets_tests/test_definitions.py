"""The asset graph as Dagster loads it, compared with a snapshot kept in the repository.

Any change to the graph (an asset, a dependency, a check, partitions, automation,
freshness, a sensor) changes `snapshots/<project>_graph.json` and so shows up in
review. After an intended change, `make snapshots` (`python -m
lakehouse_assets_tests.test_definitions`) writes the file again; the test itself only
compares, so it fails on any change until then.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import Definitions
from dagster._core.definitions.backfill_policy import BackfillPolicyType

from .shop import DEFS

SNAPSHOTS = Path(__file__).with_name("snapshots")
PROJECTS = [("shop", DEFS)]


def graph_snapshot(defs: Definitions) -> dict:
    graph = defs.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        freshness = node.freshness_policy
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "kinds": sorted(node.kinds),
            "deps": sorted(p.to_user_string() for p in node.parent_keys),
            "partitions": str(node.partitions_def) if node.partitions_def else None,
            "backfill": node.backfill_policy.policy_type.value if node.backfill_policy else None,
            "checks": sorted(
                f"{c.name} ({'blocking' if graph.get_check_spec(c).blocking else 'warning'})" for c in node.check_keys
            ),
            "automation": node.automation_condition.get_label() if node.automation_condition else None,
            "freshness": {
                "fail_s": int(freshness.fail_window.to_timedelta().total_seconds()),
                "warn_s": int(freshness.warn_window.to_timedelta().total_seconds()) if freshness.warn_window else None,
            } if freshness else None,
            # The table's columns as the UI shows them on the asset's page (`dagster/column_schema`).
            "columns": [f"{c.name} {c.type}{'' if c.constraints.nullable else ' not null'}"
                        for c in node.metadata["dagster/column_schema"].columns]
            if "dagster/column_schema" in node.metadata else None,
        }
    sensors = {
        s.name: {"status": s.default_status.value,
                 "targets": sorted(k.to_user_string() for k in s.asset_selection.resolve(graph))
                 if s.asset_selection is not None else sorted(f"job:{t.job_name}" for t in s.targets)}
        for s in sorted(defs.sensors or [], key=lambda s: s.name)
    }
    schedules = {s.name: {"cron": s.cron_schedule, "status": s.default_status.value, "job": s.job_name}
                 for s in defs.schedules or []}
    jobs = {j.name: {"partitions": len(j.partitions_def.get_partition_keys()) if j.partitions_def else None,
                     "executor": j.executor_def.name} for j in defs.jobs or []}
    job = defs.resolve_implicit_global_asset_job_def()
    return {"assets": assets, "sensors": sensors, "schedules": schedules, "jobs": jobs,
            "executor": job.executor_def.name, "resources": sorted(job.resource_defs)}


def snapshot_text(defs: Definitions) -> str:
    return json.dumps(graph_snapshot(defs), indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize("name, defs", PROJECTS)
def test_the_asset_graph_matches_its_snapshot(name, defs):
    path = SNAPSHOTS / f"{name}_graph.json"
    got = json.loads(snapshot_text(defs))
    assert path.exists(), f"no snapshot {path}: write it with `make snapshots`"
    expected = json.loads(path.read_text())
    for section in ("assets", "sensors"):
        assert sorted(got[section]) == sorted(expected[section]), f"{section} added or removed"
        for key in expected[section]:
            assert got[section][key] == expected[section][key], key
    assert got == expected


def test_graph_invariants_hold_whatever_the_snapshot_says():
    graph = DEFS.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.backfill_policy.policy_type == BackfillPolicyType.SINGLE_RUN, key
        if key.to_user_string().startswith("silver_"):
            assert any(c.name == "pandera_schema" and graph.get_check_spec(c).blocking for c in node.check_keys), key
    job = DEFS.resolve_implicit_global_asset_job_def()
    assert job.executor_def.name == "in_process"
    landing = {s.name for s in DEFS.sensors if s.name.endswith("_landing_sensor")}
    assert landing == {f"bronze_{n}_landing_sensor" for n in ("events", "cdc_customers", "cdc_orders", "cdc_order_items")}


def test_loading_the_definitions_imports_no_library_only_a_run_of_some_assets_needs(tmp_path):
    """Every run, `dagster` command and code server loads the definitions first: pandera (with pandas) and
    dagster-aws, about three seconds of a process's start, are imported where a check is built or S3 is read."""
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_PROJECT": str(Path(__file__).parents[1] /
                                                                                    "examples" / "shop" / "lakehouse.yaml")}
    done = subprocess.run([sys.executable, "-c", "import sys, lakehouse_assets.definitions as d; "
                           "assert d.defs.resolve_asset_graph().get_all_asset_keys(); "
                           "print(sorted(m for m in ('pandera', 'pandas', 'dagster_aws') if m in sys.modules))"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout


if __name__ == "__main__":  # make snapshots: after an intended change to a graph
    for name, defs in PROJECTS:
        path = SNAPSHOTS / f"{name}_graph.json"
        text = snapshot_text(defs)
        changed = not path.exists() or path.read_text() != text
        path.write_text(text)
        print(f"{path}: {'written' if changed else 'unchanged'}")

