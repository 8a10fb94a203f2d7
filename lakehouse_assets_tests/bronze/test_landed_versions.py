"""A landed file is decided by its identity and content, whatever its timestamps: appended lines are taken once,
a rewrite is quarantined whole, an empty file is logged, a touch takes nothing, and a file still being written
(a line without its newline, a young file under a declared settle time, a folder without its ready marker) waits.
Records in = kept + quarantined, file version by file version, checked by `lakehouse reconcile`."""

import datetime as dt
import json
import os
import shutil
import time

from lakehouse_assets.bronze.assets import event_landing_source
from lakehouse_assets.bronze.ingest import ingest as take
from lakehouse_assets.bronze.reconcile import reconcile
from lakehouse_assets.landing.reader import day_folders, list_landing_files
from lakehouse_assets.project import LandingPolicy

from ..shop import SHOP
from .test_events_ingest import DAY, _event, ingest

EVENTS = SHOP.events["events"]


def folder(lakehouse):
    path = lakehouse.settings.local_path(lakehouse.settings.landing) / "events" / f"date={DAY}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def lines(first, n, bad=()):
    return "".join(("{broken" if k in bad else json.dumps(_event(k))) + "\n" for k in range(first, first + n))


def rows(lakehouse, table):
    return sorted((r.source_file.rsplit("/", 1)[1], r.source_line) for r in
                  lakehouse.spark.table(lakehouse.table_id(table)).select("source_file", "source_line").collect())


def log(lakehouse):
    return sorted((r.source_file.rsplit("/", 1)[1], r.version, r.change, r.records, r.kept, r.quarantined, r.lines)
                  for r in lakehouse.spark.table(lakehouse.table_id("bronze_ingest_log")).collect())


def balanced(lakehouse):
    found = reconcile(lakehouse.settings, SHOP, "events")
    assert found and all(r["balanced"] for r in found), found
    return sum(r["records_in"] for r in found)


def counts(meta):
    return meta["records_in"].value, meta["records_kept"].value, meta["records_quarantined"].value


def test_lines_appended_to_a_taken_file_are_taken_once_with_their_own_line_numbers(lakehouse):
    path = folder(lakehouse) / "a.jsonl"
    path.write_text(lines(0, 5))
    assert counts(ingest(lakehouse)) == (5, 5, 0)
    with path.open("a") as f:  # the producer goes on writing the same file
        f.write(lines(5, 3, bad={6}))
    assert counts(ingest(lakehouse)) == (3, 2, 1)
    assert counts(ingest(lakehouse)) == (0, 0, 0)  # nothing new: nothing taken twice
    assert rows(lakehouse, "bronze_events") == [("a.jsonl", n) for n in (1, 2, 3, 4, 5, 6, 8)]
    assert rows(lakehouse, "bronze_events_quarantine") == [("a.jsonl", 7)]
    assert log(lakehouse) == [("a.jsonl", 1, "new", 5, 5, 0, 5), ("a.jsonl", 2, "appended", 3, 2, 1, 8)]
    assert balanced(lakehouse) == 8


def test_a_file_rewritten_after_it_was_taken_is_quarantined_whole_and_nothing_else_is_lost(lakehouse):
    path = folder(lakehouse) / "a.jsonl"
    path.write_text(lines(0, 5))
    (folder(lakehouse) / "b.jsonl").write_text(lines(10, 2))
    assert counts(ingest(lakehouse)) == (7, 7, 0)
    path.write_text(lines(100, 4))  # replaced in place: not the taken bytes followed by more
    assert counts(ingest(lakehouse)) == (4, 0, 4)
    quarantined = lakehouse.spark.table(lakehouse.table_id("bronze_events_quarantine")).collect()
    assert sorted((r.source_line, r.reason) for r in quarantined) == [
        (n, "changed after it was taken") for n in (1, 2, 3, 4)]
    assert [json.loads(r.payload)["event_id"] for r in sorted(quarantined, key=lambda r: r.source_line)] == [
        f"e-{n:04d}" for n in range(100, 104)]
    assert len(rows(lakehouse, "bronze_events")) == 7  # what was taken before stays as it was
    # Cut short (truncated) after that: another change, quarantined whole again; the log keeps every version.
    path.write_text(lines(100, 2))
    assert counts(ingest(lakehouse)) == (2, 0, 2)
    assert [v[:3] for v in log(lakehouse) if v[0] == "a.jsonl"] == [
        ("a.jsonl", 1, "new"), ("a.jsonl", 2, "changed"), ("a.jsonl", 3, "changed")]
    assert balanced(lakehouse) == 7 + 4 + 2  # every version's lines, each decided once


def test_an_empty_file_is_logged_once_and_a_touched_file_takes_nothing(lakehouse):
    empty = folder(lakehouse) / "empty.jsonl"
    empty.write_text("")
    (folder(lakehouse) / "a.jsonl").write_text(lines(0, 3))
    first = ingest(lakehouse)
    assert counts(first) == (3, 3, 0) and first["landing_files_taken"].value == 2
    again = ingest(lakehouse)
    assert again["landing_files_taken"].value == 0 and again["snapshot_id"].value == first["snapshot_id"].value
    earlier = time.time() - 100
    os.utime(folder(lakehouse) / "a.jsonl", (earlier, earlier))  # a new time (`touch -d`), the same bytes
    assert counts(ingest(lakehouse)) == (0, 0, 0)
    assert log(lakehouse) == [("a.jsonl", 1, "new", 3, 3, 0, 3), ("a.jsonl", 2, "touched", 0, 0, 0, 3),
                              ("empty.jsonl", 1, "new", 0, 0, 0, 0)]
    assert ingest(lakehouse)["landing_files_taken"].value == 0
    assert balanced(lakehouse) == 3


def test_a_file_whose_last_line_is_still_being_written_waits_and_is_then_taken_whole(lakehouse):
    path = folder(lakehouse) / "a.jsonl"
    half = lines(0, 2) + json.dumps(_event(2))[:20]  # the writer is in the middle of line 3
    path.write_text(half)
    meta = ingest(lakehouse)
    assert counts(meta) == (0, 0, 0) and meta["landing_files_waiting"].value == 1
    path.write_text(lines(0, 3))
    assert counts(ingest(lakehouse)) == (3, 3, 0)
    # A file without a final newline that has not changed for longer than the grace is taken as it is.
    tail = folder(lakehouse) / "b.jsonl"
    tail.write_text(lines(10, 2) + json.dumps(_event(12)))
    stale = time.time() - 600
    os.utime(tail, (stale, stale))
    assert counts(ingest(lakehouse)) == (3, 3, 0)
    assert balanced(lakehouse) == 6


def test_files_copied_with_old_times_are_taken_like_any_other(lakehouse, tmp_path):
    """`cp -p`, `rsync -a`, `tar x`: the copy keeps the source's modification time, days old."""
    source = tmp_path / "archive.jsonl"
    source.write_text(lines(0, 4))
    old = time.time() - 3 * 86_400
    os.utime(source, (old, old))
    shutil.copy2(source, folder(lakehouse) / "archive.jsonl")
    assert os.stat(folder(lakehouse) / "archive.jsonl").st_mtime < time.time() - 86_400
    assert counts(ingest(lakehouse)) == (4, 4, 0)
    assert balanced(lakehouse) == 4


def _take(lakehouse, policy, wait=False, log=lambda _: None):
    source = event_landing_source(EVENTS, policy)
    day = dt.date.fromisoformat(DAY)
    files, _ = list_landing_files(lakehouse.spark, day_folders(lakehouse.settings.landing, "events", day,
                                                               day + dt.timedelta(days=1)),
                                  f"{lakehouse.settings.landing}/events")
    return take(lakehouse, source, files, f"test-{time.time_ns()}", DAY, log=log, wait=wait)


def test_a_run_waits_for_a_file_landed_just_before_it_and_one_whose_time_is_a_day_ahead_settles_by_observation(
        lakehouse):
    policy = LandingPolicy(settle=dt.timedelta(seconds=2))
    ahead = folder(lakehouse) / "ahead.jsonl"
    ahead.write_text(lines(0, 3))
    tomorrow = time.time() + 86_400
    os.utime(ahead, (tomorrow, tomorrow))  # its writer's clock runs a day ahead
    # Without waiting, a run leaves it (not settled yet) and counts it ahead of the clock.
    left = _take(lakehouse, policy)
    assert (left.records_in, left.waiting, left.ahead_of_clock) == (0, [f"file:{ahead}"], 1)
    # A run that waits sees it unchanged for the settle time and takes it, a day before its time; a file
    # landed just before the run (the README's newcomer) is waited for too.
    (folder(lakehouse) / "now.jsonl").write_text(lines(10, 2))
    said: list[str] = []
    started = time.monotonic()
    report = _take(lakehouse, policy, wait=True, log=said.append)
    assert (report.records_in, report.waiting, report.ahead_of_clock) == (5, [], 1)
    assert 2 <= time.monotonic() - started < 60
    assert any("2 files not settled yet: waiting for them" in line for line in said), said
    assert any("2 of them settled" in line for line in said), said
    assert "landing_files_ahead_of_clock" in report.metadata(report.kept)
    assert rows(lakehouse, "bronze_events") == [("ahead.jsonl", n) for n in (1, 2, 3)] + [("now.jsonl", 1), ("now.jsonl", 2)]
    assert balanced(lakehouse) == 5


def test_a_declared_settle_time_and_ready_marker_hold_a_file_until_it_is_complete(lakehouse):
    path = folder(lakehouse) / "a.jsonl"
    path.write_text(lines(0, 3))
    settle = LandingPolicy(settle=dt.timedelta(seconds=60))
    report = _take(lakehouse, settle)
    assert report.records_in == 0 and report.waiting == [f"file:{path}"]
    minute_ago = time.time() - 61
    os.utime(path, (minute_ago, minute_ago))
    assert _take(lakehouse, settle).records_in == 3

    marked = LandingPolicy(settle=dt.timedelta(0), ready_marker="_SUCCESS")
    (folder(lakehouse) / "b.jsonl").write_text(lines(10, 2))
    assert _take(lakehouse, marked).records_in == 0
    (folder(lakehouse) / "_SUCCESS").write_text("")
    assert _take(lakehouse, marked).records_in == 2
    assert balanced(lakehouse) == 5


def test_a_rollback_to_before_an_append_undoes_that_version_only_and_the_lines_are_taken_again(lakehouse):
    from lakehouse_assets.operations.landing_rollback import rollback_landing

    path = folder(lakehouse) / "a.jsonl"
    path.write_text(lines(0, 4))
    assert counts(ingest(lakehouse)) == (4, 4, 0)
    time.sleep(0.05)
    before_append = dt.datetime.now(dt.timezone.utc).isoformat()
    time.sleep(0.05)
    with path.open("a") as f:
        f.write(lines(4, 3, bad={5}))
    assert counts(ingest(lakehouse)) == (3, 2, 1)

    report = rollback_landing(lakehouse.catalog, lakehouse.settings.namespace, SHOP.landing_source("events"),
                              before_append)
    assert report.changed and [f.rsplit("/", 1)[1] for f in report.files] == ["a.jsonl"]
    assert log(lakehouse) == [("a.jsonl", 1, "new", 4, 4, 0, 4)]  # the first version stays taken
    assert rows(lakehouse, "bronze_events") == [("a.jsonl", n) for n in (1, 2, 3, 4)]
    assert rows(lakehouse, "bronze_events_quarantine") == []
    assert counts(ingest(lakehouse)) == (3, 2, 1)  # the appended lines, taken again, once
    assert rows(lakehouse, "bronze_events") == [("a.jsonl", n) for n in (1, 2, 3, 4, 5, 7)]
    assert balanced(lakehouse) == 7


def test_a_file_another_run_takes_after_this_run_decided_is_decided_again_and_held_once(lakehouse, monkeypatch):
    """Two runs list the same new file; the other one publishes it after this run read the ingest log and before
    this run writes bronze (a backfill beside the stream). This run decides again and takes nothing twice."""
    import lakehouse_assets.bronze.ingest as ingest_module

    (folder(lakehouse) / "a.jsonl").write_text(lines(0, 6, bad={2}))
    decided, now = ingest_module.look, LandingPolicy(settle=dt.timedelta(0))
    other: list = []

    def look_then_the_other_run_publishes(*args, **kwargs):
        found = decided(*args, **kwargs)
        if not other:
            monkeypatch.setattr(ingest_module, "look", decided)
            other.append(_take(lakehouse, now))
            monkeypatch.setattr(ingest_module, "look", look_then_the_other_run_publishes)
        return found

    monkeypatch.setattr(ingest_module, "look", look_then_the_other_run_publishes)
    report = _take(lakehouse, now)
    assert (other[0].records_in, other[0].retries) == (6, 0)
    assert report.retries == 1 and report.records_in == 0  # the second decision: nothing left to take
    assert rows(lakehouse, "bronze_events") == [("a.jsonl", n) for n in (1, 2, 4, 5, 6)]
    assert rows(lakehouse, "bronze_events_quarantine") == [("a.jsonl", 3)]
    assert log(lakehouse) == [("a.jsonl", 1, "new", 6, 5, 1, 6)]
    assert balanced(lakehouse) == 6


def test_a_local_file_is_hashed_here_as_spark_hashes_it_where_it_is(lakehouse, tmp_path):
    """The two ways a landing file's identity is read (on this machine; by Spark, as on S3) agree on every case
    the decisions use: prefixes shorter than, ending at, inside and past the file, gzip bytes, no last newline,
    and a chunk boundary inside the prefix."""
    import gzip

    from lakehouse_assets.landing.files import file_statuses
    from lakehouse_assets.landing.reader import _hash_in_spark, _local_path, read_contents

    big = "".join(f'{{"n": {k}, "pad": "{"x" * 90}"}}\n' for k in range(100_000))  # 10 MB: past a read chunk
    files = {"a.jsonl": "one\ntwo\nthree\n", "b.jsonl": "one\ntwo", "c.jsonl": big, "d.jsonl.gz": None}
    for name, text in files.items():
        (tmp_path / name).write_bytes(gzip.compress(b"x\n" * 1000) if text is None else text.encode())
    paths = [f"file:{tmp_path / name}" for name in files]
    listed = file_statuses(lakehouse.spark, paths)
    for prefixes in [{}, {p: 4 for p in paths}, {p: 3 for p in paths}, {p: 10_000 for p in paths},
                     {p: 8 << 20 for p in paths}, {p: 9_437_185 for p in paths}, {p: 0 for p in paths}]:
        here = read_contents(lakehouse.spark, paths, prefixes, listed)
        there = _hash_in_spark(lakehouse.spark, paths, prefixes)
        assert here == there and len(here) == len(paths), prefixes
    assert all(_local_path(p) for p in [*paths, str(tmp_path / "a.jsonl"), f"file://{tmp_path / 'a.jsonl'}"])
    assert {f: s[:2] for f, s in listed.items()} == {  # Hadoop's size and time, as Spark's read gives them
        f: (c.stat.size, c.stat.modified_ms) for f, c in _hash_in_spark(lakehouse.spark, paths, {}).items()}
    gone = tmp_path / "gone.jsonl"
    gone.write_text("x\n")
    listed = file_statuses(lakehouse.spark, [f"file:{gone}"])
    gone.unlink()
    assert read_contents(lakehouse.spark, [f"file:{gone}"], {}, listed) == {}  # gone since it was listed
