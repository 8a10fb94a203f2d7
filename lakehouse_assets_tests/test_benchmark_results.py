"""RESULTS.md says where each figure comes from: the full run, or a section's own later run."""

from benchmarks.beside import replace, versions
from benchmarks.run import REMEASURED, provenance

FULL = """# Benchmark results

Run 2026-11-24 15:27 UTC, scale 1, on 2 cores.
Produced by `make bench`; the figures below are measured in that one run.
{header}
<!-- bench:merge -->
### merge

| a | b |

<!-- bench:ingest -->
### ingest

figures

(Re-measured alone: 2026-11-25 16:58 UTC, scale 1, on 2 cores, 213 s.)

<!-- bench:sensor -->
### sensor
"""


def test_the_header_names_each_section_re_measured_alone_and_when():
    text = provenance(FULL.format(header=f"{REMEASURED} none."))
    assert f"{REMEASURED} ingest (2026-11-25 16:58 UTC)." in text.splitlines()
    assert provenance(text) == text


def test_a_header_without_the_line_gets_it_after_the_run_it_qualifies():
    lines = provenance(FULL.format(header="")).splitlines()
    assert lines[lines.index("Produced by `make bench`; the figures below are measured in that one run.") + 1] == \
        f"{REMEASURED} ingest (2026-11-25 16:58 UTC)."


# A section re-measured alone on other versions than it was measured on shows its tables before and after.
OLD = """# Benchmark results

Run 2026-11-24 15:27 UTC, scale 1, on 2 cores, 24 GiB, CPython 3.11.7; pyspark 3.5.9, pyiceberg 0.12.0, dagster 1.13.27.
Produced by `make bench`; the figures below are measured in that one run.
{REMEASURED} none.

<!-- bench:merge -->
### merge

| mode | MERGE s |
|---|---|
| copy-on-write | 16.92 |

<!-- bench:ingest -->
### Ingest

| path | seconds | rows/s | vs plain Spark | note |
|---|---|---|---|---|
| ours | 28.87 | 176,682 | 1.26x | one run |
| plain Spark | 22.83 | 223,357 | 1.00x | one run |

| lines | ours, s |
|---|---|
| 5,100,121 | 38.9 |

Ours takes 1.26x plain Spark.

(Re-measured alone: 2026-11-28 15:01 UTC, scale 1, on 2 cores, 24 GiB, CPython 3.11.7; pyspark 3.5.9, pyiceberg 0.12.0, \
dagster 1.13.27, 913 s.)

<!-- bench:sensor -->
### sensor
""".replace("{REMEASURED}", REMEASURED)

INGEST = """<!-- bench:ingest -->
### Ingest

| path | seconds | rows/s | vs plain Spark | note |
|---|---|---|---|---|
| plain Spark | 22.83 | 228,102 | 1.00x | one run |
| ours | {ours} | 203,187 | 1.10x | a single run |

| lines | ours, s |
|---|---|
| 5,200,000 | 36.1 |

Ours takes 1.10x plain Spark.
"""
SPARK4 = "2026-12-01 10:00 UTC, scale 1, on 2 cores, 24 GiB, CPython 3.11.7; pyspark 4.1.4, pyiceberg 0.12.0, dagster 1.13.27"


def _section(text: str, name: str) -> str:
    start = text.index(f"<!-- bench:{name} -->")
    end = text.find("<!-- bench:", start + 1)
    return text[start:end if end >= 0 else None]


def test_a_section_re_measured_on_another_pyspark_shows_its_figures_before_and_after():
    text = provenance(replace(OLD, INGEST.format(ours="25.10"), f"{SPARK4}, 900 s"))
    ingest = _section(text, "ingest")
    lines = ingest.splitlines()
    assert "#### Before and after: pyspark 3.5.9 → 4.1.4" in lines
    # rows pair by their first cell, in the new table's order; a figure that did not move, or a note, is shown once
    assert "| plain Spark | 22.83 | 223,357 → 228,102 | 1.00x | one run |" in lines
    assert "| ours | 28.87 → 25.10 | 176,682 → 203,187 | 1.26x → 1.10x | a single run |" in lines
    assert "Not set beside the before (it has no table of the same header and first column): the table “lines | ours, s”." \
        in lines
    assert "<details><summary>Before: measured on pyspark 3.5.9 (2026-11-28 15:01 UTC, scale 1, on 2 cores, 24 GiB, " \
        "CPython 3.11.7; pyspark 3.5.9, pyiceberg 0.12.0, dagster 1.13.27, 913 s)</summary>" in lines
    before = ingest[ingest.index("<details>"):ingest.index("</details>")]
    assert "| ours | 28.87 | 176,682 | 1.26x | one run |" in before and "Ours takes 1.26x plain Spark." in before
    assert "(Re-measured alone: " not in before and "<!-- bench:" not in before
    assert lines[-2:] == [f"(Re-measured alone: {SPARK4}, 900 s.)", ""]  # the section's own stamp, last
    assert f"{REMEASURED} ingest (2026-12-01 10:00 UTC)." in text.splitlines()
    assert _section(text, "merge") == _section(OLD, "merge") and text.endswith(_section(OLD, "sensor"))


def test_a_section_of_the_full_run_is_set_beside_the_versions_of_the_run():
    text = replace(OLD, "<!-- bench:merge -->\n### merge\n\n| mode | MERGE s |\n|---|---|\n| copy-on-write | 14.02 |\n",
                   f"{SPARK4}, 60 s")
    merge = _section(text, "merge").splitlines()
    assert "| copy-on-write | 16.92 → 14.02 |" in merge
    assert "<details><summary>Before: measured on pyspark 3.5.9 (2026-11-24 15:27 UTC, scale 1, on 2 cores, 24 GiB, " \
        "CPython 3.11.7; pyspark 3.5.9, pyiceberg 0.12.0, dagster 1.13.27)</summary>" in merge


def test_re_measuring_again_on_the_new_versions_keeps_the_before_of_the_old_ones():
    once = replace(OLD, INGEST.format(ours="25.10"), f"{SPARK4}, 900 s")
    later = SPARK4.replace("2026-12-01 10:00", "2026-12-02 09:30")
    twice = provenance(replace(once, INGEST.format(ours="24.00"), f"{later}, 880 s"))
    ingest = _section(twice, "ingest")
    assert "| ours | 28.87 → 24.00 | 176,682 → 203,187 | 1.26x → 1.10x | a single run |" in ingest.splitlines()
    assert "25.10" not in ingest  # the previous run on 4.1.4 is not kept
    assert ingest.count("<details>") == 1 and ingest.count("#### Before and after") == 1
    assert _section(once, "ingest")[_section(once, "ingest").index("<details>"):] \
        .startswith(ingest[ingest.index("<details>"):ingest.index("</details>")])
    assert ingest.rstrip().endswith(f"(Re-measured alone: {later}, 880 s.)")
    assert f"{REMEASURED} ingest (2026-12-02 09:30 UTC)." in twice.splitlines()


def test_a_section_re_measured_on_the_same_versions_is_replaced_alone():
    same = SPARK4.replace("pyspark 4.1.4", "pyspark 3.5.9")
    text = replace(OLD, INGEST.format(ours="25.10"), f"{same}, 900 s")
    assert _section(text, "ingest") == INGEST.format(ours="25.10") + f"\n(Re-measured alone: {same}, 900 s.)\n\n"


def test_a_section_new_to_the_file_joins_it_at_the_end():
    text = replace(OLD, "<!-- bench:serve -->\n### serve\n\n| a | b |\n|---|---|\n| x | 1 |\n", f"{SPARK4}, 9 s")
    assert text.endswith("| x | 1 |\n\n(Re-measured alone: " + SPARK4 + ", 9 s.)\n")
    assert "Before and after" not in text


def test_a_stamp_names_its_versions():
    assert versions(f"{SPARK4}, 900 s") == {"pyspark": "4.1.4", "pyiceberg": "0.12.0", "dagster": "1.13.27"}
    assert versions("2026-11-24 15:27 UTC, scale 1, on 2 cores") == {}


def test_a_run_that_failed_on_the_new_versions_keeps_the_figures_from_before():
    failed = "<!-- bench:ingest -->\n### ingest\n\nFailed in this run: `RuntimeError: boom`.\n"
    ingest = _section(replace(OLD, failed, f"{SPARK4}, 5 s"), "ingest")
    assert "No table in this run to set beside the before." in ingest.splitlines()
    assert "| ours | 28.87 | 176,682 | 1.26x | one run |" in ingest[ingest.index("<details>"):]
