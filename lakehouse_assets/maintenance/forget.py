"""Right to be forgotten, with proof: a person's rows out of every table, and out of every file still kept.

A DELETE only hides rows: older snapshots (and, on merge-on-read tables, the
data files under a delete file) still hold them. `forget` therefore:

1. finds where the subject can be: for each event source with a user field,
   its bronze (typed field and raw payload), quarantine (raw line), silver (the
   field or its pseudonym), rejected (the subject's event keys), gold sessions
   and the ML tables; for each CDC table declaring a `subject:` column, its
   bronze (before/after images, key and payload), quarantine, current state and
   history. Aggregates (per minute, per day, SQL gold) hold no person and are
   left alone: the report names them.
2. deletes the matching rows from each table (upstream first, so a concurrent
   recompute cannot bring them back), then rewrites every data file that a
   delete file points at, without the deleted rows;
3. reads every data file any kept snapshot references, directly with pyarrow
   (no Iceberg reader, no delete files applied), and finds those still holding
   a row of the subject; removes the tags and write branches that keep such
   files alive, except tags named `legal_hold*`, which it keeps and reports;
   expires exactly the snapshots that reference such files, and Iceberg removes
   the files no snapshot references any more;
4. proves it: the same direct read over every live data file, the files
   scanned, and the rows of the subject found (zero, outside legal holds).

The subject's value never enters SQL text: it is written as a hex literal.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table

from ..errors import MaintenanceError
from ..project import Project
from ..runtime.pii import keyed_hash_of, pii_key
from ..runtime.resource import LakehouseResource
from ..settings import validate_identifier
from .health import file_paths, files_of
from .procedures import retry_on_conflict

LEGAL_HOLD = "legal_hold"


def sql_text(value: str) -> str:
    """A Spark SQL string literal for any text: hex digits only in the statement."""
    return f"decode(unhex('{value.encode('utf-8').hex()}'), 'UTF-8')"


@dataclass(frozen=True)
class Equals:
    """A (possibly nested) column whose text equals one of `values`."""

    path: tuple[str, ...]
    values: tuple[str, ...]

    def sql(self) -> str:
        column = ".".join(f"`{validate_identifier(p, 'column')}`" for p in self.path)
        return f"CAST({column} AS STRING) IN ({', '.join(sql_text(v) for v in self.values)})"

    def columns(self) -> set[str]:
        return {self.path[0]}

    def mask(self, data: pa.Table) -> pa.Array:
        column = data.column(self.path[0]).combine_chunks()
        for part in self.path[1:]:
            column = pc.struct_field(column, part)
        return pc.fill_null(pc.is_in(pc.cast(column, pa.string()), pa.array(list(self.values), pa.string())), False)


@dataclass(frozen=True)
class Mentions:
    """A raw JSON text column in which a field named `field` holds the subject (quoted or not)."""

    column: str
    field: str
    subject: str

    @property
    def pattern(self) -> str:
        return rf'"{re.escape(self.field)}"\s*:\s*"?{re.escape(self.subject)}"?\s*[,}}\]]'

    def sql(self) -> str:
        return f"`{validate_identifier(self.column, 'column')}` RLIKE {sql_text(self.pattern)}"

    def columns(self) -> set[str]:
        return {self.column}

    def mask(self, data: pa.Table) -> pa.Array:
        return pc.fill_null(pc.match_substring_regex(data.column(self.column), self.pattern), False)


@dataclass
class Target:
    table: str
    matchers: list[Equals | Mentions]
    why: str

    def sql(self) -> str:
        return " OR ".join(f"({m.sql()})" for m in self.matchers)

    def columns(self) -> list[str]:
        return sorted(set().union(*(m.columns() for m in self.matchers)))

    def count(self, data: pa.Table) -> int:
        mask = None
        for m in self.matchers:
            mask = m.mask(data) if mask is None else pc.or_(mask, m.mask(data))
        return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0) if mask is not None else 0


@dataclass
class TableProof:
    table: str
    why: str
    rows_deleted: int = 0
    files_rewritten: int = 0
    tags_removed: list[str] = field(default_factory=list)
    branches_removed: list[str] = field(default_factory=list)
    snapshots_expired: list[int] = field(default_factory=list)
    legal_holds: dict[str, int] = field(default_factory=dict)  # tag -> files still holding the subject
    live_files_scanned: int = 0
    rows_found_after: int = 0


@dataclass
class ForgetReport:
    subject: str
    tables: list[TableProof] = field(default_factory=list)
    left_alone: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def purged(self) -> bool:
        return all(t.rows_found_after == 0 for t in self.tables)

    def as_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "purged": self.purged,
            "rows_deleted": sum(t.rows_deleted for t in self.tables),
            "live_files_scanned": sum(t.live_files_scanned for t in self.tables),
            "rows_found_after": sum(t.rows_found_after for t in self.tables),
            "tables": [t.__dict__ for t in self.tables],
            "left_alone": self.left_alone,
            "seconds": round(self.seconds, 2),
        }


def subject_targets(project: Project, subject: str, hashed: str,
                    event_keys: Callable[[str, str, str], tuple[str, ...]]) -> tuple[list[Target], dict[str, str]]:
    """Where the subject can be, upstream first; and the tables left alone, with why.

    `hashed` is the subject's pseudonym (runtime/pii.py), what silver keeps of a personal-data column.
    `event_keys(bronze, user column, key column)` gives the keys of the subject's events (read before any delete).
    """
    def values(pseudonymised: bool) -> tuple[str, ...]:
        return (hashed,) if pseudonymised else (subject,)

    targets: list[Target] = []
    left: dict[str, str] = {}
    for source in project.events.values():
        if source.user is None:
            left.update({t: "the event source declares no user field" for t in source.table_names})
            continue
        user_field = source.paths.get(source.user, source.user).split(".")[-1]
        mention = Mentions("payload", user_field, subject)
        keys = event_keys(source.bronze, source.user, source.key)
        targets += [
            Target(source.bronze, [Equals((source.user,), (subject,)), mention], "events of the subject, raw payload"),
            Target(source.quarantine, [mention], "raw lines naming the subject"),
        ]
        targets.append(Target(source.silver, [Equals((source.silver_column(source.user),),
                                                     values(source.user in source.pii))], "the subject's events"))
        if keys:
            targets.append(Target(source.rejected, [Equals((source.key,), keys)], "the subject's rejected events"))
        else:
            left[source.rejected] = "no event of the subject in bronze"
    gold = project.gold
    if gold.events is not None and gold.events.user is not None:
        for name in gold.per_user_tables:
            targets.append(Target(name, [Equals(("user_id",), values(gold.events.user in gold.events.pii))],
                                  "rows per user"))
        for name in gold.event_tables:
            if name not in gold.per_user_tables:
                left[name] = "an aggregate over users: holds no person"
    for name in gold.sql_tables:
        left[name] = "a declared SQL aggregate: holds no person"
    for table in project.cdc.values():
        if table.subject is None:
            left.update({t: "the CDC table declares no subject column" for t in table.table_names})
            continue
        c = table.subject
        mentions = [Mentions("payload", c, subject), Mentions("key", c, subject)]
        silver = Equals((table.silver_column(c),), values(c in table.pii))
        targets += [
            Target(table.bronze, [Equals(("after", c), (subject,)), Equals(("before", c), (subject,)), *mentions],
                   "changes of the subject's rows"),
            Target(table.quarantine, [Mentions("payload", c, subject)], "raw change events naming the subject"),
            Target(table.silver, [silver], "the subject's current rows"),
            Target(table.history, [silver], "every version of the subject's rows"),
        ]
    return targets, left


def _read_file(table: Table, path: str, columns: list[str]) -> pa.Table:
    """A data file's rows as written (delete files not applied), straight from storage."""
    with table.io.new_input(path).open() as f:
        return pq.read_table(f, columns=columns)


def _files_with_subject(table: Table, target: Target, paths: list[str]) -> dict[str, int]:
    found = {}
    for path in paths:
        rows = target.count(_read_file(table, path, target.columns()))
        if rows:
            found[path] = rows
    return found


def _live_data_files(table: Table) -> list[str]:
    """Every data file any kept snapshot references (what a reader at any retained point could see)."""
    manifests = {m.manifest_path: m for s in table.metadata.snapshots for m in s.manifests(table.io)
                 if m.content == ManifestContent.DATA}
    return sorted({entry.data_file.file_path for m in manifests.values()
                   for entry in m.fetch_manifest_entry(table.io, discard_deleted=True)})


class Forget:
    def __init__(self, lakehouse: LakehouseResource, project: Project, log: Callable[[str], None] = print):
        self.lakehouse, self.project, self.log = lakehouse, project, log

    @property
    def spark(self):
        return self.lakehouse.spark

    def _exists(self, name: str) -> bool:
        return self.lakehouse.catalog.table_exists((self.lakehouse.settings.namespace, name))

    def _event_keys(self, bronze: str, user: str, key: str) -> tuple[str, ...]:
        if not self._exists(bronze):
            return ()
        rows = self.spark.table(self.lakehouse.table_id(bronze)).where(
            Equals((user,), (self._subject,)).sql()).select(key).distinct().collect()
        return tuple(str(r[0]) for r in rows if r[0] is not None)

    def run(self, subject: str, dry_run: bool = False) -> ForgetReport:
        if not subject or len(subject) > 1000:
            raise ValueError("a subject id is 1 to 1000 characters")
        started = time.monotonic()
        self._subject = subject
        hashed = keyed_hash_of(subject, pii_key(self.lakehouse.settings))
        targets, left = subject_targets(self.project, subject, hashed, self._event_keys)
        report = ForgetReport(subject, left_alone=left)
        checked = []
        for target in targets:
            if not self._exists(target.table):
                report.left_alone[target.table] = "not materialised"
                continue
            proof = TableProof(target.table, target.why)
            proof.rows_deleted = self.spark.table(self.lakehouse.table_id(target.table)).where(target.sql()).count()
            if not dry_run:
                self._purge(target, proof)
            report.tables.append(proof)
            checked.append((target, proof))
        for target, proof in checked:
            table = self.lakehouse.iceberg_table(target.table)
            live = _live_data_files(table)
            proof.live_files_scanned = len(live)
            proof.rows_found_after = sum(_files_with_subject(table, target, live).values())
            if proof.legal_holds:
                proof.rows_found_after -= self._held_rows(table, target, proof)
        report.seconds = time.monotonic() - started
        return report

    def _held_rows(self, table: Table, target: Target, proof: TableProof) -> int:
        """Rows of the subject only in files a legal-hold tag keeps (reported, not counted as a failure)."""
        held: set[str] = set()
        for tag in proof.legal_holds:
            ref = table.metadata.refs.get(tag)
            if ref is not None:
                held.update(file_paths(table, ref.snapshot_id))
        on_main = file_paths(table)
        return sum(_files_with_subject(table, target, sorted(held - on_main)).values())

    def _retry(self, action: Callable[[], Any], what: str) -> Any:
        return retry_on_conflict(action, f"forget: {what}", self.log)[0]

    def _purge(self, target: Target, proof: TableProof) -> None:
        spark, settings = self.spark, self.lakehouse.settings
        table_id = self.lakehouse.table_id(target.table)
        catalog = validate_identifier(settings.catalog_name, "catalog name")
        procedure_table = f"'{validate_identifier(settings.namespace, 'namespace')}.{target.table}'"
        if proof.rows_deleted:
            self._retry(lambda: spark.sql(f"DELETE FROM {table_id} WHERE {target.sql()}"), f"DELETE from {table_id}")
        table = self.lakehouse.iceberg_table(target.table)
        # Rows hidden by delete files are still in their data files: rewrite those files without them.
        if files_of(table, data=False):
            rows = self._retry(lambda: spark.sql(
                f"CALL {catalog}.system.rewrite_data_files(table => {procedure_table}, options => map("
                "'delete-file-threshold', '1', 'min-input-files', '1', 'remove-dangling-deletes', 'true'))"
            ).collect(), f"rewrite of {table_id}")
            proof.files_rewritten = int(rows[0]["rewritten_data_files_count"] or 0) if rows else 0
            table = self.lakehouse.iceberg_table(target.table)
        dirty = _files_with_subject(table, target, _live_data_files(table))
        if not dirty:
            return
        if set(dirty) & file_paths(table):
            raise MaintenanceError(f"forget: {table_id} still holds the subject in files of its current snapshot "
                                   "after the delete; nothing was expired")
        holding = [s.snapshot_id for s in table.metadata.snapshots if set(dirty) & file_paths(table, s.snapshot_id)]
        for name, ref in list(table.metadata.refs.items()):
            if name == "main" or ref.snapshot_id not in holding:
                continue
            if ref.snapshot_ref_type == "tag" and name.startswith(LEGAL_HOLD):
                proof.legal_holds[name] = len(set(dirty) & file_paths(table, ref.snapshot_id))
                continue
            kind = "TAG" if ref.snapshot_ref_type == "tag" else "BRANCH"
            spark.sql(f"ALTER TABLE {table_id} DROP {kind} IF EXISTS `{validate_identifier(name, 'ref name')}`")
            (proof.tags_removed if kind == "TAG" else proof.branches_removed).append(name)
        held = {self.lakehouse.iceberg_table(target.table).metadata.refs[t].snapshot_id for t in proof.legal_holds}
        expire = sorted(set(holding) - held)
        if expire:
            ids = ", ".join(str(int(i)) for i in expire)
            self._retry(lambda: spark.sql(
                f"CALL {catalog}.system.expire_snapshots(table => {procedure_table}, snapshot_ids => array({ids}))"
            ).collect(), f"expiry of {table_id}")
            proof.snapshots_expired = expire
        self.log(f"forget: {table_id}: {proof.rows_deleted} rows deleted, {len(dirty)} files held the subject, "
                 f"{len(expire)} snapshots expired, {len(proof.tags_removed)} tags removed")


def proof_json(report: ForgetReport) -> str:
    return json.dumps(report.as_dict(), indent=2, default=str)
