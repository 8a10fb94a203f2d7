"""Names and values that reach SQL: each place a name or a value enters from outside (the declaration, the
settings, run ids, partition keys, landing folders, the values `lakehouse forget` looks for) is tried with an
injection, and each is refused or carried as data, never as SQL text."""

import copy
import re

import pytest
import yaml

from lakehouse_assets.errors import DeclarationError
from lakehouse_assets.landing.zones import landing_day
from lakehouse_assets.ml.pinning import pin_snapshots
from lakehouse_assets.operations.forget import Equals
from lakehouse_assets.project import parse_project
from lakehouse_assets.settings import Settings
from lakehouse_assets.tables.registry import transform_column

from ..shop import SHOP_FILE

HOSTILE = ["x`; DROP TABLE t; --", "a b", "x'--", 'q"q', "1st", "ok;", "t)", "née", ""]


def _rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


# Each slot: (what the refusal names, how to put the hostile text there).
SLOTS = {
    "project name": lambda d, x: d.__setitem__("name", x),
    "event source name": lambda d, x: _rename(d["events"], "events", x),
    "field name": lambda d, x: d["events"]["events"]["fields"].__setitem__(x, "string"),
    "rule name": lambda d, x: d["events"]["events"]["rules"][0].__setitem__("name", x),
    "rule field": lambda d, x: d["events"]["events"]["rules"][0].__setitem__("field", x),
    "event key": lambda d, x: d["events"]["events"].__setitem__("key", x),
    "CDC source name": lambda d, x: _rename(d["cdc"], "shop", x),
    "CDC server": lambda d, x: d["cdc"]["shop"].__setitem__("server", x),
    "CDC schema": lambda d, x: d["cdc"]["shop"].__setitem__("schema", x),
    "CDC table name": lambda d, x: _rename(d["cdc"]["shop"]["tables"], "customers", x),
    "CDC column name": lambda d, x: d["cdc"]["shop"]["tables"]["customers"]["columns"].__setitem__(x, "string"),
    "primary key": lambda d, x: d["cdc"]["shop"]["tables"]["customers"].__setitem__("primary_key", [x]),
    "CDC partition": lambda d, x: d["cdc"]["shop"]["tables"]["customers"].__setitem__("partition", [x]),
    "gold table name": lambda d, x: _rename(d["gold"]["tables"], "gold_daily_product_revenue", x),
    "gold column name": lambda d, x: d["gold"]["tables"]["gold_daily_product_revenue"]["columns"].__setitem__(
        x, "string"),
    "gold partition column": lambda d, x: d["gold"]["tables"]["gold_daily_product_revenue"].__setitem__(
        "partitioned_by", [x]),
}


@pytest.mark.parametrize("slot", sorted(SLOTS))
def test_every_name_a_declaration_gives_is_refused_unless_it_is_a_plain_identifier(slot):
    document = yaml.safe_load(SHOP_FILE.read_text())
    parse_project(yaml.safe_dump(document), str(SHOP_FILE))  # the declaration as it is loads
    for hostile in HOSTILE:
        mutated = copy.deepcopy(document)
        SLOTS[slot](mutated, hostile)
        with pytest.raises(DeclarationError) as refused:
            parse_project(yaml.safe_dump(mutated), str(SHOP_FILE))
        assert refused.value.line is not None, (slot, hostile, str(refused.value))


@pytest.mark.parametrize("hostile", HOSTILE)
def test_settings_partition_transforms_and_run_ids_refuse_what_is_not_an_identifier(hostile, tmp_path):
    for field in ("namespace", "catalog_name"):
        with pytest.raises(ValueError, match="letters, digits and underscores only"):
            Settings(home=tmp_path, **{field: hostile})
    with pytest.raises(ValueError, match="invalid partition transform"):
        transform_column(f"days({hostile})")
    if re.search(r"[^A-Za-z0-9_-]", hostile):  # a run id becomes part of a pin tag, and these cannot
        with pytest.raises(ValueError, match="invalid pin tag"):
            pin_snapshots(None, f"run{hostile}", "asset", {"lakehouse.lake.t": 1})  # type: ignore[arg-type]


def test_landing_folders_that_are_not_days_are_no_partition_keys():
    """Partition keys come from `date=YYYY-MM-DD` folders; anything else there is not a day, so not a key."""
    assert str(landing_day("s3://lake/landing/events/date=2025-01-02/a.jsonl")) == "2025-01-02"
    for folder in ("date=2025-01-02'; DROP TABLE t; --", "date=2025-13-40", "date=2025-01-02 OR 1=1"):
        assert landing_day(f"s3://lake/landing/events/{folder}/a.jsonl") is None, folder


@pytest.mark.parametrize("value", ["x') OR 1=1 --", "a'b", "\\'; DROP TABLE t; --", "`", "née"])
def test_values_lakehouse_forget_looks_for_reach_sql_as_hex_never_as_text(value):
    statement = Equals(("user_id",), (value,)).sql()
    assert statement.startswith("CAST(`user_id` AS STRING) IN (decode(unhex('")
    literals = re.findall(r"unhex\('([0-9a-f]*)'\)", statement)
    assert [bytes.fromhex(h).decode("utf-8") for h in literals] == [value]
    assert "'" not in re.sub(r"unhex\('[0-9a-f]*'\)|'UTF-8'", "", statement)  # no quote but the literals' own
    with pytest.raises(ValueError):
        Equals(("user_id`; DROP TABLE t; --",), ("x",)).sql()
