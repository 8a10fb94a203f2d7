"""One concurrent writer of the reliability suite, in a process of its own.

    python -m lakehouse_assets_tests.reliability.writer KIND --name N --day YYYY-MM-DD --batches B
        --home H --catalog-uri URI --namespace NS

KIND is how it writes to the shared table `contended`: `spark-append` (a blind append), `spark-overwrite`
(its own day, replaced each batch), `spark-merge` (upserts into its own day), all through the platform's
staged commits (replayed on a moved main within the scope each declares, re-staged on a true conflict), or
`pyiceberg-append` (pyiceberg's own commit, through `append_retrying`). Each batch is printed as one JSON
line: what it wrote, how often it was replayed and how many re-stagings it took, or (`conflict`) why it
gave up on a true conflict with nothing published.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

from pyspark.sql import types as T

from lakehouse_assets.tables.registry import MERGE_ON_READ, TableSpec, col

SPEC = TableSpec(
    name="contended", layer="silver", description="written by several processes at once",
    schema=T.StructType([col("day", T.DateType(), False), col("writer", T.StringType(), False),
                         col("id", T.StringType(), False), col("value", T.LongType(), False)]),
    partitioned_by=("day",), write_mode=MERGE_ON_READ,
)


def _rows(name: str, day: dt.date, batch: int, size: int, same_ids: bool = False) -> list[tuple]:
    """A batch's rows: new ids each batch, or (for upserts) the same ids with the batch as their value."""
    return [(day, name, f"{name}-{'k' if same_ids else batch}-{i}", batch) for i in range(size)]


def spark_writer(kind: str, args: argparse.Namespace) -> None:
    from lakehouse_assets.errors import ConcurrentCommitError
    from lakehouse_assets.runtime.commit import NOTHING, Window, publish, stage, with_commit_retries
    from lakehouse_assets.runtime.resource import LakehouseResource

    lakehouse = LakehouseResource(home=args.home, catalog_uri=args.catalog_uri, namespace=args.namespace,
                                  spark_master="local[1]", driver_memory="1g")
    day = dt.date.fromisoformat(args.day)
    window = Window("day", day, day + dt.timedelta(days=1), args.day)
    table = lakehouse.table(SPEC)
    for batch in range(args.batches):
        ids = _rows(args.name, day, batch, args.rows, same_ids=kind == "spark-merge")

        def attempt(ids=ids, batch=batch):
            table.create()
            df = lakehouse.spark.createDataFrame(ids, SPEC.schema)
            scope = NOTHING if kind == "spark-append" else window  # the upserts' ON holds them to their day
            staged = stage(table, f"{args.name}-{batch}", SPEC.name, args.day, scope=scope)
            if kind == "spark-append":
                staged.append(df)
            elif kind == "spark-overwrite":
                staged.overwrite(df, window)
            else:
                view = f"upserts_{args.name.replace('-', '_')}"
                df.createOrReplaceTempView(view)
                staged.sql(f"MERGE INTO {{target}} t USING {view} s ON t.id = s.id AND t.day = s.day "
                           "WHEN MATCHED THEN UPDATE SET value = s.value WHEN NOT MATCHED THEN INSERT *")
            return publish(staged)

        try:
            result, retries = with_commit_retries(attempt, args.name, log=lambda m: print(m, file=sys.stderr))
        except ConcurrentCommitError as exc:  # a true conflict, every attempt: the batch is not published
            print(json.dumps({"writer": args.name, "kind": kind, "batch": batch, "conflict": str(exc)[:300]}),
                  flush=True)
            continue
        print(json.dumps({"writer": args.name, "kind": kind, "batch": batch, "ids": [r[2] for r in ids],
                          "snapshot_id": result.snapshot_id, "retries": retries,
                          "replays": result.replays}), flush=True)


def pyiceberg_writer(args: argparse.Namespace) -> None:
    import pyarrow as pa
    from pyiceberg.exceptions import NoSuchTableError

    from lakehouse_assets.runtime.catalog import append_retrying, catalog_for
    from lakehouse_assets.settings import Settings

    settings = Settings(home=args.home, catalog_uri=args.catalog_uri, namespace=args.namespace)
    catalog = catalog_for(settings)
    deadline = time.monotonic() + 300
    while True:  # the Spark writers create the table
        try:
            table = catalog.load_table((args.namespace, SPEC.name))
            break
        except NoSuchTableError:
            assert time.monotonic() < deadline, "the table was never created"
            time.sleep(0.5)
    day = dt.date.fromisoformat(args.day)
    schema = pa.schema([pa.field("day", pa.date32(), False), pa.field("writer", pa.string(), False),
                        pa.field("id", pa.string(), False), pa.field("value", pa.int64(), False)])
    for batch in range(args.batches):
        rows = _rows(args.name, day, batch, args.rows)
        data = pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema)
        table, retries = append_retrying(catalog, (args.namespace, SPEC.name), data,
                                         {"dagster.run-id": f"{args.name}-{batch}"},
                                         log=lambda m: print(m, file=sys.stderr))
        print(json.dumps({"writer": args.name, "kind": "pyiceberg-append", "batch": batch,
                          "ids": [r[2] for r in rows], "snapshot_id": table.current_snapshot().snapshot_id,
                          "retries": retries, "replays": 0}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reliability.writer")
    parser.add_argument("kind", choices=("spark-append", "spark-overwrite", "spark-merge", "pyiceberg-append"))
    for name in ("--name", "--day", "--home", "--catalog-uri", "--namespace"):
        parser.add_argument(name, required=True)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--rows", type=int, default=20)
    args = parser.parse_args(argv)
    if args.kind.startswith("spark-"):
        spark_writer(args.kind, args)
    else:
        pyiceberg_writer(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
