"""Real CDC throughput: PostgreSQL -> Debezium capture -> bronze -> silver, changes per second.

A throwaway PostgreSQL (wal_level=logical) gets a table with rows in place; the
capture takes the snapshot; then a workload of CHANGES changes (inserts in
multi-row transactions, updates, deletes) runs, and each stage is timed on it:
the capture (`lakehouse capture --until-idle`, a process of its own: JVM start
included and reported), bronze (parse, decode, quarantine, exactly-once commit)
and silver (MERGE into current state and SCD2 history). Silver must equal the
source's row count at the end, or the figure is not written. Bronze is timed
again, warm, on the same records bare, spaced and mixed (each third record
spaced with its schema's keys reversed, or with every key sorted), and on those of a second
capture of the same changes with decimal.handling.mode=string.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2

from lakehouse_assets.build import build_definitions
from lakehouse_assets.project import load_project
from lakehouse_assets.settings import Settings
from lakehouse_services.postgres import ThrowawayPostgres

from .common import lakehouse, materialize_partition

DECLARATION = """\
name: bench_cdc{suffix}
start_date: {start}
landing:
  settle: 0s  # the capture renames each file into place whole: nothing to wait for
cdc:
  bench{suffix}:
    connector: postgresql
    database: source
    schema: public
    decimal_handling_mode: {decimal}
    tables:
      items:
        primary_key: [id]
        columns: {{id: long, qty: int, price: "decimal(12,2)", note: string, updated: timestamp}}
"""


UNTIL_IDLE = 5  # seconds without a record after which a capture run stops: how the benchmark ends it, not work


def _workload(dsn: str, changes: int, initial: int) -> int:
    """About `changes` change events: 50% inserts (500 a transaction), 30% updates, 20% deletes."""
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    inserts, updates, deletes = changes // 2, changes * 3 // 10, changes // 5
    made = 0
    for start in range(initial + 1, initial + inserts + 1, 500):
        end = min(start + 499, initial + inserts)
        cur.execute("INSERT INTO items SELECT g, g %% 7, (g %% 1000) / 10.0, 'n' || g, now() "
                    "FROM generate_series(%s, %s) g", (start, end))
        made += end - start + 1
        conn.commit()
    for start in range(1, updates + 1, 500):
        cur.execute("UPDATE items SET qty = qty + 1, updated = now() WHERE id BETWEEN %s AND %s",
                    (start, min(start + 499, updates)))
        made += cur.rowcount
        conn.commit()
    first = initial + inserts - deletes + 1
    for start in range(first, initial + inserts + 1, 500):
        cur.execute("DELETE FROM items WHERE id BETWEEN %s AND %s", (start, min(start + 499, initial + inserts)))
        made += cur.rowcount
        conn.commit()
    conn.close()
    return made


def _capture(root: Path, dsn: str, source: str = "bench") -> dict:
    env = {**os.environ, "LAKEHOUSE_PROJECT": str(root / "lakehouse.yaml"), "LAKEHOUSE_HOME": str(root / "home"),
           "LAKEHOUSE_LANDING": str(root / "landing")}
    started = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).with_name("lakehouse")), "capture", "--source", source,
                           "--dsn", dsn, "--until-idle", str(UNTIL_IDLE), "--json", "--roll-seconds", "60"],
                          env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"capture failed: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    report["wall_s"] = time.perf_counter() - started
    return report


def _stages(result) -> dict:
    """The bronze asset's own time by stage (`seconds_by_stage` in its metadata)."""
    entries = [m.metadata["seconds_by_stage"].value for m in result.asset_materializations_for_node("bronze_cdc_items")
               if "seconds_by_stage" in m.metadata]
    return dict(entries[0]) if entries else {}


@dataclass
class _Source:
    """The timed project's two capture reports (the snapshot, then the workload's changes), the workload, and the
    source's rows at the end."""

    snapshot: dict
    streamed: dict
    made: int
    workload_s: float
    rows: int
    server: int  # PostgreSQL's version number, e.g. 150012 for 15.12


def run(spark, settings: Settings, changes: int = 100_000, initial: int = 20_000) -> dict:
    # Two projects capture the same database, each with its own slot: one with the connector's default encodings
    # (decimals as scaled bytes), timed; one with decimal.handling.mode=string, captured after it.
    root, root_s = settings.home / "bench_cdc", settings.home / "bench_cdc_string"
    today = dt.datetime.now(dt.timezone.utc).date()
    for folder, suffix, decimal in ((root, "", "precise"), (root_s, "_s", "string")):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "lakehouse.yaml").write_text(DECLARATION.format(start=today - dt.timedelta(days=1), suffix=suffix,
                                                                  decimal=decimal))
    source = _capture_workload(root, root_s, changes, initial)

    defs = build_definitions(load_project(root / "lakehouse.yaml"), settings)
    by_name = {k.to_user_string(): a for a in defs.assets for k in a.keys}
    resource = lakehouse(settings, "bench_cdc", root / "landing")
    partition = today.isoformat()
    timings: dict[str, float] = {}
    stages: dict[str, dict] = {}
    timings["bronze"], done = _timed(by_name["bronze_cdc_items"], resource, partition, "bronze")
    stages["wrapped"] = _stages(done)
    timings["silver"], _ = _timed(by_name["silver_items"], resource, partition, "silver")
    silver_rows = spark.table(resource.table_id("silver_items")).count()
    if silver_rows != source.rows:
        raise RuntimeError(f"silver holds {silver_rows} rows, the source {source.rows}")
    bronze_rows = _bronze_rows(spark, resource)

    for form, write in _FORMS.items():
        form_resource = _form_landing(spark, settings, root, form, write)
        seconds, done = _timed(by_name["bronze_cdc_items"], form_resource, partition, f"bronze of {form} records")
        timings[f"bronze_{form}"] = seconds
        stages[f"{form}, warm" if form == "wrapped" else form] = _stages(done)
        if (form_rows := _bronze_rows(spark, form_resource)) != bronze_rows:
            raise RuntimeError(f"bronze kept {bronze_rows} wrapped records but {form_rows} {form} ones")

    # The records of the capture with decimal.handling.mode=string, wrapped as captured, the JVM warm.
    strings = {k.to_user_string(): a for a in build_definitions(load_project(root_s / "lakehouse.yaml"), settings).assets
               for k in a.keys}["bronze_cdc_items"]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {settings.catalog_name}.bench_cdc_string")
    string_resource = lakehouse(settings, "bench_cdc_string", root_s / "landing")
    timings["bronze_string"], done = _timed(strings, string_resource, partition, "bronze of the string-mode records")
    stages["string"] = _stages(done)
    if (string_rows := _bronze_rows(spark, string_resource)) != bronze_rows:
        raise RuntimeError(f"bronze kept {bronze_rows} records of the default encodings but {string_rows} strings")
    return _results(source, timings, stages, _plain_spark(spark, root, root_s), root, root_s, initial)


def _capture_workload(root: Path, root_s: Path, changes: int, initial: int) -> _Source:
    """A throwaway PostgreSQL with `initial` rows, captured by both projects; then the workload, captured again."""
    with ThrowawayPostgres(root / "pg") as pg:
        conn = psycopg2.connect(pg.dsn)
        cur = conn.cursor()
        cur.execute("CREATE TABLE items (id bigint PRIMARY KEY, qty int, price numeric(12,2), note text, "
                    "updated timestamp); INSERT INTO items SELECT g, g %% 7, (g %% 1000) / 10.0, 'n' || g, now() "
                    "FROM generate_series(1, %s) g", (initial,))
        conn.commit()
        conn.close()
        snapshot = _capture(root, pg.dsn)
        _capture(root_s, pg.dsn, "bench_s")
        started = time.perf_counter()
        made = _workload(pg.dsn, changes, initial)
        workload_s = time.perf_counter() - started
        streamed = _capture(root, pg.dsn)
        _capture(root_s, pg.dsn, "bench_s")
        conn = psycopg2.connect(pg.dsn)
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM items")
        rows = cur.fetchone()[0]
        server = conn.server_version
        conn.close()
    return _Source(snapshot, streamed, made, workload_s, rows, server)


def _timed(asset, resource, partition: str, what: str) -> tuple[float, Any]:
    """Seconds to materialise one asset's partition, and the run's result; a failed run raises."""
    started = time.perf_counter()
    done = materialize_partition([asset], resource, partition)
    if not done.success:
        raise RuntimeError(f"{what} failed")
    return time.perf_counter() - started, done


def _bronze_rows(spark, resource) -> int:
    return spark.table(resource.table_id("bronze_cdc_items")).count()


def _form_landing(spark, settings: Settings, root: Path, form: str, write: Callable[[Any, int], str] | None):
    """The resource of a bronze of its own for one form of the records: its landing zone rewritten line by line
    with `write` (None: the records as captured, read where they landed)."""
    if write is not None:
        for path in (root / "landing").rglob("*.jsonl"):
            target = root / f"landing_{form}" / path.relative_to(root / "landing")
            target.parent.mkdir(parents=True, exist_ok=True)
            with path.open() as lines, target.open("w") as out:
                for n, line in enumerate(lines):
                    out.write(write(json.loads(line), n) + "\n")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {settings.catalog_name}.bench_cdc_{form}")
    return lakehouse(settings, f"bench_cdc_{form}", root / (f"landing_{form}" if write else "landing"))


def _plain_spark(spark, root: Path, root_s: Path) -> dict[str, float]:
    """The peer: seconds of plain Spark's read.json -> Parquet of the same files (nothing decoded, checked or
    committed)."""
    plain = {}
    for form, folder in (("wrapped", root / "landing"), ("spaced", root / "landing_spaced"),
                         ("mixed", root / "landing_mixed"), ("string", root_s / "landing")):
        started = time.perf_counter()
        spark.read.json(str(folder)).write.mode("overwrite").parquet(str(root / f"plain_{form}"))
        plain[form] = time.perf_counter() - started
    return plain


def _megabytes(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*.jsonl")) / 2**20


def _results(source: _Source, timings: dict[str, float], stages: dict[str, dict], plain: dict[str, float],
             root: Path, root_s: Path, initial: int) -> dict:
    snapshot, streamed, made = source.snapshot, source.streamed, source.made
    records = snapshot["records"] + streamed["records"]
    return {
        "params": {"initial_rows": initial, "changes": made, "records_landed": records},
        "workload_s": source.workload_s, "capture_snapshot_s": snapshot["wall_s"], "capture_stream_s": streamed["wall_s"],
        "capture_flowing_s": streamed["flowing_seconds"],
        "bronze_s": timings["bronze"], "silver_s": timings["silver"], "source_rows": source.rows,
        "postgresql": f"{source.server // 10000}.{source.server % 10000}",
        "bronze_bare_s": timings["bronze_bare"], "bronze_spaced_s": timings["bronze_spaced"],
        "bronze_mixed_s": timings["bronze_mixed"],
        "bronze_warm_s": timings["bronze_wrapped"], "bronze_string_s": timings["bronze_string"],
        "plain_spark_s": plain, "bronze_stages_s": stages, "landed_mb": _megabytes(root / "landing"),
        "bare_mb": _megabytes(root / "landing_bare"),
        "spaced_mb": _megabytes(root / "landing_spaced"),
        "mixed_mb": _megabytes(root / "landing_mixed"),
        "string_mb": _megabytes(root_s / "landing"),
        "rates": {
            "capture_changes_per_s": streamed["records"] / streamed["flowing_seconds"],
            "capture_wall_records_per_s": streamed["records"] / streamed["wall_s"],
            "bronze_records_per_s": records / timings["bronze"],
            "bronze_warm_records_per_s": records / timings["bronze_wrapped"],
            "bronze_bare_records_per_s": records / timings["bronze_bare"],
            "bronze_spaced_records_per_s": records / timings["bronze_spaced"],
            "bronze_mixed_records_per_s": records / timings["bronze_mixed"],
            "bronze_string_records_per_s": records / timings["bronze_string"],
            "silver_records_per_s": records / timings["silver"],
            "end_to_end_changes_per_s": made / (streamed["wall_s"] - UNTIL_IDLE + timings["bronze"] + timings["silver"]),
        },
    }


def _mixed(record: object, n: int) -> str:
    """A record as one of three writers of a shared folder writes it: as captured, spaced with its schema's keys
    reversed, or compact with every key sorted (`jq -S -c`: the payload first). One schema, three ways."""
    if n % 3 == 0 or not isinstance(record, dict) or not isinstance(record.get("schema"), dict):
        return json.dumps(record, separators=(",", ":"))
    def keys(value: object) -> object:
        if isinstance(value, dict):
            return {k: keys(v) for k, v in reversed(value.items())}
        return [keys(v) for v in value] if isinstance(value, list) else value
    if n % 3 == 2:
        return json.dumps(record, sort_keys=True, separators=(",", ":"))
    return json.dumps({"schema": keys(record["schema"]), "payload": record["payload"]})


# The same records again once the JVM is warm (the first bronze paid for compiling the parse, as a run in a
# process of its own does), each form into a bronze of its own: wrapped, as captured; bare, each line its payload
# alone (as with the converter's schemas off); spaced, as JSON that a relay written in Python passes on
# (`", "`, `": "`); mixed, as files that several writers fed. Each form writes a record (and its line number).
_FORMS: dict[str, Callable[[Any, int], str] | None] = {
    "wrapped": None,
    "bare": lambda r, n: json.dumps(r["payload"] if isinstance(r, dict) else r, separators=(",", ":")),
    "spaced": lambda r, n: json.dumps(r),
    "mixed": _mixed,
}


def markdown(results: dict) -> str:
    p, r = results["params"], results["rates"]
    return "\n".join([
        f"### Real CDC: PostgreSQL -> Debezium -> bronze -> silver ({p['changes']:,} changes)",
        "",
        f"A throwaway PostgreSQL {results.get('postgresql', '(version not recorded)')} with {p['initial_rows']:,} "
        "rows; the capture took the snapshot, then "
        f"{p['changes']:,} changes (inserts in transactions of 500, updates, deletes) ran in "
        f"{results['workload_s']:.1f} s and were captured; {p['records_landed']:,} records landed in all "
        f"(tombstones included). Silver ended equal to the source ({results['source_rows']:,} rows).",
        "",
        "| stage | seconds | rate |",
        "|---|---|---|",
        f"| capture of the snapshot (JVM and connector start included) | {results['capture_snapshot_s']:.1f} | |",
        f"| capture of the changes, the process (JVM start and the {UNTIL_IDLE} s idle wait that ends it included) | "
        f"{results['capture_stream_s']:.1f} | {r['capture_wall_records_per_s']:,.0f} records/s |",
        f"| capture of the changes, records flowing (first batch received to last written) | "
        f"{results['capture_flowing_s']:.1f} | {r['capture_changes_per_s']:,.0f} records/s |",
        f"| bronze (parse, decode, quarantine, commit), wrapped records as captured ({results['landed_mb']:,.0f} MB), "
        "the JVM's first run (its JIT compiles the parse: what a run in a process of its own pays) "
        f"| {results['bronze_s']:.1f} | {r['bronze_records_per_s']:,.0f} records/s |",
        *_warm_rows(results),
        f"| bronze, the same records bare ({results['bare_mb']:,.0f} MB) | {results['bronze_bare_s']:.1f} | "
        f"{r['bronze_bare_records_per_s']:,.0f} records/s |",
        *_spaced_rows(results),
        f"| silver (MERGE current state and SCD2 history) | {results['silver_s']:.1f} | "
        f"{r['silver_records_per_s']:,.0f} records/s |",
        f"| end to end (the capture process less its idle wait, + bronze + silver) | | "
        f"{r['end_to_end_changes_per_s']:,.0f} changes/s |",
        "",
        *_breakdown(results),
        "Targets: bronze at least 20,000 records/s wrapped, spaced and bare, default encodings and strings, the JVM "
        "warm: "
        f"**{'reached' if min(_bronze_rates(r)) >= 20_000 else 'not reached'}**; "
        "the same in a new JVM (wrapped, the first run): "
        f"**{'reached' if r['bronze_records_per_s'] >= 20_000 else 'not reached'}**"
        f"; capture at least 15,000 records/s once the JVM is up: "
        f"**{'reached' if r['capture_changes_per_s'] >= 15_000 else 'not reached'}**; end to end at least 8,000 "
        "changes/s: "
        f"**{'reached' if r['end_to_end_changes_per_s'] >= 8_000 else 'not reached'}**.",
        "",
    ])


def _bronze_rates(rates: dict) -> list[float]:
    """The warm forms' rates (results from before the warm wrapped run: the first run stands for it)."""
    wrapped = rates.get("bronze_warm_records_per_s", rates["bronze_records_per_s"])
    return [wrapped, *(rates[k] for k in ("bronze_bare_records_per_s", "bronze_spaced_records_per_s",
                                          "bronze_mixed_records_per_s", "bronze_string_records_per_s") if k in rates)]


def _warm_rows(results: dict) -> list[str]:
    if "bronze_warm_s" not in results:
        return []
    return [f"| bronze, the same wrapped records again, the JVM warm | {results['bronze_warm_s']:.1f} | "
            f"{results['rates']['bronze_warm_records_per_s']:,.0f} records/s |"]


def _spaced_rows(results: dict) -> list[str]:
    """The spaced form and plain Spark's read.json -> Parquet of the same files (results from before they were
    measured have neither)."""
    if "bronze_spaced_s" not in results:
        return []
    r, plain = results["rates"], results["plain_spark_s"]
    return [
        f"| bronze, the same records wrapped and spaced (`\", \"`, `\": \"`, as Python's json writes them; "
        f"{results['spaced_mb']:,.0f} MB) | {results['bronze_spaced_s']:.1f} | "
        f"{r['bronze_spaced_records_per_s']:,.0f} records/s |",
        f"| plain Spark read.json -> Parquet, wrapped as captured (peer) | {plain['wrapped']:.1f} | "
        f"bronze {results.get('bronze_warm_s', results['bronze_s']) / plain['wrapped']:.2f}x its time warm, "
        f"{results['bronze_s'] / plain['wrapped']:.2f}x in its first run |",
        f"| plain Spark read.json -> Parquet, spaced (peer) | {plain['spaced']:.1f} | "
        f"bronze {results['bronze_spaced_s'] / plain['spaced']:.2f}x its time warm |",
        *_form_rows(results, "mixed", "bronze, the same records mixed line by line: as captured, spaced with the "
                    "schema's keys reversed, compact with every key sorted (the payload first; "
                    f"{results.get('mixed_mb', 0):,.0f} MB)", "mixed"),
        *_form_rows(results, "string", "bronze, the records of a capture with `decimal.handling.mode=string`, "
                    f"wrapped as captured ({results.get('string_mb', 0):,.0f} MB)", "those string-mode records"),
    ]


def _form_rows(results: dict, form: str, label: str, peer: str) -> list[str]:
    """A form's warm bronze and its plain-Spark peer (results from before the form was measured have neither)."""
    if f"bronze_{form}_s" not in results:
        return []
    seconds, plain = results[f"bronze_{form}_s"], results["plain_spark_s"][form]
    return [f"| {label}, the JVM warm | {seconds:.1f} | {results['rates'][f'bronze_{form}_records_per_s']:,.0f} records/s |",
            f"| plain Spark read.json -> Parquet, {peer} (peer) | {plain:.1f} | bronze {seconds / plain:.2f}x its time warm |"]


def _breakdown(results: dict) -> list[str]:
    stages = results.get("bronze_stages_s") or {}
    records = results["params"]["records_landed"]
    if not stages:
        return []
    names = sorted({n for by_form in stages.values() for n in by_form},
                   key=lambda n: -stages.get("wrapped", {}).get(n, 0.0))
    lines = ["Where bronze's time goes (the asset's own `seconds_by_stage`; the rest is Dagster's run around it):", "",
             "| stage | " + " | ".join(f"{form}, s" for form in stages) + " |", "|---" * (len(stages) + 1) + "|"]
    lines += [f"| {n} | " + " | ".join(f"{by_form.get(n, 0.0):.2f}" for by_form in stages.values()) + " |"
              for n in names]
    return [*lines, "",
            f"A wrapped record repeats its schema: {results['landed_mb'] * 1024 / records:.1f} KB a line here against "
            f"{results['bare_mb'] * 1024 / records:.2f} KB bare. The project's line reader reads each record from "
            "its bytes (`read files` is its count of each split's lines and of their heads) and parses it there, "
            "once: a wrapped record's schema is passed over (not read again while a split's records begin with the "
            "same bytes as one of the last few, or, written payload first, end with them) and its payload parsed "
            "into the envelope, images as maps of their values' texts; Spark parses only the lines the reader cannot "
            "take exactly. The reader's count finds every head (how a wrapped record begins, through "
            "`\"payload\":`, as its bytes are) with its lines; the heads of one schema "
            "(whitespace and key order aside) share that schema's encodings, worked out once, and each record takes "
            "its head's; a decimal's bytes become its unscaled digits in one call of the project's `UnscaledDigits`. "
            "The fields the table lacks are known from those schemas before parsing; the image keys of every other "
            "record (bare ones) are gathered while bronze is written.",
            ""]
