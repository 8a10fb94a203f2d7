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
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from ..landing.zones import LocalZone, S3Zone, landing_zone
from ..settings import Settings
from ..tables.types import DECIMAL

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


_WHOLE_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]{0,37})")


@dataclass(frozen=True)
class Needle:
    """One identifier: its name for the report, its text (lower case) and its byte spellings (lower case).

    A whole number given with `fields` (the columns that hold a person's id, lower case) is a number: it is looked
    for where a number is an id (see `Number`), never as digits in text, where any other value can spell it."""

    name: str
    text: str
    spellings: tuple[tuple[str, bytes], ...]
    fields: tuple[str, ...] = ()

    @classmethod
    def of(cls, name: str, value: str, fields: tuple[str, ...] = ()) -> Needle:
        if not value:
            raise ValueError(f"trace scan: {name} is empty")
        number = bool(fields) and _WHOLE_NUMBER.fullmatch(value) is not None
        return cls(name, value.lower(), spellings(value), tuple(sorted({f.lower() for f in fields})) if number else ())

    @property
    def number(self) -> Number | None:
        return _number(self.text, self.fields) if self.fields else None


@dataclass(frozen=True)
class Number:
    """Where a whole number is a person's id: a value of a column named as an id column (a number, or text that is
    the number), the value of a JSON field so named (`"account_id": 28`, in a line, a raw payload, a key's JSON or
    a bound), and a partition folder or key so named (`account_id=28`). Digits anywhere else (`128`, `2028-01-28`,
    an order's number, a count, a field id of Iceberg's metadata) are some other value's."""

    value: int
    fields: frozenset[str]
    in_json: re.Pattern
    in_partition: re.Pattern

    def in_text(self, text: str) -> bool:
        return bool(self.in_json.search(text) or self.in_partition.search(text))


@lru_cache(maxsize=64)
def _number(text: str, fields: tuple[str, ...]) -> Number:
    names = "|".join(re.escape(f) for f in fields)
    digits = re.escape(text)
    return Number(int(text), frozenset(fields),
                  re.compile(rf'"(?:{names})"\s*:\s*"?{digits}"?(?![\w.])', re.IGNORECASE),
                  re.compile(rf"(?<![\w-])(?:{names})={digits}(?![\w.])", re.IGNORECASE))


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


def search_numbers(data: bytes, needles: list[Needle]) -> list[tuple[Needle, str]]:
    """(needle, form) for each number (`Number`) in a text file's JSON fields and partition names, its JSON escapes
    decoded. A binary file (one with a NUL byte) is not text: its numbers are read only where its format is known
    (Parquet, Avro); an Iceberg table metadata file's numbers are its own (ids, counts), its partition names are
    still searched."""
    numbers = [(n, n.number) for n in needles if n.number is not None]
    if not numbers or b"\x00" in data:
        return []
    text = _normalised(data)
    if _is_table_metadata(data):
        return [(n, "partition value") for n, number in numbers if number.in_partition.search(text)]
    return [(n, "json field or partition value") for n, number in numbers if number.in_text(text)]


def _is_table_metadata(data: bytes) -> bool:
    head = data[:4096]
    return head.lstrip().startswith(b"{") and b'"table-uuid"' in head and b'"format-version"' in head


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


def _avro_datum(schema: Any, data: bytes, pos: int, named: dict[str, Any]) -> tuple[Any, int]:
    """One Avro value of `schema` at `pos`: records as dicts, arrays as lists, maps as dicts."""
    if isinstance(schema, list):  # a union: the branch's index, then its value
        branch, pos = _avro_long(data, pos)
        return _avro_datum(schema[branch], data, pos, named)
    if isinstance(schema, dict):
        kind = schema["type"]
        if "name" in schema:
            named[schema["name"]] = schema
        if kind == "record":
            record = {}
            for f in schema["fields"]:
                record[f["name"]], pos = _avro_datum(f["type"], data, pos, named)
            return record, pos
        if kind in ("array", "map"):
            return _avro_blocks_of(schema, data, pos, named)
        if kind == "enum":
            index, pos = _avro_long(data, pos)
            return schema["symbols"][index], pos
        if kind == "fixed":
            return data[pos:pos + schema["size"]], pos + schema["size"]
        return _avro_datum(kind, data, pos, named)  # a primitive with a logical type
    if schema in named:
        return _avro_datum(named[schema], data, pos, named)
    return _avro_primitive(schema, data, pos)


def _avro_blocks_of(schema: dict, data: bytes, pos: int, named: dict[str, Any]) -> tuple[Any, int]:
    """An array's or a map's blocks of items (a negative count is followed by the block's size in bytes)."""
    items: list[Any] = []
    while True:
        count, pos = _avro_long(data, pos)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, pos = _avro_long(data, pos)
        for _ in range(count):
            if schema["type"] == "map":
                key, pos = _avro_primitive("string", data, pos)
                value, pos = _avro_datum(schema["values"], data, pos, named)
                items.append((key, value))
            else:
                item, pos = _avro_datum(schema["items"], data, pos, named)
                items.append(item)
    return (dict(items) if schema["type"] == "map" else items), pos


def _avro_primitive(kind: str, data: bytes, pos: int) -> tuple[Any, int]:
    if kind == "null":
        return None, pos
    if kind == "boolean":
        return data[pos] != 0, pos + 1
    if kind in ("int", "long"):
        return _avro_long(data, pos)
    if kind == "float":
        return struct.unpack_from("<f", data, pos)[0], pos + 4
    if kind == "double":
        return struct.unpack_from("<d", data, pos)[0], pos + 8
    if kind in ("bytes", "string"):
        size, pos = _avro_long(data, pos)
        raw = data[pos:pos + size]
        return (raw.decode("utf-8", "replace") if kind == "string" else raw), pos + size
    raise ValueError(f"Avro type {kind!r} is not known")


def avro_records(data: bytes) -> tuple[dict[str, bytes], list[Any]]:
    """An Avro container file's header metadata and its records, decoded by the file's own schema."""
    meta, pos = _avro_metadata(data, len(AVRO_MAGIC))
    codec = meta.get("avro.codec", b"null").decode() or "null"
    schema = json.loads(meta["avro.schema"])
    named: dict[str, Any] = {}
    sync, pos = data[pos:pos + 16], pos + 16
    records = []
    while pos < len(data):
        count, pos = _avro_long(data, pos)
        size, pos = _avro_long(data, pos)
        block, at = _inflate_avro_block(codec, data[pos:pos + size]), 0
        for _ in range(count):
            record, at = _avro_datum(schema, block, at, named)
            records.append(record)
        pos += size
        if data[pos:pos + 16] != sync:
            raise ValueError("Avro: a block does not end with the file's sync marker")
        pos += 16
    return meta, records


def _column_types(schema_json: bytes) -> dict[int, tuple[str, str]]:
    """An Iceberg schema's fields by id: (name, type) at any depth (a list's element, a map's value, named as its
    column)."""
    found: dict[int, tuple[str, str]] = {}

    def walk(kind: Any, name: str, field_id: int | None) -> None:
        if isinstance(kind, dict):
            if kind.get("type") == "struct":
                for f in kind.get("fields", []):
                    walk(f.get("type"), f.get("name", ""), f.get("id"))
            elif kind.get("type") == "list":
                walk(kind.get("element"), name, kind.get("element-id"))
            elif kind.get("type") == "map":
                walk(kind.get("key"), name, kind.get("key-id"))
                walk(kind.get("value"), name, kind.get("value-id"))
        elif isinstance(field_id, int):
            found[field_id] = (name.lower(), str(kind))

    walk(json.loads(schema_json), "", None)
    return found


def _bound_is(number: Number, name: str, kind: str, raw: bytes) -> bool:
    """Whether a manifest's bound of a column (name, Iceberg type) is the number: in an id column, read as its type;
    in any text column, as a JSON field or partition name (a key's JSON, cut to 16 characters)."""
    if kind == "string":
        text = raw.decode("utf-8", "replace")
        return (name in number.fields and text.strip() == str(number.value)) or number.in_text(text)
    if name not in number.fields:
        return False
    if kind in ("int", "long"):
        return int.from_bytes(raw, "little", signed=True) == number.value
    decimal = DECIMAL.match(kind)
    if decimal:  # (precision, scale)
        return int.from_bytes(raw, "big", signed=True) == number.value * 10 ** int(decimal.group(2))
    return False


def search_avro_numbers(data: bytes, needles: list[Needle]) -> list[tuple[Needle, str]]:
    """(needle, form) for each number in an Avro file's records: a manifest's column bounds read by the types of the
    schema in its header, its partition values, and every text in it (a data file's path names its partition). A
    manifest list's partition summaries are not read: each value there is a bound of a manifest it lists."""
    numbers = [(n, n.number) for n in needles if n.number is not None]
    if not numbers:
        return []
    meta, records = avro_records(data)
    columns = _column_types(meta["schema"]) if "schema" in meta else {}
    found: dict[tuple[Needle, str], None] = {}
    for record in records:
        entry = record.get("data_file") if isinstance(record, dict) else None
        for n, number in numbers:
            if isinstance(entry, dict):
                for side in ("lower_bounds", "upper_bounds"):
                    for bound in entry.get(side) or []:
                        name, kind = columns.get(bound["key"], ("", ""))
                        if _bound_is(number, name, kind, bound["value"]):
                            found[(n, f"column bound {name}")] = None
                for name, value in (entry.get("partition") or {}).items():
                    if name.lower() in number.fields and str(value) == str(number.value):
                        found[(n, f"partition value {name}")] = None
            if any(number.in_text(text) for text in _avro_texts(record)):
                found[(n, "text")] = None
    return list(found)


def _avro_texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _avro_texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _avro_texts(item)


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
    """The distinct values of a text or binary array (normalised), or of an integer or decimal array as numbers, and
    whether they are whole values (numbers: 42 must not match 142); ([], False) for other types."""
    kind = array.type
    if pa.types.is_integer(kind):
        return [str(v) for v in array.unique().to_pylist() if v is not None], True
    if pa.types.is_decimal(kind):
        return [format(v.normalize(), "f") for v in array.unique().to_pylist() if v is not None], True
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)):
        return [], False
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        # As bytes: a string column may hold bytes that are not UTF-8 (a raw line as it landed), which Python's
        # str cannot take; decoded here with replacement, as a file's bytes are.
        array = array.cast(pa.large_binary() if pa.types.is_large_string(kind) else pa.binary())
    return [_normalised(v) for v in array.unique().to_pylist() if v is not None], False


def search_parquet(data: bytes, needles: list[Needle]) -> list[tuple[Needle, str]]:
    """(needle, column) for each identifier in a column's values, compared after the same normalisation; a number
    (`Number`) as a value of a column named as an id column, or in a text's JSON fields and partition names."""
    table = pq.read_table(pa.BufferReader(data))
    found: dict[tuple[Needle, str], None] = {}
    for name, column in zip(table.column_names, table.columns):
        for chunk in column.chunks:
            for path, leaf in _leaves(chunk, name):
                texts, whole = _distinct_texts(leaf)
                leaf_name = path.rsplit(".", 1)[-1].removesuffix("[]").lower()
                for n in needles:
                    number = n.number
                    if number is not None:
                        hit = (leaf_name in number.fields and n.text in texts) or (
                            not whole and any(number.in_text(t) for t in texts))
                    else:
                        hit = (n.text in texts) if whole else any(n.text in t for t in texts)
                    if hit:
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

    words = [n for n in needles if n.number is None]
    path = unquote(file.inside).lower()
    add([(n, "file path") for n in words if n.text in path], "name")
    add([(n, "file path") for n in needles if n.number is not None and n.number.in_partition.search(path)], "name")
    add(search_bytes(data, words), "raw")
    try:
        if data[:2] == GZIP_MAGIC:
            inner, why = gunzip(data)
            add(search_bytes(inner, words) + search_numbers(inner, needles), "gunzip")
            if why:
                report.unreadable[file.name] = why
        elif data[:4] == AVRO_MAGIC:
            add(search_bytes(avro_blocks(data), words) + search_avro_numbers(data, needles), "avro")
        elif data[:4] == PARQUET_MAGIC:
            add(search_parquet(data, needles), "parquet")
        else:
            add(search_numbers(data, needles), "raw")
    except (ValueError, IndexError, KeyError, OSError, zlib.error, lzma.LZMAError, struct.error,
            pa.ArrowException) as exc:
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
               warehouse_roots: list[str] | None = None, id_columns: Iterable[str] = ()) -> TraceReport:
    """Search every file of the warehouse (or of `warehouse_roots` in it), the landing zone and capture staging for
    the identifiers ({name for the report: value}); read only. Zero hits and no unreadable file is the proof.
    `id_columns`: the columns that hold a person's id; an identifier that is a whole number is then looked for as
    a number where those columns (or JSON fields so named) hold it (`Number`)."""
    started = time.monotonic()
    fields = tuple(id_columns)
    needles = [Needle.of(name, value, fields) for name, value in identifiers.items()]
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
