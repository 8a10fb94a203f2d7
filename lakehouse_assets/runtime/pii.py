"""Pseudonymising personal data: a keyed hash (HMAC-SHA256) computed inside Spark.

The same input and key always give the same pseudonym, so joins and counts still
work, but without the key nobody can test a guess (unlike a plain hash of an
email address). The key comes from settings, never from code: LAKEHOUSE_PII_KEY,
or a random key created once in `<lakehouse home>/secrets/pii.key`. A key shorter
than MIN_KEY_BYTES is refused: pseudonyms made with it could be reversed.

The key never enters a query plan as a literal (Spark prints plans in its UI, its
event logs and `explain`): the HMAC's pads travel as data, a one-row frame
broadcast to the executors and joined to the rows (`with_pii_pads`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import uuid
from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..errors import ConfigurationError
from ..settings import Settings
from .durable import fsync_path
from .spark import local_frame

_BLOCK = 64  # SHA-256 block size in bytes
MIN_KEY_BYTES = 32
IPAD, OPAD = "_pii_ipad", "_pii_opad"  # the columns `with_pii_pads` adds for `keyed_hash`
MAKE_ONE = "python3 -c 'import secrets; print(secrets.token_hex(32))'"


def pii_key(settings: Settings) -> bytes:
    """The key of the keyed hash; ConfigurationError when it is too short to keep pseudonyms from being reversed."""
    path = key_file(settings)
    key = settings.pii_key.encode() if settings.pii_key else _read_or_create(path)
    if len(key) < MIN_KEY_BYTES:
        where = "LAKEHOUSE_PII_KEY" if settings.pii_key else str(path)
        raise ConfigurationError(
            f"the PII key in {where} is {len(key)} bytes; at least {MIN_KEY_BYTES} are needed (pseudonyms made with "
            f"a short key can be reversed by guessing): make one with `{MAKE_ONE}`")
    return key


def key_file(settings: Settings) -> Path:
    return settings.home / "secrets" / "pii.key"


def _read_or_create(path: Path) -> bytes:
    if not path.exists():
        _create(path)
    return path.read_bytes().strip()


def _create(path: Path) -> None:
    """Write a new random key whole, then link it into place: a reader never sees it empty or half written, and of
    processes starting at once one key wins and every one of them reads it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, os.urandom(32).hex().encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(draft, path)  # fails if another process linked its key first: that one is the key
    except FileExistsError:
        pass
    finally:
        os.unlink(draft)
    fsync_path(path.parent)


def _pads(key: bytes) -> tuple[bytes, bytes]:
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


def with_pii_pads(df: DataFrame, key: bytes) -> DataFrame:
    """`df` with the HMAC's pads as two columns (IPAD, OPAD), from a one-row frame broadcast to the executors."""
    ipad, opad = _pads(key)
    pads = local_frame(df.sparkSession, [(ipad, opad)], f"{IPAD} binary, {OPAD} binary")
    return df.crossJoin(F.broadcast(pads))


def keyed_hash(column: Column) -> Column:
    """HMAC-SHA256 of the column's UTF-8 text, as 64 hex characters; null stays null. Its frame needs the pads
    (`with_pii_pads`)."""
    inner = F.unhex(F.sha2(F.concat(F.col(IPAD), F.encode(column, "UTF-8")), 256))
    return F.when(column.isNull(), F.lit(None)).otherwise(F.sha2(F.concat(F.col(OPAD), inner), 256))


def keyed_hash_of(value: str, key: bytes) -> str:
    """`keyed_hash` of one value, in Python (the same 64 hex characters)."""
    return hmac.new(key, value.encode(), hashlib.sha256).hexdigest()
