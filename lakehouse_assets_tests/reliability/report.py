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


def outcomes(junit: Path) -> list[tuple[str, str]]:
    """(test, "passed" or the first line of why it failed) from pytest's JUnit XML."""
    if not junit.exists():
        return []
    found = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        why = "passed" if problem is None else "FAILED: " + (problem.get("message") or "").strip().splitlines()[0][:300]
        found.append((f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}", why))
    return found


def render(rows: list[dict], outcome: str, tests: list[tuple[str, str]] | None = None) -> str:
    lines = ["# Reliability: what the suite tried", "",
             f"`make soak` ({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC): {outcome}. The same tests run in "
             "`make test` at scale 1; every figure below comes from this run.", ""]
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
