"""Pseudonymising personal data: a keyed hash (HMAC-SHA256) computed inside Spark.

The same input and key always give the same pseudonym, so joins and counts still
work, but without the key nobody can test a guess (unlike a plain hash of an
email address). The key comes from settings, never from code: LAKEHOUSE_PII_KEY,
or a random key created once in `<lakehouse home>/secrets/pii.key`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pyspark.sql import Column
from pyspark.sql import functions as F

from ..settings import Settings

_BLOCK = 64  # SHA-256 block size in bytes


def pii_key(settings: Settings) -> bytes:
    if settings.pii_key:
        return settings.pii_key.encode()
    path = settings.home / "secrets" / "pii.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex())
    return Path(path).read_text().strip().encode()


def keyed_hash(column: Column, key: bytes) -> Column:
    """HMAC-SHA256 of the column's UTF-8 text, as 64 hex characters; null stays null."""
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    ipad = bytearray(b ^ 0x36 for b in key)
    opad = bytearray(b ^ 0x5C for b in key)
    inner = F.unhex(F.sha2(F.concat(F.lit(ipad), F.encode(column, "UTF-8")), 256))
    return F.when(column.isNull(), F.lit(None)).otherwise(F.sha2(F.concat(F.lit(opad), inner), 256))
