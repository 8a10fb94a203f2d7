"""A section of RESULTS.md re-measured on other versions, set beside its figures from before.

`make bench ONLY=...` replaces a benchmark's section with its new run. When the section it replaces was measured
with other versions of pyspark, pyiceberg or dagster, the new section goes on with "Before and after": each of its
tables that the old section has too (the same header row and first column) with every figure that moved as
`before → after`, then the old section whole, in a <details> block whose summary holds the stamp it was measured at.
A later re-measure on the same new versions keeps that before: the figures stay beside the older versions, not
beside the previous run on the new ones. The section's own stamp, `(Re-measured alone: ...)`, stays its last line.
"""

from __future__ import annotations

import re
from itertools import groupby

PACKAGES = ("pyspark", "pyiceberg", "dagster")  # the versions a stamp names, after the machine
SECTION = "<!-- bench:"  # starts each section
HEADING = "#### Before and after: "
ALONE = re.compile(r"^\(Re-measured alone: (.*)\.\)$", re.M)  # a section's own stamp, its last line
RUN = re.compile(r"^Run (.*)\.$", re.M)  # the header's stamp of the full run
BEFORE = re.compile(r"^<details><summary>Before: measured on [^(]*\((?P<stamp>.*)\)</summary>\n(?P<text>.*)\n</details>$",
                    re.M | re.S)
FIGURE = re.compile(r"[-+]?\d[\d,]*(\.\d+)? ?[A-Za-z%/]*")  # 28.87, 176,682, 1.26x, 99.2%, 0.22 s, 18,087 records/s

Table = tuple[list[str], str, list[list[str]]]  # header cells, the rule line under them, the rows' cells


def replace(text: str, section: str, stamp: str) -> str:
    """RESULTS.md's `text` with `section` (its marker line, then its markdown), re-measured at `stamp`, in place of
    the section of the same name (or after the last one)."""
    marker = section.split("\n", 1)[0]
    start = text.find(marker)
    if start < 0:
        return text.rstrip() + "\n\n" + remeasured(section, "", stamp)
    end = text.find(SECTION, start + len(marker))
    run = RUN.search(text)
    body = remeasured(section, text[start:end] if end >= 0 else text[start:], stamp, run.group(1) if run else "")
    return text[:start] + body + ("\n" + text[end:] if end >= 0 else "")


def remeasured(new: str, old: str, stamp: str, run: str = "") -> str:
    """The new section, beside the old one's figures when their versions differ, ending in its stamp line. `run`
    is the full run's stamp, which is the old section's when it has no stamp of its own."""
    own, own_stamp, before = _parts(old, run)
    if before is None or versions(own_stamp) != versions(stamp):
        before = own_stamp, own
    was, now = versions(before[0]), versions(stamp)
    changed = [p for p in PACKAGES if p in was and p in now and was[p] != now[p]]
    parts = [new.rstrip()]
    if changed:
        parts += [HEADING + ", ".join(f"{p} {was[p]} → {now[p]}" for p in changed),
                  _comparison(new, before[1]),
                  f"<details><summary>Before: measured on {', '.join(f'{p} {was[p]}' for p in changed)} "
                  f"({before[0]})</summary>\n\n{before[1]}\n\n</details>"]
    return "\n\n".join([*parts, f"(Re-measured alone: {stamp}.)"]) + "\n"


def versions(stamp: str) -> dict[str, str]:
    """The versions a stamp names: {"pyspark": "3.5.9", "pyiceberg": "0.12.0", "dagster": "1.13.27"}."""
    found = {p: re.search(rf"\b{p} (\d[^\s,;)]*)", stamp) for p in PACKAGES}
    return {p: m.group(1).rstrip(".") for p, m in found.items() if m}


def _parts(section: str, run: str) -> tuple[str, str, tuple[str, str] | None]:
    """A section's own text (without its marker, its stamp and its before and after), the stamp it was measured
    at, and the before it carries (its stamp and text), if any."""
    body = section.partition("\n")[2]
    own = ALONE.sub("", body.partition(HEADING)[0]).strip()
    stamps = ALONE.findall(body)
    block = BEFORE.search(body)
    return own, stamps[-1] if stamps else run, (block["stamp"], block["text"].strip()) if block else None


def _comparison(new: str, before: str) -> str:
    """The new section's tables that pair with one before, each figure as `before → after`; the others named."""
    olds, shown, unpaired = _tables(before), [], []
    for table in _tables(new):
        old = next((o for o in olds if _same_rows(o, table)), None)
        if old is None:
            unpaired.append("the table “" + " | ".join(table[0][:3]) + (" | …”" if len(table[0]) > 3 else "”"))
        else:
            olds.remove(old)
            shown.append(_beside(table, old))
    if unpaired:
        shown.append(f"Not set beside the before (it has no table of the same header and first column): "
                     f"{'; '.join(unpaired)}.")
    return "\n\n".join(shown) or "No table in this run to set beside the before."


def _same_rows(old: Table, new: Table) -> bool:
    """The same header and the same first cells, in any order."""
    return old[0] == new[0] and sorted(row[0] for row in old[2]) == sorted(row[0] for row in new[2])


def _beside(new: Table, old: Table) -> str:
    """The new table with each of its figures that differs from the old table's as `old → new`; rows pair by their
    first cell."""
    header, rule, rows = new
    rows_before: dict[str, list[list[str]]] = {}
    for row in old[2]:
        rows_before.setdefault(row[0], []).append(row)
    lines = [_row(header), rule]
    for row in rows:
        was = rows_before[row[0]].pop(0)
        lines.append(_row([_cell(was[i] if i < len(was) else "", cell) for i, cell in enumerate(row)]))
    return "\n".join(lines)


def _cell(was: str, now: str) -> str:
    return f"{was} → {now}" if was != now and FIGURE.fullmatch(was) and FIGURE.fullmatch(now) else now


def _tables(text: str) -> list[Table]:
    """The markdown tables in `text`: runs of lines that start with `|`, a header, a rule and rows."""
    runs = [list(lines) for is_table, lines in groupby(text.split("\n"), lambda ln: ln.startswith("|")) if is_table]
    return [(_cells(lines[0]), lines[1].strip(), [_cells(ln) for ln in lines[2:]]) for lines in runs if len(lines) > 1]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().removeprefix("|").removesuffix("|").split("|")]


def _row(cells: list[str]) -> str:
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"
