"""The cluster profile by settings alone: the same assets on a Spark standalone master with two workers,
a PostgreSQL catalog (through the REST catalog server, or opened directly), an S3 warehouse and landing zone,
and a Dagster instance on PostgreSQL, give the same rows as the local profile on the same input, the work really
runs on both workers, and the SQL endpoint answers with the cluster's executors as a reader."""

import json
import subprocess
import sys

import pytest

from ..shop import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
@pytest.mark.parametrize("catalog", ["rest", "postgresql"])
def test_the_cluster_profile_gives_the_local_rows_and_runs_on_both_workers(tmp_path, catalog):
    done = subprocess.run([sys.executable, "-m", "examples.cluster.demo", "--days", "1", "--events-per-day", "600",
                           "--catalog", catalog, "--home", str(tmp_path / "demo"), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-5000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])

    # One setting chose everything: the two runs differ only in LAKEHOUSE_PROFILE.
    on = outcome["settings"]
    assert (on["cluster"]["profile"], on["local"]["profile"]) == ("cluster", "local")
    assert on["cluster"]["spark_master"].startswith("spark://127.0.0.1:") and on["local"]["spark_master"] == "local[2]"
    expected = {"rest": "rest+http://127.0.0.1:", "postgresql": "postgresql://"}[catalog]
    assert on["cluster"]["catalog"].startswith(expected) and on["local"]["catalog"].startswith("sqlite:///")
    assert on["cluster"]["warehouse"] == "s3://lake/warehouse" and on["local"]["warehouse"].startswith("file://")
    assert on["cluster"]["landing"] == "s3://raw/landing" and on["cluster"]["s3_secret_key"] == "(set)"

    local, cluster = outcome["local"], outcome["cluster"]
    assert {"lake.bronze_events", "lake.silver_events", "lake.gold_daily_activity", "lake.silver_orders_history",
            "lake.ml_training_set"} <= local.keys()
    assert local["lake.bronze_events"] > 600 and local["lake.silver_events"] > 0 and local["lake.silver_orders"] > 0
    assert cluster == local, {t: (cluster.get(t), local.get(t)) for t in local if cluster.get(t) != local.get(t)}
    assert outcome["same"] is True

    tasks = outcome["tasks_by_worker"]
    workers = {w: n for w, n in tasks.items() if w.startswith("worker-")}
    assert len(workers) == 2 and all(n > 0 for n in workers.values()), tasks
    assert set(tasks) == set(workers), f"tasks ran outside the workers: {tasks}"

    # The SQL endpoint on the cluster profile answers a dashboard's query with the cluster's executors.
    served = outcome["endpoint"]
    assert sum(served["answer"].values()) == cluster["lake.silver_events"] and len(served["answer"]) > 1, served
    endpoint_tasks = served["tasks_by_worker"]
    assert endpoint_tasks and all(w.startswith("worker-") for w in endpoint_tasks), endpoint_tasks
    if catalog == "rest":  # every table the pipeline committed went through the server, and the endpoint read there
        asked = served["catalog_requests"]
        assert asked["pipeline"]["commits"] > 0 and asked["analyst"]["loads"] > 0, asked
        assert asked["analyst"]["commits"] == 0 and asked["analyst"]["refused"] == 0, asked
