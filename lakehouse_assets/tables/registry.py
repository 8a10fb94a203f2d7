"""A table's declaration as data: schema, hidden partitioning, write mode, properties.

Each layer builds the specs of its tables from the project's declaration; an
asset holds the handle of its table (`LakehouseResource.table(spec)`), which
creates it from this spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyspark.sql import types as T

from ..settings import validate_identifier

COPY_ON_WRITE = "copy-on-write"
MERGE_ON_READ = "merge-on-read"

_TRANSFORM = re.compile(
    r"^(?:(?P<col>[A-Za-z_]\w*)"
    r"|(?:years|months|days|hours)\((?P<tcol>[A-Za-z_]\w*)\)"
    r"|(?:bucket|truncate)\(\d+,\s*(?P<ncol>[A-Za-z_]\w*)\))$",
    re.ASCII,
)


def transform_column(transform: str) -> str:
    """The source column of a partition transform such as `days(event_ts)`."""
    m = _TRANSFORM.match(transform)
    if not m:
        raise ValueError(
            f"invalid partition transform {transform!r}: use col, years|months|days|hours(col), "
            "bucket(N, col) or truncate(N, col)"
        )
    return m.group("col") or m.group("tcol") or m.group("ncol")


def col(name: str, dtype: T.DataType, nullable: bool = True, comment: str = "") -> T.StructField:
    metadata = {"comment": comment} if comment else {}
    return T.StructField(name, dtype, nullable, metadata)


@dataclass(frozen=True)
class TableSpec:
    name: str
    layer: str
    description: str
    schema: T.StructType
    partitioned_by: tuple[str, ...] = ()
    write_mode: str = COPY_ON_WRITE
    properties: dict[str, str] = field(default_factory=dict)
    # Columns the declaration renamed: new path -> old path (`a` or `struct.a`), renamed in place by field id.
    renamed: dict[str, str] = field(default_factory=dict)
    # The table also takes the columns its data brings (schema drift: bronze, CDC silver): a column it holds
    # and the declaration does not name is not a dropped one.
    takes_data_columns: bool = False

    def __post_init__(self) -> None:
        validate_identifier(self.name, "table name")
        names = {f.name for f in self.schema.fields}
        for f in self.schema.fields:
            validate_identifier(f.name, f"column name in {self.name}")
        for transform in self.partitioned_by:
            source = transform_column(transform)
            if source not in names:
                raise ValueError(f"table {self.name}: partition column {source!r} is not in the schema")
        for new, old in self.renamed.items():
            if new.rsplit(".", 1)[0] != new and old.rsplit(".", 1)[0] != new.rsplit(".", 1)[0]:
                raise ValueError(f"table {self.name}: {old} -> {new} renames within one struct only")
            for part in (*new.split("."), *old.split(".")):
                validate_identifier(part, f"renamed column in {self.name}")
        if self.write_mode not in (COPY_ON_WRITE, MERGE_ON_READ):
            raise ValueError(f"table {self.name}: write_mode must be {COPY_ON_WRITE} or {MERGE_ON_READ}")

    @property
    def table_properties(self) -> dict[str, str]:
        props = {
            "format-version": "2",
            "write.parquet.compression-codec": "zstd",
            # Bronze is written once per landed line and holds the raw text: the fastest zstd level (close to
            # snappy's write time, smaller files); the default level 3 elsewhere. Its dictionaries are kept to
            # 128 KiB a column (Iceberg's default 2 MiB): a column of many distinct values (ids, addresses, raw
            # lines) falls back to plain pages early instead of probing a large dictionary for every row, which
            # took a quarter of the bronze write; a column of few values keeps its dictionary.
            **({"write.parquet.compression-level": "1", "write.parquet.dict-size-bytes": str(128 * 1024)}
               if self.layer == "bronze" else {}),
            "write.delete.mode": self.write_mode,
            "write.update.mode": self.write_mode,
            "write.merge.mode": self.write_mode,
            # Old metadata files are cleaned as commits accumulate.
            "write.metadata.delete-after-commit.enabled": "true",
            "write.metadata.previous-versions-max": "100",
        }
        props.update(self.properties)
        return props

    @property
    def column_names(self) -> list[str]:
        return [f.name for f in self.schema.fields]
