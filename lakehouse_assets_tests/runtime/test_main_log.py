"""Time travel by time resolves against main's own log, never a branch's commit time."""

import datetime as dt
import time

import pyarrow as pa
import pytest

from lakehouse_assets.errors import SnapshotError
from lakehouse_assets.operations.snapshots import resolve_point
from lakehouse_assets.runtime.catalog import open_catalog
from lakehouse_assets.runtime.main_log import main_at, on_main_since
from lakehouse_assets.settings import CatalogUri


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def test_a_snapshot_published_after_its_branch_commit_is_mains_only_from_its_publish(tmp_path):
    catalog = open_catalog("lakehouse", CatalogUri.parse(f"sqlite:///{tmp_path}/catalog.db"), f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    table = catalog.create_table(("ns", "t"), pa.schema([pa.field("n", pa.int64())]))
    table.append(pa.table({"n": [1]}))
    first = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_branch(first, "audit_x").commit()
    table.append(pa.table({"n": [2]}), branch="audit_x")  # staged: committed on its branch
    staged = table.refs()["audit_x"].snapshot_id
    time.sleep(0.05)
    between = int(time.time() * 1000)  # main still has `first`
    time.sleep(0.05)
    table.manage_snapshots().set_current_snapshot(snapshot_id=staged).commit()  # published
    table = catalog.load_table(("ns", "t"))

    assert table.snapshot_by_id(staged).timestamp_ms < between, "committed on its branch before that instant"
    assert main_at(table, between)[1] == first
    assert resolve_point(table, "t", _iso(between)) == first, "main never had the staged snapshot then"
    published = on_main_since(table, staged)
    assert published is not None and published > between
    assert resolve_point(table, "t", _iso(published)) == staged
    with pytest.raises(SnapshotError, match="no snapshot on main"):
        resolve_point(table, "t", "2000-01-01")
