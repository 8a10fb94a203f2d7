"""The catalog lost and rebuilt from the warehouse: `lakehouse catalog backup` and `lakehouse catalog rebuild`.

On the demo lakehouse (one day through the whole graph): after the SQLite catalog is deleted, a rebuild
registers every table at the same snapshot, with the same rows, refs and pin tags, and Spark commits on
top of it. A metadata file that no catalog row ever led to is refused when a backup says otherwise, and
two files at a table's newest version without a backup refuse that table alone.

Each test puts the demo lakehouse back as it found it (catalog, warehouse, Dagster instance), failing or not.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from lakehouse_assets.ml.pinning import content_hash
from lakehouse_assets.operations.catalog_recovery import metadata_version
from lakehouse_assets.runtime.catalog import open_catalog
from lakehouse_assets.settings import Settings

from ..shop import SHOP
from .conftest import DEMO_DAY, DemoLake

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@contextmanager
def _put_back(lake: DemoLake, tmp_path: Path) -> Iterator[None]:
    """Copies of the lakehouse home (catalog, warehouse, landing) and the Dagster home, put back on the way out."""
    saved = tmp_path / "as-found"
    homes = ((lake.settings.home, saved / "lake"), (lake.dagster_home, saved / "dagster"))
    catalog = Path(lake.settings.catalog.path)
    for live, copy in homes:
        shutil.copytree(live, copy, symlinks=True)
    with closing(sqlite3.connect(catalog)) as src, closing(sqlite3.connect(saved / "catalog.db")) as dst:
        src.backup(dst)  # the catalog's own consistent copy
    try:
        yield
    finally:
        for live, copy in homes:
            shutil.rmtree(live, ignore_errors=True)
            shutil.copytree(copy, live, symlinks=True)
        shutil.copy2(saved / "catalog.db", catalog)


def _state(settings: Settings) -> dict[str, dict]:
    """Per table of the namespace: current snapshot, refs, schemas, specs and the rows (order-independent hash)."""
    catalog = open_catalog(settings.catalog_name, settings.catalog, settings.warehouse)  # not cached: a new file
    try:
        state = {}
        for identifier in catalog.list_tables(settings.namespace):
            table = catalog.load_table(identifier)
            metadata = table.metadata
            state[identifier[-1]] = {
                "snapshot_id": metadata.current_snapshot_id,
                "snapshots": sorted(s.snapshot_id for s in metadata.snapshots),
                "refs": {name: (ref.snapshot_id, str(ref.snapshot_ref_type)) for name, ref in metadata.refs.items()},
                "schemas": len(metadata.schemas),
                "specs": len(metadata.partition_specs),
                "rows": content_hash(table.scan().to_arrow()) if metadata.current_snapshot_id else None,
            }
        return state
    finally:
        catalog.engine.dispose()


def _rows_but_computed_at(settings: Settings, name: str) -> str:
    catalog = open_catalog(settings.catalog_name, settings.catalog, settings.warehouse)
    try:
        return content_hash(catalog.load_table((settings.namespace, name)).scan().to_arrow().drop_columns(["computed_at"]))
    finally:
        catalog.engine.dispose()


def _pin_hash(lake: DemoLake) -> str:
    return json.loads(lake.run("lakehouse", "pin", "ml_training_set").stdout)["content_sha256"]


def _pointers(path: Path, settings: Settings) -> dict[str, str]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        return dict(con.execute("SELECT table_name, metadata_location FROM iceberg_tables "
                                "WHERE catalog_name = ? AND table_namespace = ?",
                                (settings.catalog_name, settings.namespace)).fetchall())


def _rebuild(lake: DemoLake, *options: str, check: bool = True) -> tuple[dict[str, dict], object]:
    """`lakehouse catalog rebuild --json ...` on a deleted catalog: its results by table name, and the process."""
    Path(lake.settings.catalog.path).unlink(missing_ok=True)
    done = lake.run("lakehouse", "catalog", "rebuild", "--json", *options, check=check)
    return {r["table"].split(".")[-1]: r for r in json.loads(done.stdout)}, done


def test_a_lost_catalog_is_rebuilt_with_every_table_at_its_snapshot_and_spark_commits_on_top(demo_lake, tmp_path):
    settings = demo_lake.settings
    declared = set(SHOP.table_names)
    with _put_back(demo_lake, tmp_path):
        before = _state(settings)
        pin = _pin_hash(demo_lake)
        gold_rows = _rows_but_computed_at(settings, "gold_daily_activity")
        assert before and set(before) <= declared
        assert any(name.startswith("pin_") for table in before.values() for name in table["refs"]), before

        backup = tmp_path / "catalog-backup.db"
        started = time.monotonic()
        done = demo_lake.run("lakehouse", "catalog", "backup", str(backup))
        backup_s = time.monotonic() - started
        assert f"{len(before)} tables in 1 namespace -> {backup}" in done.stdout
        assert _pointers(backup, settings) == _pointers(Path(settings.catalog.path), settings)

        Path(settings.catalog.path).unlink()
        started = time.monotonic()
        done = demo_lake.run("lakehouse", "catalog", "rebuild")
        rebuild_s = time.monotonic() - started
        print(f"backup {backup_s:.1f} s, rebuild {rebuild_s:.1f} s (each a whole `lakehouse` process)")
        print(done.stdout)
        lines = {line.split()[0].split(".")[-1]: line.split()[1] for line in done.stdout.splitlines()[1:]}
        assert {t for t, status in lines.items() if status == "registered"} == set(before)
        assert all(lines[t] == "never" for t in declared - set(before))  # "never created"

        # Every table at the same snapshot with the same rows, snapshots, refs (pin tags too), schemas, specs.
        after = _state(settings)
        assert after == before, {t: (after.get(t), before[t]) for t in before if after.get(t) != before[t]}
        assert _pin_hash(demo_lake) == pin
        again = json.loads(demo_lake.run("lakehouse", "catalog", "rebuild", "--dry-run", "--json").stdout)
        assert {r["status"] for r in again if r["table"].split(".")[-1] in before} == {"exists"}

        # Spark's catalog reads the rebuilt one and commits on top of the snapshot it had.
        old = before["gold_daily_activity"]["snapshot_id"]
        demo_lake.run("dagster", "asset", "materialize", "-m", "lakehouse_assets.definitions",
                      "--select", "gold_daily_activity", "--partition", DEMO_DAY.isoformat(), timeout=900)
        catalog = open_catalog(settings.catalog_name, settings.catalog, settings.warehouse)
        try:
            table = catalog.load_table((settings.namespace, "gold_daily_activity"))
            current = table.current_snapshot()
            assert current is not None and current.snapshot_id != old and current.parent_snapshot_id == old
        finally:
            catalog.engine.dispose()
        assert _rows_but_computed_at(settings, "gold_daily_activity") == gold_rows


def _fork_candidate(settings: Settings, pointers: dict[str, str]) -> tuple[str, Path, dict, Path, dict]:
    """A table whose pointer has a parent file holding another current snapshot: (name, pointer file, its
    metadata, parent file, its metadata); gold_daily_activity when it qualifies."""
    for name in sorted(pointers, key=lambda n: n != "gold_daily_activity"):
        pointer = settings.local_path(pointers[name])
        metadata = json.loads(pointer.read_text())
        if not metadata["metadata-log"]:
            continue
        parent = settings.local_path(metadata["metadata-log"][-1]["metadata-file"])
        if parent.is_file():
            parent_metadata = json.loads(parent.read_text())
            if parent_metadata.get("current-snapshot-id") != metadata.get("current-snapshot-id"):
                return name, pointer, metadata, parent, parent_metadata
    raise AssertionError(f"no table with two committed states to fork from: {pointers}")


def _write_child(of: Path, metadata: dict, version: int) -> Path:
    """`metadata` as the next commit after `of` (its log ends with `of`), written as `<version>-<uuid>` beside it."""
    child = {**metadata, "last-updated-ms": int(time.time() * 1000),
             "metadata-log": [*metadata["metadata-log"],
                              {"timestamp-ms": metadata["last-updated-ms"], "metadata-file": of.as_uri()}]}
    path = of.parent / f"{version:05d}-{uuid.uuid4()}.metadata.json"
    path.write_text(json.dumps(child))
    return path


def test_a_metadata_file_no_catalog_row_led_to_is_refused_when_the_backup_says_otherwise(demo_lake, tmp_path):
    settings = demo_lake.settings
    with _put_back(demo_lake, tmp_path):
        before = _state(settings)
        backup = tmp_path / "catalog-backup.db"
        demo_lake.run("lakehouse", "catalog", "backup", str(backup))
        pointers = _pointers(backup, settings)
        name, pointer, metadata, parent, parent_metadata = _fork_candidate(settings, pointers)
        version = metadata_version(pointer.name)
        assert version is not None

        # A fork: a commit on the pointer's parent, numbered above the pointer; its log never reaches the
        # pointer, so no catalog row ever led to it. It holds the parent's current snapshot, not the pointer's.
        fork = _write_child(parent, parent_metadata, version + 1)
        results, _ = _rebuild(demo_lake, "--backup", str(backup))
        chosen = results[name]
        assert chosen["status"] == "registered" and chosen["source"] == "backup's pointer", chosen
        assert chosen["metadata_location"] == pointers[name] and chosen["version"] == version
        assert chosen["snapshot_id"] == metadata["current-snapshot-id"]
        assert len(chosen["skipped"]) == 1 and fork.name in chosen["skipped"][0], chosen
        assert "does not descend from the backup's pointer" in chosen["skipped"][0]
        assert {t for t, r in results.items() if r["status"] == "registered"} == set(before)
        assert _state(settings) == before

        # A writer that committed on the pointer and stopped before moving the catalog row: now two files at
        # the newest version. Without a backup nothing tells which was committed: that table alone is refused.
        in_flight = _write_child(pointer, metadata, version + 1)
        results, done = _rebuild(demo_lake, check=False)
        assert done.returncode == 1, done.stderr
        refused = results[name]
        assert refused["status"] == "refused" and refused["metadata_location"] is None, refused
        assert fork.name in refused["reason"] and in_flight.name in refused["reason"]
        assert f"2 metadata files at version {version + 1}" in refused["reason"]
        assert f"{name}: 2 metadata files" in done.stderr
        assert {t for t, r in results.items() if r["status"] == "registered"} == set(before) - {name}
        assert _state(settings) == {t: s for t, s in before.items() if t != name}

        # With the backup, the in-flight file descends from the pointer and the fork does not: it is taken
        # (its files are complete), and the fork named as skipped.
        results, _ = _rebuild(demo_lake, "--backup", str(backup))
        taken = results[name]
        assert taken["status"] == "registered" and taken["source"] == "descends from backup's pointer", taken
        assert taken["metadata_location"].endswith(in_flight.name) and taken["version"] == version + 1
        assert len(taken["skipped"]) == 1 and fork.name in taken["skipped"][0]
        assert _state(settings) == before  # the same snapshot: the in-flight commit changed nothing else
