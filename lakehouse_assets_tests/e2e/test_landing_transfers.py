"""Files as transfers deliver them, taken by the real Dagster daemon with nobody launching a run.

Local zone: files copied into today's folder with their modification times kept three days old (`cp -p`,
`rsync -a`, `tar x`), a file written in two halves 90 s apart, an empty file and a `.jsonl.gz` written slowly in
chunks, under a declaration that makes files settle for 15 s. S3 zone (SeaweedFS): an object uploaded again with
lines appended, an object replaced by other content, an empty object. Every line of every version must end in
bronze or the quarantine once, by file and line, and `lakehouse reconcile` must balance.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import boto3
import pytest

from lakehouse_assets.runtime.catalog import catalog_for
from lakehouse_assets.settings import Settings

from ..automation.test_daemon import _daemon, _events, _stop
from ..shop import ROOT, temporary_instance

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DEADLINE_S = 600


def _today() -> dt.date:
    return dt.datetime.now(dt.timezone.utc).date()


def _text(prefix: str, n: int) -> str:
    return "".join(json.dumps(e) + "\n" for e in _events(_today(), n, prefix))


def _held(settings: Settings, table: str) -> list[tuple[str, int, str | None]]:
    catalog = catalog_for(settings)
    if not catalog.table_exists((settings.namespace, table)):
        return []
    fields = ("source_file", "source_line", "reason") if "quarantine" in table else ("source_file", "source_line")
    rows = catalog.load_table((settings.namespace, table)).scan(selected_fields=fields).to_arrow().to_pylist()
    return sorted((r["source_file"].rsplit("/", 1)[1], r["source_line"], r.get("reason")) for r in rows)


def _wait_for(settings: Settings, want_bronze: list, want_quarantine: list, logs: Path, started: float) -> None:
    got: tuple = ()
    while time.monotonic() - started < DEADLINE_S:
        got = (_held(settings, "bronze_events"), _held(settings, "bronze_events_quarantine"))
        if got == (want_bronze, want_quarantine):
            return
        time.sleep(10)
    raise AssertionError(f"after {time.monotonic() - started:.0f} s: bronze {got[0][:5]}... ({len(got[0])}), "
                         f"quarantine {got[1]}\n" + logs.read_text()[-3000:])


def _reconciled(env: dict, tmp_path: Path) -> None:
    done = subprocess.run([str(Path(sys.executable).with_name("lakehouse")), "reconcile"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def _project(tmp_path: Path, settle: str) -> Path:
    """The shop's declaration, with files settling for `settle` (producers that do not rename into place)."""
    shop = tmp_path / "shop"
    shutil.copytree(ROOT / "examples" / "shop", shop)
    declaration = shop / "lakehouse.yaml"
    declaration.write_text(declaration.read_text().replace("  settle: 0s", f"  settle: {settle}"))
    return declaration


def test_local_transfers_old_times_halves_slow_gzip_and_empty_files_are_each_decided_once(tmp_path):
    env, settings, dagster_home = temporary_instance(tmp_path, "transfer-test-key-for-pseudonyms-in-tests")
    env["LAKEHOUSE_PROJECT"] = str(_project(tmp_path, "15s"))
    folder = settings.local_path(settings.landing) / "events" / f"date={_today()}"
    folder.mkdir(parents=True)
    daemon = _daemon(env, dagster_home, tmp_path)
    try:
        started = time.monotonic()
        archive = tmp_path / "archive"
        archive.mkdir()
        three_days_ago = time.time() - 3 * 86_400
        for name in ("copied-1.jsonl", "copied-2.jsonl"):  # `cp -p`: the copy keeps the source's old times
            (archive / name).write_text(_text(name, 20))
            os.utime(archive / name, (three_days_ago, three_days_ago))
            shutil.copy2(archive / name, folder / name)
        (folder / "empty.jsonl").write_text("")
        halves = folder / "halves.jsonl"
        halves.write_text(_text("h1", 10))
        packed = gzip.compress(_text("gz", 30).encode())

        def slowly() -> None:  # a `.jsonl.gz` arriving over a slow link, chunk by chunk
            with (folder / "slow.jsonl.gz").open("wb") as out:
                for k in range(4):
                    out.write(packed[k * len(packed) // 4:(k + 1) * len(packed) // 4])
                    out.flush()
                    time.sleep(25)

        writer = threading.Thread(target=slowly)
        writer.start()
        time.sleep(90)
        with halves.open("a") as out:  # the second half, 90 s after the first
            out.write(_text("h2", 10))
        writer.join()

        want = sorted([(f"copied-{k}.jsonl", n, None) for k in (1, 2) for n in range(1, 21)]
                      + [("halves.jsonl", n, None) for n in range(1, 21)]
                      + [("slow.jsonl.gz", n, None) for n in range(1, 31)])
        _wait_for(settings, want, [], tmp_path / "daemon.log", started)
    finally:
        _stop(daemon)
    log = catalog_for(settings).load_table((settings.namespace, "bronze_ingest_log")).scan().to_arrow().to_pylist()
    assert {(r["source_file"].rsplit("/", 1)[1], r["records"]) for r in log if r["source_file"].endswith("empty.jsonl")} \
        == {("empty.jsonl", 0)}
    _reconciled(env, tmp_path)


@pytest.mark.soak  # another case of a live path `make e2e` shows once: `make soak` runs it
def test_s3_objects_uploaded_again_with_more_lines_or_replaced_are_each_decided_once(tmp_path, s3_server):
    env, settings, dagster_home = temporary_instance(tmp_path, "transfer-test-key-for-pseudonyms-in-tests")
    prefix = f"landing-{uuid.uuid4().hex[:8]}"
    env.update({k: v for k, v in os.environ.items() if k.startswith("LAKEHOUSE_S3_")})
    env["LAKEHOUSE_LANDING"] = f"s3://raw/{prefix}"
    settings = Settings.from_env(home=settings.home, project=str(env["LAKEHOUSE_PROJECT"]), namespace="lake",
                                 landing=env["LAKEHOUSE_LANDING"])
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint_url, aws_access_key_id=s3_server.access_key,
                      aws_secret_access_key=s3_server.secret_key, region_name="us-east-1")

    folder = f"{prefix}/events/date={_today()}"

    def put(name: str, body: str) -> None:
        s3.put_object(Bucket="raw", Key=f"{folder}/{name}", Body=body.encode())

    daemon = _daemon(env, dagster_home, tmp_path)
    try:
        started = time.monotonic()
        grown, replaced = _text("a", 12), _text("b", 6)
        put("grown.jsonl", grown)
        put("replaced.jsonl", replaced)
        put("empty.jsonl", "")
        first = sorted([("grown.jsonl", n, None) for n in range(1, 13)] + [("replaced.jsonl", n, None)
                                                                              for n in range(1, 7)])
        _wait_for(settings, first, [], tmp_path / "daemon.log", started)
        put("grown.jsonl", grown + _text("a2", 5))  # uploaded again with lines appended
        put("replaced.jsonl", _text("other", 4))  # replaced by other content
        _wait_for(settings, sorted(first + [("grown.jsonl", n, None) for n in range(13, 18)]),
                  [("replaced.jsonl", n, "changed after it was taken") for n in range(1, 5)],
                  tmp_path / "daemon.log", time.monotonic())
    finally:
        _stop(daemon)
    _reconciled(env, tmp_path)
