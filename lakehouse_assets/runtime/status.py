"""What long-lived processes (a stream, a capture) leave on disk for others to read.

A heartbeat file says a stream is running (the source's landing sensor then requests no
bronze runs: the stream takes the new files), and running totals feed the metrics
(`lakehouse metrics`).

Totals: a stream or a capture adds to its counters after each batch; the totals survive restarts, so
they only grow, as Prometheus counters must. One writer per file (one stream or capture per
source); a reader never sees a half-written file (written beside it, then renamed).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def read_status(path: Path) -> dict[str, Any]:
    """The file's totals, {} when there is none (or it cannot be read: the next write starts it again)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def add_to_status(path: Path, counters: dict[str, float] | None = None, **values: Any) -> dict[str, Any]:
    """Add `counters` to the totals, set `values`, stamp `updated_at` (epoch seconds); the new status."""
    path = Path(path)
    status = read_status(path)
    for key, amount in (counters or {}).items():
        status[key] = status.get(key, 0) + amount
    status.update(values, updated_at=time.time())
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(status, sort_keys=True))
    os.replace(partial, path)
    return status


def heartbeat_file(home: Path, landing: str) -> Path:
    """Touched every half second while a stream of `landing/` runs; meanwhile that source's landing sensor
    requests no bronze runs."""
    return Path(home) / "streams" / landing / "heartbeat"


def stream_status_file(home: Path, landing: str) -> Path:
    """The stream's running totals (batches, their seconds, files, records), kept across restarts."""
    return Path(home) / "streams" / landing / "status.json"


def capture_status_file(home: Path, server: str) -> Path:
    """A capture's running totals (records, tombstones) and the WAL its slot retained when last read."""
    return Path(home) / "capture" / server / "status.json"


def stream_is_running(home: Path, landing: str, within_s: float = 30.0) -> bool:
    beat = heartbeat_file(home, landing)
    try:
        return time.time() - beat.stat().st_mtime < within_s
    except FileNotFoundError:
        return False
