"""The suite's size and its figures: `make soak` runs it larger and writes what it tried to benchmarks/RELIABILITY.md.

LAKEHOUSE_SOAK_SCALE multiplies the sizes (1 in `make test`); LAKEHOUSE_RELIABILITY_FIGURES names a JSON-lines
file that each test appends its figures to.
"""

from __future__ import annotations

import json
import os

SCALE = max(1, int(os.environ.get("LAKEHOUSE_SOAK_SCALE", "1")))


def record(test: str, **figures: object) -> None:
    path = os.environ.get("LAKEHOUSE_RELIABILITY_FIGURES", "")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"test": test, "scale": SCALE, **figures}, default=str) + "\n")
