"""Forget's last step: the independent scan of its namespace's table folders decides what is left of a person.
A file no snapshot references is removed only when it is old enough to be a crashed write's; a younger one, or a
file a snapshot still references, is named and the person is not purged. No Spark: the table is pyiceberg's."""

import hashlib
import hmac
import shutil
import time
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from lakehouse_assets.operations.forget import Forget, ForgetReport
from lakehouse_assets.project import load_project
from lakehouse_assets.runtime.resource import LakehouseResource

from ..shop import SHOP_FILE

KEY = "forget-scan-test-key-of-at-least-32-bytes-0123456789"


def test_an_unreferenced_file_of_the_person_is_removed_when_old_and_named_when_young(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKEHOUSE_PII_KEY", KEY)
    subject = "acct-77"
    hashed = hmac.new(KEY.encode(), subject.encode(), hashlib.sha256).hexdigest()
    lakehouse = LakehouseResource(home=str(tmp_path), namespace="lake", landing=str(tmp_path / "landing"))
    table = lakehouse.catalog.create_table(("lake", "silver_users"), schema=pa.schema([("user_key", pa.string())]))
    table.append(pa.table({"user_key": ["someone-else"]}))
    [live] = [urlsplit(t.file.file_path).path for t in table.scan().plan_files()]
    # What a write killed before its commit leaves: a data file of the person's rows no snapshot references.
    orphan = tmp_path / "orphan.parquet"
    pq.write_table(pa.table({"user_key": [hashed, "someone-else"]}), orphan)
    orphan = shutil.move(orphan, live.replace(".parquet", "-crashed.parquet"))
    forget = Forget(lakehouse, load_project(SHOP_FILE), log=lambda _: None)
    forget._subject, forget._hashed = subject, hashed

    young = ForgetReport(subject)
    forget._scan_independently(young, {}, began_at=time.time())
    assert young.orphans_removed == [] and "a write may still commit it" in young.traces[orphan]
    assert young.independent_scan["files_scanned"]["warehouse"] >= 4 and not young.purged

    old = ForgetReport(subject)
    forget._scan_independently(old, {}, began_at=time.time() + 2 * 3600)  # the file is two hours older than forget
    assert old.orphans_removed == [orphan] and old.traces == {} and old.purged
    assert table.scan().to_arrow()["user_key"].to_pylist() == ["someone-else"]  # the table is untouched

    # A file a snapshot references that still holds the person (a delete that missed them) is never removed.
    table.append(pa.table({"user_key": [hashed]}))
    missed = ForgetReport(subject)
    forget._scan_independently(missed, {}, began_at=time.time() + 2 * 3600)
    assert missed.orphans_removed == [] and not missed.purged
    assert [why for why in missed.traces.values() if why.startswith("a file a snapshot references holds the subject")]

    # A capture's part file still being written names the person: it is not rewritten under a live capture, and
    # the person is not purged until it lands, bronze takes it and forget runs again.
    part = tmp_path / "capture" / "app" / "staging" / "20250101" / "changes-0001.jsonl.part"
    part.parent.mkdir(parents=True)
    part.write_text('{"after": {"id": 7, "account": "acct-77"}}\n')
    staged = ForgetReport(subject)
    forget._scan_independently(staged, {}, began_at=time.time() + 2 * 3600)
    assert "has not landed yet" in staged.traces[str(part)]
    assert part.exists() and not staged.purged
