"""A reader at a pinned snapshot keeps getting the same answer while writers commit, compaction rewrites the
files under it, snapshot expiry runs and orphan removal sweeps the table.

The pin is the platform's own (a tag, as ML materialisations make). A pyiceberg reader in another thread reads
the pinned snapshot over and over the whole time; Spark reads it between the steps. Every answer is the first.
"""

import datetime as dt
import threading
import time

from pyspark.sql import types as T

from lakehouse_assets.ml.pinning import pin_snapshots
from lakehouse_assets.operations.procedures import TableMaintenance
from lakehouse_assets.project.model import TablePolicy
from lakehouse_assets.runtime.commit import NOTHING, Window, publish, stage
from lakehouse_assets.tables.registry import MERGE_ON_READ, TableSpec, col

from .figures import SCALE, age_table_files, record

SPEC = TableSpec(
    name="pinned_read", layer="silver", description="read at a pin while it changes",
    schema=T.StructType([col("day", T.DateType(), False), col("id", T.StringType(), False),
                         col("value", T.LongType(), False)]),
    partitioned_by=("day",), write_mode=MERGE_ON_READ,
)
DAYS = [dt.date(2025, 5, 1) + dt.timedelta(days=n) for n in range(3)]


def _answer(rows) -> list[tuple]:
    return sorted((r["day"], r["id"], r["value"]) for r in rows)


def test_a_pinned_snapshot_reads_the_same_through_writes_compaction_expiry_and_orphan_removal(lakehouse):
    table = lakehouse.table(SPEC).create()
    spark = table.spark
    for n, day in enumerate(DAYS):
        for part in range(2):  # small files, for compaction to rewrite
            rows = spark.createDataFrame([(day, f"p{n}-{part}-{i}", i) for i in range(5)], SPEC.schema).coalesce(1)
            publish(stage(table, "seed", SPEC.name, "seed", scope=NOTHING).append(rows))
    pinned_id = table.snapshot_id()
    [pin] = pin_snapshots(lakehouse, "run-reader-0001", "reader", {table.id: pinned_id}).values()
    first = _answer(table.iceberg().scan(snapshot_id=pinned_id).to_arrow().to_pylist())
    assert len(first) == 30

    answers, errors, stop = [], [], threading.Event()

    def reader():  # pyiceberg, no Spark: an analyst's notebook reading the pin the whole time
        try:
            while not stop.is_set():
                iceberg = lakehouse.iceberg_table(SPEC.name)
                answers.append(_answer(iceberg.scan(snapshot_id=iceberg.snapshot_by_name(pin["tag"]).snapshot_id)
                                       .to_arrow().to_pylist()))
                time.sleep(0.05)
        except BaseException as error:  # noqa: BLE001 - handed to the test, which raises it after the join
            errors.append(error)

    def read_once_more(timeout: float = 60) -> None:
        """Wait until the reader completes a read begun after this call: it is alive and still reading."""
        seen, deadline = len(answers), time.monotonic() + timeout
        while len(answers) <= seen + 1 and not errors and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    maintenance = TableMaintenance(lakehouse, SPEC.name, TablePolicy(retain_last=1), log=lambda _: None)
    spark_reads, steps, reads_per_round = [], [], []
    try:
        for round_ in range(SCALE):
            day = DAYS[round_ % len(DAYS)]
            window = Window("day", day, day + dt.timedelta(days=1), day.isoformat())
            fresh = spark.createDataFrame([(day, f"r{round_}-{i}", 100 + i) for i in range(5)], SPEC.schema)
            publish(stage(table, "append", SPEC.name, "r", scope=NOTHING).append(fresh))
            spark.createDataFrame([(day, f"p{round_ % 3}-0-0", -1)], SPEC.schema).createOrReplaceTempView("changes")
            publish(stage(table, "merge", SPEC.name, "r", scope=window).sql(
                "MERGE INTO {target} t USING changes s ON t.id = s.id AND t.day = s.day "
                "WHEN MATCHED THEN UPDATE SET value = s.value"))
            other = DAYS[(round_ + 1) % len(DAYS)]
            spark.sql(f"DELETE FROM {table.id} WHERE day = DATE '{other.isoformat()}' AND value = 3")
            steps.append(maintenance.compact().figures["rewritten_data_files"])
            maintenance.expire(dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30))
            age_table_files(table.iceberg())  # every file old enough for orphan removal to judge it
            maintenance.remove_orphans()
            spark_reads.append(_answer(r.asDict() for r in table.read(snapshot_id=pinned_id).collect()))
            read_once_more()  # the reader read while this round's changes were in place
            reads_per_round.append(len(answers))
    finally:
        stop.set()
        thread.join(timeout=60)

    # The reader's own failure, not a silent thread death: raised here, with its traceback.
    assert not thread.is_alive(), "the pyiceberg reader did not stop"
    if errors:
        raise AssertionError(f"the pyiceberg reader failed after {len(answers)} reads") from errors[0]
    # It read the whole time: more reads after every round (after every write, compaction, expiry and sweep).
    assert len(reads_per_round) == SCALE and all(n > 0 for n in reads_per_round)
    assert all(b > a for a, b in zip([0, *reads_per_round], reads_per_round)), reads_per_round

    assert sum(steps) > 0  # compaction did rewrite the pinned snapshot's files on main
    assert _answer(r.asDict() for r in table.read().collect()) != first  # main moved on
    assert table.iceberg().snapshot_by_id(pinned_id) is not None  # expiry kept what the tag holds
    assert answers and all(a == first for a in answers), "a pinned read changed"
    assert spark_reads and all(a == first for a in spark_reads)
    record("readers at a pinned snapshot", rounds=SCALE, pyiceberg_reads=len(answers), spark_reads=len(spark_reads),
           files_rewritten_under_the_pin=sum(steps))
