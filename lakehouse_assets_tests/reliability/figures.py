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


def age_table_files(table, days: int = 4) -> int:
    """Make every file under a (local) table's location `days` old, as if left there that long ago: orphan
    removal only takes files older than its safety window (3 days), and Iceberg refuses windows under 24 hours."""
    import time
    from pathlib import Path
    from urllib.parse import urlparse

    then = time.time() - days * 86_400
    files = [p for p in Path(urlparse(table.location()).path).rglob("*") if p.is_file()]
    for path in files:
        os.utime(path, (then, then))
    return len(files)
