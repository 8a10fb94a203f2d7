"""Capture's part files on their real code path, without Debezium: what is fsynced, renamed and deleted, in order.

A record's only copy moves from the staging part file to the landed file: the landed file's bytes, its name
and its folder must be durable before the staging copy is deleted, and a new staging file's name must be
durable before the engine may flush the offsets of the records in it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse_assets.live.capture import LandingWriter
from lakehouse_assets.settings import Settings


@pytest.fixture
def calls(monkeypatch) -> list[tuple[str, ...]]:
    """Every os.fsync (by the path of its descriptor), os.rename or os.replace (both as "rename") and os.unlink,
    in order; each still done by the real call."""
    seen: list[tuple[str, ...]] = []
    real = {name: getattr(os, name) for name in ("fsync", "rename", "replace", "unlink")}

    def fsync(fd):
        seen.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real["fsync"](fd)

    def moved(name):
        def call(src, dst, *args, **kwargs):
            seen.append(("rename", str(src), str(dst)))
            return real[name](src, dst, *args, **kwargs)
        return call

    def unlink(path, *args, **kwargs):
        seen.append(("unlink", str(path)))
        return real["unlink"](path, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", moved("rename"))
    monkeypatch.setattr(os, "replace", moved("replace"))
    monkeypatch.setattr(os, "unlink", unlink)
    return seen


@pytest.fixture
def writer(tmp_path) -> LandingWriter:
    settings = Settings.from_env(home=tmp_path / "home", landing=str(tmp_path / "landing"))
    return LandingWriter(settings, tmp_path / "staging")


def _only(seen: list[tuple[str, ...]], wanted: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    return [call for call in seen if call in wanted]


def test_a_landed_file_and_its_folder_are_fsynced_before_the_staging_copy_is_deleted(writer, calls):
    writer.write("orders", ['{"payload": {"op": "c"}}', "null"])
    writer.sync()
    [staged] = [Path(p.path) for p in writer.open.values()]
    calls.clear()

    writer.close_all()

    [uri] = writer.published
    landed = Path(uri.removeprefix("file:"))
    assert landed.read_text() == '{"payload": {"op": "c"}}\nnull\n'
    assert not staged.exists()
    temporary = landed.with_name(f".{landed.name}.part")
    order = [("fsync", str(temporary)), ("rename", str(temporary), str(landed)), ("fsync", str(landed.parent)),
             ("unlink", str(staged))]
    assert _only(calls, order) == order, calls


def test_a_new_staging_file_and_its_name_are_fsynced_before_the_batch_is_acknowledged(writer, calls):
    """`sync` returning is when the engine may flush offsets: the records' file must survive a crash by then."""
    writer.write("orders", ['{"payload": {"op": "c"}}'])
    writer.sync()

    [staged] = [Path(p.path) for p in writer.open.values()]
    assert ("fsync", str(staged)) in calls, calls
    assert ("fsync", str(staged.parent)) in calls, calls  # the file's entry in its (new) day folder
    assert ("fsync", str(staged.parent.parent)) in calls, calls  # the day folder's entry in the table's


def test_part_files_a_crash_left_are_landed_durably_before_they_are_deleted(tmp_path, calls):
    settings = Settings.from_env(home=tmp_path / "home", landing=str(tmp_path / "landing"))
    left = tmp_path / "staging" / "orders" / "date=2025-01-02" / "capture-1.jsonl.part"
    left.parent.mkdir(parents=True)
    left.write_text('{"payload": {"op": "u"}}\n')

    writer = LandingWriter(settings, tmp_path / "staging")
    calls.clear()
    [uri] = writer.recover()

    landed = tmp_path / "landing" / "cdc" / "orders" / "date=2025-01-02" / "capture-1.jsonl"
    assert uri == f"file:{landed}" and landed.read_text() == '{"payload": {"op": "u"}}\n'
    temporary = landed.with_name(".capture-1.jsonl.part")
    order = [("fsync", str(temporary)), ("rename", str(temporary), str(landed)), ("fsync", str(landed.parent)),
             ("unlink", str(left))]
    assert _only(calls, order) == order, calls


_PUBLISH = """
import sys
from pathlib import Path
from lakehouse_assets.live.capture import LandingWriter
from lakehouse_assets.settings import Settings
home, landing, staging = sys.argv[1:4]
writer = LandingWriter(Settings.from_env(home=Path(home), landing=landing), Path(staging))
writer.write("orders", ['{"payload": {"op": "c"}}', '{"payload": {"op": "d"}}'])
writer.sync()
writer.close_all()
"""


def test_a_capture_killed_after_landing_a_file_lands_it_once_on_restart(tmp_path):
    """SIGKILL between landing a file and deleting its staging copy: the restart publishes the same name again,
    so the zone holds the records once, in one file, and staging is empty."""
    home, landing, staging = tmp_path / "home", tmp_path / "landing", tmp_path / "staging"
    env = {**os.environ, "LAKEHOUSE_FAILPOINTS": "capture:after-publish"}
    killed = subprocess.run([sys.executable, "-c", _PUBLISH, str(home), str(landing), str(staging)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    [left] = staging.glob("orders/date=*/*.jsonl.part")
    [landed] = landing.glob("cdc/orders/date=*/*.jsonl")
    assert landed.read_text() == left.read_text() == '{"payload": {"op": "c"}}\n{"payload": {"op": "d"}}\n'

    recovered = LandingWriter(Settings.from_env(home=home, landing=str(landing)), staging).recover()

    assert recovered == [f"file:{landed}"]
    assert [p.name for p in landing.rglob("*") if p.is_file()] == [landed.name]
    assert landed.read_text() == '{"payload": {"op": "c"}}\n{"payload": {"op": "d"}}\n'
    assert not list(staging.rglob("*.part"))
