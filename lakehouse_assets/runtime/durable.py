"""Making a file, or a folder's entries, durable by its path."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path | str) -> None:
    """fsync a file or a folder by its path (a folder's fsync makes the names in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
