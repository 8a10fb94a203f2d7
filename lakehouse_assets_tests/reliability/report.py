"""Render the figures `make soak` collected into benchmarks/RELIABILITY.md.

    python -m lakehouse_assets_tests.reliability.report FIGURES.jsonl [--out benchmarks/RELIABILITY.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "RELIABILITY.md"


def render(rows: list[dict], outcome: str) -> str:
    lines = ["# Reliability: what the suite tried", "",
             f"`make soak` ({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC): {outcome}. The same tests run in "
             "`make test` at scale 1; every figure below comes from this run.", ""]
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
    args = parser.parse_args(argv)
    path = Path(args.figures)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    Path(args.out).write_text(render(rows, args.outcome or f"{len(rows)} tests reported figures"))
    print(f"wrote {args.out} ({len(rows)} tests)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
