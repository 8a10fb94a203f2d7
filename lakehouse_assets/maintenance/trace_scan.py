"""An independent proof that a person is gone: every file the lake keeps, searched for their identifiers.

`forget` proves its work with the matchers that chose what to delete, so it cannot see what they miss. This scan
shares no code with them. It reads every file under the warehouse (live data files, old ones, files of crashed
writes, metadata JSON, manifests), the landing zone and the capture staging folder (`<home>/capture/`), and looks
for every identifier the caller gives (the raw id, an e-mail, their keyed hashes):

- in the file's bytes: the UTF-8 spelling, JSON's spellings (`\\u00e9`, `\\u0040`, `\\/`) and the URL-encoded one;
  then in the text with JSON string escapes decoded, repeatedly (a JSON line kept inside a JSON string is escaped
  twice), so any mix of escaped and plain characters is found;
- case-insensitively everywhere: an e-mail's case means nothing, and a proof errs on the side of a hit;
- inside gzip (a cut-off file read as far as it goes) and inside the blocks of Avro files (Iceberg's manifests are
  deflated, and their column bounds hold values);
- in Parquet files, in every column's values read with pyarrow (nested lists, structs and maps flattened): a value
  in a compressed page is not in the file's bytes;
- in the file's own path (a partition folder can be named after a value).

A file that cannot be read whole (a Parquet file cut off before its footer, a broken Avro block) is reported as
unreadable: nothing is proven about it, so the report is not a proof until it is gone.
"""

from __future__ import annotations

import bz2
import json
import lzma
import os
import re
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from ..settings import Settings
from ..sources.zones import LocalZone, S3Zone, landing_zone

WAREHOUSE, LANDING, STAGING = "warehouse", "landing", "staging"
GZIP_MAGIC, AVRO_MAGIC, PARQUET_MAGIC = b"\x1f\x8b", b"Obj\x01", b"PAR1"

_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|([\"\\/bfnrt]))")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_UNESCAPE_ROUNDS = 4  # JSON inside a JSON string inside ...: deeper nesting than this is not written by anyone


@dataclass(frozen=True)
class Hit:
    file: str
    area: str
    identifier: str  # the caller's name for the value, never the value itself (the report may be kept)
    form: str  # the spelling or column that held it
    how: str  # raw, gunzip, avro, parquet or name
    changed: float = 0.0  # when the file last changed (seconds since the epoch): a local inode's, an object's upload


@dataclass
class TraceReport:
    files_scanned: dict[str, int] = field(default_factory=lambda: {WAREHOUSE: 0, LANDING: 0, STAGING: 0})
    hits: list[Hit] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)  # file -> why
    seconds: float = 0.0

    @property
    def proven(self) -> bool:
        return not self.hits and not self.unreadable

    def as_dict(self) -> dict[str, Any]:
        return {"proven": self.proven, "files_scanned": dict(self.files_scanned),
                "hits": [h.__dict__ for h in self.hits], "unreadable": dict(self.unreadable),
                "seconds": round(self.seconds, 2)}


@dataclass(frozen=True)
class Needle:
    """One identifier: its name for the report, its text (lower case) and its byte spellings (lower case)."""

    name: str
    text: str
    spellings: tuple[tuple[str, bytes], ...]

    @classmethod
    def of(cls, name: str, value: str) -> Needle:
        if not value:
            raise ValueError(f"trace scan: {name} is empty")
        return cls(name, value.lower(), spellings(value))


def spellings(value: str) -> tuple[tuple[str, bytes], ...]:
    """The spellings a writer gives `value` (lower case, ASCII letters only: bytes.lower() folds no other)."""
    ascii_json = json.dumps(value)[1:-1]
    forms = [
        ("utf-8", value),
        ("json", json.dumps(value, ensure_ascii=False)[1:-1]),
        ("json \\u escapes", ascii_json),
        ("json \\/", ascii_json.replace("/", "\\/")),
        ("json \\u escapes of every character", "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else
                                                        json.dumps(c)[1:-1] for c in value)),
        ("url-encoded", quote(value, safe="")),
    ]
    seen: dict[bytes, str] = {}
    for form, text in forms:
        seen.setdefault(text.encode("utf-8").lower(), form)
    return tuple((form, spelled) for spelled, form in seen.items())


def unescape_json(text: str) -> str:
    """`text` with JSON string escapes decoded until none is left (surrogate pairs joined into one character)."""
    for _ in range(_UNESCAPE_ROUNDS):
        if "\\" not in text:
            break
        decoded = _ESCAPE.sub(lambda m: chr(int(m[1], 16)) if m[1] else _SIMPLE_ESCAPES[m[2]], text)
        if decoded == text:
            break
        text = decoded.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def _normalised(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return unescape_json(text).lower()


def search_bytes(data: bytes, needles: list[Needle]) -> list[tuple[Needle, str]]:
    """(needle, form) for each identifier in `data`: its literal spellings, else the text with escapes decoded
    and every letter in lower case (bytes.lower() folds ASCII letters only: Ë is not ë)."""
    folded = data.lower()
    found = [(n, form) for n in needles for form, spelled in n.spellings if spelled in folded]
    missing = [n for n in needles if all(n is not f[0] for f in found)]
    if missing and (b"\\" in data or not all(n.text.isascii() for n in missing)):
        text = _normalised(data)
        found += [(n, "decoded text") for n in missing if n.text in text]
    return found


# Containers: what a file's bytes hide.

def gunzip(data: bytes) -> tuple[bytes, str | None]:
    """Every gzip member's bytes, as far as they go (a cut-off file is read up to its cut); why not all, if not."""
    out, rest = [], data
    while rest[:2] == GZIP_MAGIC:
        inflater = zlib.decompressobj(wbits=31)
        try:
            out.append(inflater.decompress(rest))
            if not inflater.eof:  # cut off: what was written is searched, nothing more exists
                out.append(inflater.flush())
                break
        except zlib.error as exc:
            return b"".join(out), f"gzip: {exc}"
        rest = inflater.unused_data
    return b"".join(out), None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _avro_long(data: bytes, pos: int) -> tuple[int, int]:
    raw, pos = _varint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos  # zig-zag


def _avro_metadata(data: bytes, pos: int) -> tuple[dict[str, bytes], int]:
    """The header's map of string to bytes (blocks of entries; a negative count is followed by a byte size)."""
    meta: dict[str, bytes] = {}
    while True:
        count, pos = _avro_long(data, pos)
        if count == 0:
            return meta, pos
        if count < 0:
            count = -count
            _, pos = _avro_long(data, pos)
        for _ in range(count):
            size, pos = _avro_long(data, pos)
            key = data[pos:pos + size].decode()
            size, pos = _avro_long(data, pos + size)
            meta[key] = data[pos:pos + size]
            pos += size


def _inflate_avro_block(codec: str, block: bytes) -> bytes:
    if codec == "null":
        return block
    if codec == "deflate":
        return zlib.decompress(block, -15)
    if codec == "snappy":  # the block ends with a CRC of the data; the data starts with its length
        size, _ = _varint(block, 0)
        return pa.Codec("snappy").decompress(block[:-4], decompressed_size=size, asbytes=True)
    if codec == "zstandard":
        return pa.CompressedInputStream(pa.BufferReader(block), "zstd").read()
    if codec == "bzip2":
        return bz2.decompress(block)
    if codec == "xz":
        return lzma.decompress(block)
    raise ValueError(f"Avro codec {codec!r} is not known")


def avro_blocks(data: bytes) -> bytes:
    """An Avro container file's records as bytes (blocks decompressed): strings and bytes in them are plain."""
    meta, pos = _avro_metadata(data, len(AVRO_MAGIC))
    codec = meta.get("avro.codec", b"null").decode() or "null"
    sync, pos = data[pos:pos + 16], pos + 16
    blocks = [b"".join(f"{k}\0".encode() + v for k, v in meta.items())]  # the header holds the schema and more
    while pos < len(data):
        _, pos = _avro_long(data, pos)  # records in the block
        size, pos = _avro_long(data, pos)
        blocks.append(_inflate_avro_block(codec, data[pos:pos + size]))
        pos += size
        if data[pos:pos + 16] != sync:
            raise ValueError("Avro: a block does not end with the file's sync marker")
        pos += 16
    return b"".join(blocks)


# Parquet: every column's values.

def _leaves(array: pa.Array, path: str) -> Iterator[tuple[str, pa.Array]]:
    """The primitive arrays inside `array`, with their column path (every child value, referenced or not)."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        yield from _leaves(array.dictionary, path)
    elif pa.types.is_map(kind):
        yield from _leaves(array.keys, f"{path}.key")
        yield from _leaves(array.items, f"{path}.value")
    elif pa.types.is_struct(kind) or pa.types.is_union(kind):
        for i in range(kind.num_fields):
            yield from _leaves(array.field(i), f"{path}.{kind.field(i).name}")
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        yield from _leaves(array.values, f"{path}[]")
    else:
        yield path, array


def _distinct_texts(array: pa.Array) -> tuple[list[str], bool]:
    """The distinct values of a text or binary array (normalised), or of an integer array as numbers, and whether
    they are whole values (integers: 42 must not match 142); ([], False) for other types."""
    kind = array.type
    if pa.types.is_integer(kind):
        return [str(v) for v in array.unique().to_pylist() if v is not None], True
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)):
        return [], False
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        # As bytes: a string column may hold bytes that are not UTF-8 (a raw line as it landed), which Python's
        # str cannot take; decoded here with replacement, as a file's bytes are.
        array = array.cast(pa.large_binary() if pa.types.is_large_string(kind) else pa.binary())
    return [_normalised(v) for v in array.unique().to_pylist() if v is not None], False


def search_parquet(data: bytes, needles: list[Needle]) -> list[tuple[Needle, str]]:
    """(needle, column) for each identifier in a column's values, compared after the same normalisation."""
    table = pq.read_table(pa.BufferReader(data))
    found: dict[tuple[Needle, str], None] = {}
    for name, column in zip(table.column_names, table.columns):
        for chunk in column.chunks:
            for path, leaf in _leaves(chunk, name):
                texts, whole = _distinct_texts(leaf)
                for n in needles:
                    if (n.text in texts) if whole else any(n.text in t for t in texts):
                        found[(n, f"column {path}")] = None
    return list(found)


# Files.

@dataclass(frozen=True)
class StoredFile:
    name: str  # as the report names it: a local path or an object's URI
    inside: str  # its path inside its area (its own name for a value, not the area's)
    read: Callable[[], bytes]
    changed: float = 0.0  # when it last changed: a local file's inode change time, an object's upload time


def scan_file(file: StoredFile, area: str, data: bytes, needles: list[Needle], report: TraceReport) -> None:
    """Search one file (its path, its bytes, what its compression or container hides) and add its hits."""
    def add(found: list[tuple[Needle, str]], how: str) -> None:
        report.hits += [Hit(file.name, area, n.name, form, how, file.changed) for n, form in found]

    path = unquote(file.inside).lower()
    add([(n, "file path") for n in needles if n.text in path], "name")
    add(search_bytes(data, needles), "raw")
    try:
        if data[:2] == GZIP_MAGIC:
            inner, why = gunzip(data)
            add(search_bytes(inner, needles), "gunzip")
            if why:
                report.unreadable[file.name] = why
        elif data[:4] == AVRO_MAGIC:
            add(search_bytes(avro_blocks(data), needles), "avro")
        elif data[:4] == PARQUET_MAGIC:
            add(search_parquet(data, needles), "parquet")
    except (ValueError, IndexError, OSError, zlib.error, lzma.LZMAError, pa.ArrowException) as exc:
        report.unreadable[file.name] = f"{type(exc).__name__}: {exc}"


def _local_files(root: Path) -> Iterator[StoredFile]:
    """Every file under `root`, hidden ones (staging part files, checksums) too; links to folders not followed."""
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            path = Path(folder) / name
            if path.is_file():
                yield StoredFile(str(path), str(path.relative_to(root)), path.read_bytes, path.stat().st_ctime)


def _object_files(zone: S3Zone) -> Iterator[StoredFile]:
    """Every object under the zone's prefix, whatever its name."""
    client = zone.s3.get_client()
    prefix = f"{zone.prefix}/" if zone.prefix else ""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=zone.bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            uri = f"{zone.scheme}://{zone.bucket}/{obj['Key']}"
            yield StoredFile(uri, obj["Key"][len(prefix):], partial(zone.read, uri), obj["LastModified"].timestamp())


def _zone_files(zone: LocalZone | S3Zone) -> Iterator[StoredFile]:
    return _local_files(zone.root) if isinstance(zone, LocalZone) else _object_files(zone)


def areas(settings: Settings, warehouse_roots: list[str] | None = None) -> dict[str, Iterator[StoredFile]]:
    """The files of each area. The warehouse is a folder or an S3 prefix, read as the landing zone is; with
    `warehouse_roots`, only the files under those folders of it (the tables of one namespace)."""
    roots = [settings.warehouse] if warehouse_roots is None else warehouse_roots
    for root in roots:
        if urlsplit(root).scheme not in ("file", "s3", "s3a"):
            raise ValueError(f"trace scan: warehouse {root!r} is neither a folder nor on S3")
    return {
        WAREHOUSE: (f for root in roots for f in _zone_files(landing_zone(settings.with_(landing=root)))),
        LANDING: _zone_files(landing_zone(settings)),
        STAGING: _local_files(settings.home / "capture"),
    }


def trace_scan(settings: Settings, identifiers: Mapping[str, str],
               warehouse_roots: list[str] | None = None) -> TraceReport:
    """Search every file of the warehouse (or of `warehouse_roots` in it), the landing zone and capture staging for
    the identifiers ({name for the report: value}); read only. Zero hits and no unreadable file is the proof."""
    started = time.monotonic()
    needles = [Needle.of(name, value) for name, value in identifiers.items()]
    report = TraceReport()
    for area, files in areas(settings, warehouse_roots).items():
        for file in files:
            try:
                data = file.read()
            except FileNotFoundError:
                continue  # removed while the scan ran: it holds nothing any more
            report.files_scanned[area] += 1
            scan_file(file, area, data, needles, report)
    report.seconds = time.monotonic() - started
    return report
