"""Forget's reading of a manifest's column bounds: whether the smallest and largest value it keeps of each column
name the person. Each bound is read as its column's type: a number as a number, text as a whole word, a JSON
column by the subject's field. No Spark: the data files and manifests are pyiceberg's, with its default bounds
(strings cut to 16 characters)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from lakehouse_assets.operations.forget import BoundJudge, Forget, Target, subject_targets
from lakehouse_assets.project import parse_project
from lakehouse_assets.runtime.resource import LakehouseResource

PROJECT = parse_project("""\
name: bounds
start_date: 2025-01-01
cdc:
  app:
    connector: postgresql
    database: app
    schema: public
    tables:
      accounts:
        primary_key: [account_id]
        columns: {account_id: long, name: string, email: string, day: string}
        subject: account_id
      contacts:
        primary_key: [contact_id]
        columns: {contact_id: long, email: string}
        subject: email
        pii: [email]
""")
SUBJECT_NUMBER = 28
HASHED = {"28": "9f2c" + "0" * 56 + "beef", "ana@example.com": "41d8cd98f00b204e9800998ecf8427e" + "0" * 33}

IMAGE = pa.struct([("account_id", pa.int64()), ("name", pa.string()), ("email", pa.string()), ("day", pa.string())])
BRONZE = pa.schema([("op", pa.string()), ("key", pa.string()), ("before", IMAGE), ("after", IMAGE),
                    ("payload", pa.string()), ("source_line", pa.int32()), ("source_lsn", pa.int64())])


def change(account: int, name: str, day: str = "2025-01-02", line: int = 1, op: str = "u", lsn: int = 10**9,
           email: str | None = None) -> dict:
    image = {"account_id": account, "name": name, "email": email or f"user{account}@example.com", "day": day}
    envelope = {"op": op, "before": image if op == "d" else None, "after": None if op == "d" else image}
    return {"op": op, "key": json.dumps({"account_id": account}, separators=(",", ":")),
            "before": envelope["before"], "after": envelope["after"],
            "payload": json.dumps({"schema": {"type": "struct"}, "payload": envelope}), "source_line": line,
            "source_lsn": lsn}


@pytest.fixture
def catalog(tmp_path):
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("lake")
    return catalog


def target(name: str, subject: str) -> Target:
    targets, _ = subject_targets(PROJECT, subject, HASHED[subject], lambda *_: ())
    return next(t for t in targets if t.table == name)


def one_file(catalog, name: str, schema: pa.Schema, rows: list[dict]):
    """A table of one data file holding `rows`, and that file's manifest entry (its bounds as pyiceberg kept them)."""
    table = catalog.create_table(("lake", name), schema=schema)
    table.append(pa.Table.from_pylist(rows, schema=schema))
    [manifest] = table.current_snapshot().manifests(table.io)
    [entry] = manifest.fetch_manifest_entry(table.io)
    return table, entry.data_file


def test_a_number_is_named_by_a_bound_equal_to_it_never_by_its_digits_in_other_values(catalog):
    subject = "28"
    bronze = target("bronze_cdc_accounts", subject)
    others = {
        # Digits of 28 in every other column and value: a longer id, a year, a date, a name, a line number, an LSN
        # whose bytes spell "28", e-mails.
        "128_and_2028": [change(128, "User 128", "2028-01-28", line=28, lsn=int.from_bytes(b"28282828", "little")),
                         change(2028, "Renamed 2028", "2028-12-28", line=29)],
        "128_alone": [change(128, "User 128", "2028-01-28", line=28)],
        "2028_deleted": [change(2028, "User 2028", op="d")],
        # The subject among others: the column's bounds are 1 and 200, which names no one.
        "many_with_28": [change(n, f"User {n}", line=n) for n in range(1, 201)],
    }
    naming = {
        "28_alone": [change(28, "Someone", line=3)],
        "28_deleted": [change(28, "Someone", op="d", line=3)],  # in the before image only
        "28_smallest": [change(28, "Someone"), change(77, "Other")],
        "200_and_28_largest": [change(28, "Someone"), change(3, "Other")],
    }
    for name, rows in {**others, **naming}.items():
        table, data_file = one_file(catalog, f"bronze_{name}", BRONZE, rows)
        judge = BoundJudge.of(table, bronze, subject, HASHED[subject])
        assert judge.names(data_file) is (name in naming), name


def test_a_json_key_column_names_the_number_in_the_subjects_field_even_cut_to_16_characters(catalog):
    subject = "28"
    key_only = pa.schema([("key", pa.string()), ("payload", pa.string())])
    # The subject's key is 17 characters: cut to 16, it is the cut key of 280 too, which may be theirs.
    for key, names in [('{"account_id":28}', True), ('{"account_id":280}', True), ('{"account_id":128}', False),
                       ('{"order_id":28}', False), ('{"account_id":2}', False), ('{"id":28,"n":1}', False)]:
        table, data_file = one_file(catalog, f"keys_{abs(hash(key))}", key_only, [{"key": key, "payload": "x"}])
        bound = data_file.lower_bounds[table.schema().find_field("key").field_id]
        assert len(bound) <= 16  # a key longer than that was cut
        assert BoundJudge.of(table, target("bronze_cdc_accounts", subject), subject, HASHED[subject]).names(
            data_file) is names, key


def test_silver_of_a_number_subject_compares_numbers_and_the_pseudonym_stays_found_cut_to_16(catalog):
    subject = "28"
    silver = pa.schema([("account_id", pa.int64()), ("name", pa.string()), ("note", pa.string())])
    cases = {
        "alone": ([{"account_id": 28, "name": "User 28", "note": "x"}], True),
        "others": ([{"account_id": 128, "name": "User 28 (a namesake)", "note": "28"},
                    {"account_id": 2028, "name": "2028-01-28", "note": "order 28"}], False),
        # A pseudonym is 64 characters: its bound is its start; in any text column it names the person.
        "pseudonym": ([{"account_id": 5, "name": "x", "note": HASHED[subject]}], True),
    }
    for name, (rows, names) in cases.items():
        table, data_file = one_file(catalog, f"silver_{name}", silver, rows)
        judge = BoundJudge.of(table, target("silver_accounts", subject), subject, HASHED[subject])
        assert judge.names(data_file) is names, name


def test_a_text_subject_is_named_as_a_whole_word_in_any_text_column_and_by_its_cut_start(catalog):
    subject = "ana@example.com"
    contacts = pa.schema([("contact_id", pa.int64()), ("email_hash", pa.string()), ("comment", pa.string())])
    cases = {
        "their_hash": ([{"contact_id": 1, "email_hash": HASHED[subject], "comment": "-"}], True),
        "said_in_a_comment": ([{"contact_id": 2, "email_hash": "0" * 64, "comment": "from ana@example.com"}], True),
        # Cut to 16 characters: the bound ends in the subject's first characters.
        "cut": ([{"contact_id": 3, "email_hash": "0" * 64, "comment": "mail ana@example.com again"}], True),
        "another_person": ([{"contact_id": 4, "email_hash": "1" * 64, "comment": "hana@example.com"}], False),
        "another_domain": ([{"contact_id": 5, "email_hash": "2" * 64, "comment": "ana@example.community"}], False),
    }
    for name, (rows, names) in cases.items():
        table, data_file = one_file(catalog, f"contacts_{name}", contacts, rows)
        judge = BoundJudge.of(table, target("silver_contacts", subject), subject, HASHED[subject])
        assert judge.names(data_file) is names, name


def test_forget_expires_the_snapshots_whose_manifests_keep_a_file_of_the_person_read_or_judged_by_its_bounds(
        catalog, tmp_path):
    """A manifest keeps the bounds of files no snapshot references any more. Such a file still stored is read: the
    subject's lone row makes its manifests name them, 280's row (its key cut to 16 characters looks like 28's)
    does not. A file that is gone is judged by its bounds: 28's names them, never 128's or 2028's."""
    table = catalog.create_table(("lake", "bronze_cdc_accounts"), schema=BRONZE)
    snapshots = {}
    for account in (128, 2028, 280, SUBJECT_NUMBER):
        table.append(pa.Table.from_pylist([change(account, f"User {account}", "2028-01-28", line=28)], schema=BRONZE))
        snapshots[account] = table.current_snapshot().snapshot_id
    files = {a: next(e.data_file.file_path for m in table.snapshot_by_id(s).manifests(table.io)
                     for e in m.fetch_manifest_entry(table.io) if e.snapshot_id == s) for a, s in snapshots.items()}
    forget = Forget(LakehouseResource(home=str(tmp_path), namespace="lake"), PROJECT, log=lambda _: None)
    forget._subject, forget._hashed = "28", HASHED["28"]
    bronze = target("bronze_cdc_accounts", "28")

    # Every file still stored, none live in a kept snapshot as the purge sees it: each is read.
    assert forget._snapshots_naming(table, bronze, live=set(), held=set()) == {snapshots[SUBJECT_NUMBER]}
    # Read as the purge read them: the subject's file held, the others clean.
    assert forget._snapshots_naming(table, bronze, live=set(files.values()), held={files[SUBJECT_NUMBER]}) == \
        {snapshots[SUBJECT_NUMBER]}
    # Gone (expired long ago, their entries still in a manifest): judged by the bounds, 280's cut key with them.
    for path in files.values():
        (tmp_path / path.removeprefix(f"file://{tmp_path}/")).unlink()
    assert forget._snapshots_naming(table, bronze, live=set(), held=set()) == {snapshots[280], snapshots[SUBJECT_NUMBER]}


def test_a_number_subject_is_matched_in_its_field_of_a_raw_line_only_and_not_at_all_where_it_cannot_be():
    targets, left = subject_targets(PROJECT, "28", HASHED["28"], lambda *_: ())
    [quarantine] = [t for t in targets if t.table == "bronze_cdc_accounts_quarantine"]
    lines = [json.dumps({"payload": {"after": {"account_id": 28, "name": "x"}}}),
             json.dumps({"payload": {"after": {"account_id": 128, "name": "User 28", "order": 28}}}),
             '{"payload": {"after": {"account_id": 28, "na']  # cut off
    data = pa.table({"payload": lines})
    assert quarantine.count(data) == 2
    assert [quarantine.names_line([line]) for line in lines] == [True, False, True]
    # The contacts' subject is text: their tables are searched for the number as a whole word.
    assert "silver_contacts" in {t.table for t in targets}
    # A subject that is not a number cannot be in a number column: those tables are left alone, and say why.
    _, left = subject_targets(PROJECT, "ana@example.com", HASHED["ana@example.com"], lambda *_: ())
    assert left["silver_accounts"] == "its subject column account_id is a number and the subject is not"
