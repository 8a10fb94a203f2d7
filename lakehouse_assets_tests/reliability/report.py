"""Render the figures `make soak` collected into benchmarks/RELIABILITY.md.

    python -m lakehouse_assets_tests.reliability.report FIGURES.jsonl [--out benchmarks/RELIABILITY.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from xml.etree import ElementTree

OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "RELIABILITY.md"


def _first_line(element: ElementTree.Element) -> str:
    return ((element.get("message") or "").strip().splitlines() or [""])[0][:300]


def outcomes(junit: Path) -> list[tuple[str, str]]:
    """(test, "passed", "skipped: why" or "FAILED: why") from pytest's JUnit XML; a skipped case did not run."""
    if not junit.exists():
        return []
    found = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skipped = case.find("skipped")
        if problem is not None:
            why = "FAILED: " + _first_line(problem)
        elif skipped is not None:
            why = "skipped: " + _first_line(skipped)
        else:
            why = "passed"
        found.append((f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}", why))
    return found


def headline(outcome: str, tests: list[tuple[str, str]]) -> str:
    """The run's outcome; when a case did not pass (skipped too), the cases' tally says so, not the exit status."""
    tally = {kind: sum(1 for _, why in tests if why.split(":", 1)[0] == kind) for kind in ("passed", "skipped", "FAILED")}
    if tally["passed"] == len(tests):
        return outcome
    counted = ", ".join(f"{n} {kind.lower()}" for kind, n in tally.items() if n) + f" of {len(tests)} cases"
    # pytest exits 0 with skipped cases: a claim that every test passed is then replaced by the tally.
    return counted if outcome.startswith("every test passed") or not outcome else f"{counted}; {outcome}"


def render(rows: list[dict], outcome: str, tests: list[tuple[str, str]] | None = None) -> str:
    lines = ["# Reliability: what the suite tried", "",
             f"`make soak` ({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC): {headline(outcome, tests or [])}. "
             "The same tests run in "
             "`make test` at scale 1, but for the cases marked soak (other crash points, the PostgreSQL catalog); "
             "every figure below comes from this run.", ""]
    if tests:
        lines += ["| test | outcome |", "|---|---|"] + [f"| `{t}` | {why.replace('|', '/')} |" for t, why in tests] + [""]
    for row in rows:
        test, scale = row.pop("test"), row.pop("scale")
        lines += [f"## {test} (scale {scale})", "", "| figure | value |", "|---|---|"]
        for key, value in row.items():
            shown = ", ".join(f"{k}: {v}" for k, v in value.items()) if isinstance(value, dict) else value
            lines.append(f"| {key.replace('_', ' ')} | {shown} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reliability.report")
    parser.add_argument("figures")
    parser.add_argument("--outcome", default="")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--junit", default="", help="pytest's --junitxml file: each test's outcome")
    args = parser.parse_args(argv)
    path = Path(args.figures)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    tests = outcomes(Path(args.junit)) if args.junit else []
    Path(args.out).write_text(render(rows, args.outcome or f"{len(rows)} tests reported figures", tests))
    print(f"wrote {args.out} ({len(rows)} tests)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
