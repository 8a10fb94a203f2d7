"""Several processes write one table at once: Spark appends, a partition overwrite and two MERGEs through the
platform's staged commits, and pyiceberg appends through its own, on the SQLite catalog, on PostgreSQL, and through
the REST catalog server over a SQLite catalog (each staged write published by the protocol's multi-table commit).

The table does not exist when they start (their first runs race to create it). Writes of different days never
conflict: each is replayed on whatever main has become and publishes. The two MERGEs into one day do conflict:
each such batch is re-staged on the new main, or given up with nothing of it published. Every commit a writer
reports is on main, main's history is one line, and the table holds exactly what the reported commits say:
each appended row once, the overwritten day as its last batch left it, the upserted rows at the values of the
last batch that published.
"""

import json
import re
import subprocess
import sys
import uuid
from collections import Counter

import pytest

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.serving.read_rule import catalog_rules
from lakehouse_assets.settings import CatalogUri, Settings
from lakehouse_services.rest_catalog import RestCatalogServer

from ..shop import ROOT
from .figures import SCALE, record

pytestmark = pytest.mark.slow  # writers in processes of their own

WRITERS = [("spark-append", "2025-01-01"), ("spark-overwrite", "2025-01-02"), ("spark-merge", "2025-01-03"),
           ("pyiceberg-append", "2025-01-01"), ("pyiceberg-append", "2025-01-04"), ("spark-merge", "2025-01-03")]
CONFLICTING = {"w2", "w5"}  # the two MERGEs into one day


@pytest.fixture
def catalog_uri(request, tmp_path, pg_catalog_uri):
    """The catalog the writers share, of the test's kind; a REST catalog server runs while the test does."""
    if request.param == "postgresql":
        yield pg_catalog_uri.sqlalchemy_url.replace("+psycopg2", "")  # its password too, when it has one
        return
    database = f"sqlite:///{tmp_path / 'catalog.db'}"
    if request.param == "sqlite":
        yield database
        return
    warehouse = Settings(home=tmp_path, catalog_uri=database).warehouse
    with RestCatalogServer(tmp_path / "catalog-server", catalog_uri=CatalogUri.parse(database).jdbc_url,
                           warehouse=warehouse, rules=catalog_rules()) as server:
        yield server.settings_uri("pipeline")


# Through the REST catalog server, a process of its own as deployed: with the deployments (make e2e).
@pytest.mark.parametrize("catalog_uri", ["sqlite", pytest.param("postgresql", marks=pytest.mark.soak),
                                         pytest.param("rest", marks=pytest.mark.e2e)], indirect=True)
def test_writers_in_several_processes_all_commit_exactly_once_on_a_linear_history(catalog_uri, tmp_path):
    kind = CatalogUri.parse(catalog_uri).kind
    namespace = f"t_writers_{uuid.uuid4().hex[:6]}"
    settings = Settings(home=tmp_path, catalog_uri=catalog_uri, namespace=namespace)
    catalog = catalog_for(settings)
    catalog.create_namespace(namespace)
    batches = 3 * SCALE
    processes = []
    for n, (writer, day) in enumerate(WRITERS):
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "lakehouse_assets_tests.reliability.writer", writer, "--name", f"w{n}",
             "--day", day, "--batches", str(batches), "--home", str(tmp_path), "--catalog-uri", catalog_uri,
             "--namespace", namespace], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=1800) for p in processes]
    reports = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    commits = [r for r in reports if "conflict" not in r]
    conflicts = [r for r in reports if "conflict" in r]
    failed = {f"w{n} ({WRITERS[n][0]})": _reason(err) for n, (p, (_, err)) in enumerate(zip(processes, outputs))
              if p.returncode != 0}
    record(f"concurrent_writers ({kind})", writers=len(WRITERS), batches_each=batches, commits=len(commits),
           replays_on_a_moved_main=sum(c["replays"] for c in commits),
           retried_after_a_conflict=sum(c["retries"] for c in commits), given_up_on_a_conflict=len(conflicts),
           writers_that_failed=len(failed), **failed)
    assert not failed, failed
    assert Counter(r["writer"] for r in reports) == {f"w{n}": batches for n in range(len(WRITERS))}
    assert {r["writer"] for r in conflicts} <= CONFLICTING, conflicts  # writes of different days never conflict
    assert all("changed what this write was decided against" in r["conflict"] for r in conflicts), conflicts

    table = catalog.load_table((namespace, "contended"))
    # One line of history: from main's head back through parents, every snapshot, each reported commit on it.
    line, snapshot = [], table.current_snapshot()
    while snapshot is not None:
        line.append(snapshot.snapshot_id)
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    assert {c["snapshot_id"] for c in commits} <= set(line)
    assert len(line) == len(set(line))

    rows = table.scan().to_arrow().to_pylist()
    got = Counter((r["writer"], r["id"], r["value"]) for r in rows)
    expected: Counter = Counter()
    for c in commits:
        if c["kind"] in ("spark-append", "pyiceberg-append"):
            expected.update((c["writer"], i, c["batch"]) for i in c["ids"])
    for n, (writer, _) in enumerate(WRITERS):
        published = [c for c in commits if c["writer"] == f"w{n}"]
        if writer in ("spark-overwrite", "spark-merge") and published:
            final = max(published, key=lambda c: c["batch"])
            expected.update((f"w{n}", i, final["batch"]) for i in final["ids"])
    assert got == expected  # every committed row once, nothing else
    record(f"concurrent_writers ({kind}): the table after", snapshots_on_main=len(line), rows=len(rows))


def _reason(stderr: str) -> str:
    """The exception a writer died of: the last line of its output that names one."""
    lines = stderr.splitlines()
    named = [n for n, line in enumerate(lines) if re.match(r"^[\w.]+(Error|Exception): ", line.strip())]
    if not named:
        return (lines[-1].strip() if stderr.strip() else "no output")[:400]
    n = named[-1]
    java = lines[n + 1].strip() if n + 1 < len(lines) and lines[n + 1].startswith(": ") else ""  # py4j's cause
    return f"{lines[n].strip()} {java}".strip()[:600]
