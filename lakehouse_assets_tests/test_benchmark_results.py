"""RESULTS.md says where each figure comes from: the full run, or a section's own later run."""

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
