"""The CDC sample generator is reproducible, reports exactly what it wrote, and its true state is right.

The replay here reads only the files, as a consumer would: it knows the
Debezium envelope and the position fields, not the generator's internals.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import pytest

from examples.shop.cdc_generator import CDC_TABLES, DRIFT_COLUMNS, MALFORMED_KINDS, generate_cdc

DAYS = [dt.date(2025, 3, 1), dt.date(2025, 3, 2), dt.date(2025, 3, 3)]
OPS = {"c", "u", "d", "r"}
LIMIT = 64 * 1024
KEYS = {"customers": ("customer_id",), "orders": ("order_id",), "order_items": ("order_id", "line_no")}


def _position(source: dict, op: str = "c") -> tuple[int, ...] | None:
    """Commit order as the connectors define it (snapshot rows first, then PostgreSQL's sequence)."""
    if source.get("connector") == "mysql":
        file, pos, row = source.get("file"), source.get("pos"), source.get("row")
        if not (isinstance(file, str) and isinstance(pos, int) and isinstance(row, int)):
            return None
        return (int(file.rsplit(".", 1)[1]), pos, row)
    if source.get("connector") == "postgresql":
        lsn = source.get("lsn")
        if not (isinstance(lsn, int) and isinstance(source.get("txId"), int)):
            return None
        if op == "r":
            return (lsn, 0)
        last_commit = json.loads(source["sequence"])[0]
        return (int(last_commit) if last_commit is not None else lsn, lsn)
    return None


def _order(env: dict) -> tuple[int, ...]:
    position = _position(env["source"], env["op"])
    assert position is not None
    return position


def _identity(table: str, env: dict) -> tuple:
    """What identifies a change: its key, position and op (snapshot rows share a position)."""
    image = env["before"] if env["op"] == "d" else env["after"]
    return (_key(table, image), _order(env), env["op"])


def _key(table: str, image: dict) -> tuple | None:
    key = tuple(image.get(c) for c in KEYS[table])
    return key if all(isinstance(v, int) and not isinstance(v, bool) for v in key) else None


def parse_line(table: str, line: str):
    """("tombstone", None) | ("bad", None) | ("ok", (envelope, wrapped))."""
    if line == "null":
        return "tombstone", None
    if len(line.encode()) > LIMIT:
        return "bad", None
    try:
        doc = json.loads(line)
    except ValueError:
        return "bad", None
    if not isinstance(doc, dict):
        return "bad", None
    wrapped = "payload" in doc and "schema" in doc
    env = doc["payload"] if wrapped else doc
    if wrapped and not isinstance(doc["schema"], dict):
        return "bad", None
    if not isinstance(env, dict) or env.get("op") not in OPS or not isinstance(env.get("ts_ms"), int):
        return "bad", None
    source = env.get("source")
    if not isinstance(source, dict) or source.get("table") != table or _position(source) is None:
        return "bad", None
    before, after, op = env.get("before"), env.get("after"), env["op"]
    if not all(img is None or isinstance(img, dict) for img in (before, after)):
        return "bad", None
    if op == "d":
        if after is not None or before is None or _key(table, before) is None:
            return "bad", None
    elif after is None or _key(table, after) is None or (op == "u" and before is None) or (op in "cr" and before):
        return "bad", None
    return "ok", (env, wrapped)


def read_folder(root: Path, table: str, day: dt.date) -> list[tuple[str, list[str]]]:
    folder = root / "cdc" / table / f"date={day.isoformat()}"
    return [(p.name, p.read_text().split("\n")[:-1]) for p in sorted(folder.glob("*.jsonl"))]


def consume(root: Path, days=DAYS) -> dict[str, list[dict]]:
    """Every table's distinct well-formed changes, in file order (days, files, lines)."""
    seen: dict[str, dict[tuple, dict]] = {t: {} for t in KEYS}
    for table in KEYS:
        for day in days:
            for _, lines in read_folder(root, table, day):
                for line in lines:
                    status, parsed = parse_line(table, line)
                    if status == "ok":
                        env = parsed[0]
                        seen[table].setdefault(_identity(table, env), env)
    return {t: list(envs.values()) for t, envs in seen.items()}


def replay(envelopes: list[dict]) -> dict[tuple, dict]:
    state: dict[tuple, dict] = {}
    table = envelopes[0]["source"]["table"]
    for env in sorted(envelopes, key=_order):
        if env["op"] == "d":
            state.pop(_key(table, env["before"]), None)
        else:
            state[_key(table, env["after"])] = env["after"]
    return state


def commit_day(env: dict) -> dt.date:
    return dt.datetime.fromtimestamp(env["source"]["ts_ms"] / 1000, dt.timezone.utc).date()


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("cdc")
    return root, generate_cdc(root, DAYS, changes_per_day=300, drift_day=DAYS[1], duplicate_rate=0.05)


def test_same_arguments_same_bytes(tmp_path):
    a = generate_cdc(tmp_path / "a", DAYS[:2], changes_per_day=150, malformed_rate=0.05)
    b = generate_cdc(tmp_path / "b", DAYS[:2], changes_per_day=150, malformed_rate=0.05)
    files_a = [f for d in a.days for f in d.files]
    files_b = [f for d in b.days for f in d.files]
    assert [f.relative_to(tmp_path / "a") for f in files_a] == [f.relative_to(tmp_path / "b") for f in files_b]
    assert [f.read_bytes() for f in files_a] == [f.read_bytes() for f in files_b]
    assert a.true_state == b.true_state


def test_regenerating_a_past_day_leaves_its_files_as_they_landed(tmp_path):
    first = generate_cdc(tmp_path, DAYS[:1], changes_per_day=100, files_per_day=5)
    landed = _files(tmp_path)
    again = generate_cdc(tmp_path, DAYS[:1], changes_per_day=100, files_per_day=2)
    assert _files(tmp_path) == landed and len(landed) == 15
    assert all(not d.files for d in again.days) and all(len(d.files) == 5 for d in first.days)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _changes(files: dict[str, bytes]) -> Counter:
    """Deliveries of each well-formed change (by key, position and op) in `files`."""
    found: Counter = Counter()
    for name, data in files.items():
        table = name.split("/")[1]
        for line in data.decode().splitlines():
            status, parsed = parse_line(table, line)
            if status == "ok":
                found[(table, _identity(table, parsed[0]))] += 1
    return found


def test_runs_later_the_same_day_and_the_next_add_only_new_changes_in_new_files(tmp_path):
    """A day under way holds the changes committed until a few minutes before the run; a later run keeps every
    landed file byte for byte and writes the changes committed since (and, the next day, the rest of yesterday)
    into new files, each change once: together they hold what one run over all the days holds."""
    live, today = tmp_path / "live", DAYS[2]
    at = [dt.datetime.combine(today, dt.time(10), dt.timezone.utc),
          dt.datetime.combine(today, dt.time(16), dt.timezone.utc),
          dt.datetime.combine(today + dt.timedelta(days=1), dt.time(9), dt.timezone.utc)]
    runs = [DAYS, DAYS, [*DAYS[1:], today + dt.timedelta(days=1)]]
    landed: dict[str, bytes] = {}
    for n, (days, now) in enumerate(zip(runs, at)):
        generated = generate_cdc(live, days, changes_per_day=150, now=now)
        files = _files(live)
        assert {k: files[k] for k in landed} == landed, "a landed file was written again"
        new = {k: v for k, v in files.items() if k not in landed}
        if n > 0:  # after the first run: only files named after the run's time, or of a day new to the zone
            stamp = now.strftime("%Y%m%dT%H%M%S")
            assert all(k.endswith(f"changes-{stamp}.jsonl") or "date=2025-03-04" in k for k in new), sorted(new)
            assert new and not set(_changes(new)) & set(_changes(landed)), "a change was delivered again"
        assert sorted(str(f.relative_to(live)) for d in generated.days for f in d.files) == sorted(new)
        committed = [c for c in generated.history if c.commit_day == today and c.op != "r"]
        assert max(c.source["ts_ms"] for c in committed) <= now.timestamp() * 1000
        landed = files
    again = generate_cdc(live, runs[-1], changes_per_day=150, now=at[-1])
    assert not any(d.files for d in again.days) and _files(live) == landed

    whole = tmp_path / "whole"
    generate_cdc(whole, [*DAYS, today + dt.timedelta(days=1)], changes_per_day=150, now=at[-1])
    assert set(_changes(landed)) == set(_changes(_files(whole)))
    with pytest.raises(ValueError, match="history runs from 2025-03-01"):
        generate_cdc(live, [DAYS[0] - dt.timedelta(days=1)], changes_per_day=150, now=at[-1])


def test_counts_match_the_files_line_by_line(lake):
    root, gen = lake
    for day in gen.days:
        assert day.files, (day.table, day.day)
        raw = [f.read_bytes() for f in day.files]
        assert all(b.endswith(b"\n") and not b.endswith(b"\n\n") and b"\r" not in b for b in raw)
        counts, positions = Counter(), Counter()
        for _, lines in read_folder(root, day.table, day.day):
            for line in lines:
                status, parsed = parse_line(day.table, line)
                counts[status] += 1
                if status == "ok":
                    positions[_identity(day.table, parsed[0])] += 1
        assert day.lines == sum(counts.values())
        assert day.lines == day.changes + day.duplicates + day.tombstones + sum(day.malformed.values())
        assert counts["tombstone"] == day.tombstones
        assert counts["bad"] == sum(day.malformed.values())
        assert len(positions) == day.changes
        assert sum(positions.values()) - len(positions) == day.duplicates
    assert sum(d.duplicates for d in gen.days) > 0
    assert sum(d.tombstones for d in gen.days) > 0


def test_every_good_line_is_a_debezium_envelope(lake):
    root, _ = lake
    forms = Counter()
    for table, info in CDC_TABLES.items():
        for day in DAYS:
            for _, lines in read_folder(root, table, day):
                for line in lines:
                    status, parsed = parse_line(table, line)
                    if status != "ok":
                        continue
                    env, wrapped = parsed
                    forms[wrapped] += 1
                    if wrapped:
                        doc = json.loads(line)
                        assert doc["schema"]["type"] == "struct"
                        assert [f["field"] for f in doc["schema"]["fields"]][:3] == ["before", "after", "source"]
                    src = env["source"]
                    assert src["connector"] == info.connector and src["version"] == "2.7.0.Final"
                    assert src["snapshot"] in ("first", "true", "last", "false")
                    assert (src["snapshot"] != "false") == (env["op"] == "r")
                    if info.connector == "postgresql":
                        assert (src["name"], src["db"], src["schema"]) == ("shop", "shop", "public")
                    else:
                        assert (src["name"], src["db"]) == ("fulfilment", "fulfilment")
                        assert src["file"].startswith("mysql-bin.") and src["row"] >= 0
                    for image in (env["before"], env["after"]):
                        if image is not None:
                            assert set(info.columns) <= set(image) <= set(info.columns) | set(DRIFT_COLUMNS.get(table, {}))
    assert forms[True] > 0 and forms[False] > 0


def test_positions_give_the_true_order_and_the_files_do_not(lake):
    root, _ = lake
    changes = consume(root)
    pg = sorted(changes["customers"] + changes["orders"], key=_order)
    snapshot = [e for e in pg if e["op"] == "r"]
    assert snapshot and pg[: len(snapshot)] == snapshot, "snapshot rows come before every streamed change"
    assert len({e["source"]["lsn"] for e in snapshot}) == 1, "a snapshot shares one position, as the connector sends it"
    streamed = pg[len(snapshot):]
    shared = Counter(e["source"]["lsn"] for e in streamed)
    pairs = [[e["op"] for e in streamed if e["source"]["lsn"] == lsn] for lsn, n in shared.items() if n > 1]
    assert pairs and all(sorted(p) == ["c", "d"] for p in pairs), "only a key change's delete and create share an LSN"
    assert [e["source"]["txId"] for e in pg] == sorted(e["source"]["txId"] for e in pg)
    for table, envs in changes.items():
        true_order = sorted(envs, key=_order)
        commits = [e["source"]["ts_ms"] for e in true_order if e["op"] != "r"]  # snapshot rows: read times
        assert commits == sorted(commits), table
        assert [e["op"] for e in true_order[: sum(e["op"] == "r" for e in envs)]] == ["r"] * sum(
            e["op"] == "r" for e in envs
        )
        assert envs != true_order, f"{table} files are in true order"
        by_processing = sorted(envs, key=lambda e: (e["ts_ms"], _order(e)))
        assert by_processing != true_order, f"{table} ts_ms gives the true order"
    binlogs = {e["source"]["file"] for e in changes["order_items"]}
    assert len(binlogs) > 1
    rows = Counter((e["source"]["file"], e["source"]["pos"]) for e in changes["order_items"])
    assert max(rows.values()) > 1  # multi-row binlog events


def test_late_changes_land_in_the_next_day_only(lake):
    root, gen = lake
    late = 0
    for table in KEYS:
        for n, day in enumerate(DAYS):
            for _, lines in read_folder(root, table, day):
                for line in lines:
                    status, parsed = parse_line(table, line)
                    if status == "ok":
                        committed = commit_day(parsed[0])
                        assert committed in (day, day - dt.timedelta(days=1))
                        late += committed != day
                        if committed != day:
                            assert n > 0 and parsed[0]["ts_ms"] >= int(
                                dt.datetime.combine(day, dt.time(), dt.timezone.utc).timestamp() * 1000
                            )
    assert late > 0
    assert late >= sum(d.late for d in gen.days) > 0


def test_deletes_are_followed_by_tombstones_and_key_changes_are_delete_then_create(lake):
    root, _ = lake
    for table in KEYS:
        for day in DAYS:
            for name, lines in read_folder(root, table, day):
                deletes = 0
                for i, line in enumerate(lines):
                    status, parsed = parse_line(table, line)
                    if status == "ok" and parsed[0]["op"] == "d":
                        deletes += 1
                        assert "null" in lines[i + 1 :], (table, day, name, i)
                assert lines.count("null") == deletes
    by_tx: dict[int, list[dict]] = {}
    for env in consume(root)["customers"]:
        by_tx.setdefault(env["source"]["txId"], []).append(env)
    key_changes = 0
    for envs in by_tx.values():
        envs.sort(key=lambda e: (e["source"]["lsn"], e["op"] != "d"))  # a key change: both at one LSN
        if [e["op"] for e in envs] == ["d", "c"]:
            key_changes += 1
            old, new = envs[0]["before"], envs[1]["after"]
            assert old["customer_id"] != new["customer_id"] and old["email"] == new["email"]
    assert key_changes >= len(DAYS) * 2


def test_replaying_the_files_gives_the_true_state(lake):
    root, gen = lake
    changes = consume(root)
    for table in KEYS:
        assert replay(changes[table]) == gen.true_state[table], table
        assert len(changes[table]) == sum(d.changes for d in gen.days if d.table == table)
    customers, orders, items = (gen.true_state[t] for t in ("customers", "orders", "order_items"))
    assert all((o["customer_id"],) in customers for o in orders.values())
    assert all((order_id,) in orders for order_id, _ in items)


def test_state_as_of_a_position(lake):
    root, gen = lake
    envs = sorted(consume(root)["orders"], key=_order)
    middle = envs[len(envs) // 2]
    expected = replay([e for e in envs if _order(e) <= _order(middle)])
    assert gen.state_as_of("orders", _order(middle)) == expected
    assert gen.state_as_of("orders", _order(envs[-1])) == gen.true_state["orders"]


def test_duplicates_repeat_the_envelope_exactly(lake):
    root, _ = lake
    for table in KEYS:
        for day in DAYS:
            first: dict[tuple, dict] = {}
            for _, lines in read_folder(root, table, day):
                for line in lines:
                    status, parsed = parse_line(table, line)
                    if status == "ok":
                        env = parsed[0]
                        assert first.setdefault(_identity(table, env), env) == env


def test_loyalty_tier_appears_from_the_drift_day(lake):
    root, _ = lake
    seen = Counter()
    for day in DAYS:
        for _, lines in read_folder(root, "customers", day):
            for line in lines:
                status, parsed = parse_line("customers", line)
                if status != "ok":
                    continue
                env, wrapped = parsed
                drifted = commit_day(env) >= DAYS[1]
                for image in (env["before"], env["after"]):
                    if image is not None:
                        assert ("loyalty_tier" in image) == drifted
                        seen[drifted] += 1
                        if drifted:
                            assert image["loyalty_tier"] in ("bronze", "silver", "gold")
                if wrapped:
                    after = json.loads(line)["schema"]["fields"][1]
                    assert ("loyalty_tier" in {f["field"] for f in after["fields"]}) == drifted
    assert seen[True] > 0 and seen[False] > 0


def test_values_look_like_debezium_renders_them(lake):
    _, gen = lake
    for row in gen.true_state["customers"].values():
        assert len(row["country"]) == 2 and row["created_at"].endswith("Z") and len(row["created_at"]) == 27
    for row in gen.true_state["orders"].values():
        assert row["status"] in ("pending", "paid", "shipped", "delivered", "cancelled")
        assert isinstance(row["total"], str) and len(row["total"].split(".")[1]) == 2
        dt.datetime.strptime(row["order_ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
    for row in gen.true_state["order_items"].values():
        assert row["product_id"].startswith("p") and isinstance(row["quantity"], int)
        assert isinstance(row["unit_price"], str) and len(row["unit_price"].split(".")[1]) == 2


def test_every_malformed_kind_is_written_and_rejected(tmp_path):
    gen = generate_cdc(tmp_path, DAYS[:2], changes_per_day=200, malformed_rate=0.3)
    kinds = sum((d.malformed for d in gen.days), Counter())
    assert set(kinds) == set(MALFORMED_KINDS) and all(n > 0 for n in kinds.values())
    oversized = [
        line
        for table in KEYS
        for day in DAYS[:2]
        for _, lines in read_folder(tmp_path, table, day)
        for line in lines
        if len(line.encode()) > LIMIT + 1
    ]
    assert len(oversized) == kinds["oversized"]
    changes = consume(tmp_path, DAYS[:2])
    for table in KEYS:  # the corrupted copies are extras: the true state is still reachable
        assert replay(changes[table]) == gen.true_state[table]
