"""What the commands print: rows as an aligned table or as JSON, values made plain, progress lines."""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
import uuid
from collections.abc import Callable
from decimal import Decimal


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))


def print_rows(rows: list[dict], columns: list[str], as_json: bool) -> None:
    """`rows` as JSON (every key), or as a table of `columns`."""
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, columns)


def progress(to_stderr: bool, flush: bool = False) -> Callable[[str], None]:
    """Where a long command reports as it goes: stderr when stdout is kept for its JSON."""
    return lambda line: print(line, file=sys.stderr if to_stderr else sys.stdout, flush=flush)


def plain(value):
    """A JSON-ready value: dates, timestamps, decimals and the like as strings."""
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (Decimal, dt.timedelta, uuid.UUID)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def cell(value, null: str = "") -> str:
    if value is None:
        return null
    if isinstance(value, bool):
        return "true" if value else "false"
    value = plain(value)
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)


def unique_names(names: list[str]) -> list[str]:
    """Result columns as keys: a repeated name (SELECT a.id, b.id) gets a suffix."""
    unique: list[str] = []
    for name in names:
        key, n = name, 1
        while key in unique:
            n += 1
            key = f"{name}_{n}"
        unique.append(key)
    return unique
